"""The grader's fair clock: limits in quiet-machine seconds, whatever else runs on the machine."""

import os
import signal
import subprocess
import sys
import time

import pytest

from autograder import clock, protocol
from autograder.clock import FairClock

needs_proc = pytest.mark.skipif(clock.machine_runnable() is None, reason="needs Linux's /proc")


@pytest.mark.parametrize("total, ours, cores, expected", [
    (1, 1, 2, 1.0),  # only us: no slowdown
    (3, 1, 2, 1.5),  # two others and us on two cores
    (5, 1, 2, 2.5),  # four busy processes on two cores: each runnable task gets 2/5 of a core
    (9, 5, 2, 2.5),  # our own workers' load (a fork bomb of theirs) does not count
    (500, 1, 2, clock.MAX_SLOWDOWN),  # bounded: a runaway is stopped within MAX_SLOWDOWN × its limit
    (4, 1, 8, 1.0),  # enough cores for everyone
])
def test_slowdown_counts_only_load_we_did_not_cause(monkeypatch, total, ours, cores, expected):
    monkeypatch.setattr(clock, "machine_runnable", lambda: total)
    monkeypatch.setattr(clock, "runnable_in_trees", lambda roots: ours)
    fair = FairClock()
    fair.cores = cores
    assert fair.measure_slowdown() == pytest.approx(expected)


def test_without_proc_the_clock_is_the_wall_clock(monkeypatch):
    monkeypatch.setattr(clock, "machine_runnable", lambda: None)
    fair = FairClock()
    assert not fair.available and fair.measure_slowdown() == 1.0


def test_fair_seconds_run_slower_by_the_slowdown(monkeypatch):
    """Each wall second counts 1/slowdown: 2 s at slowdown 2 and 1 s at slowdown 1 make 2 fair s."""
    now = [100.0]
    monkeypatch.setattr(clock.time, "monotonic", lambda: now[0])
    fair = FairClock()
    fair._advance(2.0)  # from now on, twice as slow
    now[0] += 2.0
    fair._advance(1.0)
    now[0] += 1.0
    assert fair.now() == pytest.approx(2.0)
    assert fair.worst_slowdown == 2.0


def _clock_seeing(slowdowns, monkeypatch):
    """A running fair clock whose samples of other load are ``slowdowns``, one per sample, then the last forever."""
    readings = iter(slowdowns)
    last = [slowdowns[0]]

    def measure(self):
        last[0] = next(readings, last[0])
        return last[0]

    monkeypatch.setattr(clock, "machine_runnable", lambda: 1)
    monkeypatch.setattr(FairClock, "measure_slowdown", measure)
    monkeypatch.setattr(clock, "CALM_HOLD_SECONDS", 0.2)
    return FairClock(sample_seconds=0.02)


def test_a_second_measurement_after_heavy_load_waits_for_the_load_to_pass(monkeypatch):
    """A first try at slowdown 6 (another run's fork bomb): the retry waits until the slowdown is down
    to 2 or less and has stayed there, not for the brief dip in between."""
    with _clock_seeing([6.0] * 10 + [1.5] * 3 + [6.0] * 10 + [1.5], monkeypatch) as fair:
        waited = fair.wait_for_calm(busy=6.0)
        assert fair.slowdown == 1.5
    assert 0.6 < waited < 5, waited  # 23 samples of 20 ms, then 0.2 s of calm


def test_a_first_measurement_at_ordinary_load_is_retried_at_once(monkeypatch):
    """Slowdown 2 is a CI machine's usual state (tests in parallel): waiting would only cost time."""
    with _clock_seeing([2.0], monkeypatch) as fair:
        assert fair.wait_for_calm(busy=clock.CALM_SLOWDOWN) == 0.0


def test_a_load_that_never_passes_costs_a_bounded_wait(monkeypatch):
    monkeypatch.setattr(clock, "CALM_WAIT_SECONDS", 0.5)
    with _clock_seeing([6.0], monkeypatch) as fair:
        assert 0.5 <= fair.wait_for_calm(busy=6.0) < 2


def test_the_mean_slowdown_of_a_span_is_its_wall_time_over_its_fair_time(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(clock.time, "monotonic", lambda: now[0])
    fair = FairClock()
    since = fair.mark()
    fair._advance(4.0)
    now[0] += 4.0  # 4 wall s at slowdown 4: 1 fair s
    fair._advance(1.0)
    now[0] += 1.0  # 1 wall s at slowdown 1
    assert fair.mean_slowdown(since) == pytest.approx(2.5)


@needs_proc
def test_runnable_tasks_of_a_process_tree_are_counted():
    """Busy grandchildren count towards the tree of the process that started them."""
    # The spinners stop on their own after a minute: one started just as the test kills the others must not spin on for hours.
    spin = "import time\\nend = time.monotonic() + 60\\nwhile time.monotonic() < end:\\n    pass"
    script = f"import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', '{spin}']) for _ in range(2)]; [p.wait() for p in ps]"
    # A session of its own: the spinners are in its process group, and killing the group stops them all, even one
    # the parent started after a kill by parent id would have looked for it.
    parent = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 1 and time.monotonic() < deadline:  # a busy task is runnable even when it waits for a core
            seen = clock.runnable_in_trees([parent.pid])
            time.sleep(0.05)
        assert seen >= 1
        assert clock.runnable_in_trees([os.getpid()]) >= 1, "this thread, reading /proc, is running"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


@needs_proc
def test_a_running_clock_samples_and_stops():
    with FairClock(sample_seconds=0.05) as fair:
        time.sleep(0.3)
        first = fair.now()
        time.sleep(0.1)
        assert fair.now() > first > 0
    assert not fair._thread.is_alive()


def test_read_frame_deadline_is_on_the_given_clock():
    """A frame deadline counts on the clock it is given: one running at half speed waits twice as long."""
    read_end, write_end = os.pipe()
    started = time.monotonic()

    def half_speed():
        return (time.monotonic() - started) / 2

    try:
        with pytest.raises(protocol.FrameTimeout):
            protocol.read_frame(read_end, half_speed() + 0.3, half_speed)
        assert time.monotonic() - started >= 0.6
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_notebook_budget_counts_quiet_machine_seconds_and_can_fail():
    """tests/course_helpers.LoadMeter: a quiet stretch counts about 1:1, and a slow notebook still fails its budget."""
    from pathlib import Path

    from course_helpers import LoadMeter, assert_within_budget, budget_seconds

    with LoadMeter() as meter:
        time.sleep(0.5)
    assert 1.0 <= meter.slowdown <= clock.MAX_SLOWDOWN
    notebook = Path("01_gpu_basics.ipynb")
    assert_within_budget(notebook, budget_seconds(notebook) * meter.slowdown * 0.9, meter)
    with pytest.raises(AssertionError, match="over its"):
        assert_within_budget(notebook, budget_seconds(notebook) * meter.slowdown * 1.1, meter)
