# %% [markdown]
# # Assignment 11: attention — the three steps, the online softmax, and a tiled forward that never holds the n × n scores
#
# This assignment checks the ideas of lecture 11 (`course/11_attention.ipynb`).
# You will write attention as its three steps in torch, the online softmax's update of its running statistics, and the tiled (FlashAttention-style) forward pass in NumPy and in Triton: right values, memory that grows like n, and causal attention that skips the tiles it does not need.
# Last, a decoding step with a KV cache shared by groups of query heads, and what such a step reads from memory.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other sizes, blocks and scales, drawn when graded.
# - Everything but one item runs on a CPU (Triton's kernels in its interpreter there); the Triton kernel's GPU speed item waits for a GPU regrade.
#
# Points: 20 autograded (2 of them on a GPU).

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
import math

import numpy as np
import torch
import torch.nn.functional as F

import gpucourse
from gpucourse import attention, check, kernels, thresholds, timing

try:
    TRITON_ON_GPU = kernels.use_triton_gpu_or_interpreter()  # before `import triton`: without a GPU, its interpreter
    import triton
    import triton.language as tl
except ImportError as missing:  # Triton's wheels are for Linux on x86-64 only
    print(f"{missing}\nQuestion 4 needs Triton (use Colab for it); the other questions work without it.")

print(f"Running on {gpucourse.describe()}")
torch.seed()  # fresh inputs on every run, the grader's too: no test's inputs are known beforehand
rng = np.random.default_rng()
FUSED_OPS = ("scaled_dot_product", "attention")  # an ATen op with one of these in its name is a fused attention kernel


def attention_inputs(*shape, dtype=torch.float32):
    """(q, k, v): three standard normal tensors of ``shape``, (..., n, d)."""
    return tuple(torch.randn(*shape, dtype=dtype) for _ in range(3))


def reference(q, k, v, causal=False):
    """What F.scaled_dot_product_attention computes, for tensors or NumPy arrays (returned as the same kind)."""
    if isinstance(q, np.ndarray):
        return reference(*(torch.from_numpy(a) for a in (q, k, v)), causal=causal).numpy()
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def attention_three_steps_numpy(q, k, v, causal=False):
    """q, k, v: (n, d) float32 arrays -> (n, d): the three steps in NumPy, S and P as whole (n, n) arrays (the baseline)."""
    s = q @ k.T / np.float32(math.sqrt(q.shape[1]))
    if causal:
        s = np.where(np.arange(len(q))[:, None] >= np.arange(len(k)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


# %% [markdown]
# ## Question 1: attention as three steps (3 points)
#
# Write `attention_naive(q, k, v, causal=False)` for tensors of shape `(..., n, d)`: the scores $S = QK^\top/\sqrt{d}$, their softmax along each row, and the weighted sum $PV$.
# With `causal=True`, query i may attend only to keys j ≤ i: mask the scores above the diagonal with $-\infty$ before the softmax (as `F.scaled_dot_product_attention(..., is_causal=True)` does).
#
# Graded: the values against `F.scaled_dot_product_attention` without the mask (2 points) and with it (1 point), on shapes and dtypes drawn when graded (odd lengths, batch and head dimensions, float64).
# Each item also counts the ATen ops one call runs (with `torch.compile` off) and fails on any fused attention op (a name holding `scaled_dot_product` or `attention`): the three steps are the point.
# When graded, your function is counted in a fresh process holding only the setup cells and its answer cell, checked first to be torch operations (imports of `torch`, `torch.nn.functional` and `math`, functions and literal constants only).
#
# About 6 lines.

# %% nbgrader={"grade_id": "attention_naive", "solution": true}
def attention_naive(q, k, v, causal=False):
    """q, k, v: (..., n, d) tensors -> (..., n, d): softmax(q kᵀ / √d) v, scores above the diagonal masked when ``causal``."""
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        above = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)  # key j > query i
        scores = scores.masked_fill(above, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
    ### END SOLUTION


# %% nbgrader={"grade_id": "naive_setup", "locked": true}
def check_naive(fn, shape, dtype, causal):
    """One counted call of ``fn`` (attention_naive) on fresh inputs: its values and its ops."""
    q, k, v = attention_inputs(*shape, dtype=dtype)
    output, ops = check.counted_call(fn, q, k, v, causal, counter=check.top_level_ops, top_level=True, eager=True)
    fused = sorted(op for op in ops if any(word in op for word in FUSED_OPS))
    assert not fused, f"attention_naive ran {fused}: write the three steps yourself"
    tolerance = {torch.float32: 1e-5, torch.float64: 1e-10}[dtype]
    check.assert_close(output, reference(q, k, v, causal), rtol=tolerance, atol=tolerance,
                       name=f"attention_naive on {tuple(shape)} {dtype}, causal={causal}")


# %% nbgrader={"grade_id": "test_attention_naive", "grade": true, "points": 2}
"""attention_naive matches F.scaled_dot_product_attention, with no fused attention op."""
check_naive(attention_naive, (2, 3, 50, 16), torch.float32, causal=False)
### BEGIN HIDDEN TESTS
check_naive(attention_naive, (int(rng.integers(33, 98)) | 1, 8), torch.float64, causal=False)
check_naive(attention_naive, (3, 2, int(rng.integers(20, 60)), 24), torch.float32, causal=False)
check_naive(attention_naive, (1, 1, 4), torch.float32, causal=False)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_attention_naive_causal", "grade": true, "points": 1}
"""attention_naive with causal=True matches F.scaled_dot_product_attention(..., is_causal=True), with no fused op."""
check_naive(attention_naive, (2, 3, 50, 16), torch.float32, causal=True)
### BEGIN HIDDEN TESTS
check_naive(attention_naive, (int(rng.integers(33, 98)) | 1, 8), torch.float64, causal=True)
check_naive(attention_naive, (3, 2, int(rng.integers(20, 60)), 24), torch.float32, causal=True)
check_naive(attention_naive, (1, 1, 4), torch.float32, causal=True)
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: the online softmax's update (2 points)
#
# A row of scores arrives a block at a time, and its softmax needs two numbers per row: the maximum so far, m, and the sum so far of $e^{s_j - m}$, l (before any block, m = −∞ and l = 0).
# Write `online_softmax_update(m, l, scores)`: `m` and `l` are `(rows,)` float64 tensors, `scores` is the next `(rows, b)` block of each row's scores; return the new `(m, l)` after that block, as lecture 11 (section 4) derives them.
# Keep nothing else: the state is the two tensors you return.
#
# Graded: after every block, both numbers against the row's scores so far, on blocks of widths drawn when graded, on scores large enough that $e^{s}$ overflows float64 without the maximum, from states the grader computed on scores it never hands over, and on two streams whose blocks the grader hands over in turn (block 1 of one, block 1 of the other, block 2 of the first, ...).
#
# About 3 lines.

# %% nbgrader={"grade_id": "online_softmax_update", "solution": true}
def online_softmax_update(m, l, scores):
    """m, l: (rows,) running maximum and running sum of exp(s - m); scores: (rows, b), the next block -> (m, l) after it."""
    ### BEGIN SOLUTION
    m_new = torch.maximum(m, scores.max(dim=1).values)
    return m_new, l * torch.exp(m - m_new) + torch.exp(scores - m_new[:, None]).sum(dim=1)
    ### END SOLUTION


# %% nbgrader={"grade_id": "online_setup", "locked": true}
class Stream:
    """Rows of scores handed to ``update`` (online_softmax_update) a block at a time, its state checked after each block."""

    def __init__(self, update, rows, scale, unseen=0):
        """``unseen`` > 0: the state starts from that many scores a row that the grader draws and never hands over."""
        self.update, self.rows, self.scale = update, rows, scale
        self.seen = torch.randn(rows, unseen, dtype=torch.float64) * scale
        self.m = self.seen.max(dim=1).values if unseen else torch.full((rows,), -math.inf, dtype=torch.float64)
        self.l = torch.exp(self.seen - self.m[:, None]).sum(dim=1) if unseen else torch.zeros(rows, dtype=torch.float64)

    def next_block(self, width):
        block = torch.randn(self.rows, width, dtype=torch.float64) * self.scale
        self.seen = torch.cat([self.seen, block], dim=1)
        self.m, self.l = self.update(self.m, self.l, block)
        shapes = (tuple(getattr(self.m, "shape", ())), tuple(getattr(self.l, "shape", ())))
        assert shapes == ((self.rows,), (self.rows,)), f"the state must be two ({self.rows},) tensors, got shapes {shapes}"
        best = self.seen.max(dim=1).values
        name = f"after {self.seen.shape[1]} scores a row (scale {self.scale})"
        check.assert_close(self.m, best, rtol=0, atol=0, name=f"m {name}")
        check.assert_close(self.l, torch.exp(self.seen - best[:, None]).sum(dim=1), rtol=1e-12, atol=0, name=f"l {name}")


# %% nbgrader={"grade_id": "test_online_softmax", "grade": true, "points": 2}
"""online_softmax_update keeps the running maximum and sum right after every block."""
stream = Stream(online_softmax_update, rows=4, scale=3.0)
for width in (3, 5, 2):
    stream.next_block(width)
### BEGIN HIDDEN TESTS
first = Stream(online_softmax_update, 4, 1000.0, unseen=int(rng.integers(1, 8)))
second = Stream(online_softmax_update, 4, 2.0, unseen=int(rng.integers(1, 8)))
for width in rng.integers(1, 8, size=6):
    first.next_block(int(width))
    second.next_block(int(width) + 1)
### END HIDDEN TESTS

# %% [markdown]
# ## Question 3: the tiled forward in NumPy (6 points)
#
# Write `flash_attention_forward(q, k, v, block=64, causal=False)` for float32 arrays of shape `(n, d)`, returning `(n, d)`: FlashAttention's forward as lecture 11 (section 5) writes it, for one head.
# For each block of `block` queries, walk over the blocks of keys and values, keeping each query's running maximum m, sum l and unnormalised output acc, and divide at the end; `n` need not be a multiple of `block`.
# With `causal=True`, query i attends to keys j ≤ i: **skip the tiles above the diagonal** (every score in them is masked) and mask only the tiles the diagonal crosses.
#
# Your cell must be NumPy code alone: imports of `numpy` and `math`, functions and literal constants; NumPy's array functions (`np.exp`, `np.maximum`, `np.where`, `np.arange`, `@`, ...) and array methods (`.max`, `.sum`, `.T`, ...); no torch.
# The check names any line it refuses (`check.numpy_only`).
#
# Graded:
# - the values against `F.scaled_dot_product_attention`, with and without the mask, on lengths and blocks drawn when graded (2 points);
# - the memory (2 points): a call with n = 8192, d = 64 and blocks of 128, whose values must be right, may allocate at most 48 MiB beyond what was in use before it, its inputs and output included. The score matrix alone would take 256 MiB. When graded, the call runs in a process whose memory the grader caps (the kernel refuses an allocation past it); here `check.memory_capped` measures NumPy's allocations with `tracemalloc`;
# - causal speed (2 points): with `causal=True`, n = 2048, d = 64 and blocks of 128, at least 1.4× faster than the baseline `attention_three_steps_numpy` (which computes every score, then masks), each output checked, NumPy on one thread. Skipping the tiles above the diagonal halves the work: graded on the course's 2-core AMD EPYC, the reference reached 1.9-2.1×, a tiled forward that computes every tile and masks it 0.9×.
#
# About 20 lines.

# %% nbgrader={"grade_id": "flash_attention_forward", "solution": true}
def flash_attention_forward(q, k, v, block=64, causal=False):
    """q, k, v: (n, d) float32 arrays -> (n, d): attention a block of queries at a time, never an (n, n) array."""
    ### BEGIN SOLUTION
    n, d = q.shape
    out = np.empty_like(q)
    scale = np.float32(1 / math.sqrt(d))
    for start in range(0, n, block):
        stop = min(start + block, n)
        qi = q[start:stop] * scale
        m = np.full(stop - start, -np.inf, dtype=np.float32)
        l = np.zeros(stop - start, dtype=np.float32)
        acc = np.zeros((stop - start, d), dtype=np.float32)
        for key in range(0, stop if causal else n, block):  # causal: no tile right of the diagonal
            s = qi @ k[key:key + block].T
            if causal and key + block > start:  # a tile the diagonal crosses
                s = np.where(np.arange(start, stop)[:, np.newaxis] >= np.arange(key, min(key + block, n)), s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            p = np.exp(s - m_new[:, np.newaxis])
            rescale = np.exp(m - m_new)
            l = l * rescale + p.sum(axis=1)
            acc = acc * rescale[:, np.newaxis] + p @ v[key:key + block]
            m = m_new
        out[start:stop] = acc / l[:, np.newaxis]
    return out
    ### END SOLUTION


# %% nbgrader={"grade_id": "flash_setup", "locked": true}
MEMORY_BUDGET = 48 * 2**20  # bytes a call may allocate beyond what was in use before it
SPEEDUP_NEEDED = {"cpu": 1.4}


def flash_inputs(n, d=64):
    """(q, k, v): three (n, d) float32 arrays, standard normal."""
    return tuple(rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))


def check_flash(fn, n, d, block, causal):
    q, k, v = flash_inputs(n, d)
    check.assert_close(fn(q, k, v, block, causal), reference(q, k, v, causal), rtol=1e-4, atol=1e-5,
                       name=f"flash_attention_forward with n={n}, d={d}, block={block}, causal={causal}")


def check_causal_output(args, output):
    q, k, v = args[:3]  # the baseline's args have no block
    check.assert_close(output, reference(q, k, v, True), rtol=1e-4, atol=1e-5, name="a timed causal call")


# %% nbgrader={"grade_id": "test_flash_correct", "grade": true, "points": 2}
"""flash_attention_forward matches F.scaled_dot_product_attention, with and without the causal mask."""
flash = check.numpy_only(flash_attention_forward)
for causal in (False, True):
    check_flash(flash, 100, 16, 32, causal)
### BEGIN HIDDEN TESTS
for causal in (False, True):
    check_flash(flash, int(rng.integers(65, 200)) | 1, 8, 48, causal)
    check_flash(flash, int(rng.integers(33, 64)), 32, 16, causal)
    check_flash(flash, 7, 4, 256, causal)  # one block, larger than the sequence
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_flash_memory", "grade": true, "points": 2}
"""flash_attention_forward at n = 8192 allocates at most MEMORY_BUDGET beyond what was in use, with the right values."""
check.numpy_only(flash_attention_forward)
check_flash(check.memory_capped(flash_attention_forward, MEMORY_BUDGET), 8192, 64, 128, False)

# %% nbgrader={"grade_id": "test_flash_causal_speed", "grade": true, "points": 2}
"""Causal flash_attention_forward (n = 2048, blocks of 128) is at least 1.4x faster than attention_three_steps_numpy."""
fast = check.numpy_only(flash_attention_forward)
check.assert_measured_speedup(
    lambda: timing.compare_speed(attention_three_steps_numpy, fast, lambda: (*flash_inputs(2048), 128, True),
                                 baseline_inputs=lambda q, k, v, block, causal: (q, k, v, causal), check=check_causal_output),
    check.required_speedup(SPEEDUP_NEEDED), name="causal flash_attention_forward vs attention_three_steps_numpy")

# %% [markdown]
# ## Question 4: the tiled forward as a Triton kernel (5 points, 2 of them on a GPU)
#
# Write the kernel `flash_kernel(Q, K, V, Out, n, stride, scale, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr)`: one program computes `BLOCK_Q` rows of the output of one head, `Q`, `K`, `V` and `Out` being `(n, D)` tensors with row stride `stride`, and `scale` the 1/√d to apply to the scores.
# Lecture 11's kernel (section 6) does it without the mask; add `CAUSAL`: keys past a query's own position get no weight (the loop over key blocks may stop at the program's diagonal: the blocks right of it are all masked).
# Keep m, l and acc in float32 whatever the inputs' dtype; mask every load and store so that `n` need not be a multiple of a block.
#
# Then write the launcher `flash_attention_triton(q, k, v, causal=False)` for `(n, d)` tensors: allocate the output and launch your kernel over it with blocks of 64 (`d` is a power of two ≥ 16).
#
# Graded:
# - the kernel (2 points), launched by the tests themselves on lengths that are not multiples of the blocks, causal or not, with a guard zone after the output that must stay untouched. When graded, your kernel's source is compiled by Triton for a real GPU (sm_80) first, then run (in Triton's interpreter on a CPU grader) in a fresh process that holds only that source, where every load and store is checked to stay inside the tensors it was given;
# - the launcher (1 point): its values, and your kernel must do all the work: the test counts what one call runs, and besides your kernel's launches torch may only allocate (`torch.empty_like`). When graded it is counted in a fresh process holding only the setup cells, your launcher's cell and your kernel, so keep the launcher's cell to `torch.empty...`, the tensors' shapes and strides, `triton.cdiv` and the launch;
# - on a GPU (2 points): causal attention with n = 16384, d = 64 in float16, at least 2× faster than `F.scaled_dot_product_attention` restricted to its math backend (the three steps), each output checked. That threshold is modelled, not yet measured (`gpucourse.thresholds`: the math backend writes and reads back the n × n scores and weights and computes every score, the kernel neither; 4× on every card in `gpu_specs`: V100, T4, A100, L4, H100, H200); `scripts/gpu_check.sh` will calibrate it on the first GPU run.
#
# The kernel's answer cell below holds its first lines; write its body in place of the `raise` line.
#
# About 25 lines, with the launcher.

# %% nbgrader={"grade_id": "flash_kernel", "solution": true}
@triton.jit
def flash_kernel(Q, K, V, Out, n, stride, scale, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr):
    """BLOCK_Q query rows of one head against its key blocks (up to the diagonal when CAUSAL); Q, K, V, Out: (n, D)."""
    ### BEGIN SOLUTION
    start = tl.program_id(0) * BLOCK_Q
    rows = start + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, D)
    q = tl.load(Q + rows[:, None] * stride + dims[None, :], mask=rows[:, None] < n, other=0.0)
    m = tl.full((BLOCK_Q,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_Q,), tl.float32)
    acc = tl.zeros((BLOCK_Q, D), tl.float32)
    stop = n
    if CAUSAL:
        stop = tl.minimum(start + BLOCK_Q, n)  # no key block right of this program's diagonal
    for key in range(0, stop, BLOCK_K):
        keys = key + tl.arange(0, BLOCK_K)
        k = tl.load(K + keys[:, None] * stride + dims[None, :], mask=keys[:, None] < n, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < n
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        rescale = tl.exp(m - m_new)
        l = l * rescale + tl.sum(p, axis=1)
        v = tl.load(V + keys[:, None] * stride + dims[None, :], mask=keys[:, None] < n, other=0.0)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(Out + rows[:, None] * stride + dims[None, :], acc / l[:, None], mask=rows[:, None] < n)
    ### END SOLUTION


# %% nbgrader={"grade_id": "flash_attention_triton", "solution": true}
def flash_attention_triton(q, k, v, causal=False):
    """q, k, v: (n, d) contiguous tensors, d a power of two >= 16 -> (n, d), computed by flash_kernel with blocks of 64."""
    ### BEGIN SOLUTION
    out = torch.empty_like(q)
    n, d = q.shape
    flash_kernel[(triton.cdiv(n, 64),)](q, k, v, out, n, q.stride(0), d ** -0.5, BLOCK_Q=64, BLOCK_K=64, D=d, CAUSAL=causal)
    return out
    ### END SOLUTION


# %% nbgrader={"grade_id": "flash_kernel_setup", "locked": true}
GUARD_ROWS = 3  # rows after the output that the kernel must leave alone (a store without a mask writes there)


def launch_flash(kernel, n, d, block_q, block_k, causal, dtype=torch.float32):
    """Launch ``kernel`` on fresh (n, d) inputs: (q, k, v, out, guard). out is the first n rows of a longer buffer whose
    last GUARD_ROWS rows are NaNs that a store without a mask overwrites; q, k, v are exactly n rows."""
    device = gpucourse.device()
    q, k, v = (torch.randn(n, d, device=device, dtype=dtype) for _ in range(3))
    buffer = torch.full((n + GUARD_ROWS, d), float("nan"), device=device, dtype=dtype)
    grid = (triton.cdiv(n, block_q),)
    check.written(kernel)[grid](q, k, v, buffer, n, d, 1 / math.sqrt(d), BLOCK_Q=block_q, BLOCK_K=block_k, D=d, CAUSAL=causal)
    return q, k, v, buffer[:n], buffer[n:]


def check_flash_kernel(kernel, n, d, block_q, block_k, causal):
    q, k, v, out, guard = launch_flash(kernel, n, d, block_q, block_k, causal)
    name = f"flash_kernel with n={n}, D={d}, BLOCK_Q={block_q}, BLOCK_K={block_k}, CAUSAL={causal}"
    check.assert_close(out, reference(q, k, v, causal), rtol=1e-4, atol=1e-5, name=name)
    assert bool(torch.isnan(guard).all()), f"{name} wrote past the end of the output: mask the store"


def check_flash_triton(launcher, n, d, causal, dtype=torch.float32):
    """One counted call of ``launcher`` on fresh (n, d) inputs: the right values, computed by Triton kernels alone."""
    q, k, v = (torch.randn(n, d, device=gpucourse.device(), dtype=dtype) for _ in range(3))
    output, ops = check.counted_call(launcher, q, k, v, causal, counter=check.launched_ops)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    check.assert_close(output, reference(q, k, v, causal), rtol=tolerance, atol=tolerance,
                       name=f"flash_attention_triton on ({n}, {d}) {dtype}, causal={causal}")
    check.assert_kernels_did_the_work(ops, name=f"flash_attention_triton on ({n}, {d})")


def attention_math_backend(q, k, v, causal):
    """F.scaled_dot_product_attention with only its math backend allowed: the three steps, in ATen ops."""
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def flash_heads(n, d):
    """(q, k, v, causal): one causal head of (n, d) float16 tensors on the GPU."""
    return (*(torch.randn(n, d, device="cuda", dtype=torch.float16) for _ in range(3)), True)


def check_timed_heads(args, output):
    check.assert_close(output.float(), reference(*(a.float() for a in args[:3]), True), rtol=2e-2, atol=2e-2, name="a timed causal call")


# %% nbgrader={"grade_id": "test_flash_kernel", "grade": true, "points": 2}
"""flash_kernel, launched by the test, computes attention with and without the causal mask on lengths that are not multiples of the blocks."""
check_flash_kernel(flash_kernel, 100, 32, 32, 16, causal=True)
check_flash_kernel(flash_kernel, 100, 32, 32, 32, causal=False)
### BEGIN HIDDEN TESTS
check_flash_kernel(flash_kernel, int(rng.integers(17, 90)) | 1, 16, 16, 16, causal=True)
check_flash_kernel(flash_kernel, int(rng.integers(17, 90)) | 1, 16, 32, 16, causal=False)
check_flash_kernel(flash_kernel, 5, 16, 16, 16, causal=True)  # one program, fewer rows than a block
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_flash_launch", "grade": true, "points": 1}
"""flash_attention_triton launches your kernel, which does all the work (torch only allocates), with and without the mask."""
for causal in (False, True):
    check_flash_triton(flash_attention_triton, 100, 32, causal)
### BEGIN HIDDEN TESTS
check_flash_triton(flash_attention_triton, int(rng.integers(17, 90)) | 1, 16, True)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_flash_kernel_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: causal flash_attention_triton (n = 16384, d = 64, float16) is 2x faster than SDPA's math backend."""
# Modelled, not yet measured (gpucourse.thresholds.flash_kernel_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 2.0}
print(thresholds.describe("test_flash_kernel_speed", SPEEDUP_NEEDED))
check_flash_triton(flash_attention_triton, 100, 32, True)  # first, a small counted call
if gpucourse.device_class() != "cuda":
    print("needs a GPU: there the kernel keeps each tile of scores on chip, where the math backend writes all of them to memory")
else:
    check_flash_triton(flash_attention_triton, 16384, 64, True, dtype=torch.float16)  # counted at the timed size too
    # Timed where it was counted (when graded: the process holding only the setup cells, the launcher and its kernel).
    result = timing.compare_speed(attention_math_backend, check.torch_only(flash_attention_triton), lambda: flash_heads(16384, 64),
                                  check=check_timed_heads)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="flash_attention_triton vs SDPA's math backend")

# %% [markdown]
# ## Question 5: decoding with a KV cache shared by groups of heads (4 points)
#
# A decoding step computes one new token's query, key and value per sequence; the keys and values of the tokens before it wait in a cache allocated once (lecture 11, section 8).
# Many recent models share each key-value head among a group of query heads: **grouped-query attention** (GQA; Ainslie et al., "GQA", 2023).
# Llama 3 8B has 32 query heads and 8 key-value heads (its `config.json`): query heads 0-3 attend with key-value head 0, heads 4-7 with head 1, and so on, and its cache is 4× smaller than with a key-value head per query head.
#
# Write `kv_cache_decode(q, k_new, v_new, cache_k, cache_v, t)`:
# - `q` is `(batch, heads, 1, d)`, the new token's queries; `k_new` and `v_new` are `(batch, kv_heads, 1, d)`, its keys and values; `heads` is a multiple of `kv_heads`;
# - `cache_k` and `cache_v` are `(batch, kv_heads, capacity, d)`, allocated once, and hold the keys and values of positions `0 … t-1`;
# - store the new keys and values at position `t` of the caches, in place; then return `(batch, heads, 1, d)`: each query head's attention over positions `0 … t` of its group's key-value head.
#
# Any torch operation may do the attention, `F.scaled_dot_product_attention` included: the cache and the groups are the point here.
#
# Then the cost model of section 8, for any model (an `attention.Decoder`: `layers`, `heads`, `kv_heads`, `head_dim`, `params`; `attention.LLAMA3_8B` is one):
# - `decode_step_bytes(model, batch, context, weight_bytes=2, cache_bytes=2)`: the bytes one decoding step reads from memory when `batch` sequences, each with `context` cached tokens, generate a token each. Every weight is read once for the whole batch (`model.params` weights of `weight_bytes` bytes); each sequence reads its own cache: a key and a value of `kv_heads × head_dim` numbers per token in every layer, of `cache_bytes` bytes each (1 for an int8 or fp8 cache). Leave out the activations and the new token's own keys and values.
# - `max_batch(model, context, memory_bytes, weight_bytes=2, cache_bytes=2)`: the largest batch whose weights and caches (`context` tokens a sequence) fit in `memory_bytes`; 0 if not even one fits.
#
# Graded:
# - the decoding step (2 points): step after step, the output against `F.scaled_dot_product_attention` over the tokens so far, and the caches' rows against the keys and values handed over. Shapes are drawn when graded (with and without groups); the grader fills the caches with tokens of its own before your first call, and decodes two sequences in turn. The caches' rows past `t` hold NaN, so a step that reads them returns NaN.
# - `decode_step_bytes` (1 point) and `max_batch` (1 point), on models drawn when graded.
#
# About 8 lines for the step, 6 for the model.

# %% nbgrader={"grade_id": "kv_cache_decode", "solution": true}
def kv_cache_decode(q, k_new, v_new, cache_k, cache_v, t):
    """One decoding step: store k_new, v_new at position t of the caches (in place), then each query head attends over
    positions 0..t of its group's key-value head. q: (batch, heads, 1, d) -> (batch, heads, 1, d)."""
    ### BEGIN SOLUTION
    batch, heads, _, d = q.shape
    kv_heads = cache_k.shape[1]
    cache_k[:, :, t] = k_new[:, :, 0]
    cache_v[:, :, t] = v_new[:, :, 0]
    keys, values = cache_k[:, :, :t + 1], cache_v[:, :, :t + 1]  # (batch, kv_heads, t + 1, d), views: nothing copied
    queries = q.reshape(batch, kv_heads, heads // kv_heads, d)  # a group's query heads as rows against their shared keys
    weights = torch.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(d), dim=-1)
    return (weights @ values).reshape(batch, heads, 1, d)
    ### END SOLUTION


# %% nbgrader={"grade_id": "decode_model", "solution": true}
def decode_step_bytes(model, batch, context, weight_bytes=2, cache_bytes=2):
    """Bytes one decoding step reads: every weight once, and each of ``batch`` sequences' cache of ``context`` tokens."""
    ### BEGIN SOLUTION
    cache_per_token = 2 * model.layers * model.kv_heads * model.head_dim * cache_bytes  # a key and a value per layer
    return model.params * weight_bytes + batch * context * cache_per_token
    ### END SOLUTION


def max_batch(model, context, memory_bytes, weight_bytes=2, cache_bytes=2):
    """The largest batch whose weights and caches of ``context`` tokens a sequence fit in ``memory_bytes`` (0 if none)."""
    ### BEGIN SOLUTION
    weights = decode_step_bytes(model, 0, context, weight_bytes, cache_bytes)
    per_sequence = decode_step_bytes(model, 1, context, weight_bytes, cache_bytes) - weights
    return max(0, int((memory_bytes - weights) // per_sequence))
    ### END SOLUTION


# %% nbgrader={"grade_id": "decode_setup", "locked": true}
class Sequence:
    """``batch`` sequences decoded a token at a time by ``decode`` (kv_cache_decode), in caches the grader hands over and
    checks after every step against its own copy of every key and value."""

    def __init__(self, decode, batch, heads, kv_heads, d, capacity, cached=0, dtype=torch.float32):
        """``cached`` > 0: the grader fills that many positions of the caches before the first step."""
        self.decode, self.heads, self.t = check.in_place(decode), heads, cached
        self.keys, self.values = (torch.randn(batch, kv_heads, cached, d, dtype=dtype) for _ in range(2))
        self.cache_k, self.cache_v = (torch.full((batch, kv_heads, capacity, d), float("nan"), dtype=dtype) for _ in range(2))
        self.cache_k[:, :, :cached], self.cache_v[:, :, :cached] = self.keys, self.values

    def step(self):
        batch, kv_heads, _, d = self.keys.shape
        q = torch.randn(batch, self.heads, 1, d, dtype=self.keys.dtype)
        k_new, v_new = (torch.randn(batch, kv_heads, 1, d, dtype=self.keys.dtype) for _ in range(2))
        output = self.decode(q, k_new, v_new, self.cache_k, self.cache_v, self.t)
        self.keys, self.values = torch.cat([self.keys, k_new], dim=2), torch.cat([self.values, v_new], dim=2)
        self.t += 1
        name = f"step {self.t} of {self.heads} query heads on {kv_heads} key-value heads"
        for cache, kept, what in ((self.cache_k, self.keys, "keys"), (self.cache_v, self.values, "values")):
            check.assert_close(cache[:, :, :self.t], kept, rtol=0, atol=0, name=f"the cached {what} after {name} (store them in place)")
        group = self.heads // kv_heads
        expected = F.scaled_dot_product_attention(q, self.keys.repeat_interleave(group, dim=1), self.values.repeat_interleave(group, dim=1))
        tolerance = {torch.float32: 1e-5, torch.float64: 1e-10}[self.keys.dtype]
        check.assert_close(output, expected, rtol=tolerance, atol=tolerance, name=f"the output of {name}")


def drawn_model():
    """(model, weight_bytes, cache_bytes) drawn when graded: an attention.Decoder with or without groups, and its bytes a number."""
    kv_heads = int(rng.choice([1, 2, 4, 8]))
    model = attention.Decoder("a drawn model", layers=int(rng.integers(12, 81)), heads=kv_heads * int(rng.choice([1, 2, 4, 8])),
                              kv_heads=kv_heads, head_dim=int(rng.choice([64, 96, 128])), params=float(rng.uniform(1e9, 7e10)))
    return model, int(rng.choice([1, 2, 4])), int(rng.choice([1, 2]))


def expected_bytes(model, batch, context, weight_bytes, cache_bytes):
    """What decode_step_bytes should return, written otherwise: the weights' bytes, then the caches' per layer."""
    per_layer = batch * context * model.kv_heads * model.head_dim * cache_bytes * 2
    return model.params * weight_bytes + model.layers * per_layer


def described(model, weight_bytes, cache_bytes):
    return (f"{model.layers} layers, {model.heads} heads on {model.kv_heads} key-value heads of {model.head_dim}, {model.params:.4g} weights "
            f"of {weight_bytes} bytes, a cache of {cache_bytes}-byte numbers")


# %% nbgrader={"grade_id": "test_kv_cache_decode", "grade": true, "points": 2}
"""kv_cache_decode stores each step's keys and values in place and attends over positions 0..t, with and without groups."""
sequence = Sequence(kv_cache_decode, batch=2, heads=8, kv_heads=2, d=16, capacity=12)
for _ in range(5):
    sequence.step()
### BEGIN HIDDEN TESTS
kv_heads = int(rng.choice([1, 2, 3]))
first = Sequence(kv_cache_decode, 3, kv_heads * int(rng.integers(2, 5)), kv_heads, 8, 40, cached=int(rng.integers(1, 20)), dtype=torch.float64)
second = Sequence(kv_cache_decode, 1, 4, 4, 32, 40, cached=int(rng.integers(1, 20)))  # a key-value head per query head
for _ in range(6):
    first.step()
    second.step()
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_decode_step_bytes", "grade": true, "points": 1}
"""decode_step_bytes: the weights once, and each sequence's cache of key-value heads."""
check.assert_approx(decode_step_bytes(attention.LLAMA3_8B, 1, 4096), 16_596_870_912.0, name="Llama 3 8B in bf16, batch 1, 4096 tokens")
### BEGIN HIDDEN TESTS
for _ in range(4):
    (model, weight_bytes, cache_bytes), batch, context = drawn_model(), int(rng.integers(1, 200)), int(rng.integers(1, 33_000))
    check.assert_approx(decode_step_bytes(model, batch, context, weight_bytes, cache_bytes),
                        expected_bytes(model, batch, context, weight_bytes, cache_bytes),
                        name=f"{described(model, weight_bytes, cache_bytes)}; batch {batch}, {context} tokens")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_max_batch", "grade": true, "points": 1}
"""max_batch: as many sequences as the memory left after the weights holds caches for."""
check.assert_equal(max_batch(attention.LLAMA3_8B, 4096, 80 * 10**9), 119, name="Llama 3 8B in bf16, 4096 tokens, 80 GB")
### BEGIN HIDDEN TESTS
for _ in range(4):
    (model, weight_bytes, cache_bytes), context, batch = drawn_model(), int(rng.integers(1, 33_000)), int(rng.integers(0, 300))
    weights, per_sequence = (expected_bytes(model, b, context, weight_bytes, cache_bytes) for b in (0, 1))
    memory = weights + (batch + float(rng.uniform(0.01, 0.99))) * (per_sequence - weights)
    check.assert_equal(max_batch(model, context, memory, weight_bytes, cache_bytes), batch,
                       name=f"{described(model, weight_bytes, cache_bytes)}; {context} tokens, {memory:.6g} bytes")
tiny = attention.Decoder("a small model", layers=2, heads=4, kv_heads=2, head_dim=64, params=1e9)
check.assert_equal(max_batch(tiny, 1024, 1e9), 0, name="a memory smaller than the weights")
### END HIDDEN TESTS
