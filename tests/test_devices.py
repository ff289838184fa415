import types

import pytest
import torch

import gpucourse
from gpucourse import devices


def test_default_device_follows_cuda_availability(no_device_override):
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert gpucourse.device().type == expected
    assert gpucourse.device_class() == expected


def test_env_override_selects_cpu(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_DEVICE", "cpu")
    assert gpucourse.device() == torch.device("cpu")
    assert not gpucourse.has_gpu()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised on a machine without CUDA")
def test_env_override_asking_for_missing_gpu_raises(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_DEVICE", "cuda")
    with pytest.raises(devices.NoGPUError, match="no CUDA device"):
        gpucourse.device()


@pytest.mark.parametrize("value, message", [("tpu9", "not a device torch knows"), ("meta", "supports 'cpu' and 'cuda'")])
def test_env_override_rejects_unsupported_devices(monkeypatch, value, message):
    monkeypatch.setenv("GPUCOURSE_DEVICE", value)
    with pytest.raises(ValueError, match=message):
        gpucourse.device()


def test_device_class_of_explicit_devices():
    assert gpucourse.device_class("cpu") == "cpu"
    assert gpucourse.device_class(torch.device("cuda", 0)) == "cuda"


def test_per_device_picks_the_value_of_this_class(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_DEVICE", "cpu")
    assert gpucourse.per_device(cpu=256, cuda=8192) == 256


def test_gpu_or_explain_says_what_a_gpu_would_show(monkeypatch, capsys):
    monkeypatch.setenv("GPUCOURSE_DEVICE", "cpu")
    assert gpucourse.gpu_or_explain("pinned copies are faster") is False
    printed = capsys.readouterr().out
    assert "needs a CUDA GPU" in printed and "pinned copies are faster" in printed


def test_describe_names_the_cpu_and_threads(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_DEVICE", "cpu")
    text = gpucourse.describe()
    assert text.startswith("CPU ") and f"{torch.get_num_threads()} torch threads" in text


def _fake_cache(root, index, level, kind, size):
    folder = root / f"index{index}"
    folder.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size)):
        (folder / name).write_text(f"{value}\n")


def test_cpu_cache_bytes_reads_data_caches_per_level_from_sysfs(tmp_path):
    """Linux's sysfs layout: instruction caches are skipped, K and M suffixes are binary units."""
    for index, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "64K"), (2, "Unified", "1024K"), (3, "Unified", "32M")]):
        _fake_cache(tmp_path, index, level, kind, size)
    assert devices.cpu_cache_bytes(tmp_path) == {1: 32 * 2**10, 2: 2**20, 3: 32 * 2**20}


def test_cpu_cache_bytes_skips_an_unreadable_entry(tmp_path, monkeypatch):
    _fake_cache(tmp_path, 0, 2, "Unified", "512K")
    _fake_cache(tmp_path, 1, 3, "Unified", "lots")
    monkeypatch.setattr(devices, "_sysctl_cache_bytes", lambda: {9: 1})  # must not be asked: sysfs answered
    assert devices.cpu_cache_bytes(tmp_path) == {2: 512 * 2**10}


def test_cpu_cache_bytes_asks_sysctl_where_there_is_no_sysfs(tmp_path, monkeypatch):
    """macOS: sysctl reports hw.l1dcachesize and hw.l2cachesize, and no L3 on Apple's chips (0 or an error)."""
    answers = {"hw.l1dcachesize": "65536\n", "hw.l2cachesize": "4194304\n", "hw.l3cachesize": "sysctl: unknown oid\n"}
    monkeypatch.setattr(devices.subprocess, "run", lambda command, **kwargs: types.SimpleNamespace(stdout=answers[command[-1]]))
    assert devices.cpu_cache_bytes(tmp_path / "absent") == {1: 65536, 2: 4 * 2**20}


def test_mkl_unary_kernels_are_settled_on_import(monkeypatch):
    """Importing gpucourse calls each MKL-backed unary op once on one element of each float type, on one thread,
    before a notebook's first concurrent call could run a low-accuracy kernel (pytorch/pytorch#188792)."""
    import inspect

    assert "\nsettle_mkl_unary_kernels()\n" in inspect.getsource(devices), "gpucourse.devices no longer settles MKL's kernels on import"
    calls = []
    for name in devices.MKL_UNARY_OPS:
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda x, _real=real, _name=name: calls.append((_name, x.dtype, x.numel())) or _real(x))
    devices.settle_mkl_unary_kernels()
    expected = [(name, dtype, 1) for dtype in (torch.float32, torch.float64) for name in devices.MKL_UNARY_OPS]
    assert calls == (expected if torch.backends.mkl.is_available() else [])
