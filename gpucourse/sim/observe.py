"""Watching what simulated kernels do: observers opened around kernel launches.

An observer is opened with a ``with`` block (``record_kernel_calls()``, ``trace()``) and sees
every launch of numba's CUDA simulator inside it. The autograder launches a student's kernel
in another process: it asks that process to open observers of the same kinds around the
launch (:func:`open_kinds`, :func:`observing`), and hands what they saw back to the open
observers here (:func:`absorb`). So a test reads the same numbers in a notebook and when graded.
"""

from __future__ import annotations

import contextlib
import threading

_OPEN: list["Observer"] = []  # observers of the enclosing with-blocks, innermost last
_KINDS: dict[str, type] = {}


class Observer:
    """Base of the things a ``with`` block can watch launches with."""

    kind = ""
    available = True  # False where the simulator is not in use: nothing can be observed

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _KINDS[cls.kind] = cls

    def start(self) -> None:
        """Begin watching (the outermost observer of a kind installs the instrumentation)."""

    def stop(self) -> None:
        """Stop watching and remove what :meth:`start` installed."""

    def export(self):
        """What was observed, as plain data (lists, dicts, numbers) for another process."""
        raise NotImplementedError

    def absorb(self, data) -> None:
        """Add what an observer of the same kind saw elsewhere."""
        raise NotImplementedError


def simulator_in_use() -> bool:
    from ..kernels import simulator_active

    return simulator_active()


@contextlib.contextmanager
def observe(observer: Observer):
    """Open ``observer`` for the duration of the block; yields it."""
    observer.available = simulator_in_use()
    first_of_kind = not any(type(other) is type(observer) for other in _OPEN)
    if observer.available and first_of_kind:
        observer.start()
    _OPEN.append(observer)
    try:
        yield observer
    finally:
        del _OPEN[next(i for i, o in enumerate(_OPEN) if o is observer)]  # identity, not ==
        if observer.available and first_of_kind:
            observer.stop()


def open_observers(kind: str) -> list[Observer]:
    return [observer for observer in _OPEN if observer.kind == kind]


def open_kinds() -> tuple[str, ...]:
    """The kinds of observer open now (the autograder opens the same in the student's worker)."""
    return tuple(dict.fromkeys(observer.kind for observer in _OPEN))


@contextlib.contextmanager
def observing(kinds):
    """Open one fresh observer of each kind (in the student's worker, around a launch)."""
    with contextlib.ExitStack() as stack:
        yield {kind: stack.enter_context(observe(_KINDS[kind]())) for kind in kinds if kind in _KINDS}


def absorb(results: dict) -> None:
    """Give what observers saw in another process (a simulator) to the open observers of the same
    kinds; they are then available even where this process runs kernels on a GPU."""
    for kind, data in results.items():
        for observer in open_observers(str(kind)):
            observer.absorb(data)
            observer.available = True


# -- counting intrinsics ---------------------------------------------------------------------

# The simulator's stand-ins for CUDA intrinsics: (class in numba.cuda.simulator.kernelapi,
# method, name in the counts).
_COUNTED = (
    ("FakeCUDAAtomic", "add", "atomic.add"), ("FakeCUDAAtomic", "sub", "atomic.sub"),
    ("FakeCUDAAtomic", "max", "atomic.max"), ("FakeCUDAAtomic", "min", "atomic.min"),
    ("FakeCUDAAtomic", "inc", "atomic.inc"), ("FakeCUDAAtomic", "compare_and_swap", "atomic.compare_and_swap"),
    ("FakeCUDAShared", "array", "shared.array"), ("FakeCUDAModule", "syncthreads", "syncthreads"),
)


class KernelCalls(Observer, dict):
    """Counts of CUDA intrinsics (``"atomic.add"``, ``"shared.array"``, ``"syncthreads"``, …)
    called by all threads of the kernels launched in a :func:`record_kernel_calls` block.

    ``available`` is False on a real GPU: compiled kernels cannot be counted from Python,
    so a check built on these counts must not run there.
    """

    kind = "calls"

    def __missing__(self, name: str) -> int:
        return 0

    def start(self) -> None:
        from numba.cuda.simulator import kernelapi

        lock = threading.Lock()  # simulated threads are real Python threads
        self._patched = []
        for class_name, method, name in _COUNTED:
            owner = getattr(kernelapi, class_name)
            original = owner.__dict__.get(method)
            if original is not None:
                self._patched.append((owner, method, original))
                setattr(owner, method, _counting(original, name, lock))

    def stop(self) -> None:
        for owner, method, original in reversed(self._patched):
            setattr(owner, method, original)

    def export(self) -> dict[str, int]:
        return dict(self)

    def absorb(self, data) -> None:
        for name, count in dict(data).items():
            self[str(name)] = self[str(name)] + int(count)


def _counting(original, name: str, lock):
    def counted(*args, **kwargs):
        with lock:
            for recorder in open_observers(KernelCalls.kind):
                recorder[name] = recorder[name] + 1
        return original(*args, **kwargs)

    return counted


def record_kernel_calls():
    """Count the intrinsics that simulated kernels call inside the block.

    ``with record_kernel_calls() as calls: kernel[4, 64](x, out)`` then ``calls["syncthreads"]``
    is how many times a thread reached a barrier. Works in numba's CUDA simulator only;
    elsewhere ``calls.available`` is False and every count stays 0.
    """
    return observe(KernelCalls())


def recording() -> bool:
    """True inside a :func:`record_kernel_calls` block."""
    return bool(open_observers(KernelCalls.kind))
