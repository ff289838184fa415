"""The grader's own op counts (module 06): evidence for ``fused_tail``'s bound, references for hidden tests.

Counted the way the course teaches students to read a profile: every ATen op the profiler records
during one call, nested ops included (the "# of Calls" column of ``prof.key_averages()``); a Triton
kernel's launch counts as one ``triton::<kernel>`` (:mod:`autograder.triton_runner`).
An item that bounds the passes over memory (module 06's ``fused_tail``) counts those ops less the ones that
move no tensor data (:func:`moving_ops`).
This lives in :mod:`autograder`, not in the student-facing package, because counting ops is what
module 06's assignment asks students to write (``count_ops``, ``dominant_op``).
"""

from __future__ import annotations

import functools
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from gpucourse import devices

from .triton_runner import LAUNCH_PREFIX, inside_a_launch


def _profiled(fn, *args):
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        output = fn(*args)
        devices.synchronize()
    events = [event for event in prof.events() if event.name.startswith(("aten::", LAUNCH_PREFIX))]
    # A Triton kernel's launch (autograder.triton_runner) counts as itself: the ATen ops inside are its interpreter's.
    return output, [event for event in events if not inside_a_launch(event)]


def op_counts(fn, *args) -> dict[str, int]:
    """How many times each ATen op runs in one call ``fn(*args)``."""
    return counted_call(fn, *args)[1]


def counted_call(fn, *args, top_level: bool = False) -> tuple[object, dict[str, int]]:
    """``fn(*args)`` once, with the ATen ops it ran: (output, {op: calls}).

    ``top_level``: only the ops called from Python, not those an op calls inside (``aten::im2col`` selects
    each image of the batch: a count of every op grows with the batch even where no Python loop does).
    """
    output, events = _profiled(fn, *args)
    if top_level:
        events = [event for event in events if not _inside_an_op(event)]
    return output, dict(Counter(event.name for event in events))


def _inside_an_op(event) -> bool:
    return _inside(event, "aten::")


def _inside(event, prefix: str) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(prefix):
            return True
        parent = parent.cpu_parent
    return False


# Ops that hand out memory without writing it: an allocation is no pass over memory.
ALLOCATIONS = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::empty_permuted",
                         "aten::new_empty", "aten::new_empty_strided"})


def moving_ops(ops: dict[str, int]) -> dict[str, int]:
    """The ops of a count of every op (nested ones included: :func:`counted_call` without ``top_level``) that
    may move tensor data: all but allocations (:data:`ALLOCATIONS`) and the ops that return their input or a
    view of it (:func:`returns_its_input`).

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


def self_times(fn, *args) -> dict[str, float]:
    """Each ATen op's self CPU time in one call ``fn(*args)``, in microseconds."""
    totals: Counter = Counter()
    for event in _profiled(fn, *args)[1]:
        totals[event.name] += event.self_cpu_time_total
    return dict(totals)


def fresh_like(value):
    """The same shapes and dtypes with new values: a warm-up call that compiles but cannot prime a cache."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return torch.randn_like(value)
    if isinstance(value, list | tuple):
        return type(value)(fresh_like(item) for item in value)
    return value
