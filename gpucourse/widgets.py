"""Interactive front ends (ipywidgets) over the models in :mod:`gpucourse.sim`.

Thin on purpose: every number comes from ``sim``, every figure from ``plots``; a widget only
wires controls to them, so what a student sees is what the tests check.
"""

from __future__ import annotations

import html

from . import gpu_specs, plots, sim


def occupancy_report(gpu: str, threads_per_block: int, registers_per_thread: int, shared_mem_per_block: int) -> str:
    """The calculator's text: the result and how many blocks each limit alone would allow."""
    result = sim.occupancy(gpu, threads_per_block, registers_per_thread, shared_mem_per_block)
    limits = "\n".join(f"  {name.replace('_', ' '):<14} {count:>3} blocks" for name, count in result.blocks_by.items())
    return f"{result.describe()}\nEach limit on its own allows:\n{limits}"


def occupancy_calculator(gpu: str = "T4", threads_per_block: int = 256, registers_per_thread: int = 32,
                         shared_mem_per_block: int = 0):
    """An occupancy calculator: pick a GPU and a launch, see blocks/SM, warps, occupancy,
    the limiting resource, and occupancy against block size for the same kernel."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    choices = list(gpu_specs.GPUS) + list(gpu_specs.SM_LIMITS)  # cards, then compute capabilities
    controls = {
        "gpu": widgets.Dropdown(options=choices, value=gpu, description="GPU"),
        "threads_per_block": widgets.IntSlider(value=threads_per_block, min=32, max=1024, step=32, description="threads/block"),
        "registers_per_thread": widgets.IntSlider(value=registers_per_thread, min=0, max=255, description="registers/thread"),
        "shared_mem_per_block": widgets.IntSlider(value=shared_mem_per_block, min=0, max=96 * 1024, step=512,
                                                  description="shared B/block"),
    }
    style = {"description_width": "120px"}
    for control in controls.values():
        control.style = style
    report = widgets.HTML()
    figure = widgets.Output()

    def redraw(_change=None):
        values = {name: control.value for name, control in controls.items()}
        limits = gpu_specs.sm_limits(values["gpu"])
        controls["shared_mem_per_block"].max = limits.max_shared_mem_per_block
        values["shared_mem_per_block"] = controls["shared_mem_per_block"].value
        report.value = f"<pre>{html.escape(occupancy_report(**values))}</pre>"
        figure.clear_output(wait=True)
        with figure:
            curve = sim.occupancy_by_block_size(values["gpu"], values["registers_per_thread"], values["shared_mem_per_block"])
            fig, ax = plt.subplots(figsize=(7, 3.2))
            plots.occupancy_by_block_size(ax, curve, current=values["threads_per_block"])
            display(_png(fig))  # a PNG whatever matplotlib's backend: plt.show() draws nothing under Agg
            plt.close(fig)

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([controls["gpu"], controls["threads_per_block"]]),
                         widgets.HBox([controls["registers_per_thread"], controls["shared_mem_per_block"]]), report, figure])


def _png(fig):
    import io

    from IPython.display import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return Image(data=buffer.getvalue(), format="png")
