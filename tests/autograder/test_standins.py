"""The stand-ins for a student's function: a call through `check.in_place` brings back what it wrote into its tensors."""

import pytest

from autograder import harness, sandbox, skeleton
from autograder.skeleton import Plan

pytestmark = pytest.mark.slow

LIMITS = sandbox.Limits(cell_seconds=20, item_seconds=60, notebook_seconds=120, memory_bytes=4 * 1024**3)
CONTEXT = "import torch\nfrom gpucourse import check\n"
ANSWERS = ("def fill(x, value):\n    x.fill_(value)\n    return x.sum()\n\n\n"
           "def grow(x):\n    x.resize_(5)\n    return x\n")
WRITES_BACK = """
x = torch.zeros(3)
total = check.in_place(fill)(x, 2.0)
assert x.tolist() == [2.0, 2.0, 2.0] and float(total) == 6.0, (x, total)
y = torch.zeros(3)
fill(y, 2.0)
assert y.tolist() == [0.0, 0.0, 0.0], "a plain call runs on a copy of its arguments"
"""
CHANGES_SHAPE = "check.in_place(grow)(torch.zeros(3))\n"


def test_a_call_in_place_writes_back_and_a_changed_shape_fails_the_item(tmp_path):
    items = [skeleton.TestItem("test_writes_back", 1.0, WRITES_BACK), skeleton.TestItem("test_changes_shape", 1.0, CHANGES_SHAPE)]
    plan = Plan(context=[CONTEXT], student_cells=[ANSWERS], items=items, api_names=["fill", "grow"])
    (tmp_path / "work").mkdir()
    writes_back, changes_shape = harness.grade(plan, tmp_path / "work", LIMITS).items
    assert writes_back.outcome == "passed", writes_back.message
    assert changes_shape.outcome == "failed" and "grow: argument 0 came back changed in shape or type" in changes_shape.message, changes_shape.message
