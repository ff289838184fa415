"""A ``torch.profiler`` trace as plain data, for drawing it in a notebook.

:func:`trace_events` turns a finished ``torch.profiler.profile`` into a list of
:class:`TraceEvent` (name, row, start, duration, nesting depth), which
:func:`gpucourse.plots.profile_timeline` draws as the Gantt chart a student would see in
Perfetto. It hands back raw events for drawing only: counting ops or finding the op
that dominates a profile is left to the reader of the profile (and to the assignment).
"""

from __future__ import annotations

from typing import NamedTuple

# Enough bars to read, few enough that most of them carry a label on a notebook-wide figure.
DEFAULT_MAX_EVENTS = 60


class TraceEvent(NamedTuple):
    """One op of a trace: ``row`` names the thread (or GPU stream) it ran on; times in µs from the trace's first kept event."""

    name: str
    row: str
    start_us: float
    duration_us: float
    depth: int  # 0: called from Python; 1: called by a depth-0 op; …


def trace_events(prof, *, max_events: int | None = DEFAULT_MAX_EVENTS, max_ms: float | None = None,
                 max_depth: int | None = None) -> list[TraceEvent]:
    """The events of a finished ``torch.profiler.profile``, in start order, ready for ``plots.profile_timeline``.

    CPU ops get a row per thread ("CPU thread <id>") and their nesting depth from their chain
    of ``cpu_parent``; GPU kernels and copies get a row per device ("GPU <index> kernels") at
    depth 0. Times are shifted so the first kept event starts at 0.
    To keep a figure readable, only events starting within the first ``max_ms`` milliseconds,
    no deeper than ``max_depth``, and of those the first ``max_events`` are kept. A parent
    starts no later than its children, so every kept op's parent is kept too (when its depth is).
    """
    raw = []
    for event in prof.events():
        depth = _depth(event)
        if max_depth is not None and depth > max_depth:
            continue
        raw.append((event.time_range.start, depth, event.time_range.end, event.name, _row(event)))
    raw.sort(key=lambda item: (item[0], item[1]))  # a parent before a child that starts at the same instant
    if not raw:
        return []
    origin = raw[0][0]
    if max_ms is not None:
        raw = [item for item in raw if item[0] - origin <= max_ms * 1e3]
    if max_events is not None:
        raw = raw[:max_events]
    return [TraceEvent(name, row, start - origin, max(end - start, 0.0), depth) for start, depth, end, name, row in raw]


def _depth(event) -> int:
    depth, parent = 0, event.cpu_parent
    while parent is not None:
        depth, parent = depth + 1, parent.cpu_parent
    return depth


def _row(event) -> str:
    # DeviceType.CPU for host ops; CUDA (or another accelerator) for kernels, memcpy and memset.
    if str(event.device_type).rsplit(".", 1)[-1] == "CPU":
        return f"CPU thread {event.thread}"
    return f"GPU {event.device_index} kernels"
