"""Module 10's data and networks: the ring of Gaussians, the digits as GAN data, the seed's MLPs, a DCGAN, and how to
score and average generators.

The seed article's GAN is an MLP generator (100 -> 256 -> 784, Tanh) and an MLP discriminator (784 -> 256 -> 1,
LeakyReLU(0.2), Sigmoid), trained with BCELoss and Adam at lr 2e-4 with Adam's default betas, on ``torch.randn(batch, 784)``
as its "real data". Here the discriminator returns *logits* (no Sigmoid): the loss applies the sigmoid itself, stably
(lecture 10 shows why). ``mmd_rbf`` and ``Scores`` measure how close samples are to the data, ``compare_sentence`` and
``sweep_sentences`` put such measurements into words, ``ema_update`` averages a generator's weights. The losses, the
coverage measure and the training loops are the assignment's to write; nothing here grades anything.
"""

from __future__ import annotations

import collections
import math
from typing import NamedTuple

import torch
from torch import nn

from .wording import choose

RING_MODES, RING_RADIUS, RING_STD = 8, 2.0, 0.05


def ring_centers(modes: int = RING_MODES, radius: float = RING_RADIUS, *, center=(0.0, 0.0), dtype=torch.float32, device=None) -> torch.Tensor:
    """(modes, 2): the centres of the ring's Gaussians, evenly spaced on a circle of ``radius`` around ``center``."""
    if modes < 1:
        raise ValueError(f"a ring needs at least one mode, got {modes}")
    angles = torch.arange(modes, dtype=torch.float64) * (2 * math.pi / modes)
    circle = torch.stack([angles.cos(), angles.sin()], dim=1).mul(radius)
    return (circle + torch.tensor(center, dtype=torch.float64)).to(dtype=dtype, device=device)


def sample_ring(n: int, *, generator: torch.Generator | None = None, modes: int = RING_MODES, radius: float = RING_RADIUS,
                std: float = RING_STD, center=(0.0, 0.0), device=None) -> torch.Tensor:
    """(n, 2) points from the ring: a mode chosen uniformly, plus Gaussian noise of ``std`` (made on the
    CPU with ``generator``, so a seed gives the same points on every device, then moved to ``device``).
    ``modes``, ``radius``, ``std`` and ``center`` describe the ring (module 10's grader draws them)."""
    which = torch.randint(modes, (n,), generator=generator)
    points = ring_centers(modes, radius, center=center)[which] + std * torch.randn(n, 2, generator=generator)
    return points.to(device)


def digits_for_gan(split: str = "train", device=None) -> torch.Tensor:
    """(n, 64) the 8x8 digits of module 08 as flat vectors in [-1, 1], the range of a Tanh generator."""
    from .data import load_digits

    images, _ = load_digits(split)
    return (images.reshape(len(images), -1) * 2 - 1).to(device)


def mlp_generator(latent: int = 100, hidden: int = 256, out: int = 784, *, layers: int = 1, tanh: bool = True) -> nn.Sequential:
    """The seed's generator: latent -> hidden (ReLU) [-> hidden (ReLU), ``layers`` times] -> out [Tanh].
    ``layers=1, tanh=True`` is the seed's 100 -> 256 -> 784; the ring uses two hidden layers and no Tanh
    (its points lie outside [-1, 1])."""
    blocks: list[nn.Module] = [nn.Linear(latent, hidden), nn.ReLU()]
    for _ in range(layers - 1):
        blocks += [nn.Linear(hidden, hidden), nn.ReLU()]
    blocks.append(nn.Linear(hidden, out))
    if tanh:
        blocks.append(nn.Tanh())
    return nn.Sequential(*blocks)


def mlp_discriminator(inputs: int = 784, hidden: int = 256, *, layers: int = 1) -> nn.Sequential:
    """The seed's discriminator without its Sigmoid: inputs -> hidden (LeakyReLU 0.2) [...] -> 1 logit."""
    blocks: list[nn.Module] = [nn.Linear(inputs, hidden), nn.LeakyReLU(0.2)]
    for _ in range(layers - 1):
        blocks += [nn.Linear(hidden, hidden), nn.LeakyReLU(0.2)]
    blocks.append(nn.Linear(hidden, 1))
    return nn.Sequential(*blocks)


def dcgan_generator(latent: int = 100, width: int = 16, side: int = 8) -> nn.Sequential:
    """A DCGAN generator (Radford et al., 2016) for flat ``side`` × ``side`` images: latent -> (n, side²) in [-1, 1].

    DCGAN's rules, at the digits' size: a linear "project and reshape" to ``2·width`` maps of ``side/4`` × ``side/4``,
    then two fractionally-strided convolutions (``ConvTranspose2d``, stride 2) that double the side each, BatchNorm
    and ReLU between them, ``Tanh`` at the end. Flat output, so it drops in where ``mlp_generator``'s does."""
    base = _dcgan_base(side)
    return nn.Sequential(nn.Linear(latent, 2 * width * base * base), nn.Unflatten(1, (2 * width, base, base)),
                         nn.BatchNorm2d(2 * width), nn.ReLU(),
                         nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.ConvTranspose2d(width, 1, 4, stride=2, padding=1), nn.Tanh(), nn.Flatten())


def dcgan_discriminator(width: int = 16, side: int = 8) -> nn.Sequential:
    """A DCGAN discriminator for flat ``side`` × ``side`` images: (n, side²) -> (n, 1) logits.

    Two strided convolutions (stride 2, no pooling) with LeakyReLU(0.2), BatchNorm on the second (not on the
    input layer, as DCGAN prescribes), then one linear layer to the logit."""
    base = _dcgan_base(side)
    return nn.Sequential(nn.Unflatten(1, (1, side, side)), nn.Conv2d(1, width, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
                         nn.Conv2d(width, 2 * width, 4, stride=2, padding=1), nn.BatchNorm2d(2 * width), nn.LeakyReLU(0.2),
                         nn.Flatten(), nn.Linear(2 * width * base * base, 1))


def _dcgan_base(side: int) -> int:
    if side < 4 or side % 4:
        raise ValueError(f"a DCGAN here halves the side twice: it must be a multiple of 4, got {side}")
    return side // 4


@torch.no_grad()
def ema_update(average: nn.Module, model: nn.Module, decay: float) -> None:
    """average ← decay · average + (1 - decay) · model, parameter by parameter, on their device; buffers (BatchNorm's
    running statistics) are copied. Nothing is read on the host: ``torch.optim.swa_utils.AveragedModel.update_parameters``
    reads its step counter twice a call (``bool(self.n_averaged == 0)`` and ``if self.n_averaged > 0``), a host sync
    each on a GPU."""
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be in [0, 1], got {decay}")
    for kept, current in zip(average.parameters(), model.parameters(), strict=True):
        kept.lerp_(current, 1.0 - decay)
    for kept, current in zip(average.buffers(), model.buffers(), strict=True):
        kept.copy_(current)


def mmd_rbf(x: torch.Tensor, y: torch.Tensor, bandwidths) -> float:
    """x: (n, d), y: (m, d), n, m >= 2 -> the unbiased estimate of the squared maximum mean discrepancy between the
    distributions they were drawn from (Gretton et al., "A Kernel Two-Sample Test", JMLR 2012), with the kernel
    k(a, b) = Σ_s exp(-|a - b|² / (2 s²)) over ``bandwidths`` s, in float64.

    0 in expectation when both come from one distribution (a single estimate can be slightly negative), larger
    the more they differ at the scales ``bandwidths`` see. Unlike a count of modes it also sees wrong shares
    and wrong shapes."""
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must be (n, d) and (m, d) samples, got {tuple(x.shape)} and {tuple(y.shape)}")
    if len(x) < 2 or len(y) < 2:
        raise ValueError(f"the unbiased estimate needs at least 2 samples on each side, got {len(x)} and {len(y)}")
    x, y = x.detach().to("cpu", torch.float64), y.detach().to("cpu", torch.float64)
    widths = [float(s) for s in bandwidths]
    if not widths or min(widths) <= 0:
        raise ValueError(f"bandwidths must be positive, got {bandwidths!r}")

    def kernel_sum(a, b, same):
        # |a - b|² by the matrix-product expansion: in float64 its rounding (about 1e-16 of |a|²) is far below any width here.
        squared = (a.square().sum(dim=1, keepdim=True) + b.square().sum(dim=1) - 2 * a @ b.T).clamp_(min=0)
        total = sum(torch.exp(squared / (-2 * s * s)) for s in widths)
        return (total.sum() - total.diagonal().sum()) / (len(a) * (len(a) - 1)) if same else total.mean()

    return float(kernel_sum(x, x, True) + kernel_sum(y, y, True) - 2 * kernel_sum(x, y, False))


class Scores(NamedTuple):
    """How close a generator's samples are to the data: the squared MMD (``mmd_rbf``), and on the ring the modes
    covered and the fraction of good samples (None where they do not apply, as for images)."""

    mmd: float
    modes: int | None = None
    quality: float | None = None


def _closer(before: float, after: float, tolerance: float) -> str:
    """``after``'s MMD² against ``before``'s, tied when within ``1 + tolerance`` times each other (gpucourse.wording's tie rule)."""
    return choose(after, before, 1 + tolerance, less="closer to the data", more="farther from the data",
                  tie=f"no clear difference (the two MMD² are within {tolerance:.0%})")


def compare_sentence(before_name: str, before: Scores, after_name: str, after: Scores, *, tolerance: float = 0.1) -> str:
    """One sentence comparing two generators' ``Scores``, its verdict read from the squared MMDs: ``after`` is closer
    to the data when its MMD² is lower, farther when higher, beyond a tie of ``1 + tolerance`` times (``_closer``)."""
    parts = []
    if before.modes is not None and after.modes is not None:
        parts.append(f"{before.modes} → {after.modes} modes")
    if before.quality is not None and after.quality is not None:
        parts.append(f"{before.quality:.0%} → {after.quality:.0%} good samples")
    parts.append(f"MMD² {before.mmd:.3g} → {after.mmd:.3g}")
    return f"{before_name} → {after_name}: {', '.join(parts)}: {after_name} is {_closer(before.mmd, after.mmd, tolerance)}."


def _in_seeds(count: int, seeds: int) -> str:
    if count == seeds:
        return f"in all {seeds} seeds"
    return "in none of the seeds" if count == 0 else f"in {count} of {seeds} seeds"


def _span(values, fmt: str) -> str:
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)}-{fmt.format(high)}"


def sweep_sentences(results: dict[str, list[Scores]], baseline: str, *, tolerance: float = 0.1) -> list[str]:
    """``results``: each setting's ``Scores``, one per seed (the same seeds, in the same order, for every setting).
    Returns one line per setting: its range over the seeds, and, for each setting but ``baseline``, in how many
    seeds it came closer to the data than ``baseline`` did with the same seed (lower MMD² beyond the tie of
    ``_closer``); then which setting had the lowest MMD² in each seed."""
    if baseline not in results:
        raise ValueError(f"the baseline {baseline!r} is not one of the settings {list(results)}")
    seeds = len(results[baseline])
    if seeds == 0 or any(len(runs) != seeds for runs in results.values()):
        raise ValueError(f"every setting needs the same number of seeds (at least one): {({k: len(v) for k, v in results.items()})}")
    lines = []
    for name, runs in results.items():
        line = f"{name}: MMD² {_span([r.mmd for r in runs], '{:.2g}')}"
        if all(r.modes is not None for r in runs):
            line += f", {_span([r.modes for r in runs], '{}')} of the modes"
        if all(r.quality is not None for r in runs):
            line += f", {_span([r.quality for r in runs], '{:.0%}')} good samples"
        if name != baseline:
            closer = sum(_closer(b.mmd, r.mmd, tolerance) == "closer to the data" for r, b in zip(runs, results[baseline]))
            farther = sum(_closer(b.mmd, r.mmd, tolerance) == "farther from the data" for r, b in zip(runs, results[baseline]))
            line += f"; closer to the data than {baseline} {_in_seeds(closer, seeds)}"
            if farther:
                line += f", farther {_in_seeds(farther, seeds)}"
        lines.append(line)
    best = [min(results, key=lambda name: results[name][seed].mmd) for seed in range(seeds)]
    winners = collections.Counter(best)
    if len(winners) == 1:
        lines.append(f"Lowest MMD² in every seed: {best[0]}.")
    else:
        lines.append("Lowest MMD², seed by seed: " + ", ".join(f"{name} {_in_seeds(count, seeds)}" for name, count in winners.most_common())
                     + ": no setting was best in every seed.")
    return lines
