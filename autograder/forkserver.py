"""Start grading workers from an interpreter that has already imported torch: a fork server.

A worker spends most of its start importing torch, numpy, numba and the course's packages
(about 2 s of CPU), and a grading run starts several per student (their worker, the
reference's, a kernel runner per kernel). The fork server is one interpreter per grading
process that imports what a worker imports and then does nothing but fork: for each worker
it is asked for, its child builds the same sandbox as :func:`sandbox.start_worker`'s shell
script (new mount, network and PID namespaces, a root of its own, limits, a user id of its
own; or, for a grader without root, all that in a user namespace of its own) around itself and serves the harness as ``python -m autograder.worker`` would.

What the server holds is only imported modules (and, in a warm server, what the grader's own
warm-up left in them): never a plan, a test, a reference answer or a submission. It is told a
worker's folder, limits and environment, and is handed the worker's pipes; every worker is a
fresh fork of that clean state.

A worker whose cells use ``torch.compile`` or numba's ``@njit`` comes from a warm server of its
kind (:data:`WARM_UPS`), started beside the plain one on first need: its first compile would
otherwise begin with 3-5 s of imports (Inductor) or of numba compiling its own helpers (array
creation, slicing, copies), in every such worker, where the server pays them once. Other workers
keep the plain server, so they do not carry (or pay for) what they never use.

Where it cannot help (a GPU grader: CUDA does not survive a fork; not Linux;
``GPUCOURSE_FORK_SERVER=0``) or cannot start, workers start as separate interpreters, as before.

Each worker has a waiter: the server's child, which unshares the namespaces, forks the
worker (the first process of its PID namespace) and reports its exit status on a pipe the
harness reads (:class:`ForkedProcess`), as ``unshare --fork`` does for a Popen.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from . import compile_seed, confinement

ENABLE_ENV = "GPUCOURSE_FORK_SERVER"  # "0": start every worker as a separate interpreter
READY_SECONDS = 180.0  # the server's own start (its imports and warm-up), on a busy machine
PID_SECONDS = 30.0  # a fork, on a busy machine
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _PR_SET_NO_NEW_PRIVS = 1, 24, 28, 38
# noroot, no_setuid_fixup and keep_caps, each locked (as sandbox.NO_CAPABILITIES has setpriv set them), and no ambient
# capabilities raised (setpriv cannot name that bit; an empty inheritable set keeps the ambient set empty anyway)
_SECURE_BITS = 0b1110_1111
_CAPABILITY_VERSION_3 = 0x20080522


# -- the grading process's side -------------------------------------------------------------


class ForkedProcess:
    """The part of a ``subprocess.Popen`` the harness uses, for a worker the fork server started.

    ``pid`` is the worker's waiter (its process group and the root of its tree); the exit
    status comes on ``status_fd``: a line ``exit N`` from the waiter, or nothing if the
    waiter itself was killed (then the worker died with it: reported as SIGKILL).
    """

    def __init__(self, pid: int, status_fd: int, received: bytes = b""):
        self.pid, self._fd, self.returncode = pid, status_fd, None
        self._received = received  # what the waiter wrote so far (its "pid" line, maybe already "exit")

    def poll(self) -> int | None:
        if self.returncode is None and self._fd is not None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            self._read(left)
        return self.returncode

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _read(self, seconds: float | None) -> None:
        ready, _, _ = select.select([self._fd], [], [], seconds)
        if not ready:
            return
        chunk = os.read(self._fd, 256)
        self._received += chunk
        for line in self._received.decode(errors="replace").splitlines():
            if line.startswith("exit "):
                self.returncode = int(line.split()[1])
        if not chunk and self.returncode is None:  # the waiter died without a word: killed
            self.returncode = -signal.SIGKILL


class ForkServer:
    """One fork server, started by (and dying with) this grading process."""

    def __init__(self, threads: int, warm_ups: tuple[str, ...] = ()):
        import tempfile

        self._lock = threading.Lock()
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = confinement.worker_environment(Path(tempfile.gettempdir()), threads)
        # The server's own output matters only if it cannot start: a file removed once it is ready
        # (a pool process ends without atexit handlers, so nothing could remove it later).
        # Each worker's waiter writes to that worker's log instead.
        handle, log = tempfile.mkstemp(prefix="gpucourse-forkserver-", suffix=".log")
        try:
            self.process = subprocess.Popen([sys.executable, "-I", "-m", "autograder.forkserver", str(theirs.fileno()), *warm_ups],
                                            env=env, stdin=subprocess.DEVNULL, stdout=handle, stderr=handle,
                                            pass_fds=(theirs.fileno(),), start_new_session=True)
            theirs.close()
            ready, _, _ = select.select([self.socket], [], [], READY_SECONDS)
            if not ready or self.socket.recv(64) != b"ready":
                self.stop()
                raise OSError(f"the fork server did not start: {Path(log).read_text(errors='replace')[-2000:]}")
        finally:
            os.close(handle)
            os.unlink(log)

    def alive(self) -> bool:
        """Whether the server still serves: it never writes after "ready", so a readable socket means it is gone.

        Asked of the socket, not of ``process``: a pool process inherits this server from
        multiprocessing's fork server (see :mod:`autograder._pool_preload`) and is not its
        parent, so ``Popen.poll`` there would report it ended."""
        try:
            readable, _, _ = select.select([self.socket], [], [], 0)
        except (OSError, ValueError):  # closed here
            return False
        return not readable

    def start(self, request: dict, fds: list[int]) -> ForkedProcess:
        """Fork a worker for ``request`` handing it ``fds`` (its two pipe ends, then its log)."""
        status_read, status_write = os.pipe()
        try:
            with self._lock:
                socket.send_fds(self.socket, [json.dumps(request).encode()], [*fds, status_write])
        finally:
            os.close(status_write)
        ready, _, _ = select.select([status_read], [], [], PID_SECONDS)
        first = os.read(status_read, 64).decode(errors="replace") if ready else ""
        if not first.startswith("pid "):
            os.close(status_read)
            raise OSError(f"the fork server did not start a worker (it said {first!r})")
        return ForkedProcess(int(first.split()[1]), status_read, first.encode())

    def stop(self) -> None:
        self.socket.close()  # the server exits on the closed socket; its waiters, and so its workers, die with it
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


_servers: dict[tuple, ForkServer | None] = {}  # (threads, warm-ups) -> this process's server (None: it could not start)
_servers_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def enabled() -> bool:
    """Whether workers can start from a fork server here (see the module's docstring)."""
    if sys.platform != "linux" or os.environ.get(ENABLE_ENV, "1") == "0":
        return False
    import torch

    return not torch.cuda.is_available()


def warm_ups_for(cells) -> tuple[str, ...]:
    """The warm-ups (names in :data:`WARM_UPS`) that a worker holding ``cells`` would use."""
    cells = list(cells)
    return tuple(name for name, (needs, _) in WARM_UPS.items() if needs(cells))


def server(threads: int, warm_ups: tuple[str, ...] = ()) -> ForkServer | None:
    """This process's fork server for workers of ``threads`` threads, warmed by ``warm_ups``, started on
    first use; None where it cannot start."""
    key = (threads, tuple(sorted(warm_ups)))
    with _servers_lock:
        current = _servers.get(key, False)
        if current is False or (current is not None and not current.alive()):
            if not _servers:
                atexit.register(_stop_all)
            try:
                current = ForkServer(*key)
            except OSError as error:
                print(f"autograder: workers start as separate interpreters: {error}", file=sys.stderr)
                current = None
            _servers[key] = current
        return current


def _stop_all() -> None:
    for current in _servers.values():
        if current is not None:
            current.stop()


# -- the server's side ----------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _serve(channel: socket.socket) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(channel, 1 << 20, 8)
        except OSError:
            return
        if not data:
            return  # the grading process closed the socket (or died)
        if os.fork() == 0:
            code = 1
            try:
                channel.close()
                os.dup2(fds[2], 2)  # the waiter's errors go to the worker's log, where the harness reads why it did not start
                _wait_for_worker(json.loads(data), *fds)
                code = 0
            except BaseException:  # noqa: BLE001 - reported in the worker's log
                traceback.print_exc()
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)


def _wait_for_worker(request: dict, to_worker: int, from_worker: int, log: int, status: int) -> None:
    """The waiter: new session, new namespaces, then fork the worker and report how it ended."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _check(_libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")  # dies with the server
    os.write(status, f"pid {os.getpid()}\n".encode())
    if request["isolation"] == confinement.ROOT_NAMESPACES:
        _check(_libc().unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID), "unshare")
    elif request["isolation"] == confinement.USER_NAMESPACES:
        _enter_user_namespace()
    worker = os.fork()
    if worker == 0:
        code = 1
        try:
            os.close(status)
            code = _become_worker(request, to_worker, from_worker, log)
        except BaseException:  # noqa: BLE001 - the harness sees the worker end before it is ready
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    for fd in (to_worker, from_worker, log):
        os.close(fd)
    wait_status = _wait_unless_abandoned(worker, status)
    os.write(status, f"exit {os.waitstatus_to_exitcode(wait_status)}\n".encode())


def _enter_user_namespace() -> None:
    """New user, mount, network and PID namespaces, where this process's user is user 0 (as ``unshare --user
    --map-root-user``): the worker, forked next, may then build its root (:func:`_become_worker`)."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc().unshare(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        Path(f"/proc/self/{name}").write_text(text)


def _drop_capabilities() -> None:
    """Every capability, for good: user 0 of a user namespace that can no longer undo its mounts or leave its root."""
    libc = _libc()
    _check(libc.prctl(_PR_SET_SECUREBITS, _SECURE_BITS, 0, 0, 0), "prctl")
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for capability in range(last + 1):
        _check(libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), "prctl")
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    nothing = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; twice (64 capabilities)
    _check(libc.capset(header, nothing), "capset")


def _wait_unless_abandoned(worker: int, status: int) -> int:
    """The worker's wait status, once it ends; it is killed first if the process that asked for it dies.

    The server outlives any one grading process (pool processes share it: :mod:`autograder._pool_preload`),
    so a killed pool process's workers would otherwise run on. That process holds the status pipe's
    read end: when it dies, the pipe reports an error on this end."""
    watch = select.poll()
    watch.register(status, select.POLLERR)
    try:
        exited = os.pidfd_open(worker)
        watch.register(exited, select.POLLIN)
        interval = None
    except (AttributeError, OSError):  # no pidfd (Linux before 5.3): look again twice a second
        interval = 500
    while True:
        done, wait_status = os.waitpid(worker, os.WNOHANG)
        if done:
            return wait_status
        if any(events & select.POLLERR for fd, events in watch.poll(interval) if fd == status):
            os.kill(worker, signal.SIGKILL)  # the PID namespace's init: everything in it goes too
            return os.waitpid(worker, 0)[1]


def _become_worker(request: dict, to_worker: int, from_worker: int, log: int) -> int:
    """In the worker's process: the sandbox of :func:`sandbox.start_worker`, then the worker's loop."""
    import tempfile

    import numpy as np

    from . import worker

    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    _close_all_but({0, 1, 2, to_worker, from_worker})
    contained = request["isolation"] in confinement.CONTAINED
    if contained:
        subprocess.run(["/bin/sh", "-c", "\n".join(request["script"])], check=True, stdin=subprocess.DEVNULL)
        os.chroot(str(confinement.NEW_ROOT))
    os.chdir(request["workdir"])
    limits = request["limits"]
    if not _fits(limits["address_space"]):
        return 1
    confinement.apply_rlimits(limits["file_bytes"], limits["address_space"], limits["processes"] if contained else None)
    if request["isolation"] == confinement.ROOT_NAMESPACES:
        uid = request["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    elif request["isolation"] == confinement.USER_NAMESPACES:
        _drop_capabilities()
    if contained:
        _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
    # After the change of user, which clears it: the worker dies with its waiter.
    _check(_libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read TMPDIR (the student's folder) afresh
    _rehome_imported_paths()
    np.random.seed()  # a fresh interpreter's randomness, not a copy of the server's
    return worker.main(["autograder.worker", str(to_worker), str(from_worker)])


def _rehome_imported_paths() -> None:
    """What a warm-up's imports computed from the server's folder and user, computed again for the worker's.

    Inductor fixes its precompiled headers' folder (TMPDIR/torchinductor_<user>) when its codecache is
    imported; everything else it reads from the environment when it compiles (checked by
    tests/autograder/test_forkserver.py and tests/autograder/test_compile_seed.py: a warm worker compiles in its own folder)."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is not None:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        codecache._HEADER_DIR = os.path.join(default_cache_dir(), "precompiled_headers")
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")


def _fits(address_space: int | None) -> bool:
    """A fresh worker whose memory limit is below what its imports need fails to start: so does a forked one."""
    if address_space is None:
        return True
    status = Path("/proc/self/status").read_text()
    used = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmSize:"))) * 1024
    if used < address_space:
        return True
    print(f"MemoryError: the worker's memory limit ({address_space / 2**20:.0f} MiB of address space) is below what "
          f"its interpreter uses once torch is imported ({used / 2**20:.0f} MiB): raise the limit", flush=True)
    return False


def _close_all_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _import_inductor() -> None:
    """What ``torch.compile`` imports on first use (Dynamo) and on its first compile (Inductor): 4-5 s of CPU.
    Imports only: a compile here would start Inductor's pool of compiler processes, which must not be forked."""
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401


def _compile_njit_helpers() -> None:
    """The grader's own function, compiled for float32 and float64: numba then holds its compiled helpers for
    array creation, slicing and copies, which a student's first compile would otherwise build (about 4 s)."""
    import numpy as np
    from numba import njit

    @njit
    def warm_up(a, b):
        m, k = a.shape
        c = np.zeros((m, b.shape[1]), dtype=a.dtype)
        for i in range(m):
            for p in range(k):
                c[i, :] += a[i, p] * b[p, :]
        return c[:m, :].copy()

    for dtype in (np.float32, np.float64):
        warm_up(np.ones((4, 4), dtype), np.ones((4, 4), dtype))


# name -> (whether a worker's cells need it, what a warm server does before it says it is ready)
WARM_UPS = {
    "inductor": (compile_seed.uses_compile, _import_inductor),
    "njit": (lambda cells: any("njit" in cell for cell in cells), _compile_njit_helpers),
}


def main(argv: list[str]) -> int:
    channel = socket.socket(fileno=int(argv[1]))
    # What a worker imports before it says it is ready, and numba, which every kernel module's cells import.
    import numba  # noqa: F401

    from . import worker  # noqa: F401

    for name in argv[2:]:
        WARM_UPS[name][1]()
    channel.send(b"ready")
    _serve(channel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
