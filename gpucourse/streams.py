"""Streams, events and copies: one API that runs on a GPU's real streams, and on the stream model without one.

Write a pipeline once with these calls::

    s = streams.Stream()
    x = streams.to_device(chunk, stream=s)        # host -> device, on stream s
    y = streams.launch(fn, x, stream=s)           # fn runs on the device, on stream s
    h = streams.to_host(y, stream=s)              # device -> host (into pinned memory)
    done = streams.Event(); done.record(s); other.wait_event(done)
    streams.synchronize()                         # the host waits for everything

Memory, for pipelines that keep a bounded number of buffers on the device::

    x = streams.to_device(chunk, stream=s, out=x)  # copy into the device buffer x again (reuse)
    y = streams.launch(fn, x, stream=s, out=y)    # fn's result written into y
    streams.release(x)                            # x's block back to the caching allocator (``del x`` on a GPU)
    streams.record_stream(y, other)               # Tensor.record_stream: y's block waits for other's work when released

* On a GPU (``streams.cuda_backend()``, the default when CUDA is present) each call is the torch
  call it names: ``torch.cuda.Stream``, ``Tensor.to("cuda", non_blocking=True)``, events, pinned
  buffers.
* Without one, under ``with streams.modelled("T4") as run:``, each call does its tensor work at
  once on the CPU (so results are exact and checkable) and is recorded, with the buffers it reads
  and writes, into the stream model (:mod:`gpucourse.sim.streams`). ``run.timeline()`` is what the
  T4's engines would do with the calls: modelled, not measured.

In the model, host memory is pageable unless wrapped by ``streams.pinned(tensor)`` (on a GPU it
is pinned for real), and what ``to_host`` returns is a host buffer: ``streams.value(h)`` reads it
as a tensor, and the model checks the host waited for the copy first. Treat what ``to_device``,
``launch`` and ``to_host`` return as opaque: the autograder hands your function buffers that
live in the grader's process.

Streams and events are the model's own: each is a token the run hands out, and the name it shows in
the timeline is one the model chose (your name for it when no other stream or event has it: a label,
never which stream it is). A stream or event built by hand, kept from another run or named after
another is refused, and the host is not a stream at all (:mod:`gpucourse.sim.streams`).

``streams.Stream(priority=p)`` is ``torch.cuda.Stream(priority=p)``: lower numbers are higher priorities, 0 the
default. torch hands its streams out round-robin from a pool of 32 per priority level (``kStreamsPerPool`` in
``c10/cuda/CUDAStream.cpp``; 4 levels at most, ``max_compile_time_stream_priorities`` in ``CUDAStream.h``, a
priority beyond them mapped to the nearest), so in the model too the 33rd ``Stream()`` of a priority *is* the
first: the same stream in the timeline, whose work runs in order with the first's.

Device memory follows PyTorch's caching allocator (:mod:`gpucourse.sim.streams`): ``to_device`` and ``launch``
allocate their result on the stream they run on, unless given ``out=`` (a buffer to write into again). The model
cannot see your references, so a buffer stays allocated until ``streams.release`` (on a GPU, a tensor's memory
goes back to the allocator when its last reference is dropped: ``release`` drops the front end's, ``del`` yours).
The timeline's ``memory`` and ``peak_device_bytes`` give the footprint.

The model also keeps where each buffer came from (its ``origin``: which host buffer was copied
in, which function computed on which device buffers, what was copied out), so a test can check
that a result is the work it asked for, done on the device (:meth:`ModelRun.mapped_values`), not
merely a host buffer holding the right numbers.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
from dataclasses import dataclass

import torch

from . import gpu_specs, thresholds
from .hooks import stand_in_hook
from .sim.streams import Schedule, Timeline

RESERVED_NAMES = ("", "host")  # no stream shows as the host in a timeline (the model's host is not a stream: it has no name)

__all__ = ["Event", "Handle", "HostBuffer", "Kernel", "ModelRun", "RemoteBackend", "Stream", "cuda_backend", "kernel", "launch", "modelled", "pinned",
           "record_stream", "release", "synchronize", "to_device", "to_host", "value"]
STREAMS_PER_POOL = 32  # c10/cuda/CUDAStream.cpp: kStreamsPerPool
PRIORITY_LEVELS = 4  # c10/cuda/CUDAStream.h: max_compile_time_stream_priorities (0, -1, -2, -3)


# -- what the model computes with ----------------------------------------------------------------


@dataclass(eq=False)
class HostBuffer:
    """A host tensor in the model: ``pinned`` or pageable; ``origin`` is None for data the host
    made, ``("copied out", device origin)`` for what ``to_host`` gave back."""

    tensor: torch.Tensor
    pinned: bool
    name: str
    origin: tuple | None = None


@dataclass(eq=False)
class DeviceBuffer:
    """A device tensor in the model (its value computed at once on the CPU); ``origin`` is
    ``("copied in", host buffer's name)`` or ``("computed", fn, (each argument's origin, ...))``, of what
    was written into it last. ``released``: given back to the allocator (``streams.release``), unusable since."""

    tensor: torch.Tensor
    name: str
    origin: tuple
    released: bool = False


@dataclass(eq=False)
class Kernel:
    """``fn`` with what a GPU would take to run it: ``seconds`` given (per call, or, with
    ``per_elements``, for that many input elements, so the time follows the work each launch is
    given), or a roofline of the card (``flops`` at its FP32 peak, or one pass over the bytes read
    and written at its memory bandwidth)."""

    fn: object
    seconds: float | None = None
    flops: float | None = None
    per_elements: int | None = None

    def modelled_seconds(self, spec: gpu_specs.GPUSpec, inputs, output) -> float:
        if self.seconds is not None and self.per_elements is not None:
            elements = sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))
            return self.seconds * elements / self.per_elements
        if self.seconds is not None:
            return self.seconds
        moved = sum(t.nbytes for t in [*inputs, output] if isinstance(t, torch.Tensor))
        return thresholds.kernel_seconds(spec, nbytes=moved, flops=self.flops or 0, launches=0)[0]


def kernel(fn, *, seconds: float | None = None, flops: float | None = None, per_elements: int | None = None) -> Kernel:
    """``fn`` as a kernel whose modelled time is ``seconds`` (per ``per_elements`` input elements
    when given), or a roofline: see :class:`Kernel`."""
    if per_elements is not None and not (seconds is not None and per_elements > 0):
        raise ValueError("per_elements scales a kernel's seconds: give seconds and a positive count")
    return Kernel(fn, seconds, flops, per_elements)


class ModelBackend:
    """Does each call's tensor work on the CPU and records it into a :class:`Schedule`."""

    def __init__(self, gpu: str = "T4", *, copy_engines: int | None = None, issue_seconds: float = 0.0, **options):
        self.spec = gpu_specs.gpu(gpu)
        self.schedule = Schedule.for_gpu(gpu, copy_engines=copy_engines, issue_seconds=issue_seconds, **options)
        self._names = itertools.count()
        self._taken = set(RESERVED_NAMES)
        self._issued: dict[int, _Token] = {}  # id -> token, for every stream and event this run handed out
        self._pools: dict[int, list] = {}  # priority level -> the streams handed out, torch's pool of STREAMS_PER_POOL
        self._handed: dict[int, int] = {}  # priority level -> how many Stream() calls it answered
        self._making_default = True
        self.default_stream = Stream("default", backend=self)
        self._making_default = False

    def _name(self, prefix: str) -> str:
        return f"{prefix}{next(self._names)}"

    def _issue(self, name, kind: str):
        """A new stream or event: a token only this run hands out (its identity), and a name no other stream
        or event of the run has, for the timeline: two ``Stream("copies")`` are two streams, as in CUDA."""
        label = str(name) if name else kind
        unique = label
        while unique in self._taken:  # a generated name can meet one given earlier ("copies 3"): try the next
            unique = self._name(f"{label} ")
        self._taken.add(unique)
        token = _Token(kind, unique)
        self._issued[id(token)] = token
        return unique, token

    def _own(self, value, kind: str) -> str:
        """The model's name for ``value``, a stream (or event) this run handed out; anything else is refused,
        so no ordering can be forged by naming: its ``name`` is never read, only the token it holds."""
        token = getattr(value, "handle", None)
        if not isinstance(token, _Token) or self._issued.get(id(token)) is not token or token.kind != kind:
            made, one = ("streams.Stream()", "a stream") if kind == "stream" else ("streams.Event()", "an event")
            raise TypeError(f"not {one} of this run: use what {made} gave you ({one} built by hand, kept from "
                            f"another run or named after another is not one), got {type(value).__name__}")
        return token.name

    def new_stream(self, name, priority: int = 0):
        """A stream of torch's pool: the (32 k + 1)-th of a priority level is the first again (same name, same token)."""
        level = _priority_level(priority)
        if self._making_default:  # the default stream is no stream of the pool
            return self._issue(name, "stream")
        pool = self._pools.setdefault(level, [])
        turn = self._handed.get(level, 0)
        self._handed[level] = turn + 1
        if turn >= STREAMS_PER_POOL:
            return pool[turn % STREAMS_PER_POOL]
        unique, token = self._issue(name, "stream")
        self.schedule.stream(unique, priority=-level)
        pool.append((unique, token))
        return unique, token

    def new_event(self, name):
        return self._issue(name, "event")

    def pinned(self, tensor) -> HostBuffer:
        host = _host_tensor(tensor, "pinned")
        return HostBuffer(host.clone(), True, self._name("pinned "))

    def to_device(self, host, stream: Stream, out=None) -> DeviceBuffer:
        stream_name = self._own(stream, "stream")
        if not isinstance(host, HostBuffer):
            host = HostBuffer(_host_tensor(host, "to_device"), False, self._name("host "))
        origin = ("copied in", host.name)
        device = self._written(out, host.tensor.clone(), origin, stream_name, "to_device")
        self.schedule.h2d(f"{host.name} → {device.name}", stream_name, nbytes=host.tensor.nbytes, pinned=host.pinned,
                          buffer=device.name, source=host.name)
        return device

    def launch(self, fn, args, stream: Stream, out=None) -> DeviceBuffer:
        work = fn if isinstance(fn, Kernel) else Kernel(fn)
        if not callable(work.fn):  # e.g. streams.kernel around a function the grader handed over: its time is the grader's
            raise TypeError(f"launch runs a function (or a streams.kernel of one), got {type(work.fn).__name__}: "
                            "launch the function you were given as it is")
        stream_name = self._own(stream, "stream")
        for arg in args:
            if isinstance(arg, (HostBuffer, torch.Tensor)):
                raise TypeError("launch takes device buffers (from to_device or an earlier launch), not host tensors")
            if isinstance(arg, DeviceBuffer):
                _usable(arg, "launch")
        if out is not None:
            _usable(_device_buffer(out, "launch's out"), "launch")  # before any work: a released out is refused as it is
        inputs = [arg.tensor if isinstance(arg, DeviceBuffer) else arg for arg in args]
        result = work.fn(*inputs)
        if not isinstance(result, torch.Tensor):
            raise TypeError(f"a kernel returns a tensor, got {type(result).__name__}")
        origin = ("computed", work.fn, tuple(arg.origin if isinstance(arg, DeviceBuffer) else ("a value",) for arg in args))
        reads = [arg.name for arg in args if isinstance(arg, DeviceBuffer)]
        output = self._written(out, result, origin, stream_name, "launch")
        label = getattr(work.fn, "__name__", "kernel")
        self.schedule.kernel(f"{label} → {output.name}", stream_name, seconds=work.modelled_seconds(self.spec, inputs, result),
                             reads=reads, writes=[output.name])
        return output

    def _written(self, out, value: torch.Tensor, origin: tuple, stream_name: str, what: str) -> DeviceBuffer:
        """The device buffer a call writes ``value`` into: ``out`` (same shape and dtype), or a new one allocated on the call's stream."""
        if out is None:
            device = DeviceBuffer(value, self._name("dev "), origin)
            self.schedule.allocate(device.name, value.nbytes, stream_name)
            return device
        out = _usable(_device_buffer(out, f"{what}'s out"), what)
        if out.tensor.shape != value.shape or out.tensor.dtype != value.dtype:
            raise ValueError(f"{what}: out= holds {tuple(out.tensor.shape)} {out.tensor.dtype}, the result is "
                             f"{tuple(value.shape)} {value.dtype}: write into a buffer of the same shape and dtype")
        out.tensor, out.origin = value, origin
        return out

    def release(self, device) -> None:
        device = _usable(_device_buffer(device, "release"), "release")
        device.released = True
        self.schedule.release(device.name)

    def record_stream(self, device, stream: Stream) -> None:
        device = _usable(_device_buffer(device, "record_stream"), "record_stream")
        self.schedule.record_stream(device.name, self._own(stream, "stream"))

    def to_host(self, device, stream: Stream) -> HostBuffer:
        if not isinstance(device, DeviceBuffer):
            raise TypeError(f"to_host copies a device buffer back, got {type(device).__name__}")
        _usable(device, "to_host")
        stream_name = self._own(stream, "stream")
        host = HostBuffer(device.tensor.clone(), True, self._name("result "), ("copied out", device.origin))  # pinned: non-blocking
        self.schedule.d2h(f"{device.name} → {host.name}", stream_name, nbytes=device.tensor.nbytes, buffer=device.name, into=host.name)
        return host

    def record(self, event: Event, stream: Stream) -> None:
        self.schedule.record(self._own(event, "event"), self._own(stream, "stream"))

    def wait(self, event: Event, stream: Stream) -> None:
        self.schedule.wait(self._own(event, "event"), self._own(stream, "stream"))

    def synchronize(self, stream: Stream | None = None) -> None:
        self.schedule.synchronize(None if stream is None else self._own(stream, "stream"))

    def value(self, host) -> torch.Tensor:
        if isinstance(host, HostBuffer):
            self.schedule.host_read(host.name)
            return host.tensor
        if isinstance(host, DeviceBuffer):
            raise TypeError("that is a device buffer: copy it back with to_host (and synchronize) first")
        return host


def _priority_level(priority) -> int:
    """torch's pool for ``priority``: 0 for 0 (and above, the lowest), up to PRIORITY_LEVELS - 1 for the highest."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"a stream priority is an integer (lower is higher, 0 the default), got {type(priority).__name__}")
    return min(max(-priority, 0), PRIORITY_LEVELS - 1)


def _device_buffer(value, what: str) -> DeviceBuffer:
    if not isinstance(value, DeviceBuffer):
        raise TypeError(f"{what} takes a device buffer (from to_device or launch), got {type(value).__name__}")
    return value


def _usable(device: DeviceBuffer, what: str) -> DeviceBuffer:
    if device.released:
        raise ValueError(f"{what}: {device.name} was released (streams.release): its memory may hold another buffer now")
    return device


class _Token:
    """A stream's or an event's identity in a modelled run: only the run makes them (:meth:`ModelBackend._own`)."""

    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name: str):
        self.kind, self.name = kind, name

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"


class CudaBackend:
    """The same calls on a real GPU: torch's streams, events and pinned buffers."""

    def __init__(self):
        self._making_default = True
        self.default_stream = Stream("default", backend=self)

    def new_stream(self, name, priority: int = 0):
        # Only the backend's own default stream is CUDA's: a name is a label, as in the model, never which stream it is.
        default, self._making_default = self._making_default, False
        return name or "stream", torch.cuda.default_stream() if default else torch.cuda.Stream(priority=priority)

    def new_event(self, name):
        return name or "event", torch.cuda.Event()

    def pinned(self, tensor) -> torch.Tensor:
        return _host_tensor(tensor, "pinned").pin_memory()

    def to_device(self, host, stream: Stream, out=None) -> torch.Tensor:
        with torch.cuda.stream(stream.handle):
            if out is None:
                return _host_tensor(host, "to_device").to("cuda", non_blocking=True)
            return out.copy_(_host_tensor(host, "to_device"), non_blocking=True)

    def launch(self, fn, args, stream: Stream, out=None) -> torch.Tensor:
        """``fn(*args)``, or ``fn(*args, out=out)``: torch's functions write into ``out``; a function without an
        ``out`` parameter has its result copied into it (one more kernel)."""
        work = fn.fn if isinstance(fn, Kernel) else fn
        with torch.cuda.stream(stream.handle):
            if out is None:
                return work(*args)
            try:
                result = work(*args, out=out)
            except TypeError as error:
                if "out" not in str(error):
                    raise
                result = work(*args)
            if result is not out:
                out.copy_(result)
            return out

    def release(self, device) -> None:
        """Nothing to do here: the block returns to torch's caching allocator when the tensor's last reference goes (``del``)."""

    def record_stream(self, device, stream: Stream) -> None:
        device.record_stream(stream.handle)

    def to_host(self, device, stream: Stream) -> torch.Tensor:
        with torch.cuda.stream(stream.handle):
            host = torch.empty(device.shape, dtype=device.dtype, pin_memory=True)
            host.copy_(device, non_blocking=True)
        return host

    def record(self, event: Event, stream: Stream) -> None:
        event.handle.record(stream.handle)

    def wait(self, event: Event, stream: Stream) -> None:
        stream.handle.wait_event(event.handle)

    def synchronize(self, stream: Stream | None = None) -> None:
        (stream.handle.synchronize if stream is not None else torch.cuda.synchronize)()

    def value(self, host) -> torch.Tensor:
        return host


class Stream:
    """A stream of the active backend: ``streams.Stream()``; work on one stream runs in order.

    ``priority``: lower numbers are higher priorities (torch takes 0 down to -3), 0 the default; among kernels
    ready together, a higher-priority stream's starts first. Like ``torch.cuda.Stream``, the 33rd stream of a
    priority is the 1st again (torch's pool holds 32 per priority: see the module's docstring)."""

    def __init__(self, name: str | None = None, *, priority: int = 0, backend=None):
        self.backend = backend or active()
        self.name, self.handle = self.backend.new_stream(name, priority)

    def wait_event(self, event: Event) -> None:
        """Later work on this stream waits until ``event``'s recorded point is done."""
        self.backend.wait(event, self)

    def synchronize(self) -> None:
        """The host waits until this stream's work is done."""
        self.backend.synchronize(self)

    def __repr__(self) -> str:
        return f"<stream {self.name}>"


class Event:
    """An event of the active backend: ``streams.Event()``; ``record(stream)`` marks that stream's point."""

    def __init__(self, name: str | None = None, *, backend=None):
        self.backend = backend or active()
        self.name, self.handle = self.backend.new_event(name)

    def record(self, stream: Stream | None = None) -> None:
        self.backend.record(self, stream or self.backend.default_stream)

    def __repr__(self) -> str:
        return f"<event {self.name}>"


# -- the module's calls, on the active backend --------------------------------------------------

_active = []


def active():
    """The backend calls go to: the innermost ``modelled`` run, else CUDA, else an explanation."""
    if _active:
        return _active[-1]
    if torch.cuda.is_available():
        _active.append(CudaBackend())
        return _active[-1]
    raise RuntimeError("no GPU here: run the pipeline inside `with streams.modelled(\"T4\") as run:` "
                       "to model what a T4 would do with it")


@contextlib.contextmanager
def using(backend):
    """Send this module's calls to ``backend`` while the block runs."""
    _active.append(backend)
    try:
        yield backend
    finally:
        _active.remove(backend)


def cuda_backend() -> CudaBackend:
    return CudaBackend()


def _stream(stream):
    return stream if stream is not None else active().default_stream


def pinned(tensor):
    """``tensor`` in pinned (page-locked) host memory: copies from it can overlap other work."""
    return active().pinned(tensor)


def to_device(host, stream: Stream | None = None, out=None):
    """Copy ``host`` to the device on ``stream`` (the default stream when None): into a new buffer allocated on
    ``stream``, or into ``out``, a device buffer of the same shape and dtype (``out.copy_(host, non_blocking=True)``)."""
    return active().to_device(host, _stream(stream), out)


def launch(fn, *args, stream: Stream | None = None, out=None):
    """Run ``fn(*args)`` on the device, on ``stream``; ``fn`` may be a :func:`kernel` with a modelled time.
    The result goes into a new buffer allocated on ``stream``, or into ``out`` (``fn(*args, out=out)`` on a GPU)."""
    return active().launch(fn, args, _stream(stream), out)


def release(device) -> None:
    """Give ``device``'s memory back to the caching allocator: the next allocation of its size on the stream
    that allocated it reuses it at once, even while another stream still uses the buffer (call
    :func:`record_stream` for that stream first, or order it with an event). The buffer is unusable afterwards.
    On a GPU this is what dropping the tensor's last reference does (``del``): the front end keeps none."""
    active().release(device)


def record_stream(device, stream: Stream) -> None:
    """``Tensor.record_stream``: ``device`` is used on ``stream`` too, so when it is released its memory is not
    reused before the work ``stream`` has queued by then is done (PyTorch's "CUDA semantics" page)."""
    active().record_stream(device, stream)


def to_host(device, stream: Stream | None = None):
    """Copy ``device`` back into pinned host memory on ``stream``; wait (synchronize) before reading it."""
    return active().to_host(device, _stream(stream))


def synchronize(stream: Stream | None = None) -> None:
    """The host waits until ``stream`` (every stream when None) has finished its work."""
    active().synchronize(stream)


def value(host) -> torch.Tensor:
    """A host result as a tensor (in the model: checked that the host waited for its copy)."""
    return active().value(host)


# -- a modelled run ------------------------------------------------------------------------------


class ModelRun:
    """What ``with streams.modelled(gpu) as run:`` gives: the run's backend and its timeline."""

    def __init__(self, backend: ModelBackend):
        self.backend = backend

    @property
    def gpu(self) -> str:
        return self.backend.spec.name

    def timeline(self) -> Timeline:
        """What the card's engines would do with the calls made so far (modelled)."""
        return self.backend.schedule.simulate()

    def host_chunks(self, tensors) -> list[HostBuffer]:
        """Each tensor in pinned host memory, as a loader with ``pin_memory=True`` hands them over."""
        return [self.backend.pinned(tensor) for tensor in tensors]

    def call(self, fn, *args):
        """``fn(*args)`` with this run's calls recorded: in this process, or, for the autograder's
        stand-in of a student's function, across the process boundary (every call of the student's
        code carried out and recorded here, see :class:`RemoteBackend`)."""
        across = stand_in_hook(fn, "call_with_streams")
        if across is None:
            with using(self.backend):
                return fn(*args)
        exported = _Exported(self.backend)
        return exported.imported(across(exported.dispatch, *exported.exported(args)))

    def values(self, results) -> list[torch.Tensor]:
        """The host buffers ``to_host`` gave back, read by the host (a race if it did not wait for them)."""
        results = list(results)
        for position, result in enumerate(results):
            if not isinstance(result, HostBuffer) or result.origin is None:
                what = "a host buffer to_host did not give back" if isinstance(result, HostBuffer) else f"a {type(result).__name__}"
                raise TypeError(f"result {position} is {what}: return what to_host gave back")
        return [self.backend.value(result) for result in results]

    def mapped_values(self, results, fn, host_chunks) -> list[torch.Tensor]:
        """:meth:`values` of a map's results, each checked to be the work of the map done on the device:
        result i is ``host_chunks[i]`` copied in, ``fn`` computed on it alone, and copied out. So no chunk
        can be skipped, merged with another, computed on the host or reused from another result."""
        results, host_chunks = list(results), list(host_chunks)
        if len(results) != len(host_chunks):
            raise ValueError(f"expected {len(host_chunks)} results, one per chunk, got {len(results)}")
        values = self.values(results)
        work = fn.fn if isinstance(fn, Kernel) else fn
        chunk_names = {chunk.name: position for position, chunk in enumerate(host_chunks)}
        for position, (result, chunk) in enumerate(zip(results, host_chunks)):
            expected = ("copied out", ("computed", work, (("copied in", chunk.name),)))
            if result.origin != expected:
                raise ValueError(f"result {position} should be chunk {position} copied in, computed by the map's function on the "
                                 f"device and copied out; it is {_describe(result.origin, chunk_names)}")
        return values


# -- across a process boundary: the autograder -------------------------------------------------


@dataclass(frozen=True)
class Handle:
    """Something that lives in another process (the grader's): a buffer, a kernel, a stream or an event."""

    handle: int
    kind: str


class RemoteBackend:
    """This module's calls, carried out by ``dispatch`` in another process (the grader's).

    The student's code holds only handles: the data, the kernels and the record of every call stay
    on the trusted side, so what grades the pipeline is what the calls did, not what was reported.
    """

    def __init__(self, dispatch):
        self.dispatch = dispatch
        self._making_default = True
        self.default_stream = Stream("default", backend=self)  # the run's default stream: no stream of torch's pool
        self._making_default = False

    def _call(self, method: str, *args):
        return self.dispatch(method, *[_as_handle(arg) for arg in args])

    def new_stream(self, name, priority: int = 0):
        if self._making_default:
            return "default", self._call("default_stream")
        return name or "stream", self._call("new_stream", name, priority)

    def new_event(self, name):
        return name or "event", self._call("new_event", name)

    def pinned(self, tensor):
        return self._call("pinned", tensor)

    def to_device(self, host, stream, out=None):
        return self._call("to_device", host, stream, out)

    def launch(self, fn, args, stream, out=None):
        return self._call("launch", fn, list(args), stream, out)

    def release(self, device):
        self._call("release", device)

    def record_stream(self, device, stream):
        self._call("record_stream", device, stream)

    def to_host(self, device, stream):
        return self._call("to_host", device, stream)

    def record(self, event, stream):
        self._call("record", event, stream)

    def wait(self, event, stream):
        self._call("wait", event, stream)

    def synchronize(self, stream=None):
        self._call("synchronize", stream)

    def value(self, host):
        return self._call("value", host)


def _describe(origin, chunk_names) -> str:
    """An origin in words: "chunk 2 copied in, sin computed on it, copied out"."""
    if origin is None:
        return "a buffer the host filled"
    if origin[0] == "copied in":
        what = f"chunk {chunk_names[origin[1]]}" if origin[1] in chunk_names else "a host buffer that is not a chunk"
        return f"{what} copied in"
    if origin[0] == "computed":
        name = getattr(origin[1], "__name__", "a function")
        return f"{name} computed on [{'; '.join(_describe(arg, chunk_names) for arg in origin[2])}]"
    if origin[0] == "copied out":
        return f"{_describe(origin[1], chunk_names)}, copied out"
    return origin[0]


def _as_handle(value):
    if isinstance(value, (Stream, Event)):
        return value.handle
    if isinstance(value, list):
        return [_as_handle(item) for item in value]
    return value


class _Exported:
    """The trusted side of :class:`RemoteBackend`: objects out as handles, calls in on the model."""

    CALLS = ("new_stream", "new_event", "pinned", "to_device", "launch", "to_host", "record", "wait", "synchronize", "value", "release",
             "record_stream", "default_stream")
    KINDS = {HostBuffer: "host buffer", DeviceBuffer: "device buffer", Kernel: "kernel", Stream: "stream", Event: "event"}

    def __init__(self, backend: ModelBackend):
        self.backend = backend
        self.objects: dict[int, object] = {}  # handle -> object; handles are random, so none can be guessed or kept for later

    def exported(self, value):
        if isinstance(value, (list, tuple)):
            return type(value)(self.exported(item) for item in value)
        if callable(value) and type(value) not in self.KINDS:
            value = Kernel(value)  # a function to launch: it stays here, the other side gets a handle
        kind = self.KINDS.get(type(value))
        if kind is None:
            return value
        handle = secrets.randbits(62)
        while handle in self.objects:
            handle = secrets.randbits(62)
        self.objects[handle] = value
        return Handle(handle, kind)

    def imported(self, value):
        if isinstance(value, (list, tuple)):
            return type(value)(self.imported(item) for item in value)
        handle = getattr(value, "handle", None)
        if handle is None:
            return value
        if isinstance(handle, int) and handle in self.objects:
            return self.objects[handle]
        kind = str(getattr(value, "kind", "handle"))
        raise TypeError(f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} this run did not hand out (made by hand, or kept from another run)")

    def dispatch(self, method: str, *args):
        if method not in self.CALLS:
            raise ValueError(f"unknown call {method!r}")
        args = [self.imported(arg) for arg in args]
        if method == "default_stream":  # what the other side's calls without a stream run on, as in this process
            return self.exported(self.backend.default_stream)
        if method == "new_stream":  # a new stream whatever its name ("default" too): names are labels
            return self.exported(Stream(*args[:1], priority=args[1] if len(args) > 1 else 0, backend=self.backend))
        if method == "new_event":
            return self.exported(Event(args[0], backend=self.backend))
        if method == "launch":
            return self.exported(self.backend.launch(*args))
        return self.exported(getattr(self.backend, method)(*args))


@contextlib.contextmanager
def modelled(gpu: str = "T4", *, copy_engines: int | None = None, issue_seconds: float = 0.0, **options):
    """Run this module's calls on the CPU and record them into the stream model of ``gpu``; ``options`` go to
    :class:`~gpucourse.sim.streams.Schedule`: ``queues="per-engine"`` (cards before Hyper-Q), ``connections``
    (CUDA_DEVICE_MAX_CONNECTIONS), ``copy_latency``."""
    backend = ModelBackend(gpu, copy_engines=copy_engines, issue_seconds=issue_seconds, **options)
    with using(backend):
        yield ModelRun(backend)


def _host_tensor(value, what: str) -> torch.Tensor:
    if isinstance(value, HostBuffer):
        return value.tensor
    if isinstance(value, torch.Tensor):
        return value
    raise TypeError(f"{what} takes a host tensor, got {type(value).__name__}")
