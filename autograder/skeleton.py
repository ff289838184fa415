"""Rebuild what to run from the instructor's source notebook and a student's submission.

The source notebook decides the structure: its locked and setup cells, its test cells and
their order. From the student's notebook only their answers are taken: the solution cells
(matched by nbgrader ``grade_id``) and the extra code cells they added (placed after the
cell they followed). So a deleted, edited, split or retyped test cell changes nothing: the
test always comes from the source.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

import nbformat

from gpucourse.gates.syntax import free_names  # one home for both sides: the harness and build read it from here too

# The tag of a graded test cell that needs a CUDA GPU (the build checks where it is used).
REQUIRES_GPU = "requires-gpu"
# The tag of a locked setup cell whose code only the tests use (their references and checks): when graded, it runs in
# the grader's process and its reference worker, never where the student's code runs, so no answer can call it.
GRADER_SIDE = "grader-side"


@dataclass(frozen=True)
class TestItem:
    """One autograded test cell of the source."""

    grade_id: str
    points: float
    source: str
    tags: tuple[str, ...] = ()
    question: str | None = None  # the question it tests ("Question 2"), from the headings above it

    @property
    def requires_gpu(self) -> bool:
        return REQUIRES_GPU in self.tags


@dataclass(frozen=True)
class CellOrigin:
    """Where a cell the student's worker runs comes from, named as the student finds it in their notebook."""

    label: str  # "the cell defining `f` (Question 2, grade_id answer)", or "cell 12 of your notebook (`x = f(2)`)"
    defines: tuple[str, ...] = ()  # the names it should define: a NameError about one of them points here
    question: str | None = None  # an answer's question: a NameError in that question's tests points here too


@dataclass
class Plan:
    """Everything the harness needs to grade one submission."""

    context: list[str]  # locked/setup code, run in the harness and in the reference worker
    student_cells: list[str]  # what the worker runs, in order: context + the student's answers
    items: list[TestItem]
    api_names: list[str]  # names the solution cells define: the student's graded functions
    notes: list[str] = field(default_factory=list)
    cell_origins: list[CellOrigin] = field(default_factory=list)  # one per student cell, in the same order
    context_origins: list[CellOrigin] = field(default_factory=list)  # one per context cell, in the same order
    # The setup functions the source's own answers call (08's `pair`): all a gated answer cell may call of the
    # setup's, so an answer cannot hand its work to a baseline (09's `lstm_forward_naive` is a whole LSTM).
    answer_helpers: list[str] = field(default_factory=list)
    grader_side: list[str] = field(default_factory=list)  # the setup cells tagged GRADER_SIDE (also in context)

    @property
    def student_setup(self) -> list[str]:
        """The setup cells that run where the student's code runs (their worker and runners): all but the grader-side ones."""
        return [source for source in self.context if source not in self.grader_side]

    @property
    def grader_side_names(self) -> set[str]:
        """What the grader-side cells define: absent wherever the student's code runs."""
        return {name for source in self.grader_side for name in defined_names(source)}

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
    answers, extras = _collect_cells(source_nb, student_nb)
    return ({grade_id: [cell.source for _, cell in cells] for grade_id, cells in answers.items()},
            {anchor: [cell.source for _, cell in cells] for anchor, cells in extras.items()})


def _collect_cells(source_nb, student_nb):
    """:func:`collect_answers`, each cell with its 1-based position in the student's notebook."""
    source_ids = {cell.get("id") for cell in source_nb.cells}
    source_grade_ids = {_nbgrader(cell).get("grade_id") for cell in source_nb.cells} - {None}
    answer_types = {_nbgrader(cell)["grade_id"]: cell.cell_type for cell in source_nb.cells if _nbgrader(cell).get("solution")}
    answers: dict[str, list[tuple[int, nbformat.NotebookNode]]] = {}
    extras: dict[str | None, list[tuple[int, nbformat.NotebookNode]]] = {}
    anchor = None
    for position, cell in enumerate(student_nb.cells, 1):
        grade_id = _nbgrader(cell).get("grade_id")
        if grade_id in answer_types and cell.cell_type == answer_types[grade_id]:
            answers.setdefault(grade_id, []).append((position, cell))
        elif grade_id in source_grade_ids or cell.get("id") in source_ids:
            pass  # a locked, test or setup cell (or a retyped answer): the source's version is used
        elif cell.cell_type == "code" and not grade_id:
            extras.setdefault(anchor, []).append((position, cell))
        anchor = _anchor_of(cell, source_nb) or anchor
    return answers, extras


def defined_functions(source: str) -> list[str]:
    """Top-level functions a cell defines."""
    return [node.name for node in _top_level(source) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def make_plan(source_nb: nbformat.NotebookNode, student_nb: nbformat.NotebookNode) -> Plan:
    answers, extras = _collect_cells(source_nb, student_nb)
    positions = _positions(student_nb)
    plan = Plan(context=[], student_cells=[], items=[], api_names=[])

    def run_in_worker(source: str, origin: CellOrigin) -> None:
        plan.student_cells.append(source)
        plan.cell_origins.append(origin)

    def run_extras(anchor) -> None:
        for position, extra in extras.get(anchor, []):
            run_in_worker(extra.source, CellOrigin(_cell_at(position, extra.source), tuple(defined_names(extra.source))))

    run_extras(None)
    question = None
    for position, cell in enumerate(source_nb.cells, 1):
        meta = _nbgrader(cell)
        if cell.cell_type == "markdown" and not meta.get("solution"):
            question = _question(cell.source, question)
        if is_test(cell):
            plan.items.append(TestItem(meta["grade_id"], float(meta.get("points", 0)), cell.source, tuple(cell.metadata.get("tags", ())),
                                       question[0] if question else None))
        elif is_solution(cell):
            expected = defined_names(cell.source)
            plan.api_names += [name for name in expected if name not in plan.api_names]
            helpers = set(plan.reference_functions) & set(free_names(cell.source))
            plan.answer_helpers += sorted(helpers - set(plan.answer_helpers))
            student = answers.get(meta["grade_id"])
            if student is None:
                plan.notes.append(f"answer cell {meta['grade_id']!r} is missing from the submission")
            for _, answer in student or []:
                names = tuple(dict.fromkeys(expected + defined_names(answer.source)))
                label = _answer_cell(meta["grade_id"], question[0] if question else None, names)
                run_in_worker(answer.source, CellOrigin(label, names, question[0] if question else None))
        elif cell.cell_type == "code":
            where = positions.get(cell.get("id")) or positions.get(meta.get("grade_id")) or position
            origin = CellOrigin(_cell_at(where, cell.source), tuple(defined_names(cell.source)))
            plan.context.append(cell.source)
            plan.context_origins.append(origin)
            if GRADER_SIDE in cell.metadata.get("tags", ()):
                plan.grader_side.append(cell.source)
            else:
                run_in_worker(cell.source, origin)
        run_extras(cell.get("id"))
    return plan


# A question's heading in an assignment ("## Question 2: squared distances ..."): answers are named by it.
QUESTION_HEADING = re.compile(r"^(#{1,6})\s*(Question\s+\w+)", re.I)


def _question(markdown: str, current: tuple[str, int] | None) -> tuple[str, int] | None:
    """The question (and its heading's level) that the cells after ``markdown`` belong to: a question's
    heading opens one; a heading of another kind closes it unless it is a sub-heading of the question."""
    for line in markdown.splitlines():
        heading = re.match(r"^(#{1,6})\s", line)
        if not heading:
            continue
        match = QUESTION_HEADING.match(line)
        if match:
            current = (match.group(2), len(match.group(1)))
        elif current is not None and len(heading.group(1)) <= current[1]:
            current = None
    return current


def _answer_cell(grade_id: str, question: str | None, names: tuple[str, ...]) -> str:
    """An answer cell as the student finds it: by what it defines, its question and its grade_id
    (a cell number would be the grader's count of code cells, which the notebook does not show)."""
    where = f"{question}, grade_id {grade_id}" if question else f"grade_id {grade_id}"
    if not names:
        return f"the answer cell ({where})"
    shown = ", ".join(f"`{name}`" for name in names[:3]) + (", …" if len(names) > 3 else "")
    return f"the cell defining {shown} ({where})"


def _cell_at(position: int, source: str) -> str:
    """Any other cell: its place among all the notebook's cells, markdown included (as JupyterLab
    counts them), and its first line."""
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    first = first if len(first) <= 60 else first[:59] + "…"
    return f"cell {position} of your notebook" + (f" (`{first}`)" if first else "")


def _positions(notebook) -> dict[str, int]:
    """1-based positions of a notebook's cells, by cell id and by nbgrader grade_id."""
    positions = {}
    for position, cell in enumerate(notebook.cells, 1):
        for key in (cell.get("id"), _nbgrader(cell).get("grade_id")):
            if key:
                positions.setdefault(key, position)
    return positions


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
