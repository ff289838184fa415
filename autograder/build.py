"""Build every generated file of the course from its single source.

* ``course/NN_topic.py`` and ``solutions/NN_topic/NN_topic.py`` (jupytext percent format)
  become the ``.ipynb`` beside them: no outputs, deterministic cell ids, complete nbgrader
  metadata (sources may give only the keys that matter; the rest is filled in here).
* ``solutions/NN_topic/`` becomes ``assignments/NN_topic/`` through nbgrader's
  ``generate_assignment`` (solutions and hidden tests stripped).

Running it twice changes nothing. Usage: ``python -m autograder.build [--root DIR]``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import jupytext
import nbformat

from .nbgrader_cli import NbgraderError, run_nbgrader

REPO_ROOT = Path(__file__).resolve().parent.parent
NBFORMAT_MINOR = 5
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
NOTEBOOK_METADATA = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
MODULE_NAME = re.compile(r"^\d\d_[a-z0-9_]+$")
# Keys jupytext adds to remember the .py's blank lines; they mean nothing in a notebook.
JUPYTEXT_LAYOUT_KEYS = {"lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker"}


class BuildError(RuntimeError):
    """A source file breaks a convention of the course; the message says which and where."""


def lecture_sources(root: Path) -> list[Path]:
    return sorted(path for path in (root / "course").glob("*.py") if MODULE_NAME.match(path.stem))


def assignment_sources(root: Path) -> list[Path]:
    """``solutions/NN_topic/NN_topic.py`` for every assignment folder."""
    sources = []
    for folder in sorted((root / "solutions").glob("*/")):
        if not MODULE_NAME.match(folder.name):
            continue
        source = folder / f"{folder.name}.py"
        if not source.exists():
            raise BuildError(f"{folder}: expected the assignment's source {source.name} in it")
        sources.append(source)
    return sources


def nbgrader_metadata(given: dict, where: str) -> dict:
    """Complete a cell's nbgrader metadata from the keys its source sets.

    Sources write only what matters (``grade_id``, ``solution``, ``grade``, ``points``,
    ``locked``); nbgrader needs every key of schema 3. Autograded test cells are locked.
    """
    unknown = set(given) - {"grade_id", "solution", "grade", "points", "locked", "task"}
    if unknown:
        raise BuildError(f"{where}: unknown nbgrader keys {sorted(unknown)}")
    if "grade_id" not in given:
        raise BuildError(f"{where}: nbgrader cells need a grade_id")
    meta = {"grade": False, "solution": False, "task": False, "schema_version": 3, **given}
    meta.setdefault("locked", meta["grade"] and not meta["solution"])
    if meta["grade"] and "points" not in meta:
        raise BuildError(f"{where}: graded cell {meta['grade_id']!r} needs points")
    return dict(sorted(meta.items()))


def notebook_from_source(source: Path) -> nbformat.NotebookNode:
    """Read a py:percent source into a clean notebook with deterministic cell ids."""
    notebook = jupytext.read(source, fmt="py:percent")
    grade_ids: set[str] = set()
    counters = {"code": 0, "markdown": 0, "raw": 0}
    for index, cell in enumerate(notebook.cells):
        where = f"{source}, cell {index + 1}"
        for key in JUPYTEXT_LAYOUT_KEYS & set(cell.metadata):
            del cell.metadata[key]
        extra = set(cell.metadata) - {"nbgrader", "tags"}
        if extra:
            raise BuildError(f"{where}: unexpected cell metadata {sorted(extra)}")
        if "nbgrader" in cell.metadata:
            meta = nbgrader_metadata(dict(cell.metadata["nbgrader"]), where)
            if meta["grade_id"] in grade_ids:
                raise BuildError(f"{where}: grade_id {meta['grade_id']!r} is used twice")
            grade_ids.add(meta["grade_id"])
            cell.metadata["nbgrader"] = meta
            cell.id = meta["grade_id"]
        else:
            counters[cell.cell_type] += 1
            cell.id = f"{cell.cell_type}-{counters[cell.cell_type]:02d}"
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    notebook.metadata = nbformat.from_dict(NOTEBOOK_METADATA)
    notebook.nbformat, notebook.nbformat_minor = 4, NBFORMAT_MINOR
    nbformat.validate(notebook)
    return notebook


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` unless the file already holds it; True when it changed."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def notebook_text(notebook: nbformat.NotebookNode) -> str:
    return nbformat.writes(notebook) + "\n"


def build_notebooks(root: Path) -> list[Path]:
    """Write the .ipynb of every lecture and solution source; return those that changed."""
    changed = []
    for source in lecture_sources(root) + assignment_sources(root):
        target = source.with_suffix(".ipynb")
        if write_if_changed(target, notebook_text(notebook_from_source(source))):
            changed.append(target)
    return changed


def release_assignments(root: Path) -> list[Path]:
    """Regenerate ``assignments/`` from ``solutions/`` with nbgrader; return changed files."""
    changed = []
    for source in assignment_sources(root):
        changed += release_assignment(root, source.parent.name)
    return changed


def release_assignment(root: Path, assignment: str) -> list[Path]:
    """Regenerate ``assignments/ASSIGNMENT`` with nbgrader; return the files that changed.

    nbgrader also records the assignment's graded cells in the course's ``gradebook.db``,
    which grading needs later.
    """
    release = root / "assignments" / assignment
    before = _snapshot(release)
    _generate_assignment(root, assignment, root / "gradebook.db")
    for notebook_path in release.glob("*.ipynb"):
        # nbgrader writes with its own formatting; keep the repository's one format.
        write_if_changed(notebook_path, notebook_text(nbformat.read(notebook_path, as_version=4)))
    after = _snapshot(release)
    return sorted(path for path, text in after.items() if before.get(path) != text)


def _generate_assignment(root: Path, assignment: str, database: Path) -> None:
    try:
        run_nbgrader("generate_assignment", assignment, "--force", "--create", "--log-level=WARN", root=root, database=database)
    except NbgraderError as error:
        raise BuildError(str(error)) from error


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} if folder.exists() else {}


def build(root: Path = REPO_ROOT) -> list[Path]:
    """Regenerate every generated file under ``root``; return the paths that changed."""
    root = Path(root).resolve()
    return build_notebooks(root) + release_assignments(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="course root (default: this repository)")
    args = parser.parse_args(argv)
    try:
        changed = build(args.root)
    except BuildError as error:
        print(f"build failed: {error}", file=sys.stderr)
        return 1
    for path in changed:
        print(f"updated {path.relative_to(args.root.resolve())}")
    print(f"build: {len(changed)} file(s) updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
