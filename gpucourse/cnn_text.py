"""Sentences about convolutions and CNN training, with their words chosen from the numbers (lecture 08).

Lecture 08 states outcomes: which cards' ridges a ResNet layer passes, which convolution is faster as a size
grows, where a training step's time goes, whether a change made training faster, what BatchNorm costs, what
gradient checkpointing saves. Those outcomes differ from machine to machine and from run to run, so none of
those sentences is written by hand: each function here takes the numbers of one run (or of ``gpu_specs``) and
returns the sentence they support. Each is unit-tested with numbers that give each of its outcomes
(tests/gpucourse/test_cnn_text.py). How times and bytes read and the tie rule come from :mod:`gpucourse.wording`.
"""

from __future__ import annotations

from . import gpu_specs
from .wording import choose, megabytes, ms

# Two measured rates or times within 10% of each other read as "about the same" (the tie rule of gpucourse.wording):
# repeated CPU timings of the lecture's steps spread by about that much on a shared 2-core machine.
SAME = 1.1
UNIT_NAMES = {"fp32": "FP32 CUDA-core", "tf32": "TF32 tensor-core", "fp16": "FP16 tensor-core", "bf16": "BF16 tensor-core"}
# Where ATen's max pooling kernels live, by device type (the profile names the op; these files hold its code).
POOL_SOURCES = {"cpu": "aten/src/ATen/native/cpu/MaxPoolKernel.cpp", "cuda": "aten/src/ATen/native/cuda/DilatedMaxPool2d.cu"}


def _verdict(speed: float) -> str:
    """A speed ratio (new rate / old rate) in a word: faster, slower or about the same (within ``SAME``)."""
    return choose(speed, 1, SAME, more="faster", tie="about the same", less="slower")


def _speed_words(speed: float) -> str:
    return f"{speed:.2f}× as fast: {_verdict(speed)}"


def ridges(precision: str, cards=None) -> dict[str, float]:
    """FLOP per byte at each card's ridge point for ``precision`` (peak FLOP/s ÷ memory bandwidth, from gpu_specs);
    cards without a unit for that precision are left out."""
    cards = gpu_specs.GPUS if cards is None else cards
    return {name: gpu_specs.peak_flops(spec, precision) / spec.memory_bandwidth
            for name, spec in cards.items() if precision in gpu_specs.precisions(spec)}


def ridge_sentence(intensity: float, precision: str, what: str, cards=None) -> str:
    """Which cards' ``precision`` ridge a kernel of ``intensity`` FLOP/byte is right of (compute-bound there) and
    which it is left of (memory-bound there, however fast the unit): every card in ``gpu_specs`` unless ``cards``."""
    cards = gpu_specs.GPUS if cards is None else cards
    at = ridges(precision, cards)
    unit = UNIT_NAMES.get(precision, precision)
    right = ", ".join(f"{name} {ridge:.0f}" for name, ridge in at.items() if ridge < intensity)
    left = ", ".join(f"{name} {ridge:.0f}" for name, ridge in at.items() if ridge >= intensity)
    lacking = [name for name in cards if name not in at]
    head = f"At {intensity:.0f} FLOP/byte, {what} is"
    if not left:
        text = f"{head} right of every {unit} ridge ({right} FLOP/byte): it can be compute-bound on all of them."
    elif not right:
        text = f"{head} left of every {unit} ridge ({left} FLOP/byte): memory-bound on all of them."
    else:
        text = (f"{head} right of the {unit} ridge of {right} FLOP/byte (it can be compute-bound there), "
                f"but left of {left} (memory-bound there: the units would wait for bytes).")
    return text + (f" No {unit.split()[0]} unit: {', '.join(lacking)}." if lacking else "")


def conv_rates_sentence(axis: str, sizes, rates: dict[str, list[float]], *, library: str, gemm: str, loops: str) -> str:
    """Section 3's three convolutions along one sweep: GFLOP/s per size (``rates[name]``; the loops' list may be
    shorter, measured on the first sizes only). How im2col + GEMM and the library grow, how the library's rate
    compares with im2col's at each end (the gap widens, narrows or holds), and how far below the library the loops stay."""
    lib, col, slow = rates[library], rates[gemm], rates[loops]
    first, last = lib[0] / col[0], lib[-1] / col[-1]
    trend = choose(last, first, SAME, more="the library pulls ahead as the size grows", tie="the gap holds",
                   less="im2col + GEMM closes in as the size grows")
    behind = min(lib[i] / slow[i] for i in range(len(slow)))
    return (f"As {axis} grows from {sizes[0]} to {sizes[-1]}, {gemm} goes from {col[0]:.3g} to {col[-1]:.3g} GFLOP/s and "
            f"{library} from {lib[0]:.3g} to {lib[-1]:.3g}: the library runs {first:.2g}× im2col's rate at {sizes[0]} and "
            f"{last:.2g}× at {sizes[-1]}, so {trend}. The {loops} reach at most {max(slow):.2g} GFLOP/s, "
            f"{behind:.0f}× or more below the library at the same sizes.")


def profile_sentence(self_time: dict[str, float], pool_ops: list[str], *, clock: str, device_type: str) -> str:
    """Where a profiled training step's time went, by group ({group: self time}), and which op ran max pooling
    (its name as the profiler recorded it): ATen's own kernel, or oneDNN's where the op's name says mkldnn."""
    total = sum(self_time.values())
    ranked = sorted(self_time, key=self_time.get, reverse=True)
    shares = ", ".join(f"{group} {self_time[group] / total:.0%}" for group in ranked)
    text = f"Of the step's self {clock} time, {ranked[0]} took the most: {shares}."
    if not pool_ops:
        return text + " No pooling op was recorded."
    ops = ", ".join(sorted(set(pool_ops)))
    if any("mkldnn" in op for op in pool_ops):
        return text + f" Max pooling ran as {ops}: oneDNN's kernels."
    where = POOL_SOURCES.get(device_type)
    return text + f" Max pooling ran as {ops}: ATen's own kernels{f' ({where})' if where else ''}, not oneDNN's."


def versus(candidate: str, candidate_seconds: float, baseline: str, baseline_seconds: float, *, where: str) -> str:
    """One measured time against another: "channels_last: 0.2 ms against 3 ms for NCHW, 15.00× as fast: faster (measured on …)"."""
    return (f"{candidate}: {ms(candidate_seconds)} against {ms(baseline_seconds)} for {baseline}, "
            f"{_speed_words(baseline_seconds / candidate_seconds)} ({where}).")


def steps_sentence(throughput: dict[str, float], batch: int) -> str:
    """Section 5's bars (images/s, in order, each change added to the ones before): each bar against the one above
    it, and one step's time in the first bar and in the fastest."""
    names = list(throughput)
    changes = "; ".join(f"{name}: {throughput[name] / throughput[before]:.2f}× the bar above ({_verdict(throughput[name] / throughput[before])})"
                        for before, name in zip(names, names[1:]))
    best = max(throughput, key=throughput.get)
    return (f"{changes}. One step of {batch} images took {ms(batch / throughput[names[0]])} in the first bar and "
            f"{ms(batch / throughput[best])} in the fastest ({best}).")


def batchnorm_sentence(seconds: dict[str, float], flops: dict[str, float], nbytes: dict[str, float], *, norm: str = "batch norm",
                       conv: str = "convolution") -> str:
    """A conv-BN-ReLU block's measured time per part ({part: seconds}) against each part's FLOPs and bytes (modelled):
    BatchNorm's share of the time against its share of the FLOPs, and its FLOP/byte against the convolution's and
    against the lowest ridge in gpu_specs."""
    time_share = seconds[norm] / sum(seconds.values())
    flop_share = flops[norm] / sum(flops.values())
    norm_intensity, conv_intensity = flops[norm] / nbytes[norm], flops[conv] / nbytes[conv]
    lowest = min(spec.ridge_point_fp32 for spec in gpu_specs.GPUS.values())
    bound = ("left of every ridge in gpu_specs (the lowest, FP32 on CUDA cores, is "
             f"{lowest:.0f}): memory-bound on every card" if norm_intensity < lowest else
             f"not below every ridge in gpu_specs (the lowest is {lowest:.0f})")
    ratio = time_share / flop_share
    weight = (f"{ratio:.0f}× its share of the FLOPs" if ratio > SAME else
              "no more than its share of the FLOPs" if ratio <= 1 else "about its share of the FLOPs")
    return (f"BatchNorm took {time_share:.0%} of the block's time for {flop_share:.1%} of its FLOPs, {weight}: "
            f"it does {norm_intensity:.2g} FLOP per byte it moves against the convolution's {conv_intensity:.0f}, {bound}.")


def checkpoint_sentence(saved_plain: float, saved_checkpointed: float, seconds_plain: float, seconds_checkpointed: float,
                        forward_seconds: float) -> str:
    """Gradient checkpointing's trade: bytes of activations kept for the backward pass and one training step's time,
    without and with it; the extra time is set against one forward pass (``forward_seconds``), what it recomputes."""
    if saved_checkpointed < saved_plain:
        memory = (f"Checkpointing kept {megabytes(saved_checkpointed)} of activations for the backward pass instead of "
                  f"{megabytes(saved_plain)}, {saved_plain / saved_checkpointed:.1f}× less")
    else:
        memory = f"Checkpointing kept {megabytes(saved_checkpointed)} of activations, no less than without it ({megabytes(saved_plain)})"
    slower, extra = seconds_checkpointed / seconds_plain, seconds_checkpointed - seconds_plain
    times = f"({ms(seconds_checkpointed)} against {ms(seconds_plain)}; a forward pass alone: {ms(forward_seconds)})"
    if slower <= SAME:
        cost = f"and a step took about as long {times}: the recomputation did not show in this timing"
    elif extra <= SAME * forward_seconds:
        cost = f"and a step took {slower:.2f}× as long {times}: the extra {ms(extra)} is about the one forward pass it recomputes"
    else:
        cost = (f"and a step took {slower:.2f}× as long {times}: the extra {ms(extra)} is {extra / forward_seconds:.1f} forward passes, "
                "more than the one it recomputes, so checkpointing's own bookkeeping costs too at this size")
    return f"{memory}, {cost}."


def loader_sentence(rates: dict[int, float], cores: int) -> str:
    """An epoch of loading and training, images/s by number of DataLoader worker processes (0: loaded in the training process)."""
    base = rates[0]
    others = "; ".join(f"{workers} worker{'s' if workers > 1 else ''}: {rate:.0f} images/s, {_speed_words(rate / base)}"
                       for workers, rate in rates.items() if workers)
    best = max(rates, key=rates.get)
    if best == 0 or rates[best] <= base * SAME:
        verdict = f"worker processes did not pay here ({cores} cores)"
    else:
        verdict = f"{best} worker{'s' if best > 1 else ''} did best here ({cores} cores): loading overlapped the training step"
    return f"Loading in the training process: {base:.0f} images/s; {others}. So {verdict}."


def resnet_sentence(macs: float, cpu_gflops: float, reported_images_per_second: float, card: str, precision: str) -> str:
    """ResNet-50's count of multiply-adds in the lecture's 2-FLOP convention, a training image's FLOPs (backward ≈ two
    forwards, so a step ≈ 3 forwards), what that costs at a rate measured here, and what share of ``card``'s dense
    ``precision`` peak (gpu_specs) a reported throughput is."""
    forward = 2 * macs
    step = 3 * forward
    achieved = reported_images_per_second * step
    peak = gpu_specs.peak_flops(card, precision)
    return (f"{macs / 1e9:.2g} G multiply-adds are {forward / 1e9:.3g} GFLOP forward, so a training image is about "
            f"{step / 1e9:.3g} GFLOP. At the {cpu_gflops:.3g} GFLOP/s the library's convolution reached here on one thread, "
            f"one image's step would take {step / (cpu_gflops * 1e9):.2g} s. The {card}'s reported {reported_images_per_second:,.0f} images/s "
            f"is {achieved / 1e12:.0f} TFLOP/s, {achieved / peak:.0%} of its dense {precision.upper()} peak ({peak / 1e12:.0f} TFLOP/s).")
