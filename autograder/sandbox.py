"""Start a student's worker process with as much isolation as this machine allows.

As root on Linux (the usual grading box or CI), the worker runs:

* in new mount, network and PID namespaces (``unshare``): no network, and a kill of the
  worker's init process kills everything the student's code started (fork bombs included);
* in a root of its own (``chroot``) that holds only the system folders, the interpreter and
  the course's packages (read-only) and the submission's folder: the course,
  other submissions, other copies of the course and the grader's home do not exist there;
* as an unprivileged user id of its own (``setpriv``), under resource limits (``prlimit``):
  address space, processes, file size, no core dumps.

Without root (a cluster's grading account), the same namespaces and root come from an
unprivileged user namespace of the worker's own (``unshare --user``): the worker runs as the
grader's own user, which is user 0 inside that namespace, with every capability dropped (it
can neither undo the mounts that hide the course nor leave its root), and its process limit
counts its own namespace's processes only. The result records ``isolation: "user-namespaces"``.

Where neither is possible (not Linux, user namespaces disabled) the worker is a plain child
process under the same resource limits, recorded as ``isolation: "reduced"``: nothing is
hidden from it. The instructor's grader refuses that unless told otherwise
(:func:`require_isolation`); a student's self-check on their own laptop runs it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import compile_seed
from .clock import children
from .confinement import CONTAINED, NEW_ROOT, REDUCED, ROOT_NAMESPACES, USER_NAMESPACES, apply_rlimits, worker_environment

# Each grading process runs its workers under a user id of their own, without a name: the
# per-user process limit then caps one student's fork bomb without starving the others.
FIRST_SANDBOX_UID = 200_000
KILL_SECONDS = 60.0  # a killed worker's processes are gone (see WorkerProcess.kill)


@dataclass(frozen=True)
class Limits:
    """Resource limits for one student's worker and the deadlines the harness enforces."""

    cell_seconds: float = 60.0  # one student cell while loading their code
    item_seconds: float = 120.0  # one graded item (all its calls and checks)
    notebook_seconds: float = 900.0  # the whole submission
    memory_bytes: int = 8 * 1024**3  # address space; torch alone reserves a few GB of it
    # Per user, and threads count too: numba's CUDA simulator runs each thread of a block
    # as a Python thread, so a block of 1024 threads needs 1024 of them at once.
    processes: int = 1536
    file_bytes: int = 256 * 1024**2
    threads: int = 1


@dataclass
class WorkerProcess:
    process: subprocess.Popen
    to_worker: int
    from_worker: int
    isolation: str
    log_path: Path

    def kill(self) -> None:
        """Kill the worker and everything it started.

        Killing ``unshare`` (or the fork server's waiter) alone is not enough: its child changed user,
        which clears the parent-death signal. The child is the PID namespace's init, and when that dies
        the kernel kills every process in the namespace (a fork bomb's too); the process group catches
        the rest, and the reduced mode's children.
        """
        inits = children(self.process.pid)
        for pid in inits:
            _signal(pid, signal.SIGKILL)
        if inits and self.isolation in CONTAINED:
            # The dying init waits for every process of its namespace, and only then does its parent (the
            # waiter, or unshare) see it end and exit. Until then they count against the sandbox user's
            # process limit, so a worker started sooner could not start a thread: a fork bomb's retried cell
            # under load left none for the next worker. Killing the parent too would end that wait early.
            self._wait(KILL_SECONDS)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._wait(KILL_SECONDS)
        if hasattr(self.process, "close"):  # a forked worker's status pipe
            self.process.close()
        for fd in (self.to_worker, self.from_worker):
            try:
                os.close(fd)
            except OSError:
                pass

    def _wait(self, seconds: float) -> None:
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass

    def killed_by_sigkill(self) -> bool:
        return self.process.poll() in (-signal.SIGKILL, 128 + signal.SIGKILL)

    def exit_description(self) -> str:
        code = self.process.poll()
        if code is None:
            return "still running"
        if code < 0 or code >= 128:
            signal_number = -code if code < 0 else code - 128
            return f"killed by signal {signal_number}" + (" (out of memory?)" if signal_number == 9 else "")
        return f"exited with status {code}"


def _signal(pid: int, signal_number: int) -> None:
    try:
        os.kill(pid, signal_number)
    except (ProcessLookupError, PermissionError):
        pass


# What a user namespace of the worker's own must allow (a distribution may forbid it: a sysctl, an AppArmor rule).
USER_NAMESPACE_PROBE = "mount -t tmpfs tmpfs /mnt && mkdir /mnt/proc && mount -t proc proc /mnt/proc"


class IsolationUnavailable(ValueError):
    """The grader would run students' code without the sandbox, and was not told it may."""


@functools.lru_cache(maxsize=1)
def isolation() -> tuple[str, str]:
    """The best isolation this machine allows (one of the modes above), and why it is no better ("" for root's)."""
    tools = ("unshare", "setpriv", "prlimit")
    missing = [tool for tool in tools if not shutil.which(tool)] + ([] if _chroot() else ["chroot"])
    if missing:
        return REDUCED, f"{', '.join(missing)} not found (Linux's util-linux and coreutils provide them)"
    if os.geteuid() == 0:
        probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "true"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ROOT_NAMESPACES, ""
    why_not_root = "not root" if os.geteuid() != 0 else "root, but unshare refused new namespaces"
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "/bin/sh", "-c",
                            USER_NAMESPACE_PROBE], capture_output=True, text=True)
    if probe.returncode == 0:
        return USER_NAMESPACES, why_not_root
    return REDUCED, f"{why_not_root}, and an unprivileged user namespace is not allowed here ({probe.stderr.strip()[:300]})"


def namespaces_available() -> bool:
    """The root's sandbox: namespaces and a user id of its own for each grading process's workers."""
    return isolation()[0] == ROOT_NAMESPACES


def require_isolation(allow_reduced: bool) -> str:
    """This machine's isolation mode; IsolationUnavailable where it is reduced and ``allow_reduced`` is not set."""
    mode, why = isolation()
    if mode == REDUCED and not allow_reduced:
        raise IsolationUnavailable(
            f"this machine cannot sandbox the students' code: {why}. Their code would run as a plain process that can "
            "read solutions/ and the gradebook, and reach the network. Grade as root, or where unprivileged user "
            "namespaces are allowed; or pass --allow-reduced-isolation to grade anyway (each submission then records "
            "isolation: reduced)")
    return mode


def log_path(workdir: Path) -> Path:
    """Where a worker's stdout and stderr go: beside its folder, out of the student's reach."""
    workdir = Path(workdir).resolve()
    return workdir.parent / f"{workdir.name}.worker.log"


def log_tail(workdir: Path, characters: int = 4000) -> str:
    try:
        return log_path(workdir).read_text(errors="replace")[-characters:]
    except OSError:
        return ""


# What a worker needs of the grader's package to start (``python -I -m autograder.worker``) and to talk to the harness.
WORKER_FILES = ("__init__.py", "worker.py", "protocol.py")


def grader_only_paths() -> list[Path]:
    """Everything of the grader's package but :data:`WORKER_FILES`: hidden from a sealed worker (its bytecode cache too)."""
    package = Path(__file__).resolve().parent
    return [path for path in sorted(package.iterdir()) if path.name not in WORKER_FILES]


def start_worker(workdir: Path, limits: Limits, hidden_paths: list[Path] = (), cells: Sequence[str] = (),
                 grader_modules: bool = False) -> WorkerProcess:
    """Start a worker (``python -I -m autograder.worker``) in ``workdir`` (the submission's own folder),
    made ready for ``cells``, the code it will be sent.

    Without ``grader_modules`` the worker is sealed: the grader's package is neither shown nor importable there
    (:func:`autograder.worker.seal`), as befits a process that runs the student's own code. Only a runner whose
    cells the grader checked first and that counts with the grader's code (a profile runner, a Triton kernel's
    runner) is started with it.

    It is forked from this process's fork server where there is one (:mod:`autograder.forkserver`:
    the same sandbox, without importing torch again; a warm server for cells that compile), else
    started as an interpreter of its own. For cells that use ``torch.compile``, its Inductor cache
    starts as a copy of the grader's warm one (:mod:`autograder.compile_seed`).
    """
    from . import forkserver

    workdir = Path(workdir).resolve()
    mode = isolation()[0]
    sealed = not grader_modules
    hidden_paths = [*hidden_paths, *(grader_only_paths() if sealed else [])]
    if compile_seed.uses_compile(cells):
        compile_seed.copy_into(workdir, sandbox_user() if mode == ROOT_NAMESPACES else None)
    to_worker_read, to_worker = os.pipe()
    from_worker, from_worker_write = os.pipe()
    for fd in (to_worker, from_worker):
        _widen_pipe(fd)
    log = log_path(workdir)
    server = forkserver.server(limits.threads, forkserver.warm_ups_for(cells)) if forkserver.enabled() else None
    try:
        process = None
        if server is not None:
            with contextlib.suppress(OSError):  # the server died: this worker starts on its own
                process = _forked(server, workdir, limits, hidden_paths, [to_worker_read, from_worker_write], log, mode, sealed)
        if process is None:
            process = _popen(workdir, limits, hidden_paths, [to_worker_read, from_worker_write], log, mode, sealed)
    finally:
        os.close(to_worker_read)
        os.close(from_worker_write)
    return WorkerProcess(process, to_worker, from_worker, mode, log)


PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged process (/proc/sys/fs/pipe-max-size)


def _widen_pipe(fd: int) -> None:
    """Let the pipe hold ``PIPE_BYTES`` instead of 64 KiB: a timed block's outputs (module 06: 16 MB a block) then
    cross in 16 times fewer hand-overs between the worker and the harness, each a wake-up of the other side
    (measured: fetching a block's outputs 0.11-0.31 s before, 0.05-0.14 s after). Left as it is where Linux refuses."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no F_SETPIPE_SZ (not Linux)
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def _popen(workdir: Path, limits: Limits, hidden_paths, fds: list[int], log: Path, mode: str, sealed: bool) -> subprocess.Popen:
    command = [sys.executable, "-I", "-m", "autograder.worker", *map(str, fds)]
    if mode in CONTAINED:
        command, preexec = _namespaced(command, workdir, limits, hidden_paths, mode), None
    else:
        preexec = functools.partial(apply_rlimits, limits.file_bytes, _address_space_limit(limits),
                                    None if os.geteuid() == 0 else limits.processes)
    with open(log, "ab") as output:
        return subprocess.Popen(
            command, cwd=workdir, env=worker_environment(workdir, limits.threads, sealed), stdin=subprocess.DEVNULL, stdout=output,
            stderr=output, pass_fds=fds, preexec_fn=preexec, start_new_session=True,
        )


def _forked(server, workdir: Path, limits: Limits, hidden_paths, fds: list[int], log: Path, mode: str, sealed: bool):
    """The worker forked by ``server``, in the sandbox :func:`_popen` would build (see :mod:`autograder.forkserver`)."""
    uid = sandbox_user()
    if mode == ROOT_NAMESPACES:
        os.chown(workdir, uid, uid)
    request = {
        "isolation": mode, "script": new_root_script(workdir, hidden_paths) if mode in CONTAINED else [],
        "workdir": str(workdir), "uid": uid, "env": worker_environment(workdir, limits.threads, sealed),
        "limits": {"file_bytes": limits.file_bytes, "address_space": _address_space_limit(limits),
                   # as prlimit sets it in the sandbox; root ignores RLIMIT_NPROC, so only a non-root grader sets it otherwise
                   "processes": limits.processes if mode in CONTAINED or os.geteuid() != 0 else None},
    }
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        return server.start(request, [*fds, log_fd])
    finally:
        os.close(log_fd)


def _address_space_limit(limits: Limits) -> int | None:
    """CUDA reserves far more virtual memory than it uses: no address-space cap on GPU graders."""
    import torch

    return None if torch.cuda.is_available() else limits.memory_bytes


# The system's own folders, seen read-only: programs and libraries (the interpreter's shared
# libraries, CUDA's driver on a GPU grader) and configuration; nothing of a course lives there.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def sandbox_user() -> int:
    """The user id this grading process's workers run as (see FIRST_SANDBOX_UID)."""
    return FIRST_SANDBOX_UID + os.getpid() % 100_000


def new_root_script(workdir: Path, hidden_paths) -> list[str]:
    """Shell commands that build the worker's root under NEW_ROOT, in a fresh mount namespace.

    The worker's file system is an allow-list: a fresh root holding the system folders and
    the interpreter, its packages and the course's packages (all read-only), the submission's
    folder, an empty /tmp and /dev/shm it cannot write (nor the root itself), /dev and a /proc of its own PID namespace. Nothing
    else of the machine exists there: not the course, not a second copy of it, not the
    grader's home. ``hidden_paths`` are hidden again should one lie inside what is kept.
    """
    root = shlex.quote(str(NEW_ROOT))
    script = ["set -e", "mount --make-rprivate /", "mount -t tmpfs -o size=1m,mode=0755 tmpfs /mnt",
              f"mkdir -p {root}", f"mount -t tmpfs -o size=16m,mode=0755 tmpfs {root}"]
    # A private /tmp first: the interpreter, its packages or the submission's folder may live inside it.
    # It and /dev/shm are not writable by the student (TMPDIR is their own folder): nothing to fill, no channel.
    script += [f"mkdir -p {root}/tmp {root}/proc {root}/dev", f"mount -t tmpfs -o size=1m,mode=0755 tmpfs {root}/tmp",
               f"mount --rbind /dev {root}/dev", f"mount -t tmpfs -o size=1m,mode=0755 tmpfs {root}/dev/shm",
               f"mount -t proc proc {root}/proc"]
    for folder in SYSTEM_FOLDERS:
        script += _show(Path(folder), read_only=True)
    kept = _kept_for_the_interpreter()
    for folder in _outermost(kept):
        script += _show(folder, read_only=True)
    script += _show(workdir, read_only=False)
    shown = [Path(folder) for folder in SYSTEM_FOLDERS] + kept
    for path in map(Path, hidden_paths):
        path = path.resolve()
        if path.exists() and any(path.is_relative_to(folder) for folder in shown) and not workdir.is_relative_to(path):
            script += _cover(NEW_ROOT / path.relative_to("/"), is_file=path.is_file())
    # Read-only once built: in a user namespace the worker is the user who owns these file systems.
    script += [f"mount -o remount,bind,ro {folder}" for folder in (f"{root}/tmp", f"{root}/dev/shm", root)]
    return script


# A user namespace's user 0 without capabilities, for good: none kept, none regained by running a program.
NO_CAPABILITIES = ["--bounding-set=-all", "--inh-caps=-all",
                   "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked,+keep_caps_locked"]


def _namespaced(command: list[str], workdir: Path, limits: Limits, hidden_paths, mode: str) -> list[str]:
    """Wrap ``command`` in unshare + a root of its own (:func:`new_root_script`) + prlimit + setpriv, as a shell script."""
    script = new_root_script(workdir, hidden_paths)
    if mode == ROOT_NAMESPACES:
        uid = sandbox_user()
        os.chown(workdir, uid, uid)
        become = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    else:
        become = NO_CAPABILITIES
    address_space = _address_space_limit(limits)
    limited = [
        "prlimit", *([f"--as={address_space}"] if address_space else []), f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}", "--core=0", "--",
        # --pdeathsig after the change of user (which clears it): the worker dies with unshare.
        "setpriv", *become, "--no-new-privs", "--pdeathsig=KILL", "--",
        *command,
    ]
    root = shlex.quote(str(NEW_ROOT))
    script.append(f"exec {shlex.quote(_chroot())} {root} /bin/sh -c {shlex.quote(f'cd {shlex.quote(str(workdir))} && exec ' + shlex.join(limited))}")
    user_namespace = [] if mode == ROOT_NAMESPACES else ["--user", "--map-root-user"]
    # unshare dies with the grading process (a killed pool process leaves no worker running on).
    return ["setpriv", "--pdeathsig=KILL", "--", "unshare", *user_namespace, "--mount", "--net", "--pid", "--fork", "--kill-child", "--",
            "/bin/sh", "-c", "\n".join(script)]


def _chroot() -> str | None:
    """The chroot program (often in an sbin folder, outside a user's PATH)."""
    return shutil.which("chroot", path=os.pathsep.join(["/usr/sbin", "/sbin", "/usr/bin", "/bin", os.environ.get("PATH", "")]))


def _kept_for_the_interpreter() -> list[Path]:
    """What the worker's Python needs: its environment, the base installation, every folder on
    the way from ``sys.executable`` to the real interpreter, and the course's packages."""
    return [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), *_interpreter_folders(), *_package_dirs()]


def _outermost(paths: list[Path]) -> list[Path]:
    """The paths that no other path of the list contains (binding those shows the rest)."""
    unique = list(dict.fromkeys(paths))
    return [path for path in unique if not any(other != path and path.is_relative_to(other) for other in unique)]


def _show(path: Path, *, read_only: bool) -> list[str]:
    """Mount commands that make ``path`` appear at the same place under the new root."""
    if not os.path.lexists(path):
        return []
    inside = NEW_ROOT / path.relative_to("/")
    if path.is_symlink() and path.parent == Path("/"):  # merged /usr: /bin -> usr/bin
        return [f"ln -s {shlex.quote(os.readlink(path))} {shlex.quote(str(inside))}"]
    if path.is_dir():
        lines = [f"mkdir -p {shlex.quote(str(inside))}"]
    else:
        lines = [f"mkdir -p {shlex.quote(str(inside.parent))}", f"touch {shlex.quote(str(inside))}"]
    lines.append(f"mount --rbind {shlex.quote(str(path.resolve()))} {shlex.quote(str(inside))}")
    if read_only:
        lines.append(f"mount -o remount,bind,ro {shlex.quote(str(inside))}")
    return lines


def _cover(path: Path, *, is_file: bool) -> list[str]:
    """Mount commands that make ``path`` (already under the new root) empty."""
    if is_file:
        return [f"mount --bind /dev/null {shlex.quote(str(path))}"]
    return [f"mount -t tmpfs -o ro,size=1m,mode=0755 tmpfs {shlex.quote(str(path))}"]


def _interpreter_folders() -> list[Path]:
    """The folder of every link on the way from ``sys.executable`` to the real interpreter.

    A venv's ``python`` may point through links that live in a hidden folder (a venv made
    from another venv, a Python under /tmp): each hop must stay reachable, or the worker
    cannot even start. Resolved here, before any folder is hidden.
    """
    folders, path = [], Path(os.path.abspath(sys.executable))
    for _ in range(40):  # the kernel's own limit on a chain of links
        folders.append(path.parent.resolve())
        if not path.is_symlink():
            break
        target = Path(os.readlink(path))
        path = Path(os.path.normpath(path.parent / target))
    return list(dict.fromkeys(folders))


def _package_dirs() -> list[Path]:
    import autograder
    import gpucourse

    return [Path(module.__file__).resolve().parent for module in (autograder, gpucourse)]
