"""A kernel tracer: run a real numba-cuda kernel in the simulator and see what a GPU would do.

Inside ``with trace() as t:``, every simulated launch is instrumented:

* every element a thread reads or writes, in a kernel argument (global memory) or in a
  ``cuda.shared.array``, is recorded with the thread's block, warp and lane, the instruction
  that did it and how many times that thread had executed it before; an atomic operation
  (``cuda.atomic.add`` and the others) is one access of kind ``"atomic"``, so a plain
  ``"store"`` is always a plain write;
* every source line a thread executes is recorded the same way.

Nothing a kernel loads or stores escapes the trace; what the tracer cannot see element by element
it refuses, raising :class:`UntracedAccess` (a ``TypeError``) in the kernel:

* an element index (``x[i]``, ``tile[r, c]``) is one access;
* a sub-array (a slice, ``...``, fewer indexes than dimensions: ``tile[row]``, ``x[a:b]``) read
  from an array is a view, no access yet: its own element accesses are traced (``tile[row][col]``);
  so are the views ``.T``, ``.transpose()``, ``.reshape()``, ``.view()`` and ``.ravel()`` make;
* a store through a sub-array (``out[a:b] = v``, ``out[...] = v``, ``tile[row] = 0``) is traced:
  a store of every element it writes, in C order (so element k of each lane's slice makes one warp
  request with the other lanes' element k); a traced array on its right (``s[a:b] = x[c:d]``) is
  first loaded the same way;
* refused: index arrays, masks (``True`` too) and field names; numpy working on an array as a whole
  (``np.asarray``, ufuncs, arithmetic and comparisons on an array, ``np.sum(s)``, ``x.sum()``,
  ``.copy()``, ``.fill()`` and every other array method or attribute but ``shape``, ``size``,
  ``ndim``, ``dtype``, ``itemsize``, ``strides``, ``nbytes`` and the views above); a reshape that
  would copy; shared arrays of records (structured dtypes).

``cuda.local.array`` is per thread and not traced; host code is not affected.

Data races are read from who touched each word and when, never from the output (see :class:`Race`):
within a block, two threads between the same two barriers, one of them a plain store; in global
memory also threads of two different blocks, whenever one access is a plain store, or one an atomic
and the other a plain load (blocks cannot wait for each other within a launch, and the simulator
running them one after another proves nothing). Atomics among themselves never race. Words are
4-byte words (bytes for smaller elements): accesses that overlap from different starts, through
views of one array with different element sizes, are not matched.

Lanes of one warp at the same instruction, the same number of times, form one *warp request*
(memory) or one *issue slot* (lines): that is how SIMT hardware groups them. From those,
:class:`Trace` counts 32-byte sectors per request, load/store efficiency, shared-memory
bank-conflict degrees and SIMT efficiency, with the models of :mod:`.memory` and :mod:`.simt`.

Modelling choices, stated so that nobody mistakes them for measurements:

* each array argument starts at a 256-byte-aligned address, as ``cudaMalloc`` gives;
  shared arrays are packed from offset 0 of the block's shared memory, 16-byte aligned;
* one Python source line is one instruction (for SIMT efficiency, a teaching figure); the
  figures meant for judging a kernel are totals and per-warp facts that neither extra work nor
  the layout of the source can improve: :meth:`Trace.sectors`, :meth:`Trace.wavefronts`,
  :meth:`Trace.divergent_warps`;
* bank conflicts are modelled for 4-byte elements; for other sizes the tracer says so
  (``conflict_degree`` is None and a note is added) rather than guess;
* no caches: every request is counted as it reaches L1.

Only the simulator can be instrumented: on a real GPU ``available`` is False and nothing is
recorded (time the kernel instead, or profile it with Nsight Compute).
"""

from __future__ import annotations

import functools
import linecache
import operator
import os
import sys
import sysconfig
import threading
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import memory, simt
from .observe import Observer, observe, open_observers, shared_array_below, wraps_shared_array

_MISSING = object()  # an attribute a patched class did not define
ARRAY_ALIGNMENT = 1 << 20  # distinct arrays live far apart, each 256-byte (indeed 1 MiB) aligned
SHARED_ALIGNMENT = 16


@dataclass(frozen=True)
class Request:
    """One warp's memory access at one instruction (modelled from the simulator's trace)."""

    space: str  # "global" or "shared"
    kind: str  # "load", "store" or "atomic" (one read-modify-write of cuda.atomic.*)
    source: str  # the source line that made it
    line: int
    block: tuple
    warp: int
    lanes: tuple
    addresses: tuple  # byte addresses (shared: offsets into the block's shared memory)
    itemsize: int

    @property
    def sectors(self) -> int:
        return memory.sectors_per_request(self.addresses, self.itemsize)

    @property
    def lines(self) -> int:
        """128-byte cache lines the request touches."""
        return len(memory.touched_units(self.addresses, self.itemsize, memory.LINE_BYTES))

    @property
    def requested_bytes(self) -> int:
        return len({b for a in self.addresses for b in range(a, a + self.itemsize)})

    @property
    def efficiency(self) -> float:
        return memory.load_efficiency(self.addresses, self.itemsize)

    @property
    def conflict_degree(self) -> int | None:
        if self.itemsize != memory.BANK_BYTES:
            return None
        return memory.bank_conflict_degree(a // memory.BANK_BYTES for a in self.addresses)


@dataclass(frozen=True)
class Race:
    """Two accesses to one word that a GPU does not order, at least one of them writing: a data race,
    whatever order the simulator ran them in.

    Within a block (``other_block`` None): two threads between the same two barriers, one of them a
    plain store. In global memory, between blocks (``other_block`` the second block): any plain
    store, or an atomic and a plain load, of two blocks of one launch."""

    block: tuple  # the block of the write (shared: the block whose shared memory it is)
    address: int  # byte offset in the block's shared memory, or modelled global byte address
    kind: str  # "write-write" (plain stores or atomics) or "read-write" (a plain load and a write)
    first: str  # the source line of a write
    second: str  # the source line of the other access
    space: str = "shared"  # or "global"
    other_block: tuple | None = None  # a race between blocks: the block of the other access

    def describe(self) -> str:
        where = f"in block {self.block}" if self.other_block is None else f"between blocks {self.block} and {self.other_block}"
        return f"{self.kind} race on {self.space} byte {self.address} {where}: `{self.first}` and `{self.second}`"

    def export(self) -> list:
        return [list(self.block), self.address, self.kind, self.first, self.second, self.space,
                None if self.other_block is None else list(self.other_block)]

    @classmethod
    def absorb(cls, data) -> Race:
        """From :meth:`export`'s list, or the five fields of a shared race exported before ``space`` existed."""
        block, address, kind, first, second, space, other = (*data, "shared", None)[:7]
        return cls(tuple(block), int(address), str(kind), str(first), str(second), str(space),
                   None if other is None else tuple(other))


class UntracedAccess(TypeError):
    """A kernel touched a traced array in a way the tracer cannot see element by element; refused
    (raised in the kernel) rather than left out of the trace."""


MAX_RACES_KEPT = 20  # a racy kernel races everywhere: a few examples and the count are enough


class Trace(Observer):
    """What the kernels launched in a :func:`trace` block did, warp by warp."""

    kind = "trace"

    def __init__(self):
        self._accesses = []  # (block, warp, lane, space, kind, site, occurrence, address, itemsize, barriers passed)
        self._lines = []  # (block, warp, lane, site, occurrence)
        self._requests: list[Request] = []
        self._issues: list[tuple] = []  # (block, warp, site, active lanes)
        self._races: list[Race] = []  # a few examples per space
        self._race_counts = {"shared": 0, "global": 0}
        self._barriers = 0  # cuda.syncthreads() calls, over every thread of every traced launch
        self.notes: list[str] = []

    # -- instrumentation --------------------------------------------------------------------
    def start(self) -> None:
        from numba.cuda.simulator import kernel as simulated
        from numba.cuda.simulator import kernelapi
        from numba.cuda.simulator.cudadrv import devicearray

        from .. import simulator_blocks

        simulator_blocks.install()  # before the barrier is wrapped below: stop() puts back what it saved
        self._saved = []
        original_launch, original_barrier = simulated.FakeCUDAKernel.__call__, simulated.BlockThread.syncthreads

        def launch(kernel, *args):
            top_level = not kernel._device and simulated._get_kernel_context() is None  # not a device function
            try:
                return original_launch(kernel, *args)
            finally:
                if top_level:  # a new launch's threads count their instructions from 1 again
                    for tracer in open_observers(Trace.kind):
                        tracer._finish()

        def barrier(thread):
            _STATE.passed_barrier()
            for tracer in open_observers(Trace.kind):
                tracer._barriers += 1
            return original_barrier(thread)

        for name, method in _global_array_methods(devicearray).items():
            self._patch(devicearray.FakeWithinKernelCUDAArray, name, method)
        self._patch(kernelapi.FakeCUDAShared, "array", _shared_array_method(kernelapi.FakeCUDAShared.array))
        self._patch(simulated.FakeCUDAKernel, "__call__", launch)
        self._patch(simulated.BlockThread, "syncthreads", barrier)
        _STATE.reset()
        threading.settrace(_thread_tracer)

    def _patch(self, owner, name, replacement) -> None:
        """Set ``owner.name``, remembering what stop() puts back (or removes: a name the class did not define)."""
        self._saved.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, replacement)

    def stop(self) -> None:
        threading.settrace(None)
        for owner, name, original in reversed(self._saved):
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)

    # -- results ----------------------------------------------------------------------------
    def _finish(self) -> None:
        """Group the raw per-thread events into warp requests and issue slots, and find the launch's races."""
        accesses, self._accesses = self._accesses, []
        if accesses:
            self._group_requests(accesses)
            self._find_races(accesses)
        if self._lines:
            slots = defaultdict(set)
            for block, warp, lane, site, occurrence in self._lines:
                slots[(block, warp, site, occurrence)].add(lane)
            self._lines = []
            self._issues += [(block, warp, site[1], len(lanes)) for (block, warp, site, _), lanes in slots.items()]

    def _group_requests(self, accesses) -> None:
        groups = defaultdict(list)
        for block, warp, lane, space, kind, site, occurrence, address, itemsize, _ in accesses:
            groups[(block, warp, space, kind, site, occurrence, itemsize)].append((lane, address))
        for (block, warp, space, kind, site, _, itemsize), lanes in groups.items():
            lanes.sort()
            self._requests.append(Request(space, kind, _source(site), site[1], block, warp,
                                          tuple(lane for lane, _ in lanes), tuple(a for _, a in lanes), itemsize))
            if space == "shared" and itemsize != memory.BANK_BYTES:
                self._note(f"bank conflicts are modelled for 4-byte elements; {itemsize}-byte shared accesses are not counted")

    def _find_races(self, accesses) -> None:
        """Count the words of one launch that raced (the rules are Race's) and keep a few examples.

        One pass folds each access into a small summary per word (one per block and barrier
        interval, and in global memory one per word for the whole launch); only the raced words'
        accesses are looked at again, for the examples."""
        within, between = {}, {}
        for block, warp, lane, space, kind, _, _, address, itemsize, barriers in accesses:
            bit, thread = _KIND_BITS[kind], warp * simt.WARP_SIZE + lane
            for word in _words(address, itemsize):
                _summarise(within, (space, block, barriers, word), thread, bit)
                if space == "global":
                    _summarise(between, word, block, bit)
        raced_within = [key for key, (_, several, bits) in within.items() if several and bits & _STORE]
        raced_between = [word for word, (_, several, bits) in between.items()
                         if several and (bits & _STORE or bits & _LOAD_AND_ATOMIC == _LOAD_AND_ATOMIC)]
        for space, *_ in raced_within:
            self._race_counts[space] += 1
        self._race_counts["global"] += len(raced_between)
        if raced_within or raced_between:
            self._keep_examples(accesses, sorted(raced_within), sorted(raced_between))

    def _keep_examples(self, accesses, raced_within: list, raced_between: list) -> None:
        """Up to MAX_RACES_KEPT races per space, the lowest words first, each with a write and an access racing with it."""
        room = {space: MAX_RACES_KEPT - sum(r.space == space for r in self._races) for space in self._race_counts}
        within = {}
        for key in raced_within:
            if room[key[0]] > 0:
                room[key[0]] -= 1
                within[key] = []
        between = {word: [] for word in raced_between[:max(room["global"], 0)]}
        for block, warp, lane, space, kind, site, _, address, itemsize, barriers in accesses:
            for word in _words(address, itemsize):
                if (space, block, barriers, word) in within:
                    within[(space, block, barriers, word)].append((warp * simt.WARP_SIZE + lane, kind, site))
                if space == "global" and word in between:
                    between[word].append((block, kind, site))
        for (space, block, _, word), group in within.items():  # who: the thread
            write, other = _example(group, lambda w, a: a[0] != w[0] and "store" in (w[1], a[1]))
            self._races.append(Race(block, word, _race_kind(other), _source(write[2]), _source(other[2]), space))
        for word, group in between.items():  # who: the block
            write, other = _example(group, lambda w, a: a[0] != w[0] and (w[1] == "store" or a[1] != "atomic"))
            self._races.append(Race(write[0], word, _race_kind(other), _source(write[2]), _source(other[2]), "global", other[0]))

    def races(self, space: str | None = None) -> list[Race]:
        """Data races of the traced launches, in shared and global memory or one ``space``
        (at most a few examples per space: see :meth:`race_count`)."""
        self._finish()
        return [r for r in self._races if space is None or r.space == space]

    def race_count(self, space: str | None = None) -> int:
        """How many 4-byte words raced (an 8-byte element is two): each counted once per block and
        barrier interval in which threads of the block raced on it, and a global word once more if
        threads of different blocks did."""
        self._finish()
        return sum(count for name, count in self._race_counts.items() if space is None or name == space)

    def barrier_count(self) -> int:
        """How many times the traced threads called cuda.syncthreads(), all threads together."""
        return self._barriers

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def requests(self, space: str | None = None, kind: str | None = None, source: str | None = None) -> list[Request]:
        """The warp requests, optionally only those of one space, kind, or source line (a substring)."""
        self._finish()
        return [r for r in self._requests if (space is None or r.space == space) and (kind is None or r.kind == kind)
                and (source is None or source in r.source)]

    def _global(self, kind, source) -> list[Request]:
        chosen = self.requests("global", kind, source)
        if not chosen:
            raise ValueError(f"no global {kind or 'access'} was traced" + (f" on a line containing {source!r}" if source else ""))
        return chosen

    def sectors_per_request(self, kind: str | None = None, source: str | None = None) -> float:
        """Mean 32-byte sectors per global-memory warp request (4 is ideal for 4-byte elements)."""
        return _mean(r.sectors for r in self._global(kind, source))

    def efficiency(self, kind: str | None = None, source: str | None = None) -> float:
        """Bytes asked for over bytes moved, over all matching global requests (1.0 is ideal)."""
        return _efficiency(self._global(kind, source))

    def sectors(self, kind: str | None = None, source: str | None = None) -> int:
        """Total 32-byte sectors the matching global requests moved.

        A total, not a mean: extra requests, however well coalesced, only ever add to it, so
        it is the figure to hold a kernel to (against what the same work needs at best).
        """
        return sum(r.sectors for r in self._global(kind, source))

    def wavefronts(self, kind: str | None = None, source: str | None = None) -> int:
        """Total shared-memory wavefronts: each 4-byte shared request costs its bank-conflict
        degree (1 when conflict-free); 0 when the kernel made none. A total: extra requests only
        ever add to it."""
        shared = self.requests("shared", kind, source)
        degrees = _conflict_degrees(shared)
        if len(degrees) < len(shared):
            raise ValueError("bank conflicts are modelled for 4-byte elements only; this kernel made other shared accesses")
        return sum(degrees)

    def divergent_warps(self) -> list[tuple]:
        """The (block, warp) pairs in which some instruction ran with only part of the warp's lanes.

        A warp's lanes are those that ran any line of the kernel; a line that some of them ran
        (or ran a different number of times) and others did not is a divergent branch. Neither
        extra uniform work nor the way the source is laid out on lines changes which warps
        diverge (a partial warp at the end of the data diverges at its bounds check).
        """
        self._finish()
        widest, narrowest = defaultdict(int), defaultdict(lambda: simt.WARP_SIZE + 1)
        for block, warp, _, lanes in self._issues:
            widest[(block, warp)] = max(widest[(block, warp)], lanes)
            narrowest[(block, warp)] = min(narrowest[(block, warp)], lanes)
        return sorted(key for key in widest if narrowest[key] < widest[key])

    def bank_conflict_degree(self, kind: str | None = None, source: str | None = None, worst: bool = False) -> float:
        """Mean (or, with ``worst``, the largest) bank-conflict degree of the shared-memory requests; 1 is conflict-free."""
        degrees = _conflict_degrees(self.requests("shared", kind, source))
        if not degrees:
            raise ValueError("no 4-byte shared-memory access was traced")
        return max(degrees) if worst else _mean(degrees)

    def simt_efficiency(self) -> float:
        """Active lanes over 32, over every instruction (source line) every warp issued."""
        self._finish()
        if not self._issues:
            raise ValueError("no kernel line was traced")
        return sum(active for *_, active in self._issues) / (simt.WARP_SIZE * len(self._issues))

    def warp_efficiencies(self) -> dict[tuple, float]:
        """SIMT efficiency of each (block, warp)."""
        self._finish()
        slots, active = defaultdict(int), defaultdict(int)
        for block, warp, _, lanes in self._issues:
            slots[(block, warp)] += 1
            active[(block, warp)] += lanes
        return {key: active[key] / (simt.WARP_SIZE * slots[key]) for key in slots}

    def summary(self) -> list[dict]:
        """One row per (space, kind, source line): requests, sectors/request, efficiency, conflict degree."""
        rows = defaultdict(list)
        for request in self.requests():
            rows[(request.space, request.kind, request.line, request.source)].append(request)
        table = []
        for (space, kind, line, source), chosen in sorted(rows.items(), key=lambda item: (item[0][2], item[0][0], item[0][1])):
            row = {"line": line, "source": source, "space": space, "kind": kind, "requests": len(chosen)}
            if space == "global":
                row["sectors_per_request"] = _mean(r.sectors for r in chosen)
                row["lines_per_request"] = _mean(r.lines for r in chosen)
                row["efficiency"] = _efficiency(chosen)
            else:
                degrees = _conflict_degrees(chosen)
                row["conflict_degree"] = _mean(degrees) if degrees else None
            table.append(row)
        return table

    def report(self) -> str:
        """The summary as text, labelled as a model."""
        lines = [f"{'line':>4}  {'space':<6} {'kind':<5} {'requests':>8}  {'sectors/req':>11} {'efficiency':>10} {'conflicts':>9}  source"]
        for row in self.summary():
            sectors = f"{row['sectors_per_request']:.2f}" if "sectors_per_request" in row else "-"
            efficiency = f"{row['efficiency']:.0%}" if "efficiency" in row else "-"
            degree = row.get("conflict_degree")
            conflicts = "-" if row["space"] == "global" else ("n/a" if degree is None else f"{degree:.2f}")
            lines.append(f"{row['line']:>4}  {row['space']:<6} {row['kind']:<5} {row['requests']:>8}  {sectors:>11} "
                         f"{efficiency:>10} {conflicts:>9}  {row['source']}")
        if self._issues or self._lines:
            lines.append(f"SIMT efficiency: {self.simt_efficiency():.0%} of lanes active per issued instruction")
        lines += [f"note: {note}" for note in self.notes]
        lines.append("(modelled from a simulated run: counts of what a GPU would do, not measurements)")
        return "\n".join(lines)

    # -- crossing processes -------------------------------------------------------------------
    def export(self) -> dict:
        self._finish()
        return {"requests": [[r.space, r.kind, r.source, r.line, list(r.block), r.warp, list(r.lanes), list(r.addresses), r.itemsize]
                             for r in self._requests],
                "issues": [[list(block), warp, line, lanes] for block, warp, line, lanes in self._issues],
                "notes": list(self.notes),
                "races": [r.export() for r in self._races], "race_count": self.race_count(), "race_counts": dict(self._race_counts),
                "barriers": self._barriers}

    def absorb(self, data) -> None:
        self._finish()
        for space, kind, source, line, block, warp, lanes, addresses, itemsize in data["requests"]:
            self._requests.append(Request(str(space), str(kind), str(source), int(line), tuple(block), int(warp),
                                          tuple(int(lane) for lane in lanes), tuple(int(a) for a in addresses), int(itemsize)))
        self._issues += [(tuple(block), int(warp), int(line), int(lanes)) for block, warp, line, lanes in data["issues"]]
        for race in map(Race.absorb, data["races"]):
            if sum(r.space == race.space for r in self._races) < MAX_RACES_KEPT:
                self._races.append(race)
        for space, count in data.get("race_counts", {"shared": data["race_count"]}).items():  # before global races: all shared
            self._race_counts[str(space)] += int(count)
        self._barriers += int(data["barriers"])
        for note in data["notes"]:
            self._note(str(note))


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _efficiency(requests: list[Request]) -> float:
    """Bytes asked for over bytes moved, over several global requests together."""
    return sum(r.requested_bytes for r in requests) / sum(r.sectors * memory.SECTOR_BYTES for r in requests)


def _conflict_degrees(requests: list[Request]) -> list[int]:
    return [r.conflict_degree for r in requests if r.conflict_degree is not None]


# -- races --------------------------------------------------------------------------------------

_KIND_BITS = {"load": 1, "store": 2, "atomic": 4}  # the kinds of access a word's summary has seen, as bits
_STORE, _LOAD_AND_ATOMIC = 2, 1 | 4
WORD_BYTES = 4


def _words(address: int, itemsize: int):
    """Where races are told apart: the 4-byte words an element covers; a smaller element is its own
    (threads writing neighbouring bytes do not race)."""
    return (address,) if itemsize <= WORD_BYTES else range(address, address + itemsize, WORD_BYTES)


def _summarise(summaries: dict, key, who, bit: int) -> None:
    """Fold one access into ``summaries[key]``: [the first thread (or block), whether another one
    came too, the kinds seen]. A few bytes per word, however many threads touch it."""
    summary = summaries.get(key)
    if summary is None:
        summaries[key] = [who, False, bit]
    else:
        summary[1] = summary[1] or summary[0] != who
        summary[2] |= bit


def _example(group: list, races_with) -> tuple:
    """A write to a raced word and an access that races with it (a write if any), the lowest
    (who, kind, site) first, so that the example does not depend on the order threads ran in."""
    group, tried = sorted(group), set()
    for write in group:
        if write[1] == "load" or write[:2] in tried:
            continue  # whether an access races with a write depends on its (who, kind) only: try each once
        tried.add(write[:2])
        others = [access for access in group if races_with(write, access)]
        if others:
            return write, min(others, key=lambda access: (access[1] == "load", access))
    raise AssertionError("a raced word without two accesses that race")


def _race_kind(other: tuple) -> str:
    return "read-write" if other[1] == "load" else "write-write"


def trace():
    """Trace the simulated kernels launched in the block: ``with trace() as t: kernel[g, b](...)``."""
    return observe(Trace())


# -- recording, in the simulated threads --------------------------------------------------------

class _State:
    """Where each array lives in the modelled address space, and each thread's counters."""

    def reset(self) -> None:
        self.lock = threading.Lock()
        self.global_bases: dict[int, int] = {}
        self.shared_bases: dict[int, int] = {}
        self.shared_end = 0
        self.local = threading.local()

    def global_address(self, owner: np.ndarray) -> int:
        with self.lock:
            if id(owner) not in self.global_bases:
                self.global_bases[id(owner)] = (len(self.global_bases) + 1) * ARRAY_ALIGNMENT
            return self.global_bases[id(owner)]

    def shared_address(self, owner: np.ndarray) -> int:
        with self.lock:
            if id(owner) not in self.shared_bases:
                start = -(-self.shared_end // SHARED_ALIGNMENT) * SHARED_ALIGNMENT
                self.shared_bases[id(owner)] = start
                self.shared_end = start + owner.nbytes
            return self.shared_bases[id(owner)]

    def passed_barrier(self) -> None:
        self.local.barriers = self.barriers() + 1

    def barriers(self) -> int:
        """How many times the running simulated thread has passed cuda.syncthreads()."""
        return getattr(self.local, "barriers", 0)

    def occurrence(self, key) -> int:
        counts = getattr(self.local, "counts", None)
        if counts is None:
            counts = self.local.counts = defaultdict(int)
        counts[key] += 1
        return counts[key]


_STATE = _State()
_STATE.reset()


def _owner(array: np.ndarray) -> np.ndarray:
    """The array that owns ``array``'s memory (dynamic shared memory: the block's one buffer, which
    the simulator hands each thread through a memoryview)."""
    while True:
        base = array.base
        if isinstance(base, memoryview):
            base = base.obj
        if not isinstance(base, np.ndarray):
            return array
        array = base


def _element_offset(array: np.ndarray, index) -> int | None:
    """Byte offset of ``array[index]`` from the start of its owner's buffer, if it is one element."""
    if not isinstance(index, tuple):
        index = (index,)
    try:
        index = [operator.index(i) for i in index if not isinstance(i, bool)]  # numpy reads True as a mask
    except TypeError:
        return None  # a slice or a fancy index: a view or a copy, not one element
    if len(index) != array.ndim:
        return None
    pointer = array.__array_interface__["data"][0]
    for i, size, stride in zip(index, array.shape, array.strides):
        pointer += (i + size if i < 0 else i) * stride
    return pointer - _owner(array).__array_interface__["data"][0]


def _view_offsets(view: np.ndarray) -> list[int]:
    """Byte offsets from the owner's start of every element of a view, in C order (a loop's order)."""
    offsets = np.array(view.__array_interface__["data"][0] - _owner(view).__array_interface__["data"][0])
    for size, stride in zip(view.shape, view.strides):
        offsets = np.add.outer(offsets, np.arange(size) * stride)
    return offsets.ravel().tolist()


def _sub_array(array: np.ndarray, index) -> np.ndarray:
    """``array[index]`` for a basic index (integers, slices, ``...``, None): a view of the same memory.
    Other indexes are refused: numpy copies what an index array, a mask or a field name selects."""
    for part in index if isinstance(index, tuple) else (index,):
        if not (part is None or part is Ellipsis or isinstance(part, slice) or _is_integer(part)):
            raise _refusal(f"an index of type {type(part).__name__} (an index array, a mask or a field name: "
                           "not an integer, a slice or `...`)")
    return array[index]


def _is_integer(part) -> bool:
    if isinstance(part, (bool, np.bool_)):
        return False  # numpy reads a bool as a mask
    try:
        operator.index(part)  # ints, numpy integers, 0-d integer arrays
    except TypeError:
        return False
    return True


def _thread_position():
    thread = threading.current_thread()
    thread_id = getattr(thread, "thread_id", None)
    if thread_id is None:
        return None  # not a simulated thread (host code)
    return tuple(thread.blockIdx), thread_id // simt.WARP_SIZE, thread_id % simt.WARP_SIZE


def _load(space: str, array: np.ndarray, index, get, holder):
    """``get(holder, index)``, the raw ``array[index]``, seen by the tracer: in a simulated thread an
    element is one load; a sub-array is a view, no access yet (its element accesses are traced)."""
    position = _thread_position()
    if position is None:
        return get(holder, index)
    offset = _element_offset(array, index)
    if offset is None:
        _sub_array(array, index)  # refuses what is not a view
        return get(holder, index)
    value = get(holder, index)
    _record(position, space, "load", array, (offset,))
    return value


def _store(space: str, array: np.ndarray, index, value, set_, holder) -> None:
    """``set_(holder, index, value)``, the raw ``array[index] = value``, seen by the tracer: in a
    simulated thread a store of each element it writes (a sub-array's in C order)."""
    position = _thread_position()
    if position is None:
        return set_(holder, index, value)
    offset = _element_offset(array, index)
    offsets = (offset,) if offset is not None else _view_offsets(_sub_array(array, index))
    set_(holder, index, _loaded(position, value))
    _record(position, space, "store", array, offsets)


def _loaded(position, value):
    """The right-hand side of a store: a traced array there (``s[a:b] = x[c:d]``) is loaded element
    by element, as the kernel would, and copied; anything else is passed on."""
    if isinstance(value, SharedArray):
        space, array = "shared", value._array
    elif isinstance(value, _global_array_class()):
        space, array = "global", value._item._ary
    else:
        return value
    if not isinstance(array, np.ndarray):
        raise _refusal("a record (a structured dtype) stored whole")
    _record(position, space, "load", array, _view_offsets(array))
    return array.copy()


def _record(position: tuple, space: str, kind: str, array: np.ndarray, offsets) -> None:
    """The running simulated thread accessed the elements of ``array`` at byte ``offsets`` from its
    owner's start. Each element counts its own occurrence of the site, so that element k of each
    lane's sub-array falls into one warp request."""
    frame = sys._getframe(1)
    if _inside_atomic(frame):
        if kind == "load":
            return  # the simulator's read-modify-write: one atomic request, recorded at its store
        kind = "atomic"
    owner = _owner(array)
    base = _STATE.global_address(owner) if space == "global" else _STATE.shared_address(owner)
    site, barriers = _site(frame), _STATE.barriers()
    events = [(*position, space, kind, site, _STATE.occurrence((space, kind, site)), base + offset, array.itemsize, barriers)
              for offset in offsets]
    for tracer in open_observers(Trace.kind):
        tracer._accesses += events


def _refusal(what: str) -> UntracedAccess:
    """The exception for an access the tracer cannot see element by element, naming the kernel's line."""
    line = _source(_site(sys._getframe(1)))
    return UntracedAccess(f"the tracer sees element accesses only: {what}, in `{line}`; "
                          "index one element at a time, e.g. x[i] or tile[row, col]")


def _site(frame) -> tuple:
    """(file, line, instruction offset) of the kernel code that made an access."""
    while frame is not None and _is_library(frame.f_code.co_filename):
        frame = frame.f_back  # an access made inside the simulator (atomics) belongs to its caller
    if frame is None:
        return ("?", 0, 0)
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_lasti)


@lru_cache(maxsize=None)
def _atomic_codes() -> frozenset:
    """The code of the simulator's atomic operations (``cuda.atomic.add`` and the others)."""
    from numba.cuda.simulator import kernelapi

    return frozenset(value.__code__ for value in vars(kernelapi.FakeCUDAAtomic).values() if hasattr(value, "__code__"))


def _inside_atomic(frame) -> bool:
    """Whether an access is the simulator carrying out an atomic operation for the kernel."""
    while frame is not None and _is_library(frame.f_code.co_filename):
        if frame.f_code in _atomic_codes():
            return True
        frame = frame.f_back
    return False


def _source(site: tuple) -> str:
    return linecache.getline(site[0], site[1]).strip() or f"line {site[1]}"


@lru_cache(maxsize=None)
def _is_library(filename: str) -> bool:
    """Code that is not the kernel's: the simulator, numpy, this package, Python itself."""
    if filename.startswith("<frozen") or "site-packages" in filename or "dist-packages" in filename:
        return True
    library_roots = {sysconfig.get_paths()["stdlib"], os.path.dirname(os.path.dirname(__file__))}
    return any(filename.startswith(root + os.sep) for root in library_roots)


def _thread_tracer(frame, event, arg):
    """Installed with threading.settrace: follows kernel code lines in simulated threads."""
    if _is_library(frame.f_code.co_filename) or _thread_position() is None:
        return None
    return _line_tracer


def _line_tracer(frame, event, arg):
    if event == "line":
        position = _thread_position()
        site = (frame.f_code.co_filename, frame.f_lineno, -1)
        occurrence = _STATE.occurrence(("line", site))
        for tracer in open_observers(Trace.kind):
            tracer._lines.append((*position, site, occurrence))
    return _line_tracer


class SharedArray:
    """A ``cuda.shared.array``, or a view of one, whose every element read and write is traced."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray):
        if array.dtype.fields is not None and _thread_position() is not None:
            raise _refusal("a shared array of records (a structured dtype)")
        self._array = array

    def __getitem__(self, index):
        value = _load("shared", self._array, index, operator.getitem, self._array)
        return SharedArray(value) if isinstance(value, np.ndarray) else value  # tile[row] then [col]: a view, then the access

    def __setitem__(self, index, value):
        _store("shared", self._array, index, value, operator.setitem, self._array)

    def __len__(self):
        return len(self._array)

    def __array__(self, dtype=None, copy=None):
        if _thread_position() is not None:
            raise _refusal("numpy works on the whole array at once here (np.asarray, a ufunc, arithmetic, np.sum, ...)")
        return self._array if dtype is None else self._array.astype(dtype)

    def __getattr__(self, name):
        if _thread_position() is None:
            return getattr(self._array, name)
        return _array_attribute(self._array, name, SharedArray)


_METADATA = frozenset({"shape", "size", "ndim", "dtype", "itemsize", "strides", "nbytes"})
_VIEW_METHODS = frozenset({"transpose", "reshape", "view", "ravel"})
_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "matmul": "@", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
              "lshift": "<<", "rshift": ">>", "and": "&", "xor": "^", "or": "|"}
_OPERATOR_METHODS = ({f"__{prefix}{name}__": symbol + ("=" if prefix == "i" else "")
                      for name, symbol in _OPERATORS.items() for prefix in ("", "r", "i")}
                     | {"__divmod__": "divmod", "__rdivmod__": "divmod", "__neg__": "-", "__pos__": "+", "__abs__": "abs",
                        "__invert__": "~", "__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">="})


def _array_attribute(array: np.ndarray, name: str, wrap):
    """A traced array's attribute in a simulated thread: its metadata, or a traced view (``T`` and
    _VIEW_METHODS, each wrapped by ``wrap``). The rest works on the data as a whole, out of the
    tracer's sight, and is refused."""
    if name.startswith("__"):
        raise AttributeError(name)  # numpy's protocols (__array_interface__, ...): numpy then asks __array__, which refuses
    if name in _METADATA:
        return getattr(array, name)
    if name == "T":
        return wrap(array.T)
    if name in _VIEW_METHODS:
        return functools.partial(_traced_view, array, name, wrap)
    raise _refusal(f"`.{name}` works on the whole array at once")


def _traced_view(array: np.ndarray, name: str, wrap, *args, **kwargs):
    view = getattr(array, name)(*args, **kwargs)
    if not isinstance(view, np.ndarray) or _owner(view) is not _owner(array):
        raise _refusal(f"`.{name}(...)` would copy the array")
    return wrap(view)


def _refused_operator(symbol: str):
    """An arithmetic or comparison operator of a traced array: numpy would compute it on the whole array."""
    def operator_(array, *args):
        if _thread_position() is None:
            return NotImplemented  # host code: as if the operator were not defined
        raise _refusal(f"`{symbol}` on a whole array")
    return operator_


for _name, _symbol in _OPERATOR_METHODS.items():
    setattr(SharedArray, _name, _refused_operator(_symbol))


@lru_cache(maxsize=None)
def _global_array_class() -> type:
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray

    return FakeWithinKernelCUDAArray


def _global_array_methods(devicearray) -> dict:
    """Stand-ins for the methods of numba's in-kernel global array (``FakeWithinKernelCUDAArray``), by
    name: the same as SharedArray's in simulated threads, the simulator's own in host code."""
    cls, fake = devicearray.FakeWithinKernelCUDAArray, devicearray.FakeCUDAArray
    original_get, original_set, original_getattr = cls.__getitem__, cls.__setitem__, cls.__getattr__
    original_setattr, original_ufunc = cls.__setattr__, cls.__array_ufunc__

    def traced_view(array):
        return cls(fake(array))

    def get(array, index):
        return _load("global", array._item._ary, index, original_get, array)

    def set_(array, index, value):
        _store("global", array._item._ary, index, value, original_set, array)

    def getattr_(array, name):
        if _thread_position() is None or name in _METADATA:
            return original_getattr(array, name)  # the simulator's shape: no negative indexes, as on a GPU
        return _array_attribute(array._item._ary, name, traced_view)

    def setattr_(array, name, value):
        if _thread_position() is not None:
            raise _refusal(f"`.{name} = ...` (a record's field, or an attribute)")
        original_setattr(array, name, value)

    def array_(array, dtype=None, copy=None):
        if _thread_position() is not None:
            raise _refusal("numpy works on the whole array at once here (np.asarray, a ufunc, arithmetic, np.sum, ...)")
        return array._item._ary

    def array_ufunc(array, ufunc, method, *args, **kwargs):
        if _thread_position() is not None:
            raise _refusal(f"numpy's `{ufunc.__name__}` works on whole arrays at once")
        return original_ufunc(array, ufunc, method, *args, **kwargs)

    methods = {"__getitem__": get, "__setitem__": set_, "__getattr__": getattr_, "__setattr__": setattr_,
               "__array__": array_, "__array_ufunc__": array_ufunc}
    return methods | {name: _refused_operator(symbol) for name, symbol in _OPERATOR_METHODS.items()}


def _shared_array_method(original):
    """``cuda.shared.array`` handing out SharedArrays."""
    below = shared_array_below(original)

    @wraps_shared_array
    def shared_array(shared, shape, dtype, alignment=None):
        return SharedArray(below(shared, shape, dtype, alignment))
    return shared_array
