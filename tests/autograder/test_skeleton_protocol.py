"""Unit tests: rebuilding a submission from the source, and the worker→harness encoding."""

import os
import pickle

import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder import protocol, skeleton
from autograder.session import rebuild
from autograder.worker import to_plain


def _cell(source, grade_id=None, cell_id=None, **nbgrader):
    cell = new_code_cell(source, id=cell_id or grade_id or "c")
    if grade_id:
        cell.metadata["nbgrader"] = {"grade_id": grade_id, **nbgrader}
    return cell


@pytest.fixture
def source():
    return new_notebook(cells=[
        _cell("import math", "imports", locked=True),
        _cell("def f(x):\n    return 2 * x", "answer", solution=True),
        _cell("assert f(2) == 4\n### BEGIN HIDDEN TESTS\nassert f(3) == 6\n### END HIDDEN TESTS", "test_f", grade=True, points=3),
    ])


def test_plan_takes_tests_from_the_source_and_answers_from_the_student(source):
    student = new_notebook(cells=[
        _cell("import os  # edited locked cell", "imports", locked=True),
        _cell("def f(x):\n    return x + x", "answer", solution=True),
        _cell("HELPER = 1", cell_id="mine"),
        new_markdown_cell("assert True", id="test_f", metadata={"nbgrader": {"grade_id": "test_f", "grade": True}}),
    ])
    plan = skeleton.make_plan(source, student)
    assert [item.grade_id for item in plan.items] == ["test_f"]
    assert "BEGIN HIDDEN TESTS" in plan.items[0].source and plan.items[0].points == 3
    assert plan.context == ["import math"]
    assert plan.student_cells == ["import math", "def f(x):\n    return x + x", "HELPER = 1"]
    assert plan.api_names == ["f"]


def test_answers_may_call_the_setup_functions_the_reference_answers_call():
    """Plan.answer_helpers: 08's pair is a helper its conv2d_im2col uses; 09's lstm_forward_naive, a whole LSTM
    that no reference answer calls, is not, so the gate keeps a gated answer from handing it the work."""
    source = new_notebook(cells=[
        _cell("def pair(v):\n    return (v, v)\n\ndef naive(x):\n    return x", "setup", locked=True),
        _cell("def f(x, s):\n    return pair(s), g(x)", "answer", solution=True),
        _cell("def g(x):\n    return x", "other", solution=True),
    ])
    assert skeleton.make_plan(source, source).answer_helpers == ["pair"]


def test_free_names_are_what_a_cell_reads_and_never_binds():
    cell = ("import torch\n\ndef forward(x, h):\n    out = []\n    for x_t in x:\n        h = lstm_cell(x_t, h)\n"
            "        out.append(h)\n    return torch.stack([y for y in out]), LIMIT\n")
    assert skeleton.free_names(cell) == ["lstm_cell", "LIMIT"]
    assert skeleton.free_names("def broken(:") == []


def test_split_answer_cells_are_kept_in_order_and_missing_answers_noted(source):
    student = new_notebook(cells=[_cell("def g():\n    pass", "answer", "a1", solution=True), _cell("f = g", "answer", "a2", solution=True)])
    assert skeleton.make_plan(source, student).student_cells[1:] == ["def g():\n    pass", "f = g"]
    empty = skeleton.make_plan(source, new_notebook(cells=[]))
    assert empty.notes == ["answer cell 'answer' is missing from the submission"]


def test_each_cell_the_worker_runs_is_named_as_the_student_finds_it(source):
    """Answers by what they define, their question and grade_id; other cells by their place among all the
    student's cells (markdown included, as JupyterLab counts them) and their first line."""
    source.cells.insert(1, new_markdown_cell("## Question 1: doubling (3 points)\n\n### A hint", id="q1"))
    student = new_notebook(cells=[
        new_markdown_cell("# My notes", id="notes"),
        _cell("import math", "imports", locked=True),
        new_markdown_cell("## Question 1: doubling (3 points)", id="q1"),
        _cell("def f(x):\n    return x + x\n\ndef g(x):\n    return x", "answer", solution=True),
        _cell("\n# try it out, on a few numbers first, then on a really long list of them\nf(2)", cell_id="mine"),
    ])
    plan = skeleton.make_plan(source, student)
    assert plan.cell_origins == [
        skeleton.CellOrigin("cell 2 of your notebook (`import math`)"),
        skeleton.CellOrigin("the cell defining `f`, `g` (Question 1, grade_id answer)", ("f", "g"), "Question 1"),
        skeleton.CellOrigin("cell 5 of your notebook (`# try it out, on a few numbers first, then on a really long…`)"),
    ]
    assert [item.question for item in plan.items] == ["Question 1"], "a test belongs to the question it sits under"
    source.cells.insert(2, new_markdown_cell("## Background", id="background"))
    assert skeleton.make_plan(source, student).cell_origins[1].label == "the cell defining `f`, `g` (grade_id answer)"


def test_normalized_notebook_has_the_release_cells_with_the_students_answers(source):
    student = new_notebook(cells=[_cell("def f(x):\n    return 0", "answer", solution=True), _cell("x = 1", cell_id="extra")])
    normalized = skeleton.normalized_notebook(source, student)
    assert [cell.get("id") for cell in normalized.cells] == ["imports", "answer", "answer-extra-0", "test_f"]
    assert normalized.cells[1].source == "def f(x):\n    return 0"
    assert normalized.cells[3].source == source.cells[2].source


def test_replies_round_trip_plain_data():
    class Sneaky(float):
        def __lt__(self, other):
            return True

    value = {"x": torch.arange(6.0).reshape(2, 3).T, "n": 3, "s": "ok", "t": (1.5, None), "d": torch.float64, "f": Sneaky(2.0)}
    reply = (protocol.Reply.RETURN, to_plain(value))
    decoded = rebuild(protocol.decode_from_worker(protocol.encode_for_harness(reply))[1])
    assert torch.equal(decoded["x"], torch.arange(6.0).reshape(2, 3).T) and decoded["x"].shape == (3, 2)
    assert decoded["t"] == (1.5, None) and decoded["d"] is torch.float64 and decoded["n"] == 3
    assert type(decoded["f"]) is float and not decoded["f"] < 1.0


def test_numpy_arrays_namedtuples_and_properties_come_back_as_they_were():
    import collections
    from dataclasses import dataclass

    import numpy as np

    Point = collections.namedtuple("Point", "x y")

    @dataclass
    class Answer:
        warps: int

        @property
        def half(self):
            return self.warps / 2

    value = {"a": np.arange(6, dtype=np.float32).reshape(2, 3).T, "empty": np.zeros((0, 3)), "p": Point(1, np.zeros(0)),
             "answer": Answer(8)}
    decoded = rebuild(protocol.decode_from_worker(protocol.encode_for_harness((protocol.Reply.RETURN, to_plain(value))))[1])
    assert isinstance(decoded["a"], np.ndarray) and decoded["a"].dtype == np.float32
    np.testing.assert_array_equal(decoded["a"], np.arange(6, dtype=np.float32).reshape(2, 3).T)
    assert decoded["empty"].shape == (0, 3)
    assert decoded["p"].x == 1 and decoded["p"].y.shape == (0,)
    assert decoded["answer"].warps == 8 and decoded["answer"].half == 4.0


def test_tensor_subclasses_are_refused():
    class Lazy(torch.Tensor):
        pass

    with pytest.raises(TypeError, match="tensor subclass"):
        to_plain(torch.ones(2).as_subclass(Lazy))


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_replies_that_would_run_code_are_refused():
    with pytest.raises(ValueError, match="not plain data"):
        protocol.decode_from_worker(pickle.dumps(("return", _Exploit())))


def test_frames_survive_a_pipe():
    read_end, write_end = os.pipe()
    protocol.write_frame(write_end, b"hello")
    os.close(write_end)
    assert protocol.read_frame(read_end) == b"hello"
    with pytest.raises(protocol.ChannelClosed):
        protocol.read_frame(read_end)
