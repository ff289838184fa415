"""The instructor's class report (autograder/overview.py, ``autograder report ASSIGNMENT``): its numbers, its
plots, and the similarity flags, on a generated class of eleven students (two pairs of them near-copies).

The class is written as the grader writes it (``autograded/<student>/<assignment>/grading.json`` beside the
autograded notebook); the speed items' lines come from the course's own ``check.assert_speedup``.
"""

import contextlib
import io
import json
import re
import shutil

import nbformat
import pytest

from autograder import cli, overview
from course_helpers import ASSIGNMENTS, facts, source
from gpucourse import check
from gpucourse.check import TimingFailure
from gpucourse.timing import SpeedResult

ASSIGNMENT = "01_gpu_basics"
# Each student answers with another module's reference cells: nine of them, whatever modules are added later.
DISTINCT = [name for name in ASSIGNMENTS if name != ASSIGNMENT][:9]


def speed_line(measured: float, needed: float) -> tuple[str, str]:
    """(output, message) of a speed item, as the course's check writes them when it passes and when it fails."""
    result = SpeedResult(speedup=measured, low=measured * 0.9, high=measured * 1.1, median_ratio=measured, baseline_seconds=measured * 1e-3,
                         candidate_seconds=1e-3, rounds=9, device="CPU test", num_threads=1)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            check.assert_speedup(result, needed, name="pairwise vs loops")
    except TimingFailure as failure:
        return printed.getvalue(), str(failure)
    return printed.getvalue(), ""


def answers_of(module: str) -> list[str]:
    return overview.answer_cells(nbformat.read(source(module), as_version=4))


def disguised(cells: list[str]) -> list[str]:
    """A copy that renames every name it defines and adds comments: what a student hiding a copy would do."""
    renamed = []
    for cell in cells:
        for index, name in enumerate(sorted(set(re.findall(r"^def (\w+)", cell, re.M)))):
            cell = re.sub(rf"\b{name}\b", f"my_function_{index}", cell)
        renamed.append("# my own work\n" + cell.replace("    return", "    # the result\n    return"))
    return renamed


def write_student(course, name: str, cells: list[str], items: dict, seconds: float) -> None:
    folder = course / "autograded" / name / ASSIGNMENT
    folder.mkdir(parents=True)
    notebook = nbformat.v4.new_notebook()
    for cell in cells:
        notebook.cells.append(nbformat.v4.new_code_cell(cell, metadata={"nbgrader": {"solution": True, "grade": False}}))
    notebook.cells.append(nbformat.v4.new_code_cell("assert True", metadata={"nbgrader": {"solution": False, "grade": True}}))
    nbformat.write(notebook, folder / f"{ASSIGNMENT}.ipynb")
    (folder / "grading.json").write_text(json.dumps({"items": {grade_id: {"grade_id": grade_id, **item} for grade_id, item in items.items()},
                                                     "seconds": seconds, "device": "CPU test", "device_class": "cpu"}))


def items_for(index: int) -> dict:
    """Student ``index``'s items: a correctness item passed by all but every third, a speed item measured at
    1 + index / 2 times against 4x needed, and a GPU item waiting for a GPU."""
    output, message = speed_line(1 + index / 2, 4.0)
    passed = index % 3 != 0
    return {
        "test_correct": {"points": 2.0, "score": 2.0 if passed else 0.0, "outcome": "passed" if passed else "failed", "output": "",
                         "message": "" if passed else "values differ", "seconds": 1.0},
        "test_speed": {"points": 2.0, "score": 2.0 if not message else 0.0, "outcome": "failed" if message else "passed",
                       "output": output, "message": message, "seconds": 3.0},
        "test_gpu_speed": {"points": 1.0, "score": 0.0, "outcome": "needs_gpu", "output": "", "message": "", "seconds": 0.0},
    }


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """Eleven students: nine answer with other modules' reference cells (all different), ``copy_a`` hands in
    ``s0``'s answers disguised, ``copy_b`` ``s1``'s word for word; the release's stubs are those of 01."""
    root = tmp_path_factory.mktemp("class")
    release = root / "assignments" / ASSIGNMENT
    release.mkdir(parents=True)
    stubs = nbformat.v4.new_notebook()
    stubs.cells = [nbformat.v4.new_code_cell("def answer():\n    raise NotImplementedError()\n",
                                             metadata={"nbgrader": {"solution": True, "grade": False}})]
    nbformat.write(stubs, release / f"{ASSIGNMENT}.ipynb")
    for index, module in enumerate(DISTINCT):
        write_student(root, f"s{index}", answers_of(module), items_for(index), seconds=10.0 + index)
    write_student(root, "copy_a", disguised(answers_of(DISTINCT[0])), items_for(0), seconds=12.0)
    write_student(root, "copy_b", answers_of(DISTINCT[1]), items_for(1), seconds=12.0)
    return root


def test_speed_lines_are_read_back_as_the_check_writes_them():
    assert overview.measured_speedup(dict(zip(("output", "message"), speed_line(5.5, 4.0)))) == (5.5, 4.0)
    assert overview.measured_speedup(dict(zip(("output", "message"), speed_line(1.5, 4.0)))) == (1.5, 4.0)
    assert overview.measured_speedup(dict(zip(("output", "message"), speed_line(0.25, 4.0)))) == (0.25, 4.0), "slower than the baseline"
    assert overview.measured_speedup({"output": "needs a GPU", "message": ""}) is None


def test_the_numbers_of_the_class(course):
    grading = overview.load_class(course, ASSIGNMENT)
    assert len(grading.students) == 11 and grading.out_of == 5.0
    rates = overview.pass_rates(grading)
    # s0, s3, s6 and copy_a (index 0) fail test_correct; s6, s7 and s8 reach 4x (1 + index / 2); the copies are indices 0 and 1.
    assert rates["test_correct"] == (7, 11)
    assert rates["test_speed"] == (3, 11)
    assert rates["test_gpu_speed"] == (0, 0), "waiting for a GPU is not graded yet"
    assert sorted(overview.waiting_for_gpu(grading)["test_gpu_speed"]) == sorted(student.name for student in grading.students)
    measured = overview.speedups(grading)
    assert set(measured) == {"test_speed"} and sorted(measured["test_speed"])[-1] == (5.0, 4.0)


def test_near_copies_are_flagged_and_different_answers_are_not(course):
    grading = overview.load_class(course, ASSIGNMENT)
    pairs = overview.similar_pairs(grading, overview.released_stubs(course, ASSIGNMENT))
    assert {(pair.first, pair.second) for pair in pairs} == {("copy_a", "s0"), ("copy_b", "s1")}, pairs
    assert all(pair.similarity >= overview.SIMILAR_AT and pair.shared_tokens > 0 for pair in pairs)


def test_the_stubs_alone_make_no_pair(tmp_path):
    for name in ("ann", "bob"):
        write_student(tmp_path, name, ["def answer():\n    raise NotImplementedError()\n"], items_for(1), seconds=1.0)
    grading = overview.load_class(tmp_path, ASSIGNMENT)
    assert overview.similar_pairs(grading, "def answer():\n    raise NotImplementedError()\n") == []


def test_the_page_holds_every_plot_the_gpu_items_and_the_flags(course, capsys):
    assert cli.main(["--course", str(course), "report", ASSIGNMENT]) == 0
    page_path = course / "reports" / f"{ASSIGNMENT}.html"
    assert str(page_path) in capsys.readouterr().out
    page = page_path.read_text()
    titles = re.findall(r"<h2>(.*?)</h2>", page)
    assert titles == ["Scores", "Pass rate per item", "Speedups measured for test_speed", "Grading time per student",
                      "Items waiting for a GPU", "Answers unusually alike"]
    assert page.count("src='data:image/png;base64,") == 4
    assert "never a penalty" in page and "<td>copy_a</td><td>s0</td>" in page and "<td>copy_b</td><td>s1</td>" in page
    assert "<td>test_gpu_speed</td><td>11</td>" in page and "autograder regrade-gpu" in page


def test_an_unreadable_grading_record_is_left_out_and_named(tmp_path):
    write_student(tmp_path, "ann", ["x = 1\n"], items_for(1), seconds=1.0)
    write_student(tmp_path, "bob", ["y = 2\n"], items_for(2), seconds=1.0)
    (tmp_path / "autograded" / "bob" / ASSIGNMENT / "grading.json").write_text("{not json")
    grading = overview.load_class(tmp_path, ASSIGNMENT)
    assert [student.name for student in grading.students] == ["ann"] and grading.unreadable == ["bob"]
    assert "could not be read (regrade them with --student): bob." in overview.render(grading, [])


def test_a_submission_the_grader_could_not_read_counts_zero_with_the_sources_points(tmp_path):
    """The grader's record of a missing or broken notebook: items keyed by grade_id, no points (autograder.grading)."""
    write_student(tmp_path, "ann", ["x = 1\n"], items_for(1), seconds=1.0)
    folder = tmp_path / "autograded" / "emma" / ASSIGNMENT
    folder.mkdir(parents=True)
    why = "no notebook named 01_gpu_basics.ipynb (found: no notebook at all)"
    (folder / "grading.json").write_text(json.dumps({"device": "not run", "error": why, "items": {
        grade_id: {"outcome": "unreadable", "message": why, "score": 0.0} for grade_id in ("test_correct", "test_speed", "test_extra")}}))
    grading = overview.load_class(tmp_path, ASSIGNMENT)
    assert [(student.name, student.score, student.answers) for student in grading.students] == [("ann", 2.0, "x = 1\n"), ("emma", 0.0, "")]
    assert overview.pass_rates(grading)["test_correct"] == (1, 2) and grading.points["test_extra"] == 0.0
    assert "median grading time 1.0 s a student" in overview.render(grading, []), "emma's was never run: not a 0 s grading"
    shutil.copytree(source(ASSIGNMENT).parent, tmp_path / "solutions" / ASSIGNMENT)
    assert overview.load_class(tmp_path, ASSIGNMENT).out_of == facts(ASSIGNMENT).total + 5.0, "the source's points, and the records' own"


def test_an_assignment_nobody_was_graded_on_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["--course", str(tmp_path), "report", ASSIGNMENT]) == 1
    assert f"no grading of {ASSIGNMENT}" in capsys.readouterr().err
