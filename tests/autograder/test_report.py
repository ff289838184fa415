"""autograder.report: the speedups a graded notebook printed, gathered into one report."""

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder import report


def _notebook(text):
    cell = new_code_cell("print(...)", outputs=[new_output("stream", name="stdout", text=text)])
    return new_notebook(cells=[cell])


def test_speedup_lines_are_extracted():
    notebook = _notebook("hello\nvectorised: 12.0× faster (measured on CPU)\n")
    assert report.speedup_lines(notebook) == ["vectorised: 12.0× faster (measured on CPU)"]


def test_main_reports_each_notebook(tmp_path, capsys):
    nbformat.write(_notebook("x: 3.0× faster\n"), tmp_path / "a.ipynb")
    nbformat.write(_notebook("nothing\n"), tmp_path / "b.ipynb")
    assert report.main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "- a:\n    x: 3.0× faster" in printed and "- b:\n    (no speedup printed)" in printed


def test_main_without_notebooks_fails(tmp_path):
    assert report.main([str(tmp_path)]) == 1
