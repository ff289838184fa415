"""The streams front end (gpucourse.streams): exact results and recorded timelines on the model,
the same calls carried out across a process boundary, and clear errors."""

import functools
import re

import pytest
import torch

from gpucourse import streams


def double(x):
    return 2 * x


def per_chunk_streams(fn, host_chunks):
    lanes = [streams.Stream() for _ in host_chunks]
    on_device = [streams.to_device(chunk, stream=lane) for chunk, lane in zip(host_chunks, lanes)]
    computed = [streams.launch(fn, x, stream=lane) for x, lane in zip(on_device, lanes)]
    results = [streams.to_host(y, stream=lane) for y, lane in zip(computed, lanes)]
    streams.synchronize()
    return results


def test_a_modelled_run_computes_exactly_and_records_every_call():
    data = [torch.randn(1000) for _ in range(3)]
    with streams.modelled("T4") as run:
        values = run.values(per_chunk_streams(streams.kernel(double, seconds=1e-3), run.host_chunks(data)))
    assert all(torch.equal(value, 2 * x) for value, x in zip(values, data))
    timeline = run.timeline()
    assert [interval.kind for interval in timeline.intervals] == ["h2d"] * 3 + ["kernel"] * 3 + ["d2h"] * 3
    copy = 10e-6 + 4000 / 15.75e9  # 1000 float32 over PCIe 3.0 x16, pinned, after the copy's fixed cost (an assumption)
    assert timeline.makespan == pytest.approx(copy + 3e-3 + copy) and timeline.races == []
    assert timeline.peak_device_bytes == 6 * 4096  # 3 inputs and 3 outputs of 4000 bytes, each in a block of 4096


def test_pageable_host_tensors_block_the_host():
    """A plain tensor is pageable: its copy in runs at half the link's bandwidth and the host waits for it."""
    with streams.modelled("T4") as run:
        first = streams.to_device(torch.zeros(1000), stream=streams.Stream())
        streams.launch(streams.kernel(double, seconds=1e-3), first, stream=streams.Stream())
    copy_in, kernel = run.timeline().intervals
    assert copy_in.seconds == pytest.approx(10e-6 + 2 * 4000 / 15.75e9) and kernel.start == pytest.approx(copy_in.end)


def test_kernel_time_defaults_to_one_pass_over_memory():
    with streams.modelled("A100") as run:
        streams.launch(double, streams.to_device(torch.zeros(1 << 20)))
    kernel = run.timeline().intervals[-1]
    assert kernel.seconds == pytest.approx(2 * 4 * (1 << 20) / 2039e9)


def test_events_order_two_streams():
    with streams.modelled("T4") as run:
        copies, compute = streams.Stream("copies"), streams.Stream("compute")
        x = streams.to_device(streams.pinned(torch.ones(10)), stream=copies)
        ready = streams.Event()
        ready.record(copies)
        compute.wait_event(ready)
        y = streams.launch(streams.kernel(double, seconds=1.0), x, stream=compute)
        result = streams.to_host(y, stream=compute)
        compute.synchronize()
        assert torch.equal(streams.value(result), 2 * torch.ones(10))
    assert run.timeline().races == []


def test_reading_a_result_before_waiting_is_a_race():
    with streams.modelled("T4") as run:
        lane = streams.Stream()
        result = streams.to_host(streams.to_device(streams.pinned(torch.ones(10)), stream=lane), stream=lane)
        streams.value(result)
    assert [race.kind for race in run.timeline().races] == ["read after write"]


def test_clear_errors():
    with streams.modelled("T4"):
        with pytest.raises(TypeError, match="device buffers"):
            streams.launch(double, torch.ones(3))
        with pytest.raises(TypeError, match="to_host copies a device buffer"):
            streams.to_host(torch.ones(3))
        with pytest.raises(TypeError, match="host tensor"):
            streams.to_device([1, 2, 3])
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no GPU here"):
            streams.Stream()


class ProcessBoundary:
    """Stands for the autograder's proxy: arguments and replies cross as they would between processes
    (handles and plain data only), and the function's calls come back through ``dispatch``."""

    def __init__(self, fn):
        self.fn = fn

    def call_with_streams(self, dispatch, *args):
        import pickle

        def across(method, *call_args):
            return pickle.loads(pickle.dumps(dispatch(method, *pickle.loads(pickle.dumps(call_args)))))

        with streams.using(streams.RemoteBackend(across)):
            return pickle.loads(pickle.dumps(self.fn(*pickle.loads(pickle.dumps(args)))))


def test_across_a_process_boundary_the_calls_are_carried_out_and_recorded_on_the_trusted_side():
    data = [torch.randn(100) for _ in range(4)]
    seen = []

    def spy(fn, host_chunks):
        seen.extend(type(chunk).__name__ for chunk in host_chunks)
        return per_chunk_streams(fn, host_chunks)

    with streams.modelled("T4") as run:
        values = run.values(run.call(ProcessBoundary(spy), double, run.host_chunks(data)))
    assert seen == ["Handle"] * 4, "the function sees handles, never the data"
    assert all(torch.equal(value, 2 * x) for value, x in zip(values, data))
    assert len(run.timeline().intervals) == 12 and run.timeline().races == []


def test_across_a_process_boundary_only_the_front_ends_calls_exist():
    with streams.modelled("T4") as run:
        exported = streams._Exported(run.backend)
        with pytest.raises(ValueError, match="unknown call"):
            exported.dispatch("__init__")


def test_results_must_be_what_to_host_gave_back():
    with streams.modelled("T4") as run:
        with pytest.raises(TypeError, match="return what to_host gave back"):
            run.values([torch.ones(3)])


def test_a_pinned_buffer_is_not_a_result():
    """Only what to_host gave back is a result: a host buffer filled on the host (the right numbers or not) is refused."""
    with streams.modelled("T4") as run:
        with pytest.raises(TypeError, match="a host buffer to_host did not give back"):
            run.values([streams.pinned(torch.ones(3))])


def _in_pairs(fn, host_chunks):
    """Two chunks merged on the host, one kernel per pair, the result split and sent through the device again."""
    results = []
    for pair in (host_chunks[:2], host_chunks[2:]):
        lane = streams.Stream()
        merged = streams.to_device(streams.pinned(torch.cat([streams.value(chunk) for chunk in pair])), stream=lane)
        out = streams.to_host(streams.launch(fn, merged, stream=lane), stream=lane)
        lane.synchronize()
        for part in torch.split(streams.value(out), [streams.value(chunk).numel() for chunk in pair]):
            results.append(streams.to_host(streams.to_device(streams.pinned(part), stream=lane), stream=lane))
        lane.synchronize()
    return results


def _computed_twice(fn, host_chunks):
    """The right work, then fn once more on the result: not the map."""
    lane = streams.Stream()
    results = [streams.to_host(streams.launch(fn, streams.launch(fn, streams.to_device(chunk, stream=lane), stream=lane),
                                              stream=lane), stream=lane) for chunk in host_chunks]
    lane.synchronize()
    return results


def _reversed(fn, host_chunks):
    return per_chunk_streams(fn, host_chunks)[::-1]


@pytest.mark.parametrize(("answer", "found"), [
    (per_chunk_streams, None),
    (_in_pairs, "it is a host buffer that is not a chunk copied in, copied out"),
    (_computed_twice, "it is double computed on [double computed on [chunk 0 copied in]], copied out"),
    (_reversed, "result 0 should be chunk 0 copied in, computed by the map's function on the device and copied out; "
                "it is double computed on [chunk 3 copied in], copied out"),
])
def test_mapped_values_are_each_chunks_own_work_on_the_device(answer, found):
    data = [torch.randn(10) for _ in range(4)]
    work = streams.kernel(double, seconds=1e-6)
    with streams.modelled("T4") as run:
        chunks = run.host_chunks(data)
        results = answer(work, chunks)
        if found is None:
            assert all(torch.equal(value, 2 * x) for value, x in zip(run.mapped_values(results, work, chunks), data))
        else:
            with pytest.raises(ValueError, match=re.escape(found)):
                run.mapped_values(results, work, chunks)
    with streams.modelled("T4") as run:
        with pytest.raises(ValueError, match="expected 4 results, one per chunk, got 3"):
            run.mapped_values(per_chunk_streams(work, run.host_chunks(data[:3])), work, run.host_chunks(data))


def test_a_kernel_per_elements_takes_time_in_proportion_to_its_input():
    work = streams.kernel(double, seconds=1e-3, per_elements=1000)
    with streams.modelled("T4") as run:
        streams.launch(work, streams.to_device(streams.pinned(torch.zeros(2000))))
        streams.launch(work, streams.to_device(streams.pinned(torch.zeros(500))))
    kernels = [interval.seconds for interval in run.timeline().intervals if interval.kind == "kernel"]
    assert kernels == pytest.approx([2e-3, 0.5e-3])
    with pytest.raises(ValueError, match="per_elements"):
        streams.kernel(double, per_elements=1000)


def test_streams_and_events_get_names_of_the_models_own():
    """Two streams given one name are two streams, and none passes for the host: reading a result before waiting is a race."""
    with streams.modelled("T4") as run:
        first, second = streams.Stream("host"), streams.Stream("host")
        assert len({first.name, second.name, "host", ""}) == 4
        assert streams.Event("e").name != streams.Event("e").name
        result = streams.to_host(streams.to_device(streams.pinned(torch.ones(10)), stream=first), stream=first)
        streams.value(result)
    assert [race.kind for race in run.timeline().races] == ["read after write"]


def test_only_the_streams_and_events_a_run_hands_out_order_work():
    """Issue 46: a stream or event built by hand (whatever it is named, "host" included), or one of another run, is
    refused; a name is a label, so Stream("default") is a stream of its own, and the host is no stream of the model."""
    import types

    with streams.modelled("T4") as other:
        kept = streams.Event()
    with streams.modelled("T4") as run:
        lane = streams.Stream()
        forged = streams.Stream.__new__(streams.Stream)
        forged.backend, forged.name, forged.handle = run.backend, "host", types.SimpleNamespace(name="host")
        x = streams.to_device(streams.pinned(torch.ones(10)), stream=lane)
        for call in (lambda: streams.to_host(x, stream=forged), lambda: streams.synchronize(forged), lambda: lane.wait_event(kept),
                     lambda: streams.to_host(x, stream="host"), lambda: lane.wait_event(lane)):
            with pytest.raises(TypeError, match="of this run"):
                call()
        assert streams.Stream("default").name != run.backend.default_stream.name
    assert other.timeline().intervals == [] and len(run.timeline().intervals) == 1
    from gpucourse.sim.streams import Schedule

    for name in ("", None):
        with pytest.raises(ValueError, match="non-empty string"):
            Schedule().h2d("copy", name, seconds=1.0)


def test_across_a_process_boundary_handles_are_the_runs_own():
    """A handle kept from another run, or one made by hand, is refused on the trusted side."""
    kept = []

    def keeps_an_event(fn, host_chunks):
        lane = streams.Stream()
        if not kept:
            kept.append(streams.Event())
            kept[0].record(lane)
        lane.wait_event(kept[0])
        return per_chunk_streams(fn, host_chunks)

    with streams.modelled("T4") as run:
        run.values(run.call(ProcessBoundary(keeps_an_event), double, run.host_chunks([torch.ones(3)])))
    with streams.modelled("T4") as run:
        with pytest.raises(TypeError, match="an event this run did not hand out"):
            run.call(ProcessBoundary(keeps_an_event), double, run.host_chunks([torch.ones(3)]))
    with streams.modelled("T4") as run:
        made = ProcessBoundary(lambda fn, chunks: streams.to_device(chunks[0], stream=streams.Handle(0, "stream")))
        with pytest.raises(TypeError, match="a stream this run did not hand out"):
            run.call(made, double, run.host_chunks([torch.ones(3)]))


def test_streams_come_from_torchs_pool_of_32_per_priority():
    """c10/cuda/CUDAStream.cpp hands streams out round-robin from kStreamsPerPool = 32 per priority level (4 levels,
    CUDAStream.h; a priority beyond them maps to the nearest): the 33rd Stream() is the 1st again, so their work runs
    in order; a high-priority stream comes from a pool of its own and its kernel goes first."""
    with streams.modelled("T4") as run:
        low = [streams.Stream() for _ in range(33)]
        high = [streams.Stream(priority=-1) for _ in range(33)]
        assert low[32].name == low[0].name and len({lane.name for lane in low}) == 32
        assert high[32].name == high[0].name and not {lane.name for lane in high} & {lane.name for lane in low}
        assert streams.Stream(priority=-9).name != streams.Stream(priority=-3).name  # both the highest level, 2 streams in
        work = streams.kernel(double, seconds=1.0)
        x = streams.to_device(streams.pinned(torch.ones(4)), stream=low[1])
        streams.synchronize()
        streams.launch(work, x, stream=low[0])
        streams.launch(work, x, stream=low[32])  # the same stream as low[0]: after it
        streams.launch(work, x, stream=low[2])
        streams.launch(work, x, stream=high[5])
        with pytest.raises(TypeError, match="priority is an integer"):
            streams.Stream(priority=0.5)
    kernels = [interval for interval in run.timeline().intervals if interval.kind == "kernel"]
    assert [kernel.stream for kernel in kernels[:2]] == [low[0].name] * 2

    def spread(fn, host_chunks):  # across the grader's boundary: the default stream is no stream of the pool either
        lanes = [streams.Stream() for _ in range(33)]
        x = streams.to_device(host_chunks[0])
        streams.synchronize()
        for lane in (lanes[0], lanes[32], lanes[1], lanes[31]):
            streams.launch(fn, x, stream=lane)
        return []

    with streams.modelled("T4") as run:
        run.call(ProcessBoundary(spread), double, run.host_chunks([torch.ones(3)]))
    copy, first, again, second, last = (interval.stream for interval in run.timeline().intervals)
    assert copy == run.backend.default_stream.name and first == again != second and copy not in (first, second, last)
    begin = kernels[3].start  # all four issued by then: the high-priority kernel goes first, low[32] waits for low[0]
    assert [kernel.start - begin for kernel in kernels] == pytest.approx([1, 2, 3, 0])


def reuse_slots(fn, host_chunks, slots=2, guard=True):
    """Chunk i through slot i % slots: its input and output buffers written again with out=, on a copy-in, a compute
    and a copy-out stream, events for the data and (``guard``) for the reuse: a slot's input is rewritten only after
    the kernel that read it, its output only after the copy out that read it."""
    copies, compute, back = streams.Stream(), streams.Stream(), streams.Stream()
    inputs, outputs, computed, copied, results = [None] * slots, [None] * slots, [None] * slots, [None] * slots, []
    for i, chunk in enumerate(host_chunks):
        k = i % slots
        if guard and computed[k] is not None:
            copies.wait_event(computed[k])
        inputs[k] = streams.to_device(chunk, stream=copies, out=inputs[k])
        loaded = streams.Event()
        loaded.record(copies)
        compute.wait_event(loaded)
        if guard and copied[k] is not None:
            compute.wait_event(copied[k])
        outputs[k] = streams.launch(fn, inputs[k], stream=compute, out=outputs[k])
        computed[k] = streams.Event()
        computed[k].record(compute)
        back.wait_event(computed[k])
        results.append(streams.to_host(outputs[k], stream=back))
        copied[k] = streams.Event()
        copied[k].record(back)
    streams.synchronize()
    return results


@pytest.mark.parametrize("across", [False, True])
def test_out_reuses_device_buffers_and_events_guard_the_reuse(across):
    """to_device(..., out=) and launch(..., out=) write into buffers already allocated: 2 slots hold 4 chunks in 2
    blocks each way. Without the events that guard the reuse, the copy into a slot races with the kernel still
    reading it (write after read). The same calls work across the grader's process boundary."""
    data = [torch.randn(100) for _ in range(4)]
    work = streams.kernel(double, seconds=1e-3)
    outcomes = {}
    for guard in (True, False):
        with streams.modelled("T4") as run:
            chunks = run.host_chunks(data)
            answer = functools.partial(reuse_slots, guard=guard)
            results = run.call(ProcessBoundary(answer), work, chunks) if across else answer(work, chunks)
            assert all(torch.equal(value, 2 * x) for value, x in zip(run.mapped_values(results, work, chunks), data))
        outcomes[guard] = run.timeline()
    assert outcomes[True].races == [] and outcomes[True].peak_device_bytes == 4 * 512
    assert "write after read" in {race.kind for race in outcomes[False].races}


def test_release_returns_a_block_and_record_stream_keeps_it_from_a_stream_still_using_it():
    """streams.release gives a buffer's block back to the caching allocator: the next allocation of its size on the
    stream that allocated it reuses it at once (PyTorch "CUDA semantics", "Memory management"). A buffer read on
    another stream is reused under that read unless record_stream says the stream uses it (Tensor.record_stream)."""
    def run(record):
        with streams.modelled("T4") as modelled_run:
            main, side = streams.Stream(), streams.Stream()
            x = streams.to_device(streams.pinned(torch.ones(1000)), stream=main)
            filled = streams.Event()
            filled.record(main)
            side.wait_event(filled)
            streams.launch(streams.kernel(double, seconds=1e-3), x, stream=side)
            if record:
                streams.record_stream(x, side)
            streams.release(x)
            streams.to_device(streams.pinned(torch.zeros(1000)), stream=main)
            with pytest.raises(ValueError, match="was released"):
                streams.to_host(x, stream=main)
        return modelled_run.timeline()

    unrecorded, recorded = run(False), run(True)
    assert [race.kind for race in unrecorded.races] == ["write after read"] and unrecorded.allocations[2].reused
    assert recorded.races == [] and not recorded.allocations[2].reused
    assert recorded.peak_device_bytes == unrecorded.peak_device_bytes + 4096
    with streams.modelled("T4"):
        x = streams.to_device(streams.pinned(torch.ones(10)))
        with pytest.raises(ValueError, match="same shape and dtype"):
            streams.to_device(streams.pinned(torch.ones(11)), out=x)
        with pytest.raises(TypeError, match="takes a device buffer"):
            streams.release(torch.ones(3))


def test_on_a_gpu_the_calls_map_to_torch():
    """The CUDA backend's new calls, checked with CPU tensors and a stand-in for torch.cuda.stream: out= is copy_ and
    out= of torch's functions (a function without out= has its result copied in), release keeps no reference (the
    allocator gets the block back with the last one), record_stream is Tensor.record_stream."""
    import contextlib
    from unittest import mock

    backend = streams.CudaBackend.__new__(streams.CudaBackend)
    lane = mock.Mock(handle="a stream")
    with mock.patch.object(torch.cuda, "stream", lambda handle: contextlib.nullcontext()):
        out = torch.zeros(3)
        assert backend.to_device(torch.ones(3), lane, out=out) is out and torch.equal(out, torch.ones(3))
        assert backend.launch(torch.neg, (torch.ones(3),), lane, out=out) is out and torch.equal(out, -torch.ones(3))
        assert backend.launch(double, (torch.ones(3),), lane, out=out) is out and torch.equal(out, 2 * torch.ones(3))
    assert backend.release(out) is None
    tensor = mock.Mock()
    backend.record_stream(tensor, lane)
    tensor.record_stream.assert_called_once_with("a stream")
