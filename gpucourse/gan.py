"""Module 10's data and networks: the ring of Gaussians, the digits as GAN data, the seed's MLPs.

The seed article's GAN is an MLP generator (100 -> 256 -> 784, Tanh) and an MLP discriminator
(784 -> 256 -> 1, LeakyReLU(0.2), Sigmoid), trained with BCE and Adam at 2e-4. Here the
discriminator returns *logits* (no Sigmoid): the loss applies the sigmoid itself, stably
(lecture 10 shows why). The losses, the coverage measure and the training loops are the
assignment's to write; nothing here grades anything.
"""

from __future__ import annotations

import math

import torch
from torch import nn

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
