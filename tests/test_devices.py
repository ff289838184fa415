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
