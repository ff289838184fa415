"""Sentences about profiles, timings and compilations, with their words chosen from the numbers (lecture 06).

Lecture 06 states outcomes: which bar of a trace is long, whether a change made code faster, whether a cost
is overhead, where Inductor put a GELU, how a training step's time splits. Those outcomes differ from machine
to machine and from run to run (a busy 2-core CPU turned "einsum beats the loop" into 0.91×), so none of
those sentences is written by hand: each function here takes the numbers of one run and returns the
sentence they support. Each is unit-tested with numbers that give each of its outcomes (tests/gpucourse/test_profile_text.py).
How times and bytes read, the tie rule and the words for an undecided run come from :mod:`gpucourse.wording`.
"""

from __future__ import annotations

import math
import re

from .wording import binary_bytes, cannot_tell, choose, listed, megabytes, ms, same

# Two numbers within 1.25× of each other read as "about the same" (times, bar lengths, model against measurement),
# by the tie rule of gpucourse.wording.
SAME = 1.25
# Horace He's batch-doubling test: doubling the work and seeing the time grow by less than this is overhead.
BARELY = 1.3
NEARLY_PROPORTIONAL = 1.7
FAR_BELOW = 10  # a rate this many times under its roof is limited by neither compute nor memory
MOSTLY_MATMUL = 0.9  # a share of the time above which fusing the other ops cannot pay much


def _times(ratio: float) -> str:
    return f"{ratio:.1f}×" if ratio >= 1.95 else f"{ratio:.2f}×"


def speed_sentence(result, candidate: str, baseline: str) -> str:
    """What a ``timing.SpeedResult`` says, headline and spread from the same samples: the per-round ratios.

    The headline is their median (``result.median_ratio``), quoted with their middle half (``low``-``high``).
    A middle half above 1 is "faster", below 1 "slower", and one that contains 1 is no clear winner.
    """
    median, low, high = result.median_ratio, result.low, result.high
    if median is None:
        raise ValueError("this SpeedResult has no median_ratio: time it with timing.compare_speed")
    spread = (f"(median of {result.rounds} per-round ratios {_times(median)}, middle half {low:.2f}–{high:.2f}×; "
              f"measured on {result.device})")
    if low > 1:
        return f"{candidate} ran {_times(median)} as fast as {baseline}: faster in every round of the middle half {spread}."
    if high < 1:
        return f"{candidate} ran slower than {baseline}, {_times(median)} as fast {spread}."
    return f"No clear winner between {candidate} and {baseline}: the middle half of the rounds holds 1× {spread}."


def doubling_sentence(what: str, result) -> str:
    """Horace He's test for overhead, read from a ``timing.SpeedResult`` whose baseline did the work once and whose
    candidate did it twice, in interleaved rounds: a time that barely grows was not spent on the work.

    The growth is 1 / the per-round ratio (its median, and its middle half from the ratios' quartiles); a middle half
    that spans two verdicts gives none.
    """
    growth, low, high = 1 / result.median_ratio, 1 / result.high, 1 / result.low
    head = (f"{what}: twice the work took ×{growth:.2f} the time (median of {result.rounds} rounds' ratios, "
            f"middle half ×{low:.2f}–×{high:.2f})")
    if high < BARELY:
        return f"{head}: the time barely grew, so a fixed cost per call dominates: overhead-bound."
    if low >= NEARLY_PROPORTIONAL:
        return f"{head}: the time grew nearly in proportion, so the work itself dominates, not overhead."
    if low >= BARELY and high < NEARLY_PROPORTIONAL:
        return f"{head}: part of the time grows with the work, part is a fixed cost per call."
    return f"{head}: {cannot_tell('the rounds disagree on the verdict')}."


def bars_sentence(totals: dict[str, float], focus: str) -> str:
    """How the labelled time splits ({label: time}), and how long ``focus``'s bar is beside the longest other one."""
    whole = sum(totals.values())
    shares = ", ".join(f"{label} {value / whole:.0%}" for label, value in totals.items())
    longest = max((label for label in totals if label != focus), key=totals.get)
    ratio = totals[focus] / totals[longest]
    if ratio < 1 / 4:
        verdict = "a short bar beside it"
    else:
        verdict = choose(ratio, 1, SAME, more="longer", tie="about as long", less="shorter, but not negligible")
    return f"Of the labelled time, {shares}: {focus}'s bar is {ratio:.2f}× {longest}'s, {verdict}."


def profiler_cost_sentence(profiled_per_op: float, timed_per_op: float) -> str:
    """The profiler's own cost per op it records: the same tiny op profiled and timed (seconds per op)."""
    extra = profiled_per_op - timed_per_op
    head = f"Profiled, one tiny add took {profiled_per_op * 1e6:.2f} µs; timed, {timed_per_op * 1e6:.2f} µs"
    if extra <= 0.1 * timed_per_op:
        return f"{head}: no cost of the profiler's shows at this resolution."
    return (f"{head}: recording an op costs the profiler about {extra * 1e6:.2f} µs, "
            f"{extra / timed_per_op:.1f}× the op itself, so a profile of many tiny ops overstates their time.")


def profiled_vs_timed_sentence(profiled_seconds: float, timed_seconds: float, ops_per_pass: float, profiler_cost_per_op: float) -> str:
    """Compare a profile's average pass with the timer's median, and say how much the profiler's cost per op explains."""
    ratio = profiled_seconds / timed_seconds
    head = f"The profiled passes averaged {ms(profiled_seconds)}, {ratio:.2f}× the timed median of {ms(timed_seconds)}"
    if same(profiled_seconds, timed_seconds, SAME):
        return f"{head}: close, so the profile's proportions describe the timed runs."
    explained = ops_per_pass * max(profiler_cost_per_op, 0.0)
    if profiled_seconds > timed_seconds:
        gap = profiled_seconds - timed_seconds
        if explained >= gap / 2:
            why = f"the profiler's own cost, about {ms(explained)} for {ops_per_pass:.0f} ops a pass, explains most of the gap"
        else:
            why = (f"the profiler's own cost explains only {ms(explained)} of the {ms(gap)} gap: the rest is variation between "
                   "runs (a profile holds a few passes, the timer's median many), so take times from the timer")
        return f"{head}: {why}."
    return (f"{head}: the timed calls were slower (each on a fresh input, on a machine whose load changes); take proportions from the "
            "profile, times from the timer.")


def roofline_sentences(mm_intensity: float, cpu_peak: float, bandwidth: float, chain_bandwidth: float, tiny_intensity: float,
                       tiny_rate: float) -> list[str]:
    """Where the three measured ops sit against this CPU's measured roofs (rates in FLOP/s, bandwidths in bytes/s)."""
    ridge = cpu_peak / bandwidth
    side = "right of it: compute-bound" if mm_intensity > ridge else "left of it: memory-bound even so"
    sentences = [f"The matmul's {mm_intensity:.0f} FLOP/byte is {mm_intensity / ridge:.1f}× the ridge point where this CPU's "
                 f"measured roofs meet ({ridge:.1f} FLOP/byte), {side}."]
    slope = choose(chain_bandwidth, bandwidth, SAME,
                   less="below the slope: something besides streaming bytes costs it time (a likely cause: each op writes a fresh "
                        "16 MB tensor, and first writes to fresh memory pay page faults, lecture 01)",
                   tie="on the slope: memory-bound, as counted",
                   more="above the slope: caches served part of its traffic, so the count of bytes overstates what reached memory")
    sentences.append(f"The chain moved its bytes at {chain_bandwidth / bandwidth:.0%} of the add's bandwidth, {slope}.")
    below = min(cpu_peak, tiny_intensity * bandwidth) / tiny_rate
    if below >= FAR_BELOW:
        sentences.append(f"The tiny add ran {below:,.0f}× below the roof at its intensity: neither compute nor memory limits it, "
                         "only the fixed cost of each op; no roof describes that, and the cure is fewer ops.")
    else:
        sentences.append(f"The tiny add ran within {below:.1f}× of the roof at its intensity: at this size it is not overhead-bound.")
    return sentences


def cache_sentence(working_set_bytes: int, l2_bytes: int | None) -> str:
    """Whether a chunk's working set fits the L2 cache size torch reports (None: not reported)."""
    head = f"One chunk's working set is {binary_bytes(working_set_bytes)} (the input piece and the output piece, float32)"
    if not l2_bytes:
        return f"{head}; this torch does not report the L2 size of this CPU (torch.cpu.get_capabilities())."
    size = f"this CPU's L2 cache, {binary_bytes(l2_bytes)} per core (torch.cpu.get_capabilities())"
    if working_set_bytes <= l2_bytes:
        return f"{head}: it fits in {size}."
    return f"{head}: it does not fit in {size}; a smaller chunk would."


def bf16_sentence(mkldnn_bf16: bool, avx512_bf16: bool, amx_bf16: bool) -> str:
    """What the two kinds of bf16 check say: oneDNN's (AVX-512 BW/VL/DQ only) and the CPU's bf16 instructions."""
    units = [name for name, has in (("AVX512_BF16", avx512_bf16), ("AMX-BF16", amx_bf16)) if has]
    onednn = f"oneDNN's bf16 check says {'yes' if mkldnn_bf16 else 'no'}"
    if units:
        return f"{onednn}, and this CPU has bf16 dot-product instructions ({listed(units)}): bf16 matmuls can run natively."
    if mkldnn_bf16:
        return (f"{onednn}, but this CPU has no bf16 dot-product instructions (no AVX512_BF16, no AMX-BF16): oneDNN accepts bf16 "
                "and computes it with float32 instructions, so the matmuls gain little beyond halved weight traffic.")
    return f"{onednn}: autocast's bf16 matmuls take torch's slower fallback paths on this CPU."


def gelu_placement_sentence(calls: list[str]) -> str:
    """Where Inductor put each Linear's matrix product and the GELU, read from its generated calls (``profiling.inductor_calls``)."""
    gemms = [call for call in calls if re.search(r"_mkl_linear|_linear_pointwise|extern_kernels\.(addmm|mm|bmm)|aten\.(addmm|mm)", call)]
    if not gemms:
        return "Inductor wrote no library matmul call here: it generated the matrix products itself."
    ops = sorted({re.match(r"(?:\w+ = )?([\w.]+?)(?:\.default)?\(", call).group(1) for call in gemms})
    head = f"Inductor called {listed(ops)} for the {len(gemms)} matrix product(s)"
    inside = [call for call in gemms if "'gelu'" in call]
    if inside:
        return (f"{head}, and passed the GELU to {len(inside)} of them as a post-op ('gelu'): oneDNN applies it to each output "
                "tile inside the matrix product, the epilogue, with no second pass over the output.")
    separate = [re.match(r"(\w+)\(", call).group(1) for call in calls if "gelu" in call and call not in gemms]
    if separate:
        with_bias = ", fused with the bias add" if "add" in separate[0].replace("gelu", "") else ""
        return (f"{head}, and ran the GELU in a kernel of its own, {separate[0]}, after the matrix product: a second pass over "
                f"the product's output{with_bias}, not fused into the matrix product.")
    return f"{head}; no GELU appears in its calls."


def amdahl_sentence(matmul_share: float) -> str:
    """Amdahl's law for fusion around matmuls: removing every other op saves at most the non-matmul share."""
    bound = 1 / matmul_share if matmul_share > 0 else math.inf
    if matmul_share >= MOSTLY_MATMUL:
        verdict = "so the matmuls are the time here: fusion can only remove small rows, and the matmul itself is what to attack"
    elif matmul_share >= 0.5:
        verdict = "so the matmuls are most of the time here, and fusion can save at most the rest"
    else:
        verdict = "so the other ops are most of the time here: fusion has room to help"
    return (f"The matrix products took {matmul_share:.0%} of the eager profile's self time; removing every other op would make a "
            f"pass at most {bound:.2f}× faster (Amdahl's law), {verdict}.")


def count_change_sentence(op: str, before: float, after: float, change: str) -> str:
    """How often ``op`` ran per pass before and after ``change``."""
    if after > before:
        return f"{op} ran {after:g} times per pass with {change}, {before:g} without: the new calls are the conversions it adds."
    if after < before:
        return f"{op} ran {after:g} times per pass with {change}, {before:g} without."
    return f"{op} ran {after:g} times per pass with and without {change}."


def einsum_sentence(copied: list[list[int]], products: list[list[list[int]]], itemsize: int = 4) -> str:
    """What einsum did inside, from the input shapes the profiler recorded: its copies and its matrix products."""
    done = ", ".join(" × ".join(str(list(shape)) for shape in shapes) for shapes in products) or "no matrix product"
    if not copied:
        return f"Inside einsum: {done}, and no copy."
    moved = sum(math.prod(shape) * itemsize for shape in copied)
    return (f"Inside einsum: {done}, after copying {', '.join(str(list(shape)) for shape in copied)} "
            f"({megabytes(moved)}) on every call: a re-layout paid again each time.")


def compile_counts_sentence(counts: dict[str, int], sizes: int) -> str:
    """How many graphs each way of compiling made for the same ``sizes`` input sizes ({way: graphs})."""
    def one(way, count):
        if count == sizes:
            return f"{way} compiled {count} graphs, one per size"
        if count == 1:
            return f"{way} compiled 1 graph for all of them"
        return f"{way} compiled {count} graphs"
    return f"For {sizes} input sizes: " + "; ".join(one(way, count) for way, count in counts.items()) + "."


def phases_sentence(phases: dict[str, float], modelled_backward_ratio: float) -> str:
    """How a training step's time splits ({phase: seconds}, with "forward" and "backward"), and backward against its FLOP model."""
    whole = sum(phases.values())
    split = ", ".join(f"{phase} {ms(seconds)} ({seconds / whole:.0%})" for phase, seconds in phases.items())
    largest = max(phases, key=phases.get)
    ratio = phases["backward"] / phases["forward"]
    model = choose(ratio, modelled_backward_ratio, SAME,
                   more="more than its matrix products explain: look at the backward's other rows (autograd's bookkeeping, reductions)",
                   tie="close to the model",
                   less="less than its matrix products predict: the forward had costs the backward does not repeat")
    return (f"Per step: {split}; the {largest} takes the most. Backward took {ratio:.2f}× the forward, against "
            f"{modelled_backward_ratio:.2f}× modelled from the matrix products' FLOPs: {model}.")


def held_memory_sentence(held_bytes: float, modelled_bytes: float) -> str:
    """Memory the forward pass left allocated (what autograd saved for backward) against a count from the shapes."""
    ratio = held_bytes / modelled_bytes
    verdict = "about what the shapes predict" if same(held_bytes, modelled_bytes, SAME) else f"{ratio:.2f}× what the shapes predict"
    return (f"The forward pass ended holding {megabytes(held_bytes)} more than it started with, the tensors autograd keeps for "
            f"the backward: {verdict} ({megabytes(modelled_bytes)} modelled for the hidden activations and the output).")
