# %% [markdown]
# # 09 · RNNs and LSTMs on the GPU: the recurrence from scratch, and what makes it fast
#
# A CNN's layers see a whole batch of images at once; a recurrent layer reads a sequence one step at a time, and each step needs the state the step before left behind.
# This lecture builds an RNN cell and an LSTM from scratch, matches them to PyTorch's `nn.RNN` and `nn.LSTM` (values and gradients), finds where their time goes, and applies, one at a time and measured, the optimisations of Appleyard, Kocisky and Blunsom, "Optimizing Performance of Recurrent Neural Networks on GPUs" (2016, arXiv 1604.01946), which NVIDIA built into cuDNN's LSTM.
# The layers are the ones seed 003 introduces: `nn.RNN`, `nn.LSTM` and a bidirectional LSTM.
#
# What you will learn:
#
# 1. the recurrence unrolled: why the time loop is sequential, and what can still run in parallel (the batch, the four gates, the input projection of every step);
# 2. an RNN cell and an LSTM from scratch, matched to `nn.RNN` and `nn.LSTM` by copying their weights (PyTorch's gate order i, f, g, o; `batch_first`), gradients included;
# 3. where an LSTM's time goes, from the profiler: many small matmuls and pointwise ops per step, each a kernel on a GPU;
# 4. the optimisations, each measured against `nn.LSTM`: one GEMM for the four gates, the input projection hoisted out of the loop, fused gate math, larger batches;
# 5. training: what backpropagation through time costs in time and memory, and truncated BPTT with a carried, detached state;
# 6. bidirectional and stacked LSTMs, and padded batches with `pack_padded_sequence`;
# 7. on a GPU: which cuDNN algorithm `nn.LSTM` gets (persistent kernels only under narrow conditions), `flatten_parameters()`, mixed precision for RNNs, and CUDA graphs against the launch cost of a step loop;
# 8. a character-level language model trained on Python's own source code, with its loss, perplexity and samples as it learns.
#
# Everything runs on a CPU for real, one thread; the GPU cells run where there is one and say what they show where there is not.
# Timings differ from machine to machine and from run to run, so every sentence below that states a measured outcome is printed by code from this run's numbers (`gpucourse.rnn` chooses the words).

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import collections
import inspect
import json.decoder
import string
import textwrap
import time
import warnings
from types import SimpleNamespace

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.profiler import ProfilerActivity, profile

import gpucourse
from gpucourse import gpu_specs, plots, rnn, thresholds, timing, widgets
from gpucourse.devices import compile_or_eager, compile_support

dev = gpucourse.device()
GPU = dev.type == "cuda"
THREADS = 1  # the CPU timings use one thread, so they do not depend on what else runs on this machine
torch.set_num_threads(THREADS)
torch.manual_seed(0)
WHERE = f"measured on {gpucourse.describe(torch.device('cpu'))}"
print(f"Running on {gpucourse.describe(dev)}; CPU timings with {THREADS} thread")

# %% [markdown]
# ## 1. The recurrence, unrolled
#
# A recurrent layer keeps a state and updates it with every element of the sequence: $h_t = f(x_t, h_{t-1})$.
# Drawn over time (unrolled), it is a chain of copies of one cell that share their weights:

# %%
fig, ax = plt.subplots(figsize=(9, 2.6))
plots.unrolled_recurrence(ax, steps=5)
plt.show()

# %% [markdown]
# The red arrows are the problem: step t + 1 cannot start before step t has produced $h_t$, so the T steps of a sequence run one after another, however many cores the machine has.
# What *can* run at once:
#
# - **the batch**: N sequences go through the same step together, so each step is a matrix product over the batch, not a vector product;
# - **the gates**: an LSTM computes four gates from the same $x_t$ and $h_{t-1}$, which stack into one matrix product instead of four;
# - **the input projections** (green): $W_{ih} x_t$ depends on $x_t$ alone, known for every step before the loop starts, so all T of them are one large GEMM outside the loop.
#
# ## 2. An RNN cell from scratch
#
# The plain (Elman) RNN of `nn.RNN`: $h_t = \tanh(W_{ih} x_t + b_{ih} + W_{hh} h_{t-1} + b_{hh})$.
# `nn.RNN` stores `weight_ih_l0` as (H, I) and `weight_hh_l0` as (H, H), so the products are `x @ W.T`; with `batch_first=True` its input is (N, T, I).

# %%
def rnn_scratch(x, h0, w_ih, w_hh, b_ih, b_hh):
    """A tanh RNN, batch first: x (N, T, I), h0 (N, H) -> the outputs (N, T, H)."""
    h, outputs = h0, []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


rnn_layer = nn.RNN(input_size=3, hidden_size=5, batch_first=True)
x, h0 = torch.randn(2, 7, 3), torch.randn(2, 5)
weights = (rnn_layer.weight_ih_l0, rnn_layer.weight_hh_l0, rnn_layer.bias_ih_l0, rnn_layer.bias_hh_l0)
mine, (theirs, _) = rnn_scratch(x, h0, *weights), rnn_layer(x, h0.unsqueeze(0))
torch.testing.assert_close(mine, theirs)
print("rnn_scratch matches nn.RNN: outputs", tuple(mine.shape), "max difference", f"{(mine - theirs).abs().max():.1e}")

# %% [markdown]
# The gradients come for free: autograd records the ops of the loop, and backpropagation through time is that record played backwards.
# Matched against nn.RNN's own backward pass, for the input and every weight:

# %%
x.requires_grad_(True)
target = torch.randn(2, 7, 5)
mine_grads = torch.autograd.grad(((rnn_scratch(x, h0, *weights) - target) ** 2).sum(), (x, *weights))
theirs_grads = torch.autograd.grad(((rnn_layer(x, h0.unsqueeze(0))[0] - target) ** 2).sum(), (x, *weights))
for name, a, b in zip(("x", "weight_ih", "weight_hh", "bias_ih", "bias_hh"), mine_grads, theirs_grads):
    torch.testing.assert_close(a, b)
    print(f"d loss / d {name:9s} matches, shape {tuple(a.shape)}")

# %% [markdown]
# ## 3. The LSTM
#
# A plain RNN forgets fast: its gradient through many tanh steps shrinks or explodes.
# The LSTM (Hochreiter and Schmidhuber, 1997) adds a cell state $c$ that is only scaled and added to, and four gates that decide what to keep, what to add and what to show:
#
# $$\begin{aligned} i_t &= \sigma(W_{ii} x_t + b_{ii} + W_{hi} h_{t-1} + b_{hi}) &&\text{input gate} \\ f_t &= \sigma(W_{if} x_t + b_{if} + W_{hf} h_{t-1} + b_{hf}) &&\text{forget gate} \\ g_t &= \tanh(W_{ig} x_t + b_{ig} + W_{hg} h_{t-1} + b_{hg}) &&\text{candidate} \\ o_t &= \sigma(W_{io} x_t + b_{io} + W_{ho} h_{t-1} + b_{ho}) &&\text{output gate} \\ c_t &= f_t \odot c_{t-1} + i_t \odot g_t, \qquad h_t = o_t \odot \tanh(c_t) \end{aligned}$$
#
# `nn.LSTM` stacks the four gates' weights in the order **i, f, g, o**: `weight_ih_l0` is (4H, I), `weight_hh_l0` is (4H, H), and each bias (4H,).
# First as the equations read, batch first, every gate on its own:

# %%
def gate_weights(w_ih, w_hh, b_ih, b_hh):
    """nn.LSTM's stacked weights as four (W_i, W_h, b_i, b_h), one per gate, in PyTorch's order i, f, g, o."""
    hidden = w_hh.shape[1]
    return list(zip(w_ih.split(hidden), w_hh.split(hidden), b_ih.split(hidden), b_hh.split(hidden)))


def lstm_per_gate(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """An LSTM, batch first, each gate computed on its own: x (N, T, I), h0 and c0 (N, H) -> the outputs (N, T, H)."""
    gates = gate_weights(w_ih, w_hh, b_ih, b_hh)
    h, c, outputs = h0, c0, []
    for t in range(x.shape[1]):
        i, f, g, o = (x[:, t] @ wi.T + bi + h @ wh.T + bh for wi, wh, bi, bh in gates)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def lstm_weights(lstm):
    return lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0


lstm = nn.LSTM(input_size=3, hidden_size=5, batch_first=True)
x, h0, c0 = torch.randn(2, 7, 3), torch.randn(2, 5), torch.randn(2, 5)
mine, (theirs, _) = lstm_per_gate(x, h0, c0, *lstm_weights(lstm)), lstm(x, (h0.unsqueeze(0), c0.unsqueeze(0)))
torch.testing.assert_close(mine, theirs)
mine_grads = torch.autograd.grad(mine.square().sum(), lstm_weights(lstm))
theirs_grads = torch.autograd.grad(theirs.square().sum(), lstm_weights(lstm))
for a, b in zip(mine_grads, theirs_grads):
    torch.testing.assert_close(a, b)
print("lstm_per_gate matches nn.LSTM(batch_first=True): outputs and the gradients of all four weights")

# %% [markdown]
# ## 4. Where the time goes
#
# Module 06's profiler on one forward pass of `lstm_per_gate` over 32 steps (a batch of 16, 64 inputs, a hidden size of 128), grouped by op.
# Each matrix product is small: (16 × 64) @ (64 × 128) is 2 · 16 · 64 · 128 = 0.26 MFLOP, and the last column shows what one call of each op cost here.
# The last line counts the ops of a step that compute something (matrix products, adds, products, sigmoid, tanh): on a GPU each of them launches a kernel, and the views between them (`x[:, t]`, `.T`) launch none.
# The course's GPU threshold model (`gpucourse.thresholds`, module 09's speed item) counts a step the same way, and the cell checks that the two counts agree.

# %%
SIZES = dict(batch=16, steps=32, inputs=64, hidden=128)


def lstm_problem(batch, steps, inputs, hidden, device="cpu"):
    """Fresh x (N, T, I), h0, c0 (N, H) and an nn.LSTM's weights, on ``device``."""
    layer = nn.LSTM(inputs, hidden, batch_first=True).to(device)
    x = torch.randn(batch, steps, inputs, device=device)
    h0, c0 = torch.zeros(batch, hidden, device=device), torch.zeros(batch, hidden, device=device)
    return (x, h0, c0, *(w.detach() for w in lstm_weights(layer)))


problem = lstm_problem(**SIZES)
lstm_per_gate(*problem)  # warm-up
with profile(activities=[ProfilerActivity.CPU]) as prof:
    lstm_per_gate(*problem)
events = [event for event in prof.key_averages() if event.key.startswith("aten::")]
top = sorted(events, key=lambda event: event.self_cpu_time_total, reverse=True)[:6]
total = sum(event.self_cpu_time_total for event in events)
print(f"{'op':16s} {'calls':>6s} {'per step':>9s} {'self CPU':>10s} {'per call':>9s}")
for event in top:
    print(f"{event.key:16s} {event.count:6d} {event.count / SIZES['steps']:9.1f} {event.self_cpu_time_total / 1e3:7.2f} ms "
          f"{event.self_cpu_time_total / event.count:6.1f} µs")
print(f"{sum(event.count for event in events)} ATen ops in all, {total / 1e3:.1f} ms of self CPU time, {WHERE}")
naive_kernels = rnn.kernel_ops_per_step(lstm_per_gate, lambda steps: lstm_problem(2, steps, 3, 4))
assert naive_kernels == thresholds.NAIVE_LSTM_STEP_KERNELS, (naive_kernels, thresholds.NAIVE_LSTM_STEP_KERNELS)
print(f"ops that launch a kernel on a GPU, per step of lstm_per_gate: {naive_kernels} (counted here; thresholds.NAIVE_LSTM_STEP_KERNELS agrees)")

# %% [markdown]
# On a GPU each of those kernels costs a launch of a few microseconds (module 06), and each small matmul fills a fraction of the GPU's SMs: at these sizes the per-step overhead, not the arithmetic, sets the time.
#
# ## 5. The optimisations, one at a time
#
# Each version below is `lstm_per_gate` with one more change, and each is checked against `nn.LSTM`:
#
# 1. **one GEMM for the four gates**: `h @ w_hh.T` with the stacked (4H, H) weight gives all four gates' recurrent parts at once, and `chunk(4)` splits them as views (no copies): a quarter of the matrix products, each four times as large, so the GEMM runs closer to its peak;
# 2. **the input projection hoisted**: `x @ w_ih.T + b_ih + b_hh` for every step at once, one (N·T, I) @ (I, 4H) GEMM before the loop, the largest and most efficient matrix product of the layer; the loop keeps one `addmm` a step. It removes most where the inputs are wide and the steps many;
# 3. **fused gate math**: the gate nonlinearities and the state update (the pointwise ops of a step) compiled into one kernel by `torch.compile`. It saves passes over memory and, on a GPU, kernel launches; but each compiled call has a fixed cost of its own (guards, the generated wrapper), so whether it pays depends on what the eager ops it replaces cost on the machine.

# %%
def lstm_one_gemm(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """One product each for the input and the recurrent parts of all four gates, every step."""
    h, c, outputs = h0, c0, []
    for t in range(x.shape[1]):
        i, f, g, o = (x[:, t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def lstm_hoisted(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """The input projection of every step in one GEMM before the loop; one addmm a step inside it."""
    batch, steps, _ = x.shape
    projected = torch.addmm(b_ih + b_hh, x.reshape(batch * steps, -1), w_ih.T).view(batch, steps, -1)
    h, c, outputs = h0, c0, []
    for t in range(steps):
        i, f, g, o = torch.addmm(projected[:, t], h, w_hh.T).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


@compile_or_eager(dynamic=True)  # one kernel for every batch and hidden size below, instead of a compile for each; eager where it cannot run
def gate_math(gates, c):
    """The pointwise part of a step, compiled: one generated kernel (C++ on a CPU, Triton on a GPU) instead of eager ops."""
    i, f, g, o = gates.chunk(4, dim=1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def lstm_fused(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """lstm_hoisted with the gate math of each step compiled into one kernel."""
    batch, steps, _ = x.shape
    projected = torch.addmm(b_ih + b_hh, x.reshape(batch * steps, -1), w_ih.T).view(batch, steps, -1)
    h, c, outputs = h0, c0, []
    for t in range(steps):
        h, c = gate_math(torch.addmm(projected[:, t], h, w_hh.T), c)
        outputs.append(h)
    return torch.stack(outputs, dim=1)


def library(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """nn.LSTM's own op with the same weights: oneDNN (x86) or ATen's loop on a CPU, cuDNN on a GPU."""
    return torch.lstm(x, (h0.unsqueeze(0), c0.unsqueeze(0)), (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, False, False, True)[0]


VERSIONS = {"per gate (as the equations read)": lstm_per_gate, "one GEMM for four gates": lstm_one_gemm,
            "+ input projection hoisted": lstm_hoisted, compile_support().label("+ fused gate math (torch.compile)"): lstm_fused,
            "nn.LSTM (library)": library}
small = lstm_problem(2, 5, 3, 4)
for fn in VERSIONS.values():
    torch.testing.assert_close(fn(*small), lstm_per_gate(*small), rtol=1e-5, atol=1e-6)
print("all", len(VERSIONS), "versions agree with one another and with nn.LSTM")
fast_kernels = rnn.kernel_ops_per_step(lstm_hoisted, lambda steps: lstm_problem(2, steps, 3, 4))
assert fast_kernels == thresholds.FAST_LSTM_STEP_KERNELS, (fast_kernels, thresholds.FAST_LSTM_STEP_KERNELS)
for name in list(VERSIONS)[:3]:
    print(f"{name:34s} {rnn.kernel_ops_per_step(VERSIONS[name], lambda steps: lstm_problem(2, steps, 3, 4)):3d} kernels a step on a GPU")

# %% [markdown]
# Each measured on one thread (`timing.measure`: the median of repeated calls, after a warm-up that compiles), 32 steps, first against the hidden size at a batch of 16, then against the batch at a hidden size of 128.
# Watch three things: whether each step down the list is faster than the one before it, how the time *per sequence* changes as the batch grows (a per-step cost is shared by the whole batch), and where the library stands: with oneDNN (on x86) `torch.lstm` runs the whole recurrence in one C++ call, with no Python and no dispatch per step.

# %%
def time_version(fn, **sizes):
    return timing.measure(fn, *lstm_problem(**sizes), warmup=2, min_run_time=0.05, num_threads=THREADS)


sweeps = {"hidden size H (batch 16)": ("hidden", (32, 64, 128, 256)), "batch N (H = 128)": ("batch", (1, 4, 16, 64))}
measured, noisy_points = {}, 0
fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.0))
for ax, (title, (key, values)) in zip(axes, sweeps.items()):
    for colour, (name, fn) in zip(plt.cm.tab10.colors, VERSIONS.items()):
        runs = [time_version(fn, **dict(SIZES, **{key: value})) for value in values]
        measured[title, name] = runs
        per_sequence = [1e3 * run.median / dict(SIZES, **{key: value})["batch"] for run, value in zip(runs, values)]
        ax.plot(values, per_sequence, color=colour, label=name)
        # A timing whose spread exceeds its median is drawn hollow: no conclusion rests on it.
        ax.scatter(values, per_sequence, edgecolors=colour, zorder=3, facecolors=["white" if run.too_noisy else colour for run in runs])
        noisy_points += sum(run.too_noisy for run in runs)
    ax.set_xscale("log", base=2)
    ax.set_xticks(values, [str(value) for value in values])
    ax.minorticks_off()
    plots.readable_log_axis(ax, "y")
    ax.set_xlabel(title)
    ax.set_ylabel("ms per sequence (32 steps)")
    ax.grid(True, which="both", alpha=0.3)
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
hollow = f"; hollow: too noisy ({noisy_points} points)" if noisy_points else ""
fig.suptitle(f"one LSTM layer's forward pass, float32, {WHERE}{hollow}", fontsize=9)
fig.tight_layout(rect=(0, 0.12, 1, 1))
plt.show()

at = ("hidden size H (batch 16)", 2)  # H = 128, batch 16
per_seq = {name: measured[at[0], name][at[1]].median / SIZES["batch"] for name in VERSIONS}
noisy = {name: measured[at[0], name][at[1]].too_noisy for name in VERSIONS}
names = list(VERSIONS)
for before, after in zip(names[:3], names[1:4]):
    print(rnn.compare_sentence(after, before, per_seq[after], per_seq[before], noisy=noisy[after] or noisy[before]))
fastest = min(names[:4], key=per_seq.get)
print(rnn.compare_sentence(names[4], f"the fastest from-scratch version ({fastest})", per_seq[names[4]], per_seq[fastest],
                           noisy=noisy[names[4]] or noisy[fastest]))
for name in (names[0], names[4]):
    runs = measured["batch N (H = 128)", name]
    print(rnn.batch_sentence(name, 1, runs[0].median, 64, runs[-1].median / 64))
print(f"(H = 128 and a batch of 16 for the comparisons, per sequence; {WHERE})")

# %% [markdown]
# ## 6. Training: backpropagation through time
#
# Everything timed so far is a forward pass. Training runs the recurrence backwards too: autograd replays the step loop from the last step to the first, and each forward matrix product becomes two (one for the gradient of its input, one for its weight), so the backward pass has about twice the forward's FLOPs.
# To replay it, autograd keeps every step's activations (gates, states) from the forward pass until the backward pass has used them: the memory grows with the sequence length.
# The cell times `nn.LSTM` and `lstm_hoisted` three ways (a forward without autograd, a forward recording for it, a forward and backward), and counts the bytes autograd keeps for `lstm_hoisted` at two lengths (`torch.autograd.graph.saved_tensors_hooks` sees every tensor it saves).

# %%
def training_times(forward, params, *inputs):
    """A forward without autograd, a forward recording for it, and a forward + backward: Timings of each."""
    def inference(*inputs):
        with torch.no_grad():
            return forward(*inputs)

    def backward(*inputs):
        return torch.autograd.grad(forward(*inputs).sum(), params)

    return [timing.measure(fn, *inputs, warmup=2, min_run_time=0.1, num_threads=THREADS) for fn in (inference, forward, backward)]


x, h0, c0, *scratch_weights = lstm_problem(**SIZES)
scratch_weights = [w.requires_grad_() for w in scratch_weights]
layer = nn.LSTM(SIZES["inputs"], SIZES["hidden"], batch_first=True)
runs = {"nn.LSTM (library)": training_times(lambda x: layer(x)[0], list(layer.parameters()), x),
        "lstm_hoisted (autograd through the loop)": training_times(lstm_hoisted, scratch_weights, x, h0, c0, *scratch_weights)}
for name, (inference, recording, train) in runs.items():
    print(rnn.backward_sentence(name, inference.median, recording.median, train.median))
    for run, what in zip((inference, recording, train), ("the inference forward", "the recorded forward", "forward + backward")):
        timing.warn_if_noisy(run, f"{name}, {what}")


def saved_bytes(steps):
    """Bytes of the tensors autograd saves for the backward pass of lstm_hoisted over ``steps`` steps."""
    x, h0, c0, *weights = lstm_problem(**dict(SIZES, steps=steps))
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda tensor: kept.append(tensor.nbytes) or tensor, lambda tensor: tensor):
        lstm_hoisted(x, h0, c0, *[w.requires_grad_() for w in weights])
    return sum(kept)


print(rnn.saved_sentence((32, 64), (saved_bytes(32), saved_bytes(64))), f"({WHERE})")

# %% [markdown]
# A long sequence therefore costs memory in proportion to its length, and one update per whole sequence.
# **Truncated BPTT** cuts a long text into chunks of a fixed length and backpropagates through one chunk at a time, while the *values* of the state still flow from one chunk into the next; section 9 trains that way.
#
# ## 7. Bidirectional and stacked LSTMs, and padded batches
#
# A **bidirectional** LSTM runs a second LSTM over the reversed sequence and concatenates both directions' outputs at each step, so each output sees the past and the future.
# The two directions are independent: they can run at the same time.
# A **stacked** LSTM (`num_layers=2`) feeds layer 1's outputs to layer 2: layer 2's step t needs only layer 1's step t, so once layer 1 is a few steps ahead both layers run at once, as a diagonal wavefront over (layer, step); this is the third of Appleyard et al.'s optimisations, across the whole network.

# %%
stacked = nn.LSTM(input_size=3, hidden_size=5, num_layers=2, bidirectional=True)
output, (h_n, c_n) = stacked(torch.randn(7, 2, 3))  # time first, as nn.LSTM takes it by default
print("output", tuple(output.shape), "= (T, N, 2·H): both directions at each step")
print("h_n", tuple(h_n.shape), "= (layers·directions, N, H)")
print("parameters:", ", ".join(name for name, _ in stacked.named_parameters() if name.startswith("weight")))

# %% [markdown]
# Real sequences have different lengths. Padding them to the longest wastes work: every step runs on the whole batch, pads included.
# `pack_padded_sequence` sorts the sequences by length and keeps, for each step, only those still running: the batch at step t shrinks as sequences end, so the LSTM does work for the real elements only.
# That is why sorting by length saves work: the sequences still running at step t are then the first `batch_sizes[t]` rows, one contiguous block that one GEMM can take.
# How much of the skipped work turns into time depends on the code each input reaches: the cell asks the profiler which one that was for each, and times both. On a GPU, cuDNN takes packed batches directly.

# %%
lengths = torch.tensor([100, 80, 60, 40, 30, 20, 10, 10] * 8)
layer = nn.LSTM(64, 128, batch_first=True)
padded = torch.randn(len(lengths), int(lengths.max()), 64)
packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
print("batch sizes at steps 1, 11, 21, 41, 61, 81:", packed.batch_sizes[[0, 10, 20, 40, 60, 80]].tolist())
work = float(lengths.sum() / padded[..., 0].numel())
print(f"work: {int(lengths.sum())} real steps against {padded.shape[0] * padded.shape[1]} padded ({work:.0%})")
with torch.no_grad():
    for what, batch in (("padded", padded), ("packed", packed)):
        ops = rnn.op_counts(layer, batch)
        path = "oneDNN's single call (aten::mkldnn_rnn_layer)" if "aten::mkldnn_rnn_layer" in ops else f"ATen's loop ({ops['aten::addmm']} addmm calls)"
        print(f"the {what} batch ran {path}")
    t_padded = timing.measure(layer, padded, warmup=1, min_run_time=0.1, num_threads=THREADS)
    t_packed = timing.measure(layer, packed, warmup=1, min_run_time=0.1, num_threads=THREADS)
    out_packed, _ = pad_packed_sequence(layer(packed)[0], batch_first=True)
    torch.testing.assert_close(out_packed[0], layer(padded[:1])[0][0])  # the longest sequence, unchanged by packing
print(rnn.compare_sentence("the packed batch", "the padded one", t_packed.median, t_padded.median, noisy=t_padded.too_noisy or t_packed.too_noisy),
      f"Skipping the pads alone would make it {1 / work:.2f}× as fast. ({WHERE})")

# %% [markdown]
# ## 8. On a GPU: launches, cuDNN's algorithms, mixed precision, graphs
#
# On a GPU the picture of section 4 gets worse: every op that section 4 counted is a kernel of a few microseconds, so a 32-step layer pays hundreds of launches for very little arithmetic, and the GPU idles between them.
# The optimisations above cut the launches per step (section 5 counted them for each version); the rest is cuDNN's:
#
# - Appleyard, Kocisky and Blunsom (2016) report an order of magnitude speedup over a naive implementation across a range of network sizes, from three stages now in cuDNN (since its version 5): a single cell (the gates in one GEMM, the pointwise math fused), a single layer (the input GEMMs of all steps hoisted and batched, the weights' layout chosen once), and the whole network (the layers overlapped in a wavefront);
# - persistent RNN kernels (Diamos et al., "Persistent RNNs: Stashing Recurrent Weights On-Chip", ICML 2016): one kernel for the whole sequence, each thread block holding its slice of $W_{hh}$ in registers and shared memory for all T steps and synchronising with the other blocks between steps, so the weights are read from memory once and no launch is paid per step.
#
# These are reported figures, not measured here. Whether `nn.LSTM` gets a persistent kernel is PyTorch's choice, made in `get_algo` in its source file aten/src/ATen/native/cudnn/RNN.cpp:
#
# - `CUDNN_RNN_ALGO_STANDARD` (no persistent kernel) for an LSTM with projections (`proj_size`) and for packed input;
# - `CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H` (`use_rnn_persist_small_h`, cuDNN 8.2.1 or later) for any dtype but float64 on sm60 or newer, when the hidden size is small: H ≤ 192 for an LSTM's or GRU's forward pass, H ≤ 128 for its backward (H ≤ 384 and 256 for a plain RNN);
# - `CUDNN_RNN_ALGO_PERSIST_STATIC` only for **float16** input that passes `use_persist_common_heuristics` (one layer, unidirectional, H ≤ 1024, H and I multiples of 128) and `use_persist_device_heuristics`:
#   - on sm70 (V100) a batch that is 8 or a multiple of 16 other than 80 and 112, with at least 40 steps for N ≤ 128, 20 for N ≤ 96 or 10 for N ≤ 32;
#   - on sm80 and newer with at least 98 SMs (not sm86), an LSTM's batch a multiple of 8 up to 128 (GRUs excluded);
#   - nowhere else (Turing, sm75, is excluded by name);
# - `CUDNN_RNN_ALGO_STANDARD` for everything else: float32 with H > 192, say.
#
# `gpucourse.rnn.cudnn_algo` transcribes those conditions; the table applies them to the cards of `gpucourse.gpu_specs` (modelled from the source, not measured).

# %%
CARDS = list(gpu_specs.GPUS.values())
SHORT = {rnn.STANDARD: "standard", rnn.PERSIST_STATIC: "persist", rnn.SMALL_H: "small-H"}
CONFIGS = {"float32, H = I = 256, N = T = 64": dict(dtype="float32", hidden=256, inputs=256, batch=64, steps=64),
           "float16, the same sizes": dict(dtype="float16", hidden=256, inputs=256, batch=64, steps=64),
           "float16, N = 256": dict(dtype="float16", hidden=256, inputs=256, batch=256, steps=64),
           "float16, H = 320": dict(dtype="float16", hidden=320, inputs=256, batch=64, steps=64),
           "float32, H = 128 (section 9's)": dict(dtype="float32", hidden=128, inputs=32, batch=32, steps=64)}
print("cuDNN algorithm for nn.LSTM, forward / backward, modelled from PyTorch's get_algo (aten/src/ATen/native/cudnn/RNN.cpp)")
for label, config in CONFIGS.items():
    algos = {card.name: "/".join(SHORT[rnn.cudnn_algo(card, forward=forward, **config)] for forward in (True, False)) for card in CARDS}
    groups = {algo: [name for name, got in algos.items() if got == algo] for algo in dict.fromkeys(algos.values())}
    print(f"{label:32s}", "; ".join(f"{algo} on {', '.join(names)}" for algo, names in groups.items()))
misses = rnn.persist_static_misses(gpu_specs.gpu("A100"), **CONFIGS["float32, H = I = 256, N = T = 64"])
print("this section's float32 run on an A100 misses PERSIST_STATIC because:", "; ".join(misses))

# %% [markdown]
# cuDNN wants all of a layer's weights in one contiguous buffer, in its own layout.
# `nn.LSTM` keeps them so: moving the module to the GPU (`.to()`, `.cuda()`) calls `flatten_parameters()` (torch/nn/modules/rnn.py: `_apply`, then `_init_flat_weights`), which copies every weight into one cuDNN buffer and makes each parameter a view into it.
# Anything that replaces a weight's storage afterwards (assigning `.data`, some weight-sharing and replication tricks) breaks that, and each call then warns, in RNN.cpp's words: "RNN module weights are not part of single contiguous chunk of memory. This means they need to be compacted at every call, possibly greatly increasing memory usage. To compact weights again call flatten_parameters()."
# The `library` function of section 5 passes separate weight tensors to `torch.lstm`, so on a GPU it pays that copy on every call; the GPU timings below use a module instead.
# On a CPU `flatten_parameters()` does nothing (`torch.nn.RNNBase.flatten_parameters` returns at once unless the weights are CUDA tensors that cuDNN accepts).

# %%
def warnings_from(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(warning.message).split(".")[0] for warning in caught]


layer = nn.LSTM(256, 256, batch_first=True).to(dev)
x = torch.randn(64, 64, 256, device=dev)
addresses = [p.data_ptr() for p in layer.parameters()]
layer.flatten_parameters()
moved = addresses != [p.data_ptr() for p in layer.parameters()]
print(f"flatten_parameters() on {gpucourse.describe(dev)}: the weights {'moved' if moved else 'stayed where they were'}")
if gpucourse.gpu_or_explain("whether a module moved to the GPU warns (it should not), the warning once one weight's storage is replaced, "
                            "no warning after flatten_parameters(), and the inference time with the per-call copy and without it") and GPU:
    with torch.no_grad():
        print("flattened by .to():", warnings_from(lambda: layer(x)) or "no warning")
        layer.weight_hh_l0.data = layer.weight_hh_l0.data.clone()  # one weight moved out of the shared buffer
        print("one weight's storage replaced:", warnings_from(lambda: layer(x)) or "no warning")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the copy's warning would be printed for every timed call
            copied = timing.measure(layer, x, warmup=3, min_run_time=0.2)
        layer.flatten_parameters()
        print("after flatten_parameters():", warnings_from(lambda: layer(x)) or "no warning")
        flat = timing.measure(layer, x, warmup=3, min_run_time=0.2)
    print(rnn.compare_sentence("flattened weights", "weights copied every call", flat.median, copied.median, noisy=flat.too_noisy or copied.too_noisy),
          f"(measured on {flat.device})")

# %% [markdown]
# **Mixed precision.** `torch.autocast` runs each op in the precision PyTorch's AMP documentation lists for it ("Autocast Op Reference" on the `torch.amp` page):
#
# - on CUDA, the matrix products (`mm`, `addmm`, `matmul`, `linear`) and the cells `LSTMCell`, `GRUCell`, `RNNCell` autocast to float16; `cross_entropy`, `log_softmax`, `exp`, `sum` and the other losses and reductions to float32. A whole `nn.LSTM` layer is not in that list: its cuDNN op `_cudnn_rnn` has an autocast wrapper of its own (aten/src/ATen/cudnn/AutocastRNN.cpp) that casts the input, the states and the weights to float16 and flattens the weights into one float16 buffer, and float16 is what `PERSIST_STATIC` asks for;
# - on the CPU, `mm`, `addmm`, `linear`, `matmul` and `mkldnn_rnn_layer` (oneDNN's LSTM) autocast to bfloat16, and `cross_entropy_loss` and `nll_loss` to float32;
# - ops in neither list (`embedding`, `sigmoid`, `tanh`, `add`, `mul`) run in the dtype of their inputs, and a mixed `add` or `mul` promotes to float32.
#
# With float16 gradients can underflow, so a float16 training step scales the loss with `torch.amp.GradScaler` (NVIDIA's "Train With Mixed Precision" guide, loss scaling); bfloat16 has float32's range and needs none.
# The cell runs a tiny language model and one from-scratch LSTM step under the CPU's bfloat16 autocast and prints the dtype each op produced; on a GPU it also times a float16 training step of `nn.LSTM` against float32.

# %%
tokens = torch.randint(96, (4, 16))
embed, layer, head = nn.Embedding(96, 32), nn.LSTM(32, 128, batch_first=True), nn.Linear(128, 96)
x, h0, c0, w_ih, w_hh, b_ih, b_hh = lstm_problem(4, 1, 32, 128)
with torch.autocast("cpu", dtype=torch.bfloat16):
    embedded = embed(tokens)
    outputs = layer(embedded)[0]
    logits = head(outputs)
    gates = torch.addmm(b_ih + b_hh, h0, w_hh.T)
    i, f, g, o = gates.chunk(4, dim=1)
    produced = {"embedding": embedded, "nn.LSTM (mkldnn_rnn_layer)": outputs, "linear": logits,
                "cross_entropy": F.cross_entropy(logits.flatten(0, 1), tokens.flatten()), "addmm (a step's gates)": gates,
                "sigmoid(f)": torch.sigmoid(f), "c = f·c + i·g (c0 float32)": torch.sigmoid(f) * c0 + torch.sigmoid(i) * torch.tanh(g)}
for op, tensor in produced.items():
    print(f"{op:30s} {str(tensor.dtype).removeprefix('torch.')}")
print(f"(dtypes under torch.autocast('cpu', dtype=torch.bfloat16), {WHERE})")

if gpucourse.gpu_or_explain("the dtype nn.LSTM's output has under float16 autocast, the cuDNN algorithm the model gives this GPU, "
                            "and the time of a float16 training step (with GradScaler) against a float32 one") and GPU:
    layer, x = nn.LSTM(256, 256, batch_first=True).to(dev), torch.randn(64, 64, 256, device=dev)
    scaler = torch.amp.GradScaler("cuda")

    def train_step(half):
        with torch.autocast("cuda", dtype=torch.float16, enabled=half):
            output = layer(x)[0]
            loss = output.float().square().mean()
        scaler.scale(loss).backward() if half else loss.backward()
        return output.dtype

    properties = torch.cuda.get_device_properties(dev)
    card = SimpleNamespace(compute_capability=f"{properties.major}.{properties.minor}", sms=properties.multi_processor_count)
    algos = {dtype: [rnn.cudnn_algo(card, dtype=dtype, hidden=256, inputs=256, batch=64, steps=64, forward=forward) for forward in (True, False)]
             for dtype in ("float32", "float16")}
    print(f"output under autocast: {train_step(True)}; modelled algorithms (forward, backward): {algos}")
    single, half = (timing.measure(train_step, precision, warmup=3, min_run_time=0.2) for precision in (False, True))
    print(rnn.compare_sentence("the float16 step", "the float32 one", half.median, single.median, noisy=half.too_noisy or single.too_noisy),
          f"(measured on {half.device})")

# %% [markdown]
# **Launch overhead and CUDA graphs.** A step loop written in Python pays, for every op, the host's work to dispatch it and, on a GPU, a kernel launch; when the arithmetic is small, those fixed costs are the time.
# The cell measures the host's share on this CPU: `lstm_hoisted` at a size where the arithmetic is negligible (a batch of 1, H = 8), divided by the ops it runs.
# A CUDA graph (CUDA C++ Programming Guide, "CUDA Graphs"; `torch.cuda.graph` in PyTorch's "CUDA semantics" notes) records the kernels of the loop once and replays them all with one call, so neither the Python nor the per-kernel launch is paid again; `torch.compile(mode="reduce-overhead")` captures CUDA graphs for you (`torch.compile`'s documentation).
# A graph replays fixed shapes and addresses: the inputs are copied into the tensors it captured, and the outputs appear in the tensors it captured.
# On a GPU the cell then times every version there, the module's cuDNN call, and `lstm_hoisted` replayed as a graph.

# %%
tiny = lstm_problem(batch=1, steps=32, inputs=8, hidden=8)
host = timing.measure(lstm_hoisted, *tiny, warmup=2, min_run_time=0.1, num_threads=THREADS)
print(rnn.overhead_sentence(host.median, sum(rnn.kernel_ops(lstm_hoisted, *tiny).values()), gpu_specs.LAUNCH_OVERHEAD_SECONDS), f"({WHERE})")
timing.warn_if_noisy(host, "the tiny lstm_hoisted")

if gpucourse.gpu_or_explain("each version's time on the GPU, nn.LSTM's cuDNN call, and lstm_hoisted replayed as a CUDA graph against "
                            "the same code launched op by op") and GPU:
    gpu_sizes = dict(batch=64, steps=64, inputs=256, hidden=256)
    problem = lstm_problem(**gpu_sizes, device=dev)
    module = nn.LSTM(gpu_sizes["inputs"], gpu_sizes["hidden"], batch_first=True).to(dev)
    with torch.no_grad():
        for parameter, weight in zip(module.parameters(), problem[3:]):
            parameter.copy_(weight)  # into the flattened buffer: the module stays flat
        side = torch.cuda.Stream()  # warm up on a side stream before capture, as the CUDA semantics notes do
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                lstm_hoisted(*problem)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            graphed_output = lstm_hoisted(*problem)
        graph.replay()
        torch.testing.assert_close(graphed_output, lstm_hoisted(*problem))
        on_gpu = {name: fn for name, fn in VERSIONS.items() if fn is not library}
        on_gpu["nn.LSTM module (cuDNN, flattened)"] = lambda x, h0, c0, *weights: module(x, (h0[None], c0[None]))[0]
        gpu_times = {name: timing.measure(fn, *problem, warmup=3, min_run_time=0.2) for name, fn in on_gpu.items()}
        gpu_times["lstm_hoisted as a CUDA graph"] = timing.measure(graph.replay, warmup=3, min_run_time=0.2)
    for name, run in gpu_times.items():
        print(f"{name:40s} {1e3 * run.median:8.3f} ms per batch ({gpu_sizes}), measured on {run.device}")
    print(rnn.compare_sentence("the CUDA graph", "lstm_hoisted launched op by op", gpu_times["lstm_hoisted as a CUDA graph"].median,
                               gpu_times["+ input projection hoisted"].median))

# %% [markdown]
# ## 9. A character-level language model on Python's source code
#
# An LSTM that reads text one character at a time and learns to predict the next one.
# Its text ships with every Python installation: the source of four standard-library modules, about 100,000 characters of real code; the last tenth is held out, to measure how well the model predicts code it never trained on.
# The model: an embedding of each character, one `nn.LSTM` layer of 128 units, a linear layer to the characters' logits.
#
# It trains with **truncated BPTT**, the way char-rnn does: the training text is cut into 32 streams read side by side, and each step reads the next 64 characters of every stream, starting from the (h, c) the previous chunk ended with.
# Between chunks the state is *detached* (`h.detach()`, `c.detach()`): its values carry on, but the graph behind it is cut, so the backward pass stops at the chunk boundary.
# That bounds each update's time and memory by the chunk (section 6), while the state still brings in what the model read before.
# Without the detach the second chunk's graph reaches back into the first one's, whose saved tensors that chunk's backward pass has freed; the next cell shows what autograd says then.
# (`retain_graph=True` would silence it, and make every update backpropagate through all the text read so far.)

# %%
text = "".join(inspect.getsource(module) for module in (textwrap, string, json.decoder, collections))
chars = sorted(set(text))
index = {ch: i for i, ch in enumerate(chars)}
encoded = torch.tensor([index[ch] for ch in text])
split = len(encoded) * 9 // 10
print(f"{len(text):,} characters of Python's own source, {len(chars)} distinct; {split:,} to train on, {len(encoded) - split:,} held out")


class CharLSTM(nn.Module):
    """Characters -> logits of the next character: an embedding, one LSTM layer, a linear layer."""

    def __init__(self, vocab, embed=32, hidden=128):
        super().__init__()
        self.embed, self.lstm, self.head = nn.Embedding(vocab, embed), nn.LSTM(embed, hidden, batch_first=True), nn.Linear(hidden, vocab)

    def forward(self, tokens, state=None):
        output, state = self.lstm(self.embed(tokens), state)
        return self.head(output), state


STEPS, WINDOW, BATCH = 400, 64, 32
streams = encoded[:split][: split // BATCH * BATCH].view(BATCH, -1)  # row b: the b-th 32nd of the training text
chunks_per_pass = (streams.shape[1] - 1) // WINDOW


def chunk(k):
    """The k-th chunk of every stream: inputs (BATCH, WINDOW) and targets shifted by one character."""
    start = k % chunks_per_pass * WINDOW
    window = streams[:, start:start + WINDOW + 1]
    return window[:, :-1], window[:, 1:]


def chunk_loss(model, k, state):
    inputs, targets = chunk(k)
    logits, state = model(inputs, state)
    return F.cross_entropy(logits.reshape(-1, len(chars)), targets.reshape(-1)), state


demo, state = CharLSTM(len(chars)), None
try:
    for k in range(2):
        loss, state = chunk_loss(demo, k, state)  # no detach: chunk 1's graph hangs on to chunk 0's
        loss.backward()
    print("without detach: both chunks backpropagated (autograd raised nothing)")
except RuntimeError as error:
    print(f"without detach, chunk 1's backward pass failed: {str(error).split('.')[0]}.")

# %%
def held_out_loss(model, streams_held=8):
    """Mean cross-entropy (nats a character) over the held-out text, read as ``streams_held`` streams from a zero state."""
    held = encoded[split:][: (len(encoded) - split) // streams_held * streams_held].view(streams_held, -1)
    with torch.no_grad():
        logits, _ = model(held[:, :-1])
        return F.cross_entropy(logits.reshape(-1, len(chars)), held[:, 1:].reshape(-1)).item()


def sample(model, prompt="def ", length=160, temperature=0.8):
    """``length`` characters the model writes after ``prompt``, one at a time, each fed back in."""
    model.eval()
    tokens, state, out = torch.tensor([[index[ch] for ch in prompt]]), None, prompt
    with torch.no_grad():
        for _ in range(length):
            logits, state = model(tokens, state)
            tokens = torch.multinomial(F.softmax(logits[0, -1] / temperature, dim=0), 1).view(1, 1)
            out += chars[tokens.item()]
    model.train()
    return out


torch.manual_seed(0)
model = CharLSTM(len(chars))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
monitor = widgets.TrainingMonitor(STEPS, label=WHERE, unit="step")
started, state = time.perf_counter(), None
for step in range(STEPS):
    if step % chunks_per_pass == 0:
        state = None  # the streams start over: nothing to carry
    loss, state = chunk_loss(model, step, state)
    state = tuple(s.detach() for s in state)  # keep the values, cut the graph: backprop stops at this chunk's start
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if (step + 1) % 50 == 0:
        written = f"CharLSTM after step {step + 1}, temperature 0.8, prompt 'def ':\n{sample(model)}" if (step + 1) % 200 == 0 else None
        monitor.update(step + 1, {"training chunk": loss.item(), "held-out text": held_out_loss(model)}, sample=written)
seconds = time.perf_counter() - started
print(f"{STEPS} steps of {BATCH} × {WINDOW} characters in {seconds:.1f} s, {WHERE}")
print(rnn.perplexity_sentence("training chunk, last step", loss.item(), len(chars)))
print(rnn.perplexity_sentence("held-out text", held_out_loss(model), len(chars)))
print(f"\nCharLSTM after {STEPS} steps, temperature 0.8, prompt 'def ' (300 characters):\n{sample(model, length=300)}")

# %% [markdown]
# Perplexity is the exponential of the mean cross-entropy per character: the model is as unsure as if it chose uniformly among that many characters.
# Compare the samples at step 200 and step 400: which of indentation, `self`, `def`, brackets and spelling has the model picked up, and which not yet?
# Lower the temperature for safer, more repetitive text; raise it for more surprising text.
#
# ## Summary
#
# - A recurrent layer's steps are sequential; the batch, the four gates and the input projections are not, and every optimisation of an LSTM exploits one of them.
# - Each op of a step is a kernel on a GPU (section 4 counted them); one GEMM for the four gates and the hoisted input projection cut their number, fusion cuts the pointwise ones, and CUDA graphs remove what is left of the per-launch cost. Section 5 printed which of them paid on this CPU.
# - Training costs a backward pass of about twice the forward's FLOPs and memory that grows with the sequence; truncated BPTT (a detached state carried between chunks) bounds both.
# - The library's LSTM (oneDNN on a CPU, cuDNN on a GPU) removes the per-step overhead altogether; cuDNN's persistent kernels, which keep the weights on chip for the whole sequence, are chosen only under the narrow conditions of PyTorch's `get_algo`: float16 for most sizes, or a small hidden size.
# - Keep an `nn.LSTM`'s weights flattened (`flatten_parameters()`); under autocast its cuDNN call runs in float16.
# - Pack padded batches: sorted by length, each step runs only the sequences still going.
#
# The assignment (`assignments/09_lstm`) asks for an LSTM cell and layer from scratch that match `nn.LSTM` exactly, in its time-first layout, with gradients, then a fast version and a bidirectional one.
