"""Kernels for the simulator tests. Import only after ``use_gpu_or_simulator`` (the ``simulated_cuda``
fixture): numba decides GPU or simulator when numba.cuda is first imported."""

import numpy as np
from numba import cuda


@cuda.jit
def count_then_share(values, bins, out):
    """One atomic add, one shared array and one barrier per thread."""
    shared = cuda.shared.array(32, np.float64)
    t = cuda.threadIdx.x
    cuda.atomic.add(bins, values[cuda.grid(1)], 1)
    shared[t] = 1.0
    cuda.syncthreads()
    if t == 0:
        out[cuda.blockIdx.x] = shared[0] + shared[31]


@cuda.jit
def copy_strided(x, out, stride, offset):
    """out[i] = x[offset + i * stride]: one load and one store per thread."""
    i = cuda.grid(1)
    out[i] = x[offset + i * stride]


@cuda.jit
def read_tile_column(out, width):
    """Each lane of a warp reads row `lane` of column 0 of a 32 × width float32 tile."""
    tile = cuda.shared.array((32, 33), np.float32)
    t = cuda.threadIdx.x
    tile[t, t % width] = t
    cuda.syncthreads()
    out[t] = tile[t, 0] if width == 32 else tile[t, 1] * 0 + tile[t, 0]


@cuda.jit
def read_shared_words(out, words):
    """Lane k reads word words[k] of a shared float32 array (any access pattern)."""
    buffer = cuda.shared.array(1024, np.float32)
    t = cuda.threadIdx.x
    buffer[t] = t
    cuda.syncthreads()
    out[t] = buffer[words[t]]


@cuda.jit
def read_shared_doubles(out):
    buffer = cuda.shared.array(32, np.float64)
    t = cuda.threadIdx.x
    buffer[t] = t
    out[t] = buffer[t]


@cuda.jit
def even_odd(x, out):
    """Divergent within every warp: even and odd lanes take different paths."""
    i = cuda.grid(1)
    if i % 2 == 0:
        out[i] = x[i] * 2
    else:
        out[i] = x[i] + 1


@cuda.jit
def warp_uniform(x, out):
    """The same two paths, chosen per warp: no lane of a warp waits for the other path."""
    i = cuda.grid(1)
    if (i // 32) % 2 == 0:
        out[i] = x[i] * 2
    else:
        out[i] = x[i] + 1


@cuda.jit
def even_odd_padded(x, out, busywork):
    """even_odd with uniform busywork first: every lane loads x coalesced ``busywork`` times."""
    i = cuda.grid(1)
    acc = x[i]
    for _ in range(busywork):
        acc = x[i]
    if i % 2 == 0:
        out[i] = acc * 2
    else:
        out[i] = acc + 1


@cuda.jit
def shift_through_shared(out, barrier):
    """Each thread writes its word, then reads its neighbour's: a race unless a barrier separates them."""
    words = cuda.shared.array(32, np.float32)
    t = cuda.threadIdx.x
    words[t] = t
    if barrier:
        cuda.syncthreads()
    out[t] = words[(t + 1) % 32]


@cuda.jit
def everyone_writes_one_word(out):
    """Every thread writes the same shared word: a write-write race (a barrier after it does not help)."""
    word = cuda.shared.array(1, np.float32)
    word[0] = cuda.threadIdx.x
    cuda.syncthreads()
    out[cuda.threadIdx.x] = word[0]
