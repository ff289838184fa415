# %% [markdown]
# # 05 · Streams and pinned memory: overlapping copies with compute
#
# Lectures 02–04 made kernels fast.
# This one is about the time around them: data has to cross the host link (PCIe) to reach the GPU and cross it again to come back, and a GPU that waits for its data is as idle as one running a slow kernel.
# A GPU has separate engines for copies and for kernels, and **streams** let us keep all of them busy at once.
#
# What you will learn:
#
# 1. pageable and pinned host memory, what `non_blocking=True` does and what it does not, timing with CUDA events, and the calls that make the host wait without saying so (and how torch finds them for you);
# 2. the chunked pipeline (copy in → compute → copy out over several streams), its timeline, and its ideal bound, the busiest engine;
# 3. how the GPU's hardware queues meet the streams: the issue-order trap of cards before Hyper-Q, and the false dependencies of today's cards when streams outnumber their queues;
# 4. kernels of several streams running at once, and stream priorities;
# 5. the race you get when one stream uses what another wrote without an event between them, and how an event fixes it;
# 6. device memory: double buffering in a bounded footprint, and a prefetcher on a side stream with the allocator hazard `record_stream` exists for;
# 7. the same principle on your CPU, measured for real: a slow loader overlapped with compute;
# 8. on a GPU: the model beside real streams, torch's profiler and Nsight Systems; then an interactive stream timeline.
#
# Streams, events and pinned memory only exist on a GPU: `torch.cuda.Stream()` raises on a CPU-only torch.
# So the course has a **stream model**, `gpucourse.sim.streams`: an event-driven simulation of one GPU's engines, hardware queues and caching allocator that turns the calls you issue into a timeline, deterministically, and finds races.
# Its module docstring lists what it assumes, with sources; every number it gives says *modelled for* a card from `gpucourse.gpu_specs`.
# The model is revised as the course learns more, so every sentence below about what it or a measurement shows is printed by code from that run's numbers (`gpucourse.stream_text` chooses the words).
# Cells that need a GPU say what to look for on one; on a GPU they measure, and say *measured on* which one.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import json
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

import gpucourse
from gpucourse import gpu_specs, plots, stream_text, streams, timing, widgets
from gpucourse.sim.streams import Schedule, pipeline

GPU = torch.cuda.is_available()
CPU = gpucourse.describe("cpu").split(",")[0]
print("a GPU is here:", gpucourse.describe() if GPU else "no, so GPU cells say what to look for and the model stands in")

# %% [markdown]
# ## 1. Host memory, `non_blocking` and CUDA events
#
# **Pageable and pinned memory.**
# An ordinary tensor lives in *pageable* memory: the operating system may move its pages, or swap them out, at any time.
# The GPU's copy engines read host memory by DMA, without the CPU, and DMA needs pages that stay put.
# So to copy a pageable tensor the CUDA driver first copies it, piece by piece, into a *pinned* (page-locked) staging buffer of its own, and the copy engine reads from there; the call returns once the data has been staged, whatever the copy engine still has to do (CUDA Runtime API, "API synchronization behavior").
#
# A tensor in pinned memory (`x.pin_memory()`, `torch.empty(..., pin_memory=True)`) skips the staging: the copy engine reads it directly, at up to the link's rate, and an asynchronous copy from it returns at once.
# Pinned memory is taken from what the operating system can page, so pin what you copy, not everything: the CUDA C++ Best Practices Guide ("Pinned Memory") warns that excessive pinning can reduce overall system performance.
#
# The next cell asks the stream model what a copy costs for a few sizes, pinned and pageable, and prints how it prices them.

# %%
model_t4 = Schedule.for_gpu("T4")
copy_sizes = [2**k for k in range(16, 29, 2)]  # 64 KiB to 256 MiB
modelled_copy = {pinned: [model_t4.copy_seconds(size, pinned=pinned) for size in copy_sizes] for pinned in (True, False)}
for memory, pinned in (("pinned", True), ("pageable", False)):
    print(f"{memory:<8}: " + ", ".join(f"{plots.binary_bytes(size)} {t * 1e3:.3g} ms" for size, t in zip(copy_sizes, modelled_copy[pinned])))
probe = Schedule.for_gpu("T4")
probe.h2d("pageable copy", "a stream", nbytes=copy_sizes[-1], pinned=False)
probed = probe.simulate()
print(stream_text.copy_model(copy_sizes, modelled_copy[True], modelled_copy[False], card="T4",
                             pageable_holds_host=probed.host_seconds >= probed.of("pageable copy").end,
                             real_fixed_seconds=gpu_specs.HOST_LINK_LATENCY_SECONDS))
print(f"(the T4's link: {gpu_specs.gpu('T4').host_link}, {gpu_specs.gpu('T4').host_link_bandwidth / 1e9:g} GB/s each way, reported)")

# %%
# On a GPU: bandwidth against size, pageable and pinned, timed with CUDA events; and what pinning costs the first time.
measured_bandwidth, pin_times = {}, {}
if gpucourse.gpu_or_explain("host-to-device bandwidth against copy size, pageable and pinned (measured with CUDA events), and "
                            "what pin_memory() costs the first time and once a block of that size is cached. Look for the size "
                            "from which each curve stops climbing (a copy's fixed cost stops mattering there), how far pinned "
                            "lies from pageable, and how the peak compares with the link's datasheet rate"):
    for memory in ("pageable", "pinned"):
        measured_bandwidth[memory] = []
        for size in copy_sizes:
            # A never-written buffer maps the kernel's shared zero page: fill it, so the copy reads real pages.
            source = torch.empty(size, dtype=torch.uint8).fill_(1)
            if memory == "pinned":  # sizes ascend, so each first pin_memory() finds no cached block it could reuse
                begin = time.perf_counter()
                pinned_source = source.pin_memory()
                first = time.perf_counter() - begin
                del pinned_source  # back to the caching host allocator, not to the system
                begin = time.perf_counter()
                source = source.pin_memory()
                pin_times[size] = (first, time.perf_counter() - begin)
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
    card = gpu_specs.card_for(torch.cuda.get_device_name())
    link = card.host_link_bandwidth if card is not None else gpu_specs.gpu("T4").host_link_bandwidth
    print(stream_text.measured_bandwidth(copy_sizes, measured_bandwidth, link_bandwidth=link, device=gpucourse.describe(),
                                         size_text=plots.binary_bytes)
          + ("" if card is not None else " (this GPU is not in gpu_specs: the rate compared is a T4's)"))
    print(stream_text.pin_cost(plots.binary_bytes(copy_sizes[-1]), *pin_times[copy_sizes[-1]]), f"(measured on {gpucourse.describe()})")

fig, ax = plt.subplots(figsize=(8.6, 3.4))
for memory, pinned in (("pinned", True), ("pageable", False)):
    rates = [size / seconds / 1e9 for size, seconds in zip(copy_sizes, modelled_copy[pinned])]
    plots.versus_size(ax, copy_sizes, rates, label=f"{memory}, T4", kind="modelled", xlabel="bytes per copy", ylabel="GB/s host → device")
    if memory in measured_bandwidth:
        plots.versus_size(ax, copy_sizes, [rate / 1e9 for rate in measured_bandwidth[memory]], label=f"{memory}, this GPU")
plots.bytes_axis(ax)
ax.set_title("Copy bandwidth: modelled for T4" + (f", measured on {gpucourse.describe()}" if GPU else " (no GPU here to measure)"),
             fontsize=10)
ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
plt.show()

# %% [markdown]
# **What `non_blocking=True` does and what it does not.**
# A blocking `x.to("cuda")` is a `cudaMemcpyAsync` followed by a synchronisation of the current stream (PyTorch's `aten/src/ATen/native/cuda/Copy.cu`, `copy_kernel_cuda`; the tutorial "A guide on good usage of non_blocking and pin_memory() in PyTorch" says the same).
# So the host waits for everything queued on that stream before the copy, every kernel included, not only for the copy.
# `x.to("cuda", non_blocking=True)` leaves that synchronisation out: the call returns once the copy is queued, so the host can queue more work.
#
# - From **pinned** memory the copy engine reads the buffer by DMA, and the call returns at once.
# - From **pageable** memory the flag still leaves out torch's synchronisation, which is its practical gain: a loop of such copies queues them without stopping at each one for the work before it (the tutorial measures it).
#   The driver still stages the data before the call returns, and may synchronise with the stream to do so (CUDA Runtime API, "API synchronization behavior"): the GPU cell below measures what your machine does.
# - It does not make a result safe to read: after `y.to("cpu", non_blocking=True)` into pinned memory, the host tensor may still hold old values until you synchronise (an event, the stream, or the device).
#
# **The pinned-then-copy trap.**
# `x.pin_memory().to("cuda", non_blocking=True)` looks like the best of both, and is usually *slower* than a plain `x.to("cuda")` (the tutorial above: "can be up to twice as slow").
# `pin_memory()` copies the whole tensor into page-locked memory on the CPU, and only then does the fast copy start.
# The first `pin_memory()` of a size also allocates that page-locked memory (`cudaHostAlloc`, a slow driver call); PyTorch's caching host allocator keeps the block when the pinned tensor is freed and hands it out again, so later calls of that size pay the host copy only (`aten/src/ATen/cuda/CachingHostAllocator.h`: it "re-uses freed pinned (page-locked) memory allocations").
# Pinning pays when the pinned buffer is filled once and copied many times, or filled by someone else off the critical path: that is what `DataLoader(pin_memory=True)` does, in a background thread, while your training step runs.
#
# The next cell measures the part of the trap your CPU pays, the host copy into the pinned buffer, and puts it beside the modelled copies.

# %%
SIZE = 64 * 2**20  # 64 MiB
host_tensor = torch.randn(SIZE // 4)
host_copy = timing.measure(torch.clone, host_tensor, min_run_time=0.1, num_threads=1)  # what pin_memory() copies, before any GPU copy
pinned_s, pageable_s = model_t4.copy_seconds(SIZE), model_t4.copy_seconds(SIZE, pinned=False)
print(f"host copy of 64 MiB (what pin_memory() does first): {host_copy.median * 1e3:.2f} ms (measured on {CPU}, one thread)")
print(f"pinned copy to the GPU:   {pinned_s * 1e3:.2f} ms (modelled for T4)")
print(f"pageable copy to the GPU: {pageable_s * 1e3:.2f} ms (modelled for T4)")
print(stream_text.compare("pin_memory() then a pinned copy, at least", host_copy.median + pinned_s, "the pageable copy", pageable_s))
print(f"  (the measured host copy on {CPU} plus the copies modelled for T4; a first pin_memory() of this size also pays for page-locking the block)")

# %%
# On a GPU: the three ways to send the same 64 MiB; what a blocking copy waits for; and the host clock fooled by an asynchronous call.
if gpucourse.gpu_or_explain("x.to('cuda') from pageable memory, x.pin_memory().to('cuda', non_blocking=True), and a copy from a buffer "
                            "pinned beforehand, timed with CUDA events, from the fastest to the slowest; then how long a pageable "
                            ".to('cuda') holds the host while matrix products are queued on the stream, blocking and with "
                            "non_blocking=True; and what the host clock sees around a non_blocking copy"):
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
    print(stream_text.ranking({name: event_ms(send) / 1e3 for name, send in ways.items()}, device=gpucourse.describe()))

    busy, small = torch.randn(4096, 4096, device="cuda"), torch.randn(2**18)  # small: 1 MiB, pageable

    def host_held(send):
        """Seconds the host spent in send() with matrix products queued just before it, and the GPU seconds they took."""
        busy @ busy  # warm-up: cuBLAS picks its kernel
        send()  # warm-up: the caching allocator gets the device block the timed call will reuse (a cudaMalloc can synchronise)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            busy @ busy
        end.record()
        begin = time.perf_counter()
        send()
        held = time.perf_counter() - begin
        torch.cuda.synchronize()
        return held, start.elapsed_time(end) / 1e3

    blocking, queued = host_held(lambda: small.to("cuda"))
    print(stream_text.host_wait(blocking, host_held(lambda: small.to("cuda", non_blocking=True))[0], queued),
          f"(measured on {gpucourse.describe()})")
    torch.cuda.synchronize()
    begin = time.perf_counter()
    pinned_once.to("cuda", non_blocking=True)
    queued_call = time.perf_counter() - begin
    torch.cuda.synchronize()
    print(stream_text.host_clock(queued_call, time.perf_counter() - begin), f"(measured on {gpucourse.describe()})")

# %% [markdown]
# **Timing with CUDA events.**
# Kernels and asynchronous copies return before the GPU has done them, so a host clock around the call measures the queueing (lecture 01 synchronised before reading the clock).
# A CUDA event is a marker placed *in a stream*: `event.record()` queues it, the GPU timestamps it when the stream reaches it, and `start.elapsed_time(end)` gives the milliseconds between two of them once both are done.
# Events time what happened on the GPU without stopping the host in between, which is what we need to watch overlap.
#
# **The default stream and implicit synchronisation.**
# Every torch call without `with torch.cuda.stream(s):` goes to the *default stream*.
# Work on one stream runs in order; work on different streams may overlap (CUDA C++ Programming Guide, "Streams").
# In plain CUDA the legacy default stream is a barrier: it waits for every other blocking stream, and they wait for it (Programming Guide, "Default Stream" and "Implicit Synchronization").
# The streams torch creates are non-blocking (`c10/cuda/CUDAStream.cpp` creates its stream pool with `cudaStreamNonBlocking`), so they skip that barrier: work on the default stream and on your streams is unordered unless an event orders it, and a tensor made on the default stream and read on another needs a wait like any other pair of streams (section 5).
# The host also stops and waits, without being asked, whenever it needs a value the GPU computes: `.item()`, `.cpu()`, `.tolist()`, `print(cuda_tensor)`, `if cuda_tensor.any():`, an op whose output size depends on the data (`torch.nonzero`, boolean-mask indexing), a blocking `.to()` either way (a stream synchronisation, as above), and `torch.cuda.synchronize()`.
# Keep those out of the loop you want to overlap.
#
# **Finding them.** `torch.cuda.set_sync_debug_mode("warn")` makes torch warn at every synchronising call it knows of, and `"error"` makes it raise (PyTorch docs, `torch.cuda.set_sync_debug_mode`); the warning reads "called a synchronizing CUDA operation" (`c10/cuda/CUDAFunctions.cpp`, `warn_or_error_on_sync`).
# The docs call it experimental: "not all synchronizing operations will trigger warning or error", so treat silence as a hint, not a proof.
# Turn it on around one training step, read the warnings, and turn it off again (`"default"`).

# %%
# On a GPU: which calls make the host wait, as torch's sync debug mode reports them.
if gpucourse.gpu_or_explain("torch.cuda.set_sync_debug_mode('warn') flagging the calls that make the host wait for the GPU: "
                            "look for which of .item(), .to('cpu'), torch.nonzero, .to('cpu', non_blocking=True) and a plain x * 2 "
                            "it warns about, and compare with the list above"):
    on_gpu = torch.randn(1 << 20, device="cuda")
    calls = {".item()": lambda: on_gpu.sum().item(), ".to('cpu')": lambda: on_gpu.to("cpu"),
             "torch.nonzero(x > 0)": lambda: torch.nonzero(on_gpu > 0), "x * 2": lambda: on_gpu * 2,
             ".to('cpu', non_blocking=True)": lambda: on_gpu.to("cpu", non_blocking=True)}
    flagged, shown = {}, []
    torch.cuda.set_sync_debug_mode("warn")
    try:
        for name, call in calls.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")  # every warning, not only the first from this line
                call()
            messages = [f"{warning.category.__name__}: {warning.message}" for warning in caught if "synchroniz" in str(warning.message)]
            flagged[name] = bool(messages)
            shown += messages[:1] if not shown else []
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    print(stream_text.sync_flags(flagged, device=gpucourse.describe()))
    if shown:
        print("what the first warning printed:", shown[0])

# %% [markdown]
# ## 2. The chunked pipeline: copy in, compute, copy out
#
# A GPU has a compute engine and one or more copy engines.
# How many copy engines a card has is `cudaDeviceProp.asyncEngineCount` (CUDA Runtime API; CUDA's `deviceQuery` sample prints it as "Concurrent copy and kernel execution: Yes with N copy engine(s)", and numba shows it as `cuda.get_current_device().ASYNC_ENGINE_COUNT`); with 2, copies to and from the device overlap each other (Programming Guide, "Concurrent Data Transfers").
# `gpu_specs` gives each card the count the stream model uses (`copy_engines`, printed below), but its own comment says the per-card counts are not cited: take the course's engine counts as assumptions unless a source is named.
# Done in one piece, a job copies everything in, computes, and copies everything out, and each engine waits for the one before.
# Cut into chunks, with each chunk on a stream of its own, chunk 1 can be copied in while chunk 0 is computed and chunk 0 copied out while chunk 1 is computed: the "staged concurrent copy and execute" of the CUDA C++ Best Practices Guide ("Asynchronous and Overlapping Transfers with Computation").
#
# `gpucourse.streams` is a front end with one set of calls for both worlds: `streams.Stream()`, `streams.to_device(x, stream=s)`, `streams.launch(fn, x, stream=s)`, `streams.to_host(y, stream=s)`, `streams.Event()`, `streams.synchronize()`.
# On a GPU each is the torch call it names.
# Inside `with streams.modelled("T4") as run:` each call does its tensor work on the CPU at once (so results are exact) and is recorded into the stream model of a T4; `run.timeline()` is what the T4's engines would do with the calls.
# `streams.kernel(fn, seconds=...)` gives a kernel the time it would take on the GPU (here: as if each chunk took 0.4 ms of work).

# %%
CHUNKS, CHUNK_ELEMENTS, KERNEL_SECONDS = 8, 1 << 20, 0.4e-3  # 4 MiB of float32 a chunk


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
      f"races: {four_streams.races or 'none'} (modelled for T4, {gpu_specs.gpu('T4').copy_engines} copy engines: an assumption); "
      f"results equal squash(chunk), computed on {CPU}")

# %% [markdown]
# `run.host_chunks(data)` puts each chunk in pinned memory first, as a `DataLoader` with `pin_memory=True` would hand them over: pageable chunks would be staged by the host at every copy (section 1 printed how the model prices that).
#
# The figure draws the timeline: one row per engine, a bar per operation.
# A bar too narrow for its operation's label carries a shorter form, the buffer numbers (`a→b`: pinned buffer a copied into device buffer b); one too narrow for that is named under its row, and neighbours too narrow for their names share one range there (`out0…out2`: those bars, left to right).
# The dashed line is the **ideal bound**: the total time of the busiest engine.
# No schedule of the same operations can finish before it, since that engine has to do all of its work; the gap between it and the makespan is time the busiest engine spends idle, and the sentence under the figure says where.

# %%
fig, ax = plt.subplots(figsize=(9.4, 3.0))
plots.timeline(ax, four_streams, title=f"{CHUNKS} chunks on 4 streams, one chunk after the other")
fig.tight_layout()
plt.show()
print("Modelled for T4:", stream_text.idle_gap(four_streams))

# %% [markdown]
# How many streams does it take?
# With one stream everything is serial: a stream runs its operations in order (Programming Guide, "Streams"), so nothing overlaps.
# The next cell runs the same function with 1, 2, 4 and 8 streams, in the model, and says how much of the gain each count takes.

# %%
modelled_makespan = {}
for n_streams in (1, 2, 4, 8):
    with streams.modelled("T4") as run:
        chunk_by_chunk(streams.kernel(squash, seconds=KERNEL_SECONDS), run.host_chunks(data), n_streams)
    timeline = run.timeline()
    modelled_makespan[n_streams] = timeline.makespan
    print(f"{n_streams} stream(s): makespan {timeline.makespan * 1e3:5.2f} ms, {modelled_makespan[1] / timeline.makespan:4.2f}× "
          f"faster than one stream; ideal bound {timeline.ideal_seconds * 1e3:.2f} ms (modelled for T4)")
print("Modelled for T4:", stream_text.stream_count_gain(modelled_makespan))

# %% [markdown]
# How the makespan depends on the chunk count and on the three times is a question of the assignment: here, simulate and read the timeline.
#
# ## 3. Hardware queues: the issue-order trap, Hyper-Q and false dependencies
#
# Streams are the program's view; the GPU receives the host's calls through a few **hardware work queues**, and how streams map onto them decides what can overlap.
#
# **Before Hyper-Q** (Fermi, compute capability 2.x, and the first Kepler chips, 3.0) the host reached the GPU through one connection, in effect one queue per engine: each engine took its operations in the order the host issued them, across all streams, even when a later one was ready first (CUDA 4 Programming Guide, "Overlapping Behavior"; NVIDIA Technical Blog, M. Harris, "How to Overlap Data Transfers in CUDA C/C++", 2012).
# On a card with a single copy engine for both directions (older GeForce cards: CUDA's `deviceQuery` on a GTX 670 prints "Concurrent copy and kernel execution: Yes with 1 copy engine(s)"), *depth-first* issue (chunk by chunk, as `chunk_by_chunk` does) puts chunk 0's copy out in the copy engine's queue right in front of chunk 1's copy in, and that copy out cannot start before chunk 0's kernel ends: every chunk waits for the one before, however many streams there are.
# The guides of that time taught *breadth-first* issue (all copies in, then all kernels, then all copies out) to avoid it.
# The model has that hardware as `queues="per-engine"`.
#
# **Hyper-Q** (Kepler GK110, compute capability 3.5, and every card since) gives the host many hardware-managed connections, 32 on GK110 "compared to the single connection available with Fermi" (NVIDIA whitepaper, "NVIDIA's Next Generation CUDA Compute Architecture: Kepler GK110", 2012): streams on different queues no longer wait for each other's issue order, which removed the need to tailor the launch order (the blog post above).
# The model's default is `queues="hyper-q"`.
# The cell below prints which cards of `gpu_specs` that covers, runs `chunk_by_chunk` on a T4 restricted to one copy engine with both kinds of queues, and draws `sim.streams.pipeline` issued depth-first and breadth-first on the old hardware, with the reason the first chunk's successor waits, read from the timeline.

# %%
print("compute capability of the cards in gpu_specs:", ", ".join(f"{name} {card.compute_capability}" for name, card in gpu_specs.GPUS.items()),
      "(reported); Hyper-Q from 3.5 on")
one_engine = {}
for queues in ("per-engine", "hyper-q"):
    with streams.modelled("T4", copy_engines=1, queues=queues) as run:
        chunk_by_chunk(streams.kernel(squash, seconds=KERNEL_SECONDS), run.host_chunks(data), n_streams=4)
    one_engine[queues] = run.timeline().makespan
print("Modelled for T4 with one copy engine:", stream_text.compare("chunk_by_chunk on 4 streams, one queue per engine", one_engine["per-engine"],
                                                                   "on Hyper-Q's queues", one_engine["hyper-q"]))
print("Modelled for T4 with one copy engine:", stream_text.compare("chunk_by_chunk on 4 streams, one queue per engine", one_engine["per-engine"],
                                                                   "on one stream", modelled_makespan[1]))

copy_seconds = Schedule.for_gpu("T4").copy_seconds(CHUNK_ELEMENTS * 4)
traps = {(queues, order): pipeline(4, copy_seconds, KERNEL_SECONDS, copy_seconds, copy_engines=1, order=order, queues=queues).simulate()
         for queues in ("per-engine", "hyper-q") for order in ("depth", "breadth")}
fig, axes = plt.subplots(2, 1, figsize=(9.4, 5.2), sharex=True)
for ax, order in zip(axes, ("depth", "breadth")):
    plots.timeline(ax, traps["per-engine", order], title=f"4 chunks, one copy engine, one queue per engine (before Hyper-Q), {order}-first issue",
                   label="modelled for T4 with one copy engine")
fig.tight_layout()
plt.show()
print("Modelled for T4, one copy engine, one queue per engine, depth-first:", stream_text.wait_chain(traps["per-engine", "depth"], "in1"))
for queues in ("per-engine", "hyper-q"):
    print(f"Modelled for T4, one copy engine, {queues} queues:", stream_text.compare(
        "depth-first issue", traps[queues, "depth"].makespan, "breadth-first", traps[queues, "breadth"].makespan))

# %% [markdown]
# **Hyper-Q's queues are not one per stream.**
# The driver opens `CUDA_DEVICE_MAX_CONNECTIONS` connections per device, 8 unless the environment variable says otherwise, at most 32 (CUDA C++ Programming Guide, "CUDA Environment Variables"); it is read when CUDA starts, so set it before the process touches the GPU (`CUDA_DEVICE_MAX_CONNECTIONS=32 python train.py`).
# With more streams than connections, streams share a queue, and a queue still dispatches in issue order: a stream waits for the work another stream issued earlier into the same queue, a **false dependency** ("if you create more streams than connections (default = 8) then streams will alias to connections which can result in false dependencies", NVIDIA Developer Forums, "How many streams? Maximum number of streams").
# Which stream goes to which queue is not documented; the model assigns them round-robin in the order streams first get work (an assumption).
# torch adds a limit of its own: it hands out streams from a pool of 32 per priority (`kStreamsPerPool` in `c10/cuda/CUDAStream.cpp`), so the 33rd `torch.cuda.Stream()` is the first again, and so it is in the model's front end.
#
# The next cell issues 16 chunks on 16 streams breadth-first with 8 connections and with 32, draws both, and names the first operation that sharing a queue delays, and what holds it; then it sets the two issue orders side by side on 8 connections.
# The last line shows the other reason the issue order matters, on any hardware: a stream runs its own work in issue order, so with 8 chunks on 2 shared streams, breadth-first issue queues a stream's copies in ahead of its first kernel.

# %%
by_connections = {connections: pipeline(16, copy_seconds, KERNEL_SECONDS, copy_seconds, order="breadth", connections=connections).simulate()
                  for connections in (8, 32)}
fig, axes = plt.subplots(2, 1, figsize=(9.4, 5.2), sharex=True)
for ax, connections in zip(axes, (8, 32)):
    plots.timeline(ax, by_connections[connections], title=f"16 chunks on 16 streams, breadth-first, {connections} hardware queues")
fig.tight_layout()
plt.show()
print("Modelled for T4:", stream_text.false_dependencies(by_connections[8], by_connections[32], few_connections=8, many_connections=32))
depth_first = pipeline(16, copy_seconds, KERNEL_SECONDS, copy_seconds, order="depth").simulate()
print("Modelled for T4, 16 streams on 8 hardware queues:", stream_text.compare("depth-first issue", depth_first.makespan,
                                                                              "breadth-first", by_connections[8].makespan))
shared = pipeline(CHUNKS, copy_seconds, KERNEL_SECONDS, copy_seconds, order="breadth", streams=2).simulate()
print("Modelled for T4, 8 chunks breadth-first on 2 shared streams:", stream_text.first_kernel_wait(shared))

# %% [markdown]
# ## 4. Kernels side by side, and stream priorities
#
# **Concurrent kernels.** Kernels of different streams may run at the same time (CUDA C++ Programming Guide, "Concurrent Kernel Execution"; up to 128 resident grids per device on every card in `gpu_specs`, "Features and Technical Specifications"), but only when SMs are left over: the block scheduler places a kernel's blocks while there is room, so a grid large enough to fill every SM runs alone until its blocks drain.
# Small grids are where concurrency pays: many small, independent kernels (per-head or per-sample work, small batches at inference) each leave most of the GPU idle.
# The model gives a kernel launched with `blocks` a share of the GPU, min(1, blocks / (SMs × resident blocks per SM)), and runs kernels together while their shares fit; how many blocks of a kernel an SM holds depends on its registers and shared memory (lecture 02), so the resident-blocks figure, the hardware maximum, is an upper bound.
# Its ideal bound weighs each kernel by that share: for small grids it is the time the work would take spread over the whole GPU, a bound those launches cannot reach, since each still takes its own time.
#
# **Priorities.** `torch.cuda.Stream(priority=-1)` (`cudaStreamCreateWithPriority`): lower numbers are higher priorities.
# They are a hint to the block scheduler: "Priorities provide a hint to preferentially run work with higher priority when possible, but do not preempt already-running work", and they apply to kernels only, "no effect on host-to-device and device-to-host memory operations" (CUDA Runtime API, `cudaStreamCreateWithPriority`).
# A latency-sensitive kernel (an inference request, a communication kernel) on a high-priority stream goes ahead of queued throughput work, but after what is already running.
# The cell below runs both in the model for a T4: four kernels of 0.2 ms on four streams, with small grids and with full ones; then four full-grid batch kernels of 0.5 ms on four streams, and a request whose input is copied in while they run, its kernel on a stream of higher priority or of the same.

# %%
def four_kernels(blocks):
    """Four kernels of 0.2 ms on four streams, each launched with ``blocks`` blocks."""
    schedule = Schedule.for_gpu("T4")
    for i in range(4):
        schedule.kernel(f"k{i}", f"s{i}", seconds=0.2e-3, blocks=blocks)
    return schedule.simulate()


def batch_and_request(priority):
    """A throughput job of four full-grid kernels, and a request arriving on a stream of ``priority``."""
    schedule = Schedule.for_gpu("T4")
    schedule.stream("request", priority=priority)
    for i in range(4):
        schedule.kernel(f"batch {i}", f"batch stream {i}", seconds=0.5e-3)
    schedule.h2d("request in", "request", nbytes=1 << 20)
    schedule.kernel("request k", "request", seconds=0.1e-3)
    return schedule.simulate()


t4 = Schedule.for_gpu("T4")
print(f"T4: {t4.sms} SMs × {t4.blocks_per_sm} resident blocks at most; a grid of 40 blocks takes {t4.grid_share(40):.2%} of it, "
      f"one of 4096 blocks {t4.grid_share(4096):.0%} (modelled)")
small, full = four_kernels(40), four_kernels(4096)
print("Modelled for T4:", stream_text.concurrency(small, full, small_blocks=40, full_blocks=4096))
urgent, same = batch_and_request(-1), batch_and_request(0)
print("Modelled for T4:", stream_text.priority_jump(urgent, same, "request k"))
fig, axes = plt.subplots(2, 1, figsize=(9.4, 4.8))
plots.timeline(axes[0], small, title="four kernels of 40 blocks on four streams")
plots.timeline(axes[1], urgent, title="four full-grid batch kernels, and a request on a stream of higher priority")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 5. Races: what events are for
#
# A common layout uses one stream for copies and another for kernels, so that copies of the next chunk never queue behind kernels.
# But then nothing orders a kernel after the copy it reads: the streams are independent.
# On a GPU the kernel may start while its input is still arriving, and compute on a half-copied buffer; most runs the timing hides it, and then one day it does not.
#
# The model records which buffer each operation reads and writes, and reports a **race** when one stream touches a buffer another stream wrote with nothing ordering the two (it orders operations with vector clocks, so a missing wait is found even when the timing happens to look right).
# The fix is an event: record it on the copy stream after the copy, and make the compute stream wait for it before the kernel.
# `stream.wait_event(event)` does not block the host; it only holds that stream's later work until the event's point is done (`torch`'s `s.wait_stream(other)` records and waits on such an event for you).
# The cell below runs both versions: it prints the race with the times that show it, then both timelines.

# %%
chunk = data[0]


def copy_then_compute(ordered):
    """One chunk copied in on one stream and computed on another, with or without an event between them."""
    with streams.modelled("T4") as run:
        copies, compute = streams.Stream("copies"), streams.Stream("compute")
        x = streams.to_device(run.host_chunks([chunk])[0], stream=copies)
        if ordered:
            copied = streams.Event("x copied")
            copied.record(copies)
            compute.wait_event(copied)  # the kernel on `compute` starts after the copy on `copies`
        y = streams.launch(streams.kernel(squash, seconds=KERNEL_SECONDS), x, stream=compute)
        result = streams.to_host(y, stream=compute)
        streams.synchronize()
        assert torch.equal(run.values([result])[0], squash(chunk))  # the model computes the right tensor either way
    return run.timeline()


unordered, ordered = copy_then_compute(False), copy_then_compute(True)
for race in unordered.races:
    print("race:", race)
print("Modelled for T4:", stream_text.races(unordered))
print("Modelled for T4:", stream_text.race_versus_order(unordered, ordered))
fig, axes = plt.subplots(2, 1, figsize=(9.4, 4.6), sharex=True)
plots.timeline(axes[0], unordered, title="two streams, no event")
plots.timeline(axes[1], ordered, title="two streams, an event between the copy and the kernel")
fig.tight_layout()
plt.show()

# %% [markdown]
# On a GPU, torch has a checker for the same mistake: run your script with the environment variable `TORCH_CUDA_SANITIZER=1` and torch's CUDA sanitizer tracks which stream touched each tensor, and reports an access on one stream to a tensor another stream is still using, with no synchronisation between them.
# It slows everything down, so use it while testing, not while timing.
#
# ## 6. Device memory: bounded buffers, and what `record_stream` is for
#
# Data is cut into chunks because it is too large to send, or to hold, in one piece; a pipeline that keeps every chunk on the device defeats that.
# PyTorch's caching allocator decides when memory comes back: a freed tensor's block stays in the allocator's cache and goes to the next allocation of its size **on the stream it was allocated on**, at once, since that stream's later work runs after everything it did with the old tensor; the allocator "is aware of only the stream where a tensor was allocated" (PyTorch docs, `Tensor.record_stream`; "CUDA semantics", "Memory management"; `c10/cuda/CUDACachingAllocator.cpp`).
# The model keeps the same books: `Timeline.memory` is the bytes the allocator holds over time (what `torch.cuda.memory_reserved()` would read), and `peak_device_bytes` its peak.
# It takes a block when the host *issues* the call that allocates it, not when the GPU runs it: a host far ahead of the GPU allocates far ahead.
#
# **Double buffering** keeps a fixed number of device buffers, *slots*, and reuses them: chunk i is copied into slot i % 2 with `to_device(..., out=slot)`, so the copy of the next chunk fills one slot while a kernel reads the other.
# Reuse needs a guard: the copy into a slot must wait (an event) for the kernel that read the slot's previous chunk, or it overwrites data still being read, a race the model reports like any other.
# The example is a streaming reduction, the sum of `squash` over every chunk (think of a statistic over a dataset larger than the device), with one stream for copies and one for kernels: one slot, two slots, two slots without the guarding events, and every chunk resident in a buffer of its own, copied in breadth-first.
# Question 2 of the assignment asks for the same idea in a map, where every chunk also has a result to copy out.

# %%
SLOT_CHUNKS = [torch.randn(1 << 18) for _ in range(CHUNKS)]  # 1 MiB each: the model's times come from bytes and given seconds
SLOT_KERNEL_SECONDS = 0.1e-3


def squash_add(x, total):
    """total + squash(x): one chunk's share of the sum, written into the running total with out=."""
    return total + squash(x)


def streamed_sum(host_chunks, slots, guarded=True):
    """sum(squash(chunk)) on the device: chunk i copied into slot i % slots, one stream for copies and one for kernels."""
    copies, compute = streams.Stream("copies"), streams.Stream("compute")
    buffers, read, total = [None] * slots, [None] * slots, None
    for i, chunk in enumerate(host_chunks):
        k = i % slots
        if guarded and read[k] is not None:
            copies.wait_event(read[k])  # the kernel that read this slot's previous chunk is done
        buffers[k] = streams.to_device(chunk, stream=copies, out=buffers[k])
        arrived = streams.Event("arrived")
        arrived.record(copies)
        compute.wait_event(arrived)
        if total is None:
            total = streams.launch(streams.kernel(squash, seconds=SLOT_KERNEL_SECONDS), buffers[k], stream=compute)
        else:
            total = streams.launch(streams.kernel(squash_add, seconds=SLOT_KERNEL_SECONDS), buffers[k], total, stream=compute, out=total)
        read[k] = streams.Event("read")
        read[k].record(compute)
    result = streams.to_host(total, stream=compute)
    streams.synchronize()
    return result


def resident_sum(host_chunks):
    """The same sum with every chunk in a device buffer of its own: all copies issued first, then the kernels."""
    copies, compute = streams.Stream("copies"), streams.Stream("compute")
    on_device, arrived = [], []
    for chunk in host_chunks:
        on_device.append(streams.to_device(chunk, stream=copies))
        arrived.append(streams.Event("arrived"))
        arrived[-1].record(copies)
    total = None
    for x, event in zip(on_device, arrived):
        compute.wait_event(event)
        total = (streams.launch(streams.kernel(squash, seconds=SLOT_KERNEL_SECONDS), x, stream=compute) if total is None else
                 streams.launch(streams.kernel(squash_add, seconds=SLOT_KERNEL_SECONDS), x, total, stream=compute, out=total))
    result = streams.to_host(total, stream=compute)
    streams.synchronize()
    return result


sums = {}
for name, run_sum in {"two slots": lambda chunks: streamed_sum(chunks, 2), "one slot": lambda chunks: streamed_sum(chunks, 1),
                      "every chunk resident": resident_sum,
                      "two slots without the guarding events": lambda chunks: streamed_sum(chunks, 2, guarded=False)}.items():
    with streams.modelled("T4") as run:
        value = run.values([run_sum(run.host_chunks(SLOT_CHUNKS))])[0]
    assert torch.allclose(value, sum(squash(chunk) for chunk in SLOT_CHUNKS), atol=1e-4), name
    sums[name] = run.timeline()
print(f"{CHUNKS} chunks of {plots.binary_bytes(SLOT_CHUNKS[0].nbytes)}, kernels of {stream_text.ms(SLOT_KERNEL_SECONDS)}, modelled for T4:",
      stream_text.memory_and_races(sums, reference="two slots", size_text=plots.binary_bytes))
fig, axes = plt.subplots(2, 1, figsize=(9.4, 4.6), sharex=True, gridspec_kw={"height_ratios": [2.2, 1]})
plots.timeline(axes[0], sums["two slots"], title=f"double buffering: {CHUNKS} chunks through two slots")
axes[0].set_xlabel("")  # the strip below carries the time axis
plots.footprint(axes[1], {name: sums[name] for name in ("one slot", "two slots", "every chunk resident")})
fig.tight_layout()
plt.show()

# %% [markdown]
# **A prefetcher on a side stream.** A training loop can copy the next batch in while the current one is computed: the copy goes on a side stream, and the main stream waits for it before using the batch.
# In torch:
#
# ```python
# side = torch.cuda.Stream()
# with torch.cuda.stream(side):
#     upcoming = host_batches[0].to("cuda", non_blocking=True)   # pinned host batches
# for i in range(len(host_batches)):
#     torch.cuda.current_stream().wait_stream(side)   # the batch has arrived
#     batch = upcoming                                 # the batch before loses its last reference here
#     batch.record_stream(torch.cuda.current_stream())
#     if i + 1 < len(host_batches):
#         with torch.cuda.stream(side):
#             upcoming = host_batches[i + 1].to("cuda", non_blocking=True)
#     loss = step(batch)                               # on the main stream
# ```
#
# Each batch is allocated on the side stream and read on the main one, and that is the allocator's blind spot: when `batch` is rebound, the previous batch's block goes back to the *side* stream's cache, and the next copy on the side stream may take it at once, while the main stream's kernels may still be reading it.
# `Tensor.record_stream(stream)` closes the gap: "When the tensor is deallocated, ensure the tensor memory is not reused for another tensor until all work queued on stream at the time of deallocation is complete" (PyTorch docs, `Tensor.record_stream`; "CUDA semantics").
# The docs add the price: the allocator polls the recorded stream at later allocations, and a block still in use is not reused, so a host running far ahead allocates new blocks; they suggest managing the lifetime with events instead where you can (a wait of the side stream on an event recorded after the batch's last use, as in the double buffering above).
#
# The cell below writes the loop with the course's front end (`streams.record_stream`, `streams.release` where torch drops the reference) and runs it on the model: without `record_stream`, with it, with it and each step's loss read by the host (a synchronisation per step, as `loss.item()` for a log line is), and with no side stream at all.

# %%
def loss_of(batch):
    """A training step's stand-in: squash the batch, one number back."""
    return squash(batch).sum()


def prefetched(host_batches, *, record, read_loss=False, side_stream=True):
    """Steps over host_batches on the main stream, each next batch copied in on a side stream meanwhile (or on main)."""
    main = streams.Stream("main")
    side = streams.Stream("side") if side_stream else main
    upcoming = streams.to_device(host_batches[0], stream=side)
    losses = []
    for i in range(len(host_batches)):
        arrived = streams.Event("arrived")  # main.wait_stream(side)
        arrived.record(side)
        main.wait_event(arrived)
        batch = upcoming
        if record:
            streams.record_stream(batch, main)
        if i + 1 < len(host_batches):
            upcoming = streams.to_device(host_batches[i + 1], stream=side)
        loss = streams.launch(streams.kernel(loss_of, seconds=SLOT_KERNEL_SECONDS), batch, stream=main)
        losses.append(streams.to_host(loss, stream=main))
        streams.release(batch)  # in torch: `batch` rebound at the next step drops the last reference
        streams.release(loss)
        if read_loss:
            streams.synchronize(main)  # loss.item() for a log line: the host waits for the main stream
    streams.synchronize()
    return losses


loops = {}
for name, options in {"with record_stream": {"record": True}, "without record_stream": {"record": False},
                      "with record_stream, each loss read": {"record": True, "read_loss": True},
                      "no side stream": {"record": True, "side_stream": False}}.items():
    with streams.modelled("T4") as run:
        losses = run.values(prefetched(run.host_chunks(SLOT_CHUNKS), **options))
    assert all(torch.equal(loss, loss_of(batch)) for loss, batch in zip(losses, SLOT_CHUNKS)), name
    loops[name] = run.timeline()
print(f"{CHUNKS} batches of {plots.binary_bytes(SLOT_CHUNKS[0].nbytes)}, steps of {stream_text.ms(SLOT_KERNEL_SECONDS)}, modelled for T4:",
      stream_text.memory_and_races(loops, reference="with record_stream", size_text=plots.binary_bytes))
fig, axes = plt.subplots(2, 1, figsize=(9.4, 4.6), sharex=True, gridspec_kw={"height_ratios": [2.2, 1]})
plots.timeline(axes[0], loops["without record_stream"], title="a prefetcher on a side stream, without record_stream")
axes[0].set_xlabel("")  # the strip below carries the time axis
plots.footprint(axes[1], {name: loops[name] for name in list(loops)[:3]})
fig.tight_layout()
plt.show()

# %%
# On a GPU: the same prefetcher on real streams, with and without record_stream.
if gpucourse.gpu_or_explain("the prefetcher above in plain torch (torch.cuda.stream, wait_stream, record_stream): how many "
                            "prefetched batches the caching allocator placed in the memory of a batch whose kernels had not finished "
                            "(without record_stream, the race of the model; with it, none should), how far the losses of each "
                            "version land from those of a loop without a side stream, and the time per loop with and without the "
                            "side stream, from CUDA events"):
    host_batches = [torch.randn(2048 * 2048).pin_memory() for _ in range(CHUNKS)]  # 16 MiB each, pinned as a DataLoader would
    mixing = torch.randn(2048, 2048, device="cuda") / 2048**0.5

    def gpu_step(batch):
        """Long enough for the host to run ahead: a few matrix products on the batch, one number back."""
        h = batch.view(2048, 2048)
        for _ in range(4):
            h = torch.tanh(h @ mixing)
        return h.sum()

    def train(record, side_stream=True):
        """The loop of the markdown above: (losses, how often a batch got a block still being read, milliseconds)."""
        main = torch.cuda.current_stream()
        side = torch.cuda.Stream() if side_stream else main
        finished, reused, losses = {}, 0, []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        with torch.cuda.stream(side):
            upcoming = host_batches[0].to("cuda", non_blocking=True)
        for i in range(len(host_batches)):
            main.wait_stream(side)
            batch = upcoming
            if record:
                batch.record_stream(main)
            if i + 1 < len(host_batches):
                with torch.cuda.stream(side):
                    upcoming = host_batches[i + 1].to("cuda", non_blocking=True)
                last_use = finished.get(upcoming.data_ptr())  # the event after the kernels of the batch this block held
                reused += side_stream and last_use is not None and not last_use.query()
            losses.append(gpu_step(batch))
            finished[batch.data_ptr()] = torch.cuda.Event()
            finished[batch.data_ptr()].record(main)
        end.record()
        end.synchronize()
        return torch.stack(losses), reused, start.elapsed_time(end)

    train(True)  # warm-up: cuBLAS picks its kernels, the allocator fills its cache
    serial_losses, _, serial_ms = train(True, side_stream=False)
    runs = {"without record_stream": train(False), "with record_stream": train(True)}
    print(stream_text.reuse_observed({name: reused for name, (_, reused, _) in runs.items()}, CHUNKS - 1, device=gpucourse.describe(),
                                     errors={name: float((losses - serial_losses).abs().max()) for name, (losses, _, _) in runs.items()}))
    print(f"Measured on {gpucourse.describe()}:", stream_text.compare("the loop with a side stream and record_stream",
                                                                     runs["with record_stream"][2] / 1e3, "without a side stream", serial_ms / 1e3))

# %% [markdown]
# ## 7. The CPU analogue, measured for real: loading while computing
#
# Training loops have the same shape on the CPU side: load a batch (read files, decode, build a tensor), then compute on it.
# Done one after the other, the CPU waits for storage and the storage waits for the CPU.
# If loading is mostly waiting (a disk, a network file system, an object store), a background worker can load the next item while the main thread computes on this one: the two steps overlap like a copy engine and a compute engine.
#
# `torch.utils.data.DataLoader(dataset, num_workers=2, pin_memory=True, prefetch_factor=2)` does that in training code: worker processes load batches ahead, at most `prefetch_factor` batches each (`torch.utils.data` docs: "2 means there will be a total of 2 * num_workers batches prefetched across all workers"), and a thread copies them into pinned memory so the copy to the GPU can be asynchronous.
#
# Here we measure the principle with one background thread, `ThreadPoolExecutor(max_workers=1).map`, which has none of the start-up cost of worker processes and matches the model: one loader, one computer.
# Unlike `DataLoader`, `Executor.map` does not bound how far it runs ahead: it takes every item from the iterable and submits every load at once (Python docs, `concurrent.futures`: "the iterables are collected immediately rather than lazily"), and its thread then loads as far ahead as it can, each loaded item held until the consumer takes it.
# Here that is 16 items of 32 KiB each; with a dataset of thousands of batches it would submit them all, keeping every loaded batch until the consumer takes it, and on an endless stream `map` would never return.
# A loader for real work keeps at most a few loads in flight: writing one is Question 3 of the assignment.
#
# The loader sleeps 6 ms to stand for slow storage, then builds the tensor; the compute step is a few small matrix products.
# The stream model predicts the speedup of overlapping two steps of `T_load` and `T_compute` each: in the steady state, (T_load + T_compute) / max(T_load, T_compute), at most 2× when the two are equal.
# For the whole run it is fed the measured times, the loads as copies in and the computations as kernels, with one queue per engine (`queues="per-engine"`): the loader thread takes its loads one after another, in order, and the main thread its computations, which is exactly one first-in-first-out queue per engine, with no false dependencies between items as Hyper-Q's 8 shared queues would add for 16 items on 16 streams (section 3).

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
    with ThreadPoolExecutor(max_workers=1) as loader:  # loads run ahead in one background thread, as far as they can
        return [compute(batch) for batch in loader.map(load, items)]


def counted(items, taken):
    """The items, each appended to ``taken`` as it is taken: how far a loader has read its iterable."""
    for item in items:
        taken.append(item)
        yield item


taken = []
with ThreadPoolExecutor(max_workers=1) as loader:
    loaded = loader.map(load, counted(range(ITEMS), taken))
    next(loaded)
    taken_at_first = len(taken)
    list(loaded)
print(stream_text.items_taken(taken_at_first, ITEMS, received=1), f"(measured on {CPU})")

t_load = timing.measure(load, 0, min_run_time=0.1, num_threads=1).median
t_compute = timing.measure(compute, load(0), min_run_time=0.1, num_threads=1).median
print(f"T_load {t_load * 1e3:.2f} ms, T_compute {t_compute * 1e3:.2f} ms per item (measured on {CPU}, one thread)")

rng = np.random.default_rng(0)


def fresh_items():
    """A new list of items for every timed call, so no result can be remembered."""
    return (rng.integers(0, 2**31, ITEMS).tolist(),)


def check_in_order(inputs, output):
    expected = [compute(load(item)) for item in inputs[0][:3]]  # the first three, recomputed: order and values
    assert len(output) == ITEMS and output[:3] == expected, f"expected {expected} first, got {output[:3]}"


speed = timing.compare_speed(sequential, overlapped, fresh_items, check=check_in_order, rounds=5, num_threads=1)
steady = (t_load + t_compute) / max(t_load, t_compute)
simulated = pipeline(ITEMS, t_load, t_compute, 0.0, queues="per-engine").simulate()  # a queue for the loader, one for compute
for_items = ITEMS * (t_load + t_compute) / simulated.makespan
print(f"overlapped loading: {speed.speedup:.2f}× faster than the sequential loop (middle half of rounds {speed.low:.2f}–{speed.high:.2f}×; "
      f"measured on {CPU}: the CPU analogue)")
print(f"model: {steady:.2f}× in the steady state, {for_items:.2f}× for {ITEMS} items with filling and draining "
      f"(the stream model fed with the measured T_load and T_compute)")
print(stream_text.overlap_measured(speed.speedup, speed.low, speed.high, modelled=for_items, steady=steady, items=ITEMS))

# %% [markdown]
# The model's figure for 16 items counts the first load and the last compute, which have nothing to overlap with; the steady-state figure leaves them out.
#
# The formula also says when overlap cannot help: if loading takes 1 ms and computing 20 ms, hiding the load saves at most 1/21 of the time, under 5%.
# Overlap pays when the two steps are of similar length; otherwise, speed up the longer one.
#
# With more than one worker, `DataLoader` also loads several items *at once*, which beats this model when the load is mostly waiting (two sleeping workers wait in parallel): that is the loader's version of adding copy engines.
#
# ## 8. On a GPU: the model against real streams, and the profiler's view
#
# The same `chunk_by_chunk` runs unchanged on real `torch.cuda` streams when no `modelled` run is active.
# The next cell times it with CUDA events for 1, 2, 4 and 8 streams and prints the makespan the model predicts for this GPU beside it, the kernel's time measured alone and the link's datasheet bandwidth as its inputs.
# Then it records the 4-stream run with `torch.profiler` (`activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]`): its Chrome trace (`prof.export_chrome_trace`) has one event per kernel and per copy, each with the stream it ran on (`args["stream"]`), which `stream_text.profiled_rows` reads, and the cell draws them under the model's timeline on one time scale.

# %%
gpu_makespan, model_makespan = {}, {}
card = gpu_specs.card_for(torch.cuda.get_device_name()) if GPU else None
if gpucourse.gpu_or_explain("chunk_by_chunk on real CUDA streams, 1, 2, 4 and 8 streams, timed with CUDA events, beside the "
                            "makespan the stream model predicts for that GPU and the relative error: look at which stream count "
                            "is fastest in each, and how far the model is off; then the 4-stream run in torch.profiler, its kernels and copies "
                            "drawn by stream under the model's timeline, and how much of the kernels' time copies overlapped in each; "
                            "in the model for a T4: "
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
    print(stream_text.model_against_measurement(gpu_makespan, model_makespan, device=gpucourse.describe(), card=model_card))

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        chunk_by_chunk(squash, on_gpu_chunks, 4)
    with tempfile.TemporaryDirectory() as folder:
        trace_file = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace_file))
        rows = stream_text.profiled_rows(json.loads(trace_file.read_text()))
    with streams.modelled(model_card) as run:
        chunk_by_chunk(streams.kernel(squash, seconds=kernel_seconds), run.host_chunks(data), 4)
    print(stream_text.profiled_streams(rows, device=gpucourse.describe(), modelled=run.timeline(), card=model_card))
    fig, axes = plt.subplots(2, 1, figsize=(9.4, 5.2), sharex=True)
    named = {"h2d": "in", "d2h": "out", "compute": "k", "copy": "copy"}
    plots.timeline(axes, run.timeline(), title="chunk_by_chunk on 4 streams", label=f"modelled for {model_card}",
                   measured=[(f"{named[engine]} s{stream}", engine, start, end) for _, engine, start, end, stream in rows],
                   measured_label=f"profiled on {gpucourse.describe()}: bars named by kind and stream")
    fig.tight_layout()
    plt.show()

# %% [markdown]
# Where the model and the GPU disagree, the model's assumptions are the first suspects: the datasheet link rate is a peak that real copies reach only in part (section 1 measured how much, on a GPU), the fixed cost the model charges a copy (section 1 printed it) is an assumption, the host needs time to issue each call, and a real kernel's blocks drain gradually where the model switches kernels at once.
#
# **Nsight Systems** shows the same from outside the process, for any program: `nsys profile --trace=cuda,nvtx --cuda-memory-usage=true -o streams_report python my_pipeline.py`, then open `streams_report.nsys-rep` in the Nsight Systems GUI, or print tables with `nsys stats streams_report.nsys-rep` (Nsight Systems User Guide, "CLI Profile Command Switch Options": `--trace` picks the APIs traced, `--cuda-memory-usage` tracks the GPU's memory, at some cost).
# Its timeline has a row per CUDA stream under the GPU, with every kernel and memcpy, and the host's CUDA API calls above; `torch.cuda.nvtx.range_push("chunk 3")` and `range_pop()` (or `with torch.cuda.nvtx.range("chunk 3"):`) add named ranges to the host's row, so you can tell which step issued what.
# Compare it with the model's timeline, row by row:
#
# - the copy-in, compute and copy-out rows: do copies overlap kernels where the model overlaps them, and copies in overlap copies out (two copy engines)?
# - the gaps on the busiest engine: filling and draining, or a wait the model does not have; a gap on every stream at once, with a `cudaStreamSynchronize` or a memcpy on the host's row, is an implicit synchronisation (section 1);
# - the stream of each operation: work of two streams that could overlap but runs in turn is a shared hardware queue (section 3), a full grid (section 4), or an event you did not mean to wait on;
# - the memory track (`--cuda-memory-usage`) against the model's footprint (section 6).
#
# ## 9. Try it: the stream timeline
#
# Pick the chunk count, the streams (chunk i goes on stream i % streams; the slider stops at the chunk count), one or two copy engines, the hardware queues (Hyper-Q's, as on every card in `gpu_specs`, or one per engine, as before Hyper-Q), the issue order, pinned or pageable host memory, the GPU, the size of a chunk and the kernel time per chunk.
# The widget draws the modelled timeline and prints the makespan, the ideal bound, the speedup over doing the whole job in one piece, how the other issue order on the same streams compares, how the other kind of queues compares, and what the first kernel waits for.
# Try: one copy engine with depth-first issue, on Hyper-Q's queues and then on one queue per engine, and read where each copy in starts; then breadth-first; 8 chunks on 2 streams, breadth-first, then depth-first, and read what the first kernel waits for; pageable memory, and see when the host gets to issue each copy; a kernel much shorter than a copy; an H100's PCIe 5.0 link against a T4's PCIe 3.0.
# (Without a live Jupyter kernel the controls do nothing; the figure after it shows pageable against pinned memory statically.)

# %%
widgets.stream_timeline()

# %%
fig, axes = plt.subplots(2, 1, figsize=(9.4, 5.2), sharex=True)
by_memory = {}
for ax, memory in zip(axes, ("pageable", "pinned")):
    text, by_memory[memory] = widgets.stream_timeline_report(4, 2, "breadth", memory, "T4", 16, 1.0)
    plots.timeline(ax, by_memory[memory], title=f"4 chunks of 16 MB, {memory} host memory, kernels of 1 ms")
fig.tight_layout()
plt.show()
print("Modelled for T4:", stream_text.compare("pageable host memory", by_memory["pageable"].makespan, "pinned", by_memory["pinned"].makespan))

# %% [markdown]
# ## What to remember
#
# - Copies from pageable memory are staged by the driver; pinned memory lets a copy engine read directly and the call return at once. A blocking `.to("cuda")` waits for everything queued on its stream (a stream synchronisation); `non_blocking=True` leaves that wait out, even from pageable memory. `pin_memory()` right before a copy costs a host copy first (and page-locking, the first time a size is pinned): pin once, or let a `DataLoader` pin in the background.
# - Time GPU work with CUDA events, not a host clock around asynchronous calls; watch for calls that synchronise without saying so (`.item()`, `.cpu()`, printing, `torch.nonzero`, blocking copies), and let `torch.cuda.set_sync_debug_mode("warn")` point them out.
# - A GPU has a compute engine and copy engines (`asyncEngineCount` says how many copy engines); chunks on several streams keep them busy together. No schedule beats the busiest engine's total time; the gap to it is that engine's idle time.
# - Streams reach the GPU through hardware queues: before Hyper-Q, one per engine, where the issue order decided the overlap; today `CUDA_DEVICE_MAX_CONNECTIONS` of them (8 by default, up to 32), and streams beyond that share one and wait for each other. A few streams are enough; torch's pool holds 32 per priority.
# - Kernels of different streams run side by side only when their grids leave room; a high-priority stream's kernel goes before queued work but never preempts a running kernel.
# - Work on different streams is unordered unless an event orders it: a missing `wait_event` is a race, not a speedup. The stream model finds it; on a GPU, `TORCH_CUDA_SANITIZER=1` does.
# - Bound device memory with a few reused buffers (double or triple buffering), each reuse guarded by an event. A tensor allocated on one stream and used on another needs `record_stream` (or an event) before it is freed, or the allocator may hand its memory out while it is still being read; `record_stream` costs memory when the host runs ahead.
# - On the CPU, a background loader hides a slow load behind compute, up to (T_load + T_compute) / max(T_load, T_compute); bound how far it runs ahead.
# - Check the model against the real thing: `torch.profiler` and Nsight Systems show each kernel and copy on its stream.
#
# Next: the graded assignment `assignments/05_streams/05_streams.ipynb`, where you predict a pipeline's makespan exactly, write an overlapped map in bounded memory whose modelled timeline has no race and comes close to the ideal bound, and write a prefetching loader of your own.
