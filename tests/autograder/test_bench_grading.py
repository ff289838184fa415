"""The grading benchmark (scripts/bench_grading.py) and what it reads: the grader's per-phase timings
(autograder/phases.py) and the run's progress bar (autograder/progress.py).

The quick tests use fake clocks; one slow test runs the benchmark itself on two cheap modules.
"""

import importlib.util
import io
import json
import subprocess
import sys

import pytest

from autograder import grading, phases, progress
from course_helpers import REPO_ROOT, facts, on_gpu

spec = importlib.util.spec_from_file_location("bench_grading", REPO_ROOT / "scripts" / "bench_grading.py")
bench_grading = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_grading)


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


# --- The progress bar ----------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "text"), [(0.2, "0 s"), (45, "45 s"), (185, "3 min 05 s"), (4020, "1 h 07 min")])
def test_durations_read_as_seconds_minutes_or_hours(seconds, text):
    assert progress.format_duration(seconds) == text


def test_time_left_is_the_median_per_student_times_those_left_over_the_jobs():
    assert progress.time_left([], 5, 2) is None, "nothing to estimate from yet"
    assert progress.time_left([10.0, 30.0, 20.0], 4, 2) == 40.0  # median 20 s × 4 students / 2 jobs
    assert progress.time_left([10.0, 30.0, 20.0], 1, 2) == 20.0, "one student left keeps one job busy, not two"
    assert progress.time_left([10.0, 30.0, 20.0], 4, 2, since_last=15.0) == 25.0, "counts down from the last student done"
    assert progress.time_left([10.0], 0, 2) == 0.0


def test_progress_line_shows_students_elapsed_and_the_estimate():
    assert progress.progress_line(0, 4, 3, None, width=8) == "[........] 0/4 students, 3 s elapsed, estimating the time left"
    assert progress.progress_line(1, 4, 65, 150, width=8) == "[##......] 1/4 students, 1 min 05 s elapsed, about 2 min 30 s left"
    assert progress.progress_line(3, 4, 90, -5, width=8) == "[######..] 3/4 students, 1 min 30 s elapsed, past the estimate"
    assert progress.progress_line(4, 4, 95, 0.0, width=8) == "[########] 4/4 students, 1 min 35 s elapsed, done"


def test_bar_on_a_terminal_is_redrawn_in_place_around_each_students_line():
    clock, stream = FakeClock(), Terminal()
    bar = progress.ProgressBar(3, 1, stream, clock)
    bar.draw()
    clock.now += 12
    bar.student_done(12.0)
    bar.clear()
    stream.write("[1/3] alice: 10/11 (12 s)\n")  # what the student's line does meanwhile (on stdout in a run)
    bar.draw()
    bar.close()
    text = stream.getvalue()
    assert text.startswith("\r[") and "0/3 students, 0 s elapsed, estimating" in text
    assert "\x1b[K\r\x1b[K[1/3] alice" in text, "the bar is wiped before a student's line"
    assert text.endswith("1/3 students, 12 s elapsed, about 24 s left\x1b[K\n"), text  # median 12 s × 2 left / 1 job


def test_bar_elsewhere_writes_a_plain_line_now_and_then_and_when_done():
    clock, stream = FakeClock(), io.StringIO()
    bar = progress.ProgressBar(2, 2, stream, clock)
    for _ in range(3):
        clock.now += progress.PLAIN_EVERY / 3 - 0.01
        bar.draw()
    assert stream.getvalue() == "", "no line within the first interval"
    clock.now += 1
    bar.draw()
    bar.student_done(30.0)
    bar.draw()
    bar.student_done(31.0)
    bar.draw()
    bar.draw()
    bar.close()
    lines = stream.getvalue().splitlines()
    assert [line.split("] ")[1].split(" students")[0] for line in lines] == ["0/2", "2/2"], lines
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    assert lines[-1].endswith("done")


# --- Where the time goes -------------------------------------------------------------------------


def test_ledger_charges_each_moment_to_the_innermost_phase():
    clock = FakeClock()
    ledger = phases.Ledger(clock)
    clock.now += 1  # other
    with ledger.phase("checks"):
        clock.now += 2
        with ledger.phase("worker start"):
            clock.now += 3
        with ledger.phase("timing"):
            clock.now += 4
            with ledger.phase(phases.WEAK):  # the worker answering while a block is timed: timing
                clock.now += 5
        with ledger.phase(phases.WEAK):
            clock.now += 6
    assert ledger.totals() == {"worker start": 3, "compile": 0, "student's code": 6, "timing": 9, "checks": 2, "other": 1}


def test_every_phase_is_measured_in_the_harness():
    """Each harness method the phases wrap exists (a renamed or moved one would leave its phase unmeasured)."""
    assert phases.install() == []
    with phases.recording() as ledger:
        pass
    assert ledger.unmeasured == []


def test_grader_keeps_timings_where_asked(tmp_path, monkeypatch):
    target = tmp_path / "timings.jsonl"
    report = grading.StudentReport("alice", None, seconds=2.5, started=1.0, phases={"checks": 2.5})
    grading._keep_timings("01_gpu_basics", 2, {"alice": report})
    assert not target.exists()
    monkeypatch.setenv(grading.TIMINGS_ENV, str(target))
    grading._keep_timings("01_gpu_basics", 2, {"alice": report})
    [record] = map(json.loads, target.read_text().splitlines())
    assert record == {"assignment": "01_gpu_basics", "jobs": 2, "student": "alice", "started": 1.0, "seconds": 2.5,
                      "phases": {"checks": 2.5}, "unmeasured": [], "grader_error": ""}


def test_slowest_items_are_the_reference_students_median_seconds_in_the_calmest_run():
    run = lambda jobs, scale: {"jobs": jobs, "students": [  # noqa: E731
        {"kind": "reference", "item_seconds": {"a": 1.0 * scale, "b": 9.0 * scale, "c": 4.0 * scale}},
        {"kind": "reference", "item_seconds": {"a": 3.0 * scale, "b": 7.0 * scale, "c": 6.0 * scale}},
        {"kind": "release", "item_seconds": {"a": 50.0, "b": 0.0, "c": 0.0}}]}
    assert bench_grading.slowest_items([run(2, 10.0), run(1, 1.0)], count=2) == [("b", 8.0), ("c", 5.0)]
    assert bench_grading.slowest_items([{"jobs": 1, "students": []}]) == []


def test_wall_per_reference_student_shares_the_machine_among_the_jobs():
    """Three reference students of 30, 40 and 50 s graded two at a time occupy 20 s of wall time each; releases are left out."""
    students = [{"kind": "reference", "seconds": 30.0}, {"kind": "reference", "seconds": 40.0}, {"kind": "reference", "seconds": 50.0},
                {"kind": "release", "seconds": 2.0}]
    assert bench_grading.reference_wall(students, 2) == pytest.approx(20.0)
    assert bench_grading.reference_wall(students, 1) == pytest.approx(40.0)
    assert bench_grading.reference_wall(students[3:], 2) is None


# --- The benchmark, end to end -------------------------------------------------------------------

CHEAP_MODULES = ("01_gpu_basics", "05_streams")  # the two quickest runs at 2 jobs of modules 01-05 (make bench-grading)


@pytest.mark.slow
def test_benchmark_grades_reference_and_release_and_writes_the_table(tmp_path):
    out = tmp_path / "bench.md"
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "bench_grading.py"), "--modules", *(m[:2] for m in CHEAP_MODULES),
                           "--copies", "1", "--jobs", "2", "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    table, data = out.read_text(), json.loads(out.with_suffix(".json").read_text())
    assert data["machine"]["cores"] >= 1 and data["machine"]["cpu"]
    assert [result["module"] for result in data["modules"]] == list(CHEAP_MODULES)
    for result in data["modules"]:
        module = result["module"]
        assert f"| {module} | 2 |" in table
        [run] = result["runs"]
        assert run["returncode"] == 0 and run["problems"] == []
        scores = {student["student"]: student["score"] for student in run["students"]}
        assert scores == {"ref1": facts(module).full_marks(on_gpu()), "rel1": 0.0}, "read from each student's grading.json"
        for student in run["students"]:
            assert student["seconds"] > 0 and sum(student["phases"].values()) == pytest.approx(student["seconds"])
        summary = result["summary"]["runs"]["2"]
        assert summary["wall"] > summary["per_student"]["max"] > 0 and summary["students_per_minute"] > 0
        [reference] = [student["seconds"] for student in run["students"] if student["kind"] == "reference"]
        assert summary["reference_wall"] == pytest.approx(reference / 2), "two students graded at once"
        assert sum(result["summary"]["shares"].values()) == pytest.approx(1.0)
        slowest = result["summary"]["slowest_items"]
        assert slowest and {grade_id for grade_id, _ in slowest} <= set(facts(module).points), "items of the module, by grade_id"
        assert f"| {module} | {slowest[0][0]} {slowest[0][1]:.1f} s" in table
