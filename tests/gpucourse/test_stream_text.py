"""Tests of gpucourse.stream_text: each sentence is checked against numbers that give each of its outcomes.

Timelines here are stand-ins with the public fields the functions read (intervals, races, makespan,
ideal_seconds, engine_busy), so the tests hold whatever the stream model computes.
"""

from types import SimpleNamespace

import pytest

from gpucourse import stream_text

MS = 1e-3


def interval(label, kind, stream, engine, start_ms, end_ms):
    return SimpleNamespace(label=label, kind=kind, stream=stream, engine=engine, start=start_ms * MS, end=end_ms * MS)


def timeline(intervals, races=(), busy=None, makespan_ms=None):
    """A stand-in Timeline: engine_busy summed from the intervals unless given."""
    if busy is None:
        busy = {}
        for i in intervals:
            if i.engine is not None:
                busy[i.engine] = busy.get(i.engine, 0.0) + i.end - i.start
    makespan = makespan_ms * MS if makespan_ms is not None else max(i.end for i in intervals)
    return SimpleNamespace(intervals=list(intervals), races=list(races), engine_busy=busy, makespan=makespan,
                           ideal_seconds=max(busy.values(), default=0.0),
                           of=lambda label: next(i for i in intervals if i.label == label))


@pytest.mark.parametrize("a, b, expected", [
    (22.3, 13.1, "breadth-first: 22.3 ms, 1.70× as long as depth-first (13.1 ms)"),
    (2.13, 3.73, "breadth-first: 2.13 ms, 1.75× faster than depth-first (3.73 ms)"),
    (3.73, 3.74, "breadth-first: 3.73 ms, the same as depth-first (3.74 ms)"),
], ids=["longer", "shorter", "within 1%"])
def test_compare_chooses_its_words_from_the_two_times(a, b, expected):
    assert stream_text.compare("breadth-first", a * MS, "depth-first", b * MS) == expected


def test_copy_model_reads_a_flat_rate_and_a_fixed_cost_from_the_times():
    sizes = [2**16, 2**20, 2**24]
    flat = stream_text.copy_model(sizes, [s / 16e9 for s in sizes], [s / 8e9 for s in sizes], card="T4", pageable_holds_host=True)
    assert flat.startswith("Modelled for T4: pinned copies move 16 GB/s, pageable ones 8 GB/s (a pageable copy takes 2.00× as long as a pinned one); "
                           "a pageable copy holds the host until it is done.")
    assert "no fixed cost per copy, so the model's rate is the same for every size" in flat and "µs" not in flat
    fixed = stream_text.copy_model(sizes, [10e-6 + s / 16e9 for s in sizes], [10e-6 + s / 8e9 for s in sizes], card="T4",
                                   pageable_holds_host=False, real_fixed_seconds=10e-6)
    # 64 KiB: 4.096 µs of bytes + 10 µs, so 29% of the rate the bytes alone would reach
    assert "does not hold the host" in fixed and "Each copy also costs 10 µs whatever its size" in fixed
    assert "the smallest copy here reaches 29% of the largest one's rate" in fixed and "a real copy's fixed cost is about 10 µs" in fixed


def test_measured_bandwidth_names_each_peak_where_it_levels_off_and_which_memory_is_faster():
    sizes = [2**16, 2**20, 2**24]
    text = stream_text.measured_bandwidth(sizes, {"pageable": [2e9, 9e9, 10e9], "pinned": [4e9, 20e9, 25e9]}, link_bandwidth=31.5e9,
                                          device="GPU X", size_text=lambda size: f"{size // 1024} KiB")
    assert text.startswith("Measured on GPU X: pageable copies peak at 10 GB/s (32% of the link's datasheet rate), within 10% of it from 1024 KiB on; "
                           "pinned copies peak at 25 GB/s (79% of the link's datasheet rate), within 10% of it from 16384 KiB on")
    assert text.endswith("At 16384 KiB, a pinned copy: 0.671 ms, 2.50× faster than a pageable one (1.68 ms).")
    reversed_rates = stream_text.measured_bandwidth(sizes, {"pageable": [4e9, 20e9, 25e9], "pinned": [2e9, 9e9, 10e9]}, link_bandwidth=31.5e9,
                                                    device="GPU X")
    assert "a pinned copy: 1.68 ms, 2.50× as long as a pageable one" in reversed_rates


@pytest.mark.parametrize("first, again, expected", [
    (80e-3, 40e-3, "(2.0× faster): PyTorch's caching host allocator had kept the page-locked block"),
    (40e-3, 40.1e-3, ": no faster, so the first call paid nothing for page-locking that showed here"),
], ids=["cached block reused", "no difference"])
def test_pin_cost_says_whether_the_second_call_was_cheaper(first, again, expected):
    text = stream_text.pin_cost("256 MiB", first, again)
    assert text.startswith("pin_memory() of 256 MiB: the first call took") and expected in text


def test_ranking_orders_the_times_and_scales_them_by_the_fastest():
    text = stream_text.ranking({"pin then copy": 30 * MS, "pinned beforehand": 5 * MS, "pageable": 10 * MS}, device="GPU X")
    assert text == "From the fastest to the slowest, measured on GPU X: pinned beforehand 5 ms, pageable 10 ms (2.00×), pin then copy 30 ms (6.00×)."


@pytest.mark.parametrize("blocking, non_blocking, expected", [
    (12, 0.2, ("it waited for the work queued before it;", "it did not wait for the work queued before it.")),
    (12, 11, ("it waited for the work queued before it;", "it waited for the work queued before it.")),
    (0.3, 0.2, ("it did not wait for the work queued before it;", "it did not wait for the work queued before it.")),
], ids=["only the blocking copy waits", "both wait", "neither waits"])
def test_host_wait_says_which_copy_waited_for_the_queued_work(blocking, non_blocking, expected):
    text = stream_text.host_wait(blocking * MS, non_blocking * MS, 10 * MS)
    assert text.startswith("With 10 ms of work queued on the stream, the blocking .to('cuda') held the host")
    assert all(part in text for part in expected)


def test_host_clock_calls_a_short_wait_almost_free_and_a_long_one_not():
    assert stream_text.host_clock(0.02 * MS, 4 * MS).endswith(
        "0% of the 4 ms until the copy was done: timed with the host clock alone, it would pass for almost free.")
    assert stream_text.host_clock(3.5 * MS, 4 * MS).endswith(
        "88% of the 4 ms until the copy was done: this call held the host for most of the copy.")


def test_idle_gap_splits_the_busiest_engines_idle_time():
    """Compute is busiest (6 ms): idle 1 ms before k0, 1 ms between k0 and k1, 2 ms after k1 up to the 10-ms makespan."""
    t = timeline([interval("in0", "h2d", "s0", "h2d", 0, 1), interval("k0", "kernel", "s0", "compute", 1, 4),
                  interval("k1", "kernel", "s1", "compute", 5, 8), interval("out1", "d2h", "s1", "d2h", 8, 10)])
    assert stream_text.idle_gap(t) == ("The busiest engine, the compute engine, has 6 ms of work in the 10 ms makespan; it idles 1 ms before its first "
                                       "operation (filling the pipeline), 1 ms between operations and 2 ms after its last (draining): together, "
                                       "the 4 ms between the makespan and the ideal bound.")
    overlapping = timeline([interval("k0", "kernel", "s0", "compute", 0, 4), interval("k1", "kernel", "s1", "compute", 2, 6)], makespan_ms=6)
    assert stream_text.idle_gap(overlapping).endswith("its operations overlap one another, so that work takes 6 ms of time.")


@pytest.mark.parametrize("makespans, expected", [
    ({1: 8, 2: 4.4, 4: 4, 8: 4}, "With 2 streams the makespan falls from 8 ms (1 stream) to 4.4 ms: 90% of the way to the best here, 4 ms with 4 streams; "
                                 "8 streams take no less."),
    ({1: 8, 2: 7, 4: 5, 8: 4}, "With 2 streams the makespan falls from 8 ms (1 stream) to 7 ms: 25% of the way to the best here, 4 ms with 8 streams."),
    ({1: 8, 2: 8, 4: 8.02}, "More streams change nothing here: every count from 1 to 4 takes about 8 ms."),
], ids=["most of the way", "little of the way", "no gain"])
def test_stream_count_gain_says_how_far_two_streams_go(makespans, expected):
    assert stream_text.stream_count_gain({count: ms * MS for count, ms in makespans.items()}) == expected


def test_first_kernel_wait_names_what_ends_at_its_start():
    # Breadth-first on 2 shared streams: k0 on s0 queued behind in2, in4 and in6.
    shared = [interval(f"in{i}", "h2d", f"s{i % 2}", "h2d", i, i + 1) for i in range(8)]
    shared += [interval("k0", "kernel", "s0", "compute", 7, 8), interval("k1", "kernel", "s1", "compute", 8, 9)]
    assert stream_text.first_kernel_wait(timeline(shared)) == (
        "The first kernel, k0 (stream s0), starts at 7 ms, when in6 ends: on stream s0, in0, in2, in4 and in6 were issued before it, "
        "and a stream runs its work one operation after another, in issue order.")
    # Its own copy in, alone before it on its stream.
    own = [interval("in0", "h2d", "s0", "h2d", 0, 1), interval("in1", "h2d", "s1", "h2d", 1, 2), interval("k0", "kernel", "s0", "compute", 1, 4)]
    assert stream_text.first_kernel_wait(timeline(own)).startswith(
        "The first kernel, k0 (stream s0), starts at 1 ms, when in0 ends: on stream s0, in0 was issued")
    # Its engine busy with an operation of another stream.
    engine = [interval("in1", "h2d", "s1", "h2d", 0, 1), interval("x", "h2d", "other", "compute", 0, 3), interval("k1", "kernel", "s1", "compute", 3, 5)]
    assert stream_text.first_kernel_wait(timeline(engine)) == (
        "The first kernel, k1 (stream s1), starts at 3 ms, when x (stream other) ends: the compute engine was busy with it.")
    # Through an event: a copy on another stream ends when the kernel starts.
    evented = [interval("copy x", "h2d", "copies", "h2d", 0, 2), interval("wait x", "wait", "compute", None, 2, 2),
               interval("use x", "kernel", "compute", "compute", 2, 3)]
    assert stream_text.first_kernel_wait(timeline(evented)) == (
        "The first kernel, use x (stream compute), starts at 2 ms, when copy x on stream copies ends: an event orders it after that operation.")
    free = [interval("copy x", "h2d", "copies", "h2d", 0, 2), interval("use x", "kernel", "compute", "compute", 0, 1)]
    assert stream_text.first_kernel_wait(timeline(free)).endswith("starts at 0 ms: it starts as soon as it is issued, waiting for nothing.")
    assert stream_text.first_kernel_wait(timeline([interval("in0", "h2d", "s0", "h2d", 0, 1)])) == "This timeline has no kernel."
    # Held in a hardware queue: with 2 queues, s0 and s2 share one, and in2 was issued before k0 into it.
    queued = [interval(f"in{i}", "h2d", f"s{i}", "h2d", i, i + 1) for i in range(3)] + [interval("k0", "kernel", "s0", "compute", 2, 3)]
    assert stream_text.first_kernel_wait(timeline(queued), connections=2) == (
        "The first kernel, k0 (stream s0), starts at 2 ms, when in2 of stream s2 starts: it was issued before the kernel into the hardware "
        "queue streams s2 and s0 share, and a queue starts its work in issue order (a false dependency).")
    assert stream_text.first_kernel_wait(timeline(queued)) == (
        "The first kernel, k0 (stream s0), starts at 2 ms, when in1 on stream s1 ends, though neither its stream, its engine nor an event "
        "holds it there: look for a hardware queue it shares with another stream (section 3 of lecture 05).")


def test_races_compare_the_start_with_the_end_of_the_operation_to_follow():
    race = SimpleNamespace(operation="use x", other="copy x", buffer="x", kind="read after write")
    early = timeline([interval("copy x", "h2d", "copies", "h2d", 0, 2), interval("use x", "kernel", "compute", "compute", 0, 1)], [race])
    assert stream_text.races(early) == ("use x reads what copy x writes ('x') and nothing orders them: it starts at 0 ms, before copy x ends "
                                        "at 2 ms, so on a GPU it would use a buffer still being written.")
    late = timeline([interval("copy x", "h2d", "copies", "h2d", 0, 2), interval("use x", "kernel", "compute", "compute", 3, 4)], [race])
    assert "after copy x ends at 2 ms only because of this timing; on a GPU another timing could put it first." in stream_text.races(late)
    assert stream_text.races(timeline([interval("k", "kernel", "s", "compute", 0, 1)])).startswith("No race")


def test_race_versus_order_calls_the_faster_racy_timeline_wrong_only_when_it_is():
    race = SimpleNamespace(operation="use x", other="copy x", buffer="x", kind="read after write")
    racy = timeline([interval("copy x", "h2d", "copies", "h2d", 0, 2), interval("use x", "kernel", "compute", "compute", 0, 1)], [race])
    clean = timeline([interval("copy x", "h2d", "copies", "h2d", 0, 2), interval("use x", "kernel", "compute", "compute", 2, 3)])
    assert stream_text.race_versus_order(racy, clean) == (
        "Without the event the timeline takes 2 ms and has 1 race; with it, 3 ms and no race: the faster timeline is the wrong one.")
    slow_racy = timeline(racy.intervals, [race], makespan_ms=4)
    assert stream_text.race_versus_order(slow_racy, clean) == "Without the event the timeline takes 4 ms and has 1 race; with it, 3 ms and no race."


@pytest.mark.parametrize("speedup, low, high, expected", [
    (1.40, 1.35, 1.45, "the model's figure lies inside the measured range."),
    (1.20, 1.04, 1.26, "the measurement falls 15% short of the model"),
    (1.60, 1.55, 1.65, "the measurement beats the model by 13%"),
], ids=["inside", "short", "beats"])
def test_overlap_measured_says_which_way_the_measurement_misses(speedup, low, high, expected):
    text = stream_text.overlap_measured(speedup, low, high, modelled=1.41, steady=1.45, items=16)
    assert text.startswith(f"Measured {speedup:.2f}× (middle half of the rounds {low:.2f}–{high:.2f}×), "
                           "the model 1.41× for 16 items (1.45× in the steady state): ")
    assert expected in text


def test_items_taken_tells_an_unbounded_loader_from_a_bounded_one():
    assert stream_text.items_taken(16, 16, received=1).endswith(
        "the loader had taken all 16 items from the iterable: it submits every load at once, however many there are.")
    assert stream_text.items_taken(3, 16, received=1).endswith("the loader had taken 3 of 16 items from the iterable: it ran 2 items ahead.")


def test_model_against_measurement_names_the_extremes_and_the_error_range():
    text = stream_text.model_against_measurement({1: 10 * MS, 2: 6 * MS, 4: 5 * MS}, {1: 9 * MS, 2: 6.6 * MS, 4: 6.6 * MS}, device="GPU X", card="H100")
    assert text == ("Fastest with 4 stream(s) measured on GPU X, with 2 and 4 in the model for H100; slowest with 1 measured, 1 modelled; "
                    "the model is off by -10% to +32%.")


def test_wait_chain_follows_what_ends_at_each_start_back_to_an_operation_issued_free():
    """The trap of one queue per engine: in1 waits for the copy engine, busy with out0, which waited for k0 on its stream."""
    trap = timeline([interval("in0", "h2d", "s0", "copy", 0, 1), interval("k0", "kernel", "s0", "compute", 1, 3),
                     interval("out0", "d2h", "s0", "copy", 3, 4), interval("in1", "h2d", "s1", "copy", 4, 5)])
    assert stream_text.wait_chain(trap, "in1") == ("in1 (stream s1) starts at 4 ms, when out0 ends (the copy engine was busy with it); "
                                                   "out0 (stream s0) starts at 3 ms, when k0 ends (its stream's previous operation).")
    assert stream_text.wait_chain(trap, "in1", links=4).endswith("k0 (stream s0) starts at 1 ms, when in0 ends (its stream's previous operation); "
                                                                 "in0 (stream s0) starts at 0 ms, as soon as it is issued.")
    evented = timeline([interval("copy x", "h2d", "copies", "h2d", 0, 2), interval("use x", "kernel", "compute", "compute", 2, 3)])
    assert stream_text.wait_chain(evented, "use x", links=1) == (
        "use x (stream compute) starts at 2 ms, when copy x ends (on another stream: an event or a shared queue holds it until then).")


def _pipeline_ops(starts, streams):
    """Intervals in issue order: {label: (engine, start, end)}, each on streams[label]."""
    kinds = {"h2d": "h2d", "compute": "kernel", "d2h": "d2h"}
    return [interval(label, kinds[engine], streams[label], engine, start, end) for label, (engine, start, end) in starts.items()]


def test_false_dependencies_names_the_shared_queues_and_the_first_operation_held_behind_another_stream():
    streams = {"in0": "s0", "in1": "s1", "k0": "s0", "k1": "s1"}
    # Two queues: each stream has its own, nothing is delayed.
    free = timeline(_pipeline_ops({"in0": ("h2d", 0, 1), "in1": ("h2d", 1, 2), "k0": ("compute", 1, 2), "k1": ("compute", 2, 3)}, streams))
    assert stream_text.false_dependencies(free, free, few_connections=2, many_connections=32) == (
        "2 streams on 2 hardware queues: 3 ms, the same as on 32 (3 ms): every stream has a queue of its own with 2.")
    # One queue: in1 starts later, held by something other than an operation of s0 starting with it.
    shared = timeline(_pipeline_ops({"in0": ("h2d", 0, 1), "in1": ("h2d", 1, 2), "k0": ("compute", 1, 2), "k1": ("compute", 2, 3)}, streams))
    held = timeline(_pipeline_ops({"in0": ("h2d", 0, 1), "in1": ("h2d", 2, 3), "k0": ("compute", 2, 3), "k1": ("compute", 3, 4)}, streams))
    text = stream_text.false_dependencies(held, shared, few_connections=1, many_connections=32)
    assert text.startswith("2 streams on 1 hardware queues: 4 ms, 1.33× as long as on 32 (3 ms); with 1 queues, s0 and s1 share one")
    assert text.endswith("the first operation it delays is in1 (stream s1), at 2 ms instead of 1 ms.")
    same = stream_text.false_dependencies(shared, shared, few_connections=1, many_connections=32)
    assert same.endswith("share one (the model assigns queues round-robin, in the order streams first get work), and no operation starts later for it.")


def test_false_dependencies_says_which_operation_of_another_stream_holds_the_delayed_one():
    """k0 is issued after in1 into their shared queue and starts exactly when in1 starts."""
    streams = {"in0": "s0", "in1": "s1", "k0": "s0"}
    few = timeline(_pipeline_ops({"in0": ("h2d", 0, 1), "in1": ("h2d", 2, 3), "k0": ("compute", 2, 3)}, streams))
    many = timeline(_pipeline_ops({"in0": ("h2d", 0, 1), "in1": ("h2d", 2, 3), "k0": ("compute", 1, 2)}, streams))
    assert stream_text.false_dependencies(few, many, few_connections=1, many_connections=8).endswith(
        "the first operation it delays is k0 (stream s0), at 2 ms instead of 1 ms, when in1 of stream s1, issued before it into the "
        "queue they share, starts: a false dependency.")


def test_concurrency_counts_the_kernels_running_at_once():
    small = timeline([interval(f"k{i}", "kernel", f"s{i}", "compute", 0, 0.2) for i in range(4)])
    full = timeline([interval(f"k{i}", "kernel", f"s{i}", "compute", 0.2 * i, 0.2 * (i + 1)) for i in range(4)])
    assert stream_text.concurrency(small, full, small_blocks=40, full_blocks=4096) == (
        "Grids of 40 blocks: up to 4 at once, 0.2 ms; grids of 4096 blocks: one at a time, 0.8 ms (4.00× as long as the small grids).")
    pairs = timeline([interval(f"k{i}", "kernel", f"s{i}", "compute", 0.2 * (i // 2), 0.2 * (i // 2 + 1)) for i in range(4)])
    assert stream_text.concurrency(pairs, pairs, small_blocks=300, full_blocks=300).startswith("Grids of 300 blocks: up to 2 at once, 0.4 ms;")


def test_priority_jump_says_when_the_request_runs_with_and_without_priority():
    batch = [interval(f"batch {i}", "kernel", f"b{i}", "compute", 0.5 * i, 0.5 * (i + 1)) for i in range(2)]
    urgent = timeline([interval("batch 0", "kernel", "b0", "compute", 0, 0.5), interval("request k", "kernel", "r", "compute", 0.5, 0.6),
                       interval("batch 1", "kernel", "b1", "compute", 0.6, 1.1)])
    plain = timeline(batch + [interval("request k", "kernel", "r", "compute", 1.0, 1.1)])
    assert stream_text.priority_jump(urgent, plain, "request k") == (
        "With the higher priority, request k starts at 0.5 ms, when batch 0 ends: the kernel already running runs to its end (no preemption); "
        "without priorities it starts at 1 ms, after batch 1, issued before it: it is done at 0.6 ms instead of 1.1 ms.")
    assert stream_text.priority_jump(urgent, urgent, "request k").endswith("without priorities it starts at 0.5 ms.")


def _memory_timeline(makespan_ms, peak, races=()):
    t = timeline([interval("k", "kernel", "s", "compute", 0, makespan_ms)], races)
    t.peak_device_bytes = peak
    return t


def test_memory_and_races_sets_time_memory_and_races_against_the_reference():
    reuse = SimpleNamespace(operation="copy 2", other="k0", buffer="dev 5", kind="write after read", reused="dev 1")
    plain = SimpleNamespace(operation="copy 2", other="k0", buffer="dev 1", kind="write after read", reused=None)
    text = stream_text.memory_and_races({"two slots": _memory_timeline(4, 12), "one slot": _memory_timeline(6, 8),
                                         "resident": _memory_timeline(4, 36), "unguarded": _memory_timeline(4, 12, [plain, plain]),
                                         "no record_stream": _memory_timeline(4, 12, [reuse])},
                                        reference="two slots", size_text=lambda n: f"{n} MiB")
    assert text == ("two slots: 4 ms, 12 MiB held on the device at peak, no race; one slot: 6 ms (1.50× as long as two slots), 8 MiB (0.67× the memory), "
                    "no race; resident: 4 ms (the same as two slots), 36 MiB (3.00× the memory), no race; unguarded: 4 ms (the same as two slots), "
                    "12 MiB (the same memory), 2 races (the first: copy 2 overwrites what k0 reads, with nothing ordering them); no record_stream: 4 ms "
                    "(the same as two slots), 12 MiB (the same memory), 1 race (the first: copy 2 writes into the memory block 'dev 1' had, with "
                    "nothing ordering it after k0, which reads 'dev 1').")


def test_reuse_observed_reports_the_counts_and_does_not_call_silence_safety():
    text = stream_text.reuse_observed({"without record_stream": 5, "with record_stream": 0}, 7, device="GPU X",
                                      errors={"without record_stream": 0.25, "with record_stream": 0.0})
    assert text == ("Measured on GPU X: without record_stream, 5 of 7 prefetched batches; with record_stream, 0 of 7 prefetched batches landed in "
                    "the memory of a batch whose kernels had not finished; without record_stream, losses up to 0.25 away from those of the loop "
                    "without a side stream; with record_stream, the same losses as the loop without a side stream.")
    quiet = stream_text.reuse_observed({"without record_stream": 0, "with record_stream": 0}, 7, device="GPU X")
    assert quiet.endswith("(none here: the GPU kept up with the host this time, which does not make the version without record_stream safe).")


def test_sync_flags_lists_the_calls_torch_warned_about_and_the_others():
    assert stream_text.sync_flags({".item()": True, "x * 2": False, ".to('cpu')": True}, device="GPU X") == (
        "Measured on GPU X: torch warned at .item() and .to('cpu'); not at x * 2.")
    assert stream_text.sync_flags({"x * 2": False}, device="GPU X") == "Measured on GPU X: torch warned at none of the calls; not at x * 2."
    assert stream_text.sync_flags({".item()": True}, device="GPU X") == "Measured on GPU X: torch warned at .item()."


TRACE = {"traceEvents": [  # what torch.profiler's export_chrome_trace writes, cut down: CPU ops, a kernel, copies, a memset
    {"ph": "X", "cat": "cpu_op", "name": "aten::tanh", "ts": 90.0, "dur": 20.0, "args": {}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 100.0, "dur": 300.0, "args": {"stream": 7, "device": 0}},
    {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>", "ts": 400.0, "dur": 400.0, "args": {"stream": 7}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 400.0, "dur": 300.0, "args": {"stream": 9}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": 800.0, "dur": 300.0, "args": {"stream": 7}},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 1100.0, "dur": 10.0, "args": {"stream": 9}},
    {"ph": "i", "cat": "kernel", "name": "a marker, no duration", "ts": 50.0},
]}


def test_profiled_rows_reads_kernels_and_copies_with_their_stream_and_engine():
    rows = stream_text.profiled_rows(TRACE)
    assert [(engine, round(start * 1e6), round(end * 1e6), stream) for _, engine, start, end, stream in rows] == [
        ("h2d", 0, 300, 7), ("compute", 300, 700, 7), ("h2d", 300, 600, 9), ("d2h", 700, 1000, 7), ("compute", 1000, 1010, 9)]
    assert stream_text.profiled_rows({"traceEvents": []}) == []


def test_copy_overlap_is_the_share_of_kernel_time_with_a_copy_running():
    rows = stream_text.profiled_rows(TRACE)
    # kernels 300-700 and 1000-1010 µs (410 µs); copies cover 300-600 of them: 300 / 410
    assert stream_text.copy_overlap(rows) == pytest.approx(300 / 410)
    assert stream_text.copy_overlap([("k", "compute", 0.0, 1.0)]) == 0.0
    assert stream_text.copy_overlap([("in", "h2d", 0.0, 1.0)]) == 0.0


def test_profiled_streams_counts_the_work_per_stream_and_compares_the_overlap_with_the_model():
    rows = stream_text.profiled_rows(TRACE)
    model = timeline([interval("in0", "h2d", "s0", "h2d", 0, 1), interval("k0", "kernel", "s0", "compute", 1, 2),
                      interval("in1", "h2d", "s1", "h2d", 1, 2)])
    assert stream_text.profiled_streams(rows, device="GPU X", modelled=model, card="T4") == (
        "Measured on GPU X: 2 streams carried GPU work (stream 7: 1 copy in, 1 kernel, 1 copy out; stream 9: 1 copy in, 1 kernel); "
        "a copy ran during 73% of the kernels' time, against 100% in the model for T4.")
    assert stream_text.profiled_streams([], device="GPU X").startswith("Measured on GPU X: the trace holds no kernel or copy")
