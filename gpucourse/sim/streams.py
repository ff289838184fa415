"""A discrete-event model of one GPU's engines: copies, kernels, streams and events.

What the model assumes (each is how CUDA documents it; the numbers are modelled, never measured):

* One compute engine and ``copy_engines`` copy engines. With 2 or more, host-to-device and
  device-to-host copies each have an engine of their own and overlap each other; with 1, both
  directions share it.
* An engine runs one operation at a time, in the order the host issued them to it, even when a
  later one is ready first: that is the "issue-order trap" of a single copy engine (a chunk's copy
  back waits for its kernel, and every copy in issued after it waits too).
* A stream runs its operations one after the other. An operation starts when its stream's previous
  operation, every event its stream waits on, its engine, and the host that issued it are all ready.
* Pinned host memory copies at the link's bandwidth and returns control to the host at once
  (``non_blocking``). A pageable copy is staged through a pinned bounce buffer, which the model
  prices as half the link's bandwidth, and it blocks the host until it is done.
* ``record(event, stream)`` marks the point the stream has reached; ``wait(event, stream)`` holds
  the stream's later operations until that point is done (a wait on an event never recorded is a
  no-op, as in CUDA). ``synchronize()`` blocks the host until everything issued is done.
* Streams and events are named by non-empty strings; the host is not a stream and has no name a
  stream could take (it is ``None`` inside the model), so no stream's work counts as the host's.

``Schedule.simulate()`` returns a :class:`Timeline`: the operations with their engine, start and
end, the makespan, the ideal bound (the busiest engine's total time: no schedule can beat it) and
the **races**: an operation that reads or writes a buffer another stream wrote (or read, for a
write) with nothing ordering the two. The model orders operations with vector clocks, so a missing
``wait`` shows as a race even when the timeline happens to look right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import gpu_specs

COMPUTE, COPY, H2D, D2H, HOST = "compute", "copy", "h2d", "d2h", "host"
PAGEABLE_BANDWIDTH_FRACTION = 0.5  # staging through a pinned bounce buffer halves the rate (modelled)


@dataclass(frozen=True)
class Interval:
    """One operation as the model ran it."""

    label: str
    kind: str  # "h2d", "d2h", "kernel", "record", "wait", "host"
    stream: str
    engine: str | None  # None for events (they take no engine time)
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Race:
    """``operation`` touched ``buffer`` after ``other`` did, on another stream, with nothing ordering them."""

    operation: str
    other: str
    buffer: str
    kind: str  # "read after write", "write after write", "write after read"

    def __str__(self) -> str:
        return f"{self.operation} ({self.kind} of {self.buffer!r}) is not ordered after {self.other}: add an event and a wait"


@dataclass
class Timeline:
    intervals: list[Interval]
    races: list[Race]
    engine_busy: dict[str, float]  # engine -> total busy seconds
    host_seconds: float  # when the host was free again after its last call

    @property
    def makespan(self) -> float:
        """From the first issue (time 0) to the end of the last operation or host wait."""
        return max([interval.end for interval in self.intervals] + [self.host_seconds], default=0.0)

    @property
    def ideal_seconds(self) -> float:
        """The busiest engine's total time: a lower bound for any schedule of the same operations."""
        return max(self.engine_busy.values(), default=0.0)

    def on(self, engine: str) -> list[Interval]:
        return [interval for interval in self.intervals if interval.engine == engine]

    def of(self, label: str) -> Interval:
        return next(interval for interval in self.intervals if interval.label == label)


@dataclass
class _Op:
    label: str
    kind: str
    stream: str | None  # None: the host (its reads and synchronizations)
    seconds: float = 0.0
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    event: str | None = None
    blocking: bool = False
    target: str | None = None  # what a synchronize waits for: one stream, or every stream when None


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
    """

    copy_engines: int = 2
    link_bandwidth: float = gpu_specs.gpu("T4").host_link_bandwidth
    issue_seconds: float = 0.0
    ops: list[_Op] = field(default_factory=list)

    @classmethod
    def for_gpu(cls, name: str, *, copy_engines: int | None = None, **options) -> Schedule:
        """``name``'s link and copy engines (``copy_engines`` overrides the card's: 1 models a single engine)."""
        spec = gpu_specs.gpu(name)
        return cls(copy_engines=copy_engines or spec.copy_engines, link_bandwidth=spec.host_link_bandwidth, **options)

    def __post_init__(self):
        if self.copy_engines < 1:
            raise ValueError(f"a GPU has at least one copy engine, got copy_engines={self.copy_engines}")

    # -- issuing ---------------------------------------------------------------------------
    def copy_seconds(self, nbytes: int, pinned: bool = True) -> float:
        bandwidth = self.link_bandwidth * (1.0 if pinned else PAGEABLE_BANDWIDTH_FRACTION)
        return nbytes / bandwidth

    def h2d(self, label: str, stream: str = "default", *, seconds: float | None = None, nbytes: int | None = None,
            pinned: bool = True, buffer: str | None = None, source: str | None = None) -> None:
        """Copy host buffer ``source`` (if named) → device buffer ``buffer`` (default: ``label``)."""
        self._copy(H2D, label, _named(stream, "stream"), seconds, nbytes, pinned, reads=(source,) if source else (), writes=(buffer or label,))

    def d2h(self, label: str, stream: str = "default", *, seconds: float | None = None, nbytes: int | None = None,
            pinned: bool = True, buffer: str | None = None, into: str | None = None) -> None:
        """Copy device buffer ``buffer`` → host buffer ``into`` (default: ``label``)."""
        self._copy(D2H, label, _named(stream, "stream"), seconds, nbytes, pinned, reads=(buffer or label,), writes=(into or label,))

    def kernel(self, label: str, stream: str = "default", *, seconds: float, reads=(), writes=()) -> None:
        self._add(_Op(label, "kernel", _named(stream, "stream"), _duration(seconds), tuple(reads), tuple(writes)))

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

    def _copy(self, kind, label, stream, seconds, nbytes, pinned, reads, writes):
        if (seconds is None) == (nbytes is None):
            raise ValueError(f"{label}: give the copy's seconds or its nbytes, not both")
        duration = _duration(seconds) if seconds is not None else self.copy_seconds(nbytes, pinned)
        self._add(_Op(label, kind, stream, duration, reads, writes, blocking=not pinned))

    def _add(self, op: _Op) -> None:
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


class _Run:
    """One pass in issue order: every dependency of an operation was issued before it."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule
        self.host = 0.0  # when the host issues its next call
        self.host_clock = _Clock()
        self.stream_ready: dict[str, float] = {}
        self.stream_clock: dict[str, _Clock] = {}
        self.engine_free: dict[str, float] = {}
        self.engine_busy: dict[str, float] = {}
        self.events: dict[str, tuple[float, _Clock]] = {}
        self.done: list[tuple[_Op, float, _Clock]] = []  # every operation, its end and its clock
        self.last_write: dict[str, tuple[_Op, _Clock]] = {}
        self.reads_since_write: dict[str, list[tuple[_Op, _Clock]]] = {}
        self.intervals: list[Interval] = []
        self.races: list[Race] = []

    def result(self) -> Timeline:
        for op in self.schedule.ops:
            self.host += self.schedule.issue_seconds
            if op.kind == "sync":
                self._synchronize(op)
            elif op.kind == "host_read":
                self._check(op, self.host_clock)
            else:
                self._run_on_stream(op)
        return Timeline(self.intervals, self.races, dict(self.engine_busy), self.host)

    def _run_on_stream(self, op: _Op) -> None:
        clock = self.stream_clock.setdefault(op.stream, _Clock()).join(self.host_clock)
        ready = max(self.host, self.stream_ready.get(op.stream, 0.0))
        if op.kind == "wait" and op.event in self.events:
            event_time, event_clock = self.events[op.event]
            ready = max(ready, event_time)
            clock.join(event_clock)
        engine = self.schedule.engine_of(op.kind)
        if engine is not None:
            ready = max(ready, self.engine_free.get(engine, 0.0))
        end = ready + op.seconds
        clock[op.stream] = clock.get(op.stream, 0) + 1
        mine = _Clock(clock)
        self._check(op, mine)
        if engine is not None:
            self.engine_free[engine] = end
            self.engine_busy[engine] = self.engine_busy.get(engine, 0.0) + op.seconds
        if op.kind == "record":
            self.events[op.event] = (end, mine)
        self.stream_ready[op.stream] = end
        self.done.append((op, end, mine))
        self.intervals.append(Interval(op.label, op.kind, op.stream, engine, ready, end))
        if op.blocking:  # a pageable copy: the host waits for it
            self.host = max(self.host, end)
            self.host_clock.join(mine)

    def _synchronize(self, op: _Op) -> None:
        for other, end, clock in self.done:
            if op.target in (None, other.stream):
                self.host = max(self.host, end)
                self.host_clock.join(clock)

    def _check(self, op: _Op, clock: _Clock) -> None:
        """Record a race for each access ``clock`` does not order after the conflicting one."""
        for buffer in op.reads:
            if buffer in self.last_write:
                self._race_unless_ordered(op, clock, *self.last_write[buffer], buffer, "read after write")
            self.reads_since_write.setdefault(buffer, []).append((op, clock))
        for buffer in op.writes:
            if buffer in self.last_write:
                self._race_unless_ordered(op, clock, *self.last_write[buffer], buffer, "write after write")
            for reader, reader_clock in self.reads_since_write.pop(buffer, []):
                if reader is not op:
                    self._race_unless_ordered(op, clock, reader, reader_clock, buffer, "write after read")
            self.last_write[buffer] = (op, clock)

    def _race_unless_ordered(self, op, clock, other, other_clock, buffer, kind) -> None:
        if other.stream == op.stream:
            return  # a stream (or the host, None) is ordered with itself; no stream is named None
        if other_clock.get(other.stream, 0) > clock.get(other.stream, 0):
            self.races.append(Race(op.label, other.label, buffer, kind))


# -- the chunked pipeline, the model's reference ------------------------------------------------


def pipeline(n_chunks: int, h2d: float, compute: float, d2h: float, *, copy_engines: int = 2,
             order: str = "breadth", pinned: bool = True, streams: int | None = None) -> Schedule:
    """Chunk i copied in (``h2d`` seconds from pinned memory), computed and copied out on stream
    i % ``streams`` (one stream per chunk when None), issued ``order``-first:

    * ``"breadth"``: all copies in, then all kernels, then all copies out;
    * ``"depth"``: chunk 0's three steps, then chunk 1's, …

    With ``pinned=False`` the host memory is pageable: each copy is staged (it takes
    1 / ``PAGEABLE_BANDWIDTH_FRACTION`` times as long) and blocks the host until it is done.
    Simulated operation by operation (three per chunk): a lecture's few chunks, not a formula.
    """
    if streams is not None and streams < 1:
        raise ValueError(f"a pipeline needs at least one stream, got streams={streams}")
    schedule = Schedule(copy_engines=copy_engines)
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
