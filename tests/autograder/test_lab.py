"""`make lab` (students) and `make lab-instructor`: what each launch leaves out, read the way Jupyter
reads it. tests/course/test_browser.py shows the result in a real JupyterLab."""

from __future__ import annotations

import os

import nbgrader
from jupyter_core.paths import jupyter_config_path, jupyter_path
from jupyter_server.extension.config import ExtensionConfigManager
from jupyter_server.serverapp import ServerApp
from jupyterlab_server.config import get_page_config

from autograder import lab

NBGRADER_LAB_EXTENSION = nbgrader._jupyter_labextension_paths()[0]["dest"]  # "@jupyter/nbgrader": all its plugins


def _server_extensions_switched_off(command: list[str]) -> set[str]:
    """The server extensions the command's flags switch off, as Jupyter Server parses them."""
    app = ServerApp()
    app.parse_command_line([arg for arg in command if arg.startswith("--ServerApp.jpserver_extensions")])
    return {name for name, enabled in app.jpserver_extensions.items() if not enabled}


def _installed_nbgrader_server_extensions() -> set[str]:
    """nbgrader's server extensions that this environment's config files enable."""
    enabled = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
    return {name for name, on in enabled.items() if on and name.split(".")[0] == "nbgrader"}


def _disabled_lab_extensions(environ: dict[str, str], monkeypatch, tmp_path) -> list[str]:
    """JupyterLab's disabledExtensions under ``environ``'s JUPYTER_CONFIG_PATH, with an empty user
    config folder (so the test machine's own ~/.jupyter cannot decide it)."""
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    if "JUPYTER_CONFIG_PATH" in environ:
        monkeypatch.setenv("JUPYTER_CONFIG_PATH", environ["JUPYTER_CONFIG_PATH"])
    return get_page_config(jupyter_path("labextensions"))["disabledExtensions"]


def test_student_lab_switches_off_every_nbgrader_server_extension_and_the_instructor_lab_none():
    installed = _installed_nbgrader_server_extensions()
    assert installed >= {"nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"}, installed
    assert _server_extensions_switched_off(lab.lab_command()) == installed
    assert _server_extensions_switched_off(lab.lab_command(instructor=True)) == set()


def test_student_lab_disables_nbgrader_in_jupyterlab_and_the_instructor_lab_does_not(monkeypatch, tmp_path):
    student = lab.lab_environment({"PATH": "/usr/bin"})
    assert NBGRADER_LAB_EXTENSION in _disabled_lab_extensions(student, monkeypatch, tmp_path)
    instructor = lab.lab_environment({"PATH": "/usr/bin"}, instructor=True)
    assert instructor == {"PATH": "/usr/bin"}
    assert NBGRADER_LAB_EXTENSION not in _disabled_lab_extensions(instructor, monkeypatch, tmp_path)


def test_student_lab_keeps_the_config_folders_already_on_jupyter_config_path():
    """Student mode adds its folder in front; a folder the user (or a hub) listed stays."""
    env = lab.lab_environment({"JUPYTER_CONFIG_PATH": "/etc/hub-jupyter"})
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [str(lab.STUDENT_CONFIG_DIR), "/etc/hub-jupyter"]


def test_main_starts_students_by_default_and_instructors_with_the_flag(monkeypatch):
    started = []
    monkeypatch.setattr(lab.os, "execve", lambda path, argv, env: started.append((path, argv, env)))
    monkeypatch.setattr(lab.os, "execv", lambda path, argv: started.append((path, argv, None)))  # never start a real server here
    lab.main(["--no-browser"])
    lab.main(["--instructor", "--no-browser"])
    student, instructor = started
    assert student[1:] == (lab.lab_command("--no-browser"), lab.lab_environment(os.environ))
    assert instructor[1:] == (lab.lab_command("--no-browser", instructor=True), lab.lab_environment(os.environ, instructor=True))
    assert "--instructor" not in instructor[1], "the flag is the launcher's, not jupyter lab's"
    assert student[0] == student[1][0] and instructor[0] == instructor[1][0]


def test_student_lab_lists_the_lecture_notebooks_but_not_their_sources():
    """course/ holds each lecture twice, its .py source and the notebook built from it: students see the
    notebook only (item 13 of issue 12); instructors and authors see both."""
    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

    def listed(command: list[str]) -> set[str]:
        app = ServerApp()
        app.parse_command_line([arg for arg in command if arg.startswith("--ContentsManager.")])
        manager = AsyncLargeFileManager(config=app.config, root_dir=str(lab.REPO_ROOT))
        return {path.name for path in (lab.REPO_ROOT / "course").iterdir() if manager.should_list(path.name)}

    lectures = sorted((lab.REPO_ROOT / "course").glob("[0-9][0-9]_*.py"))
    assert lectures, "no lecture sources found: the check would prove nothing"
    student = listed(lab.lab_command())
    assert {path.with_suffix(".ipynb").name for path in lectures} <= student
    assert not {path.name for path in lectures} & student
    assert "__pycache__" not in student  # Jupyter's own defaults still hide what they hid
    assert {path.name for path in lectures} <= listed(lab.lab_command(instructor=True))
