# %% [markdown]
# # Assignment 09: LSTMs — a cell and a layer from scratch that match nn.LSTM, then fast the way cuDNN makes them fast
#
# This assignment checks the ideas of lecture 09 (`course/09_lstm.ipynb`).
# You will write an LSTM cell and a single-layer LSTM from scratch that give what `nn.LSTM` gives (values and gradients), a fast version with the lecture's optimisations (one GEMM for four gates, the input projection hoisted out of the time loop), and a bidirectional LSTM.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other shapes, dtypes and edge cases.
# - Everything but one item runs on a CPU; the fast LSTM's GPU speed item waits for a GPU regrade.
#
# **From scratch** means: your answer cells use torch's operators (`torch.*`, `torch.nn.functional`, tensor methods) and `math`, and no recurrent op of the library.
# Every graded item checks it: the test counts the ATen ops your function calls, and fails on any whose name holds `lstm`, `rnn` or `gru` (`torch.lstm`, `torch.lstm_cell`, `torch.rnn_tanh`, ...).
# It counts with `torch.compile` switched off (`torch.compiler.set_stance("force_eager")`), as your code calls the ops: compiled, the library's LSTM op would run as matrix products and pointwise ops, its name gone, so compiling a call of it hides nothing.
# When graded, your answer cells run in a fresh process that holds only this notebook's setup cells and your answer cells, where the grader's own profiler counts; each answer cell is checked before it runs (the message names a line that is not allowed): imports of `torch`, `torch.nn.functional` and `math` only, functions, literal constants, `torch.compile` with literal options; no `torch.nn` modules (`nn.LSTM`), no private names (`torch._VF`), no state kept between calls.
# Your answers may call each other (`lstm_forward` may call your `lstm_cell`), but not the baseline `lstm_forward_naive` below.
#
# Points: 15 autograded (2 of them on a GPU), 1 graded by hand.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import gpucourse
from gpucourse import check, thresholds, timing

DEVICE = gpucourse.device()
print(f"Running on {gpucourse.describe()} (device class {gpucourse.device_class()!r})")
torch.seed()  # fresh inputs on every run, the grader's too: no test's inputs (or what nn.LSTM answers on them) are known beforehand
RECURRENT_OPS = ("lstm", "rnn", "gru")  # an ATen op with one of these in its name is the library's recurrence


def lstm_params(input_size, hidden_size, *, dtype=torch.float32, device=None, scale=None):
    """Random (w_ih, w_hh, b_ih, b_hh) shaped as nn.LSTM stores them: (4H, I), (4H, H), (4H,), (4H,),
    the four gates stacked in PyTorch's order i, f, g, o; uniform in ±1/sqrt(H), as nn.LSTM initialises them."""
    device = DEVICE if device is None else device
    bound = 1 / math.sqrt(hidden_size) if scale is None else scale
    shapes = [(4 * hidden_size, input_size), (4 * hidden_size, hidden_size), (4 * hidden_size,), (4 * hidden_size,)]
    return tuple((torch.rand(shape, dtype=dtype, device=device) * 2 - 1) * bound for shape in shapes)


def lstm_inputs(steps, batch, input_size, hidden_size, *, dtype=torch.float32, device=None):
    """(x, h0, c0, w_ih, w_hh, b_ih, b_hh): x (T, N, I), h0 and c0 (1, N, H), as nn.LSTM takes them."""
    device = DEVICE if device is None else device
    x = torch.randn(steps, batch, input_size, dtype=dtype, device=device)
    h0, c0 = (torch.randn(1, batch, hidden_size, dtype=dtype, device=device) * 0.5 for _ in range(2))
    return (x, h0, c0, *lstm_params(input_size, hidden_size, dtype=dtype, device=device))


def torch_lstm(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """What nn.LSTM computes with these weights (the op it calls: oneDNN or ATen's loop on a CPU, cuDNN on a GPU)."""
    output, h_n, c_n = torch.lstm(x, (h0, c0), (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, False, False, False)
    return output, (h_n, c_n)


def lstm_forward_naive(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """The LSTM as its equations read: every step, every gate on its own, two matmuls and two bias adds a gate."""
    hidden = h0.shape[-1]
    w_i, w_h = w_ih.split(hidden), w_hh.split(hidden)  # per gate: (H, I) and (H, H)
    b_i, b_h = b_ih.split(hidden), b_hh.split(hidden)
    h, c = h0[0], c0[0]
    outputs = []
    for x_t in x:
        pre = [x_t @ w_i[k].T + b_i[k] + h @ w_h[k].T + b_h[k] for k in range(4)]
        i, f, g, o = torch.sigmoid(pre[0]), torch.sigmoid(pre[1]), torch.tanh(pre[2]), torch.sigmoid(pre[3])
        c = f * c + i * g
        h = o * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs), (h.unsqueeze(0), c.unsqueeze(0))


def tolerance(dtype):
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-10}


def exact(values):
    """The tensors in ``values`` (nested tuples too) in float64 on the CPU: the expected results are computed there, exactly
    (cuDNN may use TF32 tensor cores for float32 on a GPU, a thousandth off), then compared in the answer's dtype and device."""
    if isinstance(values, tuple | list):
        return type(values)(exact(value) for value in values)
    return values.detach().to("cpu", torch.float64)


def like(expected, example):
    return expected.to(example.device, example.dtype)


def _flat(result):
    """(output, (h_n, c_n)) -> [output, h_n, c_n]."""
    return [result[0], *result[1]]


def from_scratch(fn, *args, name):
    """fn(*args), after checking that the call runs no recurrent op of the library (counted by the grader when graded).
    Counted eager: torch.compile switched off, so a compiled function is counted as its code calls the ops
    (compiled, the library's LSTM op would run as matrix products and pointwise ops, no recurrent name among them)."""
    output, ops = check.counted_call(fn, *args, counter=check.top_level_ops, top_level=True, eager=True)
    used = sorted(op for op in ops if any(word in op.lower() for word in RECURRENT_OPS))
    assert not used, f"{name} calls {', '.join(used)}: write the recurrence yourself, without the library's recurrent ops"
    return output


def check_lstm(args, output, name):
    """output == (output, (h_n, c_n)) as nn.LSTM returns them for args."""
    expected, h_n, c_n = (like(value, args[0]) for value in _flat(torch_lstm(*exact(args))))
    assert isinstance(output, tuple | list) and len(output) == 2 and isinstance(output[1], tuple | list) and len(output[1]) == 2, \
        f"{name} should return (output, (h_n, c_n)), as nn.LSTM does; got {type(output).__name__}"
    where = f"{name} on x {tuple(args[0].shape)}, hidden {args[1].shape[-1]}, {args[0].dtype}"
    check.assert_close(output[0], expected, **tolerance(args[0].dtype), name=f"output of {where}")
    check.assert_close(output[1][0], h_n, **tolerance(args[0].dtype), name=f"h_n of {where}")
    check.assert_close(output[1][1], c_n, **tolerance(args[0].dtype), name=f"c_n of {where}")


# %% [markdown]
# ## Question 1: one LSTM step (3 points)
#
# Write `lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh)`: one step of an LSTM, returning `(h_next, c_next)` exactly as `nn.LSTMCell` computes them with the same weights, for `x` of shape `(N, I)`, `h` and `c` of shape `(N, H)`, and the weights shaped as PyTorch stores them (`w_ih` is `(4H, I)`, `w_hh` is `(4H, H)`, `b_ih` and `b_hh` are `(4H,)`; the gates are stacked in the order i, f, g, o):
#
# $$\begin{aligned} i &= \sigma(W_{ii} x + b_{ii} + W_{hi} h + b_{hi}) & f &= \sigma(W_{if} x + b_{if} + W_{hf} h + b_{hf}) \\ g &= \tanh(W_{ig} x + b_{ig} + W_{hg} h + b_{hg}) & o &= \sigma(W_{io} x + b_{io} + W_{ho} h + b_{ho}) \\ c' &= f \odot c + i \odot g & h' &= o \odot \tanh(c') \end{aligned}$$
#
# Any batch size (1 too), float32 and float64, on the inputs' device.
# Graded: the values against `nn.LSTMCell` on fresh inputs, the input size different from the hidden size (2 points); the same with hidden shapes and float64 (1 point).
#
# About 6 lines.

# %% nbgrader={"grade_id": "cell_setup", "locked": true} tags=["grader-side"]
# For the tests alone: when graded, this cell runs in the grader, where your answers cannot call what it defines.
def torch_lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """nn.LSTMCell's step with these weights."""
    cell = nn.LSTMCell(w_ih.shape[1], w_hh.shape[1], dtype=x.dtype, device=x.device)
    with torch.no_grad():
        for parameter, value in zip((cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh), (w_ih, w_hh, b_ih, b_hh)):
            parameter.copy_(value)
        return cell(x, (h, c))


def cell_inputs(batch, input_size, hidden_size, dtype=torch.float32):
    x = torch.randn(batch, input_size, dtype=dtype, device=DEVICE)
    h, c = (torch.randn(batch, hidden_size, dtype=dtype, device=DEVICE) * 0.5 for _ in range(2))
    return (x, h, c, *lstm_params(input_size, hidden_size, dtype=dtype))


def check_cell(args, output):
    expected = [like(value, args[0]) for value in torch_lstm_cell(*exact(args))]
    assert isinstance(output, tuple | list) and len(output) == 2, f"lstm_cell should return (h_next, c_next), got {type(output).__name__}"
    where = f"lstm_cell on x {tuple(args[0].shape)}, hidden {args[1].shape[-1]}, {args[0].dtype}"
    check.assert_close(output[0], expected[0], **tolerance(args[0].dtype), name=f"h_next of {where}")
    check.assert_close(output[1], expected[1], **tolerance(args[0].dtype), name=f"c_next of {where}")


# %% nbgrader={"grade_id": "lstm_cell", "solution": true}
def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """One LSTM step: x (N, I), h and c (N, H) -> (h_next, c_next), as nn.LSTMCell computes them."""
    ### BEGIN SOLUTION
    gates = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh  # (N, 4H): the four gates in one product each
    i, f, g, o = gates.chunk(4, dim=1)
    c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_next), c_next
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_lstm_cell", "grade": true, "points": 2}
"""lstm_cell matches nn.LSTMCell on fresh inputs (the input size differs from the hidden size), from scratch."""
for shape in [(4, 3, 5), (4, 3, 5), (2, 8, 6)]:
    args = cell_inputs(*shape)
    check_cell(args, from_scratch(lstm_cell, *args, name="lstm_cell"))

# %% nbgrader={"grade_id": "test_lstm_cell_hidden", "grade": true, "points": 1}
"""lstm_cell on other shapes: a batch of 1, float64, a hidden size larger than the input."""
args = cell_inputs(1, 4, 4, torch.float64)
check_cell(args, from_scratch(lstm_cell, *args, name="lstm_cell"))
### BEGIN HIDDEN TESTS
for shape, dtype in [((1, 7, 3), torch.float32), ((5, 2, 17), torch.float64), ((16, 32, 8), torch.float32), ((3, 1, 1), torch.float64)]:
    args = cell_inputs(*shape, dtype)
    check_cell(args, from_scratch(lstm_cell, *args, name="lstm_cell"))
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: an LSTM layer, values and gradients (4 points)
#
# Write `lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh)`: a single-layer LSTM over the sequence `x` of shape `(T, N, I)` (time first, as `nn.LSTM` takes it by default) from the states `h0` and `c0` of shape `(1, N, H)`, returning `(output, (h_n, c_n))` exactly as `nn.LSTM` returns them: `output` of shape `(T, N, H)` holds `h` after every step, `h_n` and `c_n` of shape `(1, N, H)` the last states.
# You may call your `lstm_cell`.
#
# Graded:
# - the values against `nn.LSTM` on fresh inputs (2 points; hidden tests: a single step, a batch of 1, float64, a long sequence);
# - the gradients (2 points): the test takes the gradient of a random weighted sum of your three outputs with respect to `x`, `h0`, `c0` and all four weights, and compares them with `nn.LSTM`'s. Autograd computes them through your ops, so they are right when your forward is built from differentiable ops; they go wrong if part of it is detached (`.detach()`, `.item()`, `torch.no_grad()`, values written into a tensor made beforehand with `.data`).
#
# About 8 lines.

# %% nbgrader={"grade_id": "forward_setup", "locked": true}
def lstm_gradients(args, weights):
    """The gradients of sum(output * weights[0]) + sum(h_n * weights[1]) + sum(c_n * weights[2]) through lstm_forward,
    with respect to every argument in args (x, h0, c0, w_ih, w_hh, b_ih, b_hh)."""
    leaves = [arg.detach().clone().requires_grad_(True) for arg in args]
    output, (h_n, c_n) = lstm_forward(*leaves)
    loss = (output * weights[0]).sum() + (h_n * weights[1]).sum() + (c_n * weights[2]).sum()
    return list(torch.autograd.grad(loss, leaves, allow_unused=True))


ARGUMENT_NAMES = ("x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh")


def check_gradients(args, gradients):
    """``gradients`` (lstm_gradients, run where only the setup cells and your answer cells ran) against nn.LSTM's."""
    leaves = [arg.requires_grad_(True) for arg in exact(args)]
    output, (h_n, c_n) = torch_lstm(*leaves)
    weights = [torch.randn_like(value) for value in (output, h_n, c_n)]
    expected = torch.autograd.grad((output * weights[0]).sum() + (h_n * weights[1]).sum() + (c_n * weights[2]).sum(), leaves)
    mine = gradients(args, [like(weight, args[0]) for weight in weights])
    for name, got, want in zip(ARGUMENT_NAMES, mine, (like(value, args[0]) for value in expected)):
        assert got is not None, f"the loss does not depend on {name} through lstm_forward: part of the forward is detached from autograd"
        check.assert_close(got, want, **tolerance(args[0].dtype), name=f"the gradient with respect to {name} (x {tuple(args[0].shape)})")


# %% nbgrader={"grade_id": "lstm_forward", "solution": true}
def lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """A single-layer LSTM: x (T, N, I), h0 and c0 (1, N, H) -> (output (T, N, H), (h_n, c_n)), as nn.LSTM returns them."""
    ### BEGIN SOLUTION
    h, c = h0[0], c0[0]
    outputs = []
    for x_t in x:
        h, c = lstm_cell(x_t, h, c, w_ih, w_hh, b_ih, b_hh)
        outputs.append(h)
    return torch.stack(outputs), (h.unsqueeze(0), c.unsqueeze(0))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_lstm_forward", "grade": true, "points": 2}
"""lstm_forward returns what nn.LSTM returns on fresh inputs, from scratch."""
for shape in [(5, 3, 4, 6), (5, 3, 4, 6), (3, 2, 7, 5)]:
    args = lstm_inputs(*shape)
    check_lstm(args, from_scratch(lstm_forward, *args, name="lstm_forward"), "lstm_forward")
### BEGIN HIDDEN TESTS
for shape, dtype in [((1, 4, 3, 5), torch.float32), ((6, 1, 5, 4), torch.float64), ((40, 3, 2, 3), torch.float64), ((7, 8, 16, 32), torch.float32)]:
    args = lstm_inputs(*shape, dtype=dtype)
    check_lstm(args, from_scratch(lstm_forward, *args, name="lstm_forward"), "lstm_forward")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_lstm_forward_gradients", "grade": true, "points": 2}
"""The gradients through lstm_forward, with respect to x, h0, c0 and the weights, match nn.LSTM's."""
args = lstm_inputs(4, 3, 5, 6, dtype=torch.float64)
from_scratch(lstm_forward, *args, name="lstm_forward")
gradients = check.answers_only(lstm_gradients, "lstm_forward", gated=True)  # when graded: where only your answer cells ran
check_gradients(args, gradients)
### BEGIN HIDDEN TESTS
check_gradients(lstm_inputs(1, 2, 3, 4, dtype=torch.float64), gradients)
check_gradients(lstm_inputs(9, 1, 2, 3, dtype=torch.float64), gradients)
### END HIDDEN TESTS

# %% [markdown]
# ## Question 3: a fast LSTM (6 points, 2 of them on a GPU)
#
# `lstm_forward_naive` (in the setup cell above) computes each gate on its own: 8 small matrix products and 8 bias adds every step.
# Write `lstm_forward_fast(x, h0, c0, w_ih, w_hh, b_ih, b_hh)`, with the same arguments and results as `lstm_forward`, using the lecture's optimisations:
# - **the input projection hoisted out of the time loop**: `x` is known for every step before the loop starts, so `x @ w_ih.T + b_ih + b_hh` for all T steps is one large matrix product (`(T·N, I) @ (I, 4H)`), which runs far faster than T small ones;
# - **one GEMM for the four gates** in the loop: `h @ w_hh.T` gives all four gates' recurrent parts at once (`torch.addmm` adds the precomputed input part in the same call);
# - the pointwise gate math kept to a few ops (`chunk` gives the four gates as views, without copies).
#
# Graded, each from scratch:
# - the values, as in question 2 (1 point);
# - each speed item below also checks that **the input projection is hoisted**: the grader runs your function on 16 steps and on 64 (the speed items' other sizes) and counts the ops that multiply the input by `w_ih`, however they are written (`@`, `addmm`, `einsum`, a broadcast multiply and a sum, one product of `[x_t, h]` with `[w_ih, w_hh]`: any op that reads something computed from `x` and something computed from `w_ih`; what it returns counts as computed from both, unless it is the whole projection `x @ w_ih.T` of every step, with or without the biases), and needs as many for 64 steps as for 16: hoisted, the one product before the loop; left in the loop, at least one a step;
# - the speed on the CPU (2 points): hoisted, and on fresh inputs of T = 64 steps, a batch of 8, 32 inputs and a hidden size of 64 in float32, at least 1.3× faster than `lstm_forward_naive` (the reference measured 1.6-2.8×, most often 2.3×, on one thread of a 2-core Intel Xeon; one GEMM for the four gates alone gives about 1.7×, but without the hoisting it gets no points);
# - against the library on the CPU (1 point): hoisted, and at least 0.06× the speed of `nn.LSTM`'s own op (`torch_lstm` above) on the same inputs, that is, within about 16× of it. On a CPU the library is faster than any from-scratch LSTM: with oneDNN (x86) its whole recurrence is one C++ call with no per-op overhead. The reference measured 0.17-0.24× of it on a quiet machine, `lstm_forward_naive` 0.08-0.09× (up to 0.13× on a busy one, where the library slows down more than Python's per-op overhead does); this item catches what is far from the library's algorithm, such as a loop over the batch (0.03×), or an input projection left in the loop;
# - on a GPU, the speed (2 points): hoisted, and at least 1.7× faster than `lstm_forward_naive` on T = 64 steps, a batch of 64, 256 inputs and a hidden size of 256 in float32. That threshold is modelled, not yet measured (`gpucourse.thresholds.lstm_speed`: each step of the naive version launches 29 kernels, the reference's 10, and both are launch-bound: 2.7-2.9× on the cards in `gpu_specs`: V100, T4, A100, L4, H100, H200); `scripts/gpu_check.sh` will calibrate it on the first GPU run.
#
# About 10 lines.

# %% nbgrader={"grade_id": "fast_setup", "locked": true}
def speed_inputs():
    """Fresh inputs of the CPU speed items: 64 steps, a batch of 8, 32 inputs, a hidden size of 64, float32.
    Small per step, as a character model's LSTM is: each step's ops cost more in overhead than in arithmetic."""
    return lstm_inputs(64, 8, 32, 64, device="cpu")


def check_timed(args, output):
    check_lstm(args, output, "lstm_forward_fast")


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list | dict):
        return [tensor for item in (value.values() if isinstance(value, dict) else value) for tensor in _tensors(item)]
    return []


class _InputProducts(TorchDispatchMode):
    """Counts the ops that multiply the input x by w_ih, however written (`@`, addmm, einsum, a broadcast multiply and a
    sum, one product of [x_t, h] with [w_ih, w_hh]): the ops that read something computed from x and something computed
    from w_ih. An op's result counts as computed from what its inputs were, except one that holds the input projection
    itself (x @ w_ih.T for every step, in any layout, all four gates or one, with or without the biases): computed from
    neither, so the loop may read it freely. One step's product, or x mixed with w_ih some other way, stays computed from
    both, and every op that reads it is counted too."""

    def __init__(self, x, h0, c0, w_ih, w_hh, b_ih, b_hh):
        super().__init__()
        product = x.reshape(-1, x.shape[-1]) @ w_ih.T
        projections = [block for bias in (0, b_ih, b_hh, b_ih + b_hh) for block in (product + bias, *(product + bias).chunk(4, dim=1))]
        self.projections = [value.flatten().sort().values for value in projections]  # in any layout: compared sorted
        self.sources, self.kept, self.count = {id(x): {"x"}, id(w_ih): {"w_ih"}}, [x, w_ih], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        sources = set().union(*(self.sources.get(id(value), ()) for value in _tensors((args, kwargs))))
        if sources >= {"x", "w_ih"}:
            self.count += 1
            if isinstance(output, torch.Tensor) and self._is_projection(output):
                sources = set()
        for value in _tensors(output) if sources else ():
            self.sources[id(value)] = sources
            self.kept.append(value)  # kept alive, so that no later tensor takes its id
        return output

    def _is_projection(self, value):
        candidates = [known for known in self.projections if known.numel() == value.numel()]
        values = value.detach().flatten().sort().values if candidates else None
        return any(torch.allclose(values, known, rtol=1e-4, atol=1e-5) for known in candidates)


def input_products(steps):
    """How many ops of one lstm_forward_fast call, on `steps` steps of the speed items' sizes, multiply the input by w_ih;
    torch.compile switched off, so a compiled function is counted as its code runs."""
    args = lstm_inputs(steps, 8, 32, 64, device="cpu")
    with torch.compiler.set_stance("force_eager"), _InputProducts(*args) as counter:
        lstm_forward_fast(*args)
    return counter.count


def check_hoisted(products):
    """The input projection is hoisted out of the time loop: ``products`` (input_products, run where only the setup
    cells and your answer cells ran) finds as many ops multiplying x by w_ih for 64 steps as for 16."""
    short, long = products(16), products(64)
    assert long == short, (f"lstm_forward_fast reads the input and w_ih together in {long} ops for 64 steps and in {short} for 16: "
                           "hoist the input projection out of the time loop (one product for all the steps, before the loop)")


# %% nbgrader={"grade_id": "lstm_forward_fast", "solution": true}
def lstm_forward_fast(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """lstm_forward with the input projection hoisted out of the loop and one GEMM for the four gates a step."""
    ### BEGIN SOLUTION
    steps, batch, _ = x.shape
    hidden = h0.shape[-1]
    # Every step's input part of the gates, and both biases, in one large product before the loop.
    gates_x = torch.addmm(b_ih + b_hh, x.reshape(steps * batch, -1), w_ih.T).view(steps, batch, 4 * hidden)
    w_hh_t = w_hh.T
    h, c = h0[0], c0[0]
    outputs = []
    for t in range(steps):
        i, f, g, o = torch.addmm(gates_x[t], h, w_hh_t).chunk(4, dim=1)  # one GEMM a step for the four gates
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs), (h.unsqueeze(0), c.unsqueeze(0))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_lstm_forward_fast", "grade": true, "points": 1}
"""lstm_forward_fast returns what nn.LSTM returns on fresh inputs, from scratch."""
for shape in [(5, 3, 4, 6), (5, 3, 4, 6), (3, 2, 7, 5)]:
    args = lstm_inputs(*shape)
    check_lstm(args, from_scratch(lstm_forward_fast, *args, name="lstm_forward_fast"), "lstm_forward_fast")
### BEGIN HIDDEN TESTS
for shape, dtype in [((1, 4, 3, 5), torch.float32), ((6, 1, 5, 4), torch.float64), ((40, 3, 2, 3), torch.float64), ((7, 8, 16, 32), torch.float32)]:
    args = lstm_inputs(*shape, dtype=dtype)
    check_lstm(args, from_scratch(lstm_forward_fast, *args, name="lstm_forward_fast"), "lstm_forward_fast")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_lstm_fast_speed", "grade": true, "points": 2}
"""lstm_forward_fast hoists the input projection and is 1.3x faster than lstm_forward_naive on the CPU (T 64, N 8, I 32, H 64, float32), from scratch."""
SPEEDUP_NEEDED = {"cpu": 1.3, "cuda": 1.3}  # measured on the CPU on every machine
args = speed_inputs()
check_timed(args, from_scratch(lstm_forward_fast, *args, name="lstm_forward_fast"))
check_hoisted(check.answers_only(input_products, "lstm_forward_fast", gated=True))  # counted where only your answer cells ran
fast = check.torch_only(lstm_forward_fast)  # timed where it was counted: only the setup cells and your answer cells ran there
check.assert_measured_speedup(lambda: timing.compare_speed(lstm_forward_naive, fast, speed_inputs, check=check_timed, charge_cpu_time=True),
                              check.required_speedup(SPEEDUP_NEEDED), name="lstm_forward_fast vs lstm_forward_naive")

# %% nbgrader={"grade_id": "test_lstm_fast_vs_library", "grade": true, "points": 1}
"""lstm_forward_fast hoists the input projection and runs at least 0.06x as fast as nn.LSTM's own op on the CPU (the same inputs), from scratch."""
FRACTION_NEEDED = {"cpu": 0.06, "cuda": 0.06}  # measured on the CPU on every machine
args = speed_inputs()
check_timed(args, from_scratch(lstm_forward_fast, *args, name="lstm_forward_fast"))
check_hoisted(check.answers_only(input_products, "lstm_forward_fast", gated=True))  # counted where only your answer cells ran
fast = check.torch_only(lstm_forward_fast)
check.assert_measured_speedup(lambda: timing.compare_speed(torch_lstm, fast, speed_inputs, check=check_timed, charge_cpu_time=True),
                              check.required_speedup(FRACTION_NEEDED), name="lstm_forward_fast vs nn.LSTM's op")

# %% nbgrader={"grade_id": "test_lstm_fast_gpu_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: lstm_forward_fast hoists the input projection and is 1.7x faster than lstm_forward_naive (T 64, N 64, I 256, H 256, float32), from scratch."""
# Modelled, not yet measured (gpucourse.thresholds.lstm_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 1.7}
print(thresholds.describe("test_lstm_fast_gpu_speed", SPEEDUP_NEEDED))


def gpu_inputs():
    return lstm_inputs(64, 64, 256, 256, device=DEVICE)


args = lstm_inputs(5, 3, 4, 6)
check_lstm(args, from_scratch(lstm_forward_fast, *args, name="lstm_forward_fast"), "lstm_forward_fast")  # first, a correct answer
check_hoisted(check.answers_only(input_products, "lstm_forward_fast", gated=True))  # and a hoisted one
if gpucourse.device_class() != "cuda":
    print("needs a GPU: there each step's small ops are launch-bound kernels, and fewer of them pay most")
else:
    args = gpu_inputs()
    check_timed(args, from_scratch(lstm_forward_fast, *args, name="lstm_forward_fast"))
    result = timing.compare_speed(lstm_forward_naive, check.torch_only(lstm_forward_fast), gpu_inputs, check=check_timed)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="lstm_forward_fast vs lstm_forward_naive")

# %% [markdown]
# ## Question 4: a bidirectional LSTM (2 points)
#
# Write `bilstm_forward(x, h0, c0, params_fwd, params_bwd)`: what `nn.LSTM(input_size, hidden_size, bidirectional=True)` returns, for `x` of shape `(T, N, I)`, `h0` and `c0` of shape `(2, N, H)` (index 0 the forward direction, 1 the backward one), and `params_fwd`, `params_bwd` each a tuple `(w_ih, w_hh, b_ih, b_hh)` of one direction.
# The backward direction reads the sequence from its last step to its first.
# Return `(output, (h_n, c_n))`: `output` of shape `(T, N, 2H)`, where `output[t]` holds both directions' `h` *at step t* (forward's first, then backward's), and `h_n`, `c_n` of shape `(2, N, H)`, each direction's final state (for the backward direction, its state after reading step 0).
# You may call your `lstm_forward` or `lstm_forward_fast`.
# Graded: the values against `nn.LSTM(bidirectional=True)` on fresh inputs, from scratch (2 points; hidden tests: a single step, float64, a batch of 1).
#
# About 6 lines.

# %% nbgrader={"grade_id": "bidirectional_setup", "locked": true}
def bilstm_inputs(steps, batch, input_size, hidden_size, dtype=torch.float32):
    x = torch.randn(steps, batch, input_size, dtype=dtype, device=DEVICE)
    h0, c0 = (torch.randn(2, batch, hidden_size, dtype=dtype, device=DEVICE) * 0.5 for _ in range(2))
    return x, h0, c0, lstm_params(input_size, hidden_size, dtype=dtype), lstm_params(input_size, hidden_size, dtype=dtype)


def check_bilstm(args, output):
    x, h0, c0, fwd, bwd = exact(args)
    expected, h_n, c_n = (like(value, args[0]) for value in torch.lstm(x, (h0, c0), (*fwd, *bwd), True, 1, 0.0, False, True, False))
    x = args[0]
    assert isinstance(output, tuple | list) and len(output) == 2 and len(output[1]) == 2, "bilstm_forward should return (output, (h_n, c_n))"
    where = f"bilstm_forward on x {tuple(x.shape)}, hidden {h0.shape[-1]}, {x.dtype}"
    check.assert_close(output[0], expected, **tolerance(x.dtype), name=f"output of {where}")
    check.assert_close(output[1][0], h_n, **tolerance(x.dtype), name=f"h_n of {where}")
    check.assert_close(output[1][1], c_n, **tolerance(x.dtype), name=f"c_n of {where}")


# %% nbgrader={"grade_id": "bilstm_forward", "solution": true}
def bilstm_forward(x, h0, c0, params_fwd, params_bwd):
    """A bidirectional single-layer LSTM: x (T, N, I), h0 and c0 (2, N, H) -> (output (T, N, 2H), (h_n, c_n) (2, N, H))."""
    ### BEGIN SOLUTION
    out_fwd, (h_fwd, c_fwd) = lstm_forward_fast(x, h0[0:1], c0[0:1], *params_fwd)
    out_bwd, (h_bwd, c_bwd) = lstm_forward_fast(x.flip(0), h0[1:2], c0[1:2], *params_bwd)
    output = torch.cat([out_fwd, out_bwd.flip(0)], dim=2)  # the backward outputs back in the order of the steps
    return output, (torch.cat([h_fwd, h_bwd]), torch.cat([c_fwd, c_bwd]))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_bilstm_forward", "grade": true, "points": 2}
"""bilstm_forward returns what nn.LSTM(bidirectional=True) returns on fresh inputs, from scratch."""
for shape in [(5, 3, 4, 6), (5, 3, 4, 6), (4, 2, 3, 2)]:
    args = bilstm_inputs(*shape)
    check_bilstm(args, from_scratch(bilstm_forward, *args, name="bilstm_forward"))
### BEGIN HIDDEN TESTS
for shape, dtype in [((1, 3, 4, 5), torch.float32), ((6, 1, 2, 3), torch.float64), ((12, 4, 5, 7), torch.float64)]:
    args = bilstm_inputs(*shape, dtype)
    check_bilstm(args, from_scratch(bilstm_forward, *args, name="bilstm_forward"))
### END HIDDEN TESTS

# %% [markdown]
# ## Question 5: why an LSTM leaves a GPU idle (1 point, graded by hand)
#
# A CNN layer on a batch of images keeps a GPU busy; an LSTM layer of the same FLOPs often reaches a small fraction of the GPU's peak.
# Explain why, from the structure of the recurrence: what must finish before step t + 1 can start, what each step's matrix product looks like for a batch of 64 and a hidden size of 512 (how many blocks of threads it can fill, how many times the weights are read), and what cuDNN's persistent kernels do about it (Appleyard, Kocisky and Blunsom 2016; Diamos et al. 2016).
# Three to five sentences.

# %% [markdown] nbgrader={"grade_id": "lstm_gpu_answer", "solution": true, "grade": true, "points": 1}
# YOUR ANSWER HERE
#
# BEGIN SOLUTION
# Step t + 1 needs h_t, so the T steps run one after another, and each step is a small product: for a batch of 64 and H = 512, (64 × 512) @ (512 × 2048) is 134 MFLOP, a few microseconds of a GPU, with a launch or two and pointwise kernels around it.
# A matrix that small fills a few dozen thread blocks of the GPU's hundreds of slots, so most SMs idle, and every step reads the whole 4 MB weight matrix W_hh again from device memory for very little arithmetic per byte (the batch is the only reuse).
# Only the input projection (all steps at once) and the batch can be parallel; the launches and the weight reads are paid T times.
# cuDNN's persistent kernels launch once for the whole sequence: each block keeps its slice of W_hh in registers and shared memory for all T steps, and the blocks synchronise through a grid-wide barrier between steps, so the weights are read once and no launch is paid per step; cuDNN also fuses the pointwise gate math into the GEMM's epilogue and overlaps layers in a wavefront for stacked LSTMs.
# END SOLUTION
