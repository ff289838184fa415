"""gpucourse.loading: the latency-bound loader that measures a prefetching generator, run in this process.

(Across the grading boundary, the same runs are driven by autograder.loading: tests/adversarial/test_kernel_grading.py
grades prefetch answers that way.)"""

import threading

import pytest

from gpucourse import loading


def one_by_one(loader_fn, items, depth=2):
    for item in items:
        yield loader_fn(item)


def ahead_in_a_thread(loader_fn, items, depth=2):
    """A small prefetcher for these tests: one thread, up to ``depth`` loads queued, stopped on close."""
    items, stop = iter(items), threading.Event()
    results, ready = {}, threading.Condition()

    def work():
        for index, item in enumerate(items):
            with ready:
                ready.wait_for(lambda: stop.is_set() or len(results) < depth)
                if stop.is_set():
                    return
            try:
                value = ("ok", loader_fn(item))
            except Exception as error:  # noqa: BLE001 - handed to the consumer
                value = ("error", error)
            with ready:
                results[index] = value
                ready.notify_all()
        with ready:
            results["end"] = None
            ready.notify_all()

    thread = threading.Thread(target=work)
    thread.start()
    try:
        index = 0
        while True:
            with ready:
                ready.wait_for(lambda wanted=index: wanted in results or "end" in results)
                if index not in results:
                    return
                kind, value = results.pop(index)
                ready.notify_all()
            if kind == "error":
                raise value
            yield value
            index += 1
    finally:
        stop.set()
        with ready:
            ready.notify_all()
        thread.join()


def test_one_by_one_pays_every_load_and_every_compute_in_turn():
    plan, run = loading.run_loader(one_by_one, range(5), load_seconds=0.01, compute_seconds=0.01)
    assert run.in_order(plan) and len(run.received) == 5 and run.error is None
    assert run.loads == 5 and run.most_ahead == 1
    assert run.seconds >= 5 * 0.02


def test_a_prefetcher_runs_ahead_within_its_depth():
    plan, run = loading.run_loader(ahead_in_a_thread, range(8), load_seconds=0.002, compute_seconds=0.01, depth=3)
    assert run.in_order(plan) and len(run.received) == 8
    assert 2 <= run.most_ahead <= 4
    assert run.seconds >= 8 * 0.01  # the compute is never skipped


def test_a_loaders_error_reaches_the_consumer_at_its_item():
    plan, run = loading.run_loader(ahead_in_a_thread, range(6), load_seconds=0.001, compute_seconds=0.001, fail_at=4)
    assert run.error == "ValueError: could not load item 4" and len(run.received) == 4 and run.in_order(plan)


def test_stopping_early_counts_the_threads_left():
    _, run = loading.run_loader(ahead_in_a_thread, range(20), load_seconds=0.001, compute_seconds=0.001, stop_after=3)
    assert len(run.received) == 3 and run.threads_left == 0

    def leaves_a_thread(loader_fn, items, depth=2):
        threading.Thread(target=threading.Event().wait, args=(3,), daemon=True).start()
        yield from one_by_one(loader_fn, items)

    _, run = loading.run_loader(leaves_a_thread, range(5), load_seconds=0.001, compute_seconds=0.001, stop_after=2)
    assert run.threads_left == 1


def test_loads_cannot_be_guessed():
    plan = loading.LoadPlan(range(3), 0.0, 0.0)
    assert len({plan.loaded(item) for item in range(3)}) == 3 and loading.LoadPlan(range(3), 0.0, 0.0).tokens != plan.tokens
    with pytest.raises(ValueError, match="could not load item 1"):
        loading.LoadPlan(range(3), 0.0, 0.0, fail_at=1).loaded(1)


def test_compare_loaders_measures_the_overlap_in_alternating_rounds():
    # 20 ms steps: long against a busy machine's wake-up delays, which both loops pay alike.
    result = loading.compare_loaders(one_by_one, ahead_in_a_thread, range(6), load_seconds=0.02, compute_seconds=0.02, rounds=3)
    assert result.rounds == 3 and 1.2 < result.speedup < 2.2, result


def test_compare_loaders_refuses_a_wrong_candidate():
    def drops_the_last(loader_fn, items, depth=2):
        yield from list(one_by_one(loader_fn, items))[:-1]

    with pytest.raises(AssertionError, match="candidate: 3 of 4 items"):
        loading.compare_loaders(one_by_one, drops_the_last, range(4), load_seconds=0.001, compute_seconds=0.001, rounds=1)
