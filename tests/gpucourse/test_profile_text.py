"""Tests of gpucourse.profile_text: each sentence lecture 06 prints, from numbers that give each of its outcomes,
and a check that the lecture prints those sentences instead of stating outcomes by hand."""

import re

import pytest

from autograder.build import REPO_ROOT
from course_helpers import lecture_calls
from gpucourse import profile_text
from gpucourse.timing import speed_result

LECTURE = REPO_ROOT / "course" / "06_profiling_fusion.py"


def result(baseline, candidate):
    """A SpeedResult from per-round times, as compare_speed makes it."""
    return speed_result(baseline, candidate, "CPU test", 1)


def test_speed_sentence_quotes_the_median_and_middle_half_of_the_same_ratios():
    """The headline is the median of the per-round ratios, so it always lies inside the middle half it is quoted with:
    the times below give a ratio of medians (10×) outside the ratios' middle half (1.5–2×), the case the review saw."""
    faster = result([20.0, 20.0, 20.0, 3.0, 3.0], [10.0, 10.0, 1.0, 2.0, 2.0])
    assert not faster.low <= faster.speedup <= faster.high  # the old headline: 20 / 2 = 10×, outside
    text = profile_text.speed_sentence(faster, "fused", "eager")
    assert faster.low <= faster.median_ratio <= faster.high
    assert faster.median_ratio == 2.0 and text.startswith("fused ran 2.0× as fast as eager: faster"), text
    assert f"middle half {faster.low:.2f}–{faster.high:.2f}×" in text and "measured on CPU test" in text, text


@pytest.mark.parametrize("candidate, start", [
    ([0.5] * 5, "fast ran 2.0× as fast as slow: faster"),
    ([2.0] * 5, "fast ran slower than slow, 0.50× as fast"),
    ([0.9, 1.1, 0.95, 1.05, 1.0], "No clear winner between fast and slow"),
])
def test_speed_sentence_says_faster_slower_or_no_clear_winner(candidate, start):
    """A middle half above 1 is faster, below 1 slower, and holding 1 no clear winner (einsum's 0.91× in the review)."""
    text = profile_text.speed_sentence(result([1.0] * 5, candidate), "fast", "slow")
    assert text.startswith(start), text


def test_speed_sentence_refuses_a_result_without_its_median_ratio():
    from gpucourse.timing import SpeedResult

    with pytest.raises(ValueError, match="median_ratio"):
        profile_text.speed_sentence(SpeedResult(2.0, 1.5, 2.5, 1.0, 0.5, 9, "CPU", 1), "a", "b")


@pytest.mark.parametrize("doubled, verdict", [
    ([1.1e-3, 1.05e-3, 1.15e-3, 1.1e-3, 1.12e-3], "overhead-bound"),
    ([1.5e-3, 1.45e-3, 1.55e-3, 1.5e-3, 1.52e-3], "part of the time grows"),
    ([1.95e-3, 2.0e-3, 1.9e-3, 1.95e-3, 1.97e-3], "nearly in proportion"),
    ([1.1e-3, 2.0e-3, 1.05e-3, 1.9e-3, 1.5e-3], "cannot tell"),  # the review's busy 2-core machine: rounds that disagree
])
def test_doubling_sentence_reads_horace_hes_test_from_interleaved_rounds(doubled, verdict):
    """Doubling the work: ×1.1 is overhead, ×1.5 mixed, ×1.95 the work itself, and a spread over two verdicts none."""
    once = result([1e-3] * 5, doubled)  # baseline: the work once; candidate: twice
    text = profile_text.doubling_sentence("the op", once)
    assert verdict in text and f"took ×{1 / once.median_ratio:.2f} the time (median of 5 rounds' ratios, middle half ×{1 / once.high:.2f}" in text, text


@pytest.mark.parametrize("gelu, verdict", [(10, "a short bar beside it"), (60, "shorter, but not negligible"), (95, "about as long"), (200, "longer")])
def test_bars_sentence_compares_the_focus_with_the_longest_other_bar(gelu, verdict):
    """The review measured the GELU at 24% of the pass, nearly fc2's: "a short bar" must come from the numbers."""
    text = profile_text.bars_sentence({"fc1": 100.0, "gelu": float(gelu), "fc2": 80.0}, "gelu")
    assert text.endswith(f"gelu's bar is {gelu / 100:.2f}× fc1's, {verdict}."), text
    assert f"gelu {gelu / (180 + gelu):.0%}" in text, text


def test_profiler_cost_sentence_says_what_recording_an_op_costs_or_that_nothing_shows():
    costly = profile_text.profiler_cost_sentence(3e-6, 1e-6)
    assert "about 2.00 µs" in costly and "2.0× the op itself" in costly, costly
    assert "no cost of the profiler's shows" in profile_text.profiler_cost_sentence(0.9e-6, 1e-6)


@pytest.mark.parametrize("profiled, cost, verdict", [
    (1.1e-3, 0.0, "close, so the profile's proportions"),
    (10e-3, 0.5e-3, "explains most of the gap"),  # 20 ops × 0.5 ms = 10 ms ≥ half of the 9 ms gap
    (10e-3, 1e-6, "explains only"),
    (0.5e-3, 0.0, "the timed calls were slower"),
])
def test_profiled_vs_timed_sentence_explains_the_gap_or_says_it_cannot(profiled, cost, verdict):
    """The review saw profiled passes ~10× the timed ones with no word about it."""
    text = profile_text.profiled_vs_timed_sentence(profiled, 1e-3, 20, cost)
    assert verdict in text and f"{profiled / 1e-3:.2f}× the timed median" in text, text


def test_roofline_sentences_place_each_op_from_the_numbers():
    peak, bandwidth = 40e9, 10e9  # ridge at 4 FLOP/byte
    compute, below, far = profile_text.roofline_sentences(171, peak, bandwidth, 2e9, 1 / 12, 3e6)
    assert "right of it: compute-bound" in compute and "42.8× the ridge" in compute, compute
    assert "20% of the add's bandwidth, below the slope" in below, below
    assert "278× below the roof" in far, far
    memory, on_slope, near = profile_text.roofline_sentences(2, peak, bandwidth, 9e9, 1 / 12, 0.5e9)
    assert "left of it" in memory and "on the slope" in on_slope and "within 1.7× of the roof" in near, (memory, on_slope, near)
    assert "above the slope" in profile_text.roofline_sentences(171, peak, bandwidth, 15e9, 1 / 12, 3e6)[1]


def test_cache_sentence_checks_the_working_set_against_l2():
    """The by-hand chunk: 64 K floats in and 64 K out, 512 KiB (the review found the text said 256 kB)."""
    assert profile_text.cache_sentence(2 * (1 << 16) * 4, 1 << 20).startswith("One chunk's working set is 512 KiB")
    assert "it fits in" in profile_text.cache_sentence(512 * 1024, 1 << 20)
    assert "does not fit" in profile_text.cache_sentence(512 * 1024, 256 * 1024)
    assert "does not report" in profile_text.cache_sentence(512 * 1024, None)


def test_bf16_sentence_tells_onednns_check_from_bf16_instructions():
    """oneDNN's check asks for AVX-512 BW/VL/DQ only: yes without bf16 instructions must not read as "has BF16 units"."""
    native = profile_text.bf16_sentence(True, True, False)
    assert "has bf16 dot-product instructions (AVX512_BF16)" in native, native
    emulated = profile_text.bf16_sentence(True, False, False)
    assert "says yes, but this CPU has no bf16 dot-product instructions" in emulated, emulated
    assert "AMX-BF16" in profile_text.bf16_sentence(True, False, True)
    assert "says no" in profile_text.bf16_sentence(False, False, False)


# The calls Inductor wrote for lecture 06's MLP on an AVX-512 CPU (torch 2.13, freezing on), float32 and bfloat16.
FP32_CALLS = ["buf0 = torch.ops.mkl._mkl_linear.default(arg4_1, _frozen_param7, _frozen_param6, None, 64)",
              "cpp_fused_addmm_gelu_0(buf1, _frozen_param1)",
              "buf2 = torch.ops.mkl._mkl_linear.default(buf1, _frozen_param9, _frozen_param8, None, 64)",
              "cpp_fused_addmm_gelu_1(buf3, _frozen_param3)"]
BF16_CALLS = ["cpp_fused__to_copy_0(arg4_1, buf0)",
              "buf1 = torch.ops.mkldnn._linear_pointwise.default(buf0, _frozen_param10, _frozen_param8, 'gelu', [-1], 'none')",
              "buf3 = torch.ops.mkldnn._linear_pointwise.default(buf2, _frozen_param11, _frozen_param6, 'none', [-1], '')"]


def test_gelu_placement_sentence_reads_where_inductor_put_the_gelu():
    """float32: MKL's linear and a C++ loop of Inductor's for the GELU; bfloat16: oneDNN's linear with the GELU as a post-op."""
    fp32 = profile_text.gelu_placement_sentence(FP32_CALLS)
    assert fp32.startswith("Inductor called torch.ops.mkl._mkl_linear for the 2 matrix product(s)"), fp32
    assert "kernel of its own, cpp_fused_addmm_gelu_0" in fp32 and "fused with the bias add, not fused into" in fp32, fp32
    bf16 = profile_text.gelu_placement_sentence(BF16_CALLS)
    assert "torch.ops.mkldnn._linear_pointwise" in bf16 and "passed the GELU to 1 of them as a post-op" in bf16, bf16
    assert "generated the matrix products itself" in profile_text.gelu_placement_sentence(["cpp_fused_mm_0(buf0)"])
    assert "no GELU appears" in profile_text.gelu_placement_sentence(["buf0 = extern_kernels.mm(arg0_1, arg1_1, out=buf0)"])


@pytest.mark.parametrize("share, verdict", [(0.95, "the matmuls are the time here"), (0.68, "fusion can save at most the rest"),
                                            (0.3, "fusion has room to help")])
def test_amdahl_sentence_bounds_what_fusion_can_save(share, verdict):
    text = profile_text.amdahl_sentence(share)
    assert f"at most {1 / share:.2f}× faster" in text and verdict in text, text


def test_count_change_sentence_says_more_fewer_or_the_same():
    assert "7 times per pass with autocast, 2 without: the new calls" in profile_text.count_change_sentence("aten::copy_", 2, 7, "autocast")
    assert profile_text.count_change_sentence("op", 3, 1, "x").endswith("1 times per pass with x, 3 without.")
    assert "with and without" in profile_text.count_change_sentence("op", 2, 2, "x")


def test_einsum_sentence_names_the_copy_and_the_product_from_the_recorded_shapes():
    text = profile_text.einsum_sentence([[256, 64, 16, 1]], [[[1, 32, 256], [1, 256, 1024]]])
    assert "[1, 32, 256] × [1, 256, 1024], after copying [256, 64, 16, 1] (1.05 MB) on every call" in text, text
    assert profile_text.einsum_sentence([], [[[32, 256], [256, 1024]]]).endswith("and no copy.")


def test_compile_counts_sentence_reads_one_per_size_one_for_all_or_a_count():
    text = profile_text.compile_counts_sentence({"dynamic=False": 4, "the default": 2, "dynamic=True": 1}, 4)
    assert text == ("For 4 input sizes: dynamic=False compiled 4 graphs, one per size; the default compiled 2 graphs; "
                    "dynamic=True compiled 1 graph for all of them."), text


@pytest.mark.parametrize("backward, verdict", [(1.5, "close to the model"), (3.0, "more than its matrix products explain"),
                                               (0.8, "less than its matrix products predict")])
def test_phases_sentence_splits_a_step_and_checks_the_backward_against_its_flops(backward, verdict):
    text = profile_text.phases_sentence({"forward": 1.0, "backward": backward, "optimizer": 0.2}, 1.5)
    assert verdict in text and f"Backward took {backward:.2f}× the forward" in text, text
    largest = "backward" if backward > 1 else "forward"
    assert f"the {largest} takes the most" in text, text


def test_held_memory_sentence_compares_what_forward_kept_with_the_shapes():
    assert "about what the shapes predict" in profile_text.held_memory_sentence(1.31e6, 1.18e6)
    assert "2.00× what the shapes predict" in profile_text.held_memory_sentence(2.36e6, 1.18e6)


# Sentences the review found contradicted by the output beside them, or facts it found wrong: none may come back.
STALE = [
    "the GELU is a short bar", "einsum finds that the heads share", "TF32 or bf16", "fold the bias and the GELU into the matmul",
    'Path("traces")', "every CPU timing uses one thread", "64 K floats, 256 kB", "on CPUs with AVX-512 BF16 or AMX, instructions",
    "The time barely moved", "Almost all the self time is", "1.4-2.3×",
]


def test_lecture_06_prints_every_sentence_from_its_numbers():
    """Every sentence function is called by the lecture, and no sentence the review flagged is written by hand."""
    functions = {name for name in dir(profile_text) if name.endswith(("_sentence", "_sentences"))}
    uncalled = functions - lecture_calls(LECTURE, "profile_text")
    assert uncalled == set(), f"profile_text functions lecture 06 never calls: {uncalled}"
    text = LECTURE.read_text()
    assert [phrase for phrase in STALE if phrase in text] == []


def test_lecture_06_names_its_sources_for_the_facts_the_review_corrected():
    text = LECTURE.read_text()
    for source in ("torch/_inductor/fx_passes/mkldnn_fusion.py", "aten/src/ATen/native/mkldnn/Utils.h", '"CUDA semantics" page',
                   "Making Deep Learning Go Brrrr From First Principles", "Nsight Systems User Guide", "Nsight Compute CLI",
                   "torch/_dynamo/config.py"):
        assert source in text, f"lecture 06 no longer names {source}"
    assert re.search(r"allow_tf32.*off by default for matmuls since PyTorch 1\.12", text), "the TF32 default is stated with its version"
