"""The worker's file system is an allow-list: what a student's code can see, checked from inside."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import sandbox
from autograder.build import REPO_ROOT

pytestmark = pytest.mark.skipif(sandbox.isolation()[0] == sandbox.REDUCED,
                                reason="the sandbox needs unshare, setpriv and chroot (Linux), and root or user namespaces")
MODES = pytest.mark.parametrize("mode", sandbox.CONTAINED)

LOOK_AROUND = """
import json, os, subprocess, sys
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
capabilities = int(status["CapEff"], 16) | int(status["CapPrm"], 16)
writable = {path: os.access(path, os.W_OK) for path in ("/", "/tmp", "/dev/shm", sys.argv[2])}
remount = subprocess.run(["mount", "-o", "remount,bind,rw", sys.argv[2]], capture_output=True)
print(json.dumps({"root": sorted(os.listdir("/")), "cwd": os.getcwd(), "course": sorted(os.listdir(sys.argv[1])),
                  "writable_here": os.access(".", os.W_OK), "writable": writable, "uid": os.getuid(),
                  "capabilities": capabilities, "bounding": int(status["CapBnd"], 16), "remounted": remount.returncode == 0}))
"""


def skip_unless_available(mode: str) -> None:
    if mode == sandbox.ROOT_NAMESPACES and not sandbox.namespaces_available():
        pytest.skip("the root's sandbox needs root")


def look_around(workdir: Path, mode: str) -> dict:
    import gpucourse

    skip_unless_available(mode)
    package = str(Path(gpucourse.__file__).parent)
    command = sandbox._namespaced([sys.executable, "-I", "-c", LOOK_AROUND, str(REPO_ROOT), package], workdir, sandbox.Limits(), [], mode)
    done = subprocess.run(command, capture_output=True, text=True, env=sandbox.worker_environment(workdir, 1), cwd=workdir, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@MODES
def test_only_the_system_the_interpreter_and_the_submission_are_there(tmp_path, mode):
    """As root and in a user namespace alike; in both the student has no capability left (in a user namespace it
    is user 0 there, and its mounts are its own user's: without capabilities it cannot make them writable)."""
    workdir = tmp_path / "work" / "student"
    workdir.mkdir(parents=True)
    seen = look_around(workdir, mode)
    kept_tops = {path.relative_to("/").parts[0] for path in sandbox._kept_for_the_interpreter()}
    system = {Path(folder).name for folder in sandbox.SYSTEM_FOLDERS}
    assert set(seen["root"]) <= system | kept_tops | {"tmp", "dev", "proc"}, seen["root"]
    assert seen["cwd"] == str(workdir) and seen["writable_here"] and not any(seen["writable"].values()), seen
    assert seen["capabilities"] == 0 and not seen["remounted"], seen
    if mode == sandbox.USER_NAMESPACES:  # user 0 there: none to regain by running a program either
        assert seen["uid"] == 0 and seen["bounding"] == 0, seen
    else:
        assert seen["uid"] == sandbox.sandbox_user(), seen
    # Of the course's own folder, only what the interpreter needs (the packages; the venv if it lives there).
    needed = {path.name for path in sandbox._kept_for_the_interpreter() if path.parent == REPO_ROOT}
    assert set(seen["course"]) == needed and "solutions" not in seen["course"], seen["course"]
