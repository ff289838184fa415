"""gpucourse.check: the comparisons and speed assertions a test cell calls, and what a student is shown when one fails."""

import math
import sys

import pytest
import torch

from gpucourse import check
from gpucourse.timing import SpeedResult


def test_assert_close_accepts_values_within_tolerance():
    expected = torch.tensor([1.0, 2.0, float("nan")])
    check.assert_close(expected + 1e-7, expected)


@pytest.mark.parametrize(
    "actual, message",
    [
        ([1.0, 2.0], "expected a torch.Tensor, got list"),
        (torch.zeros(3, 2), r"expected shape \(2, 3\), got \(3, 2\)"),
        (torch.zeros(2, 3, dtype=torch.float64), "expected dtype torch.float32, got torch.float64"),
    ],
)
def test_assert_close_explains_structural_mismatches(actual, message):
    with pytest.raises(AssertionError, match=message):
        check.assert_close(actual, torch.zeros(2, 3), name="f(x)")


def test_assert_close_reports_the_first_wrong_value():
    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 0.5
    with pytest.raises(AssertionError, match=r"1 of 6 values differ.*index \(1, 2\): got 0.5, expected 0"):
        check.assert_close(actual, expected)


def test_assert_close_treats_unexpected_nan_as_wrong():
    with pytest.raises(AssertionError, match="got nan"):
        check.assert_close(torch.tensor([float("nan")]), torch.tensor([1.0]))


def test_assert_equal_and_approx():
    check.assert_equal(48, 48)
    with pytest.raises(AssertionError, match="expected 48, got 47"):
        check.assert_equal(47, 48, name="flops")
    with pytest.raises(AssertionError, match="expected 1, got True"):
        check.assert_equal(True, 1)
    check.assert_approx(0.1 + 0.2, 0.3)
    with pytest.raises(AssertionError, match="expected 0.3, got 0.31"):
        check.assert_approx(0.31, 0.3)
    with pytest.raises(AssertionError, match="expected a number, got str"):
        check.assert_approx("0.3", 0.3)


def test_required_speedup_uses_this_device_class(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_DEVICE", "cpu")
    assert check.required_speedup({"cpu": 4.0, "cuda": 10.0}) == 4.0
    with pytest.raises(KeyError, match="no speed threshold for device class 'cpu'"):
        check.required_speedup({"cuda": 10.0})


def _result(speedup):
    return SpeedResult(speedup, speedup * 0.9, speedup * 1.1, 1e-3, 1e-3 / speedup, 15, "test CPU", 1)


def test_assert_speedup_passes_and_reports(capsys):
    check.assert_speedup(_result(5.0), 4.0, name="vectorised")
    assert "5.0× faster" in capsys.readouterr().out


def test_assert_speedup_failure_gives_measured_and_required():
    with pytest.raises(AssertionError, match="measured 1.4× faster, need 3×"):
        check.assert_speedup(_result(1.4), 3.0)
    with pytest.raises(AssertionError):
        check.assert_speedup(_result(math.nan), 3.0)


def test_a_measured_speedup_short_once_is_measured_again():
    """A first measurement under the threshold (a burst of load) gets a second; the second counts."""
    results = iter([_result(1.1), _result(1.8)])
    check.assert_measured_speedup(lambda: next(results), 1.3, name="fused")
    assert next(results, None) is None, "measured twice"


def test_a_measured_speedup_short_twice_fails_as_a_timing_failure():
    calls = []
    with pytest.raises(check.TimingFailure, match="measured 1.1× faster, need 1.3×"):
        check.assert_measured_speedup(lambda: calls.append(1) or _result(1.1), 1.3, name="fused")
    assert len(calls) == 2
    check.assert_measured_speedup(lambda: calls.append(1) or _result(2.0), 1.3)
    assert len(calls) == 3, "a speedup that passes is measured once"


def test_assert_close_compares_numpy_arrays():
    import numpy as np

    check.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]))
    with pytest.raises(AssertionError, match="expected a numpy array, got list"):
        check.assert_close([1.0, 2.0], np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match="1 of 2 values differ"):
        check.assert_close(np.array([1.0, 3.0]), np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match="expected dtype"):
        check.assert_close(np.array([1, 2]), np.array([1.0, 2.0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_assert_close_decides_at_the_bound_as_the_exact_float64_comparison(dtype):
    """The quick look (half the tolerance, in the tensors' own dtype) may only accept what the exact
    comparison accepts: values just inside and just outside |got - want| <= atol + rtol * |want|."""
    want = torch.tensor([1.0, 100.0, -3.0], dtype=torch.float64)
    rtol, atol = 1e-2, 1e-3
    bound = atol + rtol * want.abs()
    inside, outside = (want + 0.97 * bound).to(dtype), (want + 1.03 * bound).to(dtype)
    check.assert_close(inside, want.to(dtype), rtol=rtol, atol=atol)
    with pytest.raises(AssertionError, match=r"3 of 3 values differ"):
        check.assert_close(outside, want.to(dtype), rtol=rtol, atol=atol)



def test_assert_raises_passes_on_the_error_and_says_when_none_came():
    check.assert_raises(ValueError, int, "x", name="not a number")
    with pytest.raises(AssertionError, match="a number: expected ValueError, got no error"):
        check.assert_raises(ValueError, int, "3", name="a number")
    with pytest.raises(TypeError):  # another error is the answer's own failure, shown as it is
        check.assert_raises(ValueError, int, None, name="nothing")


def test_answers_only_runs_here_and_holds_the_call_to_its_budget():
    import time

    def drive(seconds):
        end = time.process_time() + seconds  # busy: sleeping costs no CPU time, and the lesser of the two counts
        while time.process_time() < end:
            pass
        return seconds

    assert check.answers_only(drive, "answer", seconds=5)(0.0) == 0.0
    with pytest.raises(AssertionError, match=r"drive took 0\.\d s with your answer; the budget is 0.05 s"):
        check.answers_only(drive, "answer", seconds=0.05)(0.2)
    assert check.answers_only(time.sleep, "answer", seconds=0.05)(0.2) is None  # waiting is not the answer's time here


def test_a_candidate_slower_than_its_baseline_is_said_to_be_as_fast_not_faster():
    """Module 09 holds an LSTM to a fraction of the library's speed: 0.21× is "as fast", with two digits."""
    from gpucourse.timing import SpeedResult

    result = SpeedResult(0.213, 0.18, 0.24, 1e-3, 4.7e-3, 9, "CPU x", 1)
    assert str(result).startswith("0.21× as fast (middle half of rounds 0.18–0.24×")
    with pytest.raises(check.TimingFailure, match=r"measured 0.21× as fast, need 0.3×"):
        check.assert_speedup(result, 0.3, name="lstm")


# --- Untouched answers, and the tracebacks a student reads -------------------------------------------


def _stub(x, y=2):
    """A release's stub, as autograder.build.name_stubs leaves it."""
    raise NotImplementedError("f is not written yet (Question 1): replace this line with your solution")


def _written(x, y=2):
    return x + y


class _Kernel:
    """What @triton.jit (``fn``) or numba's @njit (``py_func``) returns, as far as check.written looks."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)


@pytest.mark.parametrize("kernel", [_stub, _Kernel(fn=_stub), _Kernel(py_func=_stub)])
def test_written_raises_a_stubs_own_error(kernel):
    with pytest.raises(NotImplementedError, match=r"^f is not written yet \(Question 1\)") as raised:
        check.written(kernel)
    assert raised.traceback[-1].name == "_stub"  # raised by the stub's own line, which the student sees


@pytest.mark.parametrize("kernel", [_written, _Kernel(fn=_written), len, _Kernel()])
def test_written_returns_anything_else_as_it_is(kernel):
    assert check.written(kernel) is kernel


def _through_the_course():
    """A failure raised inside gpucourse (check.py), as a test cell's failed check is, chained to one raised here."""
    try:
        raise ValueError("the cause, raised outside the course")
    except ValueError:
        check.assert_equal(1, 2, name="x")


def _frames(tb) -> list[str]:
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


def test_course_frames_are_left_out_of_what_a_student_is_shown():
    try:
        _through_the_course()
    except AssertionError as error:
        failure = error
    assert "assert_equal" in _frames(failure.__traceback__)

    class Shell:
        def showtraceback(self, exc_tuple, tb_offset=None, running_compiled_code=False):
            self.shown = exc_tuple

    shell = Shell()
    check.show_without_course_frames(shell, AssertionError, failure, failure.__traceback__)
    etype, value, tb = shell.shown
    assert value is failure and _frames(tb) == ["test_course_frames_are_left_out_of_what_a_student_is_shown", "_through_the_course"]
    assert _frames(value.__context__.__traceback__) == ["_through_the_course"]  # the chained error keeps its own frame


def test_the_filter_is_installed_only_in_an_ipython_shell_without_another_handler(monkeypatch):
    class Shell:
        custom_exceptions = ()

        def set_custom_exc(self, exceptions, handler):
            self.custom_exceptions, self.CustomTB = exceptions, handler

    class IPython:
        shell = None

        @classmethod
        def get_ipython(cls):
            return cls.shell

    monkeypatch.setitem(sys.modules, "IPython", IPython)
    monkeypatch.delenv(check.FULL_TRACEBACKS_ENV, raising=False)
    assert not check.hide_course_frames_in_ipython()  # no shell: a plain Python process (a grader's worker)
    IPython.shell = Shell()
    assert check.hide_course_frames_in_ipython() and IPython.shell.custom_exceptions == (Exception,)
    assert check.hide_course_frames_in_ipython()  # again (gpucourse reloaded): still ours, installed again
    IPython.shell = Shell()
    IPython.shell.custom_exceptions, IPython.shell.CustomTB = (KeyError,), print
    assert not check.hide_course_frames_in_ipython()  # someone else's handler stays
    IPython.shell = Shell()
    monkeypatch.setenv(check.FULL_TRACEBACKS_ENV, "1")
    assert not check.hide_course_frames_in_ipython()  # staff debugging the course see every frame


def test_memory_capped_in_a_notebook_measures_numpy_and_refuses_a_call_past_its_budget():
    """Outside grading, memory_capped measures each call with tracemalloc (NumPy's arrays are seen)."""
    import numpy as np

    def square(n):
        return float(np.ones((n, n), dtype=np.float32).sum())

    def linear(n):
        return float(np.ones((n, 8), dtype=np.float32).sum())

    budget = 2**20  # 1 MiB: a 1024 x 1024 float32 array is 4 MiB
    assert check.memory_capped(linear, budget)(1024) == 8192.0
    with pytest.raises(AssertionError, match=r"square allocated 4\.0 MiB at its peak, more than its budget of 1\.0 MiB"):
        check.memory_capped(square, budget)(1024)
