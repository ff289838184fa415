"""Assignment 03's tiled-transpose item: the least a transpose needs, computed in closed form, is what the naive kernel moves.

test_transpose_traced holds a tiled kernel to 1.25 × ``least_needed``: the sectors and warp requests of the naive
kernel's coalesced loads, reading x and reading a matrix of out's shape. The test cell computes them in closed form
(tracing the naive kernel twice per size cost more than tracing the student's kernel); here the naive kernel is traced
in the simulator and must give the same totals, on the visible size, edge cases, and a size from the drawn range.
"""

import nbformat
import numpy as np
import pytest

from course_helpers import run_cells, source
from gpucourse import sim

pytestmark = pytest.mark.slow


def solution_cell(grade_id: str) -> str:
    notebook = nbformat.read(source("03_coalescing"), as_version=4)
    return next(cell.source for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def bound_functions(test_cell: str) -> str:
    """The test cell's module-level definitions of ``coalesced_sectors`` and ``least_needed``, without its checks."""
    start = test_cell.index("def coalesced_sectors")
    return test_cell[start:test_cell.index("\n\n\ndef check_traced")]


@pytest.fixture(scope="module")
def names():
    return run_cells(solution_cell("imports"), solution_cell("naive_transpose"), bound_functions(solution_cell("test_transpose_traced")))


def traced_naive(names, rows, cols):
    x, out = np.zeros((rows, cols), np.float32), np.zeros((cols, rows), np.float32)
    grid, block = names["transpose_launch"](x.shape)
    with sim.trace() as trace:
        names["transpose_naive"][grid, block](x, out)
    return trace


@pytest.mark.parametrize("rows, cols", [(40, 70), (1, 1), (33, 5), (3, 97), (103, 71)])
def test_the_closed_form_is_what_the_naive_kernel_moves(names, rows, cols):
    reads, writes = traced_naive(names, rows, cols), traced_naive(names, cols, rows)
    traced = {"load": reads.sectors(kind="load"), "store": writes.sectors(kind="load"),
              "wavefronts": len(reads.requests("global", "load")) + len(writes.requests("global", "load"))}
    assert names["least_needed"](rows, cols) == traced
