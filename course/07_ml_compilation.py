# %% [markdown]
# # 07 · Compiling a matmul: loops, loop order, blocks, a tensor intrinsic, and Triton
#
# A deep-learning compiler (TVM, XLA, PyTorch's Inductor, Triton) takes an operator written as plain loops and rewrites it until it fits the hardware: its caches, its vector units, its tensor instructions.
# The seed article of this module (seed 002, after the Machine Learning Compilation course) follows one matrix multiplication down that road, from low-level NumPy loops to blocks, reordered loops and a tensor intrinsic.
# We walk the same road, and measure every step.
#
# What you will learn:
#
# 1. the seed's `mm_relu` as explicit loops, in Python and compiled with numba; its FLOPs, bytes and place on the roofline;
# 2. why the order of the three loops changes the speed many times over: cache lines, strides and vector instructions;
# 3. blocking (tiling): a cache model of the bytes a tiled matmul moves, and why blocking must happen at two levels, the cache and the registers;
# 4. tensorization: rewriting the loop nest so that its innermost block is one call of a fixed-size 16 × 16 matrix instruction, and why the operands must be packed in tiles;
# 5. these steps as program rewrites (split, reorder, tile, tensorize) and a small schedule search;
# 6. the same tiled schedule as a Triton kernel, with grouped program ordering.
#
# Everything is measured on the CPU that runs this notebook, with one thread: the loops are compiled by numba, and the "tensor core" is a compiled 16 × 16 routine, so the tensorized loop nest runs for real.
# Triton kernels run in Triton's interpreter without a GPU (correct results, no speed); the cell that times one against cuBLAS says what a GPU run shows.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import os

# numpy's BLAS reads its thread count once, when numpy is first imported: one thread, like every loop timed here.
for variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[variable] = "1"

import re
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from numba import njit

import gpucourse
from gpucourse import kernels, plots, timing
from gpucourse.intrinsics import TILE, check_log, logged_call, mma_16x16, new_key

GPU = torch.cuda.is_available()
try:
    kernels.use_triton_gpu_or_interpreter()  # before `import triton`: without a GPU, kernels run in its interpreter
    import triton
    import triton.language as tl
except ImportError as err:
    triton = None
    print(f"{err}; the Triton cells below will say what they would show.")

CPU = gpucourse.describe("cpu").split(",")[0]
MEASURED = f"measured on {CPU}, one thread"
caches = gpucourse.devices.cpu_cache_bytes()
print(MEASURED)
print("data caches of one core:", ", ".join(f"L{level} {size // 1024:,} KiB" for level, size in caches.items()) or "unknown")
rng = np.random.default_rng(0)


# %% [markdown]
# **How the cells below time.**
# `timing.measure` (lecture 01) runs a function at least eight times; some loops here take seconds per call, so we use a lighter rule.
# `gflops` calls the function once untimed (numba compiles on the first call of each argument type: compilation stays out of the timings), then times three runs and keeps the fastest, the one least disturbed by other work on the machine.
# A run repeats a short call until it lasts 20 ms, so that the clock's resolution does not matter.
# numba's `@njit` code runs on one thread (we never ask for `parallel=True`), and torch is held to one thread while timing.

# %%
def gflops(fn, *args, flops, repeats=3, warmup=True):
    """GFLOP/s of fn(*args) doing `flops` floating-point operations: the fastest of `repeats` timed runs."""
    with timing.fixed_threads(1):
        calls = 1
        if warmup:
            start = time.perf_counter()
            fn(*args)
            calls = max(1, int(0.02 / max(time.perf_counter() - start, 1e-6)))
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            best = min(best, (time.perf_counter() - start) / calls)
    return flops / best / 1e9


def random_matrices(m, k, n):
    """Fresh float32 inputs a: (m, k), b: (k, n), values in [0, 1)."""
    return rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)


def assert_matmul(c, a, b, what):
    """c == a @ b within float32 rounding of a k-long sum."""
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(c, expected, rtol=1e-4, atol=1e-4 * a.shape[1]), f"{what} differs from a @ b"


# %% [markdown]
# ## 1. The seed's `mm_relu`, as loops
#
# The seed starts from a *primitive tensor function* written in low-level NumPy: `C = relu(A @ B)`, with every loop spelled out and every element indexed by hand.
# It is what a compiler sees once the operator is lowered to loops: no library call, only loop nests over arrays, a multiply-add and a max.
# First in plain Python, on a matrix small enough to wait for.

# %%
def mm_relu(a, b, c):
    """c = relu(a @ b), every loop explicit, as the seed writes it. a: (m, k), b: (k, n), c: (m, n), written in place."""
    m, k = a.shape
    n = b.shape[1]
    y = np.empty((m, n), dtype=a.dtype)
    for i in range(m):
        for j in range(n):
            for p in range(k):
                if p == 0:
                    y[i, j] = 0
                y[i, j] = y[i, j] + a[i, p] * b[p, j]
    for i in range(m):
        for j in range(n):
            c[i, j] = max(y[i, j], 0)


n_small = 48
a_small, b_small = random_matrices(n_small, n_small, n_small)
a_small -= 0.5  # some negative products, so that the relu has something to do
c_small = np.empty((n_small, n_small), dtype=np.float32)
mm_relu(a_small, b_small, c_small)
assert np.allclose(c_small, np.maximum(a_small @ b_small, 0), rtol=1e-4, atol=1e-4)
python_rate = gflops(mm_relu, a_small, b_small, c_small, flops=2 * n_small**3, repeats=1, warmup=False)
print(f"mm_relu in Python, n = {n_small}: correct, {python_rate * 1e3:.1f} MFLOP/s ({MEASURED})")

# %% [markdown]
# Correct, and slow: every `a[i, p]` is a Python call that boxes a float32 into an object, and every `+` and `*` dispatches on the objects' types.
# numba's `@njit` compiles the *same source* to machine code through LLVM: types are inferred once, the indexing becomes address arithmetic and the loops become machine loops.
# The loop nest does not change; only the interpreter goes away.

# %%
mm_relu_compiled = njit(mm_relu)  # the same Python function, compiled
mm_relu_compiled(a_small, b_small, c_small)  # compiles here, for float32 2-D arrays
assert np.allclose(c_small, np.maximum(a_small @ b_small, 0), rtol=1e-4, atol=1e-4)
n_relu = 512
a_relu, b_relu = random_matrices(n_relu, n_relu, n_relu)
c_relu = np.empty((n_relu, n_relu), dtype=np.float32)
compiled_small_rate = gflops(mm_relu_compiled, a_small, b_small, c_small, flops=2 * n_small**3)
relu_rate = gflops(mm_relu_compiled, a_relu, b_relu, c_relu, flops=2 * n_relu**3)
print(f"mm_relu compiled, n = {n_small}: {compiled_small_rate:.2f} GFLOP/s, {compiled_small_rate / python_rate:,.0f}× the Python loops")
print(f"mm_relu compiled, n = {n_relu}: {relu_rate:.2f} GFLOP/s ({MEASURED})")

# %% [markdown]
# **FLOPs, bytes and the roofline.**
# A matmul of `(m, k) @ (k, n)` does one multiply and one add per term: **2·m·k·n FLOPs** (the relu's m·n comparisons are too few to count).
# The least it can move is each matrix once: for square float32 matrices, A and B read and C written, 3 · 4n² bytes; `mm_relu` also writes and reads its intermediate `y`, 5 · 4n² bytes.
# So its arithmetic intensity can reach 2n³ / 20n² = n/10 FLOP per byte: 51 for n = 512, far right of any CPU's ridge point.
# A matmul *can* be compute-bound; whether it is depends on how the loops reuse what they load.
#
# Below, on module 01's roofline: the flat roof is this CPU's best measured matmul rate, NumPy's `np.dot` (a BLAS library, one thread), and the slope is the bandwidth of a large `np.add` (read two arrays, write one).

# %%
n_blas = 1024
a_blas, b_blas = random_matrices(n_blas, n_blas, n_blas)
blas_rate = gflops(np.dot, a_blas, b_blas, flops=2 * n_blas**3)
# Is numpy's BLAS really on one thread? CPU seconds per wall-clock second while it runs says so.
cpu_start, wall_start = time.process_time(), time.perf_counter()
for _ in range(5):
    np.dot(a_blas, b_blas)
blas_threads = (time.process_time() - cpu_start) / (time.perf_counter() - wall_start)
BLAS_LABEL = "np.dot (BLAS), one thread" if blas_threads < 1.3 else f"np.dot (BLAS), about {blas_threads:.1f} threads"
print(f"{BLAS_LABEL}: {blas_threads:.2f} CPU-seconds per second; {n_blas}² in float32 at {blas_rate:.1f} GFLOP/s (measured on {CPU})")

N_ADD = 2**22  # 16 MB per float32 array: larger than the caches
x_add, y_add, z_add = (rng.random(N_ADD, dtype=np.float32) for _ in range(3))
bandwidth = 12 * N_ADD / (N_ADD / gflops(np.add, x_add, y_add, z_add, flops=N_ADD) / 1e9)
print(f"np.add on {N_ADD:,} floats: {bandwidth / 1e9:.1f} GB/s, the slope of the roof ({MEASURED})")

# %%
fig, ax = plt.subplots(figsize=(9.4, 4.4))
plots.roofline(ax, blas_rate * 1e9, bandwidth, label=f"{CPU}, one thread: BLAS rate and np.add bandwidth, measured", color="C0",
               points=[(f"mm_relu, Python, n={n_small}", n_small / 10, python_rate * 1e9),
                       (f"mm_relu, numba, n={n_relu}", n_relu / 10, relu_rate * 1e9),
                       (f"np.dot, n={n_blas}", n_blas / 6, blas_rate * 1e9)])
ax.set_title(f"The seed's mm_relu on the roofline: rates measured on {CPU}, intensities modelled (each matrix moved once)", fontsize=9)
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# The compiled loops sit far below the roof *and* far right of the ridge: neither the arithmetic units nor the memory bandwidth limit them.
# The intensity on the x axis is what the loops *could* reach if every matrix were loaded once; the gap to BLAS is the traffic and the wasted vector lanes that this loop order really costs.
# The rest of the lecture closes that gap step by step, with the same three rewrites a compiler uses.
#
# ## 2. Loop order
#
# The three loops of a matmul can run in any order, and the result is the same (up to float rounding); the memory accesses are not.
# NumPy arrays are **row-major**: `b[p, j]` and `b[p, j + 1]` are neighbours, `b[p, j]` and `b[p + 1, j]` are n floats apart.
# The CPU moves memory in **cache lines** of 64 bytes, 16 floats (lecture 03's sectors, on a CPU).
# What matters is the *innermost* loop, the one that runs millions of times:
#
# | order | innermost loop walks | stride per step | cache lines per 16 useful floats |
# |---|---|---|---|
# | `ijk`: `C[i, j] += A[i, p] * B[p, j]`, p inner | a row of A, a **column** of B | B: n floats | 16 for B |
# | `ikj`: p in the middle, j inner | a **row** of B and a row of C | 1 float | 1 |
# | `jki`: j outer, i inner | a **column** of A and a column of C | n floats | 16 for A and 16 for C |
#
# `ikj` also gives the compiler a loop it can turn into **vector instructions** (SIMD: 8 floats per instruction with AVX2, 16 with AVX-512): `c[i, j:j+8] += a_ip * b[p, j:j+8]` is one load, one multiply, one add and one store of contiguous floats.
# `ijk`'s inner loop is a running sum, one addition after the other; reordering those additions into vector lanes would change the float rounding, which numba does not do unless asked (`fastmath=True`).

# %%
@njit
def matmul_ijk(a, b):
    """(m, k) @ (k, n) -> (m, n): one dot product per output element, down a column of b."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for j in range(n):
            total = c[i, j]
            for p in range(k):
                total += a[i, p] * b[p, j]
            c[i, j] = total
    return c


@njit
def matmul_ikj(a, b):
    """(m, k) @ (k, n) -> (m, n): the inner loop walks a row of b and a row of c."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for p in range(k):
            a_ip = a[i, p]
            for j in range(n):
                c[i, j] += a_ip * b[p, j]
    return c


@njit
def matmul_jki(a, b):
    """(m, k) @ (k, n) -> (m, n): the inner loop walks a column of a and a column of c."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for j in range(n):
        for p in range(k):
            b_pj = b[p, j]
            for i in range(m):
                c[i, j] += a[i, p] * b_pj
    return c


ORDERS = {"ijk": matmul_ijk, "ikj": matmul_ikj, "jki": matmul_jki}
a_check, b_check = random_matrices(33, 17, 45)
for name, matmul in ORDERS.items():  # compiles each one, and checks it, on a shape that is not square
    assert_matmul(matmul(a_check, b_check), a_check, b_check, f"matmul_{name}")
print("three loop orders compiled and checked against a @ b")

# %%
# The machine code says which loop became vector instructions: arithmetic on packed floats in 256- or 512-bit registers (x86),
# or on 4-float vectors (ARM). Counted in each function's assembly, as compiled for this CPU.
PACKED_ARITHMETIC = re.compile(r"^\s*(v(add|mul|sub|fmadd\w*|fnmadd\w*)ps\s.*[yz]mm|f(mla|mul|add)\s+v\d+\.4s)")
for name, matmul in ORDERS.items():
    asm = matmul.inspect_asm(matmul.signatures[0])
    packed = sum(bool(PACKED_ARITHMETIC.match(line)) for line in asm.splitlines())
    print(f"matmul_{name}: {packed:2d} packed-float arithmetic instructions" + ("" if packed else ": one float at a time"))

# %%
SIZES = [64, 128, 256, 384, 512]
SLOW_SIZES = {"jki": 384}  # jki's strides cost about a second per call at 512: cap it
order_rates = {name: [] for name in ORDERS}
for n in SIZES:
    a_sq, b_sq = random_matrices(n, n, n)
    for name, matmul in ORDERS.items():
        if n <= SLOW_SIZES.get(name, n):
            order_rates[name].append(gflops(matmul, a_sq, b_sq, flops=2 * n**3))
    order_rates.setdefault("np.dot", []).append(gflops(np.dot, a_sq, b_sq, flops=2 * n**3))
for name, rates in order_rates.items():
    print(f"{name:>6}: " + ", ".join(f"n={n} {rate:5.1f}" for n, rate in zip(SIZES, rates)) + f" GFLOP/s ({MEASURED})")

fig, ax = plt.subplots(figsize=(9.4, 4.2))
for name, rates in order_rates.items():
    plots.versus_size(ax, SIZES[:len(rates)], rates, label=BLAS_LABEL if name == "np.dot" else f"matmul_{name}", logy=True,
                      xlabel="matrix side n (float32)", ylabel="GFLOP/s")
ax.set_title(f"Loop order, {MEASURED}", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# The same arithmetic, an order of magnitude apart (on a 2-core AMD EPYC: ijk about 1-1.4 GFLOP/s, ikj 20-35, jki below 1; on a 2-core Intel Xeon: ijk 1.5-4, ikj 27-30, jki 0.6-4; yours are printed above).
# `ikj` streams rows: every cache line it loads is used in full, the hardware prefetcher sees the pattern and fetches ahead, and each step is a vector instruction.
# `ijk` fetches a whole cache line of B for each float it uses; the neighbours it brought along are used by the next `j`, *if* they are still in cache by then.
# `jki` does that for two matrices, and at power-of-two sizes its column addresses land in the same few cache sets, which evict each other (watch 512).
#
# BLAS is still several times faster than the best loop order.
# The reason is reuse: `ikj` reads all of B once per row of A, from wherever B lives; when B no longer fits in a cache, every row of A pays for it from memory.
#
# ## 3. Blocking
#
# **Blocking** (tiling) splits each loop into an outer loop over blocks and an inner loop inside a block, and reorders them so that a block's data is used many times while it is in cache.
#
# **The cache model.**
# Take the tiled loop nest over output tiles: each output tile `C[i0:i0+T, j0:j0+T]` stays in cache while its sum is built; for each `p0` the A tile `A[i0:i0+T, p0:p0+T]` and the B tile `B[p0:p0+T, j0:j0+T]` are read from memory once; C is written once.
# Bytes = itemsize · (reads of A + reads of B + writes of C).
# For square n × n float32 matrices with T dividing n: there are (n/T)² output tiles, each reads n/T tiles of A and n/T tiles of B of T² floats, so
#
# **bytes = 4 · (2n³/T + n²)**, **FLOPs = 2n³**, intensity ≈ T/4 FLOP per byte for T ≪ n.
#
# The intensity grows with T: a bigger tile serves more multiply-adds per byte loaded.
# It grows only while the model's assumption holds, three T × T tiles (12·T² bytes) in cache at once; beyond that the tiles are re-read from memory, and the model no longer describes the machine.
# (Assignment question 1 asks for the same count on any shape, with tiles clipped at the edges.)

# %%
n_model = 1024
model_tiles = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
model_bytes = [4 * (2 * n_model**3 / T + n_model**2) for T in model_tiles]
for T, moved in zip(model_tiles, model_bytes):
    fits = [f"L{level}" for level, size in caches.items() if 12 * T**2 <= size]
    print(f"T = {T:4d}: {moved / 1e6:8.1f} MB moved, {2 * n_model**3 / moved:6.1f} FLOP/byte; three tiles "
          f"({12 * T**2 / 1024:,.0f} KiB) fit in: {', '.join(fits) or 'no cache level of one core'} (modelled, n = {n_model})")

# %% [markdown]
# **Which loops to tile.**
# The loop nest that pays on a CPU keeps a **panel of B** in cache, the tile `B[p0:p0+T, j0:j0+T]`, and streams every row of A past it: tiles over `j` and `p` outside, all rows `i` inside, and the unit-stride `j` loop innermost, as in `ikj`.
# Each B value loaded into cache then serves all m rows of A; A's row pieces and C's row pieces stream through, one cache line at a time.
# (The panel order keeps B in cache rather than C; it moves A n/T times and C 2k/T times instead: the same 1/T law, with other constants.)
# Tiling `i` in the outer loops would not help: a row of A is used once per panel anyway, and the rows of C are already written one line at a time.
#
# The row views `c[i, j0:j1]` and `b[p, j0:j1]` matter too: a 1-D view with unit stride is the shape of loop LLVM vectorizes most easily (indexing `c[i, j]` inside the same loops measured several times slower on the EPYC).
#
# We time it on a *wide* product, (128, 1024) @ (1024, 4096): B is 16 MB, larger than a core's L2 cache (and near the L3's size), so `ikj`, which re-reads all of B for every row of A, reads it from far away 128 times.

# %%
@njit
def matmul_panel(a, b, tile=128):
    """(m, k) @ (k, n) -> (m, n), any shape: a tile x tile panel of b stays in cache while every row of a streams past it."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for j0 in range(0, n, tile):
        j1 = min(j0 + tile, n)
        for p0 in range(0, k, tile):
            p1 = min(p0 + tile, k)
            for i in range(m):
                c_row = c[i, j0:j1]
                for p in range(p0, p1):
                    a_ip = a[i, p]
                    b_row = b[p, j0:j1]
                    for j in range(j1 - j0):
                        c_row[j] += a_ip * b_row[j]
    return c


WIDE = (128, 1024, 4096)  # (m, k, n): B is 16 MB in float32
WIDE_FLOPS = 2 * WIDE[0] * WIDE[1] * WIDE[2]
a_wide, b_wide = random_matrices(*WIDE)
assert_matmul(matmul_panel(a_check, b_check, 16), a_check, b_check, "matmul_panel with partial tiles")
assert_matmul(matmul_panel(a_wide, b_wide), a_wide, b_wide, "matmul_panel on the wide product")
wide_rates = {"ikj": gflops(matmul_ikj, a_wide, b_wide, flops=WIDE_FLOPS)}
SWEEP = [32, 64, 128, 256, 512]
panel_rates = [gflops(matmul_panel, a_wide, b_wide, T, flops=WIDE_FLOPS) for T in SWEEP]
print(f"wide product {WIDE}: matmul_ikj {wide_rates['ikj']:.1f} GFLOP/s; matmul_panel " +
      ", ".join(f"T={T} {rate:.1f}" for T, rate in zip(SWEEP, panel_rates)) + f" GFLOP/s ({MEASURED})")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.9))
plots.versus_size(left, model_tiles, [moved / 1e6 for moved in model_bytes], label=f"bytes moved, square n={n_model}", kind="modelled",
                  xlabel="tile T", ylabel="MB moved from memory", logy=True)
left.axhline(12 * n_model**2 / 1e6, color="0.5", linestyle=":", label="each matrix moved once")
for level, size in caches.items():
    if level < 3 and (size / 12) ** 0.5 <= model_tiles[-1]:
        left.axvline((size / 12) ** 0.5, color="C3", alpha=0.5, linestyle="-.", label=f"three tiles fill L{level} ({size // 1024} KiB)")
left.set_title("the cache model: traffic falls as 1/T", fontsize=10)
left.legend(fontsize=7)
plots.versus_size(right, SWEEP, panel_rates, label="matmul_panel", xlabel="tile T", ylabel="GFLOP/s")
right.axhline(wide_rates["ikj"], color="C1", linestyle="--", label=f"matmul_ikj, {wide_rates['ikj']:.1f} (measured)")
right.set_ylim(0, max(panel_rates + [wide_rates["ikj"]]) * 1.3)
right.set_title(f"wide product {WIDE}, float32", fontsize=10)
right.legend(fontsize=7)
fig.suptitle(f"Blocking: bytes modelled; rates {MEASURED}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Small tiles lose: a 32-wide panel row is 128 bytes, two cache lines, so the loops restart too often and the vector loop is short.
# Bigger tiles help until the panel stops fitting where it should: at T = 128 it is 64 KiB and sits in L2, at T = 512 it is 1 MiB, more than a core's L2 on many CPUs; where your curve flattens or drops depends on your caches.
# And the gain over `ikj` is modest (1.1-1.6× on the EPYC, 0.7-1.4× on the Xeon, noisy), because cache blocking alone does not change what the *inner* loop does: for each multiply-add it still loads one value of B and loads *and stores* one value of C.
# That loop is limited by loads and stores, not by arithmetic, wherever its data comes from.
# On square matrices up to 1024 (next cell), where B fits in L2 or L3 and `ikj` already streams well, the panel alone gains nothing at all.
#
# **Blocking at the second level: registers.**
# The fix is the one BLAS's micro-kernels use: update **several rows of C in one pass over a row of B**.
# With four rows, each value of B loaded into a register serves four multiply-adds: per step of the inner loop, one load of B, four loads and four stores of C for four multiply-adds, 9 memory operations where `ikj` needs 12 (a load of B, a load and a store of C, for each one).
# The cell below shows the loop nest for shapes whose m is a multiple of 4 and whose k and n are multiples of the tile (Assignment question 3 asks you for one that takes any shape: leftover rows, partial tiles).

# %%
@njit
def matmul_panel_rb4(a, b, tile=128):
    """(m, k) @ (k, n) -> (m, n): a panel of b in cache and four rows of c per pass over it. m % 4 == 0, k and n multiples of tile."""
    m, k = a.shape
    n = b.shape[1]
    if m % 4 or k % tile or n % tile:
        raise ValueError("this version needs m a multiple of 4, and k and n multiples of the tile")
    c = np.zeros((m, n), dtype=a.dtype)
    for j0 in range(0, n, tile):
        for p0 in range(0, k, tile):
            for i in range(0, m, 4):
                c0, c1, c2, c3 = c[i, j0:j0 + tile], c[i + 1, j0:j0 + tile], c[i + 2, j0:j0 + tile], c[i + 3, j0:j0 + tile]
                for p in range(p0, p0 + tile):
                    a0, a1, a2, a3 = a[i, p], a[i + 1, p], a[i + 2, p], a[i + 3, p]
                    b_row = b[p, j0:j0 + tile]
                    for j in range(tile):
                        b_pj = b_row[j]  # loaded once, used four times
                        c0[j] += a0 * b_pj
                        c1[j] += a1 * b_pj
                        c2[j] += a2 * b_pj
                        c3[j] += a3 * b_pj
    return c


assert_matmul(matmul_panel_rb4(a_wide, b_wide), a_wide, b_wide, "matmul_panel_rb4 on the wide product")
rb4_wide_rate = gflops(matmul_panel_rb4, a_wide, b_wide, flops=WIDE_FLOPS)
print(f"wide product {WIDE}: ikj {wide_rates['ikj']:.1f}, panel (T=128) {panel_rates[SWEEP.index(128)]:.1f}, "
      f"panel + 4 rows per pass (T=128) {rb4_wide_rate:.1f} GFLOP/s ({MEASURED})")
n_square = 1024
a_sq, b_sq = random_matrices(n_square, n_square, n_square)
square_rates = {name: gflops(fn, a_sq, b_sq, flops=2 * n_square**3)
                for name, fn in (("ikj", matmul_ikj), ("panel", matmul_panel), ("panel + 4 rows", matmul_panel_rb4))}
print(f"square {n_square}²: " + ", ".join(f"{name} {rate:.1f}" for name, rate in square_rates.items()) + f" GFLOP/s ({MEASURED})")

# %% [markdown]
# On the wide product, the register-blocked panel runs about twice as fast as `ikj` (21-22 GFLOP/s against about 10 on the EPYC, 18-27 against 12 on the Xeon), and steadily from run to run.
# On the square 1024² product the gain depends on the caches: on the EPYC it only caught up with `ikj`, whose B (4 MB) stayed in the L3 cache, so that `ikj` had little to lose; on the Xeon it ran 1.8× `ikj`.
# Blocking the `p` loop too, four rows of the panel per pass (`c0[j] += a00 * b0[j] + a01 * b1[j] + a02 * b2[j] + a03 * b3[j]`, and the same for `c1` to `c3`), takes 12 memory operations for 16 multiply-adds: about 3× `ikj` on the Xeon.
# Assignment question 3 asks for that loop nest; the course's tensor intrinsic below uses the same 4 × 4 block inside its tile.
# Blocking must happen at both levels: the cache panel brings the data close, and the register block makes each value brought close do more work.
# BLAS adds more of the same (a 6 × 16 or 8 × 12 block of C held in registers, B and A *packed* into the exact order the micro-kernel reads), which is why it still leads.
#
# ## 4. A tensor intrinsic
#
# A GPU's **tensor core** multiplies small fixed tiles in one instruction: `mma.sync` on NVIDIA GPUs, for example 16 × 8 × 16 in half precision, D = A·B + C in one warp-wide step; Triton's `tl.dot` compiles to these.
# Google's TPU (a 128 × 128 systolic array) and the matrix units of CPUs (Intel's AMX, Apple's AMX/SME) work the same way: the instruction's unit of work is a tile, not a number.
# A compiler can only use such an instruction if it rewrites the loop nest so that its innermost block is exactly one tile product: **tensorization**.
#
# Here, `gpucourse.intrinsics.mma_16x16(a_tile, b_tile, c_tile)` plays the tensor core: `c_tile += a_tile @ b_tile` for 16 × 16 tiles only, compiled with numba; any other shape raises `ValueError`, as the hardware would refuse it.
# The tensorized loop nest is the blocked one with T = 16 and its three inner loops replaced by one call.
# Shapes that are not multiples of 16 are **padded** with zeros to `(ceil(m/16)·16, ceil(k/16)·16)` and `(ceil(k/16)·16, ceil(n/16)·16)` (zeros add nothing to the sums), and C is cropped back to (m, n).
# The number of intrinsic calls is then **ceil(m/16) · ceil(n/16) · ceil(k/16)**: one per output tile and per step along k.

# %%
@njit
def matmul_tensorized_strided(a, b, mma):
    """(m, k) @ (k, n) -> (m, n), every multiply-add in mma(a_tile, b_tile, c_tile) on 16 x 16 views. m, k, n multiples of 16."""
    m, k = a.shape
    n = b.shape[1]
    if m % 16 or k % 16 or n % 16:
        raise ValueError("this version takes multiples of 16 only: pad the matrices first")
    c = np.zeros((m, n), dtype=a.dtype)
    for i0 in range(0, m, 16):
        for j0 in range(0, n, 16):
            for p0 in range(0, k, 16):
                mma(a[i0:i0 + 16, p0:p0 + 16], b[p0:p0 + 16, j0:j0 + 16], c[i0:i0 + 16, j0:j0 + 16])
    return c


def padded(x):
    """x: (rows, cols) -> zero-padded to multiples of 16 in both dimensions."""
    rows, cols = (-(-size // TILE) * TILE for size in x.shape)
    out = np.zeros((rows, cols), dtype=x.dtype)
    out[:x.shape[0], :x.shape[1]] = x
    return out


a_odd, b_odd = random_matrices(40, 50, 70)
c_odd = matmul_tensorized_strided(padded(a_odd), padded(b_odd), mma_16x16)[:40, :70]
assert_matmul(c_odd, a_odd, b_odd, "the padded, tensorized matmul")
# The course's logging intrinsic records every call's operand tiles; check_log checks that they are exactly the pairs of input tiles.
key = new_key(0)
logged_output, calls = logged_call(lambda a, b, mma: matmul_tensorized_strided(padded(a), padded(b), mma)[:40, :70], a_odd, b_odd, key)
counted = check_log(a_odd, b_odd, logged_output, calls, key)
print(f"(40, 50) @ (50, 70): correct after padding to (48, 64) @ (64, 80); {counted} mma calls, "
      f"ceil(40/16)·ceil(70/16)·ceil(50/16) = {-(-40 // 16) * -(-70 // 16) * -(-50 // 16)}")

# %%
assert_matmul(matmul_tensorized_strided(a_wide, b_wide, mma_16x16), a_wide, b_wide, "matmul_tensorized_strided on the wide product")
wide_rates["tensorized, strided views"] = gflops(matmul_tensorized_strided, a_wide, b_wide, mma_16x16, flops=WIDE_FLOPS)
print(f"tensorized with strided views, wide product: {wide_rates['tensorized, strided views']:.1f} GFLOP/s, "
      f"{wide_rates['tensorized, strided views'] / wide_rates['ikj']:.2f}× ikj ({MEASURED})")

# %% [markdown]
# Slower than `ikj`.
# The views `a[i0:i0+16, p0:p0+16]` are not contiguous: a tile's rows are k floats apart in A, n floats apart in B and C.
# numba types them as arrays of layout `'A'` (any strides), so `mma_16x16` is compiled for general strides: every access computes its address from the strides, and its 16-wide inner loop is not vectorized as well.
# Each of the 16 rows of a B tile also sits on its own cache lines, 16 KB apart in the wide B.
#
# **Packing** fixes that, as every real tensorized kernel does: copy the tiles once into a *tile-major* 4-D array, `a_tiles[it, pt]` being the contiguous 16 × 16 tile (it, pt), so each intrinsic call gets `'C'`-contiguous operands, 1 KB each, in consecutive memory.
# It is the CPU analogue of a GPU kernel staging its tiles in shared memory (and the tensor core's operand registers) before the `mma` instructions run.
# The copy costs one pass over A and B; each packed tile is then used ceil(n/16) or ceil(m/16) times.
# The packed version below takes multiples of 16; Assignment question 4 asks for one that pads and crops inside the compiled function, for any shape.

# %%
@njit
def pack_tiles(x):
    """x: (rows, cols), multiples of 16 -> (rows/16, cols/16, 16, 16) where [it, jt] is the contiguous tile (it, jt)."""
    rows, cols = x.shape
    tiles = np.empty((rows // 16, cols // 16, 16, 16), dtype=x.dtype)
    for i in range(rows):
        for j in range(cols):
            tiles[i // 16, j // 16, i % 16, j % 16] = x[i, j]
    return tiles


@njit
def matmul_tensorized_packed(a, b, mma):
    """(m, k) @ (k, n) -> (m, n) with mma on packed, contiguous 16 x 16 tiles. m, k, n multiples of 16."""
    m, k = a.shape
    n = b.shape[1]
    if m % 16 or k % 16 or n % 16:
        raise ValueError("this version takes multiples of 16 only: pad the matrices first")
    a_tiles, b_tiles = pack_tiles(a), pack_tiles(b)
    c_tiles = np.zeros((m // 16, n // 16, 16, 16), dtype=a.dtype)
    for it in range(m // 16):
        for jt in range(n // 16):
            for pt in range(k // 16):
                mma(a_tiles[it, pt], b_tiles[pt, jt], c_tiles[it, jt])
    c = np.empty((m, n), dtype=a.dtype)
    for i in range(m):  # unpack C from its tiles
        for j in range(n):
            c[i, j] = c_tiles[i // 16, j // 16, i % 16, j % 16]
    return c


assert_matmul(matmul_tensorized_packed(a_wide, b_wide, mma_16x16), a_wide, b_wide, "matmul_tensorized_packed on the wide product")
wide_rates["tensorized, packed tiles"] = gflops(matmul_tensorized_packed, a_wide, b_wide, mma_16x16, flops=WIDE_FLOPS)
print(f"tensorized with packed tiles, wide product: {wide_rates['tensorized, packed tiles']:.1f} GFLOP/s, "
      f"{wide_rates['tensorized, packed tiles'] / wide_rates['tensorized, strided views']:.1f}× the strided views, "
      f"{wide_rates['tensorized, packed tiles'] / wide_rates['ikj']:.2f}× ikj ({MEASURED})")

# %% [markdown]
# The same calls, the same arithmetic, on the same numbers: only the layout of the operands changed, and the speed several times over (on the Xeon, from 4-6 to 27-31 GFLOP/s, over twice `ikj`'s 12).
# An intrinsic is only as fast as the data fed to it, which is why a tensorizing compiler always pairs the tensorize step with a layout step (TVM's `cache_read` into a staging buffer, Triton's loads into shared memory).
#
# ## 5. Transformations as program rewrites
#
# Every version so far is the same computation, `C[i, j] += A[i, p] · B[p, j]` over all (i, j, p), with another *schedule*: the order and grouping of its loops and where its data lives.
# TVM makes the rewrites explicit: a schedule applies primitives to the loop nest, each one a transformation that keeps the result.
# PyTorch's Inductor reaches the same forms another way: its GPU matmuls are Triton templates already written in the tiled, tensorized form, and `mode="max-autotune"` searches their block sizes.
#
# | rewrite (TVM primitive) | what it does to the loop nest | where here |
# |---|---|---|
# | split (`sch.split`) | `for j in range(n)` → `for j0 in range(0, n, T): for j in range(j0, j0 + T)` | §3, every tile loop |
# | reorder (`sch.reorder`) | swaps loops: `i, j, p` → `i, p, j` | §2, ijk → ikj |
# | tile = split + reorder | `j0, p0` outside, `i, p, j` inside: a panel of B per pass | §3, `matmul_panel` |
# | unroll (`sch.unroll`) a split of `i` by 4 | four rows of C per pass over B, in registers | §3, `matmul_panel_rb4` |
# | vectorize (`sch.vectorize`) | the unit-stride innermost loop → SIMD instructions | §2, LLVM did it for `ikj` |
# | cache_read / layout (`sch.cache_read`, `sch.transform_layout`) | copy the tiles into a staging buffer in the order they are used | §4, `pack_tiles` |
# | tensorize (`sch.blockize` + `sch.tensorize`) | the innermost 16 × 16 × 16 block → one intrinsic call | §4, `mma_16x16` |
#
# **Schedule search.**
# The rewrites are safe; choosing them is the hard part: the best tile sizes, orders and unroll factors depend on the cache sizes, the vector width and the shape, and the space is large (every split factor of every loop, every order).
# Compilers search it: TVM's AutoTVM, Ansor and MetaSchedule sample schedules, measure the fast-looking ones on the real device and learn a cost model to pick the next, and Triton's `@triton.autotune` times each configuration the kernel author lists and caches the winner per shape.
# The smallest version of that search, below: five tile sizes for the register-blocked kernel on the wide product, each timed, the fastest kept.

# %%
tune_results = {T: gflops(matmul_panel_rb4, a_wide, b_wide, T, flops=WIDE_FLOPS) for T in SWEEP}
best_tile = max(tune_results, key=tune_results.get)
print(f"autotuning matmul_panel_rb4 on the wide product {WIDE} ({MEASURED}):")
print("  tile   GFLOP/s")
for T, rate in tune_results.items():
    print(f"  {T:4d}   {rate:7.1f}" + ("   <- kept" if T == best_tile else ""))
wide_rates["cache panel (best tile)"] = max(panel_rates)
wide_rates["panel + 4 rows (tuned)"] = tune_results[best_tile]

# %% [markdown]
# A flat top (tiles 128-256 within noise of each other on the EPYC; 256-512 on the Xeon, whose L2 is four times larger) is the common case: the search's job is mostly to avoid the cliffs on either side, and it must be redone for another shape or another machine.
# Compilation and tuning both stay out of the timed region, as every timing rule of this course says; a tuned kernel is compiled and measured before it is used.
#
# ## 6. The same schedule in Triton
#
# On a GPU the schedule of section 3 becomes a Triton kernel: each **program** computes one BLOCK_M × BLOCK_N tile of C (the output tile of the cache model), and loops over K in steps of BLOCK_K.
# Each step loads a BLOCK_M × BLOCK_K tile of A and a BLOCK_K × BLOCK_N tile of B (Triton stages them in shared memory) and multiplies them with `tl.dot`, which the compiler tensorizes into `mma` instructions on the tensor cores; the accumulator stays in registers, in float32.
# Triton does the packing and the register blocking of sections 3-4 itself; the schedule the author writes is the tiling.
#
# **Grouped ordering.**
# Programs run many at a time, and in the order of their ids; in row-major order the first wave of programs shares one row of A tiles but needs every column of B tiles, so B is pulled from memory into the L2 cache in full before any of it is reused.
# Grouping GROUP_M rows of tiles, and walking down a group's columns first, makes a wave cover a squarer patch of C, which needs fewer tiles of A and B at once: more of them are still in L2 when the next program needs them.
#
# The kernel below has **no masks**: it assumes M, N and K are multiples of the blocks, and its launcher refuses other shapes.
# Any other shape needs masks on the loads (fill with zeros past the edges) and on the store; the assignment asks you for that kernel.

# %%
if triton:
    @triton.jit
    def matmul_tiles_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        # Grouped ordering: program ids walk down GROUP_M rows of tiles before moving one column right.
        pid = tl.program_id(0)
        tiles_m, tiles_n = M // BLOCK_M, N // BLOCK_N
        first_m = (pid // (GROUP_M * tiles_n)) * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)  # the last group may have fewer rows
        tile_m = first_m + (pid % group_rows)
        tile_n = (pid % (GROUP_M * tiles_n)) // group_rows
        rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        depth = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + rows[:, None] * stride_am + depth[None, :] * stride_ak  # a BLOCK_M x BLOCK_K tile of pointers
        b_ptrs = b_ptr + depth[:, None] * stride_bk + cols[None, :] * stride_bn  # a BLOCK_K x BLOCK_N tile
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, K, BLOCK_K):
            acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))  # no masks: whole blocks only
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty))

    def matmul_tiles(a, b, block_m=16, block_n=16, block_k=16, group_m=2):
        """a: (M, K), b: (K, N), every size a multiple of its block -> (M, N) in a's dtype, one program per tile of C."""
        (M, K), N = a.shape, b.shape[1]
        if M % block_m or N % block_n or K % block_k:
            raise ValueError(f"({M}, {K}) @ ({K}, {N}) is not made of whole {block_m} x {block_n} x {block_k} blocks: "
                             "this kernel has no masks")
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        grid = ((M // block_m) * (N // block_n),)
        matmul_tiles_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                  BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m)
        return c

    tolerance = 1e-2 if GPU else 1e-3  # on a GPU tl.dot rounds float32 inputs to TF32 (10-bit mantissa); the interpreter does not
    for m, k, n in [(48, 64, 80), (64, 32, 96), (16, 16, 16)]:
        a_t, b_t = torch.randn(m, k, device=gpucourse.device()), torch.randn(k, n, device=gpucourse.device())
        torch.testing.assert_close(matmul_tiles(a_t, b_t), torch.matmul(a_t, b_t), rtol=tolerance, atol=tolerance * k**0.5)
        print(f"({m}, {k}) @ ({k}, {n}) in 16 x 16 x 16 blocks, grouped by 2: matches torch.matmul "
              f"({'on ' + gpucourse.describe() if GPU else 'in the Triton interpreter'})")
else:
    print("Without Triton: the kernel would be checked against torch.matmul here, on shapes made of whole blocks.")


# %%
def program_tile(pid, tiles_m, tiles_n, group_m):
    """The (row, column) of C's tile that program `pid` computes: the kernel's index arithmetic, in Python."""
    first_m = (pid // (group_m * tiles_n)) * group_m
    group_rows = min(tiles_m - first_m, group_m)
    return first_m + pid % group_rows, (pid % (group_m * tiles_n)) // group_rows


def order_grid(tiles_m, tiles_n, group_m):
    """(tiles_m, tiles_n) array of the program id that computes each tile."""
    grid = np.empty((tiles_m, tiles_n), dtype=int)
    for pid in range(tiles_m * tiles_n):
        grid[program_tile(pid, tiles_m, tiles_n, group_m)] = pid
    return grid


def tiles_loaded(wave, tiles_m, tiles_n, group_m):
    """How many distinct tile rows of A and tile columns of B the first `wave` programs need."""
    tiles = [program_tile(pid, tiles_m, tiles_n, group_m) for pid in range(wave)]
    return len({row for row, _ in tiles}) + len({col for _, col in tiles})


print("program id of each tile of C, 6 x 8 tiles; row-major (GROUP_M = 1) and grouped (GROUP_M = 3):")
for plain_row, grouped_row in zip(order_grid(6, 8, 1), order_grid(6, 8, 3)):
    print(" ".join(f"{pid:2d}" for pid in plain_row), "   |   ", " ".join(f"{pid:2d}" for pid in grouped_row))
H100_SMS, TILES = 132, 4096 // 128  # a 4096² product in 128 x 128 tiles, one program per SM in the first wave
for group_m in (1, 8):
    print(f"GROUP_M = {group_m}: the first {H100_SMS} programs of a 4096² matmul in 128² tiles need "
          f"{tiles_loaded(H100_SMS, TILES, TILES, group_m)} tile rows of A and columns of B at once (modelled for an H100's 132 SMs)")

# %%
# On a GPU: the tiled kernel against torch.matmul (cuBLAS) in float16, at growing sizes.
if gpucourse.gpu_or_explain("the tiled Triton kernel (128 x 128 x 32 blocks, grouped by 8) within a small factor of cuBLAS "
                            "at 2048-4096 in float16, both on the tensor cores, and far behind it at 512, where too few "
                            "tiles exist to fill the GPU") and triton:
    gpu_sizes, triton_tflops, cublas_tflops = [512, 1024, 2048, 4096], [], []
    for n in gpu_sizes:
        a_h, b_h = torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda", dtype=torch.float16)

        def tiled(a, b):
            return matmul_tiles(a, b, block_m=128, block_n=128, block_k=32, group_m=8)

        torch.testing.assert_close(tiled(a_h, b_h).float(), torch.matmul(a_h, b_h).float(), rtol=1e-2, atol=0.25)
        triton_tflops.append(2 * n**3 / timing.measure(tiled, a_h, b_h).median / 1e12)
        cublas_tflops.append(2 * n**3 / timing.measure(torch.matmul, a_h, b_h).median / 1e12)
        print(f"n = {n}: Triton {triton_tflops[-1]:.1f}, cuBLAS {cublas_tflops[-1]:.1f} TFLOP/s (measured on {gpucourse.describe()})")
    fig, ax = plt.subplots(figsize=(8, 3.8))
    plots.versus_size(ax, gpu_sizes, triton_tflops, label="Triton, tiled and grouped", ylabel="TFLOP/s", xlabel="matrix side n (float16)")
    plots.versus_size(ax, gpu_sizes, cublas_tflops, label="torch.matmul (cuBLAS)")
    ax.set_title(f"float16 matmul, measured on {gpucourse.describe()}", fontsize=10)
    ax.legend(fontsize=8)
    plt.show()

# %% [markdown]
# ## 7. Every version, side by side
#
# All on the wide product (128, 1024) @ (1024, 4096) in float32.
# The numbers measured in earlier cells are reused; the slow loop orders of section 2 are timed here once each (a single call: they take seconds), and the libraries, NumPy's BLAS and `torch.matmul`, on one thread.

# %%
for name in ("ijk", "jki"):
    wide_rates[name] = gflops(ORDERS[name], a_wide, b_wide, flops=WIDE_FLOPS, repeats=1, warmup=False)
wide_rates[BLAS_LABEL] = gflops(np.dot, a_wide, b_wide, flops=WIDE_FLOPS)
wide_rates["torch.matmul, one thread"] = gflops(torch.matmul, torch.from_numpy(a_wide), torch.from_numpy(b_wide), flops=WIDE_FLOPS)
ORDER = ["ijk", "jki", "ikj", "cache panel (best tile)", "panel + 4 rows (tuned)", "tensorized, strided views", "tensorized, packed tiles",
         BLAS_LABEL, "torch.matmul, one thread"]
for name in ORDER:
    print(f"{name:>28}: {wide_rates[name]:6.2f} GFLOP/s, {wide_rates[name] / wide_rates['ikj']:5.2f}× ikj")
fig, ax = plt.subplots(figsize=(9.4, 4.4))
plots.provenance_bars(ax, [(name, wide_rates[name], "measured") for name in ORDER], xlabel="GFLOP/s (log scale)", fmt="{:.1f}", log=True)
ax.set_title(f"(128, 1024) @ (1024, 4096), float32, {MEASURED}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What to remember
#
# What a CPU teaches, measured:
#
# - The loop nest is the program a compiler optimises, and the same arithmetic in another order runs many times faster or slower: the innermost loop should walk memory with unit stride, so that every cache line is used in full and the loop becomes vector instructions (`ikj` against `ijk` and `jki`).
# - Blocking keeps a tile of data in cache while it is reused; the cache model says the traffic falls as 1/T until three tiles no longer fit.
#   It pays only where the data does not fit in cache already (the wide product, not the square ones), and only together with **register blocking**: several rows of C per pass, so that each value loaded does several multiply-adds.
# - A tensor intrinsic takes fixed tiles: the loop nest must be tiled to its shape, the inputs padded to whole tiles (ceil(m/16) · ceil(n/16) · ceil(k/16) calls), and the operands **packed** in tile-major order, or the intrinsic waits on strided loads.
# - Split, reorder, tile, unroll, vectorize, pack and tensorize are rewrites that keep the result; which ones, with which sizes, is a search, done by measuring.
#
# What a GPU adds:
#
# - Shared memory is a cache the kernel manages itself: Triton stages the tiles of A and B there, the explicit version of the packed tiles above.
# - Tensor cores are the intrinsic in hardware, at 8-16 times the FP32 rate; the tiled, tensorized loop nest is the only form they accept, so every fast GPU matmul (cuBLAS, Triton's `tl.dot`, Inductor's templates) is written in it.
# - Thousands of programs run at once, so their order matters too: grouped ordering keeps the tiles a wave of programs shares in the L2 cache.
#
# Next: the graded assignment `assignments/07_ml_compilation/07_ml_compilation.ipynb`, where you count a tiled matmul's traffic, and write a reordered, a blocked and a tensorized matmul of your own, and a masked Triton kernel.
