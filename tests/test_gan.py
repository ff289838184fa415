"""gpucourse.gan: the ring, the digits as GAN data, and the seed's networks."""

import math

import pytest
import torch

from gpucourse import gan


def test_ring_centers_lie_evenly_on_the_circle():
    centers = gan.ring_centers()
    assert centers.shape == (8, 2)
    assert torch.allclose(centers.norm(dim=1), torch.full((8,), gan.RING_RADIUS))
    angles = torch.atan2(centers[:, 1], centers[:, 0]).remainder(2 * math.pi)
    assert torch.allclose(angles.sort().values.diff(), torch.full((7,), 2 * math.pi / 8), atol=1e-6)
    with pytest.raises(ValueError, match="at least one mode"):
        gan.ring_centers(0)


def test_sample_ring_is_seeded_and_near_the_modes():
    a = gan.sample_ring(2000, generator=torch.Generator().manual_seed(3))
    b = gan.sample_ring(2000, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (2000, 2)
    nearest = torch.cdist(a, gan.ring_centers()).min(dim=1)
    assert float(nearest.values.max()) < 6 * gan.RING_STD  # every point within 6 standard deviations of its mode
    assert len(nearest.indices.unique()) == 8  # and every mode drawn


def test_digits_for_gan_are_flat_and_in_tanh_range():
    digits = gan.digits_for_gan("test")
    assert digits.shape == (360, 64)
    assert float(digits.min()) >= -1.0 and float(digits.max()) <= 1.0 and float(digits.min()) == -1.0


def test_the_seed_networks_have_the_seed_shapes():
    G, D = gan.mlp_generator(), gan.mlp_discriminator()
    z = torch.randn(5, 100)
    with torch.no_grad():
        images = G(z)
    assert images.shape == (5, 784) and float(images.abs().max()) <= 1.0  # Tanh
    assert D(images).shape == (5, 1)
    assert [tuple(p.shape) for p in G.parameters()] == [(256, 100), (256,), (784, 256), (784,)]
    ring_G = gan.mlp_generator(8, 128, 2, layers=2, tanh=False)
    assert len([m for m in ring_G if isinstance(m, torch.nn.Linear)]) == 3 and not isinstance(ring_G[-1], torch.nn.Tanh)
    assert len([m for m in gan.mlp_discriminator(2, 16, layers=3) if isinstance(m, torch.nn.Linear)]) == 4
