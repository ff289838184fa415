"""The trusted side of grading: runs the source's tests against a student's worker.

The harness never executes student code. It runs the source notebook's setup and locked
cells itself, binds each graded name (``pairwise_sq_dists``, …) to a proxy that calls into
the student's worker process, and executes each test cell in its own namespace. So the
tests use the harness's own ``torch``, clocks, references and comparisons, which no student
code has touched; what comes back from the worker is plain data (see :mod:`protocol`).

A crash, a kill or a time-out of the worker costs the item it happened in; the worker is
restarted (reloading the student's code) for the items after it. A student cell that hangs
or crashes while loading is skipped on the restart, so it costs only what depends on it.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import io
import itertools
import re
import select
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from gpucourse import devices, sim
from gpucourse.check import TimingFailure
from gpucourse.compiler import ACCESS_KINDS, CompilerMissing, compile_report, describe_signature, signature_descriptor
from gpucourse.gates import kernel_gate, njit_gate, torch_gate
from gpucourse.kernel_source import KernelCompileError, KernelSource
from gpucourse.triton_compiler import describe_signature as describe_triton_signature
from gpucourse.triton_compiler import signature_descriptor as triton_signature_descriptor
from gpucourse.triton_compiler import triton_compile_report

from . import protocol, sandbox
from .clock import FairClock, oom_kills, processes_in_trees, tree_cpu_seconds
from .outcomes import Outcome
from .skeleton import CellOrigin, Plan, TestItem, defined_names, free_names


class GraderError(Exception):
    """The grader itself failed (a worker that cannot start, a hidden interpreter): never the student's fault.

    Nothing is recorded as a score for that student; ``log`` holds what the worker printed.
    """

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


class WorkerTimeout(Exception):
    """The student's code did not answer before the deadline."""


class WorkerCrashed(Exception):
    """The student's worker process died; ``killed``: by SIGKILL (the kernel's out-of-memory killer's signal)."""

    def __init__(self, description: str, killed: bool = False):
        super().__init__(description)
        self.killed = killed


class ForkBombStopped(WorkerCrashed):
    """The student's code started processes as a fork bomb does: stopped when that is seen, not at its deadline."""


# A worker whose process trees hold FORK_BOMB_PROCESSES processes (or, under a lower process limit, this share
# of it) at two looks WATCH_SECONDS apart is stopped: waiting for the deadline lets a fork bomb keep every core
# busy for the whole cell limit, twice (a timed-out cell is tried once more). Processes, not threads: honest code
# starts a few (DataLoader workers), while threads are many in honest code too (numba's simulator runs a block of
# 1024); and not the whole process limit, which a bomb may never reach: its forks also fail for memory, and a
# quiet test's bomb levelled off at 1,300-1,480 of 1,536.
FORK_BOMB_PROCESSES = 256
PROCESS_LIMIT_SHARE = 0.9
WATCH_SECONDS = 1.0


class ProcessWatch:
    """Looks at a worker's process trees (from /proc, never asking the worker) at most every WATCH_SECONDS."""

    def __init__(self, roots, limit: int):
        self.roots, self.threshold = roots, min(FORK_BOMB_PROCESSES, int(PROCESS_LIMIT_SHARE * limit))
        self.next_look, self.hits = time.monotonic() + WATCH_SECONDS, 0

    def look(self) -> None:
        """Raise :class:`ForkBombStopped` when the trees held the threshold at this look and the one before."""
        if time.monotonic() < self.next_look:
            return
        self.next_look = time.monotonic() + WATCH_SECONDS
        self.hits = self.hits + 1 if processes_in_trees(self.roots()) >= self.threshold else 0
        if self.hits >= 2:
            raise ForkBombStopped(f"started {self.threshold} processes or more, as a fork bomb does")


class StudentError(Exception):
    """Raised in the harness when the student's function raised; carries its type and message."""


@dataclass
class ItemResult:
    grade_id: str
    points: float
    outcome: Outcome
    score: float
    message: str = ""
    output: str = ""
    seconds: float = 0.0

    def __post_init__(self):
        self.outcome = Outcome(self.outcome)


@dataclass
class SubmissionResult:
    items: list[ItemResult]
    device: str
    device_class: str
    isolation: str
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    worst_slowdown: float = 1.0  # how much other load slowed this machine at worst (see autograder.clock)
    kernels: list[dict] = field(default_factory=list)  # what NVIDIA's compiler made of each kernel launched (kernel_summary)

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def score(self) -> float:
        return sum(item.score for item in self.items)


class StudentWorker:
    """A student's worker process with their code loaded; restarted after a crash or time-out."""

    def __init__(self, cells: list[str], workdir: Path, limits: sandbox.Limits, hidden_paths, clock=None, compiler_required: bool = True,
                 origins: list[CellOrigin] = (), grader_modules: bool = False):
        self.cells, self.workdir, self.limits, self.hidden_paths = cells, workdir, limits, hidden_paths
        # Only a runner whose cells were checked first counts with the grader's own modules; every other worker
        # is sealed from them (sandbox.start_worker)
        self.grader_modules = grader_modules
        self.origins = list(origins)  # where each cell comes from, for notes the student can act on
        # Without NVIDIA's compiler a grader must stop (see GraderError); a student's self-check goes on with a note.
        self.compiler_required = compiler_required
        self.compiled: dict[tuple, object] = {}  # (kernel, signature) -> its CompileReport, once per submission
        self.traced_paths = TracedPaths()  # what the item being graded saw its kernels do, traced and compiled
        self.sources: dict[str, KernelSource] = {}  # kernel name -> its checked source, while this worker lives
        self.runners: dict[str, StudentWorker] = {}  # source digest -> the process that launches or counts it (kernel_runner, profile_runner)
        self.setup: tuple[list[str], dict] = ([], {})  # the source's setup cells and the namespace they made here (profile_runner)
        self.answer_names: set[str] = set()  # what the source's answer cells define: the answers a runner's cells may call
        self.answer_helpers: set[str] = set()  # the setup functions a gated answer cell may call (Plan.answer_helpers)
        self.grader_side_names: set[str] = set()  # what the grader-side setup cells define (Plan.grader_side_names)
        self.clock = clock or FairClock(self.pids)
        self.skipped: set[int] = set()
        self.retried: set[int] = set()
        self.load_notes: list[str] = []
        self.missing_because: dict[str, str] = {}  # a name a failed cell should have defined -> why it is missing
        self.failed_answers: dict[str, str] = {}  # a question whose answer cell failed -> how
        self.process: sandbox.WorkerProcess | None = None
        self.callbacks: dict[int, object] = {}
        self._ids = itertools.count()
        self.isolation = "not started"

    # -- lifecycle -------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """The worker's process (the root of its tree) and its kernel runners', for the clock: their load is not other load."""
        own = [self.process.process.pid] if self.process is not None else []
        return own + [pid for runner in self.runners.values() for pid in runner.pids()]

    def kernel_runner(self, source: KernelSource, simulated: bool) -> StudentWorker:
        """A fresh process holding only ``source`` (checked definitions), where the tests' launches of
        that kernel run: in numba's simulator when ``simulated`` (observed launches, and every launch
        on a CPU grader), else on the grader's GPU. The student's other code never ran there, so what
        its observers count is evidence (the rule of docs/authoring.md, section 6)."""
        preamble = {("numba", True): SIMULATOR_PREAMBLE, ("numba", False): GPU_PREAMBLE,
                    ("triton", True): TRITON_INTERPRETER_PREAMBLE, ("triton", False): TRITON_GPU_PREAMBLE}[source.language, simulated]
        return self._runner(f"kernel-{'sim' if simulated else 'gpu'}-{source.digest[:16]}", [preamble, source.text],
                            grader_modules=source.language == "triton")  # its launches are bounds-checked by autograder.triton_runner

    def profile_runner(self, names, item_deadline=None) -> StudentWorker:
        """A fresh process holding only the assignment's setup cells and the answer cells that define
        ``names`` (a name or several) and the other answers they call, each checked first to be countable
        (:mod:`gpucourse.gates.torch_gate`): where the grader counts the functions' ops, and calls and times the
        functions of :func:`gpucourse.check.torch_only`. Nothing there can reach the profiler (the evidence rule).
        A Triton launcher's kernels (modules 06, 07) come as their checked sources, as in a kernel runner, and
        each launch is counted as ``triton::<kernel>`` (:mod:`autograder.triton_runner`); ``item_deadline``
        bounds the requests for those sources."""
        names = (names,) if isinstance(names, str) else tuple(names)
        setup_cells, setup_namespace = self.setup
        cells = self._answer_cells(names)
        answers = {name for cell in cells for name in defined_names(cell)}
        kernel_cells = {kernel: cell for cell in cells for kernel in _triton_kernels(cell)}
        deadline = item_deadline or (lambda: self.limits.item_seconds)
        sources = [StudentFunction(self, kernel, deadline).__kernel_source__().text for kernel in kernel_cells]
        cells = [cell for cell in cells if not set(defined_names(cell)) <= set(kernel_cells)]  # a kernel's cell: its source instead
        given = {name: value for name, value in setup_namespace.items() if not callable(value) or name in self.answer_helpers}
        for cell in cells:
            try:
                torch_gate.check_countable(cell, given, answers, kernels=set(kernel_cells))
            except torch_gate.UncountableSource as refused:
                owner = next((name for name in names if name in defined_names(cell)), ", ".join(defined_names(cell)) or names[0])
                keep_to = "torch's allocations and launches of your Triton kernels" if kernel_cells else "torch operations and torch.compile"
                raise _from_student(f"{owner}: its cell cannot be counted by the grader ({refused}); keep it to {keep_to}") from None
        hooks = [TRITON_LAUNCH_HOOKS[devices.device_class() != "cuda"]] if kernel_cells else []
        return self._runner(f"profile-{_digest([*sources, *cells])}", [*hooks, *setup_cells, *sources, *cells], grader_modules=True)

    def njit_runner(self, name: str) -> StudentWorker:
        """A fresh process holding only the assignment's setup cells and the answer cell that defines
        ``name``, checked first to be nothing but the student's own compiled loops (:mod:`gpucourse.gates.njit_gate`):
        where the grader calls and times the function, and counts its intrinsic calls."""
        cell = self._answer_cell(name)
        try:
            njit_gate.check_own_loops(cell)
        except njit_gate.NotOwnLoops as refused:
            raise _from_student(f"{name}: its cell is not only your own compiled loops ({refused})") from None
        return self._runner(f"njit-{_digest([cell])}", [*self.setup[0], cell])

    def answers_runner(self, names) -> StudentWorker:
        """A fresh process holding only the assignment's setup cells and the answer cells that define
        ``names`` and the other answers they call: where a setup function that drives those answers runs
        (it trains the student's model, steps their optimizer), so what it returns comes from those cells
        alone (the evidence rule)."""
        cells = self._answer_cells(tuple(names))
        return self._runner(f"answers-{_digest(cells)}", [*self.setup[0], *cells])

    def _runner(self, key: str, cells: list[str], grader_modules: bool = False) -> StudentWorker:
        """The started runner ``key`` (a fresh process in a folder of its own, holding only ``cells``), made once."""
        runner = self.runners.get(key)
        if runner is None:
            folder = self.workdir.parent / f"{self.workdir.name}.{key}"
            folder.mkdir(exist_ok=True)
            runner = StudentWorker(cells, folder, self.limits, self.hidden_paths, self.clock, self.compiler_required,
                                   grader_modules=grader_modules)
            self.runners[key] = runner
        runner.ensure_started()
        return runner

    def _answer_cell(self, name: str) -> str:
        """The last of the student's own cells that defines ``name`` (setup cells are the source's)."""
        setup_cells = set(self.setup[0])
        for cell in reversed(self.cells):
            if cell not in setup_cells and name in defined_names(cell):
                return cell
        raise _from_student(f"{name} is not defined by any of your answer cells")

    def _answer_cells(self, names: tuple[str, ...]) -> list[str]:
        """The cells that define ``names``, and those that define the assignment's other answers they use
        (module 09's ``lstm_forward`` calls ``lstm_cell``), in the notebook's order."""
        chosen, seen, pending = set(), set(), list(names)
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            cell = self._answer_cell(name)
            chosen.add(cell)
            pending += [used for used in free_names(cell) if used in self.answer_names]
        return [cell for cell in dict.fromkeys(self.cells) if cell in chosen]

    def ensure_started(self) -> None:
        while self.process is None:
            self._start()
            for index, source in enumerate(self.cells):
                if index in self.skipped:
                    continue
                try:
                    reply = self.request(("exec", source), self.limits.cell_seconds)
                except WorkerTimeout as failure:
                    if index not in self.retried:
                        # Once more in a fresh worker before the cell is given up: a burst of
                        # load must not cost an honest cell (and all that depends on it).
                        self.retried.add(index)
                    else:
                        self._skip(index, failure)
                    self.stop()
                    break
                except WorkerCrashed as failure:
                    self._skip(index, failure)
                    self.stop()
                    break
                if reply[0] == "raise":
                    error = _first_line(reply[2])
                    self._note(f"{self._label(index)} raised {error}")
                    self._explain_missing(index, f"raised earlier: {self._label(index)}: {error}")

    def _start(self) -> None:
        """Start a worker and wait for it to say it is ready, before any student code runs.

        A worker that cannot get that far (a hidden interpreter, a broken install) is the
        grader's failure, not the student's: tried twice, then :class:`GraderError`.
        """
        failure = ""
        for _ in range(2):
            self.process = sandbox.start_worker(self.workdir, self.limits, self.hidden_paths, self.cells, self.grader_modules)
            self.isolation = self.process.isolation
            try:
                reply = protocol.decode_from_worker(protocol.read_frame(
                    self.process.from_worker, self.clock.now() + self.limits.cell_seconds, self.clock.now))
                if reply == ("ready",):
                    return
                failure = f"it answered {str(reply)[:80]} instead of ready"
            except protocol.FrameTimeout:
                failure = f"it was not ready within {self.limits.cell_seconds:.0f} s"
            except (protocol.ChannelClosed, OSError, ValueError):
                failure = self._exit_description()
            self.stop()
        raise GraderError(f"the grading worker could not start: {failure}", sandbox.log_tail(self.workdir))

    def _skip(self, index: int, failure: Exception) -> None:
        """Skip this cell from now on; what depends on it will fail on its own."""
        self.skipped.add(index)
        self._note(f"{self._label(index)} {_failure_text(failure)}; it was skipped")
        self._explain_missing(index, f"{_failure_text(failure)} and was skipped: {self._label(index)}")

    def _label(self, index: int) -> str:
        """A cell as the student finds it in their notebook (see :class:`~autograder.skeleton.CellOrigin`)."""
        return self.origins[index].label if index < len(self.origins) else f"your code cell {index + 1}"

    def _explain_missing(self, index: int, why: str) -> None:
        """Remember why the names cell ``index`` should define are missing: a test's NameError names its cause."""
        origin = self.origins[index] if index < len(self.origins) else CellOrigin("")
        for name in (*origin.defines, *defined_names(self.cells[index])):
            self.missing_because.setdefault(name, why)
        if origin.question:
            self.failed_answers.setdefault(origin.question, why)

    def name_error_cause(self, message: str, question: str | None = None) -> str:
        """For a NameError's message: " — the cell that defines it raised earlier: ...", or "" when no failed cell explains it.

        The cell is found by the names it should define; failing that (the released stub of an answer
        defines nothing, and a self-check has no other notebook to learn the names from), by the
        test's question, whose answer cell failed.
        """
        match = re.search(r"name '(\w+)' is not defined", message)
        if not match:
            return ""
        if match.group(1) in self.missing_because:
            return f" — the cell that defines it {self.missing_because[match.group(1)]}"
        if match.group(1) in self.grader_side_names:
            return " — a grader-side setup cell defines it, for the tests alone: when graded it runs only in the grader, where your code cannot call it"
        if question in self.failed_answers:
            return f" — the cell that should define it {self.failed_answers[question]}"
        return ""

    def _note(self, note: str) -> None:
        if note not in self.load_notes:  # a restart runs the same cells again
            self.load_notes.append(note)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None
        self.sources.clear()
        for runner in self.runners.values():
            runner.stop()

    # -- messages --------------------------------------------------------------------------
    def request(self, message, seconds: float):
        """Send ``message`` and wait for the final reply, serving callbacks meanwhile."""
        deadline = self.clock.now() + seconds
        with self.talking():
            protocol.write_frame(self.process.to_worker, protocol.encode_for_worker(message))
            while True:
                reply = self._receive(deadline)
                if reply[0] != "callback":
                    return reply
                self._serve_callback(reply)

    @contextlib.contextmanager
    def talking(self):
        """While the block talks to the worker: a time-out or a broken channel stops it (and is raised as such)."""
        try:
            yield
        except (WorkerTimeout, ForkBombStopped):
            self.stop()
            raise
        except (protocol.ChannelClosed, BrokenPipeError, OSError, ValueError) as error:
            description = self._exit_description()
            killed = self.process is not None and self.process.killed_by_sigkill()
            self.stop()
            raise WorkerCrashed(f"{description} ({error})" if isinstance(error, ValueError) else description, killed) from None

    def _exit_description(self) -> str:
        """How the worker ended, once it has (its pipe can close a moment before it is reaped)."""
        if self.process is None:
            return "stopped"
        try:
            self.process.process.wait(timeout=2)
        except Exception:  # noqa: BLE001 - still running: describe it as it is
            pass
        return self.process.exit_description()

    def _receive(self, deadline: float):
        """The worker's next message; while none comes, its processes are watched (:class:`ProcessWatch`)."""
        fd, watch = self.process.from_worker, ProcessWatch(self.pids, self.limits.processes)
        # Fair seconds pass no faster than wall seconds, so waiting what is left of the deadline never overshoots it.
        while not select.select([fd], [], [], max(0.0, min(deadline - self.clock.now(), WATCH_SECONDS)))[0]:
            if self.clock.now() >= deadline:
                raise WorkerTimeout()
            watch.look()
        try:
            frame = protocol.read_frame(fd, deadline, self.clock.now)
        except protocol.FrameTimeout:
            raise WorkerTimeout() from None
        return protocol.decode_from_worker(frame)

    def _serve_callback(self, reply) -> None:
        _, callback_id, args, kwargs = reply
        try:
            value = self.callbacks[callback_id](*_rebuild(args), **_rebuild(kwargs))
            answer = ("cb_return", value)
        except Exception as error:  # noqa: BLE001 - handed to the student's code as an error
            answer = ("cb_raise", type(error).__name__, str(error))
        protocol.write_frame(self.process.to_worker, protocol.encode_for_worker(answer))

    def marshal(self, value):
        """Arguments for the worker: the test's own functions become callbacks."""
        if isinstance(value, (list, tuple)):
            converted = [self.marshal(item) for item in value]
            return converted if isinstance(value, list) else tuple(converted)
        if isinstance(value, dict):
            return {key: self.marshal(item) for key, item in value.items()}
        if callable(value) and _course_function(value):
            return protocol.LibraryFunction(value.__module__, value.__name__)
        if callable(value) and not isinstance(value, torch.Tensor) and not _importable(value):
            callback_id = next(self._ids)
            self.callbacks[callback_id] = value
            return protocol.Callback(callback_id)
        return value


class StudentFunction:
    """Stands in the harness for a function the student wrote; calls run in their worker."""

    def __init__(self, worker: StudentWorker, name: str, item_deadline):
        self.worker, self.name, self.item_deadline = worker, name, item_deadline
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self._call("call", args, kwargs)

    def call_with_streams(self, dispatch, *args):
        """Call the function with its ``gpucourse.streams`` calls sent to ``dispatch``, here (the
        trusted side of :class:`gpucourse.streams.RemoteBackend`): the test records the timeline itself."""
        return self._call("call_streams", args, {}, self.worker.marshal(dispatch))

    def _call(self, kind: str, args, kwargs, *extra):
        self.worker.ensure_started()
        message = (kind, self.name, self.worker.marshal(args), self.worker.marshal(kwargs), *extra)
        return _result(self.name, self.worker.request(message, self.item_deadline()))

    def call_profiled(self, *args, top_level: bool = False, eager: bool = False):
        """(output, {ATen op: calls}) of one call, counted by the grader's profiler in a process that
        holds only the setup cells and this function's answer cell (:meth:`StudentWorker.profile_runner`),
        after an uncounted warm-up call on other values (where ``torch.compile`` compiles);
        ``top_level``: only the ops called from Python; ``eager``: ``torch.compile`` switched off."""
        runner = self.worker.profile_runner(self.name, self.item_deadline)
        message = ("call_profiled", self.name, runner.marshal(args), bool(top_level), bool(eager))
        reply = _result(self.name, runner.request(message, self.item_deadline()))
        if not isinstance(reply, dict) or not isinstance(reply.get("ops"), dict):
            raise StudentError(f"{self.name}: the counted call did not report back")
        return reply["output"], reply["ops"]

    def torch_only(self) -> StudentFunction:
        """This function as it runs in its profile runner (:meth:`StudentWorker.profile_runner`): calls and timed
        blocks go there, where only the setup cells and its checked answer cells ran."""
        return StudentFunction(self.worker.profile_runner(self.name, self.item_deadline), self.name, self.item_deadline)

    def njit_only(self) -> StudentFunction:
        """This function as it runs in its njit runner (:meth:`StudentWorker.njit_runner`): calls and timed
        blocks go there, where only the setup cells and its checked answer cell ran."""
        runner = self.worker.njit_runner(self.name)
        return StudentFunction(runner, self.name, self.item_deadline)

    def mma_calls(self, a, b) -> int:
        """How many times ``self(a, b, mma)`` calls the intrinsic, after checking (here) that the calls did all
        of ``a @ b``'s work (:func:`gpucourse.intrinsics.check_log`); run with the grader's logging intrinsic
        in the function's njit runner."""
        from gpucourse.intrinsics import check_log, new_key

        key = new_key()
        runner = self.worker.njit_runner(self.name)
        reply = _result(self.name, runner.request(("call_logged_mma", self.name, a, b, key), self.item_deadline()))
        if not isinstance(reply, dict) or not isinstance(reply.get("calls"), list):
            raise StudentError(f"{self.name}: the logged call did not report back")
        calls = [tuple(call) for call in reply["calls"] if isinstance(call, list | tuple) and len(call) == 2]
        if len(calls) != len(reply["calls"]):
            raise StudentError(f"{self.name}: the logged call reported malformed calls")
        return check_log(a, b, reply["output"], calls, key, name=self.name)

    def mma_counted(self):
        """This function called with the grader's counting intrinsic (:func:`gpucourse.check.mma_counted`): its calls
        and timed blocks run in its njit runner, where the tally is started and read (the worker's ``start_tally``
        and ``read_tally``); the tally is checked here (:func:`gpucourse.intrinsics.check_tally`)."""
        from gpucourse.check import MmaCounted

        runner = self.worker.njit_runner(self.name)

        def start(secret) -> None:
            runner.ensure_started()
            _result(self.name, runner.request(("start_tally", secret), self.item_deadline()))

        def read():
            return _result(self.name, runner.request(("read_tally",), self.item_deadline()))

        return MmaCounted(StudentFunction(runner, self.name, self.item_deadline), start, read)

    def drive_iterator(self, plan):
        """Consume the generator the student's function returns as :func:`gpucourse.loading.run_loader`
        asks, with the loads' latency and the compute kept here (:mod:`autograder.loading`)."""
        from .loading import drive

        self.worker.ensure_started()
        with self.worker.talking():
            return drive(self.worker, self.name, plan, self.worker.clock.now() + self.item_deadline())

    def __getitem__(self, config):
        return KernelLaunch(self, config)

    def __kernel_source__(self) -> KernelSource:
        """The student's kernel's source, from their worker, checked to hold nothing but definitions
        (so :func:`gpucourse.kernels.compile_report` can compile it here, as for any kernel, and a
        kernel runner can load it)."""
        self.worker.ensure_started()
        if self.name not in self.worker.sources:
            data = _result(self.name, self.worker.request(("kernel_source", self.name), self.item_deadline()))
            try:
                source = KernelSource.from_plain(data)
                kernel_gate.check_definitions_only(source.text, source.language)
                self._check_against_the_notebook(source)
            except kernel_gate.RefusedSource as refused:
                raise _from_student(str(refused)) from None
            except ValueError as error:
                raise _from_student(f"{self.name}: its source could not be checked ({error})") from None
            self.worker.sources[self.name] = source
        return self.worker.sources[self.name]

    def _check_against_the_notebook(self, source: KernelSource) -> None:
        """The text came from the student's process: hold it to what the grader knows (issue 47). Each function
        must be a ``def`` of the notebook's cells; a numba kernel must not ask whether it runs in the simulator
        (traced launches run there, the compile step compiles for a GPU), and the setup's names are the setup's."""
        setup_cells, setup_namespace = self.worker.setup
        if source.language == "numba":
            kernel_gate.check_runs_alike(source)
            kernel_gate.check_setup_names(source, setup_namespace, _as_run(setup_cells))
        kernel_gate.check_in_cells(source, _as_run(self.worker.cells))

    def check_compiles(self, args):
        """Compile the kernel for a real GPU with the launch's argument types, once per signature; its
        CompileReport (None where a self-check has no compiler).

        A kernel no GPU would compile fails the item, with the line and the reason in plain words,
        on a CPU grader exactly as on a GPU one (the simulator alone would have run it).
        """
        return self._compile_once(describe_signature(signature_descriptor(args)), lambda: compile_report(self, args, gpu=kernel_gate.GATE_GPU))

    def check_triton_compiles(self, source: KernelSource, args, kwargs) -> None:
        """:meth:`check_compiles` for a ``@triton.jit`` kernel: Triton compiles it for sm_80, once per signature."""
        try:
            signature = describe_triton_signature(triton_signature_descriptor(args, kwargs))
        except TypeError as error:
            raise _from_student(f"{self.name}: {error}") from None
        self._compile_once(signature, lambda: triton_compile_report(source, args, kwargs, gpu=kernel_gate.GATE_GPU))

    def _compile_once(self, signature: str, compile_it):
        key = (self.name, signature)
        if key in self.worker.compiled:
            return self.worker.compiled[key]
        try:
            self.worker.compiled[key] = compile_it()
        except KernelCompileError as error:
            reason, *code = str(error).splitlines()  # the item's message is one line: the reason, then the code
            raise _from_student(f"{self.name} would not compile for a GPU: {reason}" + "".join(f" (`{c.strip()}`)" for c in code[:1])) from None
        except TimeoutError:
            raise _from_student(f"{self.name}: compiling it for a GPU took too long") from None
        except CompilerMissing as missing:
            if self.worker.compiler_required:
                raise GraderError(f"this grader cannot compile kernels: {missing}") from None
            self.worker.compiled[key] = None
            self.worker._note("your kernels were not compiled for a real GPU here (NVIDIA's compiler is not installed); the grader will")
        return self.worker.compiled[key]

    def timed_block(self, calls):
        """Run ``self(*args)`` for each args in ``calls`` and return (seconds, outputs).

        The inputs are sent first, untimed. The harness's clock runs from "go" until the
        worker answers "done" with a digest of its outputs under random weights chosen now;
        the outputs, fetched afterwards, must match it. So reporting "done" before the work
        is finished cannot pay. Baselines run the same way in a reference worker.
        """
        self.worker.ensure_started()
        block_file = self.worker.workdir / f".timed-block-{next(self.worker._ids)}.bin"
        used_before = tree_cpu_seconds(self.worker.pids())
        try:
            inputs = protocol.map_tensors([self.worker.marshal(a) for a in calls], block_file)
            _result(self.name, self.worker.request(("load_block", self.name, inputs), self.item_deadline()))
            weights = torch.rand(4099, dtype=torch.float64) + 0.5  # odd length: no alignment with output shapes
            devices.synchronize()
            used_loading = tree_cpu_seconds(self.worker.pids()) - used_before
            start, used_before = time.perf_counter(), tree_cpu_seconds(self.worker.pids())
            reply = self.worker.request(("run_block", weights), self.item_deadline())
            seconds = time.perf_counter() - start
            used_running = tree_cpu_seconds(self.worker.pids()) - used_before
            digests = _result(self.name, reply)
            outputs = _result(self.name, self.worker.request(("fetch_block",), self.item_deadline()))
        finally:
            block_file.unlink(missing_ok=True)
        _check_digests(self.name, outputs, digests, weights)
        on_gpu = devices.device_class() == "cuda"
        if on_gpu:
            used_loading = 0.0  # a GPU grader's worker copies and pins inputs as it loads them: CPU that is not a cheat
        # Only CPU time when the worker's whole tree is accounted for (its own PID namespace) and does all the work (no GPU).
        cpu_only = self.worker.isolation in sandbox.CONTAINED and not on_gpu
        return _charged_seconds(seconds, used_running, used_loading, calls, cpu_only=cpu_only), outputs


class KernelLaunch:
    """``kernel[blocks, threads]`` in a test, for a student's ``@cuda.jit`` kernel.

    The kernel's source is taken from the student's worker, checked to be nothing but
    definitions, compiled for a real GPU (:meth:`StudentFunction.check_compiles`), and launched
    in a kernel runner: a fresh process holding only that source, with the test's observers
    (counts, traces) opened there; observed launches are simulated on every grader. The student's other code
    never ran in that process, so it cannot patch what is observed; what a trace saw is held against the
    compiled code (:class:`TracedPaths`), so a kernel cannot be traced on another path than a GPU runs. The launch runs on copies
    of the arguments; the arrays come back afterwards and are written into the test's own
    arrays, so the test reads ``out`` after ``kernel[grid, block](x, out)`` as in the notebook.
    """

    def __init__(self, kernel: StudentFunction, config):
        self.kernel, self.config = kernel, config

    def __call__(self, *args, **kwargs):
        source = self.kernel.__kernel_source__()
        if source.language == "triton":
            return self._launch_triton(source, args, kwargs)
        if kwargs:
            raise TypeError(f"{self.kernel.name}[...] takes no keyword arguments (a numba kernel)")
        compiled = self.kernel.check_compiles(args)
        # Observed launches are simulated on every grader (so CPU and GPU graders count alike); the others
        # run on the GPU where there is one (a million-thread launch checking lost updates, say).
        observers = sim.open_kinds()
        runner = self.kernel.worker.kernel_runner(source, simulated=bool(observers) or devices.device_class() != "cuda")
        message = ("launch", source.name, self.config, runner.marshal(args), observers)
        reply = _result(self.kernel.name, runner.request(message, self.kernel.item_deadline()))
        if not isinstance(reply, dict) or not isinstance(reply.get("observed"), dict):
            raise StudentError(f"{self.kernel.name}: the launch did not report back")
        _copy_back(self.kernel.name, args, reply.get("arrays"))
        try:
            sim.absorb(reply["observed"])
            traced = _traced_kinds(reply["observed"]["trace"]) if "trace" in reply["observed"] else None
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise StudentError(f"{self.kernel.name}: what the launch reported is malformed ({error})") from None
        if traced is not None and compiled is not None:  # without a compiler (a self-check) the worker's note says so
            self.kernel.worker.traced_paths.launched(self.kernel.name, compiled, traced)

    def _launch_triton(self, source: KernelSource, args, kwargs) -> None:
        """``kernel[grid](*args, **kwargs)`` for a ``@triton.jit`` kernel: compiled by Triton for sm_80, then
        run in a kernel runner (Triton's interpreter on a CPU grader, the GPU on a GPU grader); its tensor
        arguments come back and are copied into the test's tensors. ``sim`` observers are numba's: not opened."""
        grid = self.config if isinstance(self.config, tuple) else (self.config,)
        if not 1 <= len(grid) <= 3 or not all(type(n) is int and n >= 1 for n in grid):
            raise TypeError(f"{self.kernel.name}[grid]: the grid must be a tuple of 1 to 3 positive ints, got {self.config!r}")
        self.kernel.check_triton_compiles(source, args, kwargs)
        runner = self.kernel.worker.kernel_runner(source, simulated=devices.device_class() != "cuda")
        message = ("launch_triton", source.name, list(grid), runner.marshal(args), runner.marshal(kwargs))
        reply = _result(self.kernel.name, runner.request(message, self.kernel.item_deadline()))
        if not isinstance(reply, dict) or not isinstance(reply.get("args"), list) or not isinstance(reply.get("kwargs"), dict):
            raise StudentError(f"{self.kernel.name}: the launch did not report back")
        _copy_back_tensors(self.kernel.name, [*args, *kwargs.values()], [*reply["args"], *(reply["kwargs"].get(k) for k in kwargs)])


class TracedPaths:
    """What one item's traced launches of each kernel did, held against the code compiled for a GPU.

    A traced launch runs the kernel's text in numba's simulator, as Python; a GPU runs the compiled code. A kernel
    whose path turns on something the two compute differently (numpy's float rules and numba's, Python's unbounded
    integers and 64-bit wraparound) is traced on one path and runs another: its trace is no evidence of what the
    GPU does. Their kinds of access (compiler.ACCESS_KINDS) must agree, both ways:

    - each kind a traced launch made must be in the compiled code: checked after each launch;
    - each kind in the compiled code must have been made by the item's traced launches of that kernel with that
      signature together: checked when the item's test has run. Not after each launch, since a small launch may
      rightly leave a path untaken (one whose threads all fall past the end of the data stores nothing); an
      item's traced launches together, full-sized ones among them, run every kind of access an honest kernel has
      (the kernels of modules 02-04 make all of theirs in each of their tests' launches, the smallest included).
      The compiled code is static: a kind there is a path some launch may take.
    """

    def __init__(self):
        self.made: dict[int, tuple[str, object, set[str]]] = {}  # id(CompileReport) -> (kernel, report, kinds traced)

    def launched(self, name: str, compiled, traced: set[str]) -> None:
        """Record a traced launch of ``name`` (with the kinds ``traced``) whose code compiled to ``compiled``."""
        self.made.setdefault(id(compiled), (name, compiled, set()))[2].update(traced)
        missing = traced - compiled.access_kinds()
        if missing:
            raise _from_student(_differs(name, f"the simulated launch made {_kinds_in_words(missing)}, the code compiled for a GPU has none"))

    def check_every_kind_ran(self) -> None:
        """After the item's test: no kernel's compiled code has a kind of access its traced launches never made."""
        for name, compiled, traced in self.made.values():
            unseen = compiled.access_kinds() - traced
            if unseen:
                raise _from_student(_differs(name, f"the code compiled for a GPU has {_kinds_in_words(unseen)}, "
                                                   "its traced launches in this test made none"))


def _differs(name: str, how: str) -> str:
    return f"{name} behaves differently in the simulator and compiled: {how}"


def _kinds_in_words(kinds: set[str]) -> str:
    return " and ".join(words for kind, words in ACCESS_KINDS.items() if kind in kinds)


def _traced_kinds(trace: dict) -> set[str]:
    """The kinds of access (compiler.ACCESS_KINDS) a traced launch made, from its trace (Trace.export())."""
    kinds = {"atomic" if str(kind) == "atomic" else f"{space} {kind}" for space, kind, *_ in trace["requests"]}
    if int(trace.get("barriers", 0)) > 0:
        kinds.add("barrier")
    return kinds & set(ACCESS_KINDS)


def _as_run(cells: list[str]) -> list[str]:
    """The cells as a worker runs them (IPython's magics made Python): the text its functions' source comes from."""
    from .worker import _transform_magics

    return [_transform_magics(cell) for cell in cells]


def _copy_back_tensors(name: str, mine, after) -> None:
    """Write what the launch left in each tensor argument into the test's tensor, in place (those it changed:
    an input passed twice, as ``kernel(x, x)``, keeps the written copy)."""
    if len(after) != len(mine):
        raise StudentError(f"{name}: the launch did not report its tensors")
    for index, (tensor, theirs) in enumerate(zip(mine, after)):
        if not isinstance(tensor, torch.Tensor):
            continue
        if not isinstance(theirs, torch.Tensor) or theirs.shape != tensor.shape or theirs.dtype != tensor.dtype:
            raise AssertionError(f"{name}: argument {index} came back changed in shape or type")
        if not torch.equal(theirs.to(tensor.device), tensor):
            tensor.copy_(theirs)


def _copy_back(name: str, args, arrays_after) -> None:
    if not isinstance(arrays_after, list) or len(arrays_after) != len(args):
        raise StudentError(f"{name}: the launch did not report its arrays")
    for index, (mine, theirs) in enumerate(zip(args, arrays_after)):
        if not isinstance(mine, np.ndarray):
            continue
        if not isinstance(theirs, np.ndarray) or theirs.shape != mine.shape or theirs.dtype != mine.dtype:
            raise AssertionError(f"{name}: argument {index} came back changed in shape or type")
        np.copyto(mine, theirs)


class ReferenceFunction:
    """A function from the source's setup cells (a baseline, a reference answer).

    Called directly it runs here, in the trusted process. Timed (``timed_block``) it runs in
    a reference worker, a process with only the source's code, exactly as the student's
    function runs in theirs: same transfers, same clock, so a speed ratio compares like
    with like.
    """

    def __init__(self, local, reference: StudentWorker, name: str, item_deadline, student: StudentWorker):
        self.local, self.remote, self.student = local, StudentFunction(reference, name, item_deadline), student
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self.local(*args, **kwargs)

    def __getitem__(self, config):
        return self.local[config]  # the source's own kernel: launched here, where the test's observers are

    def timed_block(self, calls):
        return self.remote.timed_block(calls)

    def drive_iterator(self, plan):
        return self.remote.drive_iterator(plan)

    def answers_only(self, names, seconds: float | None = None, gated: bool = False):
        """This setup function, called in the student's answers runner (:meth:`StudentWorker.answers_runner`),
        or with ``gated`` in their profile runner (the answers' cells checked by :mod:`gpucourse.gates.torch_gate`),
        each call within ``seconds`` quiet-machine seconds (and the item's limit)."""
        runner = self.student.profile_runner(names) if gated else self.student.answers_runner(names)
        return _BudgetedCall(runner, self.__name__, names, self.remote.item_deadline, seconds)


class _BudgetedCall:
    """Calls of a setup function in an answers runner, each stopped at its budget, which fails the item
    with the budget named (an item's own limit still ends as a time-out)."""

    def __init__(self, runner: StudentWorker, name: str, names, item_deadline, seconds: float | None):
        self.runner, self.name, self.names, self.item_deadline, self.seconds = runner, name, tuple(names), item_deadline, seconds
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        remaining = self.item_deadline()
        budget = remaining if self.seconds is None else min(remaining, self.seconds)
        try:
            return StudentFunction(self.runner, self.name, lambda: budget)(*args, **kwargs)
        except WorkerTimeout:
            if budget >= remaining:
                raise
            raise _from_student(f"{self.name} with your {', '.join(self.names)} ran past its budget of "
                                f"{self.seconds:g} quiet-machine seconds") from None

    def timed_block(self, calls):
        """Timed calls in the answers runner, as a student's function is timed in their worker (``compare_speed``)."""
        return StudentFunction(self.runner, self.name, self.item_deadline).timed_block(calls)


# CPU a worker may spend loading a timed block: mapping its inputs (protocol.MappedTensor) and unpickling
# the rest costs about a millisecond; more is work done on the inputs before the clock started.
LOAD_CPU_ALLOWANCE = 0.003  # seconds per block
LOAD_CPU_ALLOWANCE_PER_CALL = 0.0002


def _charged_seconds(wall: float, used_running: float, used_loading: float, calls, *, cpu_only: bool = False) -> float:
    """The seconds a timed block is charged, plus any CPU time the worker used between receiving the
    inputs and "go" beyond what loading takes (outputs computed ahead of the clock).

    ``cpu_only``: the CPU time the worker's process tree used meanwhile. Waiting for a core on a
    busy machine is not CPU time, so a loaded grader charges honest code what a quiet one does
    (wall time there stretched by whatever else ran, differently for the two sides of a ratio).
    It is used where every process the student's code can start or reach is in that tree (a PID
    and network namespace of its own) and the work cannot go to a GPU, where it uses no CPU.
    Otherwise: the wall time, or that CPU time if more (threads beyond the one the grader allows).

    Work queued on a GPU while loading uses almost no CPU, so on a GPU it is not caught this way.
    """
    allowance = LOAD_CPU_ALLOWANCE + LOAD_CPU_ALLOWANCE_PER_CALL * len(calls)
    running = used_running if cpu_only else max(wall, used_running)
    return running + max(0.0, used_loading - allowance)


def _check_digests(name: str, outputs, digests, weights) -> None:
    from .worker import output_digest

    if not isinstance(digests, list) or len(digests) != len(outputs):
        raise StudentError(f"{name}: the timed run did not report its outputs")
    for output, digest in zip(outputs, digests):
        expected = output_digest(output, weights, on_gpu=isinstance(digest, float))
        if expected is None:
            continue
        exact = isinstance(expected, int)  # a CPU output's word sum; a GPU one's float64 sum is rounded
        if type(digest) is not type(expected) or (digest != expected if exact else abs(digest - expected) > 1e-6 * (abs(expected) + 1.0)):
            raise AssertionError(f"{name}: the outputs returned after timing are not those the timed run produced")


def _result(name: str, reply):
    """The value of a worker's reply; a student's exception is raised again here, same type if built in."""
    if reply[0] == "raise":
        error_type = getattr(builtins, reply[1], None)
        if not (isinstance(error_type, type) and issubclass(error_type, Exception)) or error_type is AssertionError:
            error_type = StudentError
        error = error_type(f"{name} raised {_first_line(reply[2])}")
        error.from_student = True
        raise error
    return _rebuild(reply[1]) if len(reply) > 1 else None


def _rebuild(value):
    """Objects the worker flattened into dicts become attribute namespaces again."""
    if isinstance(value, dict):
        if "__tensor__" in value:
            return protocol.unpack_tensor(value)
        if "__ndarray__" in value:
            return protocol.unpack_tensor(value["__ndarray__"]).numpy()
        if "__dtype__" in value:
            return _dtype(value["__dtype__"])
        if "__device__" in value:
            return torch.device(value["__device__"])
        if "__complex__" in value:
            return complex(*value["__complex__"])
        if "__object__" in value and "attributes" in value:
            return types.SimpleNamespace(**{k: _rebuild(v) for k, v in value["attributes"].items()})
        return {key: _rebuild(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rebuild(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_rebuild(item) for item in value)
    return value


# A kernel runner's first cell, run before its kernel's source imports numba.cuda: observed launches
# run in numba's simulator on every grader, so traced and counted items give the same verdict everywhere.
GPU_PREAMBLE = "from gpucourse import kernels\nkernels.use_gpu_or_simulator(verbose=False)\n"
SIMULATOR_PREAMBLE = 'import os\nos.environ["NUMBA_ENABLE_CUDASIM"] = "1"\n' + GPU_PREAMBLE  # the simulator, as every notebook runs it
# A Triton kernel's runner: on a GPU grader its own compile cache in the runner's private /tmp; on a CPU
# grader Triton's interpreter, switched on before the kernel's source imports triton.
TRITON_GPU_PREAMBLE = 'import os, tempfile\nos.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()\n'
# Every load and store there is bounds-checked against the launch's tensors (autograder.triton_runner).
TRITON_INTERPRETER_PREAMBLE = ('import os\nos.environ["TRITON_INTERPRET"] = "1"\n'
                               "from autograder import triton_runner\ntriton_runner.install_bounds_checks()\n")
# A profile runner that holds a Triton launcher, by whether it interprets: launches counted (and bounds-checked there).
TRITON_LAUNCH_HOOKS = {False: TRITON_GPU_PREAMBLE + "from autograder import triton_runner\ntriton_runner.install_launch_hooks()\n",
                       True: TRITON_INTERPRETER_PREAMBLE}


def _triton_kernels(cell: str) -> list[str]:
    """The ``@triton.jit`` functions an answer cell defines (a launcher's kernels)."""
    try:
        tree = ast.parse(cell)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and any(
        "triton.jit" in ast.unparse(decorator) for decorator in node.decorator_list)]


def _from_student(message: str) -> StudentError:
    """An item failure whose message is shown to the student as it is (no exception name)."""
    error = StudentError(message)
    error.from_student = True
    return error


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def _course_function(fn) -> bool:
    """A function of the course's package, passed by name (the worker imports it): ``gpucourse.intrinsics.mma_16x16``."""
    module, name = getattr(fn, "__module__", None) or "", getattr(fn, "__name__", "")
    if not module.startswith("gpucourse."):
        return False
    import importlib

    return getattr(importlib.import_module(module), name, None) is fn


def _importable(fn) -> bool:
    """Library functions (torch.mm, math.sqrt) travel by name; the test's own functions do not."""
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] in {"torch", "math", "builtins", "numpy", "operator", "time", "functools"}


def _digest(cells: list[str]) -> str:
    """A runner's key: which cells it holds."""
    return hashlib.sha256(chr(0).join(cells).encode()).hexdigest()[:16]


def _first_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _failure_text(failure: Exception) -> str:
    if isinstance(failure, ForkBombStopped):
        return f"{failure}, and was stopped"
    return "ran past its time limit" if isinstance(failure, WorkerTimeout) else f"crashed the process ({failure})"


def grade(plan: Plan, workdir: Path, limits: sandbox.Limits = sandbox.Limits(), hidden_paths=(),
          only: set[str] | None = None, compiler_required: bool = True) -> SubmissionResult:
    """Grade one submission: every test item of ``plan`` (or those named in ``only``) against the student's code.

    Every limit is counted on a :class:`~autograder.clock.FairClock`, in quiet-machine
    seconds, so a busy grading machine gives the same verdicts as a quiet one.
    Raises :class:`GraderError` when the grader itself fails (no worker can start, or with
    ``compiler_required`` no NVIDIA compiler to check the student's kernels with).
    """
    started = time.monotonic()
    workers: list[StudentWorker] = []
    clock = FairClock(lambda: [pid for w in workers for pid in w.pids()])
    worker = StudentWorker(plan.student_cells, workdir, limits, list(hidden_paths), clock, compiler_required, plan.cell_origins)
    reference_dir = workdir.parent / f"{workdir.name}.reference"
    reference_dir.mkdir(exist_ok=True)
    reference = StudentWorker(plan.context, reference_dir, limits, list(hidden_paths), clock)
    workers += [worker, reference]
    items = [item for item in plan.items if only is None or item.grade_id in only]
    results, notes = [], list(plan.notes)
    with clock:
        notebook_deadline = clock.now() + limits.notebook_seconds
        try:
            namespace = _trusted_namespace(plan, notes)
            # The student's runners get the setup the student's worker ran: without the grader-side cells and what they define.
            student_namespace = {name: value for name, value in namespace.items() if name not in plan.grader_side_names}
            worker.setup = (plan.student_setup, student_namespace)
            worker.answer_names, worker.answer_helpers, worker.grader_side_names = set(plan.api_names), set(plan.answer_helpers), plan.grader_side_names
            for item in items:
                results.append(_grade_with_retry(item, plan, namespace, worker, reference, limits, notebook_deadline))
            notes += worker.load_notes
        finally:
            worker.stop()
            reference.stop()
    return SubmissionResult(
        items=results, device=devices.describe(), device_class=devices.device_class(),
        isolation=worker.isolation, notes=notes, seconds=time.monotonic() - started, worst_slowdown=round(clock.worst_slowdown, 2),
        kernels=[kernel_summary(report, signature) for (_, signature), report in worker.compiled.items() if report is not None],
    )


def kernel_summary(report, signature: str) -> dict:
    """Plain data for grading.json and the self-check's table: one compiled kernel."""
    return {"kernel": report.kernel, "signature": signature, "gpu": report.gpu, "arch": report.arch,
            "registers": report.registers, "shared_bytes": report.shared_bytes, "local_bytes": report.local_bytes,
            "spill_bytes": report.spill_stores + report.spill_loads, "float64_instructions": report.float64_instructions,
            "warnings": report.warnings(), **({"num_warps": report.num_warps} if hasattr(report, "num_warps") else {})}


def _grade_with_retry(item: TestItem, plan: Plan, namespace: dict, worker: StudentWorker, reference: StudentWorker,
                      limits: sandbox.Limits, notebook_deadline: float) -> ItemResult:
    if worker.clock.now() > notebook_deadline:
        return ItemResult(item.grade_id, item.points, Outcome.TIMEOUT, 0.0, "the whole notebook ran past its time limit")
    since = worker.clock.mark()
    result, second_chance = _grade_item(item, plan, namespace, worker, reference, limits, notebook_deadline)
    if second_chance:
        # Graded once more: a burst of load on a shared machine (a measured time short of its
        # threshold, a worker the out-of-memory killer chose) must not cost a correct answer its
        # points. Only then: a wrong answer gets no second draw of random inputs. If the first
        # try ran while other load was heavy, the second waits for it to pass (a burst often
        # outlasts one item: another run's fork-bomb test kept a load of 125 for tens of seconds).
        worker.clock.wait_for_calm(worker.clock.mean_slowdown(since))
        retry, _ = _grade_item(item, plan, namespace, worker, reference, limits, notebook_deadline)
        result = retry if retry.outcome == Outcome.PASSED else result
    return result


def _trusted_namespace(plan: Plan, notes: list[str]) -> dict:
    namespace = {"__name__": "__gradertest__", "__builtins__": builtins}
    for index, source in enumerate(plan.context):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, f"<setup cell {index + 1}>", "exec"), namespace)  # noqa: S102 - instructor's code
        except Exception as error:  # noqa: BLE001
            where = plan.context_origins[index].label if index < len(plan.context_origins) else f"setup cell {index + 1}"
            notes.append(f"{where} raised {type(error).__name__} in the grader: {error}")
    return namespace


def _grade_item(item: TestItem, plan: Plan, base: dict, worker: StudentWorker, reference: StudentWorker,
                limits: sandbox.Limits, notebook_deadline: float) -> tuple[ItemResult, bool]:
    """The item's result, and whether it deserves a second chance: it failed on a measured time (see
    :class:`~gpucourse.check.TimingFailure`; not when the shortfall is conclusive), or the out-of-memory
    killer killed its worker meanwhile."""
    if item.requires_gpu and devices.device_class() != "cuda":
        return ItemResult(item.grade_id, item.points, Outcome.NEEDS_GPU, 0.0,
                          "needs a GPU: not graded on this machine (no score, not a 0); regrade this item on a CUDA machine"), False
    # The student's code loads (or reloads after a crash) before the item's clock starts:
    # each cell has its own limit, and a slow or runaway cell must not cost the item its time.
    worker.ensure_started()
    started, clock = time.monotonic(), worker.clock
    deadline = min(clock.now() + limits.item_seconds, notebook_deadline)
    namespace = dict(base)
    remaining = lambda: max(deadline - clock.now(), 0.1)  # noqa: E731
    for name in plan.reference_functions:
        if callable(base.get(name)):
            namespace[name] = ReferenceFunction(base[name], reference, name, remaining, worker)
    output, second_chance, oom_kills_before = io.StringIO(), False, oom_kills()
    try:
        kinds = _result("names", worker.request(("names", plan.api_names), remaining()))
        for name, kind in kinds.items():
            if kind == "callable":
                namespace[name] = StudentFunction(worker, name, remaining)
            elif kind == "value":
                namespace[name] = _result(name, worker.request(("value", name), remaining()))
        worker.traced_paths = TracedPaths()
        with contextlib.redirect_stdout(output):
            exec(compile(item.source, f"<test {item.grade_id}>", "exec"), namespace)  # noqa: S102 - instructor's test
        worker.traced_paths.check_every_kind_ran()
        outcome, score, message = Outcome.PASSED, item.points, ""
    except WorkerTimeout:
        outcome, score, message = Outcome.TIMEOUT, 0.0, f"your code ran past the {limits.item_seconds:.0f} s limit for this item"
    except ForkBombStopped as stopped:
        outcome, score, message = Outcome.CRASHED, 0.0, f"your code {_failure_text(stopped)}"
    except WorkerCrashed as crash:
        outcome, score, message = Outcome.CRASHED, 0.0, f"your code crashed the process: {crash}"
        # The out-of-memory killer picks its victim machine-wide: a neighbour's fork bomb can choose this worker.
        second_chance = crash.killed and oom_kills_before is not None and (oom_kills() or 0) > oom_kills_before
    except GraderError:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of the test is the item's outcome
        text = _first_line(str(error)) or "test failed"
        outcome, score, second_chance = Outcome.FAILED, 0.0, isinstance(error, TimingFailure) and not error.conclusive
        message = text if getattr(error, "from_student", False) else f"{type(error).__name__}: {text}"
        if isinstance(error, NameError):  # most often a name an earlier cell should have defined, had it run
            message += worker.name_error_cause(text, item.question)
    return ItemResult(item.grade_id, item.points, outcome, score, message, output.getvalue()[-2000:], time.monotonic() - started), second_chance
