"""The commands that open the course in JupyterLab: one for students, one for instructors.

``make lab`` runs ``python -m autograder.lab``: JupyterLab for students, without nbgrader's
instructor UI (the Nbgrader menu and its Formgrader, the "Create Assignment" sidebar, the
Validate button). ``make lab-instructor`` runs ``python -m autograder.lab --instructor``:
JupyterLab as installed, nbgrader's extensions and all. ``tests/course/test_browser.py`` starts the
student command, headless (it only adds ``--no-browser``, a port and a token). Other arguments
are passed on to ``jupyter lab``: ``python -m autograder.lab --no-browser --ServerApp.port=8899``.

Student mode changes no configuration file: it is the command's own flags and environment,
so the same person running ``make lab-instructor`` or plain ``jupyter lab`` still gets the
instructor UI. It hides a UI, it is not a lock: students run code, and can re-enable anything.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from .build import REPO_ROOT

FIRST_NOTEBOOK = "course/01_gpu_basics.ipynb"  # what `make lab` opens in the browser
INSTRUCTOR_FLAG = "--instructor"

# A Jupyter config folder added for students only: its labconfig/page_config.json disables
# nbgrader's JupyterLab extension, all its plugins (the menu, formgrader, create-assignment,
# course-list, assignment-list, validate-assignment). JupyterLab merges that file with the
# user's and the environment's page configs, which stay as they are.
STUDENT_CONFIG_DIR = Path(__file__).with_name("student_lab")

# nbgrader's server extensions, switched off for students so that nbgrader's pages (/formgrader)
# and APIs do not answer either. This course hands out and collects work through an LMS, never
# nbgrader's exchange (assignment_list), and students check their work with `gpucourse check`
# (which grades as the grader does), not nbgrader's validate.
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.validate_assignment",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
)

# The lectures' sources (course/NN_topic.py) sit beside the notebooks built from them; a student
# should open the notebook. Student mode keeps them out of the file browser (hide_globs hides a
# name from listings, nothing more: the file still opens by its path). The first five are Jupyter
# Server's own defaults, which a flag for hide_globs replaces.
HIDDEN_FROM_STUDENTS = ("__pycache__", "*.pyc", "*.pyo", ".DS_Store", "*~", "[0-9][0-9]_*.py")


def lab_command(*extra: str, root_dir: Path = REPO_ROOT, instructor: bool = False) -> list[str]:
    """``jupyter lab`` of this environment over ``root_dir``, with ``extra`` flags, opening lecture 01;
    for students (the default) without nbgrader's server extensions and the lectures' sources. Run it with
    ``lab_environment(...)``, which hides nbgrader's JupyterLab extension from students."""
    jupyter = Path(sys.executable).with_name("jupyter")  # the venv's, beside its python (not resolved)
    launcher = [str(jupyter), "lab"] if jupyter.exists() else [sys.executable, "-m", "jupyterlab"]
    # Jupyter refuses to run as root unless told; in a container root is the usual user.
    as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    # Flags given on the command line win over the enabled extensions listed in config files.
    students = [] if instructor else [
        *(f"--ServerApp.jpserver_extensions={name}=False" for name in NBGRADER_SERVER_EXTENSIONS),
        *(f"--ContentsManager.hide_globs={pattern}" for pattern in HIDDEN_FROM_STUDENTS),
    ]
    return [*launcher, f"--ServerApp.root_dir={root_dir}", *as_root, *students, *extra, str(Path(root_dir) / FIRST_NOTEBOOK)]


def lab_environment(environ: Mapping[str, str], instructor: bool = False) -> dict[str, str]:
    """``environ`` as ``lab_command``'s server needs it: for students, with the student config
    folder added to JUPYTER_CONFIG_PATH (in front of any folders already there)."""
    env = dict(environ)
    if not instructor:
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(STUDENT_CONFIG_DIR), env.get("JUPYTER_CONFIG_PATH")]))
    return env


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    instructor = INSTRUCTOR_FLAG in args
    command = lab_command(*(arg for arg in args if arg != INSTRUCTOR_FLAG), instructor=instructor)
    os.execve(command[0], command, lab_environment(os.environ, instructor=instructor))


if __name__ == "__main__":
    main()
