"""Lecture 01's facts and measurements (issue 12, items 6 and 17), checked cell by cell.

Each test runs one cell of course/01_gpu_basics.py with the names it needs, stubbed where the real
ones would measure or need a GPU, so the checks are exact and quick on any machine.
"""

import re
import types

import matplotlib
import pytest
import torch

from course_helpers import REPO_ROOT, lecture_cell, lecture_cells, run_lecture_cell
from gpucourse import gpu_specs, plots, timing

LECTURE = REPO_ROOT / "course" / "01_gpu_basics.py"


def cells(cell_type):
    return lecture_cells(LECTURE, cell_type)


def code_cell(marker):
    return lecture_cell(LECTURE, marker)


def run_cell(marker, **names):
    return run_lecture_cell(LECTURE, marker, **names)


def no_gpu(messages):
    """A stand-in for the gpucourse package on a machine without a GPU, recording what gpu_or_explain says."""
    def gpu_or_explain(what):
        messages.append(what)
        return False

    return types.SimpleNamespace(gpu_or_explain=gpu_or_explain, has_gpu=lambda: False, describe=lambda *args: "CPU test, 2 torch threads")


# --- Item 6: seed 001's 28.2 TFLOP/s and the T4's 8192² matmul --------------------------------------


def test_the_articles_rate_is_explained_by_tf32_on_an_a100():
    namespace, out = run_cell("seed_gpu_rate = ", gpu_specs=gpu_specs, cpu_peak=1.5e11, cpu_name="CPU test", gpu_rates=[])
    assert namespace["seed_gpu_rate"] == pytest.approx(28.25e12, rel=1e-3)
    assert namespace["fp32_below"] == ["V100", "T4", "A100"], "28.2 TFLOP/s exceeds the FP32 peak of the V100, T4 and A100"
    assert "A100 TF32 tensor cores: 156 TFLOP/s dense peak (reported), so the article's rate is 18% of it" in out, out
    assert "a T4 could not (fp32, fp16, int8 only: no TF32 units)" in out, out
    # The prose says why, and when: TF32 was on by default in PyTorch 1.7-1.11, off since 1.12.
    prose = next(source for source in cells("markdown") if "28 TFLOP/s" in source)
    assert "TF32" in prose and "1.7 to 1.11" in prose and "since 1.12" in prose, prose


def test_the_t4_time_for_an_8192_matmul_is_computed_and_a_few_tenths_of_a_second():
    namespace, out = run_cell("T4_SUSTAINED_SHARE = ", gpu_specs=gpu_specs)
    low, high = namespace["t4_big_seconds"]
    assert 0.2 <= low < high <= 0.3, f"8192² on a T4 modelled at {low:.3f}-{high:.3f} s, expected within 0.2-0.3 s"
    assert low == pytest.approx(2 * 8192**3 / (0.6 * 8.1e12)) and high == pytest.approx(2 * 8192**3 / (0.5 * 8.1e12))
    assert "about 4.0-4.9 TFLOP/s sustained) it takes 0.23-0.27 s (modelled for T4)" in out, out
    # What a CPU-only student reads in place of the GPU timing: the same computed figure, not "tens of milliseconds".
    messages = []
    run_cell("a_big = torch.randn(8192", gpucourse=no_gpu(messages), t4_big_seconds=namespace["t4_big_seconds"])
    assert len(messages) == 1 and "0.23-0.27 s on a T4" in messages[0] and "tens of milliseconds" not in messages[0], messages


def test_without_a_gpu_the_sweep_promises_t4_rates_it_can_reach():
    messages = []
    run_cell("gpu_sizes = [256", gpucourse=no_gpu(messages), gpu_specs=gpu_specs, t4_sustained=[4.05e12, 4.86e12], torch=torch)
    assert len(messages) == 1 and "about 4-5 TFLOP/s on a T4" in messages[0], messages


# --- Item 17: noisy CPU measurements are flagged, not concluded from ---------------------------------


def fake_measure(seconds_by_n, noisy_n):
    """timing.measure for square matmuls: a fixed median per size, with a spread over twice the median at noisy_n."""
    def measure(fn, a, b, **options):
        n = a.shape[0]
        median = seconds_by_n[n]
        return timing.Timing(median=median, iqr=2.5 * median if n == noisy_n else 0.1 * median, calls=10, blocks=10, device="CPU test")

    return measure


def test_the_cpu_sweep_flags_a_noisy_size_and_keeps_it_out_of_the_best_rate():
    rate = {64: 2e10, 128: 4e10, 256: 6e10, 512: 8e10, 768: 5e11, 1024: 1e11}  # 768 looks best, but only by noise
    fake = types.SimpleNamespace(measure=fake_measure({n: 2 * n**3 / r for n, r in rate.items()}, noisy_n=768),
                                 warn_if_noisy=timing.warn_if_noisy)
    namespace, out = run_cell("cpu_sizes = [", torch=torch, timing=fake, gpucourse=no_gpu([]))
    assert namespace["cpu_noisy"] == [False, False, False, False, True, False]
    assert namespace["cpu_peak"] == pytest.approx(1e11), "the best rate must come from sizes whose spread is below their median"
    warnings = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING: n = 768 is too noisy to conclude from"), out


def test_every_cpu_measurement_of_the_lecture_is_checked_for_noise():
    """Each cell that calls timing.measure on the CPU also calls timing.warn_if_noisy on what it measured."""
    measuring = [source for source in cells("code") if "timing.measure(" in source]
    assert len(measuring) >= 6
    unchecked = [source.splitlines()[0] for source in measuring
                 if "timing.warn_if_noisy(" not in source and "gpu_or_explain" not in source and "has_gpu()" not in source]
    assert unchecked == [], f"cells that measure without flagging noise: {unchecked}"


def test_noisy_points_are_drawn_hollow():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    namespace, _ = run_cell("def mark_noisy(")
    fig, ax = plt.subplots()
    namespace["mark_noisy"](ax, [64, 128, 256], [1.0, 2.0, 3.0], [False, True, False], "C0")
    (hollow,) = ax.lines
    assert list(hollow.get_xdata()) == [128] and list(hollow.get_ydata()) == [2.0]
    assert hollow.get_markerfacecolor() == "white" and "too noisy" in hollow.get_label()
    plt.close(fig)


# --- Item 6 and 7: peaks of the precision a float32 matmul runs in -----------------------------------


@pytest.fixture
def figures(monkeypatch):
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    mark_noisy = run_cell("def mark_noisy(")[0]["mark_noisy"]
    names = dict(plt=plt, plots=plots, gpu_specs=gpu_specs, gpucourse=no_gpu([]), mark_noisy=mark_noisy, cpu_name="CPU test",
                 cpu_sizes=[64, 1024], cpu_rates=[5e10, 1.5e11], cpu_noisy=[False, False], cpu_peak=1.5e11,
                 gpu_sizes=[], gpu_rates=[], gpu_card=None, gpu_precision=None, gpu_traffic=None)
    yield names
    plt.close("all")


def test_the_peak_bars_show_tf32_beside_fp32_for_the_a100_and_h100(figures):
    namespace, _ = run_cell("plots.provenance_bars(", seed_gpu_rate=28.25e12, seed_cpu_rate=1.384e12, **figures)
    peaks = {name: (value, kind) for name, value, kind in namespace["bars"] if "peak" in name}
    assert peaks == {
        "T4 FP32 peak (datasheet)": (8.1, "reported"),
        "A100 FP32 peak (datasheet)": (19.5, "reported"),
        "A100 TF32 peak, dense (datasheet)": (156.0, "reported"),
        "H100 FP32 peak (datasheet)": (67.0, "reported"),
        "H100 TF32 peak, dense (datasheet)": (494.5, "reported"),
    }
    drawn = [label.get_text() for label in namespace["right"].get_yticklabels()]
    assert "A100 TF32 peak, dense (datasheet)" in drawn and "H100 TF32 peak, dense (datasheet)" in drawn, drawn


def test_the_roofline_draws_fp32_and_tf32_roofs_labelled(figures):
    namespace, _ = run_cell("plots.roofline(ax, cpu_peak", cpu_bandwidth=3e10, add_rate=2.5e9, **figures)
    labels = [line.get_label() for line in namespace["ax"].lines if not line.get_label().startswith("_")]
    for name in ("H100", "A100"):
        assert f"{name} FP32 CUDA cores, reported" in labels and f"{name} TF32 tensor cores (dense), reported" in labels, labels
    tf32_roof = next(line for line in namespace["ax"].lines if line.get_label() == "H100 TF32 tensor cores (dense), reported")
    assert max(tf32_roof.get_ydata()) == pytest.approx(494.5e12)


def test_the_offload_model_says_why_the_t4s_fp32_peak_is_the_right_one():
    source = code_cell("def offload_parts(")
    assert re.search(r"T4 has no TF32 units", source), source
    assert "tf32" not in gpu_specs.precisions("T4")


def a_gpu(device_name, allow_tf32):
    """Stand-ins for torch and gpucourse on a machine with the GPU ``device_name``; tensors are only their shapes."""
    fake_torch = types.SimpleNamespace(
        randn=lambda *shape, device=None: types.SimpleNamespace(shape=shape),
        mm=torch.mm,
        cuda=types.SimpleNamespace(get_device_name=lambda dev=None: device_name),
        backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=allow_tf32))),
    )
    fake_gpucourse = types.SimpleNamespace(gpu_or_explain=lambda what: True, has_gpu=lambda: True, describe=lambda *args: device_name)
    return fake_torch, fake_gpucourse


@pytest.mark.parametrize(
    "allow_tf32, expected",
    [
        (True, "50% of the A100's TF32 peak of 156.0 TFLOP/s (reported): with allow_tf32=True, float32 matmuls run on its TF32 tensor cores"),
        (False, "400% of the A100's FP32 peak of 19.5 TFLOP/s (reported): with allow_tf32=False, float32 matmuls run on its FP32 CUDA cores"),
    ],
)
def test_on_a_gpu_the_measured_rate_is_compared_with_the_peak_of_the_precision_used(allow_tf32, expected):
    fake_torch, fake_gpucourse = a_gpu("NVIDIA A100-SXM4-80GB", allow_tf32)
    sizes = [256, 512, 1024, 2048, 4096, 8192, 10_000]
    fake = types.SimpleNamespace(measure=fake_measure({n: 2 * n**3 / 78e12 for n in sizes}, noisy_n=None), warn_if_noisy=timing.warn_if_noisy)
    namespace, out = run_cell("gpu_sizes = [256", torch=fake_torch, gpucourse=fake_gpucourse, timing=fake, gpu_specs=gpu_specs, dev="cuda",
                              t4_sustained=[4.05e12, 4.86e12])
    assert namespace["gpu_card"].name == "A100" and namespace["gpu_precision"] == ("tf32" if allow_tf32 else "fp32")
    assert f"best: 78.0 TFLOP/s (measured), {expected}" in out, out


def test_on_a_gpu_the_roofline_adds_the_datasheet_roof_of_the_precision_used(figures):
    figures.update(gpu_sizes=[256, 10_000], gpu_rates=[1e13, 4e14], gpu_card=gpu_specs.gpu("H200"), gpu_precision="tf32",
                   gpu_traffic=4e12, gpu_bandwidth=4.2e12, gpu_add_rate=3.5e11)
    figures["gpucourse"] = a_gpu("NVIDIA H200", True)[1]
    namespace, _ = run_cell("plots.roofline(ax, cpu_peak", cpu_bandwidth=3e10, add_rate=2.5e9, **figures)
    roofs = {line.get_label(): max(line.get_ydata()) for line in namespace["ax"].lines if not line.get_label().startswith("_")}
    assert roofs["H200 TF32, the precision used here, reported"] == pytest.approx(494.5e12), roofs
    assert roofs["NVIDIA H200, measured"] == pytest.approx(4e14), roofs
