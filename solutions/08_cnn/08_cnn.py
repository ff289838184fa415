# %% [markdown]
# # Assignment 08: CNNs — convolution as im2col + GEMM, pooling without loops, a digits CNN, a fast training step
#
# This assignment checks the ideas of lecture 08 (`course/08_cnn.ipynb`).
# You will write a convolution as one matrix multiplication, max pooling without a loop, a small CNN that reads handwritten digits, and a training step that uses what makes training fast.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other shapes, dtypes and edge cases.
# - Everything but one item runs on a CPU; the training step's speed item waits for a GPU regrade.
#
# Points: 15 autograded (2 of them on a GPU), 1 graded by hand.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
import collections
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import gpucourse
from gpucourse import check, data, thresholds, timing

DEVICE = gpucourse.device()
print(f"Running on {gpucourse.describe()} (device class {gpucourse.device_class()!r})")
torch.manual_seed(0)


def pair(value):
    """An int or a pair of ints -> a pair: (2 -> (2, 2), (1, 3) -> (1, 3)), as F.conv2d reads stride and padding."""
    return (value, value) if isinstance(value, int) else tuple(value)


class _OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[f"aten::{func.overloadpacket.__name__}"] += 1
        return func(*args, **(kwargs or {}))


def ops_of(fn, *args):
    """{ATen op: calls} of one call fn(*args), as a dispatch mode sees them (the grader counts with its profiler instead)."""
    with _OpRecorder() as recorder:
        fn(*args)
    return dict(recorder.ops)


def check_ops(fn, small_args, large_args, forbidden, name):
    """fn calls no op whose name holds ``forbidden``, and no more ops on the large inputs than on the small ones
    (give or take 2): a Python loop over the batch or the pixels would call more. Counted are the ops fn
    calls, not those they call inside (the library's im2col selects each image of the batch itself)."""
    outputs, totals = [], []
    for args in (small_args, large_args):
        output, ops = check.counted_call(fn, *args, counter=ops_of, top_level=True)
        used = sorted(op for op in ops if forbidden in op)
        assert not used, f"{name} calls {', '.join(used)}: write it without the library's {forbidden} ops"
        outputs.append(output)
        totals.append(sum(ops.values()))
    assert totals[1] <= totals[0] + 2, (f"{name} ran {totals[0]} ops on {tuple(small_args[0].shape)} and {totals[1]} on "
                                        f"{tuple(large_args[0].shape)}: the count grows with the input, so something loops over the batch or the pixels")
    return outputs


# %% [markdown]
# ## Question 1: convolution as im2col + one matrix multiplication (6 points)
#
# Write `conv2d_im2col(x, weight, bias=None, stride=1, padding=0)` that returns what `F.conv2d(x, weight, bias, stride, padding)` returns, for `x` of shape `(N, C, H, W)`, `weight` of shape `(K, C, R, S)` and `bias` of shape `(K,)` or `None`, with `stride` and `padding` an int or a pair (`pair` above turns either into a pair), in float32 and float64, on the inputs' device.
# Do it as the lecture does: unfold every input patch into a column (`F.unfold`, which is im2col), multiply by the filters laid out as a `(K, C·R·S)` matrix, and reshape to `(N, K, P, Q)`.
#
# Graded:
# - the values, against `F.conv2d`, on fresh inputs: non-square images and kernels, strides and paddings as ints and pairs, 1 × 1 kernels, a kernel as large as the (padded) input, N = 1, both dtypes (3 points);
# - how it computes them (1 point): no convolution op of the library (`F.conv2d`, `torch.conv2d`, `torch.convolution`: any ATen op with `conv` in its name), and no Python loop over the batch or the pixels.
#   The test counts the ops your function calls (not those they call inside) in one call on a small and on a larger input: the larger one may not need more. A loop over the kernel's R × S offsets is allowed (it does not grow with the input), though one `F.unfold` needs none.
#   In your notebook the test counts with a dispatch mode (`ops_of` above); when graded, your answer cell runs in a fresh process with only this notebook's setup cells, and the grader's own profiler counts there. So keep this cell to torch operations, `math` and the setup's `pair` (no other imports, no state kept between calls): it is checked before it runs, and the message names the line that is not allowed.
# - the speed, on fresh (8, 16, 24, 24) inputs and (32, 16, 3, 3) filters in float32 on the CPU (2 points): at least 5× faster than `conv2d_loops` below (the reference measured 40-80× on a 2-core CPU, one thread).
#
# About 8 lines.

# %% nbgrader={"grade_id": "conv_setup", "locked": true}
def conv2d_loops(x, weight, bias=None, stride=1, padding=0):
    """F.conv2d by loops over the batch and the output pixels: each output pixel is its patch · every filter."""
    (sh, sw), (ph, pw) = pair(stride), pair(padding)
    x = F.pad(x, (pw, pw, ph, ph))
    n, _, h, w = x.shape
    k, _, r, s = weight.shape
    p, q = (h - r) // sh + 1, (w - s) // sw + 1
    filters = weight.reshape(k, -1)
    out = torch.empty(n, k, p, q, dtype=x.dtype, device=x.device)
    for image in range(n):
        for row in range(p):
            for col in range(q):
                patch = x[image, :, row * sh:row * sh + r, col * sw:col * sw + s].reshape(-1)
                out[image, :, row, col] = filters @ patch
    return out if bias is None else out + bias.view(1, k, 1, 1)


def conv_inputs(n, c, h, w, k, r, s, *, bias=True, dtype=torch.float32, device=None):
    device = DEVICE if device is None else device
    x = torch.randn(n, c, h, w, dtype=dtype, device=device)
    weight = torch.randn(k, c, r, s, dtype=dtype, device=device)
    return x, weight, (torch.randn(k, dtype=dtype, device=device) if bias else None)


def check_conv(args, output, stride=1, padding=0):
    x, weight, bias = args[:3]
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if x.dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-9}
    check.assert_close(output, F.conv2d(x, weight, bias, stride, padding), **tolerance,
                       name=f"conv2d_im2col on x {tuple(x.shape)}, weight {tuple(weight.shape)}, stride {stride}, padding {padding}, {x.dtype}")


# %% nbgrader={"grade_id": "conv2d_im2col", "solution": true}
def conv2d_im2col(x, weight, bias=None, stride=1, padding=0):
    """x: (N, C, H, W), weight: (K, C, R, S), bias: (K,) or None -> (N, K, P, Q), as F.conv2d computes it."""
    ### BEGIN SOLUTION
    n, _, h, w = x.shape
    k, _, r, s = weight.shape
    (sh, sw), (ph, pw) = pair(stride), pair(padding)
    p, q = (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1
    columns = F.unfold(x, (r, s), padding=(ph, pw), stride=(sh, sw))  # (N, C*R*S, P*Q): one column per output pixel
    out = weight.reshape(k, -1) @ columns  # (N, K, P*Q): every filter against every column at once
    if bias is not None:
        out = out + bias.view(1, k, 1)
    return out.reshape(n, k, p, q)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_conv2d_correct", "grade": true, "points": 3}
"""conv2d_im2col matches F.conv2d on fresh inputs: strides, paddings, non-square shapes, with and without bias."""
for shape, stride, padding in [((2, 3, 8, 8, 4, 3, 3), 1, 0), ((2, 3, 8, 8, 4, 3, 3), 1, 0), ((1, 2, 9, 7, 5, 3, 2), 2, 1),
                               ((3, 4, 10, 6, 2, 1, 1), (1, 2), (0, 1))]:
    args = conv_inputs(*shape)
    check_conv(args, conv2d_im2col(*args, stride=stride, padding=padding), stride, padding)
args = conv_inputs(2, 3, 8, 8, 4, 3, 3, bias=False)
check_conv(args, conv2d_im2col(args[0], args[1]))
### BEGIN HIDDEN TESTS
for shape, stride, padding, dtype in [
    ((1, 1, 5, 5, 1, 5, 5), 1, 0, torch.float32),  # the kernel as large as the input: one output pixel
    ((2, 3, 4, 6, 3, 6, 8), 1, 1, torch.float32),  # ... as large as the padded input
    ((4, 5, 7, 7, 6, 1, 1), 1, 0, torch.float64),  # 1 x 1 kernels
    ((1, 2, 11, 13, 3, 3, 5), (2, 3), (1, 2), torch.float64),
    ((3, 1, 6, 9, 2, 2, 3), 3, 0, torch.float32),
]:
    args = conv_inputs(*shape, dtype=dtype)
    check_conv(args, conv2d_im2col(*args, stride=stride, padding=padding), stride, padding)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_conv2d_is_im2col", "grade": true, "points": 1}
"""conv2d_im2col calls no convolution op, and runs no more ops on a larger input (no loop over the batch or the pixels)."""
small, large = conv_inputs(2, 3, 8, 8, 4, 3, 3), conv_inputs(5, 3, 14, 11, 4, 3, 3)
outputs = check_ops(conv2d_im2col, (*small, 1, 1), (*large, 1, 1), "conv", "conv2d_im2col")
check_conv(small, outputs[0], 1, 1)
check_conv(large, outputs[1], 1, 1)

# %% nbgrader={"grade_id": "test_conv2d_speed", "grade": true, "points": 2}
"""conv2d_im2col is 5x faster than conv2d_loops on fresh (8, 16, 24, 24) inputs and (32, 16, 3, 3) filters, float32 on the CPU."""
SPEEDUP_NEEDED = {"cpu": 5.0, "cuda": 5.0}  # measured on the CPU on every machine: the loop is Python's


def speed_inputs():
    return conv_inputs(8, 16, 24, 24, 32, 3, 3, device="cpu")


args = speed_inputs()
check_conv(args, conv2d_im2col(*args))
check.assert_measured_speedup(lambda: timing.compare_speed(conv2d_loops, conv2d_im2col, speed_inputs, check=check_conv, charge_cpu_time=True),
                              check.required_speedup(SPEEDUP_NEEDED), name="conv2d_im2col vs conv2d_loops")

# %% [markdown]
# ## Question 2: max pooling without a loop (2 points)
#
# Write `maxpool2d(x, kernel_size, stride=None)`: what `F.max_pool2d(x, kernel_size, stride)` returns for `x` of shape `(N, C, H, W)`, with no padding (windows that do not fit are dropped), `kernel_size` and `stride` an int or a pair, and `stride=None` meaning `stride = kernel_size`.
# `Tensor.unfold(dim, size, step)` makes the windows of one dimension; two of them make the windows of an image.
# Graded: the values on fresh inputs (1 point); and, counted as in question 1, no pooling op of the library (`pool` in its name) and no more ops on a larger input (1 point).
# The same rules for the cell: torch operations, `math` and `pair` only.
#
# About 3 lines.

# %% nbgrader={"grade_id": "pool_setup", "locked": true}
def check_pool(x, output, kernel_size, stride=None):
    check.assert_close(output, F.max_pool2d(x, kernel_size, stride), rtol=0, atol=0,
                       name=f"maxpool2d on {tuple(x.shape)}, kernel {kernel_size}, stride {stride}")


# %% nbgrader={"grade_id": "maxpool2d", "solution": true}
def maxpool2d(x, kernel_size, stride=None):
    """x: (N, C, H, W) -> (N, C, P, Q): the maximum of each kernel_size window, windows stride apart."""
    ### BEGIN SOLUTION
    (kh, kw) = pair(kernel_size)
    (sh, sw) = pair(kernel_size if stride is None else stride)
    return x.unfold(2, kh, sh).unfold(3, kw, sw).amax(dim=(-2, -1))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_maxpool2d_correct", "grade": true, "points": 1}
"""maxpool2d matches F.max_pool2d on fresh inputs."""
for shape, kernel_size, stride in [((2, 3, 8, 8), 2, None), ((2, 3, 8, 8), 2, None), ((1, 2, 7, 9), 3, 2), ((2, 1, 6, 5), (2, 3), (1, 2))]:
    x = torch.randn(*shape, device=DEVICE)
    check_pool(x, maxpool2d(x, kernel_size, stride), kernel_size, stride)
### BEGIN HIDDEN TESTS
for shape, kernel_size, stride, dtype in [((1, 1, 5, 5), 5, None, torch.float32), ((3, 4, 9, 9), 1, None, torch.float64),
                                          ((2, 2, 10, 7), (3, 2), 3, torch.float64), ((4, 3, 16, 16), 4, (2, 4), torch.float32)]:
    x = torch.randn(*shape, dtype=dtype, device=DEVICE)
    check_pool(x, maxpool2d(x, kernel_size, stride), kernel_size, stride)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_maxpool2d_ops", "grade": true, "points": 1}
"""maxpool2d calls no pooling op, and runs no more ops on a larger input."""
small, large = torch.randn(2, 3, 8, 8, device=DEVICE), torch.randn(6, 3, 20, 14, device=DEVICE)
outputs = check_ops(maxpool2d, (small, 2, 2), (large, 2, 2), "pool", "maxpool2d")
check_pool(small, outputs[0], 2, 2)
check_pool(large, outputs[1], 2, 2)

# %% [markdown]
# ## Question 3: a CNN that reads digits (3 points)
#
# `data.load_digits("train")` gives 1,437 real handwritten digits, 8 × 8 grey scans as `(N, 1, 8, 8)` float32 tensors in [0, 1], and their labels; `data.load_digits("test")` the 360 others (the split is fixed, and nothing is downloaded: the scans ship inside scikit-learn).
#
# Write `DigitsCNN`, an `nn.Module` that maps `(N, 1, 8, 8)` images to `(N, 10)` logits, built from the seed's layers (convolutions, max pooling, a fully connected layer), and `train_digits(model, epochs, batch_size, device)`, which trains it on the train split (mini-batches of `batch_size`, shuffled each epoch, the data kept on `device`: no per-sample Python) and returns its accuracy on the test split.
#
# Graded (3 points): with `torch.manual_seed(0)` before `DigitsCNN()`, `train_digits(model, EPOCHS, BATCH_SIZE, DEVICE)` reaches at least 97 % test accuracy within `TRAIN_BUDGET_SECONDS` (in your notebook: the lesser of wall-clock and CPU time, so a busy machine does not count against you).
# The test does not take your returned number for it: it asks the trained model for its logits on the test images, in a shuffled order of its own, and counts the right answers itself (and your returned accuracy must agree with its count to 2 points).
# When graded, the training runs in a fresh process with only this notebook's setup cells and your two answer cells (keep each of them self-contained), stopped after `TRAIN_BUDGET_SECONDS` of the grader's quiet-machine clock, on one CPU thread.
# The reference (two 3 × 3 convolutions of 16 and 32 channels, each followed by ReLU and 2 × 2 max pooling, then one linear layer; Adam at 3e-3) reaches 98.3 % in about 2.5 s on one thread of a 2-core CPU.
#
# The `DigitsCNN` cell below starts empty; its shape is
#
# ```python
# class DigitsCNN(nn.Module):
#     def __init__(self):
#         super().__init__()
#         ...  # the layers
#
#     def forward(self, x):  # (N, 1, 8, 8) -> (N, 10)
#         ...
# ```
#
# About 25 lines for the two cells.

# %% nbgrader={"grade_id": "digits_setup", "locked": true}
EPOCHS, BATCH_SIZE = 30, 64
TRAIN_BUDGET_SECONDS = 10.0
ACCURACY_NEEDED = 0.97


def trained_test_logits(epochs, batch_size, images, seed=0):
    """A fresh DigitsCNN (seeded), trained by train_digits on one CPU thread, as the grader trains it:
    (its logits on ``images``, on the CPU; the accuracy it reported)."""
    with timing.fixed_threads(1):
        torch.manual_seed(seed)
        model = DigitsCNN()
        reported = train_digits(model, epochs, batch_size, DEVICE)
        model.eval()
        with torch.no_grad():
            logits = model(images.to(DEVICE))
    return logits.float().cpu(), float(reported)


# %% nbgrader={"grade_id": "digits_cnn", "solution": true}
### BEGIN SOLUTION
class DigitsCNN(nn.Module):
    """(N, 1, 8, 8) images -> (N, 10) logits: two conv-ReLU-pool stages (8 -> 4 -> 2 pixels), then one linear layer."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))
### END SOLUTION


# %% nbgrader={"grade_id": "train_digits", "solution": true}
def train_digits(model, epochs, batch_size, device):
    """Train ``model`` on the digits' train split; return its accuracy on the test split (a float in [0, 1])."""
    ### BEGIN SOLUTION
    images, labels = data.load_digits("train", device=device)
    test_images, test_labels = data.load_digits("test", device=device)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(images), device=device)
        for start in range(0, len(images), batch_size):
            batch = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(images[batch]), labels[batch]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        return data.accuracy(model(test_images), test_labels)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_digits_cnn", "grade": true, "points": 3}
"""A seeded DigitsCNN trained by train_digits reaches 97% on the test split within the budget, counted by the test."""
test_images, test_labels = data.load_digits("test")
shuffled = torch.randperm(len(test_labels))  # in an order of the test's own: a model cannot answer by position
train = check.answers_only(trained_test_logits, "DigitsCNN", "train_digits", seconds=TRAIN_BUDGET_SECONDS)
logits, reported = train(EPOCHS, BATCH_SIZE, test_images[shuffled])
test_labels = test_labels[shuffled]
assert tuple(logits.shape) == (len(test_labels), 10), f"DigitsCNN should give (N, 10) logits, got shape {tuple(logits.shape)}"
accuracy = data.accuracy(logits, test_labels)
print(f"test accuracy {accuracy:.1%} (train_digits reported {reported:.1%})")
assert accuracy >= ACCURACY_NEEDED, f"the trained DigitsCNN is right on {accuracy:.1%} of the test digits; at least {ACCURACY_NEEDED:.0%} needed"
assert abs(reported - accuracy) <= 0.02, f"train_digits returned {reported:.1%}, but the model it trained gets {accuracy:.1%}"

# %% [markdown]
# ## Question 4: a fast training step (4 points, 2 of them on a GPU)
#
# `plain_train_step` below is a training step as beginners write it: float32, the default memory format, and `loss.item()` every step, which makes the CPU wait for the GPU to finish before it may queue the next step.
# Write `fast_train_step(model, optimizer, x, y)` with the lecture's techniques: no host synchronisation (return the loss as a tensor, detached), mixed precision where it pays (`torch.autocast`: bfloat16 on a CPU that supports it, float16 with a `torch.amp.GradScaler` or bfloat16 on a GPU), `channels_last` for the model and the batch on a GPU; the model may be converted on the first call.
#
# Graded:
# - the step (2 points), from a fixed model and batch: after one step the parameters moved as `plain_train_step` moves them (the same direction, cosine similarity at least 0.98, and a size within 15 %, which mixed precision allows), and ten steps lower the loss.
# - on a GPU, the speed (2 points): `STEPS` steps of `StepCNN` on a batch of 2048 images of 16 × 16 at least 1.3× faster than with `plain_train_step`. That threshold is modelled, not yet measured (`gpucourse.thresholds`: TF32 or FP32 against FP16 tensor cores, launches and one sync a step: 2.1-2.8× on the cards in `gpu_specs`: V100, T4, A100, L4, H100, H200); `scripts/gpu_check.sh` will calibrate it on the first GPU run.
#
# When graded, the steps run in a fresh process with only the setup cells and your answer cell: keep it self-contained (a `GradScaler` it creates at the top is fine).
#
# The answer cell below starts empty; its shape is
#
# ```python
# def fast_train_step(model, optimizer, x, y):
#     ...  # one step: zero the gradients, the loss under autocast, backward, the optimizer's step
#     return loss.detach()  # a tensor: no .item(), no host sync
# ```
#
# About 12 lines.

# %% nbgrader={"grade_id": "step_setup", "locked": true}
STEPS = 10


class StepCNN(nn.Module):
    """(N, 1, 16, 16) -> (N, 10): the model the training steps are checked and timed on."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(64 * 4 * 4, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def plain_train_step(model, optimizer, x, y):
    """One SGD step in float32; returns the loss as a Python float (a host sync every step)."""
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def step_batch(n=256, seed=0):
    """n digits drawn from the train split (with replacement), upsampled to 16 x 16, and their labels, on DEVICE."""
    images, labels = data.load_digits("train", size=16, device=DEVICE)
    chosen = torch.randint(len(images), (n,), generator=torch.Generator().manual_seed(seed)).to(DEVICE)
    return images[chosen], labels[chosen]


# The functions below run where your answer cell ran too (when graded, a fresh process): what they call is bound
# when they are defined (the defaults), so a cell that rebinds those names later cannot change what they do.
def compare_steps(seed=0, _copy=copy.deepcopy, _plain=plain_train_step, _model=StepCNN, _batch=step_batch):
    """From one seeded StepCNN and batch: how one plain step and one fast_train_step move the parameters
    (two flat vectors, on the CPU), and the losses of STEPS fast steps after it."""
    torch.manual_seed(seed)
    start = _model().to(DEVICE)
    x, y = _batch(seed=seed)
    moved = {}
    for name, step in (("plain", _plain), ("fast", fast_train_step)):
        model = _copy(start)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        step(model, optimizer, x, y)
        moved[name] = torch.cat([(after.detach().float() - before.detach().float()).flatten().cpu()
                                 for after, before in zip(model.parameters(), start.parameters())])
    losses = [float(fast_train_step(model, optimizer, x, y)) for _ in range(STEPS)]
    return moved["plain"], moved["fast"], torch.tensor(losses)


def plain_steps(x, y, _plain=plain_train_step, _model=StepCNN):
    """STEPS plain steps of a fresh seeded StepCNN on (x, y): the last loss (timed on a GPU, against fast_steps)."""
    torch.manual_seed(0)
    model = _model().to(x.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return torch.tensor([_plain(model, optimizer, x, y) for _ in range(STEPS)][-1])


def fast_steps(x, y, _model=StepCNN):
    """STEPS of fast_train_step on a fresh seeded StepCNN: the last loss, as a tensor on the CPU."""
    torch.manual_seed(0)
    model = _model().to(x.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return [fast_train_step(model, optimizer, x, y) for _ in range(STEPS)][-1].float().cpu()


def check_moved(plain, fast):
    cosine = float(F.cosine_similarity(plain, fast, dim=0))
    size = float(fast.norm() / plain.norm())
    assert cosine >= 0.98, f"fast_train_step moved the parameters another way than plain_train_step (cosine similarity {cosine:.3f}, at least 0.98 needed)"
    assert 0.85 <= size <= 1.15, f"fast_train_step moved the parameters {size:.2f}x as far as plain_train_step (0.85-1.15 allowed)"


# %% nbgrader={"grade_id": "fast_train_step", "solution": true}
### BEGIN SOLUTION
GPU_SCALER = torch.amp.GradScaler("cuda") if torch.cuda.is_available() else None


def fast_train_step(model, optimizer, x, y):
    """One training step with autocast (bfloat16 on a CPU, float16 and a GradScaler on a GPU), channels_last on a GPU,
    and no host sync: returns the loss as a detached tensor."""
    on_gpu = x.is_cuda
    if on_gpu:
        model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=x.device.type, dtype=torch.float16 if on_gpu else torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    if on_gpu:
        GPU_SCALER.scale(loss).backward()
        GPU_SCALER.step(optimizer)
        GPU_SCALER.update()
    else:
        loss.backward()
        optimizer.step()
    return loss.detach()
### END SOLUTION


# %% nbgrader={"grade_id": "test_fast_train_step", "grade": true, "points": 2}
"""fast_train_step moves the parameters as plain_train_step does (from the same model and batch), and ten steps lower the loss."""
plain, fast, losses = check.answers_only(compare_steps, "fast_train_step")()
check_moved(plain, fast)
assert bool(torch.isfinite(losses).all()) and losses[-1] < losses[0], f"ten fast_train_steps on one batch should lower the loss, got {losses.tolist()}"
### BEGIN HIDDEN TESTS
plain, fast, losses = check.answers_only(compare_steps, "fast_train_step")(seed=3)
check_moved(plain, fast)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_fast_train_step_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: STEPS fast_train_steps of StepCNN on 2048 images are 1.3x faster than STEPS plain_train_steps."""
# Modelled, not yet measured (gpucourse.thresholds.train_step_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 1.3}
print(thresholds.describe("test_fast_train_step_speed", SPEEDUP_NEEDED["cuda"]))
plain, fast, losses = check.answers_only(compare_steps, "fast_train_step")(seed=1)  # first, a correct step
check_moved(plain, fast)
if gpucourse.device_class() != "cuda":
    print("needs a GPU: there the plain step waits for each loss, and runs in float32 without tensor cores' FP16")
else:
    def check_steps(args, output):
        assert bool(torch.isfinite(torch.as_tensor(output)).all()), f"the last loss of the timed steps is {output}"

    result = timing.compare_speed(plain_steps, check.answers_only(fast_steps, "fast_train_step"), lambda: step_batch(2048), check=check_steps)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="fast_train_step vs plain_train_step")

# %% [markdown]
# ## Question 5: channels_last and tensor cores (1 point, graded by hand)
#
# On a GPU with tensor cores, the same convolution often runs faster when its input and weights are in `channels_last` (NHWC) memory format than in the default NCHW, although the arithmetic is the same.
# Explain why: what a tensor core multiplies, which dimension of a convolution becomes the inner (reduction) dimension of that matrix product, and what NCHW forces the library to do before and after the product that NHWC does not.
# Three to five sentences.

# %% [markdown] nbgrader={"grade_id": "channels_last_answer", "solution": true, "grade": true, "points": 1}
# YOUR ANSWER HERE
#
# BEGIN SOLUTION
# A tensor core multiplies small matrix tiles (for example 16 × 16 × 16 in FP16), and cuDNN runs a convolution as an implicit GEMM whose reduction dimension is C·R·S: for each output pixel, the input channels under the kernel window.
# To feed the tiles, the values that are reduced together (the channels of one pixel) must be contiguous, so that one load brings a whole row of a tile.
# In NHWC the C channels of a pixel sit next to each other in memory and the kernel reads them directly; in NCHW they are H·W elements apart, so the library first transposes the input (and the output back) into NHWC, extra passes over memory that can cost as much as the convolution itself.
# channels_last removes those transposes, and keeps every layer in the layout the tensor cores want.
# END SOLUTION
