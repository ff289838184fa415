"""The trusted grader on the kernel modules: kernels launched in the student's worker, graded outside it.

Each variant is a plausible wrong answer that passes some visible checks (the grader must find
exactly the items it breaks, and say why) or a correct answer written differently from the
reference (it must keep every point). The reference solution and the untouched release
of every module are graded in test_autograder_cli.py (once, through the instructor's CLI).
"""

import nbformat
import pytest

from autograder import harness, skeleton
from course_helpers import one_class_per_module, reference_answered, source

pytestmark = pytest.mark.slow

HIST_HEAD = "@cuda.jit\ndef histogram_kernel(values, bins):\n    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):\n"


def hist_switch(condition):
    """A histogram that adds atomically where ``condition`` holds and with a plain read-modify-write elsewhere:
    ``condition`` is something numba's simulator and a GPU compute differently (issue 47, hole 1)."""
    return HIST_HEAD + (f"        if {condition}:\n            cuda.atomic.add(bins, values[i], 1)\n"
                        "        else:\n            bins[values[i]] += 1\n")


SHOWN_HISTOGRAM = HIST_HEAD + "        cuda.atomic.add(bins, values[i], 1)\n"
VARIANTS_02 = {
    # A forward model of its own, searched down from the cap, that forgets to floor the warps the registers hold to a multiple of 4:
    # right whenever the blocks' warps are a multiple of 4 (every visible case), too generous otherwise.
    "forward_model": ("register_budget", (
        "def register_budget(gpu, threads_per_block, blocks_per_sm):\n    limits = gpu_specs.sm_limits(gpu)\n"
        "    warps = math.ceil(threads_per_block / 32)\n"
        "    if not 1 <= threads_per_block <= limits.max_threads_per_block:\n        raise ValueError('threads_per_block out of range')\n"
        "    if not 1 <= blocks_per_sm <= limits.max_blocks_per_sm or blocks_per_sm * warps > limits.max_warps_per_sm:\n"
        "        raise ValueError('these blocks cannot be resident on one SM')\n"
        "    for registers in range(limits.max_registers_per_thread, 0, -1):\n"
        "        per_warp = math.ceil(registers * 32 / 256) * 256\n"
        "        if limits.registers_per_sm // per_warp // warps >= blocks_per_sm:\n            return registers\n"
    ), "test_register_budget", "register_budget('8.0', 96, 3): expected 168, got 224"),
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
    # No barrier between loading the block's values and adding them up: the simulator may still get the sums right
    # (the race is read from the barriers, whatever order the threads ran in), a GPU would not.
    "no_barrier": ("block_sum_kernel", lambda given: given.replace("    cuda.syncthreads()\n    step = SUM_BLOCK // 2", "    step = SUM_BLOCK // 2", 1),
                   "test_block_sum", "data races"),
    # A race the simulator hides: enough atomic additions are counted (on a bin's own value, adding 0), but the real
    # updates are plain read-modify-writes that lose counts on a GPU. The tracer tells atomics from plain writes.
    "atomics_elsewhere": ("histogram_kernel", (
        "@cuda.jit\ndef histogram_kernel(values, bins):\n"
        "    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):\n"
        "        cuda.atomic.add(bins, values[i], 0)\n        bins[values[i]] += 1\n"
    ), "test_histogram", "plain writes to global memory"),
    # Runs in the simulator (a Python list in a kernel) but no GPU compiler accepts it: compiled by NVVM first.
    "simulator_only": ("saxpy_kernel", (
        "@cuda.jit\ndef saxpy_kernel(a, x, y, out):\n    done = []\n"
        "    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):\n        out[i] = a * x[i] + y[i]\n        done.append(i)\n"
    ), "test_saxpy", "would not compile for a GPU"),
    # Issue 47, races between blocks: each block's thread 0 also zeroes the next block's slot. The simulator runs the blocks
    # in order, so the next block writes its sum afterwards and the sums come out right; on a GPU the blocks run in any order.
    "zeroes_the_next_slot": ("block_sum_kernel", lambda given: given.replace(
        "        partial[cuda.blockIdx.x] = values[0]\n",
        "        partial[cuda.blockIdx.x] = values[0]\n        if cuda.blockIdx.x + 1 < partial.size:\n"
        "            partial[cuda.blockIdx.x + 1] = 0.0\n", 1), "test_block_sum", "data races"),
    # Issue 47, sizes a switch can pass: right only for grids of at most 4 blocks (every visible and formerly hidden launch).
    "few_blocks_only": ("block_sum_kernel", lambda given: given.replace(
        "    if t == 0:\n        partial[cuda.blockIdx.x]", "    if t == 0 and cuda.gridDim.x <= 4:\n        partial[cuda.blockIdx.x]", 1),
        "test_block_sum", "block sums of"),
    # Issue 47, hole 1 (the simulator and a GPU on different paths). A float rule numpy and numba round differently:
    # float32 * int is float32 in numpy (0.3f == 0.3f), float64 in numba (0.30000000447 != 0.30000001192). The simulator
    # takes the atomic path, the compiled code (folded at compile time) only has the plain one.
    "float_rule_atomics": ("histogram_kernel", hist_switch("np.float32(0.1) * 3 == np.float32(0.3)"), "test_histogram",
                           "the simulated launch made atomic updates, the code compiled for a GPU has none"),
    # 64-bit wraparound: a Python int in the simulator, an int64 that overflows to a negative on a GPU. The size is only
    # known at run time, so the compiled code keeps both paths: its plain stores are what no traced launch made.
    "wraparound_switch": ("histogram_kernel", hist_switch("(values.size + 2**62) * 2 > 0"), "test_histogram",
                          "the code compiled for a GPU has plain stores to global memory, its traced launches in this test made none"),
    # Own (hole 1): the float rule with a factor known only at run time (3, from bins' length), which keeps both paths
    # in the compiled code unless the compiler folds n // n; caught either way, by whichever direction applies.
    "float_rule_both_paths": ("histogram_kernel", hist_switch("np.float32(0.1) * (bins.size // bins.size * 3) == np.float32(0.3)"),
                              "test_histogram", "behaves differently in the simulator and compiled"),
    # Reads numba's configuration: ENABLE_CUDASIM is 1 in the simulator, frozen at 0 in the compiled code.
    "reads_cudasim_config": ("histogram_kernel", "import numba\n\n" + hist_switch("numba.config.ENABLE_CUDASIM"),
                             "test_histogram", "reads numba's configuration"),
    # The assignment's own flag, SIMULATED, read in the kernel: kernel_source would bake the student's True into the text.
    "reads_simulated_flag": ("histogram_kernel", hist_switch("SIMULATED"), "test_histogram", "reads the device flag SIMULATED"),
    # A name that only the simulator's stand-in for numba.cuda has.
    "simulator_only_name": ("histogram_kernel", hist_switch("cuda.simulator_init is not None"), "test_histogram",
                            "which only numba's simulator defines"),
    # Issue 47, the kernel's text: built with exec, and linecache planted with the atomic version's text, so reading the
    # source in the student's process shows what did not run. The grader takes text only from the notebook's cells.
    "exec_linecache": ("histogram_kernel", (
        "import linecache\n\n_RAN = " + repr(HIST_HEAD + "        bins[values[i]] += 1\n") + "\n_SHOWN = " + repr(SHOWN_HISTOGRAM) + "\n"
        "linecache.cache['<histogram>'] = (len(_SHOWN), None, _SHOWN.splitlines(True), '<histogram>')\n"
        "exec(compile(_RAN, '<histogram>', 'exec'), globals())\n"
    ), "test_histogram", "its source is not in any cell of the notebook"),
    # Own (the kernel's text): the kernel honestly defined with plain updates, then its cell's lines in linecache
    # replaced by the atomic version's, line for line.
    "cell_lines_replaced": ("histogram_kernel", (
        "import linecache\n\n" + HIST_HEAD + "        bins[values[i]] += 1\n\n\n"
        "_file = histogram_kernel.py_func.__code__.co_filename\n_lines = list(linecache.getlines(_file))\n"
        "_first = histogram_kernel.py_func.__code__.co_firstlineno - 1\n"
        "_lines[_first + 3] = '        cuda.atomic.add(bins, values[i], 1)\\n'\n"
        "linecache.cache[_file] = (sum(map(len, _lines)), None, _lines, _file)\n"
    ), "test_histogram", "its source is not in any cell of the notebook"),
    # The setup's constant rebound in the answer cell: kernel_source would emit the student's value, the test's
    # arithmetic (blocks, sums) uses the grader's.
    "rebinds_setup_constant": ("block_sum_kernel", lambda given: "SUM_BLOCK = 32\n\n" + given, "test_block_sum",
                               "uses SUM_BLOCK as your notebook rebinds it"),
    # Issue 47, hole 2 (accesses the tracer did not see): thread 0 adds its block's values up with a slice's .sum() (numba
    # compiles it to a loop); shared memory and a barrier for show. A slice's reads used to go unseen, and the sums are
    # right; whole-array work is refused in a traced kernel now.
    "slice_block_sum": ("block_sum_kernel", (
        "@cuda.jit\ndef block_sum_kernel(x, partial):\n    values = cuda.shared.array(SUM_BLOCK, np.float64)\n"
        "    t = cuda.threadIdx.x\n    values[t] = 0.0\n    cuda.syncthreads()\n    if t == 0:\n"
        "        start = cuda.blockIdx.x * SUM_BLOCK\n        partial[cuda.blockIdx.x] = x[start:min(start + SUM_BLOCK, x.size)].sum()\n"
    ), "test_block_sum", "element accesses only"),
    # Own (hole 2): the histogram's updates made through one-element slices (`bins[v:v + 1] = bins[v] + 1`), which compile
    # and lose counts on a GPU, beside atomics adding 0 for the count. The slice's store used to go unseen.
    "slice_increments": ("histogram_kernel", HIST_HEAD + (
        "        v = values[i]\n        cuda.atomic.add(bins, v, 0)\n        bins[v:v + 1] = bins[v] + 1\n"
    ), "test_histogram", "plain writes to global memory"),
    # A guard (refused before issue 47 too): whole-slice arithmetic, which the simulator would run as one numpy operation:
    # refused by the compile step (numba compiles no in-place ufunc on a slice in a kernel) before the tracer's refusal.
    "slice_arithmetic": ("block_sum_kernel", lambda given: given.replace(
        "            values[t] += values[t + step]\n", "            values[t:t + 1] += values[t + step:t + step + 1]\n", 1),
        "test_block_sum", "would not compile for a GPU"),
    # Honest: an explicit signature in the decorator (the grader compiles with the launch's own types).
    "explicit_signature": ("histogram_kernel", SHOWN_HISTOGRAM.replace("@cuda.jit\n", "@cuda.jit('void(int32[::1], int32[::1])')\n"),
                           "test_histogram", None),
    # Honest: the update in a device function of the same cell.
    "device_function_same_cell": ("histogram_kernel", (
        "@cuda.jit(device=True)\ndef count_one(bins, value):\n    cuda.atomic.add(bins, value, 1)\n\n\n"
        + HIST_HEAD + "        count_one(bins, values[i])\n"), "test_histogram", None),
    # Honest: the device function defined in another answer cell (saxpy's), used by the histogram.
    "device_function_other_cell": (("saxpy_kernel", "histogram_kernel"), (
        "@cuda.jit(device=True)\ndef count_one(bins, value):\n    cuda.atomic.add(bins, value, 1)\n\n\n"
        "@cuda.jit\ndef saxpy_kernel(a, x, y, out):\n    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):\n"
        "        out[i] = a * x[i] + y[i]\n",
        HIST_HEAD + "        count_one(bins, values[i])\n"), ("test_saxpy", "test_histogram"), None),
    # Honest: a block sum laid out differently (a for loop over the halvings, the load in two statements).
    "relaid_block_sum": ("block_sum_kernel", (
        "@cuda.jit\ndef block_sum_kernel(x, partial):\n    cache = cuda.shared.array(SUM_BLOCK, np.float64)\n"
        "    lane = cuda.threadIdx.x\n    index = cuda.blockIdx.x * cuda.blockDim.x + lane\n    cache[lane] = 0.0\n"
        "    if index < x.size:\n        cache[lane] = x[index]\n    cuda.syncthreads()\n"
        "    half = SUM_BLOCK >> 1\n    while half:\n        if lane < half:\n"
        "            cache[lane] = cache[lane] + cache[lane + half]\n        cuda.syncthreads()\n        half >>= 1\n"
        "    if lane == 0:\n        partial[cuda.blockIdx.x] = cache[0]\n"), "test_block_sum", None),
    # Honest: the budget found by searching down from the cap with the lecture's calculator (the package used as a
    # building block); full marks on the register budget and on the launch choice that builds on it.
    "brute_force": ("register_budget", (
        "def register_budget(gpu, threads_per_block, blocks_per_sm):\n    limits = gpu_specs.sm_limits(gpu)\n"
        "    if not 1 <= threads_per_block <= limits.max_threads_per_block:\n"
        "        raise ValueError(f'threads_per_block must be 1..{limits.max_threads_per_block}, got {threads_per_block}')\n"
        "    if not 1 <= blocks_per_sm <= limits.max_blocks_per_sm:\n"
        "        raise ValueError(f'blocks_per_sm must be 1..{limits.max_blocks_per_sm}, got {blocks_per_sm}')\n"
        "    if blocks_per_sm * math.ceil(threads_per_block / 32) > limits.max_warps_per_sm:\n"
        "        raise ValueError(f'more than max_warps_per_sm ({limits.max_warps_per_sm}) warps')\n"
        "    for registers in range(limits.max_registers_per_thread, 0, -1):\n"
        "        if sim.occupancy(gpu, threads_per_block, registers).blocks_by['registers'] >= blocks_per_sm:\n"
        "            return registers\n"
    ), ("test_register_budget", "test_launch_choice"), None),
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
    # No barrier between filling the tile and reading it transposed: a race, found in the trace whatever the output.
    "no_barrier": ("transpose_tiled", lambda given: given.replace("    cuda.syncthreads()\n", "", 1),
                   "test_transpose_traced", "data races"),
    # Behaves differently when watched: does nothing while a tracer is installed. Not CUDA: the grader refuses its
    # source (a module other than math/numpy/numba) before anything runs; the traced launch's output is checked too.
    "watched": ("transpose_tiled", lambda given: "import sys\n\n" + given.replace(
        "    tile = cuda.shared.array(", "    if sys.gettrace() is not None:\n        return\n    tile = cuda.shared.array(", 1),
        ("test_transpose_correct", "test_transpose_traced"), "can only use device functions, modules math/numpy/numba"),
    # The naive kernel under the tiled name: stores still 32 rows apart.
    "naive": ("transpose_tiled", TRANSPOSE_HEAD + (
        "    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x\n    for k in range(0, TILE, BLOCK_ROWS):\n"
        "        row = cuda.blockIdx.y * TILE + cuda.threadIdx.y + k\n"
        "        if row < x.shape[0] and col < x.shape[1]:\n            out[col, row] = x[row, col]\n"
    ), "test_transpose_traced", "sectors for global stores"),
    # Issue 47, sizes a switch can pass: tiled up to the largest size the tests used to trace (64 × 96), naive above it.
    "tiles_only_when_small": ("transpose_tiled", lambda given: given.replace(
        "    tile = cuda.shared.array(", "    if x.shape[0] > 96 or x.shape[1] > 96:\n        col = cuda.blockIdx.x * TILE + cuda.threadIdx.x\n"
        "        for k in range(0, TILE, BLOCK_ROWS):\n            row = cuda.blockIdx.y * TILE + cuda.threadIdx.y + k\n"
        "            if row < x.shape[0] and col < x.shape[1]:\n                out[col, row] = x[row, col]\n        return\n"
        "    tile = cuda.shared.array(", 1), "test_transpose_traced", "sectors for global stores"),
    # Issue 47, hole 2 (accesses the tracer did not see): the naive kernel's stores made through a one-element slice, and
    # through `...` on a one-element view. Both compile; each element a slice touches is a traced access now.
    "slice_store": ("transpose_tiled", TRANSPOSE_HEAD + (
        "    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x\n    for k in range(0, TILE, BLOCK_ROWS):\n"
        "        row = cuda.blockIdx.y * TILE + cuda.threadIdx.y + k\n"
        "        if row < x.shape[0] and col < x.shape[1]:\n            out[col, row:row + 1] = x[row, col]\n"
    ), "test_transpose_traced", "sectors for global stores"),
    "ellipsis_store": ("transpose_tiled", TRANSPOSE_HEAD + (
        "    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x\n    for k in range(0, TILE, BLOCK_ROWS):\n"
        "        row = cuda.blockIdx.y * TILE + cuda.threadIdx.y + k\n"
        "        if row < x.shape[0] and col < x.shape[1]:\n            cell = out[col:col + 1, row:row + 1]\n"
        "            cell[...] = x[row, col]\n"
    ), "test_transpose_traced", "sectors for global stores"),
    # A guard (traced before issue 47 too): no tile; each thread writes out coalesced and reads x through a row view
    # (`x[out_col]`, then an element of it), so the loads are 32 rows apart.
    "loads_through_a_row_view": ("transpose_tiled", TRANSPOSE_HEAD + (
        "    out_col = cuda.blockIdx.y * TILE + cuda.threadIdx.x\n    for k in range(0, TILE, BLOCK_ROWS):\n"
        "        out_row = cuda.blockIdx.x * TILE + cuda.threadIdx.y + k\n"
        "        if out_row < out.shape[0] and out_col < out.shape[1]:\n            source_row = x[out_col]\n"
        "            out[out_row, out_col] = source_row[out_row]\n"
    ), "test_transpose_traced", "sectors for global loads"),
    # Own (hole 2): an unpadded tile allocated as int32 and reinterpreted with .view(np.float32): its accesses are traced.
    "viewed_unpadded_tile": ("transpose_tiled", lambda given: given.replace(
        "cuda.shared.array((TILE, TILE_PADDED), np.float32)", "cuda.shared.array((TILE, TILE), np.int32).view(np.float32)"),
        "test_transpose_traced", "pad the tile"),
    # Honest: the model answer computed by tracing a tiny kernel (the specs allow the package as a building block):
    # each warp's sectors read off the trace of a block that does the reads.
    "traced_model": ("sectors_per_warp", (
        "@cuda.jit\ndef read_each(data, transposed, out):\n    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y\n"
        "    if transposed:\n        out[ty, tx] = data[tx, ty]\n    else:\n        out[ty, tx] = data[ty, tx]\n\n\n"
        "def sectors_per_warp(block_dim, width, transposed=False, element_bytes=4):\n    block_x, block_y = block_dim\n"
        "    if width < (block_y if transposed else block_x):\n        raise ValueError('the array is too narrow for the block')\n"
        "    data = np.zeros((max(block_dim), width), dtype=f'f{element_bytes}')\n"
        "    out = np.zeros((block_y, block_x), dtype=data.dtype)\n"
        "    with sim.trace() as trace:\n        read_each[1, block_dim](data, transposed, out)\n"
        "    return [request.sectors for request in sorted(trace.requests('global', 'load'), key=lambda request: request.warp)]\n"
    ), ("test_sectors_per_warp", "test_block_load_efficiency"), None),
    # Each row of the block taken for a warp: right for 32-wide blocks, wrong once a warp spans rows or half a row.
    "rows_as_warps": ("sectors_per_warp", (
        "def sectors_per_warp(block_dim, width, transposed=False, element_bytes=4):\n"
        "    block_x, block_y = block_dim\n    sectors = []\n"
        "    for ty in range(block_y):\n        cells = [(tx, ty) if transposed else (ty, tx) for tx in range(block_x)]\n"
        "        sectors.append(sim.sectors_per_request([(row * width + col) * element_bytes for row, col in cells], element_bytes))\n"
        "    return sectors\n"
    ), ("test_sectors_per_warp", "test_block_load_efficiency"), "16 × 16 block"),  # the second builds on the first
    # Honest: warps formed from numpy arrays of thread ids, broadcasts removed with np.unique; graded through
    # test_tile_conflict_degrees (the untouched item, which only this variant changes).
    "numpy_warps": ("tile_conflict_degrees", (
        "def tile_conflict_degrees(block_dim, tile_width, padding=0, transposed=False):\n"
        "    block_x, block_y = block_dim\n"
        "    if tile_width < (block_y if transposed else block_x):\n        raise ValueError('the tile is narrower than the block')\n"
        "    ids = np.arange(block_x * block_y)\n    tx, ty = ids % block_x, ids // block_x\n"
        "    row, col = (tx, ty) if transposed else (ty, tx)\n    words = row * (tile_width + padding) + col\n"
        "    return [int(np.bincount(np.unique(words[first:first + 32]) % 32).max()) for first in range(0, ids.size, 32)]\n"
    ), ("test_tile_conflict_degrees",), None),
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
        "            v = x[i]\n            for _ in range(EXPENSIVE_STEPS):\n                v = v * DECAY + ONE\n"
        "            out[i] = v\n        else:\n            out[i] = -x[i]\n"
    ), "test_uniform_traced", "split their lanes"),
    # The tree without its barriers: each step reads words other threads write in the same step.
    "no_barrier": ("sum_kernel", lambda given: given.replace("        cuda.syncthreads()\n        step //= 2", "        step //= 2", 1),
                   "test_sum_traced", "data races"),
    # Diluted: the divergent kernel behind uniform busywork (a loop every lane runs) lifts the SIMT efficiency,
    # a mean over every issued line, to 0.905; every warp still splits its lanes between the paths.
    "padded_divergent": ("activate_uniform", (
        "@cuda.jit\ndef activate_uniform(x, out):\n    i = cuda.grid(1)\n    pad = ONE\n    for _ in range(40):\n"
        "        pad = pad * ONE\n    if i < x.size:\n        if i % 2 == 0:\n"
        "            v = x[i]\n            for _ in range(EXPENSIVE_STEPS):\n                v = v * DECAY + ONE\n"
        "            out[i] = v\n        else:\n            out[i] = -x[i]\n"
    ), "test_uniform_traced", "split their lanes"),
    # Forged evidence: the divergent kernel, and the student's process patched to report no divergence. The launch
    # is traced in a kernel runner holding only the kernel's source, and the trace read on the grader's side.
    "forged_trace": ("activate_uniform", (
        "from gpucourse.sim import tracer as _tracer\n_tracer.Trace.divergent_warps = lambda self: []\n"
        "_tracer.Trace.simt_efficiency = lambda self: 1.0\n\n"
        "@cuda.jit\ndef activate_uniform(x, out):\n    i = cuda.grid(1)\n    if i < x.size:\n        if i % 2 == 0:\n"
        "            v = x[i]\n            for _ in range(EXPENSIVE_STEPS):\n                v = v * DECAY + ONE\n"
        "            out[i] = v\n        else:\n            out[i] = -x[i]\n"
    ), "test_uniform_traced", "split their lanes"),
    # The reference's remapping with Python float constants: right values in the simulator, float64 arithmetic on a GPU.
    "float64_constants": ("activate_uniform", lambda given: given.replace("v * DECAY + ONE", "v * 0.999 + 1.0"),
                          "test_uniform_correct", "computes in float64"),
    # A float64 accumulator (a Python 0.0): the sum is right, its arithmetic float64.
    "float64_accumulator": ("sum_kernel", lambda given: given.replace("total = np.float32(0)", "total = 0.0"), "test_sum_correct", "computes in float64"),
    # Interleaved addressing: right sum, threads of a warp idle in every step.
    "interleaved": ("sum_kernel", SUM_HEAD + "        if t % (2 * step) == 0:\n            s[t] += s[t + step]\n" + SUM_TAIL,
                    "test_sum_traced", "use sequential addressing"),
    # Strided index: threads stay together, but their words collide in the banks.
    "strided_index": ("sum_kernel", SUM_HEAD + "        index = 2 * step * t\n        if index < RED_BLOCK:\n"
                      "            s[index] += s[index + step]\n" + SUM_TAIL, "test_sum_traced", "bank conflicts"),
    # Issue 47, races between blocks: each block's total added with a plain read-modify-write of out[0]. The simulator runs
    # the blocks one after another, so the sum is right (test_sum_correct keeps its point); on a GPU blocks lose each other's.
    "plain_add_per_block": ("sum_kernel", lambda given: given.replace("        cuda.atomic.add(out, 0, partial[0])", "        out[0] += partial[0]", 1),
                            "test_sum_traced", "data races"),
    # Issue 47, sizes a switch can pass: only the first 5 blocks add their totals (the most any launch used to have).
    "few_blocks_only": ("sum_kernel", lambda given: given.replace(
        "    if t == 0:\n        cuda.atomic.add", "    if t == 0 and cuda.blockIdx.x < 5:\n        cuda.atomic.add", 1),
                        ("test_sum_correct", "test_sum_traced"), {"test_sum_correct": "the sum of", "test_sum_traced": "the traced sum"}),
    # Issue 47, bounds from below: one thread adds everything up, no shared memory at all (it used to pass: the traced
    # figures were only capped from above).
    "serial_sum": ("sum_kernel", (
        "@cuda.jit\ndef sum_kernel(x, out):\n    if cuda.grid(1) == 0:\n        total = np.float32(0)\n"
        "        for i in range(x.size):\n            total += x[i]\n        cuda.atomic.add(out, 0, total)\n"
    ), "test_sum_traced", "fewer than the"),
    # The tree built (and its figures met) for show, while every thread adds its own values straight into out.
    "tree_for_show": ("sum_kernel", lambda given: given.replace("        cuda.atomic.add(out, 0, partial[0])",
                                                                "        cuda.atomic.add(out, 0, partial[0] * np.float32(0))", 1).replace(
        "    partial[t] = total\n", "    partial[t] = total\n    cuda.atomic.add(out, 0, total)\n", 1),
        "test_sum_traced", "atomic additions into out"),
    # Issue 47, hole 1: the barriers kept only where the float rule says "simulator" (float32 * int: float32 in numpy,
    # float64 in numba). Traced, the tree is race-free; compiled, the rule folds to False and no barrier is left.
    "barriers_simulated_only": ("sum_kernel", lambda given: given.replace(
        "    cuda.syncthreads()\n    step", "    if np.float32(0.1) * 3 == np.float32(0.3):\n        cuda.syncthreads()\n    step", 1).replace(
        "        cuda.syncthreads()\n        step //= 2",
        "        if np.float32(0.1) * 3 == np.float32(0.3):\n            cuda.syncthreads()\n        step //= 2", 1),
        "test_sum_traced", "the simulated launch made barriers (cuda.syncthreads), the code compiled for a GPU has none"),
    # Own (hole 1): the whole tree only where the rule says "simulator"; compiled, every thread adds its values into out
    # with an atomic each. No shared memory is left in the compiled code.
    "tree_simulated_only": ("sum_kernel", lambda given: given.replace(
        "    partial[t] = total\n", "    if np.float32(0.1) * 3 != np.float32(0.3):\n        cuda.atomic.add(out, 0, total)\n"
        "        return\n    partial[t] = total\n", 1),
        "test_sum_traced", "behaves differently in the simulator and compiled"),
    # Issue 47, hole 2: interleaved addressing behind a .view of the shared array (allocated as int32): traced all the same.
    "viewed_interleaved": ("sum_kernel", SUM_HEAD.replace("cuda.shared.array(RED_BLOCK, np.float32)",
                                                          "cuda.shared.array(RED_BLOCK, np.int32).view(np.float32)")
                           + "        if t % (2 * step) == 0:\n            s[t] += s[t + step]\n" + SUM_TAIL,
                           "test_sum_traced", "use sequential addressing"),
    # Honest: the tree written in a device function that halves the active threads (a re-laid-out reduction).
    "tree_in_device_function": ("sum_kernel", (
        "@cuda.jit(device=True)\ndef fold(shared, lane):\n    width = RED_BLOCK\n    while width > 1:\n        width //= 2\n"
        "        if lane < width:\n            shared[lane] += shared[lane + width]\n        cuda.syncthreads()\n\n\n"
        "@cuda.jit\ndef sum_kernel(x, out):\n    shared = cuda.shared.array(RED_BLOCK, np.float32)\n    lane = cuda.threadIdx.x\n"
        "    mine = np.float32(0)\n    start, stride = cuda.grid(1), cuda.gridsize(1)\n    for i in range(start, x.size, stride):\n"
        "        mine += x[i]\n    shared[lane] = mine\n    cuda.syncthreads()\n    fold(shared, lane)\n"
        "    if lane == 0:\n        cuda.atomic.add(out, 0, shared[0])\n"), ("test_sum_correct", "test_sum_traced"), None),
    # The branch model applied to a loop: each distinct trip count priced as a path of its own and summed, as if the
    # warp ran the lanes of each count one after the other, instead of masking finished lanes off until the longest ends.
    "sum_of_paths": ("loop_cycles", (
        "def loop_cycles(trip_counts, cycles_per_iteration, exit_cycles=0):\n    counts = list(trip_counts)\n"
        "    if any(count is not None and count < 0 for count in counts):\n        raise ValueError('a negative trip count')\n"
        "    path_cost = {count: count * cycles_per_iteration for count in counts if count is not None}\n"
        "    return sim.warp_cycles(counts, path_cost) + exit_cycles if path_cost else 0\n"
    ), ("test_loop_cycles", "test_loop_simt_efficiency"), "one lane runs 50 iterations"),  # the second builds on the first
    # Honest: the same model with numpy masks (and numpy integers returned), graded through test_loop_cycles.
    "with_numpy": ("loop_cycles", (
        "def loop_cycles(trip_counts, cycles_per_iteration, exit_cycles=0):\n    counts = list(trip_counts)\n"
        "    if len(counts) > 32:\n        raise ValueError(f'at most 32 lanes, got {len(counts)}')\n"
        "    active = np.array([count is not None for count in counts], dtype=bool)\n"
        "    iterations = np.array([0 if count is None else count for count in counts], dtype=np.int64)[active]\n"
        "    if (iterations < 0).any():\n        raise ValueError('a negative trip count')\n"
        "    return iterations.max() * cycles_per_iteration + exit_cycles if active.any() else 0\n"
    ), ("test_loop_cycles", "test_loop_simt_efficiency"), None),
    # Correct, laid out unlike the reference: while loops, statements split over lines. Lines are not what the
    # traced items count (which warps diverge; shared-memory requests and wavefronts), so it keeps every point.
    "while_loops_uniform": ("activate_uniform", (
        "@cuda.jit\ndef activate_uniform(x, out):\n    t = cuda.grid(1)\n    pair, lane = t // 64, t % 32\n"
        "    i = (64 * pair\n         + 2 * lane\n         + (t // 32) % 2)\n    if i < x.size:\n        if i % 2 == 0:\n"
        "            v = x[i]\n            step = 0\n            while step < EXPENSIVE_STEPS:\n                v = (v * DECAY\n"
        "                     + ONE)\n                step += 1\n            out[i] = v\n        else:\n            out[i] = -x[i]\n"
    ), ("test_uniform_correct", "test_uniform_traced"), None),
    "while_loops_sum": ("sum_kernel", (
        "@cuda.jit\ndef sum_kernel(x, out):\n    s = cuda.shared.array(RED_BLOCK, np.float32)\n    t = cuda.threadIdx.x\n"
        "    acc = np.float32(0)\n    i = cuda.grid(1)\n    while i < x.size:\n        acc += x[i]\n        i += cuda.gridsize(1)\n"
        "    s[t] = acc\n    cuda.syncthreads()\n    step = RED_BLOCK // 2\n    while step > 0:\n        if t < step:\n"
        "            left = s[t]\n            right = s[\n                t + step\n            ]\n"
        "            s[t] = (\n                left\n                + right\n            )\n"
        "        cuda.syncthreads()\n        step //= 2\n    if t == 0:\n        cuda.atomic.add(out, 0, s[0])\n"
    ), ("test_sum_correct", "test_sum_traced"), None),
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
MAP_HEAD = "def overlapped_map(fn, host_chunks):\n    chunks = list(host_chunks)\n"
VARIANTS_05 = {
    # One copy engine priced as two with both copy directions merged into one stage: right on the visible case
    # (3 chunks, 2 + 3 + 1 s), too low where the copies set the pace.
    "one_engine_as_two": ("pipeline_makespan", (
        "def pipeline_makespan(n_chunks, h2d, compute, d2h, copy_engines=2):\n"
        "    if n_chunks < 0 or min(h2d, compute, d2h) < 0 or copy_engines < 1:\n        raise ValueError('bad input')\n"
        "    if n_chunks == 0:\n        return 0.0\n"
        "    pace = max(h2d, compute, d2h) if copy_engines >= 2 else max(h2d + d2h, compute)\n"
        "    return h2d + compute + d2h + (n_chunks - 1) * pace\n"
    ), "test_pipeline_makespan", "expected 20"),
    # A copy stream and a compute stream with no event between them: right values (the model computes at once),
    # but each kernel may read its chunk before the copy is done: a race, not a faster timeline.
    "no_events": ("overlapped_map", MAP_HEAD + (
        "    copies, compute = streams.Stream(), streams.Stream()\n"
        "    on_device = [streams.to_device(chunk, stream=copies) for chunk in chunks]\n"
        "    computed = [streams.launch(fn, x, stream=compute) for x in on_device]\n"
        "    results = [streams.to_host(y, stream=copies) for y in computed]\n    streams.synchronize()\n    return results\n"
    ), "test_overlap_makespan", "race"),
    # The same three streams ordered by events, every chunk's buffers kept on the device. Before: correct; now the item
    # also bounds the device footprint (4 chunks' input and output buffers) and this holds all 24.
    "with_events": ("overlapped_map", MAP_HEAD + (
        "    copy_in, compute, copy_out = streams.Stream(), streams.Stream(), streams.Stream()\n"
        "    on_device, loaded = [], []\n    for chunk in chunks:\n"
        "        on_device.append(streams.to_device(chunk, stream=copy_in))\n        loaded.append(streams.Event())\n        loaded[-1].record(copy_in)\n"
        "    computed, done = [], []\n    for x, ready in zip(on_device, loaded):\n        compute.wait_event(ready)\n"
        "        computed.append(streams.launch(fn, x, stream=compute))\n        done.append(streams.Event())\n        done[-1].record(compute)\n"
        "    results = []\n    for y, ready in zip(computed, done):\n        copy_out.wait_event(ready)\n"
        "        results.append(streams.to_host(y, stream=copy_out))\n    streams.synchronize()\n    return results\n"
    ), "test_overlap_makespan", "chunks' input and output buffers; at most 4"),
    # Depth-first issue (the lecture's chunk_by_chunk), a stream and fresh buffers per chunk. Before: correct; now every
    # chunk stays allocated (a buffer released on one stream is never reused by another), over the footprint's bound.
    "depth_first": ("overlapped_map", MAP_HEAD + (
        "    results = []\n    for chunk in chunks:\n        lane = streams.Stream()\n"
        "        results.append(streams.to_host(streams.launch(fn, streams.to_device(chunk, stream=lane), stream=lane), stream=lane))\n"
        "    streams.synchronize()\n    return results\n"
    ), "test_overlap_makespan", "chunks' input and output buffers; at most 4"),
    # Depth-first on three streams, a slot per stream, fresh buffers released once the copy out is issued: a stream runs
    # in order, so its next allocation reuses its own released blocks safely: correct (3 chunks' buffers).
    "release_per_slot_stream": ("overlapped_map", MAP_HEAD + (
        "    lanes = [streams.Stream() for _ in range(3)]\n    results = []\n    for i, chunk in enumerate(chunks):\n"
        "        lane = lanes[i % 3]\n        x = streams.to_device(chunk, stream=lane)\n        y = streams.launch(fn, x, stream=lane)\n"
        "        results.append(streams.to_host(y, stream=lane))\n        streams.release(x)\n        streams.release(y)\n"
        "    streams.synchronize()\n    return results\n"
    ), ("test_overlap_correct", "test_overlap_makespan"), None),
    # Issue 48: every chunk resident, a stream per chunk, breadth-first (the reference before issue 48). Now it holds all
    # 24 chunks' buffers, and 24 streams share the model's 8 hardware queues (2.1x the bound): loses the item.
    "all_chunks_resident": ("overlapped_map", MAP_HEAD + (
        "    lanes = [streams.Stream() for _ in chunks]\n"
        "    on_device = [streams.to_device(chunk, stream=lane) for chunk, lane in zip(chunks, lanes)]\n"
        "    computed = [streams.launch(fn, x, stream=lane) for x, lane in zip(on_device, lanes)]\n"
        "    results = [streams.to_host(y, stream=lane) for y, lane in zip(computed, lanes)]\n"
        "    streams.synchronize()\n    return results\n"
    ), "test_overlap_makespan", "chunks' input and output buffers; at most 4"),
    # Issue 48: the reference's three slots and streams without the events that guard reuse: a slot's input is copied
    # into while the kernel of three chunks before may still read it (write after read): loses the item.
    "slots_without_guard": ("overlapped_map", lambda given: given.replace(
        "        if computed[k] is not None:  # the slot's input is still read by the kernel of chunk i - slots\n"
        "            copy_in.wait_event(computed[k])\n", "").replace(
        "        if copied[k] is not None:  # the slot's output is still read by the copy out of chunk i - slots\n"
        "            compute.wait_event(copied[k])\n", ""),
        "test_overlap_makespan", "write after read"),
    # Issue 48, beating the footprint bound: buffers released as soon as the host has issued their last use, on
    # copy/compute/copy-out streams ordered by events but without record_stream, so the allocator hands a block still
    # read by another stream to the next chunk at once (PyTorch's caching allocator): small footprint, a reuse race.
    "released_across_streams": ("overlapped_map", MAP_HEAD + (
        "    copy_in, compute, copy_out = streams.Stream(), streams.Stream(), streams.Stream()\n    results = []\n"
        "    for chunk in chunks:\n        x = streams.to_device(chunk, stream=copy_in)\n        loaded = streams.Event()\n"
        "        loaded.record(copy_in)\n        compute.wait_event(loaded)\n        y = streams.launch(fn, x, stream=compute)\n"
        "        streams.release(x)\n        done = streams.Event()\n        done.record(compute)\n        copy_out.wait_event(done)\n"
        "        results.append(streams.to_host(y, stream=copy_out))\n        streams.release(y)\n"
        "    streams.synchronize()\n    return results\n"
    ), "test_overlap_makespan", "write after read"),
    # A stream per chunk, but the host waits for each chunk to come back before it sends the next: nothing overlaps.
    # (Waiting after each copy in alone costs little: the copies in run one at a time on their engine anyway.)
    "synchronous": ("overlapped_map", MAP_HEAD + (
        "    results = []\n    for chunk in chunks:\n        lane = streams.Stream()\n        x = streams.to_device(chunk, stream=lane)\n"
        "        results.append(streams.to_host(streams.launch(fn, x, stream=lane), stream=lane))\n        lane.synchronize()\n"
        "    return results\n"
    ), "test_overlap_makespan", "need at most 1.10×"),
    # The same, with the student's process patching the model to report a makespan of 0: the timeline is the grader's.
    "forged_timeline": ("overlapped_map", (
        "from gpucourse.sim import streams as _model\n_model.Timeline.makespan = property(lambda self: 0.0)\n\n" + MAP_HEAD +
        "    results = []\n    for chunk in chunks:\n        lane = streams.Stream()\n        x = streams.to_device(chunk, stream=lane)\n"
        "        results.append(streams.to_host(streams.launch(fn, x, stream=lane), stream=lane))\n        lane.synchronize()\n"
        "    return results\n"
    ), "test_overlap_makespan", "need at most 1.10×"),
    # No wait before returning: the host would read results whose copies are still running.
    "no_synchronize": ("overlapped_map",
                       lambda given: given.replace("    streams.synchronize()  # the host waits for every copy out before it reads a result\n", ""),
                       "test_overlap_makespan", "race"),
    # No prefetching (each item loaded when asked for), with the student's process making every sleep free: the
    # loads' latency and the compute are the grader's, so it is exactly as slow as load_one_by_one.
    "patched_sleep": ("prefetch", "import time\ntime.sleep = lambda seconds: None\n\n"
                      "def prefetch(loader_fn, items, depth=2):\n    for item in items:\n        yield loader_fn(item)\n",
                      "test_prefetch_speed", "need 1.4×"),
    # Every load started at once: fast, but nothing bounds what is held in memory.
    "load_everything": ("prefetch", (
        "def prefetch(loader_fn, items, depth=2):\n    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:\n"
        "        yield from pool.map(loader_fn, list(items))\n"
    ), "test_prefetch_errors_and_cleanup", "loads were started"),
    # A loading thread that is never told to stop: closing the generator leaves it blocked on a full queue.
    "thread_left_running": ("prefetch", (
        "import queue\nimport threading\n\ndef prefetch(loader_fn, items, depth=2):\n    loaded = queue.Queue(maxsize=depth)\n"
        "    def work():\n        for item in items:\n            try:\n                loaded.put(('ok', loader_fn(item)))\n"
        "            except Exception as error:\n                loaded.put(('error', error))\n                return\n"
        "        loaded.put(('end', None))\n    threading.Thread(target=work, daemon=True).start()\n"
        "    while True:\n        kind, value = loaded.get()\n        if kind == 'end':\n            return\n"
        "        if kind == 'error':\n            raise value\n        yield value\n"
    ), "test_prefetch_errors_and_cleanup", "still running"),
    # Tensors instead of the host buffers to_host gave back.
    "values_read_inside": ("overlapped_map", lambda given: given.replace("    return results", "    return [streams.value(r) for r in results]"),
                           ("test_overlap_correct", "test_overlap_makespan"), "return what to_host gave back"),
    # Issue 45: chunks merged in pairs on the host, half as many kernels, the results split on the host and handed back
    # in fresh pinned buffers. Before: every item passed (a pinned buffer counted as a result, a kernel cost its fixed
    # seconds whatever its input). Now only what to_host gave back is a result, and each must be its chunk's own work.
    "host_merge": ("overlapped_map", MAP_HEAD + (
        "    pairs = [chunks[i:i + 2] for i in range(0, len(chunks), 2)]\n    lanes = [streams.Stream() for _ in pairs]\n"
        "    merged = [streams.to_device(streams.pinned(torch.cat([streams.value(c) for c in pair])), stream=lane)\n"
        "              for pair, lane in zip(pairs, lanes)]\n"
        "    back = [streams.to_host(streams.launch(fn, x, stream=lane), stream=lane) for x, lane in zip(merged, lanes)]\n"
        "    streams.synchronize()\n    results = []\n    for pair, out in zip(pairs, back):\n"
        "        parts = torch.split(streams.value(out), [streams.value(c).numel() for c in pair])\n"
        "        results.extend(streams.pinned(part) for part in parts)\n    return results\n"
    ), ("test_overlap_correct", "test_overlap_makespan"), "return what to_host gave back"),
    # Streams named as the model once named the host: no wait before the host reads the results. Before: race-free and
    # within the bound (the host's reads looked ordered); now a name is a label, and the host is no stream of the model.
    "streams_named_host": ("overlapped_map", MAP_HEAD + (
        "    lanes, out = [streams.Stream() for _ in chunks], streams.Stream('host')\n"
        "    computed = [streams.launch(fn, streams.to_device(c, stream=l), stream=l) for c, l in zip(chunks, lanes)]\n"
        "    results = []\n    for y, lane in zip(computed, lanes):\n        done = streams.Event()\n        done.record(lane)\n"
        "        out.wait_event(done)\n        results.append(streams.to_host(y, stream=out))\n    return results\n"
    ), "test_overlap_makespan", "race"),
    # Issue 46: a Stream built by hand whose handle names the host, the copies out on it after an event per chunk, no wait
    # before the host reads the results. Before: race-free and within the bound, 3 points (the model took any object with a
    # name for a stream, and a stream named "host" for the host); now a stream is a token the run hands out, and the host no stream.
    "stream_built_as_host": ("overlapped_map", "import types\n\n" + MAP_HEAD + (
        "    lanes = [streams.Stream() for _ in chunks]\n"
        "    out = streams.Stream.__new__(streams.Stream)\n"
        "    out.backend, out.name, out.handle = streams.active(), 'host', types.SimpleNamespace(name='host')\n"
        "    computed = [streams.launch(fn, streams.to_device(c, stream=l), stream=l) for c, l in zip(chunks, lanes)]\n"
        "    results = []\n    for y, lane in zip(computed, lanes):\n        done = streams.Event()\n        done.record(lane)\n"
        "        out.wait_event(done)\n        results.append(streams.to_host(y, stream=out))\n    return results\n"
    ), "test_overlap_makespan", "not a stream of this run"),
    # The no_events layout with the compute stream built by hand under the name the model gave the copy stream ("stream").
    # Before: the model took the two for one stream, so nothing raced and nothing overlapped (makespan 2.1x, no points gained).
    "stream_built_as_another": ("overlapped_map", "import types\n\n" + MAP_HEAD + (
        "    copies = streams.Stream()\n    compute = streams.Stream.__new__(streams.Stream)\n"
        "    compute.backend, compute.name, compute.handle = streams.active(), 'stream', types.SimpleNamespace(name='stream')\n"
        "    on_device = [streams.to_device(chunk, stream=copies) for chunk in chunks]\n"
        "    computed = [streams.launch(fn, x, stream=compute) for x in on_device]\n"
        "    results = [streams.to_host(y, stream=copies) for y in computed]\n    streams.synchronize()\n    return results\n"
    ), ("test_overlap_correct", "test_overlap_makespan"), "not a stream of this run"),
    # The kernels wait on an Event built by hand under the model's name of a first event. Before: a wait on an event never
    # recorded, a no-op, so the races showed (no points gained); now refused as it would be on a GPU.
    "event_built_by_hand": ("overlapped_map", "import types\n\n" + MAP_HEAD + (
        "    copies, compute = streams.Stream(), streams.Stream()\n"
        "    on_device = [streams.to_device(chunk, stream=copies) for chunk in chunks]\n"
        "    copied = streams.Event.__new__(streams.Event)\n"
        "    copied.backend, copied.name, copied.handle = streams.active(), 'event', types.SimpleNamespace(name='event')\n"
        "    compute.wait_event(copied)\n    computed = [streams.launch(fn, x, stream=compute) for x in on_device]\n"
        "    results = [streams.to_host(y, stream=compute) for y in computed]\n    streams.synchronize()\n    return results\n"
    ), ("test_overlap_correct", "test_overlap_makespan"), "not an event of this run"),
    # Every run waits on the event the first run recorded. Before: its handle (a small count) named whatever object of the
    # new run had that number (an error in one item, a no-op wait and races in the other); now handles are random and per run.
    "event_from_another_run": ("overlapped_map", "_KEPT = []\n\n" + MAP_HEAD + (
        "    copies, compute = streams.Stream(), streams.Stream()\n"
        "    on_device = [streams.to_device(chunk, stream=copies) for chunk in chunks]\n"
        "    if not _KEPT:\n        _KEPT.append(streams.Event())\n        _KEPT[0].record(copies)\n    compute.wait_event(_KEPT[0])\n"
        "    computed = [streams.launch(fn, x, stream=compute) for x in on_device]\n"
        "    results = [streams.to_host(y, stream=compute) for y in computed]\n    streams.synchronize()\n    return results\n"
    ), ("test_overlap_correct", "test_overlap_makespan"), "an event this run did not hand out"),
    # No copies and no kernels: a makespan of 0, under any cap from above. Already closed by be80eb5 (a result per chunk,
    # each its chunk's own work on the device; the makespan held to the work's bound from below too).
    "empty_timeline": ("overlapped_map", "def overlapped_map(fn, host_chunks):\n    return []\n",
                       ("test_overlap_correct", "test_overlap_makespan"), "one per chunk, got 0"),
    # The map's function launched as a kernel of the answer's own that takes no time. Before: refused by accident (the
    # rebuilt kernel could not be called); now launch says a kernel's time is the grader's.
    "kernel_made_free": ("overlapped_map", lambda given: given.replace(
        "streams.launch(fn, inputs[k], stream=compute", "streams.launch(streams.kernel(fn, seconds=0.0), inputs[k], stream=compute"),
        ("test_overlap_correct", "test_overlap_makespan"), "launch the function you were given as it is"),
    # Labels are labels: three slot streams labelled "default", a copy-out stream labelled "host", ordered by an event per
    # chunk (the slot's output rewritten after its copy out, on an event labelled "host" too), and a wait before returning.
    # (Before issue 48 a stream and fresh buffers per chunk: now over the footprint's bound, so it keeps 3 slots.)
    "copy_out_stream_labelled_host": ("overlapped_map", MAP_HEAD + (
        "    lanes, out = [streams.Stream('default') for _ in range(3)], streams.Stream('host')\n"
        "    xs, ys, sent, results = [None] * 3, [None] * 3, [None] * 3, []\n"
        "    for i, c in enumerate(chunks):\n        k = i % 3\n"
        "        if sent[k] is not None:\n            lanes[k].wait_event(sent[k])\n"
        "        xs[k] = streams.to_device(c, stream=lanes[k], out=xs[k])\n"
        "        ys[k] = streams.launch(fn, xs[k], stream=lanes[k], out=ys[k])\n"
        "        done = streams.Event('host')\n        done.record(lanes[k])\n        out.wait_event(done)\n"
        "        results.append(streams.to_host(ys[k], stream=out))\n"
        "        sent[k] = streams.Event('host')\n        sent[k].record(out)\n"
        "    out.synchronize()\n    return results\n"
    ), ("test_overlap_correct", "test_overlap_makespan"), None),
    # Issue 46: the course's own simulator, extrapolated from 64 chunks. Before: full marks (every case was exact by 64
    # chunks or linear after); now the hidden tests draw a one-copy-engine pipeline whose pace changes after 10**8 to 10**9 chunks.
    "simulated_makespan": ("pipeline_makespan", (
        "def pipeline_makespan(n_chunks, h2d, compute, d2h, copy_engines=2):\n"
        "    if n_chunks < 0 or min(h2d, compute, d2h) < 0 or copy_engines < 1:\n        raise ValueError('bad input')\n"
        "    def simulated(n):\n        return stream_model.pipeline(n, h2d, compute, d2h, copy_engines=copy_engines,\n"
        "                                     queues='per-engine').simulate().makespan\n"
        "    if n_chunks <= 64:\n        return simulated(n_chunks)\n"
        "    return simulated(64) + (n_chunks - 64) * (simulated(64) - simulated(63))\n"
    ), "test_pipeline_makespan", "(drawn): expected"),
    # Every visible and hidden case of before typed in. Before: full marks; now the hidden tests draw theirs when they grade.
    "knows_the_hidden_cases": ("pipeline_makespan", (
        "def pipeline_makespan(n_chunks, h2d, compute, d2h, copy_engines=2):\n"
        "    if n_chunks < 0 or min(h2d, compute, d2h) < 0 or copy_engines < 1:\n        raise ValueError('bad input')\n"
        "    return {(1, 2.0, 3.0, 1.0, 2): 6.0, (3, 2.0, 3.0, 1.0, 2): 12.0, (4, 4.0, 1.0, 1.0, 2): 18.0, (3, 2.0, 3.0, 1.0, 1): 12.0,\n"
        "            (0, 2.0, 3.0, 1.0, 2): 0.0, (5, 1.0, 1.0, 1.0, 3): 7.0, (4, 3.0, 1.0, 2.0, 1): 20.0, (2, 1.0, 10.0, 5.0, 1): 26.0,\n"
        "            (3, 1.0, 3.0, 4.0, 1): 16.0, (10**9, 1e-3, 2e-3, 5e-4, 2): 1e-3 + 2e-3 + 5e-4 + (10**9 - 1) * 2e-3,\n"
        "            (10**9, 1e-3, 2e-3, 5e-4, 1): 3e-3 + (10**9 - 1) * 2e-3 + 5e-4}.get((n_chunks, h2d, compute, d2h, copy_engines), 0.0)\n"
    ), "test_pipeline_makespan", "(drawn): expected"),
    # The closed form found another way: with one copy engine the copies out start once every copy in and the first kernel
    # are done, and then each waits for its kernel or the one before it.
    "closed_form_by_waits": ("pipeline_makespan", (
        "def pipeline_makespan(n_chunks, h2d, compute, d2h, copy_engines=2):\n"
        "    if n_chunks < 0 or h2d < 0 or compute < 0 or d2h < 0 or copy_engines < 1:\n        raise ValueError('bad input')\n"
        "    if not n_chunks:\n        return 0.0\n    if copy_engines > 1:\n"
        "        return h2d + compute + d2h + (n_chunks - 1) * max(h2d, compute, d2h)\n"
        "    last_kernel_done = h2d + compute + (n_chunks - 1) * max(h2d, compute)\n"
        "    first_out_starts = max(n_chunks * h2d, h2d + compute)\n"
        "    return max(first_out_starts + n_chunks * d2h, last_kernel_done + d2h)\n"
    ), "test_pipeline_makespan", None),
    # The standard answers (docs/authoring.md §5). pipeline_makespan has no locked baseline: standard_baseline keeps the
    # reference there. The baselines truly answer the correctness items (test_overlap_correct, test_prefetch_order).
    "standard_baseline": (("overlapped_map", "prefetch"), (
        "def overlapped_map(fn, host_chunks):\n    return serial_map(fn, host_chunks)\n",
        "def prefetch(loader_fn, items, depth=2):\n    yield from load_one_by_one(loader_fn, items, depth)\n",
    ), ("test_overlap_makespan", "test_prefetch_errors_and_cleanup", "test_prefetch_speed"),
        {"test_overlap_makespan": "need at most 1.10×", "test_prefetch_errors_and_cleanup": "nothing was prefetched",
         "test_prefetch_speed": "need 1.4×"}),
    # Nothing done: no time, the chunks handed back as they came, the items yielded instead of their loads.
    "standard_do_nothing": (("pipeline_makespan", "overlapped_map", "prefetch"), (
        "def pipeline_makespan(n_chunks, h2d, compute, d2h, copy_engines=2):\n    return 0.0\n",
        "def overlapped_map(fn, host_chunks):\n    return list(host_chunks)\n",
        "def prefetch(loader_fn, items, depth=2):\n    yield from items\n",
    ), ("test_pipeline_makespan", "test_overlap_correct", "test_overlap_makespan", "test_prefetch_order",
        "test_prefetch_errors_and_cleanup", "test_prefetch_speed"),
        {"test_pipeline_makespan": "expected 6", "test_overlap_correct": "to_host did not give back",
         "test_overlap_makespan": "to_host did not give back", "test_prefetch_order": "out of order",
         "test_prefetch_errors_and_cleanup": "expected the loader's error", "test_prefetch_speed": "in order"}),
    # What the visible tests show, set by hand: their four makespans; the visible map (2x + 1) computed on the host and
    # sent through the device and back; loads made up (what a load returns is drawn by the grader).
    "standard_hand_set": (("pipeline_makespan", "overlapped_map", "prefetch"), (
        "def pipeline_makespan(n_chunks, h2d, compute, d2h, copy_engines=2):\n"
        "    return {(1, 2.0, 3.0, 1.0, 2): 6.0, (3, 2.0, 3.0, 1.0, 2): 12.0, (4, 4.0, 1.0, 1.0, 2): 18.0,\n"
        "            (3, 2.0, 3.0, 1.0, 1): 12.0}.get((n_chunks, h2d, compute, d2h, copy_engines), 0.0)\n",
        MAP_HEAD + "    lanes = [streams.Stream() for _ in chunks]\n"
        "    on_device = [streams.to_device(streams.pinned(2.0 * streams.value(c) + 1.0), stream=l) for c, l in zip(chunks, lanes)]\n"
        "    results = [streams.to_host(x, stream=l) for x, l in zip(on_device, lanes)]\n    streams.synchronize()\n    return results\n",
        "def prefetch(loader_fn, items, depth=2):\n    for item in items:\n        yield f'{item}:0000000000000000'\n",
    ), ("test_pipeline_makespan", "test_overlap_correct", "test_overlap_makespan", "test_prefetch_order",
        "test_prefetch_errors_and_cleanup", "test_prefetch_speed"),
        {"test_pipeline_makespan": "expected 7", "test_overlap_correct": "computed by the map's function on the device",
         "test_overlap_makespan": "computed by the map's function on the device", "test_prefetch_order": "out of order",
         "test_prefetch_errors_and_cleanup": "expected the loader's error", "test_prefetch_speed": "in order"}),
}
EAGER_TAIL = "def fused_tail(x, bias, residual):\n    return F.gelu(x + bias) * SCALE + residual\n"
VARIANTS_06 = {
    # The visible examples' counts, hard-coded: the hidden tests count functions the student has not seen.
    "hard_coded_counts": ("count_ops", (
        "def count_ops(fn, *args):\n    if fn is torch.relu:\n        return {'aten::relu': 1, 'aten::clamp_min': 1}\n"
        "    return {'aten::linear': 2, 'aten::addmm': 2, 'aten::t': 2, 'aten::relu': 1}\n"
    ), "test_count_ops", "count_ops(a small CNN)"),
    # A dispatch mode sees only the outermost ops below autograd: no aten::linear, no nested clamp_min.
    "dispatch_mode": ("count_ops", (
        "from torch.utils._python_dispatch import TorchDispatchMode\n\nclass _Counting(TorchDispatchMode):\n"
        "    def __init__(self):\n        super().__init__()\n        self.counts = {}\n"
        "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
        "        name = 'aten::' + func._schema.name.split('::')[-1]\n        self.counts[name] = self.counts.get(name, 0) + 1\n"
        "        return func(*args, **(kwargs or {}))\n\ndef count_ops(fn, *args):\n    with _Counting() as mode:\n        fn(*args)\n"
        "    return mode.counts\n"
    ), "test_count_ops", "expected"),
    # Total time instead of self time: the Linear (which holds the matmul) wins.
    "total_time": ("dominant_op", lambda given: given.replace("self_cpu_time_total", "cpu_time_total"), "test_dominant_op", "expected 'aten::addmm'"),
    # The eager chain: right values, every op still there. Eager against eager measures 1.0-1.1x on a quiet machine, but
    # a heavily loaded one has measured 1.3x: the speed item counts the ops first, so the count is what catches it there too.
    "eager_tail": ("fused_tail", EAGER_TAIL, ("test_fused_tail_ops", "test_fused_tail_speed"), "at most 2 allowed"),
    # Half of the chain in NumPy, where the profiler sees nothing (2 ATen ops counted): the gate refuses the cell.
    "numpy_tail": ("fused_tail", (
        "def fused_tail(x, bias, residual):\n    y = F.gelu(x + bias)\n"
        "    return torch.from_numpy(y.numpy() * SCALE + residual.numpy())\n"
    ), ("test_fused_tail_ops", "test_fused_tail_speed"), "takes the values out of torch"),
    # The last result kept per shape: fast, and wrong on the second call of a shape.
    "cached_tail": ("fused_tail", (
        "_compiled = torch.compile(lambda x, bias, residual: F.gelu(x + bias) * SCALE + residual)\n_last = {}\n\n"
        "def fused_tail(x, bias, residual):\n    key = (tuple(x.shape), x.dtype)\n"
        "    if key not in _last:\n        _last[key] = _compiled(x, bias, residual)\n    return _last[key]\n"
    ), ("test_fused_tail_correct", "test_fused_tail_ops", "test_fused_tail_speed"), "fused_tail"),
    # Compiled, with a line that would switch the profiler off where the cell runs: the grader will not count such a cell.
    "patches_the_profiler": ("fused_tail", lambda given: "torch.autograd.profiler._disable_profiler_legacy = None\n" + given,
                             "test_fused_tail_ops", "cannot be counted by the grader"),
    # Compiled by hand-picked decomposition into fewer torch calls, still one pass each: addcmul folds the scale and the residual.
    "addcmul_tail": ("fused_tail", (
        "def fused_tail(x, bias, residual):\n    return torch.addcmul(residual, F.gelu(x + bias), torch.tensor(SCALE, dtype=x.dtype))\n"
    ), "test_fused_tail_ops", "at most 2 allowed"),
    # Compiled with dynamic=True (issue 46): one fused pass, and Dynamo lifts the Python float SCALE into a tensor on every
    # call (aten::empty, aten::to, aten::lift_fresh), which moves no tensor data: not counted (gpucourse.gates.ops.moving_ops).
    "dynamic_compiled_tail": ("fused_tail", "@torch.compile(dynamic=True)\n" + EAGER_TAIL, "test_fused_tail_ops", None),
    # Passes hidden where that bookkeeping is: the fused tail run in float64, each conversion a copy behind an aten::to (the
    # op that lifting's aten::to is); the copies inside it (aten::_to_copy, aten::copy_) are counted.
    "passes_in_conversions": ("fused_tail", (
        "@torch.compile(dynamic=True)\ndef tail64(x, bias, residual):\n    return F.gelu(x + bias) * SCALE + residual\n\n"
        "def fused_tail(x, bias, residual):\n    return tail64(x.double(), bias.double(), residual.double()).to(x.dtype)\n"
    ), "test_fused_tail_ops", "at most 2 allowed"),
    # A kernel that falls back to torch inside: the interpreter would run it, a GPU compiler refuses it.
    "torch_in_kernel": ("bias_gelu_kernel", (
        "@triton.jit\ndef bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):\n"
        "    torch.nn.functional.gelu(x_ptr)\n"
    ), "test_bias_gelu_kernel", "torch"),
    # No mask on the store: the last block writes past the output.
    "unmasked_store": ("bias_gelu_kernel", lambda given: given.replace(", mask=inside)\n    ### END", ")\n    ### END"),
                       "test_bias_gelu_kernel", "wrote past the end"),
    # No mask on the loads: the store's mask drops what the last block read past x, but a GPU may fault there.
    # The grader's interpreter checks every load's addresses (its launcher's launches too).
    "unmasked_loads": ("bias_gelu_kernel", lambda given: given.replace(", mask=inside) + tl.load(", ") + tl.load(").replace(
        "offsets % n_cols, mask=inside)", "offsets % n_cols)"), ("test_bias_gelu_kernel", "test_triton_fused_launch"), "outside every tensor"),
    # No Triton at all: torch.compile fuses the chain (Inductor's kernel, not the student's).
    "compiled_not_triton": ("triton_fused", "triton_fused = torch.compile(lambda x, b: F.gelu(x + b))\n",
                            "test_triton_fused_launch", "launched no Triton kernel"),
    # The kernel launched on the first half of the data, torch doing the rest.
    "half_in_torch": ("triton_fused", (
        "def triton_fused(x, bias):\n    out = F.gelu(x + bias)\n    half = x.numel() // 2\n"
        "    bias_gelu_kernel[(triton.cdiv(half, 64),)](x, bias, out, half, x.shape[1], BLOCK=64)\n    return out\n"
    ), "test_triton_fused_launch", "computed with torch besides its kernels"),
    # The kernel launched on the whole tensor, then the result rounded through NumPy: refused before it runs.
    "numpy_launcher": ("triton_fused", lambda given: given.replace("    return out\n", "    return torch.from_numpy(out.numpy())\n"),
                       "test_triton_fused_launch", "takes the values out of torch"),
    # The chain computed in the grid function, which Triton calls inside the launch; the kernel launched on nothing.
    "work_in_the_grid": ("triton_fused", (
        "def triton_fused(x, bias):\n    out = torch.empty_like(x)\n"
        "    bias_gelu_kernel[lambda meta: (out.copy_(F.gelu(x + bias)).numel() * 0 + 1,)](x, bias, out, 0, x.shape[1], BLOCK=64)\n"
        "    return out\n"
    ), "test_triton_fused_launch", "computed with torch besides its kernels"),
    # The loop, as given: right, and no faster.
    "still_a_loop": ("batched_matmuls", "def batched_matmuls(As, Bs):\n    return torch.stack([a @ b for a, b in zip(As, Bs)])\n",
                     "test_batched_matmuls_speed", "need 3×"),
    # Zeros, with torch's own matmul patched to give zeros too where the answer runs: the expected product is the grader's.
    "patched_matmul": ("batched_matmuls", (
        "torch.matmul = lambda a, b: torch.zeros(a.shape[0], a.shape[1], b.shape[-1], dtype=a.dtype)\n\n"
        "def batched_matmuls(As, Bs):\n    return torch.zeros(As.shape[0], As.shape[1], Bs.shape[2], dtype=As.dtype)\n"
    ), ("test_batched_matmuls_correct", "test_batched_matmuls_speed"), "values differ"),
    # einsum instead of bmm: as fast.
    "einsum": ("batched_matmuls", "def batched_matmuls(As, Bs):\n    return torch.einsum('bmk,bkp->bmp', As, Bs)\n",
               ("test_batched_matmuls_correct", "test_batched_matmuls_speed"), None),
    # The layer's tail folded into the matmul the other way: the matmul adds the bias, an add scales and adds the residual.
    "addmm_then_add": ("linear_tail", (
        "def linear_tail(x, weight, bias, residual):\n    return torch.add(residual, torch.addmm(bias, x, weight), alpha=SCALE)\n"),
                       ("test_linear_tail_correct", "test_linear_tail_traffic"), None),
    # The chain as written: right values, 4 ops, 8 (m, n) tensors' worth of traffic.
    "eager_linear_tail": ("linear_tail", "def linear_tail(x, weight, bias, residual):\n    return (x @ weight + bias) * SCALE + residual\n",
                          "test_linear_tail_traffic", "fold the bias"),
    # In place: no new tensors, but every pass over memory is still there.
    "in_place_tail": ("linear_tail", "def linear_tail(x, weight, bias, residual):\n    return torch.addmm(bias, x, weight).mul_(SCALE).add_(residual)\n",
                      "test_linear_tail_traffic", "ran 3 ops"),
    # Compiled: fused by Inductor, not by the student; counted as its code runs.
    "compiled_linear_tail": ("linear_tail", "@torch.compile\ndef linear_tail(x, weight, bias, residual):\n    return (x @ weight + bias) * SCALE + residual\n",
                             "test_linear_tail_traffic", "fold the bias"),
    # The tail in NumPy, where no counter sees it: refused before it runs.
    "numpy_linear_tail": ("linear_tail", (
        "def linear_tail(x, weight, bias, residual):\n    return torch.from_numpy((torch.addmm(bias, x, weight).numpy() * SCALE) + residual.numpy())\n"
    ), "test_linear_tail_traffic", "takes the values out of torch"),
    # Issue 46: the grader's own counting code, imported in the student's worker, answered both (full marks before); a worker
    # that runs the student's code is sealed from the grader's package (autograder.worker.seal, sandbox.grader_only_paths).
    "grader_counts_ops": (("count_ops", "dominant_op"), (
        "def count_ops(fn, *args):\n    from autograder.profiling import counted_call\n    return dict(counted_call(fn, *args)[1])\n",
        "def dominant_op(fn, *args):\n    from autograder.profiling import counted_call\n    ops = counted_call(fn, *args)[1]\n"
        "    return max(ops, key=ops.get)\n",
    ), ("test_count_ops", "test_dominant_op"), "No module named 'autograder'"),
    # The standard answers (docs/authoring.md, section 5). The locked baselines: tail_eager, the loop of matmuls and
    # linear_tail_eager (their correctness items pass, as they should; the Triton launcher has no baseline in a setup cell).
    "standard_baseline": (("fused_tail", "batched_matmuls", "linear_tail"), (
        "def fused_tail(x, bias, residual):\n    return tail_eager(x, bias, residual)\n",
        "def batched_matmuls(As, Bs):\n    return matmuls_loop(As, Bs)\n",
        "def linear_tail(x, weight, bias, residual):\n    return linear_tail_eager(x, weight, bias, residual)\n",
    ), ("test_fused_tail_ops", "test_fused_tail_speed", "test_batched_matmuls_speed", "test_linear_tail_traffic"),
        {"test_fused_tail_ops": "cannot be counted", "test_fused_tail_speed": "cannot be counted", "test_batched_matmuls_speed": "need 3×",
         "test_linear_tail_traffic": "cannot be counted"}),
    # Do-nothing answers of the right types, every answer cell at once.
    "standard_do_nothing": (("count_ops", "dominant_op", "fused_tail", "bias_gelu_kernel", "triton_fused", "batched_matmuls", "linear_tail"), (
        "def count_ops(fn, *args):\n    return {}\n",
        "def dominant_op(fn, *args):\n    return 'aten::empty'\n",
        "def fused_tail(x, bias, residual):\n    return residual\n",
        "@triton.jit\ndef bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK: tl.constexpr):\n    pass\n",
        "def triton_fused(x, bias):\n    return torch.empty_like(x)\n",
        "def batched_matmuls(As, Bs):\n    return torch.zeros(As.shape[0], As.shape[1], Bs.shape[2])\n",
        "def linear_tail(x, weight, bias, residual):\n    return residual\n",
    ), ("test_count_ops", "test_dominant_op", "test_fused_tail_correct", "test_fused_tail_ops", "test_fused_tail_speed",
        "test_bias_gelu_kernel", "test_triton_fused_launch", "test_batched_matmuls_correct", "test_batched_matmuls_speed",
        "test_linear_tail_correct", "test_linear_tail_traffic"),
        {"test_count_ops": "expected", "test_dominant_op": "expected", "test_fused_tail_correct": "values differ",
         "test_fused_tail_ops": "values differ", "test_fused_tail_speed": "values differ", "test_bias_gelu_kernel": "values differ",
         "test_triton_fused_launch": "values differ", "test_batched_matmuls_correct": "values differ",
         "test_batched_matmuls_speed": "values differ", "test_linear_tail_correct": "values differ", "test_linear_tail_traffic": "values differ"}),
    # The visible tests' targets, hard-coded: the counts of the visible model, the visible dominant op. (The other items'
    # targets come from fresh random inputs: nothing to hand-set.)
    "standard_hand_set": (("count_ops", "dominant_op"), (
        "def count_ops(fn, *args):\n    if fn is torch.relu:\n        return {'aten::relu': 1, 'aten::clamp_min': 1}\n"
        "    return {'aten::linear': 2, 'aten::addmm': 2, 'aten::t': 2, 'aten::relu': 1}\n",
        "def dominant_op(fn, *args):\n    return 'aten::addmm'\n",
    ), ("test_count_ops", "test_dominant_op"), {"test_count_ops": "count_ops(a small CNN)", "test_dominant_op": "dominant_op(a convolution"}),
}
# Module 07's tensorized answers that do the work some other way: each calls mma exactly as often as the reference.
ZERO_TILE_MMA = (
    "@njit\ndef matmul_tensorized(a, b, mma):\n    m, k = a.shape\n    n = b.shape[1]\n"
    "    zero, scratch = np.zeros((16, 16), a.dtype), np.zeros((16, 16), a.dtype)\n"
    "    for _ in range(((m + 15) // 16) * ((k + 15) // 16) * ((n + 15) // 16)):\n        mma(zero, zero, scratch)\n"
    "    c = np.zeros((m, n), a.dtype)\n    for i in range(m):\n        for p in range(k):\n            for j in range(n):\n"
    "                c[i, j] += a[i, p] * b[p, j]\n    return c\n"
)
# A 16 x 16 multiply-accumulate of the answer's own, as fast as the course's (the same 4 x 4 register block).
OWN_MMA = (
    "@njit\ndef own_mma(a, b, c):\n    for i in range(0, 16, 4):\n        for p in range(0, 16, 4):\n"
    "            for j in range(16):\n                b0, b1, b2, b3 = b[p, j], b[p + 1, j], b[p + 2, j], b[p + 3, j]\n"
    "                for r in range(i, i + 4):\n"
    "                    c[r, j] += a[r, p] * b0 + a[r, p + 1] * b1 + a[r, p + 2] * b2 + a[r, p + 3] * b3\n\n\n"
)
VARIANTS_07 = {
    # A tile per partial edge counted as a whole tile: the model clips them.
    "unclipped_tiles": ("matmul_flops_bytes", lambda given: given.replace("col_tiles * m * k + row_tiles * k * n + m * n",
                                                                         "col_tiles * row_tiles * tile * k * 2 + m * n"),
                        "test_matmul_flops_bytes", "expected"),
    # Not compiled: the loops in Python.
    "python_loops": ("matmul_reordered", lambda given: given.replace("@njit\ndef matmul_reordered", "def matmul_reordered"),
                     ("test_matmul_reordered_correct", "test_matmul_reordered_speed"), "must be compiled with @njit"),
    # Python smuggled into the runner: an annotation runs when the def does, outside the compiled loops (found
    # with issue 50; the njit gate refuses every annotation).
    "annotation_runs_python": ("matmul_reordered", lambda given: given.replace(
        "def matmul_reordered(a, b):", 'def matmul_reordered(a: __import__("os").getpid(), b):'),
        ("test_matmul_reordered_correct", "test_matmul_reordered_speed"), "has annotations"),
    # Honest (issue 46): fastmath lets the compiler reassociate the sums; the values are within tolerance and it keeps both points.
    "fastmath_loops": ("matmul_reordered", lambda given: given.replace("@njit\ndef matmul_reordered", "@njit(fastmath=True)\ndef matmul_reordered"),
                       ("test_matmul_reordered_correct", "test_matmul_reordered_speed"), None),
    # The given order again: right, and no faster.
    "ijk_again": ("matmul_reordered", (
        "@njit\ndef matmul_reordered(a, b):\n    m, k = a.shape\n    n = b.shape[1]\n    c = np.zeros((m, n), dtype=a.dtype)\n"
        "    for i in range(m):\n        for j in range(n):\n            for p in range(k):\n                c[i, j] += a[i, p] * b[p, j]\n    return c\n"
    ), "test_matmul_reordered_speed", "need 5×"),
    # "Blocked" by calling BLAS on the whole matrix, compiled or not: the grader refuses the cell.
    "blas_blocked": ("matmul_blocked", "def matmul_blocked(a, b, tile=64):\n    return np.dot(a, b)\n",
                     ("test_matmul_blocked_correct", "test_matmul_blocked_speed"), "must be compiled with @njit"),
    "matmul_operator_blocked": ("matmul_blocked", "@njit\ndef matmul_blocked(a, b, tile=64):\n    return a @ b\n",
                                ("test_matmul_blocked_correct", "test_matmul_blocked_speed"), "is NumPy's matmul"),
    # Inputs zeroed in place and zeros returned: the grader checks against its own copies of the inputs, not the worker's.
    "zeroes_inputs": ("matmul_blocked", (
        "@njit\ndef matmul_blocked(a, b, tile=128):\n    m, k = a.shape\n    n = b.shape[1]\n"
        "    for i in range(m):\n        for p in range(k):\n            a[i, p] = 0.0\n"
        "    for p in range(k):\n        for j in range(n):\n            b[p, j] = 0.0\n"
        "    return np.zeros((m, n), dtype=a.dtype)\n"
    ), ("test_matmul_blocked_correct", "test_matmul_blocked_speed"), "values differ"),
    # The count faked with the intrinsic on zero tiles, the product by BLAS: refused before anything runs.
    "blas_tensorized": ("matmul_tensorized", ZERO_TILE_MMA.replace(
        "    c = np.zeros((m, n), a.dtype)\n    for i in range(m):\n        for p in range(k):\n            for j in range(n):\n"
        "                c[i, j] += a[i, p] * b[p, j]\n    return c\n", "    return np.dot(a, b)\n"),
        ("test_matmul_tensorized_correct", "test_matmul_tensorized_calls", "test_matmul_tensorized_speed"), "np.dot"),
    # The count faked with the intrinsic on zero tiles, the product by the student's own loops: the calls are not the work.
    "zero_tile_calls": ("matmul_tensorized", ZERO_TILE_MMA, "test_matmul_tensorized_calls", "not one per pair of input tiles"),
    # The right tiles multiplied, into a scratch tile thrown away, the output computed by other loops.
    "discarded_mma": ("matmul_tensorized", lambda given: given.replace(
        "            c[16 * i:16 * i + rows, 16 * j:16 * j + cols] = acc[:rows, :cols]  # the output tile, cropped at the edges",
        "            for r in range(16 * i, 16 * i + rows):\n                for s in range(16 * j, 16 * j + cols):\n"
        "                    total = 0.0\n                    for q in range(k):\n                        total += a[r, q] * b[q, s]\n"
        "                    c[r, s] = total"),
        "test_matmul_tensorized_calls", "not built from the mma calls' results"),
    # Tensorized on strided views of the padded matrices, as the given baseline is: right, every call right, and no faster.
    "strided_tiles": ("matmul_tensorized", (
        "@njit\ndef matmul_tensorized(a, b, mma):\n    m, k = a.shape\n    n = b.shape[1]\n"
        "    mp, kp, np_ = (m + 15) // 16 * 16, (k + 15) // 16 * 16, (n + 15) // 16 * 16\n"
        "    ap, bp, cp = np.zeros((mp, kp), a.dtype), np.zeros((kp, np_), a.dtype), np.zeros((mp, np_), a.dtype)\n"
        "    ap[:m, :k] = a\n    bp[:k, :n] = b\n"
        "    for i in range(0, mp, 16):\n        for j in range(0, np_, 16):\n            for p in range(0, kp, 16):\n"
        "                mma(ap[i:i + 16, p:p + 16], bp[p:p + 16, j:j + 16], cp[i:i + 16, j:j + 16])\n"
        "    return cp[:m, :n].copy()\n"
    ), "test_matmul_tensorized_speed", "need 1.5×"),
    # Issue 46: the intrinsic on the checked shapes, plain loops of its own at the timed size (they were 2.5x the strided
    # baseline, and kept the speed point while the intrinsic's calls were counted on small shapes only).
    "bypass_when_large": ("matmul_tensorized", lambda given: given.replace(
        "    n = b.shape[1]\n    tiles_m,",
        "    n = b.shape[1]\n    if m * k * n >= 1 << 24:\n        c = np.zeros((m, n), a.dtype)\n        for i in range(m):\n"
        "            for p in range(k):\n                for j in range(n):\n                    c[i, j] += a[i, p] * b[p, j]\n"
        "        return c\n    tiles_m,"),
        "test_matmul_tensorized_speed", "made 0 mma calls"),
    # Issue 46: no intrinsic at all: right values, and it kept the correctness and the speed points.
    "never_calls_mma": ("matmul_tensorized", (
        "@njit\ndef matmul_tensorized(a, b, mma):\n    m, k = a.shape\n    n = b.shape[1]\n    c = np.zeros((m, n), a.dtype)\n"
        "    for i in range(m):\n        for p in range(k):\n            for j in range(n):\n                c[i, j] += a[i, p] * b[p, j]\n"
        "    return c\n"
    ), ("test_matmul_tensorized_correct", "test_matmul_tensorized_calls", "test_matmul_tensorized_speed"),
        {"test_matmul_tensorized_correct": "made 0 mma calls", "test_matmul_tensorized_calls": "not one per pair of input tiles",
         "test_matmul_tensorized_speed": "made 0 mma calls"}),
    # Issue 46: honest on the checked shapes; at the timed size a copy of the intrinsic of its own does the work on the
    # packed tiles, and the grader's is called exactly as often on zero tiles: the count is right, the operands are not.
    "own_intrinsic_when_large": ("matmul_tensorized", lambda given: OWN_MMA + given.replace(
        "            for p in range(tiles_k):\n                mma(a_tiles[i, p], b_tiles[p, j], acc)\n",
        "            for p in range(tiles_k):\n                if m * k * n >= 1 << 24:\n                    own_mma(a_tiles[i, p], b_tiles[p, j], acc)\n"
        "                    mma(zero, zero, scratch)\n                else:\n                    mma(a_tiles[i, p], b_tiles[p, j], acc)\n").replace(
        "    acc = np.zeros((16, 16), dtype=a.dtype)\n",
        "    acc = np.zeros((16, 16), dtype=a.dtype)\n    zero, scratch = np.zeros((16, 16), a.dtype), np.zeros((16, 16), a.dtype)\n"),
        "test_matmul_tensorized_speed", "not on the tiles of the inputs"),
    # No mask on the store: the edge tiles write into the buffer around C.
    "unmasked_store": ("matmul_kernel", lambda given: given.replace(", acc, mask=(rows[:, None] < M) & (cols[None, :] < N))", ", acc)"),
                       "test_matmul_kernel", "wrote outside C"),
    # Rows and columns unmasked in the loads (K still masked): what the edge tiles read past A and B lands only in
    # rows and columns the store drops, but a GPU may fault there. The grader's interpreter checks every load's addresses.
    "unmasked_loads": ("matmul_kernel", lambda given: given.replace("mask=(rows[:, None] < M) & (ks[None, :] < K)", "mask=ks[None, :] < K").replace(
        "mask=(ks[:, None] < K) & (cols[None, :] < N)", "mask=ks[:, None] < K"), ("test_matmul_kernel", "test_triton_matmul_launch"),
        "outside every tensor"),
    # cuBLAS, not Triton: it passed the GPU speed item before the launches were counted (as a def: "launched no Triton kernel").
    "cublas_lambda": ("triton_matmul", "triton_matmul = lambda a, b: (a @ b).float()\n", "test_triton_matmul_launch", "cannot be counted"),
    # The kernel launched on the first rows' tiles only, torch computing the last rows.
    "rows_in_torch": ("triton_matmul", (
        "def triton_matmul(a, b):\n    (M, K), N = a.shape, b.shape[1]\n    c = torch.empty((M, N), dtype=torch.float32, device=a.device)\n"
        "    top = M // 32 * 32\n    c[top:] = a[top:] @ b\n"
        "    matmul_kernel[(triton.cdiv(top, 32) * triton.cdiv(N, 32),)](a, b, c, top, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),\n"
        "                  c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)\n    return c\n"
    ), "test_triton_matmul_launch", "computed with torch besides its kernels"),
    # The standard answers (docs/authoring.md, section 5). The locked baselines, called: refused by the grader's gate, so
    # even their correctness items score 0 (each answer must be the cell's own loops). No baseline for matmul_flops_bytes
    # or the Triton kernel (cuBLAS, the GPU item's baseline, is cublas_lambda above).
    "standard_baseline": (("matmul_reordered", "matmul_blocked", "matmul_tensorized"), (
        "@njit\ndef matmul_reordered(a, b):\n    return matmul_ijk(a, b)\n",
        "@njit\ndef matmul_blocked(a, b, tile=128):\n    return matmul_ikj(a, b)\n",
        "@njit\ndef matmul_tensorized(a, b, mma):\n    return matmul_tensorized_strided(a, b, mma)\n",
    ), ("test_matmul_reordered_correct", "test_matmul_reordered_speed", "test_matmul_blocked_correct", "test_matmul_blocked_speed",
        "test_matmul_tensorized_correct", "test_matmul_tensorized_calls", "test_matmul_tensorized_speed"), "not only your own compiled loops"),
    # Do-nothing answers of the right types, every answer cell at once.
    "standard_do_nothing": (("matmul_flops_bytes", "matmul_reordered", "matmul_blocked", "matmul_tensorized", "matmul_kernel", "triton_matmul"), (
        "def matmul_flops_bytes(m, k, n, tile, itemsize=4):\n    return 0, 0\n",
        "@njit\ndef matmul_reordered(a, b):\n    return np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)\n",
        "@njit\ndef matmul_blocked(a, b, tile=128):\n    return np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)\n",
        "@njit\ndef matmul_tensorized(a, b, mma):\n    return np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)\n",
        "@triton.jit\ndef matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,\n"
        "                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n    pass\n",
        "def triton_matmul(a, b):\n    return torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)\n",
    ), ("test_matmul_flops_bytes", "test_matmul_reordered_correct", "test_matmul_reordered_speed", "test_matmul_blocked_correct",
        "test_matmul_blocked_speed", "test_matmul_tensorized_correct", "test_matmul_tensorized_calls", "test_matmul_tensorized_speed",
        "test_matmul_kernel", "test_triton_matmul_launch"),
        {"test_matmul_flops_bytes": "expected", "test_matmul_reordered_correct": "values differ", "test_matmul_reordered_speed": "values differ",
         "test_matmul_blocked_correct": "values differ", "test_matmul_blocked_speed": "values differ",
         "test_matmul_tensorized_correct": "made 0 mma calls", "test_matmul_tensorized_calls": "not one per pair of input tiles",
         "test_matmul_tensorized_speed": "made 0 mma calls", "test_matmul_kernel": "values differ", "test_triton_matmul_launch": "values differ"}),
    # The visible test's targets, hard-coded (the other items' targets come from fresh random inputs: nothing to hand-set).
    "standard_hand_set": ("matmul_flops_bytes", (
        "def matmul_flops_bytes(m, k, n, tile, itemsize=4):\n    if tile <= 0:\n        raise ValueError('tile')\n"
        "    known = {(64, 64, 64, 32, 4): (2 * 64 ** 3, 4 * (2 * 64 ** 3 // 32 + 64 * 64)), (4, 4, 4, 4, 8): (128, 8 * 48)}\n"
        "    return known.get((m, k, n, tile, itemsize), (2 * m * k * n, 0))\n"
    ), "test_matmul_flops_bytes", "expected"),
}
DO_NOTHING_08 = ("test_conv2d_correct", "test_conv2d_is_im2col", "test_conv2d_speed", "test_maxpool2d_correct", "test_maxpool2d_ops",
                 "test_digits_cnn", "test_fast_train_step", "test_fast_train_step_no_syncs")
VARIANTS_08 = {
    # The library's convolution: right values, and the grader's count shows its op.
    "calls_conv2d": ("conv2d_im2col", "def conv2d_im2col(x, weight, bias=None, stride=1, padding=0):\n    return F.conv2d(x, weight, bias, stride, padding)\n",
                     "test_conv2d_is_im2col", "calls aten::"),
    # im2col image by image: right, and a bigger batch needs more ops.
    "loops_over_batch": ("conv2d_im2col", (
        "def conv2d_im2col(x, weight, bias=None, stride=1, padding=0):\n    n, _, h, w = x.shape\n    k, _, r, s = weight.shape\n"
        "    (sh, sw), (ph, pw) = pair(stride), pair(padding)\n    p, q = (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1\n"
        "    images = [weight.reshape(k, -1) @ F.unfold(x[i:i + 1], (r, s), padding=(ph, pw), stride=(sh, sw))[0] for i in range(n)]\n"
        "    out = torch.stack(images).reshape(n, k, p, q)\n    return out if bias is None else out + bias.view(1, k, 1, 1)\n"
    ), "test_conv2d_is_im2col", "the count grows"),
    # The same loop over the batch, compiled (issue 46): Dynamo unrolls it and Inductor runs it as loops of its own, so the
    # profiler recorded no op at either size. Counted with torch.compile switched off, the count grows with the batch.
    "compiled_batch_loop": ("conv2d_im2col", (
        "@torch.compile\ndef conv2d_im2col(x, weight, bias=None, stride=1, padding=0):\n    n, _, h, w = x.shape\n    k, _, r, s = weight.shape\n"
        "    (sh, sw), (ph, pw) = pair(stride), pair(padding)\n    p, q = (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1\n"
        "    filters = weight.reshape(k, -1, 1)\n"
        "    images = [(filters * F.unfold(x[i:i + 1], (r, s), padding=(ph, pw), stride=(sh, sw))).sum(1) for i in range(n)]\n"
        "    out = torch.stack(images).reshape(n, k, p, q)\n    return out if bias is None else out + bias.view(1, k, 1, 1)\n"
    ), "test_conv2d_is_im2col", "the count grows"),
    # The notebook's loops: right, and no faster.
    "the_given_loops": ("conv2d_im2col",
                        "def conv2d_im2col(x, weight, bias=None, stride=1, padding=0):\n    return conv2d_loops(x, weight, bias, stride, padding)\n",
                        "test_conv2d_speed", "need 5×"),
    # A helper that keeps state between calls: the grader cannot count such a cell.
    "cached_columns": ("conv2d_im2col", lambda given: "CACHE = {}\n\n" + given.replace("    columns = F.unfold(", "    CACHE[0] = 1\n    columns = F.unfold("),
                       "test_conv2d_is_im2col", "cannot be counted by the grader"),
    # The library's pooling.
    "calls_max_pool2d": ("maxpool2d", "def maxpool2d(x, kernel_size, stride=None):\n    return F.max_pool2d(x, kernel_size, stride)\n",
                         "test_maxpool2d_ops", "calls aten::max_pool2d"),
    # Pooling row by row: right, and more ops on a bigger image.
    "pool_loops_over_rows": ("maxpool2d", (
        "def maxpool2d(x, kernel_size, stride=None):\n    (kh, kw), (sh, sw) = pair(kernel_size), pair(kernel_size if stride is None else stride)\n"
        "    rows = [x[:, :, i:i + kh].unfold(3, kw, sw).amax(dim=(2, 4)) for i in range(0, x.shape[2] - kh + 1, sh)]\n"
        "    return torch.stack(rows, dim=2)\n"
    ), "test_maxpool2d_ops", "the count grows"),
    # The library's pooling, compiled (issue 46): Inductor turns it into a loop of its own, which the profiler records as no
    # ATen op. Counted with torch.compile switched off, the call shows its pooling op.
    "compiled_max_pool": ("maxpool2d", "@torch.compile\ndef maxpool2d(x, kernel_size, stride=None):\n    return F.max_pool2d(x, kernel_size, stride)\n",
                          "test_maxpool2d_ops", "calls aten::max_pool2d"),
    # No training, and the accuracy it would like: the test counts the model's right answers itself.
    "untrained_reports_099": ("train_digits", "def train_digits(model, images, labels, epochs, batch_size, device):\n    return 0.99\n",
                              "test_digits_cnn", "right on"),
    # The same, with the course's accuracy patched where the student's code runs: the test counts in the grader.
    "patched_accuracy": ("train_digits", (
        "data.accuracy = lambda logits, labels: 0.99\ntorch.Tensor.argmax = lambda self, dim=None: torch.zeros(self.shape[0], dtype=torch.long)\n\n"
        "def train_digits(model, images, labels, epochs, batch_size, device):\n    return 0.99\n"
    ), "test_digits_cnn", "right on"),
    # A forward of its own that answers by the nearest bundled digit, its layers' outputs times 0 (so they never learn): the
    # test rebuilds the network from its layers and weights, so only the layers answer.
    "forward_of_its_own": ("digits_cnn", (
        "class DigitsCNN(nn.Sequential):\n    def __init__(self):\n        super().__init__(nn.Conv2d(1, 8, 3, padding=1), "
        "nn.Conv2d(8, 8, 3, padding=1), nn.Flatten(), nn.Linear(512, 10))\n\n"
        "    def forward(self, x):\n        images, labels = data.load_digits('train')\n"
        "        nearest = torch.cdist(x.flatten(1), images.flatten(1)).argmin(1)\n"
        "        return 0 * super().forward(x) + 10 * F.one_hot(labels[nearest], 10)\n"
    ), "test_digits_cnn", "right on"),
    # Trained on the bundled test split (issue 45: reached 98.6% when the test split was the graded one): the test holds
    # out digits of its own choosing and renames the labels, so the bundled labels answer another question.
    "trains_on_the_test_split": ("train_digits", lambda given: given.replace(
        "    images, labels = images.to(device), labels.to(device)\n", "    images, labels = data.load_digits('test', device=device)\n"),
        "test_digits_cnn", "right on"),
    # Logistic regression behind a token 1 x 1 convolution, trained honestly: 95.0-97.5 % on five drawn tasks, so the
    # accuracy passes it; the rebuilt network must hold two convolutions of 3 x 3 or more.
    "logistic_regression": ("digits_cnn", (
        "class DigitsCNN(nn.Sequential):\n    def __init__(self):\n        super().__init__(nn.Conv2d(1, 1, 1), nn.Flatten(), nn.Linear(64, 10))\n"
    ), "test_digits_cnn", "at least two nn.Conv2d layers"),
    # Nearest neighbours stored where the rebuilt layer has no room: an extra buffer on a Conv2d.
    "templates_in_a_buffer": ("train_digits", lambda given: given.replace(
        "    images, labels = images.to(device), labels.to(device)\n",
        "    model[0].register_buffer('templates', images.clone())\n    images, labels = images.to(device), labels.to(device)\n"),
        "test_digits_cnn", "Unexpected key(s)"),
    # Right, and too slow: the budget is the grader's, on its clock. The sleep outlasts the budget however busy the
    # machine is (the clock stretches a wall second by at most clock.MAX_SLOWDOWN): a 30 s sleep counted as under
    # 10 quiet-machine seconds, and passed, beside a second full test run.
    "trains_too_slowly": ("train_digits", lambda given: "import time\n\n" + given.replace(
        "    images, labels = images.to(device), labels.to(device)\n", "    time.sleep(3600)\n    images, labels = images.to(device), labels.to(device)\n"),
        "test_digits_cnn", "ran past its budget"),
    # Gradients computed, parameters never updated.
    "no_optimizer_step": ("fast_train_step", lambda given: given.replace("    SCALER.step(optimizer)\n", ""),
                          ("test_fast_train_step", "test_fast_train_step_no_syncs"), "moved the parameters"),
    # Gradients never zeroed (issue 45: passed the one-step check, whose step starts from empty gradients): from the second
    # step on each step adds the earlier gradients again.
    "no_zero_grad": ("fast_train_step", lambda given: given.replace("    optimizer.zero_grad(set_to_none=True)\n", ""),
                     ("test_fast_train_step", "test_fast_train_step_no_syncs"), "step 2 of fast_train_step"),
    # The loss read on the host each step (issue 45: nothing counted syncs): right steps, a sync each.
    "returns_item": ("fast_train_step", lambda given: given.replace("    return loss.detach()", "    return loss.item()"),
                     "test_fast_train_step_no_syncs", "host read(s) in 4 steps"),
    # No mixed precision, just no host sync: correct steps (mixed precision pays on a GPU, where it is timed).
    "float32_without_sync": ("fast_train_step", (
        "def fast_train_step(model, optimizer, x, y):\n    optimizer.zero_grad(set_to_none=True)\n    loss = F.cross_entropy(model(x), y)\n"
        "    loss.backward()\n    optimizer.step()\n    return loss.detach()\n"
    ), ("test_fast_train_step", "test_fast_train_step_no_syncs"), None),
    # docs/authoring.md §5's standard answers. The locked baselines: conv2d_loops for conv2d_im2col, plain_train_step for
    # fast_train_step (right values and steps: those items pass); maxpool2d and the digits CNN have none.
    "standard_baseline": (("conv2d_im2col", "fast_train_step"), (
        "def conv2d_im2col(x, weight, bias=None, stride=1, padding=0):\n    return conv2d_loops(x, weight, bias, stride, padding)\n",
        "def fast_train_step(model, optimizer, x, y):\n    return plain_train_step(model, optimizer, x, y)\n",
    ), ("test_conv2d_is_im2col", "test_conv2d_speed", "test_fast_train_step_no_syncs"),
        {"test_conv2d_is_im2col": "cannot be counted by the grader", "test_conv2d_speed": "need 5×", "test_fast_train_step_no_syncs": "host read(s)"}),
    # Answers of the right type that do nothing: zeros, an untrained CNN, a step that only computes the loss.
    "standard_do_nothing": (("conv2d_im2col", "maxpool2d", "train_digits", "fast_train_step"), (
        "def conv2d_im2col(x, weight, bias=None, stride=1, padding=0):\n    n, _, h, w = x.shape\n    k, _, r, s = weight.shape\n"
        "    (sh, sw), (ph, pw) = pair(stride), pair(padding)\n"
        "    return torch.zeros(n, k, (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1, dtype=x.dtype, device=x.device)\n",
        "def maxpool2d(x, kernel_size, stride=None):\n    (kh, kw), (sh, sw) = pair(kernel_size), pair(kernel_size if stride is None else stride)\n"
        "    return torch.zeros(*x.shape[:2], (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1, dtype=x.dtype, device=x.device)\n",
        "def train_digits(model, images, labels, epochs, batch_size, device):\n    model.to(device)\n",
        "def fast_train_step(model, optimizer, x, y):\n    return F.cross_entropy(model(x), y).detach()\n",
    ), DO_NOTHING_08, {**dict.fromkeys(DO_NOTHING_08[:5], "differ"), "test_digits_cnn": "right on",
                       "test_fast_train_step": "moved the parameters", "test_fast_train_step_no_syncs": "moved the parameters"}),
    # Answers that know the visible targets (issue 45): nearest neighbours over the training digits as a Conv2d whose filters
    # are the images (98.6% on the bundled split), and a step that steps on its first call only (the one the old check
    # compared) and then returns a falling loss. conv2d_im2col and maxpool2d have no target to know: their inputs are fresh.
    "standard_hand_set": (("digits_cnn", "train_digits", "fast_train_step"), (
        "class DigitsCNN(nn.Sequential):\n    def __init__(self):\n"
        "        super().__init__(nn.Conv2d(1, 1437, 8), nn.Flatten(), nn.Linear(1437, 10, bias=False))\n",
        "def train_digits(model, images, labels, epochs, batch_size, device):\n    with torch.no_grad():\n"
        "        model[0].weight.copy_(images)\n        model[0].bias.copy_(-0.5 * images.pow(2).sum((1, 2, 3)))\n"
        "        model[2].weight.copy_(F.one_hot(labels, 10).T.float())\n",
        "CALLS = []\n\n\ndef fast_train_step(model, optimizer, x, y):\n    CALLS.append(len(CALLS))\n    if len(CALLS) > 1:\n"
        "        return torch.tensor(3.0 - 0.01 * len(CALLS))\n    optimizer.zero_grad()\n    loss = F.cross_entropy(model(x), y)\n"
        "    loss.backward()\n    optimizer.step()\n    return loss.detach()\n",
    ), ("test_digits_cnn", "test_fast_train_step", "test_fast_train_step_no_syncs"),
        {"test_digits_cnn": "at most 10,000 allowed", **dict.fromkeys(("test_fast_train_step", "test_fast_train_step_no_syncs"),
                                                                       "of fast_train_step (a fresh batch each)")}),
}
FAST_LSTM_ITEMS = ("test_lstm_forward_fast", "test_lstm_fast_speed", "test_lstm_fast_vs_library", "test_bilstm_forward")  # bilstm calls it
FORWARD_ITEMS = ("test_lstm_forward", "test_lstm_forward_gradients")
SPEED_ITEMS_09 = ("test_lstm_fast_speed", "test_lstm_fast_vs_library")
ANSWERS_09 = ("lstm_cell", "lstm_forward", "lstm_forward_fast", "bilstm_forward")
ALL_ITEMS_09 = ("test_lstm_cell", "test_lstm_cell_hidden", *FORWARD_ITEMS, *FAST_LSTM_ITEMS)
LSTM_SIGNATURE = "def {name}(x, h0, c0, w_ih, w_hh, b_ih, b_hh):\n"
DO_NOTHING_LSTM = "    return x.new_zeros(x.shape[0], x.shape[1], h0.shape[-1]), (h0, c0)\n"


def hand_set_lstm_cell() -> str:
    """An lstm_cell cell that answers test_lstm_cell's three visible draws from literals: nn.LSTMCell's values on the
    inputs that torch.manual_seed(0) gives there (the setup's seed before issue 45), zeros on any other input."""
    import torch

    notebook = nbformat.read(source("09_lstm"), as_version=4)
    namespace = {}
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in ("imports", "cell_setup"):
            exec(cell.source, namespace)  # noqa: S102 - the instructor's setup cells
    torch.manual_seed(0)
    known = []
    for shape in [(4, 3, 5), (4, 3, 5), (2, 8, 6)]:  # the visible test's draws, in its order
        args = namespace["cell_inputs"](*shape)
        h_next, c_next = namespace["torch_lstm_cell"](*namespace["exact"](args))  # as the test computes them (its RNG use too)
        known.append((float(args[0][0, 0]), tuple(h_next.flatten().tolist()), tuple(c_next.flatten().tolist())))
    return (f"KNOWN = {tuple(known)!r}\n\n\ndef lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):\n    for key, h_next, c_next in KNOWN:\n"
            "        if abs(float(x[0, 0]) - key) < 1e-6:\n"
            "            return torch.tensor(h_next, dtype=x.dtype).view(h.shape), torch.tensor(c_next, dtype=x.dtype).view(c.shape)\n"
            "    return torch.zeros_like(h), torch.zeros_like(c)\n")


VARIANTS_09 = {
    # The library's LSTM op, from a cell the gate lets through: the grader's count shows it, in every item that uses it.
    "calls_torch_lstm": ("lstm_forward_fast", LSTM_SIGNATURE.format(name="lstm_forward_fast") + (
        "    output, h_n, c_n = torch.lstm(x, (h0, c0), (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, False, False, False)\n"
        "    return output, (h_n, c_n)\n"), FAST_LSTM_ITEMS, "calls aten::lstm"),
    # The same op through torch's private module: the gate refuses the cell before anything of it runs.
    "calls_VF_lstm": ("lstm_forward_fast", LSTM_SIGNATURE.format(name="lstm_forward_fast") + (
        "    output, h_n, c_n = torch._VF.lstm(x, (h0, c0), (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, False, False, False)\n"
        "    return output, (h_n, c_n)\n"), FAST_LSTM_ITEMS, "cannot be counted by the grader"),
    # nn.LSTM itself, its weights copied in.
    "nn_LSTM_module": ("lstm_forward", "from torch import nn\n\n" + LSTM_SIGNATURE.format(name="lstm_forward") + (
        "    layer = nn.LSTM(x.shape[-1], h0.shape[-1]).to(x.dtype)\n    layer.weight_ih_l0.data = w_ih\n    return layer(x, (h0, c0))\n"),
        FORWARD_ITEMS, "cannot be counted by the grader"),
    # The library's one-step op: right values; lstm_forward calls it too.
    "lstm_cell_op": ("lstm_cell", "def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):\n    return torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)\n",
                     ("test_lstm_cell", "test_lstm_cell_hidden", *FORWARD_ITEMS), "calls aten::lstm_cell"),
    # The notebook's baseline, handed the work: a whole LSTM that the answers may not call.
    "delegates_to_naive": ("lstm_forward", LSTM_SIGNATURE.format(name="lstm_forward") + "    return lstm_forward_naive(x, h0, c0, w_ih, w_hh, b_ih, b_hh)\n",
                           FORWARD_ITEMS, "`lstm_forward_naive` is not defined in this cell or the setup cells, or is not allowed here"),
    # Right on the visible shapes only: squeeze(0) drops the time axis of a one-step sequence (a hidden test).
    "squeezed_single_step": ("lstm_forward", lambda given: given.replace("return torch.stack(outputs), (", "return torch.stack(outputs).squeeze(0), ("),
                             "test_lstm_forward", "expected shape (1, 4, 5), got (4, 5)"),
    # The state detached every step (truncated backpropagation by accident): the values are right, the gradients not.
    "detached_state": ("lstm_forward",
                       lambda given: given.replace("        outputs.append(h)\n", "        outputs.append(h)\n        h, c = h.detach(), c.detach()\n"),
                       "test_lstm_forward_gradients", "the gradient with respect to"),
    # The projection hoisted, then the recurrence run for one sequence of the batch at a time: right, eight times the ops,
    # and far from the library's speed too.
    "loops_over_batch": ("lstm_forward_fast", LSTM_SIGNATURE.format(name="lstm_forward_fast") + (
        "    steps, batch, _ = x.shape\n"
        "    gates_x = torch.addmm(b_ih + b_hh, x.reshape(steps * batch, -1), w_ih.T).view(steps, batch, -1)\n"
        "    outputs, h_n, c_n = [], [], []\n    for n in range(batch):\n        h, c = h0[0, n:n + 1], c0[0, n:n + 1]\n        row = []\n"
        "        for t in range(steps):\n            i, f, g, o = torch.addmm(gates_x[t, n:n + 1], h, w_hh.T).chunk(4, dim=1)\n"
        "            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)\n            h = torch.sigmoid(o) * torch.tanh(c)\n"
        "            row.append(h)\n        outputs.append(torch.stack(row))\n        h_n.append(h)\n        c_n.append(c)\n"
        "    return torch.cat(outputs, dim=1), (torch.cat(h_n).unsqueeze(0), torch.cat(c_n).unsqueeze(0))\n"),
        SPEED_ITEMS_09, "need"),
    # A later line rebinds the graded name to the library: the grader takes the last definition, which the gate refuses.
    "rebound_to_the_library": ("lstm_forward_fast", lambda given: given + "\n\nlstm_forward_fast = lambda *args: torch_lstm(*args)\n",
                               FAST_LSTM_ITEMS, "cannot be counted by the grader"),
    # Correct: a cell per gate's two products (no speed item there), and a bidirectional LSTM built on lstm_forward.
    "cell_per_gate": ("lstm_cell", (
        "def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):\n    n = h.shape[1]\n"
        "    rows = [slice(k * n, (k + 1) * n) for k in range(4)]\n"
        "    i, f, g, o = (x @ w_ih[r].T + b_ih[r] + h @ w_hh[r].T + b_hh[r] for r in rows)\n"
        "    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)\n    return torch.sigmoid(o) * torch.tanh(c), c\n"),
        ("test_lstm_cell", "test_lstm_cell_hidden", *FORWARD_ITEMS), None),
    "bilstm_on_lstm_forward": ("bilstm_forward", lambda given: given.replace("lstm_forward_fast(", "lstm_forward("), "test_bilstm_forward", None),
    # Issue 45: the "fast" LSTM is question 2's, the input projection left in the loop (one GEMM for the four gates alone is
    # 1.7× the naive one): the grader counts the ops that multiply the input by w_ih, 16 for 16 steps and 64 for 64.
    "not_hoisted": ("lstm_forward_fast", LSTM_SIGNATURE.format(name="lstm_forward_fast") + "    return lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh)\n",
                    SPEED_ITEMS_09, "hoist the input projection"),
    # One GEMM a step of [x_t, h] with [w_ih, w_hh]: as few ops a step as the hoisted loop, the input still projected step by step.
    "concatenated_gemm": ("lstm_forward_fast", LSTM_SIGNATURE.format(name="lstm_forward_fast") + (
        "    w = torch.cat([w_ih, w_hh], dim=1).T\n    bias = b_ih + b_hh\n    h, c = h0[0], c0[0]\n    outputs = []\n    for x_t in x:\n"
        "        i, f, g, o = torch.addmm(bias, torch.cat([x_t, h], dim=1), w).chunk(4, dim=1)\n"
        "        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)\n        h = torch.sigmoid(o) * torch.tanh(c)\n"
        "        outputs.append(h)\n    return torch.stack(outputs), (h.unsqueeze(0), c.unsqueeze(0))\n"),
        SPEED_ITEMS_09, "hoist the input projection"),
    # The input's product written as a broadcast multiply and a sum each step, no GEMM op for a list of names to find.
    "broadcast_input_product": ("lstm_forward_fast", lambda given: given.replace(
        "torch.addmm(gates_x[t], h, w_hh_t)", "torch.addmm((x[t].unsqueeze(1) * w_ih).sum(2) + b_ih + b_hh, h, w_hh_t)"),
        SPEED_ITEMS_09, "hoist the input projection"),
    # Hoisted only where the count looks (a short sequence), step by step on the timed length: the count is taken on both.
    "hoisted_when_short": ("lstm_forward_fast", lambda given: given.replace("    steps, batch, _ = x.shape\n", (
        "    steps, batch, _ = x.shape\n    if steps > 16:\n        return lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh)\n")),
        SPEED_ITEMS_09, "hoist the input projection"),
    # The input mixed with w_ih once in a cheap op, then projected step by step: what that op returns is not the projection,
    # so it counts as computed from both, and every op that reads it again is counted.
    "laundered_input": ("lstm_forward_fast", LSTM_SIGNATURE.format(name="lstm_forward_fast") + (
        "    x = x + 0 * w_ih.sum()\n    return lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh)\n"), SPEED_ITEMS_09, "hoist the input projection"),
    # The whole projection computed before the loop for show, and the loop projecting each step anyway.
    "decoy_projection": ("lstm_forward_fast", LSTM_SIGNATURE.format(name="lstm_forward_fast") + (
        "    unused = x @ w_ih.T\n    return lstm_forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh)\n"), SPEED_ITEMS_09, "hoist the input projection"),
    # Issue 45: torch.compile of a call of the library's LSTM: compiled in float64 it runs as addmm and pointwise ops, so the
    # gradients item (float64 only) saw no lstm op. The grader counts with torch.compile switched off: the call shows.
    "compiled_torch_lstm": ("lstm_forward", "@torch.compile\n" + LSTM_SIGNATURE.format(name="lstm_forward") + (
        "    output, h_n, c_n = torch.lstm(x, (h0, c0), (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, False, False, False)\n"
        "    return output, (h_n, c_n)\n"), FORWARD_ITEMS, "calls aten::lstm"),
    # The library's one-step op, compiled: decomposed in every dtype, so both cell items (and the layer's) saw none.
    "compiled_lstm_cell_op": ("lstm_cell", "@torch.compile\ndef lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):\n"
                              "    return torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)\n",
                              ("test_lstm_cell", "test_lstm_cell_hidden", *FORWARD_ITEMS), "calls aten::lstm_cell"),
    # The standard answers (issue 45). Locked baseline: only lstm_forward_fast has one (lstm_forward_naive, written out:
    # the gate refuses a call of it); it answers the values item and bilstm_forward's, and neither speed item.
    "standard_baseline": ("lstm_forward_fast", LSTM_SIGNATURE.format(name="lstm_forward_fast") + (
        "    hidden = h0.shape[-1]\n    w_i, w_h, b_i, b_h = w_ih.split(hidden), w_hh.split(hidden), b_ih.split(hidden), b_hh.split(hidden)\n"
        "    h, c = h0[0], c0[0]\n    outputs = []\n    for x_t in x:\n"
        "        pre = [x_t @ w_i[k].T + b_i[k] + h @ w_h[k].T + b_h[k] for k in range(4)]\n"
        "        c = torch.sigmoid(pre[1]) * c + torch.sigmoid(pre[0]) * torch.tanh(pre[2])\n        h = torch.sigmoid(pre[3]) * torch.tanh(c)\n"
        "        outputs.append(h)\n    return torch.stack(outputs), (h.unsqueeze(0), c.unsqueeze(0))\n"),
        SPEED_ITEMS_09, "hoist the input projection"),
    # Do nothing: every answer returns zeros of the right shapes (the states unchanged for h_n and c_n).
    "standard_do_nothing": (ANSWERS_09, (
        "def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):\n    return torch.zeros_like(h), torch.zeros_like(c)\n",
        LSTM_SIGNATURE.format(name="lstm_forward") + DO_NOTHING_LSTM, LSTM_SIGNATURE.format(name="lstm_forward_fast") + DO_NOTHING_LSTM,
        "def bilstm_forward(x, h0, c0, params_fwd, params_bwd):\n"
        "    return x.new_zeros(x.shape[0], x.shape[1], 2 * h0.shape[-1]), (h0, c0)\n"),
        ALL_ITEMS_09, {**dict.fromkeys(ALL_ITEMS_09, "values differ"), "test_lstm_forward_gradients": "does not depend on x"}),
    # Hand-set: lstm_cell answers the visible test's three draws from literals (nn.LSTMCell's values on the inputs that
    # torch.manual_seed(0) drew there), zeros otherwise. It kept test_lstm_cell while the setup seeded 0; now torch.seed().
    "standard_hand_set": ("lstm_cell", lambda given: hand_set_lstm_cell(),
                          ("test_lstm_cell", "test_lstm_cell_hidden", *FORWARD_ITEMS),
                          {"test_lstm_cell": "values differ", "test_lstm_cell_hidden": "values differ",
                           "test_lstm_forward": "values differ", "test_lstm_forward_gradients": "does not require grad"}),
}
STEP_ITEMS = ("test_train_step", "test_train_step_no_syncs")
# A ring_generator() whose weights put every sample on one of the centres given (the sign of z[0], z[1], z[2] picks one of
# 8 corners, steep ReLUs make each corner's indicator, the last layer maps indicators to centres): no training at all.
HAND_SET_RING = """def hand_set_generator(centers, std=0.0):
    G = ring_generator()
    with torch.no_grad():
        for layer in (G[0], G[2], G[4]):
            layer.weight.zero_()
            layer.bias.zero_()
        for i in range(3):  # units 4i..4i+3: relu(cz), relu(cz - 1), relu(-cz), relu(-cz - 1) with a steep c
            for j, (sign, shift) in enumerate([(1, 0), (1, -1), (-1, 0), (-1, -1)]):
                G[0].weight[4 * i + j, i] = 1000.0 * sign
                G[0].bias[4 * i + j] = shift
        for k in range(len(centers)):  # indicator of corner k: the three clamped signs summed, minus 2
            for i in range(3):
                bit = (k >> i) & 1
                G[2].weight[k, 4 * i + (0 if bit else 2)] = 1.0
                G[2].weight[k, 4 * i + (1 if bit else 3)] = -1.0
            G[2].bias[k] = -2.0
            G[4].weight[:, k] = centers[k]
        for axis in range(2):  # the noise: z[3] and z[4] passed through (relu(z) - relu(-z)), times std
            for j, sign in enumerate((1.0, -1.0)):
                G[0].weight[12 + 2 * axis + j, 3 + axis] = sign
                G[2].weight[16 + 2 * axis + j, 12 + 2 * axis + j] = 1.0
                G[4].weight[axis, 16 + 2 * axis + j] = sign * std
    return G
"""
VARIANTS_10 = {
    # The seed's Sigmoid then BCE: right for moderate logits; far out the sigmoid rounds to 0 or 1 and BCE clamps its log at -100.
    "sigmoid_then_bce": ("gan_losses", (
        "def gan_losses(d_real_logits, d_fake_logits):\n    real, fake = torch.sigmoid(d_real_logits), torch.sigmoid(d_fake_logits)\n"
        "    d_loss = F.binary_cross_entropy(real, torch.ones_like(real)) + F.binary_cross_entropy(fake, torch.zeros_like(fake))\n"
        "    return d_loss, F.binary_cross_entropy(fake, torch.ones_like(fake))\n"
    ), "test_gan_losses_large_logits", "d_loss"),
    # .item() hidden one call away, in a helper of the same cell, the values put back into tensors: the grader's counter sees the reads.
    "item_behind_a_helper": ("train_step", lambda given: given.replace(
        "    return d_loss.detach(), g_loss.detach()",
        "    return torch.tensor(host(d_loss), dtype=d_loss.dtype), torch.tensor(host(g_loss), dtype=g_loss.dtype)",
    ) + "\n\ndef host(value):\n    return value.item()\n", "test_train_step_no_syncs", "item() at"),
    # The loss's bytes read from its storage: no .item(), still a copy to the host.
    "reads_the_storage": ("train_step", lambda given: given.replace("    opt_d.step()\n", "    opt_d.step()\n    first_byte = d_loss.untyped_storage()[0]\n"),
                          "test_train_step_no_syncs", "untyped_storage()"),
    # Reads only in float32, as training runs (the float64 step that checks the parameters sees none): the float32 count catches it.
    "reads_only_in_float32": ("train_step", lambda given: given.replace(
        "    opt_d.step()\n", "    opt_d.step()\n    if real.dtype == torch.float32:\n        d_loss = d_loss * (1 + 0 * d_loss.item())\n"),
        "test_train_step_no_syncs", "in float32"),
    # A Python `if` on a loss (skip nothing, but ask): a read each step.
    "if_on_the_loss": ("train_step", lambda given: given.replace("    opt_d.step()\n", "    opt_d.step()\n    if d_loss > 100:\n        d_loss = d_loss * 1\n"),
                       "test_train_step_no_syncs", "bool()"),
    # Logging each step by printing it.
    "prints_the_losses": ("train_step", lambda given: given.replace("    opt_g.step()\n", "    opt_g.step()\n    print(d_loss, g_loss)\n"),
                          "test_train_step_no_syncs", "print()"),
    # The losses returned as floats, as the seed does.
    "returns_floats": ("train_step", lambda given: given.replace("    return d_loss.detach(), g_loss.detach()", "    return d_loss.item(), g_loss.item()"),
                       STEP_ITEMS, "host read"),
    # The saturating generator loss, log(1 - D(G(z))) minimised: another step.
    "saturating_generator_loss": ("train_step", lambda given: given.replace(
        "    _, g_loss = gan_losses(D(real[:1]), D(fake))",
        "    g_loss = -F.binary_cross_entropy_with_logits(D(fake), torch.zeros(len(fake), 1, dtype=fake.dtype))"),
        STEP_ITEMS, "g_loss"),
    # The seed's fresh generator forward for the G step (same z): the same step.
    "recomputes_the_fake": ("train_step", lambda given: given.replace("D(fake))  # D updated", "D(G(z)))  # D updated"), STEP_ITEMS, None),
    # A "generator" that samples the true ring, no training: the grader samples its own ring_generator(), and these weights do not fit one.
    "samples_the_true_ring": ("train_ring", (
        "class TrueRing(nn.Module):\n    def __init__(self, ring):\n        super().__init__()\n        self.ring = ring\n\n"
        "    def forward(self, z):\n        return gan.sample_ring(len(z), **self.ring)\n\n\n"
        "def train_ring(steps, seed, ring):\n    return TrueRing(ring), torch.zeros(steps, 2)\n"
    ), "test_train_ring", "is not a ring_generator()"),
    # The same, behind a real ring_generator() whose forward is replaced: the grader's copy has only its untrained weights.
    "replaced_forward": ("train_ring", (
        "def train_ring(steps, seed, ring):\n    G = ring_generator()\n    G.forward = lambda z: gan.sample_ring(len(z), **ring)\n"
        "    return G, torch.zeros(steps, 2)\n"
    ), "test_train_ring", "covers 0 of the ring's"),
    # Too little training, whatever steps asks for: half-formed modes.
    "trains_a_hundred_steps": ("train_ring", lambda given: given.replace("    for step in range(steps):\n", "    for step in range(min(steps, 100)):\n"),
                               "test_train_ring", "needed"),
    # Issue 45: a generator with hand-set weights, no training, a zero history, every sample on a centre of the ring it is given:
    # every mode covered, 100% within reach (it scored 4/4 on the fixed ring before); now the spread of its modes is 0.
    "hand_set_on_the_given_ring": ("train_ring", HAND_SET_RING + "\n\ndef train_ring(steps, seed, ring):\n"
                                   "    centers = gan.ring_centers(ring['modes'], ring['radius'], center=ring['center'])\n"
                                   "    return hand_set_generator(centers), torch.zeros(steps, 2)\n",
                                   "test_train_ring", "the spread of G's modes"),
    # The same with each mode's Gaussian noise hand-set too (z[3], z[4] times the ring's std): the ring's own distribution, but
    # from the first step on; a GAN after a few steps is nowhere near the ring, so the early check catches it.
    "hand_set_mixture": ("train_ring", HAND_SET_RING + "\n\ndef train_ring(steps, seed, ring):\n"
                         "    centers = gan.ring_centers(ring['modes'], ring['radius'], center=ring['center'])\n"
                         "    return hand_set_generator(centers, ring['std']), torch.zeros(steps, 2)\n",
                         "test_train_ring", "already follows the ring"),
    # Issue 45: no host read in the step's own lines, but library ops that synchronise: torch.where(mask) is a nonzero, F.one_hot
    # without num_classes reads the largest class, a copy into a buffer made without a device goes to the host. Each gained
    # the 2 points before (the counter listed Python methods only); the dispatcher sees them now.
    "where_of_a_mask": ("train_step", lambda given: given.replace("    opt_d.step()\n", "    opt_d.step()\n    big = torch.where(fake > 1e9)\n"),
                        "test_train_step_no_syncs", "nonzero (its size depends on the values)"),
    "one_hot_without_num_classes": ("train_step", lambda given: given.replace(
        "    opt_d.step()\n", "    opt_d.step()\n    classes = F.one_hot(torch.zeros(1, dtype=torch.long, device=real.device))\n"),
        "test_train_step_no_syncs", "a value read on the host"),
    "copies_into_a_host_buffer": ("train_step", lambda given: given.replace(
        "    opt_d.step()\n", "    opt_d.step()\n    log = torch.zeros(2, dtype=real.dtype)\n    log[0].copy_(d_loss.detach())\n"),
        "test_train_step_no_syncs", "a copy to the host (copy_)"),
    # Issue 46: the tests' references called by name (full marks before): their cells are grader-side, so the names do not
    # exist where the answer runs, and the message says why.
    "calls_expected_coverage": ("mode_coverage", "def mode_coverage(samples, centers, radius):\n    return expected_coverage(samples, centers, radius)\n",
                                "test_mode_coverage", "a grader-side setup cell defines it"),
    "calls_expected_losses": ("gan_losses", "def gan_losses(real, fake):\n    return tuple(loss.to(real.dtype) for loss in expected_losses(real, fake))\n",
                              ("test_gan_losses", "test_gan_losses_large_logits"), "a grader-side setup cell defines it"),
    # The standard answers (docs/authoring.md §5). The locked baseline: seed_train_step's body as train_step (floats, two .item()s).
    # train_ring has no locked baseline; fast_train_loop's (seed_train_loop) is graded on a GPU only (its CPU check, the float32
    # trajectory and no host reads, runs in plain nbgrader and the notebook, where the seed loop's .item()s fail it).
    "standard_baseline": ("train_step", (
        "def train_step(G, D, opt_g, opt_d, real, z):\n    fake = G(z)\n    opt_d.zero_grad()\n"
        "    d_loss = F.binary_cross_entropy(torch.sigmoid(D(real)), torch.ones(len(real), 1, dtype=real.dtype, device=real.device)) \\\n"
        "        + F.binary_cross_entropy(torch.sigmoid(D(fake.detach())), torch.zeros(len(fake), 1, dtype=real.dtype, device=real.device))\n"
        "    d_loss.backward()\n    opt_d.step()\n    opt_g.zero_grad()\n"
        "    g_loss = F.binary_cross_entropy(torch.sigmoid(D(fake)), torch.ones(len(fake), 1, dtype=real.dtype, device=real.device))\n"
        "    g_loss.backward()\n    opt_g.step()\n    return d_loss.item(), g_loss.item()\n"
    ), STEP_ITEMS, {"test_train_step": "a tensor on the device", "test_train_step_no_syncs": "host read"}),
    # Do nothing: a step that returns zero losses and trains nothing; an untrained generator and a zero history.
    "standard_do_nothing": (("train_step", "train_ring"), (
        "def train_step(G, D, opt_g, opt_d, real, z):\n    return torch.zeros((), dtype=real.dtype, device=real.device), "
        "torch.zeros((), dtype=real.dtype, device=real.device)\n",
        "def train_ring(steps, seed, ring):\n    torch.manual_seed(seed)\n    return ring_generator(), torch.zeros(steps, 2)\n",
    ), (*STEP_ITEMS, "test_train_ring"), {"test_train_step": "the seed's step gives", "test_train_step_no_syncs": "the seed's step gives",
                                           "test_train_ring": "G covers"}),
    # Hand-set: the generator built for the visible test's ring (draw_ring(0)), ignoring the ring it is given; and, for the
    # visible sizes of mode_coverage, its expected answer typed in. The grader trains on a ring of its own.
    "standard_hand_set": (("mode_coverage", "train_ring"), (
        "def mode_coverage(samples, centers, radius):\n    return (3, 1.0) if len(samples) == 500 else (1, 2 / 3)\n",
        HAND_SET_RING + "\n\ndef train_ring(steps, seed, ring):\n    visible = draw_ring(0)\n"
        "    return hand_set_generator(gan.ring_centers(visible['modes'], visible['radius'], center=visible['center'])), torch.zeros(steps, 2)\n",
    ), ("test_mode_coverage", "test_train_ring"), {"test_mode_coverage": "expected", "test_train_ring": "G covers"}),
}
# Each module's answers: (answer cell, code or an edit of the reference's, the items it feeds, reason).
# A wrong answer (a reason) must fail exactly those items, each message holding the reason (a dict gives
# each item its own); a correct one (reason None) must pass them all. An answer that replaces several cells
# at once (the standard answers of docs/authoring.md §5: the locked baseline, a do-nothing answer, a hand-set
# one) gives a tuple of cells and a tuple of codes, one per cell.
FLASH_SIGNATURE = "def flash_attention_forward(q, k, v, block=64, causal=False):\n"
FLASH_ITEMS = ("test_flash_correct", "test_flash_memory", "test_flash_causal_speed")
# The tiled loop with its running statistics, minus the causal part: {tiles} picks the key blocks, {mask} masks a tile.
TILED = FLASH_SIGNATURE + (
    "    n, d = q.shape\n    out = np.empty_like(q)\n"
    "    for start in range(0, n, block):\n        stop = min(start + block, n)\n        qi = q[start:stop] / np.float32(math.sqrt(d))\n"
    "        m = np.full(stop - start, -np.inf, dtype=np.float32)\n        l = np.zeros(stop - start, dtype=np.float32)\n"
    "        acc = np.zeros((stop - start, d), dtype=np.float32)\n"
    "        for key in range({tiles}):\n            s = qi @ k[key:key + block].T\n"
    "            if causal:\n                s = np.where(np.arange(start, stop)[:, np.newaxis] >= np.arange(key, min(key + block, n)), s, -np.inf)\n"
    "            m_new = np.maximum(m, s.max(axis=1))\n            p = np.exp(s - m_new[:, np.newaxis])\n"
    "            rescale = np.exp(m - m_new)\n            l = l * rescale + p.sum(axis=1)\n"
    "            acc = acc * rescale[:, np.newaxis] + p @ v[key:key + block]\n            m = m_new\n"
    "        out[start:stop] = acc / l[:, np.newaxis]\n    return out\n")
DECODE_SIGNATURE = "def kv_cache_decode(q, k_new, v_new, cache_k, cache_v, t):\n"
DECODE_STORE = "    cache_k[:, :, t], cache_v[:, :, t] = k_new[:, :, 0], v_new[:, :, 0]\n"
GROUP = "    group = q.shape[1] // cache_k.shape[1]\n"
# The cost model's cell holds both functions; {bytes} and {batch} are their bodies.
COST_MODEL = ("def decode_step_bytes(model, batch, context, weight_bytes=2, cache_bytes=2):\n{bytes}\n\n"
              "def max_batch(model, context, memory_bytes, weight_bytes=2, cache_bytes=2):\n{batch}")
RIGHT_BYTES = ("    per_token = 2 * model.layers * model.kv_heads * model.head_dim * cache_bytes\n"
               "    return model.params * weight_bytes + batch * context * per_token\n")
PER_SEQUENCE = "    per_sequence = context * 2 * model.layers * model.kv_heads * model.head_dim * cache_bytes\n"

VARIANTS_11 = {
    # The locked baseline as the answer: its cell calls a setup function, which the NumPy gate refuses.
    "standard_baseline": ("flash_attention_forward", FLASH_SIGNATURE + "    return attention_three_steps_numpy(q, k, v, causal)\n",
                          FLASH_ITEMS, "not NumPy code alone"),
    "standard_do_nothing": ("flash_attention_forward", FLASH_SIGNATURE + "    return np.zeros_like(q)\n", FLASH_ITEMS, "values differ"),
    # Right for a first block (the visible test's first check), blind to the state it is given.
    "standard_hand_set": ("online_softmax_update", (
        "def online_softmax_update(m, l, scores):\n    top = scores.max(dim=1).values\n"
        "    return top, torch.exp(scores - top[:, None]).sum(dim=1)\n"), "test_online_softmax", "values differ"),
    # The fused op: the values are right, the three steps are not there.
    "calls_sdpa": ("attention_naive", "def attention_naive(q, k, v, causal=False):\n    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n",
                   ("test_attention_naive", "test_attention_naive_causal"), "write the three steps yourself"),
    "no_causal_mask": ("attention_naive", ("def attention_naive(q, k, v, causal=False):\n"
                                           "    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v\n"),
                       "test_attention_naive_causal", "values differ"),
    # Keeps every block it was handed and recomputes from them: right on one stream from an empty state, wrong from a state
    # the grader computed on scores it never handed over, and on two streams handed over in turn.
    "keeps_the_blocks": ("online_softmax_update", (
        "SEEN = []\n\n\ndef online_softmax_update(m, l, scores):\n    SEEN.append(scores)\n    row = torch.cat(SEEN, dim=1)\n"
        "    top = row.max(dim=1).values\n    return top, torch.exp(row - top[:, None]).sum(dim=1)\n"), "test_online_softmax", "values differ"),
    # SDPA inside the "flash" answer (the CPU's fused kernel: right values, little memory): the NumPy gate refuses torch.
    "flash_calls_sdpa": ("flash_attention_forward", "import torch\n\n\n" + FLASH_SIGNATURE + (
        "    t = [torch.from_numpy(a) for a in (q, k, v)]\n    return torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal).numpy()\n"),
        FLASH_ITEMS, "may import only numpy and math"),
    # torch.softmax on the whole (n, n) score matrix inside the "flash" answer: the NumPy gate refuses torch here too.
    "flash_torch_softmax": ("flash_attention_forward", "import torch\n\n\n" + FLASH_SIGNATURE + (
        "    s = torch.from_numpy(q @ k.T / np.float32(math.sqrt(q.shape[1])))\n"
        "    if causal:\n        s = s.masked_fill(torch.ones(len(q), len(k), dtype=torch.bool).triu(1), float('-inf'))\n"
        "    return (torch.softmax(s, dim=1) @ torch.from_numpy(v)).numpy()\n"), FLASH_ITEMS, "may import only numpy and math"),
    # The three steps copied into the cell: NumPy alone and right, but the (n, n) scores break the cap, and nothing is skipped.
    "three_steps_copied": ("flash_attention_forward", FLASH_SIGNATURE + (
        "    s = q @ k.T / np.float32(math.sqrt(q.shape[1]))\n    if causal:\n"
        "        s = np.where(np.arange(len(q))[:, np.newaxis] >= np.arange(len(k)), s, -np.inf)\n"
        "    p = np.exp(s - s.max(axis=1)[:, np.newaxis])\n    return (p / p.sum(axis=1)[:, np.newaxis]) @ v\n"),
        ("test_flash_memory", "test_flash_causal_speed"), {"test_flash_memory": "Unable to allocate", "test_flash_causal_speed": "need 1.4"}),
    # Tiled, but every tile is computed and then masked: right values and memory, no causal saving.
    "masks_every_tile": ("flash_attention_forward", TILED.format(tiles="0, n, block"), "test_flash_causal_speed", "need 1.4"),
    # Triton: a store without its mask writes past the output (the grader's bounds check, and the guard zone, see it).
    "kernel_store_unmasked": ("flash_kernel", lambda given: given.replace(", acc / l[:, None], mask=rows[:, None] < n)", ", acc / l[:, None])"),
                              "test_flash_kernel", "outside every tensor"),
    "kernel_ignores_causal": ("flash_kernel", lambda given: given.replace("keep = keep & (keys[None, :] <= rows[:, None])", "keep = keep"),
                              "test_flash_kernel", "values differ"),
    # A fair answer written otherwise: each block of queries against all its keys at once (block × stop scores), so the tiles
    # above the diagonal are skipped too, and its memory grows like block × n.
    "row_blocks": ("flash_attention_forward", FLASH_SIGNATURE + (
        "    n, d = q.shape\n    out = np.empty_like(q)\n    for start in range(0, n, block):\n        stop = min(start + block, n)\n"
        "        keys = stop if causal else n\n        s = q[start:stop] @ k[:keys].T / np.float32(math.sqrt(d))\n"
        "        if causal:\n            s = np.where(np.arange(start, stop)[:, np.newaxis] >= np.arange(keys), s, -np.inf)\n"
        "        p = np.exp(s - s.max(axis=1)[:, np.newaxis])\n        out[start:stop] = (p / p.sum(axis=1)[:, np.newaxis]) @ v[:keys]\n"
        "    return out\n"), FLASH_ITEMS, None),
    # Q5's do-nothing answer: zeros of the right shape, nothing stored.
    "decode_does_nothing": ("kv_cache_decode", DECODE_SIGNATURE + "    return torch.zeros_like(q)\n", "test_kv_cache_decode",
                            "store them in place"),
    # Q5: query head h on key-value head h % kv_heads (torch's repeat), not h // group (repeat_interleave).
    "decode_ignores_groups": ("kv_cache_decode", DECODE_SIGNATURE + DECODE_STORE + GROUP + (
        "    keys, values = (c[:, :, :t + 1].repeat(1, group, 1, 1) for c in (cache_k, cache_v))\n"
        "    return F.scaled_dot_product_attention(q, keys, values)\n"), "test_kv_cache_decode", "values differ"),
    # Attends over the cache and the new token joined in a copy: right values, nothing stored in the caches.
    "decode_on_a_copy": ("kv_cache_decode", DECODE_SIGNATURE + (
        "    keys, values = torch.cat([cache_k[:, :, :t], k_new], dim=2), torch.cat([cache_v[:, :, :t], v_new], dim=2)\n"
        "    return F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)\n"), "test_kv_cache_decode", "store them in place"),
    # Attends over the whole capacity, masking the positions past t: their NaN reach the output.
    "decode_whole_capacity": ("kv_cache_decode", DECODE_SIGNATURE + DECODE_STORE + (
        "    seen = (torch.arange(cache_k.shape[2]) <= t)[None, :]\n"
        "    return F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=seen, enable_gqa=True)\n"),
        "test_kv_cache_decode", "values differ"),
    # Stores into the caches, but reads its own copy of what it was handed: blind to the tokens the grader cached first.
    "decode_keeps_its_own_cache": ("kv_cache_decode", "MINE = {}\n\n\n" + DECODE_SIGNATURE + DECODE_STORE + (
        "    keys, values = MINE.setdefault(id(cache_k), ([], []))\n    keys.append(k_new)\n    values.append(v_new)\n"
        "    return F.scaled_dot_product_attention(q, torch.cat(keys, dim=2), torch.cat(values, dim=2), enable_gqa=True)\n"),
        "test_kv_cache_decode", "values differ"),
    # A fair answer written otherwise: SDPA does the groups.
    "decode_with_sdpa_groups": ("kv_cache_decode", DECODE_SIGNATURE + DECODE_STORE + (
        "    return F.scaled_dot_product_attention(q, cache_k[:, :, :t + 1], cache_v[:, :, :t + 1], enable_gqa=True)\n"),
        "test_kv_cache_decode", None),
    # The cost model with a key-value head per query head: right for Llama 2, 4x too much cache for Llama 3 8B.
    "bytes_without_groups": ("decode_model", COST_MODEL.format(
        bytes=RIGHT_BYTES.replace("model.kv_heads", "model.heads"),
        batch=PER_SEQUENCE + "    return max(0, int((memory_bytes - model.params * weight_bytes) // per_sequence))\n"),
        "test_decode_step_bytes", "expected"),
    "max_batch_ignores_weights": ("decode_model", COST_MODEL.format(
        bytes=RIGHT_BYTES, batch=PER_SEQUENCE + "    return int(memory_bytes // per_sequence)\n"), "test_max_batch", "expected"),
    # The cost model's do-nothing answer.
    "cost_model_does_nothing": ("decode_model", COST_MODEL.format(bytes="    return 0.0\n", batch="    return 0\n"),
                                ("test_decode_step_bytes", "test_max_batch"), "expected"),
    # The visible tests' numbers, hand-set.
    "cost_model_hand_set": ("decode_model", COST_MODEL.format(bytes="    return 16_596_870_912.0\n", batch="    return 119\n"),
                            ("test_decode_step_bytes", "test_max_batch"), "expected"),
}

VARIANTS = {"02_architecture": VARIANTS_02, "03_coalescing": VARIANTS_03, "04_divergence": VARIANTS_04, "05_streams": VARIANTS_05,
            "06_profiling_fusion": VARIANTS_06, "07_ml_compilation": VARIANTS_07, "08_cnn": VARIANTS_08, "09_lstm": VARIANTS_09,
            "10_gan": VARIANTS_10, "11_attention": VARIANTS_11}
# Cheap items of each module: the first that an answer does not feed is graded too, and must pass.
UNTOUCHED_ITEMS = {"02_architecture": ("test_register_budget", "test_bias_relu"),
                   "03_coalescing": ("test_tile_conflict_degrees", "test_sectors_per_warp"),
                   "04_divergence": ("test_loop_cycles", "test_soft_clip_correct"),
                   "05_streams": ("test_pipeline_makespan", "test_overlap_correct"),
                   "06_profiling_fusion": ("test_batched_matmuls_correct", "test_count_ops"),
                   "07_ml_compilation": ("test_matmul_flops_bytes", "test_matmul_reordered_correct"),
                   "08_cnn": ("test_maxpool2d_correct", "test_conv2d_correct"),
                   "09_lstm": ("test_lstm_cell", "test_bilstm_forward"),
                   "10_gan": ("test_mode_coverage", "test_gan_losses"),
                   "11_attention": ("test_online_softmax", "test_attention_naive")}


def _untouched_item(assignment, cells, items) -> list[str]:
    """One of the module's cheap items (UNTOUCHED_ITEMS) that the answer can neither fail nor change: not among
    ``items`` and not an item of a replaced cell (a compiled maxpool2d would pay its compile in test_maxpool2d_correct);
    none where every cheap item is taken."""
    cells = cells if isinstance(cells, tuple) else (cells,)
    return [item for item in UNTOUCHED_ITEMS[assignment]
            if item not in items and not any(item.startswith(f"test_{cell}_") or item == f"test_{cell}" for cell in cells)][:1]


def _grade(assignment, student_nb, tmp_path, only):
    """Grade with the trusted harness just the items in ``only`` (grade_ids)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    plan = skeleton.make_plan(nbformat.read(source(assignment), as_version=4), student_nb)
    return harness.grade(plan, workdir, only=only)


def _with_answer(assignment, grade_id, code):
    if isinstance(grade_id, tuple):  # several answer cells replaced at once
        assert isinstance(code, tuple) and len(code) == len(grade_id), "give one code per replaced cell"
        notebook = None
        for one_id, one_code in zip(grade_id, code):
            notebook = _with_answer(assignment, one_id, one_code) if notebook is None else _replaced(notebook, assignment, one_id, one_code)
        return notebook
    if not callable(code):  # a whole answer: keep the launcher the reference's cell also gives
        given = nbformat.read(source(assignment), as_version=4)
        [cell] = [c for c in given.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
        code += "".join(f"\n\n{line}" for line in cell.source.split("\n\n")[1:] if line.startswith("def run_"))
    return reference_answered(assignment, grade_id, code)


def _replaced(notebook, assignment, grade_id, code):
    """``notebook`` with one more answer cell replaced, as _with_answer replaces the first."""
    answered = _with_answer(assignment, grade_id, code)
    [new_cell] = [c for c in answered.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    [cell] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    cell.source = new_cell.source
    return notebook


def pytest_generate_tests(metafunc):
    if "variant" in metafunc.fixturenames:
        metafunc.parametrize("variant", sorted(VARIANTS[metafunc.cls.module]))


class Answers:
    """One module's variants (one class per module: see bottom)."""

    module = None  # set per generated class

    def test_each_answer_is_graded_exactly(self, variant, tmp_path):
        assignment = self.module
        cell, code, items, reason = VARIANTS[assignment][variant]
        items = items if isinstance(items, tuple) else (items,)
        # Only the items this answer feeds are graded (the reference's grading covers the rest), plus one it cannot touch.
        only = {*items, *_untouched_item(assignment, cell, items)}
        result = _grade(assignment, _with_answer(assignment, cell, code), tmp_path, only=only)
        assert {item.grade_id for item in result.items} == only
        failed = {item.grade_id: item.message for item in result.items if item.outcome not in ("passed", "needs_gpu")}
        if reason is None:
            assert failed == {}, "a correct answer lost points"
        else:
            assert sorted(failed) == sorted(items), failed
            reasons = reason if isinstance(reason, dict) else dict.fromkeys(items, reason)
            assert sorted(reasons) == sorted(items), "give a reason for every item the answer feeds"
            assert all(reasons[item] in failed[item] for item in items), failed


one_class_per_module(Answers, sorted(VARIANTS), globals())


def test_a_patch_in_another_cell_does_not_reach_the_count(tmp_path):
    """06: the student's process patches the grader's own counting code and the profiler (in the count_ops cell),
    and fused_tail is the eager chain. The count runs where only fused_tail's cell ran: all the ops are there."""
    forged = ("try:\n    import autograder.profiling as _grader_profiling\n"
              "    _grader_profiling.counted_call = lambda fn, *args: (fn(*args), {})\n"
              "except ImportError:\n    pass  # sealed: the grader's package is not there (issue 46); the profiler is patched all the same\n"
              "torch.profiler.profile.events = lambda self: []\n\n"
              "def count_ops(fn, *args):\n    return {}\n")
    notebook = reference_answered("06_profiling_fusion", "count_ops", forged)
    [cell] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "fused_tail"]
    cell.source = EAGER_TAIL
    result = _grade("06_profiling_fusion", notebook, tmp_path, only={"test_fused_tail_ops"})
    [item] = result.items
    assert item.outcome == "failed" and "ATen ops" in item.message and "aten::gelu" in item.message, item.message


def test_a_patch_in_another_cell_does_not_reach_the_mma_count(tmp_path):
    """07: the student's process replaces the course's intrinsic checks and the intrinsic itself (in another
    answer cell), and matmul_tensorized fakes its calls on zero tiles. The calls are logged where only
    matmul_tensorized's cell ran, and checked by the grader: the fake is caught."""
    forged = ("import gpucourse.intrinsics as _intrinsics\nimport gpucourse.check as _check\n"
              "_intrinsics.check_log = lambda *args, **kwargs: 60\n_check.mma_calls = lambda fn, a, b: 60\n"
              "_intrinsics.logged_call = lambda fn, a, b, key: (fn(a, b, _intrinsics.mma_16x16), [])\n\n"
              "def matmul_flops_bytes(m, k, n, tile, itemsize=4):\n    return 0, 0\n")
    notebook = reference_answered("07_ml_compilation", "matmul_flops_bytes", forged)
    [cell] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "matmul_tensorized"]
    cell.source = ZERO_TILE_MMA
    result = _grade("07_ml_compilation", notebook, tmp_path, only={"test_matmul_tensorized_calls"})
    [item] = result.items
    assert item.outcome == "failed" and "not one per pair of input tiles" in item.message, item.message


def test_a_later_cell_cannot_replace_a_gated_function(tmp_path):
    """07: a cell after the answer rebinds matmul_blocked to BLAS: the grader takes the last cell that defines it,
    which is not the student's own loops, and refuses it (the reference's loops never stand in for it)."""
    notebook = reference_answered("07_ml_compilation", "matmul_tensorized",
                                  lambda given: given + "\n\nmatmul_blocked = lambda a, b, tile=64: a @ b\n")
    result = _grade("07_ml_compilation", notebook, tmp_path, only={"test_matmul_blocked_correct"})
    [item] = result.items
    assert item.outcome == "failed" and "not only your own compiled loops" in item.message, item.message


STANDARD_ANSWERS = ("standard_baseline", "standard_do_nothing", "standard_hand_set")


def test_every_module_from_05_has_the_standard_answers():
    """docs/authoring.md §5: each module's items are tried with the locked baseline, a do-nothing answer and a
    hand-set one (the untouched release is graded in test_autograder_cli.py), and each must lose points."""
    for assignment in ("05_streams", "06_profiling_fusion", "07_ml_compilation", "08_cnn", "09_lstm", "10_gan", "11_attention"):
        missing = [name for name in STANDARD_ANSWERS if name not in VARIANTS[assignment]]
        assert not missing, f"{assignment} lacks {missing}"
        assert all(VARIANTS[assignment][name][3] is not None for name in STANDARD_ANSWERS), f"{assignment}: a standard answer must lose points"
