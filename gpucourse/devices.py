"""Which device the course runs on, and what that means for problem sizes.

Every notebook cell that touches torch asks :func:`device` instead of writing
``"cuda"``: the same cell then runs on a laptop CPU, on Colab's T4 and on an H100.
``GPUCOURSE_DEVICE`` (``cpu``, ``cuda`` or ``cuda:N``) overrides the choice, so an
instructor can grade a GPU machine's submissions on its CPU, or the reverse.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch

ENV_VAR = "GPUCOURSE_DEVICE"
DEVICE_CLASSES = ("cpu", "cuda")

# Settings for torch's own libraries, read when they first act (not at import). Torch's profiler (Kineto) prints
# two log lines for every profile it takes, which would fill the cells of lectures 06 and 09 and the grader's
# output. The grader's workers get them in their environment too (autograder.sandbox.worker_environment), so a
# worker forked from a process that imported this module sees what a freshly started one sees.
LIBRARY_ENVIRONMENT = {"KINETO_LOG_LEVEL": "99"}
for _name, _value in LIBRARY_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)

# torch's CPU builds send float unary ops (exp, log, sqrt, tanh, ...) to MKL's vector math library, which picks
# each function's kernel on that function's first call. When that first call runs on several threads at once,
# one thread can run a low-accuracy kernel for its share of the call (pytorch/pytorch#188792; measured here: an
# exp 1.5e-4 off, in about one fresh process in fifty, which failed lecture 01's softmax agreement check once).
# One call of each on a single element, on this thread, settles the choice before any concurrent use.
MKL_UNARY_OPS = ("exp", "expm1", "log", "log10", "log1p", "log2", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan",
                 "asin", "acos", "atan", "sinh", "cosh", "tanh", "erf", "erfc", "erfinv", "lgamma", "sigmoid", "abs", "trunc")


def settle_mkl_unary_kernels() -> None:
    """Call each of torch's MKL-backed unary ops once on one element of each float type (see MKL_UNARY_OPS)."""
    if not torch.backends.mkl.is_available():
        return
    for dtype in (torch.float32, torch.float64):
        one = torch.full((1,), 0.5, dtype=dtype)
        for name in MKL_UNARY_OPS:
            getattr(torch, name)(one)


settle_mkl_unary_kernels()


class NoGPUError(RuntimeError):
    """Raised when a GPU is asked for but this machine has none."""


def device() -> torch.device:
    """The torch device the course uses: CUDA if present, else the CPU.

    ``GPUCOURSE_DEVICE`` overrides it; asking for CUDA on a machine without it
    raises :class:`NoGPUError` rather than silently falling back.
    """
    wanted = os.environ.get(ENV_VAR, "").strip().lower()
    if not wanted:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(wanted)
    except RuntimeError as err:
        raise ValueError(f"{ENV_VAR}={wanted!r} is not a device torch knows; use 'cpu' or 'cuda'") from err
    if chosen.type not in DEVICE_CLASSES:
        raise ValueError(f"{ENV_VAR}={wanted!r}: the course supports 'cpu' and 'cuda', not {chosen.type!r}")
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise NoGPUError(f"{ENV_VAR}={wanted!r} asks for a GPU, but torch sees no CUDA device here")
    return chosen


def device_class(dev: torch.device | str | None = None) -> str:
    """``"cuda"`` or ``"cpu"``: the key for per-device sizes and speed thresholds."""
    dev = device() if dev is None else torch.device(dev)
    return dev.type


def has_gpu() -> bool:
    """True when the course's device is a CUDA GPU."""
    return device_class() == "cuda"


def describe(dev: torch.device | str | None = None) -> str:
    """A short human name for a device, used to label every measured number."""
    dev = device() if dev is None else torch.device(dev)
    if dev.type == "cuda":
        return f"{torch.cuda.get_device_name(dev)} (CUDA {torch.version.cuda})"
    threads = torch.get_num_threads()
    return f"CPU {_cpu_model()}, {threads} torch thread{'s' if threads != 1 else ''}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")  # Linux: one folder per cache of the first core
_SIZE_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def cpu_cache_bytes(caches: Path = CPU_CACHES) -> dict[int, int]:
    """Bytes of each data cache level of the first CPU core, as the operating system reports them.

    -> {level: bytes}, e.g. {1: 32768, 2: 1048576, 3: 33554432}; a shared last level is the
    whole cache, not a core's share. Instruction caches are left out: data never lives there.
    Read from Linux's sysfs, else from macOS's ``sysctl``; {} when neither says.
    """
    sizes = {}
    for index in sorted(caches.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level, size = int((index / "level").read_text()), (index / "size").read_text().strip()
            sizes[level] = int(size[:-1]) * _SIZE_UNITS[size[-1]] if size[-1] in _SIZE_UNITS else int(size)
        except (OSError, ValueError):
            continue
    return sizes or _sysctl_cache_bytes()


def _sysctl_cache_bytes() -> dict[int, int]:
    sizes = {}
    for level, key in ((1, "hw.l1dcachesize"), (2, "hw.l2cachesize"), (3, "hw.l3cachesize")):
        try:
            value = int(subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout)
        except (OSError, ValueError, subprocess.SubprocessError):
            continue
        if value > 0:
            sizes[level] = value
    return sizes


def per_device(*, cpu, cuda):
    """Pick a value by device class, e.g. a problem size: ``per_device(cpu=512, cuda=8192)``."""
    return {"cpu": cpu, "cuda": cuda}[device_class()]


def gpu_or_explain(what_a_gpu_shows: str) -> bool:
    """Guard for GPU-only cells: True on a GPU; otherwise say what a GPU run would show.

    Use as ``if gpu_or_explain("pinned copies run about 2x faster"): ...`` so the
    notebook still runs top to bottom on a CPU and the student learns what they missed.
    """
    if has_gpu():
        return True
    print(f"[skipped: needs a CUDA GPU] On a GPU this cell shows: {what_a_gpu_shows}")
    return False


def synchronize(dev: torch.device | str | None = None) -> None:
    """Wait for queued GPU work (a no-op on the CPU, where torch runs synchronously)."""
    dev = device() if dev is None else torch.device(dev)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
