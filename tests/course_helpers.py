"""What the tests know about the course, in one place: where its notebooks are, what each
module's notebooks say (items, points, GPU-only items, hidden tests), scratch courses to grade
in, and results computed once per test run and shared between pytest-xdist workers.

Every per-module fact is read from the notebooks, so a new module ``NN_topic`` is tested
without editing a test: the tests parametrise over :data:`ASSIGNMENTS` and :data:`LECTURES`.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder import compile_seed, skeleton
from autograder.build import REPO_ROOT, REQUIRES_GPU, assignment_sources, lecture_sources

ASSIGNMENTS = [path.parent.name for path in assignment_sources(REPO_ROOT)]
LECTURES = [path.with_suffix(".ipynb") for path in lecture_sources(REPO_ROOT)]

# Seconds a notebook may take top to bottom on CI's 2-core CPU machine (the design's budget per
# lecture); a module's lecture and its reference solution share a budget.
DEFAULT_BUDGET_SECONDS = 180
CPU_BUDGET_SECONDS = {
    "01_gpu_basics": 120,  # module 01 runs no kernels: it must stay quick
    "07_ml_compilation": 150,  # the lecture ran in 49 s on a quiet 2-core CPU (numba compiles included), the solution in 29 s
    "06_profiling_fusion": 120,  # the lecture ran in 38 s on a quiet 2-core CPU, Inductor's cache empty (three compiles: 11, 2, 1 s)
}


def budget_seconds(notebook: Path) -> float:
    return CPU_BUDGET_SECONDS.get(Path(notebook).stem, DEFAULT_BUDGET_SECONDS)


class LoadMeter:
    """How much load from outside this process's tree slowed what ran inside ``with LoadMeter() as meter:``.

    The budgets are for a quiet machine (a student's), so a run on a busy one (the other test workers,
    a second test run) is counted in quiet-machine seconds, as the grader counts its limits
    (:class:`autograder.clock.FairClock`: each wall second counts 1 / slowdown, at most
    ``MAX_SLOWDOWN``, so a runaway notebook still fails).
    """

    def __enter__(self) -> LoadMeter:
        from autograder.clock import FairClock

        self._clock = FairClock().__enter__()
        self._started = time.monotonic()
        self.slowdown = 1.0
        return self

    def __exit__(self, *exc) -> None:
        wall, fair = time.monotonic() - self._started, self._clock.now()
        self._clock.__exit__(*exc)
        self.slowdown = max(wall / fair, 1.0) if fair > 0 else 1.0  # the clock samples load: never below 1 by rounding


def assert_within_budget(path: Path, seconds: float, meter: LoadMeter) -> None:
    """``path`` (a lecture or a solution notebook) ran ``seconds`` of wall time, under ``meter``: within its budget."""
    budget, quiet = budget_seconds(path), seconds / meter.slowdown
    print(f"{path.name}: {seconds:.1f} s, {quiet:.1f} s on a quiet machine (average slowdown {meter.slowdown:.2f})")
    assert quiet < budget, f"{path.name} took {quiet:.0f} s on a quiet machine ({seconds:.0f} s here), over its {budget} s budget"


def source(assignment: str, root: Path = REPO_ROOT) -> Path:
    """The instructor's notebook: reference solutions and hidden tests."""
    return Path(root) / "solutions" / assignment / f"{assignment}.ipynb"


def release(assignment: str, root: Path = REPO_ROOT) -> Path:
    """The notebook students get."""
    return Path(root) / "assignments" / assignment / f"{assignment}.ipynb"


def on_gpu() -> bool:
    from gpucourse import devices

    return devices.device_class() == "cuda"


HIDDEN_BLOCK = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.S)


@dataclass(frozen=True)
class Facts:
    """What one assignment's source notebook says about its grading."""

    assignment: str
    items: tuple[skeleton.TestItem, ...]  # the autograded test cells, in order
    manual: tuple[str, ...]  # answers an instructor grades by hand
    kernel_module: bool  # a solution writes a @cuda.jit or @triton.jit kernel
    hidden_lines: tuple[str, ...]  # lines of hidden tests that appear nowhere else (not in the release, not in the solutions)

    @property
    def total(self) -> float:
        return sum(item.points for item in self.items)

    @property
    def points(self) -> dict[str, float]:
        return {item.grade_id: item.points for item in self.items}

    @property
    def gpu_items(self) -> set[str]:
        """Items tagged ``requires-gpu``: a CPU grader leaves them for a GPU regrade."""
        return {item.grade_id for item in self.items if item.requires_gpu}

    def full_marks(self, gpu: bool) -> float:
        """What the reference solution earns from the trusted grader on this kind of machine."""
        return self.total if gpu else sum(item.points for item in self.items if not item.requires_gpu)


@functools.lru_cache(maxsize=None)
def facts(assignment: str) -> Facts:
    notebook = nbformat.read(source(assignment), as_version=4)
    plan = skeleton.make_plan(notebook, notebook)
    manual = tuple(cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells
                   if cell.metadata.get("nbgrader", {}).get("grade") and cell.metadata["nbgrader"].get("solution"))
    kernel_module = any(skeleton.is_solution(cell) and ("@cuda.jit" in cell.source or "@triton.jit" in cell.source) for cell in notebook.cells)
    whole = "\n".join(cell.source for cell in notebook.cells)
    # What a student's page may show anyway: the release, and (for the reference) the solutions.
    visible = "\n".join(cell.source for cell in nbformat.read(release(assignment), as_version=4).cells) + HIDDEN_BLOCK.sub("", whole)
    hidden = [line.strip() for block in HIDDEN_BLOCK.findall(whole) for line in block.splitlines()]
    # Short lines ("else:", "return n") can legitimately recur in visible code: only telling ones count.
    hidden_lines = tuple(dict.fromkeys(line for line in hidden if len(line) > 12 and line not in visible))
    assert all(REQUIRES_GPU in item.tags for item in plan.items if item.requires_gpu)
    return Facts(assignment, tuple(plan.items), manual, kernel_module, hidden_lines)



def reference_answered(assignment: str, grade_id: str, code) -> nbformat.NotebookNode:
    """The reference notebook with its answer cell ``grade_id`` replaced, as a student might have answered:
    ``code`` is the new source, or a function editing the reference's (then the edit must change something)."""
    notebook = nbformat.read(source(assignment), as_version=4)
    [cell] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    if callable(code):
        edited = code(cell.source)
        assert edited != cell.source, "the edit no longer applies to the reference: update the variant"
        code = edited
    cell.source = code
    return notebook

# --- Lecture cells run on their own ----------------------------------------------------------


def lecture_cells(lecture: Path, cell_type: str) -> list[str]:
    """The sources of a lecture's cells of ``cell_type``, read from its .py source."""
    import jupytext

    return [cell.source for cell in jupytext.read(lecture).cells if cell.cell_type == cell_type]


def lecture_cell(lecture: Path, marker: str, cell_type: str = "code") -> str:
    """The one cell of ``lecture`` (of ``cell_type``) that contains ``marker``."""
    found = [text for text in lecture_cells(lecture, cell_type) if marker in text]
    assert len(found) == 1, f"expected one {cell_type} cell of {lecture.name} containing {marker!r}, found {len(found)}"
    return found[0]


def run_lecture_cell(lecture: Path, marker: str, **names):
    """Run the code cell of ``lecture`` containing ``marker`` in a namespace holding ``names``; return the
    namespace and what it printed."""
    import contextlib
    import io

    namespace = dict(names)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(lecture_cell(lecture, marker), f"{lecture.name} (cell with {marker!r})", "exec"), namespace)
    return namespace, out.getvalue()


def lecture_calls(lecture: Path, module: str) -> set[str]:
    """The names ``module.name(...)`` that ``lecture``'s .py source calls, read from its syntax tree: which of a
    sentence module's functions the lecture prints through (docs/authoring.md, "Sentences from numbers")."""
    import ast

    return {node.func.attr for node in ast.walk(ast.parse(lecture.read_text())) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id == module}


# --- Scratch courses ---------------------------------------------------------------------------


def make_course(target: Path, assignment: str, *, root: Path = REPO_ROOT, released: bool = True) -> Path:
    """A course folder holding just ``assignment`` (source and release) and the nbgrader config.

    ``released``: with a ``gradebook.db`` in which nbgrader has already released the assignment,
    copied from :func:`released_gradebook` (releasing takes nbgrader about 9 s); without it the
    grader releases the assignment itself on its first grading, as in a new course.
    """
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / "nbgrader_config.py", target / "nbgrader_config.py")
    for folder in ("solutions", "assignments"):
        shutil.copytree(root / folder / assignment, target / folder / assignment)
    if released:
        shutil.copy2(released_gradebook(assignment, root), target / "gradebook.db")
    return target


@functools.cache
def released_gradebook(assignment: str, root: Path = REPO_ROOT) -> Path:
    """A gradebook in which nbgrader has released ``assignment``, made once per test process
    in a scratch course (removed when the process exits)."""
    from autograder.build import release_assignment

    scratch = Path(tempfile.mkdtemp(prefix=f"released-{assignment}-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    shutil.copy2(root / "nbgrader_config.py", scratch / "nbgrader_config.py")
    shutil.copytree(root / "solutions" / assignment, scratch / "solutions" / assignment)
    release_assignment(scratch, assignment)
    return scratch / "gradebook.db"


def make_submissions(target: Path, students: dict[str, str], assignment: str, *, root: Path = REPO_ROOT) -> Path:
    """One folder per student holding a copy of ``root/<origin>/<assignment>/<assignment>.ipynb``
    (origin ``"solutions"``: the reference; ``"assignments"``: the untouched release)."""
    target = Path(target)
    for student, origin in students.items():
        (target / student).mkdir(parents=True)
        shutil.copy2(root / origin / assignment / f"{assignment}.ipynb", target / student / f"{assignment}.ipynb")
    return target


def execute_notebook(notebook: nbformat.NotebookNode, workdir: Path, timeout: int = 600, **options) -> nbformat.NotebookNode:
    """Run ``notebook`` top to bottom in a fresh kernel whose working folder is ``workdir``.

    Parallel test workers start kernels at once, so two precautions: the kernel talks over Unix
    sockets in ``workdir``, not TCP ports two kernels could race for; and the client's reads
    cannot stall (:func:`notebook_client`: a lecture once "ran" 600 s, kernel and client idle,
    waiting for a reply that had arrived; reproduced with plain nbclient in two processes).
    """
    from jupyter_client import AsyncKernelManager

    if compile_seed.uses_compile(cell.source for cell in notebook.cells):
        compile_seed.warm_default_cache()
    manager = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(Path(workdir) / "kernel"))
    notebook_client(notebook, km=manager, timeout=timeout, resources={"metadata": {"path": str(workdir)}}, **options).execute()
    return notebook


def keep_executed(notebook: nbformat.NotebookNode, filename: str, label: str, seconds: float) -> None:
    """With GPUCOURSE_EXECUTED_DIR set (scripts/gpu_check.sh), keep an executed notebook and its run time for the report."""
    keep = os.environ.get("GPUCOURSE_EXECUTED_DIR")
    if keep:
        nbformat.write(notebook, Path(keep) / filename)
        with open(Path(keep) / "run-times.txt", "a") as times:
            times.write(f"{label}: {seconds:.1f} s\n")


def executed_seconds(notebook: nbformat.NotebookNode) -> float:
    """How long an executed notebook ran, from the timestamps nbclient records per cell: from
    the first cell's start to the last cell's reply (the kernel's start-up is not counted)."""
    from datetime import datetime

    stamps = []
    for cell in notebook.cells:
        execution = cell.get("metadata", {}).get("execution", {})
        stamps += [datetime.fromisoformat(value.replace("Z", "+00:00")) for key, value in execution.items()
                   if key in ("iopub.execute_input", "shell.execute_reply")]
    assert stamps, "the notebook has no execution timestamps: was it executed (with nbclient's record_timing)?"
    return (max(stamps) - min(stamps)).total_seconds()


# --- An executed lecture: where it runs, and what makes it acceptable ---------------------------

CHROMIUM = Path("/usr/bin/chromium")  # Debian's: the browser test never uses `playwright install`'s
# Headless, as root, offline: without the background-networking flags Chromium's connections to Google's hosts are refused by
# the machine's closed network, many at a time.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# Lecture 02 (whose occupancy calculator the browser test plays with) and lectures from 05 on are run once per
# test run, in JupyterLab by tests/course/test_browser.py (Run All, as a student does: its screenshots of their figures,
# widgets and training monitors come from that run), wherever the browser test runs; tests/course/test_notebooks.py runs
# them (nbclient) only where it does not. 01, 03 and 04 always run in nbclient.
FIRST_BROWSER_LECTURE = 5
CALCULATOR_LECTURE = "02_architecture"
BROWSER_LECTURES = [path for path in LECTURES if path.stem == CALCULATOR_LECTURE or int(path.stem[:2]) >= FIRST_BROWSER_LECTURE]


def browser_missing() -> list[str]:
    """What tests/course/test_browser.py needs and this machine lacks (empty: it can run)."""
    missing = []
    try:
        from playwright import sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install playwright; it is in the dev extra: make install)")
    if not CHROMIUM.exists():
        missing.append(f"Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    return missing


def browser_test_runs() -> bool:
    """Whether tests/course/test_browser.py runs here: where nothing it needs is missing, and always under CI=true
    (where it fails, never skips, if something is missing)."""
    return os.environ.get("CI") == "true" or not browser_missing()


def runs_in_browser(module: str) -> bool:
    """Whether lecture ``module`` is executed (and checked) by tests/course/test_browser.py in this test run."""
    return module in {path.stem for path in BROWSER_LECTURES} and browser_test_runs()


# JupyterLab's output area in the browser test's 1400-px window with the file browser open: a wider
# figure is shrunk to fit, its labels with it (a 16-inch figure's 8-pt labels came out at 5 pt).
SHOWN_WIDTH_PX = 960


def figure_widths(notebook: nbformat.NotebookNode):
    """(cell index, pixel width) of every PNG a notebook's outputs show; the width is in the PNG's header."""
    import base64
    import struct

    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                yield index, struct.unpack(">I", base64.b64decode(png)[16:20])[0]


def assert_lecture_acceptable(path: Path, notebook: nbformat.NotebookNode, seconds: float, meter: LoadMeter) -> None:
    """The one definition of an acceptable executed lecture, whoever ran it (nbclient in tests/course/test_notebooks.py,
    JupyterLab in tests/course/test_browser.py): kept for a GPU report where asked, within its budget (``seconds`` of wall
    time under ``meter``), no error, no C++ library's log lines, no figure wider than JupyterLab shows unscaled."""
    path = Path(path)
    keep_executed(notebook, path.name, f"course/{path.name}", seconds)
    assert_within_budget(path, seconds, meter)
    assert output_errors(notebook) == []
    assert library_log_lines(notebook) == []
    too_wide = {f"cell {index}": width for index, width in figure_widths(notebook) if width > SHOWN_WIDTH_PX}
    assert too_wide == {}, f"figures wider than the {SHOWN_WIDTH_PX} px JupyterLab shows unscaled (px): {too_wide}"


def output_errors(notebook: nbformat.NotebookNode) -> list:
    return [output for cell in notebook.cells for output in cell.get("outputs", []) if output.output_type == "error"]


# A line of a C++ library's own log, as torch's profiler (Kineto) writes them: "USDT:2026-12-04 14:45:24 15660:15660 X.cpp:52] ..."
LIBRARY_LOG_LINE = re.compile(r"^[A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\.cpp:\d+\]", re.MULTILINE)


def library_log_lines(notebook: nbformat.NotebookNode) -> list[str]:
    """Lines a C++ library logged into a notebook's outputs (noise a student cannot act on)."""
    return [match.group(0) for cell in notebook.cells for output in cell.get("outputs", [])
            if output.output_type == "stream" for match in LIBRARY_LOG_LINE.finditer(output.text)]


# --- Results shared between xdist workers --------------------------------------------------------


def shared_dir(tmp_path_factory) -> Path:
    """A folder every worker of this test run sees (the run's own temp root; not shared across runs)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def computed_once(tmp_path_factory, key: str, compute):
    """``compute(folder)`` run once per test run, whichever xdist worker asks first; the others
    wait for it and read its JSON result. ``folder`` is a fresh folder beside the result, shared
    by all workers, for files the result names (a scratch course)."""
    from filelock import FileLock

    root = shared_dir(tmp_path_factory) / "computed-once"
    root.mkdir(exist_ok=True)
    result = root / f"{key}.json"
    with FileLock(str(root / f"{key}.lock")):
        if result.exists():
            return json.loads(result.read_text())
        folder = root / key
        shutil.rmtree(folder, ignore_errors=True)  # a run of compute that raised on another worker
        folder.mkdir()
        value = compute(folder)
        result.write_text(json.dumps(value))
        return value


def one_class_per_module(base: type, modules, namespace: dict) -> None:
    """Define ``Test<Base>_<module>``, a subclass of ``base`` with ``module`` set, for each course
    module: under ``--dist loadscope`` each class is one unit of work, so the modules' notebooks
    run on both workers, and each class's fixtures run once for its module."""
    for module in modules:
        name = f"Test{base.__name__}_{module}"
        namespace[name] = type(name, (base,), {"module": module, "__module__": namespace["__name__"], "__qualname__": name})


# --- Executing notebooks -------------------------------------------------------------------------


def _read_in_slices(channel, slice_seconds: float = 1.0) -> None:
    """Make ``channel.get_msg(timeout)`` wait in polls of at most ``slice_seconds``.

    pyzmq's asyncio poll can miss the wake-up for a message that has arrived; it then finds the
    message only when its timeout fires (nbclient's cell timeout: 600 s, or never for IOPub).
    Seen here with two notebooks executing at once (pytest -n 2, and plain nbclient in two
    processes): the next cell started exactly 600 s after the previous one's reply, kernel and
    client idle meanwhile. Short polls bound such a stall to a second; a real timeout still
    raises Empty.
    """
    from queue import Empty

    from jupyter_core.utils import ensure_async

    read = channel.get_msg  # a coroutine for an async kernel client, a plain call for a blocking one

    async def get_msg(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = slice_seconds if deadline is None else min(slice_seconds, deadline - time.monotonic())
            try:
                return await ensure_async(read(timeout=max(left, 0.0)))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    channel.get_msg = get_msg


def notebook_client(notebook: nbformat.NotebookNode, **options):
    """An ``nbclient.NotebookClient`` for ``notebook`` whose reads from the kernel cannot stall (see above)."""
    from nbclient import NotebookClient

    class SteadyNotebookClient(NotebookClient):
        async def async_start_new_kernel_client(self):
            client = await super().async_start_new_kernel_client()
            _read_in_slices(client.shell_channel)
            _read_in_slices(client.iopub_channel)
            return client

    return SteadyNotebookClient(notebook, **options)


def run_cells(*cells) -> dict:
    """The namespace ``cells`` make, run as the student's worker runs them: each under a file name of its own, known to linecache."""
    import linecache
    import uuid

    namespace = {"__name__": "cells"}
    for cell in cells:
        filename = f"<test cell {uuid.uuid4().hex}>"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
        exec(compile(cell, filename, "exec"), namespace)  # noqa: S102 - the test's own cells
    return namespace
