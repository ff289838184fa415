"""The hooks between this package's helpers and the grader's stand-ins, declared once.

Under grading, a test's name for a student's function (or a setup function, a kernel) is bound to a stand-in: an
object of the grader's that runs the real thing in another process (:mod:`autograder.standins`). A helper of this
package that must run, time or count that function there asks the object for a hook, by name, through
:func:`stand_in_hook`; an object without the hook (the student's own function, in their notebook) runs here, as the
helper's own code says. Each hook is a method of :class:`GraderStandIn`, documented there with who calls it.

A stand-in class subclasses :class:`GraderStandIn` and overrides the hooks that apply to what it stands for; a hook it
leaves alone stays the interface's own, which :func:`stand_in_hook` reports as absent (and which raises if called).
This package never imports the grader: the grader's classes implement this interface, not the other way round.
"""

from __future__ import annotations

import functools
from typing import Protocol


def _hook(method):
    """Marks a method of :class:`GraderStandIn` as a hook (the one place hooks are declared)."""
    method.grader_hook = True
    return method


class GraderStandIn(Protocol):
    """What a grader's stand-in for a function may offer the package's helpers. Every method is one hook."""

    @_hook
    def timed_block(self, calls) -> tuple[float, list]:
        """(seconds, outputs) of ``self(*args)`` for each args in ``calls``, timed by the grader's clock around the
        calls alone, in the process where the function runs. Called by :func:`gpucourse.timing.compare_speed` and the
        other timers (``timing._timed_block``)."""
        raise NotImplementedError(f"{type(self).__name__} has no timed_block hook")

    @_hook
    def call_profiled(self, *args, top_level: bool = False, eager: bool = False) -> tuple[object, dict[str, int]]:
        """(output, {ATen op: calls}) of one call, counted by the grader's profiler in a process that holds only
        the setup cells and the function's checked answer cells. Called by :func:`gpucourse.check.counted_call`."""
        raise NotImplementedError(f"{type(self).__name__} has no call_profiled hook")

    @_hook
    def torch_only(self):
        """The function as it runs where only the setup cells and its answer cells, checked to be torch
        operations, ran. Called by :func:`gpucourse.check.torch_only`."""
        raise NotImplementedError(f"{type(self).__name__} has no torch_only hook")

    @_hook
    def njit_only(self):
        """The function as it runs where only the setup cells and its answer cell, checked to be the student's own
        compiled loops, ran. Called by :func:`gpucourse.check.njit_only`."""
        raise NotImplementedError(f"{type(self).__name__} has no njit_only hook")

    @_hook
    def numpy_only(self):
        """The function as it runs where only the setup cells and its answer cell, checked to be NumPy code alone, ran.
        Called by :func:`gpucourse.check.numpy_only`."""
        raise NotImplementedError(f"{type(self).__name__} has no numpy_only hook")

    @_hook
    def memory_capped(self, budget_bytes: int):
        """The function as it runs where only the setup cells and its answer cells ran, after the grader capped that
        process's memory at ``budget_bytes`` beyond what the setup used (a call that allocates more fails there).
        Called by :func:`gpucourse.check.memory_capped`."""
        raise NotImplementedError(f"{type(self).__name__} has no memory_capped hook")

    @_hook
    def in_place(self):
        """The function whose calls write back into the caller's tensor arguments what the call left in them: it runs
        in another process, on copies of its arguments. Called by :func:`gpucourse.check.in_place`."""
        raise NotImplementedError(f"{type(self).__name__} has no in_place hook")

    @_hook
    def mma_calls(self, a, b) -> int:
        """How many times ``self(a, b, mma)`` calls the intrinsic, logged where only its checked cell ran and checked
        by the grader. Called by :func:`gpucourse.check.mma_calls`."""
        raise NotImplementedError(f"{type(self).__name__} has no mma_calls hook")

    @_hook
    def mma_counted(self):
        """The function called with the grader's counting intrinsic, its tally started and read where it runs
        (a :class:`gpucourse.check.MmaCounted`). Called by :func:`gpucourse.check.mma_counted`."""
        raise NotImplementedError(f"{type(self).__name__} has no mma_counted hook")

    @_hook
    def answers_only(self, names, seconds: float | None = None, gated: bool = False):
        """A setup function, called where only the setup cells and the answer cells defining ``names`` ran, each
        call within ``seconds`` of the grader's clock. Called by :func:`gpucourse.check.answers_only`."""
        raise NotImplementedError(f"{type(self).__name__} has no answers_only hook")

    @_hook
    def call_with_streams(self, dispatch, *args):
        """A call whose :mod:`gpucourse.streams` calls are sent to ``dispatch``, in the caller's process, which
        records the timeline itself. Called by :meth:`gpucourse.streams.Streams.call`."""
        raise NotImplementedError(f"{type(self).__name__} has no call_with_streams hook")

    @_hook
    def drive_iterator(self, plan):
        """The generator the function returns, consumed as ``plan`` asks, with the loads' latency and the compute
        kept in the caller's process (:mod:`autograder.loading`). Called by :func:`gpucourse.loading.run_loader`."""
        raise NotImplementedError(f"{type(self).__name__} has no drive_iterator hook")

    @_hook
    def __kernel_source__(self):
        """The kernel's checked, self-contained :class:`~gpucourse.kernel_text.KernelSource`, from where it is
        held. Called by :func:`gpucourse.kernel_source.kernel_source` (so :func:`gpucourse.kernels.compile_report`)."""
        raise NotImplementedError(f"{type(self).__name__} has no __kernel_source__ hook")


HOOKS = frozenset(name for name, value in vars(GraderStandIn).items() if getattr(value, "grader_hook", False))


def stand_in_hook(obj, name: str):
    """``obj``'s hook ``name`` (one of :data:`HOOKS`), bound to it, or None where ``obj`` offers none.

    A special name (``__kernel_source__``) is looked up on the object's type, as Python looks up special methods;
    the others on the object. A hook a stand-in did not override is the interface's own: None.
    Raises ValueError for a name that is not a declared hook.
    """
    if name not in HOOKS:
        raise ValueError(f"{name!r} is not a hook declared by gpucourse.hooks.GraderStandIn ({', '.join(sorted(HOOKS))})")
    if name.startswith("__"):
        method = getattr(type(obj), name, None)
        hook = None if method is None else functools.partial(method, obj) if not hasattr(method, "__get__") else method.__get__(obj, type(obj))
    else:
        hook = getattr(obj, name, None)
    return None if getattr(hook, "__func__", None) is vars(GraderStandIn)[name] else hook
