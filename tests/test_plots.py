"""Tests of gpucourse.plots: the figures draw the data they are given, labelled with where it came from."""

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from gpucourse import plots  # noqa: E402


@pytest.fixture
def ax():
    fig, axes = plt.subplots()
    yield axes
    plt.close(fig)


def test_versus_size_draws_the_data_on_a_log2_axis(ax):
    """versus_size plots exactly the given points, log2 in x, with the kind in the legend."""
    line = plots.versus_size(ax, [64, 128, 256], [1.0, 2.5, 4.0], label="this CPU", ylabel="GFLOP/s")
    np.testing.assert_array_equal(line.get_xdata(), [64, 128, 256])
    np.testing.assert_array_equal(line.get_ydata(), [1.0, 2.5, 4.0])
    assert line.get_label() == "this CPU (measured)"
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert ax.get_yscale() == "linear"
    assert ax.get_ylabel() == "GFLOP/s"


def test_versus_size_styles_modelled_data_apart(ax):
    """Modelled data is dashed without markers, measured data solid with markers; logy sets a log y axis."""
    measured = plots.versus_size(ax, [1, 2], [1, 2], label="a")
    modelled = plots.versus_size(ax, [1, 2], [3, 4], label="b", kind="modelled", logy=True)
    assert measured.get_linestyle() == "-" and measured.get_marker() == "o"
    assert modelled.get_linestyle() == "--" and modelled.get_marker() in (None, "None", "")
    assert modelled.get_label() == "b (modelled)"
    assert ax.get_yscale() == "log"


def test_versus_size_keeps_axis_labels_of_earlier_series(ax):
    """Without an xlabel, a series gets a default one, and a later series keeps the label an earlier one set."""
    plots.versus_size(ax, [1, 2], [1, 2], label="a")
    assert ax.get_xlabel() == "problem size n"
    plots.versus_size(ax, [1, 2], [1, 2], label="b", xlabel="matrix side n", ylabel="seconds")
    plots.versus_size(ax, [1, 2], [3, 4], label="c", kind="reported")
    assert ax.get_xlabel() == "matrix side n"
    assert ax.get_ylabel() == "seconds"
    assert len(ax.get_lines()) == 3


def test_versus_size_rejects_unknown_kind_and_mismatched_lengths(ax):
    """A kind other than measured/reported/modelled, or sizes and values of different lengths, raise."""
    with pytest.raises(ValueError, match="kind"):
        plots.versus_size(ax, [1, 2], [1, 2], label="a", kind="guessed")
    with pytest.raises(ValueError, match="shape"):
        plots.versus_size(ax, [1, 2, 3], [1, 2], label="a")


def test_provenance_bars_draws_values_in_order_marked_by_kind(ax):
    """provenance_bars draws one bar per entry, first on top, hatched by kind, with value labels and a legend per kind."""
    entries = [("GPU (article)", 28.2, "reported"), ("this CPU", 0.3, "measured"), ("T4", 8.1, "modelled")]
    container = plots.provenance_bars(ax, entries, xlabel="TFLOP/s", log=True)
    widths = [patch.get_width() for patch in container.patches]
    tops = [patch.get_y() for patch in container.patches]
    assert widths == pytest.approx([28.2, 0.3, 8.1])
    assert tops[0] > tops[1] > tops[2]
    assert [patch.get_hatch() for patch in container.patches] == ["//", "", ".."]
    ticks = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels())), reverse=True)
    assert [name for _, name in ticks] == ["GPU (article)", "this CPU", "T4"]  # read top to bottom
    assert sorted(t.get_text() for t in ax.texts) == ["0.3", "28.2", "8.1"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["reported", "measured", "modelled"]
    assert ax.get_xscale() == "log"


def test_provenance_bars_rejects_unlabelled_data(ax):
    """Bars must say where their number comes from; no bars at all is an error too."""
    with pytest.raises(ValueError, match="kind"):
        plots.provenance_bars(ax, [("x", 1.0, "measured?")], xlabel="s")
    with pytest.raises(ValueError, match="no bars"):
        plots.provenance_bars(ax, [], xlabel="s")


def test_timing_strip_plots_samples_in_a_readable_unit(ax):
    """timing_strip draws each sample against its call number, in ms for millisecond timings, with the median line."""
    samples = [3e-3, 1.2e-3, 1.0e-3, 1.1e-3]
    scatter, line = plots.timing_strip(ax, samples, median=1.05e-3, iqr=0.1e-3, label="matmul")
    np.testing.assert_allclose(scatter.get_offsets(), [[1, 3.0], [2, 1.2], [3, 1.0], [4, 1.1]])
    np.testing.assert_allclose(line.get_ydata(), [1.05, 1.05])
    np.testing.assert_allclose(line.get_xdata(), [1, 4])
    assert ax.get_ylabel() == "time per call (ms)"
    assert "measured" in scatter.get_label() and "measured" in line.get_label()
    assert len(ax.collections) == 2  # the samples and the IQR band


def test_timing_strip_picks_microseconds_and_rejects_empty_samples(ax):
    """Microsecond timings are drawn in µs; an empty sample list raises."""
    scatter, _ = plots.timing_strip(ax, [2e-6, 4e-6], median=3e-6, label="add")
    np.testing.assert_allclose(scatter.get_offsets()[:, 1], [2.0, 4.0])
    assert ax.get_ylabel() == "time per call (µs)"
    assert len(ax.collections) == 1  # no IQR given, no band
    with pytest.raises(ValueError, match="non-empty"):
        plots.timing_strip(ax, [], median=1.0, label="x")


def test_roofline_curve_is_bandwidth_bound_then_flat():
    curve = plots.roofline_curve([0.5, 10.0, 100.0], peak_flops=1000.0, peak_bandwidth=20.0)
    assert curve.tolist() == [10.0, 200.0, 1000.0]


def test_roofline_draws_the_roof_the_ridge_and_the_points(ax):
    line = plots.roofline(ax, 1000.0, 20.0, label="toy, modelled", points=[("mm", 100.0, 800.0)])
    x, y = line.get_data()
    assert np.allclose(y, np.minimum(1000.0, x * 20.0))
    assert line.get_label() == "toy, modelled"
    ridges = [artist for artist in ax.lines if artist is not line and list(artist.get_xdata()) == [50.0, 50.0]]
    assert ridges, "the ridge point (peak / bandwidth = 50) should be marked"
    assert any(list(artist.get_xdata()) == [100.0] and list(artist.get_ydata()) == [800.0] for artist in ax.lines)
    assert [text.get_text() for text in ax.texts] == ["mm"]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_thread_map_assigns_elements_to_global_threads():
    """Grid-stride: element e goes to thread e mod (blocks·threads); without it, extra elements go to nobody."""
    np.testing.assert_array_equal(plots.thread_map(10, 2, 3), [0, 1, 2, 3, 4, 5, 0, 1, 2, 3])
    np.testing.assert_array_equal(plots.thread_map(10, 2, 3, grid_stride=False), [0, 1, 2, 3, 4, 5, -1, -1, -1, -1])
    np.testing.assert_array_equal(plots.thread_map(3, 4, 32), [0, 1, 2])
    with pytest.raises(ValueError):
        plots.thread_map(0, 1, 1)


def test_launch_figure_draws_one_cell_per_element_and_a_row_per_pass(ax):
    plots.launch_figure(ax, 40, 2, 16)
    assert len(ax.patches) == 40
    assert [label.get_text() for label in ax.get_yticklabels()] == ["pass 0", "pass 1"]
    assert "grid-stride" in ax.get_title()


def test_launch_figure_marks_elements_nobody_handles(ax):
    plots.launch_figure(ax, 40, 2, 16, grid_stride=False)
    white = [p for p in ax.patches if p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    assert len(white) == 8  # 40 elements, 32 threads


def test_occupancy_plot_colours_points_by_limiter(ax):
    from gpucourse import sim

    curve = sim.occupancy_by_block_size("A100", 40, 6144)
    plots.occupancy_by_block_size(ax, curve, current=128)
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels[0] == "A100 (modelled)" and "limited by shared memory" in labels and "128 threads/block" in labels
    assert ax.get_ylim() == (0, 1.05)
    with pytest.raises(ValueError):
        plots.occupancy_by_block_size(ax, {})


def test_warp_sectors_shades_each_touched_sector(ax):
    from gpucourse import sim

    plots.warp_sectors(ax, sim.warp_addresses(2, offset=1))
    assert "8 sectors" in ax.get_title() and "50%" in ax.get_title() and "modelled" in ax.get_title()
    assert len(ax.patches) == 8 + 32  # the sectors, then a box per lane's bytes
    with pytest.raises(ValueError):
        plots.warp_sectors(ax, [])


def test_bank_map_stacks_the_words_a_bank_must_serve(ax):
    plots.bank_map(ax, [32 * k for k in range(4)] + [1, 1])
    assert ax.get_title() == "bank-conflict degree 4 (modelled)"
    assert len(ax.patches) == 5  # bank 0 serves four words, bank 1 one (a broadcast)
    assert [text.get_text() for text in ax.texts] == ["0", "1", "2", "3", "4+"]  # lanes 4 and 5 share word 1


def test_active_masks_draws_each_path_in_turn(ax):
    paths = ["if"] * 8 + ["else"] * 24
    plots.active_masks(ax, paths, {"if": 10, "else": 5})
    assert ax.get_title() == "15 cycles, SIMT efficiency 42% (modelled)"
    assert ax.get_xlim() == (0, 15) and len(ax.patches) == 2 * 32


# --- Readable at the size JupyterLab shows a figure (issue 12, item 18) ---------------------------


def visible_tick_labels(axis):
    """The tick labels a reader sees on ``axis`` after a draw: non-empty, inside the view."""
    low, high = sorted(axis.get_view_interval())
    return [tick.label1 for tick in axis.get_major_ticks()
            if tick.label1.get_visible() and tick.label1.get_text() and low <= tick.get_loc() <= high]


def overlapping(texts):
    """Pairs of texts whose drawn extents overlap."""
    boxes = [(text.get_text(), text.get_window_extent()) for text in texts]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:] if box_a.overlaps(box_b)]


def legend_styles(ax):
    """(facecolour, hatch) of each patch handle in ax's legend."""
    return {(tuple(handle.get_facecolor()), handle.get_hatch() or "") for handle in ax.get_legend().legend_handles}


def unlisted_patch_styles(ax):
    """(facecolour, hatch) of patches drawn on ax that no legend entry shows: a colour or hatch the reader cannot decode."""
    drawn = {(tuple(patch.get_facecolor()), patch.get_hatch() or "") for patch in ax.patches}
    return drawn - legend_styles(ax)


@pytest.mark.parametrize("low, high", [(2.0, 9.0), (0.3, 25.0), (1.2, 3.5)])
def test_a_log_y_axis_labels_at_least_two_values_over_a_short_range(ax, low, high):
    """logy over less than two decades labels 1-2-5 steps in plain numbers (lecture 03's strided sum had one label)."""
    plots.versus_size(ax, [1, 2, 4, 8], np.geomspace(high, low, 4), label="sum", logy=True)
    ax.figure.canvas.draw()
    labels = [label.get_text() for label in visible_tick_labels(ax.yaxis)]
    assert len(labels) >= 2, f"expected at least two labelled values between {low} and {high}, got {labels}"
    assert all(re.fullmatch(r"[0-9.]+", label) for label in labels), f"expected plain numbers, got {labels}"


def test_a_log_y_axis_over_many_decades_labels_decades_only(ax):
    """Over six decades, the labels are the decades (1-2-5 steps there would crowd the axis)."""
    plots.versus_size(ax, [1, 2, 4], [1e3, 1e6, 1e9], label="rate", logy=True)
    ax.figure.canvas.draw()
    assert [label.get_text() for label in visible_tick_labels(ax.yaxis)] == ["1000", "10000", "100k", "1M", "10M", "100M", "1G"]


def test_versus_size_labels_large_sizes_without_an_offset(ax):
    """Sizes up to 2^24 read as 65536 and 16.8M, not as 0.168 with '1e8' in a corner."""
    plots.versus_size(ax, [2**10, 2**16, 2**24], [1, 2, 3], label="t")
    ax.figure.canvas.draw()
    labels = [label.get_text() for label in visible_tick_labels(ax.xaxis)]
    assert {"1024", "65536", "16.8M"} <= set(labels), labels
    assert ax.xaxis.get_offset_text().get_text() == ""


@pytest.mark.parametrize("figsize", [(9.4, 1.9), (8, 3.2)], ids=["lecture panel", "explorer widget"])
@pytest.mark.parametrize("stride, element_bytes", [(1, 4), (4, 4), (32, 4), (64, 16)])
def test_sector_tick_labels_are_horizontal_legible_and_apart(figsize, stride, element_bytes):
    """warp_sectors' address labels are horizontal, at least 8 pt and never overlap (they were 6 pt and on end)."""
    from gpucourse import sim

    fig, ax = plt.subplots(figsize=figsize)
    try:
        plots.warp_sectors(ax, sim.warp_addresses(stride=stride, element_bytes=element_bytes), bytes_per_lane=element_bytes)
        fig.tight_layout()
        fig.canvas.draw()
        labels = visible_tick_labels(ax.xaxis)
        assert len(labels) >= 2
        assert [(label.get_text(), label.get_fontsize(), label.get_rotation()) for label in labels if label.get_fontsize() < 8
                or label.get_rotation() != 0] == []
        assert overlapping(labels) == []
        assert labels[0].get_text() == str(sim.warp_addresses(stride=stride, element_bytes=element_bytes)[0] // 32 * 32)
    finally:
        plt.close(fig)


def test_launch_figure_lists_the_cells_nobody_handles_in_its_legend(ax):
    """Elements no thread handles are hatched, and the legend has that hatch (lecture 02 drew red marks it never explained)."""
    plots.launch_figure(ax, 40, 2, 16, grid_stride=False)
    hatched = [patch for patch in ax.patches if patch.get_hatch()]
    assert len(hatched) == 8  # 40 elements, 32 threads
    assert unlisted_patch_styles(ax) == set()
    assert "handled by no thread" in [text.get_text() for text in ax.get_legend().get_texts()]


def test_launch_figure_lists_no_unhandled_cells_when_every_element_is_handled(ax):
    """A grid-stride loop leaves nobody out: no hatch drawn, no legend entry for one."""
    plots.launch_figure(ax, 40, 2, 16)
    assert [patch for patch in ax.patches if patch.get_hatch()] == []
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["block 0", "block 1"]


def test_every_colour_and_hatch_of_the_model_figures_has_a_legend_entry(ax):
    """Sectors, banks, masks, bars: each fill the reader sees is named in the legend."""
    from gpucourse import sim

    fig = ax.figure
    draws = {
        "warp_sectors": lambda a: plots.warp_sectors(a, sim.warp_addresses(stride=2)),
        "bank_map": lambda a: plots.bank_map(a, [32 * k for k in range(4)] + [1, 1]),
        "active_masks": lambda a: plots.active_masks(a, ["if"] * 8 + ["else"] * 24, {"if": 10, "else": 5}),
        "provenance_bars": lambda a: plots.provenance_bars(a, [("x", 1.0, "measured"), ("y", 2.0, "modelled")], xlabel="s"),
    }
    for name, draw in draws.items():
        fig.clear()
        target = fig.add_subplot()
        draw(target)
        assert unlisted_patch_styles(target) == set(), f"{name} fills the legend does not name"


def test_active_masks_keep_a_path_colour_when_only_that_path_runs(ax):
    """"else" is drawn in the same colour whether or not "if" ran first (lecture 04 showed it blue in one panel, orange in the others)."""
    plots.active_masks(ax, ["else"] * 32, {"if": 10, "else": 10})
    assert {patch.get_facecolor() for patch in ax.patches} == {matplotlib.colors.to_rgba("C1")}
    assert [text.get_text() for text in ax.get_legend().get_texts()] == ["runs else"]


@pytest.mark.parametrize("words, expect_labels", [([lane * 33 for lane in range(32)], True), ([lane * 32 for lane in range(32)], False)],
                         ids=["1-way: 32 cells in a row", "32-way: 32 cells in a column"])
def test_bank_map_labels_cells_only_where_the_labels_fit(words, expect_labels):
    """Lane numbers in bank cells are 8 pt and apart, or left out where a cell is too small (a 32-way column was a smudge of 6-pt digits)."""
    fig, ax = plt.subplots(figsize=(9.4, 2.7))
    try:
        plots.bank_map(ax, words)
        fig.tight_layout()
        fig.canvas.draw()
        assert len(ax.texts) == (32 if expect_labels else 0)
        assert [text.get_fontsize() for text in ax.texts if text.get_fontsize() < 8] == []
        assert overlapping(ax.texts) == []
        assert ("the lane reading it" in ax.get_xlabel()) == expect_labels
    finally:
        plt.close(fig)


def test_occupancy_legend_hides_no_point():
    """The occupancy plot's legend sits beside the axes, so it covers none of the modelled points (inside, at the
    calculator's size, it hid one of an A100's at 40 registers)."""
    from gpucourse import sim

    fig, ax = plt.subplots(figsize=(8, 3.2))  # the calculator's figure
    plots.occupancy_by_block_size(ax, sim.occupancy_by_block_size("A100", registers_per_thread=40), current=256)
    fig.canvas.draw()
    legend_box = ax.get_legend().get_window_extent()
    points = np.concatenate([collection.get_offsets() for collection in ax.collections])
    inside = [tuple(point) for point, shown in zip(points, ax.transData.transform(points)) if legend_box.contains(*shown)]
    plt.close(fig)
    assert inside == []


def test_plain_number_reads_at_a_glance():
    """Tick labels: small decades as powers of ten, large values with k/M/G, the rest as written."""
    values = [1e-5, 2e-7, 0.05, 1, 1024, 65536, 131072, 2**24, 4.9e14]
    assert [plots.plain_number(v) for v in values] == ["$10^{-5}$", "2e-07", "0.05", "1", "1024", "65536", "131k", "16.8M", "490T"]


# --- Stream timelines (issue 13) -------------------------------------------------------------------


def _bar_spans(bars):
    """(x, y, width) of each bar, x and width in ms."""
    return [(round(bar.get_x(), 9), round(bar.get_y(), 9), round(bar.get_width(), 9)) for bar in bars]


def _rows_top_down(ax):
    return [name for _, name in sorted(zip(ax.get_yticks(), (label.get_text() for label in ax.get_yticklabels())), reverse=True)]


def _vertical_lines(ax):
    return {line.get_label(): line.get_xdata()[0] for line in ax.get_lines() if list(line.get_xdata()) == [line.get_xdata()[0]] * 2}


def test_timeline_draws_a_bar_per_operation_on_its_engine_row_in_ms(ax):
    """3 chunks (in 2 ms, kernel 3 ms, out 1 ms, 2 copy engines): 9 bars on 3 rows, makespan 12 ms, ideal bound 9 ms."""
    from gpucourse.sim import streams

    timeline = streams.pipeline(3, 2e-3, 3e-3, 1e-3).simulate()
    bars = plots.timeline(ax, timeline)
    assert len(bars) == len(ax.patches) == 9
    # Rows top to bottom: copy in (y 2), compute (y 1), copy out (y 0); each bar 0.8 high, 0.1 above its row's floor.
    assert _bar_spans(bars) == [(0, 2.1, 2), (2, 2.1, 2), (4, 2.1, 2), (2, 1.1, 3), (5, 1.1, 3), (8, 1.1, 3), (5, 0.1, 1), (8, 0.1, 1), (11, 0.1, 1)]
    assert _rows_top_down(ax) == ["copy in (h2d)", "compute", "copy out (d2h)"]
    assert _vertical_lines(ax) == {"makespan": pytest.approx(12), "ideal bound (busiest engine)": pytest.approx(9)}
    assert ax.get_xlabel() == "time (ms)"
    assert ax.get_title() == "makespan 12 ms, ideal bound 9 ms (modelled for T4)"
    assert [text.get_text() for text in ax.get_legend().get_texts()] == [
        "copy host → device", "kernel", "copy device → host", "makespan", "ideal bound (busiest engine)"]


def test_timeline_shares_one_row_for_a_single_copy_engine(ax):
    from gpucourse.sim import streams

    bars = plots.timeline(ax, streams.pipeline(2, 2e-3, 3e-3, 1e-3, copy_engines=1, order="depth").simulate(), label="modelled for A100")
    assert len(bars) == 6
    assert _rows_top_down(ax) == ["copy engine (both ways)", "compute"]
    assert sorted(bar.get_y() for bar in bars).count(pytest.approx(1.1)) == 4  # 2 copies in and 2 out on the shared row
    assert ax.get_title().endswith("(modelled for A100)")


def test_timeline_marks_races_and_labels_only_bars_that_fit(ax):
    """A kernel reading a buffer another stream copies, with no event: one race in the title, a red cross on the kernel."""
    from gpucourse.sim.streams import Schedule

    schedule = Schedule()
    schedule.h2d("copy x", "copies", seconds=2e-3, buffer="x")
    schedule.kernel("use x", "compute", seconds=1e-3, reads=["x"], writes=["y"])
    schedule.kernel("tiny", "other", seconds=1e-6)
    plots.timeline(ax, schedule.simulate(), title="no event")
    assert ax.get_title().splitlines() == ["no event", "makespan 2 ms, ideal bound 2 ms (modelled for T4)", "1 race: use x vs copy x"]
    [crosses] = [line for line in ax.get_lines() if line.get_label() == "race: nothing orders it"]
    assert list(crosses.get_xdata()) == [0.0] and list(crosses.get_ydata()) == [0.5]  # the kernel's start, on the compute row
    assert sorted(text.get_text() for text in ax.texts) == ["copy x", "use x"]  # a 1-µs bar is too narrow for its label


def test_timeline_draws_a_measured_panel_on_the_same_scale():
    from gpucourse.sim import streams

    fig, axes = plt.subplots(2, 1)
    try:
        measured = [("in0", "h2d", 0.0, 2.5e-3), ("k0", "compute", 2.5e-3, 5.0e-3), ("out0", "d2h", 5.0e-3, 6.4e-3)]
        plots.timeline(axes, streams.pipeline(1, 2e-3, 3e-3, 1e-3).simulate(), measured=measured, measured_label="measured on H100")
        assert _bar_spans(axes[1].patches) == [(0, 2.1, 2.5), (2.5, 1.1, 2.5), (5, 0.1, 1.4)]
        assert _vertical_lines(axes[1]) == {"makespan": pytest.approx(6.4)}
        assert axes[1].get_title() == "makespan 6.4 ms (measured on H100)"
        assert axes[0].get_xlim() == axes[1].get_xlim() == pytest.approx((0, 6.4 * 1.02))
        with pytest.raises(ValueError, match="two axes"):
            plots.timeline(axes[0], streams.pipeline(1, 1, 1, 1).simulate(), measured=measured)
    finally:
        plt.close(fig)


def test_timelines_on_shared_time_axes_keep_every_bar_in_view():
    """Two panels with sharex: the shorter timeline drawn second does not cut off the longer one (lecture 05's trap figure did)."""
    from gpucourse.sim import streams

    fig, axes = plt.subplots(2, 1, sharex=True)
    try:
        plots.timeline(axes[0], streams.pipeline(4, 2e-3, 3e-3, 1e-3, copy_engines=1, order="depth").simulate())  # 24 ms
        plots.timeline(axes[1], streams.pipeline(4, 2e-3, 3e-3, 1e-3, copy_engines=1).simulate())  # 15 ms
        assert axes[0].get_xlim() == axes[1].get_xlim() == pytest.approx((0, 24 * 1.02))
    finally:
        plt.close(fig)


PROFILE = [  # (name, row, start_us, duration_us, depth): a Linear inside a labelled block, then a ReLU, and a GPU kernel
    ("block", "CPU thread 1", 0.0, 900.0, 0),
    ("aten::linear", "CPU thread 1", 10.0, 500.0, 1),
    ("aten::addmm", "CPU thread 1", 50.0, 400.0, 2),
    ("aten::relu", "CPU thread 1", 600.0, 200.0, 1),
    ("gemm_kernel", "GPU 0 kernels", 300.0, 650.0, 0),
]


def test_profile_timeline_draws_a_bar_per_op_on_its_row_in_microseconds(ax):
    """One bar per event from start to end (µs under 1 ms), host threads above the GPU row, deeper ops lower and narrower."""
    bars = plots.profile_timeline(ax, PROFILE, label="measured on a test")
    assert len(bars) == len(PROFILE)
    assert [bar.get_x() for bar in bars] == [0.0, 10.0, 50.0, 600.0, 300.0]
    assert [bar.get_width() for bar in bars] == [900.0, 500.0, 400.0, 200.0, 650.0]
    assert [tick.get_text() for tick in ax.get_yticklabels()] == ["CPU thread 1", "GPU 0 kernels"]
    block, linear, addmm, relu, kernel = bars
    assert block.get_y() > kernel.get_y(), "the CPU row is drawn above the GPU row"
    assert block.get_height() > linear.get_height() > addmm.get_height(), "each depth is narrower than its parent"
    assert linear.get_height() == relu.get_height(), "ops of one depth have one height"
    assert block.get_y() == linear.get_y() == addmm.get_y(), "children sit inside their parent, from its bottom edge"
    assert ax.get_xlabel() == "time since the first op (µs)"
    assert ax.get_xlim()[0] == 0 and 950.0 <= ax.get_xlim()[1] < 1000.0, ax.get_xlim()
    assert "measured on a test" in ax.get_title() and "5 ops" in ax.get_title()


def test_profile_timeline_switches_to_milliseconds_and_labels_only_bars_that_fit(ax):
    """A trace of a millisecond or more is drawn in ms; a name is written only in a bar wide enough for it."""
    events = [("aten::addmm", "CPU thread 1", 0.0, 4000.0, 0), ("aten::t", "CPU thread 1", 4000.0, 1.0, 0)]
    bars = plots.profile_timeline(ax, events)
    assert ax.get_xlabel() == "time since the first op (ms)"
    assert [bar.get_x() for bar in bars] == [0.0, 4.0] and bars[0].get_width() == 4.0
    assert [text.get_text() for text in ax.texts] == ["aten::addmm"], "the 1 µs bar is too narrow for a name"
    assert "(measured)" in ax.get_title()


def test_profile_timeline_rejects_an_empty_trace(ax):
    """Nothing to draw is an error that says what to check."""
    with pytest.raises(ValueError, match="no events"):
        plots.profile_timeline(ax, [])


def test_im2col_figure_outlines_the_window_and_its_column():
    """The drawn matrix is F.unfold's, and the outlined column holds the pixels of the outlined window."""
    import torch
    import torch.nn.functional as F

    fig, (ax_image, ax_columns) = plt.subplots(1, 2)
    columns = plots.im2col_figure(ax_image, ax_columns, height=4, width=6, kernel=3, patch=(1, 2))
    assert np.array_equal(columns, F.unfold(torch.arange(24.0).view(1, 1, 4, 6), 3)[0].numpy())
    assert list(columns[:, 1 * 4 + 2]) == [8, 9, 10, 14, 15, 16, 20, 21, 22]
    [window] = [p for p in ax_image.patches if p.get_edgecolor()[:3] != (0.4, 0.4, 0.4)]
    [column] = ax_columns.patches
    assert (window.get_xy(), window.get_width(), window.get_height()) == ((1.5, 0.5), 3, 3)
    assert (column.get_xy(), column.get_width(), column.get_height()) == ((5.5, -0.5), 1, 9)
    with pytest.raises(ValueError, match="outside the 2 × 4 output"):
        plots.im2col_figure(ax_image, ax_columns, height=4, width=6, kernel=3, patch=(2, 0))
    plt.close(fig)


def test_training_curves_draw_every_epoch_and_name_the_last_accuracy():
    fig, (ax_loss, ax_accuracy) = plt.subplots(1, 2)
    plots.training_curves(ax_loss, ax_accuracy, [(1, 0.9, 0.5), (2, 0.4, 0.8), (3, 0.2, 0.91)], label="measured here")
    assert list(ax_loss.lines[0].get_ydata()) == [0.9, 0.4, 0.2]
    assert list(ax_accuracy.lines[0].get_ydata()) == pytest.approx([50, 80, 91])
    assert ax_accuracy.get_title() == "91.0% after epoch 3 (measured here)"
    with pytest.raises(ValueError, match="no epochs"):
        plots.training_curves(ax_loss, ax_accuracy, [], label="x")
    plt.close(fig)


def test_training_curves_without_accuracy_draw_the_loss_per_step():
    fig, ax_loss = plt.subplots()
    plots.training_curves(ax_loss, None, [(10, 3.1, None), (20, 2.2, None)], label="measured here", unit="step")
    assert list(ax_loss.lines[0].get_ydata()) == [3.1, 2.2] and ax_loss.get_xlabel() == "step" and ax_loss.get_yscale() == "log"
    assert ax_loss.get_title() == "loss 2.2 after step 20 (measured here)"
    with pytest.raises(ValueError, match="no steps"):
        plots.training_curves(ax_loss, None, [], label="x", unit="step")
    plt.close(fig)


def test_unrolled_recurrence_draws_an_input_and_a_state_arrow_per_step():
    fig, ax = plt.subplots()
    arrows = plots.unrolled_recurrence(ax, steps=4)
    assert len(arrows["input"]) == len(arrows["state"]) == 4
    assert {arrow.get_edgecolor()[:3] for arrow in arrows["input"]} == {matplotlib.colors.to_rgb(plots.PARALLEL_COLOUR)}
    assert {arrow.get_edgecolor()[:3] for arrow in arrows["state"]} == {matplotlib.colors.to_rgb(plots.SEQUENTIAL_COLOUR)}
    texts = [text.get_text() for text in ax.texts]
    assert "$x_{4}$" in texts and "$h_{1}$" in texts
    with pytest.raises(ValueError, match="at least 2"):
        plots.unrolled_recurrence(ax, steps=1)
    plt.close(fig)


def test_training_curves_draw_one_curve_per_named_loss():
    """A GAN's two losses: one line each, named in the legend and in the title."""
    fig, ax_loss = plt.subplots()
    history = [(100, {"D": 1.2, "G": 0.9}, None), (200, {"D": 1.3, "G": 0.7}, None)]
    plots.training_curves(ax_loss, None, history, label="measured here", unit="step")
    assert [list(line.get_ydata()) for line in ax_loss.lines] == [[1.2, 1.3], [0.9, 0.7]]
    assert [text.get_text() for text in ax_loss.get_legend().get_texts()] == ["D", "G"]
    assert ax_loss.get_title() == "loss D 1.3, G 0.7 after step 200 (measured here)"
    assert ax_loss.get_yscale() == "linear", "a GAN's losses hover in a band: a log axis would label one tick"
    plt.close(fig)


def test_ring_scatter_draws_every_sample_and_a_circle_of_the_radius_per_mode(ax):
    import torch
    from matplotlib.patches import Circle

    centers = torch.tensor([[2.0, 0.0], [0.0, 2.0], [-2.0, 0.0]])
    samples = torch.tensor([[1.9, 0.1], [0.2, 2.1], [5.0, 5.0], [0.0, 0.0]], requires_grad=True)
    dots = plots.ring_scatter(ax, samples, centers, radius=0.2, title="step 100")
    np.testing.assert_allclose(dots.get_offsets(), samples.detach().numpy())
    circles = [patch for patch in ax.patches if isinstance(patch, Circle)]
    assert [circle.center for circle in circles] == [(2.0, 0.0), (0.0, 2.0), (-2.0, 0.0)]
    assert {circle.radius for circle in circles} == {0.2}
    assert ax.get_xlim() == ax.get_ylim() == (-3.0, 3.0), "the frame is 1.5 times the ring's radius, whatever the samples"
    assert ax.get_aspect() == 1.0 and ax.get_title() == "step 100"
    with pytest.raises(ValueError, match=r"\(n, 2\) points"):
        plots.ring_scatter(ax, np.zeros((4, 3)), centers, radius=0.2)


def test_image_grid_tiles_the_images_in_rows_with_gaps_between_them(ax):
    images = np.arange(6 * 4, dtype=float).reshape(6, 4) / 24  # six flat 2 × 2 images
    tiled = plots.image_grid(ax, images, 2, 3, title="step 0")
    assert tiled.shape == (2 * 3 - 1, 3 * 3 - 1)
    np.testing.assert_array_equal(tiled[0:2, 0:2], images[0].reshape(2, 2))
    np.testing.assert_array_equal(tiled[0:2, 6:8], images[2].reshape(2, 2))
    np.testing.assert_array_equal(tiled[3:5, 3:5], images[4].reshape(2, 2))
    assert np.isnan(tiled[2]).all() and np.isnan(tiled[:, 2]).all() and np.isnan(tiled[:, 5]).all()
    shown = ax.images[0]
    assert shown.get_clim() == (-1.0, 1.0) and ax.get_title() == "step 0"
    assert matplotlib.colors.to_hex(shown.get_cmap().get_bad()) == plots.GRID_GAP_COLOUR
    with pytest.raises(ValueError, match="needs 8 images, got 6"):
        plots.image_grid(ax, images, 2, 4)
    with pytest.raises(ValueError, match="must be square"):
        plots.image_grid(ax, np.zeros((4, 6)), 2, 2)
