"""The streams front end (gpucourse.streams): exact results and recorded timelines on the model,
the same calls carried out across a process boundary, and clear errors."""

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
