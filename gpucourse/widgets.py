"""Interactive front ends (ipywidgets) over the models in :mod:`gpucourse.sim`.

Thin on purpose: every number comes from ``sim``, every figure from ``plots``; a widget only
wires controls to them, so what a student sees is what the tests check.
"""

from __future__ import annotations

import html

from . import gpu_specs, plots, sim


def _explorer(controls: dict, draw, rows):
    """Controls, a text report and a figure: ``draw(values, ax)`` returns the report text and
    draws on ``ax``; both are redone whenever a control changes."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    for control in controls.values():
        control.style = {"description_width": "120px"}
    report, figure = widgets.HTML(), widgets.Output()

    def redraw(_change=None):
        values = {name: control.value for name, control in controls.items()}
        fig, ax = plt.subplots(figsize=(8, 3.2))
        try:
            text = draw(values, ax)
        except (ValueError, KeyError, SyntaxError, NameError, TypeError) as error:
            text = f"cannot draw this: {error}"
        report.value = f"<pre>{html.escape(text)}</pre>"
        _show_in(figure, fig)

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([controls[name] for name in row]) for row in rows] + [report, figure])


def occupancy_report(gpu: str, threads_per_block: int, registers_per_thread: int, shared_mem_per_block: int) -> str:
    """The calculator's text: the result and how many blocks each limit alone would allow."""
    result = sim.occupancy(gpu, threads_per_block, registers_per_thread, shared_mem_per_block)
    limits = "\n".join(f"  {name.replace('_', ' '):<14} {count:>3} blocks" for name, count in result.blocks_by.items())
    return f"{result.describe()}\nEach limit on its own allows:\n{limits}"


def occupancy_calculator(gpu: str | None = None, threads_per_block: int = 256, registers_per_thread: int | None = None,
                         shared_mem_per_block: int | None = None, report=None):
    """An occupancy calculator: pick a GPU and a launch, see blocks/SM, warps, occupancy,
    the limiting resource, and occupancy against block size for the same kernel.

    report: a compiled kernel (a :class:`gpucourse.compiler.CompileReport`) starts the calculator
    at its registers per thread, its shared memory per block and the GPU it was compiled for;
    arguments given explicitly win. Without one: a T4, 32 registers, no shared memory.
    """
    import ipywidgets as widgets

    preset = _compiled_preset(report)
    gpu = gpu or preset.get("gpu", "T4")
    registers_per_thread = preset.get("registers", 32) if registers_per_thread is None else registers_per_thread
    shared_mem_per_block = preset.get("shared_bytes", 0) if shared_mem_per_block is None else shared_mem_per_block

    controls = {
        "gpu": widgets.Dropdown(options=list(gpu_specs.GPUS) + list(gpu_specs.SM_LIMITS), value=gpu, description="GPU"),
        "threads_per_block": widgets.IntSlider(value=threads_per_block, min=32, max=1024, step=32, description="threads/block"),
        "registers_per_thread": widgets.IntSlider(value=registers_per_thread, min=0, max=255, description="registers/thread"),
        "shared_mem_per_block": widgets.IntSlider(value=shared_mem_per_block, min=0, max=227 * 1024, step=512,
                                                  description="shared B/block"),
    }

    def draw(values, ax):
        controls["shared_mem_per_block"].max = gpu_specs.sm_limits(values["gpu"]).max_shared_mem_per_block
        values["shared_mem_per_block"] = controls["shared_mem_per_block"].value
        curve = sim.occupancy_by_block_size(values["gpu"], values["registers_per_thread"], values["shared_mem_per_block"])
        plots.occupancy_by_block_size(ax, curve, current=values["threads_per_block"])
        return occupancy_report(**values)

    return _explorer(controls, draw, [("gpu", "threads_per_block"), ("registers_per_thread", "shared_mem_per_block")])


def _compiled_preset(report) -> dict:
    """The GPU, registers and shared bytes of a compiled kernel's report; {} for None.

    Only the GPU a card of gpu_specs names is kept (the dropdown offers no other).
    """
    if report is None:
        return {}
    preset = {"registers": int(report.registers), "shared_bytes": int(report.shared_bytes)}
    card = getattr(report, "gpu", None)
    if card in gpu_specs.GPUS:
        preset["gpu"] = card
    return preset


def _counted(count: int, noun: str) -> str:
    """"1 line", "4 lines"."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def coalescing_report(stride: int, offset: int, element_bytes: int, active_lanes: int) -> str:
    addresses = sim.warp_addresses(stride, offset, element_bytes, range(active_lanes))
    return (f"lane k reads element {offset} + {stride}·k ({element_bytes} B each), {_counted(active_lanes, 'lane')} active:\n"
            f"  {_counted(sim.sectors_per_request(addresses, element_bytes), 'sector')} of 32 B, "
            f"{_counted(sim.lines_per_request(addresses, element_bytes), 'line')} of 128 B, "
            f"{sim.load_efficiency(addresses, element_bytes):.0%} of the moved bytes used (modelled)")


def coalescing_explorer(stride: int = 1, offset: int = 0, element_bytes: int = 4, active_lanes: int = 32):
    """Pick a stride, an offset, an element size and how many lanes are active; see the warp's
    lanes mapped onto 32-byte sectors and the efficiency of the request."""
    import ipywidgets as widgets

    controls = {
        "stride": widgets.IntSlider(value=stride, min=0, max=64, description="stride (elements)"),
        "offset": widgets.IntSlider(value=offset, min=0, max=64, description="offset (elements)"),
        "element_bytes": widgets.Dropdown(options=[1, 2, 4, 8, 16], value=element_bytes, description="element bytes"),
        "active_lanes": widgets.IntSlider(value=active_lanes, min=1, max=32, description="active lanes"),
    }

    def draw(values, ax):
        addresses = sim.warp_addresses(values["stride"], values["offset"], values["element_bytes"], range(values["active_lanes"]))
        plots.warp_sectors(ax, addresses, bytes_per_lane=values["element_bytes"])
        return coalescing_report(**values)

    return _explorer(controls, draw, [("stride", "offset"), ("element_bytes", "active_lanes")])


def branch_paths(condition: str, warp: int = 0, warp_size: int = 32) -> list[str]:
    """The path ("if" or "else") each lane of ``warp`` takes for a condition over ``lane``,
    ``warp`` and ``tid`` (the thread's index in the block), e.g. ``"lane % 2 == 0"``."""
    code = compile(condition, "<branch condition>", "eval")
    allowed = {"lane", "warp", "tid"}
    unknown = set(code.co_names) - allowed
    if unknown:
        raise NameError(f"the condition may use {', '.join(sorted(allowed))}, not {', '.join(sorted(unknown))}")
    return ["if" if eval(code, {"__builtins__": {}}, {"lane": lane, "warp": warp, "tid": warp * warp_size + lane})  # noqa: S307
            else "else" for lane in range(warp_size)]


def divergence_report(condition: str, warp: int, if_cost: int, else_cost: int) -> str:
    paths = branch_paths(condition, warp)
    cost = {"if": if_cost, "else": else_cost}
    masks = sim.active_masks(paths)
    lines = [f"warp {warp}, branch `if {condition}`:"]
    lines += [f"  {path:<4} mask {mask:032b} ({bin(mask).count('1')} lanes)" for path, mask in masks.items()]
    lines.append(f"  {sim.warp_cycles(paths, cost)} cycles (uniform warp: {max(cost[p] for p in masks)}), "
                 f"SIMT efficiency {sim.simt_efficiency(paths, cost):.0%} (modelled)")
    return "\n".join(lines)


def divergence_explorer(condition: str = "lane % 2 == 0", warp: int = 0, if_cost: int = 10, else_cost: int = 10):
    """Type a branch condition over ``lane``, ``warp`` and ``tid``; see each path's active
    mask, what the warp pays in cycles and its SIMT efficiency."""
    import ipywidgets as widgets

    controls = {
        "condition": widgets.Text(value=condition, description="if condition", continuous_update=False),
        "warp": widgets.IntSlider(value=warp, min=0, max=31, description="warp"),
        "if_cost": widgets.IntSlider(value=if_cost, min=0, max=50, description="cycles of if"),
        "else_cost": widgets.IntSlider(value=else_cost, min=0, max=50, description="cycles of else"),
    }

    def draw(values, ax):
        paths = branch_paths(values["condition"], values["warp"])
        plots.active_masks(ax, paths, {"if": values["if_cost"], "else": values["else_cost"]})
        return divergence_report(**values)

    return _explorer(controls, draw, [("condition", "warp"), ("if_cost", "else_cost")])


MB = 10**6  # decimal, like the link bandwidths in gpu_specs


def pipeline_schedule(n_chunks: int, *, gpu: str = "T4", copy_engines: int = 2, order: str = "breadth", pinned: bool = True,
                      megabytes: float = 16.0, kernel_ms: float = 1.0, n_streams: int | None = None, queues: str = "hyper-q"):
    """The chunked copy-in → kernel → copy-out pipeline the stream-timeline widget shows, as a model
    :class:`~gpucourse.sim.streams.Schedule` (:func:`gpucourse.sim.streams.pipeline`): ``n_chunks`` chunks of
    ``megabytes`` each way over ``gpu``'s host link, a kernel of ``kernel_ms`` per chunk, chunk i on stream
    i % ``n_streams`` (one stream per chunk when None); ``queues`` "hyper-q" (8 hardware queues, every card in
    ``gpu_specs``) or "per-engine" (one queue per engine, cards before Hyper-Q)."""
    from .sim import streams

    copy_seconds = streams.Schedule(link_bandwidth=gpu_specs.gpu(gpu).host_link_bandwidth).copy_seconds(round(megabytes * MB))
    return streams.pipeline(n_chunks, copy_seconds, kernel_ms * 1e-3, copy_seconds, copy_engines=copy_engines, order=order,
                            pinned=pinned, streams=n_streams, queues=queues)


QUEUES = {"hyper-q": "Hyper-Q: 8 hardware queues", "per-engine": "one queue per engine (before Hyper-Q)"}


def stream_timeline_report(n_chunks: int, copy_engines: int, order: str, memory: str, gpu: str, megabytes: float,
                           kernel_ms: float, n_streams: int = 16, queues: str = "hyper-q") -> tuple[str, object]:
    """The stream-timeline widget's text and the timeline it draws (all modelled for ``gpu``).

    Chunk i goes on stream i % ``n_streams``, so more streams than chunks leave the extra ones empty: the text
    counts the streams that get work. Besides the makespan, the ideal bound and the speedup over the job in one
    piece, it compares the other issue order on the same streams and queues, the same issue order with the other
    kind of hardware queues, and says what the first kernel waits for (:mod:`gpucourse.stream_text`, from the
    timelines).
    """
    from . import stream_text
    from .sim.streams import DEFAULT_CONNECTIONS

    options = {"gpu": gpu, "copy_engines": copy_engines, "pinned": memory == "pinned", "n_streams": min(n_streams, n_chunks)}
    size = {"megabytes": megabytes, "kernel_ms": kernel_ms}
    timeline = pipeline_schedule(n_chunks, order=order, queues=queues, **size, **options).simulate()
    other = "depth" if order == "breadth" else "breadth"
    other_order = pipeline_schedule(n_chunks, order=other, queues=queues, **size, **options).simulate()
    other_queues = "per-engine" if queues == "hyper-q" else "hyper-q"
    other_hardware = pipeline_schedule(n_chunks, order=order, queues=other_queues, **size, **options).simulate()
    # The same work in one piece: every byte copied in, then one kernel over all of it, then copied back.
    serial = pipeline_schedule(1, megabytes=megabytes * n_chunks, kernel_ms=kernel_ms * n_chunks, order=order, queues=queues,
                               **{**options, "n_streams": None}).simulate()
    busiest = max(timeline.engine_busy, key=timeline.engine_busy.get)
    spec = gpu_specs.gpu(gpu)
    races = "none" if not timeline.races else "; ".join(str(race) for race in timeline.races)
    lanes = options["n_streams"]
    explained = [stream_text.compare(f"{order}-first issue", timeline.makespan, f"{other}-first issue on the same streams", other_order.makespan),
                 stream_text.compare(QUEUES[queues], timeline.makespan, QUEUES[other_queues], other_hardware.makespan),
                 stream_text.first_kernel_wait(timeline, connections=DEFAULT_CONNECTIONS if queues == "hyper-q" else None)]
    return (f"{_counted(n_chunks, 'chunk')} of {megabytes:g} MB on {_counted(lanes, 'stream')}, {memory} host memory, {order}-first issue, "
            f"{_counted(copy_engines, 'copy engine')},\n  {QUEUES[queues]}, {gpu} ({spec.host_link}, {spec.host_link_bandwidth / 1e9:g} GB/s)\n"
            f"  makespan             {timeline.makespan * 1e3:8.3f} ms\n"
            f"  ideal bound          {timeline.ideal_seconds * 1e3:8.3f} ms (the busiest engine: {busiest})\n"
            f"  one chunk serialised {serial.makespan * 1e3:8.3f} ms: speedup {serial.makespan / timeline.makespan:.2f}×\n"
            f"  races: {races}\n"
            + "".join(_wrapped(line) for line in explained)
            + f"all modelled for {gpu}, not measured"), timeline


def _wrapped(sentence: str, width: int = 110) -> str:
    """A sentence as indented report lines of at most ``width`` characters."""
    import textwrap

    return "\n".join(textwrap.wrap(sentence, width, initial_indent="  ", subsequent_indent="    ")) + "\n"


def stream_timeline(n_chunks: int = 4, copy_engines: int = 2, order: str = "breadth", memory: str = "pinned", gpu: str = "T4",
                    megabytes: float = 16.0, kernel_ms: float = 1.0, n_streams: int = 16, queues: str = "hyper-q"):
    """Chunk a copy-in → kernel → copy-out job over streams: pick the chunk count, the streams (chunk i
    on stream i % streams; as many as chunks at most), the copy engines, the hardware queues (Hyper-Q or one
    per engine, as before Hyper-Q), the issue order, pinned or pageable memory, the GPU, the chunk size and the
    kernel time; see the modelled timeline, its makespan, the ideal bound and the speedup over doing it in one piece.

    The streams slider never goes past the chunk count (its maximum follows the chunks slider), so the
    number it shows is the number of streams the report counts and the timeline uses.
    """
    import ipywidgets as widgets

    controls = {
        "n_chunks": widgets.IntSlider(value=n_chunks, min=1, max=16, description="chunks"),
        "n_streams": widgets.IntSlider(value=min(n_streams, n_chunks), min=1, max=n_chunks, description="streams"),
        "copy_engines": widgets.Dropdown(options=[1, 2], value=copy_engines, description="copy engines"),
        "queues": widgets.Dropdown(options=list(QUEUES), value=queues, description="hardware queues"),
        "order": widgets.Dropdown(options=["breadth", "depth"], value=order, description="issue order"),
        "memory": widgets.Dropdown(options=["pinned", "pageable"], value=memory, description="host memory"),
        "gpu": widgets.Dropdown(options=list(gpu_specs.GPUS), value=gpu, description="GPU"),
        "megabytes": widgets.FloatLogSlider(value=megabytes, base=2, min=-2, max=8, step=0.5, description="MB per chunk"),
        "kernel_ms": widgets.FloatLogSlider(value=kernel_ms, base=10, min=-2, max=1.5, step=0.1, description="kernel ms/chunk"),
    }

    def draw(values, ax):
        controls["n_streams"].max = values["n_chunks"]  # lowering the maximum lowers a larger value with it
        values["n_streams"] = controls["n_streams"].value
        text, timeline = stream_timeline_report(**values)
        plots.timeline(ax, timeline, label=f"modelled for {values['gpu']}")
        ax.get_figure().tight_layout()  # the layout the timeline placed its names for
        return text

    return _explorer(controls, draw, [("n_chunks", "n_streams", "copy_engines"), ("queues", "order", "memory"), ("gpu", "megabytes", "kernel_ms")])


def _show_in(output, fig) -> None:
    """Replace what the ``Output`` widget shows with ``fig``, then close the figure."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    output.clear_output(wait=True)
    with output:
        display(_png(fig))  # a PNG whatever matplotlib's backend: plt.show() draws nothing under Agg
    plt.close(fig)


def _png(fig):
    import io

    from IPython.display import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return Image(data=buffer.getvalue(), format="png")


class TrainingMonitor:
    """A progress bar and a live figure of loss and test accuracy for a training loop in a notebook.

    ``monitor = TrainingMonitor(epochs, label="measured on ...")``, then ``monitor.update(epoch, loss, accuracy)``
    after each epoch: the figure (``plots.training_curves``) is redrawn in place, then the bar advances, so both
    count the same epoch ("epoch 9/20" on the bar, "after epoch 9 of 20" over the figure) whenever one looks.
    The bar's label gets the width it needs ("step 2000/2000" is not cut).
    ``unit="step"`` counts steps instead; ``update(step, loss, sample=text)`` without an accuracy draws the loss
    alone and shows ``text`` under it (module 09's language model prints what it writes as it learns).
    A loss may be a dict of named losses, one curve each (a GAN's ``{"D": 1.3, "G": 0.8}``), and
    ``extra=draw`` adds a panel beside the curves that ``draw(ax)`` redraws at every update (module 10 draws
    the generator's samples there).
    """

    def __init__(self, epochs: int, *, label: str, unit: str = "epoch", extra=None):
        import ipywidgets as widgets
        from IPython.display import display

        if epochs < 1:
            raise ValueError(f"{unit}s must be at least 1, got {epochs}")
        self.epochs, self.label, self.unit, self.extra, self.history = epochs, label, unit, extra, []
        self.bar = widgets.IntProgress(value=0, min=0, max=epochs, description=f"{unit} 0/{epochs}", style={"description_width": "initial"})
        self.figure = widgets.Output()
        self.sample = widgets.HTML()
        display(widgets.VBox([self.bar, self.figure, self.sample]))

    def update(self, epoch: int, loss: float | dict, accuracy: float | None = None, *, sample: str | None = None) -> None:
        import html

        import matplotlib.pyplot as plt

        loss = {name: float(value) for name, value in loss.items()} if isinstance(loss, dict) else float(loss)
        self.history.append((epoch, loss, None if accuracy is None else float(accuracy)))
        with_accuracy = accuracy is not None
        curves = 2 if with_accuracy else 1
        # Constrained layout keeps each panel's labels clear of its neighbour's ticks and the figure's title.
        if self.extra is None:
            fig, axes = plt.subplots(1, curves, figsize=(8 if with_accuracy else 5, 2.8), squeeze=False, layout="constrained")
        else:  # the extra panel is square, as tall as the curves; each curve's panel is wide enough for its title
            fig, axes = plt.subplots(1, curves + 1, figsize=(9.6, 3.2), squeeze=False, layout="constrained",
                                     gridspec_kw={"width_ratios": [1.9] * curves + [1]})
        plots.training_curves(axes[0][0], axes[0][1] if with_accuracy else None, self.history, label=self.label, unit=self.unit,
                              total=self.epochs)
        if self.extra is not None:
            self.extra(axes[0][-1])
        if sample is not None:
            self.sample.value = f"<pre style='white-space: pre-wrap'>{html.escape(sample)}</pre>"
        self._show(fig)
        self.bar.value, self.bar.description = min(epoch, self.epochs), f"{self.unit} {epoch}/{self.epochs}"

    def _show(self, fig) -> None:
        """``fig`` as a PNG in the figure's box, drawn once: constrained layout already fits it, so no tight-bbox pass
        (which draws the figure a second time, half of each update's cost)."""
        import io

        import matplotlib.pyplot as plt
        from IPython.display import Image, display

        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=96)
        plt.close(fig)
        self.figure.clear_output(wait=True)
        with self.figure:
            display(Image(data=buffer.getvalue(), format="png"))
