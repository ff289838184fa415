"""Run nbgrader's command line from Python, in this interpreter's environment.

nbgrader shells out to ``alembic`` (found on PATH) when it opens a gradebook, so the
directory of this interpreter's scripts must be on PATH even when the virtual
environment was never activated (as under ``make``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path


class NbgraderError(RuntimeError):
    """An nbgrader command failed; the message holds its output."""


def nbgrader_env() -> dict[str, str]:
    env = dict(os.environ)
    scripts = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([scripts, env.get("PATH", "")])
    return env


def run_nbgrader(command: str, *args: str, root: Path, database: Path, config_dir: Path | None = None) -> subprocess.CompletedProcess:
    """``nbgrader COMMAND ARGS`` for the course at ``root`` with the gradebook ``database``.

    nbgrader reads ``nbgrader_config.py`` from the folder it runs in: ``config_dir``, or ``root``.
    """
    full = [
        sys.executable, "-m", "nbgrader", command, *args,
        f"--CourseDirectory.root={root}",
        f"--CourseDirectory.db_url=sqlite:///{database}",
    ]
    result = subprocess.run(full, cwd=config_dir or root, capture_output=True, text=True, env=nbgrader_env())
    if result.returncode != 0:
        raise NbgraderError(f"nbgrader {command} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


@contextlib.contextmanager
def scripts_on_path():
    """Let in-process nbgrader (``Gradebook``) find ``alembic`` while the block runs."""
    previous = os.environ.get("PATH", "")
    os.environ["PATH"] = nbgrader_env()["PATH"]
    try:
        yield
    finally:
        os.environ["PATH"] = previous


@contextlib.contextmanager
def open_gradebook(course: Path):
    """The course's ``gradebook.db`` as nbgrader's ``Gradebook`` (the one place that opens it)."""
    from nbgrader.api import Gradebook  # slow import: only where a gradebook is opened

    with scripts_on_path(), Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gradebook:
        yield gradebook
