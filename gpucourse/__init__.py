"""Helpers for the GPU Optimization for Deep Learning course.

Notebooks import what they need from here, so every lesson shares one tested copy of
device selection, honest timing, GPU facts and self-checks.
"""

from . import check, gpu_specs, plots, timing
from .devices import describe, device, device_class, gpu_or_explain, has_gpu, per_device, synchronize

__all__ = [
    "check",
    "describe",
    "device",
    "device_class",
    "gpu_or_explain",
    "gpu_specs",
    "has_gpu",
    "per_device",
    "plots",
    "synchronize",
    "timing",
]
__version__ = "0.1.0"
