"""Lecture 03's structure-of-arrays section and assignment 03's layout item (issue 12, item 5).

The numpy AoS → SoA speedup is mostly numpy's per-loop overhead on particles that fit in cache;
the layout's own effect on memory shows in compiled loops beyond the last-level cache. Each test
runs one cell of course/03_coalescing.py with the names it needs, stubbed where the real ones
would depend on this machine, or reads what students read in the release.
"""

import ast
import re
import types

import matplotlib
import nbformat
import numpy as np
import pytest

from course_helpers import REPO_ROOT, lecture_cell, lecture_cells, release, run_lecture_cell
from gpucourse import plots, timing

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

LECTURE = REPO_ROOT / "course" / "03_coalescing.py"
KiB, MiB = 2**10, 2**20


def cells(cell_type):
    return lecture_cells(LECTURE, cell_type)


def one_cell(marker, cell_type="code"):
    return lecture_cell(LECTURE, marker, cell_type)


def run_cell(marker, **names):
    return run_lecture_cell(LECTURE, marker, **names)


def cpu_only(caches=None):
    """A stand-in for the gpucourse package: a named CPU, and the cache sizes ``caches`` as the OS would report them."""
    return types.SimpleNamespace(describe=lambda *args: "CPU test", devices=types.SimpleNamespace(cpu_cache_bytes=lambda: dict(caches or {})))


def timing_with(medians):
    """timing, except that measure returns ``medians[function name]`` without running anything."""
    def measure(fn, *args, **kwargs):
        return timing.Timing(median=medians[fn.__name__], iqr=0.0, calls=10, blocks=5, device="CPU test")

    return types.SimpleNamespace(measure=measure, warn_if_noisy=timing.warn_if_noisy, Timing=timing.Timing)


# --- Lecture: the numpy version, taken apart -----------------------------------------------------


def test_numpy_speedup_is_split_into_loop_overhead_and_layout():
    medians = {"drift_aos_rows": 2e-3, "drift_aos_columns": 2e-4, "drift_soa": 5e-5}
    _, out = run_cell("def drift_aos_rows(", np=np, timing=timing_with(medians), gpucourse=cpu_only())
    assert "numpy's loop overhead (rows → columns, same layout, same bytes): 10.0×" in out, out
    assert "the layout (columns → SoA, strided → contiguous inner loops): 4.0×" in out, out
    assert "in all 40.0×, of which the larger part is numpy looping 2 elements at a time" in out, out


def test_what_dominates_is_read_from_the_measurement():
    medians = {"drift_aos_rows": 2e-3, "drift_aos_columns": 1e-3, "drift_soa": 1e-4}
    _, out = run_cell("def drift_aos_rows(", np=np, timing=timing_with(medians), gpucourse=cpu_only())
    assert "of which the larger part is the layout" in out, out


def test_the_lecture_says_what_the_numpy_gain_is_made_of():
    text = " ".join(one_cell("numpy pays a fixed cost", "markdown").split())
    for point in ("starts one per particle to do 2 additions", "nothing to do with memory", "SIMD instructions",
                  "The graded assignment's structure-of-arrays item measures this numpy speedup, and says so"):
        assert point in text, f"the cell after the numpy measurement should say {point!r}:\n{text}"


# --- Lecture: compiled loops, in cache and beyond it ---------------------------------------------


SMALL_CACHES = {1: 32 * KiB, 2: 256 * KiB, 3: MiB}  # a small machine, so that the sweep past its last level is quick


def compiled_sweep(caches=SMALL_CACHES):
    """Run the compiled sweep for real on ``caches``; the namespace, what it printed, and each measure call (kernel, n, threads)."""
    calls = []

    def measure(fn, *args, **kwargs):
        calls.append((fn.py_func.__name__, args[0].shape[0], kwargs.get("num_threads")))
        return timing.measure(fn, *args, **kwargs)

    recording = types.SimpleNamespace(measure=measure, warn_if_noisy=timing.warn_if_noisy)
    namespace, out = run_cell("def shift_x_aos_cpu(", np=np, timing=recording, gpucourse=cpu_only(caches))
    return namespace, out, calls


def test_compiled_loops_are_measured_from_inside_the_core_cache_to_8x_the_last_level():
    namespace, out, calls = compiled_sweep()
    sizes = namespace["layout_sizes"]
    assert sizes[0] * 16 <= 256 * KiB, f"the smallest AoS array, {sizes[0] * 16} B, should fit in the 256 KiB L2"
    assert sizes[-1] * 16 >= 8 * MiB, f"the largest AoS array, {sizes[-1] * 16} B, should be 8× the 1 MiB last level"
    # Both layouts, at every size, in both rounds, compiled, on one thread.
    expected = sorted((kernel, n, 1) for kernel in ("shift_x_aos_cpu", "shift_x_soa_cpu") for n in sizes for _ in range(2))
    assert sorted(calls) == expected
    assert type(namespace["shift_x_soa_cpu"]).__name__ == "CPUDispatcher", "the loops should be compiled with numba's @njit"
    assert "caches: L2 0.25 MiB per core, last level 1 MiB (reported by the operating system)" in out, out
    assert re.search(r"in the core's cache \(AoS array ≤ 0.25 MiB\): SoA \d+\.\d× faster; beyond the last level \(≥ 4 MiB\): "
                     r"\d+\.\d× \(modelled from the bytes moved: 4×\)", out), out
    assert re.search(r"with 524,288 particles, memory delivered \d+ GB/s to AoS \(32 B per particle\) and \d+ GB/s to SoA \(8 B per particle\)", out), out


@pytest.mark.slow  # runs the compiled loops over 256 MiB arrays
def test_without_reported_caches_the_sweep_assumes_and_says_so():
    namespace, out, _ = compiled_sweep(caches={})
    assert (namespace["core_cache"], namespace["last_cache"]) == (MiB, 32 * MiB)
    assert namespace["layout_sizes"][-1] * 16 >= 8 * 32 * MiB
    assert "last level 32 MiB (assumed)" in out, out


def test_the_figure_marks_both_caches_and_the_byte_ratio():
    sizes = [2**10, 2**12, 2**14, 2**16]
    times = {"AoS": {n: timing.Timing(4e-10 * n, 0.0, 10, 5, "CPU test") for n in sizes},
             "SoA": {n: timing.Timing(1e-10 * n, 2e-10 * n if n == 2**12 else 0.0, 10, 5, "CPU test") for n in sizes}}
    ratio = {n: times["AoS"][n].median / times["SoA"][n].median for n in sizes}
    plt.close("all")
    run_cell('for name, color in (("AoS", "C3"), ("SoA", "C0")):', np=np, plt=plt, plots=plots,
             gpucourse=cpu_only(), layout_sizes=sizes, layout_times=times, ratio=ratio, RECORD_BYTES=16,
             moved={"AoS": 32, "SoA": 8}, core_cache=64 * KiB, last_cache=512 * KiB, cache_label="reported by the operating system")
    left, right = plt.gcf().axes
    for ax in (left, right):
        notes = [text.get_text() for text in ax.texts]
        assert notes == ["AoS array = L2 (0.0625 MiB)", "AoS array = last level (0.5 MiB)"], notes
        vertical = sorted(line.get_xdata()[0] for line in ax.lines if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2)
        assert vertical == [64 * KiB / 16, 512 * KiB / 16], vertical
    labels = [text.get_text() for text in left.get_legend().get_texts()]
    assert labels == ["AoS, compiled loop (measured)", "SoA, compiled loop (measured)", "SoA: too noisy (spread > median)"], labels
    [modelled] = [line for line in right.lines if line.get_label() == "bytes moved, AoS / SoA (modelled)"]
    assert list(modelled.get_xdata()) == [n for n in sizes if n * 16 >= 512 * KiB] and set(modelled.get_ydata()) == {4.0}
    plt.close("all")


def test_the_lecture_connects_both_effects_to_coalescing():
    text = " ".join(one_cell("Two effects of the same layout", "markdown").split())
    for point in ("**In cache**", "SIMD instructions", "**Beyond the last-level cache**", "32 bytes per particle in and out against SoA's 8",
                  "A warp's coalesced load is a SIMD load 32 lanes wide", "16 sectors per request against SoA's 4"):
        assert point in text, f"the reading of the compiled sweep should say {point!r}:\n{text}"


# --- Assignment: the prompt says what its speedup is made of --------------------------------------


def drift_prompt_and_threshold():
    notebook = nbformat.read(release("03_coalescing"), as_version=4)
    [prompt] = [cell.source for cell in notebook.cells if cell.cell_type == "markdown" and "Write `drift_soa(" in cell.source]
    [speed] = [cell.source for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == "test_drift_soa_speed"]
    return " ".join(prompt.split()), speed


def test_the_structure_of_arrays_prompt_credits_numpy_not_memory():
    prompt, _ = drift_prompt_and_threshold()
    for point in ("What this speedup measures: numpy's vectorisation, not memory traffic.", "50,000 particles take 1.6 MB",
                  "start an inner loop of 3 elements for every particle", "in compiled loops over more particles than the cache holds"):
        assert point in prompt, f"the drift_soa prompt should say {point!r}:\n{prompt}"
    for claim in ("striding 32 bytes through memory", "data used together should sit together"):
        assert claim not in prompt, f"the drift_soa prompt still credits memory layout with numpy's gain: {claim!r}"


def test_the_prompts_threshold_is_the_graded_one_with_a_3x_margin():
    prompt, speed = drift_prompt_and_threshold()
    needed = ast.literal_eval(re.search(r"SPEEDUP_NEEDED = (\{.*?\})", speed).group(1))
    stated = float(re.search(r"at least (\d+(?:\.\d+)?)× faster than `drift_aos`", prompt).group(1))
    low, high = map(float, re.search(r"the reference reaches (\d+)-(\d+)×", prompt).groups())
    assert needed == {"cpu": stated, "cuda": stated}, f"the prompt asks for {stated}×, the test for {needed}"
    assert low >= 3 * stated, f"the reference's {low:g}× leaves less than the 3× margin over the required {stated:g}×"
