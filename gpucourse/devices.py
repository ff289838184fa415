"""Which device the course runs on, and what that means for problem sizes.

Every notebook cell that touches torch asks :func:`device` instead of writing
``"cuda"``: the same cell then runs on a laptop CPU, on Colab's T4 and on an H100.
``GPUCOURSE_DEVICE`` (``cpu``, ``cuda`` or ``cuda:N``) overrides the choice, so an
instructor can grade a GPU machine's submissions on its CPU, or the reverse.

:func:`compile_support` says whether ``torch.compile`` can build code here, and what to install where it
cannot; :func:`compile_or_eager` and :func:`compile_or_explain` let a cell run, or say what it would show, either way.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

ENV_VAR = "GPUCOURSE_DEVICE"
NO_COMPILE_VAR = "GPUCOURSE_NO_COMPILE"  # set (not "0"): compile_support() says no, and compiled cells run eagerly
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


def cache_line_bytes(caches: Path = CPU_CACHES) -> int | None:
    """This CPU's cache-line size in bytes (64 on x86, 128 on Apple's M-series), as the operating system reports it:
    Linux's sysfs (``coherency_line_size`` of the first cache), else macOS's ``sysctl hw.cachelinesize``; None if neither says."""
    try:
        return int((caches / "index0" / "coherency_line_size").read_text())
    except (OSError, ValueError):
        pass
    try:
        return int(subprocess.run(["sysctl", "-n", "hw.cachelinesize"], capture_output=True, text=True, timeout=5).stdout) or None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


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


# --- Whether torch.compile can build code here ------------------------------------------------------------------------
# Inductor, torch.compile's default backend, writes C++ for the CPU and builds it with the platform's compiler, which
# must be installed apart from torch; for a GPU it writes Triton kernels. What it looks for is in its own source,
# torch/_inductor/cpp_builder.py (get_cpp_compiler: $CXX, else cl on Windows; _get_openmp_args; _get_python_include_dirs),
# and the compiler's name elsewhere in torch/_inductor/config.py (cpp.cxx: $CXX, else clang++ on macOS and g++ on Linux).
INDUCTOR_SOURCE = "torch/_inductor/cpp_builder.py"
GXX = "g++ (`apt install g++` on Debian or Ubuntu)"
XCODE = "Apple's clang++ from Xcode's command-line tools (`xcode-select --install`)"
LIBOMP = "OpenMP for Apple's clang (`brew install libomp`, or `conda install llvm-openmp`, or OMP_PREFIX naming a folder with include/omp.h)"
MSVC = ("MSVC's cl.exe on PATH with its environment (install Visual Studio or its Build Tools with 'Desktop development with C++', "
        "then start Python after running its vcvars64.bat, or from its 'x64 Native Tools Command Prompt'; "
        "PyTorch's tutorial 'How to use torch.compile on Windows CPU/XPU')")
# Where `brew --prefix libomp` points on Apple silicon and on Intel Macs, unless HOMEBREW_PREFIX says otherwise.
BREW_PREFIXES = ("/opt/homebrew", "/usr/local")


@dataclass(frozen=True)
class CompileSupport:
    """Whether ``torch.compile`` can run here, for one device class; when not, ``reason`` says what is missing and how
    to install it, in one sentence."""

    ok: bool
    reason: str = ""

    def label(self, name: str) -> str:
        """``name`` for a number measured through :func:`compile_or_eager`, marked where it ran eagerly."""
        return name if self.ok else f"{name} (not compiled)"  # short: it is a bar's or a legend's label

    def __str__(self) -> str:
        return "torch.compile works here (a test function compiled)" if self.ok else self.reason


def compile_support(dev: torch.device | str | None = None) -> CompileSupport:
    """Whether ``torch.compile`` can run on ``dev`` (the course's device by default): ok, or the reason it cannot.

    The platform's toolchain is checked as Inductor looks for it, then a one-line function is compiled, once per
    process and device class; a probe that fails gives the first line of its error. ``GPUCOURSE_NO_COMPILE=1`` makes
    it say no without trying, to run a lecture's eager path.
    """
    if os.environ.get(NO_COMPILE_VAR, "").strip() not in ("", "0"):
        return CompileSupport(False, f"{NO_COMPILE_VAR} is set, so torch.compile is not tried here.")
    return _compile_support(device_class(dev))


@functools.cache
def _compile_support(kind: str) -> CompileSupport:
    missing = _missing_toolchain(_platform()) if kind == "cpu" else _missing_triton()
    if missing:
        return CompileSupport(False, missing)
    error = _probe_compile(kind)
    return CompileSupport(error is None, f"torch.compile failed on a one-line test function here: {error.rstrip('.')}." if error else "")


def compile_or_eager(fn=None, /, **options):
    """``torch.compile(fn, **options)`` where :func:`compile_support` says it can run, else ``fn`` itself, with a note
    printed once saying why. Also a decorator, ``@compile_or_eager(dynamic=True)``.

    Label what it measures with ``compile_support().label(name)``, so an eager number is never called compiled.
    """
    if fn is None:
        return functools.partial(compile_or_eager, **options)
    support = compile_support()
    if support.ok:
        return torch.compile(fn, **options)
    _note_eager_fallback(support.reason)
    return fn


def compile_or_explain(what_compiling_shows: str, dev: torch.device | str | None = None) -> bool:
    """Guard for a cell that is about compiled code itself (what Inductor wrote): True where :func:`compile_support`
    says it can run on ``dev``; otherwise print why not and what the cell would show, like :func:`gpu_or_explain`."""
    support = compile_support(dev)
    if support.ok:
        return True
    print(f"[skipped: torch.compile cannot run here] {support.reason} With it, this cell shows: {what_compiling_shows}")
    return False


@functools.cache  # once per reason: every compiled cell after the first runs eagerly for the same one
def _note_eager_fallback(reason: str) -> None:
    print(f"[eager fallback] {reason} The cells that would compile run eagerly instead, and their numbers are labelled "
          "'not compiled'.")


def _platform() -> str:
    return sys.platform


def _missing_toolchain(system: str) -> str | None:
    """What Inductor's C++ build lacks on ``system`` (a ``sys.platform`` value), in one sentence; None if nothing."""
    missing, chosen = [], os.environ.get("CXX")
    if system == "win32":
        if not shutil.which(chosen or "cl"):
            missing.append(f"the compiler CXX names ({chosen}) on PATH, or CXX unset and {MSVC}" if chosen else MSVC)
    else:
        version = _compiler_version(chosen or ("clang++" if system == "darwin" else "g++"))
        if version is None:
            usual = XCODE if system == "darwin" else GXX
            missing.append(f"the compiler CXX names ({chosen}) to run, or CXX unset and {usual}" if chosen else usual)
        if system == "darwin" and (version is None or "Apple" in version) and not _openmp_found():
            missing.append(LIBOMP)  # only Apple's clang lacks OpenMP of its own (_get_openmp_args)
    if not _python_headers_found(system):
        missing.append("Python's C headers, Python.h (`apt install python3-dev` on Debian or Ubuntu; python.org's and conda's "
                       "Pythons include them)")
    if not missing:
        return None
    return f"torch.compile cannot build code here: Inductor needs {' and '.join(missing)} ({INDUCTOR_SOURCE})."


def _compiler_version(name: str) -> str | None:
    """``name --version``'s output, Inductor's own test that a compiler works (cpp_compiler_search); None if it fails.
    It must run, not just exist: macOS's /usr/bin/clang++ is there even without the tools, and only offers them."""
    path = shutil.which(name)
    if path is None:
        return None
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _openmp_found() -> bool:
    """Whether omp.h is where Inductor looks on macOS: OMP_PREFIX, conda's llvm-openmp, Homebrew's libomp."""
    prefixes = [os.environ.get("OMP_PREFIX"), os.environ.get("CONDA_PREFIX")]
    brews = [os.environ.get("HOMEBREW_PREFIX"), *BREW_PREFIXES]
    prefixes += [str(Path(brew) / "opt" / "libomp") for brew in brews if brew]
    return any((Path(prefix) / "include" / "omp.h").is_file() for prefix in prefixes if prefix)


def _python_headers_found(system: str) -> bool:
    """Whether Python.h is in one of the folders Inductor passes the compiler (_get_python_related_args)."""
    include = Path(sysconfig.get_path("include"))
    folders = [include, Path(sysconfig.get_path("include", scheme="nt" if system == "win32" else "posix_prefix"))]
    if system == "darwin":  # a framework Python may name a folder that does not exist, and keep its headers here
        folders.append(Path(sysconfig.get_path("stdlib")).parent.parent / "Headers")
    return any((folder / "Python.h").is_file() for folder in folders)


def _missing_triton() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return ("torch.compile cannot build code for the GPU here: Inductor writes Triton kernels for it, and Triton is not "
                "installed (`pip install triton`).")
    return None


def _probe_compile(kind: str) -> str | None:
    """None if a one-line function compiles and runs on ``kind``; else the first line of the error."""
    try:
        torch.compile(_probe_function)(torch.ones(8, device=kind))
    # Inductor's failures share no type short of Exception: a missing compiler, a failed C++ build, MSVC's language pack.
    except Exception as err:  # noqa: BLE001 - any failure is the answer, not a crash
        return _first_line(str(err)) or type(err).__name__
    return None


def _first_line(message: str) -> str:
    """An error's first line; for a failed C++ build (torch/_inductor/exc.py, CppCompileError: "C++ compile error",
    the command, then "Output:"), with the compiler's first error line, the one that says what is missing."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if "Output:" not in lines:
        return lines[0] if lines else ""
    output = lines[lines.index("Output:") + 1:]
    said = next((line for line in output if "error" in line.lower()), output[0] if output else "")
    return f"{lines[0]}: {said}" if said else lines[0]


def _probe_function(x):
    return x * 2 + 1
