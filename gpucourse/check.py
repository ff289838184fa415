"""Self-check helpers for visible tests: each failure says what was expected and what was found.

A student reading ``AssertionError: pairwise_sq_dists: expected shape (64, 128), got (128, 64)``
knows what to fix; one reading ``AssertionError`` alone does not. Speed checks report the
measured ratio against the required one, for the device class they ran on.

Imported in a notebook's kernel (IPython), this module also shortens the tracebacks a student reads: an error
that passes through the course's own packages (``gpucourse``, ``autograder``) is shown without their frames,
from the test cell's line to the student's own line (:func:`show_without_course_frames`).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import linecache
import math
import os
import sys
import time
import types

import numpy as np
import torch

from .devices import device_class
from .hooks import GraderStandIn, stand_in_hook
from .timing import SpeedResult, ratio_text


def assert_close(actual, expected, *, rtol: float = 1e-5, atol: float = 1e-6, name: str = "result") -> None:
    """``actual`` is a tensor (or numpy array) of ``expected``'s type, shape, dtype and device, equal within tolerance."""
    if isinstance(expected, np.ndarray):
        if not isinstance(actual, np.ndarray):
            raise AssertionError(f"{name}: expected a numpy array, got {type(actual).__name__}")
        actual, expected = torch.from_numpy(np.ascontiguousarray(actual)), torch.from_numpy(np.ascontiguousarray(expected))
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(f"{name}: expected a torch.Tensor, got {type(actual).__name__}")
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{name}: expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{name}: expected dtype {expected.dtype}, got {actual.dtype}")
    if actual.device != expected.device:
        raise AssertionError(f"{name}: expected a tensor on {expected.device}, got one on {actual.device}")
    if actual.numel() == 0:
        return
    if _clearly_close(actual, expected, rtol, atol):
        return
    got = actual.detach().to("cpu", torch.float64)
    want = expected.detach().to("cpu", torch.float64)
    both_nan = torch.isnan(got) & torch.isnan(want)
    error = (got - want).abs()
    bad = ~both_nan & ~(error <= atol + rtol * want.abs())  # written so that NaN counts as bad
    if bad.any():
        first = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {bad.numel()} values differ beyond rtol={rtol:g}, atol={atol:g}; "
            f"first at index {first}: got {got[first].item():.6g}, expected {want[first].item():.6g}"
        )


def _clearly_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> bool:
    """Within half the tolerance everywhere, computed in the tensors' own floating dtype.

    A quick first look (speed checks compare thousands of timed outputs): half the tolerance
    leaves a margin far beyond float32 rounding, so anything it accepts the exact float64
    comparison accepts too; anything else (NaN, an integer dtype, a value near the bound) gets
    the exact comparison.
    """
    if not actual.dtype.is_floating_point or actual.dtype.itemsize < 4:
        return False
    with torch.no_grad():
        error = (actual - expected).abs_()
        bound = expected.abs().mul_(rtol / 2).add_(atol / 2)
        return bool((error <= bound).all())


def assert_equal(actual, expected, *, name: str = "result") -> None:
    """Exact equality, for counts and other integers."""
    if type(actual) is bool or actual != expected:
        raise AssertionError(f"{name}: expected {expected!r}, got {actual!r}")


def assert_approx(actual, expected: float, *, rel: float = 1e-9, name: str = "result") -> None:
    """A real number within ``rel`` relative error of ``expected``."""
    if not isinstance(actual, (int, float)) or isinstance(actual, bool):
        raise AssertionError(f"{name}: expected a number, got {type(actual).__name__}")
    if not math.isclose(actual, expected, rel_tol=rel, abs_tol=0.0):
        shown = f"{expected:.6g}", f"{actual:.6g}"
        if shown[0] == shown[1]:  # they differ beyond six digits: show every digit, or the message reads "expected 2, got 2"
            shown = repr(float(expected)), repr(float(actual))
        raise AssertionError(f"{name}: expected {shown[0]}, got {shown[1]}")


def assert_raises(error: type[BaseException], fn, *args, name: str) -> None:
    """``fn(*args)`` raises ``error``; an error of another type propagates as it is."""
    try:
        fn(*args)
    except error:
        return
    raise AssertionError(f"{name}: expected {error.__name__}, got no error")


def required_speedup(thresholds: dict[str, float]) -> float:
    """The speedup a speed item needs on this machine's device class (``"cpu"`` or ``"cuda"``)."""
    cls = device_class()
    if cls not in thresholds:
        raise KeyError(f"no speed threshold for device class {cls!r}; thresholds are {thresholds}")
    return thresholds[cls]


class TimingFailure(AssertionError):
    """A check on a measured time failed: a speedup short of what an item needs, a time off its mark.

    The one kind of failure a burst of load on a shared machine can cause to a correct answer, so
    the grader measures such an item once more before it gives a 0 (and no other kind), unless
    the failure is ``conclusive``: a shortfall no load explains (see :func:`assert_speedup`).
    """

    def __init__(self, message: str, *, conclusive: bool = False):
        super().__init__(message)
        self.conclusive = conclusive


# A speedup whose median and upper quartile of rounds are both under this fraction of what is
# needed is a verdict, not bad luck: load that slows both sides alike cancels in the interleaved
# ratio. In the full test suite on a loaded 2-core machine, no correct answer's first measurement
# came under 1.3 times what it needed (the lowest: 06's fused tail, 1.74x against 1.3x), and most
# wrong answers measure no faster at all (1.0x against 3-5x): measuring those again only costs time.
CONCLUSIVE_FRACTION = 0.5


def assert_speedup(result: SpeedResult, required: float, *, name: str = "speedup") -> None:
    """The measured speedup reaches ``required``; the message gives both numbers."""
    if not result.speedup >= required:
        conclusive = max(result.speedup, result.high) < CONCLUSIVE_FRACTION * required
        raise TimingFailure(f"{name}: measured {ratio_text(result.speedup)}, need {required:g}× — {result}", conclusive=conclusive)
    print(f"{name}: {result} (needed {required:g}×)")


def assert_measured_speedup(measure, required: float, *, name: str = "speedup", attempts: int = 2) -> None:
    """``measure()`` (a :func:`~gpucourse.timing.compare_speed` call) reaches ``required``, in one of ``attempts`` measurements.

    For an item whose margin is thin on a CPU (fusion gains 1.5-2.4x there, against 1.2x needed): a burst of
    load on a shared machine must not cost it where nothing measures again (plain nbgrader, a notebook).
    """
    for attempt in range(1, attempts + 1):
        result = measure()
        if result.speedup >= required or attempt == attempts:
            break
        print(f"{name}: measured {result.speedup:.1f}×, need {required:g}×: measuring once more")
    assert_speedup(result, required, name=name)


def assert_race_free(trace, *, name: str = "the traced launch") -> None:
    """The traced launches (a :func:`gpucourse.sim.trace`) have no data race in shared or global memory.

    A race may still give the right values in the simulator, which runs one thread at a time and
    blocks one after another, so races are read from who touched each word and when (barriers),
    never from the output. Does nothing where the launch ran compiled (nothing was traced).
    """
    if not trace.available or not trace.races():
        return
    raise AssertionError(
        f"{name}: {trace.race_count()} data races, e.g. {trace.races()[0].describe()}: within a block, a barrier "
        "(cuda.syncthreads) must separate one thread's write of a word from other threads' reads and writes of it; "
        "across blocks, which never wait for each other, threads may share a word only through atomics")


def assert_float32_only(kernel, *args, gpu: str = "A100", name: str | None = None) -> None:
    """``kernel``, compiled by NVIDIA's compiler for ``gpu`` with the types of ``args`` (the
    arguments of a launch), does no float64 arithmetic; the message names the lines that do.

    A Python float such as ``0.5`` is a float64 to numba, and so is everything it touches.
    Where the compiler is not installed this prints why it was not checked (the grader checks it).
    """
    from .kernels import CompilerMissing, compile_report

    name = name or getattr(kernel, "__name__", "the kernel")
    try:
        report = compile_report(kernel, args, gpu=gpu)
    except CompilerMissing as missing:
        print(f"{name}: float32 not checked here: {missing}")
        return
    if report.float64_instructions:
        lines = "; ".join(str(line) for line in report.float64_lines()) or "lines unknown"
        raise AssertionError(f"{name} computes in float64 ({report.float64_instructions} PTX instructions for {report.arch}): {lines}. "
                             "Write float32 constants (np.float32(0.5), as a module constant) so the arithmetic stays float32.")


def written(kernel):
    """``kernel`` (what ``@triton.jit`` or numba's ``@njit`` returns), unless it is still its release's stub, whose body
    only raises ``NotImplementedError("...")``: then that error, raised by the stub's own line (its Python function is
    called), before Triton or numba compiles it. Compiled, a stub would fail in Triton's terms instead (its compiler
    knows no ``raise``: no ``visit_Raise`` in triton/compiler/code_generator.py; its interpreter wraps the error in an
    ``InterpreterError``: triton/runtime/interpreter.py, ``GridExecutor.__call__``), or cost numba a compilation.
    Anything else (a grader's stand-in, a function whose source is not at hand) is returned as it is."""
    function = getattr(kernel, "fn", None) or getattr(kernel, "py_func", None) or kernel
    try:
        [definition] = ast.parse(inspect.getsource(function).strip()).body
        parameters = inspect.signature(function).parameters.values()
    except (OSError, TypeError, SyntaxError, ValueError):
        return kernel
    body = list(getattr(definition, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    call = body[0].exc if len(body) == 1 and isinstance(body[0], ast.Raise) else None
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "NotImplementedError"
            and len(call.args) == 1 and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
        required = [p for p in parameters if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        function(*[None] * len(required))  # the stub raises at once: nothing else runs
    return kernel


def counted_call(fn, *args, counter, top_level: bool = False, eager: bool = False):
    """``(fn(*args), {ATen op: calls})``: what one call returns and the ops it runs.

    In a notebook the ops are counted by ``counter`` (module 06: your ``count_ops``).
    Under grading they are counted by the grader's own profiler, in a process that holds only the
    assignment's setup cells and ``fn``'s answer cell, checked first to use nothing but torch
    operations and ``torch.compile``; ``counter`` plays no part there (the course's evidence rule).
    ``top_level``: the grader counts only the ops called from Python, not those ops call inside
    (``counter`` should count the same way: a dispatch mode does).
    ``eager``: counted with ``torch.compile`` switched off, as the function's code calls the ops, for an item that
    forbids an op by its name or bounds how the count grows (modules 08, 09: compiled, ``F.max_pool2d`` or a loop
    runs as Inductor's code, which records no op, and the library's LSTM as matrix products, its name gone).
    """
    trusted = stand_in_hook(fn, "call_profiled")
    if trusted is not None:
        return trusted(*args, top_level=top_level, eager=eager)
    with torch.compiler.set_stance("force_eager") if eager else contextlib.nullcontext():
        output = fn(*args)
        return output, counter(fn, *args)


def top_level_ops(fn, *args) -> dict[str, int]:
    """{ATen op: calls} of the ops one call ``fn(*args)`` makes from Python (not those ops run inside), recorded
    by torch's profiler as the grader records them (``counted_call(..., top_level=True)``): module 09 looks
    for the library's recurrent ops there (``aten::lstm_cell`` runs as a matmul and pointwise ops inside,
    which is all a dispatch mode would see)."""
    from .gates.ops import counted_top_level

    return counted_top_level(fn, *args)[1]


def moving_ops(ops: dict[str, int]) -> dict[str, int]:
    """``ops`` (a count of every op of one call, nested ones included: your ``count_ops``, or the grader's) less those
    that move no tensor data: allocations (``aten::empty``...) and ops that return their input or a view of it
    (``aten::view``, ``aten::lift_fresh``, an ``aten::to`` that converts nothing). Module 06 bounds passes over
    memory with it: ``torch.compile(dynamic=True)`` lifts a Python float into a tensor on every call, which is
    bookkeeping, not a pass. A ``to`` or ``contiguous`` that does copy copies by ops it calls inside, which stay."""
    from .gates.ops import moving_ops as moving

    return moving(ops)


def launched_ops(fn, *args) -> dict[str, int]:
    """{op: calls} of one call of a Triton launcher (modules 06, 07): each kernel launch as ``triton::<kernel>``,
    and the ATen ops run outside the launches (not those a computing op runs inside: :func:`gpucourse.gates.ops.launched_ops`);
    the counter to give :func:`counted_call` for a launcher, which under grading counts in a process that holds only
    the setup cells, the launcher's cell and its kernels' checked sources."""
    from .gates.ops import launched_ops as counted

    return counted(fn, *args)


def assert_kernels_did_the_work(ops: dict[str, int], name: str) -> None:
    """``ops`` (of :func:`counted_call` with :func:`launched_ops`) hold a Triton kernel launch and no ATen op
    that computes (allocations, fills and views only): the kernels did all the work."""
    from .gates.ops import work_outside_kernels

    launches = {op: calls for op, calls in ops.items() if op.startswith("triton::")}
    assert launches, f"{name} launched no Triton kernel (it ran {ops}): launch your kernel, kernel[grid](...)"
    computing = work_outside_kernels(ops)
    assert not computing, (f"{name} computed with torch besides its kernels {launches}: {computing}; "
                           "the kernels must do all the work (allocating the output is all torch may do)")


def njit_only(fn):
    """``fn``, held to being its answer cell's own compiled loops (module 07): an ``@njit`` function whose
    cell passes :mod:`gpucourse.gates.njit_gate` (no NumPy matmul, no other code; the message names the line).

    Under grading, the returned stand-in calls and times the function in a process that holds only the
    setup cells and that cell (the course's evidence rule); here the cell is checked as the grader will.
    """
    trusted = stand_in_hook(fn, "njit_only")
    if trusted is not None:
        return trusted()
    name = getattr(fn, "__name__", "the function")
    py_func = getattr(fn, "py_func", None)
    if py_func is None:
        raise AssertionError(f"{name} is not compiled with numba's @njit: put @njit on the line above its def")
    written(fn)  # an untouched answer: its stub's message, without a compilation
    from .gates.njit_gate import NotOwnLoops, check_own_loops

    _check_cell_as_graded(py_func, name, check_own_loops, NotOwnLoops)
    return fn


def numpy_only(fn):
    """``fn``, held to being its answer cell's own NumPy code (module 11): a plain function whose cell passes
    :mod:`gpucourse.gates.numpy_gate` (NumPy and math only, no torch, no other code; the message names the line).

    Under grading, the returned stand-in calls and times the function in a process that holds only the setup cells and
    that cell (the course's evidence rule); here the cell is checked as the grader will.
    """
    trusted = stand_in_hook(fn, "numpy_only")
    if trusted is not None:
        return trusted()
    name = getattr(fn, "__name__", "the function")
    written(fn)  # an untouched answer: its stub's message first
    from .gates.numpy_gate import NotNumpyOnly, check_numpy_only

    _check_cell_as_graded(fn, name, check_numpy_only, NotNumpyOnly)
    return fn


def _check_cell_as_graded(function, name: str, gate, refusal: type[Exception]) -> None:
    """Run ``gate`` on the cell that defined ``function``, raising what the grader would say (AssertionError);
    nothing where the cell's source is not at hand (:func:`_cell_source` says so)."""
    cell = _cell_source(function, name)
    if not cell:
        return
    try:
        gate(cell)
    except refusal as refused:
        raise AssertionError(f"{name}: the grader will refuse its cell: {refused}") from None


def memory_capped(fn, budget_bytes: int):
    """``fn``, each call allowed at most ``budget_bytes`` of memory beyond what was in use before it (module 11: a tiled
    attention must not hold an n × n array).

    Under grading, the returned stand-in calls the function in a process that holds only the setup cells and its answer
    cells, whose memory the grader capped before they ran: an allocation past the cap fails there, whatever allocates it.
    Here, in a notebook, each call is measured with :mod:`tracemalloc`, which sees NumPy's arrays and Python's objects but
    not torch's tensors, and a call whose peak passes the budget raises AssertionError.
    """
    trusted = stand_in_hook(fn, "memory_capped")
    if trusted is not None:
        return trusted(int(budget_bytes))
    name = getattr(fn, "__name__", "the function")

    @functools.wraps(fn)
    def measured(*args, **kwargs):
        import tracemalloc

        already = tracemalloc.is_tracing()
        if not already:
            tracemalloc.start()
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        try:
            output = fn(*args, **kwargs)
            peak = tracemalloc.get_traced_memory()[1] - start
        finally:
            if not already:
                tracemalloc.stop()
        if peak > budget_bytes:
            raise AssertionError(f"{name} allocated {peak / 2**20:.1f} MiB at its peak, more than its budget of "
                                 f"{budget_bytes / 2**20:.1f} MiB (measured here with tracemalloc; the grader caps the process)")
        return output

    return measured


def in_place(fn):
    """``fn``, for a test that reads what it writes into its tensor arguments (module 11's KV cache).

    Here that is ``fn`` itself. Under grading the function runs in the student's own process, on copies of the test's
    tensors; the returned stand-in writes what each call left in those copies back into the test's tensors, as a
    kernel launch's arguments come back (``autograder.standins``)."""
    trusted = stand_in_hook(fn, "in_place")
    return trusted() if trusted is not None else fn


def torch_only(fn):
    """``fn``, held to being torch operations in its answer cell (module 09's ``lstm_forward_fast``): a cell that
    passes :mod:`gpucourse.gates.torch_gate` (torch's operators, ``torch.nn.functional``, ``math``, ``torch.compile``
    with literal options; no ``torch.nn`` modules, no private names, no state kept between calls), as the
    cells of the other answers it calls must too.

    Under grading, the returned stand-in calls and times the function in a process that holds only the
    setup cells and those cells (the course's evidence rule), where its ops are also counted
    (:func:`counted_call`); here its cell is checked as the grader will check it.
    """
    trusted = stand_in_hook(fn, "torch_only")
    if trusted is not None:
        return trusted()
    _check_torch_cell(fn)
    return fn


def _check_torch_cell(fn) -> None:
    """What the grader's gate says about the cell that defined ``fn`` (told here, before grading does).
    Here any function of the notebook counts as callable; the grader allows only the setup cells' and the
    other answers'."""
    name = getattr(fn, "__name__", "the function")
    fn = getattr(fn, "__wrapped__", fn)  # a torch.compile'd function: its code is torch's, its cell the wrapped one's
    cell = _cell_source(fn, name)
    if not cell:
        return
    from .gates.syntax import free_names
    from .gates.torch_gate import UncountableSource, check_countable
    from .triton_source import is_triton_kernel

    namespace = getattr(fn, "__globals__", {})
    kernels = {used for used in free_names(cell) if is_triton_kernel(namespace.get(used))}  # a Triton launcher's (06, 07)
    try:
        check_countable(cell, namespace, kernels=kernels)
    except UncountableSource as refused:
        raise AssertionError(f"{name}: the grader will refuse its cell: {refused}") from None


def _cell_source(fn, name: str) -> str:
    """The source of the notebook cell (or file) that defined ``fn``, as the grader will check it; "" with a note
    where it is not available (a function made by exec)."""
    code = getattr(fn, "__code__", None)
    cell = "".join(linecache.getlines(code.co_filename)) if code is not None else ""
    if not cell:
        print(f"{name}: its cell's source is not available here, so the grader's check on it was not run")
    return cell


def mma_calls(fn, a, b) -> int:
    """How many times ``fn(a, b, mma)`` calls the intrinsic ``mma`` (module 07), checked to be the calls that
    did the work: one per pair of (zero-padded) input tiles, each output tile built from their results
    (:func:`gpucourse.intrinsics.check_log`; raises AssertionError naming what is wrong).

    Under grading the calls are logged by the grader in a process that holds only the setup cells and
    ``fn``'s answer cell, and checked by the grader.
    """
    trusted = stand_in_hook(fn, "mma_calls")
    if trusted is not None:
        return trusted(a, b)
    written(fn)  # an untouched answer: its stub's message, without a compilation
    from .intrinsics import check_log, logged_call, new_key

    key = new_key()
    output, calls = logged_call(fn, a, b, key)
    return check_log(a, b, output, calls, key, name=getattr(fn, "__name__", "the function"))


def mma_counted(fn):
    """``fn(a, b, mma)`` (module 07) as a function of ``(a, b)`` that passes the grader's counting intrinsic as ``mma``
    (:func:`gpucourse.intrinsics.counting_mma`: ``mma_16x16``, plus a tally of its calls and of their operands), and
    checks after every call, and every timed block of :func:`gpucourse.timing.compare_speed`, that the calls were one
    per pair of zero-padded input tiles, on those tiles (:func:`gpucourse.intrinsics.check_tally`; AssertionError
    naming what is wrong). So the intrinsic is held to doing the work at every size that is checked or timed.

    Under grading the calls run and are tallied in ``fn``'s njit runner, a process that holds only the setup cells and
    ``fn``'s answer cell (as :func:`njit_only`), and the grader checks the tally; here ``fn``'s cell is checked as
    :func:`njit_only` checks it, and the calls are tallied in this process.
    """
    trusted = stand_in_hook(fn, "mma_counted")
    if trusted is not None:
        return trusted()
    return MmaCounted(njit_only(fn))


class MmaCounted(GraderStandIn):
    """``fn(a, b, counting_mma)`` called as ``self(a, b)``, each call and timed block tallied and checked (:func:`mma_counted`).

    ``start(secret)`` and ``read()`` start and read the tally where ``fn`` runs: in this process by default; in the
    grader, in the runner where its stand-in for ``fn`` runs (:meth:`autograder.standins.StudentFunction.mma_counted`).
    """

    def __init__(self, fn, start=None, read=None):
        from .intrinsics import read_tally, start_tally

        self.fn, self.start, self.read = fn, start or start_tally, read or read_tally
        self.__name__ = getattr(fn, "__name__", "the function")

    def __call__(self, a, b):
        [output] = self._tallied(lambda calls: [self.fn(*args) for args in calls], [(a, b)])
        return output

    def timed_block(self, calls):
        """(seconds, outputs) of ``calls``, timed as :func:`gpucourse.timing.compare_speed` times any function (a grader's
        stand-in brings its own clock); the tally is started before the clock and read after it."""
        from .timing import _timed_block

        # charge_cpu_time: this is compiled loops, pure computation (module 07's speed items time it so).
        return self._tallied(lambda calls: _timed_block(self.fn, calls, charge_cpu_time=True), calls)

    def _tallied(self, run, calls):
        from .intrinsics import check_tally, counting_mma, new_tally_secret

        calls = [tuple(args) for args in calls]
        secret = new_tally_secret()
        self.start(secret)
        result = run([(a, b, counting_mma) for a, b in calls])
        check_tally(calls, self.read(), secret, name=self.__name__)
        return result


def answers_only(fn, *names: str, seconds: float | None = None, gated: bool = False):
    """``fn``, a setup cell's function that drives the answers ``names`` (trains your model, steps your
    optimizer), as the grader runs it: in a process that holds only the setup cells and the answer cells
    that define ``names`` and the answers they call (the course's evidence rule), and stopped after
    ``seconds`` of the grader's quiet-machine clock. What it returns is plain data (tensors, numbers)
    that the test then checks itself. ``gated``: those answer cells are held to torch operations, as
    :func:`torch_only` holds them (module 09 takes gradients through a from-scratch LSTM that way).

    Here it runs in this process, and a call that takes longer than ``seconds`` fails, as it would there:
    counted as the lesser of its wall-clock and CPU time, so a busy machine (wall time) and several torch
    threads (CPU time) do not count against it. So keep each of those answer cells self-contained: when
    graded, no other cell of yours runs beside them.
    """
    trusted = stand_in_hook(fn, "answers_only")
    if trusted is not None:
        return trusted(names, seconds, gated)
    for name in names if gated else ():
        if name not in fn.__globals__:
            raise NameError(f"name {name!r} is not defined")
        _check_torch_cell(fn.__globals__[name])

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn(*args, **kwargs)
        elapsed = min(time.perf_counter() - wall, time.process_time() - cpu)
        if seconds is not None and elapsed > seconds:
            raise AssertionError(f"{fn.__name__} took {elapsed:.1f} s with your {', '.join(names)}; the budget is {seconds:g} s")
        return result

    return timed


# --- The tracebacks a student reads ----------------------------------------------------------------

# Where the course's own code lives: a frame in these folders is the course's machinery, not the student's code.
COURSE_FOLDERS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package) + os.sep
                       for package in ("gpucourse", "autograder"))
# Set (to anything but "" or "0") to see every frame, the course's included: for whoever debugs the course itself.
FULL_TRACEBACKS_ENV = "GPUCOURSE_FULL_TRACEBACKS"


def in_course(filename: str) -> bool:
    """Whether ``filename`` (a code object's) is a file of the course's packages."""
    return os.path.abspath(filename).startswith(COURSE_FOLDERS)


def without_course_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback ``tb`` less its entries in the course's packages (None when nothing else is left)."""
    kept = []
    while tb is not None:
        if not in_course(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    shortened = None
    for entry in reversed(kept):
        shortened = types.TracebackType(shortened, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return shortened


def show_without_course_frames(shell, etype, value, tb, tb_offset=None):
    """IPython's custom exception handler (``InteractiveShell.set_custom_exc``): show the error as IPython does, less
    the frames in the course's packages, in the error and in the errors chained to it.

    A failed check then reads as the test cell's line and the check's message; a stub as the test cell's line, the
    answer's ``raise`` line and its message. IPython's own ``__tracebackhide__`` cannot do this: it always shows the
    frame that raised (IPython/core/ultratb.py, ``VerboseTB.format_exception_as_a_whole``), and would need a line in
    every function on the way.
    """
    chained, seen = [value], set()
    while chained:
        error = chained.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        error.__traceback__ = without_course_frames(tb if error is value else error.__traceback__)
        chained += [error.__cause__, error.__context__]
    shell.showtraceback((etype, value, value.__traceback__), tb_offset=tb_offset, running_compiled_code=True)


def hide_course_frames_in_ipython() -> bool:
    """In an IPython kernel, show every error without the course's frames (:func:`show_without_course_frames`);
    True when installed. Nothing happens outside IPython (a grader's worker), under ``GPUCOURSE_FULL_TRACEBACKS``,
    or where another custom exception handler is already installed."""
    ipython = sys.modules.get("IPython")  # not imported here: a kernel has already imported it
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is None or os.environ.get(FULL_TRACEBACKS_ENV, "") not in ("", "0"):
        return False
    if shell.custom_exceptions and getattr(shell, "_gpucourse_handler", None) is not getattr(shell, "CustomTB", None):
        return False
    shell.set_custom_exc((Exception,), show_without_course_frames)
    shell._gpucourse_handler = shell.CustomTB
    return True


hide_course_frames_in_ipython()
