"""The cross-check of a traced launch against the code compiled for a GPU (issue 47, autograder.standins.TracedPaths):
a kernel whose path turns on something numba's simulator and the compiler compute differently is traced on one path
and runs another; the kinds of access of the two must agree, both ways."""

import numpy as np
import pytest

from autograder import session, standins
from course_helpers import run_cells


class Compiled:
    """A stand-in for a CompileReport: only its kinds of access."""

    def __init__(self, *kinds):
        self.kinds = frozenset(kinds)

    def access_kinds(self):
        return self.kinds


def test_a_kind_the_trace_saw_and_the_compiled_code_lacks_fails_at_once():
    paths = standins.TracedPaths()
    with pytest.raises(session.StudentError) as failed:
        paths.launched("histogram_kernel", Compiled("global load", "global store"), {"global load", "atomic"})
    assert str(failed.value) == ("histogram_kernel behaves differently in the simulator and compiled: the simulated launch made "
                                 "atomic updates, the code compiled for a GPU has none")


def test_a_kind_only_the_compiled_code_has_fails_when_the_items_launches_together_never_made_it():
    compiled = Compiled("global load", "global store", "atomic")
    paths = standins.TracedPaths()
    paths.launched("histogram_kernel", compiled, {"global load", "atomic"})
    paths.launched("histogram_kernel", compiled, {"global load", "atomic"})
    with pytest.raises(session.StudentError) as failed:
        paths.check_every_kind_ran()
    assert str(failed.value) == ("histogram_kernel behaves differently in the simulator and compiled: the code compiled for a GPU "
                                 "has plain stores to global memory, its traced launches in this test made none")


def test_a_small_launch_may_skip_a_path_another_launch_of_the_item_takes():
    compiled, other_signature = Compiled("global load", "global store", "barrier"), Compiled("global load")
    paths = standins.TracedPaths()
    paths.launched("k", compiled, {"global load"})  # one element: no thread reached the store or the barrier
    paths.launched("k", other_signature, {"global load"})
    paths.launched("k", compiled, {"global load", "global store", "barrier"})
    paths.check_every_kind_ran()


@pytest.fixture(scope="module")
def simulated(simulated_cuda):
    """Launch ``kernel`` traced in numba's simulator: the kinds of access its trace holds."""
    from gpucourse import sim

    def traced_kinds(kernel, config, *args):
        with sim.trace() as trace:
            kernel[config](*args)
        return standins._traced_kinds(trace.export())

    return traced_kinds


HISTOGRAM = ("import numpy as np\nfrom numba import cuda\n\n\n@cuda.jit\ndef histogram(values, bins):\n"
             "    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):\n        if {test}:\n"
             "            cuda.atomic.add(bins, values[i], 1)\n        else:\n            bins[values[i]] += 1\n")
BLOCK_SUM = ("import numpy as np\nfrom numba import cuda\n\n\n@cuda.jit\ndef block_sum(x, partial):\n"
             "    values = cuda.shared.array(32, np.float32)\n    t = cuda.threadIdx.x\n    i = cuda.grid(1)\n"
             "    values[t] = x[i] if i < x.size else np.float32(0)\n    cuda.syncthreads()\n    step = 16\n    while step > 0:\n"
             "        if t < step:\n            values[t] += values[t + step]\n        cuda.syncthreads()\n        step //= 2\n"
             "    if t == 0:\n        partial[cuda.blockIdx.x] = values[0]\n")


def test_a_traced_launch_gives_its_kinds_of_access(simulated):
    values, bins = np.array([0, 1, 1], np.int32), np.zeros(2, np.int32)
    assert simulated(run_cells(HISTOGRAM.format(test="True"))["histogram"], (1, 32), values, bins) == {"global load", "atomic"}
    kinds = simulated(run_cells(BLOCK_SUM)["block_sum"], (2, 32), np.ones(40, np.float32), np.zeros(2, np.float32))
    assert kinds == {"global load", "global store", "shared load", "shared store", "barrier"}


# The float rule: numpy keeps np.float32(0.1) * 3 in float32, numba computes it in float64. As a constant the compiler
# folds the test away; on a value known at run time it keeps both paths. Python's integers never wrap; int64 does.
SWITCHES = {
    "float rule, folded": ("np.float32(0.1) * 3 == np.float32(0.3)", "the simulated launch made atomic updates, the code compiled for a GPU has none"),
    "float rule, at run time": ("np.float32(0.1) * values.size == np.float32(np.float32(0.1) * values.size)",
                                "the code compiled for a GPU has plain stores to global memory, its traced launches in this test made none"),
    "64-bit wraparound": ("(values.size + 2**62) * 2 > 0",
                          "the code compiled for a GPU has plain stores to global memory, its traced launches in this test made none"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SWITCHES))
def test_a_kernel_the_simulator_runs_on_another_path_than_the_gpu_is_caught(simulated, case):
    from gpucourse.compiler import compile_report

    test, message = SWITCHES[case]
    values, bins = np.random.default_rng(0).integers(0, 4, 100).astype(np.int32), np.zeros(4, np.int32)
    histogram = run_cells(HISTOGRAM.format(test=test))["histogram"]
    paths = standins.TracedPaths()
    with pytest.raises(session.StudentError, match=message):
        paths.launched("histogram", compile_report(histogram, (values, bins)), simulated(histogram, (2, 32), values, bins))
        paths.check_every_kind_ran()
    assert bins.tolist() == np.bincount(values, minlength=4).tolist()  # the simulator's counts are right all the same


@pytest.mark.slow
def test_honest_kernels_make_the_kinds_their_compiled_code_has(simulated):
    """Among them one that computes a sine and reads no array: libdevice's table loads (ld.global.nc) are not the kernel's."""
    from gpucourse.compiler import compile_report

    sines = ("import math\nimport numpy as np\nfrom numba import cuda\n\n\n@cuda.jit\ndef sines(out):\n    i = cuda.grid(1)\n"
             "    if i < out.size:\n        out[i] = math.sin(i * 0.1)\n")
    launches = {"histogram": (HISTOGRAM.format(test="True"), (2, 32), (np.array([0, 1, 1], np.int32), np.zeros(2, np.int32))),
                "block_sum": (BLOCK_SUM, (2, 32), (np.ones(40, np.float32), np.zeros(2, np.float32))),
                "sines": (sines, (1, 32), (np.zeros(20, np.float32),))}
    for name, (cell, config, args) in launches.items():
        kernel = run_cells(cell)[name]
        compiled = compile_report(kernel, args)
        if name == "sines":
            assert compiled.global_loads > 0 and "global load" not in compiled.access_kinds()
        paths = standins.TracedPaths()
        paths.launched(name, compiled, simulated(kernel, config, *args))
        paths.check_every_kind_ran()
