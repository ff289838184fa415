"""``autograder export``: the gradebook as a CSV an LMS can take, with nothing invented.

nbgrader's own CSV export writes 0.0 for every assignment a student has not handed in yet
(including assignments nobody has submitted), and an LMS reads that as a zero. Here such a
cell stays empty, and each row says which items still wait for a score: written answers an
instructor grades by hand, and GPU-only items a CPU grader left for a GPU regrade.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .nbgrader_cli import open_gradebook
from .outcomes import Outcome

# nbgrader's CsvExportPlugin columns, in its order (so existing LMS imports keep working), plus `pending`.
COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
           "raw_score", "late_submission_penalty", "score", "max_score", "pending")
GPU_REGRADE = "GPU regrade"
BY_HAND = "to grade by hand"


def export_grades(course: Path, to: Path) -> int:
    """Write one row per student and assignment of ``course``'s gradebook to ``to``; return the row count."""
    rows = grade_rows(course)
    with open(to, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def grade_rows(course: Path) -> list[dict[str, str]]:
    from nbgrader.api import MissingEntry  # slow import: only where a gradebook is opened

    rows = []
    with open_gradebook(course) as gradebook:
        for assignment in gradebook.assignments:
            for student in gradebook.students:
                row = {"assignment": assignment.name, "duedate": assignment.duedate, "student_id": student.id,
                       "last_name": student.last_name, "first_name": student.first_name, "email": student.email,
                       "max_score": assignment.max_score}
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:
                    pass  # nothing handed in (yet): no score at all, not a zero
                else:
                    row.update(_scores(submission), pending="; ".join(_pending(course, submission)))
                rows.append({column: "" if row.get(column) is None else str(row[column]) for column in COLUMNS})
    return rows


def _scores(submission) -> dict:
    penalty = submission.late_submission_penalty or 0.0
    return {"timestamp": submission.timestamp, "raw_score": submission.score, "late_submission_penalty": penalty,
            "score": max(0.0, submission.score - penalty)}


def _pending(course: Path, submission) -> list[str]:
    """The items of ``submission`` that nobody has scored yet, each with what it waits for."""
    student, assignment = submission.student.id, submission.assignment.name
    needs_gpu = _needs_gpu(course / "autograded" / student / assignment / "grading.json")
    return [f"{grade.name} ({GPU_REGRADE if grade.name in needs_gpu else BY_HAND})"
            for notebook in submission.notebooks for grade in notebook.grades if grade.needs_manual_grade]


def _needs_gpu(verdicts_path: Path) -> set[str]:
    """Items the trusted grader left for a GPU regrade (its ``grading.json``; none without one)."""
    if not verdicts_path.exists():
        return set()
    items = json.loads(verdicts_path.read_text())["items"]
    return {grade_id for grade_id, item in items.items() if item["outcome"] == Outcome.NEEDS_GPU}
