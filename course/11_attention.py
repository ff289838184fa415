# %% [markdown]
# # 11 · Attention on the GPU: from the n × n score matrix to a FlashAttention-style kernel
#
# A transformer spends its time in matmuls and in attention, and attention is where this course's ideas meet: memory traffic (module 01's roofline, 03's sectors), fusion (06), tiling onto fast memory (07), reductions (04), and mixed precision (08).
# Written as three steps, attention stores an n × n matrix of scores for every head, and at long sequences that matrix, not the arithmetic, sets the time and the memory.
# FlashAttention (Dao, Fu, Ermon, Rudra and Ré, "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness", NeurIPS 2022; FlashAttention-2, Dao, 2023) computes the same result without ever storing it, thanks to one trick: a softmax that can be computed a block at a time.
#
# What you will learn:
#
# 1. attention as three steps, its FLOPs and bytes, and what the n × n score matrix costs in memory as n grows (measured on this CPU);
# 2. where the standard implementation sits on a GPU's roofline, against a tiled one (modelled for every card in `gpu_specs`);
# 3. the safe softmax, then the **online softmax**: a running maximum and a running sum, derived step by step and checked against torch;
# 4. the tiled forward pass (FlashAttention's Algorithm 1) in NumPy loops over blocks of keys and values: same values, memory that grows like n, not n² (measured);
# 5. the same forward as a Triton kernel (run in Triton's interpreter without a GPU);
# 6. `F.scaled_dot_product_attention` and its backends: what runs here, and what a GPU picks;
# 7. decoding with a KV cache: why generating one token at a time is bound by memory, and what batching buys (measured on a small model, modelled for Llama 2 7B);
# 8. mixed precision: why fp16 scores overflow without the running maximum, and why the sums stay in fp32.
#
# Everything runs on a CPU for real, one thread; the GPU cells run where there is one and say what they show where there is not.
# Every sentence below that states a measured outcome is printed by code from this run's numbers; the GPU figures are modelled from datasheets (`gpucourse.attention` says how) and labelled so.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import math
import time
import tracemalloc

import numpy as np
import torch
import torch.nn.functional as F

from gpucourse import kernels

GPU = torch.cuda.is_available()
try:
    kernels.use_triton_gpu_or_interpreter()  # before `import triton`: without a GPU, kernels run in its interpreter
    import triton
    import triton.language as tl
except ImportError as err:
    triton = None
    print(f"{err}; the Triton cell below will say what it would show.")

import matplotlib.pyplot as plt
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import gpucourse
from gpucourse import attention, gpu_specs, plots, timing, wording

THREADS = 1
torch.set_num_threads(THREADS)  # every CPU timing below uses one thread, so it does not depend on what else runs here
torch.manual_seed(0)
rng = np.random.default_rng(0)
dev = gpucourse.device()
WHERE = f"measured on {gpucourse.describe(torch.device('cpu'))}"
print(f"Running on {gpucourse.describe(dev)}")
print("Triton:", f"{triton.__version__}, " + ("compiling for this GPU" if GPU else "in its interpreter (TRITON_INTERPRET=1)")
      if triton else "missing")

# %% [markdown]
# ## 1. Attention in three steps, and the n × n matrix
#
# One head of attention takes queries Q, keys K and values V, each n × d (n positions, head dimension d), and computes
#
# $$S = \frac{Q K^\top}{\sqrt{d}}, \qquad P = \mathrm{softmax}(S) \text{ (row by row)}, \qquad O = P V.$$
#
# Row i of O is a weighted average of the rows of V, with weights from how well query i matches each key.
# In a model the tensors carry a batch and a head dimension in front, `(batch, heads, n, d)`, and every (batch, head) pair does the same work.
# Written as PyTorch's documentation writes its reference (`torch.nn.functional.scaled_dot_product_attention`, "Efficient implementation equivalent to the following"), each step is one op, and S and P are whole tensors:

# %%
def attention_three_steps(q, k, v):
    """q, k, v: (..., n, d) -> (..., n, d): scores, softmax, weighted sum, each a full tensor."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., n, n)
    weights = torch.softmax(scores, dim=-1)  # (..., n, n)
    return weights @ v


q, k, v = (torch.randn(2, 4, 100, 64) for _ in range(3))
ours, torchs = attention_three_steps(q, k, v), F.scaled_dot_product_attention(q, k, v)
print(f"(batch 2, 4 heads, n 100, d 64): largest difference from F.scaled_dot_product_attention {(ours - torchs).abs().max():.1e}")

# %% [markdown]
# The two matmuls do n·n·d multiply-adds each: **4·n²·d FLOPs** a head (the softmax adds a few per score, negligible beside them).
# The memory is the problem: S and P are n × n per head and per sequence.
# The cell below prints what one layer's scores take for a batch of 8 sequences and 32 heads, in fp16 (2 bytes a number), beside Q, K, V and O, which grow only like n:

# %%
BATCH, HEADS, D = 8, 32, 128
print(f"{'n':>7} {'scores S (one layer)':>22} {'Q, K, V and O':>15}")
for n in (1024, 4096, 16384, 65536):
    scores = attention.score_matrix_bytes(n, 2, heads=HEADS, batch=BATCH)
    print(f"{n:>7} {wording.binary_bytes(scores):>22} {wording.binary_bytes(4 * 2 * n * D * HEADS * BATCH):>15}")
h100 = gpu_specs.gpu("H100")
too_long = min(n for n in (1024, 4096, 16384, 65536) if attention.score_matrix_bytes(n, 2, heads=HEADS, batch=BATCH) > h100.memory_bytes)
print(f"An H100 has {wording.binary_bytes(h100.memory_bytes)}: at n = {too_long}, one layer's scores alone do not fit in it.")

# %% [markdown]
# On this CPU, the three-step version against n (one head, d = 64, float32), beside PyTorch's own `F.scaled_dot_product_attention`:
# the score matrix's bytes are printed beside each time.

# %%
SIZES = [256, 512, 1024, 2048]
three_steps_s, sdpa_s = [], []
for n in SIZES:
    q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
    three_steps_s.append(timing.measure(attention_three_steps, q, k, v, min_run_time=0.05, min_blocks=3, num_threads=THREADS).median)
    sdpa_s.append(timing.measure(F.scaled_dot_product_attention, q, k, v, min_run_time=0.05, min_blocks=3, num_threads=THREADS).median)
    print(f"n = {n:5d}: three steps {wording.ms(three_steps_s[-1])}, F.scaled_dot_product_attention {wording.ms(sdpa_s[-1])}, "
          f"S holds {wording.binary_bytes(attention.score_matrix_bytes(n, 4))}")
growth = (three_steps_s[-1] / three_steps_s[-2])
print(f"From n = {SIZES[-2]} to {SIZES[-1]} the three-step time grew {growth:.1f}x (n² predicts 4x); "
      f"at n = {SIZES[-1]}, PyTorch's fused version took {three_steps_s[-1] / sdpa_s[-1]:.1f}x less time ({WHERE}).")

fig, ax = plt.subplots(figsize=(6.4, 3.6))
plots.versus_size(ax, SIZES, np.array(three_steps_s) * 1e3, label="three steps", xlabel="sequence length n", ylabel="ms per call", logy=True)
plots.versus_size(ax, SIZES, np.array(sdpa_s) * 1e3, label="F.scaled_dot_product_attention", logy=True)
ax.set_title("One head, d = 64, float32, on this CPU")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. On a GPU's roofline: the bytes of S and P
#
# The standard implementation (Algorithm 0 of the FlashAttention paper) runs the three steps as separate kernels, so S goes to device memory (HBM) and back, and so does P: **4·n² numbers moved** on top of the 4·n·d of Q, K, V and O.
# Its arithmetic intensity tends to 4·n²·d / (4·n²·bytes) = d / bytes FLOPs per byte: 64 for fp16 at d = 128, far below the ridge point of a tensor-core GPU.
#
# A tiled implementation keeps a block of queries on chip while every block of keys and values streams past it (section 5 shows how): Q is read once and O written once, and K and V are read once per block of queries.
# With blocks of 128 queries (FlashAttention-2 picks 64 or 128 by head dimension and shared memory, its §3.3, "Tuning block sizes") that is 2·n·d·(1 + n/128) numbers and no n² term: an intensity of about 128 FLOPs per byte in fp16, whatever n.
#
# Re-reading K and V once per block of queries is the tiled kernel's own traffic, and how much of it reaches HBM depends on the L2 cache: the blocks of queries run at the same time read the same K and V blocks, and one head's K and V at n = 8192, d = 128 (4 MiB in fp16) fit in an A100's 40 MB of L2.
# So the model below (`gpucourse.attention`: a roofline, `max(FLOPs / peak, bytes / bandwidth)`) gives the tiled kernel two bounds: every re-read from HBM (no help from L2), and K and V read from HBM once (every re-read served by L2, `block_q = n`).
# It times one head at n = 8192, d = 128, in fp16 on tensor cores, on every card in `gpu_specs`:

# %%
N, D, FP16 = 8192, 128, 2
flops = attention.forward_flops(N, D)
TRAFFIC = {"standard": attention.standard_bytes(N, D, FP16), "tiled, no L2": attention.tiled_bytes(N, D, FP16),
           "tiled, K and V once": attention.tiled_bytes(N, D, FP16, block_q=N)}
gains = {}
for card in gpu_specs.GPUS.values():
    times = {name: attention.roofline_seconds(card, flops, nbytes, "fp16") for name, nbytes in TRAFFIC.items()}
    gains[card.name] = [times["standard"][0] / times[name][0] for name in ("tiled, no L2", "tiled, K and V once")]
    print(f"{card.name:>5}: " + ", ".join(f"{name} {seconds * 1e6:6.1f} µs ({bound}-bound)" for name, (seconds, bound) in times.items())
          + " (modelled)")
low, high = min(g[0] for g in gains.values()), max(g[1] for g in gains.values())
print(f"Modelled, the tiled forward takes {low:.1f}x less time than the standard one at n = {N} with no help from L2, and up to "
      f"{high:.1f}x less when L2 serves the re-reads ({max(gains, key=lambda name: gains[name][1])}): the same FLOPs, without the n² bytes.")

fig, ax = plt.subplots(figsize=(6.4, 4.0))
card = gpu_specs.gpu("H100")
peak = gpu_specs.peak_flops(card, "fp16")
points = []
for name, nbytes in TRAFFIC.items():
    seconds, _ = attention.roofline_seconds(card, flops, nbytes, "fp16")
    points.append((name, flops / nbytes, flops / seconds))
plots.roofline(ax, peak, card.memory_bandwidth, label="H100, fp16 tensor cores (reported)", points=points, intensity_range=(16, 65536))
ax.set_title(f"Attention forward, n = {N}, d = {D}, fp16: modelled")
ax.legend(loc="lower right")
plt.tight_layout()
plt.show()

# %% [markdown]
# The model ignores the L2 cache, which on a real card serves part of the repeated K and V reads, so the tiled kernel does better than the dashed roofline says; FlashAttention-2 reports 50-73 % of an A100's theoretical peak FLOP/s (Dao, 2023, abstract).
# Tiling needs one thing the three steps do not seem to allow: the softmax of a row needs the whole row.

# %% [markdown]
# ## 3. The safe softmax
#
# softmax(s)ᵢ = exp(sᵢ) / Σⱼ exp(sⱼ).
# Computed as written, exp overflows: float32 holds numbers up to about 3.4·10³⁸, so exp(s) is infinite for s above about 88.7, and fp16 (largest number 65504) overflows above 11.1.
# Subtracting the row's maximum m first changes nothing mathematically, exp(sᵢ − m) / Σⱼ exp(sⱼ − m), and keeps every exponent at most 0:

# %%
row = torch.tensor([3.0, 50.0, 100.0])
as_written = torch.exp(row) / torch.exp(row).sum()
safe = torch.exp(row - row.max()) / torch.exp(row - row.max()).sum()
print("as written:", as_written.tolist())
print("max first: ", safe.tolist())
print("torch:     ", torch.softmax(row, dim=0).tolist())
print("largest finite float32:", torch.finfo(torch.float32).max, "· exp(89) in float32:", torch.exp(torch.tensor(89.0)).item())

# %% [markdown]
# That is three passes over the row: one for the maximum, one for the sum of exponentials, one to divide.
# Each pass needs the whole row, and in attention a row of S is n numbers computed from all n keys.

# %% [markdown]
# ## 4. The online softmax: one pass, a block at a time
#
# Milakov and Gimelshein ("Online normalizer calculation for softmax", NVIDIA, 2018, arXiv 1805.02867) fuse the first two passes.
# Keep two numbers while reading the row left to right: the maximum so far, m, and the sum of exponentials so far, l, **relative to that maximum**: l = Σ exp(sⱼ − m) over what was read.
# When a block of new scores arrives with its own maximum,
#
# $$m_{\text{new}} = \max(m, \max_j s_j), \qquad l_{\text{new}} = l \cdot e^{\,m - m_{\text{new}}} + \sum_j e^{\,s_j - m_{\text{new}}}.$$
#
# The factor $e^{m - m_{\text{new}}}$ rescales the old sum to the new maximum: it is 1 when the maximum did not change and shrinks the old terms when it grew.
# At the end, $m + \log l$ is the row's log-sum-exp, and softmax(s)ᵢ = exp(sᵢ − m − log l).
# The cell below runs it on a row of 12 scores in blocks of 4 and prints the two numbers after each block:

# %%
def online_statistics(row, block):
    """row: (n,) scores -> (m, l) after each block of ``block`` scores: the running maximum and sum of exp(s - m)."""
    m, l, history = -math.inf, 0.0, []
    for start in range(0, len(row), block):
        scores = row[start:start + block]
        m_new = max(m, float(scores.max()))
        l = l * math.exp(m - m_new) + float(torch.exp(scores - m_new).sum())
        m = m_new
        history.append((m, l))
    return history


row = torch.randn(12) * 3
for i, (m, l) in enumerate(online_statistics(row, 4), start=1):
    print(f"after block {i}: m = {m:6.3f}, l = {l:7.4f}")
lse = m + math.log(l)
print(f"m + log l = {lse:.6f}; torch.logsumexp = {torch.logsumexp(row, dim=0):.6f}")
print("softmax from (m, l) matches torch.softmax:", torch.allclose(torch.exp(row - lse), torch.softmax(row, dim=0), atol=1e-6))

# %% [markdown]
# Attention never needs P itself, only O = P V, and the same rescaling carries over to it.
# Keep, for each query row, an unnormalised output acc = Σⱼ exp(sⱼ − m)·vⱼ over the keys read so far.
# When the maximum moves, acc is rescaled by the same factor as l; at the end O = acc / l.
# That is all FlashAttention needs: S and P exist one block at a time, in fast on-chip memory, and never as n × n.

# %% [markdown]
# ## 5. The tiled forward, in NumPy loops
#
# FlashAttention's Algorithm 1, for one head: for each block of queries, walk over the blocks of keys and values, updating m, l and acc.
# The largest temporaries are one block of scores, `block × block` numbers:

# %%
def attention_tiled(q, k, v, block=64):
    """q, k, v: (n, d) float32 arrays -> (n, d): attention without an n × n array, a block of queries at a time."""
    n, d = q.shape
    out = np.empty_like(q)
    for i in range(0, n, block):
        qi = q[i:i + block] / np.float32(math.sqrt(d))
        m = np.full(len(qi), -np.inf, dtype=q.dtype)
        l = np.zeros(len(qi), dtype=q.dtype)
        acc = np.zeros((len(qi), d), dtype=q.dtype)
        for j in range(0, n, block):
            s = qi @ k[j:j + block].T  # (block, block): this block of queries against this block of keys
            m_new = np.maximum(m, s.max(axis=1))
            p = np.exp(s - m_new[:, None])
            rescale = np.exp(m - m_new)  # how much the old maximum was too small
            l = l * rescale + p.sum(axis=1)
            acc = acc * rescale[:, None] + p @ v[j:j + block]
            m = m_new
        out[i:i + block] = acc / l[:, None]
    return out


def attention_three_steps_numpy(q, k, v):
    """The three steps in NumPy, for a fair comparison: S and P as whole (n, n) arrays."""
    s = q @ k.T / np.float32(math.sqrt(q.shape[1]))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


q, k, v = (rng.standard_normal((300, 64), dtype=np.float32) for _ in range(3))
expected = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v))).numpy()
print(f"n = 300 (not a multiple of the block): largest difference from torch {np.abs(attention_tiled(q, k, v) - expected).max():.1e}")

# %% [markdown]
# The figure shows the schedule on a grid of score tiles, 8 blocks of queries by 8 blocks of keys: one program (on a GPU, one thread block) per row of tiles, visiting its tiles left to right and carrying m, l and acc from each to the next.
# In **causal** attention (a decoder's: position i attends to positions ≤ i), every score above the diagonal is masked, so the tiles above the diagonal need not be computed at all, and only the diagonal tiles need the mask; Triton's fused-attention tutorial splits its loop the same way.

# %%
fig, (ax_full, ax_causal) = plt.subplots(1, 2, figsize=(9.6, 3.6))
full_tiles = plots.attention_tiles(ax_full, 8, causal=False, row=5)
causal_tiles = plots.attention_tiles(ax_causal, 8, causal=True, row=5)
plt.tight_layout()
plt.show()
print(f"causal: {causal_tiles['computed'] + causal_tiles['diagonal']} of {sum(full_tiles.values())} tiles computed, "
      f"{causal_tiles['diagonal']} of them masked in part: about half the work of the full attention.")

# %% [markdown]
# Now the memory, measured: `tracemalloc` records every array NumPy allocates, and its peak is the most memory the call held at once beyond its inputs.

# %%
def peak_bytes(fn, *args):
    """The most bytes ``fn(*args)`` had allocated at once (NumPy's arrays included), beyond what existed before."""
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


MEMORY_SIZES = [512, 1024, 2048, 4096]
peaks = {"three steps": [], "tiled (block 64)": []}
for n in MEMORY_SIZES:
    q, k, v = (rng.standard_normal((n, 64), dtype=np.float32) for _ in range(3))
    peaks["three steps"].append(peak_bytes(attention_three_steps_numpy, q, k, v))
    peaks["tiled (block 64)"].append(peak_bytes(attention_tiled, q, k, v))
for name, values in peaks.items():
    print(f"{name:>17}: " + ", ".join(f"n = {n}: {wording.binary_bytes(b)}" for n, b in zip(MEMORY_SIZES, values)))
ratios = {name: values[-1] / values[-2] for name, values in peaks.items()}
print(f"From n = {MEMORY_SIZES[-2]} to {MEMORY_SIZES[-1]}, the three steps' peak grew {ratios['three steps']:.1f}x (n² predicts 4x) "
      f"and the tiled one's {ratios['tiled (block 64)']:.1f}x (its output, n × d, predicts 2x); "
      f"at n = {MEMORY_SIZES[-1]} the tiled version held {peaks['three steps'][-1] / peaks['tiled (block 64)'][-1]:.0f}x less.")

fig, ax = plt.subplots(figsize=(6.4, 3.6))
for name, values in peaks.items():
    plots.versus_size(ax, MEMORY_SIZES, np.array(values) / 2**20, label=name, xlabel="sequence length n", ylabel="peak MiB allocated", logy=True)
ax.set_title("Extra memory of one call, d = 64, float32, NumPy")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# And the time, on this CPU at n = 2048: the tiled version does the same FLOPs plus the rescaling, in many small matmuls that each pay NumPy's per-call overhead.

# %%
q, k, v = (rng.standard_normal((2048, 64), dtype=np.float32) for _ in range(3))
three = timing.measure(attention_three_steps_numpy, q, k, v, min_run_time=0.05, min_blocks=3, num_threads=THREADS)
tiled = {block: timing.measure(attention_tiled, q, k, v, block, min_run_time=0.05, min_blocks=3, num_threads=THREADS) for block in (32, 128)}
print(f"n = 2048: three steps {wording.ms(three.median)}, tiled with blocks of 32 {wording.ms(tiled[32].median)}, "
      f"of 128 {wording.ms(tiled[128].median)} ({WHERE})")
fastest, slowest = sorted(tiled, key=lambda block: tiled[block].median)
ratio = tiled[fastest].median / three.median
print(f"With blocks of {fastest} the tiled version " + wording.choose(ratio, 1, 1.1, more=f"took {ratio:.1f}x as long as", tie="was as fast as",
                                                                      less=f"was {1 / ratio:.1f}x faster than")
      + f" the three steps here, in {(2048 // fastest) ** 2} pairs of small matmuls that each pay NumPy's per-call cost; "
      f"with blocks of {slowest}, {(2048 // slowest) ** 2} pairs took {tiled[slowest].median / three.median:.1f}x as long.")

# %% [markdown]
# ## 6. The same forward as a Triton kernel
#
# On a GPU each program (a thread block) takes one block of queries; its loop over key blocks is the inner loop above, with `tl.dot` for the two small matmuls (tensor cores on a GPU) and m, l and acc in registers.
# The structure is that of Triton's fused-attention tutorial (`python/tutorials/06-fused-attention.py` in Triton's repository), without its causal masking, backward pass and autotuning.
# acc, m and l stay in float32 whatever the inputs' precision (section 8 says why).

# %%
if triton:
    @triton.jit
    def flash_forward_kernel(Q, K, V, Out, n, stride, scale, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, D: tl.constexpr):
        """One program: BLOCK_Q query rows of one head, against every block of BLOCK_K keys. Q, K, V, Out: (n, D), row stride ``stride``."""
        rows = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
        dims = tl.arange(0, D)
        q = tl.load(Q + rows[:, None] * stride + dims[None, :], mask=rows[:, None] < n, other=0.0)
        m = tl.full((BLOCK_Q,), float("-inf"), tl.float32)
        l = tl.zeros((BLOCK_Q,), tl.float32)
        acc = tl.zeros((BLOCK_Q, D), tl.float32)
        for start in range(0, n, BLOCK_K):
            keys = start + tl.arange(0, BLOCK_K)
            k = tl.load(K + keys[:, None] * stride + dims[None, :], mask=keys[:, None] < n, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale
            s = tl.where(keys[None, :] < n, s, float("-inf"))  # keys past the end get no weight
            m_new = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            rescale = tl.exp(m - m_new)
            l = l * rescale + tl.sum(p, axis=1)
            v = tl.load(V + keys[:, None] * stride + dims[None, :], mask=keys[:, None] < n, other=0.0)
            acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        tl.store(Out + rows[:, None] * stride + dims[None, :], acc / l[:, None], mask=rows[:, None] < n)

    def flash_forward(q, k, v, block_q=32, block_k=32):
        """q, k, v: (n, d) contiguous tensors on the kernel's device, d a power of two ≥ 16 -> (n, d)."""
        n, d = q.shape
        out = torch.empty_like(q)
        flash_forward_kernel[(triton.cdiv(n, block_q),)](q, k, v, out, n, q.stride(0), 1 / math.sqrt(d), BLOCK_Q=block_q, BLOCK_K=block_k, D=d)
        return out

    n = 100 if not GPU else 4000  # the interpreter runs each program in Python: a small problem
    q, k, v = (torch.randn(n, 32, device=dev) for _ in range(3))
    difference = (flash_forward(q, k, v) - F.scaled_dot_product_attention(q[None], k[None], v[None])[0]).abs().max()
    where = "compiled for this GPU" if GPU else "in Triton's interpreter on this CPU"
    print(f"Triton flash forward, n = {n}, d = 32, {where}: largest difference from F.scaled_dot_product_attention {difference:.1e}")
else:
    print("Triton is missing here: with it, this cell checks a FlashAttention-style forward kernel against F.scaled_dot_product_attention.")

# %% [markdown]
# Training also needs the backward pass, which needs P.
# FlashAttention does not store it either: the forward saves only each row's log-sum-exp, m + log l (n numbers a head), and the backward recomputes each tile of S from Q and K and turns it into P with that one number, more FLOPs for fewer bytes (the FlashAttention paper, §3.1, "Recomputation").
# PyTorch's CPU kernel does the same: its schema, `aten::_scaled_dot_product_flash_attention_for_cpu(...) -> (Tensor output, Tensor logsumexp)`, and its backward's, which takes `out` and `logsumexp` back.
# Autograd's `saved_tensors_hooks` show what each forward keeps for the backward pass (one head, d = 64, float32, on this CPU):

# %%
def saved_for_backward(fn, *args):
    """What autograd keeps from fn(*args) for the backward pass: [(shape, bytes)], one entry per storage."""
    kept = {}

    def keep(tensor):
        kept[tensor.untyped_storage().data_ptr()] = (tuple(tensor.shape), tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        fn(*args)
    return list(kept.values())


kept = {}
for n in (1024, 2048, 4096):
    q, k, v = (torch.randn(1, 1, n, 64, requires_grad=True) for _ in range(3))
    kept[n] = {name: saved_for_backward(fn, q, k, v) for name, fn in (("three steps", attention_three_steps), ("SDPA", F.scaled_dot_product_attention))}
    print(f"n = {n}, kept for the backward pass: " + "; ".join(f"{name}, {len(saved)} tensors of {wording.binary_bytes(sum(size for _, size in saved))}"
                                   for name, saved in kept[n].items()) + f" ({WHERE})")
per_row = [shape for shape, _ in kept[4096]["SDPA"] if shape[-1] == 4096]
print(f"From n = 2048 to 4096, what the three steps keep grew {sum(b for _, b in kept[4096]['three steps']) / sum(b for _, b in kept[2048]['three steps']):.1f}x, "
      f"what SDPA keeps {sum(b for _, b in kept[4096]['SDPA']) / sum(b for _, b in kept[2048]['SDPA']):.1f}x; "
      f"SDPA's tensors of one number per row: {per_row}.")
q, k, v = (torch.randn(1, 1, 512, 64, dtype=torch.float64, requires_grad=True) for _ in range(3))
grad_out = torch.randn(1, 1, 512, 64, dtype=torch.float64)
grads = [torch.autograd.grad(fn(q, k, v), (q, k, v), grad_out) for fn in (attention_three_steps, F.scaled_dot_product_attention)]
print(f"their gradients for Q, K and V (n = 512, float64): largest difference {max((a - b).abs().max().item() for a, b in zip(*grads)):.1e}")

# %% [markdown]
# ## 7. `F.scaled_dot_product_attention` and its backends
#
# PyTorch's documentation of `F.scaled_dot_product_attention` lists three implementations for CUDA tensors: FlashAttention-2, Memory-Efficient Attention (from xFormers), and a C++ "math" implementation written in ordinary ops; all are enabled, and the function picks one from its inputs.
# `torch.nn.attention.sdpa_kernel([...])` restricts the choice (the documentation of `torch.nn.attention`), which is how to compare them, or to see which one an input can use: with only one backend allowed, an input it cannot take raises a `RuntimeError` instead of falling back to another.
# The flash kernels need fp16 or bf16 inputs; fp32 inputs go to the memory-efficient or the math backend (the dispatch checks are in PyTorch's `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`).
#
# On a CPU, the profiler shows which ATen op ran:

# %%
q, k, v = (torch.randn(1, 4, 512, 64) for _ in range(3))
with profile(activities=[ProfilerActivity.CPU]) as prof:
    F.scaled_dot_product_attention(q, k, v)
ran = [event.key for event in prof.key_averages() if "attention" in event.key]
print("ops that F.scaled_dot_product_attention ran here:", ", ".join(ran))
with sdpa_kernel([SDPBackend.MATH]), profile(activities=[ProfilerActivity.CPU]) as prof:
    F.scaled_dot_product_attention(q, k, v)
print("with only the math backend allowed:", ", ".join(sorted({event.key for event in prof.key_averages()} & {"aten::bmm", "aten::_softmax", "aten::matmul"})))
fused = timing.measure(F.scaled_dot_product_attention, q, k, v, min_run_time=0.05, min_blocks=3, num_threads=THREADS)


def math_backend(q, k, v):
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v)


math_only = timing.measure(math_backend, q, k, v, min_run_time=0.05, min_blocks=3, num_threads=THREADS)
print(f"4 heads, n = 512, d = 64: the default {wording.ms(fused.median)}, the math backend {wording.ms(math_only.median)} ({WHERE})")
for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
    try:
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(q, k, v)
        print(f"only {backend.name} allowed: runs on these CPU tensors")
    except RuntimeError:
        print(f"only {backend.name} allowed: RuntimeError, no kernel of it takes CPU tensors")

# %%
if kernels.gpu_or_explain("each backend's time and peak memory at n = 8192, d = 128, fp16: flash and memory-efficient without the n × n "
                          "scores, math with them"):
    q, k, v = (torch.randn(1, 16, 8192, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        def call(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v)
        try:
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            seconds = timing.measure(call, min_run_time=0.1).median
            print(f"{backend.name:>20}: {wording.ms(seconds)}, peak extra memory {wording.binary_bytes(torch.cuda.max_memory_allocated() - base)} "
                  f"(measured on {gpucourse.describe(dev)})")
        except RuntimeError as refused:
            print(f"{backend.name:>20}: not available for these inputs here ({str(refused).splitlines()[0]})")

# %% [markdown]
# ## 8. Decoding and the KV cache
#
# A language model generates text one token at a time: each new token's query attends to the keys and values of every token before it.
# Those keys and values do not change once computed, so a **KV cache** keeps them, and each step computes only the new token's.
# Without it, step t recomputes the projections of all t tokens: the work of a step grows with t.
# Measured on a small model here (one attention layer with its projections, d = 256, one head), time per generated token against the position:

# %%
class TinyAttentionLayer(torch.nn.Module):
    """One attention layer with its Q, K, V and output projections (d_model -> d_model), one head, causal."""

    def __init__(self, d_model=256):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(d_model, 3 * d_model), torch.nn.Linear(d_model, d_model)

    def step_without_cache(self, tokens):
        """tokens: (t, d_model), every token so far -> the last token's output, recomputing every key and value."""
        q, k, v = self.qkv(tokens).chunk(3, dim=-1)
        return self.out(F.scaled_dot_product_attention(q[-1:][None], k[None], v[None])[0])

    def step_with_cache(self, token, cache):
        """token: (1, d_model), the new one; cache: lists of earlier keys and values, extended here."""
        q, k, v = self.qkv(token).chunk(3, dim=-1)
        cache[0].append(k)
        cache[1].append(v)
        keys, values = torch.cat(cache[0]), torch.cat(cache[1])
        return self.out(F.scaled_dot_product_attention(q[None], keys[None], values[None])[0])


layer, STEPS = TinyAttentionLayer().eval(), 512
tokens = torch.randn(STEPS, 256)
per_step = {"without cache": [], "with cache": []}
with torch.no_grad():
    cache = ([], [])
    for t in range(1, STEPS + 1):
        started = time.perf_counter()
        without = layer.step_without_cache(tokens[:t])
        per_step["without cache"].append(time.perf_counter() - started)
        started = time.perf_counter()
        with_cache = layer.step_with_cache(tokens[t - 1:t], cache)
        per_step["with cache"].append(time.perf_counter() - started)
print(f"the last step's outputs agree: {torch.allclose(without, with_cache, atol=1e-5)}")
window = 32  # medians over 32 steps: single steps are too short to time alone
early, late = ({name: float(np.median(times[a:a + window])) for name, times in per_step.items()} for a in (0, STEPS - window))
print(f"median step time over positions 1-{window}: without cache {wording.ms(early['without cache'])}, with {wording.ms(early['with cache'])}; "
      f"over {STEPS - window + 1}-{STEPS}: without {wording.ms(late['without cache'])}, with {wording.ms(late['with cache'])} ({WHERE})")
print(f"Without the cache a step got {late['without cache'] / early['without cache']:.1f}x slower over {STEPS} tokens, "
      f"with it {late['with cache'] / early['with cache']:.1f}x.")

fig, ax = plt.subplots(figsize=(6.4, 3.4))
positions = np.arange(1, STEPS + 1)
for name, times in per_step.items():
    smooth = np.convolve(np.array(times) * 1e3, np.ones(window) / window, mode="valid")
    ax.plot(positions[window - 1:], smooth, label=f"{name} (measured, mean of {window} steps)")
ax.set_xlabel("position of the generated token")
ax.set_ylabel("ms per step")
ax.set_title("Generating with one attention layer, d = 256, on this CPU")
ax.legend()
ax.grid(True, alpha=0.3)
plt.tight_layout()
plt.show()

# %% [markdown]
# With the cache, a step still grows with the position (the line above says by how much here): its query meets t cached keys, and `torch.cat` copies the cache each step (a real cache is allocated once and filled in place).
# And it does little arithmetic: one new token through every weight matrix, and one query against t cached keys.
# But it must **read every weight** and the whole cache from HBM for that: a matrix-vector product has an arithmetic intensity near 1 FLOP per byte in fp16, so decoding is bound by memory bandwidth.
# Batching helps because the weights are read once for the whole batch, while each sequence still reads its own cache.
# Measured here first, with the small layer: one decoding step for a batch of sequences, each with 256 cached tokens, in a cache allocated once:

# %%
def decode_step_batched(layer, new, keys, values, t):
    """new: (batch, 1, d_model) tokens; keys, values: (batch, capacity, d_model) caches holding t tokens; fills position t."""
    q, k, v = layer.qkv(new).chunk(3, dim=-1)
    keys[:, t:t + 1], values[:, t:t + 1] = k, v
    return layer.out(F.scaled_dot_product_attention(q, keys[:, :t + 1], values[:, :t + 1]))


CACHED, D_MODEL = 256, 256
per_token = {}
with torch.no_grad():
    for batch in (1, 4, 16, 64):
        keys, values = torch.randn(batch, CACHED + 1, D_MODEL), torch.randn(batch, CACHED + 1, D_MODEL)
        new = torch.randn(batch, 1, D_MODEL)
        step = timing.measure(decode_step_batched, layer, new, keys, values, CACHED, min_run_time=0.05, min_blocks=3, num_threads=THREADS)
        per_token[batch] = step.median / batch
        print(f"batch {batch:2d}: {wording.ms(step.median)} a step, {per_token[batch] * 1e6:6.1f} µs a token ({WHERE})")
best = min(per_token, key=per_token.get)
largest = max(per_token)
cache_bytes = 2 * largest * (CACHED + 1) * D_MODEL * 4
print(f"Measured: a token cost {per_token[1] / per_token[best]:.1f}x less at batch {best} than at batch 1; at batch {largest}, whose caches hold "
      f"{wording.binary_bytes(cache_bytes)}, it took {wording.as_long_as(per_token[largest], per_token[best], 1.1)} at batch {best}: "
      "the layer's weights and the per-step overheads are shared by the batch, each sequence's cache is not.")

# %% [markdown]
# The same model for a real one, in bf16 on an H100 (a roofline: the larger of the time to read the bytes and the time to do the FLOPs, with the card's figures from `gpu_specs`).
# One step of `batch` sequences, each with `context` tokens cached, reads every weight once for the whole batch, and each sequence's own cache: a key and a value of `kv_heads × head_dim` numbers per token in every layer.
# Its FLOPs are 2 per weight per token in the matmuls, plus 4 · layers · context · heads · head_dim per token in attention (two matmuls of one query row).

# %%
def decode_step(card, model, batch, context, itemsize=2, precision="bf16"):
    """Modelled time of one decoding step (a roofline) -> (seconds, bound, weight bytes, cache bytes)."""
    weight_bytes = model.params * itemsize
    cache_bytes = batch * context * 2 * model.layers * model.kv_heads * model.head_dim * itemsize
    flops = batch * (2 * model.params + 4 * model.layers * context * model.heads * model.head_dim)
    seconds, bound = attention.roofline_seconds(card, flops, weight_bytes + cache_bytes, precision)
    return seconds, bound, weight_bytes, cache_bytes


# %%
model, card, CONTEXT = attention.LLAMA2_7B, gpu_specs.gpu("H100"), 4096
kv_per_sequence = decode_step(card, model, 1, CONTEXT)[3]
print(f"{model.name} ({model.layers} layers, {model.heads} heads of {model.head_dim}, {model.params / 1e9:.2f} billion weights; {model.source}):")
print(f"KV cache: {wording.binary_bytes(kv_per_sequence / CONTEXT)} per token, {wording.binary_bytes(kv_per_sequence)} per sequence of {CONTEXT} tokens; "
      f"the weights: {wording.binary_bytes(model.params * 2)}")
fits = int((card.memory_bytes - model.params * 2) // kv_per_sequence)
BATCHES = [1, 2, 4, 8, 16, 32]
steps = {batch: decode_step(card, model, batch, CONTEXT) for batch in BATCHES}
for batch, (seconds, bound, weight_bytes, cache_bytes) in steps.items():
    print(f"batch {batch:3d}: {seconds * 1e3:6.2f} ms a step, {seconds / batch * 1e3:6.2f} ms a token, "
          f"{batch / seconds:7.0f} tokens/s ({bound}-bound; the caches are {cache_bytes / (cache_bytes + weight_bytes):.0%} of the bytes) (modelled)")
modelled_per_token = {batch: step[0] / batch for batch, step in steps.items()}
print(f"Modelled: from batch 1 to {BATCHES[-1]}, a token's cost falls {modelled_per_token[1] / modelled_per_token[BATCHES[-1]]:.1f}x, "
      f"not {BATCHES[-1]}x, because each sequence's cache is read for it alone; and the H100's {wording.binary_bytes(card.memory_bytes)} "
      f"hold the weights and the caches of {fits} such sequences at most.")

fig, ax = plt.subplots(figsize=(6.4, 3.4))
plots.versus_size(ax, BATCHES, [modelled_per_token[batch] * 1e3 for batch in BATCHES], label="Llama 2 7B, bf16, H100", kind="modelled",
                  xlabel="batch (sequences decoded together)", ylabel="ms per generated token", logy=True)
ax.axhline(kv_per_sequence / card.memory_bandwidth * 1e3, color="0.5", linestyle=":", label="reading one sequence's own cache (modelled)")
ax.set_title(f"Decoding with a KV cache, {CONTEXT} tokens of context")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# The caches, not the weights, end up setting the batch. So newer models shrink them with **grouped-query attention** (GQA; Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints", 2023): a group of query heads shares one key-value head.
# Each query head keeps its own query, so attention still has all its heads, but the cache holds only the `kv_heads` keys and values, and a step reads each of them once for the whole group.
# Llama 3 8B keeps Llama 2 7B's 32 layers of 32 query heads, with 8 key-value heads (`attention.LLAMA3_8B`, from its `config.json`):

# %%
grouped = attention.LLAMA3_8B
grouped_per_sequence = decode_step(card, grouped, 1, CONTEXT)[3]
grouped_fits = int((card.memory_bytes - grouped.params * 2) // grouped_per_sequence)
print(f"{grouped.name}: {grouped.heads} query heads share {grouped.kv_heads} key-value heads, {grouped.heads // grouped.kv_heads} a group; "
      f"its cache takes {wording.binary_bytes(grouped_per_sequence / CONTEXT)} per token against {model.name}'s {wording.binary_bytes(kv_per_sequence / CONTEXT)} "
      f"({kv_per_sequence / grouped_per_sequence:.0f}x less). On the H100, with {CONTEXT} tokens each, {grouped_fits} sequences fit beside its weights "
      f"against {fits} (modelled).")
grouped_per_token = {batch: decode_step(card, grouped, batch, CONTEXT)[0] / batch for batch in (1, BATCHES[-1])}
print(f"At batch {BATCHES[-1]}, a token costs {grouped_per_token[BATCHES[-1]] * 1e3:.2f} ms against {modelled_per_token[BATCHES[-1]] * 1e3:.2f} ms for {model.name}, "
      f"though it has {grouped.params / model.params:.2f}x the weights (modelled).")

# %% [markdown]
# ## 9. Mixed precision: the running maximum keeps fp16 finite
#
# Attention runs in fp16 or bf16 on tensor cores (module 08 showed why: twice the FLOPs and half the bytes of fp32).
# fp16's largest number is 65504, so exp(s) overflows as soon as a score passes 11.1; bf16 has float32's range but only 8 bits of mantissa, so long sums lose precision.
# Both problems have the same answer in the kernel of section 6: the scores are shifted by the running maximum before exp, so every exponential is at most 1, and l and acc are summed in float32.
# Below, one row of 512 scores in fp16, drawn with a standard deviation of 6:

# %%
scores = (torch.randn(512) * 6).to(torch.float16)
reference = torch.softmax(scores.float(), dim=0)
naive_fp16 = torch.exp(scores) / torch.exp(scores).sum()
shifted = torch.exp(scores - scores.max())
safe_fp16 = shifted / shifted.float().sum().to(torch.float16)
print(f"largest score {scores.max():.1f}; exp of it in fp16: {torch.exp(scores.max()).item()}")
print(f"softmax as written, in fp16: {int(torch.isnan(naive_fp16).sum())} NaN of 512")
print(f"shifted by the maximum, summed in float32: largest difference from the float32 softmax {(safe_fp16.float() - reference).abs().max():.1e}")

# %% [markdown]
# ## Summary
#
# - Attention is two matmuls around a softmax: 4·n²·d FLOPs a head, and, written as three steps, an n × n matrix per head that dominates both the memory (section 1) and, on a GPU, the bytes moved (section 2).
# - The **online softmax** keeps a running maximum and a running sum and rescales them as blocks arrive; the output's accumulator rescales the same way.
# - With it, attention runs a block of queries against a block of keys at a time: the same result with memory that grows like n (measured in section 5), and on a GPU no n² traffic to HBM (modelled in section 2): FlashAttention.
# - Training keeps no n × n matrix either: the forward saves one log-sum-exp a row, and the backward recomputes P a tile at a time (what autograd keeps, measured in section 6).
# - `F.scaled_dot_product_attention` already does this (its flash and memory-efficient backends on a GPU, a fused kernel on a CPU); the math backend is the three steps.
# - Decoding reads all the weights and the cache for one token per sequence: it is bound by memory bandwidth, batching shares the weights' reads but not the caches', and the caches' size limits the batch; grouped-query attention shrinks the caches by sharing key-value heads.
# - fp16 and bf16 attention stays finite because of the running maximum, and accurate because the sums stay in float32.
#
# The assignment (`assignments/11_attention/11_attention.ipynb`) asks you to write the three steps, the online softmax's update and the tiled forward yourself (in NumPy and in Triton), and grades the tiled forward on its values, on the memory one call may take (capped by the grader) and on what skipping the causal tiles saves. It ends with a decoding step on a cache shared by groups of query heads, and that step's cost model.
