"""The trusted grader on the kernel modules: kernels launched in the student's worker, graded outside it.

Each variant is a plausible wrong answer that passes some visible checks; the grader must
find exactly the item it breaks, and say why. The reference solution and the untouched release
of every module are graded in test_autograder_cli.py (once, through the instructor's CLI).
"""

import nbformat
import pytest

from autograder import harness, skeleton
from course_helpers import one_class_per_module, source

pytestmark = pytest.mark.slow

VARIANTS_02 = {
    # The package's calculator called instead of written: the hidden test switches it off.
    "delegating": ("occupancy", (
        "def occupancy(gpu, threads_per_block, registers_per_thread, shared_mem_per_block):\n"
        "    from gpucourse.sim import occupancy as calc\n"
        "    return calc(gpu, threads_per_block, registers_per_thread, shared_mem_per_block)\n"
    ), "test_occupancy", "switched off"),
    # Right counts in the simulator, lost updates on a GPU: the atomic additions are counted.
    "no_atomics": ("histogram_kernel", (
        "@cuda.jit\ndef histogram_kernel(values, bins):\n"
        "    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):\n        bins[values[i]] += 1\n"
    ), "test_histogram", "atomic addition per value"),
    # Right sums, but thread 0 does all the work and no shared memory is used.
    "serial_sum": ("block_sum_kernel", (
        "@cuda.jit\ndef block_sum_kernel(x, partial):\n    if cuda.threadIdx.x == 0:\n        total = 0.0\n"
        "        for k in range(cuda.blockIdx.x * SUM_BLOCK, min((cuda.blockIdx.x + 1) * SUM_BLOCK, x.size)):\n"
        "            total += x[k]\n        partial[cuda.blockIdx.x] = total\n"
    ), "test_block_sum", "never allocated a shared array"),
    # One element per thread: wrong when the grid is smaller than the data.
    "no_stride": ("saxpy_kernel", (
        "@cuda.jit\ndef saxpy_kernel(a, x, y, out):\n    i = cuda.grid(1)\n    if i < x.size:\n        out[i] = a * x[i] + y[i]\n"
    ), "test_saxpy", "values differ"),
    # No bounds check: the simulator catches the out-of-range write.
    "no_bounds": ("bias_relu_kernel", (
        "@cuda.jit\ndef bias_relu_kernel(x, bias, out):\n    j, i = cuda.grid(2)\n    out[i, j] = max(x[i, j] + bias[j], 0.0)\n"
    ), "test_bias_relu", "IndexError"),
    # Forged evidence: no atomics, and the student's process patches the counter to report millions.
    # The launch runs in a kernel runner that holds only the kernel's source: the patch is not there.
    "forged_counts": ("histogram_kernel", (
        "from gpucourse.sim import observe as _observe\n_export = _observe.KernelCalls.export\n"
        "_observe.KernelCalls.export = lambda self: {**_export(self), 'atomic.add': 10**6}\n\n"
        "@cuda.jit\ndef histogram_kernel(values, bins):\n"
        "    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):\n        bins[values[i]] += 1\n"
    ), "test_histogram", "atomic addition per value"),
    # Runs in the simulator (a Python list in a kernel) but no GPU compiler accepts it: compiled by NVVM first.
    "simulator_only": ("saxpy_kernel", (
        "@cuda.jit\ndef saxpy_kernel(a, x, y, out):\n    done = []\n"
        "    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):\n        out[i] = a * x[i] + y[i]\n        done.append(i)\n"
    ), "test_saxpy", "would not compile for a GPU"),
    # An occupancy answer as a dataclass with a property: a valid answer the grader must read.
    "dataclass": ("occupancy", (
        "from dataclasses import dataclass\n\n_reference = occupancy\n\n@dataclass\nclass Result:\n"
        "    blocks_per_sm: int\n    active_warps: int\n    max_warps: int\n    limiter: str\n\n"
        "    @property\n    def occupancy(self):\n        return self.active_warps / self.max_warps\n\n"
        "def occupancy(gpu, threads_per_block, registers_per_thread, shared_mem_per_block):\n"
        "    r = _reference(gpu, threads_per_block, registers_per_thread, shared_mem_per_block)\n"
        "    return Result(r.blocks_per_sm, r.active_warps, gpu_specs.sm_limits(gpu).max_warps_per_sm, r.limiter)\n"
    ), None, None),
}


TRANSPOSE_HEAD = "@cuda.jit\ndef transpose_tiled(x, out):\n"
VARIANTS_03 = {
    # Shared tile without padding: reading a column hits one bank 32 times.
    "unpadded": ("transpose_tiled", lambda given: given.replace("(TILE, TILE_PADDED)", "(TILE, TILE)"), "test_transpose_traced", "pad the tile"),
    # Not a kernel at all: an object launched like one, which transposes on the host.
    "not_a_kernel": ("transpose_tiled", (
        "class _Pretend:\n    def __call__(self, *args):\n        pass\n\n    def __getitem__(self, config):\n"
        "        def launch(x, out):\n            out[...] = x.T\n        return launch\n\ntranspose_tiled = _Pretend()\n"
    ), ("test_transpose_correct", "test_transpose_traced"), "is not a numba kernel"),
    # The padded tile's shape as an expression: fine in the simulator, rejected by every GPU compiler.
    "shape_expression": ("transpose_tiled", lambda given: given.replace("(TILE, TILE_PADDED)", "(TILE, TILE + 1)"),
                         ("test_transpose_correct", "test_transpose_traced"), "cannot see as constant"),
    # The naive kernel under the tiled name: stores still 32 rows apart.
    "naive": ("transpose_tiled", TRANSPOSE_HEAD + (
        "    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x\n    for k in range(0, TILE, BLOCK_ROWS):\n"
        "        row = cuda.blockIdx.y * TILE + cuda.threadIdx.y + k\n"
        "        if row < x.shape[0] and col < x.shape[1]:\n            out[col, row] = x[row, col]\n"
    ), "test_transpose_traced", "global stores take"),
    "delegating": ("sectors_per_request", (
        "def sectors_per_request(addresses, bytes_per_lane=4, sector_bytes=32):\n"
        "    from gpucourse import sim\n    return sim.sectors_per_request(addresses, bytes_per_lane, sector_bytes)\n"
    ), ("test_sectors_per_request", "test_load_efficiency"), "switched off"),  # the second builds on the first
    # Does the work only below the timed size: every timed output is checked in full, so it fails there.
    "skips_at_timed_size": ("drift_soa", (
        "def drift_soa(fields, dt, steps):\n    if fields.shape[1] >= 50_000:\n        return fields\n"
        "    position, velocity = fields[0:3], fields[3:6]\n    for _ in range(steps):\n"
        "        velocity[2] -= GRAVITY * dt\n        position += velocity * dt\n    return fields\n"
    ), "test_drift_soa_speed", "timed fields"),
    # Right answers, AoS speed: converts to rows and back around the baseline's update.
    "aos_in_disguise": ("drift_soa", (
        "def drift_soa(fields, dt, steps):\n    rows = np.ascontiguousarray(fields.T)\n"
        "    fields[...] = drift_aos(rows, dt, steps).T\n    return fields\n"
    ), "test_drift_soa_speed", "need 4×"),
}
SUM_HEAD = (
    "@cuda.jit\ndef sum_kernel(x, out):\n    s = cuda.shared.array(RED_BLOCK, np.float32)\n    t = cuda.threadIdx.x\n"
    "    acc = np.float32(0)\n    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):\n        acc += x[i]\n"
    "    s[t] = acc\n    cuda.syncthreads()\n    step = 1\n    while step < RED_BLOCK:\n"
)
SUM_TAIL = "        cuda.syncthreads()\n        step *= 2\n    if t == 0:\n        cuda.atomic.add(out, 0, s[0])\n"
VARIANTS_04 = {
    # The given kernel under the new name: right results, divergent warps.
    "still_divergent": ("activate_uniform", (
        "@cuda.jit\ndef activate_uniform(x, out):\n    i = cuda.grid(1)\n    if i < x.size:\n        if i % 2 == 0:\n"
        "            v = x[i]\n            for _ in range(EXPENSIVE_STEPS):\n                v = v * HALF + ONE\n"
        "            out[i] = v\n        else:\n            out[i] = -x[i]\n"
    ), "test_uniform_traced", "SIMT efficiency"),
    # The reference's remapping with Python float constants: right values in the simulator, float64 arithmetic on a GPU.
    "float64_constants": ("activate_uniform", lambda given: given.replace("v * HALF + ONE", "v * 0.5 + 1.0"),
                          "test_uniform_correct", "computes in float64"),
    # A float64 accumulator (a Python 0.0): the sum is right, its arithmetic float64.
    "float64_accumulator": ("sum_kernel", lambda given: given.replace("total = np.float32(0)", "total = 0.0"), "test_sum_correct", "computes in float64"),
    # Interleaved addressing: right sum, threads of a warp idle in every step.
    "interleaved": ("sum_kernel", SUM_HEAD + "        if t % (2 * step) == 0:\n            s[t] += s[t + step]\n" + SUM_TAIL,
                    "test_sum_traced", "use sequential addressing"),
    # Strided index: threads stay together, but their words collide in the banks.
    "strided_index": ("sum_kernel", SUM_HEAD + "        index = 2 * step * t\n        if index < RED_BLOCK:\n"
                      "            s[index] += s[index + step]\n" + SUM_TAIL, "test_sum_traced", "bank-conflict degree"),
    "delegating": ("warp_cycles", (
        "def warp_cycles(lane_paths, path_cost):\n    from gpucourse import sim\n    return sim.warp_cycles(lane_paths, path_cost)\n"
    ), ("test_warp_cycles", "test_simt_efficiency"), "switched off"),  # the second builds on the first
    # Right for the first 200 values only, at the timed size: the timed outputs are checked in full.
    "skips_at_timed_size": ("soft_clip", (
        "def soft_clip(x):\n    knee = x * (1.0 - np.abs(x) / 4.0)\n"
        "    out = np.where(x < -2.0, -1.0, np.where(x <= 2.0, knee, 1.0 + 0.01 * (x - 2.0)))\n"
        "    if x.size >= 20_000:\n        out[200:] = 0.0\n    return out\n"
    ), "test_soft_clip_speed", "a timed soft_clip"),
    # np.vectorize is still a Python call per element.
    "vectorize": ("soft_clip", "def soft_clip(x):\n    return np.vectorize(lambda v: soft_clip_loop(np.array([v]))[0], otypes=[float])(x)\n",
                  "test_soft_clip_speed", "need 6×"),
}
# Each module's wrong answers, and an item of it that none of them can touch: it must still pass.
VARIANTS = {"02_architecture": VARIANTS_02, "03_coalescing": VARIANTS_03, "04_divergence": VARIANTS_04}
UNTOUCHED_ITEM = {"02_architecture": "test_occupancy", "03_coalescing": "test_bank_conflict_degree", "04_divergence": "test_warp_cycles"}


def _grade(assignment, student_nb, tmp_path, only):
    """Grade with the trusted harness just the items in ``only`` (grade_ids)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    plan = skeleton.make_plan(nbformat.read(source(assignment), as_version=4), student_nb)
    return harness.grade(plan, workdir, only=only)


def _with_answer(assignment, grade_id, code):
    notebook = nbformat.read(source(assignment), as_version=4)
    [cell] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    if callable(code):  # an edit of the reference answer
        edited = code(cell.source)
        assert edited != cell.source, "the edit no longer applies to the reference: update the variant"
        code = edited
    elif grade_id == "occupancy" and "_reference" in code:
        renamed = cell.source.replace("def occupancy(", "def _solution_occupancy(", 1)
        code = renamed + "\n\n" + code.replace("_reference = occupancy", "_reference = _solution_occupancy")
    else:
        code += "".join(f"\n\n{line}" for line in cell.source.split("\n\n")[1:] if line.startswith("def run_"))  # keep the given launcher
    cell.source = code
    return notebook


def pytest_generate_tests(metafunc):
    if "variant" in metafunc.fixturenames:
        metafunc.parametrize("variant", sorted(VARIANTS[metafunc.cls.module]))


class WrongAnswers:
    """One module's variants (one class per module: see bottom)."""

    module = None  # set per generated class

    def test_each_wrong_answer_loses_exactly_its_item(self, variant, tmp_path):
        assignment = self.module
        grade_id, code, broken_item, reason = VARIANTS[assignment][variant]
        broken_items = broken_item if isinstance(broken_item, tuple) else (broken_item,)
        # Only the items this answer feeds are graded (the reference's grading covers the rest), plus one
        # the change cannot touch: it must still pass.
        only = {item for item in broken_items if item} | {UNTOUCHED_ITEM[assignment]}
        result = _grade(assignment, _with_answer(assignment, grade_id, code), tmp_path, only=only)
        assert {item.grade_id for item in result.items} == only
        failed = {item.grade_id: item.message for item in result.items if item.outcome not in ("passed", "needs_gpu")}
        if broken_item is None:
            assert failed == {}
            return
        assert sorted(failed) == sorted(broken_items), failed
        assert all(reason in failed[item] for item in broken_items)


one_class_per_module(WrongAnswers, sorted(VARIANTS), globals())
