# %% [markdown]
# # Assignment 06: profiling and kernel fusion — count the ops, find the one that dominates, fuse, batch
#
# This assignment checks the ideas of lecture 06 (`course/06_profiling_fusion.ipynb`).
# You will read what the profiler records, fuse a chain of pointwise ops so that it runs as one pass, write the same fusion as a Triton kernel, replace a Python loop of small matmuls by one batched call, fold a layer's tail into its matmul by hand, and read a real profile.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other inputs and edge cases.
# - Everything here runs on a CPU: the profiler records CPU ops, `torch.compile` generates C++ for the CPU, and Triton kernels run in Triton's interpreter. The Triton speed item waits for a GPU regrade.
#
# Points: 19 autograded (2 of them on a GPU), 1 graded by hand.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

import gpucourse
from gpucourse import check, kernels, thresholds, timing

try:
    TRITON_ON_GPU = kernels.use_triton_gpu_or_interpreter()  # before `import triton`: without a GPU, its interpreter
    import triton
    import triton.language as tl
except ImportError as missing:  # Triton's wheels are for Linux on x86-64 only
    print(f"{missing}\nQuestion 4 needs Triton (use Colab for it); the other questions work without it.")

print(f"Running on {gpucourse.describe()} (device class {gpucourse.device_class()!r})")
torch.manual_seed(0)

# %% [markdown]
# ## Question 1: count the ops (2 points)
#
# Write `count_ops(fn, *args)`: how many times each ATen op runs when `fn(*args)` is called **once**, as a dict from the op's name to its count, e.g. `{"aten::addmm": 2, "aten::relu": 1, ...}`.
# Count exactly what `torch.profiler` records, as the lecture's tables show it: every event whose name starts with `aten::`, nested ops included (an `aten::linear` calls `aten::t` and `aten::addmm`: all three count), which is the "# of Calls" column of `prof.key_averages()`.
# Leave out everything else the profiler records (labels, `Torch-Compiled Region`, CUDA runtime calls).
# `fn` may be a torch function, an `nn.Module` or a function built from them; the hidden tests use functions you have not seen.
#
# A dispatch mode (`torch.utils._python_dispatch.TorchDispatchMode`) sees other ops: only the outermost ones below autograd, after decompositions. Use the profiler.
#
# About 4 lines.

# %% nbgrader={"grade_id": "count_ops", "solution": true}
def count_ops(fn, *args):
    """{ATen op name: times it ran} for one call fn(*args), as torch.profiler records them."""
    ### BEGIN SOLUTION
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(*args)
    return {event.key: event.count for event in prof.key_averages() if event.key.startswith("aten::")}
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_count_ops", "grade": true, "points": 2}
"""count_ops counts every ATen op of one call, nested ones included, and nothing else."""
mlp = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
counts = count_ops(mlp, torch.randn(5, 16))
assert isinstance(counts, dict), f"count_ops should return a dict, got {type(counts).__name__}"
for op, calls in {"aten::linear": 2, "aten::addmm": 2, "aten::t": 2, "aten::relu": 1}.items():
    check.assert_equal(counts.get(op), calls, name=f"count_ops(two Linear layers and a ReLU)[{op!r}]")
assert all(name.startswith("aten::") for name in counts), f"only ATen ops count, got {sorted(counts)}"
check.assert_equal(count_ops(torch.relu, torch.randn(3, 4)), {"aten::relu": 1, "aten::clamp_min": 1},
                   name="count_ops(torch.relu, ...): relu runs clamp_min inside")
### BEGIN HIDDEN TESTS
from autograder.profiling import op_counts  # noqa: E402 - the grader's own count, in its own process

for label, fn, args in [
    ("a small CNN", nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 5)), (torch.randn(2, 3, 8, 8),)),
    ("LayerNorm, GELU, Linear, Tanh", nn.Sequential(nn.LayerNorm(12), nn.GELU(), nn.Dropout(0.0), nn.Linear(12, 12), nn.Tanh()), (torch.randn(6, 12),)),
    ("softmax", functools.partial(torch.softmax, dim=-1), (torch.randn(4, 7),)),
    ("an embedding", nn.Sequential(nn.Embedding(10, 6), nn.Flatten(), nn.Sigmoid()), (torch.tensor([[1, 2, 3], [4, 5, 6]]),)),
    ("cumsum", torch.cumsum, (torch.randn(9), 0)),
]:
    check.assert_equal(count_ops(fn, *args), op_counts(fn, *args), name=f"count_ops({label})")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: the op that dominates (1 point)
#
# Write `dominant_op(fn, *args)`: the name of the ATen op with the most **self** CPU time in one call `fn(*args)` (self time: the op's own time, without the ops it called; `aten::linear`'s total time includes its `aten::addmm`, its self time does not).
# It is graded on calls where one op takes at least 5× the self time of any other and a good tenth of a second, so timing noise (or a busy machine pausing your process) cannot change the answer.
#
# About 4 lines.

# %% nbgrader={"grade_id": "dominant_op", "solution": true}
def dominant_op(fn, *args):
    """The name of the ATen op with the most self CPU time in one call fn(*args)."""
    ### BEGIN SOLUTION
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(*args)
    ops = [event for event in prof.key_averages() if event.key.startswith("aten::")]
    return max(ops, key=lambda event: event.self_cpu_time_total).key
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_dominant_op", "grade": true, "points": 1}
"""dominant_op names the op with the most self time: the matmul inside a Linear, not the Linear."""
wide = nn.Sequential(nn.Linear(4096, 512), nn.ReLU())
check.assert_equal(dominant_op(wide, torch.randn(2048, 4096)), "aten::addmm", name="dominant_op(Linear(4096, 512) + ReLU)")
### BEGIN HIDDEN TESTS
from autograder.profiling import self_times  # noqa: E402


def clear_winner(fn, *args):
    """The grader's own dominant op, by 5x at least: measured again if a busy machine paused another op."""
    for _ in range(3):
        times = sorted(self_times(fn, *args).items(), key=lambda item: -item[1]) + [("none", 0.0)]
        if times[0][1] >= 5 * times[1][1]:
            return times[0][0]
    raise AssertionError(f"grader: {times[:2]} is no clear winner")


# Each dominant op takes 20-200x the self time of the next: a pause of the process cannot change the answer.
for label, fn, args in [
    ("a convolution and a ReLU", nn.Sequential(nn.Conv2d(128, 32, 3, padding=1), nn.ReLU()), (torch.randn(16, 128, 56, 56),)),
    ("a wide Linear", nn.Sequential(nn.Flatten(), nn.Linear(8192, 256)), (torch.randn(2048, 8, 1024),)),
    ("a Tanh and a Linear", nn.Sequential(nn.Tanh(), nn.Linear(8192, 4096)), (torch.randn(128, 8192),)),
]:
    check.assert_equal(dominant_op(fn, *args), clear_winner(fn, *args), name=f"dominant_op({label})")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 3: fuse a pointwise tail (5 points)
#
# `tail_eager` below is the end of a transformer block's MLP: add the bias, GELU, scale, add the residual.
# Eagerly, that is four ops, and each reads and writes a whole tensor: four passes over memory where one would do.
#
# Write `fused_tail(x, bias, residual)` that returns the same values (float32 and float64 inputs, any 2-D shape) in **one pass**: with `torch.compile` (as the lecture does), or any other way that keeps to torch operations.
# Graded:
# - the values, on fresh inputs of several shapes and both dtypes (2 points);
# - the ops of one call, counted by the grader's own profiler (1 point): at most `MAX_TAIL_OPS` ATen ops that move tensor data, where the eager chain runs 4 plus the conversion of the Python float (a copy, `aten::_to_copy` and `aten::copy_`, for float32 inputs).
#   Not counted are allocations and the ops that return their input or a view of it (`aten::empty`, `aten::view`, `aten::lift_fresh`, an `aten::to` that converts nothing: `check.moving_ops`); `torch.compile(dynamic=True)`, for one, runs three such ops on every call to turn the Python float `SCALE` into a tensor, and they are no pass over memory. A conversion that does copy is counted by the copy it makes.
#   `torch.compile` is allowed, with any of its literal options (`fullgraph`, `dynamic`, `mode`), and judged by what the compiled call runs.
#   In your notebook the test counts them with your `count_ops`; when graded, your answer cell is run in a fresh process with only this notebook's setup cells, and counted there. So keep this answer cell to torch operations, `math` and `torch.compile` (no other imports, no state kept between calls, no `.numpy()` or `.tolist()`: work done outside torch is work the profiler cannot count); it is checked before it runs, and the message says which line is not allowed.
# - the speed, on fresh 4096 × 1024 float32 inputs (2 points), for an answer that also keeps to `MAX_TAIL_OPS` (counted as above) and is timed where it was counted: at least 1.2× faster than `tail_eager` on a CPU (the reference solution, compiled, measured 1.5-2.4× on 2-core CPUs, one thread, in this notebook and under the grader, and 1.29× in a notebook beside other heavy work: the GELU's erf costs the same fused or not, the passes over memory are what fusion saves), and 2× on a GPU. Compilation happens in the untimed warm-up call.
#   The GPU threshold is modelled, not yet measured (`gpucourse.thresholds`: 10 passes over memory down to 3, about 3.4× on every card in `gpu_specs`: V100, T4, A100, L4, H100, H200); `scripts/gpu_check.sh` will calibrate it on the first GPU run.
#
# The answer cell below holds the function's first lines; write its body in place of the `raise` line, and compile it as you choose (`@torch.compile` above the `def` is one way; any that keeps to torch operations).
#
# About 3 lines.

# %% nbgrader={"grade_id": "tail_setup", "locked": true}
SCALE = 0.7
MAX_TAIL_OPS = 2


def tail_eager(x, bias, residual):
    """x, residual: (m, n); bias: (n,) -> gelu(x + bias) * SCALE + residual (exact, erf-based GELU)."""
    return F.gelu(x + bias) * SCALE + residual


def tail_inputs(m, n, dtype=torch.float32):
    device = gpucourse.device()
    return (torch.randn(m, n, dtype=dtype, device=device), torch.randn(n, dtype=dtype, device=device),
            torch.randn(m, n, dtype=dtype, device=device))


def check_tail(args, output):
    check.assert_close(output, tail_eager(*args), rtol=1e-4, atol=1e-5, name=f"fused_tail on {tuple(args[0].shape)} {args[0].dtype}")


# %% nbgrader={"grade_id": "fused_tail", "solution": true}
### BEGIN SOLUTION
@torch.compile
### END SOLUTION
def fused_tail(x, bias, residual):
    """gelu(x + bias) * SCALE + residual, in at most MAX_TAIL_OPS ATen ops that move tensor data."""
    ### BEGIN SOLUTION
    return F.gelu(x + bias) * SCALE + residual  # compiled, Inductor fuses the chain into one loop
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_fused_tail_correct", "grade": true, "points": 2}
"""fused_tail matches tail_eager on fresh inputs, twice per shape (no answer kept from an earlier call)."""
for shape in [(64, 96), (64, 96), (33, 17)]:
    args = tail_inputs(*shape)
    check_tail(args, fused_tail(*args))
### BEGIN HIDDEN TESTS
for shape, dtype in [((5, 3), torch.float64), ((128, 256), torch.float32), ((1, 1000), torch.float32)]:
    args = tail_inputs(*shape, dtype=dtype)
    check_tail(args, fused_tail(*args))
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_fused_tail_ops", "grade": true, "points": 1}
"""fused_tail runs at most MAX_TAIL_OPS ATen ops that move tensor data in one call (after a warm-up call that compiles), with the right values."""
args = tail_inputs(256, 512)
output, ops = check.counted_call(fused_tail, *args, counter=count_ops)
check_tail(args, output)
ops = check.moving_ops(ops)  # allocations and views are no pass over memory
total = sum(ops.values())
assert total <= MAX_TAIL_OPS, f"fused_tail ran {total} ATen ops that move tensor data ({ops}); at most {MAX_TAIL_OPS} allowed: fuse the chain"
print(f"fused_tail: {total} ATen op(s) that move tensor data in one call {ops}")

# %% nbgrader={"grade_id": "test_fused_tail_speed", "grade": true, "points": 2}
"""fused_tail runs at most MAX_TAIL_OPS ATen ops that move data and is 1.2x faster than tail_eager on fresh 4096 x 1024 float32 inputs (2x on a GPU)."""
# On a GPU the threshold is modelled, not yet measured (gpucourse.thresholds.fused_tail_speed); scripts/gpu_check.sh calibrates it.
SPEEDUP_NEEDED = {"cpu": 1.2, "cuda": 2.0}
print(thresholds.describe("test_fused_tail_speed", SPEEDUP_NEEDED))
# Fused first (a speed an unfused chain also reaches on a busy machine earns nothing), then timed where it was counted.
ops = check.moving_ops(check.counted_call(fused_tail, *tail_inputs(256, 512), counter=count_ops)[1])
assert sum(ops.values()) <= MAX_TAIL_OPS, f"fused_tail ran {sum(ops.values())} ATen ops that move tensor data ({ops}); at most {MAX_TAIL_OPS} allowed: fuse the chain"
fused = check.torch_only(fused_tail)
args = tail_inputs(4096, 1024)
check_tail(args, fused(*args))
check.assert_measured_speedup(lambda: timing.compare_speed(tail_eager, fused, lambda: tail_inputs(4096, 1024), check=check_tail,
                                                                charge_cpu_time=True),
                              check.required_speedup(SPEEDUP_NEEDED), name="fused_tail vs tail_eager")

# %% [markdown]
# ## Question 4: the same fusion as a Triton kernel (5 points, 2 of them on a GPU)
#
# Write the kernel `bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr)`: `out = gelu(x + bias)` for a contiguous `x` of shape `(m, n_cols)` seen as `n_elements = m * n_cols` values, and `bias` of shape `(n_cols,)` added to every row.
# Each program handles `BLOCK` consecutive elements; mask the loads and the store so that `n_elements` need not be a multiple of `BLOCK` (the tests launch shapes that are not).
# The exact GELU is `0.5 * y * (1 + erf(y / sqrt(2)))`: `tl.math.erf` (or `tl.erf`) is there.
# Then write the launcher `triton_fused(x, bias)` that allocates the output and launches your kernel over the whole tensor, as Triton's tutorials do.
#
# Graded:
# - the kernel (2 points), launched by the tests themselves on shapes that are not multiples of the block, with a guard zone after the output that must stay untouched. When graded, your kernel's source is compiled by Triton for a real GPU (sm_80) first, then run in a fresh process that holds only that source: a kernel body must be Triton code (no torch inside: the interpreter would run it, a GPU would not). There every load and store is also checked to stay inside the tensors the kernel was given: a load without a mask reads past the end of `x`, which a GPU may not survive.
# - the launcher (1 point): `triton_fused` must launch your kernel, and the kernel must do all the work: the test counts what one call runs, and besides your kernel's launches torch may only allocate (`torch.empty_like`), never compute (no `F.gelu`, no `+`). When graded it is counted in a fresh process holding only the setup cells, your launcher's cell and your kernel, so keep the launcher's cell to `torch.empty...`, the tensors' shapes and strides, `triton.cdiv` and the launch (no `torch.compile`).
# - on a GPU, `triton_fused` against the eager `F.gelu(x + bias)` on 4096 × 4096 float32 (2 points), first checked as the launcher item checks it, then timed where it was checked: at least 1.3×. That threshold is modelled, not yet measured (`gpucourse.thresholds`: one pass instead of two over memory, 2× on every card in `gpu_specs`: V100, T4, A100, L4, H100, H200); `scripts/gpu_check.sh` will calibrate it on the first GPU run.
#
# The kernel's answer cell below holds its first lines; write its body in place of the `raise` line, starting from `offsets = ...`, this program's `BLOCK` elements.
#
# About 10 lines, with the launcher.

# %% nbgrader={"grade_id": "bias_gelu_kernel", "solution": true}
@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    """out = gelu(x + bias) over a (m, n_cols) tensor seen as n_elements values, BLOCK per program."""
    ### BEGIN SOLUTION
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n_elements
    y = tl.load(x_ptr + offsets, mask=inside) + tl.load(bias_ptr + offsets % n_cols, mask=inside)
    tl.store(out_ptr + offsets, 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476)), mask=inside)
    ### END SOLUTION


# %% nbgrader={"grade_id": "triton_fused", "solution": true}
def triton_fused(x, bias):
    """x: (m, n) contiguous, bias: (n,) -> gelu(x + bias), computed by bias_gelu_kernel."""
    ### BEGIN SOLUTION
    out = torch.empty_like(x)
    block = 1024
    bias_gelu_kernel[(triton.cdiv(x.numel(), block),)](x, bias, out, x.numel(), x.shape[1], BLOCK=block)
    return out
    ### END SOLUTION


# %% nbgrader={"grade_id": "bias_gelu_setup", "locked": true}
GUARD = 100  # elements after the output that the kernel must leave alone (a store without a mask writes there)


def launch_bias_gelu(kernel, m, n, block):
    """Launch ``kernel`` on fresh (m, n) inputs: (x, bias, out, guard).

    out is the first m * n elements of a longer buffer: after it, a guard zone of NaNs that a store
    without a mask overwrites. x is exactly m * n elements: a load without a mask reads past its end
    (the grader checks every load's addresses; in a notebook it reads whatever lies there).
    """
    device = gpucourse.device()
    x, bias = torch.randn(m * n, device=device), torch.randn(n, device=device)
    out = torch.full((m * n + GUARD,), float("nan"), device=device)
    check.written(kernel)[(triton.cdiv(m * n, block),)](x, bias, out, m * n, n, BLOCK=block)  # unwritten: its stub's error here, not Triton's
    return x.view(m, n), bias, out[: m * n].view(m, n), out[m * n:]


def check_bias_gelu(kernel, m, n, block):
    x, bias, out, guard = launch_bias_gelu(kernel, m, n, block)
    check.assert_close(out, F.gelu(x + bias), rtol=1e-4, atol=1e-5, name=f"bias_gelu_kernel on ({m}, {n}), BLOCK={block}")
    assert bool(torch.isnan(guard).all()), f"bias_gelu_kernel on ({m}, {n}), BLOCK={block} wrote past the end of the output: mask the store"


def check_triton_fused(launcher, m, n):
    """One counted call of ``launcher`` on fresh (m, n) inputs: the right values, computed by Triton kernels alone."""
    x, bias = torch.randn(m, n, device=gpucourse.device()), torch.randn(n, device=gpucourse.device())
    output, ops = check.counted_call(launcher, x, bias, counter=check.launched_ops)
    check.assert_close(output, F.gelu(x + bias), rtol=1e-4, atol=1e-5, name=f"triton_fused on ({m}, {n})")
    check.assert_kernels_did_the_work(ops, name=f"triton_fused on ({m}, {n})")


# %% nbgrader={"grade_id": "test_bias_gelu_kernel", "grade": true, "points": 2}
"""bias_gelu_kernel, launched by the test, computes gelu(x + bias) on shapes that are not multiples of BLOCK, and writes nothing past the output."""
check_bias_gelu(bias_gelu_kernel, 4, 32, 64)  # 128 elements: two full blocks
check_bias_gelu(bias_gelu_kernel, 7, 45, 64)  # 315 elements: the last block is partly outside
### BEGIN HIDDEN TESTS
check_bias_gelu(bias_gelu_kernel, 3, 5, 128)  # fewer elements than one block
check_bias_gelu(bias_gelu_kernel, 13, 77, 256)
check_bias_gelu(bias_gelu_kernel, 1, 1, 16)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_triton_fused_launch", "grade": true, "points": 1}
"""triton_fused launches your kernel, which does all the work (torch only allocates), on fresh inputs, twice per shape."""
for shape in [(7, 45), (7, 45), (16, 64)]:
    check_triton_fused(triton_fused, *shape)
### BEGIN HIDDEN TESTS
for shape in [(1, 3), (37, 100)]:
    check_triton_fused(triton_fused, *shape)
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_triton_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: triton_fused, launching only your kernel, is 1.3x faster than the eager F.gelu(x + bias) on 4096 x 4096 float32."""
# Modelled, not yet measured (gpucourse.thresholds.bias_gelu_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 1.3}
print(thresholds.describe("test_triton_speed", SPEEDUP_NEEDED))
check_triton_fused(triton_fused, 7, 45)  # first, a small call
if gpucourse.device_class() != "cuda":
    print("needs a GPU: there the kernel reads x once and writes out once, where eager torch makes two passes")
else:
    def bias_gelu_eager(x, bias):
        return F.gelu(x + bias)

    def fresh_bias_gelu():
        return torch.randn(4096, 4096, device="cuda"), torch.randn(4096, device="cuda")

    def check_timed_bias_gelu(args, output):
        check.assert_close(output, bias_gelu_eager(*args), rtol=1e-4, atol=1e-5, name="a timed triton_fused")

    check_triton_fused(triton_fused, 4096, 4096)  # at the timed size too: the kernel does all the work there
    # Timed where it was counted (when graded: the process holding only the setup cells, the launcher and its kernel).
    result = timing.compare_speed(bias_gelu_eager, check.torch_only(triton_fused), fresh_bias_gelu, check=check_timed_bias_gelu)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="triton_fused vs eager")

# %% [markdown]
# ## Question 5: batch the small matmuls (3 points)
#
# `matmuls_loop(As, Bs)` below multiplies 512 pairs of small matrices one pair at a time: 512 ops, each too small to keep the CPU (or a GPU) busy, each paying the dispatch (or launch) cost.
# Write `batched_matmuls(As, Bs)` with the same result, `(batch, m, p)` for `As` of shape `(batch, m, k)` and `Bs` of shape `(batch, k, p)`, without a Python loop.
# Graded: the values on fresh inputs, several shapes (1 point); the speed on fresh 512 × 16 × 16 inputs (2 points): at least 3× faster than the loop on a CPU (the reference measured 10-15×) and 10× on a GPU, where each of the loop's matmuls is a kernel launch (modelled, not yet measured: `gpucourse.thresholds` gives 250-480× on the cards in `gpu_specs`: V100, T4, A100, L4, H100, H200; `scripts/gpu_check.sh` will calibrate it on the first GPU run).
#
# About 1 line.

# %% nbgrader={"grade_id": "matmuls_setup", "locked": true}
def matmuls_loop(As, Bs):
    """As: (batch, m, k), Bs: (batch, k, p) -> (batch, m, p), one small matmul at a time."""
    return torch.stack([a @ b for a, b in zip(As, Bs)])


def matmul_inputs(batch, m, k, p):
    device = gpucourse.device()
    return torch.randn(batch, m, k, device=device), torch.randn(batch, k, p, device=device)


def check_matmuls(args, output):
    # The expected product in float64 by torch's batched matmul: the loop itself would cost more than
    # the timed calls it checks (the speed test checks every output).
    As, Bs = args
    expected = torch.matmul(As.double(), Bs.double()).to(As.dtype)
    check.assert_close(output, expected, rtol=1e-4, atol=1e-4, name=f"batched_matmuls on {tuple(args[0].shape)} @ {tuple(args[1].shape)}")


# %% nbgrader={"grade_id": "batched_matmuls", "solution": true}
def batched_matmuls(As, Bs):
    """As: (batch, m, k), Bs: (batch, k, p) -> (batch, m, p), all products at once."""
    ### BEGIN SOLUTION
    return torch.bmm(As, Bs)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_batched_matmuls_correct", "grade": true, "points": 1}
"""batched_matmuls matches the loop on fresh inputs, twice per shape."""
for shape in [(8, 4, 5, 3), (8, 4, 5, 3), (1, 2, 2, 2)]:
    args = matmul_inputs(*shape)
    check_matmuls(args, batched_matmuls(*args))
### BEGIN HIDDEN TESTS
for shape in [(3, 1, 7, 1), (64, 16, 16, 16), (2, 33, 9, 5)]:
    args = matmul_inputs(*shape)
    check_matmuls(args, batched_matmuls(*args))
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_batched_matmuls_speed", "grade": true, "points": 2}
"""batched_matmuls is 3x faster than the loop on fresh 512 x 16 x 16 inputs (10x on a GPU)."""
# On a GPU the threshold is modelled, not yet measured (gpucourse.thresholds.batched_matmuls_speed); scripts/gpu_check.sh calibrates it.
SPEEDUP_NEEDED = {"cpu": 3.0, "cuda": 10.0}
print(thresholds.describe("test_batched_matmuls_speed", SPEEDUP_NEEDED))
args = matmul_inputs(512, 16, 16, 16)
check_matmuls(args, batched_matmuls(*args))
result = timing.compare_speed(matmuls_loop, batched_matmuls, lambda: matmul_inputs(512, 16, 16, 16), check=check_matmuls)
check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="batched_matmuls vs the loop")

# %% [markdown]
# ## Question 6: fold the tail into the matmul, by hand (3 points)
#
# `linear_tail_eager` below is a layer and its tail: `(x @ weight + bias) * SCALE + residual`, four ops, each writing an `(m, n)` tensor that the next one reads back.
# No compiler this time: write `linear_tail(x, weight, bias, residual)` with the same values from torch's eager ops, in **at most 2 ops that move at most `linear_tail_budget(m, k, n)` bytes**.
# Besides reading `x`, `weight` and `bias` once, the eager chain moves 8 `(m, n)` tensors' worth (the product written, read back, ...); the budget allows 5, of which reading `residual` and writing the output are 2.
# Look at the optional arguments of torch's matmul ops (`torch.addmm`'s `beta` and `alpha`) and of `torch.add` (`alpha`): a matmul can add a tensor to its product and scale both, as cuBLAS's epilogues do on a GPU.
# Graded:
# - the values, float32 and float64, on fresh inputs of several shapes (1 point);
# - the ops and the bytes they move (2 points), counted by `linear_tail_traffic` below: every op below autograd (views move nothing), each reading its tensor arguments and writing its outputs whole. When graded it runs in a fresh process with only this notebook's setup cells and your answer cell, so keep that cell to torch operations, as for `fused_tail`; `torch.compile` is switched off there (a compiled function is counted as its code runs).
#
# About 2 lines.

# %% nbgrader={"grade_id": "linear_tail_setup", "locked": true}
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402 - the counter below is this question's alone


def linear_tail_eager(x, weight, bias, residual):
    """x: (m, k), weight: (k, n), bias: (n,), residual: (m, n) -> (x @ weight + bias) * SCALE + residual."""
    return (x @ weight + bias) * SCALE + residual


def linear_tail_inputs(m, k, n, dtype=torch.float32):
    device = gpucourse.device()
    return (torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device),
            torch.randn(n, dtype=dtype, device=device), torch.randn(m, n, dtype=dtype, device=device))


def linear_tail_budget(m, k, n, itemsize=4):
    """Bytes linear_tail may move: its inputs once (x, weight, bias, residual) and 5 (m, n) tensors' worth in all."""
    return itemsize * (m * k + k * n + n + 5 * m * n)


def check_linear_tail(args, output):
    x = args[0]
    check.assert_close(output, linear_tail_eager(*args), rtol=1e-4, atol=1e-4 * math.sqrt(x.shape[1]),
                       name=f"linear_tail on {tuple(x.shape)} @ {tuple(args[1].shape)} {x.dtype}")


def _moved(tensor):
    """Bytes of the distinct elements a tensor covers: a broadcast bias (stride 0) is its n values, not m * n."""
    return tensor.element_size() * math.prod(size for size, stride in zip(tensor.shape, tensor.stride()) if stride != 0)


class _Traffic(TorchDispatchMode):
    """Each op below autograd that is not a view, with the bytes of its tensor arguments and of its outputs."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        if not func.is_view:
            values = [*args, *(kwargs or {}).values(), *(output if isinstance(output, tuple | list) else [output])]
            self.ops.append((str(func.overloadpacket), sum(_moved(v) for v in values if isinstance(v, torch.Tensor))))
        return output


def linear_tail_traffic(m, k, n, dtype=torch.float32):
    """One call of linear_tail on fresh (m, k), (k, n) inputs: (the inputs, its output, [(op, bytes moved), ...])."""
    args = linear_tail_inputs(m, k, n, dtype)
    with torch.compiler.set_stance("force_eager"), _Traffic() as traffic:
        output = linear_tail(*args)
    return args, output, traffic.ops


def check_linear_tail_traffic(traffic, m, k, n, dtype=torch.float32):
    """``traffic`` (linear_tail_traffic, run where only the setup cells and your answer cell ran): right values, at most
    2 ops moving at most linear_tail_budget bytes."""
    args, output, ops = traffic(m, k, n, dtype)
    check_linear_tail(args, output)
    moved, budget = sum(nbytes for _, nbytes in ops), linear_tail_budget(m, k, n, args[0].element_size())
    assert len(ops) <= 2 and moved <= budget, (f"linear_tail on ({m}, {k}) @ ({k}, {n}) ran {len(ops)} ops moving {moved} bytes "
                                               f"({ops}); at most 2 ops and {budget} bytes: fold the bias, the scale and the residual into the matmul")


# %% nbgrader={"grade_id": "linear_tail", "solution": true}
def linear_tail(x, weight, bias, residual):
    """x: (m, k), weight: (k, n), bias: (n,), residual: (m, n) -> (x @ weight + bias) * SCALE + residual, in 2 ops."""
    ### BEGIN SOLUTION
    # SCALE * (x @ weight) + (SCALE * bias + residual): one add for the second part, the matmul adds its product to it.
    return torch.addmm(torch.add(residual, bias, alpha=SCALE), x, weight, alpha=SCALE)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_linear_tail_correct", "grade": true, "points": 1}
"""linear_tail matches linear_tail_eager on fresh inputs, twice per shape."""
for shape in [(32, 16, 24), (32, 16, 24), (5, 1, 3)]:
    args = linear_tail_inputs(*shape)
    check_linear_tail(args, linear_tail(*args))
### BEGIN HIDDEN TESTS
for shape, dtype in [((7, 33, 9), torch.float64), ((1, 64, 128), torch.float32)]:
    args = linear_tail_inputs(*shape, dtype=dtype)
    check_linear_tail(args, linear_tail(*args))
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_linear_tail_traffic", "grade": true, "points": 2}
"""linear_tail runs at most 2 ops moving at most linear_tail_budget bytes, counted where only your answer cell ran."""
traffic = check.answers_only(linear_tail_traffic, "linear_tail", gated=True)  # when graded: where only your answer cell ran
check_linear_tail_traffic(traffic, 256, 64, 128)
check_linear_tail_traffic(traffic, 256, 64, 128)
### BEGIN HIDDEN TESTS
check_linear_tail_traffic(traffic, 100, 300, 40, torch.float64)
### END HIDDEN TESTS

# %% [markdown]
# ## Question 7: read a profile (1 point, graded by hand)
#
# This table is a real profile, measured on a CPU (AMD EPYC, one thread, torch 2.13) of one forward call of an MLP block on a batch of 256 × 1024: LayerNorm, `Linear(1024, 4096)`, a gated GELU written as separate ops (`F.gelu(y) * torch.sigmoid(y)`), dropout, `Linear(4096, 1024)` and a residual add.
#
# ```
#                        Name    Self CPU %      Self CPU     CPU total %   CPU total    # of Calls
#                 aten::addmm        70.36%      47.429ms        73.30%      49.411ms           2
#            aten::bernoulli_        11.53%       7.770ms        11.53%       7.770ms           1
#                   aten::mul         7.07%       4.766ms         7.07%       4.766ms           2
#                  aten::gelu         3.95%       2.665ms         3.95%       2.665ms           1
#               aten::sigmoid         3.14%       2.120ms         3.14%       2.120ms           1
#                 aten::copy_         2.93%       1.978ms         2.93%       1.978ms           3
#                  aten::div_         0.26%     178.395us         0.30%     204.504us           1
#     aten::native_layer_norm         0.24%     159.358us         0.26%     174.940us           1
#                   aten::add         0.21%     143.604us         0.21%     143.604us           1
# Self CPU time total: 67.408ms
# ```
#
# Which op would you attack first, and how? Work out the two matmuls' FLOP/s (each `aten::addmm` of a (256, 1024) by (1024, 4096) matrix is 2 · 256 · 1024 · 4096 FLOPs) and compare it with what one core of a CPU can do (about 50-100 GFLOP/s in float32 with AVX2 FMA), then say what the rest of the table costs and what kind of cost it is (compute-, memory- or overhead-bound).
# Three to five sentences.

# %% [markdown] nbgrader={"grade_id": "profile_answer", "solution": true, "grade": true, "points": 1}
# YOUR ANSWER HERE
#
# BEGIN SOLUTION
# The two `aten::addmm` take 70% of the time, but they do 2 × 2.15 GFLOP in 47 ms, about 90 GFLOP/s: one core's float32 peak, so they are compute-bound and already near the roofline; only less work per FLOP helps there (bfloat16 autocast where the CPU has AMX/AVX-512 BF16, more threads, a GPU's tensor cores).
# The other 30% (bernoulli for dropout, the two `mul`s, `gelu`, `sigmoid`, the copies) are pointwise ops on a (256, 4096) tensor: each reads and writes 4 MB and does almost no arithmetic, so they are memory-bound and pay once per op.
# I would attack that tail first for the cheap win: fuse gelu · sigmoid · dropout mask into one pass (torch.compile), which removes most of those 20 ms of passes, then lower the matmuls' precision for the rest.
# END SOLUTION
