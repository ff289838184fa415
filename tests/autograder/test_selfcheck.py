"""The self-check's table (autograder.selfcheck.report): what a student reads after `gpucourse check`."""

from autograder import harness, selfcheck
from autograder.outcomes import Outcome


def result(*items):
    return harness.SubmissionResult(list(items), "CPU (test)", "cpu", "namespaces")


def test_columns_line_up_whatever_the_length_of_an_items_id():
    long_id = "test_prefetch_errors_and_cleanup"
    lines = selfcheck.report(result(harness.ItemResult("test_short", 1, Outcome.PASSED, 1.0),
                                    harness.ItemResult(long_id, 2, Outcome.FAILED, 0.0, "AssertionError: no"),
                                    harness.ItemResult("test_gpu", 2, Outcome.NEEDS_GPU, 0.0))).splitlines()
    header, short, long_row, gpu, total = lines[:5]
    points_column = header.index("points") + len("points")
    for row, points in ((short, "1/1"), (long_row, "0/2"), (gpu, "-")):
        assert row[:points_column].rstrip().endswith(points) and row[points_column:].startswith("  "), row
    assert long_row.startswith(long_id + " ") and total.startswith("total (visible tests)")
    assert "1/3" in total and "2 more points will be graded on a GPU" in total
