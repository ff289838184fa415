"""The harness's limits on a student's cells: a burst of load is forgiven once, a hang is not."""

import pytest

from autograder import harness, sandbox, skeleton
from autograder.outcomes import Outcome
from autograder.skeleton import Plan

pytestmark = pytest.mark.slow

LIMITS = sandbox.Limits(cell_seconds=4, item_seconds=20, notebook_seconds=120, memory_bytes=4 * 1024**3)

# Hangs the first time it runs in this folder, then returns at once: a cell that was slow only
# once (as under a burst of load). The marker file survives the worker's restart.
SLOW_ONCE = """
import os, time
if not os.path.exists("ran-once"):
    open("ran-once", "w").close()
    time.sleep(3600)
ANSWER = 42
"""
HANGS = "import time\ntime.sleep(3600)\n"


def _plan(student_cell: str) -> Plan:
    test = skeleton.TestItem("test_answer", 1.0, "assert answer() == 42, f'got {answer()}'")
    return Plan(context=[], student_cells=[student_cell, "def answer():\n    return ANSWER\n"], items=[test], api_names=["answer"])


def test_a_cell_that_timed_out_once_is_run_again_in_a_fresh_worker(tmp_path):
    (tmp_path / "work").mkdir()
    result = harness.grade(_plan(SLOW_ONCE), tmp_path / "work", LIMITS)
    assert [item.outcome for item in result.items] == [Outcome.PASSED], result.items
    assert not any("skipped" in note for note in result.notes), result.notes


def test_a_cell_that_always_hangs_is_skipped_after_its_second_try(tmp_path):
    (tmp_path / "work").mkdir()
    result = harness.grade(_plan(HANGS), tmp_path / "work", LIMITS)
    [item] = result.items
    assert item.outcome == Outcome.FAILED and "ANSWER" in item.message, item
    assert "your code cell 1 ran past its time limit; it was skipped" in result.notes


def test_only_grades_the_items_named(tmp_path):
    (tmp_path / "work").mkdir()
    plan = _plan("ANSWER = 42")
    plan.items.append(skeleton.TestItem("test_other", 1.0, "assert False"))
    result = harness.grade(plan, tmp_path / "work", LIMITS, only={"test_answer"})
    assert [item.grade_id for item in result.items] == ["test_answer"]


def test_a_worker_that_cannot_start_is_a_grader_error(tmp_path):
    """Not the student's fault: no score, and the worker's own words for the instructor."""
    (tmp_path / "work").mkdir()
    starved = sandbox.Limits(cell_seconds=20, memory_bytes=64 * 1024**2)
    if sandbox._address_space_limit(starved) is None:
        pytest.skip("no address-space cap on a CUDA grader")
    with pytest.raises(harness.GraderError, match="could not start") as failure:
        harness.grade(_plan("ANSWER = 42"), tmp_path / "work", starved)
    assert "memory" in failure.value.log.lower(), failure.value.log



KERNEL_CELL = """
from gpucourse import kernels
kernels.use_gpu_or_simulator(verbose=False)  # numba's simulator where there is no GPU, as every kernel notebook does
from numba import cuda

@cuda.jit
def double(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 2 * x[i]
"""
LAUNCH_TEST = "x = np.ones(32, np.float32)\ndouble[1, 32](x)\nassert (x == 2).all(), x"


def _kernel_plan() -> Plan:
    return Plan(context=["import numpy as np"], student_cells=[KERNEL_CELL],
                items=[skeleton.TestItem("test_double", 1.0, LAUNCH_TEST)], api_names=["double"])


def test_a_launched_kernel_is_compiled_for_a_real_gpu_first(tmp_path):
    (tmp_path / "work").mkdir()
    result = harness.grade(_kernel_plan(), tmp_path / "work", LIMITS)
    assert [item.outcome for item in result.items] == [Outcome.PASSED], result.items
    [kernel] = result.kernels
    assert kernel["kernel"] == "double" and kernel["signature"] == "(float32[::1])" and kernel["arch"] == "sm_80" and kernel["registers"] > 0


def test_without_nvidias_compiler_a_grader_stops_and_a_self_check_goes_on(tmp_path, monkeypatch):
    """A grader that cannot compile kernels must not grade them (GraderError: nobody's score);
    a student's self-check still runs the tests and says the kernels were not compiled."""
    monkeypatch.setenv("GPUCOURSE_PTXAS", "/nonexistent/ptxas")
    (tmp_path / "grader").mkdir()
    with pytest.raises(harness.GraderError, match="cannot compile kernels"):
        harness.grade(_kernel_plan(), tmp_path / "grader", LIMITS)
    (tmp_path / "self").mkdir()
    result = harness.grade(_kernel_plan(), tmp_path / "self", LIMITS, compiler_required=False)
    assert [item.outcome for item in result.items] == [Outcome.PASSED], result.items
    assert any("not compiled for a real GPU" in note for note in result.notes), result.notes
    assert result.kernels == []
