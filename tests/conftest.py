"""Shared fixtures: a headless matplotlib and a CPU-only view of the machine unless asked otherwise."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def no_device_override(monkeypatch):
    """Tests of the default device choice must not see a GPUCOURSE_DEVICE set by the caller."""
    monkeypatch.delenv("GPUCOURSE_DEVICE", raising=False)


@pytest.fixture(scope="session")
def simulated_cuda():
    """numba.cuda in its simulator (what CI and most students have); skipped where numba chose a GPU."""
    from gpucourse import kernels

    if not kernels.use_gpu_or_simulator(verbose=False).simulator:
        pytest.skip("numba.cuda runs on a GPU in this process; the simulator test needs a CPU-only session")
    from numba import cuda

    return cuda
