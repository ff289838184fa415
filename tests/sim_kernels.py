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
