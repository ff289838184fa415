"""Messages between the trusted harness and the untrusted student worker.

Each message is a length-prefixed frame on a pipe. The two directions are encoded
differently on purpose:

* harness → worker: ``pickle`` (the worker is the untrusted side; nothing to protect there);
* worker → harness: plain data only (numbers, strings, bytes, lists, tuples, dicts; tensors
  travel as raw bytes, see :func:`pack_tensor`), read back by an unpickler that refuses to
  look up any class or function, so it can only build those types and never runs code.
  Whatever the student's code does inside the worker, its replies cannot execute anything
  in the harness.

A message is a tuple ``(kind, *arguments)``. Its kinds are declared once, here: :class:`Request` (the harness
asks, the worker's ``do_<kind>`` answers), :class:`Reply` (what the worker sends back) and :class:`Answer`
(the harness's answer to a callback). On the wire a kind is its plain string, so the worker's replies stay plain
data; each side refuses a kind that is not declared (:func:`encode_for_worker`, :func:`encode_for_harness`, and
the worker's own dispatch).
"""

from __future__ import annotations

import dataclasses
import enum
import io
import mmap
import os
import pickle
import select
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

_HEADER = struct.Struct("!Q")
MAX_FRAME = 256 * 1024**2  # a reply larger than this is refused before it is read


class Request(str, enum.Enum):
    """What the harness asks of a worker; the reply each kind gets follows its line. A failure of the student's code
    is answered ``raise`` instead (``Type: message``); a callback (``callback``) may come before any reply."""

    EXEC = "exec"  # (source): run one of the student's cells -> ok
    NAMES = "names"  # (names): which of them are callable, values or missing -> names
    VALUE = "value"  # (name): a value the student's code defined, as plain data -> return
    CALL = "call"  # (name, args, kwargs): call a function -> return
    CALL_IN_PLACE = "call_in_place"  # (name, args, kwargs): call a function -> return {output, args: its tensor arguments after the call}
    CALL_STREAMS = "call_streams"  # (name, args, kwargs, dispatch): call it, its gpucourse.streams calls sent back to dispatch -> return
    CALL_PROFILED = "call_profiled"  # (name, args, top_level, eager): one call counted by the grader's profiler (a profile runner) -> return
    CALL_LOGGED_MMA = "call_logged_mma"  # (name, a, b, key): fn(a, b, mma) with an intrinsic that logs its operands (an njit runner) -> return
    START_TALLY = "start_tally"  # (secret): tally the counting intrinsic's calls from now on (an njit runner) -> ok
    READ_TALLY = "read_tally"  # (): the tally since start_tally -> return
    ITERATE = "iterate"  # (name, args, kwargs): call a function that returns an iterator, kept for next and close -> ok
    NEXT = "next"  # (): the kept iterator's next item -> item, or stop at its end
    CLOSE = "close"  # (): close the kept iterator -> ok
    LAUNCH = "launch"  # (name, config, args, observers): launch a numba kernel (a kernel runner) -> return
    LAUNCH_TRITON = "launch_triton"  # (name, grid, args, kwargs): launch a Triton kernel (a kernel runner) -> return
    KERNEL_SOURCE = "kernel_source"  # (name): a kernel's self-contained source, for the grader to check -> return
    LOAD_BLOCK = "load_block"  # (name, calls): a timed block's inputs, loaded before the clock starts -> ok
    RUN_BLOCK = "run_block"  # (weights): run the loaded block, timed by the harness -> done
    FETCH_BLOCK = "fetch_block"  # (): the outputs of the block that ran -> return


class Reply(str, enum.Enum):
    """What a worker sends the harness."""

    READY = "ready"  # (): started, before any student code ran
    OK = "ok"  # (): done, nothing to return
    NAMES = "names"  # ({name: "callable" | "value" | "missing"})
    RETURN = "return"  # (value): what was asked for, as plain data
    RAISE = "raise"  # (type name, "Type: message"): the student's code raised
    DONE = "done"  # (digests): a timed block ran (its outputs' digests under the harness's weights)
    ITEM = "item"  # (value): the kept iterator's next item
    STOP = "stop"  # (): the kept iterator is exhausted
    CALLBACK = "callback"  # (callback id, args, kwargs): call the harness's function; answered by an Answer


class Answer(str, enum.Enum):
    """The harness's answer to a worker's ``callback``."""

    RETURN = "cb_return"  # (value): what the harness's function returned
    RAISE = "cb_raise"  # (type name, message): it raised


def _plain_kind(message, kinds: tuple[type[enum.Enum], ...]) -> tuple:
    """``message`` with its kind as the plain string of a declared kind (one of ``kinds``); ValueError otherwise."""
    if not isinstance(message, tuple) or not message:
        raise ValueError(f"not a message: {message!r:.80}")
    for declared in kinds:
        try:
            return (declared(message[0]).value, *message[1:])
        except ValueError:
            continue
    raise ValueError(f"undeclared message kind {message[0]!r:.80} (declared: {', '.join(kind.__name__ for kind in kinds)} in autograder.protocol)")


def check_request(message) -> Request:
    """The kind of a request the worker received, or ValueError naming what was sent instead."""
    return Request(_plain_kind(message, (Request,))[0])


class Callback:
    """In an argument sent to the worker: stands for a callable that stays in the harness."""

    def __init__(self, callback_id: int):
        self.callback_id = callback_id


@dataclass(frozen=True)
class LibraryFunction:
    """In an argument sent to the worker: a function of the course's package (``gpucourse.intrinsics.mma_16x16``),
    which the worker takes from its own import of the package instead of calling back into the harness."""

    module: str
    name: str

    def open(self):
        import importlib

        if not self.module.startswith("gpucourse."):
            raise ValueError(f"not a course function: {self.module}.{self.name}")
        return getattr(importlib.import_module(self.module), self.name)


@dataclass(frozen=True)
class MappedTensor:
    """In a timed block's arguments: a CPU tensor the harness wrote to a file in the worker's folder.

    The worker maps the file copy-on-write (:meth:`open`) instead of unpickling a copy, so loading a
    block costs the worker almost no CPU: whatever CPU it spends between loading and "go" is work
    done on the inputs before the clock started, and the harness charges it to the timed run
    (:meth:`autograder.standins.StudentFunction.timed_block`). The whole file is mapped once per block
    and each tensor is a view into it: unpickling or mapping each of many small tensors (module 09's
    seven arguments a call) cost 70 µs apiece, more than the harness allows a block for loading.
    """

    path: str
    offset: int  # in bytes, a multiple of ALIGNMENT
    nbytes: int  # of the tensor's storage
    dtype: str
    size: tuple
    stride: tuple
    storage_offset: int
    numpy: bool = False  # a numpy array in the arguments: opened as one

    def open(self):
        mapped = _block_mapping(self.path)
        storage = torch.frombuffer(mapped, dtype=torch.uint8, count=self.nbytes, offset=self.offset).view(getattr(torch, self.dtype))
        tensor = storage.as_strided(self.size, self.stride, self.storage_offset)
        return tensor.numpy() if self.numpy else tensor


_mapping: dict[str, mmap.mmap] = {}  # the block file mapped last, by path: a block's tensors share one mapping


def _block_mapping(path: str) -> mmap.mmap:
    if path not in _mapping:
        with open(path, "rb") as file:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
        _mapping.clear()  # the tensors of earlier blocks keep their own mappings alive
        _mapping[path] = mapped
    return _mapping[path]


ALIGNMENT = 64  # bytes: each storage starts on a cache line, aligned for every dtype


def map_tensors(value, path: Path):
    """``value`` with each CPU tensor and numeric numpy array in it written to the file ``path`` and replaced by a
    :class:`MappedTensor` (each storage at an offset of ``ALIGNMENT`` bytes)."""
    with open(path, "wb") as file:
        return _mapped(value, file, path)


def _mapped(value, file, path: Path):
    if type(value) is np.ndarray and value.dtype.kind in "biuf" and value.nbytes:
        mapped = _mapped(torch.from_numpy(value), file, path)
        return dataclasses.replace(mapped, numpy=True) if isinstance(mapped, MappedTensor) else value
    if isinstance(value, list | tuple):
        converted = [_mapped(item, file, path) for item in value]
        return converted if isinstance(value, list) else tuple(converted)
    if isinstance(value, dict):
        return {key: _mapped(item, file, path) for key, item in value.items()}
    if (type(value) is not torch.Tensor or value.device.type != "cpu" or value.requires_grad or value.is_conj() or value.is_neg()
            or value.untyped_storage().nbytes() == 0):
        return value
    storage = torch.empty(0, dtype=torch.uint8).set_(value.untyped_storage())
    offset = -(-file.tell() // ALIGNMENT) * ALIGNMENT
    file.seek(offset)
    file.write(storage.numpy().data)
    return MappedTensor(str(path), offset, storage.numel(), str(value.dtype).removeprefix("torch."), tuple(value.shape),
                        tuple(value.stride()), value.storage_offset())


class ChannelClosed(EOFError):
    """The other side went away (it exited, crashed or was killed)."""


def write_frame(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class FrameTimeout(TimeoutError):
    """No complete frame arrived before the deadline."""


def read_frame(fd: int, deadline: float | None = None, clock: Callable[[], float] = time.monotonic) -> bytes:
    """One frame; with a deadline on ``clock``, a sender that stalls mid-frame cannot hang the reader.

    ``clock`` may run slower than the wall clock (:class:`autograder.clock.FairClock`), never
    faster: waiting for what is left of the deadline in wall seconds never overshoots it.
    """
    size = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline, clock))[0]
    if size > MAX_FRAME:
        raise ChannelClosed(f"frame of {size} bytes is too large")
    return _read_exactly(fd, size, deadline, clock)


def _read_exactly(fd: int, size: int, deadline: float | None, clock: Callable[[], float]) -> bytes:
    chunks, remaining = [], size
    while remaining:
        while deadline is not None:
            left = deadline - clock()
            if left <= 0:
                raise FrameTimeout()
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                break
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("the worker closed its pipe")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def encode_for_worker(message) -> bytes:
    """A request or an answer to a callback, for the worker; ValueError if its kind is not declared."""
    return pickle.dumps(_plain_kind(message, (Request, Answer)), protocol=pickle.HIGHEST_PROTOCOL)


# Set in the environment of a worker that runs the student's own code (not a gated runner): it seals itself
# (autograder.worker.seal), so the grader's package cannot be imported there (issue 46).
SEALED_ENV = "GPUCOURSE_SEALED_WORKER"
GRADER_PACKAGE = __name__.partition(".")[0]


class _HarnessUnpickler(pickle.Unpickler):
    """Finds this module's classes (Callback, MappedTensor, LibraryFunction) in this module itself: a sealed
    worker has dropped the grader's package from ``sys.modules`` and cannot import it again."""

    def find_class(self, module, name):
        if module == __name__:
            return globals()[name]
        return super().find_class(module, name)


def decode_from_harness(data: bytes):
    return _HarnessUnpickler(io.BytesIO(data)).load()


def encode_for_harness(message) -> bytes:
    """A reply, for the harness; ValueError if its kind is not declared."""
    return pickle.dumps(_plain_kind(message, (Reply,)), protocol=pickle.HIGHEST_PROTOCOL)


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only pickle's native types: every class or function lookup is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused a persistent id")


def decode_from_worker(data: bytes):
    """Rebuild a worker's reply without running any code it may contain."""
    try:
        return _PlainDataUnpickler(io.BytesIO(data)).load()
    except Exception as error:  # noqa: BLE001 - anything malformed is the worker's fault
        raise ValueError(f"the worker sent something that is not plain data: {error}") from None


def pack_tensor(tensor: torch.Tensor) -> dict:
    """A tensor as raw bytes: far cheaper to send than ``torch.save``'s one archive entry per tensor."""
    flat = tensor.detach().contiguous().reshape(-1)
    data = flat.cpu().view(torch.uint8).numpy().tobytes() if flat.numel() else b""  # an empty view may have stride 0
    return {"__tensor__": str(flat.dtype).removeprefix("torch."), "shape": tuple(tensor.shape),
            "device": tensor.device.type, "data": data}


def unpack_tensor(packed: dict) -> torch.Tensor:
    dtype = getattr(torch, packed["__tensor__"], None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown tensor dtype {packed['__tensor__']!r}")
    raw = torch.frombuffer(bytearray(packed["data"]), dtype=torch.uint8) if packed["data"] else torch.empty(0, dtype=torch.uint8)
    tensor = raw.view(dtype).reshape(packed["shape"])
    return tensor.to(packed["device"]) if packed["device"] != "cpu" else tensor
