"""Grade notebooks with plain nbgrader (executing them, unsandboxed) in a scratch course folder.

It proves the notebooks work with nbgrader alone (release → submit → autograde): the tests and
``scripts/gpu_check.sh`` use to prove that the reference solution earns full marks and
an untouched release earns none.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .build import REPO_ROOT
from .nbgrader_cli import open_gradebook, run_nbgrader


@dataclass(frozen=True)
class ItemScore:
    """One graded cell of one submission."""

    grade_id: str
    score: float
    max_score: float
    autograded: bool  # False for answers an instructor grades by hand
    message: str = ""  # the test cell's error, when it raised


def autograde(
    assignment: str,
    submissions: dict[str, Path],
    workdir: Path,
    *,
    root: Path = REPO_ROOT,
) -> dict[str, dict[str, ItemScore]]:
    """Autograde each student's notebook for ``assignment``; scores per student and grade_id.

    ``workdir`` becomes a throwaway course folder holding the assignment's source, the
    submissions and a fresh gradebook, so the repository is never written to.
    """
    workdir = Path(workdir).resolve()
    shutil.copy2(root / "nbgrader_config.py", workdir / "nbgrader_config.py")
    shutil.copytree(root / "solutions" / assignment, workdir / "solutions" / assignment)
    database = workdir / "gradebook.db"  # read_scores expects it there
    run_nbgrader("generate_assignment", assignment, "--force", "--create", "--log-level=WARN", root=workdir, database=database)
    for student, notebook in submissions.items():
        target = workdir / "submitted" / student / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True)
        shutil.copy2(notebook, target)
    run_nbgrader("autograde", assignment, "--force", "--create", "--log-level=WARN", root=workdir, database=database)
    return read_scores(workdir, assignment, list(submissions))


def read_scores(course: Path, assignment: str, students: list[str]) -> dict[str, dict[str, ItemScore]]:
    """Per-item scores from the course's gradebook, with each failing test's error message."""
    scores = {}
    with open_gradebook(course) as gradebook:
        for student in students:
            submission = gradebook.find_submission_notebook(assignment, assignment, student)
            errors = cell_errors(course / "autograded" / student / assignment / f"{assignment}.ipynb")
            scores[student] = {
                grade.name: ItemScore(
                    grade_id=grade.name,
                    score=float(grade.score),
                    max_score=float(grade.max_score),
                    autograded=grade.cell.cell_type == "code",
                    message=errors.get(grade.name, ""),
                )
                for grade in submission.grades
            }
    return scores


def cell_errors(notebook_path: Path) -> dict[str, str]:
    """``grade_id -> "ErrorName: message"`` for the graded cells of an executed notebook that raised."""
    notebook = nbformat.read(notebook_path, as_version=4)
    errors = {}
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []):
            if grade_id and output.get("output_type") == "error":
                errors[grade_id] = f"{output.get('ename')}: {output.get('evalue')}"
    return errors
