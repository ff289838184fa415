"""Watching what simulated kernels do: observers opened around kernel launches.

An observer is opened with a ``with`` block (``record_kernel_calls()``, ``trace()``) and sees
every launch of numba's CUDA simulator inside it. The autograder launches a student's kernel
in another process: it asks that process to open observers of the same kinds around the
launch (:func:`open_kinds`, :func:`observing`), and hands what they saw back to the open
observers here (:func:`absorb`). So a test reads the same numbers in a notebook and when graded.
"""

from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np

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
                below = shared_array_below(original) if name == "shared.array" else original
                setattr(owner, method, _counting(below, name, lock))

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

    return wraps_shared_array(counted)  # harmless for the other intrinsics: only shared.array looks at its callers


# -- shared arrays under wrappers ------------------------------------------------------------

# numba's simulator tells a block's shared arrays apart by the source line that asked for one: its caller's line.
# Under a wrapper (a counter, the tracer) that caller is the wrapper, and every array of a kernel would be the
# first one's memory. Wrappers are marked (their code objects), and the array is keyed by the first line outside them.
_SHARED_WRAPPERS: set = set()
_ALLOCATION_LOCK = threading.Lock()  # a block's threads are Python threads: the first two must not both allocate


def wraps_shared_array(function):
    """Mark ``function`` as a wrapper of ``FakeCUDAShared.array`` (see :func:`shared_array_below`)."""
    _SHARED_WRAPPERS.add(function.__code__)
    return function


def shared_array_below(previous):
    """What a wrapper of ``FakeCUDAShared.array`` should call: the wrapper installed before it, or, in place of
    numba's own, :func:`kernel_line_shared_array`."""
    return previous if getattr(previous, "__code__", None) in _SHARED_WRAPPERS else kernel_line_shared_array


def kernel_line_shared_array(shared, shape, dtype, alignment=None):
    """numba's ``FakeCUDAShared.array``, keyed by the kernel's line whatever wraps it."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")  # numba's own refusal
    dtype = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else np.dtype(dtype)
    if shape == 0:  # dynamic shared memory: one buffer for every such array, as numba has it
        return np.frombuffer(shared._dynshared.data, dtype=dtype, count=shared._dynshared_size // dtype.itemsize)
    frame = sys._getframe(1)
    while frame.f_code in _SHARED_WRAPPERS:
        frame = frame.f_back
    line = (frame.f_code.co_filename, frame.f_lineno)
    with _ALLOCATION_LOCK:
        if line not in shared._allocations:
            shared._allocations[line] = np.empty(shape, dtype)
        return shared._allocations[line]


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
