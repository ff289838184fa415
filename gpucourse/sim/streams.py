"""A discrete-event model of one GPU's engines: copies, kernels, streams, events and device memory.

What the model assumes (each is how CUDA or PyTorch documents it; the numbers are modelled, never measured):

* **Engines.** One compute engine and ``copy_engines`` copy engines. With 2 or more, host-to-device and
  device-to-host copies each have an engine of their own and overlap each other; with 1, both
  directions share it. A copy engine runs one copy at a time.
* **Hardware queues** (``queues="hyper-q"``, the default). The host's calls reach the GPU through
  ``connections`` hardware work queues: CUDA_DEVICE_MAX_CONNECTIONS, default 8, 1 to 32 (CUDA C++
  Programming Guide, "CUDA Environment Variables"; the Kepler GK110 whitepaper's Hyper-Q gives 32
  hardware-managed connections, "compared to the single connection available with Fermi"). Streams are
  assigned to queues round-robin in the order of their first operation (the driver's mapping is not
  documented: this is the model's assumption). A queue dispatches in issue order: an operation cannot start
  before the one ahead of it in its queue has started, so streams sharing a queue wait for each other (a
  *false dependency*: "if you create more streams than connections (default = 8) then streams will alias to
  connections which can result in false dependencies", NVIDIA Developer Forums, "How many streams?
  Maximum number of streams"). Every card in :mod:`gpucourse.gpu_specs` (compute capability 7.0 to 9.0) works
  this way: Hyper-Q came with compute capability 3.5.
* **One queue per engine** (``queues="per-engine"``): every engine takes its operations in issue order
  across all streams, as on cards before Hyper-Q (Fermi, compute capability 2.x, and 3.0): that is the
  breadth-first against depth-first issue example of the CUDA 4 Programming Guide ("Overlapping Behavior")
  and NVIDIA's "CUDA C/C++ Streams and Concurrency" webinar (2011). There, a copy out issued behind a kernel
  holds every later copy of its engine: the issue-order trap of one copy engine, which Hyper-Q's queues remove.
* **Concurrent kernels** (Hyper-Q only). Kernels of different streams run at once when they fit: a kernel
  launched with ``blocks`` takes ``min(1, blocks / (SMs × resident blocks per SM))`` of the GPU (no ``blocks``:
  all of it), kernels run together while their shares sum to at most 1, and at most ``max_resident_grids``
  at once (128 for every compute capability in ``gpu_specs``: Programming Guide, "Features and Technical
  Specifications", "Maximum number of resident grids per device (Concurrent Kernel Execution)"). With one
  queue per engine, kernels never overlap.
* **Priorities.** ``Schedule.stream(name, priority=p)``: lower numbers are higher priorities, 0 the default
  (``cudaStreamCreateWithPriority``; ``torch.cuda.Stream(priority=-1)``). Among kernels ready at the same
  moment, the higher-priority stream's starts first; running work is never preempted. Copies ignore
  priorities: "stream priorities have no effect on host-to-device and device-to-host memory operations"
  (CUDA Driver API, ``cuStreamCreateWithPriority``).
* **Readiness.** An operation starts when the host has issued it, its stream's previous operation is done,
  the event it waits on is done, the operation ahead of it in its queue has started, and its engine has room;
  ties go to priority (kernels), then issue order. The host issues its calls in order, ``issue_seconds`` each.
* **Copies.** Pinned host memory copies at the link's bandwidth and returns control to the host at once
  (``non_blocking``). A pageable copy is staged through a pinned bounce buffer, which the model prices as
  half the link's bandwidth, and it blocks the host until it is done. Every copy priced from its bytes also
  pays ``copy_latency`` (default ``COPY_LATENCY_SECONDS``, ``gpu_specs.HOST_LINK_LATENCY_SECONDS``: about 10 µs,
  an *assumption* for every card, to be calibrated from the measured pipelines of ``scripts/gpu_check.sh``); a copy
  given in seconds takes exactly those.
* **Events.** ``record(event, stream)`` marks the point the stream has reached; ``wait(event, stream)`` holds
  the stream's later operations until that point is done (a wait on an event never recorded is a no-op, as
  in CUDA). ``synchronize()`` blocks the host until everything issued is done.
* **Device memory** (PyTorch's caching allocator: "CUDA semantics", sections "Memory management" and
  ``Tensor.record_stream``; ``c10/cuda/CUDACachingAllocator.cpp``). ``allocate(buffer, nbytes, stream)``
  takes a block (sizes rounded up to 512 bytes, ``kMinBlockSize``) when the host issues the call that creates
  the buffer; ``release(buffer)`` gives it back to the allocator's cache, not to the device. The next
  allocation of the same size *on the stream that allocated it* reuses a cached block at once, whatever other
  streams still do with the old buffer, unless ``record_stream(buffer, stream)`` was called: then the block
  waits until the work that stream had queued at the release is done (the allocator polls an event it records
  at the release). Otherwise the allocator takes a new block from the device. The model reuses only blocks of
  the same rounded size (torch may also split a larger cached block) and never returns blocks to the device
  (``torch.cuda.empty_cache``): ``Timeline.memory`` is the device footprint, the blocks held over time.
* Streams and events are named by non-empty strings; the host is not a stream and has no name a stream
  could take (it is ``None`` inside the model), so no stream's work counts as the host's.

``Schedule.simulate()`` returns a :class:`Timeline`: the operations with their engine, start and end, the
makespan, the ideal bound (the busiest engine's total time: no schedule can beat it), the device footprint,
and the **races**: an operation that reads or writes a memory block another stream wrote (or read, for a
write) with nothing ordering the two. Races are found on blocks, so reusing a block another stream still
reads is a race too (write after read), which ``record_stream`` or an event removes. The model orders
operations with vector clocks, so a missing ``wait`` shows as a race even when the timeline happens to look right.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .. import gpu_specs

COMPUTE, COPY, H2D, D2H, HOST = "compute", "copy", "h2d", "d2h", "host"
HYPER_Q, PER_ENGINE = "hyper-q", "per-engine"
PAGEABLE_BANDWIDTH_FRACTION = 0.5  # staging through a pinned bounce buffer halves the rate (modelled)
# A copy's fixed cost: gpu_specs.HOST_LINK_LATENCY_SECONDS (about 10 µs, sources cited there), an assumption for every
# card, to be calibrated from the GPU check's measured pipelines (scripts/compare_streams.py, run by scripts/gpu_check.sh).
COPY_LATENCY_SECONDS = gpu_specs.HOST_LINK_LATENCY_SECONDS
DEFAULT_CONNECTIONS, MAX_CONNECTIONS = 8, 32  # CUDA_DEVICE_MAX_CONNECTIONS: default 8, range 1-32
MAX_RESIDENT_GRIDS = 128  # Programming Guide: compute capability 7.0 and up (every card of gpu_specs)
BLOCK_ROUNDING = 512  # CUDACachingAllocator.cpp: kMinBlockSize, every size rounded up to a multiple of it

DEVICE_KINDS = frozenset({H2D, D2H, "kernel", "record", "wait"})
MEMORY_KINDS = frozenset({"alloc", "free", "record_stream"})  # host bookkeeping: part of a call, no issue time of its own
_DEFAULT_CARD = gpu_specs.gpu("T4")
_SHARE_SLACK = 1e-9


@dataclass(frozen=True)
class Interval:
    """One operation as the model ran it."""

    label: str
    kind: str  # "h2d", "d2h", "kernel", "record", "wait"
    stream: str
    engine: str | None  # None for events (they take no engine time)
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Race:
    """``operation`` touched ``buffer`` after ``other`` did, on another stream, with nothing ordering them.

    ``reused``: the buffer ``other`` touched, when the allocator had given its block to ``buffer`` since."""

    operation: str
    other: str
    buffer: str
    kind: str  # "read after write", "write after write", "write after read"
    reused: str | None = None

    def __str__(self) -> str:
        if self.reused is None:
            return f"{self.operation} ({self.kind} of {self.buffer!r}) is not ordered after {self.other}: add an event and a wait"
        return (f"{self.operation} ({self.kind} of {self.buffer!r}, in the memory block {self.reused!r} had until it was released) "
                f"is not ordered after {self.other}: wait for it with an event before reusing the memory, or record_stream")


@dataclass(frozen=True)
class Allocation:
    """A buffer given a memory block: a new one from the device, or one the allocator had cached (``reused``)."""

    buffer: str
    block: int
    nbytes: int  # the block's size: the buffer's bytes rounded up to BLOCK_ROUNDING
    stream: str
    time: float
    reused: bool


@dataclass
class Timeline:
    intervals: list[Interval]
    races: list[Race]
    engine_busy: dict[str, float]  # engine -> total busy seconds (compute: each kernel weighted by its share of the GPU)
    host_seconds: float  # when the host was free again after its last call
    memory: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes the allocator holds), from (0, 0)
    memory_in_use: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes of buffers not released)
    allocations: list[Allocation] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        """From the first issue (time 0) to the end of the last operation or host wait."""
        return max([interval.end for interval in self.intervals] + [self.host_seconds], default=0.0)

    @property
    def ideal_seconds(self) -> float:
        """The busiest engine's total time: a lower bound for any schedule of the same operations."""
        return max(self.engine_busy.values(), default=0.0)

    @property
    def peak_device_bytes(self) -> int:
        """The largest device footprint: the bytes of every block the allocator took from the device."""
        return max((nbytes for _, nbytes in self.memory), default=0)

    def on(self, engine: str) -> list[Interval]:
        return [interval for interval in self.intervals if interval.engine == engine]

    def of(self, label: str) -> Interval:
        return next(interval for interval in self.intervals if interval.label == label)


@dataclass
class _Op:
    label: str
    kind: str
    stream: str | None  # None: the host (its reads and synchronizations); an allocation's stream for memory calls
    seconds: float = 0.0
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    event: str | None = None
    blocking: bool = False
    target: str | None = None  # what a synchronize waits for: one stream, or every stream when None
    share: float = 1.0  # a kernel's share of the GPU
    nbytes: int = 0  # an allocation's size
    buffer: str | None = None  # what a memory call is about


class _Clock(dict):
    """A vector clock: stream -> how many of its operations are known to be done before this point."""

    def join(self, other: dict) -> _Clock:
        for stream, count in other.items():
            if count > self.get(stream, 0):
                self[stream] = count
        return self


@dataclass
class Schedule:
    """Operations in the order the host issues them; ``simulate()`` runs the model.

    ``copy_engines``: 1 (both directions share one engine) or 2 or more (one per direction).
    ``link_bandwidth``: bytes/s of pinned copies each way. ``issue_seconds``: host time per call.
    ``queues``: ``"hyper-q"`` (``connections`` hardware queues, concurrent kernels: every current card) or
    ``"per-engine"`` (one queue per engine across all streams, kernels one at a time: cards before Hyper-Q).
    ``copy_latency``: seconds every copy priced from its bytes pays on top (an assumption; 0 gives a flat rate).
    ``sms``, ``blocks_per_sm``, ``max_resident_grids``: what sets a kernel's share of the GPU (a T4's by default).
    """

    copy_engines: int = 2
    link_bandwidth: float = _DEFAULT_CARD.host_link_bandwidth
    issue_seconds: float = 0.0
    ops: list[_Op] = field(default_factory=list)
    queues: str = HYPER_Q
    connections: int = DEFAULT_CONNECTIONS
    copy_latency: float = COPY_LATENCY_SECONDS
    sms: int = _DEFAULT_CARD.sms
    blocks_per_sm: int = _DEFAULT_CARD.limits.max_blocks_per_sm
    max_resident_grids: int = MAX_RESIDENT_GRIDS
    priorities: dict[str, int] = field(default_factory=dict)
    _live: dict[str, int] = field(default_factory=dict, repr=False)  # allocated buffers not released: name -> bytes
    _released: set[str] = field(default_factory=set, repr=False)
    _used: set[str] = field(default_factory=set, repr=False)  # streams with an operation issued

    @classmethod
    def for_gpu(cls, name: str, *, copy_engines: int | None = None, **options) -> Schedule:
        """``name``'s link, copy engines, SMs and resident blocks per SM (``copy_engines`` overrides the card's: 1 models a single engine)."""
        spec = gpu_specs.gpu(name)
        return cls(copy_engines=copy_engines or spec.copy_engines, link_bandwidth=spec.host_link_bandwidth, sms=spec.sms,
                   blocks_per_sm=spec.limits.max_blocks_per_sm, **options)

    def __post_init__(self):
        if self.copy_engines < 1:
            raise ValueError(f"a GPU has at least one copy engine, got copy_engines={self.copy_engines}")
        if self.queues not in (HYPER_Q, PER_ENGINE):
            raise ValueError(f"queues is {HYPER_Q!r} (current cards) or {PER_ENGINE!r} (cards before Hyper-Q), got {self.queues!r}")
        if not (isinstance(self.connections, int) and 1 <= self.connections <= MAX_CONNECTIONS):
            raise ValueError(f"CUDA_DEVICE_MAX_CONNECTIONS is 1 to {MAX_CONNECTIONS}, got connections={self.connections!r}")
        _duration(self.copy_latency)
        if min(self.sms, self.blocks_per_sm, self.max_resident_grids) < 1:
            raise ValueError("sms, blocks_per_sm and max_resident_grids are at least 1")

    # -- issuing ---------------------------------------------------------------------------
    def copy_seconds(self, nbytes: int, pinned: bool = True) -> float:
        """A copy of ``nbytes``: ``copy_latency`` plus the bytes at the link's rate (half of it from pageable memory)."""
        bandwidth = self.link_bandwidth * (1.0 if pinned else PAGEABLE_BANDWIDTH_FRACTION)
        return self.copy_latency + nbytes / bandwidth

    def grid_share(self, blocks: int, blocks_per_sm: int | None = None) -> float:
        """The share of the GPU a grid of ``blocks`` takes: min(1, blocks / (SMs × resident blocks per SM))."""
        if not (isinstance(blocks, int) and blocks >= 1):
            raise ValueError(f"a grid has at least one block, got blocks={blocks!r}")
        return min(1.0, blocks / (self.sms * (blocks_per_sm or self.blocks_per_sm)))

    def stream(self, name: str, *, priority: int = 0) -> str:
        """Give stream ``name`` a priority before its first operation: lower numbers are higher priorities, 0 the default."""
        name = _named(name, "stream")
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError(f"a stream priority is an integer, got {priority!r}")
        if name in self._used:
            raise ValueError(f"stream {name!r} already has work: a priority is set when the stream is created")
        self.priorities[name] = priority
        return name

    def h2d(self, label: str, stream: str = "default", *, seconds: float | None = None, nbytes: int | None = None,
            pinned: bool = True, buffer: str | None = None, source: str | None = None) -> None:
        """Copy host buffer ``source`` (if named) → device buffer ``buffer`` (default: ``label``)."""
        self._copy(H2D, label, _named(stream, "stream"), seconds, nbytes, pinned, reads=(source,) if source else (), writes=(buffer or label,))

    def d2h(self, label: str, stream: str = "default", *, seconds: float | None = None, nbytes: int | None = None,
            pinned: bool = True, buffer: str | None = None, into: str | None = None) -> None:
        """Copy device buffer ``buffer`` → host buffer ``into`` (default: ``label``)."""
        self._copy(D2H, label, _named(stream, "stream"), seconds, nbytes, pinned, reads=(buffer or label,), writes=(into or label,))

    def kernel(self, label: str, stream: str = "default", *, seconds: float, reads=(), writes=(), blocks: int | None = None,
               blocks_per_sm: int | None = None) -> None:
        """A kernel of ``seconds``; launched with ``blocks`` (resident ``blocks_per_sm`` at most) it takes a share of the GPU."""
        share = 1.0 if blocks is None else self.grid_share(blocks, blocks_per_sm)
        self._add(_Op(label, "kernel", _named(stream, "stream"), _duration(seconds), tuple(reads), tuple(writes), share=share))

    def record(self, event: str, stream: str = "default") -> None:
        self._add(_Op(f"record {event}", "record", _named(stream, "stream"), event=_named(event, "event")))

    def wait(self, event: str, stream: str = "default") -> None:
        self._add(_Op(f"wait {event}", "wait", _named(stream, "stream"), event=_named(event, "event")))

    def synchronize(self, stream: str | None = None) -> None:
        """The host waits for ``stream`` (every stream when None)."""
        target = None if stream is None else _named(stream, "stream")
        self._add(_Op("synchronize" if stream is None else f"synchronize {stream}", "sync", None, blocking=True, target=target))

    def host_read(self, buffer: str, label: str | None = None) -> None:
        """The host reads a host buffer (a result it returns): races with a copy it did not wait for."""
        self._add(_Op(label or f"host reads {buffer}", "host_read", None, reads=(buffer,)))

    def allocate(self, buffer: str, nbytes: int, stream: str = "default") -> None:
        """Device buffer ``buffer`` of ``nbytes`` gets a memory block, allocated on ``stream`` (the current stream of the call)."""
        buffer, stream = _named(buffer, "buffer"), _named(stream, "stream")
        if not (isinstance(nbytes, int) and nbytes >= 0):
            raise ValueError(f"{buffer}: a buffer has a whole number of bytes ≥ 0, got {nbytes!r}")
        if buffer in self._live:
            raise ValueError(f"{buffer!r} is allocated already: release it first")
        self._live[buffer] = nbytes
        self._released.discard(buffer)
        self._add(_Op(f"allocate {buffer}", "alloc", stream, nbytes=nbytes, buffer=buffer))

    def release(self, buffer: str) -> None:
        """The host gives ``buffer``'s block back to the caching allocator (what dropping a tensor's last reference does)."""
        self._owned(buffer, "release")
        del self._live[buffer]
        self._released.add(buffer)
        self._add(_Op(f"release {buffer}", "free", None, buffer=buffer))

    def record_stream(self, buffer: str, stream: str) -> None:
        """``Tensor.record_stream``: when ``buffer`` is released, its block waits for the work ``stream`` has queued then."""
        self._owned(buffer, "record_stream")
        self._add(_Op(f"record_stream {buffer}", "record_stream", _named(stream, "stream"), buffer=buffer))

    def _owned(self, buffer, what: str) -> None:
        if buffer not in self._live:
            raise ValueError(f"{what}: {buffer!r} is not an allocated buffer" + (" (it was released)" if buffer in self._released else ""))

    def _copy(self, kind, label, stream, seconds, nbytes, pinned, reads, writes):
        if (seconds is None) == (nbytes is None):
            raise ValueError(f"{label}: give the copy's seconds or its nbytes, not both")
        duration = _duration(seconds) if seconds is not None else self.copy_seconds(nbytes, pinned)
        self._add(_Op(label, kind, stream, duration, reads, writes, blocking=not pinned))

    def _add(self, op: _Op) -> None:
        for buffer in (*op.reads, *op.writes):
            if buffer in self._released and op.kind in DEVICE_KINDS:
                raise ValueError(f"{op.label}: {buffer!r} was released: its memory may hold another buffer now")
        if op.kind in DEVICE_KINDS:
            self._used.add(op.stream)
        self.ops.append(op)

    # -- running ---------------------------------------------------------------------------
    def engine_of(self, kind: str) -> str | None:
        if kind == "kernel":
            return COMPUTE
        if kind in (H2D, D2H):
            return kind if self.copy_engines >= 2 else COPY
        return None

    def simulate(self) -> Timeline:
        return _Run(self).result()


def _named(name, what: str) -> str:
    """A stream's or an event's name: a non-empty string, so nothing but the host is the host (``None``)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a {what} is named by a non-empty string, got {name!r}")
    return name


def _duration(seconds: float) -> float:
    if not seconds >= 0:
        raise ValueError(f"a duration must be a number ≥ 0, got {seconds!r}")
    return float(seconds)


def _rounded(nbytes: int) -> int:
    return -(-max(nbytes, 1) // BLOCK_ROUNDING) * BLOCK_ROUNDING


class _Run:
    """The event-driven simulation, then the race check in issue order on the memory blocks it assigned."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule
        self.ops = schedule.ops
        n = len(self.ops)
        self.engine = [schedule.engine_of(op.kind) for op in self.ops]
        self.start: list[float | None] = [None] * n
        self.end: list[float | None] = [None] * n
        self.done = [False] * n
        self.issued = [False] * n
        self.accesses: list[tuple[tuple, tuple]] = [((), ())] * n  # per op: ((block, buffer) read, ...), (... written)
        self.markers: dict[int, list[int]] = {}  # a reusing allocation -> the operations its block waited for
        self._plan()

    def _plan(self) -> None:
        """Static links: each operation's stream predecessor, the record it waits on, and its hardware queue."""
        n, per_engine = len(self.ops), self.schedule.queues == PER_ENGINE
        self.stream_prev: list[int | None] = [None] * n
        self.wait_on: list[int | None] = [None] * n
        last_in_stream, last_record, queue_of_stream, queues = {}, {}, {}, {}
        for i, op in enumerate(self.ops):
            if op.kind not in DEVICE_KINDS:
                continue
            self.stream_prev[i] = last_in_stream.get(op.stream)
            last_in_stream[op.stream] = i
            if op.kind == "record":
                last_record[op.event] = i
            elif op.kind == "wait":
                self.wait_on[i] = last_record.get(op.event)
            if per_engine:
                key = self.engine[i] or ("events of", op.stream)
            else:  # round-robin over the connections, in the order streams first get work
                key = queue_of_stream.setdefault(op.stream, len(queue_of_stream) % self.schedule.connections)
            queues.setdefault(key, []).append(i)
        self.queues = list(queues.values())
        self.heads = [0] * len(self.queues)

    # -- the simulation ---------------------------------------------------------------------
    def result(self) -> Timeline:
        self._simulate()
        per_engine = self.schedule.queues == PER_ENGINE
        intervals, busy = [], {}
        for i, op in enumerate(self.ops):
            if op.kind not in DEVICE_KINDS:
                continue
            engine = self.engine[i]
            intervals.append(Interval(op.label, op.kind, op.stream, engine, self.start[i], self.end[i]))
            if engine is not None:
                weight = op.share if engine == COMPUTE and not per_engine else 1.0
                busy[engine] = busy.get(engine, 0.0) + op.seconds * weight
        races = self._races()
        return Timeline(intervals, races, busy, self.host, _steps(self.footprint), _steps(self.in_use), self.allocations)

    def _simulate(self) -> None:
        ops, schedule = self.ops, self.schedule
        self.host, self.blocked = 0.0, None  # when the host issues its next call; what it waits for
        self.pending: dict[str | None, int] = {None: 0}  # issued, not done: per stream, and None for all
        self.latest_end: dict[str | None, float] = {None: 0.0}
        self.copy_busy: dict[str, bool] = {}
        self.kernels_running, self.share_running = 0, 0.0
        self.last_issued: dict[str, int] = {}
        self.blocks: dict[str, tuple[int, int, str]] = {}  # live buffer -> (block, bytes, allocating stream)
        self.recorded: dict[str, set[str]] = {}
        self.cache: list[tuple[int, int, str, list[int]]] = []  # released blocks: (block, bytes, stream, must be done first)
        self.new_blocks = 0
        self.footprint, self.in_use, self.allocations = [(0.0, 0)], [(0.0, 0)], []
        heap: list[tuple[float, int]] = []
        now, next_op = 0.0, 0
        while True:
            changed = True
            while changed:
                changed = False
                while heap and heap[0][0] <= now:
                    _, i = heapq.heappop(heap)
                    self._finish(i)
                    changed = True
                if self.blocked is not None and self._unblocked():
                    changed = True
                while self.blocked is None and next_op < len(ops):
                    cost = 0.0 if ops[next_op].kind in MEMORY_KINDS else schedule.issue_seconds
                    if self.host + cost > now:
                        break
                    self.host += cost
                    self._issue(next_op)
                    next_op += 1
                    changed = True
                changed = self._dispatch(now, heap) or changed
            upcoming = [heap[0][0]] if heap else []
            if self.blocked is None and next_op < len(ops):
                upcoming.append(self.host + (0.0 if ops[next_op].kind in MEMORY_KINDS else schedule.issue_seconds))
            if not upcoming:
                break
            now = max(now, min(upcoming))
        stuck = [op.label for op, done in zip(ops, self.done) if op.kind in DEVICE_KINDS and not done]
        if stuck:  # every dependency points at an operation issued earlier, so this cannot happen
            raise RuntimeError(f"the model could not run {stuck[:3]}")

    def _issue(self, i: int) -> None:
        op = self.ops[i]
        self.issued[i] = True
        if op.kind in DEVICE_KINDS:
            self.accesses[i] = (self._blocks_of(op.reads), self._blocks_of(op.writes))
            for key in (op.stream, None):
                self.pending[key] = self.pending.get(key, 0) + 1
            self.last_issued[op.stream] = i
            if op.blocking:  # a pageable copy: the host waits for it
                self.blocked = ("op", i)
        elif op.kind == "sync":
            self.blocked = ("stream", op.target)
        elif op.kind == "host_read":
            self.accesses[i] = (self._blocks_of(op.reads), ())
        elif op.kind == "alloc":
            self._allocate(i, op)
        elif op.kind == "free":
            self._free(op.buffer)
        elif op.kind == "record_stream":
            self.recorded.setdefault(op.buffer, set()).add(op.stream)

    def _unblocked(self) -> bool:
        kind, what = self.blocked
        if kind == "op":
            if not self.done[what]:
                return False
            self.host = max(self.host, self.end[what])
        else:
            if self.pending.get(what, 0):
                return False
            self.host = max(self.host, self.latest_end.get(what, 0.0))
        self.blocked = None
        return True

    def _dispatch(self, now: float, heap) -> bool:
        """Start every queue head that is ready and fits its engine, best first, until none does."""
        started_any = False
        while True:
            heads = []
            for q, queue in enumerate(self.queues):
                if self.heads[q] < len(queue) and self._ready(queue[self.heads[q]]):
                    i = queue[self.heads[q]]
                    op = self.ops[i]
                    priority = self.schedule.priorities.get(op.stream, 0) if op.kind == "kernel" else 0
                    heads.append((priority, i, q))
            started = False
            for _, i, q in sorted(heads):
                if self._fits(i):
                    self._begin(i, now, heap)
                    self.heads[q] += 1
                    started = True
            if not started:
                return started_any
            started_any = True

    def _ready(self, i: int) -> bool:
        before, event = self.stream_prev[i], self.wait_on[i]
        return self.issued[i] and (before is None or self.done[before]) and (event is None or self.done[event])

    def _fits(self, i: int) -> bool:
        engine = self.engine[i]
        if engine is None:
            return True
        if engine != COMPUTE:
            return not self.copy_busy.get(engine, False)
        if self.schedule.queues == PER_ENGINE:
            return self.kernels_running == 0
        return (self.kernels_running < self.schedule.max_resident_grids
                and self.share_running + self.ops[i].share <= 1.0 + _SHARE_SLACK)

    def _begin(self, i: int, now: float, heap) -> None:
        op, engine = self.ops[i], self.engine[i]
        self.start[i], self.end[i] = now, now + op.seconds
        if engine == COMPUTE:
            self.kernels_running += 1
            self.share_running += op.share
        elif engine is not None:
            self.copy_busy[engine] = True
        heapq.heappush(heap, (self.end[i], i))

    def _finish(self, i: int) -> None:
        op, engine = self.ops[i], self.engine[i]
        self.done[i] = True
        if engine == COMPUTE:
            self.kernels_running -= 1
            self.share_running = max(0.0, self.share_running - op.share)
        elif engine is not None:
            self.copy_busy[engine] = False
        for key in (op.stream, None):
            self.pending[key] -= 1
            self.latest_end[key] = max(self.latest_end.get(key, 0.0), self.end[i])

    # -- the caching allocator ----------------------------------------------------------------
    def _blocks_of(self, buffers) -> tuple:
        """Each buffer with what it occupies: its block while allocated, else the buffer itself (a host buffer, or one never allocated)."""
        return tuple((("block", self.blocks[b][0]) if b in self.blocks else ("buffer", b), b) for b in buffers)

    def _allocate(self, i: int, op: _Op) -> None:
        size = _rounded(op.nbytes)
        for position, (cached, cached_size, stream, wait_for) in enumerate(self.cache):
            if cached_size == size and stream == op.stream and all(self.done[m] for m in wait_for):
                del self.cache[position]
                block = cached
                self.markers[i] = wait_for  # the host saw them done (the allocator queried their events)
                reused = True
                break
        else:
            block, reused = self.new_blocks, False
            self.new_blocks += 1
            self._step(self.footprint, size)
        self.blocks[op.buffer] = (block, size, op.stream)
        self.recorded.pop(op.buffer, None)
        self._step(self.in_use, size)
        self.allocations.append(Allocation(op.buffer, block, size, op.stream, self.host, reused))

    def _free(self, buffer: str) -> None:
        block, size, stream = self.blocks.pop(buffer)
        wait_for = [self.last_issued[s] for s in sorted(self.recorded.pop(buffer, ())) if s != stream and s in self.last_issued]
        self.cache.append((block, size, stream, wait_for))
        self._step(self.in_use, -size)

    def _step(self, steps: list, change: int) -> None:
        steps.append((self.host, steps[-1][1] + change))

    # -- races ---------------------------------------------------------------------------------
    def _races(self) -> list[Race]:
        """In issue order, with vector clocks: every access to a block checked against the last conflicting one."""
        host_clock = _Clock()
        stream_clock: dict[str, _Clock] = {}
        clocks: list[_Clock | None] = [None] * len(self.ops)
        self.last_write: dict[tuple, tuple] = {}
        self.reads_since_write: dict[tuple, list] = {}
        self.found: list[Race] = []
        for i, op in enumerate(self.ops):
            if op.kind == "sync":
                for stream, clock in stream_clock.items():
                    if op.target in (None, stream):
                        host_clock.join(clock)
            elif op.kind == "host_read":
                self._check(op, host_clock, self.accesses[i])
            elif op.kind == "alloc":
                for marker in self.markers.get(i, ()):
                    host_clock.join(clocks[marker])
            elif op.kind in DEVICE_KINDS:
                clock = stream_clock.setdefault(op.stream, _Clock()).join(host_clock)
                if self.wait_on[i] is not None:
                    clock.join(clocks[self.wait_on[i]])
                clock[op.stream] = clock.get(op.stream, 0) + 1
                clocks[i] = _Clock(clock)
                self._check(op, clocks[i], self.accesses[i])
                if op.blocking:
                    host_clock.join(clocks[i])
        return self.found

    def _check(self, op: _Op, clock: _Clock, accesses) -> None:
        """Record a race for each access ``clock`` does not order after the conflicting one."""
        reads, writes = accesses
        for block, buffer in reads:
            if block in self.last_write:
                self._race_unless_ordered(op, clock, buffer, *self.last_write[block], "read after write")
            self.reads_since_write.setdefault(block, []).append((op, clock, buffer))
        for block, buffer in writes:
            if block in self.last_write:
                self._race_unless_ordered(op, clock, buffer, *self.last_write[block], "write after write")
            for reader, reader_clock, read in self.reads_since_write.pop(block, []):
                if reader is not op:
                    self._race_unless_ordered(op, clock, buffer, reader, reader_clock, read, "write after read")
            self.last_write[block] = (op, clock, buffer)

    def _race_unless_ordered(self, op, clock, buffer, other, other_clock, other_buffer, kind) -> None:
        if other.stream == op.stream:
            return  # a stream (or the host, None) is ordered with itself; no stream is named None
        if other_clock.get(other.stream, 0) > clock.get(other.stream, 0):
            self.found.append(Race(op.label, other.label, buffer, kind, None if other_buffer == buffer else other_buffer))


def _steps(steps: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """One step per moment (the last value at each time), and none that changes nothing."""
    merged: list[tuple[float, int]] = []
    for time, value in steps:
        if merged and merged[-1][0] == time:
            merged[-1] = (time, value)
        else:
            merged.append((time, value))
    return [step for position, step in enumerate(merged) if position == 0 or step[1] != merged[position - 1][1]]


# -- the chunked pipeline, the model's reference ------------------------------------------------


def pipeline(n_chunks: int, h2d: float, compute: float, d2h: float, *, copy_engines: int = 2,
             order: str = "breadth", pinned: bool = True, streams: int | None = None, queues: str = HYPER_Q,
             connections: int = DEFAULT_CONNECTIONS) -> Schedule:
    """Chunk i copied in (``h2d`` seconds from pinned memory), computed and copied out on stream
    i % ``streams`` (one stream per chunk when None), issued ``order``-first:

    * ``"breadth"``: all copies in, then all kernels, then all copies out;
    * ``"depth"``: chunk 0's three steps, then chunk 1's, …

    ``queues`` and ``connections`` as in :class:`Schedule`: ``queues="per-engine"`` is the one-queue-per-engine
    model of cards before Hyper-Q (assignment 05's Question 1); on Hyper-Q, more streams than ``connections``
    share queues. With ``pinned=False`` the host memory is pageable: each copy is staged (it takes
    1 / ``PAGEABLE_BANDWIDTH_FRACTION`` times as long) and blocks the host until it is done.
    The durations are given: no ``copy_latency`` is added. Simulated operation by operation (three per
    chunk): a lecture's few chunks, not a formula.
    """
    if streams is not None and streams < 1:
        raise ValueError(f"a pipeline needs at least one stream, got streams={streams}")
    schedule = Schedule(copy_engines=copy_engines, queues=queues, connections=connections)
    stretch = 1.0 if pinned else 1.0 / PAGEABLE_BANDWIDTH_FRACTION

    def lane(i: int) -> str:
        return f"s{i if streams is None else i % streams}"

    steps = [lambda i: schedule.h2d(f"in{i}", lane(i), seconds=h2d * stretch, pinned=pinned, buffer=f"x{i}"),
             lambda i: schedule.kernel(f"k{i}", lane(i), seconds=compute, reads=[f"x{i}"], writes=[f"y{i}"]),
             lambda i: schedule.d2h(f"out{i}", lane(i), seconds=d2h * stretch, pinned=pinned, buffer=f"y{i}", into=f"h{i}")]
    if order == "breadth":
        calls = [(issue, i) for issue in steps for i in range(n_chunks)]
    elif order == "depth":
        calls = [(issue, i) for i in range(n_chunks) for issue in steps]
    else:
        raise ValueError(f"order is 'breadth' or 'depth', got {order!r}")
    for issue, i in calls:
        issue(i)
    return schedule
