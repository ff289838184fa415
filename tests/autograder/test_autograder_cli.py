"""The instructor CLI end to end on every assignment, the students' self-check, and GPU-only items on a CPU grader.

Each assignment is graded once (``course_grading`` in conftest.py: ``autograder grade`` on a
scratch course, alice handing in the reference solution and bob the untouched release); the
checks below all read that grading. Every expected score is read from the source notebook's
nbgrader metadata (``course_helpers.facts``), so a new module is tested without edits here.
"""

import csv
import html
import re
import shutil

import nbformat
import pytest

from autograder import cli, skeleton
from autograder import selfcheck as student_cli
from autograder.nbgrader_cli import scripts_on_path
from autograder.outcomes import Outcome
from course_helpers import ASSIGNMENTS, facts, on_gpu, one_class_per_module, release, source


def _row(printed: str, first_word: str) -> str:
    return next(line for line in printed.splitlines() if line.split()[:1] == [first_word])


def _page_text(path) -> str:
    """An HTML page as text: code cells read as they were written (highlighting spans removed)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


# Module content the checks below also look for, beyond what they derive from the notebooks:
# what the self-check says about a question of the untouched release, and of the reference
# (per device class), and fragments of hidden tests that feedback must not show.
RELEASE_ROWS = {
    "01_gpu_basics": {"test_pairwise_speed": "FAILED: pairwise_sq_dists raised NotImplementedError"},
    # Each stub names what to write and its question (autograder.build.name_stubs); none leaves a name undefined.
    "02_architecture": {"test_launch_choice": "FAILED: launch_choice raised NotImplementedError: launch_choice is not written yet (Question 7): "
                                              "replace this line with your solution"},
}
SOLUTION_ROWS = {"01_gpu_basics": {"test_pairwise_speed": {"cpu": "(needed 4×)", "cuda": "(needed 10×)"}}}
HIDDEN_FRAGMENTS = {"01_gpu_basics": ("non-contiguous inputs", "x64")}


@pytest.mark.slow
class Grade:
    """One assignment, graded once by the trusted grader through the CLI (one class per module: see bottom)."""

    module = None  # set per generated class

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, course_grading):
        return course_grading(cls.module)

    @pytest.fixture(scope="class")
    @classmethod
    def expected(cls):
        return facts(cls.module)

    def test_reference_passes_every_item(self, graded, expected):
        """Full marks on a GPU; on a CPU the GPU-only items (tag requires-gpu) wait for a regrade."""
        assert graded.returncode == 0, graded.printed + graded.errors
        result = graded.result("alice")
        outcomes = {item.grade_id: item.outcome for item in result.items}
        assert list(outcomes) == [item.grade_id for item in expected.items], "every autograded item is graded, in order"
        gpu = on_gpu()
        waiting = {grade_id for grade_id, outcome in outcomes.items() if outcome == Outcome.NEEDS_GPU}
        assert waiting == (set() if gpu else expected.gpu_items), outcomes
        assert not expected.kernel_module or gpu or waiting, "each kernel module has a GPU-only speed item"
        lost = {item.grade_id: f"{item.outcome}: {item.message}" for item in result.items if item.outcome not in (Outcome.PASSED, Outcome.NEEDS_GPU)}
        assert lost == {}, f"the reference solution lost points: {lost}"
        assert result.score == expected.full_marks(gpu)
        assert result.device_class == ("cuda" if gpu else "cpu")

    def test_reference_kernels_compile_for_a_real_gpu(self, graded, expected):
        """Every kernel the tests launched went through NVIDIA's compiler (NVVM and ptxas, for sm_80)
        before the simulator ran it; grading.json keeps what the compiler reported."""
        kernels = graded.verdicts("alice")["kernels"]
        assert bool(kernels) == expected.kernel_module, kernels
        for kernel in kernels:
            assert kernel["arch"] == "sm_80" and kernel["registers"] > 0 and kernel["spill_bytes"] == 0, kernel

    def test_untouched_release_earns_nothing(self, graded):
        result = graded.result("bob")
        assert result.score == 0
        assert {item.outcome for item in result.items} <= {Outcome.FAILED, Outcome.NEEDS_GPU}

    def test_cli_prints_progress_and_each_students_score(self, graded, expected):
        assert graded.returncode == 0, graded.printed + graded.errors
        assert "[2/2]" in graded.printed, "progress lines are printed"
        alice, bob = _row(graded.printed, "alice"), _row(graded.printed, "bob")
        assert alice.split()[1] == f"{expected.full_marks(on_gpu()):g}/{expected.total:g}", graded.printed
        assert bob.split()[1] == f"0/{expected.total:g}", graded.printed
        for grade_id in expected.gpu_items if not on_gpu() else ():
            assert grade_id in alice, f"the GPU-only item {grade_id} is listed for a regrade"

    def test_feedback_shows_visible_tests_only_and_wraps_long_lines(self, graded, expected, tmp_path):
        course = shutil.copytree(graded.course, tmp_path / "course")  # others read the shared course
        assignment = self.module
        assert cli.main(["--course", str(course), "feedback", assignment]) == 0
        visible = [line.strip() for cell in nbformat.read(release(assignment), as_version=4).cells if skeleton.is_test(cell)
                   for line in cell.source.splitlines() if len(line.strip()) > 12]
        for student in ("bob", "alice"):
            page = course / "feedback" / student / assignment / f"{assignment}.html"
            feedback = page.read_text()
            for hidden in ("BEGIN HIDDEN TESTS", *HIDDEN_FRAGMENTS.get(assignment, ())):
                assert hidden not in feedback, f"{student}'s feedback shows hidden test text {hidden!r}"
            text = _page_text(page)
            assert any(line in text for line in visible), "the page's text shows the visible tests' code (else the next check proves nothing)"
            shown = [line for line in expected.hidden_lines if line in text]
            assert shown == [], f"{student}'s feedback shows hidden test lines {shown}"
        assert "replace this line with your solution" in (course / "feedback" / "bob" / assignment / f"{assignment}.html").read_text()

        # alice's verdicts (each "passed (graded on <device>)", a speed result, a GPU regrade notice) are
        # outputs in <pre> blocks: the page's head makes them wrap, not scroll sideways out of sight.
        alice = (course / "feedback" / "alice" / assignment / f"{assignment}.html").read_text()
        head, body = alice.split("</head>", 1)
        wrap = re.search(r"div\.output_subarea pre\s*\{([^}]*)\}", head)
        assert wrap and re.search(r"white-space:\s*pre-wrap", wrap.group(1)) and "overflow-wrap: anywhere" in wrap.group(1), \
            "the feedback page's CSS wraps long output lines (autograder/feedback.py, added by nbgrader_config.py)"
        assert re.search(r'class="output_subarea[^"]*">\s*<pre>\s*passed \(graded on ', body), "alice's verdicts are output <pre> blocks"

    def test_export_leaves_ungraded_cells_empty_and_names_pending_items(self, graded, expected, tmp_path):
        """No 0.0 where nothing was handed in (an LMS would take it as a grade); `pending` names what
        still waits for a person (written answers) or a GPU regrade (GPU-only items on a CPU grader)."""
        from autograder.nbgrader_cli import open_gradebook

        course = shutil.copytree(graded.course, tmp_path / "course")  # others read the shared course
        with open_gradebook(course) as gradebook:
            gradebook.update_or_create_assignment("99_later")  # released, nobody has handed it in yet
            gradebook.update_or_create_student("carol")  # has handed in nothing at all
        assert cli.main(["--course", str(course), "export", "--to", "grades.csv"]) == 0
        with open(course / "grades.csv") as handle:
            rows = {(row["assignment"], row["student_id"]): row for row in csv.DictReader(handle)}
        assert set(rows) == {(assignment, student) for assignment in (self.module, "99_later") for student in ("alice", "bob", "carol")}
        gpu = on_gpu()
        assert float(rows[self.module, "alice"]["raw_score"]) == expected.full_marks(gpu)
        assert float(rows[self.module, "bob"]["raw_score"]) == 0.0
        not_handed_in = [key for key in rows if key[0] == "99_later" or key[1] == "carol"]
        for key in not_handed_in:
            scores = {column: rows[key][column] for column in ("timestamp", "raw_score", "late_submission_penalty", "score", "pending")}
            assert set(scores.values()) == {""}, f"{key}: nothing was handed in, so nothing is scored: {scores}"
        awaiting = {f"{grade_id} (to grade by hand)" for grade_id in expected.manual}
        awaiting |= set() if gpu else {f"{grade_id} (GPU regrade)" for grade_id in expected.gpu_items}
        assert set(filter(None, rows[self.module, "alice"]["pending"].split("; "))) == awaiting, rows[self.module, "alice"]

    def test_gpu_only_items_wait_for_a_gpu_regrade(self, graded, expected):
        from nbgrader.api import Gradebook

        if on_gpu():
            pytest.skip("a GPU grader grades the GPU-only items itself")
        if not expected.gpu_items:
            pytest.skip(f"{self.module} has no GPU-only item")
        with scripts_on_path(), Gradebook(f"sqlite:///{graded.course / 'gradebook.db'}") as gradebook:
            grades = {g.name: g for g in gradebook.find_submission_notebook(self.module, self.module, "alice").grades}
            for grade_id in expected.gpu_items:
                assert grades[grade_id].auto_score is None and grades[grade_id].needs_manual_grade, \
                    f"{grade_id}: neither 0 nor full marks: flagged for a GPU regrade"
            scored = {grade_id: grades[grade_id].auto_score for grade_id in expected.points if grade_id not in expected.gpu_items}
            assert scored == {grade_id: points for grade_id, points in expected.points.items() if grade_id not in expected.gpu_items}
        verdicts = graded.verdicts("alice")
        assert verdicts["device_class"] == "cpu"
        assert {grade_id for grade_id, item in verdicts["items"].items() if item["outcome"] == "needs_gpu"} == expected.gpu_items

    def test_self_check_on_the_solution_shows_each_result_and_speed(self, graded, expected, tmp_path, monkeypatch, capsys):
        """``gpucourse check`` on the reference solution. Its plan is the grader's plan for alice, so
        alice's verdicts stand in for grading the reference a second time; the check's own call of
        the grader is exercised on the release (next test)."""
        from autograder import harness

        notebook = nbformat.read(source(self.module), as_version=4)
        nbformat.write(notebook, tmp_path / "mine.ipynb")
        expected_plan = skeleton.make_plan(notebook, notebook)
        calls = []

        def graded_already(plan, workdir, *args, **kwargs):
            assert plan == expected_plan and workdir.is_dir()
            calls.append(plan)
            return graded.result("alice")

        monkeypatch.setattr(harness, "grade", graded_already)
        gpu = on_gpu()
        returncode = student_cli.main(["check", str(tmp_path / "mine.ipynb")])
        printed = capsys.readouterr().out
        assert len(calls) == 1
        assert returncode == 0, f"everything this machine can grade passed: GPU-only items do not fail a CPU check\n{printed}"
        # Out of what this machine can grade; GPU-only items are named as not counted, never as lost points.
        assert _row(printed, "total").split()[3] == f"{expected.full_marks(gpu):g}/{expected.full_marks(gpu):g}", printed
        waiting = expected.total - expected.full_marks(gpu)
        assert (f"; {waiting:g} more point" in printed and "will be graded on a GPU (not counted here)" in printed) == bool(waiting), printed
        for item in expected.items:
            row = _row(printed, item.grade_id)
            if item.requires_gpu and not gpu:
                assert row.split()[1] == "-" and "not counted on this machine: it needs a GPU and will be graded on one" in row, row
            else:
                assert row.split()[1] == f"{item.points:g}/{item.points:g}" and "passed" in row, row
            if "assert_speedup" in item.source and (gpu or not item.requires_gpu):
                assert ("× faster" in row or "× as fast" in row) and "(needed " in row, f"the speed item's row shows measured and required speed: {row}"
        assert ("your kernels, compiled by NVIDIA's compiler for A100 (sm_80" in printed) == expected.kernel_module, printed
        for grade_id, expected_text in SOLUTION_ROWS.get(self.module, {}).items():
            assert expected_text["cuda" if gpu else "cpu"] in _row(printed, grade_id), printed

    def test_self_check_on_the_release_fails_every_question(self, expected, tmp_path, capsys):
        shutil.copy2(release(self.module), tmp_path / "mine.ipynb")
        assert student_cli.main(["check", str(tmp_path / "mine.ipynb")]) == 1
        printed = capsys.readouterr().out
        gpu = on_gpu()
        for item in expected.items:
            row = _row(printed, item.grade_id)
            assert ("not counted on this machine" if item.requires_gpu and not gpu else "FAILED") in row, row
            if not (item.requires_gpu and not gpu):
                assert re.search(r"FAILED: \S", row), f"a failed question says why: {row}"
        for grade_id, expected_text in RELEASE_ROWS.get(self.module, {}).items():
            assert expected_text in _row(printed, grade_id), printed
        assert "raised NotImplementedError" in printed, printed
        # A cell is named as the student finds it (its question and grade_id, or its place among all the
        # notebook's cells), never by the grader's own count of code cells.
        assert "code cell" not in printed, printed
        assert _row(printed, "total").split()[3] == f"0/{expected.full_marks(gpu):g}", printed


one_class_per_module(Grade, ASSIGNMENTS, globals())


def test_cli_reports_bad_input_clearly(tmp_path, capsys):
    assert cli.main(["--course", str(tmp_path), "grade", "99_nothing", str(tmp_path)]) == 1
    assert "no assignment '99_nothing'" in capsys.readouterr().err


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
