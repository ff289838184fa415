"""Every lecture and every reference solution runs top to bottom on this machine."""

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.build import REPO_ROOT, assignment_sources, lecture_sources

# Seconds a notebook may take on CI's 2-core CPU machine (the design's budget per lecture).
CPU_BUDGET_SECONDS = {"01_gpu_basics": 120}
DEFAULT_BUDGET_SECONDS = 180
NOTEBOOKS = [source.with_suffix(".ipynb") for source in lecture_sources(REPO_ROOT) + assignment_sources(REPO_ROOT)]


def execute(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    start = time.perf_counter()
    client.execute()
    return notebook, time.perf_counter() - start


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_notebook_runs_top_to_bottom(path, tmp_path):
    notebook, seconds = execute(path, tmp_path)
    keep = os.environ.get("GPUCOURSE_EXECUTED_DIR")  # scripts/gpu_check.sh keeps the outputs for its report
    if keep:
        nbformat.write(notebook, Path(keep) / path.name)
    budget = CPU_BUDGET_SECONDS.get(path.stem, DEFAULT_BUDGET_SECONDS)
    print(f"{path.name}: {seconds:.1f} s")
    assert seconds < budget, f"{path.name} took {seconds:.0f} s, over its {budget} s budget"
    errors = [output for cell in notebook.cells for output in cell.get("outputs", []) if output.output_type == "error"]
    assert errors == []
