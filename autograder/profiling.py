"""The grader's own op counts (module 06): evidence for ``fused_tail``'s bound, references for hidden tests.

Counted the way the course teaches students to read a profile: every ATen op the profiler records
during one call, nested ops included (the "# of Calls" column of ``prof.key_averages()``); a Triton
kernel's launch counts as one ``triton::<kernel>`` (:mod:`autograder.triton_runner`).
This lives in :mod:`autograder`, not in the student-facing package, because counting ops is what
module 06's assignment asks students to write (``count_ops``, ``dominant_op``).
"""

from __future__ import annotations

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
