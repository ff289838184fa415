"""Triton kernels for the tests of the source extraction and the gate (tests/gpucourse/gates/test_kernel_gate.py).

Defined in a file (as in a notebook cell) so that their source can be read; triton compiles nothing at import.
"""

import torch
import triton
import triton.language as tl
from triton.language import sigmoid

SCALE = tl.constexpr(2.0)
PLAIN = 3
BUFFER = [1.0, 2.0]


@triton.jit
def double(x):
    return x * SCALE


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, double(sigmoid(tl.load(x_ptr + offsets, mask=mask))), mask=mask)


twice = double


@triton.jit
def through_alias(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, twice(tl.load(x_ptr + offsets, mask=offsets < n)) + PLAIN, mask=offsets < n)


@triton.jit
def falls_back_to_torch(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, torch.sigmoid(tl.load(x_ptr + offsets)))


@triton.jit
def reads_a_list(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr, BUFFER[0])


@triton.jit(noinline=True)
def with_options(x_ptr):
    tl.store(x_ptr, 1.0)


@triton.jit
def does_nothing(x_ptr, BLOCK: tl.constexpr):  # tl only in an annotation: the source must still import it
    pass
