"""Start a student's worker process with as much isolation as this machine allows.

As root on Linux (the usual grading box or CI), the worker runs:

* in new mount, network and PID namespaces (``unshare``): no network, and a kill of the
  worker's init process kills everything the student's code started (fork bombs included);
* with the course's private paths (``solutions/``, the gradebook, other submissions) covered
  by empty file systems, so they cannot be read or written even by path;
* as an unprivileged user id of its own (``setpriv``), under resource limits (``prlimit``):
  address space, processes, file size, no core dumps.

Elsewhere (an instructor's laptop, no root) the worker is a plain child process under the
same resource limits, and the result records ``isolation: "reduced"``.
"""

from __future__ import annotations

import functools
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Each grading process runs its workers under a user id of their own, without a name: the
# per-user process limit then caps one student's fork bomb without starving the others.
FIRST_SANDBOX_UID = 200_000


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

        Killing ``unshare`` alone is not enough: its child changed user, which clears the
        parent-death signal. The child is the PID namespace's init, and when that dies the
        kernel kills every process in the namespace (a fork bomb's too); the process group
        catches the rest, and the reduced mode's children.
        """
        for pid in _children(self.process.pid):
            _signal(pid, signal.SIGKILL)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.to_worker, self.from_worker):
            try:
                os.close(fd)
            except OSError:
                pass

    def exit_description(self) -> str:
        code = self.process.poll()
        if code is None:
            return "still running"
        if code < 0 or code >= 128:
            signal_number = -code if code < 0 else code - 128
            return f"killed by signal {signal_number}" + (" (out of memory?)" if signal_number == 9 else "")
        return f"exited with status {code}"


def _children(pid: int) -> list[int]:
    """The children of every thread of process ``pid`` (a child started from another thread counts too)."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(child) for child in handle.read().split()]
        except OSError:
            continue
    return found


def _signal(pid: int, signal_number: int) -> None:
    try:
        os.kill(pid, signal_number)
    except (ProcessLookupError, PermissionError):
        pass


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Root, unshare and setpriv present, and unshare actually allowed here."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv") and shutil.which("prlimit")):
        return False
    probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "true"], capture_output=True)
    return probe.returncode == 0


def worker_environment(workdir: Path, threads: int) -> dict[str, str]:
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "MPLCONFIGDIR": str(workdir),
        "MPLBACKEND": "Agg",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    for name in ("GPUCOURSE_DEVICE", "CUDA_VISIBLE_DEVICES", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def log_path(workdir: Path) -> Path:
    """Where a worker's stdout and stderr go: beside its folder, out of the student's reach."""
    workdir = Path(workdir).resolve()
    return workdir.parent / f"{workdir.name}.worker.log"


def log_tail(workdir: Path, characters: int = 4000) -> str:
    try:
        return log_path(workdir).read_text(errors="replace")[-characters:]
    except OSError:
        return ""


def start_worker(workdir: Path, limits: Limits, hidden_paths: list[Path] = ()) -> WorkerProcess:
    """Start ``python -I -m autograder.worker`` in ``workdir`` (the submission's own folder)."""
    workdir = Path(workdir).resolve()
    to_worker_read, to_worker = os.pipe()
    from_worker, from_worker_write = os.pipe()
    command = [sys.executable, "-I", "-m", "autograder.worker", str(to_worker_read), str(from_worker_write)]
    log = log_path(workdir)
    env = worker_environment(workdir, limits.threads)
    if namespaces_available():
        command, isolation = _namespaced(command, workdir, limits, hidden_paths), "namespaces"
        preexec = None
    else:
        isolation, preexec = "reduced", functools.partial(_apply_rlimits, limits, _address_space_limit(limits))
    with open(log, "ab") as output:
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
            pass_fds=(to_worker_read, from_worker_write), preexec_fn=preexec, start_new_session=True,
        )
    os.close(to_worker_read)
    os.close(from_worker_write)
    return WorkerProcess(process, to_worker, from_worker, isolation, log)


def _address_space_limit(limits: Limits) -> int | None:
    """CUDA reserves far more virtual memory than it uses: no address-space cap on GPU graders."""
    import torch

    return None if torch.cuda.is_available() else limits.memory_bytes


def _apply_rlimits(limits: Limits, address_space: int | None) -> None:
    caps = [("RLIMIT_FSIZE", limits.file_bytes), ("RLIMIT_CORE", 0)] + ([("RLIMIT_AS", address_space)] if address_space else [])
    for name, value in caps:
        resource.setrlimit(getattr(resource, name), (value, value))
    if os.geteuid() != 0:  # root ignores RLIMIT_NPROC; setting it would only confuse
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))


def _namespaced(command: list[str], workdir: Path, limits: Limits, hidden_paths) -> list[str]:
    """Wrap ``command`` in unshare + mounts + prlimit + setpriv, as a shell script."""
    uid = FIRST_SANDBOX_UID + os.getpid() % 100_000
    os.chown(workdir, uid, uid)
    # Bind mounts are parked on a private tmpfs at /mnt, which nothing below hides.
    staging = Path("/mnt")
    script = ["set -e", "mount --make-rprivate /", "mount -t tmpfs -o size=1m,mode=0755 tmpfs /mnt"]
    script += _reachable_interpreter_mounts(staging)
    # What the worker needs stays visible even inside a hidden folder (a clone under /tmp).
    keep = [workdir, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), *_package_dirs(), *_interpreter_folders()]
    for path in hidden_paths:
        script += _hide(Path(path).resolve(), keep=keep, staging=staging)
    address_space = _address_space_limit(limits)
    limited = [
        "prlimit", *([f"--as={address_space}"] if address_space else []), f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}", "--core=0", "--",
        # --pdeathsig after the change of user (which clears it): the worker dies with unshare.
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--pdeathsig=KILL", "--",
        *command,
    ]
    script.append("exec " + shlex.join(limited))
    # unshare dies with the grading process (a killed pool process leaves no worker running on).
    return ["setpriv", "--pdeathsig=KILL", "--", "unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--",
            "/bin/sh", "-c", "\n".join(script)]


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


def _hide(path: Path, *, keep: list[Path], staging: Path) -> list[str]:
    """Mount commands that make ``path`` empty in the worker's view, but for the ``keep`` paths inside it."""
    if not path.exists():
        return []
    if path.is_file():
        return [f"mount --bind /dev/null {shlex.quote(str(path))}"]
    inside = [kept for kept in dict.fromkeys(keep) if kept != path and kept.is_relative_to(path) and kept.exists()]
    saved = {kept: staging / f"kept-{abs(hash((path, kept)))}" for kept in inside}
    lines = []
    for kept, parked in saved.items():
        lines += [f"mkdir -p {shlex.quote(str(parked))}", f"mount --bind {shlex.quote(str(kept))} {shlex.quote(str(parked))}"]
    lines.append(f"mount -t tmpfs -o size=1m,mode=0755 tmpfs {shlex.quote(str(path))}")
    for kept, parked in saved.items():
        lines += [f"mkdir -p {shlex.quote(str(kept))}", f"mount --bind {shlex.quote(str(parked))} {shlex.quote(str(kept))}"]
    return lines


def _reachable_interpreter_mounts(staging: Path) -> list[str]:
    """Let the sandbox user reach the interpreter when one of its ancestors is private (e.g. /root, mode 700).

    Inside the worker's mount namespace only: the private folder is hidden like any other,
    keeping the interpreter's tree, so what is left of it is traversable.
    """
    private = {}  # private ancestor -> the child on the way to the interpreter
    for target in (Path(os.path.realpath(sys.executable)), Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()):
        for ancestor in reversed(target.parents):
            if ancestor != Path("/") and not os.stat(ancestor).st_mode & 0o001:
                private.setdefault(ancestor, ancestor / target.relative_to(ancestor).parts[0])
                break
    return [line for ancestor, child in private.items() for line in _hide(ancestor, keep=[child], staging=staging)]
