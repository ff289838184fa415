"""The stream model (gpucourse.sim.streams) against timelines worked out by hand.

The hand-worked pipelines of the first tests use ``queues="per-engine"`` where one copy engine's issue order
matters (cards before Hyper-Q); the tests after ``test_chunks_sharing_streams...`` check each behaviour of the
Hyper-Q model from the scenario its source documents (cited in each docstring)."""

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
    """The issue-order trap of one queue per engine: out0 waits for k0, and in1, issued after it to the same engine, waits for out0."""
    timeline = streams.pipeline(3, 2, 3, 1, copy_engines=1, order="depth", queues="per-engine").simulate()
    assert spans(timeline, "in0", "k0", "out0", "in1", "k1", "out1", "in2") == [(0, 2), (2, 5), (5, 6), (6, 8), (8, 11), (11, 12), (12, 14)]
    assert timeline.makespan == 18 == 3 * (2 + 3 + 1)


def test_breadth_first_on_one_copy_engine_overlaps_again():
    timeline = streams.pipeline(3, 2, 3, 1, copy_engines=1, queues="per-engine").simulate()
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
    """4 MB on a T4's PCIe 3.0 x16 link (15.75 GB/s): 0.254 ms pinned, twice that pageable, each after the 10 µs
    fixed cost of a copy, and the host cannot issue the kernel on the other stream before the pageable copy is done."""
    t4 = gpu_specs.gpu("T4")
    nbytes = 4 * 10**6
    latency = streams.COPY_LATENCY_SECONDS
    for pinned, seconds, kernel_start in ((True, latency + nbytes / t4.host_link_bandwidth, 0.0),
                                          (False, latency + 2 * nbytes / t4.host_link_bandwidth, None)):
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


@pytest.mark.parametrize(("bad", "message"), [({"copy_engines": 0}, "copy engine"), ({"queues": "fermi"}, "per-engine"),
                                                ({"connections": 0}, "1 to 32"), ({"connections": 33}, "1 to 32"),
                                                ({"copy_latency": -1e-6}, "≥ 0"), ({"sms": 0}, "at least 1")])
def test_bad_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
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


# -- Hyper-Q: hardware queues, concurrent kernels, priorities -----------------------------------------------


def test_a_copys_fixed_cost_is_added_to_copies_priced_from_their_bytes():
    """copy_latency (by default gpu_specs.HOST_LINK_LATENCY_SECONDS, 10 µs: an assumption for every card) is paid by every
    copy priced from its bytes; 0 gives the flat rate of before, and a copy given in seconds takes exactly those."""
    assert Schedule().copy_seconds(0) == streams.COPY_LATENCY_SECONDS == 10e-6
    assert Schedule(copy_latency=0).copy_seconds(15_750) == pytest.approx(1e-6)  # 15.75 kB over 15.75 GB/s
    assert Schedule().copy_seconds(15_750, pinned=False) == pytest.approx(10e-6 + 2e-6)
    schedule = Schedule(copy_latency=1.0)
    schedule.h2d("given", seconds=2.0)
    schedule.h2d("priced", nbytes=0)
    timeline = schedule.simulate()
    assert timeline.of("given").seconds == 2.0 and timeline.of("priced").seconds == 1.0


def test_two_independent_kernels_with_small_grids_overlap_and_full_grids_serialise():
    """Programming Guide, "Concurrent Kernel Execution": kernels of different streams run at once when resources allow.
    A T4 holds 40 SMs × 16 resident blocks ("Technical Specifications per Compute Capability"): a 320-block grid
    takes half of it, so two run together; two grids without a block count (the whole GPU) run one after the other,
    and so do 0.75 + 0.5 of it. With one queue per engine (cards before Hyper-Q) kernels never overlap."""
    def two(blocks_a, blocks_b, **options):
        schedule = Schedule.for_gpu("T4", **options)
        schedule.kernel("a", "one", seconds=1.0, blocks=blocks_a)
        schedule.kernel("b", "two", seconds=1.0, blocks=blocks_b)
        return schedule.simulate()

    assert Schedule.for_gpu("T4").grid_share(320) == 0.5 and Schedule.for_gpu("H100").grid_share(320, blocks_per_sm=1) == 1.0
    halves = two(320, 320)
    assert spans(halves, "a", "b") == [(0, 1), (0, 1)] and halves.makespan == 1 and halves.engine_busy == {"compute": 1.0}
    assert spans(two(None, None), "a", "b") == [(0, 1), (1, 2)]
    assert spans(two(480, 320), "a", "b") == [(0, 1), (1, 2)]
    assert spans(two(320, 320, queues="per-engine"), "a", "b") == [(0, 1), (1, 2)]


def test_at_most_128_grids_are_resident_at_once():
    """Programming Guide, "Features and Technical Specifications": at most 128 resident grids per device (compute
    capability 7.0 and up). 129 one-block kernels on 129 streams (32 connections): the 129th waits for the first."""
    schedule = Schedule(connections=32)
    for i in range(129):
        schedule.kernel(f"k{i}", f"s{i}", seconds=1.0, blocks=1)
    timeline = schedule.simulate()
    assert {timeline.of(f"k{i}").start for i in range(128)} == {0.0} and timeline.of("k128").start == 1.0


def test_more_streams_than_connections_share_queues_a_false_dependency():
    """CUDA_DEVICE_MAX_CONNECTIONS (Programming Guide, "CUDA Environment Variables": default 8, 1 to 32): streams beyond
    the connections share hardware queues, and "streams will alias to connections which can result in false
    dependencies" (NVIDIA Developer Forums, "How many streams? Maximum number of streams"). Nine streams, one kernel
    each, and a second kernel on stream 0 issued before stream 8's: on 8 queues, streams 0 and 8 share one, so k8
    cannot start before k0b, which waits for k0; with 32 connections k8 starts at once."""
    def nine_streams(connections):
        schedule = Schedule(connections=connections)
        for i in range(8):
            schedule.kernel(f"k{i}", f"s{i}", seconds=1.0, blocks=1)
        schedule.kernel("k0b", "s0", seconds=1.0, blocks=1)
        schedule.kernel("k8", "s8", seconds=1.0, blocks=1)
        return schedule.simulate()

    assert spans(nine_streams(8), "k0b", "k8") == [(1, 2), (1, 2)]
    assert spans(nine_streams(32), "k0b", "k8") == [(1, 2), (0, 1)]
    # A breadth-first pipeline of 16 streams on 8 queues: k0 sits behind in8 in queue 0, so it starts only at 8 s
    # and the pipeline takes 31 s instead of 18; depth-first issue, or 32 connections, takes 18.
    crowded = streams.pipeline(16, 1, 1, 1).simulate()
    assert crowded.of("k0").start == crowded.of("in8").start == 8 and crowded.makespan == 31
    assert streams.pipeline(16, 1, 1, 1, connections=32).simulate().makespan == 18
    assert streams.pipeline(16, 1, 1, 1, order="depth").simulate().makespan == 18


def test_hyper_q_removes_the_issue_order_trap_of_one_queue_per_engine():
    """The CUDA 4 Programming Guide's breadth-first against depth-first issue ("Overlapping Behavior"): with one queue
    per engine (Fermi), depth-first issue on one copy engine serialises 3 chunks (18 s) and breadth-first overlaps them
    (12 s). With Hyper-Q's hardware queues (Kepler GK110 whitepaper; Kepler Tuning Guide, "Hyper-Q") a copy out that
    is not ready no longer holds the copies behind it: both orders take 12 s."""
    for order, per_engine, hyper_q in (("depth", 18, 12), ("breadth", 12, 12)):
        assert streams.pipeline(3, 2, 3, 1, copy_engines=1, order=order, queues="per-engine").simulate().makespan == per_engine
        assert streams.pipeline(3, 2, 3, 1, copy_engines=1, order=order).simulate().makespan == hyper_q
    hyper = streams.pipeline(3, 2, 3, 1, copy_engines=1, order="depth").simulate()
    assert spans(hyper, "in1", "in2", "out0") == [(2, 4), (4, 6), (6, 7)]  # in1 no longer waits behind out0


def test_a_higher_priority_streams_kernel_goes_first_without_preempting():
    """cudaStreamCreateWithPriority: lower numbers are higher priorities, they "do not preempt already-running work",
    and they "have no effect on host-to-device and device-to-host memory operations" (CUDA Driver API,
    cuStreamCreateWithPriority). A full-GPU kernel runs from 0.1 s; a low- and then a high-priority kernel are issued
    while it runs: it finishes, then the high-priority one goes first. Two copies keep their issue order."""
    def run(high_priority):
        schedule = Schedule(issue_seconds=0.1)
        schedule.stream("high", priority=high_priority)
        schedule.stream("high copies", priority=high_priority)
        schedule.kernel("busy", "first", seconds=1.0)
        schedule.kernel("low work", "low", seconds=1.0)
        schedule.kernel("high work", "high", seconds=1.0)
        schedule.h2d("busy copy", "copies", seconds=1.0, buffer="c")
        schedule.h2d("low copy", "low copies", seconds=1.0, buffer="a")
        schedule.h2d("high copy", "high copies", seconds=1.0, buffer="b")
        return schedule.simulate()

    assert spans(run(-1), "busy", "high work", "low work") == [(0.1, 1.1), (1.1, 2.1), (2.1, 3.1)]
    assert spans(run(0), "busy", "low work", "high work") == [(0.1, 1.1), (1.1, 2.1), (2.1, 3.1)]
    assert spans(run(-1), "low copy", "high copy") == spans(run(0), "low copy", "high copy") == [(1.4, 2.4), (2.4, 3.4)]
    schedule = Schedule()
    schedule.kernel("k", "used", seconds=1.0)
    with pytest.raises(ValueError, match="when the stream is created"):
        schedule.stream("used", priority=-1)


# -- device memory: the caching allocator -------------------------------------------------------------------------


def test_the_footprint_steps_up_with_new_blocks_and_a_released_block_is_reused_on_its_stream():
    """PyTorch "CUDA semantics", "Memory management": freed memory stays in the caching allocator and is reused;
    blocks are kept per stream (c10/cuda/CUDACachingAllocator.cpp: "once freed, blocks can be re-allocated on the
    same stream, but not on any other stream"), sizes rounded up to 512 bytes. x (1000 B → 1024) and y (2048 B)
    on stream a; x released; z (1000 B) on a reuses x's block; w (1000 B) on b takes a new one."""
    schedule = Schedule(issue_seconds=1.0)
    schedule.allocate("x", 1000, "a")
    schedule.h2d("fill x", "a", seconds=1.0, buffer="x")
    schedule.allocate("y", 2048, "a")
    schedule.kernel("k", "a", seconds=1.0, reads=["x"], writes=["y"])
    schedule.release("x")
    schedule.allocate("z", 1000, "a")
    schedule.h2d("fill z", "a", seconds=1.0, buffer="z")
    schedule.allocate("w", 1000, "b")
    timeline = schedule.simulate()
    assert [(a.buffer, a.block, a.nbytes, a.reused) for a in timeline.allocations] == [
        ("x", 0, 1024, False), ("y", 1, 2048, False), ("z", 0, 1024, True), ("w", 2, 1024, False)]
    assert timeline.memory == [(0.0, 1024), (1.0, 3072), (3.0, 4096)]  # allocations happen when the host issues the call
    assert timeline.memory_in_use == [(0.0, 1024), (1.0, 3072), (3.0, 4096)]  # x released and z allocated at 2 s: no change
    assert timeline.peak_device_bytes == 4096 and timeline.races == []
    with pytest.raises(ValueError, match="was released"):
        schedule.kernel("use after release", "a", seconds=1.0, reads=["x"])
    with pytest.raises(ValueError, match="allocated already"):
        schedule.allocate("y", 10, "a")


def side_stream_reads_a_buffer_the_main_stream_frees(fix: str | None) -> Schedule:
    """The record_stream scenario (PyTorch "CUDA semantics"; Tensor.record_stream): x is allocated and filled on the
    main stream, a side stream reads it in a long kernel (after an event), the main stream frees x and allocates y of
    the same size, which it fills at once. ``fix``: None, "record_stream" (record x's use on the side stream before
    releasing it) or "event" (the main stream waits for the side stream's kernel before releasing x)."""
    schedule = Schedule()
    schedule.allocate("x", 4096, "main")
    schedule.h2d("fill x", "main", seconds=1.0, buffer="x")
    schedule.record("x filled", "main")
    schedule.wait("x filled", "side")
    schedule.kernel("side reads x", "side", seconds=5.0, reads=["x"], writes=["out"])
    if fix == "record_stream":
        schedule.record_stream("x", "side")
    elif fix == "event":
        schedule.record("side done", "side")
        schedule.wait("side done", "main")
    schedule.release("x")
    schedule.allocate("y", 4096, "main")
    schedule.h2d("fill y", "main", seconds=1.0, buffer="y")
    return schedule


def test_reusing_a_block_another_stream_still_reads_is_a_race_that_record_stream_or_an_event_removes():
    """Without a fix, y gets x's block at once and "fill y" overwrites it while the side stream still reads x: a race
    (write after read, on the reused block). record_stream keeps the block until the side stream's work queued at the
    release is done: y takes a new block (the footprint grows). An event makes the main stream wait: the block is
    reused, and "fill y" runs after the side stream's read."""
    racy = side_stream_reads_a_buffer_the_main_stream_frees(None).simulate()
    assert [(race.operation, race.other, race.buffer, race.kind, race.reused) for race in racy.races] == [
        ("fill y", "side reads x", "y", "write after read", "x")]
    assert "memory block 'x' had" in str(racy.races[0]) and racy.allocations[1].reused and racy.peak_device_bytes == 4096
    recorded = side_stream_reads_a_buffer_the_main_stream_frees("record_stream").simulate()
    assert recorded.races == [] and not recorded.allocations[1].reused and recorded.peak_device_bytes == 8192
    waited = side_stream_reads_a_buffer_the_main_stream_frees("event").simulate()
    assert waited.races == [] and waited.allocations[1].reused and waited.of("fill y").start == 6.0


def test_a_recorded_block_is_reused_once_its_work_is_done_and_the_allocators_poll_orders_the_reuse():
    """Tensor.record_stream: "on later allocations the allocator will poll the recorded stream to see if all operations
    have completed yet". A short side kernel (4-4.5 s), the host busy until 5 s: y reuses x's block, and the poll
    orders "fill y" after the side stream's read (no race). Without record_stream the block is reused just the same,
    with nothing ordering the two: a race, although this timeline happens to be safe."""
    def run(record: bool):
        schedule = Schedule(issue_seconds=1.0)
        schedule.allocate("x", 4096, "main")
        schedule.h2d("fill x", "main", seconds=1.0, buffer="x")
        schedule.record("x filled", "main")
        schedule.wait("x filled", "side")
        schedule.kernel("side reads x", "side", seconds=0.5, reads=["x"])
        if record:
            schedule.record_stream("x", "side")
        schedule.release("x")
        schedule.kernel("meanwhile", "other", seconds=1.0)
        schedule.allocate("y", 4096, "main")
        schedule.h2d("fill y", "main", seconds=1.0, buffer="y")
        return schedule.simulate()

    recorded, unrecorded = run(True), run(False)
    assert recorded.allocations[1].reused and recorded.allocations[1].time == 5.0 and recorded.races == []
    assert unrecorded.allocations[1].reused and [race.kind for race in unrecorded.races] == ["write after read"]


@pytest.mark.parametrize(("chunks", "h2d", "compute", "d2h", "copy_engines", "makespan"), [
    (1, 2, 3, 1, 2, 6), (3, 2, 3, 1, 2, 12), (4, 4, 1, 1, 2, 18), (3, 2, 3, 1, 1, 12), (5, 1, 1, 1, 3, 7), (4, 3, 1, 2, 1, 20),
    (2, 1, 10, 5, 1, 26), (3, 1, 3, 4, 1, 16)])
def test_one_queue_per_engine_gives_the_makespans_worked_out_by_hand_for_assignment_05(chunks, h2d, compute, d2h, copy_engines, makespan):
    """Assignment 05, Question 1 asks for the makespan of a breadth-first pipeline with one queue per engine (cards
    before Hyper-Q): its hand-worked cases are the model's with queues="per-engine"."""
    schedule = streams.pipeline(chunks, h2d, compute, d2h, copy_engines=copy_engines, queues="per-engine")
    assert schedule.simulate().makespan == makespan


def test_a_pipeline_of_a_few_hundred_operations_simulates_in_milliseconds():
    """300 operations on 100 streams (Hyper-Q, 8 queues) and with one queue per engine: a few ms of CPU each on the course's
    2-core machine; the bound, 40× that, catches a simulation that grows with the square of its operations."""
    import time

    for queues in ("hyper-q", "per-engine"):
        schedule = streams.pipeline(100, 1e-3, 2e-3, 5e-4, copy_engines=1, queues=queues)
        start = time.process_time()
        schedule.simulate()
        assert time.process_time() - start < 0.25, f"{queues}: {time.process_time() - start:.3f} s of CPU for 300 operations"
