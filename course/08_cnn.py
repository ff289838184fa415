# %% [markdown]
# # 08 · CNNs on the GPU: convolution as a matrix multiplication, and a CNN trained fast
#
# Lectures 01–07 made single ops fast: copies, kernels, fused chains, matmuls compiled onto tiles.
# A convolutional network is built from three of them: convolutions, pooling, and a fully connected layer (the layers of this module's seed article, seed 003).
# This lecture takes the convolution apart, then trains a real CNN on real handwritten digits and makes its training step fast, one measured change at a time.
#
# What you will learn:
#
# 1. a convolution as loops, its FLOPs and bytes, where it sits against each GPU's ridge point, and why it is a matrix multiplication in disguise: **im2col** (`F.unfold`) + one GEMM + a reshape;
# 2. what im2col costs in memory, and when the other algorithms (direct, Winograd, FFT) win;
# 3. three convolutions measured on this machine: loops, im2col + GEMM, and the library's (`F.conv2d`: oneDNN on a CPU, cuDNN on a GPU);
# 4. the seed's CNN trained on 1,797 real digits, with a live loss and accuracy plot, and where the time of one training step goes;
# 5. making training fast: data kept on the device and batched, `channels_last`, mixed precision, `torch.compile`, each measured in images per second;
# 6. what else a CNN's time and memory depend on: BatchNorm (memory-bound) and folding it into the convolution, TF32 and tensor-core-friendly channel counts, `cudnn.benchmark` at real sizes, CUDA graphs, the `DataLoader`, and gradient checkpointing.
#
# Everything runs on a CPU for real, on one thread; the GPU cells run where there is one and say what they show where there is not.
# Timings differ from machine to machine and from run to run, so every sentence below that states a measured outcome is printed by code from this run's numbers (`gpucourse.cnn_text` chooses the words).

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import multiprocessing
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

import gpucourse
from gpucourse import cnn_text, data, gpu_specs, plots, profile_text, timing, widgets
from gpucourse.devices import compile_or_eager, compile_support

dev = gpucourse.device()
GPU = dev.type == "cuda"
THREADS = 1  # the CPU timings use one thread, so they do not depend on what else runs on this machine
torch.set_num_threads(THREADS)
WHERE = f"measured on {gpucourse.describe(dev)}"
print(f"Running on {gpucourse.describe(dev)}")
_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. A convolution is six loops
#
# A 2-D convolution layer takes `x` of shape `(N, C, H, W)` (a batch of N images with C channels) and K filters `weight` of shape `(K, C, R, S)`.
# Output pixel `(n, k, p, q)` is the dot product of filter k with the R × S × C patch of image n under it:
#
# $$\text{out}[n, k, p, q] = \sum_{c, r, s} x[n, c, p + r, q + s] \cdot w[k, c, r, s]$$
#
# With stride 1 and no padding the output is `P = H - R + 1` by `Q = W - S + 1`.
# Each output value costs C·R·S multiply-adds; this course counts a multiply-add as **2 FLOPs**, so the layer does **2·N·K·C·R·S·P·Q FLOPs**, while it reads only the input and the weights and writes the output.
# Written as loops (the three outer ones in Python, the dot product as one torch call), it is correct and slow.
# The cell also places a ResNet layer against each GPU's ridge point (lecture 01's roofline: peak FLOP/s ÷ memory bandwidth, from `gpu_specs`), once per unit that could run it.

# %%
def conv2d_loops(x, weight):
    """x: (N, C, H, W), weight: (K, C, R, S) -> (N, K, P, Q); stride 1, no padding. One dot product per output pixel."""
    n, _, h, w = x.shape
    k, _, r, s = weight.shape
    out = torch.empty(n, k, h - r + 1, w - s + 1, dtype=x.dtype)
    filters = weight.reshape(k, -1)
    for image in range(n):
        for p in range(h - r + 1):
            for q in range(w - s + 1):
                out[image, :, p, q] = filters @ x[image, :, p:p + r, q:q + s].reshape(-1)
    return out


def conv_flops_bytes(n, c, h, w, k, r, s, itemsize=4):
    """FLOPs (2 per multiply-add) and bytes (input, weights and output read or written once) of a stride-1, unpadded convolution."""
    p, q = h - r + 1, w - s + 1
    return 2 * n * k * c * r * s * p * q, itemsize * (n * c * h * w + k * c * r * s + n * k * p * q)


x, weight = torch.randn(2, 3, 10, 10), torch.randn(4, 3, 3, 3)
torch.testing.assert_close(conv2d_loops(x, weight), F.conv2d(x, weight), rtol=1e-4, atol=1e-4)
RESNET_LAYER = (32, 64, 56, 56, 64, 3, 3)  # 64 channels at 56 × 56, batch 32: a ResNet-50 stage-1 convolution
for shape in [(2, 3, 10, 10, 4, 3, 3), RESNET_LAYER]:
    flops, nbytes = conv_flops_bytes(*shape)
    print(f"conv (N, C, H, W, K, R, S) = {shape}: {flops / 1e9:.3g} GFLOP, {nbytes / 1e6:.3g} MB, {flops / nbytes:.1f} FLOP/byte")
fp32_intensity = flops / nbytes
fp16_intensity = flops / conv_flops_bytes(*RESNET_LAYER, itemsize=2)[1]
print(cnn_text.ridge_sentence(fp32_intensity, "fp32", "the ResNet layer in float32 on CUDA cores"))
print(cnn_text.ridge_sentence(fp32_intensity, "tf32", "the float32 layer on TF32 tensor cores"))
print(cnn_text.ridge_sentence(fp16_intensity, "fp16", "the layer in float16 (half the bytes)"))
print("(ridges: reported peaks ÷ bandwidths from gpu_specs; the layer's bytes are modelled, each read or written once)")

# %% [markdown]
# A convolution has the arithmetic intensity of a big matmul, and that is no coincidence: it *is* a matmul.
# Which unit runs it matters: a float32 convolution runs on TF32 tensor cores on Ampere and later unless you say otherwise (`torch.backends.cudnn.allow_tf32` defaults to True; PyTorch docs, "CUDA semantics" page, section "TensorFloat-32 (TF32) on Ampere (and later) devices"), and a faster unit moves the ridge to the right, where the same layer waits for memory.
#
# ## 2. The GEMM in disguise: im2col
#
# Copy each R × S × C patch into a column of a matrix: one column per output pixel, C·R·S rows.
# This is **im2col** ("image to columns"), `F.unfold` in PyTorch.
# Then every filter, flattened to a row of C·R·S weights, meets every column in one matrix multiplication: `(K, C·R·S) @ (C·R·S, P·Q)` gives `(K, P·Q)`, the output, to be reshaped to `(K, P, Q)`.
# Below, one channel of a 5 × 5 image with a 3 × 3 kernel: the window of output pixel (1, 2) becomes column 1·3 + 2 = 5.

# %%
fig, (ax_image, ax_columns) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [1, 2.2]})
columns = plots.im2col_figure(ax_image, ax_columns, height=5, width=5, kernel=3, patch=(1, 2))
plt.show()
# F.unfold makes the same matrix (for pixel values 0..24, one image, one channel):
assert torch.equal(F.unfold(torch.arange(25.0).view(1, 1, 5, 5), 3)[0], torch.tensor(columns, dtype=torch.float32))

# %% [markdown]
# Now the convolution of section 1, as im2col and one GEMM (stride 1, no padding; the assignment adds strides, padding and bias):

# %%
def conv2d_gemm(x, weight):
    """x: (N, C, H, W), weight: (K, C, R, S) -> (N, K, P, Q): F.unfold, one batched matmul, a reshape."""
    n, _, h, w = x.shape
    k, _, r, s = weight.shape
    return (weight.reshape(k, -1) @ F.unfold(x, (r, s))).reshape(n, k, h - r + 1, w - s + 1)


torch.testing.assert_close(conv2d_gemm(x, weight), F.conv2d(x, weight), rtol=1e-4, atol=1e-4)
print("im2col + GEMM matches F.conv2d")

# %% [markdown]
# ### What im2col costs, and the other algorithms
#
# The column matrix holds each input pixel up to R·S times: for a 3 × 3 kernel, **nearly 9 times the input** (exactly 9 with the padding that keeps the image's size).
# For the ResNet layer above that is 215 MB of columns from a 26 MB input (the table below), written and then read once more by the GEMM: memory traffic a direct convolution never has.
# So libraries use im2col where its GEMM wins (big batches, many channels), and other algorithms elsewhere (reported, not measured here):
# **direct** convolution kernels read the input in place (oneDNN's main CPU path; cuDNN's implicit GEMM does the im2col inside the kernel, tile by tile, without the big matrix);
# **Winograd** F(2×2, 3×3) computes a 2 × 2 output tile of a 3 × 3 convolution with 16 multiplies instead of 36, 2.25× fewer (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016), at some cost in precision;
# **FFT** turns the convolution into a pointwise product in the frequency domain, which pays for large kernels (Mathieu, Henaff and LeCun, "Fast Training of Convolutional Networks through FFTs", ICLR 2014).
# cuDNN benchmarks these for each layer shape when `torch.backends.cudnn.benchmark = True` (section 6).

# %%
for shape in [RESNET_LAYER, (32, 3, 224, 224, 64, 7, 7), (32, 512, 7, 7, 512, 3, 3)]:
    n, c, h, w, k, r, s = shape
    input_mb, columns_mb = 4 * n * c * h * w / 1e6, 4 * n * c * r * s * (h - r + 1) * (w - s + 1) / 1e6
    print(f"{shape}: input {input_mb:7.1f} MB, im2col columns {columns_mb:8.1f} MB ({columns_mb / input_mb:.1f}x)")

# %% [markdown]
# ## 3. Three convolutions, measured
#
# GFLOP/s (the FLOPs of section 1 over the measured time) of the loops, im2col + GEMM and `F.conv2d` (oneDNN on this CPU), on one thread, as the channels grow (at 16 × 16) and as the image grows (at 16 channels).
# The loops are measured on the two smallest sizes only: beyond that they take seconds.
# A hollow point is a timing whose spread exceeded its median (the cell warns about it): draw no conclusion from it.

# %%
def gflops(name, shape):
    """(GFLOP/s of versions[name] on fresh inputs of ``shape``, whether that timing is too noisy to conclude from)."""
    n, c, h, w, k, r, s = shape
    x, weight = torch.randn(n, c, h, w), torch.randn(k, c, r, s)
    measured = timing.measure(versions[name], x, weight, warmup=1, min_run_time=0.05, num_threads=THREADS)
    return conv_flops_bytes(*shape)[0] / measured.median / 1e9, timing.warn_if_noisy(measured, f"{name} at {shape}")


versions = {"loops": conv2d_loops, "im2col + GEMM": conv2d_gemm, "F.conv2d (library)": F.conv2d}
sweeps = {"channels C = K (16 × 16 images)": [(4, c, 16, 16, c, 3, 3) for c in (4, 8, 16, 32, 64)],
          "image side H = W (16 channels)": [(4, 16, side, side, 16, 3, 3) for side in (8, 16, 32, 64)]}
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
library_rates = []
for ax, (title, shapes) in zip(axes, sweeps.items()):
    sizes = [shape[1] if title.startswith("channels") else shape[2] for shape in shapes]
    measured = {name: [gflops(name, shape) for shape in shapes[:2 if name == "loops" else len(shapes)]] for name in versions}
    rates = {name: [rate for rate, _ in points] for name, points in measured.items()}
    for name, points in measured.items():
        (line,) = ax.plot(sizes[:len(points)], rates[name], marker="o", label=name)
        noisy = [(size, rate) for size, (rate, too_noisy) in zip(sizes, points) if too_noisy]  # hollow: no conclusion from these
        ax.plot([size for size, _ in noisy], [rate for _, rate in noisy], "o", color="white", markeredgecolor=line.get_color())
    print(cnn_text.conv_rates_sentence(title.split(" (")[0], sizes, rates, library="F.conv2d (library)", gemm="im2col + GEMM", loops="loops"))
    library_rates += rates["F.conv2d (library)"]
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(size) for size in sizes])
    plots.readable_log_axis(ax, "y")
    ax.set_xlabel(title)
axes[0].set_ylabel("GFLOP/s")
axes[0].legend(fontsize=8)
fig.suptitle(f"3 × 3 convolutions, batch 4, float32, {WHERE}", fontsize=9)
plt.show()

# %% [markdown]
# What to look for, and why the lines can separate: each dot product of the loops is too small to pay for the Python and dispatch around it;
# im2col + GEMM's matrix product grows with the channels (C·R·S is its inner dimension), but it first writes a column matrix nine times the input, which stops fitting in the caches as the image grows, a matrix the library's direct kernels never write.
# On a GPU the same three lines separate further: the loops launch one kernel per output pixel, and cuDNN's kernels run on tensor cores.
#
# ## 4. A CNN that reads handwritten digits
#
# The data: 1,797 real handwritten digits, 8 × 8 grey scans (UCI's "Optical Recognition of Handwritten Digits", which ships inside scikit-learn: nothing is downloaded).
# `data.load_digits` gives a fixed split, 1,437 for training and 360 for testing, as `(N, 1, 8, 8)` tensors in [0, 1].

# %%
train_x, train_y = data.load_digits("train", device=dev)
test_x, test_y = data.load_digits("test", device=dev)
print(f"train {tuple(train_x.shape)}, test {tuple(test_x.shape)}, on {train_x.device}")
fig, axes = plt.subplots(1, 10, figsize=(10, 1.3))
for ax, image, label in zip(axes, train_x[:10].cpu(), train_y[:10].tolist()):
    ax.imshow(image[0], cmap="gray_r")
    ax.set_title(str(label), fontsize=9)
    ax.axis("off")
plt.show()

# %% [markdown]
# The seed's CNN: a convolution (3 × 3, padding 1, so the image keeps its size), ReLU, 2 × 2 max pooling (8 × 8 becomes 4 × 4), and a fully connected layer to the 10 classes.
# It is trained with Adam on mini-batches of 64, shuffled each epoch, with the data on the device; the figure and the bar follow each epoch.

# %%
class SeedCNN(nn.Module):
    """(N, 1, 8, 8) -> (N, 10): the seed's layers (convolution, ReLU, max pooling, fully connected)."""

    def __init__(self, channels=32):
        super().__init__()
        self.conv = nn.Conv2d(1, channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(channels * 4 * 4, 10)

    def forward(self, x):
        return self.fc(self.pool(F.relu(self.conv(x))).flatten(1))


def test_accuracy(model):
    model.eval()
    with torch.no_grad():
        return data.accuracy(model(test_x), test_y)


EPOCHS, BATCH = 15, 64
torch.manual_seed(0)
model = SeedCNN().to(dev)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
monitor = widgets.TrainingMonitor(EPOCHS, label=WHERE)
started = time.perf_counter()
for epoch in range(1, EPOCHS + 1):
    model.train()
    order, total = torch.randperm(len(train_x), device=dev), 0.0
    for first in range(0, len(train_x), BATCH):
        batch = order[first:first + BATCH]
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(train_x[batch]), train_y[batch])
        loss.backward()
        optimizer.step()
        total += loss.detach() * len(batch)  # kept on the device: no sync per step
    monitor.update(epoch, float(total) / len(train_x), test_accuracy(model))
print(f"{EPOCHS} epochs in {time.perf_counter() - started:.1f} s, the live figure's redrawing included: test accuracy {test_accuracy(model):.1%}")

# %% [markdown]
# ### Where one training step's time goes
#
# Lecture 06's profiler on one step of 256 images, grouped into what the step does: the convolutions (forward and backward), max pooling (forward, with the indices its backward needs, and backward), the optimizer (Adam's update of every parameter), moving data (indexing the batch, copies), and the rest (ReLU, the loss, the linear layer, filling gradients).
# Each op's *self* time is counted: the CPU's on a CPU; on a GPU the device's (`self_device_time_total`, what the profiler's table sorts by with `sort_by="self_cuda_time_total"`), since there the CPU's time is only the launching.
# The cell then times max pooling on the same activations in both memory layouts.

# %%
GROUPS = {"convolutions": ("conv", "mkldnn", "cudnn"), "pooling": ("pool",), "optimizer": ("optimizer", "adam", "foreach", "_fused"),
          "data movement": ("index", "copy", "to", "cat", "contiguous", "clone")}


def group_of(name):
    name = name.lower()
    return next((group for group, keys in GROUPS.items() if any(key in name for key in keys)), "the rest")


batch = torch.randperm(len(train_x), device=dev)[:256]
for _ in range(3):  # warm-up: the first steps allocate and pick algorithms
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(train_x[batch]), train_y[batch]).backward()
    optimizer.step()
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if GPU else [])
with profile(activities=activities) as prof:
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(train_x[batch]), train_y[batch]).backward()
    optimizer.step()
    gpucourse.synchronize()
self_time = "self_device_time_total" if GPU else "self_cpu_time_total"
self_us, pool_ops = {}, set()
for event in prof.key_averages():
    if event.key.startswith(("aten::", "Optimizer.")):
        self_us[group_of(event.key)] = self_us.get(group_of(event.key), 0.0) + getattr(event, self_time)
        if group_of(event.key) == "pooling" and getattr(event, self_time) > 0:
            pool_ops.add(event.key)
print(cnn_text.profile_sentence(self_us, sorted(pool_ops), clock="device" if GPU else "CPU", device_type=dev.type), f"({WHERE})")
with torch.no_grad():
    pooled = F.relu(model.conv(train_x[batch]))  # what the step's pooling reads: (256, 32, 8, 8)
    nchw = timing.measure(F.max_pool2d, pooled, 2, warmup=2, min_run_time=0.05, num_threads=THREADS)
    nhwc = timing.measure(F.max_pool2d, pooled.contiguous(memory_format=torch.channels_last), 2, warmup=2, min_run_time=0.05, num_threads=THREADS)
print(cnn_text.versus("max pooling in channels_last", nhwc.median, "NCHW", nchw.median, where=WHERE))

# %% [markdown]
# How to read it: on a CPU, ATen's max pooling has two kernels in `MaxPoolKernel.cpp`: for NCHW (`cpu_max_pool`) a scalar loop over each output pixel of each plane, for `channels_last` (`cpu_max_pool_channels_last`) one vector instruction across many channels at a time, which is one reason `channels_last` can pay below.
# The data already lives on the device, so data movement here is only indexing the batch, not copying the data set.
# On a GPU, with a model this small, each op is a kernel of a few microseconds, so the CPU's time to launch them can be the step's time: the next section measures whether it is.
#
# ## 5. Making training fast, one measured change at a time
#
# Throughput in images per second of training steps on 16 × 16 digits (upsampled, so the convolutions have work to do) with 32-channel convolutions, each change added to the ones before:
#
# 1. **the beginner's loop**: a `DataLoader` over a `TensorDataset` on the host, one sample at a time collated in Python, copied to the device each step, and `loss.item()` each step;
# 2. **data on the device, batched**: the whole training set on the device once, a batch picked by indexing, the loss kept as a tensor;
# 3. **`channels_last`**: NHWC memory for the model and the batch, the layout oneDNN and the tensor cores prefer (assignment question 5 asks why);
# 4. **mixed precision**: `torch.autocast` in bfloat16 where the CPU has bf16 dot-product instructions (AVX512_BF16 or AMX-BF16, read from `torch.cpu.get_capabilities()`), float16 with a `GradScaler` on a GPU;
# 5. **`torch.compile`**: the model's forward and backward compiled by Inductor (the first call compiles, and is not timed).
#
# On a GPU these sizes (16 × 16 images, batch 64) give a step of a few dozen short kernels; the GPU run also prints lecture 06's doubling test for it.
# Where doubling the batch barely changes the step's time, the step is launch-bound, and neither mixed precision nor `channels_last` can show what they do for the kernels: section 6 measures them at ResNet's sizes.

# %%
big_x, big_y = data.load_digits("train", size=16, device=dev)
BATCH, STEPS = 64, 20


def make_model(memory_format=torch.contiguous_format):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
    return model.to(dev, memory_format=memory_format)


def images_per_second(run_steps, images=STEPS * BATCH, repeats=2):
    """Best of ``repeats`` timings of run_steps() (which trains on ``images`` images), after one untimed warm-up call."""
    run_steps()
    best = float("inf")
    for _ in range(repeats):
        gpucourse.synchronize()
        started = time.perf_counter()
        run_steps()
        gpucourse.synchronize()
        best = min(best, time.perf_counter() - started)
    return images / best


def beginner():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(big_x.cpu(), big_y.cpu()), batch_size=BATCH, shuffle=True)

    def run():
        for step, (x, y) in enumerate(loader):  # 22 batches per epoch: STEPS of them
            if step == STEPS:
                break
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            optimizer.step()
            loss.item()  # a host sync every step
    return run


def amp_step(model, optimizer, precision=None):
    """step(x, y) -> loss: one optimizer step of ``model``, under autocast to ``precision`` when given (float16 with a GradScaler)."""
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == torch.float16)  # disabled: scale and step pass straight through

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=precision or torch.float32, enabled=precision is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()
    return step


def training_step(memory_format=torch.contiguous_format, precision=None, compiled=False):
    """step(x, y) -> loss: one SGD step of a fresh model, under autocast to ``precision`` when given."""
    model = make_model(memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if compiled:
        model = compile_or_eager(model)  # forward and backward through Inductor where it can run; the optimizer's update stays eager
    return amp_step(model, optimizer, precision)


def on_device(memory_format=torch.contiguous_format, precision=None, compiled=False):
    step = training_step(memory_format, precision, compiled)
    images = big_x.contiguous(memory_format=memory_format)

    def run():
        for picks in torch.randint(len(images), (STEPS, BATCH), device=dev):  # random batches, drawn on the device
            step(images[picks], big_y[picks])
    return run


# %%
capabilities = getattr(torch.cpu, "get_capabilities", dict)()
bf16_units = capabilities.get("avx512_bf16", False) or capabilities.get("amx_bf16", False)
if not GPU:
    onednn_bf16 = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    print(profile_text.bf16_sentence(onednn_bf16, capabilities.get("avx512_bf16", False), capabilities.get("amx_bf16", False)))
mixed = torch.float16 if GPU else (torch.bfloat16 if bf16_units else None)
techniques = {
    "1. beginner's loop": beginner(),
    "2. data on the device, batched": on_device(),
    "3. + channels_last": on_device(torch.channels_last),
}
if mixed is not None:
    techniques[f"4. + autocast {str(mixed).removeprefix('torch.')}"] = on_device(torch.channels_last, mixed)
else:
    print("Without bf16 instructions oneDNN would emulate bfloat16 with float32 ones, so the autocast bar is left out here.")
throughput = {name: images_per_second(run) for name, run in techniques.items()}
COMPILED = compile_support()  # asked before the clock starts (its test compile is not the model's); where it says no, bar 5 runs eagerly
compile_started = time.perf_counter()
compiled_run = on_device(torch.channels_last, mixed, compiled=True)
compiled_run()  # compiles: timed apart
compile_seconds = time.perf_counter() - compile_started
throughput[COMPILED.label("5. + torch.compile")] = images_per_second(compiled_run)
for name, rate in throughput.items():
    print(f"{name:>34}: {rate:8.0f} images/s")
if COMPILED.ok:
    print(f"(torch.compile's first call compiled for {compile_seconds:.1f} s)")
print(cnn_text.steps_sentence(throughput, BATCH), f"({WHERE})")
if GPU:  # lecture 06's doubling test: a step on twice the images; a time that barely grows is launch overhead
    step, images = training_step(torch.channels_last, mixed), big_x.contiguous(memory_format=torch.channels_last)

    def two_batches():
        picks = torch.randint(len(images), (2 * BATCH,), device=dev)
        return images[picks], big_y[picks]

    def finite(inputs, loss):
        assert torch.isfinite(loss), f"the training step's loss is {loss}"

    doubling = timing.compare_speed(lambda x, y: step(x[:BATCH], y[:BATCH]), step, two_batches, check=finite, rounds=5)
    print(profile_text.doubling_sentence(f"a training step of {BATCH} images", doubling), f"({WHERE})")

# %%
fig, ax = plt.subplots(figsize=(8, 2.8))
plots.provenance_bars(ax, [(name, rate, "measured") for name, rate in throughput.items()], xlabel=f"training images per second ({WHERE})", fmt="{:.0f}")
plt.show()

# %% [markdown]
# Read each bar as a ratio to the one above it, on this machine, as the printout does: a change that does not pay here is worth removing here.
# What decides each ratio: the beginner's per-sample collate and per-step host sync cost a fixed time per step, which matters only when the step itself is short;
# `channels_last` and bfloat16 pay where the library has kernels for them (oneDNN's NHWC convolutions, ATen's vectorised NHWC pooling, bf16 dot-product instructions);
# `torch.compile` fuses the pointwise ops, but on a model this small its generated code competes with oneDNN's, so its bar can go either way: measure before keeping it.
#
# ## 6. What else a CNN's time and memory depend on
#
# ### BatchNorm: memory-bound, and folded away for inference
#
# Real CNNs put a BatchNorm after almost every convolution (ResNet does).
# Training-mode BatchNorm reads its input twice (once for the batch's mean and variance, once to normalise) and writes it once, and its backward pass reads more; per element it does about a dozen FLOPs.
# The cell times a conv-BN-ReLU block (forward and backward, profiled by op) on this CPU, models each part's FLOPs and bytes, and compares the shares.
# For inference BatchNorm is a fixed affine map per channel, so it can be **folded** into the convolution before it: `w' = w·γ/σ`, `b' = (b − μ)·γ/σ + β` (`torch.nn.utils.fusion.fuse_conv_bn_eval`), which removes a full pass over the activations.

# %%
def conv_bn_relu(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


def block_model(n, c, h, w):
    """Modelled FLOPs and bytes (float32) of a C→C conv-BN-ReLU block, forward and backward, per part.
    Convolution: backward ≈ 2 forwards. BatchNorm: ~13 FLOPs and 8 passes over the tensor (3 forward, 5 backward).
    ReLU: 2 FLOPs and 5 passes (read, write; read two, write one)."""
    elements = n * c * h * w
    conv_flops, conv_bytes = conv_flops_bytes(n, c, h + 2, w + 2, c, 3, 3)  # padded input, same-size output
    return ({"convolution": 3 * conv_flops, "batch norm": 13 * elements, "ReLU": 2 * elements},
            {"convolution": 3 * conv_bytes, "batch norm": 8 * 4 * elements, "ReLU": 5 * 4 * elements})


PARTS = {"convolution": ("conv",), "batch norm": ("batch_norm",), "ReLU": ("relu", "threshold", "clamp")}
block_shape = (8, 32, 32, 32)  # N, C, H, W
block = conv_bn_relu(32, 32).to(dev)
inputs = torch.randn(*block_shape, device=dev)
for _ in range(2):
    block(inputs).sum().backward()
with profile(activities=activities) as prof:
    for _ in range(3):  # training mode: batch statistics, running averages updated
        block(inputs).sum().backward()
    gpucourse.synchronize()
part_seconds = dict.fromkeys(PARTS, 0.0)
for event in prof.key_averages():
    part = next((part for part, keys in PARTS.items() if event.key.startswith("aten::") and any(key in event.key for key in keys)), None)
    if part:
        part_seconds[part] += getattr(event, self_time) / 1e6
print(cnn_text.batchnorm_sentence(part_seconds, *block_model(*block_shape)), f"(time {WHERE}; FLOPs and bytes modelled)")

block.eval()  # inference: BatchNorm uses its running mean and variance
folded = nn.Sequential(torch.nn.utils.fusion.fuse_conv_bn_eval(block[0], block[1]), block[2])
with torch.no_grad():
    difference = (folded(inputs) - block(inputs)).abs().max().item()
    torch.testing.assert_close(folded(inputs), block(inputs), rtol=1e-4, atol=1e-4)
    fold = timing.compare_speed(block, folded, lambda: (torch.randn(*block_shape, device=dev),), rounds=5, num_threads=THREADS,
                                check=lambda args, out: torch.testing.assert_close(out, block(*args), rtol=1e-4, atol=1e-4))
print(f"The folded block's output differs from conv-then-BN by at most {difference:.1e} (float32 rounding).")
print(profile_text.speed_sentence(fold, "the convolution with BatchNorm folded in", "convolution then BatchNorm (inference)"))

# %% [markdown]
# ### Tensor cores: TF32 switches, and channel counts they can use
#
# Two switches decide whether float32 work may run on TF32 tensor cores (inputs rounded to a 10-bit mantissa, float32 accumulation), on Ampere and later (PyTorch docs, "CUDA semantics" page, "TensorFloat-32 (TF32) on Ampere (and later) devices"):
# `torch.backends.cudnn.allow_tf32` for convolutions, True by default, and `torch.backends.cuda.matmul.allow_tf32` for matmuls, False by default since PyTorch 1.12, which `torch.set_float32_matmul_precision("high")` turns on.
# Tensor cores also want aligned shapes: NVIDIA's Deep Learning Performance documentation ("Convolutional Layers User's Guide", quick-start checklist and "Channels In And Out") asks for input and output channels divisible by 8 for FP16 (4 for TF32), and for the 3-channel first layer of most CNNs says padding to 4 channels is enough when the stride is 2.
# Padding with zero channels changes nothing in the output, which the cell checks; on a GPU it also times a float16 ResNet stem with 3, 4 and 8 input channels, and a float32 convolution with TF32 off and on.

# %%
print(f"This PyTorch's defaults: cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}, cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
      f"float32 matmul precision {torch.get_float32_matmul_precision()!r}")


def pad_channels(x, conv, multiple):
    """x: (N, C, H, W) and conv with C input channels -> x and a copy of conv with C rounded up to ``multiple``, the extra channels zero."""
    extra = -x.shape[1] % multiple
    padded = nn.Conv2d(x.shape[1] + extra, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=conv.bias is not None).to(x.device, x.dtype)
    with torch.no_grad():
        padded.weight.zero_()
        padded.weight[:, :x.shape[1]] = conv.weight
        if conv.bias is not None:
            padded.bias.copy_(conv.bias)
    return F.pad(x, (0, 0, 0, 0, 0, extra)), padded


stem = nn.Conv2d(3, 64, 7, stride=2, padding=3).to(dev)  # ResNet's first layer, on RGB images
rgb = torch.randn(2, 3, 32, 32, device=dev)
rgb4, stem4 = pad_channels(rgb, stem, 4)
with torch.no_grad():
    torch.testing.assert_close(stem4(rgb4), stem(rgb), rtol=1e-4, atol=1e-4)
print(f"padded from 3 to {rgb4.shape[1]} channels: the same output, {rgb4.shape[1] / 3 - 1:.0%} more FLOPs in this one layer")
if gpucourse.gpu_or_explain("the float16 stem (batch 64, 224 × 224, channels_last) timed with 3, 4 and 8 input channels, and a 64-channel float32 "
                            "convolution timed with cudnn.allow_tf32 off and on, with how far TF32's output is from float32's") and GPU:
    def inference(module, precision=None):
        """module's forward without autograd, under autocast to ``precision`` when given."""
        def run(x):
            with torch.no_grad(), torch.autocast(dev.type, dtype=precision or torch.float32, enabled=precision is not None):
                return module(x)
        return run

    torch.backends.cudnn.benchmark = True
    images = torch.randn(64, 3, 224, 224, device=dev)
    stem_ms = {}
    for multiple in (1, 4, 8):
        padded_x, padded_stem = pad_channels(images, stem, multiple)
        padded_x, padded_stem = padded_x.contiguous(memory_format=torch.channels_last), padded_stem.to(memory_format=torch.channels_last)
        stem_ms[padded_x.shape[1]] = timing.measure(inference(padded_stem, torch.float16), padded_x, min_run_time=0.1).median
    for channels in (4, 8):
        print(cnn_text.versus(f"the stem with {channels} input channels", stem_ms[channels], "the stem with 3", stem_ms[3], where=WHERE))
    conv64, activations = nn.Conv2d(64, 64, 3, padding=1).to(dev), torch.randn(64, 64, 56, 56, device=dev)
    tf32_ms, outputs = {}, {}
    for allowed in (False, True):
        torch.backends.cudnn.allow_tf32 = allowed
        tf32_ms[allowed] = timing.measure(inference(conv64), activations, min_run_time=0.1).median
        outputs[allowed] = inference(conv64)(activations)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    print(cnn_text.versus("a float32 convolution, TF32 allowed", tf32_ms[True], "TF32 off", tf32_ms[False], where=WHERE))
    print(f"TF32's output differs from float32's by at most {(outputs[True] - outputs[False]).abs().max().item():.2g} "
          f"(outputs of size about {outputs[False].abs().mean().item():.2g})")
    torch.backends.cudnn.benchmark = False

# %% [markdown]
# ### A real-size experiment on a GPU: batch size, precision, layout, `cudnn.benchmark`
#
# The digits are too small to keep a GPU busy, so this cell (GPU only) trains a ResNet-shaped first stage (without the residual additions) at ImageNet size: the 7 × 7 stem on 224 × 224 images, max pooling to 56 × 56, four 64-channel conv-BN-ReLU blocks, a classifier.
# It sweeps the batch size for three versions: float32 in NCHW (its convolutions on TF32 where the card has it, by the default above), `channels_last`, and `channels_last` with float16 autocast.
# Then two cuDNN switches (PyTorch docs, "Reproducibility" page): `torch.backends.cudnn.benchmark = True` times cuDNN's algorithms for each new input shape and keeps the fastest (it pays when the shapes repeat, and may pick a different algorithm from run to run), and `torch.backends.cudnn.deterministic = True` allows only algorithms that give the same result every run, which can be slower.

# %%
def resnet_stage():
    """(N, 3, 224, 224) -> (N, 1000): ResNet's stem, then four 64-channel conv-BN-ReLU blocks at 56 × 56."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                         *[conv_bn_relu(64, 64) for _ in range(4)], nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 1000))


def resnet_images_per_second(batch, memory_format=torch.contiguous_format, precision=None, steps=5):
    model = resnet_stage().to(dev, memory_format=memory_format)
    step = amp_step(model, torch.optim.SGD(model.parameters(), lr=0.01), precision)
    x = torch.randn(batch, 3, 224, 224, device=dev).contiguous(memory_format=memory_format)
    y = torch.randint(1000, (batch,), device=dev)

    def run():
        for _ in range(steps):
            step(x, y)
    return images_per_second(run, images=batch * steps)


if gpucourse.gpu_or_explain("training images/s of a ResNet stage at 224 × 224 for batches 16, 64 and 128 in float32 NCHW, channels_last, and "
                            "channels_last + float16; then the same step with cudnn.benchmark off and on, and with deterministic algorithms") and GPU:
    variants = {"float32, NCHW": (torch.contiguous_format, None), "float32, channels_last": (torch.channels_last, None),
                "float16 autocast, channels_last": (torch.channels_last, torch.float16)}
    torch.backends.cudnn.benchmark = True
    sweep = {(name, batch): resnet_images_per_second(batch, *version) for batch in (16, 64, 128) for name, version in variants.items()}
    for (name, batch), rate in sweep.items():
        print(f"batch {batch:3}, {name:>32}: {rate:8.0f} images/s")
    for batch in (16, 128):
        print(cnn_text.versus(f"float16 + channels_last at batch {batch}", 1 / sweep["float16 autocast, channels_last", batch],
                              "float32 NCHW", 1 / sweep["float32, NCHW", batch], where=WHERE + "; times per image"))
    switches = {}
    for benchmark, deterministic in ((False, False), (True, False), (False, True)):
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = benchmark, deterministic
        switches[benchmark, deterministic] = resnet_images_per_second(64, torch.channels_last, torch.float16)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, False  # PyTorch's defaults
    print(cnn_text.versus("cudnn.benchmark on", 1 / switches[True, False], "both off", 1 / switches[False, False], where=WHERE + "; times per image"))
    print(cnn_text.versus("cudnn.deterministic on", 1 / switches[False, True], "both off", 1 / switches[False, False], where=WHERE + "; times per image"))

# %% [markdown]
# ### CUDA graphs: one launch for the whole step
#
# At the digits' size a GPU step is many short kernels, each launched by the CPU.
# A CUDA graph records the kernels of a piece of code once and replays them with one launch (PyTorch docs, "CUDA semantics" page, section "CUDA Graphs": `torch.cuda.CUDAGraph`, `torch.cuda.graph`, `torch.cuda.make_graphed_callables`), which removes the per-kernel launch overhead, not the kernels' work.
# Its inputs and outputs live at fixed addresses, so new data is copied into the captured input tensor before each replay.
# `torch.compile(model, mode="reduce-overhead")` does the recording for you (PyTorch docs, `torch.compile`).
# The cell (GPU only) captures the small model's forward pass and times replay against eager.

# %%
if gpucourse.gpu_or_explain("the small CNN's forward pass (batch 64, 16 × 16) timed eagerly and as a replayed CUDA graph, with the graph's "
                            "output checked against the eager one") and GPU:
    small = make_model(torch.channels_last).eval()
    static_x = big_x[:BATCH].contiguous(memory_format=torch.channels_last).clone()
    with torch.no_grad():
        side = torch.cuda.Stream()  # warm up on a side stream before capture, as the CUDA Graphs section shows
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                small(static_x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = small(static_x)

    def eager_forward(x):
        with torch.no_grad():
            return small(x)

    eager = timing.measure(eager_forward, static_x, min_run_time=0.1)
    replay = timing.measure(graph.replay, min_run_time=0.1)
    graph.replay()
    torch.testing.assert_close(static_out, eager_forward(static_x))
    print(cnn_text.versus("replaying the CUDA graph", replay.median, "the eager forward pass", eager.median, where=WHERE))

# %% [markdown]
# ### Feeding the step: `DataLoader` workers, pinned memory, non-blocking copies
#
# Real images are decoded and augmented on the CPU, per sample, before each step.
# With `num_workers=0` the training process does that itself, between steps; with `num_workers=n` the `DataLoader` runs n worker processes that prepare the next batches while the step runs (PyTorch docs, `torch.utils.data`, "Single- and Multi-process Data Loading").
# On a GPU two more settings belong here (same page, "Memory Pinning", and lecture 05): `pin_memory=True` makes each batch page-locked, and `.to(device, non_blocking=True)` then copies it without stopping the CPU.
# The cell measures an epoch of loading plus training on this CPU, with a small per-sample augmentation (a random rotation), for 0, 1 and 2 workers.
# Workers pay when a core is free to run them beside the training process and the per-sample work outweighs handing each batch from one process to another (through shared memory); on a small machine shared with other work, neither may hold.

# %%
class RotatedDigits(torch.utils.data.Dataset):
    """The 16 × 16 digits, each rotated by a random angle of up to ±0.25 rad when read: per-sample CPU work, like decoding and augmenting."""

    def __init__(self, images, labels):
        self.images, self.labels = images.cpu(), labels.cpu()

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        angle = (torch.rand(()) - 0.5) * 0.5
        theta = torch.stack([torch.stack([angle.cos(), -angle.sin(), torch.zeros(())]), torch.stack([angle.sin(), angle.cos(), torch.zeros(())])])
        grid = F.affine_grid(theta[None], (1, 1, 16, 16), align_corners=False)
        return F.grid_sample(self.images[index:index + 1], grid, align_corners=False)[0], self.labels[index]


def epoch_images_per_second(workers):
    """One epoch of loading and training (channels_last model, SGD); the workers are started before the clock."""
    model, dataset = make_model(torch.channels_last), RotatedDigits(big_x, big_y)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers, pin_memory=GPU,
                                         persistent_workers=workers > 0, multiprocessing_context="fork" if workers else None)
    next(iter(loader))  # starts the workers
    started = time.perf_counter()
    for x, y in loader:
        x, y = x.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last), y.to(dev, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    gpucourse.synchronize()
    return len(dataset) / (time.perf_counter() - started)


# Worker processes are forked here (a notebook's classes cannot be sent to spawned ones); without fork, only 0 workers.
worker_counts = (0, 1, 2) if "fork" in multiprocessing.get_all_start_methods() else (0,)
loading = {workers: epoch_images_per_second(workers) for workers in worker_counts}
if len(loading) > 1:
    print(cnn_text.loader_sentence(loading, cores=multiprocessing.cpu_count()), f"({WHERE})")
else:
    print(f"0 workers: {loading[0]:.0f} images/s ({WHERE}); this system cannot fork worker processes from a notebook")

# %% [markdown]
# ### Gradient checkpointing: memory for compute
#
# Training keeps every activation the backward pass needs until it runs: for a deep CNN at a large batch, that, not the weights, fills the GPU's memory.
# `torch.utils.checkpoint` keeps only the inputs of the checkpointed segments and runs each segment's forward pass again during the backward pass (PyTorch docs, `torch.utils.checkpoint`; `use_reentrant=False` is the variant they recommend).
# The cell counts the bytes autograd saves for the backward pass, with a hook on every saved tensor (`torch.autograd.graph.saved_tensors_hooks`), for a stack of six conv-BN-ReLU blocks, plain and checkpointed in two segments of three, and times a training step of each on this CPU.
# During the backward pass the segments' activations come back one segment at a time, so the peak is the kept inputs plus one segment's activations: segments of about √n of n blocks balance the two (Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016).

# %%
def saved_bytes(run):
    """Bytes of the distinct tensors autograd saves for the backward pass while run() builds the graph; returns (bytes, run's output)."""
    seen = {}

    def pack(tensor):
        seen[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = run()
    return sum(seen.values()), out


stack = nn.Sequential(*[conv_bn_relu(32, 32) for _ in range(6)]).to(dev)
stack_input = torch.randn(8, 32, 16, 16, device=dev, requires_grad=True)


SEGMENT = 3  # blocks per checkpointed segment: the six blocks in two segments


def forward(checkpointed):
    if not checkpointed:
        return stack(stack_input)
    x = stack_input
    for first in range(0, len(stack), SEGMENT):  # only each segment's input is kept; its inside is recomputed in backward
        x = torch.utils.checkpoint.checkpoint(stack[first:first + SEGMENT], x, use_reentrant=False)
    return x


kept = {}
for checkpointed in (False, True):
    kept[checkpointed], out = saved_bytes(lambda c=checkpointed: forward(c))
    out.sum().backward()
step_seconds = {checkpointed: timing.measure(lambda c=checkpointed: forward(c).sum().backward(), warmup=1, min_run_time=0.1, num_threads=THREADS).median
                for checkpointed in (False, True)}


def forward_only():
    with torch.no_grad():
        return stack(stack_input)


forward_seconds = timing.measure(forward_only, warmup=1, min_run_time=0.05, num_threads=THREADS).median
print(cnn_text.checkpoint_sentence(kept[False], kept[True], step_seconds[False], step_seconds[True], forward_seconds), f"(bytes counted, times {WHERE})")

# %% [markdown]
# ## 7. What a GPU adds
#
# A GPU changes the scale, not the method. Reported by NVIDIA for ResNet-50 v1.5 training in PyTorch, one GPU, images per second (NVIDIA DeepLearningExamples, `PyTorch/Classification/ConvNets/resnet50v1.5/README.md`, pytorch-21.03 NGC container):
#
# | GPU | float32 (TF32 on A100) | mixed precision | speedup |
# |---|---|---|---|
# | V100 16 GB | 367 | 1,200 | 3.3× |
# | A100 80 GB | 938 | 2,470 | 2.6× |
#
# The same page reports only inference for the T4 (ResNet-50, batch 128): 426 images/s in float32 and 1,190 in mixed precision, 2.8×; it gives no H100 figures.
# These are reported numbers, not measured here; `scripts/gpu_check.sh` records this lecture's own throughput bars on the GPU it runs on.
#
# The two speedups compare different things.
# On the V100 the float32 column runs on CUDA cores and mixed precision on FP16 tensor cores.
# On the A100 the float32 column already ran its convolutions on TF32 tensor cores (`cudnn.allow_tf32` defaults to True, as printed in section 6), so its 2.6× is TF32 tensor cores against FP16 ones, half the bytes per value and twice the peak (`gpu_specs`: 156 against 312 dense TFLOP/s), with `channels_last` keeping the convolutions on them without transposes.
# ResNet-50 does about 4.1 G multiply-adds per 224 × 224 image forward (torchvision's `ResNet50_Weights` table lists it as "GFLOPS 4.09", counting a multiply-add as one operation); in this lecture's convention of 2 FLOPs per multiply-add, and with a backward pass of about two forwards, the cell below turns that into a training step's cost.

# %%
print(cnn_text.resnet_sentence(4.09e9, max(library_rates), 2470, "A100", "fp16"), "(the CPU rate measured in section 3; NVIDIA's throughput reported)")

# %% [markdown]
# The assignment's last speed item checks your fast training step on a GPU: its threshold is modelled for every card in `gpu_specs` until `scripts/gpu_check.sh` measures it.
#
# **Next**: lecture 09 builds an LSTM from its gates and makes it fast the same way.
