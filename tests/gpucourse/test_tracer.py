"""Tests of the sector, bank and SIMT models and of the kernel tracer, on hand-computed cases."""

import contextlib

import numpy as np
import pytest

from gpucourse import sim
from gpucourse.sim import memory

# -- the models ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "addresses, bytes_per_lane, sectors, efficiency",
    [
        (memory.warp_addresses(1), 4, 4, 1.0),  # 32 consecutive floats: 128 aligned bytes
        (memory.warp_addresses(1, offset=1), 4, 5, 128 / 160),  # shifted by one float: a fifth sector
        (memory.warp_addresses(2), 4, 8, 0.5),
        (memory.warp_addresses(8), 4, 32, 0.125),  # every lane in its own sector
        (memory.warp_addresses(0), 4, 1, 4 / 32),  # all lanes, one word: one sector, broadcast
        (memory.warp_addresses(1, element_bytes=8), 8, 8, 1.0),  # doubles: 256 bytes
        (memory.warp_addresses(1, element_bytes=1), 1, 1, 1.0),  # bytes: 32 of them, one sector
        (memory.warp_addresses(1, active_lanes=range(16)), 4, 2, 1.0),  # half a warp active
        ([30], 4, 2, 4 / 64),  # a word across a sector boundary (unaligned): both sectors
        ([], 4, 0, None),
    ],
)
def test_sectors_and_efficiency(addresses, bytes_per_lane, sectors, efficiency):
    assert memory.sectors_per_request(addresses, bytes_per_lane) == sectors
    if efficiency is None:
        with pytest.raises(ValueError, match="no active lanes"):
            memory.load_efficiency(addresses, bytes_per_lane)
    else:
        assert memory.load_efficiency(addresses, bytes_per_lane) == pytest.approx(efficiency)


def test_lines_per_request():
    assert memory.lines_per_request(memory.warp_addresses(1)) == 1
    assert memory.lines_per_request(memory.warp_addresses(1, offset=1)) == 2
    assert memory.lines_per_request(memory.warp_addresses(32)) == 32


@pytest.mark.parametrize(
    "words, degree",
    [
        (range(32), 1),  # one word per bank
        ([0] * 32, 1),  # everyone reads one word: a broadcast
        ([2 * k for k in range(32)], 2),  # stride 2: banks 0, 2, ..., each twice
        ([32 * k for k in range(32)], 32),  # a column of a 32-wide tile: all in bank 0
        ([33 * k for k in range(32)], 1),  # the same column with one word of padding per row
        ([0, 32, 32, 64], 3),  # three distinct words in bank 0; the repeated one is shared
        ([], 0),
    ],
)
def test_bank_conflict_degree(words, degree):
    assert memory.bank_conflict_degree(words) == degree


def test_simt_models():
    half = ["a"] * 16 + ["b"] * 16
    assert sim.warp_cycles(half, {"a": 10, "b": 4}) == 14
    assert sim.simt_efficiency(half, {"a": 10, "b": 4}) == pytest.approx((16 * 10 + 16 * 4) / (32 * 14))
    assert sim.simt_efficiency(["a"] * 32, {"a": 7}) == 1.0
    assert sim.simt_efficiency(["a"] * 8 + [None] * 24, {"a": 7}) == 0.25  # inactive lanes do no work
    assert sim.active_masks(["x", "y", "x", None]) == {"x": 0b101, "y": 0b10}
    with pytest.raises(KeyError):
        sim.warp_cycles(["a", "c"], {"a": 1})
    with pytest.raises(ValueError):
        sim.warp_cycles(["a"] * 33, {"a": 1})
    with pytest.raises(ValueError):
        sim.simt_efficiency([None] * 32, {"a": 1})


# -- the tracer on real kernels ----------------------------------------------------------------


@pytest.mark.parametrize("stride, offset, sectors, lines, efficiency", [(1, 0, 4, 1, 1.0), (1, 1, 5, 2, 0.8), (2, 0, 8, 2, 0.5),
                                                                          (4, 0, 16, 4, 0.25), (32, 0, 32, 32, 0.125)])
def test_tracer_counts_the_sectors_of_strided_and_offset_loads(simulated_cuda, stride, offset, sectors, lines, efficiency):
    from sim_kernels import copy_strided

    x = np.arange(64 * 32 + 1, dtype=np.float32)
    out = np.zeros(64, np.float32)
    with sim.trace() as t:
        copy_strided[2, 32](x, out, stride, offset)
    np.testing.assert_array_equal(out, x[offset::stride][:64])
    loads = t.requests("global", "load")
    assert len(loads) == 2 and all(len(r.lanes) == 32 for r in loads)  # one request per warp
    assert t.sectors_per_request(kind="load") == sectors
    assert t.efficiency(kind="load") == pytest.approx(efficiency)
    assert t.sectors_per_request(kind="store") == 4 and t.efficiency(kind="store") == 1.0
    assert t.sectors_per_request(source="x[offset + i * stride]") == pytest.approx((sectors + 4) / 2)
    assert {r.lines for r in loads} == {lines}


def test_tracer_finds_bank_conflicts_and_broadcasts(simulated_cuda):
    from sim_kernels import read_shared_words

    out = np.zeros(32, np.float32)
    for words, degree in (([32 * k for k in range(32)], 32), ([33 * k % 1024 for k in range(32)], 1), ([5] * 32, 1),
                          ([2 * k for k in range(32)], 2)):
        with sim.trace() as t:
            read_shared_words[1, 32](out, np.array(words, dtype=np.int32))
        assert t.bank_conflict_degree(kind="load") == degree
        assert t.bank_conflict_degree(kind="store") == 1  # buffer[t] = t: one word per bank


def test_tracer_says_when_it_cannot_model_a_bank_conflict(simulated_cuda):
    from sim_kernels import read_shared_doubles

    with sim.trace() as t:
        read_shared_doubles[1, 32](np.zeros(32))
    assert all(r.conflict_degree is None for r in t.requests("shared"))
    assert t.notes == ["bank conflicts are modelled for 4-byte elements; 8-byte shared accesses are not counted"]
    with pytest.raises(ValueError, match="no 4-byte shared-memory access"):
        t.bank_conflict_degree()
    with pytest.raises(ValueError, match="4-byte elements only"):
        t.wavefronts()
    assert "n/a" in t.report()


def test_tracer_measures_simt_efficiency(simulated_cuda):
    from sim_kernels import even_odd, warp_uniform

    x = np.arange(64, dtype=np.float32)
    expected = np.where(np.arange(64) % 2 == 0, x * 2, x + 1)
    with sim.trace() as divergent:
        out = np.zeros(64, np.float32)
        even_odd[2, 32](x, out)
    np.testing.assert_array_equal(out, expected)
    # Per warp: `i = ...` and `if ...` with 32 lanes, then each path's line with 16: 96 of 128 lane slots.
    assert divergent.simt_efficiency() == 0.75
    assert set(divergent.warp_efficiencies().values()) == {0.75}
    with sim.trace() as uniform:
        warp_uniform[2, 32](x, out)
    assert uniform.simt_efficiency() == 1.0
    with sim.trace() as partial:
        warp_uniform[1, 16](x, out)  # a block of 16 threads leaves half of its warp idle
    assert partial.simt_efficiency() == 0.5
    # Which warps diverge: every warp of even_odd, none of warp_uniform, nor a warp of 16 threads
    # (its lanes are the 16 that exist, and they stay together).
    assert divergent.divergent_warps() == [((0, 0, 0), 0), ((1, 0, 0), 0)]
    assert uniform.divergent_warps() == [] and partial.divergent_warps() == []


def test_divergence_and_totals_are_not_diluted_by_extra_work(simulated_cuda):
    """Uniform busywork lifts a divergent kernel's SIMT efficiency, but not out of divergence;
    extra requests only add to the total sectors."""
    from sim_kernels import even_odd, even_odd_padded

    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with sim.trace() as plain:
        even_odd[2, 32](x, out)
    with sim.trace() as padded:
        even_odd_padded[2, 32](x, out, 40)
    np.testing.assert_array_equal(out, np.where(np.arange(64) % 2 == 0, x * 2, x + 1))
    assert plain.simt_efficiency() == 0.75 and padded.simt_efficiency() > 0.95  # the mean is diluted
    assert padded.divergent_warps() == plain.divergent_warps() == [((0, 0, 0), 0), ((1, 0, 0), 0)]
    # Per warp, even_odd loads x twice with half the lanes (4 sectors each: the lanes' floats are
    # 8 bytes apart); the padded kernel loads it 41 times with all lanes (4 sectors each).
    assert plain.sectors(kind="load") == 2 * 2 * 4 and padded.sectors(kind="load") == 2 * 41 * 4


def test_atomics_are_their_own_kind_of_access(simulated_cuda):
    """An atomic add is one request of kind "atomic", not the simulator's read and write, so a
    plain store is always a plain write (a race on a GPU when threads share the address)."""
    from sim_kernels import count_then_share

    values, bins, out = np.arange(64, dtype=np.int32) % 4, np.zeros(4, np.int32), np.zeros(2)
    with sim.trace() as t:
        count_then_share[2, 32](values, bins, out)
    assert bins.tolist() == [16, 16, 16, 16]
    atomics = t.requests("global", "atomic")
    assert len(atomics) == 2 and all(len(r.lanes) == 32 for r in atomics)  # one per warp
    assert [r.source for r in t.requests("global", "store")] == ["out[cuda.blockIdx.x] = shared[0] + shared[31]"] * 2
    assert len(t.requests("global", "load")) == 2  # values[...], once per warp; the atomic's own read is not a load


def test_shared_memory_races_are_found_whatever_order_the_threads_ran_in(simulated_cuda):
    """Two threads on one shared word between the same barriers, one writing, is a race on a GPU;
    the simulator may still compute the right answer, so the tracer reads it from the barriers."""
    from sim_kernels import everyone_writes_one_word, read_tile_column, shift_through_shared

    out = np.zeros(32, np.float32)
    with sim.trace() as racy:
        shift_through_shared[1, 32](out, False)
    assert racy.race_count() == 32 and {r.kind for r in racy.races()} == {"read-write"}
    assert racy.races()[0].first == "words[t] = t" and racy.races()[0].second == "out[t] = words[(t + 1) % 32]"
    assert "read-write race on shared byte" in racy.races()[0].describe()
    with sim.trace() as synced:
        shift_through_shared[1, 32](out, True)
    np.testing.assert_array_equal(out, (np.arange(32) + 1) % 32)
    assert synced.races() == [] and synced.race_count() == 0
    with sim.trace() as clash:
        everyone_writes_one_word[2, 32](out)
    assert clash.race_count("shared") == 2 and {r.kind for r in clash.races()} == {"write-write"}  # once per block
    assert clash.race_count("global") == 32 and clash.race_count() == 34  # and both blocks write out[t]
    with sim.trace() as tile:
        read_tile_column[1, 32](out, 32)
    assert tile.race_count() == 0
    with sim.trace() as copy:
        pass
    copy.absorb(racy.export())  # as the grader reads a kernel runner's trace
    assert copy.races() == racy.races() and copy.race_count() == 32


def test_wavefronts_add_up_each_requests_conflict_degree(simulated_cuda):
    from sim_kernels import copy_strided, read_shared_words

    out = np.zeros(32, np.float32)
    with sim.trace() as t:
        read_shared_words[1, 32](out, np.array([2 * k for k in range(32)], dtype=np.int32))
    assert t.wavefronts(kind="store") == 1 and t.wavefronts(kind="load") == 2 and t.wavefronts() == 3
    with sim.trace() as no_shared:
        copy_strided[1, 32](np.arange(64, dtype=np.float32), np.zeros(32, np.float32), 1, 0)
    assert no_shared.wavefronts() == 0


def test_a_trace_survives_the_trip_to_another_process_and_back(simulated_cuda):
    from sim_kernels import even_odd

    with sim.trace() as original:
        even_odd[2, 32](np.arange(64, dtype=np.float32), np.zeros(64, np.float32))
    with sim.trace() as copy:
        pass
    copy.absorb(original.export())
    assert copy.summary() == original.summary()
    assert copy.simt_efficiency() == original.simt_efficiency()
    assert copy.report() == original.report()


def test_traces_and_counters_nest(simulated_cuda):
    from sim_kernels import copy_strided

    x, out = np.arange(64, dtype=np.float32), np.zeros(32, np.float32)
    with sim.trace() as outer, sim.record_kernel_calls() as calls:
        copy_strided[1, 32](x, out, 1, 0)
        with sim.trace() as inner:
            copy_strided[1, 32](x, out, 2, 0)
    assert len(outer.requests("global", "load")) == 2 and len(inner.requests("global", "load")) == 1
    assert inner.sectors_per_request(kind="load") == 8 and calls.available
    assert sim.open_kinds() == ()
    with sim.trace() as after:
        copy_strided[1, 32](x, out, 1, 0)
    assert len(after.requests("global", "load")) == 1  # instrumentation was removed, not stacked


def test_the_report_names_the_source_lines(simulated_cuda):
    from sim_kernels import copy_strided

    with sim.trace() as t:
        copy_strided[1, 32](np.arange(64, dtype=np.float32), np.zeros(32, np.float32), 2, 0)
    report = t.report()
    assert "out[i] = x[offset + i * stride]" in report and "modelled" in report
    assert [(row["space"], row["kind"]) for row in t.summary()] == [("global", "load"), ("global", "store")]


# -- nothing escapes the trace: sub-arrays traced or refused; races in global memory too ------------

cuda = None  # numba.cuda in the simulator, set by the fixture: kernels must name it as a global (the simulator swaps it)


@pytest.fixture
def kernel_api(simulated_cuda):
    global cuda
    cuda = simulated_cuda


def test_stores_through_slices_and_ellipsis_are_traced_element_by_element(kernel_api):
    """A slice copy hides nothing: element k of each lane's slice is one warp request (here 16 sectors each,
    the lanes' chunks 16 bytes apart), and the slice on the right is loaded the same way."""

    @cuda.jit
    def copy_chunks(x, out):
        i = cuda.grid(1)
        out[4 * i:4 * i + 4] = x[4 * i:4 * i + 4]

    @cuda.jit
    def fill(out):
        if cuda.threadIdx.x == 0:
            out[...] = 7

    @cuda.jit
    def add_up_chunks(x, out):
        i = cuda.grid(1)
        out[i] = sum(x[4 * i:4 * i + 4])  # iterating over a slice: one load per element

    x, out = np.arange(128, dtype=np.float32), np.zeros(128, np.float32)
    with sim.trace() as t:
        copy_chunks[1, 32](x, out)
    np.testing.assert_array_equal(out, x)
    for kind in ("load", "store"):
        requests = t.requests("global", kind)
        assert len(requests) == 4 and all(len(r.lanes) == 32 for r in requests) and t.sectors(kind=kind) == 4 * 16
    with sim.trace() as t:
        fill[1, 32](out)
    assert (out == 7).all()
    stores = t.requests("global", "store")
    assert len(stores) == 128 and all(r.lanes == (0,) for r in stores)  # one lane, 128 elements, one at a time
    assert sorted(a for r in stores for a in r.addresses) == [stores[0].addresses[0] + 4 * k for k in range(128)]
    with sim.trace() as t:
        add_up_chunks[1, 32](x, out)
    np.testing.assert_array_equal(out[:32], x.reshape(32, 4).sum(axis=1))
    assert len(t.requests("global", "load")) == 4 and t.sectors(kind="load") == 4 * 16


def test_views_of_a_shared_tile_are_traced(kernel_api):
    """.reshape() and .view() of an unpadded tile cannot hide its bank conflicts; tile[row][col] is one access."""

    @cuda.jit
    def column_through_views(out):
        tile = cuda.shared.array((32, 32), np.float32)
        t = cuda.threadIdx.x
        tile.view(np.int32)[t, 0] = t  # a column: every word in bank 0
        cuda.syncthreads()
        out[t] = tile.reshape(1024)[32 * t] + tile.T[0][t] * 0

    out = np.zeros(32, np.float32)
    with sim.trace() as t:
        column_through_views[1, 32](out)
    np.testing.assert_array_equal(out.view(np.int32), np.arange(32))
    assert t.bank_conflict_degree(kind="store") == 32 and t.wavefronts(kind="store") == 32
    assert len(t.requests("shared", "load")) == 2 and t.wavefronts(kind="load") == 2 * 32
    assert t.race_count() == 0


def test_views_metadata_atomics_and_local_arrays_still_work(kernel_api):
    @cuda.jit
    def views_and_metadata(x, out, bins):
        tile = cuda.shared.array((2, 32), np.float32)
        scratch = cuda.local.array(1, np.float32)
        t = cuda.threadIdx.x
        tile[1][t] = x[t]
        cuda.syncthreads()
        scratch[0] = tile[1][31 - t]
        if x.dtype == np.float32 and x.shape[0] == x.size == len(x) == 32:
            out[t] = scratch[0]
        cuda.atomic.add(bins, t % 2, 1)

    x, out, bins = np.arange(32, dtype=np.float32), np.zeros(32, np.float32), np.zeros(2, np.int32)
    with sim.trace() as t:
        views_and_metadata[1, 32](x, out, bins)
    np.testing.assert_array_equal(out, x[::-1])
    assert bins.tolist() == [16, 16]
    stores, loads = t.requests("shared", "store"), t.requests("shared", "load")
    assert len(stores) == len(loads) == 1 and stores[0].addresses == tuple(128 + 4 * k for k in range(32))
    assert loads[0].addresses == tuple(128 + 4 * (31 - k) for k in range(32)) and t.bank_conflict_degree() == 1
    assert [len(t.requests("global", kind)) for kind in ("load", "store", "atomic")] == [1, 1, 1]
    assert t.race_count() == 0


WHOLE_ARRAY_ACCESSES = [
    ("s[t:t + 1] += s[t + 16:t + 17]", "`+=` on a whole array"),
    ("out[t] = np.sum(s)", "`.sum` works on the whole array at once"),
    ("out[t] = x[0:4].sum()", "`.sum` works on the whole array at once"),
    ("out[t] = (np.float32(2) * s[0:4])[0]", "numpy works on the whole array at once"),
    ("out[t] = (np.float32(2) * x[0:4])[0]", "numpy's `multiply` works on whole arrays at once"),
    ("out[t] = np.asarray(x)[t]", "numpy works on the whole array at once"),
    ("out[t] = (x[0:4] + 1)[0]", "`+` on a whole array"),
    ("out[0:4] = x[np.arange(4)]", "an index of type ndarray"),
    ("out[t] = s[True][0]", "an index of type bool"),
    ("s.fill(0)", "`.fill` works on the whole array at once"),
    ("out[t] = x.copy_to_host()[t]", "`.copy_to_host` works on the whole array at once"),
    ("out[t] = x.reshape(8, 4).T.ravel()[t]", "`.ravel(...)` would copy the array"),
]


@pytest.mark.parametrize("line, refusal", WHOLE_ARRAY_ACCESSES)
def test_whole_array_accesses_are_refused_in_the_kernel(kernel_api, line, refusal):
    namespace = {"cuda": cuda, "np": np}
    exec(compile(f"def kernel(x, out):\n    s = cuda.shared.array(32, np.float32)\n    t = cuda.threadIdx.x\n"
                 f"    s[t] = x[t]\n    {line}\n", "<whole_array_kernel>", "exec"), namespace)
    kernel = cuda.jit(namespace["kernel"])
    with sim.trace(), pytest.raises(sim.tracer.UntracedAccess) as refused:
        kernel[1, 32](np.arange(32, dtype=np.float32), np.zeros(32, np.float32))
    assert "the tracer sees element accesses only: " + refusal in str(refused.value)
    assert "index one element at a time, e.g. x[i] or tile[row, col]" in str(refused.value)


def test_host_code_is_not_affected(simulated_cuda):
    from numba.cuda.simulator.cudadrv import devicearray

    array = devicearray.FakeWithinKernelCUDAArray(devicearray.FakeCUDAArray(np.arange(4.0)))
    with sim.trace():
        assert np.sum(array) == 6 and array[1:3][1] == 2 and (np.float32(2) * array)[3] == 6
        assert np.asarray(array).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("observers", [("trace",), ("calls",), ("calls", "trace"), ("trace", "calls")])
def test_a_kernels_shared_arrays_do_not_alias_when_traced(kernel_api, observers):
    """The simulator tells shared arrays apart by the line asking for one: the kernel's, not the tracer's or the
    counter's, however the two wrap each other; and the counter still counts the arrays under the tracer."""

    @cuda.jit
    def two_arrays(out):
        a = cuda.shared.array(4, np.float32)
        b = cuda.shared.array(8, np.float32)
        t = cuda.threadIdx.x
        a[t] = 1
        b[t] = 2
        cuda.syncthreads()
        out[t] = a[t] + b[t] + a.size + b.size

    out = np.zeros(4, np.float32)
    with contextlib.ExitStack() as stack:
        opened = {kind: stack.enter_context(sim.trace() if kind == "trace" else sim.record_kernel_calls()) for kind in observers}
        two_arrays[1, 4](out)
    assert out.tolist() == [15] * 4
    if "trace" in opened:
        assert sorted(r.addresses[0] for r in opened["trace"].requests("shared", "store")) == [0, 16]  # b after a, 16-byte aligned
    if "calls" in opened:
        assert opened["calls"]["shared.array"] == 8  # two arrays, four threads


def test_dynamic_shared_memory_is_one_buffer_per_block(kernel_api):
    @cuda.jit
    def rotate(out):
        words = cuda.shared.array(0, np.dtype(np.float32))  # the launch's dynamic shared memory, handed to each thread anew
        t = cuda.threadIdx.x
        words[t] = t
        cuda.syncthreads()
        out[t] = words[(t + 1) % 32]

    out = np.zeros(32, np.float32)
    with sim.trace() as t:
        rotate[1, 32, 0, 128](out)
    np.testing.assert_array_equal(out, (np.arange(32) + 1) % 32)
    assert [r.addresses for r in t.requests("shared", "store")] == [tuple(range(0, 128, 4))] and t.race_count() == 0


def test_blocks_race_on_a_global_word_that_one_of_them_stores_plainly(kernel_api):
    """Each block adds its total into out[0] with a plain load and store: the simulator runs the blocks one after
    another and the sum comes out right, but blocks of one launch never wait for each other: a race."""

    @cuda.jit
    def add_block_totals(x, out, atomically):
        partial = cuda.shared.array(32, np.float32)
        t = cuda.threadIdx.x
        partial[t] = x[cuda.grid(1)]
        cuda.syncthreads()
        if t == 0:
            total = np.float32(0)
            for k in range(32):
                total += partial[k]
            if atomically:
                cuda.atomic.add(out, 0, total)
            else:
                out[0] += total

    x = np.arange(96, dtype=np.float32)
    for atomically in (False, True):
        out = np.zeros(1, np.float32)
        with sim.trace() as t:
            add_block_totals[3, 32](x, out, atomically)
        assert out[0] == x.sum()
        if atomically:
            assert t.races() == [] and t.race_count() == 0
    with sim.trace() as racy:
        add_block_totals[3, 32](x, np.zeros(1, np.float32), False)
    assert racy.race_count() == racy.race_count("global") == 1 and racy.race_count("shared") == 0
    race = racy.races()[0]
    assert (race.space, race.block, race.other_block, race.kind) == ("global", (0, 0, 0), (1, 0, 0), "write-write")
    assert race.describe() == (f"write-write race on global byte {2 * sim.tracer.ARRAY_ALIGNMENT} between blocks (0, 0, 0) "
                               "and (1, 0, 0): `out[0] += total` and `out[0] += total`")  # x came first: out is the second array


def test_an_atomic_and_a_plain_access_of_another_block_race(kernel_api):
    @cuda.jit
    def count_and_peek(counter, seen):
        if cuda.blockIdx.x == 0:
            cuda.atomic.add(counter, 0, 1)
        else:
            seen[cuda.threadIdx.x] = counter[0]

    with sim.trace() as t:
        count_and_peek[2, 32](np.zeros(1, np.int32), np.zeros(32, np.int32))
    assert t.race_count() == 1
    assert t.races()[0].describe() == (f"read-write race on global byte {sim.tracer.ARRAY_ALIGNMENT} between blocks (0, 0, 0) "
                                       "and (1, 0, 0): `cuda.atomic.add(counter, 0, 1)` and `seen[cuda.threadIdx.x] = counter[0]`")


def test_threads_of_one_block_race_in_global_memory_between_barriers(kernel_api):
    """Within a block the rule is shared memory's: two threads between the same barriers, one storing plainly
    (an atomic against a plain store too; atomics among themselves never race)."""

    @cuda.jit
    def shift_through_global(out, barrier):
        t = cuda.threadIdx.x
        out[t] = t
        if barrier:
            cuda.syncthreads()
        out[32 + t] = out[(t + 1) % 32]

    @cuda.jit
    def count_then_reset(counts, reset):
        cuda.atomic.add(counts, 0, 1)
        if reset and cuda.threadIdx.x == 0:
            counts[0] = 0

    out = np.zeros(64, np.float32)
    with sim.trace() as racy:
        shift_through_global[1, 32](out, False)
    assert racy.race_count() == racy.race_count("global") == 32
    assert racy.races()[0].describe() == (f"read-write race on global byte {sim.tracer.ARRAY_ALIGNMENT} in block (0, 0, 0): "
                                          "`out[t] = t` and `out[32 + t] = out[(t + 1) % 32]`")
    with sim.trace() as synced:
        shift_through_global[1, 32](out, True)
    np.testing.assert_array_equal(out[32:], (np.arange(32) + 1) % 32)
    assert synced.race_count() == 0
    for reset, races in ((False, 0), (True, 1)):
        with sim.trace() as t:
            count_then_reset[1, 32](np.zeros(1, np.int32), reset)
        assert t.race_count() == races and {r.kind for r in t.races()} == ({"write-write"} if races else set())


def test_honest_kernels_have_no_race(kernel_api):
    @cuda.jit
    def saxpy(a, x, y, out):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            out[i] = a * x[i] + y[i]

    @cuda.jit
    def histogram(values, bins):
        for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
            cuda.atomic.add(bins, values[i], 1)

    @cuda.jit
    def block_sums(x, partial):
        values = cuda.shared.array(32, np.float32)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        values[t] = x[i] if i < x.size else np.float32(0)
        cuda.syncthreads()
        step = 16
        while step > 0:
            if t < step:
                values[t] += values[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            partial[cuda.blockIdx.x] = values[0]

    @cuda.jit
    def tree_sum(x, out):
        s = cuda.shared.array(64, np.float32)
        t = cuda.threadIdx.x
        total = np.float32(0)
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            total += x[i]
        s[t] = total
        cuda.syncthreads()
        step = 32
        while step > 0:
            if t < step:
                s[t] += s[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            cuda.atomic.add(out, 0, s[0])

    @cuda.jit
    def transpose(x, out):
        tile = cuda.shared.array((32, 33), np.float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        col = cuda.blockIdx.x * 32 + tx
        for k in range(0, 32, 8):
            row = cuda.blockIdx.y * 32 + ty + k
            if row < x.shape[0] and col < x.shape[1]:
                tile[ty + k, tx] = x[row, col]
        cuda.syncthreads()
        out_col = cuda.blockIdx.y * 32 + tx
        for k in range(0, 32, 8):
            out_row = cuda.blockIdx.x * 32 + ty + k
            if out_row < out.shape[0] and out_col < out.shape[1]:
                out[out_row, out_col] = tile[tx, ty + k]

    x = np.arange(300, dtype=np.float32)
    matrix, values = x[:40 * 7].reshape(40, 7).copy(), (np.arange(300) % 5).astype(np.int32)
    out, bins, partial, total, transposed = (np.zeros(300, np.float32), np.zeros(5, np.int32), np.zeros(10, np.float32),
                                             np.zeros(1, np.float32), np.zeros((7, 40), np.float32))
    with sim.trace() as t:
        saxpy[4, 32](np.float32(2), x, x, out)
        histogram[4, 32](values, bins)
        block_sums[10, 32](x, partial)
        tree_sum[3, 64](x, total)
        transpose[(1, 2), (32, 8)](matrix, transposed)
    np.testing.assert_array_equal(out, 3 * x)
    assert bins.tolist() == [60] * 5 and total[0] == x.sum()
    np.testing.assert_array_equal(partial, [x[32 * b:32 * b + 32].sum() for b in range(10)])
    np.testing.assert_array_equal(transposed, matrix.T)
    assert t.races() == [] and t.race_count() == 0


def test_global_races_survive_the_trip_to_another_process(kernel_api):
    @cuda.jit
    def everyone_writes_word_zero(out):
        out[0] = cuda.threadIdx.x

    with sim.trace() as racy:
        everyone_writes_word_zero[2, 32](np.zeros(1, np.float32))
    assert racy.race_count("global") == 3  # in each block, and between them
    assert {r.other_block for r in racy.races()} == {None, (1, 0, 0)}
    with sim.trace() as copy:
        pass
    copy.absorb(racy.export())
    assert copy.races() == racy.races() and copy.race_count("global") == 3 and copy.race_count("shared") == 0
    with sim.trace() as old:
        pass
    old.absorb({"requests": [], "issues": [], "notes": [], "races": [[[0, 0, 0], 4, "write-write", "a", "b"]], "race_count": 1,
                "barriers": 0})  # as traces were exported before global races
    assert old.races() == [sim.tracer.Race((0, 0, 0), 4, "write-write", "a", "b")] and old.race_count("shared") == 1
