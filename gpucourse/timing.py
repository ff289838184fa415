"""Honest timing: warm-up, CUDA synchronisation, fixed threads, ratios not absolute times.

Two tools:

* :func:`measure` times one function with ``torch.utils.benchmark`` (for lectures and plots).
* :func:`compare_speed` times a baseline against a candidate, interleaved, each call on
  fresh inputs, and re-checks the candidate's timed outputs. Its speedup ratio is what
  speed checks compare with a threshold (DESIGN.md §5), because a ratio measured in one
  process survives a noisy machine far better than any absolute time.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.utils.benchmark as benchmark

from .devices import describe, device, synchronize
from .hooks import stand_in_hook


@contextlib.contextmanager
def fixed_threads(num_threads: int | None) -> Iterator[None]:
    """Run the block with torch, and NumPy's BLAS, using exactly ``num_threads`` CPU threads (None: leave as is).
    The grader's workers run one BLAS thread; a notebook's NumPy would otherwise use every core for a large matmul
    and one for a small one, and a timing would differ from the grader's by the machine's core count."""
    if num_threads is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        with threadpool_limits(limits=num_threads, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(previous)


def _clock() -> float:
    """Wall-clock time after all queued GPU work has finished."""
    synchronize()
    return time.perf_counter()


def spread_exceeds_median(median: float, iqr: float) -> bool:
    """True when the spread between timed blocks (their IQR) is larger than the median itself.

    Such a measurement says more about what else ran on the machine than about the code:
    a lecture flags it instead of drawing a conclusion from it.
    """
    return iqr > median


@dataclass(frozen=True)
class Timing:
    """One function's time per call, in seconds, and where it was measured."""

    median: float
    iqr: float  # spread between timed blocks of calls (0 when only one block was timed)
    calls: int
    blocks: int
    device: str

    @property
    def too_noisy(self) -> bool:
        """The spread exceeds the median: no conclusion should rest on this measurement."""
        return spread_exceeds_median(self.median, self.iqr)

    def __str__(self) -> str:
        # The IQR is the width of the middle half, not a symmetric error: "377 µs ± 2.54 ms" read as a
        # time that could be negative.
        text = (
            f"median {_seconds(self.median)}, IQR {_seconds(self.iqr)} per call "
            f"({self.calls} calls in {self.blocks} blocks, measured on {self.device})"
        )
        return text + (" [too noisy: the spread exceeds the median]" if self.too_noisy else "")


def warn_if_noisy(timing: Timing, what: str) -> bool:
    """Print a warning line naming ``what`` when ``timing``'s spread exceeds its median; True if it did."""
    if timing.too_noisy:
        print(f"WARNING: {what} is too noisy to conclude from: its spread (IQR {_seconds(timing.iqr)}) exceeds its median "
              f"({_seconds(timing.median)}): other work on the machine probably dominated it. Run the cell again.")
    return timing.too_noisy


def measure(
    fn: Callable,
    *args,
    warmup: int = 3,
    min_run_time: float = 0.2,
    num_threads: int | None = None,
    min_blocks: int = 5,
) -> Timing:
    """Median time of ``fn(*args)`` after ``warmup`` untimed calls, and the IQR between timed blocks.

    ``torch.utils.benchmark``'s blocked autorange picks how many calls a block holds and times
    blocks for at least ``min_run_time`` seconds in all, synchronising CUDA around them; then
    more blocks of the same size are timed until there are at least ``min_blocks``.
    ``num_threads`` defaults to torch's current setting. The label names the device of the
    first tensor argument (the course's device when there is none) and the thread count used.
    """
    if min_blocks < 1:
        raise ValueError(f"min_blocks must be at least 1, got {min_blocks}")
    threads = torch.get_num_threads() if num_threads is None else num_threads
    with fixed_threads(threads):
        for _ in range(warmup):
            fn(*args)
        synchronize()
        timer = benchmark.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args}, num_threads=threads)
        result = timer.blocked_autorange(min_run_time=min_run_time)
        # Block sizes grow tenfold, so a call of a few ms can fill min_run_time with one or two
        # blocks, whose median is one reading and whose IQR is no spread at all.
        block_seconds = list(result.raw_times)
        while len(block_seconds) < min_blocks:
            block_seconds.append(_seconds_for_calls(fn, args, result.number_per_run))
        result = benchmark.Measurement(result.number_per_run, block_seconds, result.task_spec)
        measured_on = describe(_device_of(args))
    return Timing(
        median=result.median,
        iqr=result.iqr,
        calls=len(result.times) * result.number_per_run,
        blocks=len(result.times),
        device=measured_on,
    )


def _seconds_for_calls(fn: Callable, args: Sequence, calls: int) -> float:
    """Seconds for ``calls`` back-to-back calls of ``fn(*args)``, queued GPU work included."""
    start = _clock()
    for _ in range(calls):
        fn(*args)
    return _clock() - start


def _device_of(args: Sequence) -> torch.device:
    """Where the work of ``fn(*args)`` runs: the first tensor argument's device; numpy arrays
    are on the CPU; with neither, the course device."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device
        if isinstance(arg, np.ndarray) or (isinstance(arg, (list, tuple)) and any(isinstance(a, np.ndarray) for a in arg)):
            return torch.device("cpu")
    return device()


@dataclass(frozen=True)
class SpeedResult:
    """Outcome of :func:`compare_speed`: how many times faster the candidate ran."""

    speedup: float  # median baseline time / median candidate time
    low: float  # 25th percentile of the per-round ratios
    high: float  # 75th percentile of the per-round ratios
    baseline_seconds: float
    candidate_seconds: float
    rounds: int
    device: str
    num_threads: int | None
    # The median of the per-round ratios: the headline to quote beside low-high, which are quartiles of the
    # same samples (``speedup`` is a ratio of medians, and can fall outside them when the rounds disagree).
    median_ratio: float | None = None

    def __str__(self) -> str:
        digits = 1 if self.low >= 1 else 2
        return (
            f"{ratio_text(self.speedup)} (middle half of rounds {self.low:.{digits}f}–{self.high:.{digits}f}×; "
            f"baseline {_seconds(self.baseline_seconds)}, candidate {_seconds(self.candidate_seconds)} per call; "
            f"measured on {self.device})"
        )


def compare_speed(
    baseline: Callable,
    candidate: Callable,
    make_inputs: Callable[[], Sequence],
    *,
    check: Callable[[Sequence, object], None] | None = None,
    rounds: int = 9,
    warmup: int = 2,
    num_threads: int | None = 1,
    block_seconds: float = 0.02,
    max_calls_per_block: int = 1000,
    baseline_inputs: Callable[..., Sequence] | None = None,
    charge_cpu_time: bool = False,
) -> SpeedResult:
    """Time ``baseline`` against ``candidate`` on fresh inputs, interleaved, and return the ratio.

    ``make_inputs()`` returns a new argument tuple each time; no timed call sees inputs
    another call has seen, so caching results by address or value cannot pay.
    Each round times a block of calls of one function, then a block of the other (the
    order alternates to cancel drift); a block holds enough calls to last about
    ``block_seconds``. After each candidate block, outside the timed region,
    ``check(inputs, output)`` is called on every output of the block and must raise if
    one is wrong.
    Warm-up calls (compilation, caches, allocator) are never timed; the candidate's are checked too.
    Nine rounds by default: fresh inputs and the checks of every output cost more than the
    timed calls themselves (module 06: 11 s of an item's 12 at fifteen rounds), and the items
    that use the default kept their margins at nine (the thinnest, 06's fused tail, measured
    1.5-2.0× against 1.2×, and is measured again when short: ``check.assert_measured_speedup``).
    ``baseline_inputs(*inputs)``, when given, turns the candidate's inputs into the
    baseline's (the same data in another layout, say), outside the timed region.
    ``charge_cpu_time``: on a CPU, each block is charged the lesser of its wall time and this process's
    CPU time, so the time a busy machine makes it wait for a core is not charged (the grader charges
    its sandboxed workers the same way). For pure computation only: code that sleeps, or waits for
    another process, would be charged nothing for the wait. Ignored on a GPU, and for a function timed
    in another process (the grader's stand-in, which brings its own clock).
    """
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    device_used = _device_of(make_inputs())
    charge_cpu_time = charge_cpu_time and device_used.type == "cpu"
    makers = {"baseline": (lambda: tuple(baseline_inputs(*make_inputs()))) if baseline_inputs else make_inputs,
              "candidate": make_inputs}
    # Only the candidate's outputs are checked: every warm-up output (a wrong answer fails before
    # any of the timing is spent on it), and every timed one.
    checks = {"baseline": lambda args, output: None, "candidate": check or (lambda args, output: None)}
    with fixed_threads(num_threads):
        for name, fn in (("baseline", baseline), ("candidate", candidate)):
            for _ in range(warmup):
                # Warmed up where it will be timed: a function that runs in another process (the grader's
                # stand-ins) is warm there, so the first block, which sizes the others, is not a cold call.
                inputs = makers[name]()
                _, (output,) = _timed_block(fn, [inputs], charge_cpu_time)
                checks[name](inputs, output)
        # Blocks grow until one lasts block_seconds, so a fixed cost per block (a clock read,
        # or the round trip to another process) is small against the calls it times.
        calls = {name: _calls_per_block(fn, makers[name], block_seconds, _max_calls(max_calls_per_block, makers[name]()), charge_cpu_time)
                 for name, fn in (("baseline", baseline), ("candidate", candidate))}
        per_call = {"baseline": [], "candidate": []}
        for round_index in range(rounds):
            order = (("baseline", baseline), ("candidate", candidate))
            for name, fn in order if round_index % 2 == 0 else order[::-1]:
                inputs = [makers[name]() for _ in range(calls[name])]
                seconds, outputs = _timed_block(fn, inputs, charge_cpu_time)
                per_call[name].append(seconds / calls[name])
                # Checked block by block and then dropped: keeping every output alive would
                # make later calls pay for fresh memory (page faults) and bias the timing.
                for args, output in zip(inputs, outputs):
                    checks[name](args, output)
                del inputs, outputs
        measured_on = describe(device_used)  # with the thread count fixed, as it names it
    return speed_result(per_call["baseline"], per_call["candidate"], measured_on, num_threads)


def ratio_text(speedup: float) -> str:
    """"2.3× faster", or for a candidate slower than its baseline (module 09's LSTM against the library's) "0.21× as fast"."""
    return f"{speedup:.1f}× faster" if speedup >= 1 else f"{speedup:.2f}× as fast"


def speed_result(baseline_times: Sequence[float], candidate_times: Sequence[float], device: str, num_threads: int | None) -> SpeedResult:
    """The ratio of the medians of interleaved rounds (one time of each per round), and the spread of the per-round ratios."""
    ratios = sorted(b / c for b, c in zip(baseline_times, candidate_times))
    baseline_s, candidate_s = statistics.median(baseline_times), statistics.median(candidate_times)
    return SpeedResult(
        speedup=baseline_s / candidate_s,
        low=_quantile(ratios, 0.25),
        high=_quantile(ratios, 0.75),
        median_ratio=statistics.median(ratios),
        baseline_seconds=baseline_s,
        candidate_seconds=candidate_s,
        rounds=len(ratios),
        device=device,
        num_threads=num_threads,
    )


# A block's inputs together stay under this: a function that answers at once (a cache, say) would
# otherwise be handed thousands of large inputs to last block_seconds (9 GB for module 06's tail).
BLOCK_INPUT_BYTES = 256 * 1024**2


def _max_calls(max_calls: int, sample_inputs: Sequence) -> int:
    return max(1, min(max_calls, BLOCK_INPUT_BYTES // max(1, _nbytes(sample_inputs))))


def _nbytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, list | tuple):
        return sum(_nbytes(item) for item in value)
    if isinstance(value, dict):
        return sum(_nbytes(item) for item in value.values())
    return 0


def _calls_per_block(fn: Callable, make_inputs: Callable, block_seconds: float, max_calls: int, charge_cpu_time: bool) -> int:
    calls = 1
    while calls < max_calls:
        seconds, _ = _timed_block(fn, [make_inputs() for _ in range(calls)], charge_cpu_time)
        if seconds >= block_seconds:
            break
        calls = min(max_calls, calls * 2 if seconds <= 0 else max(calls * 2, math.ceil(calls * 1.2 * block_seconds / seconds)))
    return calls


def _timed_block(fn: Callable, inputs: list[Sequence], charge_cpu_time: bool = False) -> tuple[float, list]:
    """Seconds to run ``fn(*args)`` for every args in ``inputs``, and the outputs.

    A function that runs elsewhere (the autograder's proxy for a student's function, in
    another process) brings its own ``timed_block``, timed by the caller's clock around the
    calls alone. ``charge_cpu_time``: the lesser of the wall time and this process's CPU time.
    """
    runner = stand_in_hook(fn, "timed_block")
    if runner is not None:
        return runner(inputs)
    start, start_cpu = _clock(), time.process_time()
    outputs = [fn(*args) for args in inputs]
    wall = _clock() - start
    return (min(wall, time.process_time() - start_cpu) if charge_cpu_time else wall), outputs


def _quantile(sorted_values: list[float], q: float) -> float:
    position = q * (len(sorted_values) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    weight = position - lower
    return sorted_values[lower] * (1 - weight) + sorted_values[upper] * weight


def _seconds(value: float) -> str:
    """Format a duration with a readable unit: 1.23 ms, 45.6 µs."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"
