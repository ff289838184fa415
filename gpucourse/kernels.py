"""Running numba-cuda kernels on a real GPU or, without one, in numba's CUDA simulator.

numba decides once, when ``numba.cuda`` is first imported, whether ``@cuda.jit`` compiles
for a GPU or runs each thread in Python (``NUMBA_ENABLE_CUDASIM=1``). So a notebook calls
:func:`use_gpu_or_simulator` *before* ``from numba import cuda``. On a GPU it first launches
a tiny kernel in a separate process: a driver older than numba's compiler (the classic Colab
``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``) is then explained instead of crashing the notebook,
and the simulator is used meanwhile.

:func:`compile_report` compiles a kernel as a real GPU would, even without one, and reports its
registers, shared and local memory, spills and float64 arithmetic (see :mod:`gpucourse.compiler`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

# Compiling a kernel as a real GPU would, without one (NVVM and ptxas in a child process);
# these modules import nothing heavy until a kernel is compiled.
from . import simulator_blocks
from .compiler import CompileReport, CompilerMissing, compile_report  # noqa: F401
from .kernel_source import KernelCompileError, KernelSourceError, kernel_source  # noqa: F401

SIMULATOR_ENV = "NUMBA_ENABLE_CUDASIM"

_PROBE = """
import numpy as np
from numba import cuda
@cuda.jit
def probe(out):
    out[cuda.grid(1)] = 1.0
out = np.zeros(64, dtype=np.float32)
probe[2, 32](out)
assert out.sum() == 64, "the probe kernel ran but wrote wrong values"
print("gpu ok")
"""

PTX_ADVICE = (
    "numba compiled the kernel for a newer CUDA than this machine's driver supports "
    "(on Colab this shows as CUDA_ERROR_UNSUPPORTED_PTX_VERSION). Compare the 'CUDA Version' "
    "that `nvidia-smi` prints with the toolkit numba uses, then either install the toolkit "
    "matching the driver (e.g. `pip install \"numba-cuda[cu12]\"` for a 12.x driver) or let "
    "numba link for older drivers with `NUMBA_CUDA_ENABLE_PYNVJITLINK=1`; restart the kernel after."
)


@dataclass(frozen=True)
class KernelMode:
    """Where ``@cuda.jit`` kernels run in this process, and why."""

    simulator: bool
    reason: str

    def __str__(self) -> str:
        where = "numba's CUDA simulator (correct results, no speed)" if self.simulator else "the GPU"
        return f"numba kernels run on {where}: {self.reason}"


def _numba_cuda_imported() -> bool:
    return "numba.cuda" in sys.modules


def simulator_active() -> bool:
    """True when this process's ``@cuda.jit`` kernels run in the simulator."""
    if _numba_cuda_imported():
        from numba import config

        return bool(config.ENABLE_CUDASIM)
    return os.environ.get(SIMULATOR_ENV, "") == "1"


def _simulate() -> None:
    """Make the coming ``import numba.cuda`` choose the simulator, even where numba itself is imported already."""
    os.environ[SIMULATOR_ENV] = "1"
    if "numba.core.config" in sys.modules:  # numba read its environment when it was imported: read it again
        from numba.core import config

        config.reload_config()
    simulator_blocks.install()


def probe_gpu(timeout: float = 120.0) -> tuple[bool, str]:
    """Launch a tiny kernel in a fresh process: (works, what went wrong)."""
    environment = {key: value for key, value in os.environ.items() if key != SIMULATOR_ENV}
    try:
        run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout, env=environment)
    except subprocess.TimeoutExpired:
        return False, f"a test kernel did not finish within {timeout:.0f} s"
    if run.returncode == 0 and "gpu ok" in run.stdout:
        return True, ""
    return False, explain_failure(run.stderr)


TOOLKIT_ADVICE = (
    "numba-cuda needs CUDA libraries that match the driver: if `nvidia-smi` reports CUDA 12.x, "
    "run `pip install \"numba-cuda[cu12]\"` (13.x: `[cu13]`) and restart the kernel."
)


def explain_failure(error_text: str) -> str:
    """A student-readable reason for a failed GPU kernel launch, with the usual fix."""
    if "UNSUPPORTED_PTX_VERSION" in error_text or "unsupported toolchain" in error_text:
        return PTX_ADVICE
    lines = [line.strip() for line in error_text.strip().splitlines() if line.strip()]
    return f"a test kernel failed on the GPU: {lines[-1] if lines else 'no error message'}. {TOOLKIT_ADVICE}"


def _gpu_visible() -> tuple[bool, str]:
    from . import devices

    if os.environ.get(devices.ENV_VAR, "").strip().lower() == "cpu":
        return False, f"{devices.ENV_VAR}=cpu asks for the CPU"
    import torch

    if not torch.cuda.is_available():
        return False, "no CUDA GPU is visible on this machine"
    return True, ""


def use_gpu_or_simulator(verbose: bool = True) -> KernelMode:
    """Make ``@cuda.jit`` use the GPU when one works here, else numba's simulator.

    Call it before the first ``from numba import cuda``. Called later it cannot switch any
    more; it then reports the mode in force and says to restart the kernel if that is wrong.
    """
    mode = _choose_mode()
    if verbose:
        print(mode)
    return mode


def _choose_mode() -> KernelMode:
    if _numba_cuda_imported():
        simulated = simulator_active()
        if simulated:
            simulator_blocks.install()
        return KernelMode(simulated, "numba.cuda was already imported, so this is fixed until the kernel restarts")
    if os.environ.get(SIMULATOR_ENV) == "1":
        _simulate()
        return KernelMode(True, f"{SIMULATOR_ENV}=1 is set")
    visible, reason = _gpu_visible()
    if visible:
        works, reason = probe_gpu()
        if works:
            return KernelMode(False, "a test kernel ran on the GPU")
    _simulate()
    return KernelMode(True, reason + "; keep problem sizes small, every simulated thread is Python")


@dataclass(frozen=True)
class KernelResources:
    """What the compiler gave one kernel: the inputs of an occupancy calculation."""

    registers_per_thread: int
    shared_mem_per_block: int  # static shared memory, bytes
    local_mem_per_thread: int  # register spills, bytes

    def describe(self) -> str:
        return (f"{self.registers_per_thread} registers/thread, {self.shared_mem_per_block} B shared/block, "
                f"{self.local_mem_per_thread} B local (spilled)/thread")


def kernel_resources(kernel) -> KernelResources | None:
    """Registers and shared memory of a kernel compiled for the GPU (after its first launch).

    The simulator compiles nothing, so it has no such figures: returns None there.
    """
    if simulator_active():
        return None
    if not getattr(kernel, "overloads", None):
        raise ValueError("launch the kernel once first: numba compiles it for the argument types of that launch")
    compiled = next(iter(kernel.overloads.values()))  # the first launch's specialisation
    return KernelResources(
        registers_per_thread=int(compiled.regs_per_thread),
        shared_mem_per_block=int(compiled.shared_mem_per_block),
        local_mem_per_thread=int(compiled.local_mem_per_thread),
    )


def launch_grid(n: int, threads_per_block: int = 256, max_blocks: int | None = None) -> tuple[int, int]:
    """(blocks, threads per block) covering n elements, one thread each, capped at max_blocks."""
    if n < 1 or threads_per_block < 1:
        raise ValueError(f"need n >= 1 and threads_per_block >= 1, got n={n}, threads_per_block={threads_per_block}")
    blocks = -(-n // threads_per_block)
    return (min(blocks, max_blocks) if max_blocks else blocks), threads_per_block


def gpu_or_explain(what_a_gpu_shows: str) -> bool:
    """Guard for cells that need numba's kernels on a real GPU.

    Without a GPU: says what a GPU run would show and returns False (like
    :func:`gpucourse.gpu_or_explain`). With a GPU that numba cannot use (its kernels fell back
    to the simulator, e.g. a driver mismatch): raises, because skipping would hand out a GPU
    result nobody measured, and running GPU-sized work in the simulator would take hours.
    """
    from . import devices

    if not devices.has_gpu():
        return devices.gpu_or_explain(what_a_gpu_shows)
    if simulator_active():
        raise devices.NoGPUError(
            "torch sees a GPU but numba's kernels run in its simulator here, so this cell cannot run: "
            "fix numba's access to the GPU (the setup cell printed why) and restart the kernel"
        )
    return True


# ---------------------------------------------------------------------------------------------
# Triton: on a GPU, or in its interpreter


TRITON_INTERPRET_ENV = "TRITON_INTERPRET"
TRITON_INSTALL = ('Triton is not installed: `pip install triton` (its wheels exist for Linux on x86-64 only; '
                  "on another machine use Colab or a Linux box)")


def use_triton_gpu_or_interpreter(verbose: bool = True) -> bool:
    """Make ``@triton.jit`` kernels run on the GPU when torch sees one, else in Triton's interpreter.

    Returns True for a real GPU. Call it before the first ``@triton.jit``: without a GPU it sets
    ``TRITON_INTERPRET=1``, which turns each kernel into Python run on torch CPU tensors (correct
    results, no speed). Raises :class:`ImportError` when Triton is not installed, and
    :class:`RuntimeError` when Triton was imported already in a mode that cannot interpret.
    """
    import importlib.util

    if "triton" not in sys.modules and importlib.util.find_spec("triton") is None:
        raise ImportError(TRITON_INSTALL)
    gpu, reason = _gpu_visible()
    if not gpu:
        os.environ[TRITON_INTERPRET_ENV] = "1"
        _check_interpreter_on()
    elif os.environ.get(TRITON_INTERPRET_ENV) == "1":
        gpu, reason = False, f"{TRITON_INTERPRET_ENV}=1 is set"
    if verbose:
        print("Triton kernels run on " + ("the GPU" if gpu else f"Triton's interpreter (correct results, no speed): {reason}"))
    return gpu


def _check_interpreter_on() -> None:
    """Triton reads TRITON_INTERPRET when a kernel is decorated; an old Triton may have read it at import."""
    if "triton" not in sys.modules:
        return
    knobs = getattr(sys.modules["triton"], "knobs", None)
    interpreting = getattr(getattr(knobs, "runtime", None), "interpret", None)
    if interpreting is False:
        raise RuntimeError("triton was imported before use_triton_gpu_or_interpreter() and cannot switch to its "
                           "interpreter now, and there is no GPU: restart the kernel and call it before `import triton`")
