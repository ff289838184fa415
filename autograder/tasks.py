"""Grading as an array of independent tasks: plan once, grade each task anywhere, collect once.

``autograder grade`` runs every task in a local pool. A cluster runs the same tasks as a job array:

1. **Plan** (``autograder grade ... --plan-only``): a run folder in the course (``grading-runs/<assignment>-<time>/``,
   so every node that sees the course sees it) holding the unpacked submissions, the workers' folders and
   ``manifest.json``: per student, the arguments of :func:`autograder.grading.grade_submission`.
2. **Tasks** (``autograder grade-task MANIFEST``): each grades one student (or ``--per-task K`` of them) exactly
   as a pool process does and writes ``results/<position>.json`` per student. The index comes from ``--index``,
   or from the engine running the array: Slurm's ``SLURM_ARRAY_TASK_ID`` or a Kubernetes Indexed Job's ``JOB_COMPLETION_INDEX``.
3. **Collect** (``autograder collect MANIFEST``): the one writer. It reads every result, records them in the
   gradebook, verifies it and prints the summary table. A student without a result (their task died, or was never
   run) is a grader error for that student only: nothing is recorded for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from . import harness, sandbox
from .grading import StudentReport, Submission, finish, grade_submission, prepare_tasks
from .outcomes import Outcome

MANIFEST = "manifest.json"
RESULTS = "results"
RUNS = "grading-runs"  # in the course root
INDEX_ENVS = ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX")  # Slurm job arrays, Kubernetes Indexed Jobs
TASK_FAILED = "the grading task failed"
NO_SANDBOX = "the node that ran the task cannot sandbox students' code"
NO_RESULT = "the grading task wrote no result"


def plan(assignment: str, submissions: Path, course_root: Path, *, limits: sandbox.Limits = sandbox.Limits(),
         students: set[str] | None = None, only: set[str] | None = None, per_task: int = 1,
         allow_reduced_isolation: bool = False) -> Path:
    """Write a run folder for ``assignment``'s submissions; return its manifest's path.

    ``per_task``: students graded one after the other by each task (a shard), which then pays its
    interpreter's start (torch's imports, a fork server: 3-4 s of CPU) once for all of them.
    ``allow_reduced_isolation``: as :func:`autograder.grading.grade_assignment`'s, here and on every node
    that runs a task (a node that cannot sandbox gives its students a grader error)."""
    if per_task < 1:
        raise ValueError(f"--per-task must be at least 1, got {per_task}")
    course_root = Path(course_root).resolve()
    run = course_root / RUNS / f"{assignment}-{time.strftime('%Y%m%d-%H%M%S')}"
    run.mkdir(parents=True, exist_ok=False)
    try:
        found, tasks = prepare_tasks(assignment, submissions, course_root, run, limits=limits, students=students, only=only,
                                     allow_reduced_isolation=allow_reduced_isolation)
    except BaseException:  # refused (no sandbox, an unknown student or item): no run folder left behind
        shutil.rmtree(run, ignore_errors=True)
        with contextlib.suppress(OSError):
            run.parent.rmdir()  # grading-runs/, if this was its only run
        raise
    manifest = {"assignment": assignment, "course_root": str(course_root), "only": sorted(only) if only else None,
                "per_task": per_task, "allow_reduced_isolation": allow_reduced_isolation, "tasks": [_task_to_json(task) for task in tasks]}
    (run / RESULTS).mkdir()
    path = run / MANIFEST
    path.write_text(json.dumps(manifest, indent=1))
    return path


def task_index(index: int | None, environ=os.environ) -> int:
    """The task to run: ``index`` if given, else the array engine's own variable."""
    if index is not None:
        return index
    for name in INDEX_ENVS:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    raise ValueError(f"no task index: pass --index, or run inside a job array (which sets one of {', '.join(INDEX_ENVS)})")


def task_count(manifest: dict) -> int:
    """How many array tasks the manifest's students make (``per_task`` students each)."""
    return -(-len(manifest["tasks"]) // manifest.get("per_task", 1))


def students_of_task(manifest: dict, index: int) -> range:
    """The students (their positions in the manifest) that array task ``index`` grades."""
    if not 0 <= index < task_count(manifest):
        raise ValueError(f"task index {index} out of range: the manifest has tasks 0 to {task_count(manifest) - 1}")
    per_task = manifest.get("per_task", 1)
    return range(index * per_task, min((index + 1) * per_task, len(manifest["tasks"])))


def run_task(manifest_path: Path, index: int) -> list[StudentReport]:
    """Grade array task ``index`` of the manifest, writing each student's result as it is done
    (a grader error where grading itself raised)."""
    manifest = load(manifest_path)
    reports = []
    refused = _sandbox_refused(manifest)
    for position in students_of_task(manifest, index):
        task = _task_from_json(manifest["tasks"][position])
        if refused:
            report = _grader_error(task[0], NO_SANDBOX, log=refused)
        else:
            try:
                report = grade_submission(*task)
            except Exception:  # noqa: BLE001 - the grader's failure, recorded as such for this student only
                report = _grader_error(task[0], TASK_FAILED, log=traceback.format_exc())
        _write_atomically(result_path(manifest_path, position), json.dumps(report_to_json(report)))
        reports.append(report)
    return reports


def collect(manifest_path: Path, *, gradebook: bool = True) -> dict[str, StudentReport]:
    """Every task's report (a grader error where a task wrote none), recorded in the gradebook from this process."""
    manifest = load(manifest_path)
    tasks = [_task_from_json(task) for task in manifest["tasks"]]
    reports = {}
    for position, task in enumerate(tasks):
        student = task[0].student
        try:
            reports[student] = report_from_json(json.loads(result_path(manifest_path, position).read_text()))
        except (OSError, ValueError):
            reports[student] = _grader_error(task[0], NO_RESULT, where=f" (task {position // manifest.get('per_task', 1)})")
    only = set(manifest["only"]) if manifest["only"] else None
    finish(manifest["assignment"], Path(manifest["course_root"]), [task[0] for task in tasks], reports, only=only, gradebook=gradebook)
    return dict(sorted(reports.items()))


def pending_gpu_items(course_root: Path, assignment: str) -> dict[str, set[str]]:
    """Per student, the items their last grading left waiting for a GPU (``autograded/<student>/<assignment>/grading.json``)."""
    pending = {}
    for verdicts in sorted(Path(course_root).glob(f"autograded/*/{assignment}/grading.json")):
        items = json.loads(verdicts.read_text())["items"]
        waiting = {grade_id for grade_id, item in items.items() if item["outcome"] == Outcome.NEEDS_GPU}
        if waiting:
            pending[verdicts.parents[1].name] = waiting
    return pending


def load(manifest_path: Path) -> dict:
    try:
        return json.loads(Path(manifest_path).read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the grading manifest {manifest_path}: {error}") from error


def result_path(manifest_path: Path, position: int) -> Path:
    """Where the student at ``position`` in the manifest gets their result."""
    return Path(manifest_path).parent / RESULTS / f"{position}.json"


def missing_results(manifest_path: Path) -> list[int]:
    """The students (positions in the manifest) without a result (yet)."""
    count = len(load(manifest_path)["tasks"])
    return [position for position in range(count) if not result_path(manifest_path, position).exists()]


def unfinished_tasks(manifest_path: Path) -> list[int]:
    """The array tasks with a student still without a result."""
    manifest = load(manifest_path)
    return sorted({position // manifest.get("per_task", 1) for position in missing_results(manifest_path)})


def report_to_json(report: StudentReport) -> dict:
    return {"student": report.student, "result": report.result.to_json() if report.result else None, "error": report.error,
            "notes": report.notes, "grader_error": report.grader_error, "log": report.log}


def report_from_json(data: dict) -> StudentReport:
    result = data["result"]
    if result is not None:
        result = harness.SubmissionResult(**{**result, "items": [harness.ItemResult(**item) for item in result["items"]]})
    return StudentReport(data["student"], result, error=data["error"], notes=data["notes"], grader_error=data["grader_error"], log=data["log"])


def _sandbox_refused(manifest: dict) -> str:
    """Why this node may not grade the manifest's students ("" if it may): it cannot sandbox them, and the plan did not allow that."""
    try:
        sandbox.require_isolation(manifest.get("allow_reduced_isolation", False))
    except sandbox.IsolationUnavailable as error:
        return str(error)
    return ""


def _grader_error(submission: Submission, why: str, *, log: str = "", where: str = "") -> StudentReport:
    """A report of the grader's failure on ``submission``: nothing will be recorded for the student."""
    return StudentReport(submission.student, None, error=f"grader error: {why}{where}", notes=submission.notes, grader_error=why, log=log)


def _task_to_json(task: tuple) -> dict:
    submission, source_path, workdir, limits, private, only = task
    return {"submission": {"student": submission.student, "notebook": str(submission.notebook) if submission.notebook else None,
                           "files": [str(file) for file in submission.files], "notes": submission.notes, "error": submission.error},
            "source_path": source_path, "workdir": workdir, "limits": asdict(limits), "private": private,
            "only": sorted(only) if only else None}


def _task_from_json(data: dict) -> tuple:
    given = data["submission"]
    submission = Submission(given["student"], Path(given["notebook"]) if given["notebook"] else None,
                            [Path(file) for file in given["files"]], given["notes"], given["error"])
    return (submission, data["source_path"], data["workdir"], sandbox.Limits(**data["limits"]), data["private"],
            set(data["only"]) if data["only"] else None)


def _write_atomically(path: Path, text: str) -> None:
    """A collector never reads half a result: write beside it, then rename."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)
