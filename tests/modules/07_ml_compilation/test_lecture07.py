"""Lecture 07's sentences and facts (issue 48), checked cell by cell.

Each sentence the lecture prints about a measured or modelled outcome is chosen by a small function of
its plumbing cell (``versus``, ``near_best``, ``roofline_place``, ``count_check``); these tests feed them
numbers that give each outcome, run the cells that print them with stubbed measurements, and check
that the prose states no outcome of another run and cites its sources.
"""

import ast
import re
import types
from pathlib import Path

import matplotlib
import numpy as np
import pytest

from course_helpers import REPO_ROOT, lecture_cell, lecture_cells, run_lecture_cell
from gpucourse import gpu_specs, plots, wording

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

LECTURE = REPO_ROOT / "course" / "07_ml_compilation.py"


def run_cell(marker, **names):
    return run_lecture_cell(LECTURE, marker, **names)


@pytest.fixture(scope="module")
def words():
    """The lecture's sentence-making functions, from its plumbing cell (defining them measures nothing)."""
    namespace, _ = run_cell("def versus(", np=np, time=None, timing=None, subprocess=None, rng=None, wording=wording)
    return types.SimpleNamespace(**{name: namespace[name] for name in ("versus", "near_best", "roofline_place", "count_check")},
                                 namespace=namespace)


def markdown() -> str:
    return "\n".join(lecture_cells(LECTURE, "markdown"))


# --- the sentence makers, one outcome each -------------------------------------------------------


def test_versus_says_faster_slower_or_level_from_the_ratio(words):
    assert words.versus("panel", 23.6, "ikj", 14.5) == "panel ran 1.6× as fast as ikj"
    assert words.versus("panel", 14.5, "ikj", 23.6) == "panel ran 1.6× slower than ikj"
    assert words.versus("panel", 10.4, "ikj", 10.0) == "panel ran level with ikj (within 10%)"
    assert words.versus("numba", 958.2, "Python", 1.0) == "numba ran 958× as fast as Python"
    assert words.versus("jki", 1.0, "ikj", 33.6) == "jki ran 34× slower than ikj"


def test_near_best_tells_a_flat_top_from_a_sharp_peak(words):
    flat = words.near_best({"T = 128": 21.3, "T = 256": 22.2, "T = 512": 22.7, "T = 32": 15.0})
    assert flat.startswith("T = 128, T = 256 and T = 512 came within 10% of the best: a flat top"), flat
    peak = words.near_best({"T = 128": 30.0, "T = 256": 20.0, "T = 512": 10.0})
    assert peak.startswith("only T = 128 came within 10% of the best: a sharp peak"), peak


def test_roofline_place_says_which_roof_and_how_far_below(words):
    below = words.roofline_place("mm_relu", 51.2, 0.5e9, 30e9, 10e9)
    assert "right of the ridge, under the flat roof (ridge at 3.0); 2% of the roof there: far below it" in below, below
    near = words.roofline_place("add", 1 / 12, 0.8e9, 30e9, 10e9)
    assert "left of the ridge, under the sloped roof" in near and "96% of the roof there: close to it" in near, near


def test_count_check_says_same_or_by_how_much_it_differs(words):
    assert words.count_check(64, 64, "mma per warp") == "mma per warp: 64 counted, 64 modelled: the same"
    assert words.count_check(128, 64, "mma per warp").endswith("2× the model, so the compiler repeated or split that code")


# --- the cells that print them ---------------------------------------------------------------------


SWEEP_SIZES = [64, 128, 256, 384, 512]


def run_sweep(words, rates):
    """Run the loop-order cell with `gflops` stubbed to return rates[name][n]; its output."""
    orders = {name: types.SimpleNamespace(__name__=name) for name in ("ijk", "ikj", "jki")}
    by_function = {id(function): name for name, function in orders.items()} | {id(np.dot): "np.dot"}

    def gflops(fn, a, b, flops):
        return rates[by_function[id(fn)]][a.shape[0]]

    _, out = run_cell("SIZES = [64", np=np, plt=plt, plots=plots, ORDERS=orders, gflops=gflops, versus=words.versus,
                      random_matrices=lambda m, k, n: (np.zeros((m, 1)), None), MEASURED="measured on a test", BLAS_LABEL="np.dot")
    plt.close("all")
    return out


def test_the_loop_order_sentences_follow_the_numbers_either_way(words):
    ikj_leads = {"ijk": dict.fromkeys(SWEEP_SIZES, 1.0), "ikj": dict.fromkeys(SWEEP_SIZES, 20.0), "jki": dict.fromkeys(SWEEP_SIZES, 0.5),
                 "np.dot": dict.fromkeys(SWEEP_SIZES, 60.0)}
    out = run_sweep(words, ikj_leads)
    assert "at n = 384: ikj ran 20× as fast as ijk; ikj ran 40× as fast as jki" in out, out
    assert "at n = 512: np.dot ran 3.0× as fast as the fastest loop order" in out, out
    # A machine where the strided order won and BLAS was disturbed: the words follow, they do not predict.
    ijk_leads = {"ijk": dict.fromkeys(SWEEP_SIZES, 8.0), "ikj": dict.fromkeys(SWEEP_SIZES, 7.5), "jki": dict.fromkeys(SWEEP_SIZES, 2.0),
                 "np.dot": dict.fromkeys(SWEEP_SIZES, 2.0)}
    out = run_sweep(words, ijk_leads)
    assert "at n = 384: ijk ran level with ikj (within 10%); ijk ran 4.0× as fast as jki" in out, out
    assert "at n = 512: np.dot ran 4.0× slower than the fastest loop order" in out, out


@pytest.mark.parametrize("marker, call", [
    ("plots.roofline(ax, blas_rate", "roofline_place("),
    ("mm_relu_compiled = njit(mm_relu)", "versus("),
    ("panel_rates = [gflops(matmul_panel", "versus("),
    ("square_rates = {name: gflops(fn", "versus("),
    ('wide_rates["tensorized, strided views"] = gflops', "versus("),
    ('wide_rates["tensorized, packed tiles"] = gflops', "versus("),
    ("tune_results = {T: gflops", "near_best("),
    ("calls = logged_call(", "count_check("),
    ("triton_compile_report(triton_source(matmul_tiles_kernel)", "count_check("),
    ('wide_rates["ijk, first 32 rows"] = gflops', "versus("),
    ("triton_tflops.append(", "versus("),
])
def test_every_cell_that_measures_prints_its_comparison_through_a_sentence_maker(marker, call):
    printed = {node.func.id for print_call in ast.walk(ast.parse(lecture_cell(LECTURE, marker)))
               if isinstance(print_call, ast.Call) and getattr(print_call.func, "id", None) == "print"
               for node in ast.walk(print_call) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert call.rstrip("(") in printed, f"the cell with {marker!r} should print what {call}...) says"


def test_no_prose_states_an_outcome_measured_elsewhere_or_contradicted_by_this_run():
    prose = markdown()
    for stale in ("EPYC", "Xeon", "watch 512", "gains nothing", "Slower than", "twice as fast", "8-16", "8–16", "16 × 16 × 16 in half"):
        assert stale not in prose, f"the lecture's prose still says {stale!r}"


def test_the_tensor_core_ratios_are_computed_per_card_from_gpu_specs():
    _, out = run_cell("dense tensor-core peak / FP32", gpu_specs=gpu_specs)
    assert "L4    (compute capability 8.9): FP16  4.0×, TF32  2.0×" in out, out
    assert "A100  (compute capability 8.0): FP16 16.0×, TF32  8.0×" in out, out
    assert "T4    (compute capability 7.5): FP16  8.0×, no TF32 units" in out, out
    assert "FP16 on tensor cores: 4× to 16× the FP32 rate, depending on the card" in out, out
    card = gpu_specs.GPUS["A100"]
    fake = types.SimpleNamespace(GPUS={"X1": types.SimpleNamespace(name="X1", compute_capability="9.9", fp32_flops=10.0,
                                                                   fp16_tensor_flops=30.0, tf32_tensor_flops=None)})
    _, out = run_cell("dense tensor-core peak / FP32", gpu_specs=fake)
    assert "X1    (compute capability 9.9): FP16  3.0×, no TF32 units" in out and "3× to 3×" in out, out
    assert card.fp16_tensor_flops / card.fp32_flops == 16.0


def test_the_wave_model_counts_tiles_waves_and_the_cost_of_a_partial_wave():
    for fits, sm80, slots in ((None, {}, 108), ({(4, 3): types.SimpleNamespace(blocks_per_sm=2)}, {"compiled": True}, 216)):
        namespace, out = run_cell('A100 = gpu_specs.gpu("A100")', gpu_specs=gpu_specs, np=np, plt=plt, plots=plots,
                                  triton=True, sm80=sm80, fits=fits)
        plt.close("all")
        assert namespace["SLOTS"] == slots
        tiles, waves, tile_use, wave_use = namespace["quantization"](4100, 4100)
        assert tiles == 33 * 33 and waves == pytest.approx(1089 / slots)
        assert tile_use == pytest.approx(4100**2 / 4224**2) and wave_use == pytest.approx(1089 / (-(-1089 // slots) * slots))
        whole, partial = -(-1024 // slots), -(-1089 // slots)
        assert f"in {partial} waves instead of {whole}: {partial / whole:.2f}× its time" in out, out
    assert namespace["quantization"](512, 512)[3] == pytest.approx(16 / 216)  # a 512² product fills 16 of 216 slots


# --- the facts and their sources -----------------------------------------------------------------


def test_the_facts_of_issue_48_are_stated_with_their_sources():
    prose = markdown()
    assert "m16n8k16" in prose and 'PTX ISA, "Warp-level matrix instructions: mma"' in prose
    assert "TF32" in prose and "A100 Tensor Core GPU Architecture whitepaper" in prose and "T4 (Turing, sm_75)" in prose
    assert "128 bytes" in prose and "sysctl hw.cachelinesize" in prose and "Optimization Reference Manual" in prose
    assert "Matrix Multiplication Background User's Guide" in prose and "wave quantization" in prose and "tile quantization" in prose
    assert "`triton.Config`" in prose and "`triton.autotune`" in prose and "triton/runtime/autotuner.py" in prose
    inductor = next(sentence for sentence in prose.splitlines() if "Inductor does not rewrite" in sentence)
    assert "cuBLAS" in inductor and "torch/_inductor/kernel/mm.py" in inductor
    assert 'mode="max-autotune"' in prose and "torch/_inductor/config.py" in prose


def test_the_inductor_fact_holds_for_the_installed_torch():
    """Read from torch's source, not imported: without max-autotune, Inductor's GEMMs are ATen's (cuBLAS on a GPU)."""
    import torch

    inductor = Path(torch.__file__).parent / "_inductor"
    config = (inductor / "config.py").read_text()
    assert re.search(r'^max_autotune = os\.environ\.get\("TORCHINDUCTOR_MAX_AUTOTUNE"\) == "1"$', config, re.MULTILINE)
    utils = (inductor / "utils.py").read_text()
    aten = utils[utils.index("def use_aten_gemm_kernels"):][:200]
    assert "not (\n        config.max_autotune or config.max_autotune_gemm\n    )" in aten, aten
    template = utils[utils.index("def use_triton_template"):][:1500]
    assert "config.max_autotune or config.max_autotune_gemm or not check_max_autotune" in template


def test_the_triton_kernel_fuses_the_relu_and_is_checked_against_torch():
    cell = lecture_cell(LECTURE, "@triton.jit")
    assert "tl.maximum(acc, 0.0)" in cell and "RELU: tl.constexpr" in cell
    assert "torch.relu(torch.matmul(a_t, b_t))" in cell


def test_the_figures_use_the_smallest_label_size_and_keep_their_legends_off_the_data():
    code = "\n".join(lecture_cells(LECTURE, "code"))
    assert "fontsize=7" not in code and "legend(fontsize=8" not in code
    roofline = lecture_cell(LECTURE, "plots.roofline(ax, blas_rate")
    assert 'loc="upper center", bbox_to_anchor=(0.5, -0.16)' in roofline  # below the axes, where it hides no point


def test_a_roofline_leaves_room_under_its_lowest_point_for_the_label():
    fig, ax = plt.subplots(figsize=(9.4, 4.6))
    plots.roofline(ax, 3e10, 1e10, label="toy, measured", points=[("low", 4.8, 1.7e6), ("high", 170, 3e10)])
    fig.canvas.draw()
    label = next(text for text in ax.texts if text.get_text() == "low")
    assert label.get_window_extent().y0 >= ax.get_window_extent().y0, "the lowest point's label runs under the x axis"
    assert label.get_fontsize() == plots.MIN_LABEL_POINTS
    plt.close(fig)
