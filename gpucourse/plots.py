"""Figures that several lectures draw. Each takes a matplotlib ``Axes`` so a notebook
controls the layout, and each labels its data as measured or reported/modelled."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, MultipleLocator, NullFormatter
from matplotlib.transforms import offset_copy

from .wording import binary_bytes  # lectures write plots.binary_bytes; it lives with the other words for numbers

# The smallest font a label may have at the size JupyterLab shows a figure (1:1 up to ~960 px wide).
MIN_LABEL_POINTS = 8


def roofline_curve(intensities, peak_flops: float, peak_bandwidth: float) -> np.ndarray:
    """Attainable FLOP/s at each arithmetic intensity: min(peak, intensity × bandwidth)."""
    return np.minimum(peak_flops, np.asarray(intensities, dtype=float) * peak_bandwidth)


def roofline(
    ax,
    peak_flops: float,
    peak_bandwidth: float,
    *,
    label: str,
    points: list[tuple[str, float, float]] = (),
    intensity_range: tuple[float, float] = (1 / 16, 4096),
    style: str = "-",
    color: str | None = None,
):
    """Draw one roofline on log-log axes, with optional (name, intensity, FLOP/s) points.

    ``label`` should say where the roof comes from, e.g. "H100, reported" or
    "this CPU, measured".
    """
    intensities = np.geomspace(*intensity_range, 200)
    (line,) = ax.loglog(intensities, roofline_curve(intensities, peak_flops, peak_bandwidth), style, color=color, label=label)
    ridge = peak_flops / peak_bandwidth
    ax.axvline(ridge, color=line.get_color(), alpha=0.3, linestyle=":")
    for name, intensity, flops in points:
        ax.plot([intensity], [flops], "o", color=line.get_color())
        ax.annotate(name, (intensity, flops), textcoords="offset points", xytext=(5, -12), fontsize=MIN_LABEL_POINTS)
    if points:  # the label under the lowest point needs about a tenth of the axes' height below it, or the x axis cuts it
        ax.set_ymargin(max(ax.get_ymargin(), 0.12))
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    return line


# Where a number comes from; every helper below writes it into the legend, and the
# style tells the kinds apart at a glance (measured: solid with dots, modelled: dashed,
# reported: squares; in bar charts, hatching).
PROVENANCE = ("measured", "reported", "modelled")
_LINE_STYLE = {
    "measured": {"linestyle": "-", "marker": "o"},
    "modelled": {"linestyle": "--", "marker": None},
    "reported": {"linestyle": "none", "marker": "s"},
}
_BAR_STYLE = {
    "measured": {"color": "C0", "hatch": ""},
    "reported": {"color": "C1", "hatch": "//"},
    "modelled": {"color": "C2", "hatch": ".."},
}


def _check_kind(kind: str) -> str:
    if kind not in PROVENANCE:
        raise ValueError(f"kind must be one of {PROVENANCE}, got {kind!r}")
    return kind


def versus_size(
    ax,
    sizes,
    values,
    *,
    label: str,
    kind: str = "measured",
    xlabel: str | None = None,
    ylabel: str | None = None,
    logy: bool = False,
    color: str | None = None,
):
    """Plot ``values`` (a rate or a time) against problem ``sizes`` on a log2 x axis.

    sizes, values: sequences of the same length. The legend entry reads
    "<label> (<kind>)", kind being "measured", "reported" or "modelled".
    Axis labels given here replace earlier ones; a later series drawn without them keeps them.
    """
    _check_kind(kind)
    sizes = np.asarray(sizes, dtype=float)
    values = np.asarray(values, dtype=float)
    if sizes.shape != values.shape:
        raise ValueError(f"sizes and values differ in shape: {sizes.shape} vs {values.shape}")
    (line,) = ax.plot(sizes, values, color=color, label=f"{label} ({kind})", **_LINE_STYLE[kind])
    earlier = ax.xaxis.get_major_locator()  # set_xscale replaces it: keep the sizes of the series drawn before
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(_SizeLocator(set(sizes) | (earlier.sizes if isinstance(earlier, _SizeLocator) else set())))
    ax.xaxis.set_major_formatter(PLAIN_NUMBERS)  # 1024 and 16.8M, not 2^10 or 0.168 ×1e8
    if logy:
        readable_log_axis(ax, "y")
    if xlabel is not None or not ax.get_xlabel():
        ax.set_xlabel(xlabel or "problem size n")
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    return line


def plain_number(value: float) -> str:
    """A tick label a reader takes in at a glance: 0.05, 1024, 65536, 131k, 16.8M, 10⁻⁵ (never an offset, nor 1e-05)."""
    exponent = np.log10(abs(value)) if value else 0.0
    if value and exponent < -3 and abs(exponent - round(exponent)) < 1e-9:  # 10⁻⁵, not 1e-05
        return f"$10^{{{round(exponent)}}}$"
    if abs(value) < 1e5:  # up to 5 digits read fine as they are
        return f"{value:g}"
    scale, suffix = next((scale, suffix) for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")) if abs(value) >= scale)
    return f"{value / scale:.3g}{suffix}"


PLAIN_NUMBERS = FuncFormatter(lambda value, _: plain_number(value))


class _ReadableLogLocator(LogLocator):
    """Log ticks that always label at least two values: every decade when the view spans two
    decades or more; 1, 2 and 5 times each decade when it spans less (where plain decades would
    give a single label, or none). Where more than half a decade at either end of the view has no
    decade in it (points at 0.16 and 0.33 below a first label of 1), 2 and 5 times the decade label it
    too, where their labels have room."""

    def tick_values(self, vmin, vmax):
        low, high = sorted((max(vmin, 1e-300), max(vmax, 1e-300)))
        self.set_params(subs=(1.0,) if np.log10(high / low) >= 2 else (1.0, 2.0, 5.0))
        ticks = super().tick_values(vmin, vmax)
        shown = ticks[(ticks >= low) & (ticks <= high)]
        if np.log10(high / low) < 2 or not len(shown) or self.axis is None:
            return ticks
        powers = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
        steps = [step * 10.0**power for power in powers for step in (2, 5)]
        below = [step for step in steps if low <= step < shown[0]] if np.log10(shown[0] / low) > 0.5 else []
        above = [step for step in steps if shown[-1] < step <= high] if np.log10(high / shown[-1]) > 0.5 else []
        # the step farthest from the decade labelled first: it labels the most of the bare stretch
        return np.union1d(ticks, _labels_with_room(self.axis, list(shown), below + above[::-1], low, high))


class _SizeLocator(LogLocator):
    """Powers of two, where a log2 axis puts its ticks, and the ``sizes`` plotted between them (384 between 256 and 512)
    where their labels have room beside the labels already there."""

    def __init__(self, sizes):
        super().__init__(base=2)
        self.sizes = {float(size) for size in sizes if size > 0}

    def tick_values(self, vmin, vmax):
        ticks = super().tick_values(vmin, vmax)
        low, high = sorted((vmin, vmax))
        between = sorted(size for size in self.sizes if low <= size <= high and not np.isclose(ticks, size).any())
        if not between or self.axis is None or low <= 0:
            return ticks
        return np.union1d(ticks, _labels_with_room(self.axis, [tick for tick in ticks if low <= tick <= high], between, low, high))


def _labels_with_room(axis, kept, candidates, low: float, high: float) -> list:
    """``kept`` ticks of a log ``axis`` viewed from ``low`` to ``high``, and each of ``candidates`` in turn whose label, as the
    axis writes it, stays clear of the labels kept (side by side on an x axis, one above the other on a y axis)."""
    import matplotlib
    from matplotlib.font_manager import FontProperties

    ax, name = axis.axes, axis.axis_name
    length = (ax.bbox.width if name == "x" else ax.bbox.height) * 72 / ax.get_figure().dpi  # in points, as drawn
    font = FontProperties(size=matplotlib.rcParams[f"{name}tick.labelsize"]).get_size_in_points()

    def extent(value):  # along the axis, in points, with air either side
        return _text_points(axis.get_major_formatter()(value, None), font) if name == "x" else 1.4 * font

    kept = list(kept)
    for value in candidates:
        if all(abs(np.log(value / other)) / np.log(high / low) * length >= (extent(value) + extent(other)) / 2 for other in kept):
            kept.append(value)
    return kept


def readable_log_axis(ax, which: str = "y") -> None:
    """Make ``ax``'s x or y axis (``which``) logarithmic, labelled with plain numbers (0.5, 2, 1e+06)
    at every decade, or at 1-2-5 steps where the data spans less than two decades."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_locator(_ReadableLogLocator())
    axis.set_major_formatter(PLAIN_NUMBERS)
    axis.set_minor_formatter(NullFormatter())


BINARY_BYTES = FuncFormatter(lambda value, _: binary_bytes(value))


def bytes_axis(ax, which: str = "x") -> None:
    """Label ``ax``'s x or y axis (``which``) in binary byte units, every tick alike (64 KiB, 1 MiB, 256 MiB, never
    65536 beside 262k). Call it once the series are drawn: :func:`versus_size` sets plain numbers on its x axis."""
    axis = getattr(ax, f"{which}axis")
    axis.set_major_formatter(BINARY_BYTES)
    axis.set_minor_formatter(NullFormatter())


def provenance_bars(ax, bars, *, xlabel: str, fmt: str = "{:.3g}", log: bool = False):
    """Horizontal bars of ``(name, value, kind)``, coloured and hatched by kind, each labelled with its value.

    Use it to put a number measured here beside reported or modelled ones without
    letting them pass for the same thing. Returns matplotlib's ``BarContainer``.
    """
    bars = list(bars)
    if not bars:
        raise ValueError("no bars to draw")
    names = [name for name, _, _ in bars]
    values = [float(value) for _, value, _ in bars]
    kinds = [_check_kind(kind) for _, _, kind in bars]
    positions = np.arange(len(bars))[::-1]  # first bar on top, as read
    container = ax.barh(
        positions,
        values,
        color=[_BAR_STYLE[k]["color"] for k in kinds],
        edgecolor="black",
        linewidth=0.5,
    )
    for patch, kind in zip(container.patches, kinds):
        patch.set_hatch(_BAR_STYLE[kind]["hatch"])
    ax.set_yticks(positions, names)
    if log:
        readable_log_axis(ax, "x")
    ax.bar_label(container, labels=[fmt.format(v) for v in values], padding=3, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.margins(x=0.2)
    seen = list(dict.fromkeys(kinds))
    ax.legend(
        handles=[Patch(facecolor=_BAR_STYLE[k]["color"], hatch=_BAR_STYLE[k]["hatch"], edgecolor="black", label=k) for k in seen],
        loc="best",
        fontsize=8,
    )
    return container


def timing_strip(ax, samples, *, median: float, iqr: float | None = None, label: str, summary_label: str = "median of many runs"):
    """Single-shot timings (seconds) in call order, with a robust median and its IQR band across them.

    Shows why one ``perf_counter`` reading is not a measurement: the first call and the
    scatter of the rest against a median taken over many runs. Times are drawn in the
    unit that suits ``median`` (s, ms or µs). Returns the (scatter, median line).
    """
    samples = np.asarray(samples, dtype=float)
    if samples.ndim != 1 or samples.size == 0:
        raise ValueError("samples must be a non-empty 1-D sequence of seconds")
    unit, scale = _time_unit(median)
    calls = np.arange(1, samples.size + 1)
    scatter = ax.scatter(calls, samples / scale, s=18, label=f"{label}: single-shot timings (measured)")
    (line,) = ax.plot(
        [calls[0], calls[-1]], [median / scale] * 2, color="black", label=f"{summary_label} (measured)"
    )
    if iqr is not None:
        ax.fill_between(
            [calls[0], calls[-1]], (median - iqr / 2) / scale, (median + iqr / 2) / scale, color="black", alpha=0.15, lw=0
        )
    ax.set_xlabel("call number")
    ax.set_ylabel(f"time per call ({unit})")
    ax.grid(True, alpha=0.3)
    return scatter, line


def _time_unit(seconds: float) -> tuple[str, float]:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return unit, scale
    return "ns", 1e-9


def occupancy_by_block_size(ax, curve, *, current: int | None = None):
    """Modelled occupancy against threads per block, from :func:`gpucourse.sim.occupancy_by_block_size`.

    curve: {threads_per_block: Occupancy}. Points are coloured by the limiting resource;
    ``current`` marks the block size being looked at.
    """
    from .sim import LIMITERS

    if not curve:
        raise ValueError("the occupancy curve is empty")
    sizes = np.array(sorted(curve))
    values = np.array([curve[size].occupancy for size in sizes])
    gpu = next(iter(curve.values())).gpu
    ax.plot(sizes, values, color="0.6", linestyle="--", label=f"{gpu} (modelled)")
    for index, limiter in enumerate(LIMITERS):
        chosen = [size for size in sizes if curve[size].limiter == limiter]
        if chosen:
            ax.scatter(chosen, [curve[size].occupancy for size in chosen], color=f"C{index}", s=18,
                       label=f"limited by {limiter.replace('_', ' ')}", zorder=3)
    if current is not None and current in curve:
        ax.scatter([current], [curve[current].occupancy], s=140, facecolors="none", edgecolors="black",
                   label=f"{current} threads/block", zorder=4)
    ax.set_xlabel("threads per block")
    ax.set_ylabel("occupancy (active warps / max warps)")
    ax.set_ylim(0, 1.05)
    ax.set_xlim(0, sizes.max() + 32)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=MIN_LABEL_POINTS, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside: inside, it hid points


def thread_map(n_elements: int, blocks: int, threads_per_block: int, *, grid_stride: bool = True) -> np.ndarray:
    """Which global thread handles each element of a 1-D launch (-1: nobody).

    With ``grid_stride``, thread t handles t, t + blocks·threads, …; without, only element t.
    """
    if min(n_elements, blocks, threads_per_block) < 1:
        raise ValueError("n_elements, blocks and threads_per_block must all be >= 1")
    total_threads = blocks * threads_per_block
    elements = np.arange(n_elements)
    owner = elements % total_threads
    if not grid_stride:
        owner = np.where(elements < total_threads, owner, -1)
    return owner


def launch_figure(ax, n_elements: int, blocks: int, threads_per_block: int, *, grid_stride: bool = True, warp_size: int = 32):
    """Draw a 1-D launch: one cell per element, coloured by the block whose thread handles it.

    Each cell carries the thread's index within its block; thick lines mark warp boundaries
    within a block and every pass of a grid-stride loop gets its own row. Elements nobody
    handles are hatched red, with a legend entry of their own: the bug of a grid smaller than the data.
    """
    owner = thread_map(n_elements, blocks, threads_per_block, grid_stride=grid_stride)
    total_threads = blocks * threads_per_block
    rows = -(-n_elements // total_threads)
    cmap = _block_colours(blocks)
    for element, thread in enumerate(owner):
        row, col = divmod(element, total_threads)
        y = rows - 1 - row
        if thread < 0:
            ax.add_patch(_box(col, y, 1, 1, **_UNHANDLED))
            continue
        block, local = divmod(int(thread), threads_per_block)
        ax.add_patch(_cell(col, y, cmap(block)))
        if total_threads <= 64:
            ax.text(col + 0.5, y + 0.5, str(local), ha="center", va="center", fontsize=MIN_LABEL_POINTS)
    for boundary in range(0, total_threads + 1):
        if boundary % threads_per_block == 0:
            ax.axvline(boundary, color="black", lw=2)
        elif boundary % warp_size == 0:
            ax.axvline(boundary, color="black", lw=1, linestyle=":")
    ax.set_xlim(0, total_threads)
    ax.set_ylim(0, rows)
    row_names = [f"pass {r}" for r in range(rows)] if grid_stride else [f"elements {r * total_threads}+" for r in range(rows)]
    ax.set_yticks([rows - 0.5 - r for r in range(rows)], row_names)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # thread indices are whole numbers
    ax.set_xlabel("global thread index (blockIdx.x · blockDim.x + threadIdx.x)")
    loop = "grid-stride loop" if grid_stride else "one element per thread"
    ax.set_title(f"{n_elements} elements, {blocks} blocks × {threads_per_block} threads, {loop}", fontsize=9)
    handles = [Patch(facecolor=cmap(b), edgecolor="black", label=f"block {b}") for b in range(min(blocks, 8))]
    if (owner < 0).any():
        handles.append(Patch(**_UNHANDLED, label="handled by no thread"))
    ax.legend(handles=handles, fontsize=MIN_LABEL_POINTS, loc="center left", bbox_to_anchor=(1.005, 0.5),
              frameon=False)  # beside, not over, the cells


# An element no thread handles: drawn and listed in the legend alike.
_UNHANDLED = {"facecolor": "white", "edgecolor": "red", "hatch": "//"}  # the hatch takes the edge colour (matplotlib < 3.10 has no hatchcolor)


def _cell(x: float, y: float, colour):
    return _box(x, y, 1, 1, colour)


def _block_colours(blocks: int):
    import matplotlib

    return matplotlib.colormaps["tab10" if blocks <= 10 else "tab20"]


def warp_sectors(ax, addresses, *, bytes_per_lane: int = 4, sector_bytes: int = 32, title: str | None = None):
    """One warp request drawn: each active lane's bytes and the 32-byte sectors they fall in (modelled).

    addresses: byte addresses of the active lanes (lane k first). Touched sectors are shaded,
    the bytes lanes asked for are dark; the title gives sectors and efficiency.
    """
    from .sim import memory

    addresses = list(addresses)
    if not addresses:
        raise ValueError("no active lanes to draw")
    sectors = sorted(memory.touched_units(addresses, bytes_per_lane, sector_bytes))
    column = {sector: index for index, sector in enumerate(sectors)}  # touched sectors side by side, gaps elided
    for index in column.values():
        ax.add_patch(_box(index * sector_bytes, 0, sector_bytes, 1, "#dbe9f6"))
    for lane, address in enumerate(addresses):
        sector = address // sector_bytes
        x = column[sector] * sector_bytes + address % sector_bytes
        ax.add_patch(_box(x, 0, bytes_per_lane, 1, "C0", edge="none"))
        ax.plot([lane * len(sectors) * sector_bytes / max(len(addresses), 1) + 2, x + bytes_per_lane / 2], [2, 1],
                color="0.5", lw=0.6)
    starts = [index * sector_bytes for index in range(len(sectors))]
    # Sector boundaries, behind the boxes: they stick out above and below where lanes fill both sides.
    ax.vlines(starts[1:], -0.2, 1.2, color="black", lw=1, zorder=0.5)
    ax.set_xlim(0, len(sectors) * sector_bytes)
    ax.set_ylim(-0.3, 2.3)
    ax.set_yticks([0.5, 2], ["sectors\n(32 B)", "lanes"])
    _sparse_ticks(ax, starts, [str(s * sector_bytes) for s in sectors])
    ax.set_xlabel("byte address where each touched sector starts (untouched sectors left out)")
    ax.legend(handles=[Patch(facecolor="C0", label="bytes the lanes asked for"),
                       Patch(facecolor="#dbe9f6", edgecolor="0.4", label="rest of the sector, moved too")],
              fontsize=MIN_LABEL_POINTS, loc="center left", bbox_to_anchor=(1.005, 0.5), frameon=False)
    efficiency = memory.load_efficiency(addresses, bytes_per_lane, sector_bytes)
    ax.set_title(title or f"{len(addresses)} lanes × {bytes_per_lane} B: {len(sectors)} sectors, "
                 f"{efficiency:.0%} of moved bytes used (modelled)", fontsize=9)


def _sparse_ticks(ax, positions, labels, fontsize: float = MIN_LABEL_POINTS):
    """Horizontal x tick labels at ``fontsize``, every k-th one, k as small as keeps them apart at the
    axes' width; a minor tick still marks every position."""
    fig = ax.get_figure()
    axes_points = ax.get_position().width * fig.get_figwidth() * 72 * 0.8  # 0.8: room for tight_layout to shrink it
    widest = max(len(label) for label in labels) * 0.62 * fontsize + fontsize  # a digit is ~0.6 em, plus a gap
    step = max(1, int(np.ceil(widest / (axes_points / len(positions)))))
    ax.set_xticks(positions[::step], labels[::step], fontsize=fontsize, rotation=0)
    ax.set_xticks(positions, minor=True)


def bank_map(ax, word_addresses, *, banks: int = 32, title: str | None = None):
    """Shared-memory banks of one warp request: a column per bank, a row per distinct word it must serve (modelled)."""
    from .sim import memory

    words_by_bank: dict[int, list[int]] = {}
    lanes_by_word: dict[int, list[int]] = {}
    for lane, word in enumerate(word_addresses):
        lanes_by_word.setdefault(word, []).append(lane)
        if word not in words_by_bank.setdefault(word % banks, []):
            words_by_bank[word % banks].append(word)
    degree = memory.bank_conflict_degree(word_addresses, banks)
    ax.set_xlim(0, banks)
    ax.set_ylim(0, max(degree, 1))
    label = {word: str(lanes[0]) + ("+" if len(lanes) > 1 else "") for word, lanes in lanes_by_word.items()}
    labelled = _fits_in_cells(ax, max(len(text) for text in label.values()))
    for bank, words in words_by_bank.items():
        for depth, word in enumerate(words):
            ax.add_patch(_box(bank, depth, 1, 1, "C3" if depth else "C2"))
            if labelled:
                ax.text(bank + 0.5, depth + 0.5, label[word], ha="center", va="center", fontsize=MIN_LABEL_POINTS)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("bank (word address mod 32)" + ("; in each cell, the lane reading it (+: a broadcast to several)" if labelled else ""))
    ax.set_ylabel("passes through the banks")
    ax.set_title(title or f"bank-conflict degree {degree} (modelled)", fontsize=9)
    ax.legend(handles=[Patch(facecolor="C2", edgecolor="0.4", label="first pass"),
                       Patch(facecolor="C3", edgecolor="0.4", label="replay (conflict)")],
              fontsize=MIN_LABEL_POINTS, loc="upper left", bbox_to_anchor=(1.005, 1), frameon=False)


def _fits_in_cells(ax, characters: int, fontsize: float = MIN_LABEL_POINTS) -> bool:
    """Whether ``characters`` digits at ``fontsize`` fit in a data cell of 1 × 1 at the axes' current size and limits."""
    fig = ax.get_figure()
    position = ax.get_position()
    x_low, x_high = ax.get_xlim()
    y_low, y_high = ax.get_ylim()
    cell_width = position.width * fig.get_figwidth() * 72 / abs(x_high - x_low)
    cell_height = position.height * fig.get_figheight() * 72 / abs(y_high - y_low)
    return cell_width >= characters * 0.62 * fontsize and cell_height >= 1.2 * fontsize


def active_masks(ax, lane_paths, path_cost, *, title: str | None = None):
    """A warp through a branch: each distinct path runs in turn, its lanes active, the others masked (modelled).

    A path keeps its colour from its place in ``path_cost``, so "if" looks the same in every panel
    whichever path a warp happens to take; the legend, under the axes, names each colour.
    """
    from .sim import simt

    colour = {path: f"C{index}" for index, path in enumerate(path_cost)}
    start = 0
    order = list(dict.fromkeys(path for path in lane_paths if path is not None))
    for path in order:
        cost = path_cost[path]
        for lane, taken in enumerate(lane_paths):
            ax.add_patch(_box(start, lane, cost, 1, colour[path] if taken == path else _MASKED, edge="none"))
        start += cost
    ax.set_xlim(0, max(start, 1))
    ax.set_ylim(0, len(lane_paths))
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))  # few ticks: the panels are often narrow
    ax.set_xlabel("cycles")
    ax.set_ylabel("lane")
    efficiency = simt.simt_efficiency(lane_paths, path_cost) if start else 0.0
    ax.set_title(title or f"{start} cycles, SIMT efficiency {efficiency:.0%} (modelled)", fontsize=9)
    handles = [Patch(facecolor=colour[path], label=f"runs {path}") for path in order]
    if any(taken != path for path in order for taken in lane_paths):
        handles.append(Patch(facecolor=_MASKED, label="masked (idle)"))
    # Under the x label whatever the axes' height: anchored 36 points below the axes.
    below = offset_copy(ax.transAxes, fig=ax.get_figure(), y=-36, units="points")
    ax.legend(handles=handles, fontsize=MIN_LABEL_POINTS, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below,
              ncol=1 if len(handles) <= 3 else 2, frameon=False)


_MASKED = "0.9"


def _box(x, y, width, height, colour=None, edge="0.4", **style):
    """A rectangle with a thin edge; ``style`` (facecolor, edgecolor, hatch, hatchcolor) overrides colour and edge."""
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), width, height, **{"facecolor": colour, "edgecolor": edge, "lw": 0.5, **style})


# -- stream timelines ------------------------------------------------------------------------------

# Rows top to bottom, as data flows: in, compute, out; "copy" is the one engine both directions share.
_ENGINE_ROWS = {"h2d": "copy in (h2d)", "copy": "copy engine (both ways)", "compute": "compute", "d2h": "copy out (d2h)"}
_KIND_STYLE = {"h2d": ("C0", "copy host → device"), "kernel": ("C2", "kernel"), "d2h": ("C1", "copy device → host"),
               "copy": ("C7", "copy (direction not given)")}
_KIND_OF_ENGINE = {"h2d": "h2d", "compute": "kernel", "d2h": "d2h", "copy": "copy"}  # measured rows name only their engine


def timeline(ax, timeline, *, title: str | None = None, label: str = "modelled for T4", measured=None,
             measured_label: str = "measured"):
    """A Gantt chart of a :class:`gpucourse.sim.streams.Timeline`: a row per engine, a bar per operation.

    Bars run from each operation's start to its end (in ms), coloured by kind. Every bar is named: inside it
    where its label fits, else by a shorter form of the label (the buffer numbers: "0→8" for "pinned 0 → dev 8"),
    else under it, in a lane below the row's bars, where neighbours too narrow for their names share one range
    ("in0…in7": those bars, left to right). Vertical lines mark the makespan and the ideal bound (the
    busiest engine's total time), drawn behind the bars and the names, so no name is crossed out; each race is a
    red cross just inside the start of the operation that raced (clear of the row names), a name on a bar moves
    clear of it, and the title counts them. ``label`` says where the timeline comes from ("modelled for T4").

    measured: optional ``[(label, engine, start_s, end_s), …]`` timed on a GPU (CUDA events); then
    ``ax`` is a pair of axes, the model drawn on the first and the measurement on the second, on
    one time scale. Returns the bars (Rectangles) drawn on the model's axes.
    """
    axes = list(np.atleast_1d(ax))
    if measured is not None and len(axes) != 2:
        raise ValueError(f"a measured timeline needs two axes (model, measured), got {len(axes)}")
    model_ax = axes[0]
    bars = [(i.label, i.engine, i.kind, i.start, i.end) for i in timeline.intervals if i.engine is not None]
    heading = f"makespan {timeline.makespan * 1e3:.3g} ms, ideal bound {timeline.ideal_seconds * 1e3:.3g} ms ({label})"
    races = _race_summary(timeline.races)
    model_ax.set_title(f"{title}\n{heading}{races}" if title else heading + races, fontsize=9)
    end = max([timeline.makespan] + [stop for *_, stop in (measured or [])])
    legend = ["makespan", "ideal bound (busiest engine)"] + (["race: nothing orders it"] if timeline.races else [])
    _bound_line(model_ax, timeline.makespan, color="black", label="makespan")
    _bound_line(model_ax, timeline.ideal_seconds, color="0.4", linestyle="--", label="ideal bound (busiest engine)")
    drawn = _gantt(model_ax, bars, end, legend, raced={race.operation for race in timeline.races})
    _timeline_legend(model_ax, bars)
    if measured is not None:
        measured_bars = [(name, engine, _KIND_OF_ENGINE.get(engine, "copy"), start, stop) for name, engine, start, stop in measured]
        span = max((stop for *_, stop in measured), default=0.0)
        _bound_line(axes[1], span, color="black", label="makespan")
        _gantt(axes[1], measured_bars, end, ["makespan"])
        axes[1].set_title(f"makespan {span * 1e3:.3g} ms ({measured_label})", fontsize=9)
        _timeline_legend(axes[1], measured_bars)
    return drawn


_RACE_MARK_POINTS = 10
_RACE_MARK_SHIFT = _RACE_MARK_POINTS / 2 + 2  # the cross's centre right of its bar's start: clear of the row names
_BEHIND_BARS = 0.9  # the zorder of the vertical lines: under the bars (1) and the names (3)
_LANE_POINTS = 1.3 * MIN_LABEL_POINTS  # one line of names under a row's bars
_MAX_LANES = 2


def _bound_line(ax, seconds: float, **style):
    """A vertical line at ``seconds`` (makespan, ideal bound), behind the bars; names under the bars hide it with their
    white background, so it never runs through a name."""
    return ax.axvline(seconds * 1e3, lw=1.2, zorder=_BEHIND_BARS, **style)


def _clear_of_marks(start: float, stop: float, marks, ms_per_point: float) -> tuple[float, float, float]:
    """The widest stretch of the bar from ``start`` to ``stop`` (ms) that no race cross covers, the crosses being drawn
    at ``marks`` (their bars' starts, ms, on the same row). Returns (centre in ms, shift in points, width in points): a name
    centred at the centre, moved right by the shift, and no wider than the width clears every cross. Each boundary is a
    time plus a shift in points, so the stretch stays clear however wide the axes are drawn."""
    half = _RACE_MARK_POINTS / 2 + 1.5  # the cross's half-width, its white edge and a point of air
    crosses = sorted((mark, _RACE_MARK_SHIFT - half, _RACE_MARK_SHIFT + half) for mark in marks)

    def points(ms, shift):  # from the bar's start, as the axes will be at least as wide as ms_per_point says
        return (ms - start) / ms_per_point + shift

    width = points(stop, 0)
    crosses = [(mark, left, right) for mark, left, right in crosses if points(mark, right) > 0 and points(mark, left) < width]
    lefts = [(start, 0.0)] + [(mark, right) for mark, _, right in crosses]
    rights = [(mark, left) for mark, left, _ in crosses] + [(stop, 0.0)]
    (a, p), (b, q) = max(zip(lefts, rights), key=lambda gap: points(*gap[1]) - points(*gap[0]))
    return (a + b) / 2, (p + q) / 2, points(b, q) - points(a, p)


def _race_summary(races) -> str:
    if not races:
        return ""
    listed = "; ".join(f"{race.operation} vs {race.other}" for race in races[:2])
    more = f" and {len(races) - 2} more" if len(races) > 2 else ""
    return f"\n{len(races)} race{'s' if len(races) > 1 else ''}: {listed}{more}"


def _engine_rows(bars) -> list[str]:
    present = {engine for _, engine, *_ in bars}
    return [engine for engine in _ENGINE_ROWS if engine in present] + sorted(present - set(_ENGINE_ROWS))


def _text_points(text: str, fontsize: float = MIN_LABEL_POINTS) -> float:
    """How wide ``text`` is at ``fontsize``, in points (from the font's glyphs), plus 2 points each side."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    return TextToPath().get_text_width_height_descent(text, FontProperties(size=fontsize), ismath=False)[0] + 4


def _width_after_layout(ax, row_names, legend_labels) -> float:
    """The axes' width in points once ``tight_layout`` has made room for the row names on the left and the legend
    beside it (the figure's width, less both and the margins), or its width now if that is less: names placed for
    it stay apart however the figure is laid out."""
    import matplotlib
    from matplotlib.font_manager import FontProperties

    fig = ax.get_figure()
    tick_points = FontProperties(size=matplotlib.rcParams["ytick.labelsize"]).get_size_in_points()
    names = max((_text_points(name, tick_points) for name in row_names), default=0.0) + 8  # + tick and its pad
    legend = max((_text_points(label) for label in legend_labels), default=0.0) + 34  # + handle, pads, border
    return min(ax.get_position().width * fig.get_figwidth() * 72, fig.get_figwidth() * 72 - names - legend - 36)


def short_name(label: str) -> str:
    """An operation's label in fewer characters: the words before each number dropped, and the spaces around
    an arrow ("pinned 0 → dev 8" → "0→8", "squash → dev 9" → "squash→9"); a label without them is kept."""
    import re

    return re.sub(r"\s*→\s*", "→", re.sub(r"[^\W\d]+ (?=\d)", "", label))


def _lane_names(spans, lanes: int, ms_per_point: float, x_max: float) -> list[tuple[str, float, int, list[str]]]:
    """Names for bars too narrow to carry one: ``spans``, [(start_ms, stop_ms, label)] in time order, one row's.

    Each name is centred under its bar (kept inside 0..``x_max``) in the first of ``lanes`` lanes where it clears
    the names already there; a name that fits no lane joins the group before it, which is then named by its
    first and last labels ("in0…in3"). Returns [(text, centre_ms, lane, labels named)].
    """
    groups = [[span] for span in spans]
    while True:
        placed, reach = [], [-np.inf] * lanes
        for index, group in enumerate(groups):
            first, last = short_name(group[0][2]), short_name(group[-1][2])
            text = first if len(group) == 1 else f"{first}…{last}"
            width = _text_points(text) * ms_per_point
            left = min(max((group[0][0] + group[-1][1]) / 2 - width / 2, 0.0), max(x_max - width, 0.0))
            lane = next((k for k in range(lanes) if left >= reach[k]), None)
            if lane is None:  # never the first group: every lane is free for it
                groups[index - 1:index + 1] = [groups[index - 1] + group]
                break
            reach[lane] = left + width
            placed.append((text, left + width / 2, lane, [label for *_, label in group]))
        else:
            return placed


def _gantt(ax, bars, end_seconds: float, legend_labels=(), raced=frozenset()):
    """One row per engine, one bar per (label, engine, kind, start, end), each named (see :func:`timeline`);
    ``legend_labels``, the lines the legend beside the axes will list, tell how much room the legend takes; the bars
    labelled in ``raced`` get a red cross, which no name covers. Returns the bars drawn, in the order given."""
    rows = _engine_rows(bars)
    fig = ax.get_figure()
    # Panels sharing the time axis: never shrink it below what a panel drawn earlier needs.
    drawn_before = [other.get_xlim()[1] for other in ax.get_shared_x_axes().get_siblings(ax) if other is not ax and other.patches]
    ax.set_xlim(0, max([max(end_seconds, 1e-12) * 1e3 * 1.02] + drawn_before))
    ax.set_ylim(0, max(len(rows), 1))
    ax.set_yticks([len(rows) - 1 - index + 0.5 for index in range(len(rows))], [_ENGINE_ROWS.get(row, row) for row in rows])
    ax.set_xlabel("time (ms)")
    x_max = ax.get_xlim()[1]
    kinds = [_KIND_STYLE[kind][1] for kind in dict.fromkeys(kind for _, _, kind, *_ in bars)]
    row_names = [_ENGINE_ROWS.get(row, row) for row in rows]
    ms_per_point = (x_max - ax.get_xlim()[0]) / _width_after_layout(ax, row_names, kinds + list(legend_labels))
    row_points = ax.get_position().height * fig.get_figheight() * 72 / max(len(rows), 1)
    lane_height = _LANE_POINTS / row_points  # in rows
    lanes_allowed = max(1, min(_MAX_LANES, int(0.45 / lane_height)))  # a bar keeps at least a third of its row
    slots, stacked = _stack_slots(bars)
    # A stacked bar's height with the most lanes of names under its row: a name drawn in it must fit that.
    slot_points = {row: (0.8 - lanes_allowed * lane_height) * row_points / count for row, count in stacked.items()}
    inside, under = {}, {}
    for row in rows:
        spans = sorted((start * 1e3, stop * 1e3, name) for name, engine, _, start, stop in bars if engine == row)
        narrow, marks = [], [start for start, _, name in spans if name in raced]  # every slot's: a cross may overhang its own
        for start, stop, name in spans:
            tall = stacked[row] == 1 or slot_points[row] >= _SLOT_TEXT_POINTS
            centre, shift, room = _clear_of_marks(start, stop, marks, ms_per_point)
            fits = [text for text in (name, short_name(name)) if tall and room >= _text_points(text)]
            if fits:
                inside[(row, name, start)] = (fits[0], centre, shift)
            else:
                narrow.append((start, stop, name))
        under[row] = _lane_names(narrow, lanes_allowed, ms_per_point, x_max) if narrow else []
    lanes = max((lane + 1 for names in under.values() for _, _, lane, _ in names), default=0)
    floor = 0.1 + lanes * lane_height  # the bars sit above the lanes of names
    drawn = []
    for (name, engine, kind, start, stop), slot in zip(bars, slots):
        height = (0.9 - floor) / stacked[engine]  # operations running at once on one engine share its row, one above the other
        bottom = len(rows) - 1 - rows.index(engine) + floor + (stacked[engine] - 1 - slot) * height
        drawn.append(ax.add_patch(_box(start * 1e3, bottom, (stop - start) * 1e3, height, _KIND_STYLE[kind][0], edge="white")))
        if (engine, name, start * 1e3) in inside:
            text, centre, shift = inside[engine, name, start * 1e3]
            moved = offset_copy(ax.transData, fig=fig, x=shift, units="points")
            ax.text(centre, bottom + height / 2, text, ha="center", va="center", fontsize=MIN_LABEL_POINTS, color="white",
                    clip_on=True, transform=moved)
    for row, names in under.items():
        y = len(rows) - 1 - rows.index(row)
        for text, centre, lane, _ in names:  # on white, which hides the makespan and ideal-bound lines behind the name
            ax.text(centre, y + 0.1 + (lanes - lane - 0.5) * lane_height, text, ha="center", va="center", fontsize=MIN_LABEL_POINTS,
                    color="0.15", clip_on=False, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3})
    spots = [(bar.get_x(), bar.get_y() + bar.get_height() / 2, bar.get_height()) for (name, *_), bar in zip(bars, drawn) if name in raced]
    if spots:  # where it starts too early; a cross as tall as the thinnest raced bar at most, so it stays off the names under it
        size = max(4.0, min(_RACE_MARK_POINTS, min(height for *_, height in spots) * row_points - 1.5))
        marked = offset_copy(ax.transData, fig=fig, x=_RACE_MARK_SHIFT, units="points")
        ax.plot([x for x, *_ in spots], [y for _, y, _ in spots], linestyle="none", marker="X", markersize=size, color="red",
                markeredgecolor="white", label="race: nothing orders it", transform=marked, clip_on=False)
    ax.grid(True, axis="x", alpha=0.3)
    return drawn


_SLOT_TEXT_POINTS = 1.2 * MIN_LABEL_POINTS  # a stacked bar tall enough for a name inside it
_FOOTPRINT_DASHES = ("-", (0, (5, 2)), (0, (1, 1.5)), "-.")
_FOOTPRINT_LABEL_CHARACTERS = 30  # a legend line beside a strip no wider than the timeline's legend


def _stack_slots(bars) -> tuple[list[int], dict[str, int]]:
    """For each bar, its slot in its engine's row: bars that overlap in time (kernels running at once) get different
    slots, each the lowest one free when it starts; a bar starting as another ends may take its slot. Returns the
    slots, in the order of ``bars``, and the number of slots each row needs (1 where nothing overlaps)."""
    slots, stacked = [0] * len(bars), {}
    for row in {engine for _, engine, *_ in bars}:
        ends: list[float] = []  # per slot, when its last bar ends
        for index in sorted((i for i, bar in enumerate(bars) if bar[1] == row), key=lambda i: (bars[i][3], bars[i][4])):
            start, stop = bars[index][3], bars[index][4]
            free = next((slot for slot, end in enumerate(ends) if end <= start + 1e-12 * max(1.0, abs(start))), len(ends))
            if free == len(ends):
                ends.append(stop)
            else:
                ends[free] = stop
            slots[index] = free
        stacked[row] = max(len(ends), 1)
    return slots, stacked


def footprint(ax, timeline, *, label: str = "modelled for T4", title: str | None = None, end: float | None = None,
              top: float | None = None):
    """The device memory of a :class:`gpucourse.sim.streams.Timeline` over time, on the time axis of :func:`timeline` (ms),
    in binary units: the bytes the caching allocator holds (``timeline.memory``: the footprint on the device, a filled
    step line) and the bytes of buffers not yet released (``timeline.memory_in_use``, dashed), the peak in the title.
    ``timeline`` may also be ``{name: Timeline}``: then one line per timeline, the bytes its allocator holds, named with
    its peak in the legend, so the footprints of several versions of a job compare on one strip.
    Draw it on axes below a timeline's, with ``sharex``. Lines run to ``end`` seconds (default: the longest makespan);
    ``top`` (bytes) fixes the axis height. Returns the peak (a dict of peaks for a dict)."""
    named = timeline if isinstance(timeline, dict) else None
    runs = named or {None: timeline}
    stop = max([max(t.makespan for t in runs.values()) if end is None else end] + [time for t in runs.values() for time, _ in t.memory])
    peaks = {name: t.peak_device_bytes for name, t in runs.items()}

    def draw(steps, **style):
        times = [time * 1e3 for time, _ in steps] + [stop * 1e3]
        values = [value for _, value in steps] + [steps[-1][1] if steps else 0]
        ax.step(times, values, where="post", **style)
        return times, values

    if named is None:
        times, values = draw(timeline.memory, color="C4", lw=1.5, label="held by the allocator")
        ax.fill_between(times, values, step="post", color="C4", alpha=0.15, lw=0)
        draw(timeline.memory_in_use, color="0.25", lw=1.0, linestyle="--", label="in live buffers")
        heading = f"device memory: peak {binary_bytes(peaks[None])} held by the allocator ({label})"
    else:
        import textwrap

        for index, (name, run) in enumerate(named.items()):  # dashes of their own, so equal footprints stay visible
            draw(run.memory, color=f"C{(index + 4) % 10}", lw=2.2 - 0.4 * (index % 3), linestyle=_FOOTPRINT_DASHES[index % len(_FOOTPRINT_DASHES)],
                 label="\n".join(textwrap.wrap(f"{name}: peak " + binary_bytes(peaks[name]).replace(" ", "\u00a0"), _FOOTPRINT_LABEL_CHARACTERS)))
        heading = f"device memory held by the allocator ({label})"
    height = max(top or max(peaks.values()), 1) * 1.3
    ax.set_ylim(0, height)
    ax.yaxis.set_major_locator(MultipleLocator(2 ** int(np.ceil(np.log2(height / 4)))))  # a power of two: 0, 16, 32 MiB
    bytes_axis(ax, "y")
    ax.tick_params(axis="y", labelsize=MIN_LABEL_POINTS)
    ax.set_xlabel("time (ms)")
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{title}: {heading}" if title else heading, fontsize=9)
    ax.legend(fontsize=MIN_LABEL_POINTS, loc="center left", bbox_to_anchor=(1.005, 0.5), frameon=False)
    return peaks if named is not None else peaks[None]


def _timeline_legend(ax, bars):
    """Beside the axes: each kind of bar drawn, then the lines and markers."""
    drawn = {kind for _, _, kind, *_ in bars}
    handles = [Patch(facecolor=colour, label=name) for kind, (colour, name) in _KIND_STYLE.items() if kind in drawn]
    lines, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + lines, fontsize=MIN_LABEL_POINTS, loc="center left", bbox_to_anchor=(1.005, 0.5), frameon=False)


# -- profiler traces ---------------------------------------------------------------------------------


def profile_timeline(ax, events, *, title: str | None = None, label: str = "measured"):
    """A profiler trace as a Gantt chart, the way Perfetto shows it: a row per thread (CPU) or device (GPU kernels).

    events: ``[(name, row, start_us, duration_us, depth), …]``, e.g. from
    :func:`gpucourse.profiling.trace_events`. Each op is a bar from its start to its end; an op
    called by another (depth d + 1) is drawn inside its parent, lower and narrower, so the
    parent's name stays readable in the strip above it. Names are written where they fit.
    The time axis is in µs, or in ms when the trace lasts 1 ms or more. ``label`` says where the
    trace comes from ("measured on <device>"). Returns the bars (Rectangles) in the order given.
    """
    events = [tuple(event) for event in events]
    if not events:
        raise ValueError("no events to draw: was anything run inside the profiler?")
    rows = sorted({row for _, row, *_ in events}, key=lambda row: (row.startswith("GPU"), row))  # host threads above the GPU
    end_us = max(start + duration for _, _, start, duration, _ in events)
    unit, scale = ("ms", 1e3) if end_us >= 1e3 else ("µs", 1.0)
    lanes = max(depth for *_, depth in events) + 1
    lane = 0.9 / lanes  # each depth leaves its parent a strip of this height on top
    ax.set_xlim(0, end_us / scale * 1.02)
    ax.set_ylim(0, len(rows))
    ax.set_yticks([len(rows) - 1 - index + 0.5 for index in range(len(rows))], rows)
    ax.set_xlabel(f"time since the first op ({unit})")
    unit_per_point = ax.get_xlim()[1] / (ax.get_position().width * ax.get_figure().get_figwidth() * 72)
    lane_points = lane * ax.get_position().height * ax.get_figure().get_figheight() * 72 / len(rows)
    colours = _op_colours(name for name, *_ in events)
    drawn = []
    for name, row, start, duration, depth in events:
        top = len(rows) - 1 - rows.index(row) + 0.95
        height = 0.9 - depth * lane
        drawn.append(ax.add_patch(_box(start / scale, top - 0.9, duration / scale, height, colours[name], edge="white")))
        text = _fitting_name(name, duration / scale / unit_per_point, lane_points)
        if text:
            ax.text((start + duration / 2) / scale, top - (depth + 0.5) * lane, text, ha="center", va="center",
                    fontsize=MIN_LABEL_POINTS, color="white", clip_on=True)
    heading = f"{len(events)} ops over {end_us / scale:.3g} {unit} ({label})"
    ax.set_title(f"{title}\n{heading}" if title else heading, fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return drawn


def _op_colours(names) -> dict:
    """A colour per op name, in order of first appearance, so one op looks the same wherever it runs."""
    import matplotlib

    palette = matplotlib.colormaps["tab10"]
    order = list(dict.fromkeys(names))
    return {name: palette(index % 10) for index, name in enumerate(order)}


def _fitting_name(name: str, width_points: float, height_points: float) -> str:
    """The op's name, or without its namespace ("addmm" for "aten::addmm"), if it fits a bar of this size; else ''."""
    if height_points < 1.1 * MIN_LABEL_POINTS:
        return ""
    for text in (name, name.rsplit("::", 1)[-1]):
        if width_points >= len(text) * 0.62 * MIN_LABEL_POINTS + 4:
            return text
    return ""


def im2col_figure(ax_image, ax_columns, height: int = 5, width: int = 5, kernel: int = 3, patch: tuple[int, int] = (1, 2)):
    """im2col drawn for one channel: on ``ax_image`` the (height, width) input with its pixels numbered and
    the kernel window at output pixel ``patch`` = (row, col) outlined; on ``ax_columns`` the unfolded matrix
    (kernel² rows, one column per output pixel), that window's column outlined. Stride 1, no padding."""
    out_h, out_w = height - kernel + 1, width - kernel + 1
    row, col = patch
    if not (0 <= row < out_h and 0 <= col < out_w):
        raise ValueError(f"output pixel {patch} is outside the {out_h} × {out_w} output of a {kernel} × {kernel} kernel on {height} × {width}")
    pixels = np.arange(height * width).reshape(height, width)
    window = pixels[row:row + kernel, col:col + kernel]
    ax_image.imshow(np.isin(pixels, window), cmap="Blues", vmin=0, vmax=1.6)
    for (y, x), value in np.ndenumerate(pixels):
        ax_image.text(x, y, str(value), ha="center", va="center", fontsize=MIN_LABEL_POINTS)
    ax_image.add_patch(_box(col - 0.5, row - 0.5, kernel, kernel, "none", edge="tab:red", lw=2))
    ax_image.set_title(f"input {height} × {width}: the window of output pixel {patch}", fontsize=9)
    columns = np.stack([pixels[r:r + kernel, c:c + kernel].reshape(-1) for r in range(out_h) for c in range(out_w)], axis=1)
    chosen = row * out_w + col
    ax_columns.imshow(np.isin(np.arange(columns.shape[1]), [chosen])[None, :].repeat(columns.shape[0], 0), cmap="Blues", vmin=0, vmax=1.6, aspect="auto")
    for (y, x), value in np.ndenumerate(columns):
        ax_columns.text(x, y, str(value), ha="center", va="center", fontsize=MIN_LABEL_POINTS - 1)
    ax_columns.add_patch(_box(chosen - 0.5, -0.5, 1, columns.shape[0], "none", edge="tab:red", lw=2))
    ax_columns.set_title(f"im2col: {kernel * kernel} rows × {out_h * out_w} columns, one per output pixel", fontsize=9)
    for ax in (ax_image, ax_columns):
        ax.set_xticks([])
        ax.set_yticks([])
    return columns


PARALLEL_COLOUR, SEQUENTIAL_COLOUR = "tab:green", "tab:red"


def unrolled_recurrence(ax, steps: int = 5):
    """A recurrent layer unrolled over ``steps`` time steps: a cell per step, its input x_t below, its output
    h_t above, and the state (h, c) carried to the right. The input arrows (green) can all be computed at once
    (one GEMM for every step); the state arrows (red) are a chain, each step waiting for the one before.
    Returns the arrows, as {"input": [...], "state": [...]}."""
    from matplotlib.patches import FancyArrowPatch

    if steps < 2:
        raise ValueError(f"draw at least 2 steps, got {steps}")
    arrows = {"input": [], "state": []}

    def arrow(start, end, colour, kind):
        patch = FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=colour, lw=1.5)
        ax.add_patch(patch)
        arrows[kind].append(patch)

    for t in range(steps):
        x = 2.0 * t
        ax.add_patch(_box(x - 0.5, -0.4, 1.0, 0.8, "0.92"))
        ax.text(x, 0, "cell", ha="center", va="center", fontsize=9)
        ax.text(x, -1.5, f"$x_{{{t + 1}}}$", ha="center", va="center", fontsize=10)
        ax.text(x, 1.5, f"$h_{{{t + 1}}}$", ha="center", va="center", fontsize=10)
        arrow((x, -1.25), (x, -0.42), PARALLEL_COLOUR, "input")
        ax.add_patch(FancyArrowPatch((x, 0.42), (x, 1.25), arrowstyle="-|>", mutation_scale=10, color="0.4", lw=1))
        arrow((x - 1.5, 0), (x - 0.52, 0), SEQUENTIAL_COLOUR, "state")
    ax.text(-1.6, 0.25, "$h_0, c_0$", ha="right", va="bottom", fontsize=9)
    ax.text(2.0 * (steps - 1) / 2, -2.3, "input projections $W_{ih} x_t$: independent, one GEMM for all steps",
            ha="center", color=PARALLEL_COLOUR, fontsize=9)
    ax.text(2.0 * (steps - 1) / 2, 2.2, "state $(h, c)$: step t + 1 waits for step t", ha="center", color=SEQUENTIAL_COLOUR, fontsize=9)
    ax.set_xlim(-2.2, 2.0 * steps - 1.2)
    ax.set_ylim(-2.6, 2.6)
    ax.axis("off")
    return arrows


def attention_tiles(ax, blocks: int, *, causal: bool, row: int | None = None, title: str | None = None) -> dict[str, int]:
    """The tiled attention forward on a ``blocks`` × ``blocks`` grid of score tiles: query blocks down, key blocks
    across. Each tile is computed (grey), masked in part (the diagonal's, causal only: hatched) or skipped (white,
    causal only: every score in it is masked). Tiles of query block ``row`` are numbered in the order its loop visits
    them, with the running (m, l, acc) carried from one to the next. Returns the tiles counted by kind."""
    if blocks < 1 or (row is not None and not 0 <= row < blocks):
        raise ValueError(f"need blocks >= 1 and 0 <= row < blocks, got blocks={blocks}, row={row}")
    counts = {"computed": 0, "diagonal": 0, "skipped": 0}
    for i in range(blocks):
        for j in range(blocks):
            kind = "skipped" if causal and j > i else ("diagonal" if causal and j == i else "computed")
            counts[kind] += 1
            colour = {"computed": "0.8", "diagonal": "0.8", "skipped": "white"}[kind]
            ax.add_patch(_box(j, blocks - 1 - i, 1, 1, colour, hatch="////" if kind == "diagonal" else None))
    if row is not None:
        visited = [j for j in range(blocks) if not (causal and j > row)]
        y = blocks - 1 - row
        ax.add_patch(_box(0, y, len(visited), 1, "none", edge=SEQUENTIAL_COLOUR, lw=2))
        for step, j in enumerate(visited, start=1):
            ax.text(j + 0.5, y + 0.5, str(step), ha="center", va="center", fontsize=MIN_LABEL_POINTS + 1, color=SEQUENTIAL_COLOUR)
        ax.annotate("(m, l, acc) carried →", (len(visited), y + 0.5), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=MIN_LABEL_POINTS, color=SEQUENTIAL_COLOUR)
    ax.set_xlim(0, blocks + (3.2 if row is not None else 0))
    ax.set_ylim(0, blocks)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    if causal:  # the blank upper triangle has room for it
        ax.legend(handles=[Patch(facecolor="0.8", edgecolor="0.4", label="computed"),
                           Patch(facecolor="0.8", edgecolor="0.4", hatch="////", label="masked in part"),
                           Patch(facecolor="white", edgecolor="0.4", label="skipped: all masked")],
                  loc="upper right", fontsize=MIN_LABEL_POINTS, framealpha=1.0)
    ax.set_xlabel("key and value blocks →")
    ax.set_ylabel("← query blocks")
    ax.set_title(title or f"{'causal' if causal else 'full'}: {counts['computed'] + counts['diagonal']} of {blocks * blocks} tiles computed",
                 fontsize=10)
    return counts


def training_curves(ax_loss, ax_accuracy, history, *, label: str, unit: str = "epoch", total: int | None = None):
    """Loss and test accuracy per ``unit`` (an epoch, a step) from ``history``, a list of (epoch, loss, accuracy).
    ``ax_accuracy`` None: the loss alone (a language model has no accuracy to show).

    Each panel's title says what it shows and when, short enough to stay over its panel ("test accuracy 91.0% after
    epoch 3 of 20"); ``label``, where it ran, is the figure's title, once for all its panels. ``total``, the number of
    ``unit``s the run will have, is counted in the titles (as a progress bar counts it) and fixes the x axis to the
    whole run, so the curves fill the panel as the run goes. A loss may be a dict of named losses (a GAN's
    {"D": 1.3, "G": 0.8}): one curve each, with a legend, on a linear axis (two players' losses hover in a band
    instead of falling over decades); a single loss is drawn on a log axis labelled with plain numbers."""
    if not history:
        raise ValueError(f"no {unit}s to draw yet")
    epochs, losses, accuracies = zip(*history)
    when = f"after {unit} {epochs[-1]}" + ("" if total is None else f" of {total}")
    if isinstance(losses[-1], dict):
        names = list(losses[-1])
        for name in names:
            ax_loss.plot(epochs, [loss[name] for loss in losses], marker="o", markersize=3, label=name)
        ax_loss.legend(fontsize=MIN_LABEL_POINTS)
        last = ", ".join(f"{name} {losses[-1][name]:.3g}" for name in names)
    else:
        ax_loss.plot(epochs, losses, marker="o", markersize=3)
        readable_log_axis(ax_loss, "y")
        last = f"{losses[-1]:.3g}"
    ax_loss.set_ylabel("loss" if isinstance(losses[-1], dict) else "training loss")  # named curves may include a held-out one
    ax_loss.set_title(f"loss {last} {when}", fontsize=9)
    axes = [ax_loss]
    if ax_accuracy is not None:
        ax_accuracy.plot(epochs, [100 * a for a in accuracies], marker="o", markersize=3, color="tab:green")
        ax_accuracy.set_ylabel("test accuracy (%)")
        ax_accuracy.set_title(f"test accuracy {accuracies[-1]:.1%} {when}", fontsize=9)
        axes.append(ax_accuracy)
    for ax in axes:
        ax.set_xlabel(unit)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if total is not None:
            ax.set_xlim(0, total * 1.02)
    ax_loss.get_figure().suptitle(label, fontsize=9)


def _as_array(values) -> np.ndarray:
    """A NumPy copy of an array or a tensor (on any device, with or without gradients)."""
    if hasattr(values, "detach"):
        values = values.detach().cpu()
    return np.asarray(values, dtype=float)


def ring_scatter(ax, samples, centers, *, radius: float, title: str | None = None):
    """A generator's 2-D ``samples`` (n, 2) over the real modes: each of the ``centers`` (m, 2) a red cross inside a
    dashed circle of ``radius`` (the "near a mode" distance), on equal axes that stay put from one frame of a live
    figure to the next (1.5 times the ring's radius each way; samples farther out fall outside the frame).
    Returns the samples' PathCollection."""
    samples, centers = _as_array(samples), _as_array(centers)
    if samples.ndim != 2 or samples.shape[1] != 2 or centers.ndim != 2 or centers.shape[1] != 2:
        raise ValueError(f"samples and centers must be (n, 2) points, got {samples.shape} and {centers.shape}")
    from matplotlib.patches import Circle

    dots = ax.scatter(samples[:, 0], samples[:, 1], s=4, alpha=0.35, color="tab:blue", linewidths=0, label="generated")
    for x, y in centers:
        ax.add_patch(Circle((x, y), radius, fill=False, edgecolor="tab:red", linestyle="--", linewidth=1))
    ax.scatter(centers[:, 0], centers[:, 1], marker="x", s=30, color="tab:red", label="real modes")
    extent = 1.5 * float(np.hypot(centers[:, 0], centers[:, 1]).max() or 1.0)
    ax.set_xlim(-extent, extent)
    ax.set_ylim(-extent, extent)
    ax.set_aspect("equal")
    ax.tick_params(labelsize=MIN_LABEL_POINTS)
    if title is not None:
        ax.set_title(title, fontsize=9)
    return dots


def image_grid(ax, images, rows: int, cols: int, *, vmin: float = -1.0, vmax: float = 1.0, title: str | None = None):
    """The first rows × cols ``images`` tiled into one picture, dark for high values, a light blue pixel between them.

    images: (n, h, w), or (n, h·h) flat square images (module 10's 64-pixel digits are 8 × 8). ``vmin`` and
    ``vmax`` fix the grey scale (default [-1, 1], a Tanh generator's range), so grids drawn at different times
    compare. Returns the tiled (rows·(h + 1) - 1, cols·(w + 1) - 1) array, NaN in the gaps.
    """
    images = _as_array(images)
    if images.ndim == 2:
        side = int(round(images.shape[1] ** 0.5))
        if side * side != images.shape[1]:
            raise ValueError(f"flat images must be square, got {images.shape[1]} pixels each")
        images = images.reshape(len(images), side, side)
    if images.ndim != 3:
        raise ValueError(f"images must be (n, h, w) or (n, h·w), got shape {images.shape}")
    if len(images) < rows * cols:
        raise ValueError(f"a {rows} × {cols} grid needs {rows * cols} images, got {len(images)}")
    _, height, width = images.shape
    tiled = np.full((rows * (height + 1) - 1, cols * (width + 1) - 1), np.nan)
    for index in range(rows * cols):
        row, col = divmod(index, cols)
        tiled[row * (height + 1):row * (height + 1) + height, col * (width + 1):col * (width + 1) + width] = images[index]
    cmap = _grey_with_gaps()
    ax.imshow(tiled, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.axis("off")
    if title is not None:
        ax.set_title(title, fontsize=9)
    return tiled


GRID_GAP_COLOUR = "#cfe2f3"  # light blue: neither a pixel value nor the white of a digit's background


def _grey_with_gaps():
    import matplotlib

    return matplotlib.colormaps["gray_r"].with_extremes(bad=GRID_GAP_COLOUR)
