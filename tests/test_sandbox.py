"""The worker's file system is an allow-list: what a student's code can see, checked from inside."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import sandbox
from autograder.build import REPO_ROOT

pytestmark = pytest.mark.skipif(not sandbox.namespaces_available(), reason="the full sandbox needs root, unshare, setpriv and chroot (Linux)")

LOOK_AROUND = """
import json, os, sys
seen = {"root": sorted(os.listdir("/")), "cwd": os.getcwd(), "course": sorted(os.listdir(sys.argv[1])),
        "writable_here": os.access(".", os.W_OK), "writable_packages": os.access(sys.argv[2], os.W_OK)}
print(json.dumps(seen))
"""


def look_around(workdir: Path) -> dict:
    import gpucourse

    package = str(Path(gpucourse.__file__).parent)
    command = sandbox._namespaced([sys.executable, "-I", "-c", LOOK_AROUND, str(REPO_ROOT), package], workdir, sandbox.Limits(), [])
    done = subprocess.run(command, capture_output=True, text=True, env=sandbox.worker_environment(workdir, 1), cwd=workdir, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_only_the_system_the_interpreter_and_the_submission_are_there(tmp_path):
    workdir = tmp_path / "work" / "student"
    workdir.mkdir(parents=True)
    seen = look_around(workdir)
    kept_tops = {path.relative_to("/").parts[0] for path in sandbox._kept_for_the_interpreter()}
    system = {Path(folder).name for folder in sandbox.SYSTEM_FOLDERS}
    assert set(seen["root"]) <= system | kept_tops | {"tmp", "dev", "proc"}, seen["root"]
    assert seen["cwd"] == str(workdir) and seen["writable_here"] and not seen["writable_packages"]
    # Of the course's own folder, only what the interpreter needs (the packages; the venv if it lives there).
    needed = {path.name for path in sandbox._kept_for_the_interpreter() if path.parent == REPO_ROOT}
    assert set(seen["course"]) == needed and "solutions" not in seen["course"], seen["course"]
