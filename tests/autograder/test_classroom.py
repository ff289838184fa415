"""The classroom (issue 52): JupyterHub on this machine with nbgrader's exchange, driven as its users drive it.

One story, told once per run (the ``story`` fixture), then checked piece by piece:

1. the instructor releases module 01 (``autograder release``, ``nbgrader release_assignment``) in a shell of theirs;
2. student 1, in Chromium through the hub: logs in, fetches 01 from the Assignment List, writes one answer in the
   notebook and submits, then writes a second answer and submits again (the later submission counts);
   student 2 fetches and submits the untouched release with nbgrader's commands;
3. the instructor collects (``nbgrader collect``), grades the collected folder with the trusted grader
   (``autograder grade``, never ``nbgrader autograde``), writes feedback and releases it (``nbgrader release_feedback``),
   and opens the Formgrader in their JupyterLab;
4. student 1 fetches the feedback from the Assignment List and opens it.

Screenshots go to ``.test-artifacts/classroom/``. Needs root (the classroom creates local users), npm (the hub's
proxy) and the browser test's Chromium; it skips without them, and fails instead under ``CI=true``.
"""

import datetime
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from autograder import classroom as room
from course_helpers import CHROMIUM, CHROMIUM_ARGS, REPO_ROOT, browser_missing, facts

pytestmark = pytest.mark.slow

ASSIGNMENT = "01_gpu_basics"
# The test's own users, never a real classroom's (gpuc-...), nor those of another run of this test on the machine (CI's busy-machine
# check starts two runs at once).
PREFIX = f"gpuct{os.getpid()}"
SHOTS = REPO_ROOT / ".test-artifacts" / "classroom"
# The answers student 1 writes, one per submission: the later submission holds both.
ANSWERS = ("roofline", "offload")
EARNED = {"test_roofline", "test_offload"}  # the items those two answers feed, and all they feed


def _missing() -> list[str]:
    missing = [] if os.geteuid() == 0 else ["root (it creates local users)"]
    missing += [] if shutil.which("npm") or room.PROXY.exists() else ["npm (for JupyterHub's proxy)"]
    return missing + browser_missing()


def _free_ports(count: int = 3) -> int:
    """A port whose next ``count - 1`` are free too (the hub, its API, its proxy's API)."""
    for _ in range(100):
        first = random.randrange(20000, 40000)
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no three free ports in a row")


def _remove_users() -> None:
    """This run's users, with their homes (the instructor's course and gradebook)."""
    for line in Path("/etc/passwd").read_text().splitlines():
        user = line.split(":", 1)[0]
        if user.startswith(f"{PREFIX}-"):
            subprocess.run(["userdel", "--remove", user], capture_output=True)


def _answer(grade_id: str) -> str:
    """The reference's code for one answer cell, without nbgrader's solution markers."""
    solution = nbformat.read(REPO_ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    [cell] = [c for c in solution.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return "\n".join(line for line in cell.source.splitlines() if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)


def _shell(classroom: room.Classroom, user: str, *command: str, cwd: Path | None = None) -> str:
    """``command`` in ``user``'s shell; its output (it must succeed)."""
    done = room.as_user(classroom, user, list(command), cwd=cwd)
    assert done.returncode == 0, f"{' '.join(command)} as {user} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@dataclass
class Story:
    classroom: room.Classroom
    student: str
    untouched: str
    broken: str  # submits a notebook that is not JSON, then tries to delete everyone's submissions
    empty: str  # submits the assignment's folder without its notebook
    deleting: subprocess.CompletedProcess | None = None
    shots: dict = field(default_factory=dict)
    grading_output: str = ""
    feedback_text: str = ""


class Browser:
    """One user's browser session through the hub (Chromium, as tests/course/test_browser.py runs it)."""

    def __init__(self, chromium, classroom: room.Classroom, user: str, password: str):
        self.page = chromium.new_page(viewport={"width": 1400, "height": 900})
        self.page.set_default_timeout(120_000)
        self.user, self.base = user, f"{classroom.url}/user/{user}"
        self.page.goto(f"{classroom.url}/hub/login")
        self.page.fill("#username_input", user)
        self.page.fill("#password_input", password)
        self.page.click("#login_submit")
        self.page.wait_for_selector("#jp-MainMenu", timeout=240_000)  # the hub starts the user's JupyterLab

    def menu(self, menu: str, item: str) -> None:
        self.page.locator("#jp-MainMenu").get_by_role("menuitem", name=menu, exact=True).click()
        self.page.locator(".lm-Menu").get_by_role("menuitem", name=item, exact=True).click()

    def assignment_list(self) -> None:
        self.menu("Nbgrader", "Assignment List")

    def shot(self, story: Story, name: str) -> None:
        path = SHOTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        story.shots[name] = path

    def write_answer(self, grade_id: str) -> None:
        """Open the fetched notebook, replace one answer cell's code with the reference's, save."""
        self.page.goto(f"{self.base}/lab/tree/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")
        self.page.wait_for_selector(".jp-NotebookPanel .jp-CodeCell")
        first_line = _answer(grade_id).splitlines()[0]
        cell = self.page.locator(".jp-NotebookPanel .jp-CodeCell", has_text=first_line).first
        cell.scroll_into_view_if_needed()
        cell.locator(".cm-content").click()
        self.page.keyboard.press("Control+a")
        self.page.keyboard.insert_text(_answer(grade_id))
        self.page.keyboard.press("Control+s")
        self.page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')")

    def submit(self) -> None:
        """Submit from the Assignment List; wait until the list of submissions shows one more."""
        self.assignment_list()
        submitted = self.page.locator("#submitted_assignments_list")
        before = submitted.inner_text()
        self.page.get_by_role("button", name="Submit").click()
        self.page.wait_for_function("([list, before]) => { const text = document.querySelector(list).innerText;"
                                    " return text !== before && !text.includes('no submitted'); }", arg=["#submitted_assignments_list", before])


@pytest.fixture(scope="module")
def story():
    missing = _missing()
    if missing:
        message = "the classroom test needs " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: this test must run in CI)")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    _remove_users()
    state = Path(tempfile.mkdtemp(prefix="gpucourse-classroom-", dir="/var/tmp"))
    try:
        classroom = room.start(state, students=4, port=_free_ports(), prefix=PREFIX)
        passwords = dict(line.split() for line in classroom.passwords_file.read_text().splitlines())
        student, untouched, broken, empty = classroom.students
        told = Story(classroom, student, untouched, broken, empty)
        course = classroom.course()
        instructor = classroom.instructor
        _shell(classroom, instructor, "autograder", "--course", ".", "release", ASSIGNMENT, cwd=course)
        _shell(classroom, instructor, "nbgrader", "release_assignment", ASSIGNMENT, cwd=course)
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            browser = Browser(chromium, classroom, student, passwords[student])
            browser.assignment_list()
            browser.page.get_by_role("button", name="Fetch").wait_for()
            browser.shot(told, "1-student-assignment-list")
            browser.page.get_by_role("button", name="Fetch").click()
            browser.page.get_by_role("button", name="Submit").wait_for()
            for grade_id in ANSWERS:  # two submissions: the second one holds both answers
                browser.write_answer(grade_id)
                browser.submit()
            browser.shot(told, "2-student-submitted")
            # The due date falls between student 1's submissions and the others': they are late, student 1 is not.
            due = datetime.datetime.now(datetime.timezone.utc)
            _shell(classroom, instructor, "nbgrader", "db", "assignment", "add", ASSIGNMENT, f"--duedate={due:%Y-%m-%d %H:%M:%S.%f} UTC", cwd=course)
            time.sleep(1)
            _shell(classroom, untouched, "nbgrader", "fetch_assignment", ASSIGNMENT)
            _shell(classroom, untouched, "nbgrader", "submit", ASSIGNMENT)
            _shell(classroom, broken, "nbgrader", "fetch_assignment", ASSIGNMENT)
            _shell(classroom, broken, "sh", "-c", f"printf '{{ not a notebook' > {ASSIGNMENT}/{ASSIGNMENT}.ipynb")
            _shell(classroom, broken, "nbgrader", "submit", ASSIGNMENT)
            inbound = classroom.exchange / classroom.course_id / "inbound"
            told.deleting = room.as_user(classroom, broken, ["sh", "-c", f"ls {inbound}; rm -rf {inbound}/*"])
            _shell(classroom, empty, "nbgrader", "fetch_assignment", ASSIGNMENT)
            _shell(classroom, empty, "rm", f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb")
            _shell(classroom, empty, "nbgrader", "submit", ASSIGNMENT)

            _shell(classroom, instructor, "nbgrader", "collect", ASSIGNMENT, cwd=course)
            told.grading_output = _shell(classroom, instructor, "autograder", "--course", ".", "grade", ASSIGNMENT, "submitted", "--jobs", "2",
                                         cwd=course)
            _shell(classroom, instructor, "autograder", "--course", ".", "feedback", ASSIGNMENT, cwd=course)
            _shell(classroom, instructor, "nbgrader", "release_feedback", ASSIGNMENT, cwd=course)
            teacher = Browser(chromium, classroom, instructor, passwords[instructor])
            teacher.menu("Nbgrader", "Formgrader")
            teacher.page.frame_locator("iframe").locator("text=" + ASSIGNMENT).first.wait_for()
            teacher.shot(told, "3-instructor-formgrader")

            browser.assignment_list()
            browser.page.get_by_role("button", name="Fetch Feedback").click()
            browser.page.locator("text=view feedback").first.wait_for()
            browser.shot(told, "4-student-feedback-fetched")
            # "(view feedback)" opens the feedback's folder in the file browser; the student opens the page there.
            browser.page.locator("text=(view feedback)").first.click()
            browser.page.locator(".jp-DirListing-item", has_text=f"{ASSIGNMENT}.html").dblclick()
            page_text = browser.page.frame_locator(".jp-HTMLViewer iframe").locator("body")
            page_text.locator("text=Score").first.wait_for()
            told.feedback_text = page_text.inner_text()
            browser.shot(told, "5-student-feedback")
            chromium.close()
        yield told
    finally:
        room.stop(state)
        _remove_users()
        shutil.rmtree(state, ignore_errors=True)


def _graded(story: Story, student: str) -> dict[str, float]:
    path = story.classroom.course() / "autograded" / student / ASSIGNMENT / "grading.json"
    return {grade_id: item["score"] for grade_id, item in json.loads(path.read_text())["items"].items()}


def test_the_later_submission_is_graded_by_the_trusted_grader(story):
    scores = _graded(story, story.student)
    points = facts(ASSIGNMENT).points
    assert {grade_id for grade_id, score in scores.items() if score} == EARNED, scores
    assert sum(scores.values()) == sum(points[grade_id] for grade_id in EARNED)
    assert "isolation" in json.loads((story.classroom.course() / "autograded" / story.student / ASSIGNMENT / "grading.json").read_text())


def test_the_untouched_release_earns_nothing(story):
    assert sum(_graded(story, story.untouched).values()) == 0


def test_a_broken_notebook_costs_only_its_student(story):
    """The grader says why and records 0 for the broken one; the others' grades are checked above and below."""
    assert f"unreadable notebook {ASSIGNMENT}.ipynb" in story.grading_output, story.grading_output[-2000:]
    assert sum(_graded(story, story.broken).values()) == 0


def test_an_empty_submission_is_named_and_costs_only_its_student(story):
    assert f"no notebook named {ASSIGNMENT}.ipynb (found: no notebook at all)" in story.grading_output, story.grading_output[-2000:]
    assert sum(_graded(story, story.empty).values()) == 0


def test_a_student_cannot_delete_the_others_submissions(story):
    """nbgrader's inbound folder lets students write, not list: a student's `rm -rf inbound/*` finds nothing to delete, and
    every other student's submission was collected and graded (their scores are checked above and below)."""
    assert "Permission denied" in story.deleting.stderr, story.deleting
    collected = {path.name for path in (story.classroom.course() / "submitted").iterdir()}
    assert collected == {story.student, story.untouched, story.broken, story.empty}


def _notes(story: Story, student: str) -> list[str]:
    return json.loads((story.classroom.course() / "autograded" / student / ASSIGNMENT / "grading.json").read_text())["notes"]


def test_a_submission_after_the_due_date_is_said_to_be_late(story):
    """nbgrader's timestamps reach the gradebook; the grader says who was late, in its table and in grading.json."""
    assert not any(note.startswith("late:") for note in _notes(story, story.student))
    for student in (story.untouched, story.broken, story.empty):
        assert any(note.startswith("late: submitted ") and note.endswith("after the due date (nbgrader's timestamp)")
                   for note in _notes(story, student)), _notes(story, student)
    assert "late: submitted " in story.grading_output


def test_the_gradebook_holds_what_the_grader_gave(story):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{story.classroom.course() / 'gradebook.db'}") as gradebook:
        for student in (story.student, story.untouched, story.broken, story.empty):
            notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            recorded = {grade.name: float(grade.score) for grade in notebook.grades if grade.name in facts(ASSIGNMENT).points}
            assert recorded == _graded(story, student), student


def test_the_student_reads_the_feedback(story):
    home = Path(story.classroom.environment(story.student)["HOME"])
    assert list(home.glob(f"{ASSIGNMENT}/feedback/*/{ASSIGNMENT}.html")), "no feedback was fetched into the student's folder"
    earned = sum(facts(ASSIGNMENT).points[grade_id] for grade_id in EARNED)
    assert f"{ASSIGNMENT} (Score: {earned:.1f} / " in story.feedback_text, story.feedback_text[:500]


def test_every_step_was_screenshot(story):
    for name, path in story.shots.items():
        assert path.stat().st_size > 10_000, f"{name}: an empty screenshot"
    assert len(story.shots) == 5
