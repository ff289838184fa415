"""Grading as an array of tasks (autograder.tasks): plan, one `grade-task` process per student, collect.

The end-to-end test runs each task as its own process, as a job array's tasks are (`--index`, or the
engine's variable), and compares with the local pool's grading of the same notebooks (``course_grading``).
"""

import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder import cli, sandbox, tasks
from autograder.grading import StudentReport
from autograder.harness import ItemResult, SubmissionResult
from autograder.nbgrader_cli import open_gradebook
from autograder.outcomes import Outcome
from course_helpers import REPO_ROOT, make_course, make_submissions, reference_answered

ASSIGNMENT = "01_gpu_basics"


def test_a_report_survives_its_json_form():
    result = SubmissionResult([ItemResult("test_a", 2.0, Outcome.PASSED, 2.0, "ok", "out", 1.5)], "cpu (x86_64)", "cpu", "full",
                              notes=["a note"], seconds=3.0, kernels=[{"arch": "sm_80"}])
    for report in (StudentReport("ann", result, notes=["renamed"]), StudentReport("bo", None, error="grader error: x", grader_error="x", log="log")):
        again = tasks.report_from_json(json.loads(json.dumps(tasks.report_to_json(report))))
        assert again == report
    assert again.result is None and again.grader_error == "x"


def test_the_task_index_comes_from_the_option_or_the_array_engine():
    assert tasks.task_index(3, environ={"SLURM_ARRAY_TASK_ID": "1"}) == 3
    assert tasks.task_index(None, environ={"SLURM_ARRAY_TASK_ID": "1"}) == 1
    assert tasks.task_index(None, environ={"JOB_COMPLETION_INDEX": "4"}) == 4
    with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_ID"):
        tasks.task_index(None, environ={})


def test_a_bad_manifest_or_index_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["grade-task", str(tmp_path / "nowhere.json"), "--index", "0"]) == 1
    assert "cannot read the grading manifest" in capsys.readouterr().err
    manifest = tmp_path / tasks.MANIFEST
    manifest.write_text(json.dumps({"assignment": ASSIGNMENT, "course_root": str(tmp_path), "only": None, "tasks": []}))
    assert cli.main(["grade-task", str(manifest), "--index", "0"]) == 1
    assert "out of range" in capsys.readouterr().err


def _grade_task(manifest, index: int, **environ) -> subprocess.CompletedProcess:
    """One array task: a process of its own, its index given as the engine gives it."""
    command = [sys.executable, "-m", "autograder.cli", "grade-task", str(manifest)] + ([] if environ else ["--index", str(index)])
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env={**os.environ, **environ})


@pytest.mark.slow
def test_tasks_in_their_own_processes_grade_as_the_local_pool_does(tmp_path, course_grading, capsys):
    """alice (the reference) and bob (the untouched release) as two array tasks, carol's unreadable notebook as a
    third; dave's task never runs (a task that died): a grader error for dave alone, nothing recorded for him."""
    local = course_grading(ASSIGNMENT)
    course = make_course(tmp_path / "course", ASSIGNMENT)
    submissions = make_submissions(tmp_path / "submissions", {"alice": "solutions", "bob": "assignments", "dave": "assignments"}, ASSIGNMENT)
    (submissions / "carol").mkdir()
    (submissions / "carol" / f"{ASSIGNMENT}.ipynb").write_text("{ not json")

    assert cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--plan-only"]) == 0
    printed = capsys.readouterr().out
    [manifest] = course.glob(f"{tasks.RUNS}/{ASSIGNMENT}-*/{tasks.MANIFEST}")
    assert f"grade-task {manifest} --index I" in printed and f"collect {manifest}" in printed
    students = [task["submission"]["student"] for task in tasks.load(manifest)["tasks"]]
    assert students == ["alice", "bob", "carol", "dave"]

    runs = [_grade_task(manifest, 0), _grade_task(manifest, 1, SLURM_ARRAY_TASK_ID="1"), _grade_task(manifest, 2, JOB_COMPLETION_INDEX="2")]
    assert [run.returncode for run in runs] == [0, 0, 0], [run.stderr[-2000:] for run in runs]
    assert "task 2, carol: unreadable notebook" in runs[2].stdout
    assert tasks.missing_results(manifest) == [3]

    assert cli.main(["--course", str(course), "collect", str(manifest)]) == 2  # dave: a grader error
    collected = capsys.readouterr()
    assert "dave" in collected.err and tasks.NO_RESULT in collected.out
    for student in ("alice", "bob"):
        graded = json.loads((course / "autograded" / student / ASSIGNMENT / "grading.json").read_text())["items"]
        expected = local.verdicts(student)["items"]
        assert {k: (v["outcome"], v["score"]) for k, v in graded.items()} == {k: (v["outcome"], v["score"]) for k, v in expected.items()}
    with open_gradebook(course) as gradebook, open_gradebook(local.course) as local_gradebook:
        def scores(book, student):
            return {grade.name: grade.score for grade in book.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student).grades}
        assert scores(gradebook, "alice") == scores(local_gradebook, "alice")
        assert scores(gradebook, "bob") == scores(local_gradebook, "bob")
        assert sum(scores(gradebook, "carol").values()) == 0
        assert "dave" not in {student.id for student in gradebook.students}, "a task that wrote no result records nothing"


@pytest.mark.slow
def test_regrade_gpu_plans_only_the_waiting_items_one_gpu_per_task(tmp_path, course_grading, capsys):
    """After a CPU grading, regrade-gpu --dry-run writes the array for the items left "needs a GPU regrade" only,
    each task asking Slurm for a GPU on the partition named (submitting it needs a cluster with GPUs)."""
    local = course_grading(ASSIGNMENT)
    course = shutil.copytree(local.course, tmp_path / "course")
    waiting = {grade_id for grade_id, item in local.verdicts("alice")["items"].items() if item["outcome"] == "needs_gpu"}
    assert waiting and tasks.pending_gpu_items(course, ASSIGNMENT) == {"alice": waiting, "bob": waiting}
    assert cli.main(["--course", str(course), "regrade-gpu", ASSIGNMENT, str(local.submissions), "--backend", "slurm",
                     "--partition", "gpu", "--time", "00:20:00", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    for line in ("#SBATCH --array=0-1", "#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1", "#SBATCH --time=00:20:00", "grade-task"):
        assert line in printed, printed
    [manifest] = course.glob(f"{tasks.RUNS}/{ASSIGNMENT}-*/{tasks.MANIFEST}")
    planned = tasks.load(manifest)
    assert set(planned["only"]) == waiting
    assert [task["submission"]["student"] for task in planned["tasks"]] == ["alice", "bob"]


def test_regrade_gpu_with_nothing_waiting_says_so(tmp_path, capsys):
    course = make_course(tmp_path / "course", ASSIGNMENT, released=False)
    assert cli.main(["--course", str(course), "regrade-gpu", ASSIGNMENT, str(tmp_path), "--backend", "slurm", "--dry-run"]) == 0
    assert "no item of 01_gpu_basics waits for a GPU regrade" in capsys.readouterr().out


RUN_FOLDER_SNOOP = '''
import os

def time_call(fn, *args, warmup=1, repeats=5):
    run = os.path.dirname(os.path.dirname(os.getcwd()))
    seen = {}
    for name in ("manifest.json", "results", "work"):
        try:
            seen[name] = sorted(os.listdir(f"{run}/{name}")) if name != "manifest.json" else open(f"{run}/{name}").read()[:40]
        except OSError as error:
            seen[name] = type(error).__name__
    raise RuntimeError(f"seen={seen!r}")
'''


@pytest.mark.slow
def test_a_task_worker_sees_neither_the_manifest_nor_other_students_results(tmp_path):
    """The run folder lives in the course, not in /tmp: a student's worker still finds there only its own folder
    (the manifest, the results folder holding another student's verdict and the others' folders do not exist)."""
    from autograder import sandbox

    if not sandbox.namespaces_available():
        pytest.skip("without namespaces (not root) the worker sees the file system: isolation reduced")
    course = make_course(tmp_path / "course", ASSIGNMENT)
    submissions = tmp_path / "submissions"
    for student in ("eve", "mallory"):
        (submissions / student).mkdir(parents=True)
        nbformat.write(reference_answered(ASSIGNMENT, "time_call", RUN_FOLDER_SNOOP), submissions / student / f"{ASSIGNMENT}.ipynb")
    manifest = tasks.plan(ASSIGNMENT, submissions, course, only={"test_time_call"})
    tasks.result_path(manifest, 1).write_text('{"mallory": "already graded"}')
    [report] = tasks.run_task(manifest, 0)
    [item] = report.result.items
    assert item.score == 0 and "seen={'manifest.json': 'FileNotFoundError', 'results': 'FileNotFoundError', 'work': ['eve']}" in item.message, item.message


def _no_sandbox_here(monkeypatch) -> None:
    """This machine as one where the students' code cannot be sandboxed (not root, no user namespaces)."""
    monkeypatch.setattr(sandbox, "isolation", lambda: (sandbox.REDUCED, "not root, and an unprivileged user namespace is not allowed here"))


def test_grading_without_a_sandbox_is_refused_unless_allowed(tmp_path, monkeypatch, capsys):
    """Refused, saying why and how to go on, before anything is graded or planned; --allow-reduced-isolation plans it,
    and the manifest carries the permission to the nodes that run its tasks."""
    course = make_course(tmp_path / "course", ASSIGNMENT)
    submissions = make_submissions(tmp_path / "submissions", {"alice": "assignments"}, ASSIGNMENT)
    _no_sandbox_here(monkeypatch)
    for extra in ([], ["--plan-only"]):
        assert cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), *extra]) == 1
        error = capsys.readouterr().err
        assert "cannot sandbox the students' code: not root, and an unprivileged user namespace" in error, error
        assert "--allow-reduced-isolation" in error
    assert not (course / "autograded").exists() and not (course / tasks.RUNS).exists()
    assert cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--plan-only", "--allow-reduced-isolation"]) == 0
    [manifest] = course.glob(f"{tasks.RUNS}/{ASSIGNMENT}-*/{tasks.MANIFEST}")
    assert tasks.load(manifest)["allow_reduced_isolation"] is True


def test_a_task_on_a_node_that_cannot_sandbox_is_a_grader_error_for_its_students(tmp_path, monkeypatch):
    """Planned where the sandbox works, run on a node where it does not: nothing is graded there, and each of the
    task's students gets a grader error with the reason (collect records nothing for them)."""
    course = make_course(tmp_path / "course", ASSIGNMENT)
    submissions = make_submissions(tmp_path / "submissions", {"alice": "assignments", "bob": "assignments"}, ASSIGNMENT)
    monkeypatch.setattr(sandbox, "isolation", lambda: (sandbox.USER_NAMESPACES, "not root"))
    manifest = tasks.plan(ASSIGNMENT, submissions, course, per_task=2)
    _no_sandbox_here(monkeypatch)
    reports = tasks.run_task(manifest, 0)
    assert [(report.student, report.grader_error) for report in reports] == [("alice", tasks.NO_SANDBOX), ("bob", tasks.NO_SANDBOX)]
    assert "cannot sandbox" in reports[0].log and tasks.missing_results(manifest) == []
