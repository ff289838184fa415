"""A kernel tracer: run a real numba-cuda kernel in the simulator and see what a GPU would do.

Inside ``with trace() as t:``, every simulated launch is instrumented:

* every element a thread reads or writes, in a kernel argument (global memory) or in a
  ``cuda.shared.array``, is recorded with the thread's block, warp and lane, the instruction
  that did it and how many times that thread had executed it before; an atomic operation
  (``cuda.atomic.add`` and the others) is one access of kind ``"atomic"``, so a plain
  ``"store"`` is always a plain write;
* every source line a thread executes is recorded the same way.

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
from .observe import Observer, observe, open_observers

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
    """Two threads of one block touching the same shared-memory word between the same two
    barriers, at least one of them writing: a data race on a GPU, whatever order the simulator ran them in."""

    block: tuple
    address: int  # byte offset in the block's shared memory
    kind: str  # "write-write" or "read-write"
    first: str  # the source line of a write
    second: str  # the source line of the other access

    def describe(self) -> str:
        return f"{self.kind} race on shared byte {self.address} in block {self.block}: `{self.first}` and `{self.second}`"


MAX_RACES_KEPT = 20  # a racy kernel races everywhere: a few examples and the count are enough


class Trace(Observer):
    """What the kernels launched in a :func:`trace` block did, warp by warp."""

    kind = "trace"

    def __init__(self):
        self._accesses = []  # (block, warp, lane, space, kind, site, occurrence, address, itemsize)
        self._lines = []  # (block, warp, lane, site, occurrence)
        self._requests: list[Request] = []
        self._issues: list[tuple] = []  # (block, warp, site, active lanes)
        self._shared = []  # (block, thread, barriers passed, kind, site, address) of every plain shared access
        self._races: list[Race] = []
        self._race_count = 0
        self.notes: list[str] = []

    # -- instrumentation --------------------------------------------------------------------
    def start(self) -> None:
        from numba.cuda.simulator import kernel as simulated
        from numba.cuda.simulator import kernelapi
        from numba.cuda.simulator.cudadrv import devicearray

        from .. import simulator_blocks

        simulator_blocks.install()  # before the barrier is wrapped below: stop() puts back what it saved
        self._saved = [(devicearray.FakeWithinKernelCUDAArray, name, getattr(devicearray.FakeWithinKernelCUDAArray, name))
                       for name in ("__getitem__", "__setitem__")]
        self._saved.append((kernelapi.FakeCUDAShared, "array", kernelapi.FakeCUDAShared.array))
        self._saved.append((simulated.FakeCUDAKernel, "__call__", simulated.FakeCUDAKernel.__call__))
        self._saved.append((simulated.BlockThread, "syncthreads", simulated.BlockThread.syncthreads))
        original_get, original_set, original_shared, original_launch, original_barrier = (saved[2] for saved in self._saved)

        def global_get(array, index):
            value = original_get(array, index)
            _record("global", "load", array._item._ary, index)
            return value

        def global_set(array, index, value):
            original_set(array, index, value)
            _record("global", "store", array._item._ary, index)

        def shared_array(shared, shape, dtype, alignment=None):
            return SharedArray(original_shared(shared, shape, dtype, alignment))

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
            return original_barrier(thread)

        devicearray.FakeWithinKernelCUDAArray.__getitem__ = global_get
        devicearray.FakeWithinKernelCUDAArray.__setitem__ = global_set
        kernelapi.FakeCUDAShared.array = shared_array
        simulated.FakeCUDAKernel.__call__ = launch
        simulated.BlockThread.syncthreads = barrier
        _STATE.reset()
        threading.settrace(_thread_tracer)

    def stop(self) -> None:
        threading.settrace(None)
        for owner, name, original in self._saved:
            setattr(owner, name, original)

    # -- results ----------------------------------------------------------------------------
    def _finish(self) -> None:
        """Group the raw per-thread events into warp requests and issue slots."""
        if self._accesses:
            groups = defaultdict(list)
            for block, warp, lane, space, kind, site, occurrence, address, itemsize in self._accesses:
                groups[(block, warp, space, kind, site, occurrence, itemsize)].append((lane, address))
            self._accesses = []
            for (block, warp, space, kind, site, _, itemsize), lanes in groups.items():
                lanes.sort()
                self._requests.append(Request(space, kind, _source(site), site[1], block, warp,
                                              tuple(lane for lane, _ in lanes), tuple(a for _, a in lanes), itemsize))
                if space == "shared" and itemsize != memory.BANK_BYTES:
                    self._note(f"bank conflicts are modelled for 4-byte elements; {itemsize}-byte shared accesses are not counted")
        if self._shared:
            self._find_races()
        if self._lines:
            slots = defaultdict(set)
            for block, warp, lane, site, occurrence in self._lines:
                slots[(block, warp, site, occurrence)].add(lane)
            self._lines = []
            self._issues += [(block, warp, site[1], len(lanes)) for (block, warp, site, _), lanes in slots.items()]

    def _find_races(self) -> None:
        """Shared words that two threads touched between the same barriers, one of them writing."""
        words = defaultdict(lambda: (defaultdict(set), defaultdict(set)))  # -> (writers, readers): thread -> sites
        for block, thread, barriers, kind, site, address in self._shared:
            writers, readers = words[(block, barriers, address)]
            (writers if kind == "store" else readers)[thread].add(site)
        self._shared = []
        for (block, _, address), (writers, readers) in words.items():
            if not writers:
                continue
            writer, written_at = next(iter(writers.items()))
            other = next((sites for thread, sites in writers.items() if thread != writer), None)
            kind = "write-write"
            if other is None:
                kind, other = "read-write", next((sites for thread, sites in readers.items() if thread != writer), None)
            if other is None:
                continue
            self._race_count += 1
            if len(self._races) < MAX_RACES_KEPT:
                self._races.append(Race(block, address, kind, _source(min(written_at)), _source(min(other))))

    def races(self) -> list[Race]:
        """Shared-memory data races of the traced launches (at most a few examples: see :meth:`race_count`)."""
        self._finish()
        return list(self._races)

    def race_count(self) -> int:
        """How many shared words raced (each counted once per block and barrier interval)."""
        self._finish()
        return self._race_count

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
                "races": [[list(r.block), r.address, r.kind, r.first, r.second] for r in self._races], "race_count": self._race_count}

    def absorb(self, data) -> None:
        self._finish()
        for space, kind, source, line, block, warp, lanes, addresses, itemsize in data["requests"]:
            self._requests.append(Request(str(space), str(kind), str(source), int(line), tuple(block), int(warp),
                                          tuple(int(lane) for lane in lanes), tuple(int(a) for a in addresses), int(itemsize)))
        self._issues += [(tuple(block), int(warp), int(line), int(lanes)) for block, warp, line, lanes in data["issues"]]
        self._races += [Race(tuple(block), int(address), str(kind), str(first), str(second))
                        for block, address, kind, first, second in data["races"]][:MAX_RACES_KEPT - len(self._races)]
        self._race_count += int(data["race_count"])
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
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _element_offset(array: np.ndarray, index) -> int | None:
    """Byte offset of ``array[index]`` from the start of its owner's buffer, if it is one element."""
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) != array.ndim:
        return None
    try:
        index = [operator.index(i) for i in index]
    except TypeError:
        return None  # a slice or a fancy index: a view, not a memory access
    pointer = array.__array_interface__["data"][0]
    for i, size, stride in zip(index, array.shape, array.strides):
        pointer += (i + size if i < 0 else i) * stride
    return pointer - _owner(array).__array_interface__["data"][0]


def _thread_position():
    thread = threading.current_thread()
    thread_id = getattr(thread, "thread_id", None)
    if thread_id is None:
        return None  # not a simulated thread (host code)
    return tuple(thread.blockIdx), thread_id // simt.WARP_SIZE, thread_id % simt.WARP_SIZE


def _record(space: str, kind: str, array: np.ndarray, index) -> None:
    position = _thread_position()
    offset = _element_offset(array, index)
    if position is None or offset is None:
        return
    frame = sys._getframe(2)
    if _inside_atomic(frame):
        if kind == "load":
            return  # the simulator's read-modify-write: one atomic request, recorded at its store
        kind = "atomic"
    owner = _owner(array)
    base = _STATE.global_address(owner) if space == "global" else _STATE.shared_address(owner)
    site = _site(frame)
    occurrence = _STATE.occurrence((space, kind, site))
    event = (*position, space, kind, site, occurrence, base + offset, array.itemsize)
    shared = (position[0], position[1] * simt.WARP_SIZE + position[2], _STATE.barriers(), kind, site, base + offset)
    for tracer in open_observers(Trace.kind):
        tracer._accesses.append(event)
        if space == "shared" and kind != "atomic":  # atomic updates of one word do not race with each other
            tracer._shared.append(shared)


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
    """A ``cuda.shared.array`` whose element reads and writes are traced."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def __getitem__(self, index):
        value = self._array[index]
        if isinstance(value, np.ndarray):
            return SharedArray(value)  # tile[row] then [col]: the second index is the access
        _record("shared", "load", self._array, index)
        return value

    def __setitem__(self, index, value):
        self._array[index] = value
        _record("shared", "store", self._array, index)

    def __len__(self):
        return len(self._array)

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)

    def __getattr__(self, name):
        return getattr(self._array, name)  # shape, size, dtype, ...
