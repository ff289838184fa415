#!/usr/bin/env bash
# Run the course's checks on a real CUDA GPU and write a short report.
#
#   scripts/gpu_check.sh [REPORT_DIR]        (default: $OUT if set, else gpu-report/)
#
# It runs the whole pytest suite with GPUCOURSE_DEVICE=cuda: unit tests, every lecture executed
# on the GPU (tests/course/test_notebooks.py), and the nbgrader round trip, which executes each solution
# notebook on the GPU (reference solution full marks, untouched release 0: tests/autograder/test_grading.py).
# The report holds the GPU, the suite's outcome, each notebook's run time and every speedup the
# notebooks measured. Budget: under 8 minutes.
#
# The GPU-only graded items (tag requires-gpu: 02 test_launch_speed, 03 test_transpose_speed,
# 04 test_uniform_speed, 05 test_overlap_speed, 06 test_triton_speed, 07 test_triton_matmul_speed, 08 test_fast_train_step_speed, 09 test_lstm_fast_gpu_speed,
# 10 test_fast_train_loop_gpu_speed, 11 test_flash_kernel_speed) run twice here: in the executed solution notebooks, and through the
# trusted grader in tests/autograder/test_autograder_cli.py, which expects full marks on a GPU. Their
# thresholds (01 10x, 02 10x, 03 1.5x, 04 1.3x, 05 1.2x, 06 1.3x, 07 0.5x of cuBLAS in float16, 08 1.3x on 8192 images, 09 1.7x, 10 1.3x, 11 2x against SDPA's math backend; and on a GPU 06's test_fused_tail_speed 2x and
# test_batched_matmuls_speed 10x, which a CPU grades at 1.3x and 3x; 07's numba items run on the CPU everywhere) are modelled for every card in gpucourse.gpu_specs
# (gpucourse.thresholds, checked by tests/gpucourse/test_thresholds.py), not yet measured: calibrate them from
# this script's report, and say in each notebook which GPUs they were calibrated on.
# 06 test_triton_speed, 07 test_triton_matmul_speed and 11 test_flash_kernel_speed first count one launcher call at the timed size (only the
# student's Triton kernels may compute: autograder.triton_runner) and time the launcher in the grader's profile
# runner, where no GPU has run them yet: check those items' outcomes and messages in the report first.
# Module 10's lecture also measures its host syncs with torch.cuda.set_sync_debug_mode and its
# chatty against sync-free loops there: the executed lecture in the report holds those numbers.
# Module 10's test_fast_train_loop_gpu_speed first checks the loop's 5-step trajectory against the float32
# seed loop (parameters within 0.5 of its way, losses within 0.05 + 5%) on the GPU too, and gpucourse.syncs
# turns torch.cuda.set_sync_debug_mode("warn") on while it counts: both untested on a GPU so far.
# It also compares the register counts numba gets on the GPU with gpucourse.kernels.compile_report's
# (scripts/compare_registers.py), which CPU graders and students rely on.
#
# It uses the python3 on PATH (a venv made by `make install` works too: PYTHON=.venv/bin/python).
# On a GPU machine without internet, missing packages can travel as wheels in .whl/
# (scripts/fetch_gpu_wheels.sh downloads them on a machine that has internet).
set -uo pipefail
cd "$(dirname "$0")/.."
report=${1:-${OUT:-gpu-report}}
mkdir -p "$report"
python=${PYTHON:-python3}

if compgen -G ".whl/*.whl" >/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpucourse-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/gpucourse-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export GPUCOURSE_DEVICE=cuda MPLBACKEND=Agg PYTHONUNBUFFERED=1
export GPUCOURSE_EXECUTED_DIR=$PWD/$report/executed
mkdir -p "$GPUCOURSE_EXECUTED_DIR"
rm -f "$GPUCOURSE_EXECUTED_DIR/run-times.txt"  # the notebook tests append to it

{
    echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    "$python" -c 'import torch, gpucourse; print("torch", torch.__version__, "| course device:", gpucourse.describe())' 2>&1
    "$python" -c 'from gpucourse import kernels; kernels.use_gpu_or_simulator()' 2>&1
} | tee "$report/report.md"

missing=$("$python" - <<'PY'
import importlib.util
names = ["torch", "numpy", "matplotlib", "pytest", "nbformat", "nbclient", "jupytext", "nbgrader", "ipykernel", "numba", "numba_cuda", "ipywidgets"]
print(" ".join(n for n in names if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
    echo "MISSING packages: $missing (carry them as wheels in .whl/, see scripts/fetch_gpu_wheels.sh)" | tee -a "$report/report.md"
    exit 1
fi

start=$SECONDS
"$python" -m pytest -q -p no:cacheprovider --durations=0 tests 2>&1 | tee "$report/pytest.log"
status=${PIPESTATUS[0]}
{
    echo
    echo "## Suite: exit $status in $((SECONDS - start)) s"
    tail -n 1 "$report/pytest.log"
    echo
    echo "## Notebook run times"
    cat "$GPUCOURSE_EXECUTED_DIR/run-times.txt" 2>/dev/null || echo "(none recorded)"
    echo
    echo "## Speedups measured in the executed notebooks"
    "$python" -m autograder.report "$GPUCOURSE_EXECUTED_DIR" || true
    echo
    echo "## Registers: numba's compile on this GPU vs compile_report (NVVM + ptxas, no GPU)"
    "$python" scripts/compare_registers.py 2>&1 || echo "(a mismatch or an error above)"
    echo "## Streams: a chunked pipeline on real streams vs the stream model (gpucourse.sim.streams)"
    "$python" scripts/compare_streams.py 2>&1 || echo "(an error above)"
    echo "## Module 06's question 6 on this GPU: the MLP block's profile (a table to freeze for a GPU version)"
    "$python" scripts/profile_mlp_block.py 2>&1 | grep -v '^USDT' || echo "(an error above)"
} | tee -a "$report/report.md"
exit "$status"
