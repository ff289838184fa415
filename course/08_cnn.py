# %% [markdown]
# # 08 · CNNs on the GPU: convolution as a matrix multiplication, and a CNN trained fast
#
# Lectures 01–07 made single ops fast: copies, kernels, fused chains, matmuls compiled onto tiles.
# A convolutional network is built from three of them: convolutions, pooling, and a fully connected layer (the layers of this module's seed article, seed 003).
# This lecture takes the convolution apart, then trains a real CNN on real handwritten digits and makes its training step fast, one measured change at a time.
#
# What you will learn:
#
# 1. a convolution as loops, its FLOPs and bytes, and why it is a matrix multiplication in disguise: **im2col** (`F.unfold`) + one GEMM + a reshape;
# 2. what im2col costs in memory, and when the other algorithms (direct, Winograd, FFT) win;
# 3. three convolutions measured on this machine: loops, im2col + GEMM, and the library's (`F.conv2d`: oneDNN on a CPU, cuDNN on a GPU);
# 4. the seed's CNN trained on 1,797 real digits, with a live loss and accuracy plot, and where the time of one training step goes;
# 5. making training fast: data kept on the device and batched, `channels_last`, mixed precision, `cudnn.benchmark`, `torch.compile`, each measured in images per second.
#
# Everything runs on a CPU for real; the cells say what a GPU changes, with measured GPU numbers where a GPU run has been made and cited ones otherwise.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import itertools
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

import gpucourse
from gpucourse import data, plots, timing, widgets

dev = gpucourse.device()
GPU = dev.type == "cuda"
THREADS = 1  # the CPU timings use one thread, so they do not depend on what else runs on this machine
torch.set_num_threads(THREADS)
WHERE = f"measured on {gpucourse.describe(dev)}"
print(f"Running on {gpucourse.describe(dev)}; CPU timings with {THREADS} thread")
torch.manual_seed(0)

# %% [markdown]
# ## 1. A convolution is six loops
#
# A 2-D convolution layer takes `x` of shape `(N, C, H, W)` (a batch of N images with C channels) and K filters `weight` of shape `(K, C, R, S)`.
# Output pixel `(n, k, p, q)` is the dot product of filter k with the R × S × C patch of image n under it:
#
# $$\text{out}[n, k, p, q] = \sum_{c, r, s} x[n, c, p + r, q + s] \cdot w[k, c, r, s]$$
#
# With stride 1 and no padding the output is `P = H - R + 1` by `Q = W - S + 1`.
# Each output value costs C·R·S multiply-adds, so the layer does **2·N·K·C·R·S·P·Q FLOPs**, while it reads only the input and the weights and writes the output.
# Written as loops (the three outer ones in Python, the dot product as one torch call), it is correct and slow:

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
    """FLOPs and bytes (input, weights and output read or written once) of a stride-1, unpadded convolution."""
    p, q = h - r + 1, w - s + 1
    return 2 * n * k * c * r * s * p * q, itemsize * (n * c * h * w + k * c * r * s + n * k * p * q)


x, weight = torch.randn(2, 3, 10, 10), torch.randn(4, 3, 3, 3)
torch.testing.assert_close(conv2d_loops(x, weight), F.conv2d(x, weight), rtol=1e-4, atol=1e-4)
for shape in [(2, 3, 10, 10, 4, 3, 3), (32, 64, 56, 56, 64, 3, 3)]:
    flops, nbytes = conv_flops_bytes(*shape)
    print(f"conv (N, C, H, W, K, R, S) = {shape}: {flops / 1e9:.3g} GFLOP, {nbytes / 1e6:.3g} MB, {flops / nbytes:.1f} FLOP/byte")

# %% [markdown]
# The second line is a ResNet layer (64 channels at 56 × 56, batch 32): more than a hundred FLOPs per byte, far right of every machine's ridge point (lecture 01's roofline).
# A convolution is compute-bound, like a big matmul, and that is no coincidence: it *is* a matmul.

# %% [markdown]
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
# cuDNN benchmarks these for each layer shape when `torch.backends.cudnn.benchmark = True` (section 5).

# %%
for shape in [(32, 64, 56, 56, 64, 3, 3), (32, 3, 224, 224, 64, 7, 7), (32, 512, 7, 7, 512, 3, 3)]:
    n, c, h, w, k, r, s = shape
    input_mb, columns_mb = 4 * n * c * h * w / 1e6, 4 * n * c * r * s * (h - r + 1) * (w - s + 1) / 1e6
    print(f"{shape}: input {input_mb:7.1f} MB, im2col columns {columns_mb:8.1f} MB ({columns_mb / input_mb:.1f}x)")

# %% [markdown]
# ## 3. Three convolutions, measured
#
# GFLOP/s (the FLOPs of section 1 over the measured time) of the loops, im2col + GEMM and `F.conv2d` (oneDNN on this CPU), on one thread, as the channels grow (at 16 × 16) and as the image grows (at 16 channels).
# The loops are measured on the two smallest sizes only: beyond that they take seconds.

# %%
def gflops(fn, shape):
    n, c, h, w, k, r, s = shape
    x, weight = torch.randn(n, c, h, w), torch.randn(k, c, r, s)
    seconds = timing.measure(fn, x, weight, warmup=1, min_run_time=0.05, num_threads=THREADS).median
    return conv_flops_bytes(*shape)[0] / seconds / 1e9


versions = {"loops": conv2d_loops, "im2col + GEMM": conv2d_gemm, "F.conv2d (library)": F.conv2d}
sweeps = {"channels C = K (16 × 16 images)": [(4, c, 16, 16, c, 3, 3) for c in (4, 8, 16, 32, 64)],
          "image side H = W (16 channels)": [(4, 16, side, side, 16, 3, 3) for side in (8, 16, 32, 64)]}
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
for ax, (title, shapes) in zip(axes, sweeps.items()):
    sizes = [shape[1] if title.startswith("channels") else shape[2] for shape in shapes]
    for name, fn in versions.items():
        limit = 2 if name == "loops" else len(shapes)
        rates = [gflops(fn, shape) for shape in shapes[:limit]]
        ax.plot(sizes[:limit], rates, marker="o", label=name)
        print(f"{title}, {name}: " + ", ".join(f"{size}: {rate:.3g}" for size, rate in zip(sizes, rates)) + " GFLOP/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(title)
axes[0].set_ylabel("GFLOP/s (1 thread)")
axes[0].legend(fontsize=8)
fig.suptitle(f"3 × 3 convolutions, batch 4, float32, {WHERE}", fontsize=9)
plt.show()

# %% [markdown]
# The loops stay at a fraction of a GFLOP/s: each dot product is too small to pay for the Python and dispatch around it.
# im2col + GEMM climbs with the channels, because its GEMM grows (C·R·S is its inner dimension), but stays behind the library; and it falls behind further as the image grows, once its column matrix (nine times the input) no longer fits in the caches, a matrix the library's direct kernels never write.
# On a GPU the same three lines separate further: the loops launch one kernel per output pixel, and cuDNN's kernels run on tensor cores (section 5).

# %% [markdown]
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


EPOCHS, BATCH = 20, 64
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
print(f"{EPOCHS} epochs in {time.perf_counter() - started:.1f} s: test accuracy {test_accuracy(model):.1%}")

# %% [markdown]
# ### Where one training step's time goes
#
# Lecture 06's profiler on one step of 256 images, grouped into what the step does: the convolutions (forward and backward), max pooling (forward, with the indices its backward needs, and backward), the optimizer (Adam's update of every parameter), moving data (indexing the batch, copies), and the rest (ReLU, the loss, the linear layer, filling gradients).

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
self_us = {}
for event in prof.key_averages():
    if event.key.startswith(("aten::", "Optimizer.")):
        self_us[group_of(event.key)] = self_us.get(group_of(event.key), 0.0) + event.self_cpu_time_total
total_us = sum(self_us.values())
for group, us in sorted(self_us.items(), key=lambda item: -item[1]):
    print(f"{group:>14}: {us / 1e3:6.2f} ms of self time ({us / total_us:.0%})")
print(f"the largest: {max(self_us, key=self_us.get)} ({WHERE})")

# %% [markdown]
# On a CPU the convolution and its gradients (the backward pass computes two: the gradient of the input and of the weights) and max pooling take most of the step; oneDNN's pooling in the default NCHW layout is slow enough to rival the convolution, one reason `channels_last` helps below.
# Data movement is cheap here because the data already lives on the device.
# On a GPU, with a model this small, the profile is mostly launches: each op is a kernel of a few microseconds, and the CPU's time to launch them is the step's time, which is what the next section attacks.

# %% [markdown]
# ## 5. Making training fast, one measured change at a time
#
# Throughput in images per second of training steps on 16 × 16 digits (upsampled, so the convolutions have work to do) with 32-channel convolutions, each change added to the ones before:
#
# 1. **the beginner's loop**: a `DataLoader` over a `TensorDataset` on the host, one sample at a time collated in Python, copied to the device each step, and `loss.item()` each step;
# 2. **data on the device, batched**: the whole training set on the device once, a batch picked by indexing, the loss kept as a tensor;
# 3. **`channels_last`**: NHWC memory for the model and the batch, the layout oneDNN and the tensor cores prefer (assignment question 5 asks why);
# 4. **mixed precision**: `torch.autocast` in bfloat16 where the CPU has bfloat16 units (AVX-512 BF16 or AMX), float16 with a `GradScaler` on a GPU;
# 5. **`torch.compile`**: the model's forward and backward compiled by Inductor (the first call compiles, and is not timed).
#
# On a GPU there is one more: `torch.backends.cudnn.benchmark = True`, which times cuDNN's algorithms for each new shape and keeps the fastest.

# %%
big_x, big_y = data.load_digits("train", size=16, device=dev)
BATCH, STEPS = 64, 20  # 1,280 of the 1,437 training images per timing


def make_model(memory_format=torch.contiguous_format):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
    return model.to(dev, memory_format=memory_format)


def images_per_second(run_steps, repeats=3):
    """Best of ``repeats`` timings of run_steps() (STEPS steps of BATCH images), after one untimed warm-up call."""
    run_steps()
    best = float("inf")
    for _ in range(repeats):
        gpucourse.synchronize()
        started = time.perf_counter()
        run_steps()
        gpucourse.synchronize()
        best = min(best, time.perf_counter() - started)
    return STEPS * BATCH / best


def beginner():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(big_x.cpu(), big_y.cpu()), batch_size=BATCH, shuffle=True)

    def run():
        for x, y in itertools.islice(itertools.chain.from_iterable(itertools.repeat(loader)), STEPS):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            optimizer.step()
            loss.item()  # a host sync every step
    return run


def on_device(memory_format=torch.contiguous_format, precision=None, compiled=False):
    model = make_model(memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cuda") if precision == torch.float16 else None
    images = big_x.contiguous(memory_format=memory_format)

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=precision or torch.float32, enabled=precision is not None):
            loss = F.cross_entropy(model(x), y)
        (scaler.scale(loss) if scaler else loss).backward()
        scaler.step(optimizer) if scaler else optimizer.step()
        if scaler:
            scaler.update()
        return loss.detach()

    if compiled:
        model.compile()  # forward and backward through Inductor; the optimizer's update stays eager

    def run():
        order = torch.randperm(len(images), device=dev)  # STEPS * BATCH images fit in one epoch
        for first in range(0, STEPS * BATCH, BATCH):
            batch = order[first:first + BATCH]
            step(images[batch], big_y[batch])
    return run


# %%
mixed = torch.float16 if GPU else (torch.bfloat16 if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported() else None)
techniques = {
    "1. beginner's loop": beginner(),
    "2. data on the device, batched": on_device(),
    "3. + channels_last": on_device(torch.channels_last),
}
if mixed is not None:
    techniques[f"4. + autocast {str(mixed).removeprefix('torch.')}"] = on_device(torch.channels_last, mixed)
else:
    print("this CPU has no bfloat16 units: mixed precision would emulate them, slower than float32, so it is left out")
throughput = {name: images_per_second(run) for name, run in techniques.items()}
compile_started = time.perf_counter()
compiled_run = on_device(torch.channels_last, mixed, compiled=True)
compiled_run()  # compiles: timed apart
compile_seconds = time.perf_counter() - compile_started
throughput["5. + torch.compile"] = images_per_second(compiled_run)
for name, rate in throughput.items():
    print(f"{name:>34}: {rate:8.0f} images/s")
print(f"(torch.compile's first call compiled for {compile_seconds:.1f} s)")

# %%
fig, ax = plt.subplots(figsize=(8, 2.8))
plots.provenance_bars(ax, [(name, rate, "measured") for name, rate in throughput.items()], xlabel=f"training images per second ({WHERE}, {THREADS} thread on a CPU)", fmt="{:.0f}")
plt.show()
if GPU:
    torch.backends.cudnn.benchmark = True
    print(f"with cudnn.benchmark: {images_per_second(on_device(torch.channels_last, mixed)):.0f} images/s")
else:
    print("cudnn.benchmark is cuDNN's: on a GPU it times each layer's algorithms once per shape and keeps the fastest")

# %% [markdown]
# Read each bar as a ratio to the one above it, on this machine; a change that does not pay here is worth removing here.
# On one CPU thread a step of this model takes about ten milliseconds, so the `DataLoader`'s per-sample collate (a millisecond or two) and the host sync barely show; on a GPU, where the same step takes well under a millisecond, they are the step's time, and keeping the data on the device is the first win.
# `channels_last` and bfloat16 help where oneDNN has kernels for them (AMX tiles on recent Xeons, as on this machine if the bars say so), and cost where it does not.
# `torch.compile` fuses the pointwise ops; on a model this small its generated code may not beat oneDNN's, so the bar can go down: measure before keeping it.
#
# ## 6. What a GPU adds
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
# Mixed precision more than doubles training throughput on both, because the convolutions move to FP16 tensor cores (and `channels_last` keeps them there without transposes).
# A ResNet-50 step is 3 × 4.1 GFLOP a image; on one thread of this CPU the convolutions above ran at the GFLOP/s you measured in section 3, so the same training would take thousands of times longer here.
# The assignment's last speed item checks your fast training step on a GPU: its threshold is modelled for every card in `gpu_specs` until `scripts/gpu_check.sh` measures it.
#
# **Next**: lecture 09 builds an LSTM from its gates and makes it fast the same way.
