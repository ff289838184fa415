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
# 3. where an LSTM's time goes, from the profiler: many small matmuls and pointwise ops per step;
# 4. the optimisations, each measured against `nn.LSTM`: one GEMM for the four gates, the input projection hoisted out of the loop, fused gate math, larger batches; on a GPU, cuDNN's persistent kernels;
# 5. bidirectional and stacked LSTMs, and padded batches with `pack_padded_sequence`;
# 6. a character-level language model trained on Python's own source code, with a live loss curve and samples as it learns.
#
# Everything runs on a CPU for real, one thread; the cells say what a GPU changes.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import collections
import inspect
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.profiler import ProfilerActivity, profile

import gpucourse
from gpucourse import plots, timing, widgets

dev = gpucourse.device()
GPU = dev.type == "cuda"
THREADS = 1  # the CPU timings use one thread, so they do not depend on what else runs on this machine
torch.set_num_threads(THREADS)
WHERE = f"measured on {gpucourse.describe(torch.device('cpu'))}"
print(f"Running on {gpucourse.describe(dev)}; CPU timings with {THREADS} thread")
torch.manual_seed(0)

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


rnn = nn.RNN(input_size=3, hidden_size=5, batch_first=True)
x, h0 = torch.randn(2, 7, 3), torch.randn(2, 5)
weights = (rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0)
mine, (theirs, _) = rnn_scratch(x, h0, *weights), rnn(x, h0.unsqueeze(0))
torch.testing.assert_close(mine, theirs)
print("rnn_scratch matches nn.RNN: outputs", tuple(mine.shape), "max difference", f"{(mine - theirs).abs().max():.1e}")

# %% [markdown]
# The gradients come for free: autograd records the ops of the loop, and backpropagation through time is that record played backwards.
# Matched against nn.RNN's own backward pass, for the input and every weight:

# %%
x.requires_grad_(True)
target = torch.randn(2, 7, 5)
mine_grads = torch.autograd.grad(((rnn_scratch(x, h0, *weights) - target) ** 2).sum(), (x, *weights))
theirs_grads = torch.autograd.grad(((rnn(x, h0.unsqueeze(0))[0] - target) ** 2).sum(), (x, *weights))
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
# Module 06's profiler on one forward pass of `lstm_per_gate` over 32 steps (a batch of 16, 64 inputs, a hidden size of 128), grouped by op:

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
print(f"{'op':16s} {'calls':>6s} {'per step':>9s} {'self CPU':>10s}")
for event in top:
    print(f"{event.key:16s} {event.count:6d} {event.count / SIZES['steps']:9.1f} {event.self_cpu_time_total / 1e3:8.2f} ms")
print(f"{sum(event.count for event in events)} ATen ops in all, {total / 1e3:.1f} ms of self CPU time, {WHERE}")

# %% [markdown]
# Eight matrix products a step (two per gate), each small: (16 × 64) @ (64 × 128) does 0.26 MFLOP, a few microseconds of work, with as much again in dispatch, allocation and the bias adds around it.
# On a GPU each of these ops is a kernel launch of a few microseconds (module 06), and each small matmul fills a fraction of the GPU's SMs: the per-step overhead, not the arithmetic, sets the time.
#
# ## 5. The optimisations, one at a time
#
# Each version below is `lstm_per_gate` with one more change, and each is checked against `nn.LSTM`:
#
# 1. **one GEMM for the four gates**: `h @ w_hh.T` with the stacked (4H, H) weight gives all four gates' recurrent parts at once, and `chunk(4)` splits them as views (no copies);
# 2. **the input projection hoisted**: `x @ w_ih.T + b_ih + b_hh` for every step at once, one (N·T, I) @ (I, 4H) GEMM before the loop, the largest and most efficient matrix product of the layer; the loop keeps one `addmm` a step;
# 3. **fused gate math**: the gate nonlinearities and the state update (about ten pointwise ops a step) compiled into one kernel by `torch.compile`.

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


@torch.compile(dynamic=True)  # one kernel for every batch and hidden size below, instead of a compile for each
def gate_math(gates, c):
    """The pointwise part of a step, compiled: one generated kernel (C++ on a CPU, Triton on a GPU) instead of ten ops."""
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
            "+ input projection hoisted": lstm_hoisted, "+ fused gate math (torch.compile)": lstm_fused,
            "nn.LSTM (library)": library}
small = lstm_problem(2, 5, 3, 4)
for name, fn in VERSIONS.items():
    torch.testing.assert_close(fn(*small), lstm_per_gate(*small), rtol=1e-5, atol=1e-6)
print("all", len(VERSIONS), "versions agree with one another and with nn.LSTM")

# %% [markdown]
# Each measured on one thread (`timing.measure`: the median of repeated calls, after a warm-up that compiles), 32 steps, first against the hidden size at a batch of 16, then against the batch at a hidden size of 128:

# %%
def seconds_per_sequence(fn, **sizes):
    problem = lstm_problem(**sizes)
    return timing.measure(fn, *problem, warmup=2, min_run_time=0.05, num_threads=THREADS).median / sizes["batch"]


sweeps = {"hidden size H (batch 16)": [dict(SIZES, hidden=h) for h in (32, 64, 128, 256)],
          "batch N (H = 128)": [dict(SIZES, batch=n) for n in (1, 4, 16, 64)]}
measured = {}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
for ax, (title, points) in zip(axes, sweeps.items()):
    x_values = [point["hidden"] if title.startswith("hidden") else point["batch"] for point in points]
    for name, fn in VERSIONS.items():
        times = [seconds_per_sequence(fn, **point) for point in points]
        measured[title, name] = times
        ax.plot(x_values, [1e3 * t for t in times], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(title)
    ax.set_ylabel("ms per sequence (32 steps)")
axes[0].legend(fontsize=7)
fig.suptitle(f"one LSTM layer's forward pass, float32, {WHERE}", fontsize=9)
plt.show()

at = ("hidden size H (batch 16)", 2)  # H = 128
base = measured[at[0], "per gate (as the equations read)"][at[1]]
for name in VERSIONS:
    print(f"{name:36s} {1e3 * measured[at[0], name][at[1]]:7.3f} ms a sequence, {base / measured[at[0], name][at[1]]:5.2f}x the per-gate version")

# %% [markdown]
# What the measurements say, on this CPU:
#
# - **One GEMM for four gates** is the first and largest step: a quarter of the matrix products, and each of them four times as large, so the library's GEMM runs closer to its peak.
# - **Hoisting the input projection** removes another product from every step and turns T small ones into one large one. It pays most where the inputs are wide and the steps many.
# - **Fusing the gate math with `torch.compile`** does *not* pay here: each compiled call costs tens of microseconds of Python, guards and C++ wrapper, more than the ten small eager ops it replaces at these sizes. On a GPU, where each of those ops is a separate kernel launch, fusing them into one kernel is what pays (section 7).
# - **Larger batches** cost almost nothing per sequence: the time per *sequence* falls as N grows, because a step's small matrix product gets taller for the same per-op overhead. The batch is the one dimension that is free parallelism.
# - **The library** is faster than all of them on a CPU. With oneDNN (on x86) `torch.lstm` runs the whole recurrence in one C++ call: no Python and no dispatch per step, the gate math fused, the weights reordered once for its GEMMs. A from-scratch LSTM can only approach it by removing overhead, which is what the next sections do on a GPU.
#
# ## 6. Bidirectional and stacked LSTMs, and padded batches
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
# How much of the skipped work turns into time depends on the library: on a CPU a packed batch runs ATen's step-by-step loop, not oneDNN's single call that the padded one gets, so the measurement below gains less than the work it skips; cuDNN takes packed batches directly.

# %%
lengths = torch.tensor([100, 80, 60, 40, 30, 20, 10, 10] * 8)
layer = nn.LSTM(64, 128, batch_first=True)
padded = torch.randn(len(lengths), int(lengths.max()), 64)
packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
print("batch sizes at steps 1, 11, 21, 41, 61, 81:", packed.batch_sizes[[0, 10, 20, 40, 60, 80]].tolist())
print(f"work: {int(lengths.sum())} real steps against {padded.shape[0] * padded.shape[1]} padded ({lengths.sum() / padded[..., 0].numel():.0%})")
with torch.no_grad():
    t_padded = timing.measure(layer, padded, warmup=1, min_run_time=0.1, num_threads=THREADS).median
    t_packed = timing.measure(layer, packed, warmup=1, min_run_time=0.1, num_threads=THREADS).median
    out_packed, _ = pad_packed_sequence(layer(packed)[0], batch_first=True)
    torch.testing.assert_close(out_packed[0], layer(padded[:1])[0][0])  # the longest sequence, unchanged by packing
print(f"padded batch {1e3 * t_padded:.1f} ms, packed {1e3 * t_packed:.1f} ms ({t_padded / t_packed:.2f}x), {WHERE}")

# %% [markdown]
# ## 7. On a GPU: launches, and cuDNN's persistent kernels
#
# On a GPU the picture of section 4 gets worse: each op of a step is a kernel of a few microseconds, and a step of `lstm_per_gate` launches about twenty of them, so a 32-step layer pays hundreds of launches for very little arithmetic; the GPU idles between them.
# The optimisations above cut the launches per step (one GEMM and one fused kernel instead of twenty); the rest is cuDNN's:
#
# - Appleyard, Kocisky and Blunsom (2016) report an order of magnitude speedup over a naive implementation across a range of network sizes, from three stages now in cuDNN (since its version 5): a single cell (the gates in one GEMM, the pointwise math fused), a single layer (the input GEMMs of all steps hoisted and batched, the weights' layout chosen once), and the whole network (the layers overlapped in a wavefront);
# - persistent RNN kernels (Diamos et al., "Persistent RNNs: Stashing Recurrent Weights On-Chip", ICML 2016): one kernel for the whole sequence, each thread block holding its slice of $W_{hh}$ in registers and shared memory for all T steps and synchronising with the other blocks between steps, so the weights are read from memory once and no launch is paid per step. That is what makes small batches efficient, where an ordinary GEMM per step would reread the weights T times.
#
# These are reported figures, not measured here. On a GPU, the next cell measures the same versions there.

# %%
if GPU:
    gpu_sizes = dict(batch=64, steps=64, inputs=256, hidden=256)
    problem = lstm_problem(**gpu_sizes, device=dev)
    for name, fn in VERSIONS.items():
        seconds = timing.measure(fn, *problem, warmup=3, min_run_time=0.2).median
        print(f"{name:36s} {1e3 * seconds:8.3f} ms per batch ({gpu_sizes}), measured on {gpucourse.describe(dev)}")
else:
    print("No GPU here: on one, each op of a step is a kernel launch, and cuDNN's fused, persistent kernels pull far ahead (section 7's reported figures).")

# %% [markdown]
# ## 8. A character-level language model on Python's source code
#
# An LSTM that reads text one character at a time and learns to predict the next one.
# Its text ships with every Python installation: the source of four standard-library modules, about 100,000 characters of real code.
# The model: an embedding of each character, one `nn.LSTM` layer of 128 units, a linear layer to the characters' logits; trained on random windows of 64 characters, 32 at a time.
# It trains for a fixed, small number of steps (400, about 6 s on one CPU thread), enough to learn indentation, `self`, `def` and brackets but not to spell; a few thousand steps write plausible code.

# %%
import json.decoder
import string
import textwrap

text = "".join(inspect.getsource(module) for module in (textwrap, string, json.decoder, collections))
chars = sorted(set(text))
index = {ch: i for i, ch in enumerate(chars)}
encoded = torch.tensor([index[ch] for ch in text])
print(f"{len(text):,} characters of Python's own source, {len(chars)} distinct")


class CharLSTM(nn.Module):
    """Characters -> logits of the next character: an embedding, one LSTM layer, a linear layer."""

    def __init__(self, vocab, embed=32, hidden=128):
        super().__init__()
        self.embed, self.lstm, self.head = nn.Embedding(vocab, embed), nn.LSTM(embed, hidden, batch_first=True), nn.Linear(hidden, vocab)

    def forward(self, tokens, state=None):
        output, state = self.lstm(self.embed(tokens), state)
        return self.head(output), state


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


STEPS, WINDOW, BATCH = 400, 64, 32
torch.manual_seed(0)
model = CharLSTM(len(chars))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
monitor = widgets.TrainingMonitor(STEPS, label=WHERE, unit="step")
started = time.perf_counter()
for step in range(1, STEPS + 1):
    starts = torch.randint(len(encoded) - WINDOW - 1, (BATCH,))
    windows = torch.stack([encoded[s:s + WINDOW + 1] for s in starts.tolist()])
    logits, _ = model(windows[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, len(chars)), windows[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if step % 50 == 0:
        monitor.update(step, loss.item(), sample=sample(model) if step % 200 == 0 else None)
print(f"{STEPS} steps in {time.perf_counter() - started:.1f} s; final loss {loss.item():.2f} nats a character "
      f"(a uniform guess: {torch.log(torch.tensor(len(chars) + 0.0)):.2f}); {WHERE}")
print(sample(model, length=300))

# %% [markdown]
# ## Summary
#
# - A recurrent layer's steps are sequential; the batch, the four gates and the input projections are not, and every optimisation of an LSTM exploits one of them.
# - One GEMM for the four gates, and the input projection hoisted into one large GEMM, pay on a CPU as on a GPU; fusing the gate math pays where ops are kernel launches (a GPU), not where they are cheap eager calls (a CPU at these sizes).
# - The library's LSTM (oneDNN on a CPU, cuDNN on a GPU) removes the per-step overhead altogether; on a GPU, cuDNN's persistent kernels also keep the weights on chip for the whole sequence.
# - Pack padded batches: sorted by length, each step runs only the sequences still going.
#
# The assignment (`assignments/09_lstm`) asks for an LSTM cell and layer from scratch that match `nn.LSTM` exactly, in its time-first layout, with gradients, then a fast version and a bidirectional one.
