"""Tests of gpucourse.cnn_text: each sentence lecture 08 prints, from numbers that give each of its outcomes, and a
check that the lecture prints those sentences (and names its sources) instead of stating outcomes by hand."""

import re

import pytest

from autograder.build import REPO_ROOT
from course_helpers import lecture_calls
from gpucourse import cnn_text, gpu_specs

LECTURE = REPO_ROOT / "course" / "08_cnn.py"


def test_ridges_are_the_peak_of_the_precision_over_the_bandwidth_and_skip_cards_without_the_unit():
    tf32 = cnn_text.ridges("tf32")
    assert set(tf32) == {name for name, spec in gpu_specs.GPUS.items() if spec.tf32_tensor_flops is not None}
    assert "T4" not in tf32 and tf32["A100"] == pytest.approx(156e12 / 2039e9)


def test_ridge_sentence_says_which_cards_a_resnet_layer_passes_in_each_unit():
    """The review's numbers: 138 FLOP/byte passes every FP32 ridge; at 276 in float16 it is left of the H100 (295) and L4 (403)."""
    fp32 = cnn_text.ridge_sentence(138, "fp32", "the layer")
    assert "right of every FP32 CUDA-core ridge" in fp32 and "compute-bound on all of them" in fp32, fp32
    fp16 = cnn_text.ridge_sentence(276, "fp16", "the layer")
    passed, missed = fp16.split("but left of")
    assert all(f"{card} " in passed for card in ("V100", "T4", "A100", "H200")), fp16
    assert "H100 295" in missed and "L4 403" in missed and "H100" not in passed, fp16
    tf32 = cnn_text.ridge_sentence(138, "tf32", "the layer")
    assert "No TF32 unit: V100, T4." in tf32 and "H100 148" in tf32.split("but left of")[1], tf32


def test_ridge_sentence_says_memory_bound_everywhere_for_a_low_intensity():
    text = cnn_text.ridge_sentence(1, "fp16", "BatchNorm")
    assert "left of every FP16 tensor-core ridge" in text and "memory-bound on all of them" in text, text


@pytest.mark.parametrize("library, expected", [
    ([2.0, 20.0], "the library pulls ahead as the size grows"),
    ([2.0, 4.0], "im2col + GEMM closes in as the size grows"),
    ([2.0, 10.5], "the gap holds"),
])
def test_conv_rates_sentence_compares_the_gap_at_both_ends(library, expected):
    rates = {"lib": library, "gemm": [1.0, 5.0], "loops": [0.01, 0.02]}
    text = cnn_text.conv_rates_sentence("C", [4, 64], rates, library="lib", gemm="gemm", loops="loops")
    assert expected in text, text
    assert "the library runs 2× im2col's rate at 4" in text and "The loops reach at most 0.02 GFLOP/s, 200× or more below" in text, text


def test_profile_sentence_ranks_the_groups_and_names_the_pooling_kernels_by_their_op():
    shares = {"convolutions": 1.0, "pooling": 3.0, "the rest": 1.0}
    aten = cnn_text.profile_sentence(shares, ["aten::max_pool2d_with_indices"], clock="CPU", device_type="cpu")
    assert aten.startswith("Of the step's self CPU time, pooling took the most: pooling 60%, convolutions 20%, the rest 20%."), aten
    assert "ATen's own kernels (aten/src/ATen/native/cpu/MaxPoolKernel.cpp), not oneDNN's" in aten
    onednn = cnn_text.profile_sentence(shares, ["aten::mkldnn_max_pool2d"], clock="CPU", device_type="cpu")
    assert "oneDNN's kernels" in onednn and "ATen" not in onednn
    cuda = cnn_text.profile_sentence({"convolutions": 2.0, "pooling": 1.0}, ["aten::max_pool2d_with_indices"], clock="device", device_type="cuda")
    assert cuda.startswith("Of the step's self device time, convolutions took the most") and "DilatedMaxPool2d.cu" in cuda
    assert cnn_text.profile_sentence(shares, [], clock="CPU", device_type="cpu").endswith("No pooling op was recorded.")


@pytest.mark.parametrize("candidate, verdict", [(1.0, "2.00× as fast: faster"), (4.0, "0.50× as fast: slower"), (2.1, "about the same")])
def test_versus_chooses_faster_slower_or_the_same(candidate, verdict):
    text = cnn_text.versus("new", candidate * 1e-3, "old", 2e-3, where="measured here")
    assert text.startswith(f"new: {cnn_text.ms(candidate * 1e-3)} against 2 ms for old") and verdict in text and "(measured here)" in text, text


def test_steps_sentence_compares_each_bar_with_the_one_above_and_times_a_step():
    text = cnn_text.steps_sentence({"a": 1000.0, "b": 2000.0, "c": 1000.0, "d": 1050.0}, 64)
    assert "b: 2.00× the bar above (faster)" in text and "c: 0.50× the bar above (slower)" in text and "d: 1.05× the bar above (about the same)" in text
    assert text.endswith("One step of 64 images took 64 ms in the first bar and 32 ms in the fastest (b).")


def test_batchnorm_sentence_sets_the_time_share_against_the_flop_share_and_the_ridges():
    flops, nbytes = {"convolution": 990.0, "batch norm": 10.0}, {"convolution": 10.0, "batch norm": 100.0}
    heavy = cnn_text.batchnorm_sentence({"convolution": 3.0, "batch norm": 1.0}, flops, nbytes)
    assert heavy.startswith("BatchNorm took 25% of the block's time for 1.0% of its FLOPs, 25× its share of the FLOPs"), heavy
    assert "0.1 FLOP per byte it moves against the convolution's 99" in heavy and "memory-bound on every card" in heavy
    light = cnn_text.batchnorm_sentence({"convolution": 99.5, "batch norm": 0.5}, flops, {"convolution": 10.0, "batch norm": 0.1})
    assert "no more than its share of the FLOPs" in light and "not below every ridge" in light, light


def test_checkpoint_sentence_says_what_it_saved_and_what_it_cost():
    one_forward = cnn_text.checkpoint_sentence(8e6, 1e6, 0.1, 0.13, 0.03)
    assert "kept 1 MB of activations for the backward pass instead of 8 MB, 8.0× less" in one_forward, one_forward
    assert "1.30× as long" in one_forward and "the extra 30 ms is about the one forward pass it recomputes" in one_forward
    overhead = cnn_text.checkpoint_sentence(8e6, 1e6, 0.1, 0.2, 0.03)
    assert "the extra 100 ms is 3.3 forward passes, more than the one it recomputes" in overhead, overhead
    free = cnn_text.checkpoint_sentence(8e6, 8e6, 0.1, 0.1, 0.03)
    assert "no less than without it" in free and "about as long" in free, free


@pytest.mark.parametrize("rates, verdict", [
    ({0: 1000.0, 1: 1500.0, 2: 1200.0}, "1 worker did best here (2 cores): loading overlapped the training step"),
    ({0: 1000.0, 1: 1020.0, 2: 900.0}, "worker processes did not pay here (2 cores)"),
])
def test_loader_sentence_names_the_best_worker_count_only_when_it_pays(rates, verdict):
    text = cnn_text.loader_sentence(rates, cores=2)
    assert text.startswith("Loading in the training process: 1000 images/s;") and text.endswith(f"So {verdict}."), text


def test_resnet_sentence_counts_two_flops_per_multiply_add_and_three_forwards_per_step():
    text = cnn_text.resnet_sentence(4.1e9, 100.0, 2470, "A100", "fp16")
    assert text.startswith("4.1 G multiply-adds are 8.2 GFLOP forward, so a training image is about 24.6 GFLOP."), text
    assert "one image's step would take 0.25 s" in text and "61 TFLOP/s, 19% of its dense FP16 peak (312 TFLOP/s)" in text, text


def test_lecture_08_prints_every_sentence_from_its_numbers():
    functions = {name for name in dir(cnn_text) if name.endswith("_sentence") or name == "versus"}
    uncalled = functions - lecture_calls(LECTURE, "cnn_text")
    assert uncalled == set(), f"cnn_text functions lecture 08 never calls: {uncalled}"
    assert {"bf16_sentence", "speed_sentence", "doubling_sentence"} <= lecture_calls(LECTURE, "profile_text")


# Sentences the review flagged as wrong or as outcomes written by hand.
STALE = ["far right of every machine's ridge", "oneDNN's pooling", "3 × 4.1 GFLOP", "where the CPU has bfloat16 units (AVX-512 BF16 or AMX)",
         "this CPU has no bfloat16 units", "more than doubles training throughput on both, because", "takes about ten milliseconds",
         "1 thread on a CPU", "The loops stay at a fraction of a GFLOP/s"]


def test_lecture_08_drops_the_stale_claims_and_names_its_sources():
    text = LECTURE.read_text()
    assert [phrase for phrase in STALE if phrase in text] == []
    for source in ("MaxPoolKernel.cpp", '"CUDA semantics" page', "TensorFloat-32 (TF32) on Ampere (and later) devices", "Convolutional Layers User's Guide",
                   "torch.nn.utils.fusion.fuse_conv_bn_eval", "saved_tensors_hooks", '"Reproducibility" page', "torch.cpu.get_capabilities()",
                   "ResNet50_Weights", "2 FLOPs"):
        assert source in text, f"lecture 08 no longer names {source}"
    assert re.search(r'sort_by="self_cuda_time_total"', text) and "self_device_time_total" in text
    assert "_ = torch.manual_seed(0)" in text, "a bare torch.manual_seed(0) at the end of a cell prints a Generator"
    assert re.search(r"^mixed = .*bf16_units", text, re.M), "the CPU's autocast dtype follows its bf16 instructions, not oneDNN's AVX-512 gate"
