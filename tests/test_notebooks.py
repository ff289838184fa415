"""Every lecture runs top to bottom on this machine, within its time budget.

The reference solutions are executed once, by the nbgrader round trip: their checks are in
test_grading.py. With GPUCOURSE_EXECUTED_DIR set (scripts/gpu_check.sh), the executed
notebooks and their run times are kept there.
"""

import base64
import struct
import time

import nbformat
import pytest

from course_helpers import (
    LECTURES,
    REPO_ROOT,
    LoadMeter,
    assert_within_budget,
    execute_notebook,
    keep_executed,
    library_log_lines,
    one_class_per_module,
    output_errors,
)

pytestmark = pytest.mark.slow

# JupyterLab's output area in the browser test's 1400-px window with the file browser open: a wider
# figure is shrunk to fit, its labels with it (a 16-inch figure's 8-pt labels came out at 5 pt).
SHOWN_WIDTH_PX = 960


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
        path = REPO_ROOT / "course" / f"{self.module}.ipynb"
        notebook, seconds, meter = execute(path, tmp_path)
        keep_executed(notebook, path.name, f"course/{path.name}", seconds)
        assert_within_budget(path, seconds, meter)
        assert output_errors(notebook) == []
        assert library_log_lines(notebook) == []
        too_wide = {f"cell {index}": width for index, width in figure_widths(notebook) if width > SHOWN_WIDTH_PX}
        assert too_wide == {}, f"figures wider than the {SHOWN_WIDTH_PX} px JupyterLab shows unscaled (px): {too_wide}"


def figure_widths(notebook):
    """(cell index, pixel width) of every PNG a notebook's outputs show; the width is in the PNG's header."""
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                yield index, struct.unpack(">I", base64.b64decode(png)[16:20])[0]


one_class_per_module(Lecture, [path.stem for path in LECTURES], globals())
