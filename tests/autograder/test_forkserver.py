"""Workers forked by the fork server live in the same sandbox as workers started on their own.

Each check starts a worker both ways through :func:`autograder.sandbox.start_worker` (the fork
server switched off for one of them) and compares what the worker's code sees from inside.
"""

import os
import time
from pathlib import Path

import pytest

from autograder import forkserver, protocol, sandbox

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not forkserver.enabled(), reason="no fork server here (a GPU grader, or not Linux)")]

LIMITS = sandbox.Limits(memory_bytes=6 * 1024**3, processes=700, file_bytes=64 * 1024**2)

LOOK_AROUND = """
import os, resource, socket, sys
def _status(field):
    return next(line.split()[1:] for line in open("/proc/self/status") if line.startswith(field + ":"))
def _connect():
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=2)
    except OSError as error:
        return type(error).__name__
    return "connected"
VIEW = {
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getgroups()], "pid_in_namespace": os.getpid(),
    "no_new_privs": _status("NoNewPrivs"), "cwd": os.getcwd(), "root": sorted(os.listdir("/")),
    "tmp": sorted(os.listdir("/tmp")), "environment": dict(os.environ),
    "limits": [resource.getrlimit(getattr(resource, name)) for name in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE")],
    "network": _connect(), "isolated": sys.flags.isolated, "no_bytecode": sys.flags.dont_write_bytecode,
    "path": [entry for entry in sys.path if entry],
}
"""


def request(process: sandbox.WorkerProcess, message, seconds: float = 120.0):
    protocol.write_frame(process.to_worker, protocol.encode_for_worker(message))
    return protocol.decode_from_worker(protocol.read_frame(process.from_worker, time.monotonic() + seconds, time.monotonic))


def ready(process: sandbox.WorkerProcess):
    """The worker's first frame (``("ready",)`` once it can take student code)."""
    return protocol.decode_from_worker(protocol.read_frame(process.from_worker, time.monotonic() + 120, time.monotonic))


def started(workdir: Path, forked: bool, monkeypatch, limits=LIMITS, cells=(), grader_modules=False) -> sandbox.WorkerProcess:
    with monkeypatch.context() as patched:
        patched.setattr(forkserver, "enabled", lambda: forked)
        process = sandbox.start_worker(workdir, limits, [], cells, grader_modules)
    assert isinstance(process.process, forkserver.ForkedProcess) == forked
    return process


def seen_from_inside(tmp_path: Path, forked: bool, monkeypatch, cells=(), look=LOOK_AROUND) -> dict:
    workdir = tmp_path / ("forked" if forked else "own") / "work" / "student"
    workdir.mkdir(parents=True)
    process = started(workdir, forked, monkeypatch, cells=cells)
    try:
        assert ready(process) == ("ready",)
        assert request(process, ("exec", look + "\nVIEW['modules'] = sorted(sys.modules)")) == ("ok",)
        kind, view = request(process, ("value", "VIEW"))
        assert kind == "return", view
    finally:
        process.kill()
    view["cwd"] = view["cwd"].replace(str(workdir), "<workdir>")
    # What the shell that starts a separate interpreter in its sandbox adds on its way (cd, exec) is left out.
    view["environment"] = {name: value.replace(str(workdir), "<workdir>") for name, value in view["environment"].items()
                           if name not in ("OLDPWD", "PWD", "SHLVL", "_")}
    if "compile_paths" in view:
        view["compile_paths"] = {name: path.replace(str(workdir), "<workdir>") for name, path in view["compile_paths"].items()}
    return view


@pytest.mark.parametrize("isolation", [sandbox.ROOT_NAMESPACES, sandbox.USER_NAMESPACES, sandbox.REDUCED])
def test_a_forked_worker_sees_what_a_worker_started_on_its_own_sees(isolation, tmp_path, monkeypatch):
    """In the root's sandbox, in a user namespace's (a grader without root) and in reduced isolation (a student's self-check)."""
    if isolation != sandbox.REDUCED and sandbox.isolation()[0] not in (isolation, sandbox.ROOT_NAMESPACES):
        pytest.skip(f"this machine's best isolation is {sandbox.isolation()[0]}: {sandbox.isolation()[1]}")
    if isolation != sandbox.isolation()[0]:  # root can make user namespaces too
        monkeypatch.setattr(sandbox, "isolation", lambda: (isolation, "as this test asks"))
    forked, own = seen_from_inside(tmp_path, True, monkeypatch), seen_from_inside(tmp_path, False, monkeypatch)
    if isolation == sandbox.REDUCED:
        # Without namespaces a pid is just a number, and /tmp is the machine's, which other tests write to meanwhile.
        for view in (forked, own):
            del view["pid_in_namespace"], view["tmp"]
    forked_modules, own_modules = set(forked.pop("modules")), set(own.pop("modules"))
    assert own_modules <= forked_modules  # the server imports more than a worker does (numba, say): never less
    assert forked == own
    if isolation in sandbox.CONTAINED:  # no network, first of its PID namespace; a user of its own, or user 0 of its namespace
        assert forked["ids"][0] == (sandbox.sandbox_user() if isolation == sandbox.ROOT_NAMESPACES else 0), forked["ids"]
        assert forked["network"] != "connected" and forked["pid_in_namespace"] == 1 and forked["no_new_privs"] == ["1"]
    if isolation == sandbox.ROOT_NAMESPACES:
        assert forked["ids"][3] == []
    assert forked["limits"][0] == (LIMITS.memory_bytes,) * 2 and forked["limits"][2] == (LIMITS.file_bytes,) * 2


# Where a worker's compiles would write: Inductor's cache and its precompiled headers, numba's cache.
COMPILE_PATHS = """
from torch._inductor import codecache
from torch._inductor.runtime.cache_dir_utils import cache_dir
from numba.core import config as numba_config
VIEW["compile_paths"] = {"inductor": cache_dir(), "headers": codecache._HEADER_DIR, "header_locks": codecache._HEADER_LOCK_DIR,
                         "numba": numba_config.CACHE_DIR or os.getcwd()}
"""

# Cells that use what a warm server prepares, and a module that only its warm-up imports.
WARM_CELLS = {"inductor": ("import torch\nf = torch.compile(lambda x: x + 1)\n", "torch._inductor.compile_fx"),
              "njit": ("from numba import njit\n\n@njit\ndef f(a):\n    return a\n", "numba.core.typing.arraydecl")}


@pytest.mark.parametrize("warm_up", sorted(forkserver.WARM_UPS))
def test_a_worker_that_compiles_comes_warm_from_a_server_of_its_own_in_the_same_sandbox(warm_up, tmp_path, monkeypatch):
    """Its cells name what it compiles with; it sees the sandbox a plain forked worker sees, plus the warm-up's modules,
    which the plain server's workers do not carry."""
    cells, warmed_module = WARM_CELLS[warm_up]
    assert forkserver.warm_ups_for([cells]) == (warm_up,) and forkserver.warm_ups_for(["x = 1"]) == ()
    warm = seen_from_inside(tmp_path / "warm", True, monkeypatch, [cells], LOOK_AROUND + COMPILE_PATHS)
    plain = seen_from_inside(tmp_path / "plain", True, monkeypatch)
    assert forkserver._servers.get((LIMITS.threads, (warm_up,))) is not None
    assert warmed_module in warm.pop("modules") and warmed_module not in plain.pop("modules")
    # Where the warm worker's compiles go: its own folder, as in a worker that imported the compilers itself.
    fresh = seen_from_inside(tmp_path / "fresh", True, monkeypatch, look=LOOK_AROUND + COMPILE_PATHS)
    paths = fresh.pop("compile_paths")
    assert warm.pop("compile_paths") == paths and all(path.startswith("<workdir>") for path in paths.values()), paths
    for view in (warm, plain):
        del view["tmp"]  # a compiling worker's folder holds its copy of the compile cache
    assert warm == plain


def test_forked_workers_do_not_share_randomness(tmp_path, monkeypatch):
    draws = []
    for name in ("first", "second"):
        workdir = tmp_path / name
        workdir.mkdir()
        process = started(workdir, True, monkeypatch)
        try:
            assert ready(process) == ("ready",)
            assert request(process, ("exec", "import random, numpy\nDRAWS = [random.random(), float(numpy.random.rand())]")) == ("ok",)
            draws.append(request(process, ("value", "DRAWS"))[1])
        finally:
            process.kill()
    assert draws[0][0] != draws[1][0] and draws[0][1] != draws[1][1], draws


def test_a_forked_worker_reports_how_it_ended(tmp_path, monkeypatch):
    process = started(tmp_path, True, monkeypatch)
    assert ready(process) == ("ready",)
    protocol.write_frame(process.to_worker, protocol.encode_for_worker(("exec", "import ctypes\nctypes.string_at(0)\n")))
    assert process.process.wait(timeout=60) == -11
    assert process.exit_description() == "killed by signal 11"
    process.kill()
    again = started(tmp_path, True, monkeypatch)
    again.kill()
    assert again.process.poll() == -9 and again.exit_description().startswith("killed by signal 9")


def test_a_memory_limit_below_the_interpreters_needs_stops_a_forked_worker_before_it_is_ready(tmp_path, monkeypatch):
    """As a fresh interpreter cannot import torch under such a limit, and says so in its log."""
    process = started(tmp_path, True, monkeypatch, sandbox.Limits(memory_bytes=64 * 1024**2))
    with pytest.raises(protocol.ChannelClosed):
        ready(process)
    assert process.process.wait(timeout=60) == 1
    process.kill()
    assert "memory limit" in sandbox.log_tail(tmp_path), sandbox.log_tail(tmp_path)


def test_a_dead_server_is_replaced(tmp_path, monkeypatch):
    first = forkserver.server(LIMITS.threads)
    first.process.kill()
    first.process.wait()
    process = started(tmp_path, True, monkeypatch)
    try:
        assert ready(process) == ("ready",)
    finally:
        process.kill()
    assert forkserver.server(LIMITS.threads) is not first


def test_a_server_leaves_no_file_behind(tmp_path, monkeypatch):
    """A pool process ends without running atexit handlers: the server's start-up log is gone once it is ready."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = forkserver.ForkServer(LIMITS.threads)
    try:
        assert server.alive() and list(tmp_path.iterdir()) == []
    finally:
        server.stop()


# Run as `autograder grade` runs, in an interpreter of its own: a pytest worker that graded before holds
# multiprocessing's fork server from then, and an earlier test's clean-up may have stopped the plain server
# that fork server started (its pool processes then start their own, as without the preload).
SHARED_SERVER_PROBE = """
import concurrent.futures, json, os, time
from autograder import forkserver, grading, sandbox

def plain_server_pid(_):
    time.sleep(0.5)  # both pool processes get a call
    server = forkserver.server(sandbox.Limits().threads)
    return os.getpid(), server.process.pid if server is not None and server.alive() else None

if __name__ == "__main__":
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=grading._pool_context()) as pool:
        print(json.dumps(list(pool.map(plain_server_pid, range(4)))))
"""


def test_a_grading_runs_pool_processes_share_one_plain_server(tmp_path):
    """Started once in multiprocessing's fork server (autograder._pool_preload), not once per pool process."""
    import json
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(SHARED_SERVER_PROBE)
    run = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    answers = json.loads(run.stdout.strip().splitlines()[-1])
    pool_processes, servers = {pid for pid, _ in answers}, {server for _, server in answers}
    assert len(pool_processes) == 2 and len(servers) == 1 and None not in servers, answers


_KEPT = []  # in the pool process: the worker's handles stay open until that process dies


def _start_a_spinning_worker(workdir: str) -> tuple[int, int]:
    """In a pool process: a worker forked from the shared server, busy in an endless loop; (this pid, its waiter's)."""
    process = sandbox.start_worker(Path(workdir), LIMITS, [], [])
    assert ready(process) == ("ready",)
    protocol.write_frame(process.to_worker, protocol.encode_for_worker(("exec", "while True:\n    pass\n")))
    _KEPT.append(process)
    return os.getpid(), process.process.pid


def test_a_killed_pool_processs_workers_do_not_outlive_it(tmp_path):
    """The shared server outlives a pool process; the waiter kills the worker once the process that asked for it is gone."""
    import concurrent.futures
    import signal

    from autograder import grading
    from autograder.clock import children

    pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=grading._pool_context())
    try:
        pool_process, waiter = pool.submit(_start_a_spinning_worker, str(tmp_path)).result(timeout=180)
        assert children(waiter), "the worker runs"
        os.kill(pool_process, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while _exists(waiter) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _exists(waiter), "the worker (and its waiter) still run after the pool process that started it died"
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# Every way graded code could reach the grader's counting code (issue 46: autograder.profiling answered count_ops).
REACH_THE_GRADER = """
import importlib, sys
def _try(step):
    try:
        step()
    except ImportError as error:
        return type(error).__name__
    return "reached"
def _after_removing_the_hook():
    sys.meta_path[:] = [finder for finder in sys.meta_path if type(finder).__module__ != "autograder.worker"]
    from autograder.profiling import counted_call  # noqa: F401
def _from_the_file():
    import gpucourse, pathlib
    grader = pathlib.Path(gpucourse.__file__).resolve().parent.parent / "autograder" / "profiling.py"
    if "def counted_call" not in (grader.read_text() if grader.exists() else ""):  # hidden: /dev/null in its place
        raise ImportError("not there")
REACHED = {"import": _try(lambda: importlib.import_module("autograder")),
           "profiling": _try(lambda: importlib.import_module("autograder.profiling")),
           "loaded": sorted(name for name in sys.modules if name.startswith("autograder")),
           "file": _try(_from_the_file), "unhooked": _try(_after_removing_the_hook)}
"""


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "own"])
def test_a_worker_that_runs_student_code_cannot_reach_the_grader(forked, tmp_path, monkeypatch):
    """Sealed (the default): no module of the grader's package is loaded, importable, or readable from its files, even
    after the import hook is removed. A profile runner (grader_modules) imports the grader's counting code."""
    reached = {}
    for grader_modules in (False, True):
        workdir = tmp_path / str(grader_modules)
        workdir.mkdir()
        process = started(workdir, forked, monkeypatch, grader_modules=grader_modules)
        try:
            assert ready(process) == ("ready",)
            assert request(process, ("exec", REACH_THE_GRADER)) == ("ok",)
            kind, reached[grader_modules] = request(process, ("value", "REACHED"))
            assert kind == "return", reached
        finally:
            process.kill()
    contained = sandbox.isolation()[0] in sandbox.CONTAINED
    sealed = {"import": "ModuleNotFoundError", "profiling": "ModuleNotFoundError", "loaded": [],
              "file": "ImportError" if contained else "reached", "unhooked": "ModuleNotFoundError" if contained else "reached"}
    assert reached[False] == sealed
    assert reached[True]["profiling"] == "reached" and reached[True]["unhooked"] == "reached"


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "own"])
def test_a_workers_pipes_hold_a_block_of_outputs_in_few_hand_overs(tmp_path, monkeypatch, forked):
    """Both routes get pipes of sandbox.PIPE_BYTES, not Linux's 64 KiB: a timed block's outputs (16 MB in module 06)
    then cross in 1 MiB steps, each a wake-up of the other side."""
    import fcntl

    import torch

    process = started(tmp_path, forked, monkeypatch)
    try:
        assert ready(process) == ("ready",)
        sizes = {fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) for fd in (process.to_worker, process.from_worker)}
        assert sizes == {sandbox.PIPE_BYTES}
        big = torch.arange(3 << 20, dtype=torch.float32)  # 12 MiB: many pipe-fulls, each way
        assert request(process, ("exec", "import torch\nBIG = torch.arange(3 << 20, dtype=torch.float32)")) == ("ok",)
        kind, value = request(process, ("value", "BIG"))
        assert kind == "return" and torch.equal(protocol.unpack_tensor(value), big)
    finally:
        process.kill()
