"""Lecture 01's offload model: fixed costs per copy and per launch, and a verdict sentence derived from the numbers.

The model lives in the lecture (the assignment asks for it, so the package must not hand it over);
these tests run the lecture's own cell that defines it, with the package's documented defaults.
"""

import jupytext
import pytest

from course_helpers import REPO_ROOT
from gpucourse import gpu_specs

T4 = gpu_specs.gpu("T4")
SIZES = [64, 128, 256, 512, 1024, 2048, 4096, 10_000]  # the lecture's table


@pytest.fixture(scope="module")
def lecture():
    """The namespace left by lecture 01's cell that defines offload_parts and who_wins."""
    notebook = jupytext.read(REPO_ROOT / "course" / "01_gpu_basics.py")
    cells = [cell.source for cell in notebook.cells if cell.cell_type == "code" and "def offload_parts(" in cell.source]
    assert len(cells) == 1, f"expected one cell of course/01_gpu_basics.py defining offload_parts, found {len(cells)}"
    namespace = {"gpu_specs": gpu_specs}
    exec(compile(cells[0], "course/01_gpu_basics.py (offload model cell)", "exec"), namespace)
    return namespace


def offload_total(n):
    """The model written out by hand: three copies of 4n² bytes at 10 µs each, one 5 µs launch, 2n³ FLOPs on a T4."""
    return 3 * (10e-6 + 4 * n * n / 15.75e9) + 5e-6 + 2 * n**3 / 8.1e12


def test_fixed_cost_defaults_are_documented_figures():
    assert gpu_specs.HOST_LINK_LATENCY_SECONDS == 10e-6
    assert gpu_specs.LAUNCH_OVERHEAD_SECONDS == 5e-6
    assert gpu_specs.MATMUL_OFFLOAD_FIXED_SECONDS == pytest.approx(35e-6, rel=1e-12)


def test_model_charges_each_copy_and_the_launch_a_fixed_cost(lecture):
    send, compute, fetch = lecture["offload_parts"](64, T4)
    assert send == pytest.approx(2 * (10e-6 + 4 * 64 * 64 / 15.75e9), rel=1e-12), "send: two copies of A and B, each with its latency"
    assert compute == pytest.approx(5e-6 + 2 * 64**3 / 8.1e12, rel=1e-12), "compute: one launch overhead plus 2n³ FLOPs at the T4's peak"
    assert fetch == pytest.approx(10e-6 + 4 * 64 * 64 / 15.75e9, rel=1e-12), "fetch: one copy of C with its latency"
    # Without fixed costs the 64 x 64 offload was modelled at ~3 µs; with them it is ~38 µs.
    assert 38e-6 < send + compute + fetch < 38.5e-6, f"64 x 64 offload modelled at {(send + compute + fetch) * 1e6:.1f} µs, expected about 38 µs"


def test_cpu_wins_small_gpu_wins_large_and_the_crossover_is_the_smallest_win(lecture):
    cpu_flops = 5e11  # a good laptop CPU
    wins = {n: sum(lecture["offload_parts"](n, T4)) < 2 * n**3 / cpu_flops for n in range(1, 2049)}
    assert not wins[64] and not wins[256], "at 64 and 256 the fixed costs and copies should outweigh a 500 GFLOP/s CPU"
    assert wins[512] and wins[2048], "at 512 and above the T4's compute should win"
    crossover = min(n for n, won in wins.items() if won)
    # The hand-written model agrees on where it changes: offloading loses just below, wins there.
    assert offload_total(crossover) < 2 * crossover**3 / cpu_flops
    assert not offload_total(crossover - 1) < 2 * (crossover - 1) ** 3 / cpu_flops
    assert all(wins[n] for n in range(crossover, 2049)), "once offloading wins it should keep winning"
    # 35 µs of fixed costs move the crossover up from 204 (bandwidth and FLOP/s alone) to 304.
    assert crossover == 304


@pytest.mark.parametrize(
    "cpu_flops, expected",
    [
        (5e11, "On this model the CPU wins below n ≈ 512 (it is still faster at n = 256), and offloading to the T4 wins from n = 512 on."),
        (1.5e12, "On this model the CPU wins below n ≈ 1024 (it is still faster at n = 512), and offloading to the T4 wins from n = 1024 on."),
        (5e9, "On this model offloading to the T4 wins at every n here, from 64 to 10000: "
              "even its fixed costs take less time than this CPU's matmul."),
        (1e13, "On this model the CPU wins at n = 10000, the largest size here: offloading to the T4 does not pay in this range."),
    ],
    ids=["500 GFLOP/s", "1.5 TFLOP/s", "5 GFLOP/s", "10 TFLOP/s"],
)
def test_the_sentence_follows_the_computed_numbers(lecture, cpu_flops, expected):
    cpu_s = [2 * n**3 / cpu_flops for n in SIZES]
    offload_s = [sum(lecture["offload_parts"](n, T4)) for n in SIZES]
    # The expected sentence itself follows the hand-written model's numbers, case by case.
    winners = [n for n in SIZES if offload_total(n) < 2 * n**3 / cpu_flops]
    if winners == SIZES:
        assert "at every n here" in expected
    elif not winners:
        assert "does not pay" in expected
    else:
        assert winners == SIZES[SIZES.index(winners[0]):] and f"n ≈ {winners[0]}" in expected
    assert lecture["who_wins"](SIZES, cpu_s, offload_s, "T4") == expected


def test_the_lecture_prints_the_derived_sentence():
    """The table cell prints who_wins(...) on the table's own numbers, not a sentence of its own."""
    notebook = jupytext.read(REPO_ROOT / "course" / "01_gpu_basics.py")
    text = "\n".join(cell.source for cell in notebook.cells)
    assert "print(who_wins(offload_sizes, cpu_model_s, offload_s, \"T4\"))" in text
    assert "the CPU wins" not in "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown"), (
        "a fixed claim about who wins in the markdown can disagree with the numbers computed on the reader's machine")
