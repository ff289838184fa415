"""A student's special runners: fresh processes that hold only checked cells, where the grader launches, counts or times.

The student's other code never ran in a runner, so what the grader observes there is evidence (the rule of
docs/authoring.md, section 6). Each kind is one row of :data:`RUNNERS`, as :data:`autograder.forkserver.WARM_UPS`
lists a fork server's warm-ups: the row says which cells the runner holds (after checking them with its gate) and
whether it may import the grader's own modules. :meth:`autograder.session.StudentWorker.runner` looks the row
up, and starts the runner once per submission; a stand-in (:mod:`autograder.standins`) asks for it by kind.

A row refuses cells the grader will not run by raising :class:`Refused`, with the message the student reads.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass

from gpucourse import devices
from gpucourse.gates import njit_gate, numpy_gate, torch_gate
from gpucourse.kernel_text import KernelSource

from .skeleton import defined_names, free_names

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


class Refused(Exception):
    """The grader will not run these cells in a runner; the message is the student's to read."""


@dataclass(frozen=True)
class RunnerSpec:
    """What a runner holds: ``key`` names it (its folder too), ``cells`` run there in order; ``grader_modules``:
    it may import the grader's package (its cells were checked first and count with the grader's code)."""

    key: str
    cells: list[str]
    grader_modules: bool = False


def kernel_runner(worker, source: KernelSource, simulated: bool) -> RunnerSpec:
    """A process holding only ``source`` (checked definitions), where the tests' launches of that kernel run:
    in numba's simulator (or Triton's interpreter) when ``simulated`` (observed launches, and every launch on a
    CPU grader), else on the grader's GPU."""
    preamble = {("numba", True): SIMULATOR_PREAMBLE, ("numba", False): GPU_PREAMBLE,
                ("triton", True): TRITON_INTERPRETER_PREAMBLE, ("triton", False): TRITON_GPU_PREAMBLE}[source.language, simulated]
    return RunnerSpec(f"kernel-{'sim' if simulated else 'gpu'}-{source.digest[:16]}", [preamble, source.text],
                      grader_modules=source.language == "triton")  # its launches are bounds-checked by autograder.triton_runner


def profile_runner(worker, names, item_deadline=None) -> RunnerSpec:
    """A process holding only the assignment's setup cells and the answer cells that define ``names`` (a name or
    several) and the other answers they call, each checked first to be countable (:mod:`gpucourse.gates.torch_gate`):
    where the grader counts the functions' ops, and calls and times the functions of :func:`gpucourse.check.torch_only`.
    Nothing there can reach the profiler (the evidence rule). A Triton launcher's kernels (modules 06, 07) come as
    their checked sources, as in a kernel runner, and each launch is counted as ``triton::<kernel>``
    (:mod:`autograder.triton_runner`); ``item_deadline`` bounds the requests for those sources."""
    names = (names,) if isinstance(names, str) else tuple(names)
    setup_cells, setup_namespace = worker.setup
    cells = answer_cells(worker, names)
    answers = {name for cell in cells for name in defined_names(cell)}
    kernel_cells = {kernel: cell for cell in cells for kernel in _triton_kernels(cell)}
    deadline = item_deadline or (lambda: worker.limits.item_seconds)
    sources = [worker.kernel_source(kernel, deadline).text for kernel in kernel_cells]
    cells = [cell for cell in cells if not set(defined_names(cell)) <= set(kernel_cells)]  # a kernel's cell: its source instead
    given = {name: value for name, value in setup_namespace.items() if not callable(value) or name in worker.answer_helpers}
    for cell in cells:
        try:
            torch_gate.check_countable(cell, given, answers, kernels=set(kernel_cells))
        except torch_gate.UncountableSource as refused:
            owner = next((name for name in names if name in defined_names(cell)), ", ".join(defined_names(cell)) or names[0])
            keep_to = "torch's allocations and launches of your Triton kernels" if kernel_cells else "torch operations and torch.compile"
            raise Refused(f"{owner}: its cell cannot be counted by the grader ({refused}); keep it to {keep_to}") from None
    hooks = [TRITON_LAUNCH_HOOKS[devices.device_class() != "cuda"]] if kernel_cells else []
    return RunnerSpec(f"profile-{_digest([*sources, *cells])}", [*hooks, *setup_cells, *sources, *cells], grader_modules=True)


def njit_runner(worker, name: str) -> RunnerSpec:
    """A process holding only the assignment's setup cells and the answer cell that defines ``name``, checked
    first to be nothing but the student's own compiled loops (:mod:`gpucourse.gates.njit_gate`): where the
    grader calls and times the function, and counts its intrinsic calls."""
    return _gated_runner(worker, name, "njit", njit_gate.check_own_loops, njit_gate.NotOwnLoops, "only your own compiled loops")


def numpy_runner(worker, name: str) -> RunnerSpec:
    """A process holding only the assignment's setup cells and the answer cell that defines ``name``, checked first
    to be NumPy code alone (:mod:`gpucourse.gates.numpy_gate`): where the grader calls and times the function."""
    return _gated_runner(worker, name, "numpy", numpy_gate.check_numpy_only, numpy_gate.NotNumpyOnly, "NumPy code alone")


def _gated_runner(worker, name: str, kind: str, gate, refusal: type[Exception], what: str) -> RunnerSpec:
    """The setup cells and the answer cell defining ``name``, once ``gate`` passed it (else :class:`Refused`, saying it
    is not ``what`` the row asks for)."""
    cell = answer_cell(worker, name)
    try:
        gate(cell)
    except refusal as refused:
        raise Refused(f"{name}: its cell is not {what} ({refused})") from None
    return RunnerSpec(f"{kind}-{_digest([cell])}", [*worker.setup[0], cell])


def answers_runner(worker, names) -> RunnerSpec:
    """A process holding only the assignment's setup cells and the answer cells that define ``names`` and the
    other answers they call: where a setup function that drives those answers runs (it trains the student's
    model, steps their optimizer), so what it returns comes from those cells alone (the evidence rule)."""
    cells = answer_cells(worker, tuple(names))
    return RunnerSpec(f"answers-{_digest(cells)}", [*worker.setup[0], *cells])


def memory_cap_cell(budget_bytes: int) -> str:
    """The grader's cell that caps a runner's memory before any answer cell runs: RLIMIT_DATA, the kernel's limit on a
    process's private writable memory (the heap and anonymous mappings, where NumPy's and torch's arrays live; not the
    libraries' code, nor a GPU driver's address-space reservations), set to what the process uses now plus
    ``budget_bytes``, soft and hard. Code that runs later cannot raise it: the worker has no CAP_SYS_RESOURCE.
    A matmul in NumPy and in torch runs first: the BLAS libraries allocate their work buffers on their first call, and
    OpenBLAS aborts the process when it cannot (the cap is for the answer's arrays, not for the libraries' buffers)."""
    return ("import sys as _sys\n"
            "import numpy as _np\n"
            "for _dtype in (_np.float32, _np.float64):\n"
            "    _np.ones((256, 256), _dtype) @ _np.ones((256, 256), _dtype)\n"
            "if 'torch' in _sys.modules:\n"
            "    for _dtype in (_sys.modules['torch'].float32, _sys.modules['torch'].float64):\n"
            "        _sys.modules['torch'].ones(256, 256, dtype=_dtype) @ _sys.modules['torch'].ones(256, 256, dtype=_dtype)\n"
            "import resource as _resource\n"
            "with open('/proc/self/status') as _status:\n"
            "    _used = next(int(_line.split()[1]) * 1024 for _line in _status if _line.startswith('VmData:'))\n"
            f"_resource.setrlimit(_resource.RLIMIT_DATA, (_used + {int(budget_bytes)}, _used + {int(budget_bytes)}))\n"
            "del _sys, _np, _dtype, _resource, _status, _used\n")


def capped_runner(worker, name: str, budget_bytes: int) -> RunnerSpec:
    """A process holding only the assignment's setup cells, then the grader's memory cap (:func:`memory_cap_cell`),
    then the answer cells that define ``name`` and the other answers they call: where a call may allocate at most
    ``budget_bytes`` beyond what the setup left, its inputs and outputs included. The kernel enforces the cap (an
    allocation past it fails: NumPy raises MemoryError, torch a RuntimeError); no answer cell ran before it was set."""
    if budget_bytes < 1:
        raise ValueError(f"a memory budget must be positive, got {budget_bytes}")
    cells = answer_cells(worker, (name,))
    return RunnerSpec(f"capped-{int(budget_bytes)}-{_digest(cells)}", [*worker.setup[0], memory_cap_cell(budget_bytes), *cells])


# kind -> how a worker's runner of that kind is made: (the student's StudentWorker, *arguments) -> RunnerSpec
RUNNERS = {
    "kernel": kernel_runner,  # (source, simulated): a kernel's launches (KernelLaunch)
    "profile": profile_runner,  # (names, item_deadline=None): counted and torch-only calls (call_profiled, torch_only, answers_only gated)
    "njit": njit_runner,  # (name): njit-only calls and intrinsic counts (njit_only, mma_calls, mma_counted)
    "numpy": numpy_runner,  # (name): NumPy-only calls (numpy_only)
    "answers": answers_runner,  # (names): a setup function driving the answers (answers_only)
    "capped": capped_runner,  # (name, budget_bytes): calls under a memory cap (memory_capped)
}


def answer_cell(worker, name: str) -> str:
    """The last of the student's own cells that defines ``name`` (setup cells are the source's)."""
    setup_cells = set(worker.setup[0])
    for cell in reversed(worker.cells):
        if cell not in setup_cells and name in defined_names(cell):
            return cell
    raise Refused(f"{name} is not defined by any of your answer cells")


def answer_cells(worker, names: tuple[str, ...]) -> list[str]:
    """The cells that define ``names``, and those that define the assignment's other answers they use
    (module 09's ``lstm_forward`` calls ``lstm_cell``), in the notebook's order."""
    chosen, seen, pending = set(), set(), list(names)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        cell = answer_cell(worker, name)
        chosen.add(cell)
        pending += [used for used in free_names(cell) if used in worker.answer_names]
    return [cell for cell in dict.fromkeys(worker.cells) if cell in chosen]


def _triton_kernels(cell: str) -> list[str]:
    """The ``@triton.jit`` functions an answer cell defines (a launcher's kernels)."""
    try:
        tree = ast.parse(cell)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and any(
        "triton.jit" in ast.unparse(decorator) for decorator in node.decorator_list)]


def _digest(cells: list[str]) -> str:
    """A runner's key: which cells it holds."""
    return hashlib.sha256(chr(0).join(cells).encode()).hexdigest()[:16]
