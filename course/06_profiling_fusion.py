# %% [markdown]
# # 06 · Profiling and kernel fusion: from `nn.Linear` to a fused MLP
#
# Lectures 02–05 made single kernels and copies fast.
# Real models are hundreds of ops, and the first question is not *how* to make one faster but *which* one to attack.
# The habit this lecture teaches is a loop: **measure, find the op that dominates, understand why it costs what it costs (compute, memory or overhead), fix that, measure again.**
#
# The seed article of this module (seed 000) profiles an `nn.Linear`, then an MLP, on an NVIDIA A100-SXM4-80GB, and reads the profiler's trace to make them faster.
# We do the same, on whatever machine runs this notebook.
#
# What you will learn:
#
# 1. `torch.profiler`: its table (self vs total time, calls), `record_function` labels, a `schedule` of steps, a trace you can open in Perfetto, and on a GPU NVTX ranges for Nsight Systems and Nsight Compute;
# 2. the three kinds of cost, each measured and placed on the roofline (compute-bound, memory-bound, overhead-bound), and Horace He's batch-doubling test for overhead;
# 3. fusion: by hand, with `torch.compile` (what Inductor writes, graph breaks, `fullgraph=True`, recompilations and dynamic shapes), and a Triton kernel of your own (a row softmax);
# 4. batching many small ops into one, and `record_shapes` to see what a batched op does inside;
# 5. back to the seed: the MLP profiled before and after compilation and bfloat16, with the generated calls read and the speedup measured;
# 6. a whole training step (forward, backward, optimizer) profiled, with `profile_memory` and, on a GPU, a memory snapshot.
#
# Everything here runs on a CPU for real: the profiler records CPU ops, per-op dispatch costs are real on a CPU, `torch.compile` generates C++ for a CPU, and Triton kernels run in Triton's interpreter.
# A GPU adds CUDA kernels to the trace, launch overhead, CUDA graphs and Triton's real speed; those cells say what to look for on one.
# Measurements differ from machine to machine and from run to run, so every sentence below that states a measured outcome is printed by code from this run's numbers (`gpucourse.profile_text` chooses the words).

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import contextlib
import logging
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

import torch

from gpucourse import kernels

GPU = torch.cuda.is_available()
try:
    kernels.use_triton_gpu_or_interpreter()  # before `import triton`: without a GPU, kernels run in its interpreter
    import triton
    import triton.language as tl
except ImportError as err:
    triton = None
    print(f"{err}; the Triton cells below will say what they would show.")

import matplotlib.pyplot as plt
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import gpucourse
from gpucourse import gpu_specs, plots, profile_text, profiling, timing
from gpucourse.devices import compile_or_explain, compile_support

THREADS = 1
torch.set_num_threads(THREADS)  # every CPU profile and timing below uses one thread, so they agree and do not depend on what else runs here
profiling.hide_dropped_label_warnings()  # Dynamo's note that compiled code drops record_function labels: section 5 says it in words
TRACES = Path(tempfile.mkdtemp(prefix="gpucourse-06-traces-"))  # trace files go to a temporary folder, not beside the notebook
CPU = gpucourse.describe("cpu").split(",")[0]
dev = gpucourse.device()
print("measured on:", gpucourse.describe())
# Inductor builds the C++ it writes for a CPU with the platform's toolchain: checked once, with a test compile; where it
# cannot run, the torch.compile cells say what they would show.
print("torch.compile on the CPU:", compile_support("cpu"))
print("Triton:", f"{triton.__version__}, " + ("compiling for this GPU" if GPU else "in its interpreter (TRITON_INTERPRET=1)")
      if triton else "missing")
print("trace files go to:", TRACES)

# %% [markdown]
# ## 1. `torch.profiler` on one `nn.Linear`
#
# `torch.profiler.profile` records every op PyTorch runs inside its block, with its start, end, thread and caller.
# `prof.key_averages()` sums them per op name, and `.table()` prints the sums (`max_name_column_width` keeps it narrow).
# Two columns matter most:
#
# - **Self CPU** is the time spent in the op itself, its children excluded; the self times of all rows add up to the whole run.
# - **CPU total** includes everything the op called: `aten::linear` calls `aten::addmm`, so its total contains addmm's time.
#
# Sort by self time to find where the time goes; read total time to see which of *your* calls it belongs to.
# `# of Calls` says how often each op ran: a surprise there (an op called 1000 times) is often the real finding.

# %%
linear = nn.Linear(512, 512)
x = torch.randn(64, 512)
linear(x)  # first-call costs (allocations, library set-up) stay out of the profile
with profile(activities=[ProfilerActivity.CPU]) as linear_prof:
    for _ in range(10):
        linear(x)
print(f"10 calls of nn.Linear(512, 512) on a (64, 512) input, measured on {CPU}, {THREADS} thread:")
print(linear_prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8, max_name_column_width=22))

# %% [markdown]
# `aten::linear` is what `nn.Linear` calls; it computes `x @ W.T + b` as `aten::t` (a transposed *view* of W: no data moves) and `aten::addmm` (bias plus matrix product, one op).
# Look at the Self CPU column: the matmul's row, `aten::addmm`, against the bookkeeping rows (`t`, `transpose`, `as_strided`, `expand`), each a few µs per call.
# On the seed's A100 the same table has the same rows, plus the CUDA kernels each one launched.
#
# ## The seed's MLP, with `record_function` labels and a `schedule`
#
# Next the seed profiles an MLP: Linear → activation → Linear.
# `record_function("name")` puts a label of our own around a block of code; it shows up as a row of the table and as a bar in the trace, with the ops it contains nested under it.
#
# A real loop runs many steps, and the first ones pay set-up costs.
# PyTorch's "PyTorch Profiler" recipe (section "Using profiler to analyze long-running jobs") and the `torch.profiler` API page profile a **schedule** of steps: `schedule(wait=1, warmup=1, active=5, repeat=1)` skips one step, records one and throws it away (the profiler's own start-up lands there), then records five; `prof.step()` marks the end of each step.
# When the active steps end, the profiler calls `on_trace_ready` with the finished profile: the recipe passes `torch.profiler.tensorboard_trace_handler(folder)` there; we write a Chrome trace.

# %%
class MLP(nn.Module):
    """Linear → GELU → Linear, each step labelled for the profiler. x: (batch, d) -> (batch, d)."""

    def __init__(self, d=512, hidden=2048):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d)

    def forward(self, x):
        with record_function("mlp.fc1"):
            h = self.fc1(x)
        with record_function("mlp.gelu"):
            h = self.act(h)
        with record_function("mlp.fc2"):
            return self.fc2(h)


torch.manual_seed(0)
mlp = MLP().eval()
x = torch.randn(64, 512)
PASSES = 5
trace_path = TRACES / "06_mlp_forward.json"
with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=PASSES, repeat=1),
                              on_trace_ready=lambda done: done.export_chrome_trace(str(trace_path))) as mlp_prof:
    for _ in range(1 + 1 + PASSES):  # inference: no autograd bookkeeping in the profile
        mlp(x)
        mlp_prof.step()
print(f"{PASSES} forward passes of the MLP 512 → 2048 → 512 on a (64, 512) batch, measured on {CPU}, {THREADS} thread:")
print(mlp_prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=22))

# %% [markdown]
# `ProfilerStep*` is the schedule's row: one bar per step, holding everything that step ran.
# The labels' rows have a large *total* and a small *self* time: they contain other ops, and their self time is only what ran between those.
# Their totals tell you how a forward pass splits between the two matmuls and the activation.
#
# ## The trace: every op on a timeline
#
# The table sums; the **trace** keeps every call, when it started and what called it.
# `prof.export_chrome_trace(path)` (our `on_trace_ready`) wrote it as a JSON file in the Chrome trace format, in a temporary folder whose path the cell prints.
# To look at it, open https://ui.perfetto.dev, click "Open trace file" and pick the file (nothing is uploaded: Perfetto runs in your browser), or type `chrome://tracing` in Chrome's address bar and press "Load".
# In Perfetto, `W`/`S` zoom in and out, `A`/`D` move left and right, and clicking a bar shows its details.
#
# The cell below draws the first forward pass of the same trace with `plots.profile_timeline`: a row per thread, a bar per op from its start to its end, and each op drawn inside the op that called it.
# `profiling.trace_events` turns the profile into plain tuples and keeps the first ones, so the figure stays readable.

# %%
print(f"trace written to {trace_path} ({trace_path.stat().st_size / 1e3:.0f} kB): open it in https://ui.perfetto.dev")
first_step = profiling.trace_events(mlp_prof, step=0, max_depth=2, max_events=None)
fig, ax = plt.subplots(figsize=(9.4, 3.2))
plots.profile_timeline(ax, first_step, title="MLP forward pass (the first profiled step), as Perfetto shows it", label=f"measured on {CPU}")
fig.tight_layout()
plt.show()
label_bars = {event.name: event.duration_us for event in first_step if event.depth == 0}  # the labels' bars, as drawn
print(profile_text.bars_sentence({label: label_bars[label] for label in ("mlp.fc1", "mlp.gelu", "mlp.fc2")}, "mlp.gelu"),
      f"(the step drawn, measured on {CPU})")

# %% [markdown]
# The figure's widest bars are the labels, with the ops they called inside them; the many tiny bars are views, transposes and checks, each costing microseconds, so they matter only when the real work is small.
# The sentence under it compares the GELU's bar with the matmuls' in the step drawn; the table above averaged all five steps, and steps differ.
#
# ## On a GPU: the CPU launches, the GPU runs, and NVIDIA's tools see both
#
# On a GPU the picture changes: the CPU only *launches* kernels (`cudaLaunchKernel`, a few µs each) and runs ahead, while the GPU's row shows the kernels themselves, later.
# The gap between a launch and its kernel is the queue in between; when the GPU row has holes, the GPU is waiting for the CPU to launch the next kernel, and the model is overhead-bound.
#
# `torch.profiler` sees what PyTorch runs. Two NVIDIA tools see the whole process, and read **NVTX ranges**, labels you push and pop around code (`torch.cuda.nvtx.range_push("forward")` … `range_pop()`, or `torch.autograd.profiler.emit_nvtx()` to make every op a range):
#
# - **Nsight Systems** (`nsys`) draws one timeline of the CPU threads, CUDA API calls, kernels, copies and NVTX ranges, to find gaps and serialisation (NVIDIA's *Nsight Systems User Guide*, "Profiling from the CLI"): `nsys profile -t cuda,nvtx,osrt -o mlp_report python train.py`, then open `mlp_report.nsys-rep` in the Nsight Systems GUI.
# - **Nsight Compute** (`ncu`) replays single kernels to measure them: achieved occupancy, memory throughput, a roofline per kernel, why warps stall (NVIDIA's *Nsight Compute CLI* documentation, "NVTX Filtering"): `ncu --nvtx --nvtx-include "forward/" --set full -o mlp_kernels python train.py` profiles only the kernels inside the push/pop range `forward`.
#
# Both run the program from a shell, on a machine with the GPU; the cell below pushes the ranges they would show.

# %%
# On a GPU: the CPU rows (launches) and the CUDA row (kernels) of the same forward pass, and NVTX ranges for nsys and ncu.
if gpucourse.gpu_or_explain("a table with CUDA time per kernel, the gap between the first launch and its kernel, and a timeline "
                            "whose CPU rows launch kernels ahead of the GPU row that runs them; look for holes in the GPU row"):
    mlp_gpu, x_gpu = MLP().eval().to(dev), torch.randn(64, 512, device=dev)
    with torch.no_grad():
        mlp_gpu(x_gpu)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as gpu_prof:
            mlp_gpu(x_gpu)
            torch.cuda.synchronize()
        for _ in range(3):  # what nsys shows as three "forward" ranges, and ncu --nvtx-include "forward/" profiles
            torch.cuda.nvtx.range_push("forward")
            mlp_gpu(x_gpu)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    print(profiling.table(gpu_prof.key_averages(), ("self_cpu", "self_device", "calls"), sort_by="self_device", row_limit=10))
    every_event = profiling.trace_events(gpu_prof, max_events=None)
    launches = [e for e in every_event if e.name.startswith(("cudaLaunch", "cuLaunch"))]
    kernels = [e for e in every_event if e.row.startswith("GPU")]
    if launches and kernels:
        print(f"first launch at {launches[0].start_us:.0f} µs, first kernel at {kernels[0].start_us:.0f} µs: "
              f"a gap of {kernels[0].start_us - launches[0].start_us:.0f} µs (measured on {gpucourse.describe()})")
    fig, ax = plt.subplots(figsize=(9.4, 3.6))
    plots.profile_timeline(ax, profiling.trace_events(gpu_prof, max_depth=2, max_events=80), title="MLP forward pass, CPU and GPU",
                           label=f"measured on {gpucourse.describe()}")
    fig.tight_layout()
    plt.show()

# %% [markdown]
# ## 2. Three kinds of cost
#
# Every op's time is set by one of three things (lecture 01's roofline, plus a fixed cost per op):
#
# - **compute-bound**: enough arithmetic per byte that the arithmetic units are the limit (a big matmul). Speed it up with better arithmetic: tensor cores, lower precision.
# - **memory-bound**: little arithmetic per byte, so moving bytes is the limit (elementwise ops: each reads and writes a whole tensor). Speed it up by moving fewer bytes: **fusion**.
# - **overhead-bound**: the op is so small that its fixed cost dominates: Python, PyTorch's dispatcher, and on a GPU the kernel launch. Speed it up by doing fewer, bigger ops: **batching**, compilation, CUDA graphs.
#
# We measure one of each on this CPU, with one thread, and then place all three on the roofline.

# %%
# Compute-bound: a 1024 × 1024 matmul does 2n³ FLOPs on 3 · 4n² bytes: n/6 ≈ 171 FLOP per byte.
n = 1024
a_mm, b_mm = torch.randn(n, n), torch.randn(n, n)
t_mm = timing.measure(torch.mm, a_mm, b_mm, num_threads=THREADS, min_run_time=0.1)
timing.warn_if_noisy(t_mm, "the matmul")
mm_rate, mm_intensity = 2 * n**3 / t_mm.median, n / 6
print(f"matmul {n}²: {t_mm.median * 1e3:.1f} ms, {mm_rate / 1e9:.1f} GFLOP/s, {mm_intensity:.0f} FLOP/byte (measured on {t_mm.device})")


# %%
# Memory-bound: five elementwise ops on a 16 MB tensor. Each one reads its inputs from memory and writes a new tensor.
def silu_relu_squared(x):
    """relu(x · sigmoid(x) + 0.25)², as five separate ops. x: any shape -> same shape."""
    s = torch.sigmoid(x)  # reads x, writes s
    y = x * s  # reads x and s, writes y
    y = y + 0.25  # reads y, writes a new y
    y = torch.relu(y)  # reads, writes
    return y**2  # reads, writes


N = 2**22  # 4 M float32 = 16 MB per tensor; the chain's tensors together outgrow the CPU's caches
x_big = torch.randn(N)
CHAIN_PASSES = 6 + 5  # tensor-sized reads (1 + 2 + 1 + 1 + 1) and writes (one per op)
CHAIN_FLOPS = 8  # per element: sigmoid ≈ 4 (negate, exp, add, divide), then multiply, add, max, square
t_chain = timing.measure(silu_relu_squared, x_big, num_threads=THREADS, min_run_time=0.2)
timing.warn_if_noisy(t_chain, "the elementwise chain")
chain_bytes = CHAIN_PASSES * 4 * N
chain_rate, chain_intensity = CHAIN_FLOPS * N / t_chain.median, CHAIN_FLOPS / (CHAIN_PASSES * 4)
print(f"five elementwise ops on {N:,} floats: {t_chain.median * 1e3:.1f} ms, {chain_bytes / t_chain.median / 1e9:.1f} GB/s of "
      f"traffic, {chain_rate / 1e9:.2f} GFLOP/s, {chain_intensity:.2f} FLOP/byte (measured on {t_chain.device})")

# A plain copy-like op gives this CPU's memory roof: read two floats, write one, per element.
x_add, y_add, z_add = torch.randn(N), torch.randn(N), torch.empty(N)
t_add = timing.measure(lambda: torch.add(x_add, y_add, out=z_add), num_threads=THREADS, min_run_time=0.1)
cpu_bandwidth = 12 * N / t_add.median
print(f"add of {N:,} floats: {cpu_bandwidth / 1e9:.1f} GB/s, the memory roof used below (measured on {t_add.device})")


# %%
# Overhead-bound: thousands of adds on 8-element tensors. The arithmetic is nothing; the fixed cost per op is everything.
def thousand_tiny_adds(a, b):
    for _ in range(1000):
        a = a + b
    return a


tiny_a, tiny_b = torch.randn(8), torch.randn(8)
t_tiny = timing.measure(thousand_tiny_adds, tiny_a, tiny_b, num_threads=THREADS, min_run_time=0.1)
per_op = t_tiny.median / 1000
tiny_rate = 8 / per_op
print(f"one add of 8 floats: {per_op * 1e6:.2f} µs per op, {tiny_rate / 1e6:.1f} MFLOP/s, "
      f"{mm_rate / tiny_rate:,.0f}× below the matmul's rate (measured on {t_tiny.device})")
launch = gpu_specs.LAUNCH_OVERHEAD_SECONDS
print(f"on a GPU each op is also a kernel launch: about {launch * 1e6:.0f} µs launched and synchronised one by one "
      f"(reported: NVIDIA's CUDA graphs blog), so the same adds run at about {8 / launch / 1e6:.1f} MFLOP/s (modelled)")


# The profiler is overhead too: it records every op. The same thousand adds with and without it, interleaved (five runs each).
def seconds_per_add(recorded):
    """Seconds per add in one run of thousand_tiny_adds, with or without the profiler recording it."""
    with profile(activities=[ProfilerActivity.CPU]) if recorded else contextlib.nullcontext():
        start = time.perf_counter()
        thousand_tiny_adds(tiny_a, tiny_b)
        return (time.perf_counter() - start) / 1000


runs = {"plain": [], "recorded": []}
for _ in range(5):
    for kind in runs:
        runs[kind].append(seconds_per_add(kind == "recorded"))
plain_per_op, recorded_per_op = statistics.median(runs["plain"]), statistics.median(runs["recorded"])
profiler_cost = recorded_per_op - plain_per_op
print(profile_text.profiler_cost_sentence(recorded_per_op, plain_per_op), f"(medians of five runs each, measured on {t_tiny.device})")

# %% [markdown]
# On the roofline each of the three lands somewhere different.
# Look for three things: which side of the ridge point (where the sloped memory roof meets the flat compute roof) the matmul sits on; whether the chain sits on the slope the add defined, since its rate is set by bytes moved and fusing it moves it right (fewer bytes for the same FLOPs, section 3); and how far below any roof the tiny add sits.
# The sentences under the figure read those three from this run's numbers.

# %%
fig, ax = plt.subplots(figsize=(9.4, 4.6))
cpu_peak = mm_rate  # this CPU's best measured matmul rate: a practical flat roof, not a datasheet peak
plots.roofline(ax, cpu_peak, cpu_bandwidth, label=f"{CPU}, 1 thread, measured",
               points=[("matmul 1024²", mm_intensity, mm_rate), ("5 elementwise ops", chain_intensity, chain_rate),
                       ("tiny add (overhead)", 1 / 12, tiny_rate)], color="C0")
a100 = gpu_specs.gpu("A100")
plots.roofline(ax, a100.fp32_flops, a100.memory_bandwidth, label="A100 FP32 CUDA cores, reported", style="--", color="C2")
ax.plot([1 / 12], [8 / launch], "s", color="C2", mfc="white", label=f"tiny add on a GPU: 8 FLOPs per {launch * 1e6:.0f} µs launch (modelled)")
ax.set_title(f"Three kinds of cost: measured on {CPU}, the seed's A100 reported", fontsize=10)
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
fig.tight_layout()
plt.show()
for sentence in profile_text.roofline_sentences(mm_intensity, cpu_peak, cpu_bandwidth, chain_bytes / t_chain.median, 1 / 12, tiny_rate):
    print(sentence)

# %% [markdown]
# **Is it overhead? Double the work.**
# Horace He's "Making Deep Learning Go Brrrr From First Principles" gives a quick test: double the batch (or the size) and time it again.
# If the time barely grows, it was not spent on the work: the program is overhead-bound, and a bigger batch is nearly free.
# If it doubles, the work itself is the cost, and only better arithmetic or fewer bytes will help.
# One caution: a time that does not grow with the batch can also be work that does not depend on the batch, such as reading a layer's weights at batch 1; the profile tells the two apart.
# The cell doubles the work of three of the ops above: the tiny adds (8 → 16 elements), the elementwise chain (2 M → 4 M elements) and the MLP's forward pass (batch 64 → 128).
# It times the work once and twice in alternating rounds, so that a machine whose load changes slows both alike.

# %%
def doubled(fn, make_double_inputs, halve):
    """fn on inputs of the work once (baseline) and twice (candidate), in interleaved rounds, so both see the same machine."""
    return timing.compare_speed(fn, fn, make_double_inputs, baseline_inputs=halve, rounds=5, num_threads=THREADS)


with torch.no_grad():
    doubling = {"1000 tiny adds": doubled(thousand_tiny_adds, lambda: (torch.randn(16), torch.randn(16)), lambda a, b: (a[:8], b[:8])),
                "the elementwise chain": doubled(silu_relu_squared, lambda: (x_big * (0.5 + torch.rand(())),), lambda x: (x[:N // 2],)),
                "the MLP's forward pass": doubled(mlp, lambda: (torch.randn(128, 512),), lambda x: (x[:64],))}
for what, result in doubling.items():
    print(profile_text.doubling_sentence(what, result))
print(f"(measured on {result.device})")

# %% [markdown]
# ## 3. Fusion
#
# The chain above moves 11 tensor-sized passes of memory for 8 FLOPs per element.
# It only *needs* two: read `x` once, write the result once.
# **Fusion** computes all five ops on each element while it is in registers or cache, and writes only the final result.
#
# **By hand.**
# In PyTorch's eager mode each op runs over the whole tensor before the next starts, so we cannot fuse the ops into one loop ourselves.
# We can keep the data in cache instead: run all five ops on a chunk small enough to stay in the CPU's L2 cache, in place, then move to the next chunk.
# A chunk of 64 K floats works on 256 KiB of input and 256 KiB of output at once: a working set of 512 KiB, which the cell checks against this CPU's L2.
# Each element then leaves main memory once and comes back once; the price is five ops per chunk, 64 chunks and 320 ops in all, whose fixed cost we now pay.
# How much that gains depends on the cache sizes and on what else runs on the machine: the spread of the rounds tells you how far to trust it.

# %%
CHUNK = 1 << 16  # floats


def silu_relu_squared_by_hand(x, chunk=CHUNK):
    """The same five ops, one cache-sized chunk at a time, in place in the output. x: 1-D -> same shape."""
    out = torch.empty_like(x)
    for start in range(0, x.numel(), chunk):
        piece_in, piece_out = x[start:start + chunk], out[start:start + chunk]
        torch.sigmoid(piece_in, out=piece_out)
        piece_out.mul_(piece_in).add_(0.25).relu_().square_()
    return out


def check_chain(inputs, output):
    """Raise unless output is the eager chain of inputs[0], within float32 rounding."""
    torch.testing.assert_close(output, silu_relu_squared(inputs[0]), rtol=1e-5, atol=1e-6)


def fresh_big():
    """A new 16 MB input for every timed call: x_big scaled by a fresh random factor (a new tensor, new values)."""
    return (x_big * (0.5 + torch.rand(())),)


print(profile_text.cache_sentence(2 * CHUNK * 4, getattr(torch.cpu, "get_capabilities", dict)().get("l2_cache_size")))
check_chain((x_big,), silu_relu_squared_by_hand(x_big))
by_hand_result = timing.compare_speed(silu_relu_squared, silu_relu_squared_by_hand, fresh_big, check=check_chain, rounds=7,
                                      num_threads=THREADS)
print(profile_text.speed_sentence(by_hand_result, "The chain fused by hand (cache-sized chunks)", "the eager chain"))

# %% [markdown]
# **With `torch.compile`.**
# `torch.compile(fn)` captures the Python function as a graph of ops (TorchDynamo), and hands the graph to a compiler backend (Inductor by default).
# Inductor fuses the elementwise ops into one loop and generates code for it: C++ with vector instructions on a CPU, Triton kernels on a GPU.
# The first call compiles (seconds); later calls with the same shapes and dtypes reuse the result.
# `torch._inductor.utils.run_and_get_code` runs a compiled function and returns the code Inductor wrote; `TORCH_LOGS=output_code` prints it for every compilation, and `TORCH_COMPILE_DEBUG=1` keeps it on disk.
#
# In the loop printed below, look for one `loadu` of a vector of `x` (16 floats with AVX-512, 8 with AVX2), the sigmoid, multiply, add, max and square on registers (`tmp0`, `tmp1`, …), and one `store`.
# The kernel's name lists the ops it fused; the intermediates `s` and `y` never exist in memory.
# Then the compiled chain is timed against the eager one.

# %%
compiled_chain, compile_seconds = None, {}
if compile_or_explain("one C++ kernel whose loop loads x, computes the five ops in vector registers and stores the result once; "
                      f"compare its time with the eager chain's and with {CHAIN_PASSES} / 2 passes.", "cpu"):
    from torch._inductor.utils import run_and_get_code

    compiled_chain = torch.compile(silu_relu_squared)
    start = time.perf_counter()
    _, generated = run_and_get_code(compiled_chain, x_big)
    compile_seconds["elementwise chain"] = time.perf_counter() - start
    print(f"first call (compilation included): {compile_seconds['elementwise chain']:.1f} s (measured on {CPU})")
    source = generated[0].splitlines()
    kernel_name = next(line.split(" = ")[0] for line in source if line.startswith("cpp_fused"))
    loop_start = next(i for i, line in enumerate(source) if line.strip().startswith("for(int64_t x0"))
    print(f"Inductor wrote one C++ kernel for the five ops, {kernel_name} ({len(source)} lines of generated Python and C++ in all); "
          "its loop:\n")
    print(textwrap.dedent("\n".join(source[loop_start:loop_start + 17])))
    check_chain((x_big,), compiled_chain(x_big))
    compiled_result = timing.compare_speed(silu_relu_squared, compiled_chain, fresh_big, check=check_chain, rounds=7, num_threads=THREADS)
    print(profile_text.speed_sentence(compiled_result, "The compiled chain", "the eager chain"))
    print(f"At the same FLOPs, 2 passes instead of {CHAIN_PASSES}: the ideal gain of fusion for a memory-bound chain is "
          f"{CHAIN_PASSES / 2:.1f}× (modelled).")

# %% [markdown]
# **Graph breaks.**
# Dynamo can only put into a graph what it can trace: tensor ops and plain Python around them.
# Something it cannot trace (a `print`, reading a tensor's value with `.item()` to decide a branch, a call into a C extension) ends the graph there: a **graph break**.
# The code before and after compiles as separate graphs, with Python running in between, and no fusion across the break.
# `torch._dynamo.explain(fn)(*args)` lists the graphs and the reason for each break; `TORCH_LOGS=graph_breaks` logs them as they happen.
# `torch.compile(fn, fullgraph=True)` turns a graph break into an error instead: use it where you need one graph (to export it, or to be sure nothing falls back to Python).
# Its message may word the cause differently from `explain`'s; both point at the branch on a value read with `.item()`.

# %%
def normalise_with_a_break(x):
    """(x − mean) · rsqrt(var + eps), with a data-dependent Python branch in the middle."""
    centred = x - x.mean()
    if centred.abs().max().item() > 100:  # .item() brings a value to Python: Dynamo must stop the graph here
        centred = centred / 100
    return centred * torch.rsqrt(centred.var() + 1e-5)


torch._logging.set_logs(dynamo=logging.ERROR)  # Dynamo also warns about each break as it meets it; here we print them ourselves
explanation = torch._dynamo.explain(normalise_with_a_break)(torch.randn(1000))
print(f"explain: {explanation.graph_count} graphs, {explanation.graph_break_count} graph break(s)")
for reason in explanation.break_reasons:
    print("-", str(reason.reason).strip().splitlines()[0])
try:
    torch.compile(normalise_with_a_break, backend="eager", fullgraph=True)(torch.randn(1000))  # "eager": trace only, no Inductor
    print("fullgraph=True compiled it as one graph")
except Exception as err:  # Dynamo's error type depends on where tracing stopped
    print(f"fullgraph=True refused it: {type(err).__name__}: {textwrap.shorten(str(err).strip().splitlines()[0], 140)}")
torch._logging.set_logs()  # back to the defaults
torch._dynamo.reset()  # explain leaves Dynamo's caches filled; start the next compilations clean

# %% [markdown]
# The fix is usually to keep the decision on the tensor side, e.g. `torch.where(cond, a, b)` instead of `if cond.item():`, so the whole function stays one graph.
#
# **Recompilations and dynamic shapes.**
# A compiled graph is guarded: Dynamo records what it assumed (shapes, dtypes, Python values) and checks those guards on every call; a call that fails them compiles again.
# By default the first graph assumes the exact shapes it saw; after a shape changes, Dynamo recompiles with that dimension symbolic (`automatic_dynamic_shapes` in `torch/_dynamo/config.py`).
# `dynamic=False` keeps every size static, one graph per size, up to `torch._dynamo.config.recompile_limit` graphs, after which Dynamo stops compiling that function and runs it eagerly; `dynamic=True` or `torch._dynamo.mark_dynamic(x, dim)` makes a dimension symbolic from the start.
# `TORCH_LOGS=recompiles` prints why each recompilation happened; `profiling.recompile_reasons()` collects the same messages.
# To count graphs without waiting for Inductor, the cell compiles with a backend of its own: a backend is any function that takes the graph and example inputs and returns something to call.

# %%
def counting_backend(graphs):
    """A Dynamo backend that records each graph's input shapes and runs the graph as it is (no Inductor: counting is the point)."""
    def backend(graph_module, example_inputs):
        graphs.append([tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)])
        return graph_module.forward
    return backend


def gelu_scaled(x):
    return torch.nn.functional.gelu(x) * 2 + 1


SIZES = (8, 16, 32, 64)
graph_counts, why_recompiled = {}, {}
for way, options in {"dynamic=False": {"dynamic": False}, "the default": {}, "dynamic=True": {"dynamic": True}, "mark_dynamic": {}}.items():
    torch._dynamo.reset()
    graphs = []
    compiled = torch.compile(gelu_scaled, backend=counting_backend(graphs), **options)
    with profiling.recompile_reasons() as why_recompiled[way]:
        for size in SIZES:
            x_dyn = torch.randn(size)
            if way == "mark_dynamic":
                torch._dynamo.mark_dynamic(x_dyn, 0)
            compiled(x_dyn)
    graph_counts[way] = len(graphs)
torch._dynamo.reset()
print(profile_text.compile_counts_sentence(graph_counts, len(SIZES)), f"(counted in this run, torch {torch.__version__})")
for way in ("dynamic=False", "the default"):
    first = why_recompiled[way][0].splitlines()[-1].strip() if why_recompiled[way] else "no recompilation"
    print(f"{way}, the first recompilation's reason: {first}")
print(f"recompile_limit here: {torch._dynamo.config.recompile_limit} graphs per function")

# %% [markdown]
# **A Triton kernel of your own: a fused row softmax.**
# Triton writes GPU kernels in Python, one level above CUDA: a kernel is run by a grid of *programs*, and each program works on a whole block of elements at once (`tl.arange(0, BLOCK)`), not on one thread's element.
# The softmax of a row, exp(x − max x) / Σ exp(x − max x), in eager PyTorch takes four or five passes over memory (max, subtract, exp, sum, divide).
# As in Triton's tutorial, one program takes one row, loads it once, does everything in registers and stores it once.
#
# - `BLOCK`, the number of lanes a program has, must be a power of two: `triton.next_power_of_2(n_cols)`, the smallest one ≥ the row length.
# - The lanes past the end of the row are **masked**: their loads return −∞ (so they change neither the max nor, after `exp`, the sum) and their stores are skipped.
#
# Without a GPU, `TRITON_INTERPRET=1` (set in the imports cell) runs the same kernel in Triton's interpreter on CPU tensors: right answers, no speed.

# %%
if triton:
    @triton.jit
    def softmax_rows_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)  # one program per row
        cols = tl.arange(0, BLOCK)
        inside = cols < n_cols  # the mask: lanes past the row's end do nothing
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=inside, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        numerator = tl.exp(x)
        tl.store(out_ptr + row * out_row_stride + cols, numerator / tl.sum(numerator, axis=0), mask=inside)

    def softmax_rows(x):
        """Softmax over the last dimension with one Triton program per row. x: (rows, cols) -> (rows, cols)."""
        rows, cols = x.shape
        out = torch.empty_like(x)
        softmax_rows_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=triton.next_power_of_2(cols))
        return out

    # Checked against torch.softmax on shapes that are not multiples of the block: the masks must do their work.
    for shape in [(1, 1), (3, 5), (7, 33), (16, 100), (4, 1000)]:
        x_soft = torch.randn(*shape, device=dev) * 3
        torch.testing.assert_close(softmax_rows(x_soft), torch.softmax(x_soft, dim=1))
        print(f"{str(shape):>10}: BLOCK {triton.next_power_of_2(shape[1]):4d}, matches torch.softmax "
              f"({'on ' + gpucourse.describe() if GPU else 'in the Triton interpreter'})")
else:
    print("Without Triton: each shape would be checked against torch.softmax here, with the block rounded up to a power of two.")

# %%
# On a GPU: the fused kernel against torch's own softmax and against the eager five-pass version.
if gpucourse.gpu_or_explain("the Triton softmax timed against torch.softmax (itself one fused kernel) and against the eager "
                            "max/subtract/exp/sum/divide chain on a (4096, 1000) float32 input; the chain is memory-bound, so "
                            "compare its speedup with the passes saved") and triton:
    def softmax_eager(x):
        e = torch.exp(x - x.amax(dim=1, keepdim=True))
        return e / e.sum(dim=1, keepdim=True)

    def check_softmax(inputs, output):
        torch.testing.assert_close(output, torch.softmax(inputs[0], dim=1))

    def fresh_rows():
        return (torch.randn(4096, 1000, device=dev),)

    softmax_vs_eager = timing.compare_speed(softmax_eager, softmax_rows, fresh_rows, check=check_softmax)
    print(profile_text.speed_sentence(softmax_vs_eager, "The Triton softmax", "the eager chain"))
    softmax_vs_torch = timing.compare_speed(lambda x: torch.softmax(x, dim=1), softmax_rows, fresh_rows, check=check_softmax)
    print(profile_text.speed_sentence(softmax_vs_torch, "The Triton softmax", "torch.softmax"))

# %% [markdown]
# ## 4. Batching to beat overhead
#
# When ops are small, the cure for overhead is fewer, bigger ops.
# A common case: per-head projections in attention-like code, where the same input `x` (tokens × d) is projected by 64 separate small weight matrices, one per head.
# A Python loop runs 64 small matmuls, each paying the fixed cost; `torch.einsum` on the stacked weights (heads × d × d_head) runs all of them as one op.

# %%
HEADS, TOKENS, D, D_HEAD = 64, 32, 256, 16
head_weights = torch.randn(HEADS, D, D_HEAD) / D**0.5


def project_heads_loop(x, w):
    """x: (tokens, d), w: (heads, d, d_head) -> (heads, tokens, d_head), one matmul per head."""
    return torch.stack([x @ w[h] for h in range(w.shape[0])])


def project_heads_einsum(x, w):
    """The same projections as one op: out[h, t, e] = Σ_d x[t, d] · w[h, d, e]."""
    return torch.einsum("td,hde->hte", x, w)


def check_heads(inputs, output):
    """Raise unless output holds every head's projection of inputs[0] by head_weights."""
    torch.testing.assert_close(output, torch.einsum("td,hde->hte", inputs[0].double(), head_weights.double()).float(), rtol=1e-4, atol=1e-5)


x_tokens = torch.randn(TOKENS, D)
check_heads((x_tokens, head_weights), project_heads_einsum(x_tokens, head_weights))
heads_result = timing.compare_speed(project_heads_loop, project_heads_einsum, lambda: (torch.randn(TOKENS, D), head_weights),
                                    check=check_heads, rounds=9, num_threads=THREADS)
print(profile_text.speed_sentence(heads_result, f"einsum over the {HEADS} heads", "the Python loop"))

# %% [markdown]
# The FLOPs are the same; the loop pays 64 dispatches, 64 small outputs and a `stack` that copies them all again.
# What does einsum do instead? `profile(record_shapes=True)` records each op's input shapes, and `key_averages(group_by_input_shape=True)` gives a row per op *and* shape.
# The table below has only the columns we read (`profiling.table`; torch's `.table()` always prints every time column, and the shapes column makes it wider than a notebook).

# %%
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as einsum_prof:
    project_heads_einsum(x_tokens, head_weights)
by_shape = einsum_prof.key_averages(group_by_input_shape=True)
print(profiling.table(by_shape, ("self_cpu", "calls", "shapes"), row_limit=6, name_width=18))
print(profile_text.einsum_sentence([row.input_shapes[0] for row in by_shape if row.key == "aten::copy_"],
                                   [row.input_shapes[:2] for row in by_shape if row.key in ("aten::bmm", "aten::mm")]))


# The weights do not change between calls: lay them out once, as einsum would, and every call is one plain matmul.
W_FLAT = head_weights.permute(1, 0, 2).reshape(D, HEADS * D_HEAD)  # (d, heads · d_head)


def project_heads_prepacked(x, w_flat):
    """x: (tokens, d), w_flat: (d, heads · d_head) -> (heads, tokens, d_head): one matmul, its result viewed per head (no copy)."""
    return (x @ w_flat).view(x.shape[0], HEADS, D_HEAD).transpose(0, 1)


check_heads((x_tokens,), project_heads_prepacked(x_tokens, W_FLAT))
prepacked_result = timing.compare_speed(project_heads_einsum, project_heads_prepacked, lambda: (torch.randn(TOKENS, D), W_FLAT),
                                        baseline_inputs=lambda x, w_flat: (x, head_weights), check=check_heads, rounds=9,
                                        num_threads=THREADS)
print(profile_text.speed_sentence(prepacked_result, "One matmul on weights laid out once", "einsum"))

# %% [markdown]
# That is the whole loop of this lecture in miniature: measure (einsum against the loop), find (the profile's rows with their shapes), understand (a copy of every weight on every call), fix (lay the weights out once), measure again.
#
# On a GPU the overhead per op is a kernel launch, and two more tools remove it without changing the code:
#
# - **CUDA graphs** record a sequence of kernel launches once and replay the whole sequence with one launch.
# - `torch.compile(fn, mode="reduce-overhead")` fuses what it can and then captures the result in a CUDA graph.

# %%
graphed_shows = ("the 64-head loop compiled with mode='reduce-overhead' (CUDA graphs) timed against the eager loop, "
                 "whose 64 small launches can leave the GPU idle between kernels")
if gpucourse.gpu_or_explain(graphed_shows) and compile_or_explain(graphed_shows, dev):
    w_gpu = head_weights.to(dev)

    def fresh_tokens():
        return (torch.randn(TOKENS, D, device=dev), w_gpu)

    def check_heads_gpu(inputs, output):
        torch.testing.assert_close(output, project_heads_loop(*inputs), rtol=1e-4, atol=1e-5)

    loop_graphed = torch.compile(project_heads_loop, mode="reduce-overhead")
    start = time.perf_counter()
    for _ in range(3):  # CUDA graphs are recorded on the first calls
        loop_graphed(*fresh_tokens())
    torch.cuda.synchronize()
    print(f"compiled with reduce-overhead in {time.perf_counter() - start:.1f} s")

    def graphed(x, w):
        return loop_graphed(x, w).clone()  # a CUDA graph reuses its output buffer: keep each result

    graphed_result = timing.compare_speed(project_heads_loop, graphed, fresh_tokens, check=check_heads_gpu)
    print(profile_text.speed_sentence(graphed_result, "reduce-overhead (CUDA graphs)", "the eager loop"))

# %% [markdown]
# ## 5. Back to the seed: the MLP, before and after
#
# Section 1's profile said where the MLP's time goes; the first sentence below reads from it how much of a pass the matrix products took, and so how much fusion could save at most.
# We try fusion anyway, and measure.
#
# Dynamo drops the `record_function` labels when it compiles (the imports cell hid its warning that says so), and the compiled profile shows the compiled region instead.
# For inference we compile with Inductor's `freezing` option: the weights become constants of the compiled graph, so Inductor can prepare them once.
# What it does with them is in its source, `torch/_inductor/fx_passes/mkldnn_fusion.py`: a float32 linear on an x86 build with MKL becomes `torch.ops.mkl._mkl_linear`, MKL's matrix product on a weight packed once; a bfloat16 or float16 one becomes oneDNN's `torch.ops.mkldnn._linear_pointwise`.
# The same file registers the fusion of a following GELU (or ReLU, SiLU, …) into the matrix product, as a oneDNN *post-op* applied to each output tile while it is still in cache (the *epilogue*), for the oneDNN call only.
# So in float32 the GELU cannot go into MKL's call; the cell prints the calls Inductor wrote here, and where the GELU went.

# %%
def forward(model):
    """model's forward pass without autograd, as one function of the input to time and profile."""
    def run(x):
        with torch.no_grad():
            return model(x)
    return run


def profiled(fn, x, passes=PASSES):
    """A profile of ``passes`` calls of fn(x), after warm-up calls (first-call costs of the libraries stay out)."""
    for _ in range(2):
        fn(x)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(passes):
            fn(x)
    return prof


def per_pass(prof, passes=PASSES):
    """(seconds, op calls) per pass of a profile of ``passes`` calls; op calls count every ATen or library op."""
    rows = prof.key_averages()
    return rows.self_cpu_time_total / 1e6 / passes, sum(row.count for row in rows if "::" in row.key) / passes


def check_mlp(inputs, output, tolerance=1e-4):
    torch.testing.assert_close(output.float(), forward(mlp)(inputs[0]), rtol=tolerance, atol=tolerance)


def fresh_batch():
    return (torch.randn(64, 512),)


eager_rows = mlp_prof.key_averages()
matmul_share = sum(row.self_cpu_time_total for row in eager_rows if row.key in ("aten::addmm", "aten::mm")) / eager_rows.self_cpu_time_total
print(profile_text.amdahl_sentence(matmul_share), f"(measured on {CPU})")
eager_mlp = forward(mlp)
compiled_mlp = None
if compile_or_explain("a library call per Linear that Inductor wrote; look in its calls for the GELU: inside a call, or a loop of its own.", "cpu"):
    with torch._inductor.config.patch(freezing=True):
        compiled_mlp = forward(torch.compile(mlp))
        start = time.perf_counter()
        output, mlp_code = run_and_get_code(compiled_mlp, x)  # compiles here
        compile_seconds["MLP, float32"] = time.perf_counter() - start
    check_mlp((x,), output)
    print(f"compiled in {compile_seconds['MLP, float32']:.1f} s (measured on {CPU}); the kernel calls Inductor wrote, in order:")
    fp32_calls = profiling.inductor_calls("\n".join(mlp_code))
    print(textwrap.indent("\n".join(fp32_calls), "    "))
    print(profile_text.gelu_placement_sentence(fp32_calls))
    after_prof = profiled(compiled_mlp, x)
    print(profiling.table(after_prof.key_averages(), row_limit=8, name_width=40))

# %% [markdown]
# The `## Call CompiledFxGraph … ##` row is the compiled graph's call; its *self* time is the time in the C++ kernels Inductor wrote (they are not ATen ops, so they have no rows of their own).
#
# The profile diff below is read from the two profiles: which ops ran per pass, before and after.
# Then the compiled MLP is timed against the eager one, and the compiled profile's time per pass against the timer's median: a profile is for proportions, and the profiler adds its own cost per op (section 2).

# %%
before = {row.key: row.count / PASSES for row in eager_rows if row.key.startswith("aten::")}
if compiled_mlp:
    after = {row.key: row.count / PASSES for row in after_prof.key_averages() if "::" in row.key}
    print("ops per pass before:", ", ".join(f"{name} ×{count:g}" for name, count in before.items()))
    print("ops per pass after: ", ", ".join(f"{name} ×{count:g}" for name, count in after.items()))
    print("gone:", ", ".join(sorted(set(before) - set(after))))
    print(f"{sum(before.values()):g} op calls per pass before, {sum(after.values()):g} after (measured on {CPU})")
    fp32_result = timing.compare_speed(eager_mlp, compiled_mlp, fresh_batch, check=check_mlp, rounds=7, num_threads=THREADS)
    print(profile_text.speed_sentence(fp32_result, "The compiled MLP (float32)", "the eager one"))
    seconds, ops = per_pass(after_prof)
    print(profile_text.profiled_vs_timed_sentence(seconds, fp32_result.candidate_seconds, ops, profiler_cost))

# %% [markdown]
# If the matmuls were nearly all of the time, removing the other rows cannot move it much: the profile tells us what to attack, the matmul itself.
#
# **Lower precision for the matmuls.**
# `torch.autocast("cpu", dtype=torch.bfloat16)` runs matmuls in bfloat16: half the bytes, and on CPUs with bf16 dot-product instructions (AVX512_BF16, AMX-BF16) twice or more the work per instruction.
# Two different checks answer "does this CPU do bf16?", and they are easy to confuse:
#
# - `torch.ops.mkldnn._is_mkldnn_bf16_supported()` is oneDNN's gate, and Inductor's (`is_mkldnn_bf16_supported` in `torch/_inductor/utils.py`): on x86 it asks only for AVX-512 BW, VL and DQ (`mkldnn_bf16_device_check` in `aten/src/ATen/native/mkldnn/Utils.h`), so it says yes on AVX-512 CPUs without any bf16 instructions, where oneDNN emulates bf16 with float32 instructions (the oneDNN developer guide's "Data Types" page lists bf16 support by instruction set).
# - `torch.cpu.get_capabilities()` reports the instructions themselves: `avx512_bf16`, `amx_bf16`.
#
# The cell prints both, and the measurement says what this CPU gains.

# %%
capabilities = getattr(torch.cpu, "get_capabilities", dict)()
bf16_ok = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
print(profile_text.bf16_sentence(bf16_ok, capabilities.get("avx512_bf16", False), capabilities.get("amx_bf16", False)), f"({CPU})")


def with_bf16(model):
    """model under bfloat16 autocast, without autograd."""
    def run(x):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)
    return run


def check_mlp_bf16(inputs, output):
    check_mlp(inputs, output, tolerance=5e-2)  # bfloat16 stores 7 mantissa bits (8 of precision): about 2-3 decimal digits


if bf16_ok:
    eager_bf16 = with_bf16(mlp)
    bf16_rows = profiled(eager_bf16, x).key_averages()
    print(profiling.table(bf16_rows, row_limit=6, name_width=24))
    print(profile_text.count_change_sentence("aten::copy_", before.get("aten::copy_", 0),
                                             next((row.count for row in bf16_rows if row.key == "aten::copy_"), 0) / PASSES, "autocast"))
    eager_bf16_result = timing.compare_speed(eager_mlp, eager_bf16, fresh_batch, check=check_mlp_bf16, rounds=7, num_threads=THREADS)
    print(profile_text.speed_sentence(eager_bf16_result, "Eager bf16", "eager float32"))

# %% [markdown]
# Read the eager bf16 table before the speedup: `aten::copy_` (under `aten::_to_copy`) is where autocast converts the float32 weights (and the input) to bfloat16 *on every call*, a memory-bound pass that reads the 8 MB of float32 weights and writes 4 MB of bfloat16, paid again each time, and it eats into what the bf16 matmuls save.
# Measure, find, understand: the fix is to convert the weights once.
# Compiling with freezing does exactly that (the weights are constants, converted at compile time); the cell prints where the GELU went this time.

# %%
if bf16_ok and compile_or_explain("the calls Inductor wrote for bf16, and the compiled bf16 MLP timed against eager float32.", "cpu"):
    with torch._inductor.config.patch(freezing=True):
        compiled_bf16 = with_bf16(torch.compile(mlp))
        start = time.perf_counter()
        output, bf16_code = run_and_get_code(compiled_bf16, x)
        compile_seconds["MLP, bfloat16"] = time.perf_counter() - start
    check_mlp_bf16((x,), output)
    print(f"compiled in {compile_seconds['MLP, bfloat16']:.1f} s (measured on {CPU}); the kernel calls Inductor wrote, in order:")
    bf16_calls = profiling.inductor_calls("\n".join(bf16_code))
    print(textwrap.indent("\n".join(bf16_calls), "    "))
    print(profile_text.gelu_placement_sentence(bf16_calls))
    bf16_result = timing.compare_speed(eager_mlp, compiled_bf16, fresh_batch, check=check_mlp_bf16, rounds=7, num_threads=THREADS)
    print(profile_text.speed_sentence(bf16_result, "The compiled bf16 MLP", "eager float32"))
elif not bf16_ok:
    print("oneDNN takes no bf16 path on this CPU: on one where it does, this cell prints the calls Inductor wrote for bf16 "
          "and times the compiled bf16 MLP against eager float32.")
if compile_seconds:
    print("compile times:", ", ".join(f"{what} {seconds:.1f} s" for what, seconds in compile_seconds.items()), f"(measured on {CPU})")

# %% [markdown]
# On the seed's A100 the same loop applies with other numbers.
# A float32 matmul runs on the A100's TF32 tensor cores only when TF32 is allowed: `torch.backends.cuda.matmul.allow_tf32 = True` or `torch.set_float32_matmul_precision("high")`; it has been off by default for matmuls since PyTorch 1.12 (PyTorch's "CUDA semantics" page, section "TensorFloat-32 (TF32) on Ampere (and later) devices"), so by default float32 matmuls run on the FP32 units.
# bf16 under autocast runs on the tensor cores; the GELU and bias are separate kernels unless fused, and at small batch sizes the launches, not the kernels, fill the timeline, which is where CUDA graphs come in.

# %% [markdown]
# ## 6. A whole training step
#
# Training adds two phases to the forward pass: the backward pass, which computes a gradient for every weight, and the optimizer step, which updates every weight.
# The profiler recipe applies unchanged: label the phases, run a `schedule` of steps, and read where the time goes.
# Two more options of `profile` help here:
#
# - `record_shapes=True`, as in section 4, tells the forward's matmuls from the backward's by their shapes;
# - `profile_memory=True` adds memory columns: **CPU Mem** is what an op and its children allocated minus what they freed, **Self CPU Mem** the op's own part (negative: it freed more than it allocated).
#
# For the matrix products a model of the backward is easy: for each Linear it computes the weight's gradient (one matmul as big as the forward's) and the input's gradient (another), except for the first layer, whose input needs no gradient.
# For our MLP that is 2 · 2 − 1 = 3 matmuls against the forward's 2, so a backward about 1.5× the forward's FLOPs; the cell computes it from the layers' shapes.

# %%
def make_train_step(net, optimizer, x, y):
    """One labelled training step of net on (x, y) with the mean squared error."""
    def train_step():
        with record_function("forward"):
            loss = nn.functional.mse_loss(net(x), y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad()  # set_to_none=True by default: no pass that writes zeros (PyTorch's performance tuning guide)
    return train_step


torch.manual_seed(0)
net = MLP()
batch = 64
train_step = make_train_step(net, torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9), torch.randn(batch, 512), torch.randn(batch, 512))
STEPS = 3
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=STEPS, repeat=1),
             record_shapes=True, profile_memory=True) as train_prof:
    for _ in range(1 + 1 + STEPS):
        train_step()
        train_prof.step()
train_rows = train_prof.key_averages()
print(f"{STEPS} training steps of the MLP on a ({batch}, 512) batch, measured on {CPU}, {THREADS} thread:")
print(profiling.table(train_rows, ("self_cpu", "cpu_total", "calls"), row_limit=10, name_width=28))
phases = {row.key: row.cpu_time_total / 1e6 / STEPS for row in train_rows if row.key in ("forward", "backward", "optimizer")}
forward_flops = [2 * batch * layer.in_features * layer.out_features for layer in (net.fc1, net.fc2)]
backward_flops = 2 * sum(forward_flops) - forward_flops[0]  # weight and input gradients, but none for the network's input
print(profile_text.phases_sentence({phase: phases[phase] for phase in ("forward", "backward", "optimizer")}, backward_flops / sum(forward_flops)))

# %% [markdown]
# `Optimizer.step#SGD.step` is the profiler's own label for the optimizer.
# On a CPU, SGD with momentum updates one parameter at a time: per parameter one `aten::mul_` and two `aten::add_` (the momentum buffer, then the weight; `_single_tensor_sgd` in `torch/optim/sgd.py`), each a memory-bound pass over a weight; on a GPU it uses one `_foreach_` op for all parameters instead (`_default_to_fused_or_foreach` in `torch/optim/optimizer.py`).
# `record_shapes` tells the matmuls apart: the forward's are `aten::addmm` with a (64, ·) input; of the backward's `aten::mm`, the two whose inner dimension is the batch (64) compute the weight gradients, and the third the gradient of fc2's input.
#
# Then the memory columns, sorted by what each op allocated itself: look for the forward's outputs, allocated and kept for the backward, which allocates the gradients and frees the activations as it goes.

# %%
matmuls = [row for row in train_prof.key_averages(group_by_input_shape=True) if row.key in ("aten::addmm", "aten::mm")]
print(profiling.table(matmuls, ("self_cpu", "calls", "shapes"), row_limit=8, name_width=12))
print(profiling.table(train_rows, ("self_mem", "mem", "calls"), sort_by="self_mem", row_limit=6, name_width=28))
held = next(row.cpu_memory_usage for row in train_rows if row.key == "forward") / STEPS
saved_activations = 4 * batch * (2 * net.fc1.out_features + net.fc2.out_features)  # fc1's output and the GELU's, and the output
print(profile_text.held_memory_sentence(held, saved_activations))

# %%
# On a GPU: a memory snapshot, every allocation and free with the Python stack that made it, to open in PyTorch's memory viewer.
if gpucourse.gpu_or_explain("a memory snapshot of three training steps written to a file you drag onto https://pytorch.org/memory_viz: "
                            "look in its timeline for each step's activations, allocated in the forward and freed in the backward; "
                            "the peak allocated memory is printed"):
    torch.manual_seed(0)
    net_gpu = MLP().to(dev)
    gpu_step = make_train_step(net_gpu, torch.optim.SGD(net_gpu.parameters(), lr=1e-3, momentum=0.9),
                               torch.randn(batch, 512, device=dev), torch.randn(batch, 512, device=dev))
    gpu_step()  # the optimizer's state and the gradients exist from here on
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    for _ in range(3):
        gpu_step()
    torch.cuda.synchronize()
    snapshot_path = TRACES / "06_train_step_memory.pickle"
    torch.cuda.memory._dump_snapshot(str(snapshot_path))
    torch.cuda.memory._record_memory_history(enabled=None)  # stop recording
    print(f"peak allocated during three steps: {torch.cuda.max_memory_allocated() / 1e6:.1f} MB (measured on {gpucourse.describe()})")
    print(f"snapshot written to {snapshot_path}: drag it onto https://pytorch.org/memory_viz")

# %% [markdown]
# The snapshot API is private (`torch.cuda.memory._record_memory_history`, `_dump_snapshot`) but documented on PyTorch's "Understanding CUDA Memory Usage" page, which also explains the viewer.
#
# ## What to remember
#
# - Profile before optimising: sort `key_averages()` by **self** time to find the op that dominates, read **total** time and `record_function` labels to see whose it is, and `# of Calls` for surprises.
# - Profile a `schedule` of steps (`wait`, `warmup`, `active`, with `prof.step()`), not one cold call; add `record_shapes=True` to see what an op did inside and `profile_memory=True` to see who allocates.
# - A profile is for proportions: the profiler costs time per op it records, so take times from a timer.
# - Export the trace (`export_chrome_trace`, or `on_trace_ready`) and read it in Perfetto; on a GPU, CPU rows launch and GPU rows run, gaps in the GPU row are overhead, and NVTX ranges carry your labels into Nsight Systems (`nsys`) and Nsight Compute (`ncu`).
# - Name the kind of cost before fixing it: compute-bound (better arithmetic: lower precision, tensor cores), memory-bound (fewer passes: fusion), overhead-bound (fewer, bigger ops: batching, compilation, CUDA graphs); double the batch to test for overhead.
# - Fusion turns several passes over memory into one: by hand (cache-sized chunks), with `torch.compile` (read what Inductor generated; find graph breaks with `torch._dynamo.explain` or forbid them with `fullgraph=True`; watch recompilations with `TORCH_LOGS=recompiles`, and use `dynamic=True` or `mark_dynamic` for sizes that change), or with a Triton kernel (one program per row, a power-of-two block, masks for the rest).
# - Convert and lay out weights once, not on every call: einsum's copy, autocast's casts and freezing all teach it.
# - Measure again after every change: a fix for the wrong kind of cost removes rows from the profile and no time from the run.
#
# Next: the graded assignment `assignments/06_profiling_fusion/06_profiling_fusion.ipynb`, where you read profiles, count ops, fuse a chain of your own and write a Triton kernel.
