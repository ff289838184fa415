# %% [markdown]
# # 05 · Streams and pinned memory: overlapping copies with compute
#
# Lectures 02–04 made kernels fast.
# This one is about the time around them: data has to cross the host link (PCIe) to reach the GPU and cross it again to come back, and a GPU that waits for its data is as idle as one running a slow kernel.
# A GPU has separate engines for copies and for kernels, and **streams** let us keep all of them busy at once.
#
# What you will learn:
#
# 1. pageable and pinned host memory, what `non_blocking=True` does and what it does not, timing with CUDA events, and where the default stream synchronises without being asked;
# 2. the chunked pipeline (copy in → compute → copy out over several streams), its timeline, and its ideal bound, the busiest engine;
# 3. why the order in which the host issues the work matters when copies in and out share one copy engine;
# 4. the race you get when one stream uses what another wrote without an event between them, and how an event fixes it;
# 5. the same principle on your CPU, measured for real: a slow loader overlapped with compute;
# 6. an interactive stream timeline.
#
# Streams, events and pinned memory only exist on a GPU: `torch.cuda.Stream()` raises on a CPU-only torch.
# So the course has a **stream model**, `gpucourse.sim.streams`: a discrete-event simulation of one GPU's engines that turns the calls you issue into a timeline, deterministically, and finds races.
# Every number it gives says *modelled for* a card from `gpucourse.gpu_specs`.
# Cells that need a GPU say what a GPU run would show; on a GPU they measure, and say *measured on* which one.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import time
from concurrent.futures import ThreadPoolExecutor

import matplotlib.pyplot as plt
import numpy as np
import torch

import gpucourse
from gpucourse import gpu_specs, plots, streams, timing, widgets
from gpucourse.sim.streams import Schedule, pipeline

GPU = torch.cuda.is_available()
CPU = gpucourse.describe("cpu").split(",")[0]
print("a GPU is here:", gpucourse.describe() if GPU else "no, so GPU cells say what they would show and the model stands in")

# %% [markdown]
# ## 1. Host memory, `non_blocking` and CUDA events
#
# **Pageable and pinned memory.**
# An ordinary tensor lives in *pageable* memory: the operating system may move its pages, or swap them out, at any time.
# The GPU's copy engines read host memory by DMA, without the CPU, and DMA needs pages that stay put.
# So to copy a pageable tensor the CUDA driver first copies it, piece by piece, into a *pinned* (page-locked) staging buffer of its own, and the copy engine reads from there.
# The host waits for the whole thing: a copy from pageable memory returns only when the data is safe to overwrite.
#
# A tensor in pinned memory (`x.pin_memory()`, `torch.empty(..., pin_memory=True)`) skips the staging: the copy engine reads it directly, at the link's full rate, and the call can return at once.
#
# The model prices this simply: a pinned copy runs at the card's host-link bandwidth (`gpu_specs`), a pageable one at half of it and blocks the host until it is done.
# Real ratios depend on the machine (reported figures range from about 1.2× to 3×); the GPU cell below measures yours.

# %%
model_t4 = Schedule.for_gpu("T4")
copy_sizes = [2**k for k in range(16, 29, 2)]  # 64 KiB to 256 MiB
for memory, pinned in (("pinned", True), ("pageable", False)):
    times = [model_t4.copy_seconds(size, pinned=pinned) for size in copy_sizes]
    print(f"{memory:<8}: " + ", ".join(f"{size // 2**10:g} KiB {t * 1e3:.3g} ms" for size, t in zip(copy_sizes[:2], times))
          + ", " + ", ".join(f"{size // 2**20:g} MiB {t * 1e3:.3g} ms" for size, t in zip(copy_sizes[2:], times[2:])))
print(f"(modelled for T4: {gpu_specs.gpu('T4').host_link}, {gpu_specs.gpu('T4').host_link_bandwidth / 1e9:g} GB/s each way)")

# %%
# On a GPU: bandwidth against size, pageable and pinned, timed with CUDA events.
measured_bandwidth = {}
if gpucourse.gpu_or_explain("host-to-device bandwidth against copy size, pageable and pinned (measured with CUDA events): "
                            "both climb with size until a fixed cost of about 10 µs per copy stops mattering (around 1 MB), "
                            "and pinned copies level off near the link's rate, above pageable ones"):
    for memory in ("pageable", "pinned"):
        measured_bandwidth[memory] = []
        for size in copy_sizes:
            source = torch.empty(size, dtype=torch.uint8)
            source = source.pin_memory() if memory == "pinned" else source
            target = torch.empty(size, dtype=torch.uint8, device="cuda")
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            target.copy_(source, non_blocking=True)  # warm-up
            repeats = 5
            start.record()
            for _ in range(repeats):
                target.copy_(source, non_blocking=True)
            end.record()
            end.synchronize()  # elapsed_time needs both events done
            measured_bandwidth[memory].append(size * repeats / (start.elapsed_time(end) / 1e3))
        print(f"{memory:<8}: best {max(measured_bandwidth[memory]) / 1e9:.1f} GB/s (measured on {gpucourse.describe()})")

# %%
fig, ax = plt.subplots(figsize=(8.6, 3.4))
for memory, pinned in (("pinned", True), ("pageable", False)):
    rates = [size / model_t4.copy_seconds(size, pinned=pinned) / 1e9 for size in copy_sizes]
    plots.versus_size(ax, copy_sizes, rates, label=f"{memory}, T4", kind="modelled", xlabel="bytes per copy", ylabel="GB/s host → device")
    if memory in measured_bandwidth:
        plots.versus_size(ax, copy_sizes, [rate / 1e9 for rate in measured_bandwidth[memory]], label=f"{memory}, this GPU")
ax.set_title("Copy bandwidth: modelled for T4" + (f", measured on {gpucourse.describe()}" if GPU else " (no GPU here to measure)"),
             fontsize=10)
ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
plt.show()

# %% [markdown]
# The model's lines are flat: it has no fixed cost per copy, which is right for the megabyte chunks of the pipelines below and wrong for tiny copies (about 10 µs each on a real link, lecture 01).
#
# **What `non_blocking=True` does and what it does not.**
# `x.to("cuda", non_blocking=True)` asks for an asynchronous copy: the call returns before the data has arrived, so the host can queue more work.
#
# - From **pinned** memory it does that.
# - From **pageable** memory it cannot: the host itself stages the data through the driver's buffer, so the call returns only once all of it has been staged (the flag buys next to nothing).
# - It does not make a result safe to read: after `y.to("cpu", non_blocking=True)` into pinned memory, the host tensor may still hold old values until you synchronise (an event, the stream, or the device).
#
# **The pinned-then-copy trap.**
# `x.pin_memory().to("cuda", non_blocking=True)` looks like the best of both, and is usually *slower* than a plain `x.to("cuda")`.
# `pin_memory()` allocates page-locked memory (a slow system call) and copies the whole tensor into it on the CPU; only then does the fast copy start.
# Pinning pays when the pinned buffer is filled once and copied many times, or filled by someone else off the critical path: that is what `DataLoader(pin_memory=True)` does, in a background thread, while your training step runs.
#
# The next cell measures the part of the trap your CPU pays, the host copy into the new buffer, and puts it beside the modelled copies.

# %%
SIZE = 64 * 2**20  # 64 MiB
host_tensor = torch.randn(SIZE // 4)
host_copy = timing.measure(torch.clone, host_tensor, min_run_time=0.1, num_threads=1)  # what pin_memory() copies, before any GPU copy
pinned_s, pageable_s = model_t4.copy_seconds(SIZE), model_t4.copy_seconds(SIZE, pinned=False)
print(f"host copy of 64 MiB (what pin_memory() does first): {host_copy.median * 1e3:.2f} ms (measured on {CPU}, one thread)")
print(f"pinned copy to the GPU:   {pinned_s * 1e3:.2f} ms (modelled for T4)")
print(f"pageable copy to the GPU: {pageable_s * 1e3:.2f} ms (modelled for T4)")
print(f"pin_memory() then copy:   {(host_copy.median + pinned_s) * 1e3:.2f} ms at least (measured host copy + modelled copy), "
      f"before the cost of page-locking the new buffer")

# %%
# On a GPU: the three ways to send the same 64 MiB, and the host clock fooled by an asynchronous call.
if gpucourse.gpu_or_explain("x.to('cuda') from pageable memory, x.pin_memory().to('cuda', non_blocking=True), and a copy from a buffer "
                            "pinned beforehand, timed with CUDA events: the pin-then-copy is the slowest of the three; and a "
                            "non_blocking copy timed with time.perf_counter() alone looks almost free"):
    pinned_once = host_tensor.pin_memory()

    def event_ms(fn, repeats=5):
        """Milliseconds per call of fn, between CUDA events on the current stream (the host waits for the end event only)."""
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / repeats

    ways = {"pageable .to('cuda')": lambda: host_tensor.to("cuda"),
            "pin_memory().to(non_blocking)": lambda: host_tensor.pin_memory().to("cuda", non_blocking=True),
            "pinned beforehand .to(non_blocking)": lambda: pinned_once.to("cuda", non_blocking=True)}
    for name, send in ways.items():
        print(f"{name:<36}: {event_ms(send):7.2f} ms (measured on {gpucourse.describe()})")
    torch.cuda.synchronize()
    begin = time.perf_counter()
    pinned_once.to("cuda", non_blocking=True)
    queued = time.perf_counter() - begin
    torch.cuda.synchronize()
    print(f"host clock around the non_blocking call: {queued * 1e3:.3f} ms; until the copy is done: "
          f"{(time.perf_counter() - begin) * 1e3:.2f} ms (measured on {gpucourse.describe()})")

# %% [markdown]
# **Timing with CUDA events.**
# Kernels and asynchronous copies return before the GPU has done them, so a host clock around the call measures the queueing (lecture 01 synchronised before reading the clock).
# A CUDA event is a marker placed *in a stream*: `event.record()` queues it, the GPU timestamps it when the stream reaches it, and `start.elapsed_time(end)` gives the milliseconds between two of them once both are done.
# Events time what happened on the GPU without stopping the host in between, which is what we need to watch overlap.
#
# **The default stream and implicit synchronisation.**
# Every torch call without `with torch.cuda.stream(s):` goes to the *default stream*.
# Work on one stream runs in order; work on different streams may overlap.
# In plain CUDA the (legacy) default stream is a barrier: it waits for every other blocking stream, and they wait for it.
# The streams torch creates are non-blocking, so they skip that barrier: work on the default stream and on your streams is unordered unless an event orders it, and a tensor made on the default stream and read on another needs a wait like any other pair of streams (section 4).
# The host also stops and waits, without being asked, at every `.item()`, `.cpu()`, `.tolist()`, `print(cuda_tensor)`, `if cuda_tensor.any():`, a copy from or to pageable memory, and `torch.cuda.synchronize()`.
# Keep those out of the loop you want to overlap.
#
# ## 2. The chunked pipeline: copy in, compute, copy out
#
# A GPU has one compute engine and, on the cards in `gpu_specs`, two copy engines: one for each direction.
# Done in one piece, a job copies everything in, computes, and copies everything out, and each engine waits for the one before.
# Cut into chunks, with each chunk on a stream of its own, chunk 1 can be copied in while chunk 0 is computed and chunk 0 copied out while chunk 1 is computed.
#
# `gpucourse.streams` is a front end with one set of calls for both worlds: `streams.Stream()`, `streams.to_device(x, stream=s)`, `streams.launch(fn, x, stream=s)`, `streams.to_host(y, stream=s)`, `streams.Event()`, `streams.synchronize()`.
# On a GPU each is the torch call it names.
# Inside `with streams.modelled("T4") as run:` each call does its tensor work on the CPU at once (so results are exact) and is recorded into the stream model of a T4; `run.timeline()` is what the T4's engines would do with the calls.
# `streams.kernel(fn, seconds=...)` gives a kernel the time it would take on the GPU (here: as if each chunk took 0.4 ms of work).

# %%
CHUNKS, CHUNK_ELEMENTS, KERNEL_SECONDS = 8, 1 << 20, 0.4e-3  # 4 MiB of float32 a chunk: 0.27 ms each way over PCIe 3.0


def squash(x):
    """The work on each chunk: x -> tanh(2x)."""
    return torch.tanh(2.0 * x)


def chunk_by_chunk(work, host_chunks, n_streams):
    """Chunk i goes in, is computed and comes out on stream i % n_streams, one chunk after the other; host results, in order."""
    lanes = [streams.Stream() for _ in range(n_streams)]
    results = []
    for i, chunk in enumerate(host_chunks):
        lane = lanes[i % n_streams]
        on_device = streams.to_device(chunk, stream=lane)
        results.append(streams.to_host(streams.launch(work, on_device, stream=lane), stream=lane))
    streams.synchronize()  # the host waits for every stream before anyone reads a result
    return results


data = [torch.randn(CHUNK_ELEMENTS) for _ in range(CHUNKS)]
with streams.modelled("T4") as run:
    results = chunk_by_chunk(streams.kernel(squash, seconds=KERNEL_SECONDS), run.host_chunks(data), n_streams=4)
    values = run.values(results)
assert all(torch.equal(value, squash(chunk)) for value, chunk in zip(values, data)), "results differ from squash on the CPU"
four_streams = run.timeline()
print(f"{CHUNKS} chunks on 4 streams: makespan {four_streams.makespan * 1e3:.2f} ms, ideal bound {four_streams.ideal_seconds * 1e3:.2f} ms, "
      f"races: {four_streams.races or 'none'} (modelled for T4); results equal squash(chunk), computed on {CPU}")

# %% [markdown]
# `run.host_chunks(data)` puts each chunk in pinned memory first, as a `DataLoader` with `pin_memory=True` would hand them over: pageable chunks would block the host at every copy.
#
# The figure draws the timeline: one row per engine, a bar per operation.
# The dashed line is the **ideal bound**: the total time of the busiest engine.
# No schedule of the same operations can finish before it, since that engine has to do all of its work one operation at a time; a good pipeline comes close to it, and the gap is the time it takes to fill the pipeline (the first copy in, before any kernel can run) and to drain it (the last copy out).

# %%
fig, ax = plt.subplots(figsize=(9.4, 3.0))
plots.timeline(ax, four_streams, title=f"{CHUNKS} chunks on 4 streams, one chunk after the other")
fig.tight_layout()
plt.show()

# %% [markdown]
# How many streams does it take?
# With one stream everything is serial: a stream runs its operations in order, so nothing overlaps.
# The next cell runs the same function with 1, 2, 4 and 8 streams, in the model.

# %%
modelled_makespan = {}
for n_streams in (1, 2, 4, 8):
    with streams.modelled("T4") as run:
        chunk_by_chunk(streams.kernel(squash, seconds=KERNEL_SECONDS), run.host_chunks(data), n_streams)
    timeline = run.timeline()
    modelled_makespan[n_streams] = timeline.makespan
    print(f"{n_streams} stream(s): makespan {timeline.makespan * 1e3:5.2f} ms, {modelled_makespan[1] / timeline.makespan:4.2f}× "
          f"faster than one stream; ideal bound {timeline.ideal_seconds * 1e3:.2f} ms (modelled for T4)")

# %% [markdown]
# Two streams already take most of the gain here: while one stream's kernel runs, the other's copies can.
# More streams help when the three steps differ in length, so that several chunks are in flight at once.
# How the makespan depends on the chunk count and on the three times is a question of the assignment: here, simulate and read the timeline.
#
# ## 3. The issue-order trap of one copy engine
#
# Each engine runs its operations in the order the host issued them, even when a later one is ready first.
# With two copy engines, copies in and copies out queue separately, and `chunk_by_chunk` is fine.
# Some GPUs have a single copy engine for both directions (older GeForce cards: CUDA's `deviceQuery` on a GTX 670 prints "Concurrent copy and kernel execution: Yes with 1 copy engine(s)"); `torch.cuda` does not show the count, numba does (`cuda.get_current_device().ASYNC_ENGINE_COUNT`).
# Then chunk 0's copy out, issued right after its kernel, sits in the copy engine's queue in front of chunk 1's copy in, and cannot start before chunk 0's kernel is done: every chunk waits for the previous one, and the pipeline is serial again.
#
# The model shows it with the same function, on a T4 restricted to one copy engine, and with `sim.streams.pipeline`, which issues either *depth-first* (chunk by chunk, as above) or *breadth-first* (all copies in, then all kernels, then all copies out).

# %%
with streams.modelled("T4", copy_engines=1) as run:
    chunk_by_chunk(streams.kernel(squash, seconds=KERNEL_SECONDS), run.host_chunks(data), n_streams=4)
print(f"chunk_by_chunk, 4 streams, one copy engine: makespan {run.timeline().makespan * 1e3:.2f} ms "
      f"(with two: {modelled_makespan[4] * 1e3:.2f} ms; one stream: {modelled_makespan[1] * 1e3:.2f} ms) (modelled for T4)")

copy_seconds = Schedule.for_gpu("T4").copy_seconds(CHUNK_ELEMENTS * 4)
fig, axes = plt.subplots(2, 1, figsize=(9.4, 5.2), sharex=True)
for ax, order in zip(axes, ("depth", "breadth")):
    trap = pipeline(4, copy_seconds, KERNEL_SECONDS, copy_seconds, copy_engines=1, order=order).simulate()
    plots.timeline(ax, trap, title=f"4 chunks, one copy engine, {order}-first issue", label="modelled for T4 with one copy engine")
fig.tight_layout()
plt.show()

# %% [markdown]
# Depth-first issue on one copy engine serialises everything; breadth-first issue lets the engine copy every chunk in while the first kernels run, and the copies out follow.
# The work is the same, the ideal bound is the same; only the order of the calls changed.
# Issuing breadth-first costs nothing on a card with two copy engines, so it is the safe habit.
#
# ## 4. Races: what events are for
#
# A common layout uses one stream for copies and another for kernels, so that copies of the next chunk never queue behind kernels.
# But then nothing orders a kernel after the copy it reads: the streams are independent.
# On a GPU the kernel may start while its input is still arriving, and compute on a half-copied buffer; most runs the timing hides it, and then one day it does not.
#
# The model records which buffer each operation reads and writes, and reports a **race** when one stream touches a buffer another stream wrote with nothing ordering the two.

# %%
chunk = data[0]
with streams.modelled("T4") as run:
    copies, compute = streams.Stream("copies"), streams.Stream("compute")
    x = streams.to_device(run.host_chunks([chunk])[0], stream=copies)
    y = streams.launch(streams.kernel(squash, seconds=KERNEL_SECONDS), x, stream=compute)  # nothing says "after the copy"
    result = streams.to_host(y, stream=compute)
    streams.synchronize()
    run.values([result])
unordered = run.timeline()
for race in unordered.races:
    print("race:", race)
print(f"makespan {unordered.makespan * 1e3:.2f} ms: shorter, and wrong (modelled for T4)")

# %% [markdown]
# The model computed the right tensor (it does the work eagerly on the CPU), but its timeline shows the kernel starting at time 0, during the copy, and it flags the race: on a GPU this would read garbage.
# A faster timeline is not a better one when it has races.
#
# The fix is an event: record it on the copy stream after the copy, and make the compute stream wait for it before the kernel.
# `stream.wait_event(event)` does not block the host; it only holds that stream's later work until the event's point is done.

# %%
with streams.modelled("T4") as run:
    copies, compute = streams.Stream("copies"), streams.Stream("compute")
    x = streams.to_device(run.host_chunks([chunk])[0], stream=copies)
    copied = streams.Event("x copied")
    copied.record(copies)
    compute.wait_event(copied)  # the kernel on `compute` starts after the copy on `copies`
    y = streams.launch(streams.kernel(squash, seconds=KERNEL_SECONDS), x, stream=compute)
    result = streams.to_host(y, stream=compute)
    streams.synchronize()
    run.values([result])
ordered = run.timeline()
print(f"races: {ordered.races or 'none'}; makespan {ordered.makespan * 1e3:.2f} ms (modelled for T4)")
fig, axes = plt.subplots(2, 1, figsize=(9.4, 4.6), sharex=True)
plots.timeline(axes[0], unordered, title="two streams, no event")
plots.timeline(axes[1], ordered, title="two streams, an event between the copy and the kernel")
fig.tight_layout()
plt.show()

# %% [markdown]
# On a GPU, torch has a checker for the same mistake: run your script with the environment variable `TORCH_CUDA_SANITIZER=1` and torch's CUDA sanitizer tracks which stream touched each tensor, and reports an access on one stream to a tensor another stream is still using, with no synchronisation between them.
# It slows everything down, so use it while testing, not while timing.
#
# ## 5. The CPU analogue, measured for real: loading while computing
#
# Training loops have the same shape on the CPU side: load a batch (read files, decode, build a tensor), then compute on it.
# Done one after the other, the CPU waits for storage and the storage waits for the CPU.
# If loading is mostly waiting (a disk, a network file system, an object store), a background worker can load the next item while the main thread computes on this one: the two steps overlap like a copy engine and a compute engine.
#
# `torch.utils.data.DataLoader(dataset, num_workers=2, pin_memory=True, prefetch_factor=2)` does exactly that in training code: worker processes load batches ahead, and a thread copies them into pinned memory so the copy to the GPU can be asynchronous.
# Here we measure the principle with one background thread (`ThreadPoolExecutor(max_workers=1).map`), which has none of the start-up cost of worker processes and matches the model: one loader, one computer.
#
# The loader sleeps 6 ms to stand for slow storage, then builds the tensor; the compute step is a few small matrix products.
# The stream model predicts the speedup of overlapping two steps of `T_load` and `T_compute` each: in the steady state, (T_load + T_compute) / max(T_load, T_compute), at most 2× when the two are equal.

# %%
LOAD_SLEEP, ITEMS = 6e-3, 16
weights = torch.randn(128, 128) / 128**0.5


def load(item):
    """Stands for reading item from slow storage: wait, then build its tensor."""
    time.sleep(LOAD_SLEEP)
    return torch.randn(64, 128, generator=torch.Generator().manual_seed(item))


def compute(batch, rounds=120):
    """The work on one loaded item: a few small matrix products; one number back."""
    for _ in range(rounds):
        batch = torch.tanh(batch @ weights)
    return float(batch.sum())


def sequential(items):
    return [compute(load(item)) for item in items]


def overlapped(items):
    with ThreadPoolExecutor(max_workers=1) as loader:  # loads run ahead in one background thread
        return [compute(batch) for batch in loader.map(load, items)]


t_load = timing.measure(load, 0, min_run_time=0.1, num_threads=1).median
t_compute = timing.measure(compute, load(0), min_run_time=0.1, num_threads=1).median
print(f"T_load {t_load * 1e3:.2f} ms, T_compute {t_compute * 1e3:.2f} ms per item (measured on {CPU}, one thread)")

# %%
rng = np.random.default_rng(0)


def fresh_items():
    """A new list of items for every timed call, so no result can be remembered."""
    return (rng.integers(0, 2**31, ITEMS).tolist(),)


def check_in_order(inputs, output):
    expected = [compute(load(item)) for item in inputs[0][:3]]  # the first three, recomputed: order and values
    assert len(output) == ITEMS and output[:3] == expected, f"expected {expected} first, got {output[:3]}"


speed = timing.compare_speed(sequential, overlapped, fresh_items, check=check_in_order, rounds=5, num_threads=1)
steady = (t_load + t_compute) / max(t_load, t_compute)
simulated = pipeline(ITEMS, t_load, t_compute, 0.0).simulate()  # loader as the copy engine, compute as the kernel
for_items = ITEMS * (t_load + t_compute) / simulated.makespan
print(f"overlapped loading: {speed.speedup:.2f}× faster than the sequential loop (middle half of rounds {speed.low:.2f}–{speed.high:.2f}×; "
      f"measured on {CPU}: the CPU analogue)")
print(f"model: {steady:.2f}× in the steady state, {for_items:.2f}× for {ITEMS} items with filling and draining "
      f"(the stream model fed with the measured T_load and T_compute)")

# %% [markdown]
# The measured speedup should land close to the model's figure for 16 items, a little under the steady-state one: the first load and the last compute have nothing to overlap with.
# If the machine is busy, the background thread competes with other work and the measurement falls short; run the cell again.
#
# The model's prediction also says when overlap cannot help: if loading takes 1 ms and computing 20 ms, hiding the load saves at most 5%.
# Overlap pays when the two steps are of similar length; otherwise, speed up the longer one.
#
# With more than one worker, `DataLoader` also loads several items *at once*, which beats this model when the load is mostly waiting (two sleeping workers wait in parallel): that is the loader's version of adding copy engines.
#
# ## 6. On a GPU: the model against real streams
#
# The same `chunk_by_chunk` runs unchanged on real `torch.cuda` streams when no `modelled` run is active.
# The next cell times it with CUDA events for 1, 2, 4 and 8 streams and prints the makespan the model predicts for this GPU beside it, the kernel's time measured alone and the link's datasheet bandwidth as its inputs.

# %%
gpu_makespan, model_makespan = {}, {}
card = gpu_specs.card_for(torch.cuda.get_device_name()) if GPU else None
if gpucourse.gpu_or_explain("chunk_by_chunk on real CUDA streams, 1, 2, 4 and 8 streams, timed with CUDA events, beside the "
                            "makespan the stream model predicts for that GPU and the relative error; in the model for a T4: "
                            + ", ".join(f"{k} stream(s) {s * 1e3:.2f} ms" for k, s in modelled_makespan.items())):
    on_gpu_chunks = [streams.pinned(chunk) for chunk in data]
    kernel_ms = []
    for chunk in data[:3]:
        on_device, start, end = chunk.cuda(), torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        squash(on_device)
        end.record()
        end.synchronize()
        kernel_ms.append(start.elapsed_time(end))
    kernel_seconds = min(kernel_ms) / 1e3
    model_card = card.name if card is not None else "T4"
    for n_streams in (1, 2, 4, 8):
        chunk_by_chunk(squash, on_gpu_chunks, n_streams)  # warm-up: streams, pinned result buffers
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        results = chunk_by_chunk(squash, on_gpu_chunks, n_streams)
        end.record()
        end.synchronize()
        gpu_makespan[n_streams] = start.elapsed_time(end) / 1e3
        assert all(torch.allclose(result, squash(chunk), atol=1e-5) for result, chunk in zip(results, data))
        with streams.modelled(model_card) as run:
            chunk_by_chunk(streams.kernel(squash, seconds=kernel_seconds), run.host_chunks(data), n_streams)
        model_makespan[n_streams] = run.timeline().makespan
        error = (model_makespan[n_streams] - gpu_makespan[n_streams]) / gpu_makespan[n_streams]
        print(f"{n_streams} stream(s): {gpu_makespan[n_streams] * 1e3:6.2f} ms measured on {gpucourse.describe()}, "
              f"{model_makespan[n_streams] * 1e3:6.2f} ms modelled for {model_card}: relative error {error:+.0%}")

# %% [markdown]
# Where the model and the GPU disagree, the model's assumptions are the first suspects: the datasheet link rate is a peak that real copies reach only in part (often 80%), a copy has a fixed cost the model leaves out, and the host needs a few microseconds to issue each call.
# The shape should agree: one stream is serial, and a few streams approach the busiest engine.
#
# ## 7. Try it: the stream timeline
#
# Pick the chunk count, the streams (chunk i goes on stream i % streams), one or two copy engines, the issue order, pinned or pageable host memory, the GPU, the size of a chunk and the kernel time per chunk.
# The widget draws the modelled timeline and prints the makespan, the ideal bound and the speedup over doing the whole job in one piece.
# Try: one copy engine with depth-first issue, then breadth-first; 8 chunks on 2 streams, breadth-first (a stream runs in issue order, so chunk 0's kernel waits for chunk 2's copy in, issued before it on the same stream), then depth-first; pageable memory (every copy blocks the host, so nothing is issued while a copy runs); a kernel much shorter than a copy; an H100's PCIe 5.0 link against a T4's PCIe 3.0.
# (Without a live Jupyter kernel the controls do nothing; the figure after it shows pageable against pinned memory statically.)

# %%
widgets.stream_timeline()

# %%
fig, axes = plt.subplots(2, 1, figsize=(9.4, 5.2), sharex=True)
for ax, memory in zip(axes, ("pageable", "pinned")):
    text, timeline = widgets.stream_timeline_report(4, 2, "breadth", memory, "T4", 16, 1.0)
    plots.timeline(ax, timeline, title=f"4 chunks of 16 MB, {memory} host memory, kernels of 1 ms")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What to remember
#
# - Copies from pageable memory are staged by the driver and block the host; pinned memory lets a copy engine read directly and the call return at once. `non_blocking=True` only helps from pinned memory, and `pin_memory()` right before a copy costs a host copy first: pin once, or let a `DataLoader` pin in the background.
# - Time GPU work with CUDA events, not a host clock around asynchronous calls; watch for calls that synchronise without saying so (`.item()`, `.cpu()`, printing, pageable copies, the default stream).
# - A GPU has a compute engine and copy engines; chunks on several streams keep them busy together. No schedule beats the busiest engine's total time, and a good pipeline comes close to it.
# - Each engine runs work in the order it was issued: with one copy engine, issue breadth-first (all copies in, then kernels, then copies out).
# - Work on different streams is unordered unless an event orders it: a missing `wait_event` is a race, not a speedup. The stream model finds it; on a GPU, `TORCH_CUDA_SANITIZER=1` does.
# - On the CPU, a background loader hides a slow load behind compute, up to (T_load + T_compute) / max(T_load, T_compute).
#
# Next: the graded assignment `assignments/05_streams/05_streams.ipynb`, where you predict a pipeline's makespan exactly, write an overlapped map whose modelled timeline has no race and comes close to the ideal bound, and write a prefetching loader of your own.
