"""Deadlines that a busy machine cannot turn against honest code.

An instructor's server grades with as many jobs as it has cores, often beside other work; a
CI machine runs tests in parallel. Under such load a correct student cell that takes 3 s on a
quiet machine can take 10 s of wall time, and a wall-clock limit would cost it its points.

So the limits on student code are counted on a :class:`FairClock`: in *quiet-machine
seconds*. Each wall second counts ``1 / slowdown``, where ``slowdown`` is what one busy
thread suffers from the tasks that compete for this machine's cores:

    slowdown = clamp((others + 1) / cores, 1, MAX_SLOWDOWN)

``others`` counts the runnable tasks that do *not* belong to this grading process or to the
workers it started, sampled a few times a second from ``/proc``. Excluding our own workers
matters: a student's fork bomb loads the machine, but that load must not slow the clock that
stops it. ``MAX_SLOWDOWN`` bounds the stretch, so a runaway is stopped within
``MAX_SLOWDOWN`` times its limit however busy the machine is.

A sleeping hang is charged like any other code (sleep is not slowed by load, but it is not
told apart either); that only lets it run a little longer on a busy machine, never costs an
honest answer anything. Where ``/proc`` is missing (macOS), the clock is the wall clock.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

MAX_SLOWDOWN = 6.0
SAMPLE_SECONDS = 0.2
# A second measurement after a burst of load waits for the burst to pass: until the slowdown has
# stayed at CALM_SLOWDOWN (or half the first measurement's) for CALM_HOLD_SECONDS, at most
# CALM_WAIT_SECONDS of wall time. A first measurement at CALM_SLOWDOWN or less is retried at once:
# a CI machine running tests in parallel is always that busy, and waiting there would buy nothing.
CALM_SLOWDOWN = 2.0
CALM_HOLD_SECONDS = 1.0
CALM_WAIT_SECONDS = 15.0
_PROC = Path("/proc")


def cores() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_runnable() -> int | None:
    """Tasks runnable on the whole machine right now (``procs_running``), or None without /proc."""
    return _proc_counter("stat", "procs_running")


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (``/proc/vmstat``), or None."""
    return _proc_counter("vmstat", "oom_kill")


def _proc_counter(file: str, name: str) -> int | None:
    """The number on the line ``<name> <number>`` of ``/proc/<file>``, or None."""
    try:
        for line in (_PROC / file).read_text().splitlines():
            if line.split(maxsplit=1)[:1] == [name]:
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _task_states(pid: int) -> Iterable[tuple[int, str]]:
    """(tid, state letter) of every thread of process ``pid``."""
    try:
        tids = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return []
    states = []
    for tid in tids:
        try:
            stat = (_PROC / str(pid) / "task" / tid / "stat").read_text()
        except OSError:
            continue
        states.append((int(tid), stat[stat.rfind(")") + 2]))  # the name may hold spaces and ")"
    return states


def children(pid: int) -> list[int]:
    """The children of every thread of process ``pid`` (a child started from another thread counts too)."""
    found = []
    for tid, _ in _task_states(pid):
        try:
            found += [int(child) for child in (_PROC / str(pid) / "task" / str(tid) / "children").read_text().split()]
        except OSError:
            continue
    return found


def _trees(roots: Iterable[int]) -> Iterable[list[tuple[int, str]]]:
    """The threads (tid, state letter) of each process in the trees below ``roots`` (each root included)."""
    seen, pending = set(), list(roots)
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        tasks = _task_states(pid)
        if tasks:  # an ended process has no task folder
            yield tasks
        pending += children(pid)


def _tasks_in_trees(roots: Iterable[int]) -> Iterable[str]:
    """The state of every thread in the process trees below ``roots`` (each root included)."""
    for tasks in _trees(roots):
        yield from (state for _, state in tasks)


def runnable_in_trees(roots: Iterable[int]) -> int:
    """Runnable threads in the process trees below ``roots`` (each root included)."""
    return sum(1 for state in _tasks_in_trees(roots) if state == "R")


def threads_in_trees(roots: Iterable[int]) -> int:
    """Threads, runnable or not, in the process trees below ``roots``: read from /proc, not asked of them."""
    return sum(1 for state in _tasks_in_trees(roots) if state not in ("Z", "X"))


def processes_in_trees(roots: Iterable[int]) -> int:
    """Processes in the trees below ``roots``, zombies included (each holds a slot of the process limit
    until it is waited for): read from /proc, not asked of them."""
    return sum(1 for _ in _trees(roots))


class FairClock:
    """Quiet-machine seconds since the clock started (see the module's docstring).

    ``own_roots`` returns the pids of the processes this clock's owner started (its workers);
    their runnable tasks and this process's own threads never count as load.
    """

    def __init__(self, own_roots: Callable[[], Iterable[int]] = tuple, *, max_slowdown: float = MAX_SLOWDOWN,
                 sample_seconds: float = SAMPLE_SECONDS):
        self.own_roots, self.max_slowdown, self.sample_seconds = own_roots, max_slowdown, sample_seconds
        self.cores = cores()
        self._lock = threading.Lock()
        self._wall = time.monotonic()
        self._fair = 0.0
        self._slowdown = 1.0
        self.worst_slowdown = 1.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.available = machine_runnable() is not None

    def __enter__(self) -> "FairClock":
        if self.available:
            self._thread = threading.Thread(target=self._sample_forever, name="fair-clock", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def now(self) -> float:
        with self._lock:
            return self._fair + (time.monotonic() - self._wall) / self._slowdown

    @property
    def slowdown(self) -> float:
        return self._slowdown

    def measure_slowdown(self) -> float:
        """The slowdown one busy thread would see now, from load this clock's owner did not cause."""
        total = machine_runnable()
        if total is None:
            return 1.0
        ours = runnable_in_trees([os.getpid(), *self.own_roots()])
        others = max(total - ours, 0)
        return min(max((others + 1) / self.cores, 1.0), self.max_slowdown)

    def mark(self) -> tuple[float, float]:
        """This moment, for :meth:`mean_slowdown`: the wall clock's and this clock's readings."""
        return time.monotonic(), self.now()

    def mean_slowdown(self, since: tuple[float, float]) -> float:
        """The mean slowdown since ``since``, a :meth:`mark` taken then."""
        wall, fair = time.monotonic() - since[0], self.now() - since[1]
        return wall / fair if fair > 0 else 1.0

    def wait_for_calm(self, busy: float) -> float:
        """After a measurement made at mean slowdown ``busy``, wait until other load has fallen (see
        CALM_SLOWDOWN); return the wall seconds waited. Only the sampler's readings are consulted:
        our own workers' load never counts, so a student's code cannot make the grader wait."""
        if not self.available or busy <= CALM_SLOWDOWN:
            return 0.0
        target, started, calm_since = max(CALM_SLOWDOWN, busy / 2), time.monotonic(), None
        while time.monotonic() - started < CALM_WAIT_SECONDS:
            calm_since = (calm_since or time.monotonic()) if self.slowdown <= target else None
            if calm_since is not None and time.monotonic() - calm_since >= CALM_HOLD_SECONDS:
                break
            time.sleep(self.sample_seconds)
        return time.monotonic() - started

    def _advance(self, slowdown: float) -> None:
        with self._lock:
            wall = time.monotonic()
            self._fair += (wall - self._wall) / self._slowdown
            self._wall, self._slowdown = wall, slowdown
            self.worst_slowdown = max(self.worst_slowdown, slowdown)

    def _sample_forever(self) -> None:
        while not self._stop.wait(self.sample_seconds):
            try:
                self._advance(self.measure_slowdown())
            except Exception:  # noqa: BLE001 - a sampling hiccup must not stop the clock
                self._advance(self._slowdown)


class WallClock:
    """The plain wall clock with :class:`FairClock`'s interface (tests, and where fairness is off)."""

    worst_slowdown = slowdown = 1.0
    available = False

    def __init__(self):
        self._start = time.monotonic()

    def __enter__(self) -> "WallClock":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def now(self) -> float:
        return time.monotonic() - self._start

    def mark(self) -> tuple[float, float]:
        return time.monotonic(), self.now()

    def mean_slowdown(self, since: tuple[float, float]) -> float:
        return 1.0

    def wait_for_calm(self, busy: float) -> float:
        return 0.0


def tree_cpu_seconds(roots: Iterable[int]) -> float:
    """CPU time used so far by every process in the trees below ``roots``: threads that ended, and
    children that ended and were reaped (counted in their parent's ``cutime``), included."""
    total, seen, pending = 0.0, set(), list(roots)
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            total += time.clock_gettime(((~pid) << 3) | 2)  # the process's CPU clock (CPUCLOCK_SCHED, all its threads)
        except OSError:
            continue
        total += _reaped_children_cpu(pid)
        pending += children(pid)
    return total


def _reaped_children_cpu(pid: int) -> float:
    """User and system time of ``pid``'s children that ended and were waited for (clock ticks: 10 ms)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(")") + 2:].split()  # from field 3 (state) on; cutime and cstime are fields 16 and 17
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
