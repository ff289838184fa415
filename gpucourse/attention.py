"""Models of attention's work and memory traffic, for lecture 11: modelled figures, never measured ones.

Attention over ``n`` positions with head dimension ``d``: ``S = Q Kᵀ / √d``, ``P = softmax(S)`` row by row,
``O = P V``. The two matmuls do ``2·n·n·d`` multiply-adds each. What differs between implementations is the
traffic to device memory (HBM):

- **standard** (Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
  NeurIPS 2022, Algorithm 0): ``S`` is written to HBM and read back for the softmax, ``P`` written and read
  back for the second matmul: ``4·n²`` elements on top of reading Q, K, V and writing O (``4·n·d``);
- **tiled** (the same paper's Algorithm 1, and FlashAttention-2): a block of ``block_q`` queries stays on
  chip while every block of K and V streams past it, so Q is read and O written once, and K and V are read
  once per block of queries: ``2·n·d + 2·n·d·⌈n / block_q⌉`` elements, and no ``n²`` term at all.

Times come from a roofline (:func:`roofline_seconds`): ``max(FLOPs / peak, bytes / bandwidth)`` with the
card's figures from :mod:`gpucourse.gpu_specs`. It ignores caches, occupancy and the softmax's own
arithmetic, so label every number it gives "modelled". No graded answer lives here: the assignment asks
for the computations these formulas only count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import gpu_specs


def forward_flops(n: int, d: int, causal: bool = False) -> float:
    """FLOPs of one head's forward: ``Q Kᵀ`` and ``P V``, 2 FLOPs per multiply-add, ``4·n²·d``.
    ``causal``: only the scores on and below the diagonal are needed, ``n·(n + 1) / 2`` of each row pair."""
    pairs = n * (n + 1) / 2 if causal else n * n
    return 4.0 * pairs * d


def standard_bytes(n: int, d: int, itemsize: int) -> float:
    """HBM bytes of the standard forward: Q, K, V read and O written (``4·n·d``); S written and read back,
    P written and read back (``4·n²``)."""
    return itemsize * (4.0 * n * d + 4.0 * n * n)


def tiled_bytes(n: int, d: int, itemsize: int, block_q: int = 128) -> float:
    """HBM bytes of the tiled forward: Q read and O written once, K and V read once per block of ``block_q`` queries.
    FlashAttention-2 picks blocks of 64 or 128 rows by head dimension and shared memory (Dao, 2023, §3.3); 128 by default here."""
    if block_q < 1:
        raise ValueError(f"block_q must be positive, got {block_q}")
    return itemsize * (2.0 * n * d + 2.0 * n * d * math.ceil(n / block_q))


def score_matrix_bytes(n: int, itemsize: int, heads: int = 1, batch: int = 1) -> float:
    """Bytes of the ``n × n`` score matrices that the standard forward keeps in memory (one per head and sequence)."""
    return float(itemsize) * n * n * heads * batch


def roofline_seconds(card: str | gpu_specs.GPUSpec, flops: float, nbytes: float, precision: str) -> tuple[float, str]:
    """Roofline time of work doing ``flops`` in ``precision`` (``gpu_specs.PRECISION_FIELDS``) and moving ``nbytes``
    on ``card``, and what bounds it ("compute" or "memory")."""
    spec = card if isinstance(card, gpu_specs.GPUSpec) else gpu_specs.gpu(card)
    compute, memory = flops / gpu_specs.peak_flops(spec, precision), nbytes / spec.memory_bandwidth
    return max(compute, memory), ("compute" if compute >= memory else "memory")


@dataclass(frozen=True)
class Decoder:
    """The sizes of a decoder-only transformer that set what one generated token reads: its weights and, for each
    sequence, its KV cache (a key and a value of ``kv_heads × head_dim`` numbers per token in every layer)."""

    name: str
    layers: int
    heads: int  # query heads per layer
    kv_heads: int  # key-value heads per layer: ``heads`` without grouped-query attention, fewer with it
    head_dim: int
    params: float
    source: str = ""


LLAMA2_7B = Decoder("Llama 2 7B", layers=32, heads=32, kv_heads=32, head_dim=128, params=6.74e9,
                    source="Touvron et al., \"Llama 2\" (2023), and the model's config.json: 32 layers, hidden size 4096, "
                           "32 attention heads and 32 key-value heads (no grouped-query attention at 7B)")
LLAMA3_8B = Decoder("Llama 3 8B", layers=32, heads=32, kv_heads=8, head_dim=128, params=8.03e9,
                    source="Meta's Llama 3 8B config.json: 32 layers, hidden size 4096, 32 attention heads, "
                           "8 key-value heads (grouped-query attention); 8.03e9 weights")
