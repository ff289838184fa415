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

