# %% [markdown]
# # Assignment 10: GANs — stable losses, measured mode coverage, a training step without host syncs, a ring GAN trained well
#
# This assignment checks the ideas of lecture 10 (`course/10_gan.ipynb`).
# You will write the GAN losses from logits so that they stay finite, a measure of mode collapse, a training step that never makes the host wait for the device, a ring GAN that learns a ring the grader draws, within a CPU time budget, and a fast mixed-precision training loop for a GPU.
#
# How it works:
# - Write your code where a cell says `raise NotImplementedError(...)`; delete that line.
# - Run the test cell under each answer: a quiet cell means the visible tests passed, an error says what is wrong.
# - Grading reruns every test cell, plus hidden tests with other shapes, seeds and edge cases.
# - Everything but one item runs on a CPU; the fast loop's speed item waits for a GPU regrade.
#
# When graded, each training answer runs in a fresh process that holds only this notebook's setup cells and the answer cells it needs, and the grader measures what it returns itself: it counts the host reads of your `train_step` there, compares your fast loop's trajectory with `seed_train_loop`'s, and samples your ring generator in its own process, against a ring it draws when it grades.
#
# Points: 15 autograded (2 of them on a GPU), 1 graded by hand.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %% nbgrader={"grade_id": "imports", "locked": true}
import math

import torch
import torch.nn.functional as F
from torch import nn

import gpucourse
from gpucourse import check, data, gan, syncs, thresholds, timing

DEVICE = gpucourse.device()
print(f"Running on {gpucourse.describe()} (device class {gpucourse.device_class()!r})")
torch.manual_seed(0)


def softplus64(x):
    """log(1 + exp(x)) in float64, exactly for any x (the expected values of the tests are computed with it)."""
    x = x.detach().to("cpu", torch.float64)
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def random_logits(n, scale=3.0, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return ((torch.randn(n, 1, generator=generator, dtype=torch.float64) * scale).to(dtype)).to(DEVICE)


# %% [markdown]
# ## Question 1: the GAN losses, from logits (3 points)
#
# The seed's discriminator ends in `nn.Sigmoid()` and its losses are `nn.BCELoss()`; here the discriminator returns **logits** (its Sigmoid removed), and the losses apply the sigmoid themselves.
# Write `gan_losses(d_real_logits, d_fake_logits)` returning `(d_loss, g_loss)`, two scalar tensors:
# - `d_loss` = BCE(real, 1) + BCE(fake, 0): the binary cross-entropy of the discriminator's logits on a real batch against the label 1, plus that on a generated batch against 0, each averaged over its batch, added as the seed adds `d_real_loss + d_fake_loss`;
# - `g_loss` = BCE(fake, 1), averaged: the *non-saturating* generator loss (the generator maximises log D(G(z)) instead of minimising log(1 − D(G(z)))).
#
# With the logit x and σ the sigmoid, BCE(x, 1) = −log σ(x) and BCE(x, 0) = −log(1 − σ(x)).
# Both must be finite and exact for logits of any size: the hidden tests use ±1e4 in float32, where σ(x) rounds to exactly 0 or 1.
# The two batches may differ in size; float32 and float64; the results on the inputs' device and dtype, differentiable (question 3's step takes gradients through them).
#
# About 4 lines.

# %% nbgrader={"grade_id": "losses_setup", "locked": true} tags=["grader-side"]
# For the tests alone: when graded, this cell runs in the grader, where your answers cannot call what it defines.
def expected_losses(real, fake):
    """(d_loss, g_loss) in float64, exact: BCE(x, 1) = softplus(-x), BCE(x, 0) = softplus(x)."""
    d_loss = softplus64(-real).mean() + softplus64(fake).mean()
    return d_loss, softplus64(-fake).mean()


def check_losses(real, fake, output):
    assert isinstance(output, tuple | list) and len(output) == 2, f"gan_losses should return (d_loss, g_loss), got {type(output).__name__}"
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if real.dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    for name, got, want in zip(("d_loss", "g_loss"), output, expected_losses(real, fake)):
        assert isinstance(got, torch.Tensor) and got.dim() == 0, f"{name} should be a scalar tensor, got {got!r}"
        assert got.dtype == real.dtype and got.device.type == real.device.type, f"{name} is {got.dtype} on {got.device}; the logits are {real.dtype} on {real.device}"
        check.assert_close(got, want.to(got.device, got.dtype), **tolerance, name=f"{name} (batches of {len(real)} and {len(fake)}, {real.dtype})")


# %% nbgrader={"grade_id": "gan_losses", "solution": true}
def gan_losses(d_real_logits, d_fake_logits):
    """Logits (N, 1) of D on a real batch and (M, 1) on a fake one -> (d_loss, g_loss), scalars, finite for any logits."""
    ### BEGIN SOLUTION
    # With the logits, BCE is a softplus: log(1 + exp(-|x|)) plus max(x, 0) parts, no sigmoid that rounds to 0 or 1.
    real_loss = F.binary_cross_entropy_with_logits(d_real_logits, torch.ones_like(d_real_logits))
    fake_loss = F.binary_cross_entropy_with_logits(d_fake_logits, torch.zeros_like(d_fake_logits))
    return real_loss + fake_loss, F.binary_cross_entropy_with_logits(d_fake_logits, torch.ones_like(d_fake_logits))
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_gan_losses", "grade": true, "points": 2}
"""gan_losses gives the seed's BCE losses from logits of moderate size (batches of different sizes, float32 and float64)."""
for n, m, dtype, seed in [(8, 8, torch.float32, 0), (5, 3, torch.float32, 1), (16, 16, torch.float64, 2)]:
    real, fake = random_logits(n, dtype=dtype, seed=seed), random_logits(m, dtype=dtype, seed=seed + 10)
    check_losses(real, fake, gan_losses(real, fake))
### BEGIN HIDDEN TESTS
for n, m, dtype, seed in [(1, 1, torch.float32, 3), (64, 7, torch.float64, 4), (3, 40, torch.float32, 5)]:
    real, fake = random_logits(n, dtype=dtype, seed=seed), random_logits(m, dtype=dtype, seed=seed + 10)
    check_losses(real, fake, gan_losses(real, fake))
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_gan_losses_large_logits", "grade": true, "points": 1}
"""gan_losses stays finite and exact for logits far beyond where a sigmoid rounds to 0 or 1 (±200 in float32)."""
real = torch.tensor([[200.0], [-200.0], [30.0]], device=DEVICE)
fake = torch.tensor([[-200.0], [200.0], [-30.0], [0.5]], device=DEVICE)
check_losses(real, fake, gan_losses(real, fake))
### BEGIN HIDDEN TESTS
real = torch.tensor([[1e4], [-1e4], [20.0]], device=DEVICE)
fake = torch.tensor([[-1e4], [1e4]], device=DEVICE)
check_losses(real, fake, gan_losses(real, fake))
check_losses(fake.double(), real.double(), gan_losses(fake.double(), real.double()))
### END HIDDEN TESTS

# %% [markdown]
# ## Question 2: measuring mode collapse (2 points)
#
# A GAN that has collapsed draws every sample from a few of the data's modes.
# Write `mode_coverage(samples, centers, radius)`: for samples of shape `(n, d)` and mode centres of shape `(k, d)`, return `(covered, quality)`:
# - `covered`, an `int`: how many centres have at least one sample within `radius` of them (Euclidean distance at most `radius`);
# - `quality`, a `float`: the fraction of the samples that lie within `radius` of some centre (the "high-quality" samples).
#
# Exact, for any `n ≥ 1`, `k ≥ 1` and dimension `d`; a distance of exactly `radius` counts as within.
#
# About 4 lines.

# %% nbgrader={"grade_id": "coverage_setup", "locked": true} tags=["grader-side"]
# For the tests alone: when graded, this cell runs in the grader, where your answers cannot call what it defines.
def expected_coverage(samples, centers, radius):
    """(covered, quality), by a loop over the centres in float64."""
    samples, centers = samples.to("cpu", torch.float64), centers.to("cpu", torch.float64)
    near = torch.stack([((samples - center) ** 2).sum(dim=1) <= radius**2 for center in centers], dim=1)  # (n, k)
    return int(near.any(dim=0).sum()), float(near.any(dim=1).double().mean())


def check_coverage(samples, centers, radius, output):
    assert isinstance(output, tuple | list) and len(output) == 2, f"mode_coverage should return (covered, quality), got {output!r}"
    covered, quality = output
    want_covered, want_quality = expected_coverage(samples, centers, radius)
    where = f"{len(samples)} samples, {len(centers)} centres in {centers.shape[1]} dimensions, radius {radius}"
    assert isinstance(covered, int) and not isinstance(covered, bool), f"covered should be an int, got {type(covered).__name__} ({where})"
    assert isinstance(quality, float), f"quality should be a float, got {type(quality).__name__} ({where})"
    assert covered == want_covered, f"covered is {covered}, expected {want_covered} ({where})"
    assert abs(quality - want_quality) <= 1e-9, f"quality is {quality}, expected {want_quality} ({where})"


def blobs(n, centers, spread, seed=0):
    """n samples around randomly chosen ``centers``, Gaussian of std ``spread``."""
    generator = torch.Generator().manual_seed(seed)
    which = torch.randint(len(centers), (n,), generator=generator)
    return centers[which] + spread * torch.randn(n, centers.shape[1], generator=generator)


# %% nbgrader={"grade_id": "mode_coverage", "solution": true}
def mode_coverage(samples, centers, radius):
    """samples (n, d), centers (k, d) -> (centres with a sample within radius, fraction of samples within radius of a centre)."""
    ### BEGIN SOLUTION
    squared = ((samples[:, None, :] - centers[None, :, :]) ** 2).sum(dim=2)  # (n, k), exact: no matmul expansion
    near = squared <= radius**2
    return int(near.any(dim=0).sum()), float(near.any(dim=1).double().mean())
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_mode_coverage", "grade": true, "points": 2}
"""mode_coverage on the ring (some modes empty), exact at the radius, in other dimensions."""
ring = gan.ring_centers()
collapsed = blobs(500, ring[:3], 0.1)  # three modes of eight
check_coverage(collapsed, ring, 0.2, mode_coverage(collapsed, ring, 0.2))
on_the_edge = torch.tensor([[0.5, 0.0], [0.0, -0.5], [0.75, 0.75]], dtype=torch.float64)  # two at exactly the radius
check_coverage(on_the_edge, torch.zeros(1, 2, dtype=torch.float64), 0.5, mode_coverage(on_the_edge, torch.zeros(1, 2, dtype=torch.float64), 0.5))
assert mode_coverage(on_the_edge, torch.zeros(1, 2, dtype=torch.float64), 0.5) == (1, 2 / 3)
### BEGIN HIDDEN TESTS
centers = torch.randn(5, 7, generator=torch.Generator().manual_seed(1)) * 3
points = blobs(300, centers[1:], 0.4, seed=2)
check_coverage(points, centers, 1.0, mode_coverage(points, centers, 1.0))
one = torch.tensor([[3.0]])
check_coverage(one, torch.tensor([[0.0], [2.5], [3.5]]), 0.5, mode_coverage(one, torch.tensor([[0.0], [2.5], [3.5]]), 0.5))
far = blobs(50, ring, 0.01, seed=3) * 10
check_coverage(far, ring, 0.2, mode_coverage(far, ring, 0.2))
### END HIDDEN TESTS

# %% [markdown]
# ## Question 3: a training step without host syncs (4 points)
#
# `seed_train_step` below is the seed's training step (a discriminator step, then a generator step, with the Sigmoid and `BCELoss`) with two changes: its generator step reuses the discriminator step's fake batch, where the seed draws a fresh latent batch, and it returns both losses as Python floats with `.item()`, as training scripts that log every step do (the seed itself never reads a loss).
# Each `.item()` is a **host synchronisation** on a GPU: the CPU stops queueing work until the GPU has finished everything before it.
# Write `train_step(G, D, opt_g, opt_d, real, z)` that does the same two steps and returns both losses as tensors, **without reading any tensor's value on the host**:
# 1. the discriminator step: `fake = G(z)`; `d_loss` from `D(real)` and `D(fake.detach())` with your `gan_losses`; zero D's gradients, backward, `opt_d.step()`;
# 2. the generator step, with the updated D: `g_loss` from `D(fake)` (the same fake batch); zero G's gradients, backward, `opt_g.step()`;
# 3. return `(d_loss, g_loss)`, detached, on the device.
#
# Graded, each where only the setup cells and your answer cells ran (your `train_step` and `gan_losses` cells are checked first to be torch operations only, as module 09 checks its answers; so call torch's functions directly, with no aliases such as `bce = F.binary_cross_entropy_with_logits`, no `with` blocks and no classes in those two cells, and the test cell names the line it refuses):
# - the parameters of G and D after one step match `seed_train_step`'s from the same models, optimizers and batch, in float64, and the returned losses match the floats it returns (2 points);
# - no host reads (2 points): the grader counts everything that makes the host wait for the device during one call (in float64, and in float32 as training runs), with `gpucourse.syncs.count_host_reads()`, and needs 0: `.item()`, `float()`, `bool()` and a Python `if` on a tensor, `print`, f-strings, `tolist`, `numpy`, copies to the host (`.cpu()`, into a tensor made without a device) and blocking copies from it (`torch.ones(n, 1).to(real.device)`: make such tensors on the device, `torch.ones_like`), and ops whose output size depends on the values (boolean-mask indexing and assignment, `nonzero`, `torch.where(mask)`, `bincount`, `F.one_hot` without `num_classes`, ...), seen where torch dispatches its ops, inside library functions too; the optimizers' own step counts live on the host and are not counted.
#
# Try it: `with syncs.count_host_reads() as reads: train_step(...)`, then `print(reads)`.
#
# About 10 lines.

# %% nbgrader={"grade_id": "step_setup", "locked": true}
LATENT = 8


def ring_generator():
    """The ring GAN's generator: latent 8 -> 128 -> 128 -> 2 (ReLU), no Tanh (the ring's points lie outside [-1, 1])."""
    return gan.mlp_generator(LATENT, 128, 2, layers=2, tanh=False)


def ring_discriminator():
    """The ring GAN's discriminator: 2 -> 128 -> 128 -> 1 logit (LeakyReLU 0.2)."""
    return gan.mlp_discriminator(2, 128, layers=2)


def seed_train_step(G, D, opt_g, opt_d, real, z):
    """The seed's step (Sigmoid and BCELoss, one D step then one G step) on one latent batch, plus what the seed never does:
    it returns the losses read with .item(), two host syncs, as a training log would (seed 003 reads nothing)."""
    bce = nn.BCELoss()
    fake = G(z)
    opt_d.zero_grad()
    d_loss = bce(torch.sigmoid(D(real)), torch.ones(len(real), 1, dtype=real.dtype, device=real.device)) \
        + bce(torch.sigmoid(D(fake.detach())), torch.zeros(len(fake), 1, dtype=real.dtype, device=real.device))
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = bce(torch.sigmoid(D(fake)), torch.ones(len(fake), 1, dtype=real.dtype, device=real.device))
    g_loss.backward()
    opt_g.step()
    return d_loss.item(), g_loss.item()


def step_inputs(seed, batch=256, dtype=torch.float64, _g=ring_generator, _d=ring_discriminator, _ring=gan.sample_ring):
    """(G, D, opt_g, opt_d, real, z) from ``seed``: seeded networks in ``dtype`` on DEVICE, Adam at 1e-3 (betas 0.5, 0.999)."""
    torch.manual_seed(seed)
    G, D = _g().to(DEVICE, dtype), _d().to(DEVICE, dtype)
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999))
    generator = torch.Generator().manual_seed(seed)
    real = _ring(batch, generator=generator).to(DEVICE, dtype)
    return G, D, opt_g, opt_d, real, torch.randn(batch, LATENT, generator=generator).to(DEVICE, dtype)


def flat_parameters(*models):
    return torch.cat([p.detach().flatten().cpu() for model in models for p in model.parameters()])


# The function below runs where your answer cells ran too (when graded, a fresh process): what it calls is bound
# when it is defined (the defaults), so a cell that rebinds those names later cannot change what it does.
def one_counted_step(seed, precision="float64", _inputs=step_inputs, _flat=flat_parameters, _count=syncs.count_host_reads):
    """One train_step from step_inputs(seed) in ``precision`` ("float64", or "float32" as training runs), its host reads
    counted: (reads as text, G's and D's parameters after, the losses)."""
    G, D, opt_g, opt_d, real, z = _inputs(seed, dtype={"float64": torch.float64, "float32": torch.float32}[precision])
    with _count() as reads:
        losses = train_step(G, D, opt_g, opt_d, real, z)
    losses = list(losses) if isinstance(losses, tuple | list) else [losses]
    kinds = [f"{type(value).__name__} on {value.device}, requires_grad={value.requires_grad}" if isinstance(value, torch.Tensor)
             else type(value).__name__ for value in losses]
    values = [value.detach().cpu() if isinstance(value, torch.Tensor) else value for value in losses]
    return [str(read) for read in reads], _flat(G, D), values, kinds


def seed_step_result(seed):
    """What seed_train_step does from step_inputs(seed): (G's and D's parameters after, its two losses)."""
    G, D, opt_g, opt_d, real, z = step_inputs(seed)
    losses = seed_train_step(G, D, opt_g, opt_d, real, z)
    return flat_parameters(G, D), losses


def check_step(seed, counted):
    reads, after, losses, kinds = counted
    want_after, want_losses = seed_step_result(seed)
    assert len(losses) == 2, f"train_step should return (d_loss, g_loss), got {len(losses)} value(s)"
    for name, kind, value, want in zip(("d_loss", "g_loss"), kinds, losses, want_losses):
        assert isinstance(value, torch.Tensor), f"train_step's {name} should be a tensor on the device (a float is a host read), got {kind}"
        assert "requires_grad=False" in kind and DEVICE.type in kind, f"{name} should be detached, on {DEVICE}: got {kind}"
        assert abs(float(value) - want) <= 1e-9 * max(1.0, abs(want)), f"{name} is {float(value):.12g}, the seed's step gives {want:.12g}"
    check.assert_close(after, want_after, rtol=1e-9, atol=1e-12, name=f"the parameters of G and D after one train_step (seed {seed})")


# %% nbgrader={"grade_id": "train_step", "solution": true}
def train_step(G, D, opt_g, opt_d, real, z):
    """One D step and one G step on the batch ``real`` and the latent batch ``z``; returns (d_loss, g_loss), detached tensors."""
    ### BEGIN SOLUTION
    fake = G(z)
    d_loss, _ = gan_losses(D(real), D(fake.detach()))
    opt_d.zero_grad(set_to_none=True)
    d_loss.backward()
    opt_d.step()
    _, g_loss = gan_losses(D(real[:1]), D(fake))  # D updated; only the fake half feeds g_loss
    opt_g.zero_grad(set_to_none=True)
    g_loss.backward()
    opt_g.step()
    return d_loss.detach(), g_loss.detach()
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_train_step", "grade": true, "points": 2}
"""After one train_step, G's and D's parameters and the losses match the seed's step (float64, same models and batch)."""
step = check.answers_only(one_counted_step, "train_step", gated=True)  # when graded: where only your answer cells ran
check_step(0, step(0))
### BEGIN HIDDEN TESTS
check_step(7, step(7))
### END HIDDEN TESTS

# %% nbgrader={"grade_id": "test_train_step_no_syncs", "grade": true, "points": 2}
"""train_step reads no tensor's value on the host (counted by the grader during one call, in float64 and in float32)."""
step = check.answers_only(one_counted_step, "train_step", gated=True)
reads, after, losses, kinds = step(1)
assert reads == [], f"train_step made {len(reads)} host read(s), each a host sync on a GPU: " + "; ".join(reads[:5])
check_step(1, (reads, after, losses, kinds))
reads = step(2, "float32")[0]  # as train_ring trains: a step that reads only there is caught too
assert reads == [], f"train_step made {len(reads)} host read(s) in float32, each a host sync on a GPU: " + "; ".join(reads[:5])
### BEGIN HIDDEN TESTS
reads, after, losses, kinds = step(11)
assert reads == [], f"train_step made {len(reads)} host read(s), each a host sync on a GPU: " + "; ".join(reads[:5])
### END HIDDEN TESTS

# %% [markdown]
# ## Question 4: a ring GAN that learns the grader's ring (4 points)
#
# Write `train_ring(steps, seed, ring)`: train a GAN on a ring of Gaussians for `steps` steps and return `(G, history)`.
# The grader chooses the ring when it grades: `ring` is a dict of its `modes` (6 to 9), `radius`, `std` (the spread of each mode) and `center`, and `gan.sample_ring(n, generator=generator, **ring)` draws `n` points from it.
# - `G` is a `ring_generator()` (the architecture above: the grader loads your G's weights into one of its own and samples it there);
# - `history` is a tensor of shape `(steps, 2)`: each step's `(d_loss, g_loss)`, kept on the device while training (read it after the loop, not every step);
# - seed everything from `seed` (`torch.manual_seed(seed)` before making the networks, a `torch.Generator().manual_seed(seed)` for the data), so a seed gives the same generator.
#
# You choose the rest: the discriminator (`ring_discriminator()` is a good start), the optimizers and learning rates, the batch size, how many D steps per G step; you may call your `train_step`.
#
# Graded (4 points): the grader draws a ring of its own, calls `train_ring(RING_STEPS, seed, ring)` (3000 steps), loads G's weights into its own `ring_generator()`, draws 4000 samples from it on latents of its own, and measures how well they follow the ring's distribution, with its own code (`ring_scores`); it needs:
# - at least all but one of the modes covered: a sample within `4 * std` of the centre;
# - at least `QUALITY_NEEDED` = 50 % of the samples within `4 * std` of a centre;
# - the spread of each mode that holds at least 20 samples between `SPREAD_RANGE` = 0.3 and 4 times the ring's `std` (a generator that puts every sample on a centre has the right modes and no distribution);
# - no mode holding more than `SHARE_LIMIT` = 3 times an even share of the samples near a mode;
# - an energy distance to 4000 points of the ring at most `ENERGY_NEEDED` = 0.35 (2 E|x − y| − E|x − x'| − E|y − y'|, over the samples x and the ring's points y: it grows when the modes' shares or shapes are wrong);
# - that G learned it: the grader also calls `train_ring(EARLY_STEPS, seed, ring)` (20 steps; graded, a few more), and that G must not follow the ring yet (an energy distance above `ENERGY_NEEDED`: the reference's is 0.9-2.4 there), as no GAN does after so few steps; a generator whose weights are set by hand follows it from the start;
# - and the training done within `TRAIN_BUDGET_SECONDS` = 36 s of CPU time on one thread (counted on the grader's quiet-machine clock; your call fails if it takes longer).
#
# The reference (Adam at 1e-3 for both networks, betas (0.5, 0.999), a batch of 256, one D step per G step) took 9-13 s on one thread of a 2-core AMD EPYC; on 12 drawn rings it covered every mode, with 69-95 % of its samples within 4 std, spreads of 0.6-2.3 times `std`, a largest mode of 1.1-1.6 times an even share and energy distances of 0.004-0.12 (two draws of the ring itself: about 0.001).
#
# About 15 lines.

# %% nbgrader={"grade_id": "ring_setup", "locked": true}
RING_STEPS = 3000
QUALITY_NEEDED, SPREAD_RANGE, ENERGY_NEEDED = 0.5, (0.3, 4.0), 0.35  # about 3x from the reference's worst on 12 rings
SHARE_LIMIT = 3.0  # no mode holds more than 3 times an even share of the samples near a mode (the reference: at most 1.6)
TRAIN_BUDGET_SECONDS = 36.0  # about three times the reference's time
EARLY_STEPS = 20
SAMPLES = 4000


def draw_ring(seed):
    """The ring the grader trains on, from its ``seed``: 6-9 modes, radius 1.5-2.5, std 0.04-0.06, centre within 1 of 0."""
    u = torch.rand(5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).tolist()
    return {"modes": 6 + int(u[0] * 4), "radius": round(1.5 + u[1], 3), "std": round(0.04 + 0.02 * u[2], 4),
            "center": (round(2 * u[3] - 1, 3), round(2 * u[4] - 1, 3))}


def trained_ring(steps, seed, ring, _threads=timing.fixed_threads):
    """train_ring(steps, seed, ring), run where only the setup cells and your answer cells ran, on one thread as the grader
    runs it: G's weights and the history, as plain tensors. (Networks this small train faster on one thread than on two.)"""
    with _threads(1):
        G, history = train_ring(steps, seed, dict(ring))
    assert isinstance(G, nn.Module), f"train_ring should return (G, history) with G an nn.Module, got {type(G).__name__}"
    weights = {name: value.detach().cpu() for name, value in G.state_dict().items()}
    return weights, history.detach().cpu() if isinstance(history, torch.Tensor) else history


def ring_samples(weights, seed):
    """SAMPLES points from a ring_generator() of the grader's, holding ``weights``, on latents of the grader's ``seed``."""
    G = ring_generator()
    try:
        G.load_state_dict(weights)
    except (RuntimeError, TypeError, AttributeError) as error:
        raise AssertionError(f"train_ring's G is not a ring_generator() (its weights do not fit one: {str(error).splitlines()[0]})") from None
    with torch.no_grad():
        return G.double()(torch.randn(SAMPLES, LATENT, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))


def check_history(history, steps):
    assert isinstance(history, torch.Tensor) and tuple(history.shape) == (steps, 2), \
        f"history should be a ({steps}, 2) tensor of each step's (d_loss, g_loss), got {history if not isinstance(history, torch.Tensor) else tuple(history.shape)}"
    assert bool(torch.isfinite(history).all()), "history holds losses that are not finite"


def energy_distance(x, y):
    """2 E|x - y| - E|x - x'| - E|y - y'|: 0 only when the two samples come from one distribution."""
    return float(2 * torch.cdist(x, y).mean() - torch.cdist(x, x).mean() - torch.cdist(y, y).mean())


def ring_scores(samples, ring, seed):
    """(modes covered, fraction within 4 std of a centre, each mode's spread / std (modes of 20 samples or more), the largest
    mode's share over an even share, energy distance)."""
    centers = gan.ring_centers(ring["modes"], ring["radius"], center=ring["center"], dtype=torch.float64)
    distance, nearest = torch.cdist(samples, centers).min(dim=1)
    near = distance <= 4 * ring["std"]
    counts = torch.bincount(nearest[near], minlength=len(centers))
    spreads = [float((distance[near & (nearest == k)] ** 2).mean().div(2).sqrt()) / ring["std"] for k in range(len(centers)) if counts[k] >= 20]
    real = gan.sample_ring(len(samples), generator=torch.Generator().manual_seed(seed), **ring).double()
    largest = float(counts.max() * len(centers) / counts.sum().clamp(min=1))
    return int((counts > 0).sum()), float(near.double().mean()), spreads, largest, energy_distance(samples, real)


def check_ring(weights, ring, seed):
    """The grader's samples of G (latents from ``seed``) against the grader's ring, measured by the grader's own code."""
    covered, quality, spreads, largest, energy = ring_scores(ring_samples(weights, seed), ring, seed)
    modes, near = ring["modes"], f"4 std ({4 * ring['std']:.3g})"
    print(f"latent seed {seed}: {covered} of {modes} modes covered, {quality:.1%} of the samples within {near} of a mode, "
          f"spreads {min(spreads, default=0):.2f}-{max(spreads, default=0):.2f} x std, the largest mode {largest:.2f} x an even share, "
          f"energy distance {energy:.4f}")
    assert covered >= modes - 1, f"G covers {covered} of the ring's {modes} modes (a sample within {near}); at least {modes - 1} needed"
    assert quality >= QUALITY_NEEDED, f"{quality:.1%} of G's samples lie within {near} of a mode; at least {QUALITY_NEEDED:.0%} needed"
    low, high = SPREAD_RANGE
    assert spreads and all(low <= spread <= high for spread in spreads), \
        f"the spread of G's modes is {min(spreads, default=0):.3g}-{max(spreads, default=0):.3g} times the ring's std; {low}-{high} needed"
    assert largest <= SHARE_LIMIT, f"one of G's modes holds {largest:.2f} times an even share of the samples; at most {SHARE_LIMIT} needed"
    assert energy <= ENERGY_NEEDED, f"the energy distance between G's samples and the ring is {energy:.4f}; at most {ENERGY_NEEDED} needed"


def check_learned(early_weights, ring, steps):
    """G after ``steps`` steps of train_ring must not follow the ring yet: the distribution is learned, not set by hand."""
    energy = energy_distance(ring_samples(early_weights, 100), gan.sample_ring(SAMPLES, generator=torch.Generator().manual_seed(100), **ring).double())
    assert energy > ENERGY_NEEDED, (f"after {steps} steps train_ring's G already follows the ring (energy distance {energy:.4f}): no GAN learns "
                                    f"a ring in {steps} steps (the reference's is above 0.8), so G's weights were not learned from the ring")


# %% nbgrader={"grade_id": "train_ring", "solution": true}
def train_ring(steps, seed, ring):
    """Train a GAN on the ring ``ring`` (gan.sample_ring's keywords) for ``steps`` steps from ``seed``; return (G, history (steps, 2))."""
    ### BEGIN SOLUTION
    torch.manual_seed(seed)
    G, D = ring_generator().to(DEVICE), ring_discriminator().to(DEVICE)
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999))
    generator = torch.Generator().manual_seed(seed)
    history = torch.zeros(steps, 2, device=DEVICE)  # zeros: a loop that stops early leaves no uninitialised rows
    for step in range(steps):
        real = gan.sample_ring(256, generator=generator, device=DEVICE, **ring)
        z = torch.randn(256, LATENT, generator=generator).to(DEVICE)
        history[step] = torch.stack(train_step(G, D, opt_g, opt_d, real, z))  # on the device: no sync
    return G, history
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_train_ring", "grade": true, "points": 4}
"""train_ring's generator, sampled by the grader, follows a ring the grader drew (modes, quality, spread, energy distance),
trained within the budget."""
ring, train_seed, early_steps = draw_ring(0), 0, EARLY_STEPS  # graded: another ring, drawn from a seed of the grader's
### BEGIN HIDDEN TESTS
ring, train_seed, early_steps = draw_ring(4242), 3, EARLY_STEPS + 13
### END HIDDEN TESTS
train = check.answers_only(trained_ring, "train_ring", seconds=TRAIN_BUDGET_SECONDS)
weights, history = train(RING_STEPS, train_seed, ring)
check_history(history, RING_STEPS)
check_ring(weights, ring, seed=100)
early_weights, early_history = train(early_steps, train_seed, ring)
check_history(early_history, early_steps)
check_learned(early_weights, ring, early_steps)
### BEGIN HIDDEN TESTS
check_ring(weights, ring, seed=2026)  # other latents: a generator that learned the ring follows it from any draw
### END HIDDEN TESTS

# %% [markdown]
# ## Question 5: a fast training loop for a GPU (2 points, on a GPU)
#
# `seed_train_loop` below trains the seed's full-size GAN (100 → 256 → 784 and 784 → 256 → 1) as a script that logs every step would: float32, `seed_train_step` every step, two `.item()` syncs a step (the seed's own loop reads nothing).
# Write `fast_train_loop(G, D, opt_g, opt_d, real, z, steps)`, which trains the same networks for `steps` steps on the batch `real` and latents `z` and returns the losses as one `(steps, 2)` tensor on the device, with the lecture's techniques:
# - no host synchronisation inside the loop (your `train_step`'s rule);
# - mixed precision: `torch.autocast` with float16 and a `torch.amp.GradScaler` on a GPU (or bfloat16, which needs no scaler), bfloat16 autocast on a CPU that supports it.
#   Prefer bfloat16 where the GPU has it (A100 and later: `torch.cuda.is_bf16_supported(including_emulation=False)`; without that argument it also says yes on a T4 or V100, which only emulate it): `GradScaler.step` reads its overflow check on the host, a sync every optimizer step, unless the optimizer is fused (lecture 10, section 6), and the optimizers here are not.
#
# Graded on a GPU (2 points): `STEPS` steps on a batch of 8192 run at least 1.3× faster than `seed_train_loop`'s.
# That threshold is modelled, not yet measured (`gpucourse.thresholds.gan_loop_speed`: `seed_train_loop` pays its launches and its float32 work one after the other, a sync-free float16 loop the larger of the two: 2.0-6.2× on the cards in `gpu_specs`: V100, T4, A100, L4, H100, H200); `scripts/gpu_check.sh` will calibrate it on the first GPU run.
# On any device the item first checks that your loop trains as `seed_train_loop` does: 5 steps from the same networks on a batch of 64 must end with the parameters within `TRAJECTORY_TOLERANCE` = 0.5 of the way the float32 `seed_train_loop` moved them (the distance between the two, over the distance `seed_train_loop` moved; the reference's bfloat16 loop is at 0.03-0.04, a loop that stops after one step at 0.8), must return the losses of each step within 0.05 (+5 %) of `seed_train_loop`'s (the reference: 2e-4; the margins leave room for a float16 GradScaler that skips a step), and, on a CPU, must read nothing on the host (counted by the grader with `syncs.count_host_reads()`); then it waits for a GPU regrade.
#
# About 15 lines.

# %% nbgrader={"grade_id": "loop_setup", "locked": true}
STEPS = 10


def seed_gan(latent=100, pixels=784):
    """The seed's networks: G 100 -> 256 -> 784 (Tanh), D 784 -> 256 -> 1 (LeakyReLU 0.2; logits, the Sigmoid is in the loss)."""
    return gan.mlp_generator(latent, 256, pixels), gan.mlp_discriminator(pixels, 256)


def seed_train_loop(G, D, opt_g, opt_d, real, z, steps):
    """``steps`` of seed_train_step on one batch, logging each loss as a float: two host syncs a step."""
    return torch.tensor([seed_train_step(G, D, opt_g, opt_d, real, z) for _ in range(steps)])


def loop_models(seed=0, _nets=seed_gan):
    """(G, D, opt_g, opt_d): the seed's GAN from ``seed`` on DEVICE, Adam at the seed's 2e-4, with DCGAN's betas (0.5, 0.999)
    where the seed keeps Adam's defaults (0.9, 0.999)."""
    torch.manual_seed(seed)
    G, D = (net.to(DEVICE) for net in _nets())
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    return G, D, opt_g, opt_d


def loop_batch(batch, seed=0, _load=data.load_digits):
    """(real, z): ``batch`` digits upsampled to 28 x 28 (784 pixels in [-1, 1]) and as many latents, on DEVICE."""
    images, _ = _load("train", size=28)
    generator = torch.Generator().manual_seed(seed)
    real = images[torch.randint(len(images), (batch,), generator=generator)].reshape(batch, -1) * 2 - 1
    return real.to(DEVICE), torch.randn(batch, 100, generator=generator).to(DEVICE)


TRAJECTORY_STEPS, TRAJECTORY_TOLERANCE = 5, 0.5


def loop_trains(seed=0, _models=loop_models, _batch=loop_batch, _flat=flat_parameters, _seed_loop=seed_train_loop, _count=syncs.count_host_reads):
    """fast_train_loop and the float32 seed_train_loop for TRAJECTORY_STEPS steps each, from the same networks and batch of 64
    (run where only your answer cells ran): (your losses, the seed's, where the parameters started, where each loop left them,
    the host reads your loop made)."""
    real, z = _batch(64, seed)
    G, D, opt_g, opt_d = _models(seed)
    start = _flat(G, D)
    with _count() as reads:
        losses = fast_train_loop(G, D, opt_g, opt_d, real, z, TRAJECTORY_STEPS)
    fast_after = _flat(G, D)
    G, D, opt_g, opt_d = _models(seed)
    seed_losses = _seed_loop(G, D, opt_g, opt_d, real, z, TRAJECTORY_STEPS)
    losses = losses.detach().double().cpu() if isinstance(losses, torch.Tensor) else losses
    return losses, seed_losses.double(), start, fast_after, _flat(G, D), [str(read) for read in reads]


def seed_loop_run(real, z, _models=loop_models):
    """STEPS of the seed's loop from fresh seeded networks (timed on a GPU, against fast_loop_run)."""
    return seed_train_loop(*_models(), real, z, STEPS)


def fast_loop_run(real, z, _models=loop_models):
    """STEPS of fast_train_loop from the same networks: the losses, on the CPU."""
    return fast_train_loop(*_models(), real, z, STEPS).float().cpu()


def check_loop(counted):
    """Your loop's trajectory against the float32 seed loop's, and (on a CPU) no host reads."""
    losses, seed_losses, start, fast_after, seed_after, reads = counted
    steps = TRAJECTORY_STEPS
    assert isinstance(losses, torch.Tensor) and tuple(losses.shape) == (steps, 2), f"fast_train_loop should return a ({steps}, 2) tensor of losses, got {losses!r}"
    assert bool(torch.isfinite(losses).all()), f"fast_train_loop's losses are not finite: {losses.tolist()}"
    off = float((fast_after - seed_after).norm() / (seed_after - start).norm())
    assert off <= TRAJECTORY_TOLERANCE, (f"after {steps} steps fast_train_loop's parameters are {off:.2f} of the seed loop's way from where "
                                         f"the seed's float32 loop left them; at most {TRAJECTORY_TOLERANCE} needed")
    wrong = (losses - seed_losses).abs() > 0.05 + 0.05 * seed_losses.abs()
    assert not bool(wrong.any()), f"fast_train_loop's losses {losses.tolist()} are not the seed loop's {seed_losses.tolist()} (within 0.05 + 5%)"
    if gpucourse.device_class() != "cuda":  # on a GPU the speed shows the syncs (a float16 GradScaler reads one a step)
        assert reads == [], f"fast_train_loop made {len(reads)} host read(s) in {steps} steps: " + "; ".join(reads[:5])


# %% nbgrader={"grade_id": "fast_train_loop", "solution": true}
def fast_train_loop(G, D, opt_g, opt_d, real, z, steps):
    """``steps`` GAN steps in mixed precision without host syncs; returns the (steps, 2) losses on the device."""
    ### BEGIN SOLUTION
    # bfloat16 where the GPU has it: it keeps float32's range, so it needs no GradScaler, whose step reads
    # (syncs on) its overflow check; float16 on older GPUs (V100, T4) needs the scaler.
    dtype = torch.bfloat16 if not real.is_cuda or torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    history = torch.zeros(steps, 2, device=real.device)
    for step in range(steps):
        with torch.autocast(real.device.type, dtype=dtype):
            fake = G(z)
            d_loss, _ = gan_losses(D(real), D(fake.detach()))
        opt_d.zero_grad(set_to_none=True)
        scaler.scale(d_loss).backward()
        scaler.step(opt_d)  # without a scaler: opt_d.step()
        with torch.autocast(real.device.type, dtype=dtype):
            _, g_loss = gan_losses(D(real[:1]), D(fake))
        opt_g.zero_grad(set_to_none=True)
        scaler.scale(g_loss).backward()
        scaler.step(opt_g)
        scaler.update()
        history[step, 0], history[step, 1] = d_loss.detach(), g_loss.detach()
    return history
    ### END SOLUTION


# %% nbgrader={"grade_id": "test_fast_train_loop_gpu_speed", "grade": true, "points": 2} tags=["requires-gpu"]
"""On a GPU: STEPS steps of fast_train_loop on a batch of 8192 run 1.3x faster than seed_train_loop's."""
# Modelled, not yet measured (gpucourse.thresholds.gan_loop_speed); scripts/gpu_check.sh calibrates it on the first GPU run.
SPEEDUP_NEEDED = {"cuda": 1.3}
print(thresholds.describe("test_fast_train_loop_gpu_speed", SPEEDUP_NEEDED))
check_loop(check.answers_only(loop_trains, "fast_train_loop")())  # first, a loop that trains as the seed's does
### BEGIN HIDDEN TESTS
check_loop(check.answers_only(loop_trains, "fast_train_loop")(5))
### END HIDDEN TESTS
if gpucourse.device_class() != "cuda":
    print("needs a GPU: there each .item() stalls the launches, and float16 runs on the tensor cores")
else:
    def check_losses_finite(args, output):
        assert bool(torch.isfinite(torch.as_tensor(output)).all()), f"the timed loop's losses are not all finite: {output}"

    result = timing.compare_speed(seed_loop_run, check.answers_only(fast_loop_run, "fast_train_loop"), lambda: loop_batch(8192, seed=1),
                                  check=check_losses_finite)
    check.assert_speedup(result, check.required_speedup(SPEEDUP_NEEDED), name="fast_train_loop vs seed_train_loop")

# %% [markdown]
# ## Question 6: why a sync costs a GPU and not a CPU (1 point, graded by hand)
#
# `seed_train_step` calls `.item()` twice a step.
# On a CPU, removing those calls changes the time of a step by almost nothing; on a GPU, the same change can make a small GAN's training loop several times faster.
# Explain why, from how the CPU and the GPU share the work of a step: what the CPU does when it launches a kernel, what happens at `.item()`, what the GPU does while the CPU prepares the next step's launches with and without the sync, and why none of this exists when the CPU does the arithmetic itself.
# Three to five sentences.

# %% [markdown] nbgrader={"grade_id": "sync_answer", "solution": true, "grade": true, "points": 1}
# YOUR ANSWER HERE
#
# BEGIN SOLUTION
# On a GPU the CPU only queues work: each launch puts a kernel into a stream and returns in a few microseconds, long before the kernel has run, so while the GPU computes step t the CPU can already be queueing step t + 1, and the GPU never waits for Python.
# `.item()` needs the value, so the CPU blocks until every kernel queued before it has finished and the result has been copied back over PCIe; the queue then runs empty, and the GPU idles while the CPU runs Python, the optimizer's bookkeeping and the next launches (tens of microseconds per kernel for a step of dozens of kernels).
# For a small GAN each kernel runs for microseconds, so the step's time becomes the sum of the launch overhead and the GPU's work instead of the larger of the two, plus a round trip per sync.
# On a CPU there is no queue and no second processor: every op has already finished when Python gets its result back, so reading a value is a memory load, and the time of a step is the arithmetic whatever the loop reads.
# END SOLUTION
