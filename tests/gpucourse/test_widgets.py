"""Tests of gpucourse.widgets: the occupancy calculator shows the model's numbers and follows its controls."""

import matplotlib

matplotlib.use("Agg")

from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402

from gpucourse import gpu_specs, sim, widgets  # noqa: E402


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


@pytest.fixture
def text_only(monkeypatch):
    """Widgets that redraw their report and build their figure, but skip rendering it to a PNG (the costly part):
    for tests that read the report only."""
    import matplotlib.pyplot as plt

    monkeypatch.setattr(widgets, "_show_in", lambda output, fig: plt.close(fig))


def _modelled(n_chunks, n_streams, order="breadth", copy_engines=2, memory="pinned", gpu="T4", megabytes=16.0, kernel_ms=1.0, queues="hyper-q"):
    """The timeline the widget should show for these settings, made here from the model itself."""
    from gpucourse.sim.streams import Schedule, pipeline

    copy = Schedule(link_bandwidth=gpu_specs.gpu(gpu).host_link_bandwidth).copy_seconds(round(megabytes * 1e6))
    return pipeline(n_chunks, copy, kernel_ms * 1e-3, copy, copy_engines=copy_engines, order=order, pinned=memory == "pinned",
                    streams=n_streams, queues=queues).simulate()


def _ms3(seconds):
    return f"{seconds * 1e3:.3f}"


def test_stream_timeline_shows_the_models_makespan_bound_and_speedup():
    """The report prints the model's makespan, ideal bound and the job in one piece for the controls' settings."""
    box = widgets.stream_timeline()
    text = _printed(box)
    assert text.startswith("4 chunks of 16 MB on 4 streams, pinned host memory, breadth-first issue, 2 copy engines,\n"
                           "  Hyper-Q: 8 hardware queues, T4 (PCIe 3.0 x16, 15.75 GB/s)\n")
    shown, serial = _modelled(4, 4), _modelled(1, 1, megabytes=64.0, kernel_ms=4.0)
    assert (_number_after(text, "makespan"), _number_after(text, "ideal bound"), _number_after(text, "serialised")) == (
        _ms3(shown.makespan), _ms3(shown.ideal_seconds), _ms3(serial.makespan))
    assert f"speedup {serial.makespan / shown.makespan:.2f}×" in text and "races: none" in text and "modelled for T4" in text
    controls = _controls(box)
    controls["chunks"].value = 1  # in, kernel, out one after the other: the job in one piece
    assert _number_after(_printed(box), "makespan") == _ms3(_modelled(1, 1).makespan) and "speedup 1.00×" in _printed(box)
    controls["chunks"].value = 4
    controls["streams"].value = 2
    assert _number_after(_printed(box), "makespan") == _ms3(_modelled(4, 2).makespan) and "on 2 streams," in _printed(box)


@pytest.mark.parametrize("chunks, streams_asked, expected", [(4, 16, 4), (8, 2, 2)])
def test_stream_timeline_slider_and_report_count_the_same_streams(chunks, streams_asked, expected, text_only):
    """The streams slider stops at the chunk count, so it reads what the report counts (it read 16 beside "on 4 streams")."""
    box = widgets.stream_timeline(n_chunks=chunks, n_streams=streams_asked)
    controls = _controls(box)
    assert controls["streams"].value == expected and controls["streams"].max == chunks
    assert f"on {expected} stream{'s' if expected > 1 else ''}," in _printed(box)


def test_stream_timeline_slider_follows_the_chunks_slider(text_only):
    box = widgets.stream_timeline()
    controls = _controls(box)
    controls["chunks"].value = 8
    controls["streams"].value = 8
    assert "8 chunks of 16 MB on 8 streams," in _printed(box)
    controls["chunks"].value = 3  # the slider cannot stay at 8 streams for 3 chunks
    assert (controls["streams"].value, controls["streams"].max) == (3, 3) and "3 chunks of 16 MB on 3 streams," in _printed(box)
    controls["chunks"].value = 12  # more room, the same streams
    assert (controls["streams"].value, controls["streams"].max) == (3, 12) and "12 chunks of 16 MB on 3 streams," in _printed(box)


def _unwrapped(text):
    """The report with its wrapped sentences joined back."""
    return " ".join(line.strip() for line in text.splitlines())


def test_stream_timeline_explains_the_other_order_and_the_first_kernel_from_the_model(text_only):
    """8 chunks on 2 streams, 2 copy engines (the browser run where breadth-first took 22.3 ms and depth-first 13.1):
    the report compares both orders and says what the first kernel waits for, through gpucourse.stream_text."""
    from gpucourse import stream_text

    box = widgets.stream_timeline(n_chunks=8, n_streams=2)
    breadth, depth = _modelled(8, 2, "breadth"), _modelled(8, 2, "depth")
    text = _unwrapped(_printed(box))
    assert stream_text.compare("breadth-first issue", breadth.makespan, "depth-first issue on the same streams", depth.makespan) in text
    assert stream_text.first_kernel_wait(breadth, connections=8) in text
    _controls(box)["issue order"].value = "depth"
    text = _unwrapped(_printed(box))
    assert stream_text.compare("depth-first issue", depth.makespan, "breadth-first issue on the same streams", breadth.makespan) in text
    assert stream_text.first_kernel_wait(depth, connections=8) in text


def test_stream_timeline_follows_engines_order_memory_and_gpu(text_only):
    box = widgets.stream_timeline()
    controls = _controls(box)
    controls["copy engines"].value = 1
    controls["issue order"].value = "depth"
    assert _number_after(_printed(box), "makespan") == _ms3(_modelled(4, 4, "depth", copy_engines=1).makespan) and "1 copy engine," in _printed(box)
    controls["issue order"].value = "breadth"
    assert _number_after(_printed(box), "makespan") == _ms3(_modelled(4, 4, "breadth", copy_engines=1).makespan)
    controls["host memory"].value = "pageable"
    assert _number_after(_printed(box), "makespan") == _ms3(_modelled(4, 4, "breadth", copy_engines=1, memory="pageable").makespan)
    assert "pageable host memory" in _printed(box)
    controls["GPU"].value = "H100"
    assert "H100 (PCIe 5.0 x16, 63 GB/s)" in _printed(box) and "modelled for H100" in _printed(box)
    assert _number_after(_printed(box), "makespan") == _ms3(_modelled(4, 4, "breadth", copy_engines=1, memory="pageable", gpu="H100").makespan)


def test_stream_timeline_queues_make_the_issue_order_trap_appear_and_disappear(text_only):
    """One copy engine, depth-first: with one queue per engine (before Hyper-Q) each chunk's copy in waits behind the
    previous chunk's copy out, so the job takes longer than on Hyper-Q's queues; the report says so from both timelines."""
    from gpucourse import stream_text

    box = widgets.stream_timeline(copy_engines=1, order="depth")
    controls = _controls(box)
    hyper_q, per_engine = _modelled(4, 4, "depth", copy_engines=1), _modelled(4, 4, "depth", copy_engines=1, queues="per-engine")
    assert per_engine.makespan > 1.2 * hyper_q.makespan, "the model no longer shows the trap: choose other settings for this test"
    text = _unwrapped(_printed(box))
    assert _number_after(text, "makespan") == _ms3(hyper_q.makespan) and "Hyper-Q: 8 hardware queues" in text
    assert stream_text.compare(widgets.QUEUES["hyper-q"], hyper_q.makespan, widgets.QUEUES["per-engine"], per_engine.makespan) in text
    controls["hardware queues"].value = "per-engine"
    text = _unwrapped(_printed(box))
    assert _number_after(text, "makespan") == _ms3(per_engine.makespan) and "one queue per engine (before Hyper-Q)," in text
    assert stream_text.compare(widgets.QUEUES["per-engine"], per_engine.makespan, widgets.QUEUES["hyper-q"], hyper_q.makespan) in text
    assert stream_text.first_kernel_wait(per_engine) in text


def test_stream_timeline_explains_a_first_kernel_held_by_a_shared_queue(text_only):
    """16 chunks on 16 streams, breadth-first: with 8 queues, k0 waits until in8 (stream s8, its queue-mate) starts."""
    from gpucourse import stream_text

    box = widgets.stream_timeline(n_chunks=16, n_streams=16)
    shared = _modelled(16, 16)
    sentence = stream_text.first_kernel_wait(shared, connections=8)
    assert "when in8 of stream s8 starts" in sentence and "(a false dependency)" in sentence
    assert sentence in _unwrapped(_printed(box))


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


def test_training_monitor_shows_the_figure_before_the_bar_counts_the_epoch(monkeypatch):
    """The review's 08 monitor: mid-run the bar said 9/20 while the figure said "after epoch 8", because the bar moved
    before the figure was drawn. The figure goes first, and its titles count the epoch as the bar does; the bar's label
    gets the width it needs ("step 2000/2000" was cut)."""
    import IPython.display
    import matplotlib.pyplot as plt

    monitor = widgets.TrainingMonitor(20, label="measured here")
    bar_when_shown, drawn = [], []
    monkeypatch.setattr(IPython.display, "display", lambda item: bar_when_shown.append(monitor.bar.description))
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))
    monitor.update(9, 0.3, 0.9)
    assert bar_when_shown == ["epoch 0/20"] and monitor.bar.description == "epoch 9/20"
    titles = [ax.get_title() for ax in drawn[-1].axes]
    assert titles == ["loss 0.3 after epoch 9 of 20", "test accuracy 90.0% after epoch 9 of 20"], titles
    assert monitor.bar.style.description_width == "initial"
    monkeypatch.undo()
    plt.close(drawn[-1])


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
