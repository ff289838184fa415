"""Every lecture runs top to bottom on this machine, within its time budget.

The reference solutions are executed once, by the nbgrader round trip: their checks are in
test_grading.py. With GPUCOURSE_EXECUTED_DIR set (scripts/gpu_check.sh), the executed
notebooks and their run times are kept there.
"""

import time

import nbformat
import pytest

from course_helpers import LECTURES, REPO_ROOT, budget_seconds, execute_notebook, keep_executed, one_class_per_module, output_errors

pytestmark = pytest.mark.slow


def execute(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    execute_notebook(notebook, tmp_path)
    return notebook, time.perf_counter() - start


class Lecture:
    """One lecture (one class per lecture, so that --dist loadscope spreads them over the workers)."""

    module = None  # set per generated class

    def test_lecture_runs_top_to_bottom(self, tmp_path):
        path = REPO_ROOT / "course" / f"{self.module}.ipynb"
        notebook, seconds = execute(path, tmp_path)
        keep_executed(notebook, path.name, f"course/{path.name}", seconds)
        budget = budget_seconds(path)
        print(f"{path.name}: {seconds:.1f} s")
        assert seconds < budget, f"{path.name} took {seconds:.0f} s, over its {budget} s budget"
        assert output_errors(notebook) == []


one_class_per_module(Lecture, [path.stem for path in LECTURES], globals())
