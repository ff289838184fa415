"""Tests of gpucourse.plots: the figures draw the data they are given, labelled with where it came from."""

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
