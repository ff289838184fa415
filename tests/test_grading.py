"""The nbgrader round trip: the reference solution earns every autograded point, the untouched release none."""

import pytest

from autograder.build import REPO_ROOT, assignment_sources
from autograder.grade import autograde

ASSIGNMENTS = [source.parent.name for source in assignment_sources(REPO_ROOT)]


@pytest.fixture(scope="module", params=ASSIGNMENTS)
def graded(request, tmp_path_factory):
    assignment = request.param
    submissions = {
        "reference": REPO_ROOT / "solutions" / assignment / f"{assignment}.ipynb",
        "untouched": REPO_ROOT / "assignments" / assignment / f"{assignment}.ipynb",
    }
    return autograde(assignment, submissions, tmp_path_factory.mktemp(assignment))


def test_reference_solution_earns_full_autograded_marks(graded):
    items = [item for item in graded["reference"].values() if item.autograded]
    assert items, "the assignment has no autograded items"
    lost = {item.grade_id: f"{item.score}/{item.max_score}" for item in items if item.score != item.max_score}
    assert lost == {}, f"the reference solution lost points: {lost}"


def test_untouched_release_earns_nothing(graded):
    items = [item for item in graded["untouched"].values() if item.autograded]
    earned = {item.grade_id: item.score for item in items if item.score != 0}
    assert earned == {}, f"an untouched notebook earned points: {earned}"


def test_written_answers_are_left_for_the_instructor(graded):
    manual = [item for item in graded["reference"].values() if not item.autograded]
    assert all(item.score == 0 for item in manual)  # nbgrader leaves them ungraded until a person grades them
