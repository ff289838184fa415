"""``autograder report ASSIGNMENT``: one HTML page about a class's grading, for the instructor.

It reads what the trusted grader recorded for each student (``autograded/<student>/<ASSIGNMENT>/grading.json``,
beside the autograded notebook) and shows: the distribution of scores, each item's pass rate, the speedups
measured for each speed item against its threshold, the grading time per student, the items still waiting
for a GPU, and the pairs of students whose answer cells are unusually alike.

The similarity table is a flag for a person to look at, never a penalty: two students may reach the same
short answer on their own. It compares answer cells only (those nbgrader marks ``solution``), with the
released stubs as boilerplate, by winnowed fingerprints of normalised tokens (``copydetect``, the method of
MOSS): renaming variables or reformatting does not hide a copy.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import skeleton
from .outcomes import Outcome

# What gpucourse.check.assert_speedup prints when an item passes, and raises when it fails
# (tests/autograder/test_overview.py checks both against the real function).
PASSED_SPEEDUP = re.compile(r"^(?P<name>.+?): (?P<measured>[0-9.]+)× (?:faster|as fast).*\(needed (?P<needed>[0-9.]+)×\)\s*$")
FAILED_SPEEDUP = re.compile(r"^(?P<name>.+?): measured (?P<measured>[0-9.]+)× (?:faster|as fast), need (?P<needed>[0-9.]+)×")

SIMILAR_AT = 0.6  # the share of both students' fingerprinted answer tokens they have in common, above which a pair is listed
NOISE_TOKENS = 20  # k-grams shorter than this are too common to mean anything (copydetect's noise threshold)


@dataclass
class Student:
    """One student's grading, as the grader recorded it."""

    name: str
    items: dict[str, dict]
    seconds: float | None  # None: not run (a submission the grader could not read)
    answers: str = ""  # their answer cells, in notebook order

    @property
    def score(self) -> float:
        return sum(item["score"] for item in self.items.values())


@dataclass
class ClassGrading:
    assignment: str
    students: list[Student]
    points: dict[str, float] = field(default_factory=dict)  # grade_id -> points, in notebook order
    unreadable: list[str] = field(default_factory=list)  # students whose grading.json could not be read: left out, named on the page

    @property
    def out_of(self) -> float:
        return sum(self.points.values())


def load_class(course: Path, assignment: str) -> ClassGrading:
    """Every graded student of ``assignment`` in ``course`` (FileNotFoundError: nobody was graded)."""
    folders = sorted(path.parent for path in (course / "autograded").glob(f"*/{assignment}/grading.json"))
    if not folders:
        raise FileNotFoundError(f"no grading of {assignment} in {course / 'autograded'}: run `autograder grade {assignment} ...` first")
    students, points, unreadable = [], {}, []
    for folder in folders:
        try:
            recorded = json.loads((folder / "grading.json").read_text())
        except (OSError, ValueError):
            unreadable.append(folder.parent.name)
            continue
        # Keyed by grade_id; a submission the grader could not read has only outcome, message and score per item.
        items = {grade_id: {"grade_id": grade_id, "output": "", "message": "", **item} for grade_id, item in recorded["items"].items()}
        for grade_id, item in items.items():
            points.setdefault(grade_id, item.get("points", 0.0))
        notebook = folder / f"{assignment}.ipynb"
        students.append(Student(folder.parent.name, items, recorded.get("seconds"), answer_text(notebook) if notebook.exists() else ""))
    if not students:
        raise FileNotFoundError(f"no readable grading of {assignment} in {course / 'autograded'} (unreadable: {', '.join(unreadable)})")
    return ClassGrading(assignment, students, {**points, **source_points(course, assignment)}, unreadable)


def source_points(course: Path, assignment: str) -> dict[str, float]:
    """grade_id -> points, from the course's source notebook (``solutions/``) where it is there: the records of
    submissions the grader could not read carry no points."""
    path = course / "solutions" / assignment / f"{assignment}.ipynb"
    if not path.exists():
        return {}
    notebook = nbformat.read(path, as_version=4)
    return {item.grade_id: item.points for item in skeleton.make_plan(notebook, notebook).items}


def answer_cells(notebook: nbformat.NotebookNode) -> list[str]:
    """The sources of the cells nbgrader marks as the student's answers (code only: written answers are the instructor's to read)."""
    return [cell.source for cell in notebook.cells
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution", False)]


def answer_text(path: Path) -> str:
    try:
        return "\n\n".join(answer_cells(nbformat.read(path, as_version=4)))
    except (OSError, ValueError, KeyError):
        return ""  # an unreadable notebook: nothing to compare


# --- The numbers ---------------------------------------------------------------------------------


def pass_rates(grading: ClassGrading) -> dict[str, tuple[int, int]]:
    """grade_id -> (students who passed it, students graded on it); items waiting for a GPU are not graded yet."""
    rates = {}
    for grade_id in grading.points:
        outcomes = [student.items[grade_id].get("outcome") for student in grading.students if grade_id in student.items]
        graded = [outcome for outcome in outcomes if outcome != Outcome.NEEDS_GPU]
        rates[grade_id] = (sum(outcome == Outcome.PASSED for outcome in graded), len(graded))
    return rates


def waiting_for_gpu(grading: ClassGrading) -> dict[str, list[str]]:
    """grade_id -> the students whose item waits for a GPU regrade (``autograder regrade-gpu``)."""
    waiting = {}
    for student in grading.students:
        for grade_id, item in student.items.items():
            if item.get("outcome") == Outcome.NEEDS_GPU:
                waiting.setdefault(grade_id, []).append(student.name)
    return waiting


def measured_speedup(item: dict) -> tuple[float, float] | None:
    """(measured, needed) from a speed item's output or message, as the course's check wrote them; None if it measured nothing."""
    for line in (item.get("output", "") + "\n" + item.get("message", "")).splitlines():
        found = PASSED_SPEEDUP.match(line) or FAILED_SPEEDUP.match(line)
        if found:
            return float(found["measured"]), float(found["needed"])
    return None


def speedups(grading: ClassGrading) -> dict[str, list[tuple[float, float]]]:
    """grade_id -> every (measured, needed) speedup of the class, for the items that measured one."""
    found = {}
    for grade_id in grading.points:
        values = [measured for student in grading.students if grade_id in student.items
                  if (measured := measured_speedup(student.items[grade_id])) is not None]
        if values:
            found[grade_id] = values
    return found


@dataclass(frozen=True)
class SimilarPair:
    first: str
    second: str
    similarity: float  # the lesser of the two students' shares of their fingerprinted tokens found in the other's
    shared_tokens: int


def similar_pairs(grading: ClassGrading, stubs: str, threshold: float = SIMILAR_AT) -> list[SimilarPair]:
    """Pairs of students whose answer cells share at least ``threshold`` of their fingerprints, most alike first.
    ``stubs``: the released answer cells, whose fingerprints are boilerplate (every student starts from them)."""
    from copydetect import CodeFingerprint, compare_files

    def fingerprint(text: str, boilerplate=()):
        return CodeFingerprint("answers.py", NOISE_TOKENS, 1, boilerplate=list(boilerplate), fp=io.StringIO(text))

    boilerplate = fingerprint(stubs).hashes if stubs.strip() else ()
    prints = {student.name: fingerprint(student.answers, boilerplate) for student in grading.students if student.answers.strip()}
    pairs = []
    for (first, one), (second, other) in itertools.combinations(sorted(prints.items()), 2):
        if not one.hashes or not other.hashes:
            continue  # nothing of their own to compare (the stubs, or too short)
        shared, (share_one, share_other), _ = compare_files(one, other)
        similarity = min(share_one, share_other)
        if similarity >= threshold:
            pairs.append(SimilarPair(first, second, float(similarity), int(shared)))
    return sorted(pairs, key=lambda pair: -pair.similarity)


# --- The page ------------------------------------------------------------------------------------


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def figures(grading: ClassGrading) -> list[tuple[str, str]]:
    """(title, base64 PNG) for each plot of the page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    def counts(ax, xlabel: str) -> None:  # a histogram of students: whole numbers up the side
        ax.set(xlabel=xlabel, ylabel="students")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))

    shown = []
    fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
    ax.hist([student.score for student in grading.students], bins=max(1, int(grading.out_of) + 1), range=(-0.5, grading.out_of + 0.5),
            color="#4c72b0")
    counts(ax, f"points (out of {grading.out_of:g})")
    shown.append(("Scores", _png(fig)))

    rates = pass_rates(grading)
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rates) + 1), layout="constrained")
    names = list(rates)[::-1]
    shares = [rates[name][0] / rates[name][1] if rates[name][1] else 0 for name in names]
    ax.barh(names, shares, color="#55a868")
    for row, (name, share) in enumerate(zip(names, shares)):
        passed, graded = rates[name]
        ax.text(share + 0.01, row, f"{passed}/{graded}" if graded else "not graded yet: waiting for a GPU", va="center", fontsize=8)
    ax.set(xlim=(0, 1.15), xlabel="share of the students graded on it who passed")
    shown.append(("Pass rate per item", _png(fig)))

    for grade_id, values in speedups(grading).items():
        fig, ax = plt.subplots(figsize=(6, 2.6), layout="constrained")
        ax.hist([measured for measured, _ in values], bins=20, color="#8172b2")
        for needed in sorted({needed for _, needed in values}):
            ax.axvline(needed, color="#c44e52", linestyle="--", label=f"needed {needed:g}×")
        counts(ax, "measured speedup (×)")
        ax.legend(loc="upper right", frameon=False)
        shown.append((f"Speedups measured for {grade_id}", _png(fig)))

    fig, ax = plt.subplots(figsize=(6, 2.6), layout="constrained")
    ax.hist([student.seconds for student in grading.students if student.seconds is not None], bins=20, color="#937860")
    counts(ax, "seconds to grade one student")
    shown.append(("Grading time per student", _png(fig)))
    return shown


def render(grading: ClassGrading, pairs: list[SimilarPair]) -> str:
    scores = [student.score for student in grading.students]
    seconds = [student.seconds for student in grading.students if student.seconds is not None] or [0.0]
    waiting = waiting_for_gpu(grading)
    escape = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{escape(grading.assignment)}: class report</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}img{display:block;margin:.5em 0 1.5em}</style></head><body>",
        f"<h1>{escape(grading.assignment)}: class report</h1>",
        f"<p>{len(grading.students)} students graded; median score {statistics.median(scores):g} of {grading.out_of:g}; "
        f"median grading time {statistics.median(seconds):.1f} s a student.</p>",
    ]
    if grading.unreadable:
        parts.append(f"<p><strong>Left out</strong>, their grading.json could not be read (regrade them with --student): "
                     f"{escape(', '.join(grading.unreadable))}.</p>")
    for title, png in figures(grading):
        parts += [f"<h2>{escape(title)}</h2>", f"<img alt='{escape(title)}' src='data:image/png;base64,{png}'>"]
    parts.append("<h2>Items waiting for a GPU</h2>")
    if waiting:
        parts.append("<p>Regrade them on a machine with a GPU: <code>autograder regrade-gpu "
                     f"{escape(grading.assignment)} SUBMISSIONS</code>.</p><table><tr><th>item</th><th>students</th></tr>")
        parts += [f"<tr><td>{escape(grade_id)}</td><td>{len(names)}</td></tr>" for grade_id, names in waiting.items()]
        parts.append("</table>")
    else:
        parts.append("<p>None.</p>")
    parts += ["<h2>Answers unusually alike</h2>",
              f"<p><strong>A flag for a person to look at, never a penalty.</strong> Pairs whose answer cells (the released stubs left out) "
              f"share at least {SIMILAR_AT:.0%} of their fingerprints, by winnowed k-grams of {NOISE_TOKENS} normalised tokens "
              "(copydetect): short or standard answers can match on their own.</p>"]
    if pairs:
        parts.append("<table><tr><th>student</th><th>student</th><th>alike</th><th>shared tokens</th></tr>")
        parts += [f"<tr><td>{escape(pair.first)}</td><td>{escape(pair.second)}</td><td>{pair.similarity:.0%}</td><td>{pair.shared_tokens}</td></tr>"
                  for pair in pairs]
        parts.append("</table>")
    else:
        parts.append("<p>No pair above the mark.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def released_stubs(course: Path, assignment: str) -> str:
    """The answer cells of the released notebook (``assignments/<ASSIGNMENT>/``): what every student started from."""
    path = course / "assignments" / assignment / f"{assignment}.ipynb"
    return answer_text(path) if path.exists() else ""


def write_report(course: Path, assignment: str, out: Path | None = None) -> Path:
    """Write the class report of ``assignment`` (default: ``reports/<ASSIGNMENT>.html`` in the course) and return its path."""
    grading = load_class(course, assignment)
    out = out or course / "reports" / f"{assignment}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    count = len(grading.students)
    if count > 100:  # about 0.75 ms a pair: 300 students take half a minute
        print(f"comparing the answers of {count} students ({count * (count - 1) // 2} pairs)...", file=sys.stderr, flush=True)
    out.write_text(render(grading, similar_pairs(grading, released_stubs(course, assignment))))
    return out
