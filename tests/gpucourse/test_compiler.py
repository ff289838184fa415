"""Tests of gpucourse.kernel_source (a kernel's self-contained source) and gpucourse.compiler
(NVVM + ptxas without a GPU). Compiling takes seconds per kernel: those tests are marked slow."""

import inspect
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpucourse import compiler, kernels
from gpucourse.compiler import CompileReport, CompilerMissing, compile_report, explain, parse_ptxas, ptx_instructions
from gpucourse.kernel_source import KernelCompileError, KernelSourceError, kernel_source


@pytest.fixture(autouse=True)
def compiled_here(monkeypatch):
    """This file tests the compiler itself: every kernel is really compiled, never read from the run's shared answers."""
    monkeypatch.delenv(compiler.CACHE_ENV, raising=False)


@pytest.fixture(scope="module")
def ks():
    """The kernels of compiler_kernels.py, in whichever mode numba chose (the simulator without a GPU)."""
    kernels.use_gpu_or_simulator(verbose=False)
    import compiler_kernels

    return compiler_kernels


@pytest.fixture(scope="module")
def types():
    from numba import float32, int32

    return float32, int32


def python_function(kernel):
    return getattr(kernel, "py_func", None) or kernel.fn


def marked_line(kernel, marker: str) -> int:
    """The file line number of the line of ``kernel`` holding ``# <- marker``."""
    lines, first = inspect.getsourcelines(python_function(kernel))
    return next(first + index for index, line in enumerate(lines) if f"# <- {marker}" in line)


# ---------------------------------------------------------------------------------------------
# Source extraction (no compiler involved)


def test_source_holds_what_the_kernel_reaches_and_the_kernel_last(ks):
    source = kernel_source(ks.scale)
    text = source.text
    assert "import math as math" in text and "import numba.cuda as cuda" in text
    assert "SCALE = _gc_numpy.float32(2.5)" in text and "import numpy as _gc_numpy" in text
    assert "@cuda.jit(device=True)\ndef scale_by(value, factor):" in text
    assert text.rstrip().endswith("a[i] = scale_by(a[i], SCALE)")
    assert "TILE" not in text and "LOOKUP" not in text  # only what the kernel uses
    compile(text, "check.py", "exec")  # valid Python


def test_source_is_deterministic(ks):
    first, second = kernel_source(ks.scale), kernel_source(ks.scale)
    assert first.text == second.text and first.digest == second.digest
    assert kernel_source(ks.transpose).digest != first.digest


def test_each_function_line_maps_back_to_the_students_line(ks):
    source = kernel_source(ks.scale)
    text_lines = source.text.splitlines()
    mapped = [(number, source.origin(number)) for number in range(1, len(text_lines) + 1) if source.origin(number)]
    assert {origin.function for _, origin in mapped} == {"scale", "scale_by"}
    for number, origin in mapped:
        if not text_lines[number - 1].startswith("@"):  # the re-emitted decorator maps to the def line
            assert text_lines[number - 1].strip() == origin.code.strip()
        assert origin.filename.endswith("compiler_kernels.py")
    body = next(origin for _, origin in mapped if "device body" in origin.code)
    assert body.line == marked_line(ks.scale_by, "device body")


def test_constants_and_functions_of_allowed_modules_are_rebuilt_exactly(ks):
    namespace: dict = {}
    exec(kernel_source(ks.uses_limits).text, namespace)  # noqa: S102 - our own test kernel
    rebuilt = namespace["LIMITS"]
    assert rebuilt[0] == math.inf and rebuilt[1:4] == ks.LIMITS[1:4] and rebuilt[4:] == (None, "name")
    assert type(rebuilt[2]) is type(ks.LIMITS[2])  # still a numpy float32
    assert namespace["sqrt"] is math.sqrt
    assert "DTYPE = _gc_numpy.float32" in kernel_source(ks.per_thread_array).text


def test_an_aliased_device_function_is_emitted_once_under_both_names(ks):
    text = kernel_source(ks.scale_through_alias).text
    assert text.count("def scale_by(") == 1 and "fast_scale = scale_by" in text
    assert text.index("fast_scale = scale_by") > text.index("def scale_by(")


def test_device_functions_calling_each_other_are_emitted_once(ks):
    text = kernel_source(ks.bounces).text
    assert text.count("def ping(") == 1 and text.count("def pong(") == 1


@pytest.mark.parametrize(("kernel", "marker", "words"), [
    ("reads_list", "list global", "uses the global `LOOKUP` (a list)"),
    ("reads_dict", "dict global", "uses the global `TABLE` (a dict)"),
    ("reads_array", "array global", "uses the global `WEIGHTS` (a numpy array"),
    ("calls_plain_function", "plain call", "uses the global `plain_helper` (a plain Python function"),
    ("launches_kernel", "kernel call", "calls `transpose`, a kernel"),
])
def test_globals_a_gpu_cannot_use_are_refused_with_name_and_line(ks, kernel, marker, words):
    with pytest.raises(KernelSourceError) as refused:
        kernel_source(getattr(ks, kernel))
    message = str(refused.value)
    assert message.startswith(f"line {marked_line(getattr(ks, kernel), marker)}: {kernel} ")
    assert words in message
    assert isinstance(refused.value, KernelCompileError)  # one except clause catches both


def cell(code: str, filename: str) -> dict:
    """Run ``code`` as a notebook cell would: its lines registered in linecache under ``filename``."""
    import linecache

    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - test code
    return namespace


def test_one_name_for_two_different_values_is_refused(ks):
    other = cell("from numba import cuda\nSCALE = 1.0\n@cuda.jit(device=True)\ndef halve(x):\n    return x * SCALE\n",
                 "<cell-constants>")
    kernel = cell("from numba import cuda\nSCALE = 2.0\n@cuda.jit\ndef both(a):\n    a[0] = halve(a[0]) * SCALE\n",
                  "<cell-kernel>")
    kernel["halve"] = other["halve"]
    with pytest.raises(KernelSourceError, match="`SCALE` for two different things"):
        kernel_source(kernel["both"])
    other["SCALE"] = 2.0
    source = kernel_source(kernel["both"])  # the same value under one name is fine
    assert source.text.count("SCALE = 2.0") == 1
    assert {origin.filename for origin in source.origins if origin} == {"<cell-constants>", "<cell-kernel>"}


def test_a_closure_is_refused(ks):
    with pytest.raises(KernelSourceError, match=r"closure.*`factor`"):
        kernel_source(ks.make_closure())


def test_a_plain_function_is_not_a_kernel():
    def plain(a):
        a[0] = 1

    with pytest.raises(KernelSourceError, match="not a numba kernel"):
        kernel_source(plain)


# ---------------------------------------------------------------------------------------------
# Signatures, ptxas output, PTX and error texts (no compiler involved)


def test_signatures_travel_as_small_descriptors(types):
    import numpy as np

    float32, int32 = types
    assert compiler.signature_descriptor((float32[:, :], int32)) == {
        "args": [{"array": "float32", "ndim": 2, "layout": "A"}, {"scalar": "int32"}]}
    assert compiler.signature_descriptor((np.zeros((2, 3), np.float32),))["args"][0]["layout"] == "C"
    assert compiler.signature_descriptor("void(float32[:])") == {"text": "void(float32[:])"}
    with pytest.raises(TypeError, match="signature"):
        compiler.signature_descriptor(([1, 2],))


PTXAS_OUTPUT = """\
ptxas info    : 8 bytes gmem
ptxas info    : Function properties for helper
    24 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function '_Z6kernel' for 'sm_75'
ptxas info    : Function properties for _Z6kernel
    0 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 255 registers, 96 bytes lmem, used 2 barriers, 4224 bytes smem, 368 bytes cmem[0]
"""


def test_ptxas_figures_are_those_of_the_entry_function():
    assert parse_ptxas(PTXAS_OUTPUT) == {"registers": 255, "shared_bytes": 4224, "local_bytes": 96,
                                         "spill_stores": 40, "spill_loads": 36, "barriers": 2}


def test_ptx_instructions_carry_their_loc_line_and_float64_is_recognised():
    ptx = "\t.loc\t1 7 1\n\tld.f32 \t%f1, [%rd1];\n\t.loc\t1 5 1, function_name $L, inlined_at 1 7 1\n" \
          "\t@%p1 mul.f64 \t%fd2, %fd1, 0d3FD3;\n$L__BB0_2:\n\t.loc\t1 0 1\n\tret;\n"
    assert ptx_instructions(ptx) == [((1, 7), "ld.f32 \t%f1, [%rd1]"), ((1, 5), "@%p1 mul.f64 \t%fd2, %fd1, 0d3FD3"),
                                     (None, "ret")]
    assert [compiler.is_float64_arithmetic(op) for op in ("cvt.f64.f32", "setp.lt.f64", "mov.f64", "mul.f32")] \
        == [True, True, False, False]
    assert [compiler.memory_access(op) for op in ("ld.f32", "ld.global.nc.v4.f32", "st.shared.f32", "ld.param.u64")] \
        == [("ld", "global"), ("ld", "global"), ("st", "shared"), ("ld", "param")]


@pytest.mark.parametrize(("numba_says", "plain_words"), [
    ("Unknown attribute 'append' of type list(undefined)<iv=None>", "calls a Python list method (.append)"),
    ("setitem(DictType[undefined,undefined]<iv={}>, Literal[int](1), float32)", "uses a Python dict"),
    ("No implementation of function Function(<built-in function zeros>) found", "calls np.zeros, which allocates"),
    ("printing unimplemented for values of type array(float32, 1d, A)", "prints a value of type array(float32, 1d, A)"),
    ("add(Literal[str](x), Literal[str](<object type:float32>))", "Python string"),
    ("ptxas error   : Entry function 'k' uses too much shared data (0x10000 bytes, 0xc000 max)", "65536 bytes"),
])
def test_known_compile_errors_are_put_in_plain_words(numba_says, plain_words):
    assert plain_words in explain(numba_says)


def test_other_compile_errors_keep_numbas_first_lines_without_its_noise():
    numba_says = ("Failed in cuda mode pipeline (step: nopython frontend)\nSomething odd about x\n\n"
                  'File "gpucourse_kernel.py", line 9:\n    <source elided>\n    ^\nDuring: typing of x')
    assert explain(numba_says) == "Something odd about x"


def test_warnings_model_the_occupancy_of_a_launch():
    report = CompileReport(kernel="k", gpu="A100", arch="sm_80", registers=128, shared_bytes=0, local_bytes=0,
                           spill_stores=0, spill_loads=0, barriers=0, float64_instructions=0, global_loads=1,
                           global_stores=1, shared_loads=0, shared_stores=0, atomics=0, branches=0,
                           barrier_instructions=0, ptx="", ptxas_output="", source=None, instructions=())
    assert report.warnings() == []
    (warning,) = report.warnings(threads_per_block=256)
    assert "limited by registers" in warning and "128 registers/thread" in warning
    assert report.warnings(threads_per_block=256, target_occupancy=0.2) == []


# ---------------------------------------------------------------------------------------------
# The compiler missing, and the import staying cheap


def test_a_missing_ptxas_says_how_to_install_it(ks, types, monkeypatch):
    monkeypatch.setenv(compiler.PTXAS_ENV, "/nonexistent/ptxas")
    with pytest.raises(CompilerMissing) as missing:
        compile_report(ks.transpose, (types[0][:, :], types[0][:, :]))
    assert 'pip install "numba-cuda[cu13]" "nvidia-cuda-nvcc==13.*"' in str(missing.value)
    assert "ptxas" in str(missing.value)


def test_importing_the_kernels_module_loads_no_compiler():
    code = "import sys, gpucourse.kernels as k; print(k.compile_report.__name__, 'numba' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["compile_report", "False"]


# ---------------------------------------------------------------------------------------------
# Compiling (NVVM in a child process, then ptxas): seconds per kernel


def direct_ptxas_registers(ptx: str, arch: str, folder) -> int:
    """Registers per ptxas run here, by hand: a cross-check of the report."""
    (folder / "kernel.ptx").write_text(ptx)
    run = subprocess.run([compiler.find_ptxas(), f"-arch={arch}", "-v", str(folder / "kernel.ptx"),
                          "-o", str(folder / "kernel.cubin")], capture_output=True, text=True, timeout=60)
    return int(re.search(r"Used (\d+) registers", run.stdout + run.stderr).group(1))


@pytest.mark.slow
def test_padded_transpose_uses_a_4224_byte_tile_and_one_barrier(ks, types, tmp_path):
    float32 = types[0]
    report = compile_report(ks.transpose, (float32[:, :], float32[:, :]), gpu="A100")
    assert (report.gpu, report.arch) == ("A100", "sm_80")
    assert report.shared_bytes == 32 * 33 * 4 and report.barriers == 1 and report.barrier_instructions == 1
    assert report.registers > 0 and report.registers == direct_ptxas_registers(report.ptx, "sm_80", tmp_path)
    assert report.shared_loads >= 1 and report.shared_stores >= 1 and report.global_loads >= 1
    assert report.float64_instructions == 0 and report.local_bytes == 0 and report.spill_stores == 0
    assert "4224 B shared memory/block" in report.summary() and str(report) == report.summary()


@pytest.mark.slow
def test_the_architecture_follows_the_gpu(ks, types):
    float32 = types[0]
    report = compile_report(ks.transpose, (float32[:, :], float32[:, :]), gpu="T4")
    assert report.arch == "sm_75" and ".target sm_75" in report.ptx


@pytest.mark.slow
def test_a_device_function_and_a_constant_compile_and_keep_their_lines(ks, types):
    report = compile_report(ks.scale, (types[0][:],))
    body = marked_line(ks.scale_by, "device body")
    instructions = report.ptx_for_line(body, function="scale_by")  # inlined, yet attributed to its own line
    assert any(text.startswith(("fma.rn.f32", "mul.f32")) for text in instructions)
    assert any("0f40200000" in text for text in instructions)  # SCALE arrived as float32 2.5
    assert report.ptx_for_line(body, function="scale") == []


@pytest.mark.slow
def test_accidental_float64_is_counted_and_pointed_at(ks, types):
    float32 = types[0]
    report = compile_report(ks.accidental_float64, (float32[:],), gpu="T4")
    assert report.float64_instructions >= 1
    assert [line.line for line in report.float64_lines()] == [marked_line(ks.accidental_float64, "float64")]
    assert any("f64" in instruction for instruction in report.ptx_for_line(report.float64_lines()[0].line))
    assert any("float64" in warning for warning in report.warnings())
    assert compile_report(ks.float32_only, (float32[:],), gpu="T4").float64_instructions == 0


@pytest.mark.slow
def test_a_per_thread_array_indexed_at_run_time_is_local_memory(ks, types):
    float32, int32 = types
    report = compile_report(ks.per_thread_array, (float32[:], int32))
    assert report.local_bytes >= 64 * 4
    assert any("local memory" in warning for warning in report.warnings())


@pytest.mark.slow
@pytest.mark.parametrize(("kernel", "marker", "words"), [
    ("appends_to_list", "list method", "calls a Python list method (.append), which does not exist on a GPU"),
    ("allocates", "allocation", "calls np.zeros, which allocates a new array"),
    ("prints_array", "print", "print in a kernel only takes numbers and string literals"),
    ("computed_shape", "shape", "shape the compiler cannot see as constant"),
])
def test_kernels_only_the_simulator_runs_fail_with_line_and_plain_words(ks, types, kernel, marker, words):
    with pytest.raises(KernelCompileError) as failed:
        compile_report(getattr(ks, kernel), (types[0][:],))
    line = marked_line(getattr(ks, kernel), marker)
    assert str(failed.value).startswith(f"line {line}: ") and words in str(failed.value)
    assert failed.value.line.line == line and failed.value.compiler_message  # numba's own words kept


@pytest.mark.slow
def test_a_compiled_kernel_is_not_compiled_again(ks, types, monkeypatch):
    signature = (types[0][:, :], types[0][:, :])
    first = compile_report(ks.transpose, signature)

    def no_second_compile(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(compiler, "run_compiler", no_second_compile)
    assert compile_report(ks.transpose, signature).registers == first.registers


@pytest.mark.slow
def test_a_gpu_the_installed_compiler_cannot_target_is_named(ks, types):
    with pytest.raises(ValueError, match="cannot compile for V100"):
        compile_report(ks.float32_only, (types[0][:],), gpu="V100")


@pytest.mark.slow
def test_a_compile_that_takes_too_long_is_stopped_with_a_clear_error(ks, types):
    with pytest.raises(TimeoutError, match="took more than"):
        compile_report(ks.per_thread_array, (types[0][:], types[1]), gpu="L4", timeout=0.05)


def test_a_missing_compiler_library_is_the_machines_problem_not_the_kernels():
    """NVRTC or NVVM not installed (cuda-pathfinder's DynamicLibNotFoundError, numba's NvvmSupportError)
    must read as 'missing' (CompilerMissing: a grader stops), never as a kernel that does not compile."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compile_worker", Path(compiler.__file__).with_name("_compile_worker.py"))
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    DynamicLibNotFoundError = type("DynamicLibNotFoundError", (RuntimeError,), {})
    NvvmSupportError = type("NvvmSupportError", (ImportError,), {})
    assert worker.missing_library(DynamicLibNotFoundError('Failure finding "libnvrtc.so.13"'))
    assert worker.missing_library(NvvmSupportError("libNVVM cannot be found"))
    assert not worker.missing_library(TypeError("Unknown attribute 'append' of type list"))


def test_a_python_without_numba_cuda_is_reported_missing(monkeypatch):
    """The child, run with a search path that holds no numba: CompilerMissing with the pip line."""
    request = {"source": "import numba.cuda as cuda\n@cuda.jit\ndef k(x):\n    x[0] = 1\n", "filename": "gpucourse_kernel.py",
               "kernel": "k", "signature": {"text": "void(float32[:])"}, "cc": [8, 0], "ptxas": "/nonexistent", "sys_path": ["/nonexistent"]}
    answer = compiler.run_compiler(request)
    assert answer["status"] == "missing" and "numba-cuda cannot be imported" in answer["message"], answer
    monkeypatch.setattr(compiler, "run_compiler", lambda request, timeout: answer)
    with pytest.raises(compiler.CompilerMissing, match="numba-cuda"):
        compiler._compile(request, 10)


SIMPLE_REQUEST = {"source": "import numba.cuda as cuda\n@cuda.jit\ndef k(x):\n    x[0] = 1\n", "filename": "gpucourse_kernel.py",
                  "kernel": "k", "signature": {"text": "void(float32[:])"}, "cc": [8, 0], "sys_path": sys.path}


@pytest.mark.slow
def test_the_compiler_server_answers_as_a_process_of_its_own(monkeypatch):
    """One server per process (numba imported once), a child forked per kernel: the same answer as one process per kernel."""
    request = {**SIMPLE_REQUEST, "ptxas": compiler.find_ptxas()}
    served = compiler.run_compiler(request)
    monkeypatch.setenv(compiler.SERVER_ENV, "0")
    alone = compiler.run_compiler(request)
    assert served["status"] == alone["status"] == "ok" and served["ptx"] == alone["ptx"]
    assert parse_ptxas(served["ptxas"]) == parse_ptxas(alone["ptxas"])  # its report, all but the compile time it prints


@pytest.mark.slow
def test_a_crash_while_compiling_costs_one_answer_and_a_forked_caller_gets_its_own_server():
    request = {**SIMPLE_REQUEST, "ptxas": compiler.find_ptxas()}
    server = compiler._server(request["sys_path"])
    with pytest.raises(RuntimeError, match="the kernel compiler crashed"):
        compiler.run_compiler({**request, "source": "import os\nos._exit(3)\n"})
    assert compiler._server(request["sys_path"]) is server and compiler.run_compiler(request)["status"] == "ok"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked caller (a grading pool process): never writes to its parent's server
        theirs = compiler._server(request["sys_path"])
        os.write(write_end, f"{theirs.process.pid} {compiler.run_compiler(request)['status']}".encode())
        os._exit(0)
    os.close(write_end)
    reply = os.read(read_end, 100).decode().split()
    os.waitpid(pid, 0)
    assert reply[1] == "ok" and int(reply[0]) != server.process.pid


@pytest.mark.slow
def test_a_compile_past_its_time_stops_the_server_and_the_next_one_starts_afresh():
    request = {**SIMPLE_REQUEST, "ptxas": compiler.find_ptxas(), "source": "import time\ntime.sleep(30)\n"}
    server = compiler._server(request["sys_path"])
    with pytest.raises(TimeoutError, match="took more than"):
        compiler.run_compiler(request, timeout=1)
    assert server.process.poll() is not None
    assert compiler.run_compiler({**SIMPLE_REQUEST, "ptxas": compiler.find_ptxas()})["status"] == "ok"


# ---------------------------------------------------------------------------------------------
# Triton: the launch's specializations and options (what lecture 07 reads in the PTX)


def _worker():
    import importlib.util

    spec = importlib.util.spec_from_file_location("compile_worker", Path(compiler.__file__).with_name("_compile_worker.py"))
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    return worker


def types_namespace(**fields):
    import types as pytypes

    return pytypes.SimpleNamespace(**fields)


def test_a_triton_signature_is_specialized_as_a_launch_specializes_it():
    """An int equal to 1 becomes a constant, ints and aligned addresses that are multiples of 16 are marked divisible
    (triton/runtime/jit.py), unless the kernel asks not to be specialized on them."""
    def param(name, constexpr=False, plain=False, unaligned=False):
        return types_namespace(name=name, is_constexpr=constexpr, do_not_specialize=plain, do_not_specialize_on_alignment=unaligned)

    names = ["a", "b", "one", "n", "m", "kept", "odd_ok", "BLOCK"]
    kernel = types_namespace(__name__="k", arg_names=names, params=[param("a"), param("b"), param("one"), param("n"), param("m"),
                                                                    param("kept", plain=True), param("odd_ok", unaligned=True),
                                                                    param("BLOCK", constexpr=True)])
    descriptor = {"args": [{"type": "*fp16", "aligned": True}, {"type": "*fp16", "aligned": False}, {"type": "i32", "value": 1},
                           {"type": "i32", "value": 4096}, {"type": "i32", "value": 37}, {"type": "i32", "value": 1},
                           {"type": "i64", "value": 2**40}],
                  "kwargs": {"BLOCK": {"type": "i32", "value": 64}}}
    signature, constexprs, attrs = _worker()._triton_signature(kernel, descriptor)
    assert signature == {"a": "*fp16", "b": "*fp16", "one": "constexpr", "n": "i32", "m": "i32", "kept": "i32", "odd_ok": "i64",
                         "BLOCK": "constexpr"}
    assert constexprs == {"one": 1, "BLOCK": 64}
    assert attrs == {(0,): [["tt.divisibility", 16]], (3,): [["tt.divisibility", 16]]}


def test_a_tensor_argument_says_whether_its_address_is_16_aligned():
    torch = pytest.importorskip("torch")
    from gpucourse.triton_compiler import argument_descriptor

    x = torch.zeros(64, dtype=torch.float16)
    assert argument_descriptor(x) == {"type": "*fp16", "aligned": x.data_ptr() % 16 == 0}
    assert argument_descriptor(x[1:]) == {"type": "*fp16", "aligned": False}  # 2 bytes past an aligned address


TILE_PRODUCT = '''
import triton
import triton.language as tl


@triton.jit
def tile_product(a_ptr, b_ptr, c_ptr, K, stride_a, stride_b, stride_c, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    depth = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_a + (k + depth)[None, :])
        b = tl.load(b_ptr + (k + depth)[:, None] * stride_b + rows[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * stride_c + rows[None, :], acc.to(tl.float16))
'''


@pytest.mark.slow
def test_a_triton_kernel_is_compiled_with_the_launchs_warps_stages_and_alignment(tmp_path, monkeypatch):
    """num_warps and num_stages (not Triton's defaults, 4 and 3) reach Triton; with the launch's alignment facts the loads
    are cp.async copies into shared memory; each of the 8 warps issues its share of the m16n8k16 products."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from gpucourse.triton_compiler import triton_compile_report
    from gpucourse.triton_source import triton_source

    (tmp_path / "tile_product_kernel.py").write_text(TILE_PRODUCT)
    monkeypatch.syspath_prepend(str(tmp_path))
    from tile_product_kernel import tile_product

    half = torch.empty(16, 16, dtype=torch.float16)
    report = triton_compile_report(triton_source(tile_product), (half, half, half, 1024, 1024, 1024, 1024), {"BLOCK": 64, "BLOCK_K": 32},
                                   num_warps=8, num_stages=4)
    assert (report.num_warps, report.num_stages, report.arch) == (8, 4, "sm_80")
    ptx = [line.strip() for line in report.ptx.splitlines()]
    assert sum(line.startswith("mma.sync.aligned.m16n8k16.") for line in ptx) == 64 * 64 * 32 // (16 * 8 * 16) // 8
    assert any(line.startswith("cp.async.") for line in ptx), "aligned row-major operands should be copied by cp.async"
    assert report.shared_bytes >= 2 * (64 * 32 + 32 * 64) * 2, "4 stages keep more than one K step of tiles in shared memory"
