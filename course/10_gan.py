# %% [markdown]
# # 10 · GANs on the GPU: the seed's GAN trained well, without host syncs, in mixed precision
#
# A generative adversarial network (Goodfellow et al., "Generative Adversarial Nets", NeurIPS 2014) is two networks trained against each other: a generator G that turns random noise into samples, and a discriminator D that tells real samples from G's.
# This module's seed article (seed 003, the one lecture 09 starts from) builds the classic one: two small MLPs, a `Sigmoid` on D with `BCELoss`, Adam for both, and a loop that alternates D and G steps.
# Its loop never sees an image: its "real data" is `torch.randn(batch_size, 784)`, Gaussian noise.
# This lecture trains the seed's networks on data with structure, judges the result by a distance between distributions, then makes the loop fast.
#
# What you will learn:
#
# 1. the seed's architecture and loop, the minimax game they play, and why the generator maximises log D(G(z)) instead of minimising log(1 - D(G(z))) (the non-saturating loss);
# 2. why `Sigmoid` followed by `BCELoss` breaks for confident discriminators, and why `BCEWithLogitsLoss` does not;
# 3. a GAN trained on the ring of eight Gaussians of the Unrolled-GAN paper, watched live, scored by modes covered and by a maximum mean discrepancy (MMD), and an exponential moving average (EMA) of G's weights;
# 4. mode collapse over several seeds, and what helps against it (a two time-scale learning rate, more D steps, a stronger D);
# 5. what a loop that reads tensors on the host costs on a GPU, how to count those reads on any machine, and how to log without them;
# 6. less work per step (no gradients for a frozen D), mixed precision (autocast, `GradScaler`), `torch.compile` and CUDA graphs with a capturable fused optimizer, each measured where it runs;
# 7. the seed's GAN and a DCGAN on real handwritten digits.
#
# Everything runs on a CPU for real, on one thread; the cells say what a GPU changes, and measure it where there is one.
# Every sentence that states a measured outcome is printed by code from this run's numbers (`gpucourse.gan` and `gpucourse.timing` choose the words).

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import collections
import copy
import io
import itertools
import math
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import gpucourse
from gpucourse import gan, plots, syncs, timing, widgets
from gpucourse.devices import compile_or_eager, compile_support

dev = gpucourse.device()
GPU = dev.type == "cuda"
THREADS = 1  # the CPU timings use one thread, so they do not depend on what else runs on this machine
torch.set_num_threads(THREADS)
WHERE = f"measured on {gpucourse.describe(torch.device('cpu'))}"
ON_DEV = f"measured on {gpucourse.describe(dev)}"
print(f"Running on {gpucourse.describe(dev)}; CPU timings with {THREADS} thread")
_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. The seed's GAN
#
# The seed's code, in its own terms:
#
# - **the generator**: `nn.Linear(100, 256)`, `ReLU`, `nn.Linear(256, 784)`, `Tanh`: 100 numbers of Gaussian noise to 784 values in [-1, 1], which the article says represent a 28 × 28 image;
# - **the discriminator**: `nn.Linear(784, 256)`, `LeakyReLU(0.2)` (so no unit goes dead), `nn.Linear(256, 1)`, `Sigmoid`: the probability that its input is real;
# - **the losses and optimizers**: `nn.BCELoss()` for each network, and `optim.Adam(..., lr=0.0002)` for each, with Adam's default betas (0.9, 0.999);
# - **the loop**: for each epoch, `d_steps` D steps, each on a fresh batch of "real data" labelled 1 and a batch of fakes from fresh latents labelled 0; then one G step, on fakes from a *new* latent batch, labelled 1.
#
# ```python
# for epoch in range(num_epochs):                                   # the seed's loop, shortened
#     for _ in range(d_steps):
#         d_optimizer.zero_grad()
#         real_data = torch.randn(batch_size, 784)                  # its "real data": Gaussian noise
#         fake_data = generator(torch.randn(batch_size, 100))
#         d_loss = d_loss_fn(discriminator(real_data), real_labels) \
#             + d_loss_fn(discriminator(fake_data.detach()), fake_labels)   # ones, zeros; detach: D's step must not train G
#         d_loss.backward()
#         d_optimizer.step()
#     g_optimizer.zero_grad()
#     fake_data = generator(torch.randn(batch_size, 100))           # a fresh latent batch for G's step
#     g_loss = g_loss_fn(discriminator(fake_data), torch.ones(batch_size, 1))   # G wants D to call its fakes real
#     g_loss.backward()
#     g_optimizer.step()
# ```
#
# The loop never reads a loss: no `print`, no `.item()`.
# Its "real data" is Gaussian noise, which a `Tanh` generator cannot even reach in full (the cell below counts how much of it lies outside [-1, 1]): as written, the seed's GAN learns to imitate noise, not images.
# `gpucourse.gan` builds the same networks, with one change that section 2 explains: the discriminator returns a **logit** (any real number; its sigmoid is the probability), and the loss applies the sigmoid itself.

# %%
G_seed, D_seed = gan.mlp_generator(), gan.mlp_discriminator()  # the seed's sizes: 100 -> 256 -> 784 and 784 -> 256 -> 1
print(G_seed, D_seed, sep="\n")
for name, net in (("generator", G_seed), ("discriminator", D_seed)):
    print(f"{name}: {sum(p.numel() for p in net.parameters()):,} parameters")
seed_real = torch.randn(256, 784)  # a batch of the seed's "real data"
print(f"the seed's real data: {float((seed_real.abs() > 1).float().mean()):.0%} of its values lie outside [-1, 1], out of a Tanh's reach")
print("D's outputs for 3 of them (logits, not probabilities):", D_seed(seed_real[:3]).detach().view(-1))

# %% [markdown]
# ### The game, and the generator's two losses
#
# D and G play a minimax game over one value (Goodfellow et al., 2014):
#
# $$\min_G \max_D \; \mathbb{E}_{x \sim \text{data}}[\log D(x)] + \mathbb{E}_{z}[\log(1 - D(G(z)))]$$
#
# D maximises it by calling real samples real and fakes fake; G minimises it by making D call its fakes real.
# Taken literally, G minimises $\log(1 - D(G(z)))$, the **saturating** loss.
# Early in training, G's samples are poor and D rejects them confidently: $D(G(z)) \approx 0$, where $\log(1 - D)$ is flat, so G gets almost no gradient exactly when it has most to learn.
# The same paper's fix, used by the seed's G step (`g_loss_fn`, a `BCELoss`, on D's output against `torch.ones(batch_size, 1)`): G *maximises* $\log D(G(z))$ instead, the **non-saturating** loss, which has the same fixed point but is steep where D rejects.
# Written with D's logit $\ell$ (so $D = \sigma(\ell)$), the two are $\log(1 - \sigma(\ell)) = -\mathrm{softplus}(\ell)$ and $-\log \sigma(\ell) = \mathrm{softplus}(-\ell)$; their gradients with respect to the logit, from autograd:

# %%
logit = torch.linspace(-8, 8, 161, requires_grad=True)
g_losses = {"saturating: minimise log(1 - D(G(z)))": -F.softplus(logit), "non-saturating: minimise -log D(G(z))": F.softplus(-logit)}
fig, (ax_loss, ax_grad) = plt.subplots(1, 2, figsize=(9.5, 3))
for name, loss in g_losses.items():
    (grad,) = torch.autograd.grad(loss.sum(), logit)
    ax_loss.plot(logit.detach(), loss.detach(), label=name)
    ax_grad.plot(logit.detach(), grad.abs(), label=name)
    print(f"{name}: |gradient| {grad[20].abs():.4f} at logit {logit[20]:.0f} (D sure it is fake), {grad[140].abs():.4f} at logit {logit[140]:.0f}")
for ax, ylabel in ((ax_loss, "G's loss"), (ax_grad, "|d loss / d logit|")):
    ax.axvspan(-8, -2, color="0.9")
    ax.set_xlabel("D's logit for a fake sample")
    ax.set_ylabel(ylabel)
ax_grad.text(-7.7, 0.5, "early training:\nD rejects the fakes", fontsize=8)
ax_loss.legend(fontsize=8, loc="lower left")
fig.suptitle("the generator's two losses (computed, not measured)", fontsize=9)
plt.show()

# %% [markdown]
# Where D is sure a sample is fake (the grey band), the saturating loss's gradient is the sigmoid itself, close to 0, while the non-saturating one's is close to 1.
# Both vanish where D is fooled (logits far right), which is where G has nothing left to learn from that sample.
# Every generator loss in this lecture is the non-saturating one.
#
# ## 2. Logits, not probabilities: `BCELoss` after `Sigmoid` breaks
#
# The seed's D ends in a `Sigmoid`, and `BCELoss` takes the log of its output: $-[y \log p + (1 - y) \log(1 - p)]$.
# In float32, $\sigma(20) = 1 - 2 \cdot 10^{-9}$ rounds to exactly 1 (float32 has no number between $1 - 6 \cdot 10^{-8}$ and 1), so $\log(1 - p) = \log 0$.
# At the other end, $\sigma(-100) \approx 3.7 \cdot 10^{-44}$ *is* a float32: below the smallest normal number ($1.2 \cdot 10^{-38}$) but above the smallest subnormal ($1.4 \cdot 10^{-45}$), with only a few significant bits left.
# It comes out as 0 anyway when the sigmoid is evaluated as $1 / (1 + e^{100})$: $e^{100} \approx 2.7 \cdot 10^{43}$ overflows float32 (largest value $3.4 \cdot 10^{38}$) to infinity, and $1 / \infty = 0$.
# Torch's CPU kernel uses that formula (`sigmoid_kernel` in `aten/src/ATen/native/cpu/UnaryOpsKernel.cpp`), while $e^{-100} / (1 + e^{-100})$, which never overflows for a negative logit, keeps the subnormal; the cell prints the limits from `torch.finfo` and all three values.
# Then $\log 0 = -\infty$; `BCELoss` clamps each log at -100 (PyTorch's `BCELoss` documentation), so the loss comes out as 100 whatever the logit, and the gradient through the flat sigmoid is 0.
# `BCEWithLogitsLoss` takes the logit and computes $\max(\ell, 0) - \ell y + \log(1 + e^{-|\ell|})$, which never exponentiates a large number.
# Both on the logits a confident discriminator produces, against the exact values (float64):

# %%
f32, minus_100 = torch.finfo(torch.float32), torch.tensor(-100.0)
print(f"float32: smallest normal {f32.tiny:.2g}, smallest subnormal {torch.nextafter(torch.tensor(0.0), torch.tensor(1.0)).item():.2g}, "
      f"largest {f32.max:.2g}; exp(100) in float32 = {torch.exp(-minus_100).item()}")
print(f"sigma(-100): exact {torch.sigmoid(minus_100.double()).item():.3g} | torch.sigmoid in float32 {torch.sigmoid(minus_100).item():.3g} | "
      f"1 / (1 + exp(100)) {(1 / (1 + torch.exp(-minus_100))).item():.3g} | exp(-100) / (1 + exp(-100)) "
      f"{(torch.exp(minus_100) / (1 + torch.exp(minus_100))).item():.3g}\n")
bce_after_sigmoid, bce_with_logits = nn.BCELoss(), nn.BCEWithLogitsLoss()
print(f"{'logit':>8} {'label':>5} {'sigmoid':>9} | {'BCELoss':>8} {'gradient':>8} | {'with logits':>11} {'gradient':>8} | {'exact':>7} {'gradient':>8}")
for value, label in [(20.0, 0.0), (100.0, 0.0), (1e4, 0.0), (-20.0, 1.0), (-100.0, 1.0), (-1e4, 1.0)]:
    target = torch.tensor([label])
    fragile_logit, stable_logit = torch.tensor([value], requires_grad=True), torch.tensor([value], requires_grad=True)
    probability = torch.sigmoid(fragile_logit)
    fragile, stable = bce_after_sigmoid(probability, target), bce_with_logits(stable_logit, target)
    (fragile_grad,), (stable_grad,) = torch.autograd.grad(fragile, fragile_logit), torch.autograd.grad(stable, stable_logit)
    exact = F.softplus(torch.tensor(value, dtype=torch.float64) * (1 - 2 * label))  # -log(1 - sigmoid) for label 0, -log(sigmoid) for 1
    exact_grad = torch.sigmoid(torch.tensor(value, dtype=torch.float64)) - label
    print(f"{value:8g} {label:5.0f} {probability.item():9.3g} | {fragile.item():8.4g} {fragile_grad.item():8.3g} | "
          f"{stable.item():11.6g} {stable_grad.item():8.3g} | {exact.item():7.6g} {exact_grad.item():8.3g}")

# %% [markdown]
# The first three rows are D's loss on a fake it calls real with confidence: read the `BCELoss` column and its gradient, against the exact ones, for the samples that fool D most.
# The last three are G's non-saturating loss on a fake D rejects: where the sigmoid column reads 0, `BCELoss` has nothing left to take the log of.
# Compare the logits version with the exact columns in every row.
# Which is why `gan.mlp_discriminator` returns logits, and every loss below is `F.binary_cross_entropy_with_logits`.
# Under mixed precision (section 6) the sigmoid saturates far sooner: float16 rounds a sigmoid of 9 to 1 already, which is why CUDA autocast refuses `binary_cross_entropy` and `BCELoss` with an error and runs the logits version in float32 (the PyTorch AMP page, "Prefer binary_cross_entropy_with_logits over binary_cross_entropy").
#
# ## 3. A GAN on a ring of eight Gaussians
#
# Images are hard to judge by eye; a two-dimensional data set is not.
# `gan.sample_ring` draws points from 8 Gaussians whose centres sit evenly on a circle: the benchmark Metz et al. made the standard test of whether a GAN finds *every* mode ("Unrolled Generative Adversarial Networks", ICLR 2017, section 3.1 and their Figure 1), used since by most papers on mode collapse.
# This course's ring has a radius of 2 and a standard deviation of 0.05 per Gaussian.
# The dashed circles have a radius of 0.2: a sample inside one is a good sample of that mode, one of the measures used after training.

# %%
LATENT, BATCH, RADIUS = 8, 256, 0.2
centers = gan.ring_centers()
fig, ax = plt.subplots(figsize=(3.2, 3.2))
plots.ring_scatter(ax, gan.sample_ring(1000, generator=torch.Generator().manual_seed(0)), centers, radius=RADIUS, title="1,000 real samples")
plt.show()

# %% [markdown]
# The networks are the seed's MLPs, resized for 2-D points: G is 8 → 128 → 128 → 2 (no `Tanh`: the points lie outside [-1, 1]), D is 2 → 128 → 128 → 1 logit.
# Both train with Adam at 1e-3 and betas (0.5, 0.999): the seed keeps Adam's default β₁ = 0.9, but the DCGAN paper (Radford et al., "Unsupervised Representation Learning with Deep Convolutional Generative Adversarial Networks", ICLR 2016) found that 0.9 made training oscillate and 0.5 steadied it, and most GAN code has used 0.5 since.
# One training step, as in the seed's loop with one D step: a D step on real points and a batch of fakes, then a G step through the D just updated, with the non-saturating loss.
# One difference: the seed draws a fresh latent batch for G's step, while `gan_steps` reuses the D step's fakes, which saves one pass of G a step (PyTorch's own DCGAN example, `dcgan/main.py` in `pytorch/examples`, does the same).
#
# `gan_steps` below runs such steps and keeps each step's two losses in a tensor on the device; nothing in it reads a tensor's value on the host (section 5 says why that matters, and finds the one exception, inside `GradScaler`).
# Two details pay off later: it freezes D during G's step (`D.requires_grad_(False)`, section 6 measures why), and it can keep exponential moving averages of G's weights (`ema`, below).
# Its `d_steps`, `precision` and `scaler` options are sections 4 and 6's; left at their defaults, they change nothing.

# %%
def gan_steps(parts, draw, steps, *, d_steps=1, precision=None, scaler=None, freeze_d=True, ema=()):
    """``steps`` GAN steps of ``parts`` = (G, D, opt_g, opt_d); each: ``d_steps`` D steps on fresh batches from ``draw()``
    (-> real (n, d), latents (n, k)), then one G step on the last batch of fakes, D frozen unless ``freeze_d`` is False;
    then each (average, decay) in ``ema`` moves towards G. Returns each step's (D loss, G loss): a (steps, 2) tensor on
    the networks' device, never read on the host."""
    G, D, opt_g, opt_d = parts
    device = next(G.parameters()).device
    history = torch.empty(steps, 2, device=device)

    def update(optimizer, loss):
        optimizer.zero_grad(set_to_none=True)
        (scaler.scale(loss) if scaler else loss).backward()
        scaler.step(optimizer) if scaler else optimizer.step()

    for step in range(steps):
        for _ in range(d_steps):
            real, z = draw()
            with torch.autocast(device.type, dtype=precision or torch.float32, enabled=precision is not None):
                fake = G(z)
                real_logits, fake_logits = D(real), D(fake.detach())  # detach: D's step must not reach into G
                d_loss = F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits)) \
                    + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
            update(opt_d, d_loss)
        D.requires_grad_(not freeze_d)  # frozen: G's backward passes through D to G without computing D's weight gradients
        with torch.autocast(device.type, dtype=precision or torch.float32, enabled=precision is not None):
            fooled = D(fake)  # the updated D; G's fakes labelled real: the non-saturating loss
            g_loss = F.binary_cross_entropy_with_logits(fooled, torch.ones_like(fooled))
        update(opt_g, g_loss)
        D.requires_grad_(True)
        if scaler:
            scaler.update()
        for average, decay in ema:
            gan.ema_update(average, G, decay)
        history[step, 0], history[step, 1] = d_loss.detach(), g_loss.detach()  # a copy on the device, not a read
    return history


def ring_gan(d_layers=2, lr_g=1e-3, lr_d=1e-3, device="cpu", seed=0, **adam):
    """(G, D, opt_g, opt_d) for the ring, from ``seed``: G 8 -> 128 -> 128 -> 2, D 2 -> 128 [-> 128] -> 1, Adam with betas (0.5, 0.999)."""
    torch.manual_seed(seed)
    G = gan.mlp_generator(LATENT, 128, 2, layers=2, tanh=False).to(device)
    D = gan.mlp_discriminator(2, 128, layers=d_layers).to(device)
    return (G, D, torch.optim.Adam(G.parameters(), lr=lr_g, betas=(0.5, 0.999), **adam),
            torch.optim.Adam(D.parameters(), lr=lr_d, betas=(0.5, 0.999), **adam))


def ring_draw(batch, seed=0):
    """draw() -> (batch real ring points, batch latents), seeded, on the CPU: the same data on every run. The points are
    picked from 65,536 drawn once (drawing each batch afresh, centres and all, cost a sixth of a training step)."""
    data = torch.Generator().manual_seed(seed)
    pool = gan.sample_ring(2**16, generator=data)
    return lambda: (pool[torch.randint(len(pool), (batch,), generator=data)], torch.randn(batch, LATENT, generator=data))

# %% [markdown]
# 2,000 steps, on the CPU, one thread, wherever this notebook runs, so that its figures and numbers are the same on every machine (sections 5 and 6 use the GPU where there is one).
# Every 250 steps the loop reads the mean losses of those 250 steps (one host read) and redraws the figure: the losses on the left, on the right 1,000 samples of G, from the same latents in every frame, over the real modes.
#
# Alongside, two **exponential moving averages of G's weights** are kept: after every step, each average moves a fraction 1 - decay of the way towards G's current weights, so it remembers about 1 / (1 - decay) steps (100 at a decay of 0.99, 1,000 at 0.999).
# G's own weights keep moving as G and D chase each other; their average can sit nearer the point they circle (Yazıcı et al., "The Unusual Effectiveness of Averaging in GAN Training", ICLR 2019; ProGAN and StyleGAN, Karras et al. 2018 and 2019, sample from such an average).
# PyTorch has it as `torch.optim.swa_utils.AveragedModel` with `get_ema_multi_avg_fn(decay)` (the `torch.optim` documentation, "Weight Averaging"); `gan.ema_update` is the same update written out, because `AveragedModel` reads its step counter on the host every update (section 5 counts it).

# %%
STEPS, LOG_EVERY, DECAYS = 2000, 250, (0.99, 0.999)
parts = ring_gan()
G = parts[0]
averages = [(copy.deepcopy(G), decay) for decay in DECAYS]  # each starts from G's initial weights
draw = ring_draw(BATCH)
shown_z = torch.randn(1000, LATENT, generator=torch.Generator().manual_seed(1))
done = 0


def samples_panel(ax):
    with torch.no_grad():
        plots.ring_scatter(ax, G(shown_z), centers, radius=RADIUS, title="G's samples")


monitor = widgets.TrainingMonitor(STEPS, label=WHERE, unit="step", extra=samples_panel)
started, train_seconds = time.perf_counter(), 0.0
while done < STEPS:
    chunk_started = time.perf_counter()
    d_mean, g_mean = gan_steps(parts, draw, LOG_EVERY, ema=averages).mean(dim=0).tolist()  # the one host read every LOG_EVERY steps
    train_seconds += time.perf_counter() - chunk_started
    done += LOG_EVERY
    monitor.update(done, {"D": d_mean, "G": g_mean})
print(f"{STEPS} steps: {train_seconds:.1f} s of training, {time.perf_counter() - started:.1f} s with the figure's redraws ({WHERE})")

# %% [markdown]
# Watch the right panel: whether G's samples spread over the ring, whether they gather into the modes, and in what order.
# The losses tell little on their own.
# They do not fall the way a classifier's do: each network's progress raises the other's loss, so they hover in a band (a D that cannot tell real from fake at all would sit at $2 \log 2 \approx 1.39$, and G at $\log 2 \approx 0.69$).
# So the result is measured on samples, 1,000 of them, with three numbers:
#
# - **modes covered**: how many of the 8 centres have at least one of G's samples within 0.2 of them;
# - **good samples**: the fraction of G's samples that lie within 0.2 of some centre;
# - **MMD²**, the squared maximum mean discrepancy between G's samples and 1,000 fresh points of the ring (Gretton et al., "A Kernel Two-Sample Test", JMLR 2012; `gan.mmd_rbf`): the difference between the two distributions' mean embeddings under Gaussian kernels, here of widths 0.1, 0.5 and 2 (a mode, the gap between neighbours, the ring).
#   It is 0 in expectation for two samples of one distribution, and it also sees what the counts miss: modes with the wrong share of the samples, or the wrong shape.
#
# A generator can cover every mode with poor samples (spread all over) or give perfect samples of one mode (collapsed); the counts tell those apart, and MMD² ranks both against the data.
# The distance between two draws of the ring itself shows how far from 0 the estimate lands by chance.

# %%
eval_z = torch.randn(1000, LATENT, generator=torch.Generator().manual_seed(100))
ring_eval = gan.sample_ring(1000, generator=torch.Generator().manual_seed(101))
BANDWIDTHS = (0.1, 0.5, 2.0)


def ring_scores(G):
    """(G's samples on eval_z, their gan.Scores: MMD² to ring_eval, modes with a sample within RADIUS, fraction within RADIUS of a mode)."""
    with torch.no_grad():
        samples = G(eval_z).float().cpu()
    near = torch.cdist(samples, centers) <= RADIUS  # (1000, 8): is each sample within RADIUS of each centre?
    return samples, gan.Scores(gan.mmd_rbf(samples, ring_eval, BANDWIDTHS), int(near.any(dim=0).sum()), float(near.any(dim=1).float().mean()))


noise_floor = gan.mmd_rbf(gan.sample_ring(1000, generator=torch.Generator().manual_seed(102)), ring_eval, BANDWIDTHS)
_, trained = ring_scores(G)
print(f"after {STEPS} steps: {trained.modes} of 8 modes covered, {trained.quality:.0%} of the samples within {RADIUS} of a mode, "
      f"MMD² {trained.mmd:.3g} (two draws of the ring itself: {noise_floor:.1g})")
for average, decay in averages:
    print(gan.compare_sentence("G", trained, f"its EMA at decay {decay}", ring_scores(average)[1]))

# %% [markdown]
# ## 4. Mode collapse, and what helps
#
# G is rewarded for samples that D calls real, not for variety: if one mode fools D, G can put every sample there.
# D then learns to reject that mode, G moves to another, and the two chase each other around the ring without ever covering it: **mode collapse**.
# It takes little to get there.
# The seed's discriminator has one hidden layer; give the ring's D one hidden layer too (2 → 128 → 1) and keep everything else.
# Then, from that setting, one change at a time:
#
# - **G's learning rate ÷ 10**: G moves slower than D adapts.
#   Separate learning rates for D and G are the two time-scale update rule (TTUR) of Heusel et al., "GANs Trained by a Two Time-Scale Update Rule Converge to a Local Nash Equilibrium" (NeurIPS 2017), who prove that training with two time scales converges to a local Nash equilibrium under stochastic-approximation assumptions; a D rate ten times G's is a TTUR-style choice (the same paper introduced the Fréchet Inception Distance, the image world's counterpart of this lecture's MMD²);
# - **5 D steps per G step**: D is trained closer to its optimum before G follows it (the k steps of the original GAN paper's algorithm, which used k = 1; the Wasserstein GAN's critic takes 5, Arjovsky et al., 2017);
# - **D with two hidden layers**: section 3's D.
#
# One seed proves little about a GAN: the same setting can collapse from one initialisation and not from the next.
# So each setting trains from 3 seeds (networks and data), 400 steps each: short runs, enough to tell a collapsed G from a spreading one, not to finish training.

# %%
SWEEP_STEPS, SEEDS, BASELINE = 400, (0, 1, 2), "D with 1 hidden layer"
settings = {BASELINE: {}, "G's learning rate ÷ 10": dict(lr_g=1e-4), "5 D steps per G step": dict(d_steps=5), "D with 2 hidden layers": dict(d_layers=2)}
sweep, sweep_samples = {}, {}
started = time.perf_counter()
for name, change in settings.items():
    setting = dict(d_layers=1, lr_g=1e-3, d_steps=1) | change
    sweep[name] = []
    for seed in SEEDS:
        trial = ring_gan(setting["d_layers"], lr_g=setting["lr_g"], seed=seed)
        gan_steps(trial, ring_draw(BATCH, seed), SWEEP_STEPS, d_steps=setting["d_steps"])
        samples, scores = ring_scores(trial[0])
        sweep[name].append(scores)
        sweep_samples.setdefault(name, samples)  # the first seed's, for the figure
    print(f"{name:24s}", " | ".join(f"seed {seed}: {s.modes}/8 modes, {s.quality:4.0%} good, MMD² {s.mmd:.3f}" for seed, s in zip(SEEDS, sweep[name])))
print(f"({len(settings) * len(SEEDS)} runs of {SWEEP_STEPS} steps in {time.perf_counter() - started:.0f} s, {WHERE})\n")
print(*gan.sweep_sentences(sweep, BASELINE), sep="\n")

# %%
fig, axes = plt.subplots(1, len(sweep), figsize=(9.5, 2.6))
for ax, (name, runs) in zip(axes, sweep.items()):
    modes = sorted({min(run.modes for run in runs), max(run.modes for run in runs)})
    plots.ring_scatter(ax, sweep_samples[name], centers, radius=RADIUS,
                       title=f"{name}\n{'-'.join(map(str, modes))} of 8 modes; MMD² {min(r.mmd for r in runs):.2f}-{max(r.mmd for r in runs):.2f}")
    ax.title.set_fontsize(7.5)
fig.suptitle(f"seed {SEEDS[0]}'s samples after {SWEEP_STEPS} steps; each title spans the {len(SEEDS)} seeds ({WHERE})", fontsize=8)
plt.show()

# %% [markdown]
# Read the lines above the figure, printed from these runs: whether a change beat the one-hidden-layer D in every seed or only in some, and which setting came closest to the ring in each seed.
# A count of modes alone can mislead here: a G whose samples are spread thinly over the whole plane reaches all 8 modes with few good samples, which the good-sample fraction and MMD² expose.
# The costs differ too: 5 D steps cost five D updates a step, a deeper D one more layer.
# There is no universal recipe: GANs are sensitive to these settings, so measure coverage and distance over several seeds, not the losses.
#
# ## 5. A loop that never waits: host syncs
#
# A GPU runs its kernels asynchronously: a call like `D(real)` only *queues* work, and Python goes on to queue the next op while the GPU computes.
# As long as the CPU queues faster than the GPU runs, the GPU never idles.
# Reading a value breaks that: `.item()` must wait until every kernel queued before it has finished, then copy the result to the host, and while Python then queues the next step, the GPU has nothing to do.
# Every read of a tensor's value is such a **synchronisation**:
#
# - `loss.item()`, `float(loss)`, `int(t)`, `t.tolist()`, `t.cpu()`;
#   `t.numpy()` is not on the list because on a CUDA tensor it raises an error instead (the `torch.Tensor.numpy` documentation: it converts only tensors on the CPU), so GPU code writes `t.cpu().numpy()`, and the `.cpu()` is the sync;
# - printing a tensor, or formatting it in an f-string;
# - a Python `if` on a tensor (`if loss < 0.1:`, `if torch.isnan(loss):`), which calls `bool(t)`;
# - ops whose output size depends on the values (`t[mask]`, `nonzero`, `unique`): the host must know the size to allocate the result.
#
# On a CPU they cost next to nothing, so they go unnoticed until the code meets a GPU.
# `syncs.count_host_reads()` counts them on any machine, each with the line that made it.
# Below, a loop as many training scripts write it (the seed itself reads nothing): `gan_steps` one step at a time, a NaN check, the losses kept as Python numbers, a log line.

# %%
def chatty_steps(parts, draw, steps, log_file):
    """gan_steps one step at a time, logged as many scripts do: four kinds of host read a step."""
    d_history, g_total = [], 0.0
    for step in range(steps):
        d_loss, g_loss = gan_steps(parts, draw, 1)[0]
        if torch.isnan(d_loss):  # a Python `if` on a tensor: bool()
            raise FloatingPointError(f"D's loss is NaN at step {step}")
        d_history.append(d_loss.item())  # .item()
        g_total += float(g_loss)  # float()
        print(f"step {step}: D loss", d_loss, file=log_file)  # printing a tensor
    return d_history, g_total / steps


torch.manual_seed(0)
# Made once and moved to the device once, so the loop itself copies nothing from the host (a copy from pageable host memory waits too).
premade = (gan.sample_ring(64 * BATCH, generator=torch.Generator().manual_seed(0), device=dev).view(64, BATCH, 2),
           torch.randn(64, BATCH, LATENT).to(dev))
batches = itertools.cycle(zip(*premade))
device_draw = lambda: next(batches)  # noqa: E731 - one line, like the draws above
device_parts = ring_gan(device=dev)
with syncs.count_host_reads() as chatty_reads:
    chatty_steps(device_parts, device_draw, 10, io.StringIO())
print(f"chatty loop, 10 steps: {len(chatty_reads)} host reads")
for (what, where), count in collections.Counter((read.what, read.where.split(":")[-1]) for read in chatty_reads).items():
    print(f"  {count:2d} x {what} (line {where})")

# %% [markdown]
# The same 10 steps with `gan_steps`: the losses stay in a tensor on the device, the NaN check becomes a tensor too (checked once, after the loop), and the log is written every N steps from that tensor.
# The last lines count one EMA update each way: `AveragedModel.update_parameters` against `gan.ema_update`.

# %%
with syncs.count_host_reads() as quiet_reads:
    history = gan_steps(device_parts, device_draw, 10)
print(f"gan_steps, 10 steps: {quiet_reads}")
with syncs.count_host_reads() as logging_reads:
    history = gan_steps(device_parts, device_draw, 100)
    finite = bool(torch.isfinite(history).all())  # the NaN check, once for all 100 steps
    means = [history[first:first + 25].mean(dim=0).tolist() for first in range(0, 100, 25)]  # a log line every 25 steps
print(f"100 steps, logged every 25 and checked once: {len(logging_reads)} host reads (all finite: {finite}); means {means[-1]}")
swa_average = torch.optim.swa_utils.AveragedModel(device_parts[0], multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.99))
for name, ema_step in (("AveragedModel.update_parameters", lambda: swa_average.update_parameters(device_parts[0])),
                       ("gan.ema_update", lambda: gan.ema_update(swa_average.module, device_parts[0], 0.99))):
    ema_step()  # the first update copies the weights; count a later one
    with syncs.count_host_reads() as ema_reads:
        ema_step()
    print(f"{name:32s} {len(ema_reads)} host reads an update{': ' + ', '.join(read.what for read in ema_reads) if ema_reads else ''}")

# %% [markdown]
# What the reads cost, measured: the chatty loop against `gan_steps`, 20 steps each, on this notebook's device.
# On a GPU, `torch.cuda.set_sync_debug_mode("warn")` also makes CUDA report every synchronising call, which the cell counts.

# %%
for name, run in (("chatty loop", lambda: chatty_steps(device_parts, device_draw, 20, io.StringIO())),
                  ("gan_steps (sync-free)", lambda: gan_steps(device_parts, device_draw, 20))):
    t = timing.measure(run, warmup=1, min_run_time=0.3, num_threads=THREADS)
    timing.warn_if_noisy(t, name)
    print(f"{name:22s} {20 / t.median:6.0f} steps/s ({t.device})")
    if GPU:
        with warnings.catch_warnings(record=True) as reported:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        print(f"{'':22s} CUDA reported {len(reported)} synchronising calls in 20 steps")
if not GPU:
    print("Not measured here (no GPU): on one, the chatty loop's 80 reads each stop the host until the queue drains, so the GPU idles"
          "\nwhile Python queues every next op; set_sync_debug_mode('warn') would report each of them, and none in gan_steps.")

# %% [markdown]
# On a CPU the difference between the two is only the work the reads themselves do, not waiting: a read of a value the CPU has just computed is a function call.
# On a GPU every read costs at least a round trip between host and device plus the time the GPU then waits for Python to queue more work, and a step of these small networks is only a few dozen short kernels, so the waits can take much of the step.
# The rule: keep losses and checks on the device, and read them every N steps, as section 3's loop does (8 reads in 2,000 steps).
#
# ## 6. Less work, then faster work
#
# **No gradients for a frozen D.**
# G's loss is computed through D, so G's backward must pass through D's layers to reach G; it does not need D's *weight* gradients, which D's next step throws away (`zero_grad` comes first).
# The seed computes them anyway: its `g_loss.backward()` fills D's `.grad` too, and its next `d_optimizer.zero_grad()` discards them.
# `D.requires_grad_(False)` for the G step tells autograd so: it still computes the gradient with respect to D's input, but no longer the products that give each weight's gradient, nor their accumulation into `.grad` (the autograd mechanics notes, "Locally disabling gradient computation", in the PyTorch documentation).
# The saving is those products only, a part of a step that also runs G, D's own step and two optimizers.
# The result should be the same to the last bit, which the cell checks on the seed's networks and data before timing one step each way, interleaved (`timing.compare_speed`):

# %%
def seed_parts():
    """The seed's networks (logits out) and optimizers, Adam at 2e-4 with its default betas, on the notebook's device."""
    torch.manual_seed(0)
    G, D = gan.mlp_generator().to(dev), gan.mlp_discriminator().to(dev)
    return G, D, torch.optim.Adam(G.parameters(), lr=2e-4), torch.optim.Adam(D.parameters(), lr=2e-4)


seed_batch = lambda: (torch.randn(64, 784, device=dev), torch.randn(64, 100, device=dev))  # noqa: E731 - the seed's "real data" and latents
frozen, unfrozen, same_batches = seed_parts(), seed_parts(), [seed_batch() for _ in range(5)]
histories = [gan_steps(p, iter(same_batches).__next__, 5, freeze_d=f) for p, f in ((frozen, True), (unfrozen, False))]
identical = torch.equal(*histories) and all(torch.equal(a, b) for a, b in zip(frozen[0].parameters(), unfrozen[0].parameters()))
print(f"5 steps with D frozen in G's step and without: losses and G's weights identical: {identical}")


def check_finite(args, history):
    """compare_speed's check of every timed step: both losses finite."""
    assert bool(torch.isfinite(history).all()), f"a timed step returned the losses {history.tolist()}"


freeze_speed = timing.compare_speed(lambda real, z: gan_steps(frozen, lambda: (real, z), 1, freeze_d=False),
                                    lambda real, z: gan_steps(frozen, lambda: (real, z), 1),
                                    seed_batch, check=check_finite, num_threads=THREADS, charge_cpu_time=True)
print(f"a step of the seed's GAN (batch 64) with D frozen in G's step: {freeze_speed}")

# %% [markdown]
# **Mixed precision** runs the matrix products in a 16-bit format and keeps the weights, the optimizer and the sensitive ops (losses, softmax, sums) in float32: `torch.autocast` chooses per op.
# The two formats, with the numbers `torch.finfo` gives (printed below):
#
# - **bfloat16** has float32's 8 exponent bits and 7 stored mantissa bits (8 bits of precision with the implicit leading 1): the same range, a spacing of $2^{-7}$ above 1.
#   Gradients underflow no sooner than in float32, so nothing else is needed.
#   It runs natively only on bfloat16 units: on x86 CPUs the AVX512_BF16 or AMX-BF16 instructions, on NVIDIA GPUs compute capability 8.0 and later (the A100 on), which is the test `torch.cuda.is_bf16_supported(including_emulation=False)` makes (its source, `torch/cuda/__init__.py`).
#   Two checks say yes without them: `torch.cuda.is_bf16_supported()` with its default `including_emulation=True` also on a T4 or V100, which emulate bfloat16, and `torch.ops.mkldnn._is_mkldnn_bf16_supported()` on any CPU with AVX-512 BW, VL and DQ, where oneDNN runs bfloat16 with float32 instructions (`mkldnn_bf16_device_check` in `aten/src/ATen/native/mkldnn/Utils.h`; lecture 06 puts the two CPU checks side by side).
# - **float16** has 5 exponent bits and 10 stored mantissa bits: its smallest normal number is $6 \cdot 10^{-5}$, and small gradients underflow to 0.
#   `torch.amp.GradScaler` multiplies the loss by a large scale before `backward`, divides the gradients by it before the optimizer step, skips a step whose gradients overflowed and lowers the scale (loss scaling, NVIDIA's "Mixed Precision Training" guide).
#
# That skip is a decision in Python, about values on the device: `GradScaler.step` reads whether any gradient was infinite, a host read every optimizer step, unless the optimizer can take the decision on the device itself (`Adam(fused=True)` can: `GradScaler.step` in `torch/amp/grad_scaler.py` hands such an optimizer the scale and an on-device "found inf" flag instead).
# Counted, for one step with each (the scaler works the same on any device):

# %%
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    info = torch.finfo(dtype)
    print(f"{str(dtype):15s} {info.bits} bits: {round(-math.log2(info.eps))} stored mantissa bits (spacing above 1: {info.eps:.2g}), "
          f"smallest normal {info.tiny:.2g}, largest {info.max:.2g}")
for name, fused in (("GradScaler + Adam", False), ("GradScaler + Adam(fused=True)", True)):
    scaled_parts = ring_gan(device=dev, fused=fused)
    scaler = torch.amp.GradScaler(dev.type)
    gan_steps(scaled_parts, device_draw, 1, scaler=scaler)  # warm-up: the scaler makes its state on the first step
    with syncs.count_host_reads() as scaler_reads:
        gan_steps(scaled_parts, device_draw, 1, scaler=scaler)
    where = ", ".join(f"{read.what} in {read.where.split()[-1].strip('()')}()" for read in scaler_reads)
    print(f"{name:30s} {len(scaler_reads)} host reads a step{': ' + where if where else ''}")

# %% [markdown]
# **`torch.compile`** traces G and D and fuses their pointwise ops (bias adds, LeakyReLU, the loss) into generated kernels, forward and backward; the optimizers stay eager.
# On a GPU, fewer kernels mean fewer launches, which is what a step of small networks is mostly made of; on a CPU the gain is smaller and can be negative.
#
# Steps per second of `gan_steps` on this notebook's device, each variant on fresh networks, each measured after a warm-up (the first compiled calls compile, and are timed apart):

# %%
# bfloat16 units, not emulation: on a GPU the compute-capability test; on a CPU the instructions themselves, not oneDNN's gate.
capabilities = getattr(torch.cpu, "get_capabilities", dict)()
bf16_units = (torch.cuda.is_bf16_supported(including_emulation=False) if GPU
              else bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16")))
variants = {"float32": (ring_gan(device=dev), {})}
if bf16_units:
    variants["autocast bfloat16"] = (ring_gan(device=dev), dict(precision=torch.bfloat16))
else:
    print("no bfloat16 units here (see above): autocast would emulate them, so bfloat16 is left out")
if GPU:
    variants["autocast float16 + GradScaler (fused Adam)"] = (ring_gan(device=dev, fused=True),
                                                              dict(precision=torch.float16, scaler=torch.amp.GradScaler("cuda")))
G_c, D_c, opt_g_c, opt_d_c = ring_gan(device=dev)
compiled_parts = (compile_or_eager(G_c), compile_or_eager(D_c), opt_g_c, opt_d_c)  # eager where torch.compile cannot run, and labelled so
compile_started = time.perf_counter()
gan_steps(compiled_parts, device_draw, 2)  # the first steps trace and compile G and D, forward and backward, D frozen and not
compile_seconds = time.perf_counter() - compile_started
variants[compile_support().label("torch.compile (G and D)")] = (compiled_parts, {})
rates = {}
for name, (variant_parts, options) in variants.items():
    t = timing.measure(lambda: gan_steps(variant_parts, device_draw, 20, **options), warmup=2, min_run_time=0.3, num_threads=THREADS)
    timing.warn_if_noisy(t, name)
    rates[name] = 20 / t.median
    print(f"{name:44s} {rates[name]:7.0f} steps/s ({t.device})")
if compile_support().ok:
    print(f"(torch.compile's first steps took {compile_seconds:.1f} s: compiling)")

# %% [markdown]
# **CUDA graphs** go further on a GPU: the whole step's kernel launches (forward, backward, both optimizers) are recorded once and replayed with a single call, so the CPU's launch cost disappears.
# A graph replays fixed work on fixed memory, so the step may not read anything on the host (a capture that meets a sync fails: a sync-free step is the ticket in), its inputs are copied into the same tensors each time, and Adam must keep its step count on the device: `capturable=True` ("whether this instance is safe to capture in a CUDA graph", the `torch.optim.Adam` documentation).
# Mixed precision needs one more piece, since `GradScaler`'s skip decision must stay on the device too.
# With `Adam(fused=True, capturable=True)`, `GradScaler.step` passes the fused kernel the scale and the on-device "found inf" flag, the kernel unscales, checks and skips by itself, and `scaler.update()` adjusts the scale on the device: the whole float16 step, scaler included, can be captured.
# PyTorch tests exactly that (`test_graph_scaling_fused_optimizers` in `test/test_cuda.py`); its CUDA-graphs notes ("CUDA semantics", "Usage with torch.cuda.amp") still advise leaving the optimizer step out of the graph for the usual optimizers, whose `GradScaler.step` syncs.
# `torch.compile(mode="reduce-overhead")` captures the compiled parts automatically; below, the whole step is captured by hand with `torch.cuda.graph`, as PyTorch's CUDA-graphs documentation shows, in float32 and in float16 with the scaler.

# %%
def graphed_step(graph_parts, options):
    """A CUDA graph of one gan_steps step of ``graph_parts`` with ``options``, captured on static input tensors;
    returns replay(steps), which copies fresh batches into those tensors and replays the graph."""
    static_real, static_z = premade[0][0].clone(), premade[1][0].clone()
    side = torch.cuda.Stream()  # warm-up on a side stream before capture, as the documentation requires
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            gan_steps(graph_parts, lambda: (static_real, static_z), 1, **options)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gan_steps(graph_parts, lambda: (static_real, static_z), 1, **options)

    def replay(steps):
        for _ in range(steps):
            real, z = device_draw()
            static_real.copy_(real)
            static_z.copy_(z)
            graph.replay()
    return replay


if GPU:
    graphed = {"CUDA graph of the whole step": (ring_gan(device=dev, capturable=True), {}),
               "CUDA graph, float16 + GradScaler": (ring_gan(device=dev, fused=True, capturable=True),
                                                    dict(precision=torch.float16, scaler=torch.amp.GradScaler("cuda")))}
    for name, (graph_parts, options) in graphed.items():
        t = timing.measure(graphed_step(graph_parts, options), 20, warmup=2, min_run_time=0.3)
        timing.warn_if_noisy(t, name)
        rates[name] = 20 / t.median
        print(f"{name:44s} {rates[name]:7.0f} steps/s ({t.device})")
else:
    print("No GPU here: CUDA graphs exist only on one. There, replaying the whole step removes every launch's CPU cost, float16 and"
          "\nGradScaler included with Adam(fused=True, capturable=True); compare those bars with the eager ones. Not measured here.")

# %%
fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(rates)))
plots.provenance_bars(ax, [(name, rate, "measured") for name, rate in rates.items()], xlabel=f"ring GAN training steps per second ({ON_DEV})", fmt="{:.0f}")
plt.show()

# %% [markdown]
# Read each bar against float32, on the machine it was measured on.
# On one CPU thread, a step of these networks is small matrix products and per-op overhead, and neither bfloat16 nor `torch.compile` is sure to pay there.
# The matrices are too small for bfloat16 units to matter much, and each compiled call adds overhead of its own (guards, the autograd wrapper around the generated code) to a step that is mostly overhead already; the bars say which paid on this machine.
# On a GPU the same step is a few dozen small kernels, so launches and syncs can set its time: the sync-free loop, then fewer kernels (`torch.compile`), then no launches at all (a CUDA graph) are what can pay, while 16-bit arithmetic matters once the networks and batches are large enough to keep the GPU busy (the seed's 784-value samples with big batches).
#
# ## 7. The seed's GAN, and a DCGAN, on handwritten digits
#
# Back to the seed's own networks, on real images: the 1,437 training digits of module 08, 8 × 8 pixels, flattened to 64 values in [-1, 1] (`gan.digits_for_gan`).
# The seed's sizes, with 64 pixels instead of 784: G is 100 → 256 → 64 with `Tanh`, D is 64 → 256 → 1 logit.
# An MLP has no notion of neighbouring pixels; convolutions do.
# Beside it, a **DCGAN** at the digits' size (`gan.dcgan_generator`, `gan.dcgan_discriminator`), built by the DCGAN paper's rules: strided convolutions instead of pooling, fractionally-strided ones to upsample in G, BatchNorm in both networks (not on D's input nor G's output), ReLU in G with a `Tanh` output, LeakyReLU in D.
# Both train the same way, for the same 600 steps: Adam at the seed's 2e-4 with DCGAN's betas (0.5, 0.999), batches of 64, the same `gan_steps`; both are scored by MMD² to the 360 test digits (kernel widths 2, 4 and 8, on distances between 64-pixel images).

# %%
DIGIT_STEPS, DIGIT_BANDWIDTHS = 600, (2.0, 4.0, 8.0)
digits, test_digits = gan.digits_for_gan("train"), gan.digits_for_gan("test")
digit_z = torch.randn(len(test_digits), 100, generator=torch.Generator().manual_seed(1))  # as many samples as test digits
digit_nets = {"the seed's MLPs": lambda: (gan.mlp_generator(100, 256, 64), gan.mlp_discriminator(64, 256)),
              "DCGAN": lambda: (gan.dcgan_generator(100), gan.dcgan_discriminator())}
digit_samples, digit_scores = {}, {}
for name, make in digit_nets.items():
    torch.manual_seed(0)
    G_digits, D_digits = make()
    digit_parts = (G_digits, D_digits, torch.optim.Adam(G_digits.parameters(), lr=2e-4, betas=(0.5, 0.999)),
                   torch.optim.Adam(D_digits.parameters(), lr=2e-4, betas=(0.5, 0.999)))
    picks = torch.Generator().manual_seed(0)
    started = time.perf_counter()
    gan_steps(digit_parts, lambda: (digits[torch.randint(len(digits), (64,), generator=picks)], torch.randn(64, 100, generator=picks)), DIGIT_STEPS)
    seconds = time.perf_counter() - started
    G_digits.eval()  # BatchNorm from its running statistics: a sample does not depend on the rest of its batch
    with torch.no_grad():
        digit_samples[name] = G_digits(digit_z)
    digit_scores[name] = gan.Scores(gan.mmd_rbf(digit_samples[name], test_digits, DIGIT_BANDWIDTHS))
    print(f"{name:16s} {sum(p.numel() for p in G_digits.parameters()):6,} + {sum(p.numel() for p in D_digits.parameters()):6,} parameters, "
          f"{1000 * seconds / DIGIT_STEPS:.1f} ms a step, MMD² to the test digits {digit_scores[name].mmd:.3g} ({WHERE})")
print(f"(the 360 test digits against 360 training digits: MMD² {gan.mmd_rbf(digits[:360], test_digits, DIGIT_BANDWIDTHS):.1g})")
(mlp_name, mlp_scores), (dcgan_name, dcgan_scores) = digit_scores.items()
print(gan.compare_sentence(mlp_name, mlp_scores, dcgan_name, dcgan_scores))

# %%
fig, axes = plt.subplots(1, 1 + len(digit_samples), figsize=(7.5, 2.8), layout="constrained")
plots.image_grid(axes[0], test_digits[:25], 5, 5, title="test digits")
for ax, (name, images) in zip(axes[1:], digit_samples.items()):
    plots.image_grid(ax, images[:25], 5, 5, title=f"{name}\nMMD² {digit_scores[name].mmd:.2g}")
fig.suptitle(f"G's samples after {DIGIT_STEPS} steps ({WHERE})", fontsize=9)
plt.show()

# %% [markdown]
# Look at the strokes: whether each generator draws connected pen strokes or blurred blobs, and whether different latents give different digits.
# The printed line says which is closer to the test digits by MMD², and the time per step says what the convolutions cost on this CPU.
#
# ## Summary
#
# - A GAN is a game: D learns to tell real from fake, G learns to fool D.
#   G minimises $-\log D(G(z))$ (non-saturating), which keeps its gradient where D rejects its samples.
# - A discriminator returns logits, and the loss is `BCEWithLogitsLoss`: `Sigmoid` then `BCELoss` returns a clamped 100 and a zero gradient once D is confident (computed as $1 / (1 + e^{-\ell})$, the sigmoid reaches 0 once $e^{-\ell}$ overflows, long before its true value leaves float32's range), and gets worse in 16 bits.
# - Judge a GAN on samples, not losses: the modes its samples reach, the fraction of good samples, and a distance between distributions (MMD², FID for images), over several seeds; an EMA of G's weights is a cheap candidate to sample from, measured like the rest.
# - Against mode collapse, try one change at a time and measure it: separate learning rates (TTUR), more D steps, a stronger D; and for images, convolutions (DCGAN).
# - On a GPU, every read of a tensor's value stops the host until the queue drains.
#   Keep losses and checks on the device and read them every N steps; count the reads with `syncs.count_host_reads()` on any machine and with `torch.cuda.set_sync_debug_mode("warn")` on a GPU.
#   `GradScaler` needs a fused optimizer to stay sync-free, and `AveragedModel` reads its counter on the host.
# - Then do less and launch less: freeze D in G's step, mixed precision for large networks, `torch.compile` to fuse, CUDA graphs (with `capturable=True`, and `fused=True` for `GradScaler`) to replay the whole step.
#
# ## What the course covered, and where to go next
#
# Modules 01-07 built the GPU from the bottom: what a kernel launch costs and how to time it honestly, the SIMT architecture and occupancy, coalesced memory and bank conflicts, warp divergence, streams and overlapped copies, profiling and fusion, and the compilation of one matrix product onto tiles and tensor cores.
# Modules 08-10 applied that to whole networks: convolutions as GEMMs, recurrences and their launches, and now a training loop kept on the device.
# To go further: the PyTorch performance tuning guide and the profiler's trace viewer on your own models; CUDA graphs and `torch.compile(mode="reduce-overhead")` for launch-bound training; Triton for the fused kernel no library offers; and for GANs, spectral normalisation (Miyato et al., 2018) and the Wasserstein GAN with gradient penalty (Gulrajani et al., 2017), the next steps towards stable training on real images.
#
# The assignment (`assignments/10_gan`) asks for the GAN losses from logits, the mode-coverage measure, a training step without host syncs, a ring GAN that covers its modes within a time budget, and a fast mixed-precision loop for a GPU.
