"""SIMT execution of a branch (modelled): a warp runs every path some active lane takes.

The 32 lanes of a warp share one instruction stream. At a branch, lanes that take different
paths are *masked*: the warp runs each distinct path once, with only that path's lanes
active, so a divergent branch costs the sum of its paths. SIMT efficiency is the share of
lane-cycles that did useful work.
"""

from __future__ import annotations

WARP_SIZE = 32


def _paths(lane_paths, path_cost) -> list:
    lane_paths = list(lane_paths)
    if len(lane_paths) > WARP_SIZE:
        raise ValueError(f"a warp has at most {WARP_SIZE} lanes, got {len(lane_paths)}")
    for path in lane_paths:
        if path is not None and path not in path_cost:
            raise KeyError(f"path {path!r} has no cost in path_cost ({', '.join(map(repr, path_cost))})")
    return lane_paths


def warp_cycles(lane_paths, path_cost) -> int:
    """Cycles the warp spends on the branch: each distinct path taken by an active lane, once.

    lane_paths: the path each lane takes (``None`` for an inactive lane); path_cost: cycles per path.
    """
    lane_paths = _paths(lane_paths, path_cost)
    return sum(path_cost[path] for path in set(lane_paths) - {None})


def simt_efficiency(lane_paths, path_cost) -> float:
    """Useful lane-cycles (each active lane's own path) over 32 × the warp's cycles."""
    lane_paths = _paths(lane_paths, path_cost)
    cycles = warp_cycles(lane_paths, path_cost)
    if cycles == 0:
        raise ValueError("the warp does no work: no active lane, or only paths of cost 0")
    useful = sum(path_cost[path] for path in lane_paths if path is not None)
    return useful / (WARP_SIZE * cycles)


def active_masks(lane_paths) -> dict:
    """For each path, the 32-bit mask of the lanes that take it (bit k: lane k)."""
    masks: dict = {}
    for lane, path in enumerate(lane_paths):
        if path is not None:
            masks[path] = masks.get(path, 0) | (1 << lane)
    return masks
