"""Print the profile of module 06's question 6 (one forward call of an MLP block) on this machine's device.

The assignment prints a frozen table measured on a CPU; run on a GPU (scripts/gpu_check.sh does),
this gives the table to freeze for a GPU version of the question, with the CUDA kernels' rows.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

import gpucourse


class MLPBlock(nn.Module):
    """LayerNorm, Linear(1024, 4096), gelu(y) * sigmoid(y) as separate ops, dropout, Linear(4096, 1024), residual."""

    def __init__(self, d=1024, hidden=4096):
        super().__init__()
        self.up, self.down, self.norm = nn.Linear(d, hidden), nn.Linear(hidden, d), nn.LayerNorm(d)

    def forward(self, x):
        y = self.up(self.norm(x))
        y = F.gelu(y) * torch.sigmoid(y)
        y = torch.dropout(y, 0.1, True)
        return x + self.down(y)


def main() -> None:
    device = gpucourse.device()
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the assignment's frozen CPU table was measured
    torch.manual_seed(0)
    block, x = MLPBlock().to(device), torch.randn(256, 1024, device=device)
    block(x)  # first-call costs stay out of the profile
    gpucourse.devices.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        block(x)
        gpucourse.devices.synchronize()
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"measured on {gpucourse.describe()}, torch {torch.__version__}")
    print(prof.key_averages().table(sort_by=sort, row_limit=14))


if __name__ == "__main__":
    main()
