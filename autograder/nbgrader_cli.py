"""Run nbgrader's command line from Python, in this interpreter's environment.

nbgrader shells out to ``alembic`` (found on PATH) when it opens a gradebook, so the
directory of this interpreter's scripts must be on PATH even when the virtual
environment was never activated (as under ``make``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
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
    A gradebook that does not exist yet starts as a copy of :func:`empty_gradebook`.
    """
    if not Path(database).exists():
        shutil.copyfile(empty_gradebook(), database)
    full = [
        sys.executable, "-m", "nbgrader", command, *args,
        f"--CourseDirectory.root={root}",
        f"--CourseDirectory.db_url=sqlite:///{database}",
    ]
    result = subprocess.run(full, cwd=config_dir or root, capture_output=True, text=True, env=nbgrader_env())
    if result.returncode != 0:
        raise NbgraderError(f"nbgrader {command} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def empty_gradebook() -> Path:
    """A gradebook with nbgrader's tables and no course, made once per machine and nbgrader version.

    nbgrader makes a new gradebook by running ``alembic heads`` in a subprocess (1-2 s of CPU, for a
    constant); a copy of this one is what it would make, and opening it adds the course as usual.
    """
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpucourse"
    template = cache / f"empty-gradebook-nbgrader-{importlib.metadata.version('nbgrader')}.db"
    if template.exists():
        return template
    from nbgrader.api import Gradebook  # slow import: only the first time

    cache.mkdir(parents=True, exist_ok=True)
    handle, building = tempfile.mkstemp(dir=cache, prefix=".building-", suffix=".db")
    os.close(handle)
    os.unlink(building)  # nbgrader creates the tables only in a file that has none
    try:
        with scripts_on_path(), Gradebook(f"sqlite:///{building}"):
            pass
        with contextlib.closing(sqlite3.connect(building)) as connection, connection:
            connection.execute("DELETE FROM course")  # the default course nbgrader added; each course adds its own
        os.replace(building, template)  # atomic: another process sees no template or a whole one
    finally:
        Path(building).unlink(missing_ok=True)
    return template


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
