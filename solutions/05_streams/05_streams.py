# %% [markdown]
# # Assignment 05: streams and pinned memory — a pipeline's makespan, an overlapped map, and when pinning pays
#
# This assignment checks the ideas of lecture 05 (`course/05_streams.ipynb`).
# You will work out how long a chunked copy → compute → copy pipeline takes on a GPU's engines, write a pipeline that overlaps copies with compute across streams in a few reused device buffers, prefetch data in the background while the consumer computes, and say when pinning host memory does not pay.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other inputs and edge cases.
# - Without a GPU, your pipeline runs on the course's stream model (`streams.modelled("T4")`): the tensor work is done at once on your CPU, so results are exact, and the model says what a T4's engines would do with your calls (modelled, not measured). The GPU speed item waits for a GPU regrade.
#
# Points: 13 autograded (2 of them on a GPU), 1 graded by hand.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
import collections
import concurrent.futures
import itertools

import torch

import gpucourse
from gpucourse import check, loading, streams, thresholds, timing
from gpucourse.sim import streams as stream_model

print(f"Running on {gpucourse.describe()} (device class {gpucourse.device_class()!r})")
torch.manual_seed(0)

# %% [markdown]
# ## Question 1: the makespan of a chunked pipeline (3 points)
#
# Data too big to copy and then compute in one go is cut into `n_chunks` chunks; each chunk is copied host → device (`h2d` seconds), computed (`compute` seconds), and copied back (`d2h` seconds), on a stream of its own.
# The host issues the work **breadth-first**: every copy in (chunk 0, 1, …), then every kernel, then every copy out.
# The GPU has one compute engine and `copy_engines` copy engines, and **one queue per engine**: each engine runs one operation at a time, in the order the host issued them to it across all streams, and an operation starts when its stream's previous operation and its engine are both done.
# That is how cards before Hyper-Q work (Fermi, compute capability 2.x: the CUDA 4 Programming Guide's "Overlapping Behavior"), the stream model's `queues="per-engine"` (`gpucourse.sim.streams.pipeline(..., queues="per-engine")`).
# Current cards have hardware queues instead (Hyper-Q, 8 by default: the lecture and `gpucourse.sim.streams`), which free a ready copy from the queue of one that is not ready; this question is about the one-queue model, where issue order matters most.
# With 2 or more copy engines, copies in and copies out each have an engine of their own; with 1, both directions share it (older and low-end cards: every card in `gpucourse.gpu_specs` has 2, as CUDA's `asyncEngineCount` reports).
# The copies are from pinned memory, so issuing costs the host nothing.
#
# Write `pipeline_makespan(n_chunks, h2d, compute, d2h, copy_engines=2)`: the time from the first copy in to the end of the last copy out, as a float.
# 0 chunks take 0 seconds.
# Raise `ValueError` for a negative chunk count or duration, or for fewer than 1 copy engine.
#
# **The closed form is the point of this question.** The lecture simulates pipelines operation by operation (`gpucourse.sim.streams.pipeline`, 30–60 µs of CPU a chunk on the course's 2-core machine); that is a fine way to check your answer on a few chunks, but it is not an answer.
# The hidden tests draw their durations when they grade and ask for up to 10**12 chunks, some of them pipelines whose pace changes only after hundreds of millions of chunks, to 12 significant digits: simulating that many chunks does not finish in the item's time limit, and extrapolating from the chunks a simulation can reach gives a wrong answer there.
# Hint: the engine that is busiest sets the pace once the pipeline is full; with one copy engine, look at when each copy out can start and at what it has to wait for.
#
# About 8 lines.

# %% nbgrader={"grade_id": "pipeline_makespan", "solution": true}
def pipeline_makespan(n_chunks, h2d, compute, d2h, copy_engines=2):
    """Seconds from the first copy in to the end of the last copy out; one stream per chunk, issued breadth-first."""
    ### BEGIN SOLUTION
    if n_chunks < 0 or min(h2d, compute, d2h) < 0:
        raise ValueError("chunk counts and durations cannot be negative")
    if copy_engines < 1:
        raise ValueError(f"a GPU has at least one copy engine, got {copy_engines}")
    if n_chunks == 0:
        return 0.0
    if copy_engines >= 2:
        # Three engines in a row, identical chunks: once full, the slowest stage sets the pace.
        return float(h2d + compute + d2h + (n_chunks - 1) * max(h2d, compute, d2h))
    # One engine runs every copy in, then every copy out (issue order). The last copy out ends when the
    # engine has done all the copies, when the first kernel's result had all copies out queued behind it,
    # or when the last kernel is done, whichever is latest.
    last_kernel = h2d + compute + (n_chunks - 1) * max(h2d, compute)
    return float(max(n_chunks * (h2d + d2h), h2d + compute + n_chunks * d2h, last_kernel + d2h))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_pipeline_makespan", "grade": true, "points": 3}
"""pipeline_makespan on two copy engines and on one, against timelines worked out by hand."""
check.assert_approx(pipeline_makespan(1, 2.0, 3.0, 1.0), 6.0, name="one chunk: nothing overlaps")  # 2 + 3 + 1
check.assert_approx(pipeline_makespan(3, 2.0, 3.0, 1.0), 12.0, name="3 chunks, the kernels set the pace")  # 2 + 3 + 1 + 2 × 3
check.assert_approx(pipeline_makespan(4, 4.0, 1.0, 1.0), 18.0, name="4 chunks, the copies in set the pace")  # 4 + 1 + 1 + 3 × 4
check.assert_approx(pipeline_makespan(3, 2.0, 3.0, 1.0, copy_engines=1), 12.0,
                    name="3 chunks on one copy engine")  # outs at 6-7, 8-9, 11-12: each waits for its kernel
### BEGIN HIDDEN TESTS
check.assert_approx(pipeline_makespan(0, 2.0, 3.0, 1.0), 0.0, name="no chunks")
check.assert_approx(pipeline_makespan(5, 1.0, 1.0, 1.0, copy_engines=3), 7.0, name="3 copy engines act as 2")  # 3 + 4 × 1
check.assert_approx(pipeline_makespan(10**9, 1e-3, 2e-3, 5e-4), 1e-3 + 2e-3 + 5e-4 + (10**9 - 1) * 2e-3, name="10**9 chunks")
# One copy engine, the copies together set the pace: 4 × (3 + 2) = 20; the last out cannot start before 3 + 1 + 3 × 3 = 13.
check.assert_approx(pipeline_makespan(4, 3.0, 1.0, 2.0, copy_engines=1), 20.0, name="one copy engine, copy-bound")
# One copy engine, copies out queued behind the first kernel: ins 0-1 and 1-2, k0 1-11, outs 11-16 and 21-26 (k1 ends 21).
check.assert_approx(pipeline_makespan(2, 1.0, 10.0, 5.0, copy_engines=1), 26.0, name="one copy engine, compute-bound")
# The first kernel is slow to finish, so every copy out waits for it: ins 0-1 .. 2-3, k0 1-4, outs from 4: 4 + 3 × 4 = 16.
check.assert_approx(pipeline_makespan(3, 1.0, 3.0, 4.0, copy_engines=1), 16.0, name="one copy engine, outs queued behind the first kernel")
check.assert_approx(pipeline_makespan(10**9, 1e-3, 2e-3, 5e-4, copy_engines=1), 3e-3 + (10**9 - 1) * 2e-3 + 5e-4,
                    name="10**9 chunks on one copy engine")  # the kernels set the pace: the copies take 1.5e-3 per chunk
# Drawn now, so no answer can know them, and sized so only a closed form answers: the model simulates 15,000 to 35,000
# chunks a second (a few million in this item's time), and the second pipeline's pace changes only after 10**8 to 10**9 chunks.
import random

draw = random.SystemRandom()
h2d, compute, d2h, n = draw.uniform(1e-4, 1e-3), draw.uniform(1e-4, 1e-3), draw.uniform(1e-4, 1e-3), draw.randint(10**11, 10**12)
check.assert_approx(pipeline_makespan(n, h2d, compute, d2h), h2d + compute + d2h + (n - 1) * max(h2d, compute, d2h), rel=1e-12,
                    name=f"pipeline_makespan({n}, {h2d!r}, {compute!r}, {d2h!r}) (drawn)")
# One copy engine, d2h >= compute > h2d: the copies out queue behind the first kernel (h2d + compute + n × d2h) until chunk
# `turn`, then the copies in and out together set the pace (n × (h2d + d2h)). A simulation extrapolated from the chunks it
# can reach stays on the first line: 1e-9 to 1e-8 too low, a thousand times the tolerance.
turn, compute = draw.randint(10**8, 10**9), draw.uniform(1e-3, 2e-3)
h2d, d2h = compute / (turn - 1), compute * draw.uniform(1.0, 1.5)
before, after = turn // draw.randint(10, 100), draw.randint(10**11, 10**12)
for n, expected in ((before, h2d + compute + before * d2h), (after, after * (h2d + d2h))):
    check.assert_approx(pipeline_makespan(n, h2d, compute, d2h, copy_engines=1), expected, rel=1e-12,
                        name=f"pipeline_makespan({n}, {h2d!r}, {compute!r}, {d2h!r}, copy_engines=1) (drawn)")


check.assert_raises(ValueError, pipeline_makespan, -1, 1.0, 1.0, 1.0, name="a negative chunk count")
check.assert_raises(ValueError, pipeline_makespan, 2, 1.0, -1.0, 1.0, name="a negative compute time")
check.assert_raises(ValueError, pipeline_makespan, 2, 1.0, 1.0, 1.0, 0, name="no copy engine")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: an overlapped map in bounded memory (6 points, 2 of them on a GPU)
#
# `serial_map(fn, host_chunks)` below runs `fn` on each chunk on the device one chunk at a time: copy in, compute, copy out, wait, release the two device buffers, next chunk.
# The engines take turns: the copy engines idle while the kernel runs, the compute engine idles during the copies.
# It needs little device memory, though: one chunk's input and output at a time.
# Data is cut into chunks because it is too big to copy in one go, so a pipeline that keeps every chunk on the device at once defeats the purpose: an overlapped map must keep a **bounded** number of buffers on the device and reuse them.
#
# Write `overlapped_map(fn, host_chunks)` with the same results, in the same order, with copies and compute overlapped across streams and at most 4 chunks' device buffers (input and output) allocated however many chunks there are (every chunk has the same shape), using the course's front end (`from gpucourse import streams`, as in the lecture):
# `streams.Stream()`, `streams.Event()`, `event.record(stream)`, `stream.wait_event(event)`, `streams.to_device(x, stream=s)`, `streams.launch(fn, x, stream=s)`, `streams.to_host(y, stream=s)`, `streams.synchronize()`, and for memory:
# `streams.to_device(x, stream=s, out=buf)` (copy into a device buffer you already have), `streams.launch(fn, x, stream=s, out=buf)` (write the result into one), `streams.release(buf)` and `streams.record_stream(buf, s)`.
# Return the list of what `to_host` gave back (the host waits for the copies before returning: `synchronize`).
# Each result must be its chunk copied in, computed by `fn` on the device and copied out: the grader's model checks where every result came from, so a chunk that skips the device, or shares a kernel with another chunk, counts as wrong.
# Treat the chunks and what the calls return as opaque: pass them to the calls, do not compute with them (the grader hands your function buffers that live in its own process).
#
# What the model does with memory (PyTorch's caching allocator: the "CUDA semantics" page, "Memory management" and `Tensor.record_stream`):
# - `to_device` and `launch` without `out=` allocate a new buffer on the stream they run on, and it stays allocated until you `streams.release` it (the model cannot see your references; on a GPU, dropping a tensor's last reference releases it, and `release` keeps none).
# - A released buffer's memory is reused at once by the next allocation of its size **on the stream that allocated it**, even while another stream still reads the old buffer; `record_stream(buf, s)` before the release makes it wait for what stream `s` had queued. Memory released on one stream is never handed to another, so a new stream per chunk keeps allocating.
# - Writing into a buffer again (`out=`) while another stream still reads it is a race as well, like reused memory: order it with an event.
#
# Hint: double or triple buffering. Keep a few *slots* (3 are enough here), chunk i going through slot i % 3: the slot's input buffer is copied into and its output buffer written with `out=` each time round.
# With a copy-in, a compute and a copy-out stream, the copy into a slot must wait (an event) for the kernel that read the slot's previous chunk, and the kernel for the copy out of the slot's previous result.
# A stream per slot works too: a stream runs its operations in order, so its own reuse needs no event.
#
# Graded:
# - the results (1 point), on the stream model;
# - the **modelled timeline** of your calls, recorded by the grader for 24 chunks on a T4 (3 points): no race (an operation reading a buffer another stream wrote with no event between them, a buffer rewritten or its memory reused while another stream still reads it, or the host reading a result before waiting for it), **and** a peak device footprint of at most 4 chunks' input and output buffers, **and** a makespan within 10% of the ideal bound (the busiest engine's total time for the work that must be done, each copy with the model's 10 µs fixed cost; `serial_map` takes about 2.8× of it), on the T4 as `gpu_specs` gives it and on other cards of `gpu_specs`.
#   The reference, 3 slots, reaches 1.03–1.07× of the bound with 3 chunks' buffers on every card graded.
#   The model has hardware queues as current cards do (Hyper-Q: 8 of them, CUDA_DEVICE_MAX_CONNECTIONS): streams beyond the eighth share a queue and wait for each other's work, so a stream per chunk overlaps badly too (a stream per chunk, issued breadth-first, takes about 2.1× of the bound on the T4), while a few streams are enough.
#   Every card in `gpu_specs` has a copy engine per direction and Hyper-Q, so the order you issue a chunk's calls in does not change the grade: the issue-order trap is one of cards with one queue per engine (Question 1).
# - on a GPU, your pipeline against `serial_map` on real streams, 8 chunks of 4 M floats already in pinned memory, mapped with `torch.sin` (2 points): it needs 1.2×, and its results must be those of `torch.sin` on that GPU (the CPU's `sin` differs in the last bits: the work must run on the device).
#   That threshold is modelled, not yet measured: no GPU has run this item; `gpucourse.thresholds` models 1.8-1.9× on every card in `gpu_specs` (V100, T4, A100, L4, H100, H200), where the copies set the time and a pipeline overlaps copies in with copies out, and `scripts/gpu_check.sh` will calibrate it on the first GPU run.
#
# About 20 lines.

# %% nbgrader={"grade_id": "serial_map", "locked": true}
def serial_map(fn, host_chunks):
    """fn on each chunk on the device, one chunk at a time, on the default stream; one chunk's buffers allocated at a time."""
    results = []
    for chunk in host_chunks:
        on_device = streams.to_device(chunk)
        computed = streams.launch(fn, on_device)
        results.append(streams.to_host(computed))
        streams.synchronize()  # the next chunk starts when this one is back on the host
        streams.release(on_device)  # on a GPU, the references dropped at the next turn do the same
        streams.release(computed)
    return results


def scale_shift(x):
    """The map of the tests: x -> 2x + 1."""
    return 2.0 * x + 1.0


def modelled_map(map_fn, fn, data, gpu="T4"):
    """map_fn(fn, chunks) on the stream model of ``gpu``: (the results read by the host, the timeline).

    Each result is checked to be its chunk copied in, computed by ``fn`` on the device and copied out.
    """
    with streams.modelled(gpu) as run:
        chunks = run.host_chunks(data)
        results = run.call(map_fn, fn, chunks)
        values = run.mapped_values(results, fn, chunks)
    return values, run.timeline()


def check_results(values, fn, data, name, rtol=0.0, atol=0.0):
    """One result per chunk, in order, each fn(chunk): exactly on the model (computed on this CPU)."""
    assert len(values) == len(data), f"{name}: expected {len(data)} results, one per chunk, got {len(values)}"
    for position, (value, chunk) in enumerate(zip(values, data)):
        check.assert_close(value, fn(chunk), rtol=rtol, atol=atol, name=f"{name}: chunk {position}")


CHUNKS, CHUNK_ELEMENTS, KERNEL_SECONDS = 24, 1 << 16, 30e-6  # 256 KiB chunks: 26.6 µs each way over the T4's PCIe 3.0 link, 10 of them fixed
MEMORY_CHUNKS = 4  # the device footprint allowed: this many chunks' input and output buffers


def traced_overlap(map_fn, gpu, chunks, elements, kernel_seconds):
    """map_fn of ``chunks`` float32 chunks on the model of ``gpu``, results checked: (timeline, the ideal bound, the card, a chunk's bytes).

    The bound is that of the work that must be done (each chunk in, computed, out), not of whatever was issued;
    a kernel takes ``kernel_seconds`` per chunk of ``elements``, in proportion to the elements it is given.
    """
    data = [torch.randn(elements) for _ in range(chunks)]
    values, timeline = modelled_map(map_fn, streams.kernel(scale_shift, seconds=kernel_seconds, per_elements=elements), data, gpu)
    check_results(values, scale_shift, data, f"{chunks} chunks on the {gpu} model")
    schedule = stream_model.Schedule.for_gpu(gpu)
    copy = schedule.copy_seconds(elements * 4)
    ideal = stream_model.pipeline(chunks, copy, kernel_seconds, copy, copy_engines=schedule.copy_engines).simulate().ideal_seconds
    print(f"{gpu}, {chunks} chunks: makespan {timeline.makespan * 1e6:.0f} µs, {timeline.makespan / ideal:.3f}× the ideal bound "
          f"{ideal * 1e6:.0f} µs; peak device footprint {timeline.peak_device_bytes / (2 * elements * 4):.1f} chunks' input and "
          f"output buffers (modelled); {len(timeline.races)} race(s)")
    return timeline, ideal, gpu, elements * 4


def check_race_free(traced):
    timeline, _, card, _ = traced
    assert not timeline.races, f"on the {card} model, {len(timeline.races)} race(s), first: {timeline.races[0]}"


def check_makespan(traced, tolerance=1.10, memory_chunks=MEMORY_CHUNKS):
    """Race-free first (a racy timeline is only as fast as it is wrong), then the footprint and the makespan."""
    check_race_free(traced)
    timeline, ideal, card, chunk_bytes = traced
    # The results were checked to be the whole work, so this holds; it is the model's own guard that no work went missing.
    assert timeline.makespan >= ideal * (1 - 1e-9), (
        f"on the {card} model, the makespan {timeline.makespan * 1e6:.0f} µs is below the {ideal * 1e6:.0f} µs the work needs: work was skipped")
    problems = []
    held = timeline.peak_device_bytes / (2 * chunk_bytes)
    if held > memory_chunks:
        problems.append(f"the device footprint peaked at {held:.1f} chunks' input and output buffers; at most {memory_chunks} are allowed: "
                        "reuse a few buffers (out=), or release them and allocate on the same streams")
    if timeline.makespan > tolerance * ideal:
        problems.append(f"the makespan {timeline.makespan * 1e6:.0f} µs is {timeline.makespan / ideal:.2f}× the ideal "
                        f"{ideal * 1e6:.0f} µs; need at most {tolerance:.2f}×")
    assert not problems, f"on the {card} model, " + "; and ".join(problems)


# %% nbgrader={"grade_id": "overlapped_map", "solution": true}
def overlapped_map(fn, host_chunks):
    """fn on each chunk on the device, copies and compute overlapped across streams, in a few reused buffers; results in order."""
    ### BEGIN SOLUTION
    slots = 3  # triple buffering: a chunk copied in, one computed and one copied out at a time
    copy_in, compute, copy_out = streams.Stream(), streams.Stream(), streams.Stream()
    inputs, outputs, computed, copied = [None] * slots, [None] * slots, [None] * slots, [None] * slots
    results = []
    for i, chunk in enumerate(host_chunks):
        k = i % slots
        if computed[k] is not None:  # the slot's input is still read by the kernel of chunk i - slots
            copy_in.wait_event(computed[k])
        inputs[k] = streams.to_device(chunk, stream=copy_in, out=inputs[k])
        loaded = streams.Event()
        loaded.record(copy_in)
        compute.wait_event(loaded)
        if copied[k] is not None:  # the slot's output is still read by the copy out of chunk i - slots
            compute.wait_event(copied[k])
        outputs[k] = streams.launch(fn, inputs[k], stream=compute, out=outputs[k])
        computed[k] = streams.Event()
        computed[k].record(compute)
        copy_out.wait_event(computed[k])
        results.append(streams.to_host(outputs[k], stream=copy_out))
        copied[k] = streams.Event()
        copied[k].record(copy_out)
    streams.synchronize()  # the host waits for every copy out before it reads a result
    return results
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_overlap_correct", "grade": true, "points": 1}
"""overlapped_map gives serial_map's results, in order, on the stream model."""


data = [torch.randn(1000) for _ in range(4)]
values, _ = modelled_map(overlapped_map, scale_shift, data)
check_results(values, scale_shift, data, "4 chunks of 1000")
### BEGIN HIDDEN TESTS
for count, size in ((1, 7), (9, 333), (3, 0)):
    data = [torch.randn(size) for _ in range(count)]
    values, _ = modelled_map(overlapped_map, torch.sin, data)
    check_results(values, torch.sin, data, f"{count} chunks of {size}")
values, _ = modelled_map(overlapped_map, scale_shift, [])
assert list(values) == [], f"no chunks: expected no results, got {len(values)}"
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_overlap_makespan", "grade": true, "points": 3}
"""The model's timeline of overlapped_map on a T4: race-free, at most 4 chunks' buffers, within 10% of the ideal bound (serial_map takes 2.8x)."""
check_makespan(traced_overlap(overlapped_map, "T4", CHUNKS, CHUNK_ELEMENTS, KERNEL_SECONDS))
### BEGIN HIDDEN TESTS
check_makespan(traced_overlap(overlapped_map, "L4", 40, 1 << 16, 10e-6))  # 256 KiB: 18.3 µs each way over PCIe 4.0; the copies set the pace
check_makespan(traced_overlap(overlapped_map, "H100", 32, 1 << 17, 40e-6))  # 512 KiB: 18.3 µs each way over PCIe 5.0; the kernels set the pace
check_makespan(traced_overlap(overlapped_map, "A100", 30, 1 << 18, 10e-6))  # 1 MiB: 43 µs each way over PCIe 4.0; the copies set the pace
check_race_free(traced_overlap(overlapped_map, "T4", 2, 1000, 1e-6))  # too few chunks to fill the pipeline: races only
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_overlap_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: overlapped_map beats serial_map on 8 chunks of 4 M floats by 1.2x, on real streams."""
# Modelled, not yet measured (gpucourse.thresholds.overlap_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 1.2}
print(thresholds.describe("test_overlap_speed", SPEEDUP_NEEDED))
small = [torch.randn(5) for _ in range(3)]  # first, a small map on the model
check_results(modelled_map(overlapped_map, torch.sin, small)[0], torch.sin, small, "3 chunks of 5")
if gpucourse.device_class() != "cuda":
    print("needs a GPU: on one, the copies of one chunk overlap the kernel and the copies of others")
else:
    def fresh_chunks():  # pinned, as a loader with pin_memory=True hands them over (the grader's worker pins them too)
        return torch.sin, [torch.randn(1 << 22).pin_memory() for _ in range(8)]

    def check_timed(args, output):
        """Close to the CPU's sin (another device: a tolerance), and bit for bit this GPU's: the work ran on the device."""
        values = [streams.value(result) for result in output]
        check_results(values, torch.sin, args[1], "a timed overlapped_map", rtol=1e-5, atol=1e-6)
        on_this_gpu = [torch.sin(chunk.cuda()).cpu() for chunk in args[1]]
        for position, (value, expected) in enumerate(zip(values, on_this_gpu)):
            assert torch.equal(value, expected), (f"a timed overlapped_map: chunk {position} is not torch.sin computed on this GPU "
                                                  "(it matches the CPU's to a tolerance): run fn on the device, with streams.launch")

    result = timing.compare_speed(serial_map, overlapped_map, fresh_chunks, check=check_timed, rounds=7)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="overlapped_map vs serial_map")

# %% [markdown]
# ## Question 3: prefetching data in the background (4 points)
#
# A GPU waits for data when the host loads each batch only once the previous one is done: reading from disk or the network is latency, not work, and it can overlap the compute.
# `load_one_by_one` below is that loop: it loads item 0, hands it over, and loads item 1 only when the consumer asks for it.
#
# Write `prefetch(loader_fn, items, depth=2)`, a generator that yields `loader_fn(item)` for each item, **in order**, while loading up to `depth` items ahead in the background (a thread: the loads wait, they do not compute, so Python's GIL is no obstacle).
# - Keep at most `depth` loads started beyond the item the consumer last received (one more while your loading thread waits for room is tolerated).
# - If `loader_fn` raises for an item, the consumer gets that error when it asks for that item (the items before it arrive first).
# - When the consumer stops early and closes the generator (`generator.close()`, or a `break` out of a `for` loop that drops it), no thread of yours may be left running a second later.
#
# `concurrent.futures.ThreadPoolExecutor` and `collections.deque` (or `threading` and `queue.Queue`) are all you need.
# Graded, with the grader's own loader (each load waits 15 ms, like slow storage) and consumer (15 ms of "compute" per item):
# the values and their order, also with `depth` 1 and 4, no items and items given as an iterator (1 point);
# the error and the cleanup (1 point);
# speed: at least 1.4× faster than `load_one_by_one` on 12 items, in alternating rounds (2 points; the reference reaches about 1.8× of the 2× possible, on the course's 2-core machine).
# About 12 lines.

# %% nbgrader={"grade_id": "load_one_by_one", "locked": true}
def load_one_by_one(loader_fn, items, depth=2):
    """The loop without prefetching: each item is loaded when the consumer asks for it (depth is ignored)."""
    for item in items:
        yield loader_fn(item)


# %% nbgrader={"grade_id": "prefetch", "solution": true}
def prefetch(loader_fn, items, depth=2):
    """Yield loader_fn(item) for each item, in order, loading up to ``depth`` items ahead in a background thread."""
    ### BEGIN SOLUTION
    items = iter(items)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pending = collections.deque(pool.submit(loader_fn, item) for item in itertools.islice(items, depth))
        try:
            while pending:
                loaded = pending.popleft().result()  # a loader's error is raised here, at its item
                pending.extend(pool.submit(loader_fn, item) for item in itertools.islice(items, 1))
                yield loaded
        finally:
            for future in pending:  # closed early: drop the loads not started; the pool waits for the running one
                future.cancel()
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_prefetch_order", "grade": true, "points": 1}
"""prefetch yields every item's load, in order, whatever the depth."""


def check_order(items, depth, name):
    plan, run = loading.run_loader(prefetch, items, load_seconds=0.002, compute_seconds=0.002, depth=depth)
    assert run.error is None, f"{name}: the consumer got {run.error}"
    assert len(run.received) == len(plan.items) and run.in_order(plan), (
        f"{name}: expected the {len(plan.items)} loads in order, got {len(run.received)} values"
        + ("" if run.in_order(plan) else ", out of order"))


check_order(range(10), 2, "10 items, depth 2")
### BEGIN HIDDEN TESTS
check_order(range(7), 1, "7 items, depth 1")
check_order(range(9), 4, "9 items, depth 4")
check_order([], 2, "no items")
check_order(["a"], 3, "one item, depth 3")
check_order(iter(range(5)), 2, "items given as an iterator")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_prefetch_errors_and_cleanup", "grade": true, "points": 1}
"""A loader's error reaches the consumer at its item; loads stay within depth; closing early leaves no thread."""
plan, run = loading.run_loader(prefetch, range(8), load_seconds=0.003, compute_seconds=0.001, fail_at=5)
assert run.error is not None and "could not load item 5" in run.error, f"expected the loader's error at item 5, got {run.error}"
assert len(run.received) == 5 and run.in_order(plan), f"expected items 0-4 before the error, got {len(run.received)} values"
### BEGIN HIDDEN TESTS
plan, run = loading.run_loader(prefetch, range(20), load_seconds=0.002, compute_seconds=0.004, depth=2, stop_after=3)
assert run.threads_left == 0, f"{run.threads_left} thread(s) still running a second after the generator was closed"
assert run.loads <= 3 + 2 + 1, f"stopped after 3 items with depth 2, but {run.loads} loads were started"
plan, run = loading.run_loader(prefetch, range(12), load_seconds=0.001, compute_seconds=0.005, depth=3)
assert run.most_ahead <= 3 + 1, f"depth 3, but {run.most_ahead} loads were started ahead of the consumer"
assert run.most_ahead >= 2, f"depth 3, but never more than {run.most_ahead} load ahead of the consumer: nothing was prefetched"
plan, run = loading.run_loader(prefetch, range(3), load_seconds=0.002, compute_seconds=0.001, fail_at=0)
assert run.error is not None and "could not load item 0" in run.error and run.received == [], f"the first load fails: got {run.error}"
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_prefetch_speed", "grade": true, "points": 2}
"""prefetch overlaps 15 ms loads with 15 ms of compute: at least 1.4x faster than load_one_by_one on 12 items."""
SPEEDUP_NEEDED = {"cpu": 1.4, "cuda": 1.4}  # loads and compute are waits, on any machine
result = loading.compare_loaders(load_one_by_one, prefetch, range(12), load_seconds=0.015, compute_seconds=0.015, depth=2, rounds=5)
print(f"prefetch: {result}; the model predicts (15 + 15) / max(15, 15) = 2× at most")
check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="prefetch vs load_one_by_one")

# %% [markdown]
# ## Question 4: when pinning does not pay (1 point, graded by hand)
#
# In two or three sentences, in the cell below: pinned memory makes copies faster and lets them overlap other work, so why not pin everything?
# Name at least two situations where pinning host memory does not pay, and say why.

# %% [markdown] nbgrader={"grade_id": "pinning_answer", "solution": true, "grade": true, "points": 1}
# ### BEGIN SOLUTION
# Pinning is itself a cost: page-locking memory (or allocating pinned memory) is slow, and `pin_memory()` copies the data into a new pinned buffer first, so pinning a tensor you copy only once costs more than the pageable copy it would speed up; pin once and reuse the buffer, or let a loader's worker pin in the background (`DataLoader(pin_memory=True)`).
# Pinned pages cannot be swapped out: pinning a large share of RAM starves the operating system and other processes, and allocations can fail.
# It does not pay either when the copies are small or rare next to the compute (nothing to overlap), or when nothing else can run meanwhile (a single stream that waits for each copy anyway).
# ### END SOLUTION
