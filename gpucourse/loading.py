"""A latency-bound loader and a compute step, to measure how well a prefetching generator overlaps them.

``run_loader(prefetch, items, load_seconds=…, compute_seconds=…, depth=…)`` calls
``prefetch(loader_fn, items, depth)`` and consumes what it yields: each load waits ``load_seconds``
(slow storage) and each item received is "computed" for ``compute_seconds`` (a GPU step the host
waits for). It reports the wall time, what arrived in which order, how far ahead the loads ran, and
the error the consumer got, if any. Loading one item after another takes
``len(items) × (load_seconds + compute_seconds)``; a generator that loads ahead in the background
approaches ``len(items) × max(load_seconds, compute_seconds)``.

It holds no prefetcher: the function under test brings its own. For the autograder's stand-in of a
student's function (``drive_iterator``), the loads' latency and the compute are the grader's own
(see :mod:`autograder.loading`): the student's process cannot shorten them.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

from .hooks import stand_in_hook


@dataclass
class LoadPlan:
    """What :func:`run_loader` asks of a prefetching generator."""

    items: list
    load_seconds: float
    compute_seconds: float
    depth: int = 2
    fail_at: object = None  # the load of this item raises ValueError
    stop_after: int | None = None  # the consumer closes the generator after this many items
    tokens: dict = field(default_factory=dict)  # item -> what its load returns: unguessable, so no load can be skipped

    def __post_init__(self):
        self.items = list(self.items)
        if not self.tokens:
            self.tokens = {item: f"{item}:{secrets.token_hex(8)}" for item in self.items}

    def loaded(self, item):
        """What loading ``item`` returns (or the error it raises)."""
        if item == self.fail_at:
            raise ValueError(f"could not load item {item!r}")
        return self.tokens[item]


@dataclass
class LoadRun:
    """What the consumer saw."""

    received: list  # the values, in the order they arrived
    seconds: float  # from the first request to the end of the last item's compute
    loads: int  # loads started
    most_ahead: int  # the most loads started beyond the items received
    error: str | None = None  # "Type: message" of the error the consumer got
    threads_left: int = 0  # threads still running a second after the generator was closed (stop_after)

    def in_order(self, plan: LoadPlan) -> bool:
        expected = [plan.tokens[item] for item in plan.items]
        return self.received == expected[: len(self.received)]


def run_loader(prefetch, items, *, load_seconds: float, compute_seconds: float, depth: int = 2,
               fail_at=None, stop_after: int | None = None) -> tuple[LoadPlan, LoadRun]:
    """Consume ``prefetch(loader_fn, items, depth)`` as described above: (the plan, what happened)."""
    plan = LoadPlan(items, load_seconds, compute_seconds, depth, fail_at, stop_after)
    across = stand_in_hook(prefetch, "drive_iterator")
    return plan, (across(plan) if across is not None else _run_here(prefetch, plan))


def compare_loaders(baseline, candidate, items, *, load_seconds: float, compute_seconds: float, depth: int = 2,
                    rounds: int = 5, check=None):
    """:func:`run_loader` of ``baseline`` and ``candidate`` in alternating rounds: a ``timing.SpeedResult``.

    ``check(plan, run)``, when given, is called on every candidate run and must raise if it is wrong.
    """
    from . import devices
    from .timing import speed_result

    times = {"baseline": [], "candidate": []}
    for round_index in range(rounds):
        order = (("baseline", baseline), ("candidate", candidate))
        for name, fn in order if round_index % 2 == 0 else order[::-1]:
            plan, run = run_loader(fn, items, load_seconds=load_seconds, compute_seconds=compute_seconds, depth=depth)
            if run.error or not run.in_order(plan) or len(run.received) != len(plan.items):
                raise AssertionError(f"{name}: {len(run.received)} of {len(plan.items)} items in order"
                                     + (f", then {run.error}" if run.error else ""))
            if name == "candidate" and check is not None:
                check(plan, run)
            times[name].append(run.seconds)
    return speed_result(times["baseline"], times["candidate"], f"{devices.describe('cpu')}, loads and compute waited out by the driver", None)


def _run_here(prefetch, plan: LoadPlan) -> LoadRun:
    lock, counts = threading.Lock(), {"loads": 0, "received": 0, "ahead": 0}

    def loader_fn(item):
        with lock:
            counts["loads"] += 1
            counts["ahead"] = max(counts["ahead"], counts["loads"] - counts["received"])
        time.sleep(plan.load_seconds)
        return plan.loaded(item)

    threads_before = threading.active_count()
    received, error = [], None
    start = time.perf_counter()
    generator = prefetch(loader_fn, plan.items, plan.depth)
    try:
        for value in generator:
            received.append(value)
            with lock:
                counts["received"] += 1
            time.sleep(plan.compute_seconds)
            if plan.stop_after is not None and len(received) >= plan.stop_after:
                break
    except Exception as failure:  # noqa: BLE001 - reported, as the consumer would see it
        error = f"{type(failure).__name__}: {failure}"
    seconds = time.perf_counter() - start
    getattr(generator, "close", lambda: None)()
    return LoadRun(received, seconds, counts["loads"], counts["ahead"], error, _threads_left(threads_before))


def _threads_left(before: int, wait_seconds: float = 1.0) -> int:
    deadline = time.monotonic() + wait_seconds
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    return max(0, threading.active_count() - before)
