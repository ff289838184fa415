"""On a GPU: the stream model's pipeline makespans against real streams, for scripts/gpu_check.sh's report.

For k = 1, 2, 4, 8 chunks of the same total data, a chunked copy-in → kernel → copy-out pipeline
runs on real CUDA streams (one per chunk, breadth-first, pinned host memory), timed with CUDA
events; the model (gpucourse.sim.streams) predicts it from the card's reported link and memory
bandwidths (gpucourse.gpu_specs). Printed: measured ms, modelled ms and the relative error per k,
and the card's copy engines as CUDA reports them (asyncEngineCount), which gpu_specs does not cite.
"""

from __future__ import annotations

import sys

import torch

from gpucourse import gpu_specs, streams, thresholds

TOTAL_ELEMENTS = 1 << 26  # 256 MB of float32, split into k chunks


def measured_ms(chunks: list[torch.Tensor]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    lanes = [streams.Stream() for _ in chunks]
    on_device = [streams.to_device(chunk, stream=lane) for chunk, lane in zip(chunks, lanes)]
    computed = [streams.launch(torch.sin, x, stream=lane) for x, lane in zip(on_device, lanes)]
    for y, lane in zip(computed, lanes):
        streams.to_host(y, stream=lane)
    for lane in lanes:
        torch.cuda.current_stream().wait_stream(lane.handle)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def modelled_ms(card: gpu_specs.GPUSpec, k: int) -> float:
    return thresholds.pipelined_map_seconds(card, k, TOTAL_ELEMENTS // k) * 1e3


def main() -> int:
    if not torch.cuda.is_available():
        print("no GPU: nothing to compare")
        return 0
    name = torch.cuda.get_device_name()
    card = gpu_specs.card_for(name)
    if card is None:
        print(f"{name} is not in gpu_specs: no model to compare with")
        return 0
    try:
        from numba import cuda

        print(f"{name}: asyncEngineCount {cuda.get_current_device().ASYNC_ENGINE_COUNT} (gpu_specs models {card.copy_engines})")
    except Exception as error:  # noqa: BLE001 - a report line, not a failure
        print(f"asyncEngineCount unavailable: {error}")
    print(f"{'chunks':>6} {'measured ms':>12} {'modelled ms':>12} {'error':>7}   (model: {card.name}'s reported {card.host_link})")
    for k in (1, 2, 4, 8):
        chunks = [torch.randn(TOTAL_ELEMENTS // k).pin_memory() for _ in range(k)]
        measured_ms(chunks)  # warm-up: streams, allocator, the kernel's first launch
        measured = min(measured_ms(chunks) for _ in range(3))
        modelled = modelled_ms(card, k)
        print(f"{k:>6} {measured:>12.2f} {modelled:>12.2f} {(modelled - measured) / measured:>+7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
