"""Kernels for the compiler tests. Import only after ``use_gpu_or_simulator``: numba decides GPU
or simulator when numba.cuda is first imported. Tests find lines by the ``# <-`` markers."""

import math
from math import sqrt

import numpy as np
from numba import cuda, float32

TILE = 32
PADDED = 33  # one spare column: a column of the tile then spans all 32 shared-memory banks
SCALE = np.float32(2.5)
LIMITS = (float("inf"), -1.5, np.float32(0.1), 2 + 3j, None, "name")
LOOKUP = [1, 2, 3]
TABLE = {0: 1.0}
WEIGHTS = np.ones(4, dtype=np.float32)
DTYPE = np.float32


@cuda.jit
def transpose(a, out):
    """out = a.T through a padded 32 × 33 shared tile (4224 bytes), one barrier."""
    tile = cuda.shared.array((TILE, PADDED), float32)
    x, y = cuda.grid(2)
    if x < a.shape[1] and y < a.shape[0]:
        tile[cuda.threadIdx.y, cuda.threadIdx.x] = a[y, x]
    cuda.syncthreads()
    col = cuda.blockIdx.y * TILE + cuda.threadIdx.x
    row = cuda.blockIdx.x * TILE + cuda.threadIdx.y
    if col < out.shape[1] and row < out.shape[0]:
        out[row, col] = tile[cuda.threadIdx.x, cuda.threadIdx.y]


@cuda.jit(device=True)
def scale_by(value, factor):
    return value * factor + math.sqrt(factor)  # <- device body


@cuda.jit
def scale(a):
    """A device function, a module constant (a numpy float32) and math."""
    i = cuda.grid(1)
    if i < a.size:
        a[i] = scale_by(a[i], SCALE)


fast_scale = scale_by  # the same device function under a second name


@cuda.jit
def scale_through_alias(a):
    a[0] = fast_scale(a[0], SCALE)


@cuda.jit
def accidental_float64(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = a[i] * 0.3  # <- float64: 0.3 is a Python float, not exact in float32


@cuda.jit
def float32_only(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = a[i] * float32(0.3)


@cuda.jit
def per_thread_array(a, k):
    """A per-thread array indexed by a runtime value lives in local memory."""
    buffer = cuda.local.array(64, DTYPE)
    for j in range(64):
        buffer[j] = a[j]
    a[0] = buffer[k]


@cuda.jit
def appends_to_list(a):
    found = []
    found.append(a[0])  # <- list method
    a[1] = found[0]


@cuda.jit
def allocates(a):
    scratch = np.zeros(4)  # <- allocation
    a[0] = scratch[0]


@cuda.jit
def prints_array(a):
    print(a)  # <- print


@cuda.jit
def computed_shape(a):
    tile = cuda.shared.array((TILE, TILE + 1), float32)  # <- shape
    tile[0, 0] = a[0]
    a[1] = tile[0, 0]


def plain_helper(x):
    return x * 2


@cuda.jit
def calls_plain_function(a):
    a[0] = plain_helper(a[0])  # <- plain call


@cuda.jit
def reads_list(a):
    a[0] = LOOKUP[0]  # <- list global


@cuda.jit
def reads_dict(a):
    a[0] = TABLE[0]  # <- dict global


@cuda.jit
def reads_array(a):
    a[0] = WEIGHTS[0]  # <- array global


@cuda.jit
def launches_kernel(a):
    transpose(a, a)  # <- kernel call


@cuda.jit
def uses_limits(a):
    a[0] = LIMITS[1]
    a[1] = sqrt(a[2])


@cuda.jit(device=True)
def ping(n):
    return pong(n - 1) if n > 0 else 0


@cuda.jit(device=True)
def pong(n):
    return ping(n - 1) if n > 0 else 1


@cuda.jit
def bounces(a):
    a[0] = ping(3)


def make_closure():
    factor = 3.0

    @cuda.jit
    def closure(a):
        a[0] = a[0] * factor

    return closure
