"""Every lecture runs top to bottom on this machine, within its budget (course_helpers.assert_lecture_acceptable).

Lecture 02 and lectures from 05 on (course_helpers.BROWSER_LECTURES) are run here only where tests/course/test_browser.py
does not run: where it does, it runs them in JupyterLab, as a student does, and applies the same checks to that run
(one run of each lecture per test run).

The reference solutions are executed once, by the nbgrader round trip: their checks are in
test_grading.py. With GPUCOURSE_EXECUTED_DIR set (scripts/gpu_check.sh), the executed
notebooks and their run times are kept there.
"""

import importlib.util
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course_helpers import (
    LECTURES,
    REPO_ROOT,
    LoadMeter,
    assert_lecture_acceptable,
    execute_notebook,
    one_class_per_module,
    runs_in_browser,
)

pytestmark = pytest.mark.slow


def execute(path, tmp_path):
    """The executed notebook, its wall seconds, and how busy the machine was meanwhile."""
    notebook = nbformat.read(path, as_version=4)
    with LoadMeter() as meter:
        start = time.perf_counter()
        execute_notebook(notebook, tmp_path)
        seconds = time.perf_counter() - start
    return notebook, seconds, meter


class Lecture:
    """One lecture (one class per lecture, so that --dist loadscope spreads them over the workers)."""

    module = None  # set per generated class

    def test_lecture_runs_top_to_bottom(self, tmp_path):
        if runs_in_browser(self.module):
            pytest.skip(f"run once, in JupyterLab, by tests/course/test_browser.py::TestLecture_{self.module} (the same checks)")
        path = REPO_ROOT / "course" / f"{self.module}.ipynb"
        notebook, seconds, meter = execute(path, tmp_path)
        assert_lecture_acceptable(path, notebook, seconds, meter)


one_class_per_module(Lecture, [path.stem for path in LECTURES], globals())


def test_lectures_02_and_from_05_are_left_to_the_browser_test_exactly_where_it_runs(monkeypatch):
    """The skip above asks tests/course/test_browser.py's own question (it skips without Chromium or playwright, and fails
    under CI=true): no lecture may go unrun, and none run twice."""
    import course_helpers

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(course_helpers, "CHROMIUM", Path("/nonexistent/chromium"))
    assert not course_helpers.runs_in_browser("08_cnn")
    monkeypatch.setattr(course_helpers, "CHROMIUM", Path(sys.executable))  # a file that exists
    assert course_helpers.runs_in_browser("08_cnn") == (importlib.util.find_spec("playwright") is not None)
    monkeypatch.setattr(course_helpers, "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.setenv("CI", "true")
    assert course_helpers.runs_in_browser("08_cnn")
    assert course_helpers.runs_in_browser("02_architecture")  # run by the occupancy calculator's test
    assert not course_helpers.runs_in_browser("03_memory")
    assert [path.stem[:2] for path in course_helpers.BROWSER_LECTURES] == [path.stem[:2] for path in LECTURES
                                                                          if path.stem >= "05" or path.stem.startswith("02")]
