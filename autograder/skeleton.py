"""Rebuild what to run from the instructor's source notebook and a student's submission.

The source notebook decides the structure: its locked and setup cells, its test cells and
their order. From the student's notebook only their answers are taken: the solution cells
(matched by nbgrader ``grade_id``) and the extra code cells they added (placed after the
cell they followed). So a deleted, edited, split or retyped test cell changes nothing: the
test always comes from the source.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import nbformat

# The tag of a graded test cell that needs a CUDA GPU (the build checks where it is used).
REQUIRES_GPU = "requires-gpu"


@dataclass(frozen=True)
class TestItem:
    """One autograded test cell of the source."""

    grade_id: str
    points: float
    source: str
    tags: tuple[str, ...] = ()

    @property
    def requires_gpu(self) -> bool:
        return REQUIRES_GPU in self.tags


@dataclass
class Plan:
    """Everything the harness needs to grade one submission."""

    context: list[str]  # locked/setup code, run in the harness and in the worker
    student_cells: list[str]  # what the worker runs, in order: context + the student's answers
    items: list[TestItem]
    api_names: list[str]  # names the solution cells define: the student's graded functions
    notes: list[str] = field(default_factory=list)

    @property
    def reference_functions(self) -> list[str]:
        """Functions the source's setup cells define (baselines, references)."""
        return [name for source in self.context for name in defined_functions(source)]


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_test(cell) -> bool:
    meta = _nbgrader(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_solution(cell) -> bool:
    meta = _nbgrader(cell)
    return cell.cell_type == "code" and bool(meta.get("solution"))


def _top_level(source: str) -> list[ast.stmt]:
    try:
        return ast.parse(source).body
    except SyntaxError:
        return []


def defined_names(source: str) -> list[str]:
    """Top-level names a cell defines (functions, classes, assignments)."""
    names = []
    for node in _top_level(source):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
    return names


def collect_answers(source_nb, student_nb) -> tuple[dict[str, list[str]], dict[str | None, list[str]]]:
    """The student's answers by solution ``grade_id`` (code and written answers), and their
    extra code cells by the id of the source cell they follow (``None``: before any)."""
    source_ids = {cell.get("id") for cell in source_nb.cells}
    source_grade_ids = {_nbgrader(cell).get("grade_id") for cell in source_nb.cells} - {None}
    answer_types = {_nbgrader(cell)["grade_id"]: cell.cell_type for cell in source_nb.cells if _nbgrader(cell).get("solution")}
    answers: dict[str, list[str]] = {}
    extras: dict[str | None, list[str]] = {}
    anchor = None
    for cell in student_nb.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if grade_id in answer_types and cell.cell_type == answer_types[grade_id]:
            answers.setdefault(grade_id, []).append(cell.source)
        elif grade_id in source_grade_ids or cell.get("id") in source_ids:
            pass  # a locked, test or setup cell (or a retyped answer): the source's version is used
        elif cell.cell_type == "code" and not grade_id:
            extras.setdefault(anchor, []).append(cell.source)
        anchor = _anchor_of(cell, source_nb) or anchor
    return answers, extras


def defined_functions(source: str) -> list[str]:
    """Top-level functions a cell defines."""
    return [node.name for node in _top_level(source) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def make_plan(source_nb: nbformat.NotebookNode, student_nb: nbformat.NotebookNode) -> Plan:
    answers, extras = collect_answers(source_nb, student_nb)
    plan = Plan(context=[], student_cells=list(extras.get(None, [])), items=[], api_names=[])
    for cell in source_nb.cells:
        meta = _nbgrader(cell)
        if is_test(cell):
            plan.items.append(TestItem(meta["grade_id"], float(meta.get("points", 0)), cell.source, tuple(cell.metadata.get("tags", ()))))
        elif is_solution(cell):
            plan.api_names += [name for name in defined_names(cell.source) if name not in plan.api_names]
            student = answers.get(meta["grade_id"])
            if student is None:
                plan.notes.append(f"answer cell {meta['grade_id']!r} is missing from the submission")
            plan.student_cells += student or []
        elif cell.cell_type == "code":
            plan.context.append(cell.source)
            plan.student_cells.append(cell.source)
        plan.student_cells += extras.get(cell.get("id"), [])
    return plan


def normalized_notebook(release_nb, student_nb) -> nbformat.NotebookNode:
    """The released notebook with the student's answers and extra cells in it: what nbgrader
    records and what feedback shows, whatever the student did to the other cells."""
    answers, extras = collect_answers(release_nb, student_nb)
    notebook = nbformat.from_dict(nbformat.v4.new_notebook(metadata=release_nb.metadata))
    for cell in nbformat.from_dict(release_nb).cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if _nbgrader(cell).get("solution") and grade_id in answers:
            cell.source = "\n\n".join(answers[grade_id])
        notebook.cells.append(cell)
        for index, source in enumerate(extras.get(cell.get("id"), [])):
            notebook.cells.append(nbformat.v4.new_code_cell(source, id=f"{cell.get('id')}-extra-{index}"))
    return notebook


def _anchor_of(student_cell, source_nb) -> str | None:
    """The id of the source cell this student cell corresponds to, if any."""
    grade_id = _nbgrader(student_cell).get("grade_id")
    for cell in source_nb.cells:
        if (grade_id and _nbgrader(cell).get("grade_id") == grade_id) or cell.get("id") == student_cell.get("id"):
            return cell.get("id")
    return None
