"""The instructor CLI end to end, the students' self-check, and GPU-only items on a CPU grader."""

import csv
import shutil

import nbformat
import pytest

from autograder import cli
from autograder.nbgrader_cli import scripts_on_path
from gpucourse import cli as student_cli

ASSIGNMENT = "01_gpu_basics"


def make_course(repo_root, target, *, gpu_only_speed=False, assignment=ASSIGNMENT):
    shutil.copy2(repo_root / "nbgrader_config.py", target / "nbgrader_config.py")
    for folder in ("solutions", "assignments"):
        shutil.copytree(repo_root / folder / assignment, target / folder / assignment)
    if gpu_only_speed:  # pretend the speed item can only be judged on a GPU
        path = target / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_pairwise_speed":
                cell.metadata["tags"] = ["requires-gpu"]
        nbformat.write(notebook, path)
    return target


def make_submissions(repo_root, target, students, assignment=ASSIGNMENT):
    for student, origin in students.items():
        (target / student).mkdir(parents=True)
        shutil.copy2(repo_root / origin / assignment / f"{assignment}.ipynb", target / student / f"{assignment}.ipynb")
    return target


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory, request):
    repo_root = request.config.rootpath
    course = make_course(repo_root, tmp_path_factory.mktemp("course"), gpu_only_speed=True)
    submissions = make_submissions(repo_root, tmp_path_factory.mktemp("subs"), {"alice": "solutions", "bob": "assignments"})
    return course, submissions


def test_grade_feedback_export_round_trip(graded_course, capsys):
    course, submissions = graded_course
    assert cli.main(["--course", str(course), "grade", ASSIGNMENT, str(submissions), "--jobs", "2"]) == 0
    printed = capsys.readouterr().out
    assert "[2/2]" in printed, "progress lines are printed"
    assert "alice    8/10" in printed and "test_pairwise_speed" in printed, printed

    assert cli.main(["--course", str(course), "feedback", ASSIGNMENT]) == 0
    feedback = (course / "feedback" / "bob" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "replace this line with your solution" in feedback
    for hidden in ("BEGIN HIDDEN TESTS", "non-contiguous inputs", "x64"):
        assert hidden not in feedback, f"feedback shows hidden test text {hidden!r}"

    assert cli.main(["--course", str(course), "export", "--to", str(course / "grades.csv")]) == 0
    with open(course / "grades.csv") as handle:
        rows = {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(handle)}
    assert rows == {"alice": 8.0, "bob": 0.0}


def test_gpu_only_items_wait_for_a_gpu_regrade(graded_course):
    from nbgrader.api import Gradebook

    course, _ = graded_course
    with scripts_on_path(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        grades = {g.name: g for g in gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "alice").grades}
        speed = grades["test_pairwise_speed"]
        assert speed.auto_score is None and speed.needs_manual_grade, "neither 0 nor full marks: flagged for a GPU regrade"
        assert grades["test_pairwise_correct"].auto_score == 2.0
    verdicts = (course / "autograded" / "alice" / ASSIGNMENT / "grading.json").read_text()
    assert '"needs_gpu"' in verdicts and '"device_class": "cpu"' in verdicts


def test_cli_reports_bad_input_clearly(tmp_path, capsys):
    assert cli.main(["--course", str(tmp_path), "grade", "99_nothing", str(tmp_path)]) == 1
    assert "no assignment '99_nothing'" in capsys.readouterr().err


def test_self_check_prints_a_table_per_question(repo_root, capsys):
    assert student_cli.main(["check", str(repo_root / "assignments" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")]) == 1
    printed = capsys.readouterr().out
    assert "test_pairwise_speed" in printed and "FAILED: pairwise_sq_dists raised NotImplementedError" in printed
    assert "total (visible tests)    0/10" in printed


def test_self_check_shows_measured_and_required_speed(repo_root, tmp_path, capsys):
    notebook = nbformat.read(repo_root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    nbformat.write(notebook, tmp_path / "mine.ipynb")
    assert student_cli.main(["check", str(tmp_path / "mine.ipynb")]) == 0
    printed = capsys.readouterr().out
    assert "× faster" in printed and "(needed 4×)" in printed
    assert "total (visible tests)    10/10" in printed


def test_summary_table_lists_problems():
    from autograder.grading import StudentReport
    from autograder.harness import ItemResult, SubmissionResult

    items = [ItemResult("a", 2, "passed", 2), ItemResult("b", 2, "timeout", 0), ItemResult("c", 2, "needs_gpu", 0)]
    reports = {
        "ann": StudentReport("ann", SubmissionResult(items, "CPU x", "cpu", "namespaces"), notes=["renamed notebook"]),
        "ben": StudentReport("ben", None, error="unreadable notebook x.ipynb"),
    }
    table = cli.summary_table(reports)
    assert "ann      2/6" in table and "b (timeout)" in table and "renamed notebook" in table
    assert "ben      0" in table and "unreadable notebook" in table
