"""Lecture 09's helpers: which cuDNN algorithm PyTorch picks for a recurrent layer, how many kernels a time step
launches, and sentences whose words are chosen from one run's numbers.

``cudnn_algo`` transcribes ``get_algo`` and the heuristics it calls (``use_rnn_persist_small_h``,
``use_persist_common_heuristics``, ``use_persist_device_heuristics``) from PyTorch's
aten/src/ATen/native/cudnn/RNN.cpp, for the cards of :mod:`gpucourse.gpu_specs`: a model of the choice,
never a measurement. The sentences state measured outcomes (which version ran faster, what a backward pass
cost), which differ from machine to machine and from run to run, so none is written by hand in the lecture:
each function takes the numbers and returns the sentence they support, and is unit-tested with numbers
that give each of its outcomes (tests/course/test_facts.py). How times and bytes read, the tie rule and the words for an
undecided run come from :mod:`gpucourse.wording`.
"""

from __future__ import annotations

import math
from collections import Counter

from .wording import binary_bytes, cannot_tell, choose, ms

# --- cuDNN's RNN algorithms, as PyTorch chooses them ---------------------------------------------------------

STANDARD, PERSIST_STATIC, SMALL_H = "STANDARD", "PERSIST_STATIC", "PERSIST_STATIC_SMALL_H"
MODES = ("LSTM", "GRU", "RNN_TANH", "RNN_RELU")

# use_rnn_persist_small_h: the largest hidden size per (mode family, direction of the pass).
_SMALL_H_LIMIT = {("gated", True): 192, ("gated", False): 128, ("plain", True): 384, ("plain", False): 256}


def _sm(card) -> tuple[int, int]:
    major, minor = card.compute_capability.split(".")
    return int(major), int(minor)


def _small_h(card, mode: str, hidden: int, forward: bool) -> bool:
    family = "gated" if mode in ("LSTM", "GRU") else "plain"
    return _sm(card)[0] >= 6 and hidden <= _SMALL_H_LIMIT[family, forward]


def persist_static_misses(card, *, dtype: str, hidden: int, inputs: int, batch: int, steps: int, mode: str = "LSTM",
                          layers: int = 1, bidirectional: bool = False) -> list[str]:
    """The conditions of CUDNN_RNN_ALGO_PERSIST_STATIC that a layer misses (empty: it gets it, packing and
    projections aside): float16 input, then use_persist_common_heuristics, then use_persist_device_heuristics."""
    misses = [] if dtype == "float16" else [f"{dtype}, not float16"]
    misses += [text for failed, text in ((layers != 1, f"{layers} layers, not 1"), (bidirectional, "bidirectional"),
                                         (hidden > 1024, f"H = {hidden} > 1024"), (hidden % 128, f"H = {hidden} not a multiple of 128"),
                                         (inputs % 128, f"I = {inputs} not a multiple of 128")) if failed]
    return misses + _device_misses(card, mode, hidden, batch, steps)


def _device_misses(card, mode: str, hidden: int, batch: int, steps: int) -> list[str]:
    major, minor = _sm(card)
    if major == 7 and minor != 5:  # sm70 (V100): batch sizes that measured well, by sequence length
        batch_ok = (batch % 16 == 0 and batch not in (80, 112)) or batch == 8
        length_ok = (steps >= 40 and batch <= 128) or (steps >= 20 and batch <= 96) or (steps >= 10 and batch <= 32)
        return [] if batch_ok and length_ok else [f"batch {batch} with {steps} steps is outside sm70's list"]
    if major < 8 or card.sms < 98 or minor == 6:  # sm75 (Turing), sm86 and cards under 98 SMs are excluded
        return [f"sm{major}{minor} with {card.sms} SMs is excluded"]
    if mode == "GRU":
        return ["GRU is excluded"]
    batch_ok = batch % 8 == 0 and batch <= 128 and (mode == "LSTM" or batch < 96 or hidden < 896)
    return [] if batch_ok else [f"batch {batch} is not a multiple of 8 up to 128"]


def cudnn_algo(card, *, dtype: str, hidden: int, inputs: int, batch: int, steps: int, mode: str = "LSTM", layers: int = 1,
               bidirectional: bool = False, packed: bool = False, proj_size: int = 0, forward: bool = True) -> str:
    """The cuDNN algorithm ``get_algo`` asks for (RNN.cpp; with cuDNN 8.2.1 or later, as PyTorch's wheels ship) on
    ``card``: a :class:`gpucourse.gpu_specs.GPUSpec`, or anything with its ``compute_capability`` ("8.0") and ``sms`` (a device's properties):
    STANDARD for projections or packed input; PERSIST_STATIC_SMALL_H for any dtype but float64 when the hidden
    size is small enough for the pass (sm60+); else PERSIST_STATIC when :func:`persist_static_misses` is empty."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if proj_size or packed:
        return STANDARD
    if dtype != "float64" and _small_h(card, mode, hidden, forward):
        return SMALL_H
    shape = dict(dtype=dtype, hidden=hidden, inputs=inputs, batch=batch, steps=steps, mode=mode, layers=layers, bidirectional=bidirectional)
    return STANDARD if persist_static_misses(card, **shape) else PERSIST_STATIC


# --- Kernels a time step launches ---------------------------------------------------------------------------

# ATen ops that each launch a kernel on a GPU; the views of a step (select, t, chunk) launch none.
KERNEL_OPS = ("aten::mm", "aten::addmm", "aten::add", "aten::mul", "aten::sigmoid", "aten::tanh")


def op_counts(fn, *args) -> Counter:
    """{ATen op: calls} of one call ``fn(*args)``: every op that reaches a kernel, as a dispatch mode sees it (composite
    ops as what they run: ``x @ w`` as ``aten::mm``)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[f"aten::{func.overloadpacket.__name__}"] += 1
            return func(*args, **(kwargs or {}))

    with Counting() as counting:
        fn(*args)
    return counting.ops


def kernel_ops(fn, *args) -> Counter:
    """{op: calls} of the ``KERNEL_OPS`` that one call ``fn(*args)`` runs."""
    return Counter({op: count for op, count in op_counts(fn, *args).items() if op in KERNEL_OPS})


def kernel_ops_per_step(fn, problem, steps: int = 3) -> int:
    """Kernels one more time step adds to ``fn(*problem(steps))``: the counts at ``steps`` and ``steps + 1``
    steps subtracted, so what runs once outside the loop (a hoisted GEMM, the bias sum) drops out."""
    return sum(kernel_ops(fn, *problem(steps + 1)).values()) - sum(kernel_ops(fn, *problem(steps)).values())


# --- Sentences from measurements ----------------------------------------------------------------------------

# Two medians within 1.15× of each other read "about as fast" (the tie rule of gpucourse.wording): single medians on
# a shared 2-core machine move by this much from run to run.
SAME = 1.15


def compare_sentence(candidate: str, baseline: str, candidate_seconds: float, baseline_seconds: float, *, noisy: bool = False) -> str:
    """How ``candidate`` did against ``baseline`` (median seconds each): faster, about as fast, or slower.
    ``noisy``: a timing's spread exceeded its median, and the sentence says so instead of judging."""
    ratio = baseline_seconds / candidate_seconds
    times = f"{ratio:.2f}× as fast as {baseline} ({ms(candidate_seconds)} against {ms(baseline_seconds)})"
    if noisy:
        return f"{candidate}: {times}, but " + cannot_tell("a timing's spread exceeded its median") + "."
    verdict = choose(ratio, 1, SAME, more="faster", tie=f"about as fast, within the {SAME:.2f}× this machine's timings wander", less="slower")
    return f"{candidate} ran {times}: {verdict}."


def batch_sentence(name: str, small: int, small_seconds: float, large: int, large_seconds: float) -> str:
    """What a ``large / small`` times larger batch did to ``name``'s time per sequence (seconds per sequence each)."""
    gain, size = small_seconds / large_seconds, large / small
    change = f"{gain:.1f}× less" if gain >= 1 else f"{1 / gain:.1f}× more"
    head = (f"{name}: {ms(small_seconds)} a sequence at a batch of {small}, {ms(large_seconds)} at {large} "
            f"({change} per sequence for a {size:g}× larger batch)")
    if gain >= size / 2:
        return f"{head}: nearly free, the per-step cost was shared by the whole batch."
    if gain > SAME:
        return f"{head}: cheaper per sequence, by less than the batch grew: the work grew too."
    return f"{head}: no cheaper per sequence: the work, not a per-step cost, set the time."


def backward_sentence(name: str, forward_seconds: float, recording_seconds: float, training_seconds: float) -> str:
    """A training step's cost against inference: a forward without autograd, one recording for it, and a
    forward plus backward (seconds each). Each forward matrix product has two in the backward pass (one for
    its input's gradient, one for its weight's), so a backward of about twice the forward is the FLOP count's
    expectation."""
    backward = training_seconds - recording_seconds
    ratio = backward / recording_seconds
    head = (f"{name}: forward {ms(forward_seconds)} without autograd, {ms(recording_seconds)} recording for it; "
            f"forward + backward {ms(training_seconds)}, {training_seconds / forward_seconds:.1f}× the inference forward. "
            f"The backward pass cost {ratio:.1f}× the recorded forward")
    if ratio < 1.5:
        return f"{head}: less than the 2× its FLOPs predict."
    if ratio <= 2.5:
        return f"{head}: about the 2× its FLOPs predict."
    return f"{head}: more than the 2× its FLOPs predict."


def saved_sentence(steps: tuple[int, int], saved_bytes: tuple[int, int]) -> str:
    """How the memory autograd keeps for the backward pass grew with the sequence length (two lengths)."""
    (short, long), (few, many) = steps, saved_bytes
    growth, length = many / few, long / short
    head = (f"Autograd kept {binary_bytes(few)} for the backward pass at {short} steps and {binary_bytes(many)} at {long}: "
            f"{growth:.2f}× the memory for {length:g}× the steps")
    return f"{head}, " + choose(growth, length, SAME, more="more than in proportion.", less="less than in proportion.",
                                tie="in proportion: every step's activations wait for the backward pass.")


def overhead_sentence(seconds: float, ops: int, launch_seconds: float) -> str:
    """The host's cost per op of a step loop too small to compute anything (``seconds`` a call, ``ops`` ops a call),
    beside a GPU's reported launch overhead."""
    per_op = seconds / ops
    head = f"{ops} ops in {seconds * 1e6:.0f} µs: {per_op * 1e6:.1f} µs of host time per op"
    launch = f"the {launch_seconds * 1e6:g} µs a GPU launch adds (reported)"
    return f"{head}, " + choose(per_op, launch_seconds, SAME, more=f"more than {launch}: the host alone would bound such a loop.",
                                tie=f"about {launch}.", less=f"less than {launch}: launches would bound such a loop.")


def perplexity_sentence(name: str, loss: float, vocabulary: int) -> str:
    """Cross-entropy in nats per character as perplexity, exp(loss): the number of characters a uniform guess
    would hesitate between to be as uncertain."""
    perplexity = math.exp(loss)
    head = f"{name}: {loss:.2f} nats a character, perplexity exp({loss:.2f}) = {perplexity:.1f}"
    if perplexity < vocabulary:
        return f"{head}: as unsure as a uniform choice among {perplexity:.1f} characters, against {vocabulary} for a uniform guess."
    return f"{head}: no better than a uniform guess among all {vocabulary} characters."
