"""What confines a grading worker, whichever way it is started: the isolation modes, its root, its limits, its environment.

Two routes start a worker, and both apply these: :func:`autograder.sandbox.start_worker`'s own (``unshare``,
``setpriv``, ``prlimit`` around a fresh interpreter), and the fork server's (:mod:`autograder.forkserver`, whose
child builds the same sandbox itself). The sandbox picks the route and starts the fork server; the fork server
imports this module, never the sandbox.
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

from . import compile_seed

ROOT_NAMESPACES = "namespaces"  # root: the worker's own namespaces, root and user id
USER_NAMESPACES = "user-namespaces"  # no root: the same namespaces and root, in a user namespace of its own
REDUCED = "reduced"  # a plain child process: nothing hidden
CONTAINED = (ROOT_NAMESPACES, USER_NAMESPACES)  # everything the worker starts stays in its PID namespace, offline
NEW_ROOT = Path("/mnt/sandbox-root")  # built on a private tmpfs, in the worker's mount namespace only


def worker_environment(workdir: Path, threads: int, sealed: bool = False) -> dict[str, str]:
    from gpucourse.devices import LIBRARY_ENVIRONMENT  # here: importing gpucourse imports torch, which the sandbox's users need not

    from .protocol import SEALED_ENV

    env = {
        **({SEALED_ENV: "1"} if sealed else {}),
        **LIBRARY_ENVIRONMENT,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        # torch.compile's cache, in the worker's own folder (named, so the grader can seed it: autograder.compile_seed)
        compile_seed.CACHE_ENV: str(Path(workdir) / compile_seed.WORKER_CACHE),
        "MPLCONFIGDIR": str(workdir),
        "MPLBACKEND": "Agg",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
        # glibc's malloc keeps large freed blocks for reuse instead of returning each to the system:
        # otherwise a timed call's tensors may be fresh pages (faulted in and zeroed) in one worker and
        # reused memory in another, depending on what ran there before (2.5x on module 06's eager tail).
        "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
        "MALLOC_TRIM_THRESHOLD_": str(1 << 31),
    }
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    for name in ("GPUCOURSE_DEVICE", "CUDA_VISIBLE_DEVICES", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def apply_rlimits(file_bytes: int, address_space: int | None, processes: int | None) -> None:
    """The worker's resource limits, set in its own process (``processes``: None leaves RLIMIT_NPROC alone)."""
    caps = [("RLIMIT_FSIZE", file_bytes), ("RLIMIT_CORE", 0)] + ([("RLIMIT_AS", address_space)] if address_space else [])
    if processes is not None:
        caps.append(("RLIMIT_NPROC", processes))
    for name, value in caps:
        resource.setrlimit(getattr(resource, name), (value, value))
