"""Tests of gpucourse.wording: the words for numbers that every lecture's sentence functions share.
(binary_bytes is tested where lectures first met it, tests/gpucourse/test_plots.py, through plots' re-export.)"""

import pytest

from gpucourse import wording


def test_ms_and_megabytes_keep_three_significant_digits():
    assert [wording.ms(s) for s in (7.114e-3, 0.2671e-3, 22.34e-3, 2.0)] == ["7.11 ms", "0.267 ms", "22.3 ms", "2e+03 ms"]
    assert [wording.megabytes(n) for n in (1_048_576, 8e6, 0.5e6)] == ["1.05 MB", "8 MB", "0.5 MB"]


@pytest.mark.parametrize("a, b, within, tied", [
    (1.0, 1.5, 1.5, True),  # the boundary is a tie
    (1.0, 1.51, 1.5, False),
    (1.51, 1.0, 1.5, False),  # either order
    (0.0, 0.0, 1.01, True),
    (0.0, 1e-9, 1.5, False),
    (-1.0, -1.05, 1.1, True),
    (-0.01, 0.01, 1.1, False),  # opposite signs (an MMD² estimate can be slightly negative)
])
def test_same_is_the_larger_within_a_factor_of_the_smaller(a, b, within, tied):
    assert wording.same(a, b, within) is tied


@pytest.mark.parametrize("a, expected", [(1.6, "more"), (1.5, "tie"), (1.0, "tie"), (0.75, "tie"), (0.5, "less")])
def test_choose_reads_a_ratio_against_one_with_the_tie_rule(a, expected):
    assert wording.choose(a, 1, 1.5, more="more", tie="tie", less="less") == expected


@pytest.mark.parametrize("a, b, expected", [(2.0, 1.0, "2.00× as long as"), (1.0, 1.75, "1.75× faster than"), (1.0, 1.005, "the same as")])
def test_as_long_as_says_longer_faster_or_the_same(a, b, expected):
    assert wording.as_long_as(a, b, 1.01) == expected


def test_listed_joins_names_with_and_and_counts_past_most():
    assert [wording.listed(names) for names in (["a"], ["a", "b"], ["a", "b", "c"])] == ["a", "a and b", "a, b and c"]
    assert wording.listed(list("abcdefg")) == "a, b, c, d and 3 more"
    assert wording.listed(list("abcdefg"), most=None) == "a, b, c, d, e, f and g"
    with pytest.raises(ValueError, match="at least one"):
        wording.listed([])


def test_cannot_tell_gives_the_reason_and_asks_for_another_run():
    assert wording.cannot_tell("the rounds disagree") == "the rounds disagree, so this run cannot tell; run the cell again"
