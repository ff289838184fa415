"""Tests of the sector, bank and SIMT models and of the kernel tracer, on hand-computed cases."""

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
    assert clash.race_count() == 2 and {r.kind for r in clash.races()} == {"write-write"}  # once per block
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
