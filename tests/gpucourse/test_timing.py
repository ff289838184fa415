"""gpucourse.timing: fixed threads, measured durations, and compare_speed's ratios, fresh inputs and checked outputs."""

import time

import pytest
import torch

from gpucourse import timing


def test_fixed_threads_sets_and_restores():
    before = torch.get_num_threads()
    with timing.fixed_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_measure_times_a_known_duration():
    result = timing.measure(time.sleep, 0.005, warmup=1, min_run_time=0.05)
    assert 0.004 < result.median < 0.03
    assert result.calls >= 3 and result.calls >= result.blocks >= 1
    assert "measured on CPU" in str(result)


def test_measure_labels_the_tensors_device_and_thread_count():
    result = timing.measure(torch.add, torch.ones(4), torch.ones(4), num_threads=1, min_run_time=0.01)
    assert result.device.startswith("CPU ") and result.device.endswith("1 torch thread")


def test_measure_runs_warmup_calls_before_timing():
    calls = []
    timing.measure(lambda: calls.append(1), warmup=4, min_run_time=0.01)
    assert len(calls) > 4


def _sleeper(seconds):
    def fn(x):
        time.sleep(seconds)
        return x * 2

    return fn


def test_compare_speed_measures_the_ratio_of_two_durations():
    # Sleeps of tens of milliseconds: on a busy machine a sleeper wakes a few late (4 ms against 1 ms fell under 2.5× there).
    result = timing.compare_speed(_sleeper(0.04), _sleeper(0.01), lambda: (torch.ones(3),), rounds=5)
    assert 2.5 < result.speedup < 5.0, result
    assert result.low <= result.speedup * 1.2 and result.high >= result.speedup / 1.2
    assert result.rounds == 5 and result.num_threads == 1


def test_speed_result_gives_the_median_of_the_per_round_ratios_inside_their_middle_half():
    """speedup is a ratio of medians and can fall outside low-high; median_ratio is the headline of the same samples."""
    result = timing.speed_result([20.0, 20.0, 20.0, 3.0, 3.0], [10.0, 10.0, 1.0, 2.0, 2.0], "CPU", 1)  # ratios 2, 2, 20, 1.5, 1.5
    assert (result.speedup, result.low, result.median_ratio, result.high) == (10.0, 1.5, 2.0, 2.0), result


def test_compare_speed_gives_every_timed_call_fresh_inputs_and_checks_every_output():
    made, checked = [], []

    def make_inputs():
        made.append(torch.tensor([float(len(made))]))
        return (made[-1],)

    def verify(args, output):
        checked.append(args[0])
        assert torch.equal(output, args[0] * 2)

    timing.compare_speed(_sleeper(0.0005), _sleeper(0.0002), make_inputs, check=verify, rounds=3, warmup=1)
    assert len({id(t) for t in checked}) == len(checked) > 3  # each candidate output came from its own inputs
    assert len({float(t) for t in made}) == len(made)


def test_compare_speed_defeats_caching_by_value():
    cache, misses = {}, []

    def caching(x):
        key = float(x)
        if key not in cache:
            misses.append(key)
            cache[key] = x * 2
        return cache[key]

    counter = iter(range(10**6))
    timing.compare_speed(_sleeper(0.0002), caching, lambda: (torch.tensor(float(next(counter))),), rounds=3)
    assert len(misses) == len(cache)  # no call ever found its result cached


def test_compare_speed_raises_when_a_timed_output_is_wrong():
    def wrong_after_warmup():
        calls = []

        def fn(x):
            calls.append(1)
            return x * (2 if len(calls) <= 2 else 3)

        return fn

    def verify(args, output):
        assert torch.equal(output, args[0] * 2), "timed output is wrong"

    with pytest.raises(AssertionError, match="timed output is wrong"):
        timing.compare_speed(_sleeper(0.0002), wrong_after_warmup(), lambda: (torch.ones(1),), check=verify, rounds=2)


def test_compare_speed_checks_the_warm_up_outputs_so_a_wrong_answer_costs_no_timing():
    """A result cached by shape is right on its first call and wrong on its second (module 06's cached_tail):
    the second warm-up call fails, before one block is timed."""
    baseline_calls, last = [], {}

    def baseline(x):
        baseline_calls.append(1)
        return x * 2

    def cached_by_shape(x):
        return last.setdefault(tuple(x.shape), x * 2)

    def verify(args, output):
        assert torch.equal(output, args[0] * 2), "wrong output"

    with pytest.raises(AssertionError, match="wrong output"):
        timing.compare_speed(baseline, cached_by_shape, lambda: (torch.randn(4),), check=verify, rounds=3, warmup=2)
    assert len(baseline_calls) == 2, "only the baseline's warm-up ran"


def test_compare_speed_rejects_zero_rounds():
    with pytest.raises(ValueError, match="rounds"):
        timing.compare_speed(_sleeper(0), _sleeper(0), lambda: (1,), rounds=0)


def test_compare_speed_can_give_the_baseline_another_layout_of_the_same_inputs():
    """baseline_inputs maps each fresh candidate input to the baseline's form, outside the clock."""
    seen = {"baseline": [], "candidate": []}

    def baseline(rows):
        seen["baseline"].append(rows.shape)
        return rows.T.contiguous()

    def candidate(columns):
        seen["candidate"].append(columns.shape)
        return columns

    timing.compare_speed(baseline, candidate, lambda: (torch.rand(3, 5),), baseline_inputs=lambda columns: (columns.T.contiguous(),),
                         rounds=2, warmup=1, max_calls_per_block=4)
    assert set(seen["baseline"]) == {(5, 3)} and set(seen["candidate"]) == {(3, 5)}


def test_numpy_work_is_labelled_as_measured_on_the_cpu(monkeypatch):
    import numpy as np

    monkeypatch.setattr(timing, "device", lambda: torch.device("meta"))  # what a GPU machine's default would be
    assert timing._device_of((np.zeros(3), 2)) == torch.device("cpu")
    assert timing._device_of(((np.zeros(3),),)) == torch.device("cpu")
    assert timing._device_of((1, 2)) == torch.device("meta")


@pytest.mark.parametrize(
    "median, iqr, noisy",
    [(377e-6, 5.08e-3, True), (1e-3, 1.0001e-3, True), (1e-3, 1e-3, False), (1e-3, 0.2e-3, False), (2.0, 0.0, False)],
)
def test_spread_exceeds_median_decides_on_the_iqr_against_the_median(median, iqr, noisy):
    assert timing.spread_exceeds_median(median, iqr) is noisy
    assert timing.Timing(median=median, iqr=iqr, calls=50, blocks=5, device="CPU test").too_noisy is noisy


def test_a_noisy_timing_says_so_and_reports_the_iqr_not_a_symmetric_error():
    text = str(timing.Timing(median=377e-6, iqr=5.08e-3, calls=50, blocks=5, device="CPU test"))
    assert text.startswith("median 377 µs, IQR 5.08 ms per call") and "±" not in text, text
    assert text.endswith("[too noisy: the spread exceeds the median]"), text
    assert "too noisy" not in str(timing.Timing(median=1e-3, iqr=1e-4, calls=50, blocks=5, device="CPU test"))


def test_warn_if_noisy_prints_one_warning_line_only_for_a_noisy_timing(capsys):
    assert timing.warn_if_noisy(timing.Timing(median=1e-3, iqr=3e-3, calls=9, blocks=9, device="CPU test"), "n = 768") is True
    assert capsys.readouterr().out == ("WARNING: n = 768 is too noisy to conclude from: its spread (IQR 3 ms) exceeds its median (1 ms): "
                                       "other work on the machine probably dominated it. Run the cell again.\n")
    assert timing.warn_if_noisy(timing.Timing(median=1e-3, iqr=1e-4, calls=9, blocks=9, device="CPU test"), "n = 64") is False
    assert capsys.readouterr().out == ""


def test_measure_times_at_least_min_blocks_blocks_even_when_one_block_fills_min_run_time():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.02)

    result = timing.measure(slow, warmup=1, min_run_time=0.01, min_blocks=4)
    assert result.blocks >= 4 and result.calls >= 4, f"timed {result.blocks} blocks of {result.calls} calls, expected at least 4 blocks"
    assert 0.015 < result.median < 0.1, result
    with pytest.raises(ValueError, match="min_blocks must be at least 1, got 0"):
        timing.measure(slow, min_blocks=0)


def test_a_block_of_large_inputs_stays_under_the_byte_budget(monkeypatch):
    """A candidate that answers at once on 8 MB inputs is handed blocks of at most BLOCK_INPUT_BYTES, not a thousand calls."""
    monkeypatch.setattr(timing, "BLOCK_INPUT_BYTES", 64 * 1024**2)
    seen = []

    def instant(x):
        return x

    def counting_block(fn, inputs, charge_cpu_time=False):
        seen.append(len(inputs))
        return 1e-6 * len(inputs), [fn(*args) for args in inputs]

    monkeypatch.setattr(timing, "_timed_block", counting_block)
    timing.compare_speed(instant, instant, lambda: (torch.empty(2 * 1024**2),), rounds=2)
    assert max(seen) == 8, seen  # 64 MB / 8 MB


def test_charging_cpu_time_leaves_out_waiting_and_keeps_work():
    """charge_cpu_time: a block is charged the lesser of wall and CPU time, so time spent off a core (a busy
    machine's wait for one, or a sleep, which is why it is for pure computation only) is not charged; work is."""
    def waits(seconds):
        time.sleep(seconds)

    def works(seconds):  # this thread's own CPU time: other threads of the process cannot end it early
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    assert timing._timed_block(waits, [(0.05,)])[0] >= 0.05
    assert timing._timed_block(waits, [(0.05,)], charge_cpu_time=True)[0] < 0.025  # other threads may run meanwhile
    assert timing._timed_block(works, [(0.05,)], charge_cpu_time=True)[0] >= 0.05
