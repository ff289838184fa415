"""gpucourse.devices: which device a cell runs on, its class, and whether torch.compile can build here (and why not)."""

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


# --- compile_support: whether torch.compile can run, and what is missing where it cannot ---

# The fixture and _on below replace these; the tests of each put the real one back.
_real_probe, _real_headers_found = devices._probe_compile, devices._python_headers_found


@pytest.fixture
def compile_env(monkeypatch):
    """A fresh compile_support (no cached answer, no note printed yet), unaffected by the caller's environment;
    the probe must not run unless a test says what it returns."""
    for name in (devices.NO_COMPILE_VAR, "CXX", "OMP_PREFIX", "CONDA_PREFIX", "HOMEBREW_PREFIX", "GPUCOURSE_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(devices, "_probe_compile", lambda kind: pytest.fail("the probe ran although the toolchain was incomplete"))
    devices._compile_support.cache_clear()
    devices._note_eager_fallback.cache_clear()
    yield monkeypatch
    devices._compile_support.cache_clear()  # the next caller in this process probes the real machine
    devices._note_eager_fallback.cache_clear()


def _on(monkeypatch, system, *, compiler_version=None, headers=True):
    """This process seen as ``system`` (a sys.platform value) with the C++ compiler answering ``compiler_version``
    (None: not installed) and Python.h present or not."""
    monkeypatch.setattr(devices, "_platform", lambda: system)
    monkeypatch.setattr(devices.shutil, "which", lambda name: f"/usr/bin/{name}" if compiler_version else None)
    monkeypatch.setattr(devices, "_compiler_version", lambda name: compiler_version)
    monkeypatch.setattr(devices, "_python_headers_found", lambda system: headers)


@pytest.mark.parametrize("system, expected, absent", [
    ("linux", ["g++", "`apt install g++`"], ["xcode", "libomp", "cl.exe"]),
    ("darwin", ["`xcode-select --install`", "`brew install libomp`"], ["apt install g++", "cl.exe"]),
    ("win32", ["cl.exe", "Desktop development with C++", "vcvars64.bat"], ["apt install g++", "libomp"]),
])
def test_compile_support_names_what_each_platform_lacks_and_how_to_install_it(compile_env, system, expected, absent):
    _on(compile_env, system)
    support = devices.compile_support("cpu")
    assert not support.ok
    assert all(words in support.reason for words in expected), support.reason
    assert not any(words in support.reason for words in absent), support.reason
    assert support.reason.endswith(f"({devices.INDUCTOR_SOURCE}).") and support.reason.count(". ") == 0  # one sentence, sourced


def test_compile_support_on_macos_asks_for_openmp_only_where_apples_clang_lacks_it(compile_env, tmp_path):
    _on(compile_env, "darwin", compiler_version="Apple clang version 15.0.0 (clang-1500.3.9.4)")
    support = devices.compile_support("cpu")
    assert not support.ok and "`brew install libomp`" in support.reason and "xcode-select" not in support.reason
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "omp.h").write_text("")
    compile_env.setenv("OMP_PREFIX", str(tmp_path))  # one of the places Inductor looks (_get_openmp_args)
    compile_env.setattr(devices, "_probe_compile", lambda kind: None)
    devices._compile_support.cache_clear()
    assert devices.compile_support("cpu").ok
    compile_env.delenv("OMP_PREFIX")
    _on(compile_env, "darwin", compiler_version="Homebrew clang version 18.1.8")  # LLVM's own clang brings OpenMP
    devices._compile_support.cache_clear()
    assert devices.compile_support("cpu").ok


def test_compile_support_names_missing_python_headers(compile_env, tmp_path):
    _on(compile_env, "linux", compiler_version="g++ (Ubuntu 13.2.0) 13.2.0", headers=False)
    support = devices.compile_support("cpu")
    assert not support.ok and "Python.h" in support.reason and "python3-dev" in support.reason and "apt install g++" not in support.reason
    compile_env.setattr(devices.sysconfig, "get_path", lambda name, scheme=None: str(tmp_path))
    assert not _real_headers_found("linux")
    (tmp_path / "Python.h").write_text("")
    assert _real_headers_found("linux")


def test_compile_support_reports_the_first_line_of_a_failed_probe_once_per_process(compile_env):
    _on(compile_env, "linux", compiler_version="g++ (GCC) 14.2.0")
    error = "InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx\n\nSet TORCHDYNAMO_VERBOSE=1 for more"
    tries = []

    def failing_compile(fn, **options):
        def call(*args):
            tries.append(args)
            raise RuntimeError(error)
        return call

    compile_env.setattr(devices, "_probe_compile", _real_probe)
    compile_env.setattr(devices.torch, "compile", failing_compile)
    for _ in range(2):
        support = devices.compile_support("cpu")
    assert not support.ok and support.reason.endswith("No working C++ compiler found in torch._inductor.config.cpp.cxx.")
    assert "TORCHDYNAMO_VERBOSE" not in support.reason and len(tries) == 1


def test_compile_support_passes_a_working_probe(compile_env):
    _on(compile_env, "linux", compiler_version="g++ (GCC) 14.2.0")
    compile_env.setattr(devices, "_probe_compile", _real_probe)
    compile_env.setattr(devices.torch, "compile", lambda fn, **options: fn)  # "compiles" without Inductor: the test stays quick
    support = devices.compile_support("cpu")
    assert support.ok and support.reason == "" and support.label("compiled chain") == "compiled chain"


def test_no_compile_variable_says_no_without_probing(compile_env):
    compile_env.setenv(devices.NO_COMPILE_VAR, "1")
    support = devices.compile_support("cpu")
    assert not support.ok and devices.NO_COMPILE_VAR in support.reason
    compile_env.setenv(devices.NO_COMPILE_VAR, "0")  # "0" is unset: the platform decides
    _on(compile_env, "linux")
    assert "apt install g++" in devices.compile_support("cpu").reason


def test_compile_or_eager_falls_back_to_the_function_and_labels_it_eager(compile_env, capsys):
    compile_env.setenv(devices.NO_COMPILE_VAR, "1")

    def step(x):
        return x + 1

    assert devices.compile_or_eager(step) is step
    assert devices.compile_or_eager(dynamic=True)(step) is step  # as a decorator with options
    printed = capsys.readouterr().out
    assert printed.count("[eager fallback]") == 1 and devices.NO_COMPILE_VAR in printed  # the note once, with its reason
    label = devices.compile_support().label("+ torch.compile")
    assert label == "+ torch.compile (not compiled)"


def test_compile_or_eager_compiles_where_supported(compile_env, capsys):
    compiled = []
    _on(compile_env, "linux", compiler_version="g++ (GCC) 14.2.0")
    compile_env.setattr(devices, "_probe_compile", lambda kind: None)
    compile_env.setattr(devices.torch, "compile", lambda fn, **options: compiled.append(options) or "compiled")
    assert devices.compile_or_eager(lambda x: x, dynamic=True) == "compiled" and compiled == [{"dynamic": True}]
    assert capsys.readouterr().out == ""


def test_compile_or_explain_says_why_and_what_the_cell_would_show(compile_env, capsys):
    _on(compile_env, "win32")
    assert devices.compile_or_explain("one fused C++ loop", "cpu") is False
    printed = capsys.readouterr().out
    assert "cannot run here" in printed and "cl.exe" in printed and "one fused C++ loop" in printed


def _code_lines(path):
    return [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_no_lecture_looks_for_a_compiler_itself():
    """Lectures ask gpucourse.devices.compile_support (one home: each platform's needs, and a probe), never
    shutil.which("g++") and the like, and go through compile_or_eager or compile_or_explain to compile with Inductor."""
    import re

    from autograder.build import REPO_ROOT, lecture_sources

    own_check = re.compile(r"""which\(\s*["'](g\+\+|c\+\+|gcc|clang\+\+|clang|cl|cl\.exe)["']""")
    inductor = re.compile(r"torch\.compile\((?![^)]*backend=)|\.compile\(\)")
    for path in lecture_sources(REPO_ROOT):
        lines = _code_lines(path)
        assert not [line for line in lines if own_check.search(line)], f"{path.name} looks for a C++ compiler itself"
        if any(inductor.search(line) for line in lines):
            assert any("compile_or_explain(" in line for line in lines), f"{path.name} compiles with Inductor without a guard"
        if any("compile_or_eager(" in line for line in lines):
            assert any(".label(" in line for line in lines), f"{path.name} times compile_or_eager's result without labelling it"


def test_compile_support_names_the_compiler_cxx_chose(compile_env):
    """$CXX replaces the platform's compiler (torch/_inductor/config.py, cpp.cxx; cl on Windows): the reason names it."""
    compile_env.setenv("CXX", "/opt/llvm/bin/clang++")
    for system in ("linux", "win32"):
        _on(compile_env, system)
        devices._compile_support.cache_clear()
        assert "(/opt/llvm/bin/clang++)" in devices.compile_support("cpu").reason


def test_a_failed_cpp_build_is_reported_with_the_compilers_own_error_line():
    """macOS without OpenMP: Inductor's CppCompileError (torch/_inductor/exc.py) says "C++ compile error", then the
    command, then the compiler's output, whose error line is what names the missing piece."""
    message = ("InductorError: CppCompileError: C++ compile error\n\nCommand:\nclang++ /tmp/x.cpp -Xclang -fopenmp -o /tmp/x.so\n\n"
               "Output:\nIn file included from /tmp/x.cpp:2:\n/tmp/cpp_prefix.h:5:10: fatal error: 'omp.h' file not found\n1 error generated.")
    assert devices._first_line(message) == ("InductorError: CppCompileError: C++ compile error: "
                                            "/tmp/cpp_prefix.h:5:10: fatal error: 'omp.h' file not found")
    assert devices._first_line("InvalidCxxCompiler: No working C++ compiler found\n\nSet TORCHDYNAMO_VERBOSE=1") == \
        "InvalidCxxCompiler: No working C++ compiler found"


def test_the_cache_line_is_read_from_sysfs_else_from_sysctl(tmp_path, monkeypatch):
    """Lectures 03 and 07 read the line size here: Linux's sysfs first, else macOS's sysctl (128 on an M1), else None."""
    (tmp_path / "index0").mkdir()
    (tmp_path / "index0" / "coherency_line_size").write_text("64\n")
    assert devices.cache_line_bytes(tmp_path) == 64
    answers = iter(["128\n", ""])
    monkeypatch.setattr(devices.subprocess, "run", lambda *args, **kwargs: types.SimpleNamespace(stdout=next(answers)))
    no_sysfs = tmp_path / "elsewhere"
    assert devices.cache_line_bytes(no_sysfs) == 128
    assert devices.cache_line_bytes(no_sysfs) is None
