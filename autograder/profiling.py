"""The grader's own op counts (module 06): evidence for ``fused_tail``'s bound, references for hidden tests.

Counted the way the course teaches students to read a profile: every ATen op the profiler records
during one call, nested ops included (the "# of Calls" column of ``prof.key_averages()``); a Triton
kernel's launch counts as one ``triton::<kernel>`` (:func:`gpucourse.gates.ops.install_launch_hooks`).
An item that bounds the passes over memory (module 06's ``fused_tail``) counts those ops less the ones that
move no tensor data (:func:`gpucourse.gates.ops.moving_ops`).
This lives in :mod:`autograder`, not in the student-facing package, because counting every op and timing
each is what module 06's assignment asks students to write (``count_ops``: :func:`op_counts`, ``dominant_op``:
:func:`self_times`); the rules that read a count, and the counts that are no answer (the ops called from Python,
a launcher's), are :mod:`gpucourse.gates.ops`, which both sides import.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from gpucourse import devices
from gpucourse.gates.ops import LAUNCH_PREFIX, counted_top_level, inside_a_launch


def _profiled(fn, *args):
    """(output, every ATen op's and launch's event of one call ``fn(*args)``), profiled as :mod:`gpucourse.gates.ops`
    profiles; the nested events, counted or timed, are module 06's answers, so this stays here."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        output = fn(*args)
        devices.synchronize()
    events = [event for event in prof.events() if event.name.startswith(("aten::", LAUNCH_PREFIX))]
    # A Triton kernel's launch counts as itself: the ATen ops inside are its interpreter's (as gpucourse.gates.ops counts).
    return output, [event for event in events if not inside_a_launch(event)]


def op_counts(fn, *args) -> dict[str, int]:
    """How many times each ATen op runs in one call ``fn(*args)``."""
    return counted_call(fn, *args)[1]


def counted_call(fn, *args, top_level: bool = False) -> tuple[object, dict[str, int]]:
    """``fn(*args)`` once, with the ATen ops it ran: (output, {op: calls}).

    ``top_level``: only the ops called from Python, not those an op calls inside
    (:func:`gpucourse.gates.ops.counted_top_level`).
    """
    if top_level:
        return counted_top_level(fn, *args)
    output, events = _profiled(fn, *args)
    return output, dict(Counter(event.name for event in events))


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
