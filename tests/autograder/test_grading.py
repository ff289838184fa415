"""The nbgrader round trip: the reference solution earns every autograded point, the untouched release none.

Plain nbgrader executes each submission top to bottom, so its executed copy of the reference
solution is also the proof that the solution notebook runs without errors within its time
budget (lectures are executed in test_notebooks.py).
"""


import nbformat
import pytest

from autograder import compile_seed
from autograder.plain_nbgrader import autograde
from course_helpers import (
    ASSIGNMENTS,
    LoadMeter,
    assert_within_budget,
    executed_seconds,
    facts,
    keep_executed,
    one_class_per_module,
    output_errors,
    release,
    source,
)
from untouched_release import untouched_release_problems

pytestmark = pytest.mark.slow


class RoundTrip:
    """One assignment through plain nbgrader (one class per module: see bottom)."""

    module = None  # set per generated class

    @pytest.fixture(scope="class")
    @classmethod
    def round_trip(cls, tmp_path_factory):
        """(course folder, scores per student and grade_id, how busy the machine was) of one nbgrader autograde run."""
        assignment = cls.module
        submissions = {"reference": source(assignment), "untouched": release(assignment)}
        course = tmp_path_factory.mktemp(assignment)
        if compile_seed.uses_compile([source(assignment).read_text()]):
            compile_seed.warm_default_cache()  # the kernels compile where a lecture's do, and start as warm
        with LoadMeter() as meter:
            graded = autograde(assignment, submissions, course)
        return course, graded, meter

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, round_trip):
        return round_trip[1]

    def test_reference_solution_runs_top_to_bottom_within_its_budget(self, round_trip):
        """nbgrader's executed copy of the reference: no cell raised, and it ran within the budget."""
        course, _, meter = round_trip
        name = f"{self.module}.ipynb"
        executed = course / "autograded" / "reference" / self.module / name
        notebook = nbformat.read(executed, as_version=4)
        seconds = executed_seconds(notebook)
        # Kept beside the lecture of the same name, for scripts/gpu_check.sh's report.
        keep_executed(notebook, f"{self.module}-solution.ipynb", f"solutions/{self.module}/{name}", seconds)
        assert_within_budget(executed, seconds, meter)
        assert output_errors(notebook) == []
        executed_cells = [cell for cell in notebook.cells if cell.cell_type == "code" and cell.source.strip()]
        assert all(cell.execution_count for cell in executed_cells), "every code cell ran"

    def test_reference_solution_earns_full_autograded_marks(self, graded):
        items = [item for item in graded["reference"].values() if item.autograded]
        assert items, "the assignment has no autograded items"
        assert {item.grade_id for item in items} == set(facts(self.module).points)
        lost = {item.grade_id: f"{item.score}/{item.max_score} ({item.message})" for item in items if item.score != item.max_score}
        assert lost == {}, f"the reference solution lost points: {lost}"

    def test_untouched_release_earns_nothing(self, graded):
        items = [item for item in graded["untouched"].values() if item.autograded]
        earned = {item.grade_id: item.score for item in items if item.score != 0}
        assert earned == {}, f"an untouched notebook earned points: {earned}"

    def test_untouched_release_fails_only_at_its_stubs(self, round_trip):
        """nbgrader's executed copy of the untouched release, as a student running it sees it (module 02's in a
        browser: test_browser.py): each test cell fails, in its visible part, with a stub's one-line message that
        names what to write and its question; no traceback shows the course's own code; nothing else fails."""
        executed = round_trip[0] / "autograded" / "untouched" / self.module / f"{self.module}.ipynb"
        problems = untouched_release_problems(nbformat.read(executed, as_version=4), nbformat.read(release(self.module), as_version=4))
        assert problems == [], "\n".join(problems)

    def test_written_answers_are_left_for_the_instructor(self, graded):
        manual = [item for item in graded["reference"].values() if not item.autograded]
        assert {item.grade_id for item in manual} == set(facts(self.module).manual)
        assert all(item.score == 0 for item in manual)  # nbgrader leaves them ungraded until a person grades them


one_class_per_module(RoundTrip, ASSIGNMENTS, globals())
