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
# 1. `torch.profiler`: its table (self vs total time, calls), `record_function` labels, a trace you can open in Perfetto, and the same timeline drawn here;
# 2. the three kinds of cost, each measured and placed on the roofline: compute-bound, memory-bound, overhead-bound;
# 3. fusion: by hand, with `torch.compile` (what Inductor writes, and graph breaks), and a Triton kernel of your own (a row softmax);
# 4. batching many small ops into one to beat per-op overhead;
# 5. back to the seed: the MLP profiled before and after compilation and bfloat16, with the speedup measured and the profile diff read.
#
# Everything here runs on a CPU for real: the profiler records CPU ops, per-op dispatch costs are real on a CPU, `torch.compile` generates C++ for a CPU, and Triton kernels run in Triton's interpreter.
# A GPU adds CUDA kernels to the trace, launch overhead, CUDA graphs and Triton's real speed; those cells say what a GPU run would show.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import logging
import shutil
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
from torch.profiler import ProfilerActivity, profile, record_function

import gpucourse
from gpucourse import gpu_specs, plots, profiling, timing

CPU = gpucourse.describe("cpu").split(",")[0]
THREADS = 1  # every CPU timing below uses one thread, so the numbers do not depend on what else runs here
dev = gpucourse.device()
# Inductor compiles the C++ it generates for a CPU with the system's C++ compiler.
CXX = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
COMPILE = CXX is not None
print("measured on:", gpucourse.describe())
print("C++ compiler for torch.compile:", CXX or "none found: install g++ (Linux), Xcode's command-line tools (macOS) "
      "or clang; the torch.compile cells will say what they would show")
print("Triton:", f"{triton.__version__}, " + ("compiling for this GPU" if GPU else "in its interpreter (TRITON_INTERPRET=1)")
      if triton else "missing")

# %% [markdown]
# ## 1. `torch.profiler` on one `nn.Linear`
#
# `torch.profiler.profile` records every op PyTorch runs inside its block, with its start, end, thread and caller.
# `prof.key_averages()` sums them per op name, and `.table()` prints the sums.
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
print(f"10 calls of nn.Linear(512, 512) on a (64, 512) input, measured on {CPU}:")
print(linear_prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))

# %% [markdown]
# `aten::linear` is what `nn.Linear` calls; it computes `x @ W.T + b` as `aten::t` (a transposed *view* of W: no data moves, hence its few µs) and `aten::addmm` (bias plus matrix product, one op).
# Almost all the self time is `aten::addmm`: the matmul itself. Everything else is bookkeeping that costs microseconds per call.
# The same table on the seed's A100 has the same rows, plus the CUDA kernels each one launched.
#
# ## The seed's MLP, with `record_function` labels
#
# Next the seed profiles an MLP: Linear → activation → Linear.
# `record_function("name")` puts a label of our own around a block of code; it shows up as a row of the table and as a bar in the trace, with the ops it contains nested under it.

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
with torch.no_grad():  # inference: no autograd bookkeeping in the profile
    mlp(x)
    with profile(activities=[ProfilerActivity.CPU]) as mlp_prof:
        mlp(x)
print(f"one forward pass of the MLP 512 → 2048 → 512 on a (64, 512) batch, measured on {CPU}:")
print(mlp_prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))

# %% [markdown]
# The labels' rows have a large *total* and a tiny *self* time: they only contain other ops.
# Their totals tell you how the forward pass splits between the two matmuls and the activation.
#
# ## The trace: every op on a timeline
#
# The table sums; the **trace** keeps every call, when it started and what called it.
# `prof.export_chrome_trace(path)` writes it as a JSON file in the Chrome trace format.
# To look at it, open https://ui.perfetto.dev, click "Open trace file" and pick the file (nothing is uploaded: Perfetto runs in your browser), or type `chrome://tracing` in Chrome's address bar and press "Load".
# In Perfetto, `W`/`S` zoom in and out, `A`/`D` move left and right, and clicking a bar shows its details.
# On a GPU the trace has one row per CPU thread and one per CUDA stream, and arrows from each launch to its kernel.
#
# The cell below writes the file, then draws the same trace in the notebook with `plots.profile_timeline`: a row per thread, a bar per op from its start to its end, and each op drawn inside the op that called it.
# `profiling.trace_events` turns the profile into plain tuples and keeps the first ones (60 by default), so the figure stays readable.

# %%
trace_dir = Path("traces")  # beside this notebook
trace_dir.mkdir(exist_ok=True)
trace_path = trace_dir / "06_mlp_forward.json"
mlp_prof.export_chrome_trace(str(trace_path))
print(f"trace written to {trace_path.resolve()} ({trace_path.stat().st_size / 1e3:.0f} kB): open it in https://ui.perfetto.dev")

# The same trace drawn here: profiling.trace_events gives plain (name, row, start_us, duration_us, depth) tuples.
fig, ax = plt.subplots(figsize=(9.4, 3.2))
plots.profile_timeline(ax, profiling.trace_events(mlp_prof, max_depth=3), title="MLP forward pass, as Perfetto shows it",
                       label=f"measured on {CPU}")
fig.tight_layout()
plt.show()

# %% [markdown]
# The two long bars are the matmuls (`aten::addmm`, inside `aten::linear`, inside our labels).
# Between them, the GELU is a short bar, and the many tiny bars are views, transposes and checks: each costs microseconds, so they matter only when the real work is small.
#
# On a GPU the picture changes: the CPU only *launches* kernels (`cudaLaunchKernel`, a few µs each) and runs ahead, while the GPU's row shows the kernels themselves, later.
# The gap between a launch and its kernel is the queue in between; when the GPU row has holes, the GPU is waiting for the CPU to launch the next kernel, and the model is overhead-bound.

# %%
# On a GPU: the CPU rows (launches) and the CUDA row (kernels) of the same forward pass.
if gpucourse.gpu_or_explain("a table with CUDA time per kernel (a cuBLAS GEMM per Linear, an elementwise GELU kernel), and a timeline "
                            "whose CPU rows launch each kernel a few µs before the GPU row runs it"):
    mlp_gpu, x_gpu = MLP().eval().to(dev), torch.randn(64, 512, device=dev)
    with torch.no_grad():
        mlp_gpu(x_gpu)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as gpu_prof:
            mlp_gpu(x_gpu)
            torch.cuda.synchronize()
    print(gpu_prof.key_averages().table(sort_by="self_device_time_total", row_limit=10))
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


N = 2**22  # 4 M float32 = 16 MB, far larger than the CPU's caches
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

# %% [markdown]
# On the roofline the three land in three different places.
# The matmul sits right of the ridge, near the flat roof: compute-bound.
# The chain sits far left, on the slope: memory-bound; its rate is set by bytes moved, and fusing it moves it right (fewer bytes for the same FLOPs, section 3).
# It even sits below the slope that the add defined: each of its ops writes a fresh 16 MB tensor, and the first write to fresh memory pays page faults (lecture 01, section 2).
# The tiny add is at the same intensity as any add, but thousands of times below the roof: neither compute nor memory limits it, only the fixed cost of each op.
# No roof describes that; the cure is fewer ops.

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

# %% [markdown]
# ## 3. Fusion
#
# The chain above moves 11 tensor-sized passes of memory for 8 FLOPs per element.
# It only *needs* two: read `x` once, write the result once.
# **Fusion** computes all five ops on each element while it is in registers or cache, and writes only the final result.
#
# **By hand.**
# In PyTorch's eager mode each op runs over the whole tensor before the next starts, so we cannot fuse the ops into one loop ourselves.
# We can keep the data in cache instead: run all five ops on a chunk small enough to stay in the CPU's L2 cache (64 K floats, 256 kB), in place, then move to the next chunk.
# Each element then leaves main memory once and comes back once; the price is five ops per chunk, 320 in all, whose fixed cost we now pay.
# How much that gains depends on the cache sizes and on what else runs on the machine: the spread of the rounds tells you how far to trust it.

# %%
def silu_relu_squared_by_hand(x, chunk=1 << 16):
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


check_chain((x_big,), silu_relu_squared_by_hand(x_big))
by_hand_result = timing.compare_speed(silu_relu_squared, silu_relu_squared_by_hand, lambda: (torch.randn(N),), check=check_chain,
                                      rounds=7, num_threads=THREADS)
print("fused by hand (cache-sized chunks) vs eager:", by_hand_result)

# %% [markdown]
# **With `torch.compile`.**
# `torch.compile(fn)` captures the Python function as a graph of ops (TorchDynamo), and hands the graph to a compiler backend (Inductor by default).
# Inductor fuses the elementwise ops into one loop and generates code for it: C++ with vector instructions on a CPU, Triton kernels on a GPU.
# The first call compiles (seconds); later calls with the same shapes and dtypes reuse the result.
# `torch._inductor.utils.run_and_get_code` runs a compiled function and returns the code Inductor wrote; `TORCH_LOGS=output_code` prints it for every compilation, and `TORCH_COMPILE_DEBUG=1` keeps it on disk.
#
# In the loop printed below, look for one `loadu` of a vector of `x` (16 floats with AVX-512), the sigmoid, multiply, add, max and square on registers (`tmp0`, `tmp1`, …), and one `store`.
# The kernel's name lists the ops it fused; the intermediates `s` and `y` never exist in memory.
# Then the compiled chain is timed against the eager one.

# %%
compiled_chain, compile_seconds = None, {}
if COMPILE:
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
    compiled_result = timing.compare_speed(silu_relu_squared, compiled_chain, lambda: (torch.randn(N),), check=check_chain,
                                           rounds=7, num_threads=THREADS)
    print("torch.compile vs eager:", compiled_result)
    print(f"at the same FLOPs, 2 passes instead of {CHAIN_PASSES}: the ideal gain of fusion for a memory-bound chain is "
          f"{CHAIN_PASSES / 2:.1f}× (modelled)")
else:
    print("No C++ compiler here: torch.compile would print one C++ kernel whose loop loads x, computes the five ops "
          "in vector registers and stores the result once, and time it several times faster than the eager chain.")

# %% [markdown]
# **Graph breaks.**
# Dynamo can only put into a graph what it can trace: tensor ops and plain Python around them.
# Something it cannot trace (a `print`, reading a tensor's value with `.item()` to decide a branch, a call into a C extension) ends the graph there: a **graph break**.
# The code before and after compiles as separate graphs, with Python running in between, and no fusion across the break.
# `torch._dynamo.explain(fn)(*args)` lists the graphs and the reason for each break, without compiling anything; `TORCH_LOGS=graph_breaks` logs them as they happen.

# %%
def normalise_with_a_break(x):
    """(x − mean) · rsqrt(var + eps), with a data-dependent Python branch in the middle."""
    centred = x - x.mean()
    if centred.abs().max().item() > 100:  # .item() brings a value to Python: Dynamo must stop the graph here
        centred = centred / 100
    return centred * torch.rsqrt(centred.var() + 1e-5)


torch._logging.set_logs(dynamo=logging.ERROR)  # Dynamo also warns about each break as it meets it; here we print them ourselves
explanation = torch._dynamo.explain(normalise_with_a_break)(torch.randn(1000))
torch._logging.set_logs()  # back to the defaults
print(f"{explanation.graph_count} graphs, {explanation.graph_break_count} graph break(s)")
for reason in explanation.break_reasons:
    print("-", str(reason.reason).strip().splitlines()[0])
torch._dynamo.reset()  # explain leaves Dynamo's caches filled; start the next compilations clean

# %% [markdown]
# The fix is usually to keep the decision on the tensor side, e.g. `torch.where(cond, a, b)` instead of `if cond.item():`, so the whole function stays one graph.
#
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
if gpucourse.gpu_or_explain("the Triton softmax about as fast as torch.softmax (itself one fused kernel) and several times faster "
                            "than the eager max/subtract/exp/sum/divide chain, on a (4096, 1000) float32 input: memory-bound, "
                            "so the gain follows the passes saved") and triton:
    def softmax_eager(x):
        e = torch.exp(x - x.amax(dim=1, keepdim=True))
        return e / e.sum(dim=1, keepdim=True)

    def check_softmax(inputs, output):
        torch.testing.assert_close(output, torch.softmax(inputs[0], dim=1))

    def fresh_rows():
        return (torch.randn(4096, 1000, device=dev),)

    print("Triton vs eager chain: ", timing.compare_speed(softmax_eager, softmax_rows, fresh_rows, check=check_softmax))
    print("Triton vs torch.softmax:", timing.compare_speed(lambda x: torch.softmax(x, dim=1), softmax_rows, fresh_rows, check=check_softmax))

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
    torch.testing.assert_close(output, project_heads_loop(*inputs), rtol=1e-4, atol=1e-5)


x_tokens = torch.randn(TOKENS, D)
check_heads((x_tokens, head_weights), project_heads_einsum(x_tokens, head_weights))
heads_result = timing.compare_speed(project_heads_loop, project_heads_einsum, lambda: (torch.randn(TOKENS, D), head_weights),
                                    check=check_heads, rounds=9, num_threads=THREADS)
print(f"{HEADS} per-head projections, einsum vs Python loop:", heads_result)

# %% [markdown]
# The FLOPs are the same; the loop pays 64 dispatches, 64 small outputs and a `stack` that copies them all again.
# (Here einsum finds that the heads share `x`, and computes one `(32 × 256) @ (256 × 1024)` matmul: batching also makes the matmul itself more efficient.)
#
# On a GPU the overhead per op is a kernel launch, and two more tools remove it without changing the code:
#
# - **CUDA graphs** record a sequence of kernel launches once and replay the whole sequence with one launch.
# - `torch.compile(fn, mode="reduce-overhead")` fuses what it can and then captures the result in a CUDA graph.

# %%
if gpucourse.gpu_or_explain("the 64-head loop compiled with mode='reduce-overhead' (CUDA graphs) running several times faster "
                            "than the eager loop, whose 64 small launches leave the GPU mostly idle"):
    w_gpu = head_weights.to(dev)

    def fresh_tokens():
        return (torch.randn(TOKENS, D, device=dev), w_gpu)

    loop_graphed = torch.compile(project_heads_loop, mode="reduce-overhead")
    start = time.perf_counter()
    for _ in range(3):  # CUDA graphs are recorded on the first calls
        loop_graphed(*fresh_tokens())
    torch.cuda.synchronize()
    print(f"compiled with reduce-overhead in {time.perf_counter() - start:.1f} s")

    def graphed(x, w):
        return loop_graphed(x, w).clone()  # a CUDA graph reuses its output buffer: keep each result

    print("reduce-overhead vs eager loop:", timing.compare_speed(project_heads_loop, graphed, fresh_tokens, check=check_heads))

# %% [markdown]
# ## 5. Back to the seed: the MLP, before and after
#
# Section 1's profile said where the MLP's time goes: almost all of it in the two `aten::addmm` (the matmuls), a little in `aten::gelu`, and some `aten::copy_` (addmm copies the bias into the output before accumulating the product into it).
# So this MLP is **compute-bound** on a CPU at this size, and fusion alone cannot do much: it can only remove the small rows.
# We try it anyway, and measure.
#
# Dynamo drops the `record_function` labels when it compiles (it warns so), and the compiled profile shows the compiled region instead.
# For inference we compile with Inductor's `freezing` option: the weights become constants of the compiled graph, which lets Inductor prepare them once for the CPU's matmul library (oneDNN) and fold the bias and the GELU into the matmul's *epilogue* (work done on each output tile while it is still in cache).

# %%
def forward(model):
    """model's forward pass without autograd, as one function of the input to time and profile."""
    def run(x):
        with torch.no_grad():
            return model(x)
    return run


def profiled(fn, x):
    """The profile of one call of fn(x), after warm-up calls (first-call costs of the libraries stay out)."""
    for _ in range(3):
        fn(x)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(x)
    return prof


def check_mlp(inputs, output, tolerance=1e-4):
    torch.testing.assert_close(output.float(), forward(mlp)(inputs[0]), rtol=tolerance, atol=tolerance)


def fresh_batch():
    return (torch.randn(64, 512),)


eager_mlp = forward(mlp)
compiled_mlp = None
if COMPILE:
    with torch._inductor.config.patch(freezing=True):
        compiled_mlp = forward(torch.compile(mlp))  # it drops the record_function labels, and warns that it does
        start = time.perf_counter()
        check_mlp((x,), compiled_mlp(x))  # compiles here
        compile_seconds["MLP, float32"] = time.perf_counter() - start
    print(f"compiled in {compile_seconds['MLP, float32']:.1f} s (measured on {CPU})")
    after_prof = profiled(compiled_mlp, x)
    print(after_prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
else:
    print("No C++ compiler: the compiled MLP's profile would show two fused linear ops in place of addmm, gelu, copy_ and the views.")

# %%
# The profile diff, read from the two tables: which ATen ops ran, and how often, before and after.
before = {row.key: row.count for row in mlp_prof.key_averages() if row.key.startswith("aten::")}
if compiled_mlp:
    after = {row.key: row.count for row in after_prof.key_averages() if "::" in row.key}
    print("ops before:", ", ".join(f"{name} ×{count}" for name, count in before.items()))
    print("ops after: ", ", ".join(f"{name} ×{count}" for name, count in after.items()))
    print("gone:", ", ".join(sorted(set(before) - set(after))))
    print(f"{sum(before.values())} op calls before, {sum(after.values())} after (measured on {CPU})")
    fp32_result = timing.compare_speed(eager_mlp, compiled_mlp, fresh_batch, check=check_mlp, rounds=7, num_threads=THREADS)
    print("compiled vs eager, float32:", fp32_result)

# %% [markdown]
# The rows are gone (the GELU, the bias copies, the transposes): fused into the matmul calls.
# The time barely moved, because the matmuls were the time.
# That is the profile telling us what to attack: the matmul itself.
#
# **Lower precision for the matmuls.**
# `torch.autocast("cpu", dtype=torch.bfloat16)` runs matmuls in bfloat16 (half the bytes, and on CPUs with AVX-512 BF16 or AMX, instructions that do twice or more the work per cycle).
# Not every CPU has them; the next cell checks, and the measurement says what this one gains.

# %%
bf16_ok = torch.backends.mkldnn.is_available() and getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)()
print(f"bfloat16 matmuls through oneDNN on this CPU: {'supported' if bf16_ok else 'not supported: autocast would run slow emulated bf16'}")


def with_bf16(model):
    """model under bfloat16 autocast, without autograd."""
    def run(x):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)
    return run


def check_mlp_bf16(inputs, output):
    check_mlp(inputs, output, tolerance=5e-2)  # bfloat16 keeps 8 bits of mantissa: about 2-3 decimal digits


if bf16_ok:
    eager_bf16 = with_bf16(mlp)
    print(profiled(eager_bf16, x).key_averages().table(sort_by="self_cpu_time_total", row_limit=6))
    print("eager bf16 vs eager float32:", timing.compare_speed(eager_mlp, eager_bf16, fresh_batch, check=check_mlp_bf16, rounds=7,
                                                                 num_threads=THREADS))

# %% [markdown]
# Read the eager bf16 table before the speedup: `aten::copy_` (under `aten::_to_copy`) has grown from 2 calls to 7, and sits right under the matmuls.
# Autocast converts the float32 weights (and the input) to bfloat16 *on every call*: a memory-bound pass over 4 MB of weights, paid again each time, eating part of what the bf16 matmuls save (on a busy or older CPU, all of it).
# Measure, find, understand: the fix is to convert the weights once.
# Compiling with freezing does exactly that (the weights are constants, converted at compile time), and fuses the GELU into the bf16 matmul as before.

# %%
if bf16_ok and COMPILE:
    with torch._inductor.config.patch(freezing=True):
        compiled_bf16 = with_bf16(torch.compile(mlp))
        start = time.perf_counter()
        check_mlp_bf16((x,), compiled_bf16(x))
        compile_seconds["MLP, bfloat16"] = time.perf_counter() - start
    print(f"compiled in {compile_seconds['MLP, bfloat16']:.1f} s (measured on {CPU})")
    print(profiled(compiled_bf16, x).key_averages().table(sort_by="self_cpu_time_total", row_limit=6))
    bf16_result = timing.compare_speed(eager_mlp, compiled_bf16, fresh_batch, check=check_mlp_bf16, rounds=7, num_threads=THREADS)
    print("compiled bf16 vs eager float32:", bf16_result)
elif not bf16_ok:
    print("This CPU has no fast bfloat16 path: on one that has (an AMD EPYC with AVX-512 BF16, measured), compiled bf16 ran "
          "this MLP 1.4-2.3× faster than eager float32.")
print("compile times:", ", ".join(f"{what} {seconds:.1f} s" for what, seconds in compile_seconds.items()), f"(measured on {CPU})")

# %% [markdown]
# On the seed's A100 the same loop applies with other numbers: the matmuls run on tensor cores (TF32 or bf16), the GELU and bias are separate kernels unless fused, and at small batch sizes the launches, not the kernels, fill the timeline, which is where CUDA graphs come in.
#
# ## What to remember
#
# - Profile before optimising: sort `key_averages()` by **self** time to find the op that dominates, read **total** time and `record_function` labels to see whose it is, and `# of Calls` for surprises.
# - Export the trace (`export_chrome_trace`) and read it in Perfetto: on a GPU, CPU rows launch and GPU rows run, and gaps in the GPU row are overhead.
# - Name the kind of cost before fixing it: compute-bound (better arithmetic: lower precision, tensor cores), memory-bound (fewer passes: fusion), overhead-bound (fewer, bigger ops: batching, compilation, CUDA graphs).
# - Fusion turns several passes over memory into one: by hand (cache-sized chunks), with `torch.compile` (read what Inductor generated; look for graph breaks with `torch._dynamo.explain`), or with a Triton kernel (one program per row, a power-of-two block, masks for the rest).
# - Measure again after every change: a fix for the wrong kind of cost removes rows from the profile and no time from the run.
#
# Next: the graded assignment `assignments/06_profiling_fusion/06_profiling_fusion.ipynb`, where you read profiles, count ops, fuse a chain of your own and write a Triton kernel.
