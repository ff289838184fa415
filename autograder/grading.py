"""Grade a whole class: find the submissions, grade each in parallel, record in nbgrader.

1. **Find** each student's notebook in a folder or an LMS zip (see :func:`find_submissions`).
2. **Grade** each submission with the trusted harness in a pool of ``jobs`` processes; every
   student's code runs in its own sandboxed worker with only their files.
3. **Record**: one ``nbgrader autograde`` run, with :mod:`autograder.nbgrader_plugin` in place
   of execution, writes every score to ``gradebook.db`` from a single process (no lost
   writes), and leaves the autograded copies that ``nbgrader generate_feedback`` renders.
   Items that need a GPU are left for a regrade (no score, flagged for grading).
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from . import build, harness, phases, sandbox, skeleton
from .nbgrader_cli import open_gradebook, run_nbgrader
from .outcomes import Outcome
from .progress import TICK, ProgressBar


@dataclass
class Submission:
    student: str
    notebook: Path | None
    files: list[Path] = field(default_factory=list)  # everything else the student handed in
    notes: list[str] = field(default_factory=list)
    error: str = ""


WORKER_FAILED = "no worker could start"  # every other submission would fail alike: grading stops
POOL_FAILED = "the grading process died"


@dataclass
class StudentReport:
    student: str
    result: harness.SubmissionResult | None
    error: str = ""  # why there is no result: the student's (an unreadable notebook) or the grader's
    notes: list[str] = field(default_factory=list)
    grader_error: str = ""  # the grader failed, not the student (WORKER_FAILED, POOL_FAILED): nothing is recorded
    log: str = ""  # the worker's output, for a grader error
    seconds: float = 0.0  # wall time grading this student took in its grading process (0: not measured)
    started: float = 0.0  # when that began (time.time())
    phases: dict[str, float] = field(default_factory=dict)  # those seconds by phase (autograder.phases)
    unmeasured: list[str] = field(default_factory=list)  # phases not told apart (their time is in the enclosing one)

    @property
    def items(self) -> dict[str, harness.ItemResult]:
        return {item.grade_id: item for item in self.result.items} if self.result else {}

    @property
    def score(self) -> float:
        return self.result.score if self.result else 0.0


def find_submissions(path: Path, assignment: str, scratch: Path) -> list[Submission]:
    """Each student's notebook in ``path``: a folder or a ``.zip`` of either layout:

    * one folder per student (``alice/01_gpu_basics.ipynb``, at any depth below ``alice/``);
    * flat notebooks named ``alice.ipynb`` or, as LMS downloads are, ``alice_<anything>.ipynb``.

    A student folder without ``ASSIGNMENT.ipynb`` but with exactly one other notebook is graded
    with a note that it was renamed; none or several is an error for that student only.
    """
    path = Path(path)
    if path.suffix == ".zip":
        path = _unzip(path, scratch / "unzipped")
    submissions = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith(".") or entry.name == "__MACOSX":
            continue
        if entry.is_dir():
            submissions.append(_from_folder(entry, assignment))
        elif entry.suffix == ".ipynb" and not entry.is_symlink():
            submissions.append(Submission(entry.stem.split("_")[0], entry))
    return _unique_students(submissions)


def _unique_students(submissions: list[Submission]) -> list[Submission]:
    """Flat LMS names give the student before the first "_"; where two share it, keep whole names."""
    counts: dict[str, int] = {}
    for submission in submissions:
        counts[submission.student] = counts.get(submission.student, 0) + 1
    for submission in submissions:
        if counts[submission.student] > 1 and submission.notebook is not None and submission.notebook.parent.name != submission.student:
            submission.student = submission.notebook.stem
    seen: set[str] = set()
    for submission in submissions:
        if submission.student in seen:
            submission.error = f"two submissions for {submission.student}; graded neither: rename one"
            submission.student = f"{submission.student}__{len(seen)}"
        seen.add(submission.student)
    return submissions


def _from_folder(folder: Path, assignment: str) -> Submission:
    notebooks = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    exact = [p for p in notebooks if p.name == f"{assignment}.ipynb"]
    files = [p for p in folder.rglob("*") if _handed_in_file(p, folder)]
    if exact:
        return Submission(folder.name, exact[0], files)
    if len(notebooks) == 1:
        note = f"renamed notebook: graded {notebooks[0].name} as {assignment}.ipynb"
        return Submission(folder.name, notebooks[0], files, notes=[note])
    found = ", ".join(p.name for p in notebooks) or "no notebook at all"
    return Submission(folder.name, None, files, error=f"no notebook named {assignment}.ipynb (found: {found})")


def _handed_in_file(path: Path, folder: Path) -> bool:
    """A regular file of the student's own, not a notebook; links are never followed (one
    could point at solutions/ and be copied by the grader, which can read it)."""
    relative = path.relative_to(folder)
    if any((folder / Path(*relative.parts[: i + 1])).is_symlink() for i in range(len(relative.parts))):
        return False
    return path.is_file() and path.suffix != ".ipynb" and ".ipynb_checkpoints" not in path.parts


def _unzip(archive: Path, target: Path) -> Path:
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.namelist():
            resolved = (target / member).resolve()
            if not resolved.is_relative_to(target.resolve()):
                raise ValueError(f"{archive}: refusing the unsafe path {member!r}")
        zipped.extractall(target)
    entries = [p for p in target.iterdir() if not p.name.startswith(".") and p.name != "__MACOSX"]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() and not list(entries[0].glob("*.ipynb")) else target


class GradingStopped(RuntimeError):
    """The grader could not start a single worker: nothing was graded or recorded."""


def grade_assignment(
    assignment: str,
    submissions: Path,
    *,
    course_root: Path = build.REPO_ROOT,
    jobs: int = 1,
    limits: sandbox.Limits = sandbox.Limits(),
    gradebook: bool = True,
    progress: Callable[[str], None] | None = print,
    students: set[str] | None = None,
    only: set[str] | None = None,
    scratch_parent: Path | None = None,
    allow_reduced_isolation: bool = False,
) -> dict[str, StudentReport]:
    """Grade every submission of ``assignment`` (or the ``students`` named); return a report per student.

    ``only``: grade just these items; the others keep what the student's last grading gave
    them (``autograded/<student>/<assignment>/grading.json``), e.g. to regrade GPU items on a
    GPU machine. Students the grader failed on (a grader error) get nothing recorded.
    ``scratch_parent``: where the run's scratch folder (the workers' folders) goes, instead of the
    system's temporary folder (tests tell their own runs' workers apart by it).
    ``allow_reduced_isolation``: grade even where the students' code cannot be sandboxed (see
    :func:`sandbox.require_isolation`); otherwise that raises ``sandbox.IsolationUnavailable``.
    """
    course_root = Path(course_root).resolve()
    with tempfile.TemporaryDirectory(prefix=f"grade-{assignment}-", dir=scratch_parent) as scratch_name:
        scratch = Path(scratch_name)
        found, tasks = prepare_tasks(assignment, submissions, course_root, scratch, limits=limits, students=students, only=only,
                                     allow_reduced_isolation=allow_reduced_isolation)
        reports = _run_pool({submission.student: task for submission, task in zip(found, tasks)}, jobs, progress)
        _keep_timings(assignment, jobs, reports)
        finish(assignment, course_root, found, reports, only=only, gradebook=gradebook)
    return reports


def prepare_tasks(assignment: str, submissions: Path, course_root: Path, scratch: Path, *, limits: sandbox.Limits,
                  students: set[str] | None = None, only: set[str] | None = None,
                  allow_reduced_isolation: bool = False) -> tuple[list[Submission], list[tuple]]:
    """Find the submissions (unpacking a zip into ``scratch``) and make one task per student: the arguments of
    :func:`grade_submission`, which grades it in ``scratch/work/<student>`` wherever the task runs."""
    sandbox.require_isolation(allow_reduced_isolation)
    source_path = course_root / "solutions" / assignment / f"{assignment}.ipynb"
    if only:
        known = {item.grade_id for item in skeleton.make_plan(*[nbformat.read(source_path, as_version=4)] * 2).items}
        if only - known:
            raise ValueError(f"no graded item {', '.join(sorted(only - known))} in {assignment} (items: {', '.join(sorted(known))})")
    found = find_submissions(Path(submissions), assignment, scratch)
    if students is not None:
        missing = students - {s.student for s in found}
        if missing:
            raise ValueError(f"no submission from {', '.join(sorted(missing))} in {submissions}")
        found = [s for s in found if s.student in students]
    private = [root / name for root in dict.fromkeys([course_root, build.REPO_ROOT])
               for name in ("solutions", "gradebook.db", "submitted", "autograded", "feedback", ".git")]
    # Last, the shared scratch folders (the worker keeps only its own folder in there).
    private += [Path(submissions).resolve(), scratch, Path("/dev/shm"), Path("/run/lock"), Path("/var/tmp"), Path(tempfile.gettempdir())]
    tasks = [(s, str(source_path), str(scratch / "work" / s.student), limits, [str(p) for p in private], only) for s in found]
    return found, tasks


TIMINGS_ENV = "GPUCOURSE_GRADING_TIMINGS"  # a file: each student's seconds by phase are appended there (scripts/bench_grading.py)


def _keep_timings(assignment: str, jobs: int, reports: dict[str, StudentReport]) -> None:
    """With $GPUCOURSE_GRADING_TIMINGS set, append one JSON line per student: seconds, by phase (:mod:`autograder.phases`)."""
    path = os.environ.get(TIMINGS_ENV)
    if not path:
        return
    with open(path, "a") as timings:
        for report in reports.values():
            record = {"assignment": assignment, "jobs": jobs, "student": report.student, "started": report.started, "seconds": report.seconds,
                      "phases": report.phases, "unmeasured": report.unmeasured, "grader_error": report.grader_error}
            timings.write(json.dumps(record) + "\n")


def finish(assignment: str, course_root: Path, found: list[Submission], reports: dict[str, StudentReport], *,
           only: set[str] | None = None, gradebook: bool = True) -> None:
    """After every task: complete ``--only`` regrades from the earlier grading, then record in the gradebook
    (from this one process) everyone the grader did not fail on."""
    if only:
        for report in reports.values():
            _merge_earlier_grading(course_root, assignment, report, only)
    if gradebook:
        recorded = [s for s in found if not reports[s.student].grader_error]
        release_path = course_root / "assignments" / assignment / f"{assignment}.ipynb"
        with tempfile.TemporaryDirectory(prefix=f"record-{assignment}-") as record_scratch:
            record_in_gradebook(course_root, assignment, recorded, reports, Path(record_scratch), release_path)


def _run_pool(tasks: dict, jobs: int, progress) -> dict[str, StudentReport]:
    """Grade every task in a pool of ``jobs`` processes; with ``progress``, a line per student through it
    and the run's :class:`autograder.progress.ProgressBar` on stderr.

    A pool process that dies is the grader's failure: its students are graded once more in
    a fresh pool, then reported as grader errors. If the very first submission could not
    even start a worker, grading stops (every other would fail the same way).
    """
    reports: dict[str, StudentReport] = {}
    started, counter = time.monotonic(), iter(range(1, len(tasks) + 1))
    bar = ProgressBar(len(tasks), jobs) if progress else None

    def report_progress(report: StudentReport) -> None:
        if progress:
            bar.student_done(report.seconds)
            bar.clear()
            progress(f"[{next(counter)}/{len(tasks)}] {report.student}: {_summary(report)} ({time.monotonic() - started:.0f} s)")
            sys.stdout.flush()  # the line before the bar that follows it on the terminal
            bar.draw()

    tick = bar.draw if bar else lambda: None
    tick()  # at once: starting the pool takes seconds
    try:
        lost = _pool_round(tasks, jobs, reports, report_progress, tick)
        if lost:
            _pool_round({student: tasks[student] for student in lost}, 1, reports, report_progress, tick, lost)
    finally:
        if bar:
            bar.close()
    return dict(sorted(reports.items()))


def _pool_round(tasks: dict, jobs: int, reports: dict, report_progress, tick, earlier_failures: dict | None = None) -> dict[str, str]:
    """One pool over ``tasks``; returns {student: error} for those whose pool process failed. ``tick()`` is
    called at least every :data:`autograder.progress.TICK` seconds (the progress bar's clock)."""
    lost: dict[str, str] = {}
    context = _pool_context()
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(jobs, 1), mp_context=context) as pool:
        futures = {pool.submit(grade_submission, *task): student for student, task in tasks.items()}
        pending = set(futures)
        while pending:
            finished, pending = concurrent.futures.wait(pending, timeout=TICK, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                student = futures[future]
                try:
                    report = future.result()
                except Exception as error:  # noqa: BLE001 - a grader failure must not cost the students
                    lost[student] = f"{type(error).__name__}: {error}"
                    if earlier_failures is None:
                        continue  # graded again in a fresh pool
                    report = StudentReport(student, None, error=f"grader error: the grading process failed twice ({lost[student]})",
                                           grader_error=POOL_FAILED)
                reports[student] = report
                report_progress(report)
                if report.grader_error == WORKER_FAILED and len(reports) == 1:  # the very first one: every other would fail alike
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise GradingStopped(f"{report.error}\n{report.log}".strip())
            tick()
    return lost


def _pool_context():
    """Pool processes that hold no state of the caller's: forked from multiprocessing's fork server, a
    fresh interpreter that has imported this module once (not every pool process again: 3 s each) and
    started the workers' plain fork server they all share (:mod:`autograder._pool_preload`);
    a fresh interpreter each where there is no fork server (not Linux)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "autograder._pool_preload"])
    return context


def _summary(report: StudentReport) -> str:
    if report.result is None:
        return report.error
    total = sum(item.points for item in report.result.items)
    return f"{report.score:g}/{total:g}"


def grade_submission(submission: Submission, source_path: str, workdir: str, limits: sandbox.Limits, private: list[str],
                     only: set[str] | None = None) -> StudentReport:
    """Grade one student (runs in a pool process), timing it by phase (:mod:`autograder.phases`)."""
    started = time.time()
    with phases.recording() as ledger:
        report = _grade_submission(submission, source_path, workdir, limits, private, only)
    report.phases, report.unmeasured, report.started = ledger.totals(), ledger.unmeasured, started
    report.seconds = sum(report.phases.values())
    return report


def _grade_submission(submission: Submission, source_path: str, workdir: str, limits: sandbox.Limits, private: list[str],
                      only: set[str] | None = None) -> StudentReport:
    if submission.error:
        return StudentReport(submission.student, None, error=submission.error, notes=submission.notes)
    try:
        student_nb = nbformat.read(submission.notebook, as_version=4)
    except Exception as error:  # noqa: BLE001 - malformed JSON, wrong format, unreadable file
        return StudentReport(submission.student, None, error=f"unreadable notebook {submission.notebook.name}: {error}", notes=submission.notes)
    workdir = Path(workdir)
    if workdir.exists():  # left by a grading process that died: start afresh
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    for file in submission.files:  # the student's own files, beside their code, never on sys.path first
        target = workdir / file.relative_to(submission.notebook.parent) if file.is_relative_to(submission.notebook.parent) else workdir / file.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, target)
    plan = skeleton.make_plan(nbformat.read(source_path, as_version=4), student_nb)
    try:
        result = harness.grade(plan, workdir, limits, [Path(p) for p in private], only=only)
    except harness.GraderError as error:
        return StudentReport(submission.student, None, error=f"grader error: {error}", notes=submission.notes, grader_error=WORKER_FAILED, log=error.log)
    return StudentReport(submission.student, result, notes=submission.notes + result.notes)


def _merge_earlier_grading(course_root: Path, assignment: str, report: StudentReport, only: set[str]) -> None:
    """Complete a report of the ``only`` items with the student's earlier verdicts on the others."""
    if report.result is None:
        return
    earlier_path = course_root / "autograded" / report.student / assignment / "grading.json"
    try:
        earlier = json.loads(earlier_path.read_text())["items"]
    except (OSError, ValueError, KeyError):
        report.result, report.grader_error = None, "no earlier grading"
        report.error = "grader error: --only regrades items of an earlier grading, and this student has none: grade every item first"
        return
    regraded = {item.grade_id: item for item in report.result.items}
    report.result.items = [
        regraded.get(grade_id) or harness.ItemResult(**{**item, "outcome": Outcome(item["outcome"])})
        for grade_id, item in earlier.items()
    ]


def exchange_files(submission: Submission) -> dict[str, str]:
    """What nbgrader's exchange keeps beside a submission (the layout ``nbgrader collect`` writes), checked:
    ``timestamp.txt``, when the student submitted (nbgrader records it, applies late penalties, and carries it on to
    ``autograded/`` and ``feedback/``), and ``submission_secret.txt``, which names the feedback only that student's
    ``fetch_feedback`` finds. Each is left out where it is missing or malformed (a submission from an LMS has neither;
    a student may have written their own): one unreadable file must not fail the one nbgrader run that records
    every student, and without them ``nbgrader release_feedback`` skips nobody but crashes."""
    from nbgrader.utils import parse_utc

    found = {}
    for name, valid in ((TIMESTAMP_FILE, parse_utc), (SECRET_FILE, _hex_secret)):
        # Beside the notebook; without one (an empty submission: the exchange's files only), the one such file handed in.
        candidates = [submission.notebook.parent / name] if submission.notebook is not None else [
            path for path in submission.files if path.name == name]
        try:
            [path] = candidates
            text = path.read_text().strip()
            valid(text)
        except (OSError, ValueError, OverflowError, TypeError):
            continue
        found[name] = text
    return found


TIMESTAMP_FILE, SECRET_FILE = "timestamp.txt", "submission_secret.txt"  # what nbgrader's submit writes beside a submission


def _hex_secret(text: str) -> None:
    if not (0 < len(text) <= 256 and all(character in "0123456789abcdef" for character in text)):
        raise ValueError("not nbgrader's submission secret (hex digits)")


def record_in_gradebook(course_root: Path, assignment: str, found: list[Submission], reports: dict[str, StudentReport],
                        scratch: Path, release_path: Path) -> None:
    """Write every verdict into nbgrader's gradebook with one ``nbgrader autograde`` run."""
    _ensure_released(course_root, assignment)
    release_nb = nbformat.read(release_path, as_version=4)
    results_dir, submitted = scratch / "results", scratch / "submitted"
    results_dir.mkdir()
    items = [cell.metadata["nbgrader"]["grade_id"] for cell in release_nb.cells if skeleton.is_test(cell)]
    for submission in found:
        report = reports[submission.student]
        (results_dir / f"{submission.student}.json").write_text(json.dumps(_verdicts(report, items)))
        student_nb = release_nb
        if report.result is not None:
            student_nb = skeleton.normalized_notebook(release_nb, nbformat.read(submission.notebook, as_version=4))
        target = submitted / submission.student / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True)
        nbformat.write(student_nb, target)
        for name, text in exchange_files(submission).items():
            (target.parent / name).write_text(text)
    config = scratch / "nbgrader_config.py"
    config.write_text(_AUTOGRADE_CONFIG.format(
        course_config=str(course_root / "nbgrader_config.py"), submitted=str(submitted), results=str(results_dir), release=str(release_path)))
    run_nbgrader("autograde", assignment, "--force", "--create", "--log-level=ERROR",
                 root=course_root, database=course_root / "gradebook.db", config_dir=scratch)
    _flag_gpu_regrades(course_root, assignment, reports)
    _verify_gradebook(course_root, assignment, reports)
    _note_lateness(course_root, assignment, reports)
    for student, report in reports.items():
        folder = course_root / "autograded" / student / assignment
        if report.grader_error:
            continue
        if folder.exists():
            (folder / "grading.json").write_text(json.dumps(_verdicts(report, items), indent=1))


_AUTOGRADE_CONFIG = """
c = get_config()
load_subconfig({course_config!r})
c.CourseDirectory.submitted_directory = {submitted!r}
c.Autograde.autograde_preprocessors = [
    "autograder.nbgrader_plugin.ApplyTrustedResults",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.ApplyTrustedResults.results_dir = {results!r}
c.ApplyTrustedResults.release_notebook = {release!r}
"""


def _verdicts(report: StudentReport, items: list[str]) -> dict:
    if report.result is None:
        failed = {"outcome": Outcome.UNREADABLE.value, "message": report.error, "score": 0.0}
        return {"device": "not run", "device_class": "none", "isolation": "none", "notes": report.notes, "error": report.error,
                "items": {grade_id: failed for grade_id in items}}
    data = report.result.to_json()
    data["items"] = {item["grade_id"]: item for item in data["items"]}
    data["notes"] = report.notes
    return data


def _ensure_released(course_root: Path, assignment: str) -> None:
    from nbgrader.api import MissingEntry

    with open_gradebook(course_root) as gb:
        try:
            gb.find_assignment(assignment)
            return
        except MissingEntry:
            pass
    build.release_assignment(course_root, assignment)


def _flag_gpu_regrades(course_root: Path, assignment: str, reports: dict[str, StudentReport]) -> None:
    """Items a CPU grader could not judge: no score, and flagged so the formgrader lists them."""
    with open_gradebook(course_root) as gb:
        for student, report in reports.items():
            pending = [item.grade_id for item in report.items.values() if item.outcome == Outcome.NEEDS_GPU]
            if not pending:
                continue
            notebook = gb.find_submission_notebook(assignment, assignment, student)
            for grade in notebook.grades:
                if grade.name in pending:
                    grade.auto_score = None
                    grade.needs_manual_grade = True
            gb.db.commit()


def _note_lateness(course_root: Path, assignment: str, reports: dict[str, StudentReport]) -> None:
    """A note for each student whose submission nbgrader counts as late (its timestamp after the assignment's due date,
    both in the gradebook): in the table, in grading.json and so in the report. nbgrader's late-penalty settings apply."""
    with open_gradebook(course_root) as gb:
        for student, report in reports.items():
            if report.grader_error:
                continue
            try:
                late = gb.find_submission(assignment, student).total_seconds_late
            except Exception:  # noqa: BLE001 - no submission recorded for them: nothing to say
                continue
            if late and late > 0:
                report.notes.append(f"late: submitted {_duration(late)} after the due date (nbgrader's timestamp)")


def _duration(seconds: float) -> str:
    """``3 d 4 h``, ``2 h 5 min``, ``7 min``, ``40 s``: the two largest units."""
    minutes, hours, days = seconds / 60, seconds / 3600, seconds / 86400
    if days >= 1:
        return f"{int(days)} d {int(hours % 24)} h"
    if hours >= 1:
        return f"{int(hours)} h {int(minutes % 60)} min"
    return f"{int(minutes)} min" if minutes >= 1 else f"{int(seconds)} s"


def _verify_gradebook(course_root: Path, assignment: str, reports: dict[str, StudentReport]) -> None:
    """Refuse to finish if the gradebook disagrees with the harness on any autograded item."""
    with open_gradebook(course_root) as gb:
        for student, report in reports.items():
            if report.grader_error:
                continue
            notebook = gb.find_submission_notebook(assignment, assignment, student)
            for grade in notebook.grades:
                item = report.items.get(grade.name)
                expected = None if item and item.outcome == Outcome.NEEDS_GPU else (item.score if item else None)
                if grade.cell.cell_type == "code" and grade.auto_score != expected and not (expected is None and item is None and grade.auto_score == 0):
                    raise RuntimeError(f"gradebook has {grade.auto_score} for {student}/{grade.name}, the harness gave {expected}")
