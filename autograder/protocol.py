"""Messages between the trusted harness and the untrusted student worker.

Each message is a length-prefixed frame on a pipe. The two directions are encoded
differently on purpose:

* harness → worker: ``pickle`` (the worker is the untrusted side; nothing to protect there);
* worker → harness: ``torch.save``, read back with ``torch.load(weights_only=True)``, which
  rebuilds tensors, numbers, strings and containers but never runs code. Whatever the
  student's code does inside the worker, its replies cannot execute anything in the harness.
"""

from __future__ import annotations

import io
import os
import pickle
import struct

import torch

_HEADER = struct.Struct("!Q")
MAX_FRAME = 1 << 31


class Callback:
    """In an argument sent to the worker: stands for a callable that stays in the harness."""

    def __init__(self, callback_id: int):
        self.callback_id = callback_id


class ChannelClosed(EOFError):
    """The other side went away (it exited, crashed or was killed)."""


def write_frame(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_frame(fd: int) -> bytes:
    size = _HEADER.unpack(_read_exactly(fd, _HEADER.size))[0]
    if size > MAX_FRAME:
        raise ChannelClosed(f"frame of {size} bytes is too large")
    return _read_exactly(fd, size)


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("the worker closed its pipe")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def encode_for_worker(message) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def decode_from_harness(data: bytes):
    return pickle.loads(data)


def encode_for_harness(message) -> bytes:
    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def decode_from_worker(data: bytes):
    """Rebuild a worker's reply without running any code it may contain."""
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location=None)
    except Exception as error:  # noqa: BLE001 - anything malformed is the worker's fault
        raise ValueError(f"the worker sent something that is not plain data: {error}") from None
