"""The stream model (gpucourse.sim.streams) against timelines worked out by hand."""

import pytest

from gpucourse import gpu_specs
from gpucourse.sim import streams
from gpucourse.sim.streams import Schedule


def spans(timeline, *labels):
    return [(timeline.of(label).start, timeline.of(label).end) for label in labels]


def test_breadth_first_with_two_copy_engines_overlaps_every_step():
    """3 chunks, in 2 s, compute 3 s, out 1 s: the kernels back to back set the pace, 2+3+1 + 2×3 = 12 s."""
    timeline = streams.pipeline(3, 2, 3, 1, copy_engines=2).simulate()
    assert spans(timeline, "in0", "in1", "in2") == [(0, 2), (2, 4), (4, 6)]
    assert spans(timeline, "k0", "k1", "k2") == [(2, 5), (5, 8), (8, 11)]
    assert spans(timeline, "out0", "out1", "out2") == [(5, 6), (8, 9), (11, 12)]
    assert timeline.makespan == 12 and timeline.ideal_seconds == 9 and timeline.races == []
    assert timeline.engine_busy == {"h2d": 6, "compute": 9, "d2h": 3}


def test_depth_first_on_one_copy_engine_serialises_everything():
    """The issue-order trap: out0 waits for k0, and in1, issued after it to the same engine, waits for out0."""
    timeline = streams.pipeline(3, 2, 3, 1, copy_engines=1, order="depth").simulate()
    assert spans(timeline, "in0", "k0", "out0", "in1", "k1", "out1", "in2") == [(0, 2), (2, 5), (5, 6), (6, 8), (8, 11), (11, 12), (12, 14)]
    assert timeline.makespan == 18 == 3 * (2 + 3 + 1)


def test_breadth_first_on_one_copy_engine_overlaps_again():
    timeline = streams.pipeline(3, 2, 3, 1, copy_engines=1).simulate()
    assert spans(timeline, "in2", "out0", "out1", "out2") == [(4, 6), (6, 7), (8, 9), (11, 12)]
    assert timeline.makespan == 12 and timeline.engine_busy == {"copy": 9, "compute": 9}


def test_depth_first_with_two_copy_engines_is_as_good_as_breadth_first():
    timeline = streams.pipeline(3, 2, 3, 1, copy_engines=2, order="depth").simulate()
    assert spans(timeline, "in1", "in2", "out2") == [(2, 4), (4, 6), (11, 12)]
    assert timeline.makespan == 12


def test_copy_bound_pipeline_is_paced_by_its_copies():
    """Copies in of 4 s, compute 1 s, out 1 s, 4 chunks: 4+1+1 + 3×4 = 18 s."""
    assert streams.pipeline(4, 4, 1, 1).simulate().makespan == 18


def test_a_missing_wait_is_a_race_not_a_faster_timeline():
    unordered = Schedule()
    unordered.h2d("copy x", "copies", seconds=2, buffer="x")
    unordered.kernel("use x", "compute", seconds=1, reads=["x"], writes=["y"])
    timeline = unordered.simulate()
    assert timeline.of("use x").start == 0  # nothing holds the kernel back: it would read x half-copied
    assert [(race.operation, race.other, race.buffer, race.kind) for race in timeline.races] == [("use x", "copy x", "x", "read after write")]

    ordered = Schedule()
    ordered.h2d("copy x", "copies", seconds=2, buffer="x")
    ordered.record("x ready", "copies")
    ordered.wait("x ready", "compute")
    ordered.kernel("use x", "compute", seconds=1, reads=["x"], writes=["y"])
    timeline = ordered.simulate()
    assert timeline.of("use x").start == 2 and timeline.races == [] and timeline.makespan == 3


def test_reusing_a_buffer_another_stream_still_reads_is_a_race():
    schedule = Schedule()
    schedule.kernel("read x", "a", seconds=3, reads=["x"])
    schedule.h2d("overwrite x", "b", seconds=1, buffer="x")
    kinds = [race.kind for race in schedule.simulate().races]
    assert kinds == ["write after read"]


def test_a_wait_on_an_event_never_recorded_is_a_no_op():
    schedule = Schedule()
    schedule.h2d("copy", "a", seconds=2, buffer="x")
    schedule.wait("never recorded", "b")
    schedule.kernel("k", "b", seconds=1, reads=["x"])
    timeline = schedule.simulate()
    assert timeline.of("k").start == 0 and len(timeline.races) == 1


def test_the_host_must_wait_before_reading_a_result():
    unsynchronised = Schedule()
    unsynchronised.d2h("fetch", "s", seconds=2, buffer="y", into="h")
    unsynchronised.host_read("h")
    assert [race.kind for race in unsynchronised.simulate().races] == ["read after write"]

    synchronised = Schedule()
    synchronised.d2h("fetch", "s", seconds=2, buffer="y", into="h")
    synchronised.synchronize()
    synchronised.host_read("h")
    timeline = synchronised.simulate()
    assert timeline.races == [] and timeline.host_seconds == 2


def test_a_synchronize_orders_later_work_on_every_stream():
    schedule = Schedule()
    schedule.h2d("copy", "a", seconds=2, buffer="x")
    schedule.synchronize()
    schedule.kernel("k", "b", seconds=1, reads=["x"])
    timeline = schedule.simulate()
    assert timeline.races == [] and timeline.of("k").start == 2


def test_pageable_copies_block_the_host_and_run_at_half_the_link():
    """4 MB on a T4's PCIe 3.0 x16 link (15.75 GB/s): 0.254 ms pinned, twice that pageable, and the
    host cannot issue the kernel on the other stream before the pageable copy is done."""
    t4 = gpu_specs.gpu("T4")
    nbytes = 4 * 10**6
    for pinned, seconds, kernel_start in ((True, nbytes / t4.host_link_bandwidth, 0.0), (False, 2 * nbytes / t4.host_link_bandwidth, None)):
        schedule = Schedule.for_gpu("T4")
        schedule.h2d("copy", "a", nbytes=nbytes, pinned=pinned, buffer="x")
        schedule.kernel("other work", "b", seconds=1e-3)
        timeline = schedule.simulate()
        assert timeline.of("copy").seconds == pytest.approx(seconds)
        assert timeline.of("other work").start == pytest.approx(kernel_start if kernel_start is not None else seconds)


def test_issue_cost_delays_each_call():
    schedule = Schedule(issue_seconds=0.5)
    schedule.kernel("k0", "a", seconds=1)
    schedule.kernel("k1", "b", seconds=1)
    timeline = schedule.simulate()
    assert spans(timeline, "k0", "k1") == [(0.5, 1.5), (1.5, 2.5)]


@pytest.mark.parametrize("bad", [{"copy_engines": 0}])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError, match="copy engine"):
        Schedule(**bad)


def test_bad_operations_are_refused():
    schedule = Schedule()
    with pytest.raises(ValueError, match="seconds or its nbytes"):
        schedule.h2d("copy", seconds=1, nbytes=10)
    with pytest.raises(ValueError, match="≥ 0"):
        schedule.kernel("k", seconds=-1)
    with pytest.raises(ValueError, match="breadth"):
        streams.pipeline(2, 1, 1, 1, order="sideways")


def test_every_card_has_a_copy_engine_per_direction():
    assert all(spec.copy_engines >= 2 for spec in gpu_specs.GPUS.values())


def test_a_pageable_pipeline_stages_each_copy_and_holds_the_host():
    """2 chunks, 1 s copies when pinned: pageable, each copy takes 2 s and the host waits for it, so the
    kernels are issued only at 4 s and the second copy out only once the first is back (7 s)."""
    timeline = streams.pipeline(2, 1, 1, 1, pinned=False).simulate()
    assert spans(timeline, "in0", "in1", "k0", "k1", "out0", "out1") == [(0, 2), (2, 4), (4, 5), (5, 6), (5, 7), (7, 9)]
    assert timeline.makespan == 9


def test_chunks_sharing_streams_wait_for_each_other_in_issue_order():
    """4 chunks, 1 s a step. On 2 streams, breadth-first issue puts in2 before k0 on stream 0: k0 waits for it
    (a false dependency), and the pipeline takes 10 s, not 6. Depth-first on 2 streams takes 7; 1 stream, 12."""
    shared = streams.pipeline(4, 1, 1, 1, streams=2).simulate()
    assert [interval.stream for interval in shared.intervals[:4]] == ["s0", "s1", "s0", "s1"]
    assert spans(shared, "k0", "k1", "out3") == [(3, 4), (4, 5), (9, 10)] and shared.makespan == 10
    assert streams.pipeline(4, 1, 1, 1).simulate().makespan == 6  # a stream per chunk
    assert streams.pipeline(4, 1, 1, 1, streams=2, order="depth").simulate().makespan == 7
    assert streams.pipeline(4, 1, 1, 1, streams=1).simulate().makespan == 12  # one stream: nothing overlaps
    with pytest.raises(ValueError, match="at least one stream"):
        streams.pipeline(2, 1, 1, 1, streams=0)
