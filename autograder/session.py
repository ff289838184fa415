"""The trusted side of one student's worker process: start it, load their cells, talk to it, watch it, stop it.

A :class:`StudentWorker` owns its process and both ends of its pipes: no other module writes to them. Its
messages are the kinds :mod:`autograder.protocol` declares; what comes back is plain data, turned back into
values here (:func:`reply_value`, :func:`rebuild`). A worker's special runners (fresh processes that hold only
checked cells, where the grader launches, counts or times) are rows of :data:`autograder.runners.RUNNERS`,
started by :meth:`StudentWorker.runner`.

The errors say whose failure it was: :class:`GraderError` the grader's (no score), the others the student's code's
(:class:`WorkerTimeout`, :class:`WorkerCrashed`, :class:`ForkBombStopped`, :class:`StudentError`).
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import itertools
import re
import select
import time
import types
from pathlib import Path

import torch

from gpucourse.gates import kernel_gate
from gpucourse.kernel_text import KernelSource

from . import protocol, sandbox
from .clock import FairClock, processes_in_trees
from .protocol import Answer, Reply, Request
from .runners import RUNNERS, Refused
from .skeleton import CellOrigin, defined_names
from .worker import transform_magics


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


class StudentError(Exception):
    """Raised in the harness when the student's function raised; carries its type and message."""


# A worker whose process trees hold FORK_BOMB_PROCESSES processes (or, under a lower process limit, this share
# of it) at two looks WATCH_SECONDS apart is stopped: waiting for the deadline lets a fork bomb keep every core
# busy for the whole cell limit, twice (a timed-out cell is tried once more). Processes, not threads: honest code
# starts a few (DataLoader workers), while threads are many in honest code too (numba's simulator runs a block of
# 1024); and not the whole process limit, which a bomb may never reach: its forks also fail for memory, and a
# quiet test's bomb levelled off at 1,300-1,480 of 1,536.
FORK_BOMB_PROCESSES = 256
PROCESS_LIMIT_SHARE = 0.9
WATCH_SECONDS = 1.0
# Once a message polled for (StudentWorker.poll) has begun to arrive, its whole frame must within this many seconds.
FRAME_SECONDS = 10.0


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
        self.traced_paths = None  # what the item being graded saw its kernels do (standins.TracedPaths), set per item
        self.sources: dict[str, KernelSource] = {}  # kernel name -> its checked source, while this worker lives
        self.runners: dict[str, StudentWorker] = {}  # runner key -> the process that launches, counts or times there (runner)
        self.setup: tuple[list[str], dict] = ([], {})  # the source's setup cells and the namespace they made here (runners)
        self.answer_names: set[str] = set()  # what the source's answer cells define: the answers a runner's cells may call
        self.answer_helpers: set[str] = set()  # the setup functions a gated answer cell may call (Plan.answer_helpers)
        self.grader_side_names: set[str] = set()  # what the grader-side setup cells define (Plan.grader_side_names)
        self.clock = clock or FairClock(self.pids)
        self.skipped: set[int] = set()
        self.raised: set[int] = set()  # cells that raised when they ran (the grader's own cells among them tell a runner it is broken)
        self.retried: set[int] = set()
        self.load_notes: list[str] = []
        self.missing_because: dict[str, str] = {}  # a name a failed cell should have defined -> why it is missing
        self.failed_answers: dict[str, str] = {}  # a question whose answer cell failed -> how
        self.process: sandbox.WorkerProcess | None = None
        self.callbacks: dict[int, object] = {}
        self.ids = itertools.count()  # for callbacks and timed blocks' files
        self.isolation = "not started"

    # -- lifecycle -------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """The worker's process (the root of its tree) and its kernel runners', for the clock: their load is not other load."""
        own = [self.process.process.pid] if self.process is not None else []
        return own + [pid for runner in self.runners.values() for pid in runner.pids()]

    def runner(self, kind: str, *args) -> StudentWorker:
        """The started runner of ``kind`` (a row of :data:`autograder.runners.RUNNERS`) for ``args``: a fresh
        process in a folder of its own, holding only the cells the row chose for it, made once per submission."""
        try:
            spec = RUNNERS[kind](self, *args)
        except Refused as refused:
            raise student_error(str(refused)) from None
        runner = self.runners.get(spec.key)
        if runner is None:
            folder = self.workdir.parent / f"{self.workdir.name}.{spec.key}"
            folder.mkdir(exist_ok=True)
            runner = StudentWorker(spec.cells, folder, self.limits, self.hidden_paths, self.clock, self.compiler_required,
                                   grader_modules=spec.grader_modules)
            self.runners[spec.key] = runner
        runner.ensure_started()
        return runner

    def ensure_started(self) -> None:
        while self.process is None:
            self._start()
            for index, source in enumerate(self.cells):
                if index in self.skipped:
                    continue
                try:
                    reply = self.request((Request.EXEC, source), self.limits.cell_seconds)
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
                if reply[0] == Reply.RAISE:
                    self.raised.add(index)
                    error = last_line(reply[2])
                    self.note(f"{self._label(index)} raised {error}")
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
                if reply == (Reply.READY,):
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
        self.note(f"{self._label(index)} {failure_text(failure)}; it was skipped")
        self._explain_missing(index, f"{failure_text(failure)} and was skipped: {self._label(index)}")

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

    def note(self, note: str) -> None:
        """A note for the student's result (once: a restart runs the same cells again)."""
        if note not in self.load_notes:
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
        """Send ``message`` (a :class:`~autograder.protocol.Request` and its arguments) and wait for the final
        reply, serving callbacks meanwhile."""
        deadline = self.clock.now() + seconds
        with self.talking():
            self.send(message)
            while True:
                reply = self._receive(deadline)
                if reply[0] != Reply.CALLBACK:
                    return reply
                self._serve_callback(reply)

    def send(self, message) -> None:
        """Write ``message`` (a Request or an Answer, then its arguments) without waiting: its reply is read by
        :meth:`request`, or by :meth:`poll` where requests and answers are pipelined (:mod:`autograder.loading`)."""
        protocol.write_frame(self.process.to_worker, protocol.encode_for_worker(message))

    def poll(self, seconds: float):
        """The worker's next message if one starts to arrive within ``seconds`` (wall), else None. Unlike
        :meth:`request`, nothing is watched meanwhile: the caller keeps its own deadline."""
        if not select.select([self.process.from_worker], [], [], seconds)[0]:
            return None
        return protocol.decode_from_worker(protocol.read_frame(self.process.from_worker, self.clock.now() + FRAME_SECONDS, self.clock.now))

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
            value = self.callbacks[callback_id](*rebuild(args), **rebuild(kwargs))
            answer = (Answer.RETURN, value)
        except Exception as error:  # noqa: BLE001 - handed to the student's code as an error
            answer = (Answer.RAISE, type(error).__name__, str(error))
        self.send(answer)

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
            callback_id = next(self.ids)
            self.callbacks[callback_id] = value
            return protocol.Callback(callback_id)
        return value

    # -- the student's kernels ---------------------------------------------------------------
    def kernel_source(self, name: str, item_deadline) -> KernelSource:
        """The source of the student's kernel ``name``, from this worker, checked to hold nothing but definitions
        (so :func:`gpucourse.kernels.compile_report` can compile it here, as for any kernel, and a kernel runner
        can load it); asked once while this worker lives, within ``item_deadline()`` seconds."""
        self.ensure_started()
        if name not in self.sources:
            data = reply_value(name, self.request((Request.KERNEL_SOURCE, name), item_deadline()))
            try:
                source = KernelSource.from_plain(data)
                kernel_gate.check_definitions_only(source.text, source.language)
                self._check_against_the_notebook(source)
            except kernel_gate.RefusedSource as refused:
                raise student_error(str(refused)) from None
            except ValueError as error:
                raise student_error(f"{name}: its source could not be checked ({error})") from None
            self.sources[name] = source
        return self.sources[name]

    def _check_against_the_notebook(self, source: KernelSource) -> None:
        """The text came from the student's process: hold it to what the grader knows (issue 47). Each function
        must be a ``def`` of the notebook's cells; a numba kernel must not ask whether it runs in the simulator
        (traced launches run there, the compile step compiles for a GPU), and the setup's names are the setup's."""
        setup_cells, setup_namespace = self.setup
        if source.language == "numba":
            kernel_gate.check_runs_alike(source)
            kernel_gate.check_setup_names(source, setup_namespace, [transform_magics(cell) for cell in setup_cells])
        kernel_gate.check_in_cells(source, [transform_magics(cell) for cell in self.cells])


# -- replies -----------------------------------------------------------------------------
def reply_value(name: str, reply):
    """The value of a worker's reply; a student's exception is raised again here, same type if built in."""
    if reply[0] == Reply.RAISE:
        error_type = getattr(builtins, reply[1], None)
        if not (isinstance(error_type, type) and issubclass(error_type, Exception)) or error_type is AssertionError:
            error_type = StudentError
        error = error_type(f"{name} raised {last_line(reply[2])}")
        error.from_student = True
        raise error
    return rebuild(reply[1]) if len(reply) > 1 else None


def rebuild(value):
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
            return types.SimpleNamespace(**{k: rebuild(v) for k, v in value["attributes"].items()})
        return {key: rebuild(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rebuild(item) for item in value]
    if isinstance(value, tuple):
        return tuple(rebuild(item) for item in value)
    return value


def student_error(message: str) -> StudentError:
    """An item failure whose message is shown to the student as it is (no exception name)."""
    error = StudentError(message)
    error.from_student = True
    return error


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, at most 500 characters: where Python puts an error's ``Type: message``
    (the worker's description of a student's error; a SyntaxError's code and caret lines come before it)."""
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def failure_text(failure: Exception) -> str:
    """How the student's code failed, for a note or an item's message: it "ran past its time limit", "crashed ..."."""
    if isinstance(failure, ForkBombStopped):
        return f"{failure}, and was stopped"
    return "ran past its time limit" if isinstance(failure, WorkerTimeout) else f"crashed the process ({failure})"


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
    return getattr(importlib.import_module(module), name, None) is fn


def _importable(fn) -> bool:
    """Library functions (torch.mm, math.sqrt) travel by name; the test's own functions do not."""
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] in {"torch", "math", "builtins", "numpy", "operator", "time", "functools"}
