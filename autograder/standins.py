"""What a test's names are bound to under grading: stand-ins for the student's functions and kernels, and the source's.

A test cell runs in the harness, with the harness's own torch, clocks and comparisons; the student's code runs in
their worker (:mod:`autograder.session`). A :class:`StudentFunction` stands for one of the student's functions (a
call is a request to their worker), a :class:`KernelLaunch` for ``kernel[grid, block]``, a :class:`ReferenceFunction`
for a setup cell's function (run here, or timed in a reference worker). The package's helpers reach what only the
grader can do (time in the worker, count ops, launch in a kernel runner) through the hooks these classes implement
(:class:`gpucourse.hooks.GraderStandIn`).

A timed block is charged the seconds between "go" and "done", plus the CPU time spent loading its inputs beyond
what loading takes (:func:`_charged_seconds`); its outputs are held to the digest sent with "done" (:func:`_check_digests`).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from gpucourse import devices, sim
from gpucourse.compiler import ACCESS_KINDS, CompilerMissing, compile_report, describe_signature, signature_descriptor
from gpucourse.gates import kernel_gate
from gpucourse.hooks import GraderStandIn
from gpucourse.kernel_text import KernelCompileError, KernelSource
from gpucourse.triton_compiler import describe_signature as describe_triton_signature
from gpucourse.triton_compiler import signature_descriptor as triton_signature_descriptor
from gpucourse.triton_compiler import triton_compile_report

from . import protocol, runners, sandbox
from .clock import tree_cpu_seconds
from .loading import drive
from .protocol import Request
from .session import GraderError, StudentError, StudentWorker, WorkerTimeout, reply_value, student_error
from .worker import output_digest


class StudentFunction(GraderStandIn):
    """Stands in the harness for a function the student wrote; calls run in their worker."""

    def __init__(self, worker: StudentWorker, name: str, item_deadline):
        self.worker, self.name, self.item_deadline = worker, name, item_deadline
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self._call(Request.CALL, args, kwargs)

    def call_with_streams(self, dispatch, *args):
        """Call the function with its ``gpucourse.streams`` calls sent to ``dispatch``, here (the
        trusted side of :class:`gpucourse.streams.RemoteBackend`): the test records the timeline itself."""
        return self._call(Request.CALL_STREAMS, args, {}, self.worker.marshal(dispatch))

    def _call(self, kind: Request, args, kwargs, *extra):
        self.worker.ensure_started()
        message = (kind, self.name, self.worker.marshal(args), self.worker.marshal(kwargs), *extra)
        return reply_value(self.name, self.worker.request(message, self.item_deadline()))

    def call_profiled(self, *args, top_level: bool = False, eager: bool = False):
        """(output, {ATen op: calls}) of one call, counted by the grader's profiler in a process that
        holds only the setup cells and this function's answer cell (its ``profile`` runner, :mod:`autograder.runners`),
        after an uncounted warm-up call on other values (where ``torch.compile`` compiles);
        ``top_level``: only the ops called from Python; ``eager``: ``torch.compile`` switched off."""
        runner = self.worker.runner("profile", self.name, self.item_deadline)
        message = (Request.CALL_PROFILED, self.name, runner.marshal(args), bool(top_level), bool(eager))
        reply = reply_value(self.name, runner.request(message, self.item_deadline()))
        if not isinstance(reply, dict) or not isinstance(reply.get("ops"), dict):
            raise StudentError(f"{self.name}: the counted call did not report back")
        return reply["output"], reply["ops"]

    def torch_only(self) -> StudentFunction:
        """This function as it runs in its ``profile`` runner: calls and timed blocks go there, where only the setup
        cells and its checked answer cells ran."""
        return StudentFunction(self.worker.runner("profile", self.name, self.item_deadline), self.name, self.item_deadline)

    def njit_only(self) -> StudentFunction:
        """This function as it runs in its ``njit`` runner: calls and timed blocks go there, where only the setup
        cells and its checked answer cell ran."""
        return StudentFunction(self.worker.runner("njit", self.name), self.name, self.item_deadline)

    def numpy_only(self) -> StudentFunction:
        """This function as it runs in its ``numpy`` runner: calls and timed blocks go there, where only the setup
        cells and its checked answer cell ran."""
        return StudentFunction(self.worker.runner("numpy", self.name), self.name, self.item_deadline)

    def memory_capped(self, budget_bytes: int) -> StudentFunction:
        """This function as it runs in its ``capped`` runner (:mod:`autograder.runners`): calls go there, where the
        grader's cell capped the process's memory before the answer cells ran; that cell's reply came before any of
        theirs, so a cap that could not be set is the grader's failure, never a pass."""
        runner = self.worker.runner("capped", self.name, int(budget_bytes))
        cap = runners.memory_cap_cell(int(budget_bytes))
        if any(runner.cells[index] == cap for index in runner.raised | runner.skipped):
            raise GraderError(f"{self.name}: the grader could not cap its runner's memory (its cap cell failed)")
        return StudentFunction(runner, self.name, self.item_deadline)

    def in_place(self) -> InPlaceFunction:
        """This function, its calls' writes into their tensor arguments copied back into the test's tensors."""
        return InPlaceFunction(self)

    def mma_calls(self, a, b) -> int:
        """How many times ``self(a, b, mma)`` calls the intrinsic, after checking (here) that the calls did all
        of ``a @ b``'s work (:func:`gpucourse.intrinsics.check_log`); run with the grader's logging intrinsic
        in the function's njit runner."""
        from gpucourse.intrinsics import check_log, new_key

        key = new_key()
        runner = self.worker.runner("njit", self.name)
        reply = reply_value(self.name, runner.request((Request.CALL_LOGGED_MMA, self.name, a, b, key), self.item_deadline()))
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

        runner = self.worker.runner("njit", self.name)

        def start(secret) -> None:
            runner.ensure_started()
            reply_value(self.name, runner.request((Request.START_TALLY, secret), self.item_deadline()))

        def read():
            return reply_value(self.name, runner.request((Request.READ_TALLY,), self.item_deadline()))

        return MmaCounted(StudentFunction(runner, self.name, self.item_deadline), start, read)

    def drive_iterator(self, plan):
        """Consume the generator the student's function returns as :func:`gpucourse.loading.run_loader`
        asks, with the loads' latency and the compute kept here (:mod:`autograder.loading`)."""
        self.worker.ensure_started()
        with self.worker.talking():
            return drive(self.worker, self.name, plan, self.worker.clock.now() + self.item_deadline())

    def __getitem__(self, config):
        return KernelLaunch(self, config)

    def __kernel_source__(self) -> KernelSource:
        """The student's kernel's source, from their worker, checked to hold nothing but definitions
        (:meth:`autograder.session.StudentWorker.kernel_source`)."""
        return self.worker.kernel_source(self.name, self.item_deadline)

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
            raise student_error(f"{self.name}: {error}") from None
        self._compile_once(signature, lambda: triton_compile_report(source, args, kwargs, gpu=kernel_gate.GATE_GPU))

    def _compile_once(self, signature: str, compile_it):
        key = (self.name, signature)
        if key in self.worker.compiled:
            return self.worker.compiled[key]
        try:
            self.worker.compiled[key] = compile_it()
        except KernelCompileError as error:
            reason, *code = str(error).splitlines()  # the item's message is one line: the reason, then the code
            raise student_error(f"{self.name} would not compile for a GPU: {reason}" + "".join(f" (`{c.strip()}`)" for c in code[:1])) from None
        except TimeoutError:
            raise student_error(f"{self.name}: compiling it for a GPU took too long") from None
        except CompilerMissing as missing:
            if self.worker.compiler_required:
                raise GraderError(f"this grader cannot compile kernels: {missing}") from None
            self.worker.compiled[key] = None
            self.worker.note("your kernels were not compiled for a real GPU here (NVIDIA's compiler is not installed); the grader will")
        return self.worker.compiled[key]

    def timed_block(self, calls):
        """Run ``self(*args)`` for each args in ``calls`` and return (seconds, outputs).

        The inputs are sent first, untimed. The harness's clock runs from "go" until the
        worker answers "done" with a digest of its outputs under random weights chosen now;
        the outputs, fetched afterwards, must match it. So reporting "done" before the work
        is finished cannot pay. Baselines run the same way in a reference worker.
        """
        self.worker.ensure_started()
        block_file = self.worker.workdir / f".timed-block-{next(self.worker.ids)}.bin"
        used_before = tree_cpu_seconds(self.worker.pids())
        try:
            inputs = protocol.map_tensors([self.worker.marshal(a) for a in calls], block_file)
            reply_value(self.name, self.worker.request((Request.LOAD_BLOCK, self.name, inputs), self.item_deadline()))
            weights = torch.rand(4099, dtype=torch.float64) + 0.5  # odd length: no alignment with output shapes
            devices.synchronize()
            used_loading = tree_cpu_seconds(self.worker.pids()) - used_before
            start, used_before = time.perf_counter(), tree_cpu_seconds(self.worker.pids())
            reply = self.worker.request((Request.RUN_BLOCK, weights), self.item_deadline())
            seconds = time.perf_counter() - start
            used_running = tree_cpu_seconds(self.worker.pids()) - used_before
            digests = reply_value(self.name, reply)
            outputs = reply_value(self.name, self.worker.request((Request.FETCH_BLOCK,), self.item_deadline()))
        finally:
            block_file.unlink(missing_ok=True)
        _check_digests(self.name, outputs, digests, weights)
        on_gpu = devices.device_class() == "cuda"
        if on_gpu:
            used_loading = 0.0  # a GPU grader's worker copies and pins inputs as it loads them: CPU that is not a cheat
        # Only CPU time when the worker's whole tree is accounted for (its own PID namespace) and does all the work (no GPU).
        cpu_only = self.worker.isolation in sandbox.CONTAINED and not on_gpu
        return _charged_seconds(seconds, used_running, used_loading, calls, cpu_only=cpu_only), outputs


class InPlaceFunction:
    """A student's function whose test reads what it writes into its tensor arguments (``gpucourse.check.in_place``).
    The call runs in the student's worker on copies of the arguments; the tensors come back with the output and are
    written into the test's own tensors (:func:`_copy_back_tensors`), as a kernel launch's do."""

    def __init__(self, function: StudentFunction):
        self.function = function
        self.__name__ = function.name

    def __call__(self, *args, **kwargs):
        reply = self.function._call(Request.CALL_IN_PLACE, args, kwargs)
        _copy_back_arguments(self.function.name, args, kwargs, reply, "call")
        return reply.get("output")


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
        runner = self.kernel.worker.runner("kernel", source, bool(observers) or devices.device_class() != "cuda")
        message = (Request.LAUNCH, source.name, self.config, runner.marshal(args), observers)
        reply = reply_value(self.kernel.name, runner.request(message, self.kernel.item_deadline()))
        if not isinstance(reply, dict) or not isinstance(reply.get("observed"), dict):
            raise StudentError(f"{self.kernel.name}: the launch did not report back")
        _copy_back(self.kernel.name, args, reply.get("arrays"))
        try:
            sim.absorb(reply["observed"])
            traced = _traced_kinds(reply["observed"]["trace"]) if "trace" in reply["observed"] else None
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise StudentError(f"{self.kernel.name}: what the launch reported is malformed ({error})") from None
        if traced is not None and compiled is not None:  # without a compiler (a self-check) the worker's note says so
            if self.kernel.worker.traced_paths is None:  # a stand-in outside an item's test (the grade loop sets one per item)
                self.kernel.worker.traced_paths = TracedPaths()
            self.kernel.worker.traced_paths.launched(self.kernel.name, compiled, traced)

    def _launch_triton(self, source: KernelSource, args, kwargs) -> None:
        """``kernel[grid](*args, **kwargs)`` for a ``@triton.jit`` kernel: compiled by Triton for sm_80, then
        run in a kernel runner (Triton's interpreter on a CPU grader, the GPU on a GPU grader); its tensor
        arguments come back and are copied into the test's tensors. ``sim`` observers are numba's: not opened."""
        grid = self.config if isinstance(self.config, tuple) else (self.config,)
        if not 1 <= len(grid) <= 3 or not all(type(n) is int and n >= 1 for n in grid):
            raise TypeError(f"{self.kernel.name}[grid]: the grid must be a tuple of 1 to 3 positive ints, got {self.config!r}")
        self.kernel.check_triton_compiles(source, args, kwargs)
        runner = self.kernel.worker.runner("kernel", source, devices.device_class() != "cuda")
        message = (Request.LAUNCH_TRITON, source.name, list(grid), runner.marshal(args), runner.marshal(kwargs))
        reply = reply_value(self.kernel.name, runner.request(message, self.kernel.item_deadline()))
        _copy_back_arguments(self.kernel.name, args, kwargs, reply, "launch")


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
            raise student_error(_differs(name, f"the simulated launch made {_kinds_in_words(missing)}, the code compiled for a GPU has none"))

    def check_every_kind_ran(self) -> None:
        """After the item's test: no kernel's compiled code has a kind of access its traced launches never made."""
        for name, compiled, traced in self.made.values():
            unseen = compiled.access_kinds() - traced
            if unseen:
                raise student_error(_differs(name, f"the code compiled for a GPU has {_kinds_in_words(unseen)}, "
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


def _copy_back_arguments(name: str, args, kwargs, reply, what: str) -> None:
    """Copy the tensor arguments a worker sent back with its reply (``{"args": [...], "kwargs": {...}}``) into the test's."""
    if not isinstance(reply, dict) or not isinstance(reply.get("args"), list) or not isinstance(reply.get("kwargs"), dict):
        raise StudentError(f"{name}: the {what} did not report back its arguments")
    _copy_back_tensors(name, [*args, *kwargs.values()], [*reply["args"], *(reply["kwargs"].get(key) for key in kwargs)])


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


class ReferenceFunction(GraderStandIn):
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
        """This setup function, called in the student's ``answers`` runner (:mod:`autograder.runners`), or with
        ``gated`` in their ``profile`` runner (the answers' cells checked by :mod:`gpucourse.gates.torch_gate`),
        each call within ``seconds`` quiet-machine seconds (and the item's limit)."""
        runner = self.student.runner("profile" if gated else "answers", names)
        return _BudgetedCall(runner, self.__name__, names, self.remote.item_deadline, seconds)


class _BudgetedCall(GraderStandIn):
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
            raise student_error(f"{self.name} with your {', '.join(self.names)} ran past its budget of "
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
    if not isinstance(digests, list) or len(digests) != len(outputs):
        raise StudentError(f"{name}: the timed run did not report its outputs")
    for output, digest in zip(outputs, digests):
        expected = output_digest(output, weights, on_gpu=isinstance(digest, float))
        if expected is None:
            continue
        exact = isinstance(expected, int)  # a CPU output's word sum; a GPU one's float64 sum is rounded
        if type(digest) is not type(expected) or (digest != expected if exact else abs(digest - expected) > 1e-6 * (abs(expected) + 1.0)):
            raise AssertionError(f"{name}: the outputs returned after timing are not those the timed run produced")
