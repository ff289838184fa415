"""On a GPU: the registers and shared memory numba's own compile reports for each test kernel,
against what ``gpucourse.kernels.compile_report`` (NVVM + ptxas, no GPU) reports for the same
architecture. Run by scripts/gpu_check.sh; prints a markdown table, and exits 1 on a mismatch.

    python scripts/compare_registers.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from numba import cuda, float32, int32  # noqa: E402 - a real GPU: no simulator here

import compiler_kernels as ks  # noqa: E402
from gpucourse import gpu_specs  # noqa: E402
from gpucourse.kernels import compile_report  # noqa: E402

CASES = {  # kernel -> signature (as compiler tests use them)
    "transpose": (float32[:, ::1], float32[:, ::1]),
    "scale": (float32[::1],),
    "float32_only": (float32[::1],),
    "per_thread_array": (float32[::1], int32),
}


def card_for(cc: tuple[int, int]) -> str:
    wanted = f"{cc[0]}.{cc[1]}"
    return next(spec.name for spec in gpu_specs.GPUS.values() if spec.compute_capability == wanted)


def main() -> int:
    cc = cuda.get_current_device().compute_capability
    card = card_for(cc)
    print(f"| kernel | numba on the GPU (sm_{cc[0]}{cc[1]}): registers, shared B | compile_report({card}): registers, shared B |")
    print("|---|---|---|")
    mismatches = 0
    for name, signature in CASES.items():
        kernel = getattr(ks, name)
        kernel.compile(signature)
        on_gpu = (kernel.get_regs_per_thread(signature), kernel.get_shared_mem_per_block(signature))
        report = compile_report(kernel, signature, gpu=card)
        offline = (report.registers, report.shared_bytes)
        mismatches += on_gpu != offline
        print(f"| {name} | {on_gpu[0]}, {on_gpu[1]} | {offline[0]}, {offline[1]}{'' if on_gpu == offline else '  MISMATCH'} |")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
