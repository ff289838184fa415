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
import itertools
import math
import random

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import gpucourse
from gpucourse import check, data, syncs, thresholds, timing

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
    calls, not those they call inside (the library's im2col selects each image of the batch itself), with
    torch.compile switched off: compiled, a library op or a loop runs as Inductor's code, which records no op."""
    outputs, totals = [], []
    for args in (small_args, large_args):
        output, ops = check.counted_call(fn, *args, counter=ops_of, top_level=True, eager=True)
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
#   `torch.compile` is allowed and changes nothing here: the ops are counted with it switched off (`torch.compiler.set_stance("force_eager")`), as your code calls them, since compiled, a Python loop or a library op (`F.max_pool2d`) can run as Inductor's own code, which the profiler records as no op.
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
# Graded: the values on fresh inputs (1 point); and, counted as in question 1 (with `torch.compile` switched off: a compiled `F.max_pool2d` still counts as the pooling op it is), no pooling op of the library (`pool` in its name) and no more ops on a larger input (1 point).
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
# `data.load_digits("train")` gives 1,437 real handwritten digits, 8 × 8 grey scans as `(N, 1, 8, 8)` float32 tensors in [0, 1], and their labels; `data.load_digits("test")` the 360 others (nothing is downloaded: the scans ship inside scikit-learn).
#
# Write `DigitsCNN`, an `nn.Sequential` that maps `(N, 1, 8, 8)` images to `(N, 10)` logits, built only from the layers in `LAYERS` below (convolutions, batch norm, ReLU, max pooling, flatten, dropout, fully connected), with at most `PARAMETER_BUDGET` = 10,000 parameters and at least two convolutions of 3 × 3 or larger with at least 8 output channels each (a token 1 × 1 convolution before a linear layer is logistic regression, which reads these digits almost as well);
# and `train_digits(model, images, labels, epochs, batch_size, device)`, which trains it on the images and labels it is given (mini-batches of `batch_size`, shuffled each epoch, the data moved to `device` once: no per-sample Python) and returns nothing.
#
# Graded (3 points): the test draws its own task at grading time: it holds 360 of the 1,797 digits out at random, and renames the labels by a random permutation of 0-9 (a "3" may be called 7).
# With `torch.manual_seed(0)` before `DigitsCNN()`, `train_digits(model, images, labels, EPOCHS, BATCH_SIZE, DEVICE)` trains on the other 1,437 with the renamed labels, within `TRAIN_BUDGET_SECONDS` (in your notebook: the lesser of wall-clock and CPU time, so a busy machine does not count against you).
# Then the test rebuilds your network from its layers and weights in its own process (`rebuilt` below: the layer types and constructor arguments of your `nn.Sequential`, nothing of your code) and counts its right answers on the held-out digits itself: at least 95 % needed.
# When graded, the training runs in a fresh process with only this notebook's setup cells and your two answer cells (keep each of them self-contained), stopped after `TRAIN_BUDGET_SECONDS` of the grader's quiet-machine clock, on one CPU thread.
# The reference (two 3 × 3 convolutions of 16 and 32 channels, each followed by ReLU and 2 × 2 max pooling, then one linear layer: 6,090 parameters; Adam at 3e-3) reached 97.2-99.7 % on ten random draws, in about 2 s of one thread of a 2-core CPU.
#
# The `DigitsCNN` cell below holds the class's first lines: in place of its `raise` line, `super().__init__(...)` with the layers, in order.
#
# About 25 lines for the two cells.

# %% nbgrader={"grade_id": "digits_setup", "locked": true}
EPOCHS, BATCH_SIZE = 30, 64
TRAIN_BUDGET_SECONDS = 10.0
ACCURACY_NEEDED = 0.95
PARAMETER_BUDGET = 10_000
HELD_OUT = 360
# The layers a DigitsCNN may hold, and the constructor arguments the test rebuilds each one from (its bias from its weights).
LAYERS = {
    "Conv2d": (nn.Conv2d, ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups")),
    "BatchNorm2d": (nn.BatchNorm2d, ("num_features", "eps", "momentum", "affine", "track_running_stats")),
    "ReLU": (nn.ReLU, ()),
    "MaxPool2d": (nn.MaxPool2d, ("kernel_size", "stride", "padding", "dilation", "ceil_mode")),
    "Flatten": (nn.Flatten, ("start_dim", "end_dim")),
    "Dropout": (nn.Dropout, ("p",)),
    "Linear": (nn.Linear, ("in_features", "out_features")),
}


def digits_task(seed):
    """The test's draw from all 1,797 digits: HELD_OUT of them held out at random, and the labels renamed by a random
    permutation of 0-9 -> (training images, their labels, held-out images, their labels)."""
    generator = torch.Generator().manual_seed(seed)
    (train_x, train_y), (test_x, test_y) = data.load_digits("train"), data.load_digits("test")
    images, labels = torch.cat([train_x, test_x]), torch.cat([train_y, test_y])
    order, renamed = torch.randperm(len(labels), generator=generator), torch.randperm(10, generator=generator)
    held, kept = order[:HELD_OUT], order[HELD_OUT:]
    return images[kept], renamed[labels[kept]], images[held], renamed[labels[held]]


def layer_specs(model):
    """An nn.Sequential's layers as plain data: [(type name, constructor arguments, its state_dict on the CPU)]."""
    if not isinstance(model, nn.Sequential):
        return f"DigitsCNN() should be an nn.Sequential, got a {type(model).__name__}"
    return [(type(layer).__name__, {arg: getattr(layer, arg) for arg in LAYERS.get(type(layer).__name__, (None, ()))[1]},
             {key: value.detach().cpu() for key, value in layer.state_dict().items()}) for layer in model]


# This function runs where your answer cells ran too (when graded, a fresh process): what it calls is bound
# when it is defined (the defaults), so a cell that rebinds those names later cannot change what it does.
def trained_specs(images, labels, epochs, batch_size, seed=0, _threads=timing.fixed_threads, _specs=layer_specs):
    """A fresh DigitsCNN (seeded), trained by train_digits on (images, labels) on one CPU thread: its layer_specs."""
    with _threads(1):
        torch.manual_seed(seed)
        model = DigitsCNN()
        train_digits(model, images, labels, epochs, batch_size, DEVICE)
    return _specs(model)


def _plain_argument(value, largest):
    """A constructor argument the test accepts: a bool, None, "same"/"valid", or numbers (tuples of them) in [-4, largest]."""
    if isinstance(value, tuple):
        return all(_plain_argument(item, largest) for item in value)
    return value is None or isinstance(value, bool) or value in ("same", "valid") or (isinstance(value, int | float) and -4 <= value <= largest)


def rebuilt(specs):
    """The test's own nn.Sequential (in eval mode, on the CPU) from layer_specs' data: the LAYERS only, at most PARAMETER_BUDGET parameters."""
    assert not isinstance(specs, str), specs
    layers = []
    for name, args, state in specs:
        assert name in LAYERS, f"DigitsCNN holds a {name}: only {', '.join(LAYERS)} are allowed"
        kind, names = LAYERS[name]
        plain = all(_plain_argument(value, 4 if arg == "padding" else PARAMETER_BUDGET) for arg, value in args.items())
        assert set(args) == set(names) and plain, f"the {name}'s arguments {args} are not plain sizes"
        bias = {"bias": "bias" in state} if name in ("Conv2d", "Linear") else {}  # with a bias where the student's layer had one
        layers.append(kind(**args, **bias, device="meta") if name in ("Conv2d", "BatchNorm2d", "Linear") else kind(**args))
    model = nn.Sequential(*layers)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    assert parameters <= PARAMETER_BUDGET, f"DigitsCNN has {parameters:,} parameters; at most {PARAMETER_BUDGET:,} allowed"
    # Two real convolutions: a token 1 x 1 convolution before a linear layer is logistic regression, which reached
    # 95.0-97.5 % on five drawn tasks (a CNN of the seed's shape 97.2-99.7 %): the accuracy alone cannot tell them apart.
    spatial = [layer for layer in layers if isinstance(layer, nn.Conv2d) and min(layer.kernel_size) >= 3 and layer.out_channels >= 8]
    assert len(spatial) >= 2, ("DigitsCNN needs at least two nn.Conv2d layers with kernels of 3 x 3 or more and at least 8 output channels "
                               f"(a CNN, as the seed's); it has {len(spatial)}")
    model.to_empty(device="cpu")
    for layer, (_, _, state) in zip(layers, specs):
        layer.load_state_dict(state)
    return model.eval()


# %% nbgrader={"grade_id": "digits_cnn", "solution": true}
class DigitsCNN(nn.Sequential):
    """(N, 1, 8, 8) images -> (N, 10) logits, built from the LAYERS only."""

    def __init__(self):
        ### BEGIN SOLUTION
        # Two conv-ReLU-pool stages (8 -> 4 -> 2 pixels), then one linear layer.
        super().__init__(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, 10))
        ### END SOLUTION


# %% nbgrader={"grade_id": "train_digits", "solution": true}
def train_digits(model, images, labels, epochs, batch_size, device):
    """Train ``model`` on images (N, 1, 8, 8) and labels (N,) for ``epochs`` epochs of shuffled mini-batches, on ``device``."""
    ### BEGIN SOLUTION
    images, labels = images.to(device), labels.to(device)
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(epochs):
        order = torch.randperm(len(images), device=device)
        for start in range(0, len(images), batch_size):
            batch = order[start:start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(images[batch]), labels[batch]).backward()
            optimizer.step()
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_digits_cnn", "grade": true, "points": 3}
"""A seeded DigitsCNN trained by train_digits on a task the test draws (digits held out, labels renamed) is right on 95% of the held-out digits."""
draw = random.SystemRandom().randrange(2 ** 31)  # drawn when graded: no answer can know which digits are held out, nor the labels' names
train_x, train_y, held_x, held_y = digits_task(draw)
train = check.answers_only(trained_specs, "DigitsCNN", "train_digits", seconds=TRAIN_BUDGET_SECONDS)
model = rebuilt(train(train_x, train_y, EPOCHS, BATCH_SIZE))
with torch.no_grad():
    logits = torch.cat([model(chunk) for chunk in held_x.split(20)])
assert tuple(logits.shape) == (HELD_OUT, 10), f"DigitsCNN should give (N, 10) logits, got shape {tuple(logits.shape)}"
accuracy = data.accuracy(logits, held_y)
print(f"held-out accuracy {accuracy:.1%} (task {draw})")
assert accuracy >= ACCURACY_NEEDED, f"the trained DigitsCNN is right on {accuracy:.1%} of the held-out digits; at least {ACCURACY_NEEDED:.0%} needed"


# %% [markdown]
# ## Question 4: a fast training step (4 points, 2 of them on a GPU)
#
# `plain_train_step` below is a training step as beginners write it: float32, the default memory format, and `loss.item()` every step, which makes the CPU wait for the GPU to finish before it may queue the next step.
# Write `fast_train_step(model, optimizer, x, y)` with the lecture's techniques: no host synchronisation (return the loss as a tensor, detached), mixed precision where it pays (`torch.autocast`: bfloat16 on a CPU; on a GPU, bfloat16 where it has bfloat16 units, `torch.cuda.is_bf16_supported(including_emulation=False)`, else float16 with a `torch.amp.GradScaler`), `channels_last` for the model and the batch on a GPU; the model may be converted on the first call.
# The optimizer you are given is `step_optimizer(model)`: SGD, fused on a GPU, so that a `GradScaler` can hand it its scale and its overflow check as tensors instead of reading them on the host.
#
# Graded:
# - the steps (1 point): from a seeded model, `TRAJECTORY_STEPS` = 4 steps, each on a fresh batch, move the parameters as `plain_train_step`'s four steps do (the test takes them in its own process): each step in the same direction (cosine similarity at least 0.98) and by a size within 15 %, which mixed precision allows;
# - no host syncs (1 point): the same four steps, checked as above, make no host read of a tensor's value (counted with `gpucourse.syncs.count_host_reads()` around each step: `.item()`, `float()`, `print`, a Python `if` on a tensor, ...). Try it: `with syncs.count_host_reads() as reads: fast_train_step(...)`, then `print(reads)`;
# - on a GPU, the speed (2 points): `STEPS` steps of `StepCNN` on a fresh batch of 8192 images of 16 × 16 at least 1.3× faster than with `plain_train_step`, every timed call's steps checked against the plain steps' (the same cosine and size rule).
#   That threshold is modelled, not yet measured (`gpucourse.thresholds`: at this batch both steps move activations through memory, in 4 bytes against 2: about 2× on the cards in `gpu_specs`: V100, T4, A100, L4, H100, H200); `scripts/gpu_check.sh` will calibrate it on the first GPU run.
#
# When graded, the steps run in a fresh process with only the setup cells and your answer cell: keep it self-contained (a `GradScaler` it creates at the top is fine).
#
# The answer cell below holds the function's first lines; in place of its `raise` line goes one step: zero the gradients, the loss under autocast, backward, the optimizer's step, then `return loss.detach()` (a tensor: no `.item()`, no host sync).
#
# About 15 lines.

# %% nbgrader={"grade_id": "step_setup", "locked": true}
STEPS = 10
TRAJECTORY_STEPS = 4


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


def step_optimizer(model):
    """SGD at 0.05; fused on a GPU, where GradScaler.step then passes it the scale and the overflow flag as tensors."""
    return torch.optim.SGD(model.parameters(), lr=0.05, fused=DEVICE.type == "cuda")


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


def flat_parameters(model):
    return torch.cat([parameter.detach().float().flatten().cpu() for parameter in model.parameters()])


# The functions below run where your answer cell ran too (when graded, a fresh process): what they call is bound
# when they are defined (the defaults), so a cell that rebinds those names later cannot change what they do.
def trajectory(step, seed, _model=StepCNN, _optimizer=step_optimizer, _batch=step_batch, _flat=flat_parameters,
               _count=syncs.count_host_reads):
    """TRAJECTORY_STEPS of ``step`` from a seeded StepCNN, each on a fresh batch: (how each step moved the parameters,
    a (TRAJECTORY_STEPS, n) tensor on the CPU; the host reads the steps made, as text)."""
    torch.manual_seed(seed)
    model = _model().to(DEVICE)
    optimizer = _optimizer(model)
    positions, reads = [_flat(model)], []
    for k in range(TRAJECTORY_STEPS):
        x, y = _batch(seed=1000 * seed + k)
        with _count() as counted:
            step(model, optimizer, x, y)
        reads += [str(read) for read in counted]
        positions.append(_flat(model))
    return torch.stack(positions).diff(dim=0), reads


def fast_trajectory(seed, _trajectory=trajectory):
    """trajectory() of fast_train_step."""
    return _trajectory(fast_train_step, seed)


def steps_moved(step, x, y, _model=StepCNN, _optimizer=step_optimizer, _flat=flat_parameters):
    """STEPS of ``step`` from a fresh seeded StepCNN on (x, y): how far they moved its parameters (flat, on the CPU)."""
    torch.manual_seed(0)
    model = _model().to(x.device)
    optimizer, start = _optimizer(model), _flat(model)
    for _ in range(STEPS):
        step(model, optimizer, x, y)
    return _flat(model) - start


def plain_steps(x, y, _moved=steps_moved, _plain=plain_train_step):
    """The timed baseline: STEPS plain steps (a sync each)."""
    return _moved(_plain, x, y)


def fast_steps(x, y, _moved=steps_moved):
    """The timed answer: STEPS of fast_train_step."""
    return _moved(fast_train_step, x, y)


def check_moved(plain, fast, what="fast_train_step"):
    assert fast.shape == plain.shape, f"{what} changed the model's parameters' shapes: {tuple(fast.shape)} values, {tuple(plain.shape)} expected"
    cosine = float(F.cosine_similarity(plain, fast, dim=0))
    size = float(fast.norm() / plain.norm())
    assert cosine >= 0.98, f"{what} moved the parameters another way than plain_train_step (cosine similarity {cosine:.3f}, at least 0.98 needed)"
    assert 0.85 <= size <= 1.15, f"{what} moved the parameters {size:.2f}x as far as plain_train_step (0.85-1.15 allowed)"


def check_trajectory(seed, fast):
    """fast: fast_trajectory(seed)'s moves; each step moved the parameters as the plain step of the same number did (computed here)."""
    plain, _ = trajectory(plain_train_step, seed)
    assert tuple(fast.shape) == tuple(plain.shape), f"fast_trajectory gave moves of shape {tuple(fast.shape)}, expected {tuple(plain.shape)}"
    for k, (plain_move, fast_move) in enumerate(zip(plain, fast), 1):
        check_moved(plain_move, fast_move, what=f"step {k} of fast_train_step (a fresh batch each)")


# %% nbgrader={"grade_id": "fast_train_step", "solution": true}
### BEGIN SOLUTION
# bfloat16 keeps float32's range, so it needs no GradScaler. A GPU without bfloat16 units (T4, V100: emulation does not
# count) takes float16 and a scaler, which syncs unless the optimizer is fused: GradScaler.step reads its overflow flag
# with .item() before stepping any other optimizer (torch/amp/grad_scaler.py, _maybe_opt_step), and hands it to an
# optimizer with _step_supports_amp_scaling, which SGD(fused=True) sets (torch/optim/sgd.py), as a tensor instead;
# _fused_sgd_ and update()'s _amp_update_scale_ then skip or rescale on the GPU.
HALF = torch.float16 if torch.cuda.is_available() and not torch.cuda.is_bf16_supported(including_emulation=False) else torch.bfloat16
SCALER = torch.amp.GradScaler("cuda", enabled=HALF == torch.float16)
### END SOLUTION


def fast_train_step(model, optimizer, x, y):
    """One training step of ``model`` on the batch (x, y), without a host sync: returns the loss as a detached tensor."""
    ### BEGIN SOLUTION
    # Autocast (bfloat16, or float16 and the GradScaler on a GPU without bfloat16 units), channels_last on a GPU.
    on_gpu = x.is_cuda
    if on_gpu:
        model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=x.device.type, dtype=HALF if on_gpu else torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    SCALER.scale(loss).backward()  # disabled, the scaler passes the loss and the step through unchanged
    SCALER.step(optimizer)
    SCALER.update()
    return loss.detach()
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_fast_train_step", "grade": true, "points": 1}
"""Four fast_train_steps, each on a fresh batch, move the parameters as plain_train_step's four steps do (from the same model)."""
moves, _ = check.answers_only(fast_trajectory, "fast_train_step")(0)
check_trajectory(0, moves)
### BEGIN HIDDEN TESTS
moves, _ = check.answers_only(fast_trajectory, "fast_train_step")(3)
check_trajectory(3, moves)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_fast_train_step_no_syncs", "grade": true, "points": 1}
"""Four right fast_train_steps read no tensor's value on the host (counted around each step where only your answer cell ran)."""
moves, reads = check.answers_only(fast_trajectory, "fast_train_step")(1)
check_trajectory(1, moves)
assert reads == [], f"fast_train_step made {len(reads)} host read(s) in {TRAJECTORY_STEPS} steps, each a host sync on a GPU: " + "; ".join(reads[:5])

# %% nbgrader={"grade_id": "test_fast_train_step_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: STEPS fast_train_steps of StepCNN on a fresh batch of 8192 images are 1.3x faster than STEPS plain_train_steps, each timed call's steps checked."""
# Modelled, not yet measured (gpucourse.thresholds.train_step_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 1.3}
print(thresholds.describe("test_fast_train_step_speed", SPEEDUP_NEEDED))
moves, _ = check.answers_only(fast_trajectory, "fast_train_step")(2)  # first, right steps
check_trajectory(2, moves)
if gpucourse.device_class() != "cuda":
    print("needs a GPU: there the plain step waits for each loss, and moves its activations in float32")
else:
    seeds = itertools.count(1)

    def fresh_batch():
        return step_batch(8192, seed=next(seeds))

    def check_steps(args, output):  # every timed call: its steps moved the parameters as the plain steps on its batch do
        check_moved(steps_moved(plain_train_step, *args), torch.as_tensor(output), what=f"the timed call's {STEPS} steps")

    result = timing.compare_speed(plain_steps, check.answers_only(fast_steps, "fast_train_step"), fresh_batch, check=check_steps)
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
