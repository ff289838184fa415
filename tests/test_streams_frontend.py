"""The streams front end (gpucourse.streams): exact results and recorded timelines on the model,
the same calls carried out across a process boundary, and clear errors."""

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
    copy = 4000 / 15.75e9  # 1000 float32 over PCIe 3.0 x16, pinned
    assert timeline.makespan == pytest.approx(copy + 3e-3 + copy) and timeline.races == []


def test_pageable_host_tensors_block_the_host():
    """A plain tensor is pageable: its copy in runs at half the link's bandwidth and the host waits for it."""
    with streams.modelled("T4") as run:
        first = streams.to_device(torch.zeros(1000), stream=streams.Stream())
        streams.launch(streams.kernel(double, seconds=1e-3), first, stream=streams.Stream())
    copy_in, kernel = run.timeline().intervals
    assert copy_in.seconds == pytest.approx(2 * 4000 / 15.75e9) and kernel.start == pytest.approx(copy_in.end)


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
