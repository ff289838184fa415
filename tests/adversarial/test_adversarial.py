"""Adversarial submissions against the autograder (module 01): each verdict is exact.

The submissions are built by ``tests/adversarial.py``. They are graded through
``autograder.grading.grade_assignment`` in a scratch copy of the course, a few grading runs
for the whole module (see the fixtures), with tight limits so that hangs stay cheap.

Student code runs only inside the grader's sandboxed worker, never in this process; any
sandbox process still alive once grading returns is counted (a test asserts there is none)
and killed.

Tests marked ``xfail`` pin autograder bugs still open: a strict one passes (and so fails the
suite as XPASS) once its bug is fixed; then drop the marker.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
import torch

import adversarial as adv
import course_helpers
from autograder import sandbox
from autograder.clock import FairClock, children
from autograder.grading import StudentReport, grade_assignment
from autograder.nbgrader_cli import scripts_on_path

ASSIGNMENT = adv.ASSIGNMENT
ITEMS = adv.ITEMS
ON_GPU = torch.cuda.is_available()
# What the reference earns on this grader: GPU-only items wait for a GPU regrade on a CPU grader.
FULL_MARKS = sum(points for grade_id, points in ITEMS.items() if ON_GPU or grade_id not in adv.GPU_ITEMS)
NAMESPACES = sandbox.namespaces_available()
pytestmark = pytest.mark.slow  # every test here but the plan-builder ones grades submissions
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason="the full sandbox needs root, unshare and setpriv (Linux)")

# The main run holds no hang, so its limits only need to be safe for a correct answer on a
# slow, busy CI machine (a correct speed item takes 5-15 s there). Memory is capped low so
# that the memory hog fails fast without pushing a small machine into the OOM killer.
LIMITS = sandbox.Limits(cell_seconds=20, item_seconds=40, notebook_seconds=240, memory_bytes=2 * 1024**3)
# The busy run's hangs: every hang costs item_seconds (or cell_seconds while loading), so they are kept short.
# The correct answers graded beside them get the main run's LIMITS: the same limits as on a quiet machine.
# (Graded with these, a correct speed item measured twice under load, 27 s of wall time, timed out at 8 s.)
# The hangs' own speed item comes before their hang: a correct one needed more than 8 (once, under the suite's
# load, it took 33 s of wall time and timed out at 8 quiet-machine seconds: its blocks are sized in CPU time),
# so theirs is the slow loop, which fails at its first measurement (1-4 s of wall time), and 8 covers it.
HANG_LIMITS = sandbox.Limits(cell_seconds=10, item_seconds=8, notebook_seconds=120, memory_bytes=2 * 1024**3)
# The bomb lives until its cell's time-out (cell_seconds), twice (the cell is retried once in a fresh
# worker): long enough for witness_2's worker to start while it runs (witness_1, graded alongside the
# bomb from the start, took 9 s of a 47 s run here).
FORK_BOMB_LIMITS = sandbox.Limits(cell_seconds=10, item_seconds=40, notebook_seconds=150, memory_bytes=2 * 1024**3)
# On a CUDA machine the sandbox sets no address-space cap (CUDA reserves huge virtual ranges),
# so a memory hog would really exhaust the machine's memory: it is only run where the cap holds.
MEMORY_CAPPED = not torch.cuda.is_available()

PASSED, FAILED, TIMEOUT, CRASHED, NEEDS_GPU = "passed", "failed", "timeout", "crashed", "needs_gpu"


# -- grading runs ------------------------------------------------------------------------


@dataclass
class Run:
    course: Path
    submissions: Path
    reports: dict[str, StudentReport]
    leftovers: list[str]  # sandbox processes still alive once grading returned (then killed)
    seconds: float
    fair_seconds: float  # quiet-machine seconds: what grading took, less what other load on this machine cost it
    extra: dict = field(default_factory=dict)


def make_course(root: Path, *, released: bool = True) -> Path:
    """A scratch course: the nbgrader config, the module's source and its release (see
    :func:`course_helpers.make_course` for ``released``)."""
    return course_helpers.make_course(root / "course", ASSIGNMENT, released=released)


def grade(root: Path, students: dict[str, dict[str, bytes]] | None, *, limits=LIMITS, jobs=2, gradebook=True, course=None, submissions=None) -> Run:
    """Grade ``students`` (built by :mod:`adversarial`) in ``root``; reap what the sandbox leaves behind.

    ``submissions``: an already prepared folder, instead of one written from ``students``.
    """
    course = course or make_course(root, released=gradebook)
    submissions = submissions or adv.write_submissions(root / "submissions", students)
    names = {entry.name for entry in submissions.iterdir()} | {entry.stem for entry in submissions.iterdir()}
    names |= {name.split("_")[0] for name in names}
    started_boot, started = boot_clock(), time.monotonic()
    with this_test_clock() as clock:
        try:
            reports = grade_assignment(ASSIGNMENT, submissions, course_root=course, jobs=jobs, limits=limits, gradebook=gradebook,
                                       progress=None, scratch_parent=root)
        finally:
            seconds, fair_seconds = time.monotonic() - started, clock.now()
            leftovers = reap_sandbox_processes(names, started_boot, root)
    return Run(course, submissions, reports, leftovers, seconds, fair_seconds)


def this_test_clock() -> FairClock:
    """A clock that does not count the load of other tests: all that this test started (the
    grading pool, the workers, a fork bomb) is this test's own load."""
    return FairClock(lambda: [os.getpid()])


def boot_clock() -> float:
    """Seconds since boot (CLOCK_BOOTTIME, what /proc/<pid>/stat counts a process's start in).

    Not wall time: a clock stepped or slewed while the suite runs (a fresh CI machine's time being
    synchronised) would move ``time.time()`` against the boot time read once, and every process
    started since would look older than it is, and be missed by the scans below.
    """
    return float(Path("/proc/uptime").read_text().split()[0]) if os.path.exists("/proc/uptime") else 0.0


_TICKS = os.sysconf("SC_CLK_TCK")


def _started_at(stat: str) -> float:
    """When a process started, in :func:`boot_clock` seconds, from its /proc/<pid>/stat line."""
    return int(stat.rsplit(")", 1)[1].split()[19]) / _TICKS


def _worker_folder(scratch_parent: Path) -> re.Pattern:
    """A worker's folder in a grading run's scratch, which :func:`grade` puts in its own ``root``:
    <root>/grade-<assignment>-XXXX/work/<student>[.reference|.kernel-...]. Only this test's: a test on the
    other pytest worker may grade a student of the same name at the same time."""
    return re.compile(rf"{re.escape(str(scratch_parent.resolve()))}/grade-{re.escape(ASSIGNMENT)}-[^/]+/work/"
                      r"(?P<student>[^/.]+)(?:\.(?:reference|(?:kernel|profile|njit|answers)-[^/]+))?$")


def _worker_folders(pid: str):
    """Where process ``pid`` says it belongs, lazily: its working folder (a worker forked by the fork server
    started with the server's HOME), then its HOME as it started (what processes the student's code started
    inherit). The working folder first: reading it takes no lock of the process, while reading its environment
    takes its memory map's, which a fork bomb's processes keep busy, and a scan of them all can then take longer
    than a worker lives."""
    with contextlib.suppress(OSError):
        yield os.readlink(f"/proc/{pid}/cwd")  # seen from here: /mnt/sandbox-root/<the folder>
    with contextlib.suppress(OSError):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        yield from (item[5:].decode(errors="replace") for item in environ if item.startswith(b"HOME="))


def _process_ids() -> list[str]:
    """The pids in /proc, newest first: the processes a test is looking for are recent ones."""
    return sorted((entry for entry in os.listdir("/proc") if entry.isdigit()), key=int, reverse=True) if os.path.isdir("/proc") else []


def _descendants(pid: int) -> list[str]:
    """The pids of every process below ``pid`` in the process tree, newest first."""
    found, pending = set(), [pid]
    while pending:
        for child in children(pending.pop()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return [str(child) for child in sorted(found, reverse=True)]


def _sandbox_processes(students: set[str], since: float, scratch_parent: Path, among: list[str] | None = None) -> list[tuple[int, bool, str]]:
    """(pid, whether it is its PID namespace's init, student) of the sandbox processes that this
    test started: their HOME or working folder is a worker folder of one of ``students`` in a run
    under ``scratch_parent``, and they started after ``since`` (a :func:`boot_clock` reading).
    ``among``: only these pids (default: every process, as a leftover may have left the tree)."""
    pattern, found = _worker_folder(scratch_parent), []
    for entry in _process_ids() if among is None else among:
        match = next(filter(None, map(pattern.search, _worker_folders(entry))), None)  # lazily: environ only when cwd does not match
        if match is None or match["student"] not in students:
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        started = _started_at(stat)
        if started < since - 1:
            continue
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        found.append((int(entry), bool(nspid) and nspid[-1] == "1", match["student"]))
    return found


def _processes_under(scratch_parent: Path) -> list[tuple[int, float, list[str]]]:
    """(pid, seconds since boot it started at, where it says it belongs) of every process whose
    HOME or working folder lies under ``scratch_parent``: what a failed scan is explained with."""
    found = []
    for entry in _process_ids():
        folders = [folder for folder in _worker_folders(entry) if str(scratch_parent.resolve()) in folder]
        with contextlib.suppress(OSError):
            if folders:
                found.append((int(entry), _started_at(Path(f"/proc/{entry}/stat").read_text()), folders))
    return found


def reap_sandbox_processes(students: set[str], since: float, scratch_parent: Path, grace: float = 5.0) -> list[str]:
    """Kill the sandbox processes of this run that outlived grading; return how many each student left.

    A process that dies within ``grace`` seconds after grading returned does not count.
    Killing a PID namespace's init kills everything in its namespace (fork bombs included).
    """
    deadline = time.monotonic() + grace
    while (found := _sandbox_processes(students, since, scratch_parent)) and time.monotonic() < deadline:
        time.sleep(0.2)
    per_student: dict[str, int] = {}
    for _, _, student in found:
        per_student[student] = per_student.get(student, 0) + 1
    for _ in range(50):  # a fork bomb may still fork while being killed
        if not found:
            break
        for pid, _, _ in sorted(found, key=lambda entry: not entry[1]):  # namespace inits first
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        found = _sandbox_processes(students, since, scratch_parent)
    assert not found, f"could not kill the sandbox processes left by grading: {found[:10]}"
    return [f"{count} process(es) of {student}" for student, count in sorted(per_student.items())]


def file_digests(*paths: Path) -> dict[str, str]:
    digests = {}
    for path in paths:
        if not path.exists():  # a fresh clone has no gradebook.db yet: that it stays absent is checked too
            digests[str(path)] = "absent"
            continue
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            digests[str(file)] = hashlib.sha256(file.read_bytes()).hexdigest()
    return digests


def repo_digests() -> dict[str, str]:
    root = adv.REPO_ROOT
    return file_digests(root / "solutions" / ASSIGNMENT, root / "assignments" / ASSIGNMENT, root / "gradebook.db", root / "nbgrader_config.py")


def gradebook_scores(course: Path, students) -> dict[str, dict[str, float]]:
    """Per-item scores nbgrader holds for ``students`` (autograded items; their max scores are checked)."""
    from nbgrader.api import Gradebook

    scores = {}
    with scripts_on_path(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in students:
            notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            grades = [grade for grade in notebook.grades if grade.name in ITEMS]
            assert {grade.name: float(grade.max_score) for grade in grades} == ITEMS, f"{student}: wrong items or points in the gradebook"
            scores[student] = {grade.name: float(grade.score) for grade in grades}
    return scores


# -- expectations ------------------------------------------------------------------------


def expect(**changes) -> dict[str, set[str]]:
    """The accepted outcomes of each item: passed, except ``grade_id=outcome`` (or a set of outcomes).

    An item scores its full points when passed and 0 otherwise (checked by :func:`check_items`).
    """
    expected = {grade_id: {PASSED} for grade_id in ITEMS}
    for grade_id, outcome in changes.items():
        expected[grade_id] = {outcome} if isinstance(outcome, str) else set(outcome)
    for grade_id in adv.GPU_ITEMS:
        # A CPU grader leaves GPU-only items for a regrade whatever the answer; a GPU grader
        # checks time_call's synchronisation, which fares like time_call itself here.
        expected[grade_id] = expected["test_time_call"] if ON_GPU else {NEEDS_GPU}
    return expected


BOTH_PAIRWISE_FAIL = dict(test_pairwise_correct=FAILED, test_pairwise_speed=FAILED)
SPEED_FAILS = dict(test_pairwise_speed=FAILED)

EXPECTED = {
    "correct": expect(),
    "untouched": expect(**{grade_id: FAILED for grade_id in ITEMS}),
    "wrong_sqrt": expect(**BOTH_PAIRWISE_FAIL),  # the speed item checks correctness first
    "slow_loop": expect(**SPEED_FAILS),
    "calls_the_reference": expect(**BOTH_PAIRWISE_FAIL),  # grader-side: reference_sq_dists does not exist where the answer runs
    "broadcasting_1": expect(),
    "broadcasting_2": expect(),
    "segfault": expect(test_pairwise_correct=CRASHED, test_pairwise_speed=CRASHED),
    "exit_in_offload": expect(test_offload=CRASHED),
    # With a 2 GiB address-space limit the allocation fails (RuntimeError, "failed"); a kill
    # by the kernel would be "crashed". Either way no points.
    "memory_hog": expect(test_pairwise_correct={FAILED, CRASHED}, test_pairwise_speed={FAILED, CRASHED}),
    # Breaking time.perf_counter in the worker breaks the student's own time_call (it measures 0 s),
    # never the grader's clock: the loop still fails the speed item.
    "patched_clock": expect(test_time_call=FAILED, **SPEED_FAILS),
    "patched_timing": expect(**SPEED_FAILS),
    "patched_checks": expect(**BOTH_PAIRWISE_FAIL),
    "input_transformer": expect(**BOTH_PAIRWISE_FAIL),
    "patched_baseline": expect(**SPEED_FAILS),
    # Stale cached results for reused addresses may also fail the correctness item.
    "cache_by_address": expect(test_pairwise_correct={PASSED, FAILED}, **SPEED_FAILS),
    "cache_by_value": expect(**SPEED_FAILS),
    "planted_modules": expect(),
    "snooping": expect(),
    "noisy": expect(),
    "forged_done": expect(**SPEED_FAILS),
    "precomputed": expect(**SPEED_FAILS),
}
UNREADABLE = {"malformed"}

# Speed-item failures that must come from the timing (not from a wrong output).
TOO_SLOW = ["slow_loop", "patched_clock", "patched_timing", "patched_baseline", "cache_by_value", "precomputed"]


def check_items(report: StudentReport, expected: dict[str, set[str]]) -> None:
    assert report.result is not None, f"{report.student} was not graded: {report.error}"
    problems = []
    for grade_id, outcomes in expected.items():
        item = report.items.get(grade_id)
        if item is None:
            problems.append(f"{grade_id}: missing from the result")
        elif item.outcome not in outcomes or item.score != (ITEMS[grade_id] if item.outcome == PASSED else 0.0) or item.points != ITEMS[grade_id]:
            problems.append(f"{grade_id}: got {item.outcome} {item.score:g}/{item.points:g}, expected {'/'.join(sorted(outcomes))} "
                            f"({item.message[:300]}; {item.seconds:.1f} s)")
    extra = set(report.items) - set(expected)
    if extra:
        problems.append(f"unexpected items {sorted(extra)}")
    assert not problems, f"{report.student}: " + "; ".join(problems) + f"; notes: {report.notes}"


# -- the builders (no grading) ----------------------------------------------------------


def test_builders_make_valid_notebooks(tmp_path):
    """Every built notebook is valid nbformat (except the deliberately truncated one), so each
    verdict below is about the grader, not about a broken test input."""
    students = {**adv.variants(tmp_path / "course", tmp_path / "submissions"), **adv.hanging_variants(),
                **adv.stalling_variants(), **adv.fork_bomb_variants()}
    for student, files in students.items():
        for filename, data in files.items():
            if filename.endswith(".ipynb") and student != "malformed":
                nbformat.validate(nbformat.reads(data.decode(), as_version=4))
    with pytest.raises(nbformat.reader.NotJSONError):
        nbformat.reads(students["malformed"]["01_gpu_basics.ipynb"].decode(errors="replace"), as_version=4)
    for submitted, _ in adv.structural_variants().values():
        nbformat.validate(submitted)
    split, _ = adv.structural_variants()["split_test"]
    halves = [cell for cell in split.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_offload"]
    assert len(halves) == 2 and all(cell.source.strip() for cell in halves)


# -- test cells changed by the student: the plan the grader builds ignores them -----------


@pytest.mark.parametrize("student", sorted(adv.structural_variants()))
def test_changed_test_cells_change_nothing_graded(student):
    """Deleted, edited, split or retyped tests: the grader runs the source's tests and the same
    student code as for the notebook it must grade like (so the verdicts are that notebook's)."""
    from autograder import skeleton

    source = adv.reference()
    submitted, graded_like = adv.structural_variants()[student]
    plan, expected = skeleton.make_plan(source, submitted), skeleton.make_plan(source, graded_like)
    assert plan.items == expected.items, "the tests must come from the source, whatever the student did to them"
    assert plan.student_cells == expected.student_cells, "only the student's answers (and extra cells) reach their worker"
    assert plan.api_names == expected.api_names and plan.context == expected.context


def test_renamed_notebook_is_found_with_a_note(tmp_path):
    """A student folder whose only notebook has another name is graded as the assignment, with a note."""
    from autograder.grading import find_submissions

    folder = tmp_path / "subs" / "rena"
    folder.mkdir(parents=True)
    (folder / "my_work.ipynb").write_bytes(adv.notebook_bytes(adv.reference()))
    [submission] = find_submissions(tmp_path / "subs", ASSIGNMENT, tmp_path / "scratch")
    assert submission.student == "rena" and submission.notebook == folder / "my_work.ipynb" and not submission.error
    assert submission.notes == [f"renamed notebook: graded my_work.ipynb as {ASSIGNMENT}.ipynb"]


def test_nbgraders_exchange_files_are_carried_only_when_well_formed(tmp_path):
    """An nbgrader-collected submission keeps its timestamp and feedback secret (nbgrader's gradebook and
    release_feedback need them); a forged or broken one is left out, so it cannot fail the gradebook run of everyone."""
    from autograder.grading import SECRET_FILE, TIMESTAMP_FILE, exchange_files, find_submissions

    for student, timestamp, secret in (("ann", "2026-12-06 23:50:01.123456 UTC", "0f" * 64), ("bob", "after the deadline, honest", "../../x")):
        folder = tmp_path / "submitted" / student / ASSIGNMENT  # the layout nbgrader collect writes
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_bytes(adv.notebook_bytes(adv.reference()))
        (folder / TIMESTAMP_FILE).write_text(timestamp + "\n")
        (folder / SECRET_FILE).write_text(secret)
    empty = tmp_path / "submitted" / "cy" / ASSIGNMENT  # submitted without the notebook: graded 0, and its feedback released
    empty.mkdir(parents=True)
    (empty / TIMESTAMP_FILE).write_text("2026-12-07 00:01:02.000001 UTC")
    (empty / SECRET_FILE).write_text("ab" * 64)
    found = {submission.student: exchange_files(submission) for submission in find_submissions(tmp_path / "submitted", ASSIGNMENT, tmp_path / "scratch")}
    assert found == {"ann": {TIMESTAMP_FILE: "2026-12-06 23:50:01.123456 UTC", SECRET_FILE: "0f" * 64}, "bob": {},
                     "cy": {TIMESTAMP_FILE: "2026-12-07 00:01:02.000001 UTC", SECRET_FILE: "ab" * 64}}


@contextlib.contextmanager
def listening_port():
    """A TCP port on this machine's 127.0.0.1 that accepts connections: the snooper's network probe tries it."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.listen(8)
        yield server.getsockname()[1]


# -- the main run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("adversarial")
    course = make_course(root)
    token = uuid.uuid4().hex[:12]
    repo_before = repo_digests()
    course_before = file_digests(course / "solutions", course / "nbgrader_config.py")
    with listening_port() as port, snooping_targets(token) as probes:
        students = adv.variants(course, root / "submissions", token, port)
        if not MEMORY_CAPPED:
            del students["memory_hog"]
        if not NAMESPACES:  # with reduced isolation nothing is hidden: the snoopers would really write
            del students["snooping"]
        run = grade(root, students, course=course)
        run.extra["probes_found"] = [str(p) for p in probes if p.exists()]
    run.extra.update(repo_before=repo_before, course_before=course_before, students=students)
    return run


@contextlib.contextmanager
def snooping_targets(token: str):
    """Plant the copies of the course the snooper looks for outside the course (removed afterwards), and
    yield the files it tries to write in the machine's shared folders (removed afterwards, should it manage)."""
    probes = [Path(folder) / f"adversarial-probe-{token}" for folder in adv.SHARED_WRITABLE]
    planted = adv.planted_copies(token)
    try:
        for copy in planted:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(adv.REPO_ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.py", copy)
        yield probes
    finally:
        for probe in probes:
            with contextlib.suppress(OSError):
                probe.unlink()
        for copy in planted:
            shutil.rmtree(copy.parents[2], ignore_errors=True)


def test_every_submission_gets_a_report(main_run):
    students = set(main_run.extra["students"])
    assert students <= set(EXPECTED) | UNREADABLE, f"no expectation for {students - set(EXPECTED) - UNREADABLE}"
    assert set(main_run.reports) == students, f"missing: {students - set(main_run.reports)}, unexpected: {set(main_run.reports) - students}"


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_verdicts(main_run, student):
    if student not in main_run.extra["students"]:
        pytest.skip(f"{student} is not graded on this machine (see main_run)")
    check_items(main_run.reports[student], EXPECTED[student])


def test_reference_earns_every_point(main_run):
    report = main_run.reports["correct"]
    assert report.score == FULL_MARKS, {grade_id: (item.outcome, item.message) for grade_id, item in report.items.items()}
    assert report.notes == [] and report.error == ""


def test_untouched_release_earns_nothing(main_run):
    report = main_run.reports["untouched"]
    assert report.score == 0.0
    graded = {g: i for g, i in report.items.items() if i.outcome != NEEDS_GPU}  # a CPU grader leaves GPU items
    assert all("NotImplementedError" in item.message for item in graded.values()), {g: i.message for g, i in graded.items()}


def test_broadcasting_verdict_is_stable(main_run):
    """Identical borderline-fast answers, graded separately: the same verdict each time."""
    verdicts = {student: {g: (i.outcome, i.score) for g, i in main_run.reports[student].items.items()}
                for student in ("broadcasting_1", "broadcasting_2")}
    assert len({tuple(sorted(v.items())) for v in verdicts.values()}) == 1, verdicts


@pytest.mark.parametrize("student", TOO_SLOW)
def test_slow_answers_fail_on_speed(main_run, student):
    report = main_run.reports[student]
    item = report.items["test_pairwise_speed"]
    needed = "4" if report.result.device_class == "cpu" else "10"
    assert f"need {needed}×" in item.message, f"{student}: the speed item should fail on the measured speedup, got {item.outcome}: {item.message}"


def test_forged_done_is_caught_not_just_broken(main_run):
    """The forging cell must really run (no TypeError from a changed message): the grader then
    catches that the outputs did not exist when the clock stopped."""
    report = main_run.reports["forged_done"]
    item = report.items["test_pairwise_speed"]
    assert item.outcome == FAILED and "TypeError" not in item.message and "need " not in item.message, (item.message, report.notes)
    assert not any("forged" in note or "raised" in note for note in report.notes), report.notes


def test_wrong_answer_fails_speed_item_on_correctness(main_run):
    item = main_run.reports["wrong_sqrt"].items["test_pairwise_speed"]
    assert "a timed output" in item.message, item.message


def test_a_reference_of_the_tests_is_named_as_out_of_reach(main_run):
    """The NameError says why the reference is missing: a grader-side cell (issue 46), not an answer that failed to load."""
    if "calls_the_reference" not in main_run.extra["students"]:
        pytest.skip("not graded on this machine (see main_run)")
    items = main_run.reports["calls_the_reference"].items
    assert all("grader-side setup cell" in items[grade_id].message for grade_id in adv.PAIRWISE_ITEMS), {g: items[g].message for g in items}


def test_crash_messages_name_the_cause(main_run):
    messages = {f"segfault {g}": main_run.reports["segfault"].items[g].message for g in adv.PAIRWISE_ITEMS}
    messages["exit_in_offload test_offload"] = main_run.reports["exit_in_offload"].items["test_offload"].message
    wanted = {"segfault": "killed by signal 11", "exit_in_offload": "exited with status 3"}
    wrong = {key: message for key, message in messages.items() if wanted[key.split()[0]] not in message}
    assert wrong == {}, wrong


@pytest.mark.skipif(not MEMORY_CAPPED, reason="no address-space cap on a CUDA machine")
def test_memory_hog_hits_the_limit(main_run):
    items = main_run.reports["memory_hog"].items
    for grade_id in adv.PAIRWISE_ITEMS:
        message = items[grade_id].message
        assert "allocate" in message or "memory" in message.lower() or items[grade_id].outcome == CRASHED, message


def test_malformed_notebook_is_reported_not_graded(main_run):
    report = main_run.reports["malformed"]
    assert report.result is None and report.error.startswith("unreadable notebook"), (report.result, report.error)
    assert report.score == 0.0 and report.items == {}


def test_input_transformer_cell_only_costs_itself(main_run):
    notes = main_run.reports["input_transformer"].notes
    assert any("raised AttributeError" in note for note in notes), notes


def test_planted_modules_do_not_shadow_packages(main_run):
    report = main_run.reports["planted_modules"]
    assert report.score == FULL_MARKS and not any("planted" in note for note in report.notes), report.notes


@needs_namespaces
def test_sandbox_hides_everything_but_the_submission(main_run):
    """The snooping student's four cells each end with a note: ``LEAKED: …`` if it could read, list or
    write a private path of the course, a path outside the course (the sandbox is an allow-list: a second
    copy of the course elsewhere on the machine, one in the grader's home), the file behind a link in
    the submission folder, or if its process inherited an open file or could see a process it did not
    start (a fork server's socket, a waiter's status pipe), or reach a network; else ``PROBED …``, which
    proves the cell ran to its end."""
    check_snooper_held(main_run.reports["snooping"], main_run.extra["probes_found"], "namespaces")


def check_snooper_held(report: StudentReport, probes_found: list[str], isolation: str) -> None:
    assert report.result.isolation == isolation
    leaks = [note for note in report.notes if adv.LEAK_MARKER in note]
    assert leaks == [] and probes_found == [], (leaks, probes_found)
    probed = [note for note in report.notes if adv.PROBED_MARKER in note]
    assert len(probed) == 4, report.notes
    assert report.score == FULL_MARKS


def test_repository_and_course_sources_unchanged(main_run):
    assert repo_digests() == main_run.extra['repo_before'], "grading changed files of the repository"
    course_now = file_digests(main_run.course / "solutions", main_run.course / "nbgrader_config.py")
    assert course_now == main_run.extra["course_before"], "grading changed the course's sources"


def test_gradebook_intact_and_exact(main_run):
    """Some 25 submissions graded in parallel (two jobs): nbgrader's gradebook holds each item of each
    of them exactly as its report says (which test_verdicts checks against the expectations)."""
    gradebook = (main_run.course / "gradebook.db").read_bytes()
    assert adv.WRITE_MARKER not in gradebook, "a student wrote into the gradebook"
    students = sorted(student for student, report in main_run.reports.items() if report.result is not None)
    assert len(students) >= 20, students
    recorded = gradebook_scores(main_run.course, students + sorted(UNREADABLE))
    wrong = {student: (recorded.get(student), {g: i.score for g, i in main_run.reports[student].items.items()})
             for student in students if recorded.get(student) != {g: i.score for g, i in main_run.reports[student].items.items()}}
    assert wrong == {}, f"gradebook (left) differs from the reports (right): {wrong}"
    assert recorded["correct"] == {g: p if ON_GPU or g not in adv.GPU_ITEMS else 0.0 for g, p in ITEMS.items()}
    assert all(score == 0 for score in recorded["malformed"].values()) and set(recorded["malformed"]) == set(ITEMS), recorded["malformed"]


def test_no_sandbox_process_outlives_grading(main_run):
    assert main_run.leftovers == [], f"still running after grading returned: {main_run.leftovers}"


# Each class below is one grading run and its checks: pytest-xdist's --dist loadscope sends
# each class to one worker, so the runs proceed in parallel and each happens once.


@pytest.fixture(scope="module")
def fork_bomb_run(tmp_path_factory):
    if not NAMESPACES:
        pytest.skip("a fork bomb is only safe inside the namespace sandbox")
    return grade(tmp_path_factory.mktemp("forkbomb"), adv.fork_bomb_variants(), limits=FORK_BOMB_LIMITS, gradebook=False)


def assert_stopped_as_a_fork_bomb(report):
    """The bomb's cell was skipped: stopped when seen holding session.FORK_BOMB_PROCESSES processes (ProcessWatch),
    or at its time limit, as before the watch. The watch is a saving, the time limit the guarantee: the watch's
    first version, waiting for most of the process limit, never fired beside a second CI run (docs/ci-profile.md);
    tests/autograder/test_harness.py holds the watch itself to exact notes."""
    watched = "as a fork bomb does, and was stopped; it was skipped"
    assert any(watched in note or note.endswith("ran past its time limit; it was skipped") for note in report.notes), report.notes


class TestForkBomb:
    def test_fork_bomb_grading_finishes(self, fork_bomb_run):
        assert set(fork_bomb_run.reports) == {"fork_bomb", "witness_1", "witness_2"}
        assert fork_bomb_run.fair_seconds < 150, f"grading three students took {fork_bomb_run.fair_seconds:.0f} quiet-machine s"
        assert fork_bomb_run.leftovers == [], f"still running after grading returned: {fork_bomb_run.leftovers}"

    def test_fork_bomb_student_is_graded(self, fork_bomb_run):
        """The bomb runs while loading; its cell is skipped after cell_seconds, the answers are graded."""
        check_items(fork_bomb_run.reports["fork_bomb"], {grade_id: {PASSED, FAILED, CRASHED, TIMEOUT, NEEDS_GPU} for grade_id in ITEMS})

    def test_fork_bomb_student_keeps_points_and_is_told(self, fork_bomb_run):
        report = fork_bomb_run.reports["fork_bomb"]
        check_items(report, expect())
        assert_stopped_as_a_fork_bomb(report)

    def test_fork_bomb_does_not_affect_other_students(self, fork_bomb_run):
        check_items(fork_bomb_run.reports["witness_1"], expect())
        check_items(fork_bomb_run.reports["witness_2"], expect(**{grade_id: FAILED for grade_id in ITEMS}))


# -- the grading pool --------------------------------------------------------------------


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _pool_processes(working: bool = False) -> list[int]:
    """The grading pool's processes this process started: spawned children, or the children of its
    multiprocessing fork server (the pool forks them there, see ``grading._pool_context``); with
    ``working``, only those that have started a process of their own (a student is being graded)."""
    candidates = []
    for pid in children(os.getpid()):
        cmdline = _cmdline(pid)
        if b"spawn_main" in cmdline:
            candidates.append(pid)
        elif b"multiprocessing.forkserver" in cmdline:
            candidates += children(pid)
    return [pid for pid in candidates if not working or children(pid)]


def _kill_pool_processes() -> list[int]:
    """Kill this process's grading pool (a hung or a deliberately broken one); return their pids."""
    killed = []
    for pid in _pool_processes():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def _outcome_summary(outcome: dict) -> str:
    """What a grading in a thread ended with, in a line: its error, or each student's outcome and notes."""
    if "error" in outcome:
        return f"grading raised {outcome['error']!r}"
    if "run" not in outcome:
        return "grading had not returned"
    return "; ".join(f"{name}: score {report.score}, error {report.error or report.grader_error or '-'}, notes {report.notes}"
                     for name, report in outcome["run"].reports.items())


def _grade_in_thread(**kwargs) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run():
        try:
            outcome["run"] = grade(**kwargs)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


class TestStalledProtocol:
    def test_partial_frame_does_not_hang_grading(self, tmp_path):
        limits = sandbox.Limits(cell_seconds=5, item_seconds=10, notebook_seconds=30, memory_bytes=2 * 1024**3)
        # A sound grader needs about 15 quiet-machine seconds (a 5 s cell time-out, a retry, quick
        # items) and stops at the notebook limit, 30 s; how much wall time that is depends on the load.
        started = time.monotonic()
        with this_test_clock() as clock:
            thread, outcome = _grade_in_thread(root=tmp_path, students=adv.stalling_variants(), limits=limits, gradebook=False)
            while thread.is_alive() and clock.now() < 60 and time.monotonic() - started < 600:
                thread.join(timeout=1)
        hung = thread.is_alive()
        if hung:
            _kill_pool_processes()
            thread.join(timeout=60)
        assert not hung, f"grading was still running after 60 quiet-machine seconds (the pool was killed; then: {outcome})"
        assert "run" in outcome, outcome.get("error")
        reports = outcome["run"].reports
        check_items(reports["stall_witness"], expect(**{grade_id: FAILED for grade_id in ITEMS}))
        assert reports["partial_frame"].result is not None, reports["partial_frame"].error


class TestGraderFailures:
    """The grader's own failures are never a student's 0: reported as grader errors, never recorded."""

    def test_worker_that_cannot_start_stops_grading_and_records_nothing(self, tmp_path, capsys):
        """64 MB of address space: no worker can even import torch, before any student code.
        The first failure stops the run (every other would fail alike); no one gets a score."""
        from autograder import cli

        if not MEMORY_CAPPED:
            pytest.skip("no address-space cap on a CUDA grader")
        course = make_course(tmp_path, released=False)
        submissions = adv.write_submissions(tmp_path / "subs", {
            "ann": {f"{ASSIGNMENT}.ipynb": adv.notebook_bytes(adv.reference())},
            "bob": {f"{ASSIGNMENT}.ipynb": adv.RELEASE_PATH.read_bytes()},
        })
        code = cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--memory-gb", "0.0625", "--cell-seconds", "20"])
        printed = capsys.readouterr()
        assert code == 3, printed
        assert "stopped, nothing was graded or recorded" in printed.err and "could not start" in printed.err, printed.err
        assert "memory" in printed.err.lower(), "the worker's own log says why"
        assert not (course / "autograded").exists(), "nothing may be recorded for anyone"
        if (course / "gradebook.db").exists():
            from autograder.nbgrader_cli import open_gradebook

            with open_gradebook(course) as gradebook:
                assert gradebook.students == [], "no student may get a score from a grader failure"

    def test_a_dead_pool_process_costs_no_student_anything(self, tmp_path):
        """A pool process killed mid-grading: its students are graded again in a fresh pool, exactly."""
        # Names no other test uses: another test's workers (on the other pytest worker) must not look like this pool at work.
        # petra's extra cell keeps her worker loading for 4 s (within the 60 s a cell may take): a grading that
        # finished before the scan and the kill below would prove nothing, and a quick one on a quiet machine did.
        slow_start = adv.with_extra_cell(adv.reference(), "imports", "import time\ntime.sleep(4)")
        students = {"petra": {f"{ASSIGNMENT}.ipynb": adv.notebook_bytes(slow_start)},
                    "quinn": {f"{ASSIGNMENT}.ipynb": adv.RELEASE_PATH.read_bytes()}}
        started = boot_clock()
        thread, outcome = _grade_in_thread(root=tmp_path, students=students, limits=LIMITS, gradebook=True)
        deadline = time.monotonic() + 300
        while thread.is_alive() and not _pool_processes(working=True) and time.monotonic() < deadline:
            time.sleep(0.1)
        # The scan that finds leftover sandbox processes must recognise a worker that is running, or every
        # "no process outlives grading" check of this file would pass without looking.
        seen, nearby = [], {}
        for scan in itertools.count():
            if not thread.is_alive() or seen or time.monotonic() > deadline:
                break
            # This test's own process tree, where the workers are while grading runs: a scan of every process
            # took longer than the workers lived, on a CI machine loaded by the other tests (twice in a row).
            seen = _sandbox_processes({"petra", "quinn"}, started, tmp_path, among=_descendants(os.getpid()))
            if not seen and scan % 10 == 9:  # what the scan missed, should it miss something (every tenth pass: it costs a scan)
                nearby.update({pid: (start, folders) for pid, start, folders in _processes_under(tmp_path)})
            time.sleep(0.1)
        grading_ran = thread.is_alive()
        killed = _kill_pool_processes()
        thread.join(timeout=600)
        assert killed, f"the test never saw the pool at work: {outcome}"
        assert seen, ("the scan for sandbox processes found no running worker: the leftover checks would prove nothing; "
                      f"grading {'was still running' if grading_ran else 'had ended'}; the test started at {started:.2f} s after boot, and meanwhile "
                      f"these processes had a folder under its scratch (pid: started at, folders): {nearby}; {_outcome_summary(outcome)}")
        assert "run" in outcome, outcome.get("error")
        run = outcome["run"]
        check_items(run.reports["petra"], expect())
        check_items(run.reports["quinn"], expect(**{grade_id: FAILED for grade_id in ITEMS}))
        assert gradebook_scores(run.course, ["petra", "quinn"])["petra"] == {g: i.score for g, i in run.reports["petra"].items.items()}
        assert run.leftovers == [], f"workers of the killed pool process outlived it: {run.leftovers}"


# Answers whose verdict a busy machine could change: a correct one whose speed item is measured
# under load, a slow one that must still fail on its speedup, and two hangs that must still be
# stopped (on the fair clock) at the cost of only their own items. The other attacks of the main
# run do not interact with load.
BUSY_STUDENTS = ("correct", "slow_loop")
HANGS = ("infinite_loop", "ignores_sigint")


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory):
    """The correct answers (``LIMITS``, as in the main run) and the hangs (``HANG_LIMITS``) graded at once,
    while two busy processes and the rest of the test suite compete for this machine's cores."""
    root = tmp_path_factory.mktemp("busy")
    answers, hangs = root / "answers", root / "hangs"
    courses = {folder: make_course(folder, released=False) for folder in (answers, hangs)}  # graded without a gradebook
    correct = {name: files for name, files in adv.variants(courses[answers], answers / "submissions").items() if name in BUSY_STUDENTS}
    # Bounded, should this test's process die before its finally: a stray spinner would slow every later run.
    spin = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as beside:
            hung = beside.submit(grade, hangs, adv.hanging_variants(), limits=HANG_LIMITS, course=courses[hangs], gradebook=False)
            graded = grade(answers, correct, limits=LIMITS, course=courses[answers], gradebook=False)
            hung = hung.result()
    finally:
        for process in busy:
            process.kill()
            process.wait()
    return Run(root, root, {**graded.reports, **hung.reports}, graded.leftovers + hung.leftovers,
               max(graded.seconds, hung.seconds), max(graded.fair_seconds, hung.fair_seconds))


class TestBusyMachine:
    """Verdicts do not depend on load, on an oversubscribed machine (see ``busy_run``).

    The expectations are the constants the main run is checked against, so passing both
    means identical verdicts with and without deliberate extra load."""

    @pytest.mark.parametrize("student", BUSY_STUDENTS)
    def test_same_verdicts_as_on_a_quiet_machine(self, busy_run, student):
        check_items(busy_run.reports[student], EXPECTED[student])

    @pytest.mark.parametrize("student", HANGS)
    def test_a_hang_costs_only_its_items(self, busy_run, student):
        check_items(busy_run.reports[student], expect(test_offload=TIMEOUT, test_pairwise_speed=FAILED))

    def test_timed_out_workers_are_killed(self, busy_run):
        assert busy_run.leftovers == [], f"still running after grading returned: {busy_run.leftovers}"

    def test_no_setup_cell_was_skipped(self, busy_run):
        skipped = {student: report.notes for student, report in busy_run.reports.items() if any("skipped" in n for n in report.notes)}
        assert skipped == {}, "a busy machine made a setup cell time out"

    def test_the_machine_was_busy(self, busy_run):
        worst = max(report.result.worst_slowdown for report in busy_run.reports.values())
        assert worst >= 1.5, f"the grader saw a slowdown of at most {worst}: the test did not load the machine"


# -- the instructor's narrower runs ------------------------------------------------------


class TestRegrade:
    def test_one_item_of_one_student_is_regraded_and_the_rest_kept(self, tmp_path):
        """``--student ann --only test_roofline``: ann's roofline is graded again (now wrong),
        her other items keep their earlier verdicts, and bob is left as he was."""
        from autograder import cli

        course = make_course(tmp_path)
        answers = {grade_id: cell.source for cell in adv.reference().cells
                   if (grade_id := cell.metadata.get("nbgrader", {}).get("grade_id")) in ("roofline", "offload")}
        ann = adv.with_cell(adv.with_cell(adv.release(), "roofline", answers["roofline"]), "offload", answers["offload"])
        submissions = adv.write_submissions(tmp_path / "subs", {
            "ann": {f"{ASSIGNMENT}.ipynb": adv.notebook_bytes(ann)},
            "bob": {f"{ASSIGNMENT}.ipynb": adv.RELEASE_PATH.read_bytes()},
        })
        assert cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--jobs", "2"]) == 0
        before = gradebook_scores(course, ["ann", "bob"])
        assert before["ann"]["test_roofline"] == before["ann"]["test_offload"] == 2.0, before
        wrong = adv.with_cell(ann, "roofline", answers["roofline"].replace("return 2 * m * k * n", "return m * k * n"))
        (submissions / "ann" / f"{ASSIGNMENT}.ipynb").write_bytes(adv.notebook_bytes(wrong))
        assert cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--student", "ann", "--only", "test_roofline"]) == 0
        after = gradebook_scores(course, ["ann", "bob"])
        assert after["bob"] == before["bob"]
        assert after["ann"] == {**before["ann"], "test_roofline": 0.0}, (before, after)

    def test_unknown_student_or_item_is_refused(self, tmp_path, capsys):
        from autograder import cli

        course = make_course(tmp_path, released=False)
        submissions = adv.write_submissions(tmp_path / "subs", {"ann": {f"{ASSIGNMENT}.ipynb": adv.RELEASE_PATH.read_bytes()}})
        assert cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--student", "zoe"]) == 1
        assert "no submission from zoe" in capsys.readouterr().err
        assert cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--only", "test_nothing"]) == 1
        assert "no graded item test_nothing" in capsys.readouterr().err


# -- submission layouts ------------------------------------------------------------------


class TestLayouts:
    def test_flat_notebooks_sharing_a_name_prefix(self, tmp_path):
        """LMS downloads name flat notebooks ``<student>_<anything>.ipynb``: two students whose
        names share the part before "_" must still be two students, all the way to the gradebook."""
        flat = tmp_path / "flat"
        flat.mkdir()
        for name in ("john_doe.ipynb", "john_smith.ipynb", "mary.ipynb"):
            shutil.copy2(adv.RELEASE_PATH, flat / name)
        # A new course: the grader releases the assignment into its fresh gradebook first.
        run = grade(tmp_path, None, submissions=flat, jobs=2, course=make_course(tmp_path, released=False))
        assert len(run.reports) == 3, f"three notebooks, reports for {sorted(run.reports)}"
        for report in run.reports.values():
            check_items(report, expect(**{grade_id: FAILED for grade_id in ITEMS}))
        recorded = gradebook_scores(run.course, run.reports)
        assert set(recorded) == set(run.reports) and all(set(items) == set(ITEMS) for items in recorded.values()), recorded


# --- The same submissions through a real Slurm job array ------------------------------------------

# Ten of the main run's kinds (the issue asks for at least 10): right, untouched, unreadable, wrong, slow, crashing,
# attacking the checks, snooping. The other timing attacks (patched_clock, patched_timing) fail as slow_loop does.
SLURM_STUDENTS = ("correct", "untouched", "malformed", "wrong_sqrt", "slow_loop", "segfault", "exit_in_offload",
                  "patched_checks", "input_transformer", "snooping")


def slurm_ready() -> str:
    """Why this machine cannot run a Slurm job now ("" when it can). In CI that is a failure: .ci/run starts one."""
    if not shutil.which("sbatch"):
        return "no Slurm here (sbatch not found): scripts/slurm_local.sh starts a one-node Slurm after apt-get install slurm-wlm munge"
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0 or not re.search(r"idle|mixed|allocated", done.stdout):
        return f"Slurm has no node up (sinfo: {(done.stdout + done.stderr).strip()[:200]}): run scripts/slurm_local.sh start"
    return ""


def require_slurm() -> None:
    """Skip where no Slurm runs, except in CI, which must run these tests (.ci/run starts a one-node Slurm)."""
    missing = slurm_ready()
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must run the Slurm tests: {missing}")
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    require_slurm()
    from autograder import cli

    root = tmp_path_factory.mktemp("slurm")
    course = make_course(root)
    students = {name: files for name, files in adv.variants(course, root / "submissions", uuid.uuid4().hex[:12]).items()
                if name in SLURM_STUDENTS and (NAMESPACES or name != "snooping")}
    submissions = adv.write_submissions(root / "submissions", students)
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        returncode = cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--backend", "slurm", "--per-task", "3",
                               "--max-running", "2", "--item-seconds", str(LIMITS.item_seconds), "--cell-seconds", str(LIMITS.cell_seconds),
                               "--memory-gb", str(LIMITS.memory_bytes / 1024**3)])
    [manifest] = course.glob("grading-runs/*/manifest.json")
    from autograder import tasks

    return {"returncode": returncode, "printed": out.getvalue(), "course": course, "students": students, "seconds": time.monotonic() - started,
            "reports": tasks.collect(manifest, gradebook=False)}


class TestSlurm:
    def test_a_job_array_grades_every_student_as_the_local_pool_does(self, slurm_run):
        """Each student's verdicts are the ones the local pool's grading is held to (EXPECTED, test_verdicts)."""
        assert slurm_run["returncode"] == 0, slurm_run["printed"]
        assert len(slurm_run["students"]) >= 10
        reports = slurm_run["reports"]
        assert set(reports) == set(slurm_run["students"])
        for student, report in reports.items():
            if student in UNREADABLE:
                assert report.result is None and "unreadable notebook" in report.error
            else:
                check_items(report, EXPECTED[student])
                assert report.result.isolation == ("namespaces" if NAMESPACES else "reduced")

    def test_progress_lines_and_the_gradebook(self, slurm_run):
        printed = slurm_run["printed"]
        count = len(slurm_run["students"])
        assert re.search(r"submitted job array \d+ \(4 tasks\)", printed), printed
        assert f"[{count}/{count}]" in printed, printed
        course = slurm_run["course"]
        from autograder.nbgrader_cli import open_gradebook

        with open_gradebook(course) as gradebook:
            for student, report in slurm_run["reports"].items():
                grades = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student).grades
                recorded = sum(grade.score or 0 for grade in grades if grade.cell.cell_type == "code")
                assert recorded == report.score, (student, recorded, report.score)

    def test_a_task_that_ends_without_a_result_is_submitted_once_more(self, tmp_path, monkeypatch, capsys):
        """The first array's task 0 dies before grading (as a lost node's would); the retry grades it."""
        require_slurm()
        from autograder import slurm, tasks

        course = make_course(tmp_path)
        submissions = adv.write_submissions(tmp_path / "submissions", {name: files for name, files in adv.variants(course, tmp_path / "submissions").items()
                                                                       if name in ("untouched", "malformed")})
        manifest = tasks.plan(ASSIGNMENT, submissions, course, limits=LIMITS)
        scripts = []
        real_script = slurm.batch_script

        def first_loses_task_0(manifest, options, indices=None):
            script = real_script(manifest, options, indices)
            scripts.append(indices)
            if len(scripts) == 1:  # the first submission only
                script = script.replace("exec ", '[ "$SLURM_ARRAY_TASK_ID" = 0 ] && exit 1\nexec ', 1)
            return script

        monkeypatch.setattr(slurm, "batch_script", first_loses_task_0)
        reports = slurm.run(manifest, slurm.ArrayOptions(memory_gb=2), gradebook=False)
        assert scripts == [None, [0]], "the whole array, then task 0 alone"
        assert "tasks 0 ended without every result: submitted once more" in capsys.readouterr().out
        assert not any(report.grader_error for report in reports.values()), reports
        assert {student: report.score for student, report in reports.items()} == {"malformed": 0, "untouched": 0}
        assert reports["untouched"].result is not None


# --- The isolation cases once more, graded by a user without root ----------------------------------

# A user id with no name and no rights (an instructor's own account on a cluster), one per pytest process: its
# leftovers are counted, and killed, by user id, so two runs of the fixture at once (pytest -n without loadscope)
# must not share one.
UNPRIVILEGED_UID = 61_000 + os.getpid() % 1000


def as_unprivileged(command: list[str], home: Path, timeout: float) -> subprocess.CompletedProcess:
    """``command`` run as UNPRIVILEGED_UID (no root, no capabilities), with ``home`` as its home."""
    environment = {"PATH": os.environ["PATH"], "HOME": str(home), "USER": "grader", "LOGNAME": "grader", "LANG": "C.UTF-8"}
    return subprocess.run(["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}", "--clear-groups", "--", *command],
                          env=environment, capture_output=True, text=True, timeout=timeout, cwd=home)


def require_unprivileged_grader(home: Path) -> None:
    """Skip where this test cannot grade as another user (it takes root to become one; that user must reach this
    interpreter and make user namespaces), except in CI, which must run it (.ci/run opens the interpreter to it)."""
    missing = ""
    if os.geteuid() != 0:
        missing = "grading as a user without root is tested from root, which can become that user (CI runs as root)"
    else:
        probe = as_unprivileged([sys.executable, "-c", "from autograder import sandbox; print(*sandbox.isolation(), sep=': ')"], home, 120)
        if probe.returncode != 0 or not probe.stdout.startswith(sandbox.USER_NAMESPACES):
            missing = (f"user {UNPRIVILEGED_UID} cannot grade in user namespaces here: {(probe.stdout + probe.stderr).strip()[-300:]} "
                       "(it must be able to run this interpreter, and unprivileged user namespaces must be allowed)")
    if missing and os.environ.get("CI"):
        pytest.fail(f"CI must run the unprivileged grading test: {missing}")
    if missing:
        pytest.skip(missing)


def _give_to(folder: Path, uid: int) -> None:
    os.chown(folder, uid, uid)
    for parent, names, files in os.walk(folder):
        for name in names + files:
            os.chown(Path(parent) / name, uid, uid, follow_symlinks=False)


def _processes_of(uid: int) -> list[int]:
    found = []
    for pid in _process_ids():
        with contextlib.suppress(OSError):
            if f"Uid:\t{uid}\t" in Path(f"/proc/{pid}/status").read_text():
                found.append(int(pid))
    return found


def report_from_grading_json(path: Path, student: str) -> StudentReport:
    """The report a grading left in ``autograded/<student>/<assignment>/grading.json`` (its items keyed by grade_id)."""
    from autograder import tasks

    data = json.loads(path.read_text())
    result = {**data, "items": list(data["items"].values())}
    return tasks.report_from_json({"student": student, "result": result, "error": "", "notes": data["notes"], "grader_error": "", "log": ""})


@pytest.fixture(scope="module")
def unprivileged_run():
    """The snooper, the fork bomb and the untouched release, graded by ``autograder grade`` as a user without root,
    in a course and folders of that user's (pytest's own folders admit root only)."""
    root = Path(tempfile.mkdtemp(prefix="gpucourse-unprivileged-"))
    try:
        home = root / "home"
        home.mkdir()
        _give_to(root, UNPRIVILEGED_UID)
        require_unprivileged_grader(home)
        course = make_course(root)
        token = uuid.uuid4().hex[:12]
        repo_before, course_before = repo_digests(), file_digests(course / "solutions")
        with listening_port() as port, snooping_targets(token) as probes:
            # The bomb's first witness (the reference) is left out: the snooper is the reference too, graded beside the bomb.
            students = {"snooping": adv.variants(course, root / "submissions", token, port)["snooping"],
                        **{name: files for name, files in adv.fork_bomb_variants().items() if name != "witness_1"}}
            submissions = adv.write_submissions(root / "submissions", students)
            _give_to(root, UNPRIVILEGED_UID)
            started = time.monotonic()
            done = as_unprivileged([sys.executable, "-m", "autograder", "--course", str(course), "grade", ASSIGNMENT, str(submissions),
                                    "--jobs", "2", "--cell-seconds", str(FORK_BOMB_LIMITS.cell_seconds),
                                    "--item-seconds", str(FORK_BOMB_LIMITS.item_seconds),
                                    "--memory-gb", str(FORK_BOMB_LIMITS.memory_bytes / 1024**3)], home, timeout=600)
            seconds = time.monotonic() - started
            probes_found = [str(probe) for probe in probes if probe.exists()]
        deadline = time.monotonic() + 10
        while _processes_of(UNPRIVILEGED_UID) and time.monotonic() < deadline:
            time.sleep(0.5)
        leftovers = _processes_of(UNPRIVILEGED_UID)
        for pid in leftovers:
            sandbox._signal(pid, signal.SIGKILL)
        reports = {student: report_from_grading_json(course / "autograded" / student / ASSIGNMENT / "grading.json", student)
                   for student in students if (course / "autograded" / student / ASSIGNMENT / "grading.json").exists()}
        yield {"done": done, "seconds": seconds, "reports": reports, "students": students, "probes_found": probes_found,
               "leftovers": leftovers, "gradebook": (course / "gradebook.db").read_bytes(), "repo_changed": repo_digests() != repo_before,
               "course_changed": file_digests(course / "solutions") != course_before}
    finally:
        shutil.rmtree(root, ignore_errors=True)


class TestUnprivileged:
    """The isolation cases (the snooper: the gradebook, solutions/, other folders, the network; a fork bomb)
    graded by a user without root: the sandbox is then a user namespace of each worker's own."""

    def test_a_user_without_root_grades_every_student_sandboxed(self, unprivileged_run):
        done = unprivileged_run["done"]
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        reports = unprivileged_run["reports"]
        assert set(reports) == set(unprivileged_run["students"]), done.stdout[-2000:]
        assert {report.result.isolation for report in reports.values()} == {sandbox.USER_NAMESPACES}

    def test_the_snooper_reaches_nothing(self, unprivileged_run):
        check_snooper_held(unprivileged_run["reports"]["snooping"], unprivileged_run["probes_found"], sandbox.USER_NAMESPACES)
        assert adv.WRITE_MARKER not in unprivileged_run["gradebook"], "a student wrote into the gradebook"
        assert not unprivileged_run["repo_changed"] and not unprivileged_run["course_changed"]

    def test_the_fork_bomb_costs_only_its_cell(self, unprivileged_run):
        reports = unprivileged_run["reports"]
        check_items(reports["fork_bomb"], expect())
        assert_stopped_as_a_fork_bomb(reports["fork_bomb"])
        check_items(reports["witness_2"], expect(**{grade_id: FAILED for grade_id in ITEMS}))
        assert unprivileged_run["leftovers"] == [], f"still running after grading returned: {unprivileged_run['leftovers']}"
