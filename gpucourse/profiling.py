"""A ``torch.profiler`` profile, and what ``torch.compile`` did, as plain data (lecture 06).

:func:`trace_events` turns a finished ``torch.profiler.profile`` into a list of
:class:`TraceEvent` (name, row, start, duration, nesting depth), which
:func:`gpucourse.plots.profile_timeline` draws as the Gantt chart a student would see in
Perfetto. :func:`table` prints chosen columns of ``key_averages()`` (torch's own table has
no option to leave columns out, and with memory columns it is 140 characters wide).
:func:`inductor_calls` lists the kernel calls in the code Inductor generated, and
:func:`recompile_reasons` collects Dynamo's recompilation messages.
None of them finds the op that dominates a profile or counts ops: that is left to the
reader of the profile (and to the assignment).
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Iterator, NamedTuple

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
                 max_depth: int | None = None, step: int | None = None) -> list[TraceEvent]:
    """The events of a finished ``torch.profiler.profile``, in start order, ready for ``plots.profile_timeline``.

    CPU ops get a row per thread ("CPU thread <id>") and their nesting depth from their chain
    of ``cpu_parent``; GPU kernels and copies get a row per device ("GPU <index> kernels") at
    depth 0. Times are shifted so the first kept event starts at 0.
    ``step``: only the ops the ``step``-th step of a ``schedule`` ran on its thread (0 for the first),
    one level up: the ``ProfilerStep`` bar itself is left out and what it called is at depth 0.
    To keep a figure readable, only events starting within the first ``max_ms`` milliseconds,
    no deeper than ``max_depth``, and of those the first ``max_events`` are kept. A parent
    starts no later than its children, so every kept op's parent is kept too (when its depth is).
    """
    events = [(event.time_range.start, _depth(event), event.time_range.end, event.name, _row(event)) for event in prof.events()]
    if step is not None:
        steps = sorted(item for item in events if item[1] == 0 and item[3].startswith("ProfilerStep"))
        if not 0 <= step < len(steps):
            raise ValueError(f"step {step} asked for, but the profile recorded {len(steps)} step(s) (ProfilerStep events)")
        first, _, last, _, row = steps[step]
        events = [(start, depth - 1, end, name, where) for start, depth, end, name, where in events
                  if depth > 0 and where == row and first <= start <= last]
    raw = [item for item in events if max_depth is None or item[1] <= max_depth]
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


# --- key_averages() as a narrow table -------------------------------------------------------------

def _time(us: float) -> str:
    return f"{us / 1e3:.2f} ms" if abs(us) >= 1e3 else f"{us:.1f} µs"


def _bytes(count: float) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if abs(count) >= scale:
            return f"{count / scale:.2f} {unit}"
    return f"{count:.0f} B"


# column key: (header, value of a FunctionEventAvg, how it is written)
COLUMNS = {
    "self_cpu": ("Self CPU", lambda row: row.self_cpu_time_total, _time),
    "cpu_total": ("CPU total", lambda row: row.cpu_time_total, _time),
    "self_device": ("Self GPU", lambda row: getattr(row, "self_device_time_total", 0.0), _time),
    "calls": ("Calls", lambda row: row.count, str),
    "self_mem": ("Self CPU Mem", lambda row: row.self_cpu_memory_usage, _bytes),
    "mem": ("CPU Mem", lambda row: row.cpu_memory_usage, _bytes),
    "shapes": ("Input Shapes", lambda row: row.input_shapes, str),
}
TABLE_WIDTH = 110  # characters: what a notebook's output area shows without wrapping


def table(averages, columns=("self_cpu", "cpu_total", "calls"), *, sort_by: str = "self_cpu", row_limit: int = 10,
          name_width: int = 30, width: int = TABLE_WIDTH) -> str:
    """Chosen columns of ``prof.key_averages()`` (any iterable of ``FunctionEventAvg``), sorted by one of them, largest first.

    ``columns`` and ``sort_by`` are keys of :data:`COLUMNS`. Names longer than ``name_width`` are cut with "…", and
    every line is at most ``width`` characters (the last column, input shapes say, is cut to fit).
    """
    unknown = [key for key in (*columns, sort_by) if key not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}: choose from {sorted(COLUMNS)}")
    value = COLUMNS[sort_by][1]
    rows = sorted(averages, key=lambda row: value(row), reverse=True)[:row_limit]
    cells = [[_cut(row.key, name_width)] + [COLUMNS[key][2](COLUMNS[key][1](row)) for key in columns] for row in rows]
    header = ["Name"] + [COLUMNS[key][0] for key in columns]
    widths = [max(len(line[index]) for line in [header, *cells]) for index in range(len(header))]
    left = [True] + [key == "shapes" for key in columns]  # text left, numbers right
    lines = ["  ".join(text.ljust(w) if left[index] else text.rjust(w) for index, (text, w) in enumerate(zip(line, widths))).rstrip()
             for line in [header, *cells]]
    lines.insert(1, "-" * min(max(len(line) for line in lines), width))
    return "\n".join(line if len(line) <= width else line[:width - 1] + "…" for line in lines)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


# --- What torch.compile did -----------------------------------------------------------------------

# A call of a kernel in Inductor's generated ``call``: an ATen or library op (torch.ops.…), an extern kernel
# (extern_kernels.mm, …), or a kernel Inductor wrote itself (cpp_fused_… on a CPU, triton_… on a GPU).
_KERNEL_CALL = re.compile(r"^\s+(?:\w+ = )?((?:torch\.ops\.[\w.]+|extern_kernels\.\w+|cpp_fused_\w+|triton_\w+)(?:\.run)?)\(")


def inductor_calls(code: str) -> list[str]:
    """The kernel calls of one module Inductor generated (``run_and_get_code``'s text), in the order they run, stripped.

    Only indented lines count: the module's top level defines the kernels (``cpp_fused_x = async_compile…``),
    its ``call`` function runs them.
    """
    return [line.strip() for line in code.splitlines() if _KERNEL_CALL.match(line)]


# --- What Dynamo recompiled -----------------------------------------------------------------------

class _Keep(logging.Handler):
    def __init__(self, kept: list[str]):
        super().__init__()
        self.kept = kept

    def emit(self, record: logging.LogRecord) -> None:
        self.kept.append(record.getMessage())


@contextlib.contextmanager
def recompile_reasons() -> Iterator[list[str]]:
    """Within the block, Dynamo's recompilation messages (what ``TORCH_LOGS=recompiles`` prints) are
    appended to the list it yields, instead of being logged to stderr. Every log setting goes back to
    torch's defaults afterwards (``torch._logging.set_logs()``)."""
    import torch._logging

    # The logger torch/_dynamo/guards.py writes its "Recompiling function ..." messages to.
    logger = torch._logging.getArtifactLogger("torch._dynamo.guards", "recompiles")
    kept: list[str] = []
    handler, propagate = _Keep(kept), logger.propagate
    torch._logging.set_logs(recompiles=True)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield kept
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        torch._logging.set_logs()


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


# Where Dynamo warns that it drops a profiler label from what it compiles: logger, start of the message.
DROPPED_LABEL_WARNINGS = (("torch._dynamo.variables.ctx_manager", "Profiler record function"),
                          ("torch._dynamo.variables.torch", "Profiler function"))


def hide_dropped_label_warnings() -> None:
    """Drop Dynamo's warning that a ``record_function`` label is ignored in compiled code, and nothing else.

    The warning (torch/_dynamo/variables/ctx_manager.py and torch.py, once per label) goes to stderr, where a
    notebook shows it in red, like an error; lecture 06 says the same thing in its text. Only those messages,
    on only those two loggers, are filtered; every other Dynamo warning still shows.
    """
    for name, prefix in DROPPED_LABEL_WARNINGS:
        logger = logging.getLogger(name)
        if not any(isinstance(kept, _DropMessage) and kept.prefix == prefix for kept in logger.filters):
            logger.addFilter(_DropMessage(prefix))
