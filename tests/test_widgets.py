"""Tests of gpucourse.widgets: the occupancy calculator shows the model's numbers and follows its controls."""

import matplotlib

matplotlib.use("Agg")

from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402

from gpucourse import sim, widgets  # noqa: E402


def _controls(box):
    rows = [child for child in box.children if type(child).__name__ == "HBox"]
    return {control.description: control for row in rows for control in row.children}


def _printed(box) -> str:
    """The calculator's text (an HTML <pre> block under the controls)."""
    import html

    report = next(child for child in box.children if type(child).__name__ == "HTML")
    return html.unescape(report.value.removeprefix("<pre>").removesuffix("</pre>"))


def test_report_lists_the_result_and_every_limit():
    text = widgets.occupancy_report("7.0", 128, 37, 0)
    assert text.startswith(sim.occupancy("7.0", 128, 37, 0).describe())
    assert "registers       12 blocks" in text and "warps           16 blocks" in text


def test_calculator_updates_when_a_control_changes():
    box = widgets.occupancy_calculator("T4", 256, 32, 0)
    assert "T4: 4 blocks/SM" in _printed(box)
    controls = _controls(box)
    controls["registers/thread"].value = 65
    assert "T4: 3 blocks/SM" in _printed(box) and "limited by registers" in _printed(box)
    controls["GPU"].value = "A100"
    assert _printed(box).startswith("A100:")


def test_shared_memory_slider_follows_the_gpu_limit():
    box = widgets.occupancy_calculator("A100", 256, 0, 100 * 1024)
    controls = _controls(box)
    controls["GPU"].value = "T4"
    assert controls["shared B/block"].max == 64 * 1024
    assert controls["shared B/block"].value <= 64 * 1024
    assert "T4:" in _printed(box)


@dataclass(frozen=True)
class FakeReport:
    """What the calculator reads of a CompileReport, without compiling anything."""

    registers: int
    shared_bytes: int
    gpu: str = "A100"


def test_calculator_starts_from_a_compiled_kernel():
    box = widgets.occupancy_calculator(report=FakeReport(registers=72, shared_bytes=8 * 1024), threads_per_block=128)
    controls = _controls(box)
    assert (controls["GPU"].value, controls["registers/thread"].value, controls["shared B/block"].value) == ("A100", 72, 8 * 1024)
    assert _printed(box).startswith(sim.occupancy("A100", 128, 72, 8 * 1024).describe())
    assert "A100: 7 blocks/SM" in _printed(box) and "limited by registers" in _printed(box)  # 72 registers: 28 warps fit


def test_explicit_arguments_win_over_the_compiled_kernel():
    box = widgets.occupancy_calculator("T4", 256, registers_per_thread=40, report=FakeReport(registers=72, shared_bytes=4096))
    controls = _controls(box)
    assert (controls["GPU"].value, controls["registers/thread"].value, controls["shared B/block"].value) == ("T4", 40, 4096)
    unknown_card = FakeReport(registers=16, shared_bytes=0, gpu="sm_86 card")  # not in gpu_specs: the default card
    assert _controls(widgets.occupancy_calculator(report=unknown_card))["GPU"].value == "T4"


@pytest.mark.slow  # starts a Jupyter kernel
def test_calculator_renders_as_a_widget_in_a_jupyter_kernel(tmp_path):
    """In a real kernel the calculator is a widget view, its state has the model's text, and its
    figure is drawn into the widget's output area."""
    import nbformat

    from course_helpers import execute_notebook

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from gpucourse import widgets\nwidgets.occupancy_calculator('7.0', 128, 37, 0)")])
    execute_notebook(notebook, tmp_path, timeout=120, store_widget_state=True)
    [output] = notebook.cells[0].outputs
    assert "application/vnd.jupyter.widget-view+json" in output["data"]
    states = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    texts = [s["state"].get("value", "") for s in states.values() if s["model_name"] == "HTMLModel"]
    assert any("12 blocks/SM" in text and "75% occupancy" in text for text in texts)
    figures = [o for s in states.values() if s["model_name"] == "OutputModel" for o in s["state"].get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in figures), "the occupancy plot was not drawn in the widget"


def test_jupyterlab_has_the_widget_extension():
    import subprocess
    import sys

    listing = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], capture_output=True, text=True, timeout=120)
    text = listing.stdout + listing.stderr
    assert "@jupyter-widgets/jupyterlab-manager" in text and "enabled" in text


def test_coalescing_explorer_follows_its_controls():
    box = widgets.coalescing_explorer()
    assert "4 sectors of 32 B, 1 line of 128 B" in _printed(box) and "100% of the moved bytes" in _printed(box)
    controls = _controls(box)
    controls["stride (elements)"].value = 2
    assert "8 sectors of 32 B" in _printed(box)
    controls["offset (elements)"].value = 1
    controls["stride (elements)"].value = 1
    assert "5 sectors of 32 B, 2 lines of 128 B" in _printed(box)
    controls["stride (elements)"].value = 0  # every lane reads one element: one of each, said in the singular
    assert "1 sector of 32 B, 1 line of 128 B" in _printed(box)


def test_divergence_explorer_shows_masks_cycles_and_bad_conditions():
    box = widgets.divergence_explorer("lane < 8", if_cost=10, else_cost=5)
    text = _printed(box)
    assert "mask 00000000000000000000000011111111 (8 lanes)" in text and "15 cycles" in text and "42%" in text
    controls = _controls(box)
    controls["if condition"].value = "warp % 2 == 0"
    assert "10 cycles" in _printed(box) and "100%" in _printed(box)
    controls["if condition"].value = "__import__('os')"
    assert _printed(box).startswith("cannot draw this: the condition may use lane, tid, warp")


def test_branch_paths_evaluates_lane_warp_and_tid():
    assert widgets.branch_paths("tid >= 40", warp=1)[:10] == ["else"] * 8 + ["if"] * 2


def _number_after(text: str, label: str) -> str:
    return text.split(label, 1)[1].split()[0]


def test_stream_timeline_shows_the_models_makespan_bound_and_speedup():
    """4 chunks of 16 MB over a T4's 15.75 GB/s (1.0159 ms a copy), kernels of 1 ms, 2 copy engines, breadth-first:
    the copies in set the pace, in3 ends at 4.0635 ms, k3 at 5.0635, out3 at 6.0794; in one piece, 4.0635 + 4 + 4.0635 ms."""
    box = widgets.stream_timeline()
    text = _printed(box)
    assert text.startswith("4 chunks of 16 MB on 4 streams, pinned host memory, breadth-first issue, 2 copy engines, T4 (PCIe 3.0 x16, 15.75 GB/s)")
    assert (_number_after(text, "makespan"), _number_after(text, "ideal bound"), _number_after(text, "serialised")) == ("6.079", "4.063", "12.127")
    assert "speedup 1.99×" in text and "races: none" in text and "modelled for T4" in text
    controls = _controls(box)
    controls["chunks"].value = 1  # in, kernel, out one after the other: nothing to overlap
    assert _number_after(_printed(box), "makespan") == "3.032" and "speedup 1.00×" in _printed(box)
    controls["chunks"].value = 4
    controls["streams"].value = 1  # one stream runs its operations in order: as slow as the job in one piece
    assert _number_after(_printed(box), "makespan") == "12.127" and "on 1 stream," in _printed(box) and "speedup 1.00×" in _printed(box)
    controls["streams"].value = 2  # breadth-first on shared streams: k0 waits for in2, issued before it on stream 0
    assert _number_after(_printed(box), "makespan") == "10.127"


def test_stream_timeline_shows_the_issue_order_trap_and_pageable_memory():
    box = widgets.stream_timeline()
    controls = _controls(box)
    controls["copy engines"].value = 1
    controls["issue order"].value = "depth"  # out0 holds the one copy engine's queue until k0 is done: fully serial
    assert _number_after(_printed(box), "makespan") == "12.127" and "speedup 1.00×" in _printed(box)
    controls["issue order"].value = "breadth"  # all copies in first: the engine copies in3 while k0 runs
    assert _number_after(_printed(box), "makespan") == "8.127"
    # Pageable: 2.0317 ms a copy, each blocking the host: in0-in3 end at 8.127, k0 runs to 9.127, then out0-out3 back to back.
    controls["host memory"].value = "pageable"
    assert _number_after(_printed(box), "makespan") == "17.254" and "pageable host memory" in _printed(box)
    controls["GPU"].value = "H100"  # PCIe 5.0: 63 GB/s, 0.508 ms a pageable copy of 16 MB
    assert "H100 (PCIe 5.0 x16, 63 GB/s)" in _printed(box) and "modelled for H100" in _printed(box)


def test_training_monitor_advances_its_bar_and_redraws_its_figure(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    monitor = widgets.TrainingMonitor(4, label="measured here")
    assert (monitor.bar.value, monitor.bar.max, monitor.bar.description) == (0, 4, "epoch 0/4")
    monitor.update(1, 0.8, 0.6)
    monitor.update(2, 0.3, 0.9)
    assert (monitor.bar.value, monitor.bar.description) == (2, "epoch 2/4")
    assert monitor.history == [(1, 0.8, 0.6), (2, 0.3, 0.9)]
    # The bar and the figure's box once, then one PNG per epoch (into the box, which is cleared first).
    assert [type(item).__name__ for item in shown] == ["VBox", "Image", "Image"] and shown[-1].format == "png"
    with pytest.raises(ValueError, match="at least 1"):
        widgets.TrainingMonitor(0, label="x")


def test_training_monitor_counts_steps_and_shows_the_latest_sample(monkeypatch):
    """Module 09's language model: steps, the loss alone, and the text it writes (escaped, as a student's text may hold <)."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    monitor = widgets.TrainingMonitor(100, label="measured here", unit="step")
    assert monitor.bar.description == "step 0/100"
    monitor.update(50, 2.5, sample="def f(x) <- first")
    assert (monitor.bar.value, monitor.bar.description) == (50, "step 50/100")
    assert monitor.history == [(50, 2.5, None)]
    assert "def f(x) &lt;- first" in monitor.sample.value
    monitor.update(100, 1.7)
    assert "first" in monitor.sample.value, "a step without a sample keeps the last one"
    assert [type(item).__name__ for item in shown] == ["VBox", "Image", "Image"]


def test_training_monitor_draws_named_losses_and_an_extra_panel(monkeypatch):
    """Module 10's GAN: two named losses, and the generator's samples in a panel the lecture draws."""
    import IPython.display
    import matplotlib.pyplot as plt

    shown, drawn = [], []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))  # keep the figures to look at them

    def samples(ax):
        ax.set_title("samples")

    monitor = widgets.TrainingMonitor(200, label="measured here", unit="step", extra=samples)
    monitor.update(100, {"D": 1.2, "G": 0.9})
    monitor.update(200, {"D": 1.3, "G": 0.7})
    assert monitor.history == [(100, {"D": 1.2, "G": 0.9}, None), (200, {"D": 1.3, "G": 0.7}, None)]
    assert [type(item).__name__ for item in shown] == ["VBox", "Image", "Image"]
    loss_ax, extra_ax = drawn[-1].axes
    assert [list(line.get_ydata()) for line in loss_ax.lines] == [[1.2, 1.3], [0.9, 0.7]]
    assert extra_ax.get_title() == "samples"
    without = widgets.TrainingMonitor(10, label="x", unit="step")
    without.update(5, 2.0)
    assert len(drawn[-1].axes) == 1, "without extra= the monitor draws the loss alone, as before"
    monkeypatch.undo()
    for fig in drawn:
        plt.close(fig)
