"""Tests of gpucourse.profiling: a real torch.profiler trace turned into plain events to draw."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from gpucourse import profiling
from gpucourse.profiling import TraceEvent


def linear_then_relu_profile():
    """A profile of one labelled block: Linear (aten::linear → aten::addmm) then ReLU (aten::relu → aten::clamp_min)."""
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)
    layer(x)  # first-call costs stay out of the trace
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("block"):
            torch.relu(layer(x))
    return prof


def test_trace_events_gives_names_rows_and_nesting_depths():
    """Each op comes with its thread's row and its depth under the labelled block, in start order."""
    events = profiling.trace_events(linear_then_relu_profile(), max_events=None)
    assert all(isinstance(event, TraceEvent) for event in events)
    depth = {event.name: event.depth for event in events}
    assert depth["block"] == 0, f"the record_function label is the outermost op, got depth {depth['block']}"
    assert depth["aten::linear"] == 1 and depth["aten::relu"] == 1, f"ops called from the block sit at depth 1, got {depth}"
    assert depth["aten::addmm"] == 2 and depth["aten::clamp_min"] == 2, f"ops called by linear/relu sit at depth 2, got {depth}"
    names = [event.name for event in events]
    assert names.index("aten::linear") < names.index("aten::addmm") < names.index("aten::relu"), names
    rows = {event.row for event in events}
    assert len(rows) == 1 and events[0].row.startswith("CPU thread "), f"one thread, one row named after it, got {rows}"
    assert events[0].name == "block" and events[0].start_us == 0.0, f"times start at the first event, got {events[0]}"


def test_trace_events_keeps_children_inside_their_parent():
    """A child op starts and ends within its parent's span, in µs from the first event."""
    events = {event.name: event for event in profiling.trace_events(linear_then_relu_profile(), max_events=None)}
    for child, parent in (("aten::addmm", "aten::linear"), ("aten::linear", "block"), ("aten::clamp_min", "aten::relu")):
        c, p = events[child], events[parent]
        assert p.start_us <= c.start_us and c.start_us + c.duration_us <= p.start_us + p.duration_us + 1e-6, (child, c, parent, p)


def test_trace_events_keeps_the_first_events_and_the_shallow_ones():
    """max_events keeps the earliest events, max_depth drops deeper ones, max_ms cuts the window."""
    prof = linear_then_relu_profile()
    everything = profiling.trace_events(prof, max_events=None)
    assert len(everything) > 4, f"expected a dozen or so events, got {len(everything)}"
    assert profiling.trace_events(prof, max_events=3) == everything[:3]
    shallow = profiling.trace_events(prof, max_events=None, max_depth=1)
    assert [event.name for event in shallow] == ["block", "aten::linear", "aten::relu"], [event.name for event in shallow]
    assert [event.name for event in profiling.trace_events(prof, max_events=None, max_ms=0.0)] == ["block"]


def test_trace_events_of_an_empty_profile_is_empty():
    """Nothing run inside the profiler: nothing to draw."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        pass
    assert profiling.trace_events(prof) == []


def test_top_level_counts_leave_out_the_ops_an_op_calls_inside():
    """aten::im2col selects each image of the batch itself: counted from Python it is one op, whatever the batch."""
    import torch
    import torch.nn.functional as F

    from autograder.profiling import counted_call

    counts = {}
    for batch in (1, 4):
        _, every = counted_call(F.unfold, torch.randn(batch, 2, 6, 6), 3)
        _, outer = counted_call(F.unfold, torch.randn(batch, 2, 6, 6), 3, top_level=True)
        counts[batch] = (sum(every.values()), outer)
    assert counts[4][0] > counts[1][0], counts  # nested selects grow with the batch
    assert counts[1][1] == counts[4][1] and counts[4][1].get("aten::im2col") == 1, counts


def test_moving_ops_leave_out_allocations_and_views_but_not_copies():
    """What a bound on passes over memory counts (module 06, issue 46): a Python float made a tensor (aten::empty, aten::to,
    aten::lift_fresh, as torch.compile(dynamic=True) does on every call), an allocation and views are no pass; a
    conversion or a contiguous copy is, by the ops it calls inside."""
    import torch

    from autograder.profiling import counted_call
    from gpucourse.gates.ops import moving_ops

    x = torch.randn(8, 6)
    lifted = counted_call(lambda t: (torch.tensor(0.7), torch.empty_like(t), t.view(6, 8).t().unsqueeze(0), t.to(t.dtype)), x)[1]
    assert {"aten::empty", "aten::lift_fresh", "aten::to"} <= set(lifted), lifted  # what the profile holds
    assert moving_ops(lifted) == {}, lifted
    converted = moving_ops(counted_call(lambda t: t.to(torch.float64), x)[1])
    assert converted.get("aten::copy_") == 1 and "aten::to" not in converted, converted
    assert moving_ops(counted_call(lambda t: t.t().contiguous(), x)[1]).get("aten::copy_") == 1
    tail = moving_ops(counted_call(lambda t: torch.nn.functional.gelu(t + t) * 0.7 + t, x.double())[1])
    assert tail == {"aten::add": 2, "aten::gelu": 1, "aten::mul": 1}, tail  # four passes, counted as four


def scheduled_profile(steps=2):
    """A profile of a schedule: one step skipped, one warm-up, ``steps`` recorded, each a labelled Linear."""
    from torch.profiler import schedule

    layer, x = torch.nn.Linear(8, 4), torch.randn(3, 8)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
                 record_shapes=True) as prof:
        for _ in range(2 + steps):
            with record_function("block"):
                layer(x)
            prof.step()
    return prof


def test_trace_events_of_one_step_leave_out_the_step_bar_and_start_at_its_labels():
    """step=k keeps the ops of the k-th recorded step, one level up, timed from the first of them."""
    prof = scheduled_profile()
    first, second = (profiling.trace_events(prof, step=k, max_events=None) for k in (0, 1))
    for events in (first, second):
        assert [e.name for e in events if e.depth == 0] == ["block"], [(e.name, e.depth) for e in events]
        assert events[0].start_us == 0.0 and not any(e.name.startswith("ProfilerStep") for e in events), events[:2]
    everything = profiling.trace_events(prof, max_events=None)
    assert sum(e.name == "block" for e in everything) == 2 and len(first) + len(second) < len(everything)
    assert [e.depth for e in profiling.trace_events(prof, step=0, max_events=None, max_depth=1)] == [0, 1]
    with pytest.raises(ValueError, match="recorded 2 step"):
        profiling.trace_events(prof, step=2)


def test_table_prints_the_chosen_columns_sorted_and_within_the_width():
    rows = scheduled_profile().key_averages(group_by_input_shape=True)
    text = profiling.table(rows, ("self_cpu", "calls", "shapes"), row_limit=5, name_width=12)
    lines = text.splitlines()
    assert lines[0].split() == ["Name", "Self", "CPU", "Calls", "Input", "Shapes"] and set(lines[1]) == {"-"}, lines[:2]
    assert len(lines) == 2 + 5 and all(len(line) <= profiling.TABLE_WIDTH for line in lines), text
    whole = profiling.table(rows, ("self_cpu", "calls", "shapes"), row_limit=100)
    assert "aten::linear" in whole and "[[3, 8], [4, 8], [4]]" in whole, whole  # the Linear's input, weight and bias shapes
    self_times = sorted((row for row in rows), key=lambda row: row.self_cpu_time_total, reverse=True)[:5]
    assert [line.split()[0] for line in lines[2:]] == [profiling._cut(row.key, 12) for row in self_times]
    narrow = profiling.table(rows, ("self_cpu", "shapes"), row_limit=100, width=40)  # addmm's shapes do not fit
    assert all(len(line) <= 40 for line in narrow.splitlines()) and "…" in narrow, narrow
    with pytest.raises(ValueError, match="unknown column"):
        profiling.table(rows, ("self_gpu_bogus",))


# Two lines of a module Inductor generated: its top level defines kernels, its call function runs them.
GENERATED = """
cpp_fused_addmm_gelu_0 = async_compile.cpp_pybinding(['float*', 'const float*'], r'''
def call(args):
    buf0 = torch.ops.mkl._mkl_linear.default(arg4_1, _frozen_param7, _frozen_param6, None, 64)
    assert_size_stride(buf0, (64, 2048), (2048, 1), 'torch.ops.mkl._mkl_linear')
    buf1 = buf0; del buf0  # reuse
    cpp_fused_addmm_gelu_0(buf1, _frozen_param1)
    extern_kernels.mm(buf1, arg2_1, out=buf2)
    triton_poi_fused_gelu_0.run(buf2, 4096, stream=stream0)
    return (buf1, )
"""


def test_inductor_calls_lists_the_kernels_the_call_function_runs_in_order():
    assert profiling.inductor_calls(GENERATED) == [
        "buf0 = torch.ops.mkl._mkl_linear.default(arg4_1, _frozen_param7, _frozen_param6, None, 64)",
        "cpp_fused_addmm_gelu_0(buf1, _frozen_param1)",
        "extern_kernels.mm(buf1, arg2_1, out=buf2)",
        "triton_poi_fused_gelu_0.run(buf2, 4096, stream=stream0)",
    ]


def test_recompile_reasons_collects_dynamos_messages_instead_of_logging_them(capsys):
    """dynamic=False at two sizes recompiles once, for the size: the reason comes back as text, nothing reaches stderr."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
    with profiling.recompile_reasons() as reasons:
        compiled(torch.randn(3))
        compiled(torch.randn(5))
    torch._dynamo.reset()
    assert len(reasons) == 1 and "size mismatch at index 0. expected 3, actual 5" in reasons[0], reasons
    assert "Recompiling" not in capsys.readouterr().err


def test_hide_dropped_label_warnings_drops_that_message_only():
    import logging

    logger = logging.getLogger(profiling.DROPPED_LABEL_WARNINGS[0][0])
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    try:
        profiling.hide_dropped_label_warnings()
        profiling.hide_dropped_label_warnings()  # once is enough: no second filter
        logger.warning("Profiler record function %s will be ignored", "record_function")
        logger.warning("Graph break from %s", "something else")
    finally:
        logger.removeHandler(handler)
    assert seen == ["Graph break from something else"], seen
    assert sum(isinstance(f, profiling._DropMessage) for f in logger.filters) == 1
