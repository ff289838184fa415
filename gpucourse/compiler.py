"""What a real GPU compiler makes of a numba kernel, without a GPU: registers, memory, float64.

numba's CUDA simulator runs kernels as Python threads, so it accepts code no GPU would compile
and cannot say how many registers a kernel needs. numba-cuda can still compile the kernel to
PTX with NVIDIA's NVVM library, and NVIDIA's assembler ``ptxas`` turns that PTX into machine
code for a chosen GPU and reports what it used; neither needs a GPU or a driver.
:func:`compile_report` does both in a child process (the caller may have the simulator on)
and returns a :class:`CompileReport`.

Compiling takes a few seconds per kernel; results are cached per (source, signature, GPU).
Nothing here imports numba, NVVM or ptxas until a kernel is compiled.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .kernel_source import KERNEL_FILENAME, KernelCompileError, KernelSource, KernelSourceError, SourceLine, kernel_source

__all__ = ["ACCESS_KINDS", "CompileReport", "CompilerMissing", "KernelCompileError", "KernelSourceError", "SourceLine",
           "compile_report", "find_ptxas", "kernel_source"]

INSTALL_COMMAND = 'pip install "numba-cuda[cu13]" "nvidia-cuda-nvcc==13.*"'
PTXAS_ENV = "GPUCOURSE_PTXAS"  # a ptxas to use instead of searching (tests point it at nothing)
COMPILE_TIMEOUT_S = 120.0
_WORKER = Path(__file__).with_name("_compile_worker.py")
_answers: dict[str, dict] = {}  # the child's answers, by hash of (source text, signature, cc, ptxas)
# A folder where answers are also kept across processes. Off by default: the test suite sets it for
# one run, so each kernel is compiled once per run, not once per grading process.
CACHE_ENV = "GPUCOURSE_COMPILE_CACHE"
SERVER_ENV = "GPUCOURSE_COMPILE_SERVER"  # "0": one compiler process per kernel instead of a server per process


class CompilerMissing(RuntimeError):
    """NVVM or ptxas is not installed here; the message says how to install them."""

    def __init__(self, what: str, install: str = INSTALL_COMMAND):
        super().__init__(f"{what}, so kernels cannot be compiled here without a GPU. Install the compiler "
                         f"with\n    {install}\nand restart the Python kernel.")


def compile_report(kernel, signature, gpu: str = "A100", timeout: float = COMPILE_TIMEOUT_S) -> CompileReport:
    """Compile ``kernel`` for ``gpu`` as a real GPU would, without one, and report what it uses.

    kernel: a ``@cuda.jit`` kernel (in the simulator or on a GPU).
    signature: its argument types as numba takes them, e.g. ``(float32[:, :], float32[:, :])``
    (``float32[:, ::1]`` for C-contiguous arrays, which is what a launch with numpy arrays
    compiles), a string ``"void(float32[:], int32)"``, or example numpy arrays.
    gpu: a card of :mod:`gpucourse.gpu_specs` (``"T4"``, ``"A100"``, ``"L4"``, ``"H100"``...).

    Raises :class:`KernelCompileError` (the line and the reason in plain words) when no GPU
    would compile the kernel, :class:`KernelSourceError` when it uses globals that cannot
    leave the notebook, :class:`CompilerMissing` when NVVM or ptxas is not installed.
    """
    card, cc = _target(gpu)
    source = kernel_source(kernel)
    if source.device:
        raise ValueError(f"{source.name} is a device function: compile a kernel that calls it")
    request = {"source": source.text, "filename": KERNEL_FILENAME, "kernel": source.name,
               "signature": signature_descriptor(signature), "cc": list(cc), "ptxas": find_ptxas(),
               "sys_path": list(sys.path)}  # the child imports the numba this process would import
    answer = _compile(request, timeout)
    if answer["status"] != "ok":
        raise _failure(answer, source, card)
    return _report(card, cc, source, answer)


def _target(gpu: str) -> tuple[str, tuple[int, int]]:
    from .gpu_specs import gpu as gpu_spec

    spec = gpu_spec(gpu)
    major, minor = spec.compute_capability.split(".")
    return spec.name, (int(major), int(minor))


def signature_descriptor(signature) -> dict:
    """A JSON-able description of a kernel signature: the child rebuilds it with numba.types."""
    if isinstance(signature, str):
        return {"text": signature}
    if hasattr(signature, "args") and hasattr(signature, "return_type"):  # a numba Signature
        signature = signature.args
    arguments = signature if isinstance(signature, (tuple, list)) else (signature,)
    return {"args": [_argument_descriptor(argument) for argument in arguments]}


def _argument_descriptor(argument) -> dict:
    """One argument: a numba type, a numpy scalar class, or an example value as a launch would type it."""
    import numpy as np

    kind = type(argument)
    if isinstance(argument, type):
        if issubclass(argument, (np.number, np.bool_)):  # np.float32 as a scalar type
            return {"scalar": np.dtype(argument).name}
    elif kind.__module__.startswith("numba"):
        if all(hasattr(argument, name) for name in ("dtype", "ndim", "layout")):
            return {"array": str(argument.dtype), "ndim": int(argument.ndim), "layout": str(argument.layout)}
        if kind.__name__ in ("Integer", "Float", "Complex", "Boolean"):
            return {"scalar": str(argument)}
    elif isinstance(argument, np.ndarray):
        layout = "C" if argument.flags.c_contiguous else "F" if argument.flags.f_contiguous else "A"
        return {"array": argument.dtype.name, "ndim": argument.ndim, "layout": layout}
    elif isinstance(argument, (bool, int, float, complex, np.generic)):  # int -> int64, float -> float64, as numba types them
        return {"scalar": np.asarray(argument).dtype.name}
    elif hasattr(argument, "dtype") and hasattr(argument, "shape"):  # a device array
        return {"array": np.dtype(argument.dtype).name, "ndim": len(argument.shape), "layout": "A"}
    raise TypeError(f"cannot use {argument!r} in a kernel signature: use numba types such as float32[:, :] or int32")


def describe_signature(descriptor: dict) -> str:
    """``(float32[::1], int64)``: a signature descriptor as numba writes types (C-contiguous as ``::1``)."""
    if "text" in descriptor:
        return descriptor["text"]

    def one(argument: dict) -> str:
        if "scalar" in argument:
            return argument["scalar"]
        dims = [":"] * argument["ndim"]
        if dims and argument["layout"] in ("C", "F"):
            dims[-1 if argument["layout"] == "C" else 0] = "::1"
        return f"{argument['array']}[{', '.join(dims)}]"

    return "(" + ", ".join(one(argument) for argument in descriptor["args"]) + ")"


def find_ptxas() -> str:
    """Path of NVIDIA's ptxas: $GPUCOURSE_PTXAS, the nvidia-cuda-nvcc wheel, $CUDA_HOME, or PATH."""
    override = os.environ.get(PTXAS_ENV)
    candidates = [override] if override else [*_wheel_ptxas(), *_toolkit_ptxas(), shutil.which("ptxas")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise CompilerMissing(f"NVIDIA's assembler ptxas is not installed (looked for {override})" if override
                          else "NVIDIA's assembler ptxas is not installed")


def _ptxas_name() -> str:
    return "ptxas.exe" if os.name == "nt" else "ptxas"


def _wheel_ptxas() -> list[str]:
    spec = importlib.util.find_spec("nvidia")  # the namespace package of NVIDIA's wheels; importing it is free
    folders = list(spec.submodule_search_locations or []) if spec else []
    return [os.path.join(folder, sub, "bin", _ptxas_name()) for folder in folders for sub in ("cu13", "cuda_nvcc")]


def _toolkit_ptxas() -> list[str]:
    roots = [os.environ.get(name) for name in ("CUDA_HOME", "CUDA_PATH")]
    return [os.path.join(root, "bin", _ptxas_name()) for root in roots if root]


def _compile(request: dict, timeout: float) -> dict:
    """The child's answer to ``request``, from the cache when the same kernel was compiled before."""
    what = {name: request[name] for name in ("source", "kernel", "signature", "cc", "ptxas")}
    if "options" in request:  # a Triton kernel's num_warps and num_stages
        what["options"] = request["options"]
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()
    if key not in _answers:
        answer = _kept_answer(key)
        if answer is None:
            answer = run_compiler(request, timeout)
            if answer["status"] == "missing":  # not cached: the student may install it and retry
                raise CompilerMissing(answer["message"], answer.get("install", INSTALL_COMMAND))
            _keep_answer(key, answer)
        _answers[key] = answer
    return _answers[key]


def _kept_answer(key: str) -> dict | None:
    """An answer kept in $GPUCOURSE_COMPILE_CACHE by another process (the test suite shares one folder per run)."""
    folder = os.environ.get(CACHE_ENV)
    try:
        return json.loads((Path(folder) / f"{key}.json").read_text()) if folder else None
    except (OSError, ValueError):
        return None


def _keep_answer(key: str, answer: dict) -> None:
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    partial = Path(folder) / f"{key}.{os.getpid()}.partial"
    partial.write_text(json.dumps(answer))
    os.replace(partial, Path(folder) / f"{key}.json")  # whole or absent, for a reader in another process


def run_compiler(request: dict, timeout: float = COMPILE_TIMEOUT_S) -> dict:
    """Run the compiler child on ``request`` (see :mod:`gpucourse._compile_worker`) and return its answer.

    On Linux and macOS a compiler server kept for this process answers (numba imported once, a child
    forked per kernel); ``GPUCOURSE_COMPILE_SERVER=0`` or another system starts one process per kernel.
    """
    if os.environ.get(SERVER_ENV, "1") != "0" and hasattr(os, "fork"):
        answer = _server(request.get("sys_path") or []).ask(request, timeout)
    else:
        answer = _run_once(request, timeout)
    if answer.get("status") == "crash":
        raise RuntimeError(f"the kernel compiler crashed: {answer['message']}")
    return answer


def _environment() -> dict:
    return {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}  # the caller may run the simulator


def _timed_out(request: dict, timeout: float) -> TimeoutError:
    return TimeoutError(f"compiling {request['kernel']} took more than {timeout:.0f} s; "
                        "the machine may be busy: try again, or pass a larger timeout")


def _run_once(request: dict, timeout: float) -> dict:
    command = [sys.executable, "-I", str(_WORKER)]  # -I: not gpucourse/ on sys.path; the request brings the path
    try:
        run = subprocess.run(command, input=json.dumps(request), capture_output=True, text=True,
                             timeout=timeout, env=_environment())
    except subprocess.TimeoutExpired:
        raise _timed_out(request, timeout) from None
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        detail = "\n".join(run.stderr.strip().splitlines()[-8:])
        return {"status": "crash", "message": f"exit status {run.returncode}:\n{detail}"}


class _CompilerServer:
    """``_compile_worker.py --serve`` for one process and one search path (numba is imported from it
    once): requests and answers one JSON line each."""

    def __init__(self, sys_path: list[str]):
        self.owner = os.getpid()
        self.lock = threading.Lock()
        command = [sys.executable, "-I", str(_WORKER), "--serve", json.dumps(sys_path)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        env=_environment(), start_new_session=True)  # its compiling child goes with it when stopped

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def ask(self, request: dict, timeout: float) -> dict:
        with self.lock:
            try:
                self.process.stdin.write((json.dumps(request) + "\n").encode())
                self.process.stdin.flush()
                ready, _, _ = select.select([self.process.stdout], [], [], timeout)
                line = self.process.stdout.readline() if ready else None
            except OSError as error:
                self.stop()
                return {"status": "crash", "message": f"the compiler server's pipe failed ({error})"}
            if line is None:
                self.stop()
                raise _timed_out(request, timeout)
            if not line:
                self.stop()
                return {"status": "crash", "message": "the compiler server died"}
            return json.loads(line)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


_servers: dict[tuple, _CompilerServer] = {}  # this process's servers by search path (a forked copy of a parent's is not ours)


def _server(sys_path: list[str]) -> _CompilerServer:
    key = tuple(sys_path)
    if key not in _servers or not _servers[key].alive():
        _servers[key] = _CompilerServer(sys_path)
    return _servers[key]


# ---------------------------------------------------------------------------------------------
# What ptxas reports


def parse_ptxas(output: str) -> dict[str, int]:
    """Registers, shared/local memory, spills and barriers of the entry function in ``ptxas -v`` output.

    Local memory is what ptxas prints as ``lmem`` or, in recent versions, the stack frame
    (per-thread arrays and spills both live there).
    """
    entry = output.split("Compiling entry function", 1)[-1]  # device functions' lines come before

    def number(pattern: str) -> int:
        match = re.search(pattern, entry)
        return int(match.group(1)) if match else 0

    return {
        "registers": number(r"Used (\d+) registers"),
        "shared_bytes": number(r"(\d+) bytes smem"),
        "local_bytes": max(number(r"(\d+) bytes lmem"), number(r"(\d+) bytes stack frame")),
        "spill_stores": number(r"(\d+) bytes spill stores"),
        "spill_loads": number(r"(\d+) bytes spill loads"),
        "barriers": number(r"used (\d+) barriers"),
    }


# ---------------------------------------------------------------------------------------------
# What the PTX says


FLOAT64_OPERATIONS = frozenset("add sub mul fma div sqrt rcp min max abs neg setp cvt".split())


def _opcode(instruction: str) -> str:
    """``mul.f64`` from ``@%p1 mul.f64 %fd2, %fd1, 0d3FD3``: the predicate dropped."""
    words = instruction.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def is_float64_arithmetic(opcode: str) -> bool:
    """An operation of FLOAT64_OPERATIONS with ``f64`` among its type suffixes (``cvt.f64.f32`` too)."""
    parts = opcode.split(".")
    return parts[0] in FLOAT64_OPERATIONS and "f64" in parts[1:]


_STATE_SPACES = ("global", "shared", "local", "const", "param", "tex")


def memory_access(opcode: str) -> tuple[str, str] | None:
    """("ld" or "st", state space) of a load or store; "global" for generic addresses.

    numba reaches array arguments through generic addresses (``ld.f32``), which point to
    global memory; its shared and local arrays compile to ``ld.shared`` / ``ld.local``.
    """
    parts = [part.split("::")[0] for part in opcode.split(".")]
    if parts[0] not in ("ld", "st"):
        return None
    space = next((part for part in parts[1:] if part in _STATE_SPACES), "global")
    return parts[0], space


_COUNTS = {  # summary counter -> test on an opcode
    "global_loads": lambda op: memory_access(op) == ("ld", "global"),
    "global_stores": lambda op: memory_access(op) == ("st", "global"),
    "shared_loads": lambda op: memory_access(op) == ("ld", "shared"),
    "shared_stores": lambda op: memory_access(op) == ("st", "shared"),
    "atomics": lambda op: op.startswith(("atom.", "red.")),
    "branches": lambda op: op.split(".")[0] == "bra",
    "barrier_instructions": lambda op: op.startswith(("bar.", "barrier.")) and not op.startswith("bar.warp"),
    "float64_instructions": is_float64_arithmetic,
}


# The kinds of access a kernel makes, named alike for a traced launch and for the compiled code (the grader checks that
# both make the same kinds: autograder.standins.TracedPaths) -> how a message names them.
ACCESS_KINDS = {
    "global load": "loads from global memory",
    "global store": "plain stores to global memory",
    "atomic": "atomic updates",
    "shared load": "loads from shared memory",
    "shared store": "stores to shared memory",
    "barrier": "barriers (cuda.syncthreads)",
}
_ACCESS_TESTS = {  # kind -> test on an opcode of the kernel's own accesses
    # Not the read-only ``ld.global.nc`` loads of libdevice's tables (sin and cos reduce large arguments with one):
    # numba reaches array arguments through plain ``ld`` / ``ld.global``, never through that path.
    "global load": lambda op: _COUNTS["global_loads"](op) and "nc" not in op.split("."),
    "global store": _COUNTS["global_stores"],
    "atomic": _COUNTS["atomics"],
    "shared load": _COUNTS["shared_loads"],
    "shared store": _COUNTS["shared_stores"],
    "barrier": _COUNTS["barrier_instructions"],
}


_LOC = re.compile(r"\.loc\s+(\d+)\s+(\d+)")  # file number, line (then column, maybe inlined_at)


def ptx_instructions(ptx: str) -> list[tuple[tuple[int, int] | None, str]]:
    """Each PTX instruction with the (file number, line) its ``.loc`` directive gives, None for line 0."""
    located: list[tuple[tuple[int, int] | None, str]] = []
    where = None
    for raw in ptx.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line or line.endswith(":") or line in ("{", "}"):
            continue
        loc = _LOC.match(line)
        if loc:
            number, source_line = int(loc.group(1)), int(loc.group(2))
            where = (number, source_line) if source_line else None
        elif not line.startswith(".") and line.endswith(";"):
            located.append((where, line.rstrip(";").strip()))
    return located


def _kernel_file_numbers(ptx: str) -> set[int]:
    """The ``.file`` numbers naming the module text (numba may prefix it with a folder)."""
    numbers = set()
    for match in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.MULTILINE):
        if match.group(2).endswith(KERNEL_FILENAME):
            numbers.add(int(match.group(1)))
    return numbers


# ---------------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True)
class CompileReport:
    """What NVVM and ptxas made of one kernel for one GPU (compiled, not run: no GPU involved).

    registers: per thread. shared_bytes: static shared memory per block. local_bytes: local
    memory per thread (per-thread arrays and spills; 0 when none). spill_stores, spill_loads:
    bytes of registers spilled to local memory. barriers: hardware barriers the kernel uses.

    The instruction counts are *static*: each instruction in the PTX once, however often a loop
    runs it. ``float64_instructions`` counts PTX instructions whose operation is add, sub,
    mul, fma, div, sqrt, rcp, min, max, abs, neg, setp or cvt and whose type suffixes include
    ``f64`` (so a float32 -> float64 conversion counts, as does the comparison ``setp.lt.f64``);
    moves, loads and stores of float64 values do not. ``global_loads`` / ``global_stores``
    count ``ld.global`` / ``st.global`` and the generic ``ld`` / ``st`` through which numba
    reaches array arguments (vector forms included; not ``ld.param``), ``shared_loads`` /
    ``shared_stores`` the ``ld.shared`` / ``st.shared``, ``atomics`` the ``atom.`` and ``red.``,
    ``branches`` the ``bra``, ``barrier_instructions`` the ``bar.*`` / ``barrier.*``
    (``cuda.syncthreads()``; not ``bar.warp.sync``).
    """

    kernel: str
    gpu: str
    arch: str
    registers: int
    shared_bytes: int
    local_bytes: int
    spill_stores: int
    spill_loads: int
    barriers: int
    float64_instructions: int
    global_loads: int
    global_stores: int
    shared_loads: int
    shared_stores: int
    atomics: int
    branches: int
    barrier_instructions: int
    ptx: str = field(repr=False)
    ptxas_output: str = field(repr=False)
    source: KernelSource = field(repr=False)
    instructions: tuple[tuple[SourceLine | None, str], ...] = field(repr=False)

    def ptx_for_line(self, line: int, function: str | None = None) -> list[str]:
        """The PTX instructions compiled from ``line`` of the student's source (per ``.loc``).

        ``function`` narrows to one function's lines when a device function lives in another cell.
        """
        return [text for origin, text in self.instructions
                if origin is not None and origin.line == line and function in (None, origin.function)]

    def access_kinds(self) -> frozenset[str]:
        """The kinds of access (:data:`ACCESS_KINDS`) the compiled code has somewhere: what a launch on a GPU may do."""
        opcodes = {_opcode(text) for _, text in self.instructions}
        return frozenset(kind for kind, test in _ACCESS_TESTS.items() if any(test(opcode) for opcode in opcodes))

    def float64_lines(self) -> list[SourceLine]:
        """The student's source lines that compile to float64 arithmetic, in source order."""
        lines = {origin for origin, text in self.instructions if origin is not None and is_float64_arithmetic(_opcode(text))}
        return sorted(lines, key=lambda origin: (origin.filename, origin.line))

    def warnings(self, threads_per_block: int | None = None, target_occupancy: float = 0.5) -> list[str]:
        """What a GPU engineer would point out: spills, float64 arithmetic, occupancy limits.

        With ``threads_per_block`` the occupancy of that launch is modelled
        (:func:`gpucourse.sim.occupancy.occupancy`) and reported when registers or shared memory
        keep it under ``target_occupancy``.
        """
        found = [*self._spill_warnings(), *self._float64_warnings()]
        found += self._occupancy_warnings(threads_per_block, target_occupancy) if threads_per_block else self._shared_warnings()
        return found

    def _spill_warnings(self) -> list[str]:
        if self.spill_stores or self.spill_loads:
            return [f"registers spill: {self.spill_stores} B stored to and {self.spill_loads} B loaded from local memory "
                    "per thread, which lives in device memory behind the L1 cache. Keep fewer values alive at once."]
        if self.local_bytes:
            return [f"{self.local_bytes} B of local memory per thread (a per-thread array the compiler could not keep in "
                    "registers, usually because it is indexed with a variable): it lives in device memory behind the L1 cache."]
        return []

    def _float64_warnings(self) -> list[str]:
        if not self.float64_instructions:
            return []
        lines = ", ".join(str(line.line) for line in self.float64_lines()) or "unknown"
        return [f"{self.float64_instructions} float64 instructions (line {lines}): {_float64_rate(self.gpu)} "
                "A Python float such as 0.3 is a float64: write float32(0.3), or use float32 math."]

    def _shared_warnings(self) -> list[str]:
        from .gpu_specs import gpu
        from .sim.occupancy import blocks_limited_by_shared_memory

        limits = gpu(self.gpu).limits
        blocks = blocks_limited_by_shared_memory(limits, self.shared_bytes)
        if self.shared_bytes == 0 or blocks > 2:
            return []
        return [f"{self.shared_bytes} B of shared memory per block leave room for only {blocks} block(s) per SM on "
                f"{self.gpu}; pass threads_per_block to see the occupancy this allows."]

    def _occupancy_warnings(self, threads_per_block: int, target_occupancy: float) -> list[str]:
        from .sim.occupancy import occupancy

        launch = occupancy(self.gpu, threads_per_block, self.registers, self.shared_bytes)
        if launch.limiter not in ("registers", "shared_memory") or launch.occupancy >= target_occupancy:
            return []
        return [f"{launch.describe()}: {self.registers} registers/thread and {self.shared_bytes} B shared memory/block "
                f"keep occupancy under {target_occupancy:.0%}."]

    def summary(self) -> str:
        """A few readable lines: resources, instruction counts, warnings."""
        memory = "no spills" if not (self.spill_stores or self.spill_loads) else f"{self.spill_stores} B spill stores"
        lines = [
            f"{self.kernel} compiled for {self.gpu} ({self.arch}) by NVVM and ptxas, no GPU involved:",
            f"  {self.registers} registers/thread, {self.shared_bytes} B shared memory/block, "
            f"{self.local_bytes} B local memory/thread ({memory}), {self.barriers} barrier(s)",
            f"  PTX (static counts): {self.global_loads} global loads, {self.global_stores} global stores, "
            f"{self.shared_loads} shared loads, {self.shared_stores} shared stores, {self.atomics} atomics, "
            f"{self.branches} branches, {self.barrier_instructions} syncthreads, {self.float64_instructions} float64 instructions",
        ]
        lines += [f"  warning: {warning}" for warning in self.warnings()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(self.summary())


def _float64_rate(card: str) -> str:
    """How fast float64 runs on ``card``: from gpu_specs when it has the figure, else in general."""
    from .gpu_specs import gpu

    spec = gpu(card)
    fp64 = getattr(spec, "fp64_flops", None)  # not in gpu_specs yet; used once it is
    if fp64:
        return f"{card} runs float64 at 1/{round(spec.fp32_flops / fp64)} of its float32 rate."
    return ("float64 runs at half the float32 rate on data-centre cards (A100, H100) but at 1/32 to 1/64 of it "
            "on consumer and inference cards (T4, L4, RTX).")


def _report(card: str, cc: tuple[int, int], source: KernelSource, answer: dict) -> CompileReport:
    ptx = answer["ptx"]
    ours = _kernel_file_numbers(ptx)
    instructions = tuple((source.origin(where[1]) if where and where[0] in ours else None, text)
                         for where, text in ptx_instructions(ptx))
    counts = Counter(name for _, text in instructions for name, test in _COUNTS.items() if test(_opcode(text)))
    return CompileReport(
        kernel=source.name, gpu=card, arch=f"sm_{cc[0]}{cc[1]}", **parse_ptxas(answer["ptxas"]),
        **{name: counts[name] for name in _COUNTS}, ptx=ptx, ptxas_output=answer["ptxas"], source=source,
        instructions=instructions,
    )


# ---------------------------------------------------------------------------------------------
# Compile errors in plain words


_ALLOCATING = "zeros|ones|empty|full|array|asarray|arange|linspace|eye|identity|copy|zeros_like|ones_like|empty_like|full_like"

EXPLANATIONS: list[tuple[str, str]] = [  # (pattern in the compiler's message, plain words; {0} is the match)
    (r"Unknown attribute '(\w+)' of type (?:reflected )?list",
     "calls a Python list method (.{1}), which does not exist on a GPU: use a fixed-size cuda.local.array or an array argument"),
    (r"\blist\(|reflected list|ListType",
     "builds a Python list, which does not exist on a GPU: use a fixed-size cuda.local.array or an array argument"),
    (r"DictType|Unknown attribute '\w+' of type dict",
     "uses a Python dict, which does not exist on a GPU: use arrays indexed by number"),
    (r"Untyped global name '(\w+)'.*function",
     "calls {1}, a plain Python function: a kernel can only call device functions, @cuda.jit(device=True)"),
    (rf"built-in function ({_ALLOCATING})>",
     "calls np.{1}, which allocates a new array: a GPU thread cannot allocate memory. Use cuda.local.array "
     "(per thread) or cuda.shared.array (per block) with a constant size, or pass the array in"),
    (r"printing unimplemented for values of type (.+)",
     "prints a value of type {1}: print in a kernel only takes numbers and string literals"),
    (r"unicode_type|Literal\[str\]|NRT required",
     "builds or changes a Python string, which a GPU cannot do (print may only show string literals)"),
    (r"Function\(<function (shared|local)\.array",
     "gives cuda.{1}.array a shape the compiler cannot see as constant: use literal numbers or module constants, "
     "not expressions like TILE + 1 (define PADDED = TILE + 1 outside the kernel)"),
    (r"uses too much shared data \((0x[0-9a-f]+) bytes, (0x[0-9a-f]+) max\)",
     "declares {1} bytes of static shared memory per block, more than the {2} a block may declare statically"),
]

_NUMBA_NOISE = re.compile(r"^(Failed in .* pipeline|During:|File \"|<source elided>|\^|raised from|\s*$)")


def explain(compiler_message: str) -> str:
    """Plain words for a compile error: a known case from EXPLANATIONS, else numba's first lines."""
    for pattern, words in EXPLANATIONS:
        match = re.search(pattern, compiler_message, re.DOTALL)
        if match:
            values = [match.group(0), *match.groups()]
            return words.format(*[int(value, 16) if value.startswith("0x") else value for value in values])
    kept = [line.strip() for line in compiler_message.splitlines() if not _NUMBA_NOISE.match(line.strip())]
    return " ".join(kept[:3]) or "the compiler gave no reason"


def _failure(answer: dict, source: KernelSource, card: str) -> Exception:
    status = answer["status"]
    if status == "unsupported_gpu":
        return ValueError(f"the installed CUDA compiler cannot compile for {card}: {answer['message']}")
    line = source.origin(answer["line"]) if answer.get("line") else None
    words = explain(answer["message"])
    if line is None:
        return KernelCompileError(f"{source.name}: {words}", None, answer["message"])
    where = f"line {line.line}" + ("" if line.function == source.name else f" (in {line.function})")
    return KernelCompileError(f"{where}: {words}\n    {line.code.strip()}", line, answer["message"])
