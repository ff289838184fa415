"""Every GPU speed threshold is reachable on every card in gpu_specs, by the model in gpucourse.thresholds,
and the notebooks say that the threshold is modelled for those cards, not yet measured."""

from __future__ import annotations

import ast

import nbformat
import numpy as np
import pytest

from gpucourse import gpu_specs, thresholds
from tests.course_helpers import ASSIGNMENTS, source

CARDS = list(gpu_specs.GPUS.values())


def speed_cells():
    """(assignment, cells, index) of every graded cell that sets SPEEDUP_NEEDED."""
    for assignment in ASSIGNMENTS:
        cells = nbformat.read(source(assignment), as_version=4).cells
        for index, cell in enumerate(cells):
            if cell.cell_type == "code" and "SPEEDUP_NEEDED = {" in cell.source:
                yield assignment, cells, index


def grade_id(cell) -> str:
    return cell.metadata["nbgrader"]["grade_id"]


def speedup_needed(cell) -> dict:
    [line] = [line for line in cell.source.splitlines() if line.startswith("SPEEDUP_NEEDED = {")]
    return ast.literal_eval(line.split("=", 1)[1].split("#")[0].strip())


def gpu_speed_items() -> dict:
    """grade id -> (assignment, cells, index) of the items whose GPU threshold is a GPU's own: numpy items
    give both device classes the CPU's threshold, since they run on the CPU either way."""
    items = {}
    for assignment, cells, index in speed_cells():
        needed = speedup_needed(cells[index])
        if "cuda" in needed and needed["cuda"] != needed.get("cpu"):
            items[grade_id(cells[index])] = (assignment, cells, index)
    return items


GPU_ITEMS = gpu_speed_items()


def gpu_steps(cells) -> int:
    """04's EXPENSIVE_STEPS on a GPU, from its locked cell: the literal, or the value after `else`."""
    [line] = [line for cell in cells for line in cell.source.splitlines() if line.startswith("EXPENSIVE_STEPS =")]
    return int(line.split("=", 1)[1].split("else")[-1].split("#")[0])


def test_every_gpu_speed_item_has_a_model():
    """The GPU speed items of the notebooks are exactly the modelled ones."""
    assert sorted(GPU_ITEMS) == sorted(thresholds.ITEMS), (
        f"GPU speed items in the notebooks: {sorted(GPU_ITEMS)}; modelled in gpucourse.thresholds: {sorted(thresholds.ITEMS)}"
    )


@pytest.mark.parametrize("card", CARDS, ids=lambda card: card.name)
@pytest.mark.parametrize("item", sorted(thresholds.ITEMS))
def test_threshold_reachable_on_every_card(item, card):
    """The modelled speedup of the reference clears the notebook's GPU threshold by SAFETY_MARGIN on this card."""
    _, cells, index = GPU_ITEMS[item]
    needed = speedup_needed(cells[index])["cuda"]
    sizes = {"steps": gpu_steps(cells)} if item == "test_uniform_speed" else {}
    model = thresholds.ITEMS[item](card, **sizes)
    assert model.speedup >= needed * thresholds.SAFETY_MARGIN, (
        f"{item} on the {card.name}: modelled {model.speedup:.2f}× ({model.candidate_bound}-bound), "
        f"need {needed}× × margin {thresholds.SAFETY_MARGIN} = {needed * thresholds.SAFETY_MARGIN:.2f}×"
    )


# The sizes each notebook times, as the model's defaults write them in the notebook's source.
TIMED_SIZES = {
    "test_pairwise_speed": ("torch.randn(200, 4, device=DEVICE), torch.randn(150, 4, device=DEVICE)",),
    "test_launch_speed": ("N = 1 << 20",),
    "test_transpose_speed": ("torch.randn(4096, 4096",),
    "test_uniform_speed": ("torch.randn(1 << 24",),
    "test_overlap_speed": ("[torch.randn(1 << 22).pin_memory() for _ in range(8)]",),
    "test_fused_tail_speed": ("tail_inputs(4096, 1024)",),
    "test_triton_speed": ('torch.randn(4096, 4096, device="cuda"), torch.randn(4096, device="cuda")',),
    "test_batched_matmuls_speed": ("matmul_inputs(512, 16, 16, 16)",),
    "test_triton_matmul_speed": ("half_inputs(4096)",),
    "test_fast_train_step_speed": ("step_batch(8192, seed=",),
    "test_lstm_fast_gpu_speed": ("lstm_inputs(64, 64, 256, 256, device=DEVICE)",),
    "test_fast_train_loop_gpu_speed": ("loop_batch(8192, seed=1)",),
    "test_flash_kernel_speed": ("flash_heads(16384, 64)",),
}
MODEL_SIZES = {
    "test_pairwise_speed": dict(n=200, m=150, d=4),
    "test_launch_speed": dict(n=1 << 20),
    "test_overlap_speed": dict(chunks=8, elements=1 << 22),
    "test_transpose_speed": dict(side=4096),
    "test_uniform_speed": dict(n=1 << 24, steps=1024),
    "test_fused_tail_speed": dict(m=4096, n=1024),
    "test_triton_speed": dict(m=4096, n=4096),
    "test_batched_matmuls_speed": dict(batch=512, side=16),
    "test_triton_matmul_speed": dict(n=4096),
    "test_fast_train_step_speed": dict(batch=8192, steps=10),
    "test_lstm_fast_gpu_speed": dict(steps=64, batch=64, inputs=256, hidden=256),
    "test_fast_train_loop_gpu_speed": dict(batch=8192, steps=10),
    "test_flash_kernel_speed": dict(n=16384, d=64),
}


@pytest.mark.parametrize("item", sorted(thresholds.ITEMS))
def test_model_times_the_notebook_sizes(item):
    """The model's default sizes are the ones the notebook's speed cell times."""
    _, cells, index = GPU_ITEMS[item]
    for snippet in TIMED_SIZES[item]:
        assert snippet in cells[index].source, f"{item}: expected the speed cell to time {snippet!r}; update the model or the table"
    card = gpu_specs.gpu("T4")
    assert thresholds.ITEMS[item](card) == thresholds.ITEMS[item](card, **MODEL_SIZES[item]), f"{item}: the model's defaults moved"


def test_uniform_item_runs_the_modelled_steps_on_a_gpu():
    """04's expensive path runs the model's 1024 steps on a GPU (8 in the simulator, for speed)."""
    _, cells, _ = GPU_ITEMS["test_uniform_speed"]
    locked = "\n".join(cell.source for cell in cells if "EXPENSIVE_STEPS =" in cell.source)
    assert "EXPENSIVE_STEPS = 8 if kernels.simulator_active() else 1024" in locked, f"expected 8 steps simulated and 1024 on a GPU, got:\n{locked}"
    assert gpu_steps(cells) == MODEL_SIZES["test_uniform_speed"]["steps"] == 1024


def test_eight_steps_were_memory_bound_everywhere():
    """Why 04 changed: with 8 steps both kernels are memory-bound on every card, and the 1.3× was out of reach."""
    for card in CARDS:
        eight = thresholds.uniform_speed(card, steps=8)
        assert eight.candidate_bound == "memory" and eight.speedup < 1.01, f"{card.name}: {eight}"
    assert thresholds.uniform_speed(gpu_specs.gpu("L4"), steps=256).speedup < 1.01  # lecture 04's 256 would not do on an L4


def test_a_batch_of_2048_was_launch_bound_on_hopper():
    """Why 08 times 8192 images: at 2048 autocast's casts make the sync-free step launch-bound on an H100 or H200,
    where the plain step's one sync a step costs a single idle launch, and the 1.3× was out of reach."""
    for name in ("H100", "H200"):
        small = thresholds.train_step_speed(gpu_specs.gpu(name), batch=2048)
        assert small.candidate_bound == "launches" and small.speedup < 1.3 * thresholds.SAFETY_MARGIN, f"{name}: {small}"
    assert all(model.candidate_bound == "memory" for model in thresholds.models("test_fast_train_step_speed"))


def test_the_expensive_map_does_not_settle():
    """1024 float32 steps of v * 0.999 + 1 keep distinct inputs distinct; v * 0.5 + 1 sends them all to 2.0."""
    x = np.linspace(-3, 3, 1001, dtype=np.float32)
    decayed, halved = x.copy(), x.copy()
    for _ in range(1024):
        decayed = decayed * np.float32(0.999) + np.float32(1.0)
        halved = halved * np.float32(0.5) + np.float32(1.0)
    assert decayed.dtype == np.float32 and len(np.unique(decayed)) > 900, f"only {len(np.unique(decayed))} distinct outputs of 1001"
    assert np.all(halved == 2.0), "v * 0.5 + 1 was expected to settle at 2.0"


@pytest.mark.parametrize("item", sorted(thresholds.ITEMS))
def test_notebook_says_the_threshold_is_modelled(item):
    """The speed cell prints the model per card and says it is not yet measured; its prompt says the same and names every card."""
    _, cells, index = GPU_ITEMS[item]
    cell = cells[index]
    prompt = next(c.source for c in reversed(cells[:index]) if c.cell_type == "markdown")
    # Given all of SPEEDUP_NEEDED, the line says which threshold this machine's check uses.
    whole = f'thresholds.describe("{item}", SPEEDUP_NEEDED)'
    assert whole in cell.source, f"{item}: the cell should print {whole}"
    for text, what in ((cell.source, "speed cell"), (prompt, "prompt above it")):
        for phrase in ("modelled, not yet measured", "scripts/gpu_check.sh"):
            assert phrase.lower() in text.lower(), f"{item}: the {what} should say {phrase!r}"
    missing = [card.name for card in CARDS if card.name not in prompt]
    assert not missing, f"{item}: the prompt should name every card the threshold is modelled for; missing {missing}"
    needed = speedup_needed(cell)["cuda"]
    assert f"{needed:g}×" in prompt, f"{item}: the prompt should state the GPU threshold {needed:g}×"


def test_describe_names_every_card_and_the_threshold():
    """describe() gives the threshold this machine's check uses and one modelled speedup per card."""
    line = thresholds.describe("test_transpose_speed", {"cuda": 1.5})
    assert line.startswith("On this machine (") and "1.5×" in line and "modelled (not yet measured) for V100, T4, A100, L4, H100, H200: " in line
    assert all(f"{card.name} " in line for card in CARDS) and line.count("-bound") == len(CARDS)


@pytest.mark.parametrize("needed, here, device, starts", [
    ({"cpu": 4.0, "cuda": 10.0}, "cpu", None, "On this machine (no GPU: device class 'cpu') the check needs 4×. On a GPU it needs 10×, modelled"),
    ({"cuda": 1.5}, "cpu", None, "On this machine (no GPU: device class 'cpu') the speed is not timed: a grader with a GPU times it. "
                                 "On a GPU the check needs 1.5×, modelled"),
    (1.5, "cpu", None, "On this machine (no GPU: device class 'cpu') the speed is not timed"),  # the GPU's threshold alone
    ({"cpu": 4.0, "cuda": 1.5}, "cuda", "NVIDIA H100 80GB HBM3", "On this machine (NVIDIA H100 80GB HBM3, the table's H100: modelled 4.11× there) "
                                                                 "the check needs 1.5×; modelled"),
    ({"cuda": 1.5}, "cuda", "NVIDIA L40S", "On this machine (NVIDIA L40S, not one of the modelled cards) the check needs 1.5×; modelled"),
])
def test_the_line_says_which_threshold_this_machine_uses(needed, here, device, starts):
    """Each machine: the threshold its check uses (check.required_speedup's), the card it is modelled as, or why it is not timed."""
    line = thresholds.target_text("test_transpose_speed", needed, here, device)
    assert line.startswith(starts), line
    assert line.endswith("scripts/gpu_check.sh calibrates it on the first GPU run.") and line.count("-bound") == len(CARDS)
    with pytest.raises(KeyError, match="no speed model for 'test_nothing'"):
        thresholds.models("test_nothing")


def test_model_pieces():
    """The pieces, exactly: a naive transpose's stores take 32 sectors per warp request, a coalesced one 4;
    one thread pays 30 + 400 · 4 / 32 cycles per element; the bound names what is largest."""
    requests = 64 * 64 // 32
    assert thresholds.transpose_sectors(64, coalesced_stores=False) == requests * (4 + 32)
    assert thresholds.transpose_sectors(64, coalesced_stores=True) == requests * (4 + 4)
    assert thresholds.serial_cycles_per_element() == 80.0
    t4 = gpu_specs.gpu("T4")
    assert thresholds.kernel_seconds(t4, nbytes=0, launches=1) == (gpu_specs.LAUNCH_OVERHEAD_SECONDS, "launches")
    seconds, bound = thresholds.kernel_seconds(t4, nbytes=320e9, flops=1.0, launches=0)
    assert (seconds, bound) == (1.0, "memory")
    seconds, bound = thresholds.kernel_seconds(t4, nbytes=1.0, flops=8.1e12, launches=0)
    assert (seconds, bound) == (1.0, "compute")
