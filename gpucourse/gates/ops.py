"""The rules an op count is read by (modules 06, 07, 08, 09): which ops a count holds, and which of them are work.

Both sides use them: the grader's runners count with :mod:`autograder.profiling` and label Triton launches here
(:func:`install_launch_hooks`), and :mod:`gpucourse.check` reads the counts a test gets, in a notebook and under
grading alike.

What is not here, by design: a count of every ATen op of one call, nested ones included, and each op's self
time. Those are module 06's assignment (``count_ops``, ``dominant_op``), so they stay with the grader
(:func:`autograder.profiling.op_counts`, :func:`autograder.profiling.self_times`), which a student's code cannot
import. The counts here leave out the ops a computing op runs inside (:func:`counted_top_level`,
:func:`launched_ops`), so none of them is that answer.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter

import torch

LAUNCH_PREFIX = "triton::"  # each launch is a profiler range "triton::<kernel>": the ops inside are the launch's own
GRID_LABEL = "gpucourse::grid"  # a grid function's range inside a launch: its ops are the launcher's

# ---------------------------------------------------------------------------------------------
# Counts of the ops called from Python, and of a Triton launcher's launches


def counted_top_level(fn, *args) -> tuple[object, dict[str, int]]:
    """``fn(*args)`` once, with the ATen ops it called from Python, not those an op calls inside (``aten::im2col``
    selects each image of the batch: a count of every op grows with the batch even where no Python loop does),
    and each Triton launch as ``triton::<kernel>``: (output, {op: calls})."""
    return _counted(fn, args, launcher=False)


def launched_ops(fn, *args) -> dict[str, int]:
    """{op: calls} of one call ``fn(*args)`` of a Triton launcher (modules 06, 07): each kernel launched as
    ``triton::<kernel>``, and the ATen ops run outside the launches, less those a computing op runs inside
    (it shows as itself), so that an allocation or view that copies inside (``aten::contiguous`` by
    ``aten::clone``) shows the copy. :func:`work_outside_kernels` finds a computing op here exactly where it
    finds one in the grader's count of every op (:func:`autograder.profiling.counted_call`)."""
    install_launch_hooks()
    return _counted(fn, args, launcher=True)[1]


def _counted(fn, args, launcher: bool) -> tuple[object, dict[str, int]]:
    from torch.profiler import ProfilerActivity, profile

    from gpucourse import devices

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        output = fn(*args)
        devices.synchronize()
    events = [event for event in prof.events() if event.name.startswith(("aten::", LAUNCH_PREFIX))]
    # A Triton kernel's launch counts as itself: the ATen ops inside are its interpreter's.
    events = [event for event in events if not inside_a_launch(event) and not _inside_an_op(event, launcher)]
    return output, dict(Counter(event.name for event in events))


def _inside_an_op(event, launcher: bool) -> bool:
    """Whether ``event`` ran inside an ATen op (``launcher``: inside one that computes, :data:`ALLOCATION_OPS` aside)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::") and not (launcher and parent.name in ALLOCATION_OPS):
            return True
        parent = parent.cpu_parent
    return False


# ---------------------------------------------------------------------------------------------
# Which ops of a count are work


# Ops that hand out memory without writing it: an allocation is no pass over memory.
ALLOCATIONS = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::empty_permuted",
                         "aten::new_empty", "aten::new_empty_strided"})


def moving_ops(ops: dict[str, int]) -> dict[str, int]:
    """The ops of a count of every op (nested ones included: :func:`autograder.profiling.counted_call` without
    ``top_level``) that may move tensor data: all but allocations (:data:`ALLOCATIONS`) and the ops that return their
    input or a view of it (:func:`returns_its_input`).

    So what a bound on passes over memory counts is the work, not bookkeeping: ``torch.compile(dynamic=True)``
    lifts a Python float into a tensor on every call (``aten::empty``, ``aten::to``, ``aten::lift_fresh``: one
    fused pass besides, issue 46), as ``torch.tensor(0.7)`` does. The rule holds only for a count with nested
    ops: an op of that kind that does copy (``.to(torch.float64)``, ``.contiguous()`` of a transposed tensor,
    a ``reshape`` that cannot view) copies by an op it calls inside (``aten::_to_copy``, ``aten::clone``,
    ``aten::copy_``), which is counted. A count holds no sizes, so a copy counts however small: eager
    ``t * 0.7`` on float32 converts the float by a copy of one element (``aten::_to_copy``, ``aten::copy_``)."""
    return {name: calls for name, calls in ops.items() if name not in ALLOCATIONS and not returns_its_input(name)}


@functools.cache
def returns_its_input(name: str) -> bool:
    """Every overload of the ATen op ``name`` that returns tensors returns its input or a view of it and writes no
    tensor's data, by torch's own schema and tags: it writes nothing (``Tensor(a) self -> Tensor(a)``: views,
    ``detach``, ``alias``, ``lift_fresh``, and ``to``, ``contiguous`` and ``reshape``, which copy, by other ops,
    only when they must), or it changes only its input's metadata (the ``inplace_view`` tag: ``detach_``,
    ``unsqueeze_``, ``as_strided_``; ``torch.tensor(0.7)`` runs a ``detach_``)."""
    packet = getattr(torch.ops.aten, name.removeprefix("aten::"), None) if name.startswith("aten::") else None
    if packet is None or not hasattr(packet, "overloads"):
        return False
    overloads = [getattr(packet, overload) for overload in packet.overloads()]
    overloads = [op for op in overloads if any("Tensor" in str(result.type) for result in op._schema.returns)]

    def writes_nothing(schema) -> bool:
        return (all(result.alias_info is not None and not result.alias_info.is_write for result in schema.returns)
                and not any(argument.alias_info is not None and argument.alias_info.is_write for argument in schema.arguments))

    return bool(overloads) and all(torch.Tag.inplace_view in op.tags or writes_nothing(op._schema) for op in overloads)


# Ops that allocate, fill with a constant or view memory: a launcher needs them and none computes a result.
ALLOCATION_OPS = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros", "aten::zeros_like", "aten::zero_",
    "aten::full", "aten::full_like", "aten::fill_", "aten::ones", "aten::ones_like",
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::flatten", "aten::alias", "aten::slice",
    "aten::select", "aten::narrow", "aten::contiguous", "aten::detach", "aten::lift_fresh", "aten::resolve_conj",
    "aten::resolve_neg",
})


def work_outside_kernels(ops: dict[str, int]) -> dict[str, int]:
    """The ATen ops of a launcher's count (:func:`launched_ops`, or the grader's) that compute something
    (not an allocation, a fill or a view)."""
    return {name: calls for name, calls in ops.items() if name.startswith("aten::") and name not in ALLOCATION_OPS}


# ---------------------------------------------------------------------------------------------
# Triton launches, labelled for the profiler

_state = threading.local()  # the running launch's tensors' memory, for the grader's bounds checks


def _kernel_classes():
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction, InterpretedFunction


def install_launch_hooks() -> None:
    """Wrap ``run`` of Triton's kernel classes once: each launch is labelled for the profiler, recorded,
    and its tensors' memory noted (:func:`launch_ranges`) for the grader's bounds checks
    (:func:`autograder.triton_runner.install_bounds_checks`)."""
    for cls in _kernel_classes():
        if getattr(cls.run, "_gpucourse_hook", False):
            continue
        cls.run = _hooked(cls.run)


def launch_ranges() -> list[tuple[int, int]] | None:
    """(start address, bytes) of each tensor the running launch was given, or None outside a launch."""
    return getattr(_state, "ranges", None)


def _hooked(original):
    def run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        tensors = [value for value in [*args, *kwargs.values()] if isinstance(value, torch.Tensor)]
        outer = getattr(_state, "ranges", None)
        _state.ranges = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in tensors]
        if callable(grid):  # Triton calls it inside the launch: its ops are the launcher's, not the kernel's
            grid = _outside_the_launch(grid)
        try:
            with torch.profiler.record_function(LAUNCH_PREFIX + getattr(getattr(self, "fn", None), "__name__", "?")):
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _state.ranges = outer

    run._gpucourse_hook = True
    return run


def _outside_the_launch(grid):
    def labelled(*args, **kwargs):
        with torch.profiler.record_function(GRID_LABEL):
            return grid(*args, **kwargs)

    return labelled


def inside_a_launch(event) -> bool:
    """Whether a profiler event ran inside a kernel's launch (the interpreter's copies), not in its grid function."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == GRID_LABEL:
            return False
        if parent.name.startswith(LAUNCH_PREFIX):
            return True
        parent = parent.cpu_parent
    return False
