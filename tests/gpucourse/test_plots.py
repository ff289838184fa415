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


@pytest.fixture
def wide_ax():
    """Axes of lecture 05's one-panel timeline figure (9.4 × 3 inches)."""
    fig, axes = plt.subplots(figsize=(9.4, 3.0))
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


def test_loop_order_axes_label_the_low_rates_and_every_size():
    """Lecture 07's loop-order figure: with rates from 0.16 to 160 GFLOP/s no value below 1 was labelled, so 0.16 and 0.33
    could not be read, and n = 384, between two powers of two, had no label. Every point now lies within half a decade
    of a labelled rate, every size is labelled, and no two labels overlap."""
    sizes = [64, 128, 256, 384, 512]
    rates = {"ijk": [1.1, 0.9, 0.6, 0.5, 0.45], "ikj": [8, 9, 9.5, 9, 8.5], "jki": [0.9, 0.5, 0.33, 0.16], "np.dot": [40, 80, 120, 150, 160]}
    fig, ax = plt.subplots(figsize=(9.4, 4.2))
    try:
        for name, values in rates.items():
            plots.versus_size(ax, sizes[:len(values)], values, label=name, logy=True, xlabel="matrix side n (float32)", ylabel="GFLOP/s")
        ax.legend(fontsize=plots.MIN_LABEL_POINTS, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
        fig.tight_layout()
        fig.canvas.draw()
        labelled = [float(label.get_text()) for label in visible_tick_labels(ax.yaxis)]
        far = [value for values in rates.values() for value in values if min(abs(np.log10(value / tick)) for tick in labelled) > 0.5]
        assert far == [], f"rates more than half a decade from a labelled one ({labelled})"
        assert [label.get_text() for label in visible_tick_labels(ax.xaxis)] == ["64", "128", "256", "384", "512"]
        assert overlapping(visible_tick_labels(ax.yaxis)) == [] and overlapping(visible_tick_labels(ax.xaxis)) == []
    finally:
        plt.close(fig)


def test_extra_tick_labels_only_where_they_have_room():
    """Lecture 01's matmul sizes: 768 is labelled between 512 and 1024, but 10000, a hair from 8192, is not; over seven
    decades of seconds, a step between decades is added at a bare end only where its label clears the decade's."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7.6))
    try:
        plots.versus_size(top, [64, 128, 256, 512, 768, 1024], [20, 40, 50, 55, 52, 50], label="cpu", ylabel="GFLOP/s")
        plots.versus_size(top, [256, 512, 1024, 2048, 4096, 8192, 10_000], [300, 2e3, 8e3, 1.2e4, 1.4e4, 1.45e4, 1.46e4], label="gpu", logy=True)
        sizes = [64, 128, 256, 512, 1024, 2048, 4096, 10_000]
        plots.versus_size(bottom, sizes, [2 * n**3 / 60e9 for n in sizes], label="model", kind="modelled", logy=True)
        fig.tight_layout()  # as lecture 01 lays it out: the room for 768 is that of the final layout
        fig.canvas.draw()
        sizes_labelled = [label.get_text() for label in visible_tick_labels(top.xaxis)]
        assert "768" in sizes_labelled and "10000" not in sizes_labelled, sizes_labelled
        for axis in (top.xaxis, top.yaxis, bottom.xaxis, bottom.yaxis):
            assert overlapping(visible_tick_labels(axis)) == [], [label.get_text() for label in visible_tick_labels(axis)]
    finally:
        plt.close(fig)


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


def test_timeline_draws_a_bar_per_operation_on_its_engine_row_in_ms(wide_ax):
    """3 chunks (in 2 ms, kernel 3 ms, out 1 ms, 2 copy engines): 9 bars on 3 rows, makespan 12 ms, ideal bound 9 ms."""
    from gpucourse.sim import streams

    ax = wide_ax
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


def test_timeline_shares_one_row_for_a_single_copy_engine(wide_ax):
    from gpucourse.sim import streams

    ax = wide_ax
    bars = plots.timeline(ax, streams.pipeline(2, 2e-3, 3e-3, 1e-3, copy_engines=1, order="depth").simulate(), label="modelled for A100")
    assert len(bars) == 6
    assert _rows_top_down(ax) == ["copy engine (both ways)", "compute"]
    assert sorted(bar.get_y() for bar in bars).count(pytest.approx(1.1)) == 4  # 2 copies in and 2 out on the shared row
    assert ax.get_title().endswith("(modelled for A100)")


def test_timeline_marks_a_race_clear_of_the_row_names_and_names_every_bar(ax):
    """A kernel reading a buffer another stream copies, with no event: one race in the title, a red cross just inside the
    kernel's bar, clear of the y axis and its row names (at the bar's very start it covered "compute"); the 1-µs bar,
    too narrow for its label, is named under its row."""
    from gpucourse.sim.streams import Schedule

    schedule = Schedule()
    schedule.h2d("copy x", "copies", seconds=2e-3, buffer="x")
    schedule.kernel("use x", "compute", seconds=1e-3, reads=["x"], writes=["y"])
    schedule.kernel("tiny", "other", seconds=1e-6)
    timeline = schedule.simulate()
    bars = plots.timeline(ax, timeline, title="no event")
    ax.figure.canvas.draw()
    title = ax.get_title().splitlines()
    assert title[0] == "no event" and title[2] == "1 race: use x vs copy x"
    [crosses] = [line for line in ax.get_lines() if line.get_label() == "race: nothing orders it"]
    [kernel_bar] = [bar for bar, i in zip(bars, [i for i in timeline.intervals if i.engine]) if i.label == "use x"]
    assert list(crosses.get_xdata()) == [pytest.approx(timeline.of("use x").start * 1e3)]
    assert list(crosses.get_ydata()) == [pytest.approx(kernel_bar.get_y() + kernel_bar.get_height() / 2)]
    renderer = ax.figure.canvas.get_renderer()
    cross = crosses.get_window_extent(renderer)
    assert cross.x0 > ax.get_window_extent(renderer).x0, "the race cross sticks out over the y axis"
    assert [label.get_text() for label in ax.get_yticklabels() if label.get_window_extent(renderer).overlaps(cross)] == []
    assert cross.x1 < ax.transData.transform((timeline.of("use x").end * 1e3, 0))[0], "the cross is not on the kernel's bar"
    assert sorted(text.get_text() for text in ax.texts) == ["copy x", "tiny", "use x"]
    [tiny] = [text for text in ax.texts if text.get_text() == "tiny"]
    [tiny_bar] = [bar for bar in bars if bar.get_width() < 0.01]
    assert tiny.get_position()[1] < tiny_bar.get_y(), "a name too wide for its bar goes under the row's bars"


def _named_bars(ax, bars, labels):
    """Which bar labels the texts on ``ax`` name: a text is a label, its short form, or a range "first…last" of bars
    on one row (every bar of that row from the first to the last, in time order)."""
    rows = {}
    for bar, label in zip(bars, labels):
        rows.setdefault(round(bar.get_y(), 6), []).append((bar.get_x(), label))
    named = set()
    for text in (text.get_text() for text in ax.texts):
        for row in rows.values():
            ordered = [label for _, label in sorted(row)]
            short = [plots.short_name(label) for label in ordered]
            if text in ordered or text in short:
                named.add(ordered[(ordered + short).index(text) % len(ordered)])
            elif "…" in text and text.split("…")[0] in short and text.split("…")[1] in short:
                first, last = short.index(text.split("…")[0]), short.index(text.split("…")[1])
                named.update(ordered[first:last + 1])
    return named


@pytest.mark.parametrize("figsize, panels, chunks, streams, kernel_ms", [
    ((8, 3.2), 1, 8, 2, 1.0),  # the widget's figure: 8 chunks on 2 streams (the copy-out names vanished there)
    ((8, 3.2), 1, 16, 16, 0.01),  # kernels of 10 µs beside copies of 1 ms: slivers
    ((9.4, 4.6), 2, 8, 2, 1.0),  # a lecture figure of two panels: short rows
], ids=["widget, 8 chunks on 2 streams", "widget, 16 tiny kernels", "two panels"])
def test_every_bar_of_a_timeline_is_named_and_no_names_overlap(figsize, panels, chunks, streams, kernel_ms):
    from gpucourse.sim.streams import pipeline

    fig, axes = plt.subplots(panels, 1, figsize=figsize, sharex=True, squeeze=False)
    try:
        drawn = []
        for ax, order in zip(axes[:, 0], ("breadth", "depth")):
            timeline = pipeline(chunks, 1.0e-3, kernel_ms * 1e-3, 1.0e-3, streams=streams, order=order).simulate()
            labels = [i.label for i in timeline.intervals if i.engine is not None]
            drawn.append((ax, plots.timeline(ax, timeline), labels))
        fig.tight_layout()
        fig.canvas.draw()
        for ax, bars, labels in drawn:
            assert set(labels) - _named_bars(ax, bars, labels) == set(), "bars nobody can tell apart"
            assert overlapping(ax.texts) == []
            assert {text.get_fontsize() for text in ax.texts} == {plots.MIN_LABEL_POINTS}
            box = fig.bbox
            assert [t.get_text() for t in ax.texts if not box.contains(*t.get_window_extent().p0) or not box.contains(*t.get_window_extent().p1)] == []
            inside = [t for t in ax.texts if t.get_color() == "white"]  # names drawn on their bars fit inside them
            for text in inside:
                extent = text.get_window_extent()
                assert any(bar.get_window_extent().x0 <= extent.x0 and extent.x1 <= bar.get_window_extent().x1 for bar in bars), text.get_text()
    finally:
        plt.close(fig)


def _cross_boxes(line):
    """Where each marker of ``line`` is drawn (display units): its centre ± half the marker and its edge."""
    from matplotlib.transforms import Bbox

    half = (line.get_markersize() + line.get_markeredgewidth()) / 2 * line.figure.dpi / 72
    centres = line.get_transform().transform(np.column_stack([line.get_xdata(), line.get_ydata()]))
    return [Bbox.from_extents(x - half, y - half, x + half, y + half) for x, y in centres]


def _reuse_races(copy_ms, copies=6, kernel_ms=1.0):
    """Lecture 05's prefetcher without record_stream, in miniature: each copy in but the first overwrites a block a kernel
    on another stream still reads, nothing ordering the two, so each of those copies races."""
    from gpucourse.sim.streams import Schedule

    schedule = Schedule()
    schedule.h2d("pinned 0 → dev 8", "side", seconds=copy_ms * 1e-3, buffer="first")
    for i in range(1, copies):
        schedule.kernel(f"loss_of → dev {6 + 4 * i}", "main", seconds=kernel_ms * 1e-3, reads=[f"b{i}"])
        schedule.h2d(f"pinned {i} → dev {9 + 4 * i}", "side", seconds=copy_ms * 1e-3, buffer=f"b{i}")
    return schedule.simulate()


@pytest.mark.parametrize("figsize, copy_ms, names_on_bars", [
    ((9.4, 3.0), 0.45, False),  # lecture 05's prefetcher: "2→13" fitted its bar but not beside the cross, which hid "2"
    ((9.4, 3.0), 1.5, True),  # wide bars: the name stays on its bar, right of the cross
    ((8, 3.2), 0.25, False),  # narrow bars: the names go under them, the crosses overhang the next bar
    ((6.4, 4.8), 0.7, None),
], ids=["lecture width", "wide bars", "narrow bars", "default figure"])
def test_race_crosses_cover_no_name_whatever_the_bar_width(figsize, copy_ms, names_on_bars):
    timeline = _reuse_races(copy_ms)
    raced = {race.operation for race in timeline.races}
    assert raced == {f"pinned {i} → dev {9 + 4 * i}" for i in range(1, 6)}
    fig, ax = plt.subplots(figsize=figsize)
    try:
        bars = plots.timeline(ax, timeline, title="reuse without record_stream")
        fig.tight_layout()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        [crosses] = [line for line in ax.get_lines() if line.get_label() == "race: nothing orders it"]
        boxes = _cross_boxes(crosses)
        assert len(boxes) == len(raced)
        covered = [(text.get_text(), index) for text in ax.texts + ax.get_yticklabels() for index, box in enumerate(boxes)
                   if text.get_window_extent(renderer).overlaps(box)]
        assert covered == [], "a race cross hides (part of) a name"
        labels = [i.label for i in timeline.intervals if i.engine is not None]
        assert set(labels) - _named_bars(ax, bars, labels) == set(), "bars nobody can tell apart"
        assert overlapping(ax.texts) == []
        for text in (text for text in ax.texts if text.get_color() == "white"):  # a name drawn on a bar stays inside it
            extent = text.get_window_extent(renderer)
            assert any(bar.get_window_extent().x0 <= extent.x0 and extent.x1 <= bar.get_window_extent().x1 for bar in bars), text.get_text()
        if names_on_bars is not None:
            on_bars = {text.get_text() for text in ax.texts if text.get_color() == "white"}
            assert ({plots.short_name(name) for name in raced} <= on_bars) == names_on_bars, on_bars
    finally:
        plt.close(fig)


def _names_under_lines(ax, renderer):
    """The names a makespan or ideal-bound line of ``ax`` passes through, and of those, the ones nothing hides it behind: a
    name hides the line when it is written on a bar drawn over the line, or on an opaque box drawn over it."""
    crossed, showing = [], []
    for line in (line for line in ax.get_lines() if line.get_label() in ("makespan", "ideal bound (busiest engine)")):
        x = ax.transData.transform((line.get_xdata()[0], 0))[0]
        for text in ax.texts:
            extent = text.get_window_extent(renderer)
            if not extent.x0 < x < extent.x1:
                continue
            crossed.append(text.get_text())
            box = text.get_bbox_patch()
            boxed = (box is not None and box.get_facecolor()[3] == 1 and text.get_zorder() > line.get_zorder()
                     and box.get_window_extent(renderer).x0 <= extent.x0 and extent.x1 <= box.get_window_extent(renderer).x1)
            on_bar = any(bar.get_zorder() > line.get_zorder() and bar.get_window_extent(renderer).contains(*extent.p0)
                         and bar.get_window_extent(renderer).contains(*extent.p1) for bar in ax.patches)
            if not (boxed or on_bar):
                showing.append((line.get_label(), text.get_text()))
    return crossed, showing


def test_the_makespan_and_ideal_lines_run_through_no_name():
    """Lecture 05's 16 chunks on 16 streams, on 8 and on 32 hardware queues: the dashed ideal bound ran through "out0…out4",
    "k15" and "out12…out15". Lines and names still cross (so the test checks something), but each name hides the line."""
    from gpucourse.sim.streams import Schedule, pipeline

    copy_seconds = Schedule.for_gpu("T4").copy_seconds(4 << 20)
    fig, axes = plt.subplots(2, 1, figsize=(9.4, 5.2), sharex=True)
    try:
        for ax, connections in zip(axes, (8, 32)):
            plots.timeline(ax, pipeline(16, copy_seconds, 0.4e-3, copy_seconds, order="breadth", connections=connections).simulate())
        fig.tight_layout()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        results = [_names_under_lines(ax, renderer) for ax in axes]
        assert [showing for _, showing in results] == [[], []], "a vertical line runs through a name"
        assert sum(len(crossed) for crossed, _ in results) >= 2, "no line crosses a name here any more: the test checks nothing"
    finally:
        plt.close(fig)


def test_short_name_keeps_the_buffer_numbers():
    assert [plots.short_name(label) for label in ("pinned 0 → dev 8", "squash → dev 9", "dev 9 → result 10", "in3", "copy x")] == [
        "0→8", "squash→9", "9→10", "in3", "copy x"]


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

    longer = streams.pipeline(4, 2e-3, 3e-3, 1e-3, streams=1).simulate()  # one stream: every step after the one before
    shorter = streams.pipeline(4, 2e-3, 3e-3, 1e-3).simulate()
    assert shorter.makespan < longer.makespan
    fig, axes = plt.subplots(2, 1, sharex=True)
    try:
        plots.timeline(axes[0], longer)
        plots.timeline(axes[1], shorter)
        assert axes[0].get_xlim() == axes[1].get_xlim() == pytest.approx((0, longer.makespan * 1e3 * 1.02))
    finally:
        plt.close(fig)


def test_kernels_running_at_once_share_their_row_one_above_the_other(wide_ax):
    """Concurrent kernels (small grids) are stacked in the compute row, each named, none drawn over another;
    a kernel starting as another ends reuses its slot."""
    from gpucourse.sim.streams import Schedule

    schedule = Schedule.for_gpu("T4")
    for i in range(3):
        schedule.kernel(f"k{i}", f"s{i}", seconds=2e-3, blocks=40)
    schedule.kernel("after", "s0", seconds=2e-3, blocks=40)  # on s0, after k0: the slot k0 had
    timeline = schedule.simulate()
    bars = plots.timeline(wide_ax, timeline)
    wide_ax.figure.canvas.draw()
    spans = {i.label: bar for i, bar in zip([i for i in timeline.intervals if i.engine], bars)}
    heights = {round(bar.get_height(), 9) for bar in bars}
    assert len(heights) == 1 and heights.pop() == pytest.approx(0.8 / 3)  # three slots share the row's 0.8
    assert len({round(spans[f"k{i}"].get_y(), 9) for i in range(3)}) == 3, "kernels running together drawn over each other"
    assert spans["after"].get_y() == pytest.approx(spans["k0"].get_y())
    for a, b in [(a, b) for a in bars for b in bars if a is not b]:
        overlap_x = min(a.get_x() + a.get_width(), b.get_x() + b.get_width()) - max(a.get_x(), b.get_x())
        overlap_y = min(a.get_y() + a.get_height(), b.get_y() + b.get_height()) - max(a.get_y(), b.get_y())
        assert overlap_x <= 1e-9 or overlap_y <= 1e-9, "two bars cover the same spot"
    assert {text.get_text() for text in wide_ax.texts} == {"k0", "k1", "k2", "after"}


def test_footprint_draws_the_allocator_and_live_bytes_with_the_peak_in_binary_units(ax):
    from gpucourse.sim.streams import Schedule

    schedule = Schedule()
    schedule.allocate("x", 3 * 2**20, "s")
    schedule.h2d("copy x", "s", seconds=1e-3, buffer="x")
    schedule.release("x")
    schedule.synchronize()
    schedule.allocate("y", 2**20, "s")  # after the host waited: at 1 ms
    schedule.kernel("use y", "s", seconds=1e-3, writes=["y"])
    timeline = schedule.simulate()
    peak = plots.footprint(ax, timeline, label="modelled for T4")
    ax.figure.canvas.draw()
    assert peak == timeline.peak_device_bytes == 4 * 2**20
    held, live = ax.get_lines()[:2]
    assert held.get_label() == "held by the allocator" and live.get_label() == "in live buffers"
    assert list(held.get_xdata()) == pytest.approx([0, 1, 2]) and list(held.get_ydata()) == [3 * 2**20, 4 * 2**20, 4 * 2**20]
    assert list(live.get_ydata()) == [0, 2**20, 2**20]  # x is released when the host issues the release, at 0
    assert ax.get_title() == "device memory: peak 4 MiB held by the allocator (modelled for T4)"
    labels = [label.get_text() for label in visible_tick_labels(ax.yaxis)]
    assert labels and all(re.fullmatch(r"\d+ (B|MiB)", label) for label in labels), labels


def test_footprint_compares_several_timelines_on_one_strip(ax):
    from gpucourse.sim.streams import Schedule

    runs = {}
    for name, megabytes in (("small", 1), ("large", 8)):
        schedule = Schedule()
        schedule.allocate("x", megabytes * 2**20, "s")
        schedule.kernel("k", "s", seconds=1e-3, writes=["x"])
        runs[name] = schedule.simulate()
    peaks = plots.footprint(ax, runs, top=16 * 2**20)
    assert peaks == {"small": 2**20, "large": 8 * 2**20}
    assert [line.get_label() for line in ax.get_lines()] == ["small: peak 1\u00a0MiB", "large: peak 8\u00a0MiB"]
    assert len({str(line.get_linestyle()) for line in ax.get_lines()}) == 2, "equal footprints would hide one another"
    assert ax.get_ylim()[1] == pytest.approx(16 * 2**20 * 1.3)


def test_binary_bytes_writes_every_size_in_one_unit_family():
    sizes = [512, 2**16, 2**18, 1.5 * 2**20, 2**28, 2**31]
    assert [plots.binary_bytes(size) for size in sizes] == ["512 B", "64 KiB", "256 KiB", "1.5 MiB", "256 MiB", "2 GiB"]


def test_a_bytes_axis_labels_every_tick_in_binary_units(ax):
    """Lecture 05's bandwidth axis read "65536" beside "262k": one format for every tick."""
    sizes = [2**k for k in range(16, 29, 2)]
    plots.versus_size(ax, sizes, [s / (10e-6 + s / 16e9) / 1e9 for s in sizes], label="pinned", kind="modelled")
    plots.bytes_axis(ax)
    ax.figure.canvas.draw()
    labels = [label.get_text() for label in visible_tick_labels(ax.xaxis)]
    assert labels == ["64 KiB", "256 KiB", "1 MiB", "4 MiB", "16 MiB", "64 MiB", "256 MiB"]


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
    assert ax_accuracy.get_title() == "test accuracy 91.0% after epoch 3"
    assert fig.get_suptitle() == "measured here", "where it ran is said once, over both panels"
    with pytest.raises(ValueError, match="no epochs"):
        plots.training_curves(ax_loss, ax_accuracy, [], label="x")
    plt.close(fig)


def test_training_curves_count_the_run_like_a_progress_bar_and_keep_titles_over_their_panels():
    """The review's 08 figure: the bar said 9/20 while the title said "after epoch 8", and the accuracy title, which carried
    the device label, ran past the right panel. Titles count "9 of 20", the x axis spans the whole run, and no title is wider
    than its panel, even with a GPU's long device name."""
    fig, (ax_loss, ax_accuracy) = plt.subplots(1, 2, figsize=(8, 2.8), layout="constrained")
    history = [(epoch, 1 / epoch, 0.5 + epoch / 40) for epoch in range(1, 10)]
    label = "measured on NVIDIA H100 80GB HBM3 (CUDA 12.4), float32 with TF32 allowed"
    plots.training_curves(ax_loss, ax_accuracy, history, label=label, total=20)
    assert ax_loss.get_title() == "loss 0.111 after epoch 9 of 20" and ax_accuracy.get_title() == "test accuracy 72.5% after epoch 9 of 20"
    assert ax_loss.get_xlim()[1] >= 20 and ax_accuracy.get_xlim()[1] >= 20
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in (ax_loss, ax_accuracy):
        title, panel = ax.title.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert panel.x0 - 1 <= title.x0 and title.x1 <= panel.x1 + 1, f"{ax.get_title()!r} runs past its panel"
    label_box = ax_accuracy.yaxis.label.get_window_extent(renderer)
    ticks_box = ax_loss.get_tightbbox(renderer)
    assert label_box.x0 >= ticks_box.x1, "the accuracy panel's y label overlaps the loss panel"
    assert [tick.get_text() for tick in ax_loss.get_yticklabels() if tick.get_text()] and "10^" not in "".join(
        tick.get_text() for tick in ax_loss.get_yticklabels()), "the loss axis is labelled with plain numbers"
    plt.close(fig)


def test_training_curves_without_accuracy_draw_the_loss_per_step():
    fig, ax_loss = plt.subplots()
    plots.training_curves(ax_loss, None, [(10, 3.1, None), (20, 2.2, None)], label="measured here", unit="step")
    assert list(ax_loss.lines[0].get_ydata()) == [3.1, 2.2] and ax_loss.get_xlabel() == "step" and ax_loss.get_yscale() == "log"
    assert ax_loss.get_title() == "loss 2.2 after step 20" and fig.get_suptitle() == "measured here"
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


def test_attention_tiles_skip_the_tiles_above_the_diagonal_and_number_one_rows_visits():
    fig, (ax_full, ax_causal) = plt.subplots(1, 2)
    assert plots.attention_tiles(ax_full, 4, causal=False, row=2) == {"computed": 16, "diagonal": 0, "skipped": 0}
    assert plots.attention_tiles(ax_causal, 4, causal=True, row=2) == {"computed": 6, "diagonal": 4, "skipped": 6}
    visits = lambda ax: [text.get_text() for text in ax.texts if text.get_text().isdigit()]  # noqa: E731
    assert visits(ax_full) == ["1", "2", "3", "4"] and visits(ax_causal) == ["1", "2", "3"], "row 2 of a causal grid stops at its diagonal"
    assert "10 of 16 tiles computed" in ax_causal.get_title() and ax_causal.get_legend() is not None and ax_full.get_legend() is None
    with pytest.raises(ValueError, match="0 <= row < blocks"):
        plots.attention_tiles(ax_full, 4, causal=True, row=4)
    plt.close(fig)


def test_training_curves_draw_one_curve_per_named_loss():
    """A GAN's two losses: one line each, named in the legend and in the title."""
    fig, ax_loss = plt.subplots()
    history = [(100, {"D": 1.2, "G": 0.9}, None), (200, {"D": 1.3, "G": 0.7}, None)]
    plots.training_curves(ax_loss, None, history, label="measured here", unit="step")
    assert [list(line.get_ydata()) for line in ax_loss.lines] == [[1.2, 1.3], [0.9, 0.7]]
    assert [text.get_text() for text in ax_loss.get_legend().get_texts()] == ["D", "G"]
    assert ax_loss.get_title() == "loss D 1.3, G 0.7 after step 200"
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
