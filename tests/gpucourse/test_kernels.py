"""Tests of gpucourse.kernels: choosing the GPU or numba's simulator, and explaining failures."""

import importlib.util
import os
import subprocess
import sys

import pytest

from gpucourse import kernels


def _choose_in_fresh_process(env_setup: str, then: str = "") -> str:
    """Run use_gpu_or_simulator in a new interpreter (numba decides once per process), then ``then``."""
    code = (f"import os\n{env_setup}\nfrom gpucourse import kernels\nmode = kernels.use_gpu_or_simulator()\n"
            f"print('SIM', mode.simulator, kernels.simulator_active())\n{then}")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_cpu_request_chooses_the_simulator_and_says_why():
    out = _choose_in_fresh_process("os.environ['GPUCOURSE_DEVICE'] = 'cpu'; os.environ.pop('NUMBA_ENABLE_CUDASIM', None)")
    assert "SIM True True" in out
    assert "GPUCOURSE_DEVICE=cpu" in out and "simulator" in out


def test_the_simulator_is_chosen_even_after_numba_itself_was_imported():
    """numba reads NUMBA_ENABLE_CUDASIM when it is imported (a notebook's `import numba` for @njit, say):
    choosing the simulator afterwards must still make numba.cuda the simulator, and kernels must run."""
    out = _choose_in_fresh_process(
        "os.environ['GPUCOURSE_DEVICE'] = 'cpu'; os.environ.pop('NUMBA_ENABLE_CUDASIM', None)\nimport numba\n"
        "import numba.core.errors",
        then="import numpy as np\nfrom numba import cuda\n@cuda.jit\ndef ones(x):\n    x[cuda.grid(1)] = 1\n"
             "x = np.zeros(64)\nones[2, 32](x)\nprint('LAUNCHED', x.sum())")
    assert "SIM True True" in out and "LAUNCHED 64.0" in out


def test_an_explicit_simulator_setting_is_respected():
    out = _choose_in_fresh_process("os.environ['NUMBA_ENABLE_CUDASIM'] = '1'")
    assert "SIM True True" in out and "NUMBA_ENABLE_CUDASIM=1 is set" in out


def test_after_numba_cuda_is_imported_the_mode_is_reported_not_changed():
    out = _choose_in_fresh_process(
        "os.environ['NUMBA_ENABLE_CUDASIM'] = '1'\nfrom numba import cuda\nos.environ['NUMBA_ENABLE_CUDASIM'] = '0'"
    )
    assert "SIM True True" in out and "already imported" in out and "restarts" in out


@pytest.mark.parametrize(
    "stderr",
    [
        "numba.cuda.cudadrv.driver.LinkerError: [222] Call to cuLinkAddData results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        "CUDA Error: the provided PTX was compiled with an unsupported toolchain.",
    ],
)
def test_the_colab_ptx_mismatch_is_explained(stderr):
    message = kernels.explain_failure("Traceback ...\n" + stderr)
    assert message == kernels.PTX_ADVICE
    assert "nvidia-smi" in message and "restart" in message


def test_other_failures_show_their_last_line():
    message = kernels.explain_failure("Traceback\n  File x\nCudaSupportError: no driver\n")
    assert message.startswith("a test kernel failed on the GPU: CudaSupportError: no driver. ")
    assert 'numba-cuda[cu12]' in message
    assert kernels.explain_failure("").startswith("a test kernel failed on the GPU: no error message.")


def test_kernel_resources_are_unavailable_in_the_simulator(simulated_cuda):
    from sim_kernels import count_then_share

    assert kernels.kernel_resources(count_then_share) is None


@pytest.mark.parametrize("n, threads, cap, expected", [(1, 256, None, (1, 256)), (1000, 256, None, (4, 256)),
                                                      (10**6, 128, 1024, (1024, 128)), (256, 256, None, (1, 256))])
def test_launch_grid_covers_the_data(n, threads, cap, expected):
    assert kernels.launch_grid(n, threads, cap) == expected


def test_launch_grid_rejects_empty_launches():
    with pytest.raises(ValueError, match="n >= 1"):
        kernels.launch_grid(0)


def test_kernel_resources_on_a_gpu():
    """On a GPU, numba reports the registers and shared memory the compiler gave a kernel."""
    mode = kernels.use_gpu_or_simulator(verbose=False)
    if mode.simulator:
        pytest.skip("needs a CUDA GPU (numba runs in its simulator here)")
    import numpy as np

    from sim_kernels import count_then_share

    count_then_share[2, 32](np.zeros(64, np.int32), np.zeros(3, np.int32), np.zeros(2))
    resources = kernels.kernel_resources(count_then_share)
    assert resources.registers_per_thread > 0
    assert resources.shared_mem_per_block >= 32 * 8  # its shared array of 32 float64


def test_gpu_guard_skips_without_a_gpu_and_refuses_a_gpu_numba_cannot_use(monkeypatch, capsys):
    from gpucourse import devices

    monkeypatch.setattr(devices, "has_gpu", lambda: False)
    assert kernels.gpu_or_explain("kernels run fast") is False
    assert "On a GPU this cell shows: kernels run fast" in capsys.readouterr().out
    monkeypatch.setattr(devices, "has_gpu", lambda: True)
    monkeypatch.setattr(kernels, "simulator_active", lambda: True)
    with pytest.raises(devices.NoGPUError, match="numba's kernels run in its simulator"):
        kernels.gpu_or_explain("kernels run fast")
    monkeypatch.setattr(kernels, "simulator_active", lambda: False)
    assert kernels.gpu_or_explain("kernels run fast") is True


def test_triton_runs_in_its_interpreter_without_a_gpu_and_says_what_is_missing(monkeypatch, capsys):
    monkeypatch.delenv(kernels.TRITON_INTERPRET_ENV, raising=False)
    monkeypatch.setenv("GPUCOURSE_DEVICE", "cpu")
    if importlib.util.find_spec("triton") is not None:
        assert kernels.use_triton_gpu_or_interpreter() is False
        assert os.environ[kernels.TRITON_INTERPRET_ENV] == "1"
        assert "Triton's interpreter" in capsys.readouterr().out
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    with pytest.raises(ImportError, match="Linux on x86-64 only"):
        kernels.use_triton_gpu_or_interpreter()


def test_triton_imported_without_its_interpreter_is_refused_when_there_is_no_gpu(monkeypatch):
    knobs = type("Knobs", (), {"runtime": type("Runtime", (), {"interpret": False})})
    monkeypatch.setitem(sys.modules, "triton", type("Triton", (), {"knobs": knobs}))
    monkeypatch.setenv("GPUCOURSE_DEVICE", "cpu")
    monkeypatch.delenv(kernels.TRITON_INTERPRET_ENV, raising=False)
    with pytest.raises(RuntimeError, match="restart the kernel and call it before `import triton`"):
        kernels.use_triton_gpu_or_interpreter(verbose=False)
