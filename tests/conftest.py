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
