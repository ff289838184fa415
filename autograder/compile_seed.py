"""A warm start for ``torch.compile`` in grading workers, without sharing anything a student wrote.

Every worker keeps Inductor's cache in its own folder (``TORCHINDUCTOR_CACHE_DIR``, set by
:func:`autograder.sandbox.worker_environment`), so no student, and no runner that counts a
student's ops, ever loads what another process compiled. But a cold cache makes the first
``torch.compile`` of a process cost about 20 s on a 2-core machine (3 s warm), most of it spent on
work that has nothing to do with the code being compiled: probing which vector instructions the
compiler and the CPU support, and precompiling torch's C++ headers (150 MB, outside that folder).

So the grader compiles one trivial function of its own, once per machine, in a process of its own
(:func:`seed`), and copies that cache into a worker's folder before the worker starts
(:func:`copy_into`). Each worker gets its own copy, made from the grader's code only (the headers
as read-only links): what a student's worker writes there stays in that worker's folder, as before.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
SEED_ENV = "GPUCOURSE_COMPILE_SEED"  # where seeds are kept (default: ~/.cache/gpucourse/inductor-seed)
WORKER_CACHE = "torchinductor"  # the cache folder inside a worker's folder
CACHE, HEADERS = "inductor", "precompiled_headers"  # the seed's two parts
SEED_SECONDS = 300
LAYOUT = "2"  # of a seed folder: a new layout makes a new seed
KEPT_SEEDS = 3

# The grader's own function, compiled in a fresh interpreter: float32 and float64, as answers use both.
_WARM_UP = (
    "import torch\n"
    "torch.set_num_threads(1)\n"
    "warm = torch.compile(lambda x, y: torch.nn.functional.gelu(x + y) * 0.5)\n"
    "for dtype in (torch.float32, torch.float64):\n"
    "    warm(torch.randn(8, 8, dtype=dtype), torch.randn(8, dtype=dtype))\n"
)


def uses_compile(cells) -> bool:
    """Whether a worker holding ``cells`` may call ``torch.compile`` (only those are seeded)."""
    return any("torch.compile" in cell for cell in cells)


@functools.lru_cache(maxsize=1)
def seed_folder() -> Path:
    """This machine's seed, named by what a cached probe or kernel depends on: torch (the headers of this very
    install: their paths are in the precompiled headers' names), the C++ compiler, the CPU."""
    import torch

    compiler = shutil.which(os.environ.get("CXX", "c++")) or ""
    key = "\n".join([LAYOUT, torch.__file__, torch.__version__, sys.version, platform.machine(), compiler, _version(compiler), _cpu_flags()])
    root = Path(os.environ.get(SEED_ENV) or Path.home() / ".cache" / "gpucourse" / "inductor-seed")
    return root / hashlib.sha256(key.encode()).hexdigest()[:16]


def seed() -> Path | None:
    """The warm cache of this machine, made now if it does not exist yet; None if it cannot be made
    (no C++ compiler, say): workers then start cold, as they would without it."""
    folder = seed_folder()
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one grader makes it; the others wait for it
        return folder if folder.is_dir() else _make(folder)


def _make(folder: Path) -> Path | None:
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=folder.parent))
    # TMPDIR too: Inductor keeps its precompiled headers beside its default cache folder, not in CACHE_ENV's
    env = {**os.environ, CACHE_ENV: str(building / CACHE), "TMPDIR": str(building / "tmp"), "OMP_NUM_THREADS": "1"}
    (building / "tmp").mkdir()
    try:
        subprocess.run([sys.executable, "-I", "-c", _WARM_UP], env=env, check=True, timeout=SEED_SECONDS,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for headers in (building / "tmp").glob(f"torchinductor_*/{HEADERS}"):
            os.rename(headers, building / HEADERS)
        for path in (building / HEADERS).glob("*.h*"):
            path.chmod(0o444)  # linked into workers' folders: read-only to them, owned by the grader
        shutil.rmtree(building / "tmp")
        os.rename(building, folder)  # atomic: a grader sees no seed or a whole one
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(building, ignore_errors=True)
        return None
    _prune(folder.parent, keep=KEPT_SEEDS)
    return folder


def _prune(root: Path, keep: int) -> None:
    """Remove all but the ``keep`` newest seeds (150 MB each; one per install of torch, so a machine whose
    clones come and go, a CI runner's, would fill up)."""
    seeds = sorted((path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")),
                   key=lambda path: path.stat().st_mtime, reverse=True)
    for old in seeds[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def copy_into(workdir: Path, owner: int | None = None) -> None:
    """Give the worker of ``workdir`` its own copy of the seed's cache (once: a restarted worker keeps
    its own), owned by ``owner``, the user id the worker runs as in the sandbox.

    The precompiled headers (150 MB) are hard links instead, owned by the grader and read-only,
    and only for a sandboxed worker (``owner`` given): running as the grader's own user, a worker
    could make a shared file writable and change it for every worker after it. Where no link can
    be made (another file system), the worker builds its own, as it would without a seed.
    """
    workdir = Path(workdir)
    target = workdir / WORKER_CACHE
    source = seed() if not target.exists() else None
    if source is None:
        return
    # Inductor keeps its headers in TMPDIR/torchinductor_<user>; a sandbox's user id has no name, so uid_<id>.
    home = workdir / f"torchinductor_uid_{owner}"
    try:
        _copy(source, target, home, owner)
    except OSError:  # the seed pruned meanwhile, a full disk: this worker starts cold
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def _copy(source: Path, target: Path, home: Path, owner: int | None) -> None:
    shutil.copytree(source / CACHE, target, symlinks=False)
    if owner is None:
        return
    (home / HEADERS / "locks").mkdir(parents=True, exist_ok=True)
    shared = sorted((source / HEADERS).glob("*.h*"))
    # All or nothing: a header without its .gch (or the reverse) would send Inductor to rebuild into a file it cannot write.
    # And nothing unless every file is still the grader's and read-only.
    if all(os.stat(path).st_uid == os.geteuid() and not os.stat(path).st_mode & 0o222 for path in shared):
        try:
            for path in shared:
                os.link(path, home / HEADERS / path.name)
        except OSError:  # another file system: the worker builds its own
            for path in shared:
                (home / HEADERS / path.name).unlink(missing_ok=True)
    for path in [target, *target.rglob("*"), home, home / HEADERS, home / HEADERS / "locks"]:
        os.chown(path, owner, owner, follow_symlinks=False)


def warm_default_cache() -> None:
    """Make this user's default Inductor cache a copy of the seed (cache and headers) if it does not exist yet.

    The default cache, ``TMPDIR/torchinductor_<user>`` (Inductor's rule, when ``TORCHINDUCTOR_CACHE_DIR`` is
    unset), is where a notebook's kernel compiles outside the sandbox: the test suite's lectures and plain
    nbgrader runs. It calls this first, so that those kernels start as warm as a grading worker, instead of
    each paying a machine's first compile again (15-30 s of CPU on 2 cores, twice when two start at once).
    """
    if os.environ.get(CACHE_ENV):
        return
    import getpass

    target = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
    source = seed() if not target.exists() else None
    if source is None:
        return
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        shutil.copytree(source / CACHE, building, dirs_exist_ok=True)
        shutil.copytree(source / HEADERS, building / HEADERS)  # copies, writable: nothing here is shared with a student
        for path in (building / HEADERS).rglob("*"):
            if path.is_file():
                path.chmod(0o644)
        os.rename(building, target)  # atomic; another process that got there first wins
    except OSError:
        pass
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _version(compiler: str) -> str:
    if not compiler:
        return ""
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()
