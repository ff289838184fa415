"""Shared fixtures: a headless matplotlib, a CPU-only view of the machine unless asked otherwise,
and each assignment graded once per test run (see :func:`course_grading`).

Helpers that are not fixtures (paths, per-module facts read from the notebooks, scratch
courses) live in ``course_helpers.py``.
"""

import contextlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from course_helpers import REPO_ROOT, computed_once, make_course, make_submissions, shared_dir

os.environ.setdefault("MPLBACKEND", "Agg")

# The scopes that grade or run notebooks, the longest kinds first; then the other slow tests; the quick ones last.
HEAVY_FIRST = ("test_classroom.py", "test_autograder_cli.py", "test_grading.py", "test_adversarial.py", "test_kernel_grading.py", "test_notebooks.py",
               "test_browser.py")


def pytest_collection_modifyitems(config, items):
    """Long tests first, so that quick ones fill the end of the run: pytest-xdist hands scopes out in this order
    (``make test`` passes ``--no-loadscope-reorder``), where by default the scopes with the most tests would go
    first and single long tests (a lecture, 20-45 s) last, one of them running alone at the end. The sort is
    stable: a file's tests, and a class's, stay together and in order."""
    def rank(item):
        name = item.path.name
        if name in HEAVY_FIRST:
            return (0, HEAVY_FIRST.index(name))
        return (1 if item.get_closest_marker("slow") else 2, 0)

    items.sort(key=rank)


@pytest.fixture(scope="session", autouse=True)
def compile_answers_shared_by_this_run(tmp_path_factory):
    """Each kernel compiled once per test run, not once per grading process (``gpucourse.compiler.CACHE_ENV``):
    a folder shared by this run's pytest-xdist workers, and the grading processes they start."""
    from gpucourse import compiler

    os.environ[compiler.CACHE_ENV] = str(shared_dir(tmp_path_factory) / "compile-answers")


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def no_device_override(monkeypatch):
    """Tests of the default device choice must not see a GPUCOURSE_DEVICE set by the caller."""
    monkeypatch.delenv("GPUCOURSE_DEVICE", raising=False)


@pytest.fixture(scope="session")
def simulated_cuda():
    """numba.cuda in its simulator (what CI and most students have); skipped where numba chose a GPU."""
    from gpucourse import kernels

    if not kernels.use_gpu_or_simulator(verbose=False).simulator:
        pytest.skip("numba.cuda runs on a GPU in this process; the simulator test needs a CPU-only session")
    from numba import cuda

    return cuda


# The students of every graded scratch course: the reference solution and the untouched release.
STUDENTS = {"alice": "solutions", "bob": "assignments"}


@dataclass(frozen=True)
class CourseGrading:
    """One ``autograder grade ASSIGNMENT SUBMISSIONS`` run on a scratch course.

    The trusted harness grades alice (the reference solution) and bob (the untouched release),
    one after the other in one pool process (its fork servers serve both; the adversarial suite
    grades with two jobs); nbgrader records the verdicts in the course's gradebook. Treat ``course`` as read-only: copy it to change it (other tests read it).
    """

    assignment: str
    course: Path
    submissions: Path
    returncode: int
    printed: str  # what the CLI printed on stdout (progress lines, the summary table)
    errors: str  # ... and on stderr

    def verdicts(self, student: str) -> dict:
        """The harness's verdicts for ``student`` as the CLI stored them (``grading.json``)."""
        return json.loads((self.course / "autograded" / student / self.assignment / "grading.json").read_text())

    def result(self, student: str):
        """The same, as the :class:`autograder.harness.SubmissionResult` the harness returned."""
        from autograder.harness import ItemResult, SubmissionResult

        data = self.verdicts(student)
        return SubmissionResult(**{**data, "items": [ItemResult(**item) for item in data["items"].values()]})


def _grade_course(assignment: str, folder: Path) -> dict:
    from autograder import cli

    course = make_course(folder / "course", assignment)
    submissions = make_submissions(folder / "submissions", STUDENTS, assignment)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        returncode = cli.main(["--course", str(course), "grade", assignment, str(submissions), "--jobs", "1"])
    return {"course": str(course), "submissions": str(submissions), "returncode": returncode,
            "printed": out.getvalue(), "errors": err.getvalue()}


@pytest.fixture(scope="session")
def course_grading(tmp_path_factory):
    """``course_grading(assignment)``: that assignment's :class:`CourseGrading`, made once per
    test run, whichever pytest-xdist worker asks first (the others wait for it, then read it).

    This is the one place the trusted grader grades a reference solution and an untouched
    release: every check of those verdicts (scores, outcomes, the CLI's table, the gradebook,
    feedback, the self-check's report) reads this one grading.
    """

    def grading(assignment: str) -> CourseGrading:
        data = computed_once(tmp_path_factory, f"grading-{assignment}", lambda folder: _grade_course(assignment, folder))
        return CourseGrading(assignment, Path(data["course"]), Path(data["submissions"]), data["returncode"], data["printed"], data["errors"])

    return grading
