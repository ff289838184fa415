"""Project wiring: CI runs the README's command, pins agree, the tests mirror the packages, JupyterLab serves the course."""

import ast
import json
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from course_helpers import REPO_ROOT


def test_ci_runs_the_readme_test_command():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    assert re.search(r"^make test$", (REPO_ROOT / ".ci" / "run").read_text(), re.MULTILINE)


# Where each test file lives (docs/authoring.md, section 7): a folder per package, one per course module, the
# attacks on the grader, the course as a whole, and the project's wiring.
TEST_FOLDERS = {"gpucourse", "gpucourse/gates", "autograder", "adversarial", "course", "project"}


def test_every_test_file_lives_where_the_packages_say_and_opens_with_what_it_tests():
    tests = REPO_ROOT / "tests"
    found = sorted(tests.rglob("test_*.py"))
    assert len(found) > 50, "the suite was not found"
    for path in found:
        folder = path.parent.relative_to(tests).as_posix()
        is_module = folder.startswith("modules/") and (REPO_ROOT / "course" / f"{path.parent.name}.py").exists()
        assert folder in TEST_FOLDERS or is_module, f"{path.relative_to(REPO_ROOT)}: not in a folder mirroring the packages or a module"
        assert ast.get_docstring(ast.parse(path.read_text())), f"{path.relative_to(REPO_ROOT)} does not open with what it tests"
    names = [path.name for path in found]
    # pytest imports test files by their base name (rootdir-relative "prepend" mode, no __init__.py): two alike would clash
    assert len(names) == len(set(names)), sorted({name for name in names if names.count(name) > 1})


def test_torch_is_pinned_exactly_and_ranged_in_pyproject():
    pins = dict(line.split("==") for line in (REPO_ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    assert pins["torch"] == "2.13.0"
    for name in ("nbgrader", "jupytext", "jupyterlab", "numpy", "matplotlib", "ipywidgets", "pytest"):
        assert name in pins, f"{name} is not pinned in constraints.txt"
    assert '"torch>=2.4"' in (REPO_ROOT / "pyproject.toml").read_text()


def test_conda_environment_uses_the_same_pins():
    env = (REPO_ROOT / "environment.yml").read_text()
    assert "python=3.11" in env and "-c constraints.txt" in env and "-e .[dev]" in env


def test_readme_links_point_at_existing_notebooks():
    readme = (REPO_ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?:course|assignments)/[^)]+\.ipynb)\)", readme)
    colab = re.findall(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/main/([^)]+\.ipynb)", readme)
    assert links and colab
    for link in links + colab:
        assert (REPO_ROOT / link).exists(), f"README links to missing {link}"


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_jupyterlab_serves_the_course(tmp_path):
    port, token = _free_port(), "course-test-token"
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        f"--ServerApp.token={token}", f"--ServerApp.root_dir={REPO_ROOT}", "--allow-root",
    ]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=(tmp_path / "lab.log").open("w"))
    try:
        listing = None
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/course?token={token}", timeout=2) as reply:
                    listing = json.load(reply)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"jupyter lab exited: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        assert listing is not None, "jupyter lab did not answer within 60 s"
        assert "01_gpu_basics.ipynb" in {entry["name"] for entry in listing["content"]}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=10) as page:
            assert page.status == 200 and b"JupyterLab" in page.read()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_python_code_is_lint_clean():
    """ruff, configured in pyproject.toml, finds nothing in the packages, tests and scripts."""
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed in this environment (make install brings it)")
    done = subprocess.run([str(ruff), "check", "--no-cache", str(REPO_ROOT)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


# --- The README's instructor section, followed literally ------------------------------------------


def _instructor_section() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = re.search(r"^## For instructors.*?(?=^## )", readme, re.MULTILINE | re.DOTALL)
    assert section, "the README has a '## For instructors' section"
    return section.group(0)


def _instructor_commands() -> list[list[str]]:
    """Each line of the instructor section's fenced shell blocks, as the shell splits it (comments dropped)."""
    blocks = re.findall(r"^```(?:bash|sh|shell|console)\n(.*?)^```", _instructor_section(), re.MULTILINE | re.DOTALL)
    commands = [shlex.split(line, comments=True) for block in blocks for line in block.splitlines()]
    return [argv for argv in commands if argv]


def _autograder_args(argv: list[str]) -> list[str] | None:
    """The arguments of an ``autograder ...`` or ``python -m autograder ...`` line; None for another program."""
    if argv[0] == "autograder":
        return argv[1:]
    if Path(argv[0]).name.startswith("python") and argv[1:3] == ["-m", "autograder"]:
        return argv[3:]
    return None


def _check_autograder_command(args: list[str], capsys) -> None:
    """The CLI's own parser accepts the whole line (subcommand and options), and ``SUBCOMMAND --help`` exits 0."""
    from autograder import cli

    parser = cli.make_parser()
    try:
        parsed = parser.parse_args(args)
    except SystemExit as error:
        pytest.fail(f"`autograder {shlex.join(args)}` is not a valid command line: {capsys.readouterr().err.strip()} (exit {error.code})")
    with pytest.raises(SystemExit) as done:
        parser.parse_args([parsed.command, "--help"])
    assert done.value.code == 0, f"`autograder {parsed.command} --help` exited with {done.value.code}"
    assert Path(sys.executable).with_name("autograder").exists(), "the `autograder` script is not installed in this environment"


def _check_nbgrader_command(args: list[str]) -> None:
    from nbgrader.apps.nbgraderapp import NbGraderApp

    known = {name: description for name, (_app, description) in NbGraderApp.subcommands.items()}
    assert args and args[0] in known, f"`nbgrader {shlex.join(args)}`: the installed nbgrader has no subcommand {args[:1]}; it has {sorted(known)}"
    assert not known[args[0]].strip().startswith("DEPRECATED"), f"`nbgrader {args[0]}` is deprecated: {known[args[0]].strip()}"


def _check_jupyter_command(args: list[str]) -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    done = subprocess.run([str(jupyter), args[0], "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"`jupyter {args[0]} --help` exited with {done.returncode}: {done.stderr[-500:]}"


def _check_make_command(args: list[str]) -> None:
    """Each target is one the Makefile has: ``make -n`` (prints, runs nothing) exits 0."""
    done = subprocess.run(["make", "-n", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"`make {shlex.join(args)}` is not a target of the Makefile: {done.stderr.strip()[-500:]}"


def test_readme_instructor_commands_exist(capsys):
    """Every command line of the instructor section names a command the installed tools have:
    ``autograder``'s parser accepts the whole line, ``nbgrader X`` is a subcommand of the installed
    nbgrader (not deprecated), ``jupyter X --help`` exits 0, ``make X`` is a Makefile target. Any
    other program fails the test."""
    commands = _instructor_commands()
    assert len(commands) >= 5, f"expected the release/grade/feedback/export/formgrader commands, found {commands}"
    for argv in commands:
        autograder_args = _autograder_args(argv)
        if autograder_args is not None:
            _check_autograder_command(autograder_args, capsys)
        elif argv[0] == "nbgrader":
            _check_nbgrader_command(argv[1:])
        elif argv[0] == "jupyter":
            _check_jupyter_command(argv[1:])
        elif argv[0] == "make":
            _check_make_command(argv[1:])
        else:
            pytest.fail(f"the README's instructor section runs {shlex.join(argv)!r}: this test does not know how to check {argv[0]!r}")


def test_readme_formgrader_route_is_installed():
    """The README sends instructors to `make lab-instructor`, then JupyterLab's Nbgrader → Formgrader:
    that target starts JupyterLab in instructor mode, which switches nothing of nbgrader off, and
    nbgrader's formgrader server extension and its JupyterLab extension (which adds the menu) are
    installed and enabled. (`make lab`, for students, switches them off: tests/autograder/test_lab.py.)"""
    from autograder.lab import lab_command, lab_environment

    section = _instructor_section()
    assert "Nbgrader** menu" in section and "**Formgrader**" in section, "the README names the menu route to the Formgrader"
    assert re.search(r"^make lab-instructor\s+# then menu Nbgrader → Formgrader", section, re.MULTILINE), \
        "the README's instructor commands open the Formgrader with `make lab-instructor`"
    recipe = re.search(r"^lab-instructor:.*\n\t(.+)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe and recipe[1].endswith("-m autograder.lab --instructor"), f"make lab-instructor runs {recipe and recipe[1]!r}"
    assert not any("jpserver_extensions" in arg for arg in lab_command(instructor=True)), lab_command(instructor=True)
    assert lab_environment({}, instructor=True) == {}, "instructor mode adds a Jupyter config folder"
    jupyter = str(Path(sys.executable).with_name("jupyter"))
    server = subprocess.run([jupyter, "server", "extension", "list"], capture_output=True, text=True, timeout=120)
    lab = subprocess.run([jupyter, "labextension", "list"], capture_output=True, text=True, timeout=120)
    listed = re.sub(r"\x1b\[[0-9;]*m", "", server.stdout + server.stderr + lab.stdout + lab.stderr)  # without colours
    assert re.search(r"nbgrader\.server_extensions\.formgrader\s+enabled", listed), listed[-2000:]
    assert re.search(r"@jupyter/nbgrader v\S+ enabled", listed), listed[-2000:]


def _instructor_data_paths() -> set[str]:
    """Where the instructor section puts student work and grades: the folders its ``autograder grade``
    lines read, the files its ``export`` lines write, the per-student folders it says the tools
    write (``feedback/<student>/...``), and the ``.db``/``.csv`` files it names."""
    from autograder import cli

    paths = set()
    for argv in _instructor_commands():
        args = _autograder_args(argv)
        if args is None:
            continue
        parsed = cli.make_parser().parse_args(args)
        if parsed.command == "grade":
            paths.add(f"{parsed.submissions}/")
        elif parsed.command == "export":
            paths.add(parsed.to)
    section = _instructor_section()
    paths |= set(re.findall(r"[\w.-]+/<student>/[^\s`]*", section))
    paths |= set(re.findall(r"`([\w.-]+\.(?:db|csv))`", section))
    return paths


def test_student_work_and_grades_named_in_the_readme_are_git_ignored():
    paths = _instructor_data_paths()
    tops = {path.split("/")[0] for path in paths}
    assert {"submissions", "autograded", "feedback", "gradebook.db", "grades.csv"} <= tops, f"the README's paths were not all found: {paths}"
    for path in sorted(paths):
        example = path.replace("<student>", "alice").replace("<assignment>", "01_gpu_basics")
        if example.endswith("/"):
            example += "alice/01_gpu_basics.ipynb"
        done = subprocess.run(["git", "check-ignore", "--quiet", example], cwd=REPO_ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"{example} (the README's {path}) is not git-ignored: an instructor could commit it ({done.stderr.strip()})"
