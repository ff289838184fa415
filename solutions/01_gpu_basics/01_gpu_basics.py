# %% [markdown]
# # Assignment 01: GPU basics — timing, vectorising, rooflines and offloading
#
# This assignment checks the four ideas of lecture 01 (`course/01_gpu_basics.ipynb`).
# You will write a timing function, replace a Python loop with tensor operations, do the arithmetic of a roofline, and decide when sending work to a GPU pays.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests that try other shapes, dtypes and edge cases, so test your code beyond the visible examples.
# - The notebook runs on a CPU or a GPU; speed thresholds depend on which (`gpucourse.device_class()`).
#
# Points: 11 autograded (1 of them on a GPU), 1 graded by hand.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
import math
import time

import torch

import gpucourse
from gpucourse import check, thresholds, timing

DEVICE = gpucourse.device()
print(f"Running on {gpucourse.describe()} (device class {gpucourse.device_class()!r})")

# %% [markdown]
# ## Question 1: a timing function (3 points)
#
# Write `time_call(fn, *args, warmup=3, repeats=10)`:
# - call `fn(*args)` `warmup` times without timing (those calls pay one-time costs),
# - then time each of the next `repeats` calls separately with `time.perf_counter()`,
# - and return the **median** of those times, in seconds, as a `float`.
#   With an odd number of repeats that is the middle time once sorted; with an even number, the **mean of the two middle times** (what `statistics.median` returns).
#   Not the lower or the upper of the two: `torch.median` returns the lower, `sorted(times)[len(times) // 2]` the upper, and both are marked wrong for an even count.
#
# GPU work is asynchronous: a call returns once its kernels are queued, not when they finish.
# When CUDA is in use (`torch.cuda.is_available()`), call `torch.cuda.synchronize()` before starting and before stopping the clock.
#
# 2 points for the timing on any machine, 1 for the synchronisation, checked on a GPU (a CPU grader leaves it for a GPU regrade).
# About 10 lines.

# %% nbgrader={"grade_id": "time_call", "solution": true}
def time_call(fn, *args, warmup=3, repeats=10):
    """Median wall-clock seconds of one call of fn(*args), after `warmup` untimed calls."""
    ### BEGIN SOLUTION
    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn(*args)
        sync()
        times.append(time.perf_counter() - start)
    times.sort()
    middle = len(times) // 2
    median = times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
    return float(median)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_time_call", "grade": true, "points": 2}
"""time_call skips the warm-up calls, times each repeat and returns their median."""


def sleeper(durations):
    """A function whose k-th call sleeps durations[k] seconds; it counts its calls and records when each
    began and ended (a busy machine wakes a sleeper late: the checks compare against what happened)."""
    calls, spans = [], []

    def fn(*args):
        calls.append(args)
        start = time.perf_counter()
        time.sleep(durations[min(len(calls) - 1, len(durations) - 1)])
        spans.append((start, time.perf_counter()))

    return fn, calls, spans


def middle_of(times):
    """The median of ``times``: the middle one, or the mean of the two middle ones."""
    times = sorted(times)
    middle = len(times) // 2
    return times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2


def timed_run(durations, *args, **kwargs):
    """time_call on a fresh sleeper; also returns the moments just before time_call was called and just after it
    returned, which bound where its first and last clock reads can lie."""
    fn, calls, spans = sleeper(durations)
    entered = time.perf_counter()
    seconds = time_call(fn, *args, **kwargs)
    return seconds, calls, spans, (entered, time.perf_counter())


def pauses(spans, window):
    """The time outside the calls: pauses[k] just before call k, and pauses[-1] after the last one."""
    edges = [window[0], *(moment for span in spans for moment in span), window[1]]
    return [later - earlier for earlier, later in zip(edges[::2], edges[1::2])]


def check_median(seconds, spans, window, what, warmup=0):
    """``seconds`` is the median of the timed calls as a clock read around each call sees them. Each such time is
    at least the call's sleep, and at most its sleep plus the gaps before and after it, where your code read the
    clock (on a busy machine, or when a call reaches your code through another process, the gaps grow, and the
    bound with them), but never more than 60 ms plus the sleep: code of yours that waits between calls cannot
    widen it further. Before the first call the gap starts when time_call was called, after the last it ends when
    time_call returned (``window``); 2 ms more either way for the clocks' resolution. The sleeps below put every
    other statistic (a middle time, the mean) 73 ms or more from the median: outside these bounds."""
    slept = [end - start for start, end in spans[warmup:]]
    gaps = pauses(spans, window)
    around = [sleep + min(gaps[k] + gaps[k + 1], 0.06) for k, sleep in enumerate(slept, start=warmup)]
    lowest, highest = middle_of(slept) - 0.002, middle_of(around) + 0.002
    assert isinstance(seconds, float), f"time_call should return a float, got {type(seconds).__name__}"
    if not lowest <= seconds <= highest:  # a timing failure: the grader measures the item once more before a 0
        raise check.TimingFailure(
            f"{what}: the timed calls slept {', '.join(f'{t * 1e3:.0f}' for t in sorted(slept))} ms, whose median is "
            f"{middle_of(slept) * 1e3:.1f} ms (with the time around each call: at most {highest * 1e3:.1f} ms); got {seconds * 1e3:.1f} ms")


def undisturbed_run(durations, **kwargs):
    """time_call on a fresh sleeper, run again (five runs at most) while a pause before, between or after the calls
    reached 40 ms: there a busy machine lifts one middle time as far as the median, and no bound could tell them apart."""
    for _ in range(5):
        seconds, calls, spans, window = timed_run(durations, **kwargs)
        if max(pauses(spans, window)) < 0.04:
            break
    return seconds, spans, window


seconds, calls, spans, window = timed_run([0.1, 0.1, 0.1, 0.002, 0.002, 0.002], "x", warmup=3, repeats=3)
assert len(calls) == 6, f"with warmup=3, repeats=3, fn should be called 6 times, was called {len(calls)} times"
assert calls[0] == ("x",), f"fn should be called with the extra arguments: expected ('x',), got {calls[0]}"
check_median(seconds, spans, window, "warm-up calls slept 0.1 s and are not timed", warmup=3)

fn, calls, spans = sleeper([0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001])
time_call(fn)
assert len(calls) == 13, f"by default (warmup=3, repeats=10) fn should be called 13 times, was called {len(calls)}"

# An even number of repeats: 2, 10, 200 and 500 ms once sorted, so the median is (10 + 200) / 2 = 105 ms; the
# lower middle (10 ms) and the upper (200 ms) are 95 ms away, the mean (178 ms) 73 ms: all far outside the bounds.
seconds, spans, window = undisturbed_run([0.2, 0.002, 0.5, 0.01], warmup=0, repeats=4)
check_median(seconds, spans, window, "an even number of repeats: the median is the mean of the two middle ones")
### BEGIN HIDDEN TESTS
# The median, not the mean: one slow outlier among five repeats must not move it (the mean is 82 ms).
seconds, calls, spans, window = timed_run([0.002, 0.002, 0.002, 0.4, 0.002, 0.002], warmup=1, repeats=5)
assert len(calls) == 6, f"warmup=1, repeats=5 should call fn 6 times, got {len(calls)}"
check_median(seconds, spans, window, "the median of 5 times, one of them 400 ms", warmup=1)

# No warm-up at all, one repeat, keyword and positional arguments passed through.
fn, calls, spans = sleeper([0.02])
seconds = time_call(fn, 1, 2, warmup=0, repeats=1)
assert calls == [(1, 2)], f"warmup=0, repeats=1 should call fn once with (1, 2), got {calls}"
assert isinstance(seconds, float) and spans[0][1] - spans[0][0] - 0.002 <= seconds < 0.5, f"one repeat of a 20 ms call: got {seconds:.4f} s"

# Six repeats (1, 2, 10, 200, 210, 700 ms once sorted): the mean of the two middle times, (10 + 200) / 2 = 105 ms;
# the lower middle (10), the upper middle (200) and the mean of all (187) are each 80 ms or more away from it.
seconds, spans, window = undisturbed_run([0.2, 0.7, 0.001, 0.21, 0.01, 0.002], warmup=0, repeats=6)
check_median(seconds, spans, window, "median of 6 times")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_time_call_sync", "grade": true, "points": 1} tags=["requires-gpu"]
"""On a GPU: time_call waits for the GPU to finish before it reads the clock."""
assert isinstance(time_call(abs, -1, warmup=0, repeats=1), float), "time_call should return a float"  # first, any machine
if gpucourse.gpu_or_explain("a 4096×4096 matmul timed with time_call takes milliseconds; without synchronising it looks almost free"):
    # Asynchronous launches: without synchronisation a big matmul would look almost free.
    a = torch.randn(4096, 4096, device="cuda")
    honest = timing.measure(torch.mm, a, a).median
    measured = time_call(torch.mm, a, a, warmup=2, repeats=5)
    assert measured > 0.5 * honest, (
        f"time_call measured {measured * 1e3:.3f} ms for a matmul that takes {honest * 1e3:.3f} ms: "
        "synchronise CUDA before reading the clock"
    )

# %% [markdown]
# ## Question 2: squared distances without Python loops (4 points)
#
# Given points `x` of shape `(n, d)` and `y` of shape `(m, d)`, return the `(n, m)` tensor whose entry `[i, j]` is $\lVert x_i - y_j \rVert^2$.
# The result must be on the inputs' device and have the inputs' dtype.
#
# Below is a correct but slow baseline: one Python iteration per row of `x`, each launching a few small tensor operations.
# Write `pairwise_sq_dists` with **no Python loop**.
# Two routes work: broadcasting (`x[:, None, :] - y[None, :, :]`), or the identity $\lVert a - b \rVert^2 = \lVert a \rVert^2 + \lVert b \rVert^2 - 2\, a \cdot b$, whose cross term is one matrix multiplication.
# Measured on the course's 2-core CI machine (one thread), the identity ran 15–24× faster than the loop and broadcasting about 9× faster; on a GPU the loop is far slower still, since every row launches kernels.
# Watch out: the identity can give tiny negative numbers through rounding, and distances are never negative.
#
# 2 points for correctness, 2 for speed: at least 4× faster than the loop on a CPU, 10× on a GPU, measured on fresh random inputs after the correctness tests pass.
# The GPU threshold is modelled, not yet measured: no GPU has run this item; `gpucourse.thresholds` counts 800 launches for the loop and 9 for the identity, about 85× on every card in `gpu_specs` (V100, T4, A100, L4, H100, H200), and `scripts/gpu_check.sh` will calibrate it on the first GPU run.
# About 3 lines.

# %% nbgrader={"grade_id": "baseline", "locked": true}
def pairwise_sq_dists_loop(x, y):
    """Baseline: x (n, d), y (m, d) -> (n, m) squared distances, one Python iteration per row of x."""
    out = torch.empty(x.shape[0], y.shape[0], dtype=x.dtype, device=x.device)
    for i in range(x.shape[0]):
        out[i] = ((x[i] - y) ** 2).sum(dim=1)
    return out


# %% nbgrader={"grade_id": "reference_setup", "locked": true} tags=["grader-side"]
# For the tests alone: when graded, this cell runs in the grader, where your answers cannot call what it defines.
def reference_sq_dists(x, y):
    """Trusted reference for the tests: broadcasting in float64, cast back to the inputs' dtype."""
    diff = x.double()[:, None, :] - y.double()[None, :, :]
    return (diff**2).sum(dim=-1).to(x.dtype)


# %% nbgrader={"grade_id": "pairwise_sq_dists", "solution": true}
def pairwise_sq_dists(x, y):
    """x: (n, d), y: (m, d) -> (n, m) squared Euclidean distances, on x's device and dtype."""
    ### BEGIN SOLUTION
    cross = x @ y.T
    squares = (x * x).sum(dim=1, keepdim=True) + (y * y).sum(dim=1)
    return (squares - 2 * cross).clamp_min_(0)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_pairwise_correct", "grade": true, "points": 2}
"""pairwise_sq_dists matches the float64 reference in shape, dtype, device and values."""
torch.manual_seed(0)
x = torch.randn(5, 3, device=DEVICE)
y = torch.randn(7, 3, device=DEVICE)
check.assert_close(pairwise_sq_dists(x, y), reference_sq_dists(x, y), rtol=1e-4, atol=1e-4, name="pairwise_sq_dists(x (5, 3), y (7, 3))")
# The same shapes again with other values: a result kept from an earlier call of that shape is wrong.
x2, y2 = torch.randn(5, 3, device=DEVICE), torch.randn(7, 3, device=DEVICE)
check.assert_close(pairwise_sq_dists(x2, y2), reference_sq_dists(x2, y2), rtol=1e-4, atol=1e-4,
                   name="pairwise_sq_dists on new (5, 3) and (7, 3) points, the shapes of the previous call")

same = torch.randn(4, 2, device=DEVICE)
diagonal = torch.diagonal(pairwise_sq_dists(same, same))
assert bool((diagonal.abs() < 1e-5).all()), f"a point's distance to itself should be 0, got {diagonal.tolist()}"
assert bool((pairwise_sq_dists(x, y) >= 0).all()), "squared distances can never be negative"
### BEGIN HIDDEN TESTS
for shape_x, shape_y in [((1, 3), (6, 3)), ((6, 1), (4, 1)), ((1, 1), (1, 1)), ((33, 17), (9, 17))]:
    for draw in ("first", "second"):  # twice per shape, other values each time
        x = torch.randn(*shape_x, device=DEVICE) * 10
        y = torch.randn(*shape_y, device=DEVICE) * 10
        check.assert_close(pairwise_sq_dists(x, y), reference_sq_dists(x, y), rtol=1e-4, atol=1e-2,
                           name=f"pairwise_sq_dists(x {shape_x}, y {shape_y}), {draw} draw")

x64 = torch.randn(8, 5, dtype=torch.float64, device=DEVICE)
y64 = torch.randn(3, 5, dtype=torch.float64, device=DEVICE)
check.assert_close(pairwise_sq_dists(x64, y64), reference_sq_dists(x64, y64), rtol=1e-10, atol=1e-10, name="float64 inputs")

# Non-contiguous inputs: a transposed matrix and a strided slice.
x_t = torch.randn(4, 10, device=DEVICE).T
y_s = torch.randn(12, 8, device=DEVICE)[::2, :4]
check.assert_close(pairwise_sq_dists(x_t, y_s), reference_sq_dists(x_t, y_s), rtol=1e-4, atol=1e-4, name="non-contiguous inputs")
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_pairwise_speed", "grade": true, "points": 2}
"""pairwise_sq_dists beats the loop baseline by the required factor, on fresh inputs, after a correctness check."""
# The GPU threshold is modelled, not yet measured: launches set both times on every card in gpu_specs, about 85x
# (gpucourse.thresholds.pairwise_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cpu": 4.0, "cuda": 10.0}
print(thresholds.describe("test_pairwise_speed", SPEEDUP_NEEDED))


def fresh_points():
    return torch.randn(200, 4, device=DEVICE), torch.randn(150, 4, device=DEVICE)


def check_timed_output(args, output):
    check.assert_close(output, reference_sq_dists(*args), rtol=1e-4, atol=1e-4, name="a timed output")


x, y = fresh_points()
check_timed_output((x, y), pairwise_sq_dists(x, y))
result = timing.compare_speed(pairwise_sq_dists_loop, pairwise_sq_dists, fresh_points, check=check_timed_output)
check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="pairwise_sq_dists vs the loop")

# %% [markdown]
# ## Question 3: roofline arithmetic (2 points)
#
# Write four small functions (one or two lines each):
# - `matmul_flops(m, k, n)`: floating-point operations of an `(m, k) @ (k, n)` product; count a multiply and an add as two.
# - `matmul_min_bytes(m, k, n, itemsize)`: the fewest bytes it must move: read `A` and `B` once, write `C` once.
# - `arithmetic_intensity(flops, nbytes)`: FLOPs per byte.
# - `roofline_flops(intensity, peak_flops, peak_bandwidth)`: the attainable FLOP/s of a kernel with that intensity on a machine with that peak compute (FLOP/s) and memory bandwidth (bytes/s).
#
# The first two return exact Python `int`s.

# %% nbgrader={"grade_id": "roofline", "solution": true}
def matmul_flops(m, k, n):
    """FLOPs of an (m, k) @ (k, n) matrix product (multiply and add counted separately)."""
    ### BEGIN SOLUTION
    return 2 * m * k * n
    ### END SOLUTION


def matmul_min_bytes(m, k, n, itemsize):
    """Bytes moved reading A (m, k) and B (k, n) once and writing C (m, n) once."""
    ### BEGIN SOLUTION
    return (m * k + k * n + m * n) * itemsize
    ### END SOLUTION


def arithmetic_intensity(flops, nbytes):
    """FLOPs per byte moved."""
    ### BEGIN SOLUTION
    return flops / nbytes
    ### END SOLUTION


def roofline_flops(intensity, peak_flops, peak_bandwidth):
    """Attainable FLOP/s: bounded by peak compute and by intensity x bandwidth."""
    ### BEGIN SOLUTION
    return min(peak_flops, intensity * peak_bandwidth)
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_roofline", "grade": true, "points": 2}
"""The roofline functions give the exact FLOPs, bytes, intensity and attainable rate."""
check.assert_equal(matmul_flops(2, 3, 4), 48, name="matmul_flops(2, 3, 4)")
check.assert_equal(matmul_min_bytes(2, 3, 4, 4), 104, name="matmul_min_bytes(2, 3, 4, itemsize=4)")
check.assert_approx(arithmetic_intensity(48, 104), 48 / 104, name="arithmetic_intensity(48, 104)")
# A100 FP32: 19.5 TFLOP/s, 2039 GB/s. At 1 FLOP/byte it is memory-bound, at 100 compute-bound.
check.assert_approx(roofline_flops(1.0, 19.5e12, 2.039e12), 2.039e12, name="roofline_flops(1, A100)")
check.assert_approx(roofline_flops(100.0, 19.5e12, 2.039e12), 19.5e12, name="roofline_flops(100, A100)")
### BEGIN HIDDEN TESTS
n = 10_000
check.assert_equal(matmul_flops(n, n, n), 2 * 10**12, name="matmul_flops(10000, 10000, 10000)")
check.assert_equal(matmul_flops(1, 1, 1), 2, name="matmul_flops(1, 1, 1)")
check.assert_equal(matmul_flops(7, 1, 5), 70, name="matmul_flops(7, 1, 5)")
check.assert_equal(matmul_min_bytes(n, n, n, 2), 6 * 10**8, name="matmul_min_bytes(10000, 10000, 10000, 2)")
check.assert_equal(matmul_min_bytes(1, 8, 1, 8), 136, name="matmul_min_bytes(1, 8, 1, 8)")
check.assert_equal(matmul_min_bytes(3, 5, 7, 1), 71, name="matmul_min_bytes(3, 5, 7, 1)")
check.assert_approx(arithmetic_intensity(2 * 10**12, 12 * 10**8), 2000 / 1.2, name="arithmetic_intensity of a 10000² FP32 matmul")
check.assert_approx(arithmetic_intensity(1, 12), 1 / 12, name="arithmetic_intensity(1, 12)")
ridge = 67e12 / 3.35e12
check.assert_approx(roofline_flops(ridge, 67e12, 3.35e12), 67e12, rel=1e-12, name="roofline_flops at the H100 ridge point")
check.assert_approx(roofline_flops(0.25, 67e12, 3.35e12), 0.8375e12, name="roofline_flops(0.25, H100)")
check.assert_approx(roofline_flops(1e6, 8.1e12, 320e9), 8.1e12, name="roofline_flops(1e6, T4)")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 4: when does offloading pay? (2 points)
#
# To multiply two `n × n` matrices on a GPU that holds neither, you send both across the host link, multiply, and bring the product back.
# Model it, ignoring overlap:
# - `offload_seconds(n, gpu_flops, link_bandwidth, itemsize=4, fixed_seconds=0.0)`: seconds to send two `n × n` matrices, multiply them at `gpu_flops`, and copy the `n × n` product back, all over a link of `link_bandwidth` bytes/s, plus `fixed_seconds`.
# - `fixed_seconds` is the offload's fixed cost in seconds, paid once per call of `offload_seconds` whatever `n` is: the latencies of the three copies and of the kernel launch with its synchronisation, already added up (the lecture's `gpu_specs.MATMUL_OFFLOAD_FIXED_SECONDS` is one such total).
#   With the default, `0.0`, the model ignores latency.
# - `crossover_n(cpu_flops, gpu_flops, link_bandwidth, itemsize=4, fixed_seconds=0.0)`: the smallest `n` for which offloading, with that same `fixed_seconds`, takes strictly less time than multiplying on the CPU at `cpu_flops` (the CPU pays no fixed cost).
#   If the GPU is not faster than the CPU, offloading never pays: raise `ValueError`.
#
# Hint: both sides grow like $n^3$ but the transfers only like $n^2$ and the fixed cost not at all; write the inequality for `n`.
# Once offloading wins at some `n`, it wins at every larger `n`.
# About 12 lines.

# %% nbgrader={"grade_id": "offload", "solution": true}
def offload_seconds(n, gpu_flops, link_bandwidth, itemsize=4, fixed_seconds=0.0):
    """Modelled seconds to send A and B (n x n), multiply on the GPU, and return C, fixed costs included."""
    ### BEGIN SOLUTION
    transfer = 3 * n * n * itemsize / link_bandwidth
    compute = 2 * n**3 / gpu_flops
    return fixed_seconds + transfer + compute
    ### END SOLUTION


def crossover_n(cpu_flops, gpu_flops, link_bandwidth, itemsize=4, fixed_seconds=0.0):
    """Smallest n for which offloading an n x n matmul, fixed costs included, beats the CPU."""
    ### BEGIN SOLUTION
    if gpu_flops <= cpu_flops:
        raise ValueError("the GPU is not faster than the CPU, so offloading never pays")

    def offload_wins(n):
        return offload_seconds(n, gpu_flops, link_bandwidth, itemsize, fixed_seconds) < 2 * n**3 / cpu_flops

    # 2n³(1/cpu - 1/gpu) - 3n²s/bw - fixed changes sign once, so: double until offloading wins, then bisect.
    wins_at = 1
    while not offload_wins(wins_at):
        wins_at *= 2
    loses_at = wins_at // 2  # 0 stands for "no smaller n to try"
    while wins_at - loses_at > 1:
        middle = (wins_at + loses_at) // 2
        if offload_wins(middle):
            wins_at = middle
        else:
            loses_at = middle
    return wins_at
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_offload", "grade": true, "points": 2}
"""offload_seconds follows the model, and crossover_n is the smallest n where offloading wins."""
# 1000 x 1000 float32 on a 10 GFLOP/s GPU over a 12 GB/s link: 12 MB moved, 2 GFLOP computed.
check.assert_approx(offload_seconds(1000, 10e9, 12e9), 12e6 / 12e9 + 2e9 / 10e9, name="offload_seconds(1000, 10 GFLOP/s, 12 GB/s)")
check.assert_approx(offload_seconds(10, 1e12, 1e9, itemsize=8), 2400 / 1e9 + 2000 / 1e12, name="offload_seconds(10, itemsize=8)")
# The same 1000 x 1000 offload with 35 µs of fixed costs (three copies and a launch): the fixed cost is added once.
check.assert_approx(offload_seconds(1000, 10e9, 12e9, fixed_seconds=35e-6), 35e-6 + 12e6 / 12e9 + 2e9 / 10e9,
                    name="offload_seconds(1000, 10 GFLOP/s, 12 GB/s, fixed_seconds=35 µs)")


def cpu_seconds(n, cpu_flops):
    return 2 * n**3 / cpu_flops


n_star = crossover_n(1e11, 1e13, 12e9)
assert isinstance(n_star, int), f"crossover_n should return an int, got {type(n_star).__name__}"
assert offload_seconds(n_star, 1e13, 12e9) < cpu_seconds(n_star, 1e11), f"at n={n_star} offloading does not win yet"
assert not offload_seconds(n_star - 1, 1e13, 12e9) < cpu_seconds(n_star - 1, 1e11), f"offloading already wins at n={n_star - 1}: {n_star} is not the smallest"
### BEGIN HIDDEN TESTS
def is_crossover(n, cpu, gpu, bw, itemsize=4, fixed=0.0):
    def wins(k):
        return fixed + 3 * k * k * itemsize / bw + 2 * k**3 / gpu < 2 * k**3 / cpu

    return wins(n) and (n == 1 or not wins(n - 1))


# The seed article's machines (10000² in 1.445 s on a CPU, 0.0708 s on a GPU) over PCIe 3.
cpu_rate, gpu_rate = 2e12 / 1.445, 2e12 / 0.0708
for bw, itemsize in [(15.75e9, 4), (31.5e9, 4), (15.75e9, 2), (1e9, 8)]:
    n = crossover_n(cpu_rate, gpu_rate, bw, itemsize=itemsize)
    assert isinstance(n, int), f"crossover_n should return an int, got {type(n).__name__}"
    assert is_crossover(n, cpu_rate, gpu_rate, bw, itemsize), f"crossover_n(bw={bw:g}, itemsize={itemsize}) gave {n}, which is not the smallest winning n"
check.assert_approx(offload_seconds(10_000, gpu_rate, 15.75e9), 1.2e9 / 15.75e9 + 0.0708, name="offload_seconds for the seed article's GPU")
# A GPU barely faster than the CPU: the crossover is large, but it exists.
n = crossover_n(1e12, 1.01e12, 12e9)
assert is_crossover(n, 1e12, 1.01e12, 12e9), f"crossover_n(1e12, 1.01e12, 12e9) gave {n}, which is not the smallest winning n"
# Offloading wins from n = 1 when the link is nearly free.
check.assert_equal(crossover_n(1e9, 1e12, 1e30), 1, name="crossover_n with an almost infinite link")
for cpu, gpu in [(1e12, 1e12), (2e12, 1e12)]:
    try:
        crossover_n(cpu, gpu, 12e9)
    except ValueError:
        pass
    else:
        raise AssertionError(f"crossover_n(cpu={cpu:g}, gpu={gpu:g}) should raise ValueError: offloading never pays")
# Fixed costs. A 64 x 64 FP32 offload to a T4 (8.1 TFLOP/s, PCIe 3 at 15.75 GB/s) with 35 µs of fixed costs:
# 3 * 64² * 4 = 49152 bytes moved and 2 * 64³ = 524288 FLOPs, about 38 µs, not the 3 µs of the model without them.
check.assert_approx(offload_seconds(64, 8.1e12, 15.75e9, fixed_seconds=35e-6), 35e-6 + 49152 / 15.75e9 + 524288 / 8.1e12,
                    name="offload_seconds(64) to a T4 with 35 µs of fixed costs")
check.assert_approx(offload_seconds(10, 1e12, 1e9, itemsize=8, fixed_seconds=1.0), 1.0 + 2400 / 1e9 + 2000 / 1e12,
                    name="offload_seconds(10, itemsize=8, fixed_seconds=1 s)")
# Free link and compute, 1 ms of fixed cost, a 2 GFLOP/s CPU: offloading wins when 2n³ / 2e9 > 1e-3, i.e. n³ > 10⁶.
# At n = 100 the CPU takes exactly 1 ms, a tie, so offloading does not win yet: the answer is 101.
check.assert_equal(crossover_n(2e9, 1e30, 1e30, fixed_seconds=1e-3), 101, name="crossover_n with only a 1 ms fixed cost")
# The lecture's case: a T4 against a 500 GFLOP/s CPU. Without fixed costs the crossover is n = 204
# (n > (12 / 15.75e9) / (2 / 5e11 - 2 / 8.1e12) = 203.0); 35 µs of fixed costs push it up, to where
# 2n³ / 5e11 also covers them (n = 256 still loses: 67.1 µs on the CPU, 89.1 µs offloaded), so an answer
# that drops fixed_seconds gives 204 and fails; is_crossover checks the answer and the n just below it.
for fixed in (35e-6, 1e-3):
    n = crossover_n(5e11, 8.1e12, 15.75e9, fixed_seconds=fixed)
    assert isinstance(n, int), f"crossover_n should return an int, got {type(n).__name__}"
    assert is_crossover(n, 5e11, 8.1e12, 15.75e9, fixed=fixed), (
        f"crossover_n(500 GFLOP/s, T4, fixed_seconds={fixed:g}) gave {n}, which is not the smallest n where offloading wins with that fixed cost")
check.assert_equal(crossover_n(5e11, 8.1e12, 15.75e9), 204, name="crossover_n(500 GFLOP/s, T4) without fixed costs")
### END HIDDEN TESTS

# %% [markdown]
# ## Question 5: the first call (1 point, graded by hand)
#
# In two or three sentences, in the cell below: why is the first timed call of a GPU function usually slower than the ones after it?
# Name at least two distinct causes.

# %% [markdown] nbgrader={"grade_id": "first_call_answer", "solution": true, "grade": true, "points": 1}
# ### BEGIN SOLUTION
# The first call pays one-time costs that later calls reuse: creating the CUDA context and loading kernels (or compiling them, for JIT-compiled code such as `torch.compile` or Triton), choosing an algorithm (cuBLAS/cuDNN heuristics and autotuning), and growing the caching allocator by asking the driver for fresh memory.
# Caches (instruction cache, L2, TLB) and GPU clocks are also cold at first; the GPU ramps its clock up under load.
# That is why timing code warms up first and reports the median of many calls.
# ### END SOLUTION
