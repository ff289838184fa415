# %% [markdown]
# # 01 · GPU basics: devices, honest timing, transfers and the roofline
#
# A GPU is only worth using when the work it saves outweighs what it costs to get the data there and back.
# This lecture measures both sides on the machine you are using, and says which numbers are measured here and which are reported or modelled.
#
# What you will learn:
#
# 1. how PyTorch places tensors on a device, and why mixing devices fails;
# 2. three ways a naive stopwatch lies: first-call costs, asynchronous GPU launches and single-shot noise;
# 3. how `gpucourse.timing.measure` times code properly;
# 4. how fast a matrix multiplication runs here, in GFLOP/s, beside the figures a published article reports;
# 5. what a host↔device copy costs, and when offloading a matmul pays for it;
# 6. arithmetic intensity and the roofline: why a matmul can use the hardware's peak and an elementwise add cannot;
# 7. how much a Python loop costs against the same work vectorised.
#
# Every cell runs on a laptop CPU as well as on a GPU; cells that need a GPU say what a GPU run would show.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import time

import matplotlib.pyplot as plt
import torch

import gpucourse
from gpucourse import gpu_specs, plots, timing

# %%
# Every measurement below is labelled with this description of where it ran.
dev = gpucourse.device()
print("course device:", dev)
print("measured on:  ", gpucourse.describe())

# %% [markdown]
# ## 1. Tensors live on a device
#
# A tensor's data sits in one memory: the CPU's RAM or one GPU's memory.
# `.to(device)` copies it to another one, and `device=` creates it there directly, with no copy.
# `gpucourse.device()` is the CUDA GPU when there is one and the CPU otherwise, so the same cell runs everywhere.

# %%
x = torch.arange(6, dtype=torch.float32).reshape(2, 3)  # created on the CPU, the default
x_dev = x.to(dev)  # a copy on the course device (or x itself, if that is the CPU)
y_dev = torch.ones(2, 3, device=dev)  # created on the device directly: nothing to copy
print("x:    ", x.device)
print("x_dev:", x_dev.device, "| the same memory as x?", x_dev.data_ptr() == x.data_ptr())
print("y_dev:", y_dev.device)

# %%
# One operation, one device: torch never moves data behind your back, because a copy costs time.
if gpucourse.has_gpu():
    try:
        x + x_dev
    except RuntimeError as err:
        print("RuntimeError:", str(err).splitlines()[0])
else:
    print("No GPU here: x and x_dev are both CPU tensors, so x + x_dev works:", (x + x_dev).tolist())
    print("On a GPU it raises: RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")

# %% [markdown]
# ## 2. Why a naive stopwatch lies
#
# `time.perf_counter()` before and after one call looks like a measurement.
# It is not, for three reasons we can see on this machine.
#
# **(a) The first call pays one-off costs.**
# `torch.empty` only reserves memory; on the CPU the operating system maps each page on its first write (a page fault per 4 KB page).
# On a GPU the memory is mapped when it is allocated, but the first call into a library such as cuBLAS initialises it and loads its kernels.
# Timing two operations twice each, a write to a fresh 200 MB buffer and this process's first matmul, shows which one-off cost this device pays.

# %%
fresh = torch.empty(50_000_000, device=dev)  # 50 M float32 = 200 MB, not yet touched
m = torch.randn(1024, 1024, device=dev)
for what, op in (("write a fresh 200 MB buffer", lambda: fresh.fill_(1.0)), ("1024×1024 matmul", lambda: m @ m)):
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        op()
        gpucourse.synchronize()  # a no-op on the CPU; on a GPU, see (b)
        seconds.append(time.perf_counter() - start)
    print(f"{what}: first call {seconds[0] * 1e3:.1f} ms, second {seconds[1] * 1e3:.1f} ms, "
          f"{seconds[0] / seconds[1]:.1f}x (measured on {gpucourse.describe()})")
del fresh, m

# %% [markdown]
# **(b) GPU calls return before the work is done.**
# A CUDA operation is put in a queue and the Python call returns at once, while the GPU works on.
# Stopping the clock without `torch.cuda.synchronize()` times the launch, not the work.
# How long is the work? An 8192×8192 float32 matmul is 2 · 8192³ ≈ 1.1 TFLOP, so on Colab's T4 it takes a few tenths of a second: its FP32 peak is 8.1 TFLOP/s, and it sustains only about half of that.

# %%
# A T4 sustains about 50-60% of its FP32 peak in long matmuls: its 70 W power cap lowers the clock under
# sustained load (NVIDIA developer forums, "About GPU peak performance", 2023, on a T4 held near 24 of its
# 65 FP16 TFLOP/s "due to power capping"; Jia et al. 2019, "Dissecting the NVidia Turing T4 GPU via
# Microbenchmarking", on its clock throttling): about 4-5 of 8.1 TFLOP/s in FP32.
T4_SUSTAINED_SHARE = (0.5, 0.6)
t4 = gpu_specs.gpu("T4")
big_flops = 2 * 8192**3
t4_sustained = [share * t4.fp32_flops for share in T4_SUSTAINED_SHARE]
t4_big_seconds = sorted(big_flops / rate for rate in t4_sustained)
print(f"an 8192×8192 float32 matmul: {big_flops / 1e12:.2f} TFLOP; on a T4 (FP32 peak {t4.fp32_flops / 1e12:.1f} TFLOP/s, reported; "
      f"about {t4_sustained[0] / 1e12:.1f}-{t4_sustained[1] / 1e12:.1f} TFLOP/s sustained) it takes "
      f"{t4_big_seconds[0]:.2f}-{t4_big_seconds[1]:.2f} s (modelled for T4)")

# %%
if gpucourse.gpu_or_explain(
    "an 8192×8192 matmul 'takes' a few microseconds without synchronize (only the launch), and "
    f"{t4_big_seconds[0]:.2f}-{t4_big_seconds[1]:.2f} s on a T4, tens of thousands of times longer, when the clock waits for the GPU"
):
    a_big = torch.randn(8192, 8192, device=dev)
    b_big = torch.randn(8192, 8192, device=dev)
    a_big @ b_big  # warm-up: cuBLAS initialisation stays out of both timings
    gpucourse.synchronize()
    start = time.perf_counter()
    c_big = a_big @ b_big
    launch_only = time.perf_counter() - start
    gpucourse.synchronize()  # let that one finish before the honest timing
    start = time.perf_counter()
    c_big = a_big @ b_big
    gpucourse.synchronize()
    with_sync = time.perf_counter() - start
    print(f"without synchronize: {launch_only * 1e6:.0f} µs (measured on {gpucourse.describe()})")
    print(f"with synchronize:    {with_sync * 1e6:.0f} µs, {with_sync / launch_only:.0f}x more")
    del a_big, b_big, c_big

# %% [markdown]
# **(c) One reading is one sample of a noisy quantity.**
# Other processes, frequency scaling and caches move each call's time.
# Here are thirty single-shot timings of the same small matmul, each synchronised, taken the naive way.

# %%
n = gpucourse.per_device(cpu=256, cuda=2048)
a = torch.randn(n, n, device=dev)
b = torch.randn(n, n, device=dev)
single_shots = []
for _ in range(30):
    start = time.perf_counter()
    a @ b
    gpucourse.synchronize()
    single_shots.append(time.perf_counter() - start)
robust = timing.measure(torch.mm, a, b, min_run_time=0.1)
print(f"30 single shots of a {n}×{n} matmul: {min(single_shots) * 1e6:.0f} to {max(single_shots) * 1e6:.0f} µs, "
      f"a {max(single_shots) / min(single_shots):.1f}x spread (measured on {gpucourse.describe()})")
print("timing.measure:", robust)
timing.warn_if_noisy(robust, f"the {n}×{n} matmul")

# %%
fig, ax = plt.subplots(figsize=(8, 3.5))
plots.timing_strip(ax, single_shots, median=robust.median, iqr=robust.iqr, label=f"{n}×{n} matmul",
                   summary_label="timing.measure: median, band = IQR")
ax.set_title(f"Single shots vs a robust median, measured on {gpucourse.describe()}", fontsize=10)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 3. Timing properly: `timing.measure`
#
# `gpucourse.timing.measure(fn, *args)` is built on `torch.utils.benchmark`, and does four things a stopwatch does not:
#
# - **warm-up**: a few untimed calls first, so first-call costs (page faults, kernel loading, cuBLAS set-up) stay out;
# - **synchronisation**: it waits for queued GPU work before and after timing, so it times the work, not the launch;
# - **many runs**: it times blocks of calls for at least `min_run_time` seconds and in at least `min_blocks` blocks (5 by default), and reports the **median** per call, which one slow outlier cannot move, and the **IQR** (the spread of the middle half of the blocks);
# - **fixed threads**: the CPU thread count is set for the measurement, because it changes the result, as the next cell shows.
#
# It returns a `Timing` with `median` and `iqr` in seconds, how many calls and blocks it timed, and the device it ran on.
# When the spread is larger than the median itself (`Timing.too_noisy`), something else on the machine dominated the measurement: `timing.warn_if_noisy` prints a warning, and this lecture draws such a point hollow and draws no conclusion from it.

# %%
# The Timing from section 2(c): a median and a spread, never one reading.
print(robust)
print(f"median {robust.median * 1e6:.1f} µs, IQR {robust.iqr * 1e6:.1f} µs, {robust.calls} calls in {robust.blocks} timed blocks (measured on {robust.device})")

# %%
# The same CPU matmul with one thread and with all of them: the thread count is part of the experiment.
a_cpu, b_cpu = torch.randn(512, 512), torch.randn(512, 512)
for threads in sorted({1, torch.get_num_threads()}):
    t = timing.measure(torch.mm, a_cpu, b_cpu, num_threads=threads, min_run_time=0.1)
    print(f"512×512 matmul: median {t.median * 1e3:.2f} ms, IQR {t.iqr * 1e3:.2f} ms per call, measured on {t.device}")
    timing.warn_if_noisy(t, f"the 512×512 matmul on {threads} thread(s)")

# %% [markdown]
# ## 4. How fast does a matmul run here?
#
# Multiplying two n×n matrices computes n² outputs, each a dot product of n multiplies and n adds: **2n³ floating-point operations** (FLOPs).
# Dividing by the measured time gives FLOP/s, a rate we can compare across sizes and machines.
# Sizes up to 1024 keep this quick on a CPU: each size is timed for at least 0.1 s, in at least 5 blocks.
# A size whose spread exceeds its median is flagged, drawn hollow, and left out of the best rate: on a busy machine one size can look four times slower than its neighbours for no reason of its own.

# %%
cpu_name = gpucourse.describe("cpu")
cpu_sizes = [64, 128, 256, 512, 768, 1024]
cpu_timings = []
for n in cpu_sizes:
    a_cpu, b_cpu = torch.randn(n, n), torch.randn(n, n)
    t = timing.measure(torch.mm, a_cpu, b_cpu, min_run_time=0.1)
    cpu_timings.append(t)
    print(f"n = {n:5d}: median {t.median * 1e3:8.3f} ms, IQR {t.iqr * 1e3:7.3f} ms, {2 * n**3 / t.median / 1e9:7.1f} GFLOP/s "
          f"(measured on {cpu_name})")
    timing.warn_if_noisy(t, f"n = {n}")
cpu_rates = [2 * n**3 / t.median for n, t in zip(cpu_sizes, cpu_timings)]  # FLOP/s
cpu_noisy = [t.too_noisy for t in cpu_timings]
# The best rate feeds the offload model and the roofline, so it comes from sizes we can trust.
trusted_rates = [rate for rate, noisy in zip(cpu_rates, cpu_noisy) if not noisy]
cpu_peak = max(trusted_rates or cpu_rates)
if not trusted_rates:
    print("WARNING: every size was too noisy; the best rate below is no better than a guess. Run this cell again.")


# %%
# The figures below draw a noisy measurement hollow: seen, but not a point to read a trend from.
def mark_noisy(ax, xs, ys, noisy, color):
    """Draw the points flagged noisy hollow over a measured series, with a legend entry saying why."""
    flagged = [(x, y) for x, y, bad in zip(xs, ys, noisy) if bad]
    if flagged:
        ax.plot(*zip(*flagged), "o", ms=10, mfc="white", mec=color, mew=1.5, linestyle="none",
                label="too noisy to trust (spread > median)")

# %%
# On a GPU, the same sweep with sizes that keep it busy, up to the article's 10000×10000.
# A float32 matmul runs on TF32 tensor cores where the card has them and torch allows it
# (torch.backends.cuda.matmul.allow_tf32), else on the FP32 CUDA cores: compare with the peak of the precision used.
gpu_sizes, gpu_rates = [], []
gpu_card, gpu_precision = None, None
if gpucourse.gpu_or_explain(
    f"float32 matmul rates that climb with n, to about {t4_sustained[0] / 1e12:.0f}-{t4_sustained[1] / 1e12:.0f} TFLOP/s on a T4 "
    f"and towards the FP32 peak of an A100 ({gpu_specs.peak_flops('A100', 'fp32') / 1e12:.1f} TFLOP/s) "
    f"or an H100 ({gpu_specs.peak_flops('H100', 'fp32') / 1e12:.0f} TFLOP/s), further with TF32 allowed"
):
    gpu_sizes = [256, 512, 1024, 2048, 4096, 8192, 10_000]
    for n in gpu_sizes:
        a_gpu, b_gpu = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        t = timing.measure(torch.mm, a_gpu, b_gpu, min_run_time=0.1)
        gpu_rates.append(2 * n**3 / t.median)
        print(f"n = {n:5d}: median {t.median * 1e3:8.3f} ms, IQR {t.iqr * 1e3:7.3f} ms, {gpu_rates[-1] / 1e9:8.1f} GFLOP/s "
              f"(measured on {gpucourse.describe()})")
        timing.warn_if_noisy(t, f"n = {n}")
    del a_gpu, b_gpu
    gpu_card = gpu_specs.card_for(torch.cuda.get_device_name(dev))
    if gpu_card is None:
        print(f"{gpucourse.describe()} is not in gpucourse.gpu_specs: no datasheet peak to compare with")
    else:
        tf32_allowed = torch.backends.cuda.matmul.allow_tf32
        gpu_precision = gpu_specs.float32_matmul_precision(gpu_card, tf32_allowed)
        card_peak = gpu_specs.peak_flops(gpu_card, gpu_precision)
        units = "TF32 tensor cores" if gpu_precision == "tf32" else "FP32 CUDA cores"
        print(f"best: {max(gpu_rates) / 1e12:.1f} TFLOP/s (measured), {max(gpu_rates) / card_peak:.0%} of the {gpu_card.name}'s "
              f"{gpu_precision.upper()} peak of {card_peak / 1e12:.1f} TFLOP/s (reported): with allow_tf32={tf32_allowed}, "
              f"float32 matmuls run on its {units}")

# %% [markdown]
# The seed article of this course reports a 10000×10000 matmul in 0.0708 s on a GPU and 1.445 s on a CPU, without naming either device.
# These are **reported** figures: we did not measure them, and we do not know the dtype, thread count or how they were timed.
# Turned into rates they still tell us something.

# %%
# A rate is FLOPs / seconds, for the article's reported times as for ours.
seed_flops = 2 * 10_000**3
seed_gpu_rate = seed_flops / 0.0708
seed_cpu_rate = seed_flops / 1.445
print(f"article's GPU: {seed_gpu_rate / 1e12:5.1f} TFLOP/s (reported: 10000² matmul in 0.0708 s)")
print(f"article's CPU: {seed_cpu_rate / 1e12:5.2f} TFLOP/s (reported: 10000² matmul in 1.445 s)")
print(f"this CPU:      {cpu_peak / 1e12:5.2f} TFLOP/s at best, so a 10000² matmul would take about "
      f"{seed_flops / cpu_peak:.1f} s (measured rate on {cpu_name}, extrapolated)")
# No card of the TF32-by-default years reaches the article's rate in FP32. PyTorch 1.7 to 1.11 ran float32 matmuls on
# TF32 tensor cores by default (PyTorch docs, CUDA semantics, "TensorFloat-32 (TF32) on Ampere (and later) devices":
# allow_tf32 "defaults to True in PyTorch 1.7 to PyTorch 1.11, and False in PyTorch 1.12 and later"; the 1.12 release
# notes list the change), so on an A100 such a matmul ran against the TF32 peak, not the FP32 one.
fp32_below = [name for name, spec in gpu_specs.GPUS.items() if spec.fp32_flops < seed_gpu_rate]
fp32_above = [name for name in gpu_specs.GPUS if name not in fp32_below]
print("FP32 peaks under the article's rate: " + ", ".join(f"{name} {gpu_specs.peak_flops(name, 'fp32') / 1e12:.1f}" for name in fp32_below)
      + " TFLOP/s (reported)")
print("FP32 peaks above it, all cards of 2022 or later: "
      + ", ".join(f"{name} {gpu_specs.peak_flops(name, 'fp32') / 1e12:.1f}" for name in fp32_above) + " TFLOP/s (reported)")
a100_tf32 = gpu_specs.peak_flops("A100", "tf32")
print(f"A100 TF32 tensor cores: {a100_tf32 / 1e12:.0f} TFLOP/s dense peak (reported), so the article's rate is {seed_gpu_rate / a100_tf32:.0%} of it: "
      f"an A100 under PyTorch 1.7-1.11 could reach it; a T4 could not ({', '.join(gpu_specs.precisions('T4'))} only: no TF32 units)")
if gpu_rates:
    print(f"this GPU:      {gpu_rates[-1] / 1e12:5.1f} TFLOP/s, a 10000² matmul in {seed_flops / gpu_rates[-1]:.4f} s "
          f"(measured on {gpucourse.describe()})")

# %%
fig, (left, right) = plt.subplots(2, 1, figsize=(9, 7.6), gridspec_kw={"height_ratios": [1, 1.2]})  # stacked: each panel as wide as JupyterLab shows
cpu_line = plots.versus_size(left, cpu_sizes, [r / 1e9 for r in cpu_rates], label=cpu_name, ylabel="GFLOP/s", xlabel="matrix side n")
mark_noisy(left, cpu_sizes, [r / 1e9 for r in cpu_rates], cpu_noisy, cpu_line.get_color())
if gpu_sizes:
    plots.versus_size(left, gpu_sizes, [r / 1e9 for r in gpu_rates], label=gpucourse.describe(), logy=True)
left.set_title("float32 matmul rate, measured on this machine", fontsize=10)
left.legend(fontsize=8)
bars = [
    ("GPU in the article", seed_gpu_rate / 1e12, "reported"),
    ("CPU in the article", seed_cpu_rate / 1e12, "reported"),
    ("this CPU, best n", cpu_peak / 1e12, "measured"),
]
if gpu_rates:
    bars.append(("this GPU, best n", max(gpu_rates) / 1e12, "measured"))
# Datasheet peaks of a float32 matmul's two possible units: FP32 CUDA cores, and TF32 tensor cores (dense) where the card has them.
peak_cards = ["T4", "A100", "H100"] + ([gpu_card.name] if gpu_card is not None and gpu_card.name not in ("T4", "A100", "H100") else [])
for name in peak_cards:
    bars.append((f"{name} FP32 peak (datasheet)", gpu_specs.peak_flops(name, "fp32") / 1e12, "reported"))
    if "tf32" in gpu_specs.precisions(name):
        bars.append((f"{name} TF32 peak, dense (datasheet)", gpu_specs.peak_flops(name, "tf32") / 1e12, "reported"))
plots.provenance_bars(right, bars, xlabel="TFLOP/s (log scale)", log=True)
right.set_title("float32 matmul: rates and FP32/TF32 peaks", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Small matrices are far from the best rate: each call has a fixed overhead, and a small problem cannot keep every core (or every GPU multiprocessor) busy.
# The rate levels off once the work per call dwarfs the overhead; on a GPU that needs much larger n than on a CPU.
# The article's 20x GPU-over-CPU ratio is a ratio between two unnamed machines, not a law: your own ratio depends on both devices, the dtype and the size.
# Its 28 TFLOP/s is above the FP32 peak of every card in the table before 2022 (V100, T4, A100), so that GPU did not compute in plain FP32.
# What explains it: from PyTorch 1.7 to 1.11 a float32 matmul ran on TF32 tensor cores by default (inputs rounded to a 10-bit mantissa, `torch.backends.cuda.matmul.allow_tf32`; off by default since 1.12), and an A100's TF32 peak is 156 TFLOP/s.
# A timing without `synchronize` (section 2b) would make any GPU look faster still.

# %% [markdown]
# ## 5. Getting data there and back
#
# A GPU computes on its own memory, so the inputs must cross the host link (PCIe, typically) first and the result must come back.
# On a GPU we measure those copies; everywhere we measure the CPU's own memory bandwidth with a 100 MB copy between two preallocated buffers.
# On a CPU-only machine that copy is the analogue of a transfer (moving bytes from one buffer to another), and the roofline in section 6 needs it on every machine.

# %%
src = torch.randn(25_000_000)  # 100 MB of float32
dst = torch.empty_like(src)
t = timing.measure(dst.copy_, src, min_run_time=0.1)
copy_bytes = src.numel() * src.element_size()
host_copy_rate = copy_bytes / t.median  # bytes copied per second
host_traffic = 2 * copy_bytes / t.median  # each byte is read once and written once
print(f"100 MB host copy: {t.median * 1e3:.1f} ms, {host_copy_rate / 1e9:.1f} GB/s copied, "
      f"{host_traffic / 1e9:.1f} GB/s of memory traffic (read + write) (measured on {cpu_name})")
timing.warn_if_noisy(t, "the 100 MB host copy")
del src, dst

# %%
# gpu_traffic stays None without a GPU; section 6 draws a measured GPU roof only when there is one.
gpu_traffic = None
if gpucourse.gpu_or_explain(
    "256 MB host→device and device→host copies: pinned (page-locked) host memory runs near the link's bandwidth, "
    "pageable memory goes through a staging buffer and is slower; a device→device copy runs at the GPU memory's bandwidth"
):
    n_el = 64 * 2**20  # 256 MB of float32
    on_gpu = torch.empty(n_el, device=dev)
    for kind, host in (("pageable", torch.randn(n_el)), ("pinned", torch.randn(n_el).pin_memory())):
        h2d = timing.measure(on_gpu.copy_, host, min_run_time=0.1)
        d2h = timing.measure(host.copy_, on_gpu, min_run_time=0.1)
        print(f"{kind:8s}: host→device {4 * n_el / h2d.median / 1e9:5.1f} GB/s, device→host {4 * n_el / d2h.median / 1e9:5.1f} GB/s "
              f"(measured on {gpucourse.describe()})")
    other = torch.empty_like(on_gpu)
    d2d = timing.measure(other.copy_, on_gpu, min_run_time=0.1)
    gpu_traffic = 2 * 4 * n_el / d2d.median
    print(f"device→device: {gpu_traffic / 1e9:.0f} GB/s of memory traffic (read + write) (measured on {gpucourse.describe()})")
    del on_gpu, other, host

# %%
# What the datasheets say, for cards you may meet: the host link is 10-100x slower than the GPU's own memory.
for name in ("T4", "A100", "H100"):
    spec = gpu_specs.gpu(name)
    print(f"{name:5s}: {spec.host_link}, {spec.host_link_bandwidth / 1e9:5.1f} GB/s each way; "
          f"GPU memory {spec.memory_bandwidth / 1e9:5.0f} GB/s (reported)")
print(f"100 MB over the T4's link: {copy_bytes / t4.host_link_bandwidth * 1e3:.1f} ms (modelled for T4 at its reported link bandwidth); "
      f"copied inside this CPU's memory: {copy_bytes / host_copy_rate * 1e3:.1f} ms (measured on {cpu_name})")

# %% [markdown]
# ### When does offloading a matmul pay?
#
# Say the two n×n float32 inputs start on the host and the product is needed back on the host.
# On the CPU the cost is the compute alone: 2n³ FLOPs at the CPU's rate.
# Offloaded, it is three copies and one launch: send A and B (2 × 4n² bytes), compute 2n³ FLOPs at the GPU's rate, fetch C (4n² bytes).
# Each step also has a fixed cost, whatever n: about 10 µs per copy over PCIe before its first byte counts, and about 5 µs to launch the kernel and wait for it (`gpu_specs.MATMUL_OFFLOAD_FIXED_SECONDS` adds them up; its sources are cited beside it).
# The fixed costs and the copies dominate for small n, the compute (growing like n³) for large n: where the GPU's faster compute starts to win depends on both machines.
#
# Below, for one specific case, a T4 at its reported FP32 peak and link bandwidth (modelled) against this CPU at its best measured rate.
# The model is optimistic for both sides: real copies and kernels reach less than the peaks, and the CPU's small-n rate is lower than its best.

# %%
# The offload model: each copy pays the link's latency before its bytes move, the launch its overhead before its FLOPs.
# The T4 has no TF32 units (Turing's tensor cores take FP16, INT8 and INT4), so a float32 matmul runs on its CUDA
# cores and its FP32 peak is the right one here; on an A100 or H100 with TF32 allowed it would be the TF32 peak.
def offload_parts(n, spec, itemsize=4):
    """Modelled seconds to (send A and B, launch and multiply, fetch C) for n x n matrices offloaded to `spec`."""
    copy_s = gpu_specs.HOST_LINK_LATENCY_SECONDS + n * n * itemsize / spec.host_link_bandwidth
    return 2 * copy_s, gpu_specs.LAUNCH_OVERHEAD_SECONDS + 2 * n**3 / spec.fp32_flops, copy_s


def who_wins(sizes, cpu_s, offload_s, gpu_name):
    """The sentence the computed times support: from which of `sizes` on offloading wins, if anywhere."""
    wins = [off < cpu for cpu, off in zip(cpu_s, offload_s)]
    if all(wins):
        return f"On this model offloading to the {gpu_name} wins at every n here, from {sizes[0]} to {sizes[-1]}: even its fixed costs take less time than this CPU's matmul."
    if not wins[-1]:
        return f"On this model the CPU wins at n = {sizes[-1]}, the largest size here: offloading to the {gpu_name} does not pay in this range."
    first = len(wins) - wins[::-1].index(False)  # the first size after the last one the CPU wins
    return (f"On this model the CPU wins below n ≈ {sizes[first]} (it is still faster at n = {sizes[first - 1]}), "
            f"and offloading to the {gpu_name} wins from n = {sizes[first]} on.")


# %%
# One specific case, row by row: plain arithmetic on the figures above, nothing timed.
print(f"{'n':>6} | {'CPU (ms)':>10} | {'send (ms)':>10} {'T4 mm (ms)':>10} {'fetch (ms)':>10} {'offload (ms)':>12} | offload wins?")
offload_sizes = [64, 128, 256, 512, 1024, 2048, 4096, 10_000]
cpu_model_s, offload_s = [], []
for n in offload_sizes:
    cpu_s = 2 * n**3 / cpu_peak
    send_s, compute_s, fetch_s = offload_parts(n, t4)
    cpu_model_s.append(cpu_s)
    offload_s.append(send_s + compute_s + fetch_s)
    print(f"{n:6d} | {cpu_s * 1e3:10.3f} | {send_s * 1e3:10.3f} {compute_s * 1e3:10.3f} {fetch_s * 1e3:10.3f} {offload_s[-1] * 1e3:12.3f} | "
          f"{'yes' if offload_s[-1] < cpu_s else 'no'}")
print(f"CPU column: this CPU's best measured rate ({cpu_peak / 1e9:.0f} GFLOP/s on {cpu_name}); offload columns: modelled for T4 "
      f"(reported peaks, {t4.host_link}, {gpu_specs.MATMUL_OFFLOAD_FIXED_SECONDS * 1e6:.0f} µs of fixed costs)")
print(who_wins(offload_sizes, cpu_model_s, offload_s, "T4"))

# %%
fig, ax = plt.subplots(figsize=(8, 4.2))
plots.versus_size(ax, cpu_sizes, [2 * n**3 / r for n, r in zip(cpu_sizes, cpu_rates)], label="matmul on this CPU",
                  ylabel="seconds", xlabel="matrix side n", logy=True, color="C0")
mark_noisy(ax, cpu_sizes, [2 * n**3 / r for n, r in zip(cpu_sizes, cpu_rates)], cpu_noisy, "C0")
plots.versus_size(ax, offload_sizes, cpu_model_s, label="this CPU at its best measured rate", kind="modelled", color="C0")
plots.versus_size(ax, offload_sizes, offload_s, label=f"send + T4 matmul + fetch, {t4.host_link}, fixed costs included", kind="modelled", color="C1")
if gpucourse.has_gpu():
    # A real round trip on this GPU: copy both inputs over, multiply, bring the product back.
    trip_sizes = [64, 256, 1024, 4096]
    trip_s = []
    for n in trip_sizes:
        a_host, b_host = torch.randn(n, n), torch.randn(n, n)
        trip_s.append(timing.measure(lambda: (a_host.to(dev) @ b_host.to(dev)).cpu(), min_run_time=0.1).median)
    plots.versus_size(ax, trip_sizes, trip_s, label=f"send + matmul + fetch on {gpucourse.describe()}", color="C3")
ax.set_title(f"Offloading a matmul: CPU rate measured on {cpu_name}, offload modelled for a T4", fontsize=10)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 6. Arithmetic intensity and the roofline
#
# Every kernel needs FLOPs and bytes, and the hardware has a peak rate for each.
# **Arithmetic intensity** is FLOPs per byte of memory traffic, and decides which peak limits the kernel.
#
# - An n×n float32 matmul does 2n³ FLOPs and must at least read A and B and write C: 3 × 4n² bytes. Its intensity is 2n³ / 12n² = **n / 6** FLOP/byte, growing with n.
# - An elementwise add of N float32 numbers does N FLOPs and reads two and writes one number each: 12N bytes. Its intensity is **1/12** FLOP/byte, whatever N.
#
# The **roofline** says what rate a kernel of intensity I can reach at best: min(peak FLOP/s, I × memory bandwidth).
# Left of the ridge point (peak FLOP/s ÷ bandwidth) a kernel is memory-bound; right of it, compute-bound.
# We build this machine's roofline from what we measured: the best matmul rate (section 4) as the flat roof, and the best memory traffic (the copy of section 5, or the add below if it ran faster) as the slope.
# That is a practical roof, below the datasheet peaks, and only as good as our measurements.

# %%
# The elementwise add, timed like the matmuls (on the GPU too, when there is one);
# outputs are preallocated so page faults (section 2a) stay out of the timing.
add_n = 25_000_000
x_add, y_add, z_add = torch.randn(add_n), torch.randn(add_n), torch.empty(add_n)
t_add = timing.measure(lambda: torch.add(x_add, y_add, out=z_add), min_run_time=0.1)
timing.warn_if_noisy(t_add, "the add")
add_rate = add_n / t_add.median  # one FLOP per element
# The practical roofs are the best rates seen: the best matmul for FLOP/s, the faster of copy and add for bytes/s.
cpu_bandwidth = max(host_traffic, 12 * add_n / t_add.median)
print(f"add of {add_n:,} floats: {t_add.median * 1e3:.1f} ms, {add_rate / 1e9:.2f} GFLOP/s, "
      f"{12 * add_n / t_add.median / 1e9:.1f} GB/s of traffic (measured on {cpu_name})")
if gpu_traffic is not None:
    x_add, y_add, z_add = (torch.randn(100_000_000, device=dev) for _ in range(3))
    t_add_gpu = timing.measure(lambda: torch.add(x_add, y_add, out=z_add), min_run_time=0.1)
    gpu_add_rate = x_add.numel() / t_add_gpu.median
    gpu_bandwidth = max(gpu_traffic, 12 * x_add.numel() / t_add_gpu.median)
    print(f"add of {x_add.numel():,} floats: {gpu_add_rate / 1e9:.1f} GFLOP/s, "
          f"{12 * x_add.numel() / t_add_gpu.median / 1e9:.0f} GB/s of traffic (measured on {gpucourse.describe()})")
del x_add, y_add, z_add
print("matmul intensities n/6: " + ", ".join(f"n={n}: {n / 6:.0f}" for n in cpu_sizes) + " FLOP/byte; add: 1/12 ≈ 0.083 FLOP/byte")
print(f"ridge point of this CPU: {cpu_peak / 1e9:.0f} GFLOP/s / {cpu_bandwidth / 1e9:.1f} GB/s = {cpu_peak / cpu_bandwidth:.1f} FLOP/byte (measured); "
      f"of an H100: {gpu_specs.gpu('H100').ridge_point_fp32:.0f} FLOP/byte in FP32, "
      f"{gpu_specs.peak_flops('H100', 'tf32') / gpu_specs.gpu('H100').memory_bandwidth:.0f} on its TF32 tensor cores (reported)")

# %%
fig, ax = plt.subplots(figsize=(9.4, 5.2))
cpu_points = [(f"mm n={n}" if n in (64, 1024) else "", n / 6, rate) for n, rate, noisy in zip(cpu_sizes, cpu_rates, cpu_noisy) if not noisy]
plots.roofline(ax, cpu_peak, cpu_bandwidth, label=f"{cpu_name}, measured", points=cpu_points + [("add", 1 / 12, add_rate)], color="C0")
mark_noisy(ax, [n / 6 for n in cpu_sizes], cpu_rates, cpu_noisy, "C0")
if gpu_traffic is not None:
    gpu_points = [(f"mm n={n}" if n in (256, 10_000) else "", n / 6, rate) for n, rate in zip(gpu_sizes, gpu_rates)]
    plots.roofline(ax, max(gpu_rates), gpu_bandwidth, label=f"{gpucourse.describe()}, measured",
                   points=gpu_points + [("add", 1 / 12, gpu_add_rate)], color="C3")
    if gpu_card is not None:
        # The datasheet roof this GPU's float32 matmuls ran under: TF32 or FP32, as allow_tf32 decided.
        plots.roofline(ax, gpu_specs.peak_flops(gpu_card, gpu_precision), gpu_card.memory_bandwidth,
                       label=f"{gpu_card.name} {gpu_precision.upper()}, the precision used here, reported", style=":", color="C3")
# A float32 matmul meets one of two roofs on these cards: the FP32 CUDA cores, or the TF32 tensor cores when allowed.
for name, color in (("H100", "C1"), ("A100", "C2")):
    spec = gpu_specs.gpu(name)
    plots.roofline(ax, spec.fp32_flops, spec.memory_bandwidth, label=f"{name} FP32 CUDA cores, reported", style="--", color=color)
    plots.roofline(ax, gpu_specs.peak_flops(spec, "tf32"), spec.memory_bandwidth, label=f"{name} TF32 tensor cores (dense), reported",
                   style="-.", color=color)
ax.set_title("Roofline: this machine (measured) vs datasheet GPUs (reported)", fontsize=10)
# Outside the axes: inside, the legend would hide measured points.
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
fig.tight_layout()
plt.show()

# %% [markdown]
# Read the plot from left to right.
# The add sits far left, on the sloped part of every roof: no matter how many cores, it waits on memory, and a faster GPU helps only through its faster memory.
# The matmuls move right as n grows (intensity n/6); the large ones pass the ridge point (dotted line), where compute is the limit, and approach the flat roof that they themselves defined.
# The small ones fall below the roof: at small n, per-call overheads, not memory or arithmetic, take most of the time.
# A GPU's roof is one to two orders of magnitude higher, in FLOP/s and in bytes/s alike, so its ridge point is again at tens of FLOPs per byte (20 for an H100 in FP32).
# Its tensor cores raise the flat roof again (TF32 about 7x the FP32 peak on an H100, 8x on an A100), and move the ridge point right: a matmul needs more reuse per byte to use them.
# Below that, buying a faster GPU speeds a kernel up only as much as its memory is faster.
# This is why later modules spend so much effort on reusing data (tiling, fusion): it moves kernels to the right, under the flat part of the roof.

# %% [markdown]
# ## 7. Vectorise Python loops
#
# A Python loop over rows runs the interpreter and launches small operations once per row.
# On a CPU each launch costs microseconds; on a GPU each is a separate kernel launch of several microseconds, while the GPU idles.
# Written for whole tensors, the same computation is a handful of large operations.
# Row-wise softmax is a good example: softmax(x)ᵢ = exp(xᵢ − max x) / Σⱼ exp(xⱼ − max x), where subtracting the max avoids overflow.

# %%
def softmax_rows_loop(x):
    """Softmax of each row, one row at a time. x: (N, D) -> (N, D)."""
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        e = torch.exp(x[i] - x[i].max())
        out[i] = e / e.sum()
    return out


def softmax_rows_vectorised(x):
    """Softmax of all rows at once: reduce along dim=1, keepdim=True broadcasts back. x: (N, D) -> (N, D)."""
    e = torch.exp(x - x.amax(dim=1, keepdim=True))
    return e / e.sum(dim=1, keepdim=True)


# %%
# Speed means nothing until the answers agree, with each other and with torch's own softmax.
x = torch.randn(256, 64, device=dev)
torch.testing.assert_close(softmax_rows_vectorised(x), softmax_rows_loop(x))
torch.testing.assert_close(softmax_rows_vectorised(x), torch.softmax(x, dim=1))
print("loop, vectorised and torch.softmax agree")

# %%
# compare_speed times the two interleaved, on fresh inputs for every call, and re-checks the timed outputs.
result = timing.compare_speed(
    softmax_rows_loop,
    softmax_rows_vectorised,
    make_inputs=lambda: (torch.randn(256, 64, device=dev),),
    check=lambda args, out: torch.testing.assert_close(out, torch.softmax(args[0], dim=1)),
)
print("vectorised softmax vs row loop:", result)

# %% [markdown]
# ## What to remember
#
# - Tensors live on one device; `.to(gpucourse.device())` moves them, and operands must share a device.
# - Never trust one stopwatch reading: warm up, synchronise the GPU, fix the thread count, repeat and take the median (`timing.measure`).
# - Compare rates (FLOP/s, GB/s) and ratios, not raw seconds, and say where each number comes from: measured here, reported by someone else, or modelled.
# - A matmul does 2n³ FLOPs on 12n² bytes; it gets more efficient with size, and only large problems reach a device's best rate.
# - Copies over the host link grow like n² and compute like n³, and every copy and launch has a fixed cost: offloading pays only above some size, which depends on both devices.
# - Arithmetic intensity places a kernel on the roofline: low-intensity kernels (elementwise ops) are bound by memory, not compute.
# - Python loops over rows waste most of the time in the interpreter and in launches; vectorise them.
#
# Next: the graded assignment `assignments/01_gpu_basics/01_gpu_basics.ipynb`, where you write a timing function, vectorise a computation, do the roofline maths and decide when offloading pays.
