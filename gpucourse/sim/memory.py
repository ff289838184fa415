"""How a warp's memory request becomes hardware work (modelled).

* **Global memory** moves whole 32-byte *sectors*; a warp's load or store touches every sector
  that holds a byte one of its active lanes asked for. 128-byte *lines* (4 sectors) are the
  unit of the L1 cache. Efficiency is bytes asked for over bytes moved.
* **Shared memory** is 32 *banks*, each 4 bytes wide: word ``w`` lives in bank ``w % 32``.
  Lanes reading distinct words of one bank are served one after another (a conflict of that
  degree); lanes reading the *same* word get it in one go (a broadcast, not a conflict).

Addresses are byte addresses of one warp's active lanes (inactive lanes are simply absent).
"""

from __future__ import annotations

SECTOR_BYTES = 32
LINE_BYTES = 128
BANKS = 32
BANK_BYTES = 4


def _check_sizes(bytes_per_lane: int, unit: int) -> None:
    if bytes_per_lane < 1 or unit < 1:
        raise ValueError(f"sizes must be positive, got bytes_per_lane={bytes_per_lane}, unit={unit}")


def touched_units(addresses, bytes_per_lane: int = 4, unit_bytes: int = SECTOR_BYTES) -> set[int]:
    """Indices of the ``unit_bytes``-sized blocks of memory that the lanes' bytes fall in."""
    _check_sizes(bytes_per_lane, unit_bytes)
    units = set()
    for address in addresses:
        units.update(range(address // unit_bytes, (address + bytes_per_lane - 1) // unit_bytes + 1))
    return units


def sectors_per_request(addresses, bytes_per_lane: int = 4, sector_bytes: int = SECTOR_BYTES) -> int:
    """32-byte sectors one warp request moves: every sector holding a byte some lane asked for."""
    return len(touched_units(addresses, bytes_per_lane, sector_bytes))


def lines_per_request(addresses, bytes_per_lane: int = 4) -> int:
    """128-byte cache lines one warp request touches."""
    return len(touched_units(addresses, bytes_per_lane, LINE_BYTES))


def load_efficiency(addresses, bytes_per_lane: int = 4, sector_bytes: int = SECTOR_BYTES) -> float:
    """Distinct bytes the lanes asked for over bytes moved (whole sectors): 1.0 is perfectly coalesced.

    Lanes asking for the same bytes count them once, so the value never exceeds 1.
    """
    addresses = list(addresses)
    if not addresses:
        raise ValueError("no active lanes: a request needs at least one address")
    requested = len({byte for address in addresses for byte in range(address, address + bytes_per_lane)})
    return requested / (sectors_per_request(addresses, bytes_per_lane, sector_bytes) * sector_bytes)


def bank_conflict_degree(word_addresses, banks: int = BANKS) -> int:
    """How many times one shared-memory request is replayed: the most distinct words any bank
    must serve. 1 is conflict-free; lanes reading the same word share it (broadcast). 0 for no lanes."""
    if banks < 1:
        raise ValueError(f"banks must be positive, got {banks}")
    words_per_bank: dict[int, set[int]] = {}
    for word in word_addresses:
        words_per_bank.setdefault(word % banks, set()).add(word)
    return max((len(words) for words in words_per_bank.values()), default=0)


def warp_addresses(stride: int = 1, offset: int = 0, element_bytes: int = 4, active_lanes=range(32), base: int = 0) -> list[int]:
    """Byte addresses of a warp whose lane k reads element ``offset + k * stride`` of an array at ``base``."""
    if element_bytes < 1:
        raise ValueError(f"element_bytes must be positive, got {element_bytes}")
    return [base + (offset + lane * stride) * element_bytes for lane in active_lanes]
