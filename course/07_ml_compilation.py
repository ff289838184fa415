# %% [markdown]
# # 07 · Compiling a matmul: loops, loop order, blocks, a tensor intrinsic, and Triton
#
# A deep-learning compiler (TVM, XLA, Inductor, Triton's) takes an operator written as loops and rewrites the loops until they suit the hardware.
# The seed article of this module (seed 002, in the spirit of the MLC course) does it for a matrix multiplication: from low-level NumPy loops, through blocks and loop reordering, to a block mapped onto a **tensor intrinsic**.
# We do the same, and measure every step for real on the machine that runs this notebook.
#
# What you will learn:
#
# 1. `mm_relu` as explicit loops, compiled with numba; its FLOPs, bytes and arithmetic intensity, on the roofline of module 01;
# 2. loop order: the same arithmetic in the orders ijk, ikj and jki, measured, and explained with cache lines and strides;
# 3. blocking: the tiled loop nest, the traffic model, GFLOP/s against tile size, and why blocking must reach the registers to pay;
# 4. a tensor intrinsic, `mma_16x16`, and the loop nest rewritten so that its inner block is one call ("tensorize"), with padding;
# 5. transformations as program rewrites, and a tiny schedule search;
# 6. the same tiled schedule as a Triton kernel (in Triton's interpreter here, timed against cuBLAS on a GPU);
# 7. every version on one plot beside this machine's BLAS.
#
# The honest lesson a CPU teaches: the same arithmetic in another order or blocking runs many times faster, because of caches and vector units.
# A GPU adds shared-memory tiles and tensor cores; the cells that need one say what it shows.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
from numba import njit

import gpucourse
from gpucourse import kernels, plots, timing
from gpucourse.intrinsics import TILE, mma_16x16

GPU = torch.cuda.is_available()
try:
    kernels.use_triton_gpu_or_interpreter()  # before `import triton`: without a GPU, kernels run in its interpreter
    import triton
    import triton.language as tl
except ImportError as err:
    triton = None
    print(f"{err}; the Triton cells below will say what they would show.")

CPU = gpucourse.describe("cpu").split(",")[0]
THREADS = 1  # numba's @njit loops run on one thread; every comparison below uses one thread too
LABEL = f"measured on {CPU}, one thread"
RNG = np.random.default_rng(0)
print(f"{CPU}; GPU: {torch.cuda.get_device_name() if GPU else 'none'}")


def inputs(m, k, n, dtype=np.float32):
    return RNG.uniform(-1, 1, (m, k)).astype(dtype), RNG.uniform(-1, 1, (k, n)).astype(dtype)


def gflops(fn, a, b, *extra):
    """GFLOP/s of fn(a, b, *extra), the median of timed blocks after a warm-up call (numba compiles there)."""
    measured = timing.measure(fn, a, b, *extra, warmup=1, min_run_time=0.05, min_blocks=3, num_threads=THREADS)
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] / measured.median / 1e9


def blas(a, b):
    """This machine's BLAS, through torch on one thread: the yardstick for every loop nest below."""
    return (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()


# %% [markdown]
# ## 1. `mm_relu` as loops
#
# The seed starts from the operator a network runs, `C = relu(A @ B)`, written as the loops a compiler sees: three nested loops for the product, one pass for the ReLU.
# In plain Python each iteration is interpreted, so we try it on a tiny size only, and check it against NumPy.

# %%
def mm_relu_python(a, b):
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for j in range(n):
            for p in range(k):
                c[i, j] += a[i, p] * b[p, j]
    for i in range(m):
        for j in range(n):
            c[i, j] = max(c[i, j], 0.0)
    return c


a, b = inputs(32, 32, 32)
start = time.perf_counter()
c = mm_relu_python(a, b)
python_seconds = time.perf_counter() - start
assert np.allclose(c, np.maximum(a @ b, 0), atol=1e-5)
print(f"pure Python, n = 32: {python_seconds * 1e3:.0f} ms, {2 * 32 ** 3 / python_seconds / 1e9:.4f} GFLOP/s ({LABEL})")

# %% [markdown]
# The same loops, compiled by numba's `@njit` to machine code (LLVM, as Triton and TVM use), are the first real program.
# Compilation happens on the first call, so every timing below starts after a warm-up call.

# %%
mm_relu = njit(mm_relu_python)

a, b = inputs(256, 256, 256)
assert np.allclose(mm_relu(a, b), np.maximum(blas(a, b), 0), atol=1e-4)
naive_rate, blas_rate = gflops(mm_relu, a, b), gflops(blas, a, b)
print(f"n = 256: compiled loops {naive_rate:.2f} GFLOP/s, BLAS {blas_rate:.1f} GFLOP/s ({LABEL})")

# %% [markdown]
# How far is that from what the machine can do?
# A product of two n × n float32 matrices does 2n³ FLOPs (a multiply and an add per term) and must move at least 3 · 4n² bytes (read A and B, write C once): an arithmetic intensity of at most n / 6 FLOP per byte, 43 at n = 256.
# Module 01's roofline, with this CPU's roof measured: BLAS at a large size for the compute roof, a large copy for memory bandwidth.

# %%
big = torch.randn(1024, 1024)
with timing.fixed_threads(THREADS):
    peak_flops = 2 * 1024 ** 3 / timing.measure(torch.mm, big, big, warmup=1, min_run_time=0.1, num_threads=THREADS).median
    source, target = torch.ones(1 << 24), torch.empty(1 << 24)  # 64 MB each: far beyond the caches
    bandwidth = 2 * source.nbytes / timing.measure(target.copy_, source, warmup=1, min_run_time=0.1, num_threads=THREADS).median
intensity = 256 / 6
fig, ax = plt.subplots(figsize=(6, 4))
plots.roofline(ax, peak_flops, bandwidth, label=f"{CPU}, one thread (measured)",
               points=[("compiled loops (ijk)", intensity, naive_rate * 1e9), ("BLAS", intensity, blas_rate * 1e9)])
ax.set_title("n = 256 matmul at its best-case intensity (n / 6)")
ax.legend(fontsize=8)
plt.show()
print(f"roof: {peak_flops / 1e9:.0f} GFLOP/s, {bandwidth / 1e9:.1f} GB/s; ridge point {peak_flops / bandwidth:.1f} FLOP/byte")

# %% [markdown]
# The matmul sits far right of the ridge point: it *could* be compute-bound, and BLAS is.
# The compiled loops run one or two orders of magnitude below the roof, under the same arithmetic: what they lose is in *how* they touch memory, which the best-case intensity above does not see.

# %% [markdown]
# ## 2. Loop order
#
# NumPy arrays are row-major: `b[p, j]` and `b[p, j + 1]` are neighbours, `b[p, j]` and `b[p + 1, j]` are n floats apart.
# A CPU moves memory in 64-byte cache lines (16 floats), and its vector units (AVX2: 8 floats per instruction) want consecutive elements.
# The three loops can be nested in any order; the sum is the same, the memory walk is not:
#
# | order | innermost loop walks | per step of the inner loop |
# |---|---|---|
# | ijk | a row of A, a **column** of B | one new cache line of B per element: stride n |
# | ikj | a **row** of B and a row of C | unit stride: every byte of a line used, vectorisable |
# | jki | a **column** of A and of C | stride n, on two matrices |

# %%
@njit
def matmul_ijk(a, b):
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for j in range(n):
            for p in range(k):
                c[i, j] += a[i, p] * b[p, j]
    return c


@njit
def matmul_ikj(a, b):
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for p in range(k):
            a_ip = a[i, p]  # one value of A, reused along a whole row of B
            for j in range(n):
                c[i, j] += a_ip * b[p, j]
    return c


@njit
def matmul_jki(a, b):
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
a, b = inputs(70, 45, 33)
for name, fn in ORDERS.items():
    assert np.allclose(fn(a, b), a @ b, atol=1e-4), name
print("the three orders agree with a @ b")

# %%
SIZES = [64, 128, 256, 384]
rates = {name: [] for name in [*ORDERS, "BLAS"]}
for n in SIZES:
    a, b = inputs(n, n, n)
    for name, fn in [*ORDERS.items(), ("BLAS", blas)]:
        rates[name].append(gflops(fn, a, b))
    print(f"n = {n}: " + ", ".join(f"{name} {values[-1]:.1f}" for name, values in rates.items()) + " GFLOP/s")

fig, ax = plt.subplots(figsize=(6, 4))
for name, values in rates.items():
    plots.versus_size(ax, SIZES, values, label=name, ylabel="GFLOP/s", logy=True)
ax.set_title(f"float32 matmul, n × n ({LABEL})", fontsize=9)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ikj runs one to two orders of magnitude faster than ijk, on the same FLOPs: its inner loop is unit-stride, so LLVM turns it into vector instructions and every cache line is used whole.
# ijk fetches a new line of B for each multiply-add and uses 4 of its 64 bytes; jki does it on two matrices.
# This is module 03's coalescing on a CPU: a warp wants consecutive addresses, so does a cache line.

# %% [markdown]
# ## 3. Blocking for the cache
#
# ikj still streams **all of B** once per row of A.
# While B fits in the cache that is cheap; once it does not, every row of A reads B from the next level down.
# Blocking splits the loops into tiles, so that a tile of B is reused by many rows while it is in cache: `for j0 in range(0, n, T): for p0 in range(0, k, T): for i in rows: ...`.
#
# **The cache model** (the assignment uses it): each output tile `C[i0:i0+T, j0:j0+T]` stays in cache while its sum is built; for each `p0`, the tile `A[i0:i0+T, p0:p0+T]` and the tile `B[p0:p0+T, j0:j0+T]` are read from memory once; `C` is written once.
# For square n × n float32 matrices and a tile T that divides n, that is `4 · (2n³ / T + n²)` bytes for `2n³` FLOPs: an intensity of about T / 4 FLOP per byte, growing with T until the tiles no longer fit in the cache.

# %%
def tiled_bytes_square(n, tile, itemsize=4):
    """Bytes the cache model moves for a square n x n matmul with tiles that divide n."""
    return itemsize * (2 * n ** 3 // tile + n * n)


n = 1024
for tile in (1, 16, 64, 256):
    moved = tiled_bytes_square(n, tile)
    print(f"T = {tile:4d}: {moved / 1e6:8.1f} MB moved, intensity {2 * n ** 3 / moved:6.1f} FLOP/byte (modelled)")

# %% [markdown]
# Where does blocking pay on this machine?
# Square matrices up to 1024 fit in a few MB, and the L2 and L3 caches of a current CPU hold them well enough for ikj: there blocking gains little or nothing.
# We take a **wide** product instead, (128, 1024) @ (1024, 4096): B is 16 MB in float32, more than any core's L2 cache, so ikj reads B from L3 or memory for each of the 128 rows.
# The blocked nest keeps a `T × T` panel of B in cache while all 128 rows stream past it.

# %%
@njit
def matmul_panel(a, b, tile=128):
    """Blocked for the cache: a tile x tile panel of B stays in cache while every row of A uses it."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for j0 in range(0, n, tile):
        j1 = min(j0 + tile, n)
        for p0 in range(0, k, tile):
            p1 = min(p0 + tile, k)
            for i in range(m):
                c_row = c[i, j0:j1]  # a view: the inner loop sees a short contiguous row
                for p in range(p0, p1):
                    a_ip = a[i, p]
                    b_row = b[p, j0:j1]
                    for j in range(j1 - j0):
                        c_row[j] += a_ip * b_row[j]
    return c


WIDE = (128, 1024, 4096)
wide_a, wide_b = inputs(*WIDE)
check_a, check_b = inputs(70, 45, 33)
assert np.allclose(matmul_panel(check_a, check_b, 16), check_a @ check_b, atol=1e-4)
wide = {"ikj": gflops(matmul_ikj, wide_a, wide_b), "BLAS": gflops(blas, wide_a, wide_b)}
print(f"{WIDE}: ikj {wide['ikj']:.1f} GFLOP/s, BLAS {wide['BLAS']:.1f} GFLOP/s ({LABEL})")

# %% [markdown]
# A cache panel still does one multiply-add per value of B it loads from the cache: the loads, not the arithmetic, set the pace.
# BLAS goes one level further, into the **registers**: it updates several rows of C in one pass over a row of the panel, so each loaded value of B serves several multiply-adds (a "micro-kernel").
# Here with four rows, for a row count that is a multiple of 4 and a tile that divides the sizes (the assignment's version must handle any shape: the rows left over, the partial tiles).

# %%
@njit
def matmul_panel_rows4(a, b, tile=128):
    """The cache panel, and four rows of C per pass over it: m a multiple of 4, tile dividing k and n."""
    m, k = a.shape
    n = b.shape[1]
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


check_a, check_b = inputs(64, 128, 256)
assert np.allclose(matmul_panel_rows4(check_a, check_b, 64), check_a @ check_b, atol=1e-4)

# %%
TILES = [32, 64, 128, 256, 512]
sweep = {"cache panel": [gflops(matmul_panel, wide_a, wide_b, t) for t in TILES],
         "panel + 4 rows in registers": [gflops(matmul_panel_rows4, wide_a, wide_b, t) for t in TILES]}
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
plots.versus_size(left, TILES, [tiled_bytes_square(1024, t) / 1e6 for t in TILES], label="bytes moved, n = 1024", kind="modelled",
                  xlabel="tile T", ylabel="MB from memory", logy=True)
left.set_title("the cache model: traffic falls as 1 / T", fontsize=9)
for name, values in sweep.items():
    plots.versus_size(right, TILES, values, label=name, xlabel="tile T", ylabel="GFLOP/s")
right.axhline(wide["ikj"], color="gray", linestyle=":", label=f"ikj, no blocking ({wide['ikj']:.1f})")
right.set_title(f"{WIDE[0]}×{WIDE[1]} @ {WIDE[1]}×{WIDE[2]} ({LABEL})", fontsize=9)
right.legend(fontsize=8)
left.legend(fontsize=8)
plt.show()
for name, values in sweep.items():
    print(f"{name}: " + ", ".join(f"T={t} {v:.1f}" for t, v in zip(TILES, values)) + f" GFLOP/s; ikj {wide['ikj']:.1f}")

# %% [markdown]
# Read the right plot against the left one.
# The model says traffic keeps falling as T grows; the measurement says the gain stops once a panel (T² · 4 bytes: 64 KB at T = 128, 1 MB at T = 512) no longer fits in the L2 cache, and that small tiles pay their loop overhead.
# On a 2-core AMD EPYC (512 KB of L2 per core) the cache panel alone measured 1.1-1.6× ikj, noisy, and the panel with four rows in registers about 2×, steadily: blocking has to reach the registers before it pays.
# That is why the vendors' BLAS, and every GPU matmul, block at every level of the memory hierarchy.

# %% [markdown]
# ## 4. A tensor intrinsic
#
# A GPU's tensor core does not multiply scalars: one instruction (`mma.sync`; what Triton's `tl.dot` compiles to) multiplies two small fixed tiles and adds the result to a third.
# A compiler can only use it if the loop nest has an inner block of exactly that shape: it must **tensorize** the nest.
# This course's intrinsic, `gpucourse.intrinsics.mma_16x16(a_tile, b_tile, c_tile)`, does `c_tile += a_tile @ b_tile` for 16 × 16 tiles and refuses any other shape, as hardware would; on a CPU it is a small compiled routine, so the tensorized nest runs for real.

# %%
tile_a, tile_b = inputs(16, 16, 16)
tile_c = np.zeros((16, 16), np.float32)
mma_16x16(tile_a, tile_b, tile_c)
assert np.allclose(tile_c, tile_a @ tile_b, atol=1e-5)
try:
    mma_16x16(np.zeros((8, 16), np.float32), tile_b, tile_c)
except ValueError as refused:
    print(f"an 8 × 16 tile: {refused}")

# %% [markdown]
# Tensorizing the blocked nest: the tile loops stay, and the three innermost loops become one call.
# Shapes that are not multiples of 16 are **padded** with zeros (zeros add nothing to the sums) and the result is cropped.
# The number of calls is one per pair of tiles: `ceil(m/16) · ceil(n/16) · ceil(k/16)`.
# The first version hands `mma` views of the padded matrices; for brevity it takes sizes that are multiples of 16 (padding is the assignment's).

# %%
@njit
def matmul_tensorized_views(a, b, mma):
    """Every multiply-add in mma calls on 16 x 16 views; sizes multiples of 16."""
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=a.dtype)
    for i in range(0, m, 16):
        for j in range(0, n, 16):
            for p in range(0, k, 16):
                mma(a[i:i + 16, p:p + 16], b[p:p + 16, j:j + 16], c[i:i + 16, j:j + 16])
    return c


check_a, check_b = inputs(64, 48, 80)
assert np.allclose(matmul_tensorized_views(check_a, check_b, mma_16x16), check_a @ check_b, atol=1e-4)
print(f"calls for (40, 50) @ (50, 70) after padding: {int(np.ceil(40 / TILE) * np.ceil(70 / TILE) * np.ceil(50 / TILE))}")

# %% [markdown]
# A view of a tile is not contiguous: its rows are a whole matrix row apart, and numba compiles the intrinsic for a strided array it cannot vectorise well.
# A GPU has the same problem and the same answer: tiles are first copied ("staged", "packed") into a layout the unit reads directly, shared memory and registers there.
# Here: a tile-major copy, `a_tiles[it, pt]` a contiguous 16 × 16 block, made once per matrix, and an accumulator tile per output tile.

# %%
@njit
def matmul_tensorized_packed(a, b, mma):
    """Tiles packed contiguous first, then one mma call per pair of tiles; sizes multiples of 16."""
    m, k = a.shape
    n = b.shape[1]
    a_tiles = np.ascontiguousarray(a.reshape(m // 16, 16, k // 16, 16).transpose(0, 2, 1, 3))
    b_tiles = np.ascontiguousarray(b.reshape(k // 16, 16, n // 16, 16).transpose(0, 2, 1, 3))
    c = np.zeros((m, n), dtype=a.dtype)
    acc = np.zeros((16, 16), dtype=a.dtype)
    for it in range(m // 16):
        for jt in range(n // 16):
            acc.fill(0)
            for pt in range(k // 16):
                mma(a_tiles[it, pt], b_tiles[pt, jt], acc)
            c[it * 16:(it + 1) * 16, jt * 16:(jt + 1) * 16] = acc
    return c


assert np.allclose(matmul_tensorized_packed(check_a, check_b, mma_16x16), check_a @ check_b, atol=1e-4)
wide["tensorized, views"] = gflops(matmul_tensorized_views, wide_a, wide_b, mma_16x16)
wide["tensorized, packed"] = gflops(matmul_tensorized_packed, wide_a, wide_b, mma_16x16)
print(f"{WIDE}: views {wide['tensorized, views']:.1f}, packed {wide['tensorized, packed']:.1f}, ikj {wide['ikj']:.1f} GFLOP/s ({LABEL})")

# %% [markdown]
# Same calls, same arithmetic: packing is what lets the intrinsic run at its speed.
# Note what the tensorized nest no longer contains: not a single scalar multiply-add of its own.
# Every FLOP happens inside the intrinsic, which is exactly the form a tensor core accepts.

# %% [markdown]
# ## 5. Transformations as rewrites, and a tiny schedule search
#
# Each step above rewrote the loop nest without changing what it computes.
# Compilers name those rewrites and apply them as a **schedule** (TVM's and Halide's word; Inductor and Triton make the same choices inside their code generators):
#
# | rewrite | from | to |
# |---|---|---|
# | reorder | `for i: for j: for p:` | `for i: for p: for j:` (ikj) |
# | split | `for j in range(n)` | `for j0 in range(0, n, T): for j in range(j0, j0 + T)` |
# | tile (split + reorder) | three loops | `for j0: for p0: for i: for p: for j:` (the cache panel) |
# | unroll / register-block | `for i` | `for i in range(0, m, 4)`, four rows in the body |
# | pack (cache_read) | `a[i, p]` | a copy of each tile, contiguous |
# | tensorize | the 16 × 16 × 16 inner block | one `mma(a_tile, b_tile, c_tile)` call |
#
# Which tile size is best depends on the machine's caches, so a compiler does not guess: it **searches**, timing candidate schedules and keeping the fastest (TVM's AutoTVM and Ansor, Triton's `@triton.autotune`, Inductor's `max-autotune`).
# The smallest such search: a few tiles, measured, the best kept.

# %%
candidates = {tile: rate for tile, rate in zip(TILES, sweep["panel + 4 rows in registers"])}
best = max(candidates, key=candidates.get)
for tile, rate in sorted(candidates.items()):
    print(f"  T = {tile:3d}: {rate:5.1f} GFLOP/s" + ("   <- kept" if tile == best else ""))
wide["blocked, cache panel"] = max(sweep["cache panel"])
wide["blocked, panel + registers"] = candidates[best]

# %% [markdown]
# ## 6. The same schedule in Triton
#
# Triton is the tiled schedule written as a program: each **program** (a CUDA block) computes one `BLOCK_M × BLOCK_N` tile of C, loops over K in steps of `BLOCK_K`, and hands each pair of tiles to `tl.dot`, which the compiler maps onto the tensor cores with the tiles staged in shared memory.
# The compiler picks the layouts, packing and registers we did by hand above.
# Which tile each program takes matters on a GPU: programs that run at the same time should share tiles of A and B in the L2 cache, so Triton's tutorial **groups** them, `GROUP_M` rows of tiles at a time, instead of walking a whole row of tiles first.
# The kernel below has no masks, so it takes sizes that are multiples of the blocks; loads and stores at the edges need masks otherwise (the assignment asks for that).

# %%
if triton is not None:
    @triton.jit
    def matmul_kernel_unmasked(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        # Grouped order: GROUP_M rows of tiles are walked column by column, so programs running together share tiles in L2.
        pid = tl.program_id(0)
        tiles_m, tiles_n = M // BLOCK_M, N // BLOCK_N
        group = pid // (GROUP_M * tiles_n)
        first_m = group * GROUP_M
        rows_in_group = min(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (pid % (GROUP_M * tiles_n)) % rows_in_group
        pid_n = (pid % (GROUP_M * tiles_n)) // rows_in_group
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        depth = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rows[:, None] * stride_am + (k0 + depth)[None, :] * stride_ak)
            b = tl.load(b_ptr + (k0 + depth)[:, None] * stride_bk + cols[None, :] * stride_bn)
            acc += tl.dot(a, b)  # the tensor-core step: a BLOCK_M x BLOCK_K tile times a BLOCK_K x BLOCK_N tile
        tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc)

    def triton_matmul_unmasked(a, b, block_m=16, block_n=16, block_k=16, group_m=4):
        (M, K), N = a.shape, b.shape[1]
        c = torch.empty((M, N), dtype=torch.float32, device=a.device)
        grid = ((M // block_m) * (N // block_n),)
        matmul_kernel_unmasked[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                     BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m)
        return c

    x, y = torch.randn(64, 48, device=gpucourse.device()), torch.randn(48, 80, device=gpucourse.device())
    # On a GPU, tl.dot rounds float32 inputs to TF32 (10 bits of mantissa): a looser tolerance there.
    torch.testing.assert_close(triton_matmul_unmasked(x, y), x @ y, rtol=1e-2 if GPU else 1e-4, atol=1e-1 if GPU else 1e-4)
    print(f"the Triton kernel matches x @ y on (64, 48) @ (48, 80) ({'on the GPU' if GPU else 'in the interpreter'})")

# %% [markdown]
# On a GPU the next cell times the kernel against `torch.matmul` (cuBLAS) in float16 and plots TFLOP/s against size; in the interpreter it cannot say anything about speed.
# Triton's own tutorial reports its kernel at about cuBLAS's speed on an A100 in float16; the assignment asks for at least half of it, measured on the grader's GPU.

# %%
if triton is not None and GPU:
    gpu_sizes, gpu_rates = [512, 1024, 2048, 4096], {"Triton (this kernel)": [], "torch.matmul (cuBLAS)": []}
    for n in gpu_sizes:
        x, y = torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda", dtype=torch.float16)
        for name, fn in [("Triton (this kernel)", lambda: triton_matmul_unmasked(x, y, 128, 128, 32, 8)), ("torch.matmul (cuBLAS)", lambda: x @ y)]:
            gpu_rates[name].append(2 * n ** 3 / timing.measure(fn, warmup=2, min_run_time=0.1).median / 1e12)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in gpu_rates.items():
        plots.versus_size(ax, gpu_sizes, values, label=name, ylabel="TFLOP/s")
    ax.set_title(f"float16 matmul on {torch.cuda.get_device_name()}", fontsize=9)
    ax.legend(fontsize=8)
    plt.show()
else:
    print("no GPU here: on one, this cell plots the kernel's TFLOP/s against cuBLAS's, from 512 to 4096")

# %% [markdown]
# ## 7. Every version, beside this machine's BLAS
#
# All on the wide product of section 3, one thread, float32.

# %%
for name, fn in ORDERS.items():
    if name != "ikj":
        wide[name] = gflops(fn, wide_a[:32], wide_b)  # the slow orders on 32 rows only: their rate does not depend on m
order = ["ijk", "jki", "ikj", "blocked, cache panel", "blocked, panel + registers", "tensorized, views", "tensorized, packed", "BLAS"]
fig, ax = plt.subplots(figsize=(7, 4))
plots.provenance_bars(ax, [(name, wide[name], "measured") for name in order], xlabel="GFLOP/s", log=True)
ax.set_title(f"{WIDE[0]}×{WIDE[1]} @ {WIDE[1]}×{WIDE[2]}, float32 ({LABEL})", fontsize=9)
plt.show()
for name in order:
    print(f"{name:28s} {wide[name]:7.1f} GFLOP/s  ({wide[name] / wide['BLAS']:.1%} of BLAS)")

# %% [markdown]
# ## What to take away
#
# - The loops are the program a compiler starts from; FLOPs and bytes say what is possible, the order of the loops says what happens.
# - Loop order alone changed the speed many-fold here (caches and vector units want unit stride), as coalescing does on a GPU.
# - Blocking pays where the data outgrows a cache, and only once it reaches the registers: a cache panel alone was worth little on this CPU, a panel with a register block about 2×.
# - A tensor intrinsic takes fixed tiles, laid out for it: a compiler must tile, pad, pack and tensorize before it can use one, and that form is the only one a tensor core accepts.
# - A schedule is a list of such rewrites; the right tile sizes are measured (autotuning), not guessed.
# - BLAS still ran well above our best loops: its micro-kernels are written for each CPU, in assembly, with prefetching and wider register blocks. On a GPU, Triton brings a tiled kernel close to cuBLAS because the compiler does that last part for us.
