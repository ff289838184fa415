"""Fair correctness items (issue 12): graded for what their prompt asks, and not fooled by a cache.

Each variant replaces one answer cell of a module's reference solution and is graded by the
trusted harness on just the items it feeds, twice: with the source's tests (hidden ones
included, as an instructor grades) and with the release's (the visible tests a student's
self-check runs), so a student learns of the fault before handing in. A wrong answer must fail
exactly the items named, each message holding its reason; a correct one must pass them.
"""

import nbformat
import pytest

from autograder import harness, skeleton
from course_helpers import reference_answered, release, source

pytestmark = pytest.mark.slow

def median_as(expression: str):
    """An edit of the reference's time_call: it returns ``expression`` (of its sorted ``times``) as the median."""
    return lambda given: "import statistics\n\n" + given.replace("    return float(median)", f"    return {expression}", 1)


EVEN_MEDIAN = "mean of the two middle ones"  # the visible test's message, which the self-check shows
WARMUP_CHECK = "warm-up calls slept 0.1 s and are not timed"  # the first check's message
# Right for the visible test's four repeats only: the hidden tests try six.
RIGHT_FOR_FOUR = "float(statistics.median(times) if len(times) == 4 else sorted(times)[{index}])"
SIX_REPEATS = {"hidden": "median of 6 times", "visible": None}



def held_up_before_first_call(given):
    """The reference's time_call, its first timed call of each run held up 20 ms after the clock started, as a
    busy machine can (a correct answer failed twice that way, in a busy pair, before the test counted the pause
    before the first call from when time_call was called). reference_answered checks that the edit applies."""
    return given.replace("        start = time.perf_counter()\n        fn(*args)\n",
                         "        start = time.perf_counter()\n        time.sleep(0 if times else 0.02)\n        fn(*args)\n", 1)


def paused_before_first_call(statistic):
    """Attack on the allowance before the first call: return ``statistic``, and pause 35 ms (under the 40 ms that
    makes the test run again) before the first timed call's clock starts, to widen that call's bound. One call's
    allowance lifts the median's bound by at most 30 ms; every other statistic is 73 ms or more away."""
    return lambda given: median_as(statistic)(given).replace(
        "        sync()\n        start = time.perf_counter()\n",
        "        time.sleep(0 if times else 0.035)\n        sync()\n        start = time.perf_counter()\n", 1)


# Attacks on the test's own evidence from inside time_call, each returning the lower middle: rewrite the sleeper's
# record of its calls (reached through fn's closure) so that they agree with it, or replace the test's check_median
# with one that passes everything. The test's namespace and its sleeper are out of the answer's reach.
FORGED_SPANS = """    result = float(torch.median(torch.tensor(times)))
    for cell in getattr(fn, "__closure__", None) or ():
        value = cell.cell_contents
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            value[:] = [(start, start + result) for start, _ in value]
    return result
"""
DISARMED_CHECK = """    globals()["check_median"] = lambda *args, **kwargs: None
    return float(torch.median(torch.tensor(times)))
"""


# Right for every new shape, then the first result of that shape forever after.
CACHE_BY_SHAPE_01 = """
_kept = {}


def pairwise_sq_dists(x, y):
    key = (tuple(x.shape), tuple(y.shape), x.dtype)
    if key not in _kept:
        squares = (x * x).sum(dim=1, keepdim=True) + (y * y).sum(dim=1)
        _kept[key] = (squares - 2 * x @ y.T).clamp_min(0)
    return _kept[key]
"""
CACHE_BY_SHAPE_03 = """
_kept = {}


def drift_soa(fields, dt, steps):
    if fields.shape not in _kept:
        position, velocity = fields[0:3], fields[3:6]
        for _ in range(steps):
            velocity[2] -= GRAVITY * dt
            position += velocity * dt
        _kept[fields.shape] = fields.copy()
    fields[...] = _kept[fields.shape]
    return fields
"""
CACHE_BY_SHAPE_04 = """
_kept = {}


def soft_clip(x):
    if x.shape not in _kept:
        knee = x * (1.0 - np.abs(x) / 4.0)
        _kept[x.shape] = np.where(x < -2.0, -1.0, np.where(x <= 2.0, knee, 1.0 + 0.01 * (x - 2.0)))
    return _kept[x.shape].copy()
"""

# variant: (module, answer cell, its code, {item it feeds: reason it fails, or None where it must pass});
# a reason may depend on whose tests grade it ({"hidden": ..., "visible": ...}).
VARIANTS = {
    # The three conventions for an even number of repeats: the spec asks for the mean of the two middle times.
    "time_call_lower_middle": ("01_gpu_basics", "time_call", median_as("float(torch.median(torch.tensor(times)))"),
                               {"test_time_call": EVEN_MEDIAN}),
    # The lower middle, its first four-repeat run disturbed as a busy machine can: 60 ms before each call and 100 ms
    # read late after the last. That lifts the lower middle into the bounds (it passed, once, in a CI run); the test
    # runs a disturbed schedule again, and the lower middle fails on the calm run.
    "time_call_lower_middle_disturbed_once": ("01_gpu_basics", "time_call", lambda given: "DISTURBED = []\n\n" + median_as(
        "float(torch.median(torch.tensor(times)))")(given).replace(
        "        sync()\n        start = time.perf_counter()\n        fn(*args)\n        sync()\n",
        "        once = repeats == 4 and not DISTURBED\n        time.sleep(0.06 if once else 0)\n"
        "        sync()\n        start = time.perf_counter()\n        fn(*args)\n        sync()\n"
        "        time.sleep(0.1 if once and len(times) == repeats - 1 else 0)\n").replace(
        "    times.sort()\n", "    if repeats == 4:\n        DISTURBED.append(True)\n    times.sort()\n"),
        {"test_time_call": EVEN_MEDIAN}),
    "time_call_held_up_before_first_call": ("01_gpu_basics", "time_call", held_up_before_first_call, {"test_time_call": None}),
    "time_call_upper_middle_paused_before_first_call": ("01_gpu_basics", "time_call", paused_before_first_call(
        "float(sorted(times)[len(times) // 2])"), {"test_time_call": EVEN_MEDIAN}),
    # The mean: the even count's check catches it; on a busy machine, a call held up in the first check (three equal
    # sleeps, whose mean is their median only when no call is held up) can lift it past that check's bound first.
    "time_call_mean_paused_before_first_call": ("01_gpu_basics", "time_call", paused_before_first_call(
        "float(sum(times) / len(times))"), {"test_time_call": (EVEN_MEDIAN, WARMUP_CHECK)}),
    "time_call_forged_spans": ("01_gpu_basics", "time_call", lambda given: given.replace("    return float(median)\n", FORGED_SPANS, 1),
                               {"test_time_call": EVEN_MEDIAN}),
    "time_call_disarmed_check": ("01_gpu_basics", "time_call", lambda given: given.replace("    return float(median)\n", DISARMED_CHECK, 1),
                                 {"test_time_call": EVEN_MEDIAN}),
    "time_call_upper_middle": ("01_gpu_basics", "time_call", median_as("float(sorted(times)[len(times) // 2])"),
                               {"test_time_call": EVEN_MEDIAN}),
    "time_call_statistics_median": ("01_gpu_basics", "time_call", median_as("float(statistics.median(times))"),
                                    {"test_time_call": None}),
    "time_call_lower_middle_past_four": ("01_gpu_basics", "time_call", median_as(RIGHT_FOR_FOUR.format(index="(len(times) - 1) // 2")),
                                         {"test_time_call": SIX_REPEATS}),
    "time_call_upper_middle_past_four": ("01_gpu_basics", "time_call", median_as(RIGHT_FOR_FOUR.format(index="len(times) // 2")),
                                         {"test_time_call": SIX_REPEATS}),
    # The speed item checks one fresh call, then every timed output: the kept results fail there.
    "cache_by_shape_01": ("01_gpu_basics", "pairwise_sq_dists", CACHE_BY_SHAPE_01,
                          {"test_pairwise_correct": "the shapes of the previous call", "test_pairwise_speed": "a timed output"}),
    "cache_by_shape_03": ("03_coalescing", "drift_soa", CACHE_BY_SHAPE_03, {"test_drift_soa_correct": "new particles of the same shape"}),
    "cache_by_shape_04": ("04_divergence", "soft_clip", CACHE_BY_SHAPE_04, {"test_soft_clip_correct": "101 other points"}),
}
TESTS = {"hidden": source, "visible": release}  # whose test cells grade the answer


def graded(variant: str, tests: str, tmp_path) -> dict[str, tuple[str, str]]:
    """grade_id -> (outcome, message) for ``variant``'s items, graded with the ``tests`` notebook's test cells."""
    module, cell, code, items = VARIANTS[variant]
    tests_nb, student_nb = nbformat.read(TESTS[tests](module), as_version=4), reference_answered(module, cell, code)
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = harness.grade(skeleton.make_plan(tests_nb, student_nb), workdir, only=set(items))
    return {item.grade_id: (item.outcome, item.message) for item in result.items}


@pytest.mark.parametrize("tests", sorted(TESTS))
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_is_graded_as_the_spec_says(variant, tests, tmp_path):
    items = VARIANTS[variant][3]
    results = graded(variant, tests, tmp_path)
    assert set(results) == set(items), results
    wrong = {}
    for grade_id, reason in items.items():
        reason = reason[tests] if isinstance(reason, dict) else reason
        outcome, message = results[grade_id]
        reasons = reason if isinstance(reason, tuple) else (reason,)  # a tuple: any of these checks may catch it
        if (outcome == "passed") != (reason is None) or (reason is not None and not any(one in message for one in reasons)):
            wrong[grade_id] = f"expected {'passed' if reason is None else f'failed with {reason!r}'}, got {outcome}: {message[:300]}"
    assert wrong == {}, wrong


def test_spec_pins_the_median_of_an_even_count():
    """The time_call question says which value an even number of repeats gives, in the release students read."""
    notebook = nbformat.read(release("01_gpu_basics"), as_version=4)
    [prompt] = [cell.source for cell in notebook.cells if cell.cell_type == "markdown" and "Write `time_call(" in cell.source]
    assert "even number, the **mean of the two middle times**" in prompt, prompt
    assert "`statistics.median`" in prompt and "`torch.median` returns the lower" in prompt, prompt


def _time_call_test_against(answer_edit, oversleep: float) -> str | None:
    """Run 01's time_call answer (the reference, or it edited by ``answer_edit``) and its full test cell in this
    process, with every sleep of 10 ms or more woken ``oversleep`` seconds late, as on a busy machine;
    return the test's AssertionError message, or None if it passed."""
    import time as real_time
    import types

    def late_sleep(seconds):
        real_time.sleep(seconds + (oversleep if seconds >= 0.01 else 0.0))

    notebook = (reference_answered("01_gpu_basics", "time_call", answer_edit) if answer_edit
                else nbformat.read(source("01_gpu_basics"), as_version=4))
    cells = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell.source for cell in notebook.cells}
    fake_time = types.SimpleNamespace(perf_counter=real_time.perf_counter, sleep=late_sleep)
    namespace = {"time": fake_time, "torch": __import__("torch"), "float": float, "check": __import__("gpucourse.check").check}
    exec(cells["time_call"], namespace)
    try:
        exec(cells["test_time_call"].replace("### BEGIN HIDDEN TESTS", "").replace("### END HIDDEN TESTS", ""), namespace)
    except AssertionError as error:
        return str(error)
    return None


def test_time_call_verdicts_do_not_depend_on_late_wakeups():
    """A busy machine wakes sleepers late (40 ms is common at a load of 4 per core): the test judges
    time_call against how long each call really slept, so the reference still passes and an answer
    that takes the lower middle of an even count still fails."""
    assert _time_call_test_against(None, oversleep=0.04) is None
    lower = median_as("float(torch.median(torch.tensor(times)))")
    message = _time_call_test_against(lower, oversleep=0.04)
    assert message is not None and EVEN_MEDIAN in message, message


@pytest.mark.parametrize("statistic", ["float(torch.median(torch.tensor(times)))", "float(sum(times) / len(times))"],
                         ids=["lower_middle", "mean"])
def test_time_call_gap_allowance_cannot_be_widened_by_the_answer(statistic):
    """Attack: return another statistic (the lower middle of an even count, the mean), and sleep 60 ms between
    calls (outside the timed region) so that the gaps around each call, and with them the bound, would grow by
    120 ms. The allowance for the time around a call is capped (60 ms) below the distance between the median
    and every other statistic the test's sleeps allow (73 ms or more): it still fails."""
    wrong = median_as(statistic)

    def widened(given):
        edited = wrong(given).replace("        sync()\n        start = time.perf_counter()",
                                      "        time.sleep(0.06)\n        sync()\n        start = time.perf_counter()", 1)
        assert edited != wrong(given), "the reference's time_call changed: update the attack"
        return edited

    message = _time_call_test_against(widened, oversleep=0.0)
    assert message is not None and "got" in message and "median" in message, message
