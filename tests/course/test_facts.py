"""Facts the notebooks and the package state about GPUs, checked against their sources (issue 12, item 6).

The checks read the built notebooks (what students open), run a lecture's cell where it prints a
figure derived from ``gpu_specs``, and pin the reported figures to the papers and datasheets cited
next to them in ``gpucourse/gpu_specs.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from autograder.build import REPO_ROOT
from course_helpers import ASSIGNMENTS, LECTURES, lecture_calls, release, source
from gpucourse import gpu_specs, rnn, thresholds

BUILT_NOTEBOOKS = [*LECTURES, *(source(a) for a in ASSIGNMENTS), *(release(a) for a in ASSIGNMENTS)]
PACKAGE_SOURCES = sorted((REPO_ROOT / "gpucourse").rglob("*.py"))
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _lecture(stem: str) -> nbformat.NotebookNode:
    return _read(REPO_ROOT / "course" / f"{stem}.ipynb")


def _cell(notebook: nbformat.NotebookNode, marker: str, cell_type: str = "code") -> str:
    """The one cell of ``cell_type`` whose source contains ``marker``."""
    found = [cell.source for cell in notebook.cells if cell.cell_type == cell_type and marker in cell.source]
    assert len(found) == 1, f"expected one {cell_type} cell containing {marker!r}, found {len(found)}"
    return found[0]


def _lines(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        return [line for cell in _read(path).cells for line in cell.source.splitlines()]
    return path.read_text().splitlines()


def _claims(paths, *patterns: str) -> list[str]:
    """Lines (with their file) that match every one of ``patterns``, case-insensitively."""
    return [f"{path.relative_to(REPO_ROOT)}: {line.strip()}" for path in paths for line in _lines(path)
            if all(re.search(pattern, line, re.I) for pattern in patterns)]


# --- Register latency -------------------------------------------------------------------------


def test_register_latency_is_the_dependent_instruction_latency_of_jia_et_al():
    """Jia et al. 2018 (arXiv 1804.06826): ~4 cycles for a dependent instruction on Volta, not 1."""
    assert gpu_specs.LATENCY_CYCLES["registers"] == (4, 4)
    assert gpu_specs.memory_hierarchy("T4")[0].latency_cycles == (4, 4)


def test_no_notebook_package_or_doc_claims_one_cycle_registers():
    claims = _claims([*BUILT_NOTEBOOKS, *PACKAGE_SOURCES, *DOCS], r"register", r"\b(1|one|single)[- ]cycles?\b")
    assert claims == [], "registers take about 4 cycles for a dependent instruction (Jia et al. 2018):\n" + "\n".join(claims)


# --- Capacities in GiB, bandwidths in decimal GB/s --------------------------------------------

# The datasheets' "16 GB", "80GB", ... are binary capacities: nvidia-smi lists an A100 80GB's as 81920 MiB.
CAPACITY_GIB = {"V100": 32, "T4": 16, "A100": 80, "L4": 24, "H100": 80, "H200": 141}


def test_card_capacities_are_binary_and_bandwidths_decimal():
    assert {name: spec.memory_bytes / 2**30 for name, spec in gpu_specs.GPUS.items()} == CAPACITY_GIB
    assert gpu_specs.gpu("A100").memory_bandwidth == 2039 * 10**9  # "2,039 GB/s" on the datasheet


def _run_memory_table() -> tuple[str, dict]:
    """Lecture 02's memory-hierarchy cell, run with the package's gpu_specs: (what it printed, its names)."""
    code = _cell(_lecture("02_architecture"), "gpu_specs.memory_hierarchy")
    namespace = {"gpu_specs": gpu_specs}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "02_architecture memory table", "exec"), namespace)
    return printed.getvalue(), namespace


def test_lecture_02_memory_table_prints_capacities_in_gib_and_register_latency_4():
    printed, _ = _run_memory_table()
    latency_row, size_row = (line for line in printed.splitlines() if line.startswith("registers "))
    assert re.fullmatch(r"registers\s+one thread\s+the thread\s+4", latency_row), latency_row
    assert re.fullmatch(r"registers\s+10\.0 MiB / —\s+27\.0 MiB / —\s+33\.0 MiB / —", size_row), size_row  # 64 K × 4 B per SM
    # T4, A100, H100 columns: capacities in GiB, bandwidths in decimal TB/s.
    global_row = [line for line in printed.splitlines() if line.startswith("global (DRAM/HBM) ")][-1]
    assert re.fullmatch(r"global \(DRAM/HBM\)\s+16 GiB / 0\.3 TB/s\s+80 GiB / 2\.0 TB/s\s+80 GiB / 3\.4 TB/s", global_row), global_row
    assert not re.search(r"\d GB\b", printed), f"a capacity labelled GB:\n{printed}"


def test_no_gb_label_computed_with_binary_units():
    """A figure divided by 2**30 (or 1024**3) is in GiB: a "GB" beside it is wrong."""
    sources = [*sorted((REPO_ROOT / "course").glob("*.py")), *sorted((REPO_ROOT / "solutions").glob("*/*.py")),
               *PACKAGE_SOURCES, REPO_ROOT / "autograder" / "cli.py"]
    binary = r"(2 ?\*\* ?30|1024 ?\*\* ?3)"
    claims = [claim for claim in _claims(sources, binary, r"\bGB\b") if "GiB" not in claim]
    assert claims == [], "GB label on a binary figure:\n" + "\n".join(claims)


# --- Shared memory against global memory bandwidth ---------------------------------------------


def _shared_to_global(spec: gpu_specs.GPUSpec) -> float:
    # SMs × 32 banks × 4 bytes per cycle × boost clock, against the datasheet's memory bandwidth.
    return spec.sms * 32 * 4 * spec.boost_clock_hz / spec.memory_bandwidth


def test_lecture_02_prints_the_shared_to_global_ratio_of_every_card_from_gpu_specs():
    printed, namespace = _run_memory_table()
    expected = {name: _shared_to_global(spec) for name, spec in gpu_specs.GPUS.items()}
    assert namespace["shared_to_global"] == pytest.approx(expected, rel=1e-12)
    for name, ratio in expected.items():
        assert re.search(rf"^{name}\s+shared .* = {ratio:4.1f}×", printed, re.M), f"no ratio {ratio:.1f}× for {name} in:\n{printed}"
    # What the issue found: "ten times or more" fails on the A100 and the H200.
    assert expected["A100"] < 10 and expected["H200"] < 10 and expected["T4"] > 10


def test_lecture_02_ratio_follows_gpu_specs_rather_than_a_hard_coded_number(monkeypatch):
    h200 = gpu_specs.GPUS["H200"]
    monkeypatch.setitem(gpu_specs.GPUS, "H200", dataclasses.replace(h200, memory_bandwidth=2 * h200.memory_bandwidth))
    printed, namespace = _run_memory_table()
    assert namespace["shared_to_global"]["H200"] == pytest.approx(_shared_to_global(h200) / 2)
    assert re.search(rf"^H200\s+shared .* = {_shared_to_global(h200) / 2:4.1f}×", printed, re.M), printed


def test_lecture_02_says_per_card_where_shared_memory_is_ten_times_global():
    text = " ".join(_cell(_lecture("02_architecture"), "Shared memory is often said", "markdown").split())
    said = re.search(r"it holds on the (.+?), the (\w+) sits at about ten, and on the (.+?) it is under ten", text)
    assert said, f"the sentence naming the cards changed; update this test with it:\n{text}"
    named = [set(re.split(r", | and ", group)) for group in said.groups()]
    printed = {name: round(_shared_to_global(spec), 1) for name, spec in gpu_specs.GPUS.items()}  # as the cell prints them
    assert named == [{n for n, r in printed.items() if r > 10}, {n for n, r in printed.items() if r == 10},
                     {n for n, r in printed.items() if r < 10}], f"the lecture's cards disagree with gpu_specs: {printed}"


# --- Register allocation wording ---------------------------------------------------------------


def test_nothing_says_warps_receive_registers_in_groups_of_4():
    """Registers go to each warp in units of 256; it is the number of resident warps that is floored to a multiple of 4."""
    claims = _claims([*BUILT_NOTEBOOKS, *PACKAGE_SOURCES, *DOCS], r"groups? of (4|four|`warp_alloc_granularity`)")
    assert claims == [], "\n".join(claims)


# --- Names a notebook uses without importing them ----------------------------------------------


@pytest.mark.parametrize("notebook", [*LECTURES, *(release(a) for a in ASSIGNMENTS)], ids=lambda path: path.stem)
def test_prompts_name_numba_dtypes_only_where_numba_is_imported(notebook):
    cells = _read(notebook).cells
    imports_numba = any(re.search(r"^\s*import numba\b", cell.source, re.M) for cell in cells if cell.cell_type == "code")
    named = [match for cell in cells if cell.cell_type == "markdown"
             for match in re.findall(r"\bnumba\.(?:float|int|uint|complex|bool)\w*", cell.source)]
    assert imports_numba or named == [], f"{notebook.name} names {named} but never imports numba: say np.float64, as the code does"


# --- Transpose launch shapes ---------------------------------------------------------------------


@pytest.mark.parametrize("notebook, marker", [(REPO_ROOT / "course" / "03_coalescing.ipynb", "32 × 8 threads"),
                                              (release("03_coalescing"), "Why 32 × 8 threads")])
def test_transpose_block_of_32_by_8_is_explained_where_it_appears(notebook, marker):
    """Lecture 03 launches 32 × 32 threads, the assignment 32 × 8 (NVIDIA's transpose blog post): both say why."""
    text = " ".join(_cell(_read(notebook), marker, "markdown").split())
    for reason in ("An Efficient Matrix Transpose in CUDA C/C++", "4 independent loads", "several blocks per SM"):
        assert reason in text, f"{notebook.name}: the cell introducing 32 × 8 blocks should say {reason!r}:\n{text}"


# --- numba's warning about host arrays ---------------------------------------------------------

HOST_ARRAY_WARNING = "Host array used in CUDA kernel will incur copy overhead to/from device."  # numba-cuda's text


def _host_array_warnings_shown(lecture: nbformat.NotebookNode, monkeypatch) -> int:
    """Run the lecture's warning filters, then let numba warn twice from two places: how many are shown?"""
    from numba.core.errors import NumbaPerformanceWarning

    filters = [line for cell in lecture.cells if cell.cell_type == "code" for line in cell.source.splitlines()
               if re.match(r"warnings\.(filterwarnings|simplefilter)\(", line)]
    monkeypatch.setattr(warnings, "onceregistry", {})  # "once" remembers across tests otherwise
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        exec("\n".join(filters), {"warnings": warnings})
        warnings.warn(NumbaPerformanceWarning(HOST_ARRAY_WARNING), stacklevel=1)  # numba warns from two places (to and from the device)
        warnings.warn(NumbaPerformanceWarning(HOST_ARRAY_WARNING), stacklevel=1)
    return sum(HOST_ARRAY_WARNING in str(warning.message) for warning in shown)


@pytest.mark.parametrize("stem", ["02_architecture", "03_coalescing", "04_divergence"])
def test_lectures_show_the_host_array_warning_once_instead_of_silencing_it(stem, monkeypatch):
    assert _host_array_warnings_shown(_lecture(stem), monkeypatch) == 1


def test_lecture_02_explains_the_host_array_warning():
    text = " ".join(_cell(_lecture("02_architecture"), "NumbaPerformanceWarning", "markdown").split())
    for point in ("copies each one to the GPU before the launch and back after it", "cuda.to_device", "never warns"):
        assert point in text, f"lecture 02's explanation of the host-array warning should say {point!r}:\n{text}"


# --- Lecture 05: streams and pinned memory (issue 48) ---------------------------------------------


def _markdown(stem: str) -> str:
    """A lecture's markdown, whitespace folded: what a student reads."""
    return " ".join(" ".join(cell.source for cell in _lecture(stem).cells if cell.cell_type == "markdown").split())


def test_lecture_05_prints_its_outcome_sentences_through_stream_text():
    """Every sentence lecture 05 states about a modelled or measured outcome comes from gpucourse.stream_text, fed with
    that run's numbers; each public sentence function is used by the lecture or the stream-timeline widget."""
    import inspect

    from gpucourse import stream_text

    sentences = {name for name, value in vars(stream_text).items() if inspect.isfunction(value) and not name.startswith("_")
                 and value.__module__ == stream_text.__name__} - {"engine_name", "copy_overlap"}  # helpers, not sentences
    widget_source = (REPO_ROOT / "gpucourse" / "widgets.py").read_text()
    used = lecture_calls(REPO_ROOT / "course" / "05_streams.py", "stream_text") | {name for name in sentences if f"stream_text.{name}(" in widget_source}
    assert sentences - used == set(), "sentence functions nobody calls"
    assert {"copy_model", "measured_bandwidth", "pin_cost", "ranking", "host_wait", "host_clock", "idle_gap", "stream_count_gain", "compare",
            "first_kernel_wait", "races", "race_versus_order", "items_taken", "overlap_measured", "model_against_measurement", "wait_chain",
            "false_dependencies", "concurrency", "priority_jump", "memory_and_races", "reuse_observed", "sync_flags", "profiled_rows",
            "profiled_streams"} <= used


@pytest.mark.parametrize("claim", [
    "buys next to nothing",  # non_blocking from pageable memory skips torch's stream synchronisation
    "costs nothing on a card with two copy engines",  # breadth-first issue took 22.3 ms against 13.1 on 2 shared streams
    "safe habit",
    "waits for chunk 2's copy in",  # what the first kernel waits for is read from the timeline
    "Two streams already take most of the gain",
    "should land close",
    "often 80%",
    "a copy has a fixed cost the model leaves out",  # the model may charge one: it prints what it charges
    "The model's lines are flat",
    "shorter, and wrong",
    "reported figures range from",
])
def test_lecture_05_states_no_outcome_by_hand(claim):
    """Sentences the review found stating a model's or a measurement's outcome as fixed text (issue 48)."""
    notebook = _lecture("05_streams")
    assert [cell.source for cell in notebook.cells if claim in cell.source] == []


@pytest.mark.parametrize("fact, sources", [
    ("a blocking copy synchronises its stream", ("aten/src/ATen/native/cuda/Copy.cu", "copy_kernel_cuda",
                                                 "A guide on good usage of non_blocking and pin_memory() in PyTorch")),
    ("pageable copies are staged, and may synchronise", ('"API synchronization behavior"',)),
    ("pinned blocks are cached and reused", ("aten/src/ATen/cuda/CachingHostAllocator.h",)),
    ("Executor.map submits every item at once", ('"the iterables are collected immediately rather than lazily"', "Question 3")),
    ("the copy-engine count", ("cudaDeviceProp.asyncEngineCount", "deviceQuery", '"Concurrent Data Transfers"', "not cited")),
    ("torch's streams skip the legacy default stream's barrier", ("c10/cuda/CUDAStream.cpp", "cudaStreamNonBlocking")),
    ("issue order before Hyper-Q", ('"How to Overlap Data Transfers in CUDA C/C++"',)),
    ("DataLoader bounds its prefetching", ("prefetch_factor", "2 * num_workers")),
    ("one queue per engine before Hyper-Q, Hyper-Q's connections",
     ('"Overlapping Behavior"', 'Compute Architecture: Kepler GK110"', "compared to the single connection")),
    ("CUDA_DEVICE_MAX_CONNECTIONS and false dependencies", ('"CUDA Environment Variables"', "CUDA_DEVICE_MAX_CONNECTIONS", "can result in false dependencies")),
    ("torch's pool of 32 streams per priority", ("kStreamsPerPool", "c10/cuda/CUDAStream.cpp")),
    ("kernels of several streams run at once when they fit", ('"Concurrent Kernel Execution"', '"Features and Technical Specifications"')),
    ("stream priorities never preempt and skip copies", ("cudaStreamCreateWithPriority", "do not preempt already-running work",
                                                         "no effect on host-to-device and device-to-host memory operations")),
    ("the caching allocator and record_stream", ("Tensor.record_stream", "at the time of deallocation is complete", '"CUDA semantics"',
                                                 "is aware of only the stream where a tensor was allocated")),
    ("torch's sync debug mode", ("torch.cuda.set_sync_debug_mode", "called a synchronizing CUDA operation", "c10/cuda/CUDAFunctions.cpp",
                                 "not all synchronizing operations will trigger warning or error")),
    ("Nsight Systems' command line", ("nsys profile --trace=cuda,nvtx", '"CLI Profile Command Switch Options"')),
    ("the staged pipeline and pinned memory in the Best Practices Guide", ('"Asynchronous and Overlapping Transfers with Computation"', '"Pinned Memory"')),
])
def test_lecture_05_names_the_source_of_each_fact(fact, sources):
    text = _markdown("05_streams")
    assert [source for source in sources if source not in text] == [], f"lecture 05 should name the source of: {fact}"


def test_lecture_05_shows_the_issue_order_trap_on_pre_hyper_q_queues_only():
    """Section 3 draws the trap with one queue per engine and sets Hyper-Q beside it; the model must still show both
    (with Hyper-Q's queues, the default, the trap is gone), or the section has nothing to show."""
    from gpucourse.sim.streams import Schedule, pipeline

    cell = _cell(_lecture("05_streams"), "traps = {")
    assert 'queues="per-engine"' in cell.replace("'", '"') or 'for queues in ("per-engine", "hyper-q")' in cell
    copy = Schedule.for_gpu("T4").copy_seconds(4 * 2**20)
    depth, breadth = (pipeline(4, copy, 0.4e-3, copy, copy_engines=1, order=order, queues="per-engine").simulate().makespan
                      for order in ("depth", "breadth"))
    hyper_q = pipeline(4, copy, 0.4e-3, copy, copy_engines=1, order="depth").simulate().makespan
    assert depth > 1.3 * breadth and depth > 1.3 * hyper_q


def test_lecture_05_models_the_thread_pool_loader_with_one_queue_per_engine():
    """16 items on 16 streams would share Hyper-Q's 8 queues: a false dependency no thread pool has (the model predicted 1.35×
    instead of 1.82× for equal steps)."""
    cell = _cell(_lecture("05_streams"), "simulated = pipeline(ITEMS")
    assert re.search(r'pipeline\(ITEMS, t_load, t_compute, 0\.0, queues="per-engine"\)', cell)


def test_lecture_05_does_not_give_away_question_2():
    """The lecture double-buffers a reduction on two slots; the assignment's reference (a map on three slots) stays out of it."""
    solution = (REPO_ROOT / "solutions" / "05_streams" / "05_streams.py").read_text()
    answer = solution[solution.index("def overlapped_map("):]
    answer = answer[answer.index("### BEGIN SOLUTION"):answer.index("### END SOLUTION")]
    lecture = "\n".join(cell.source for cell in _lecture("05_streams").cells if cell.cell_type == "code")
    distinctive = [line.strip() for line in answer.splitlines() if len(line.strip()) > 40 and not line.strip().startswith("#")]
    assert distinctive and [line for line in distinctive if line in lecture] == []
    assert "slots = 3" not in lecture and "triple" not in lecture.lower()


def test_overlap_speed_models_the_triple_buffered_reference_by_a_stream_per_chunk():
    """gpucourse.thresholds.overlap_speed's docstring: the 3-slot reference and a stream per chunk, breadth-first, give the same
    makespan on every card (the copies set the pace); checked with 1 MiB chunks, cheap to compute on the CPU."""
    import torch

    from gpucourse import streams

    solution = (REPO_ROOT / "solutions" / "05_streams" / "05_streams.py").read_text()
    cell = solution[solution.index("def overlapped_map("):solution.index('# %% nbgrader={"grade_id": "test_overlap_correct"')]
    namespace = {"streams": streams}
    exec(cell, namespace)
    data = [torch.zeros(1 << 18) for _ in range(8)]
    for name, card in gpu_specs.GPUS.items():
        copy, kernel = thresholds.map_chunk_seconds(card, 1 << 18)
        with streams.modelled(name) as run:
            run.values(namespace["overlapped_map"](streams.kernel(torch.neg, seconds=kernel), run.host_chunks(data)))
        assert run.timeline().makespan == pytest.approx(thresholds.pipelined_map_seconds(card, 8, 1 << 18), rel=1e-6), name


def test_lecture_05_copies_from_written_pages_only():
    """An untouched torch.empty maps the kernel's shared zero page: the bandwidth cell fills its source first."""
    cell = _cell(_lecture("05_streams"), "measured_bandwidth[memory] = []")
    assert "torch.empty(size, dtype=torch.uint8).fill_(" in cell
    assert re.findall(r"source = torch\.empty\([^)]*\)(?!\.fill_)", cell) == []


# --- Lecture 09: cuDNN's RNN algorithm, kernels per step, sentences from numbers ----------------------------

LSTM_09 = "09_lstm"
FP16_256 = dict(dtype="float16", hidden=256, inputs=256, batch=64, steps=64)


def _card(cc: str, sms: int) -> SimpleNamespace:
    return SimpleNamespace(compute_capability=cc, sms=sms)


@pytest.mark.parametrize("card, shape, forward, expected", [
    ("A100", FP16_256, True, rnn.PERSIST_STATIC),
    ("A100", FP16_256, False, rnn.PERSIST_STATIC),
    ("H100", FP16_256, True, rnn.PERSIST_STATIC),
    ("A100", dict(FP16_256, dtype="float32"), True, rnn.STANDARD),  # the lecture's own GPU run
    ("A100", dict(FP16_256, dtype="bfloat16"), True, rnn.STANDARD),  # CUDNN_DATA_HALF only
    ("T4", FP16_256, True, rnn.STANDARD),  # Turing excluded
    ("L4", FP16_256, True, rnn.STANDARD),  # 58 SMs < 98
    (_card("8.6", 112), FP16_256, True, rnn.STANDARD),  # sm86 excluded whatever its SM count
    ("A100", dict(FP16_256, batch=136), True, rnn.STANDARD),
    ("A100", dict(FP16_256, batch=60), True, rnn.STANDARD),
    ("A100", dict(FP16_256, hidden=320), True, rnn.STANDARD),
    ("A100", dict(FP16_256, hidden=1152), True, rnn.STANDARD),
    ("A100", dict(FP16_256, inputs=100), True, rnn.STANDARD),
    ("A100", dict(FP16_256, layers=2), True, rnn.STANDARD),
    ("A100", dict(FP16_256, bidirectional=True), True, rnn.STANDARD),
    ("A100", dict(FP16_256, packed=True), True, rnn.STANDARD),
    ("A100", dict(FP16_256, proj_size=64), True, rnn.STANDARD),
    ("A100", dict(FP16_256, mode="GRU"), True, rnn.STANDARD),
    ("A100", dict(FP16_256, mode="RNN_TANH", hidden=896, inputs=128, batch=96), True, rnn.STANDARD),
    ("A100", dict(FP16_256, mode="RNN_TANH", hidden=896, inputs=128, batch=88), True, rnn.PERSIST_STATIC),
    ("V100", FP16_256, True, rnn.PERSIST_STATIC),
    ("V100", dict(FP16_256, batch=80), True, rnn.STANDARD),  # a multiple of 16 that measured badly
    ("V100", dict(FP16_256, batch=128, steps=30), True, rnn.STANDARD),  # 20-39 steps: batch up to 96
    ("V100", dict(FP16_256, batch=96, steps=30), True, rnn.PERSIST_STATIC),
    ("V100", dict(FP16_256, batch=8, steps=10), True, rnn.PERSIST_STATIC),
    ("V100", dict(FP16_256, batch=48, steps=5), True, rnn.STANDARD),
    ("A100", dict(FP16_256, dtype="float32", hidden=128), True, rnn.SMALL_H),  # section 9's model: any dtype but float64
    ("A100", dict(FP16_256, dtype="float32", hidden=128), False, rnn.SMALL_H),
    ("A100", dict(FP16_256, dtype="float32", hidden=192), True, rnn.SMALL_H),
    ("A100", dict(FP16_256, dtype="float32", hidden=192), False, rnn.STANDARD),  # backward: H <= 128
    ("A100", dict(FP16_256, dtype="float64", hidden=128), True, rnn.STANDARD),
    ("A100", dict(FP16_256, mode="RNN_TANH", dtype="float32", hidden=384), True, rnn.SMALL_H),
    ("A100", dict(FP16_256, mode="RNN_TANH", dtype="float32", hidden=384), False, rnn.STANDARD),
    (_card("5.2", 24), dict(FP16_256, dtype="float32", hidden=128), True, rnn.STANDARD),  # small-H needs sm60
    ("A100", dict(FP16_256, hidden=128, packed=True), True, rnn.STANDARD),
], ids=lambda value: value if isinstance(value, str) else None)
def test_cudnn_algo_follows_get_algo_in_pytorchs_rnn_cpp(card, shape, forward, expected):
    card = gpu_specs.gpu(card) if isinstance(card, str) else card
    assert rnn.cudnn_algo(card, forward=forward, **shape) == expected


def test_cudnn_algo_names_what_the_lectures_float32_run_misses_and_rejects_unknown_modes():
    assert rnn.persist_static_misses(gpu_specs.gpu("A100"), **dict(FP16_256, dtype="float32")) == ["float32, not float16"]
    assert rnn.persist_static_misses(gpu_specs.gpu("T4"), **FP16_256) == ["sm75 with 40 SMs is excluded"]
    with pytest.raises(ValueError, match="mode"):
        rnn.cudnn_algo(gpu_specs.gpu("A100"), mode="lstm", **FP16_256)


def test_lecture_09_states_the_persistent_conditions_with_their_source():
    text = " ".join(_cell(_lecture(LSTM_09), "use_persist_device_heuristics", "markdown").split())
    for fact in ("aten/src/ATen/native/cudnn/RNN.cpp", "`get_algo`", "**float16**", "H ≤ 192", "H and I multiples of 128",
                 "at least 98 SMs", "packed input", "`use_persist_common_heuristics`", "`use_rnn_persist_small_h`"):
        assert fact in text, f"lecture 09's cuDNN algorithm cell should say {fact!r}:\n{text}"
    assert "rnn.cudnn_algo(" in _cell(_lecture(LSTM_09), "CONFIGS = {")


def _lecture_functions(stem: str, *names: str) -> dict:
    """The named top-level functions of a lecture's code cells, defined without running the rest of the cells."""
    import ast

    import torch
    from torch import nn

    namespace = {"torch": torch, "nn": nn}
    for cell in _lecture(stem).cells:
        if cell.cell_type == "code":
            tree = ast.parse(cell.source)
            found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
            exec(compile(ast.Module(body=found, type_ignores=[]), stem, "exec"), namespace)
    assert set(names) <= set(namespace), f"{stem} no longer defines {set(names) - set(namespace)}"
    return namespace


def test_lecture_09_kernels_per_step_are_the_counts_the_threshold_model_uses():
    """The lecture counts its own steps' kernel-launching ops; gpucourse.thresholds models the GPU item with the same."""
    lecture = _lecture_functions(LSTM_09, "lstm_problem", "lstm_weights", "gate_weights", "lstm_per_gate", "lstm_hoisted")

    def problem(steps):
        return lecture["lstm_problem"](2, steps, 3, 4)

    assert rnn.kernel_ops_per_step(lecture["lstm_per_gate"], problem) == thresholds.NAIVE_LSTM_STEP_KERNELS
    assert rnn.kernel_ops_per_step(lecture["lstm_hoisted"], problem) == thresholds.FAST_LSTM_STEP_KERNELS
    code = "\n".join(cell.source for cell in _lecture(LSTM_09).cells)
    assert "== thresholds.NAIVE_LSTM_STEP_KERNELS" in code and "== thresholds.FAST_LSTM_STEP_KERNELS" in code
    claims = _claims([REPO_ROOT / "course" / f"{LSTM_09}.ipynb"], r"\b(twenty|ten|\d+) (kernels|ops|launches)\b")
    assert claims == [], "the kernels of a step are counted by the lecture's code, not written in its text:\n" + "\n".join(claims)


@pytest.mark.parametrize("candidate, baseline, noisy, verdict", [
    (1.0, 2.0, False, "faster."), (1.0, 1.1, False, "about as fast"), (1.1, 1.0, False, "about as fast"),
    (2.0, 1.0, False, "slower."), (1.0, 2.0, True, "a timing's spread exceeded its median, so this run cannot tell"),
])
def test_compare_sentence_judges_from_the_ratio(candidate, baseline, noisy, verdict):
    sentence = rnn.compare_sentence("B", "A", candidate * 1e-3, baseline * 1e-3, noisy=noisy)
    assert verdict in sentence and f"{baseline / candidate:.2f}× as fast as A" in sentence, sentence


@pytest.mark.parametrize("large_ms, verdict, change", [(0.02, "nearly free", "50.0× less"), (0.5, "cheaper per sequence, by less", "2.0× less"),
                                                     (0.95, "no cheaper", "1.1× less"), (1.25, "no cheaper", "1.2× more")])
def test_batch_sentence_judges_the_time_per_sequence(large_ms, verdict, change):
    sentence = rnn.batch_sentence("per gate", 1, 1e-3, 64, large_ms * 1e-3)
    assert verdict in sentence and f"({change} per sequence for a 64× larger batch)" in sentence, sentence


@pytest.mark.parametrize("train_ms, verdict", [(2.2, "less than the 2×"), (3.0, "about the 2×"), (5.0, "more than the 2×")])
def test_backward_sentence_compares_the_backward_with_twice_the_forward(train_ms, verdict):
    sentence = rnn.backward_sentence("nn.LSTM", 0.8e-3, 1e-3, train_ms * 1e-3)
    assert verdict in sentence and f"cost {train_ms - 1:.1f}× the recorded forward" in sentence, sentence


@pytest.mark.parametrize("long_bytes, verdict", [(2 * 2**20, "in proportion"), (3 * 2**20, "more than in proportion"),
                                                 (1.2 * 2**20, "less than in proportion")])
def test_saved_sentence_relates_memory_to_the_sequence_length(long_bytes, verdict):
    assert verdict in rnn.saved_sentence((32, 64), (2**20, long_bytes))


@pytest.mark.parametrize("seconds, verdict", [(3200e-6, "more than the 5 µs"), (1600e-6, "about the 5 µs"), (320e-6, "less than the 5 µs")])
def test_overhead_sentence_compares_the_host_cost_per_op_with_a_launch(seconds, verdict):
    sentence = rnn.overhead_sentence(seconds, 320, 5e-6)
    assert verdict in sentence and f"{seconds / 320 * 1e6:.1f} µs of host time per op" in sentence, sentence


@pytest.mark.parametrize("loss, verdict", [(1.5, "uniform choice among 4.5 characters, against 96"), (4.6, "no better than a uniform guess")])
def test_perplexity_sentence_is_the_exponential_of_the_loss(loss, verdict):
    sentence = rnn.perplexity_sentence("held-out text", loss, 96)
    assert verdict in sentence and f"perplexity exp({loss:.2f}) = {math.exp(loss):.1f}" in sentence, sentence


def test_lecture_09_prints_its_outcomes_through_the_sentence_functions():
    """Every measured outcome of lecture 09 is a sentence gpucourse.rnn makes from the run's numbers, never fixed prose."""
    sentences = {name for name in dir(rnn) if name.endswith("_sentence")}
    assert len(sentences) >= 6, sentences
    uncalled = sentences - lecture_calls(REPO_ROOT / "course" / f"{LSTM_09}.py", "rnn")
    assert uncalled == set(), f"lecture 09 no longer prints {uncalled}"
    markdown = " ".join(cell.source for cell in _lecture(LSTM_09).cells if cell.cell_type == "markdown")
    for outcome in ("does *not* pay here", "is faster than all of them", "gains less than the work it skips", "about 6 s", "cost almost nothing"):
        assert outcome not in markdown, f"lecture 09 states a measured outcome in fixed text: {outcome!r}"


def test_lecture_09_trains_with_truncated_bptt_and_labels_its_samples():
    training = _cell(_lecture(LSTM_09), "monitor.update(")
    assert "state = tuple(s.detach() for s in state)" in training
    assert 'written = f"CharLSTM after step {step + 1}, temperature 0.8' in training and "sample=written" in training
    assert "CharLSTM after {STEPS} steps, temperature 0.8" in training
    assert "held_out_loss(model)" in training and "rnn.perplexity_sentence(" in training
    demo = _cell(_lecture(LSTM_09), "without detach")
    assert "except RuntimeError" in demo


def test_lecture_09_figures_use_plain_ticks_an_outside_legend_and_no_stray_outputs():
    sweep = _cell(_lecture(LSTM_09), "sweeps = {")
    assert 'plots.readable_log_axis(ax, "y")' in sweep and "fig.legend(" in sweep and "axes[0].legend(" not in sweep
    assert "run.too_noisy" in sweep  # hollow points for noisy timings
    for cell in _lecture(LSTM_09).cells:
        if cell.cell_type == "code" and cell.source.strip():
            last = cell.source.strip().splitlines()[-1]
            assert not last.startswith("torch.manual_seed("), f"a cell ending in {last!r} shows a torch.Generator as its output"


# --- Lecture 08: CNNs ---------------------------------------------------------------------------


def _run_ridge_cell() -> str:
    """Lecture 08's first convolution cell (the loops, the FLOPs and the ridge sentences), run with the package's gpu_specs."""
    import torch
    import torch.nn.functional as F

    from gpucourse import cnn_text

    code = _cell(_lecture("08_cnn"), "RESNET_LAYER = ")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "08_cnn ridge cell", "exec"), {"torch": torch, "F": F, "cnn_text": cnn_text})
    return printed.getvalue()


def test_lecture_08_places_the_resnet_layer_against_every_ridge_from_gpu_specs(monkeypatch):
    """Issue 49: the ResNet layer (138 FLOP/byte in float32, 277 in float16) is right of every FP32 ridge, but not of the
    H100's and the L4's TF32 and FP16 tensor-core ridges; the lecture prints which, from gpu_specs."""
    printed = _run_ridge_cell()
    fp32, tf32, fp16 = (line for line in printed.splitlines() if line.startswith("At "))
    assert "right of every FP32 CUDA-core ridge" in fp32, fp32
    assert "left of L4 200, H100 148" in tf32 and "No TF32 unit: V100, T4." in tf32, tf32
    assert "At 277 FLOP/byte" in fp16 and "left of L4 403, H100 295" in fp16, fp16
    h100 = gpu_specs.GPUS["H100"]
    monkeypatch.setitem(gpu_specs.GPUS, "H100", dataclasses.replace(h100, memory_bandwidth=2 * h100.memory_bandwidth))
    fp16 = [line for line in _run_ridge_cell().splitlines() if line.startswith("At 277")][0]
    assert "H100 148" in fp16.split("but left of")[0], f"the sentence does not follow gpu_specs: {fp16}"


def test_resnet_flops_are_multiply_adds_and_cpu_max_pooling_is_atens():
    """Issue 49: ResNet-50's 4.1 G are multiply-adds (8.2 GFLOP forward in the 2-FLOP convention), and CPU max pooling runs
    ATen's max_pool2d_with_indices (aten/src/ATen/native/cpu/MaxPoolKernel.cpp), not oneDNN."""
    assert _claims(BUILT_NOTEBOOKS, r"4\.1 GFLOP") == []
    assert _claims(BUILT_NOTEBOOKS, r"oneDNN'?s (max )?pooling") == []
    markdown = " ".join(cell.source for cell in _lecture("08_cnn").cells if cell.cell_type == "markdown")
    assert "4.1 G multiply-adds" in markdown and "2 FLOPs per multiply-add" in markdown
    assert "MaxPoolKernel.cpp" in markdown and "cpu_max_pool_channels_last" in markdown


# --- Lecture 10: the seed as written, float facts, bf16 checks, host syncs (issue 49) -----------

GAN_NOTEBOOKS = [REPO_ROOT / "course" / "10_gan.ipynb", source("10_gan"), release("10_gan")]


def _markdown_lines(paths) -> list[str]:
    return [f"{path.relative_to(REPO_ROOT)}: {line.strip()}" for path in paths for cell in _read(path).cells
            if cell.cell_type == "markdown" for line in cell.source.splitlines()]


def test_lecture_10_shows_the_seeds_loop_as_written():
    """Seed 003's GAN: "real data" torch.randn(batch_size, 784), a fresh latent batch for G's step, Adam's default betas, no loss read."""
    text = _cell(_lecture("10_gan"), "the seed's loop, shortened", "markdown")
    block = text.split("```python")[1].split("```")[0]
    assert "real_data = torch.randn(batch_size, 784)" in block
    assert block.count("generator(torch.randn(batch_size, 100))") == 2, "the seed draws a fresh latent batch for G's step"
    assert ".item()" not in block and "print(" not in block, "the seed never reads its losses"
    prose = " ".join(text.split())
    for fact in ("Adam's default betas (0.9, 0.999)", "never reads a loss", "`d_steps` D steps"):
        assert fact in prose, f"lecture 10's description of the seed should say {fact!r}"


def test_no_gan_prose_says_the_seed_reads_its_losses_or_uses_dcgan_betas():
    wrong = [r"losses read back to Python every step", r"the seed's way", r"returning the losses as Python floats",
             r"as in the seed: .* on the \*same\* fakes", r"seed's \S+ \(betas 0\.5", r"seed article trains on 28 × 28 images"]
    claims = [line for pattern in wrong for line in _markdown_lines(GAN_NOTEBOOKS) if re.search(pattern, line)]
    assert claims == [], "seed 003 never reads a loss, draws fresh latents for G's step and keeps Adam's default betas:\n" + "\n".join(claims)


def test_lecture_10_explains_sigma_of_minus_100_by_overflow_and_prints_it():
    """σ(-100) ≈ 3.7e-44 is a float32 subnormal; 1 / (1 + exp(100)) is 0 because exp(100) overflows."""
    code = _cell(_lecture("10_gan"), "f32, minus_100 = ")
    printed = io.StringIO()
    import torch
    from torch import nn
    from torch.nn import functional as F

    with contextlib.redirect_stdout(printed):
        exec(compile(code, "10_gan sigmoid cell", "exec"), {"torch": torch, "nn": nn, "F": F})
    line = next(line for line in printed.getvalue().splitlines() if line.startswith("sigma(-100)"))
    exact, _, naive, stable = (float(value) for value in re.findall(r"(?:exact|float32|\)\)|\)\)) (\S+)", line))
    assert exact == pytest.approx(3.72e-44, rel=0.01) and naive == 0.0
    assert 0 < stable < torch.finfo(torch.float32).tiny, f"the overflow-free formula should keep the subnormal: {line}"
    text = " ".join(_cell(_lecture("10_gan"), "`BCELoss` takes the log of its output", "markdown").split())
    assert "smallest subnormal" in text and "overflows float32" in text and "UnaryOpsKernel.cpp" in text, text


def test_bfloat16_has_7_stored_mantissa_bits_in_module_10():
    import math

    import torch

    assert round(-math.log2(torch.finfo(torch.bfloat16).eps)) == 7
    claims = _claims([*GAN_NOTEBOOKS, REPO_ROOT / "gpucourse" / "gan.py"], r"bfloat16|bf16", r"\b8 (stored )?(bits of mantissa|mantissa bits)")
    assert claims == [], "bfloat16 stores 7 mantissa bits (8 bits of precision with the implicit 1):\n" + "\n".join(claims)
    assert "7 stored mantissa bits" in " ".join(_cell(_lecture("10_gan"), "**bfloat16** has", "markdown").split())


def test_lecture_10_does_not_list_numpy_as_a_host_sync():
    """t.numpy() raises on a CUDA tensor (torch.Tensor.numpy): the sync is the .cpu() before it."""
    lines = [line for line in _markdown_lines(GAN_NOTEBOOKS[:1]) if "`t.numpy()`" in line]
    assert lines and all("raises" in line and "`.cpu()` is the sync" in line for line in lines), "\n".join(lines)


def test_gan_code_asks_for_bf16_units_not_emulation():
    """torch.cuda.is_bf16_supported() says yes on a T4 or V100 unless including_emulation=False; oneDNN's
    _is_mkldnn_bf16_supported() means AVX-512 (bf16 emulated with float32 instructions), not bf16 units."""
    code = "\n".join(cell.source for path in GAN_NOTEBOOKS[:2] for cell in _read(path).cells if cell.cell_type == "code")
    calls = re.findall(r"is_bf16_supported\(([^)]*)\)", code)
    assert calls and all(arguments == "including_emulation=False" for arguments in calls), calls
    assert "_is_mkldnn_bf16_supported" not in code
    assert re.search(r"capabilities\.get\(\"avx512_bf16\"\)", code), "on a CPU, lecture 10 asks for the bf16 instructions"


def test_lecture_10_cites_the_ring_ttur_and_dcgan_where_they_appear():
    text = " ".join(" ".join(_markdown_lines(GAN_NOTEBOOKS[:1])).split())
    for source_named in ("Metz et al.", "Unrolled Generative Adversarial Networks", "Heusel et al.", "Two Time-Scale Update Rule",
                         "Radford et al.", "Gretton et al.", "test_graph_scaling_fused_optimizers", "capturable=True"):
        assert source_named in text, f"lecture 10 should name {source_named!r}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_points_line_counts_the_items(assignment):
    """The release's opening line "Points: N autograded (G of them on a GPU), H graded by hand" is what nbgrader's
    feedback adds up (module 01 said 10 where its items give 11, and the feedback page says out of 12)."""
    from course_helpers import facts

    known = facts(assignment)
    autograded = sum(item.points for item in known.items)
    on_gpu = sum(item.points for item in known.items if item.requires_gpu)
    expected = f"Points: {autograded:g} autograded" + (f" ({on_gpu:g} of them on a GPU)" if on_gpu else "")
    expected += f", {len(known.manual)} graded by hand." if known.manual else "."
    [line] = [line for cell in _read(release(assignment)).cells for line in cell.source.splitlines() if line.startswith("Points:")]
    assert line == expected
