"""The nbgrader round trip: the reference solution earns every autograded point, the untouched release none."""

import nbformat
import pytest

from autograder.build import REPO_ROOT, assignment_sources
from autograder.plain_nbgrader import autograde

ASSIGNMENTS = [source.parent.name for source in assignment_sources(REPO_ROOT)]

# Module 01 answers that are correct but differ in speed: the speed item must tell them apart.
BROADCASTING = "def pairwise_sq_dists(x, y):\n    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(dim=-1)\n"
LOOP = "def pairwise_sq_dists(x, y):\n    return pairwise_sq_dists_loop(x, y)\n"


def _with_answer(solution, grade_id, source, path):
    """The reference notebook with one solution cell replaced, as a student might write it."""
    notebook = nbformat.read(solution, as_version=4)
    [cell] = [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    cell.source = source
    nbformat.write(notebook, path)
    return path


@pytest.fixture(scope="module", params=ASSIGNMENTS)
def graded(request, tmp_path_factory):
    assignment = request.param
    submissions = {
        "reference": REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb",
        "untouched": REPO_ROOT / "assignments" / assignment / f"{assignment}.ipynb",
    }
    if assignment == "01_gpu_basics":
        scratch = tmp_path_factory.mktemp("answers")
        submissions["broadcasting"] = _with_answer(submissions["reference"], "pairwise_sq_dists", BROADCASTING, scratch / "b.ipynb")
        submissions["loop"] = _with_answer(submissions["reference"], "pairwise_sq_dists", LOOP, scratch / "l.ipynb")
    return autograde(assignment, submissions, tmp_path_factory.mktemp(assignment))


def test_reference_solution_earns_full_autograded_marks(graded):
    items = [item for item in graded["reference"].values() if item.autograded]
    assert items, "the assignment has no autograded items"
    lost = {item.grade_id: f"{item.score}/{item.max_score} ({item.message})" for item in items if item.score != item.max_score}
    assert lost == {}, f"the reference solution lost points: {lost}"


def test_untouched_release_earns_nothing(graded):
    items = [item for item in graded["untouched"].values() if item.autograded]
    earned = {item.grade_id: item.score for item in items if item.score != 0}
    assert earned == {}, f"an untouched notebook earned points: {earned}"


def test_written_answers_are_left_for_the_instructor(graded):
    manual = [item for item in graded["reference"].values() if not item.autograded]
    assert all(item.score == 0 for item in manual)  # nbgrader leaves them ungraded until a person grades them


def test_speed_item_separates_fast_and_slow_correct_answers(graded):
    if "loop" not in graded:
        pytest.skip("only module 01 has these variants")
    scores = {student: {item.grade_id: item.score for item in graded[student].values()} for student in ("broadcasting", "loop")}
    assert scores["broadcasting"]["test_pairwise_correct"] == 2 and scores["broadcasting"]["test_pairwise_speed"] == 2
    assert scores["loop"]["test_pairwise_correct"] == 2, "the loop is correct and earns the correctness points"
    assert scores["loop"]["test_pairwise_speed"] == 0, "the loop itself must not pass the speed item"
    assert "need 4×" in graded["loop"]["test_pairwise_speed"].message
