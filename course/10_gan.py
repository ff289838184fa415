# %% [markdown]
# # 10 · GANs on the GPU: the seed's GAN trained well, without host syncs, in mixed precision
#
# A generative adversarial network (Goodfellow et al., "Generative Adversarial Nets", NeurIPS 2014) is two networks trained against each other: a generator G that turns random noise into samples, and a discriminator D that tells real samples from G's.
# This module's seed article builds the classic one, two small MLPs trained on images, and its loop is typical of GAN code found in the wild: probabilities instead of logits, and losses read back to Python every step.
# This lecture trains the seed's GAN well, then makes its loop fast.
#
# What you will learn:
#
# 1. the seed's architecture and loop, the minimax game they play, and why the generator maximises log D(G(z)) instead of minimising log(1 - D(G(z))) (the non-saturating loss);
# 2. why `Sigmoid` followed by `BCELoss` breaks for confident discriminators, and why `BCEWithLogitsLoss` does not;
# 3. a GAN trained on a ring of eight Gaussians, watched live: its samples over the real modes, and its losses;
# 4. mode collapse, measured (how many of the 8 modes G reaches, and how many of its samples are good), and what helps against it;
# 5. what a loop that reads tensors on the host costs on a GPU, how to count those reads on any machine, and how to log without them;
# 6. mixed precision (autocast, `GradScaler`), `torch.compile` and CUDA graphs, each measured where it runs;
# 7. the seed's GAN on real handwritten digits, with samples after each phase of training.
#
# Everything runs on a CPU for real, on one thread; the cells say what a GPU changes, and measure it where there is one.

# %%
# Setup: on Colab, install the course package first (locally, `make lab` already did).
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/gpu-course/gpu-optimization-course"], check=True)

# %%
import collections
import io
import itertools
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import gpucourse
from gpucourse import gan, plots, syncs, timing, widgets

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
# The seed article trains on 28 × 28 images flattened to 784 values in [-1, 1]:
#
# - **the generator** maps 100 numbers of Gaussian noise z to an image: 100 → 256 (ReLU) → 784, and a `Tanh` to land in [-1, 1];
# - **the discriminator** maps an image to the probability that it is real: 784 → 256 (`LeakyReLU(0.2)`, so no unit goes dead) → 1, and a `Sigmoid`;
# - **the loss** is `nn.BCELoss` on D's probabilities, and both networks train with Adam at a learning rate of 2e-4;
# - **the loop**, for each batch of real images: a D step (real images labelled 1, a batch of G's fakes labelled 0), then a G step (fresh fakes through D, labelled 1).
#
# ```python
# for real in loader:                                     # the seed's loop, in short
#     fake = G(torch.randn(len(real), 100))
#     d_loss = bce(D(real), ones) + bce(D(fake.detach()), zeros)   # detach: this step must not train G
#     opt_d.zero_grad(); d_loss.backward(); opt_d.step()
#     g_loss = bce(D(fake), ones)                          # G wants D to call its fakes real
#     opt_g.zero_grad(); g_loss.backward(); opt_g.step()
#     print(d_loss.item(), g_loss.item())                  # two host reads a step: section 5
# ```
#
# `gpucourse.gan` builds the same networks, with one change that section 2 explains: the discriminator returns a **logit** (any real number; its sigmoid is the probability), and the loss applies the sigmoid itself.

# %%
G_seed, D_seed = gan.mlp_generator(), gan.mlp_discriminator()  # the seed's sizes: 100 -> 256 -> 784 and 784 -> 256 -> 1
print(G_seed, D_seed, sep="\n")
for name, net in (("generator", G_seed), ("discriminator", D_seed)):
    print(f"{name}: {sum(p.numel() for p in net.parameters()):,} parameters")
print("D's outputs for 3 random images (logits, not probabilities):", D_seed(torch.rand(3, 784) * 2 - 1).detach().view(-1))

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
# The same paper's fix, used by the seed's `bce(D(fake), ones)`: G *maximises* $\log D(G(z))$ instead, the **non-saturating** loss, which has the same fixed point but is steep where D rejects.
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
# In float32, a sigmoid of 20 is $1 - 2 \cdot 10^{-9}$, which rounds to exactly 1 (float32 has no number between $1 - 6 \cdot 10^{-8}$ and 1), and a sigmoid of -100 comes out as exactly 0 (its true value, $4 \cdot 10^{-44}$, lies below float32's normal range).
# Then $\log 0$ is $-\infty$; `BCELoss` clamps each log at -100, so the loss comes out as 100 whatever the logit, and the gradient through the flat sigmoid is 0.
# `BCEWithLogitsLoss` takes the logit and computes $\max(\ell, 0) - \ell y + \log(1 + e^{-|\ell|})$, which never exponentiates a large number.
# Both on the logits a confident discriminator produces, against the exact values (float64):

# %%
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
# The first three rows are D's loss on a fake it calls real with confidence: `BCELoss` says 100 for every one of them, and its gradient is 0, so D never learns from the samples that fool it most.
# The last three are G's non-saturating loss on a fake D rejects: at -20 the small sigmoid is still representable and `BCELoss` is right, but from -100 on the gradient is 0 and G stops learning from exactly the samples that most need it.
# The logits version is exact in every row.
# Which is why `gan.mlp_discriminator` returns logits, and every loss below is `F.binary_cross_entropy_with_logits`.
# Under mixed precision (section 6) the sigmoid saturates far sooner: float16 rounds a sigmoid of 9 to 1 already, which is why autocast on a GPU refuses `BCELoss` with an error and runs the logits version in float32.
#
# ## 3. A GAN on a ring of eight Gaussians
#
# Images are hard to judge by eye; a two-dimensional data set is not.
# `gan.sample_ring` draws points from 8 Gaussians (standard deviation 0.05) whose centres sit on a circle of radius 2: the classic test of whether a GAN finds *every* mode of its data.
# The dashed circles have a radius of 0.2: a sample inside one is a good sample of that mode, the measure used after training.

# %%
LATENT, BATCH, RADIUS = 8, 256, 0.2
centers = gan.ring_centers()
fig, ax = plt.subplots(figsize=(3.2, 3.2))
plots.ring_scatter(ax, gan.sample_ring(1000, generator=torch.Generator().manual_seed(0)), centers, radius=RADIUS, title="1,000 real samples")
plt.show()

# %% [markdown]
# The networks are the seed's MLPs, resized for 2-D points: G is 8 → 128 → 128 → 2 (no `Tanh`: the points lie outside [-1, 1]), D is 2 → 128 → 128 → 1 logit.
# Both train with Adam at 1e-3 with betas (0.5, 0.999), the momentum that most GAN code uses since DCGAN (Radford et al., 2016): a short memory for a target that moves.
# One training step, as in the seed: a D step on real points and a batch of fakes, then a G step with the non-saturating loss on the *same* fakes, through the D just updated.
#
# `gan_steps` below runs such steps and keeps each step's two losses in a tensor on the device; nothing in it reads a tensor's value on the host (section 5 says why that matters, and section 6 finds the one exception, inside `GradScaler`).
# Its `d_steps`, `precision` and `scaler` options are sections 4 and 6's; left at their defaults, they change nothing.

# %%
def gan_steps(parts, draw, steps, *, d_steps=1, precision=None, scaler=None):
    """``steps`` GAN steps of ``parts`` = (G, D, opt_g, opt_d); each: ``d_steps`` D steps on fresh batches from ``draw()``
    (-> real (n, d), latents (n, k)), then one G step on the last batch of fakes. Returns each step's (D loss, G loss):
    a (steps, 2) tensor on the networks' device, never read on the host."""
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
        with torch.autocast(device.type, dtype=precision or torch.float32, enabled=precision is not None):
            fooled = D(fake)  # the updated D; G's fakes labelled real: the non-saturating loss
            g_loss = F.binary_cross_entropy_with_logits(fooled, torch.ones_like(fooled))
        update(opt_g, g_loss)  # this backward also fills D's gradients; D's next zero_grad clears them
        if scaler:
            scaler.update()
        history[step, 0], history[step, 1] = d_loss.detach(), g_loss.detach()  # a copy on the device, not a read
    return history


def ring_gan(d_layers=2, lr_g=1e-3, lr_d=1e-3, device="cpu", **adam):
    """(G, D, opt_g, opt_d) for the ring, seeded: G 8 -> 128 -> 128 -> 2, D 2 -> 128 [-> 128] -> 1, Adam with betas (0.5, 0.999)."""
    torch.manual_seed(0)
    G = gan.mlp_generator(LATENT, 128, 2, layers=2, tanh=False).to(device)
    D = gan.mlp_discriminator(2, 128, layers=d_layers).to(device)
    return (G, D, torch.optim.Adam(G.parameters(), lr=lr_g, betas=(0.5, 0.999), **adam),
            torch.optim.Adam(D.parameters(), lr=lr_d, betas=(0.5, 0.999), **adam))


def ring_draw(batch, seed=0):
    """draw() -> (batch real ring points, batch latents), from one seeded generator on the CPU: the same data on every run."""
    data = torch.Generator().manual_seed(seed)
    return lambda: (gan.sample_ring(batch, generator=data), torch.randn(batch, LATENT, generator=data))

# %% [markdown]
# 2,000 steps, on the CPU, one thread, wherever this notebook runs, so that its figures and numbers are the same on every machine (sections 5 and 6 use the GPU where there is one).
# Every 200 steps the loop reads the mean losses of those 200 steps (one host read) and redraws the figure: the losses on the left, on the right 1,000 samples of G, from the same latents in every frame, over the real modes.

# %%
STEPS, LOG_EVERY = 2000, 200
parts = ring_gan()
G = parts[0]
draw = ring_draw(BATCH)
shown_z = torch.randn(1000, LATENT, generator=torch.Generator().manual_seed(1))
done = 0


def samples_panel(ax):
    with torch.no_grad():
        plots.ring_scatter(ax, G(shown_z), centers, radius=RADIUS, title=f"G's samples after step {done}")


monitor = widgets.TrainingMonitor(STEPS, label=WHERE, unit="step", extra=samples_panel)
started, train_seconds = time.perf_counter(), 0.0
while done < STEPS:
    chunk_started = time.perf_counter()
    d_mean, g_mean = gan_steps(parts, draw, LOG_EVERY).mean(dim=0).tolist()  # the one host read every LOG_EVERY steps
    train_seconds += time.perf_counter() - chunk_started
    done += LOG_EVERY
    monitor.update(done, {"D": d_mean, "G": g_mean})
print(f"{STEPS} steps: {train_seconds:.1f} s of training, {time.perf_counter() - started:.1f} s with the figure's redraws ({WHERE})")

# %% [markdown]
# Watch the right panel: G's samples start as one cloud, spread out, trace the ring, and then gather into the modes.
# The losses tell little on their own.
# They do not fall the way a classifier's do: each network's progress raises the other's loss, so they hover in a band (a D that cannot tell real from fake at all would sit at $2 \log 2 \approx 1.39$, and G at $\log 2 \approx 0.69$).
# That band tells little about how many modes G covers.
# So the result is measured on samples, with two numbers:
#
# - **modes covered**: how many of the 8 centres have at least one of G's samples within 0.2 of them;
# - **quality**: the fraction of G's samples that lie within 0.2 of some centre.
#
# A generator can cover every mode with poor samples (spread all over) or give perfect samples of one mode (collapsed); a good one does both.
# Both for 4,000 fresh samples:

# %%
eval_z = torch.randn(4000, LATENT, generator=torch.Generator().manual_seed(100))
with torch.no_grad():
    distances = torch.cdist(G(eval_z), centers)  # (4000, 8): every sample's distance to every centre
covered, quality = int((distances <= RADIUS).any(dim=0).sum()), float((distances.min(dim=1).values <= RADIUS).float().mean())
print(f"after {STEPS} steps: {covered} of 8 modes covered, {quality:.0%} of the samples within {RADIUS} of a mode")

# %% [markdown]
# ## 4. Mode collapse, and what helps
#
# G is rewarded for samples that D calls real, not for variety: if one mode fools D, G can put every sample there.
# D then learns to reject that mode, G moves to another, and the two chase each other around the ring without ever covering it: **mode collapse**.
# It takes little to get there.
# The seed's discriminator has one hidden layer; give the ring's D one hidden layer too (2 → 128 → 1) and keep everything else.
# Then, from that setting, one change at a time, each for 1,000 steps (a few seconds each):
#
# - **G's learning rate ÷ 10**: G moves slower than D adapts;
# - **a batch four times larger**: each D step sees more of the ring;
# - **5 D steps per G step**: D is trained closer to its optimum before G follows it (the original GAN paper's k steps);
# - **D with two hidden layers**: section 3's D, for comparison at the same number of steps.

# %%
SWEEP_STEPS = 1000
settings = {"D with 1 hidden layer": {}, "  G's learning rate ÷ 10": dict(lr_g=1e-4), "  batch × 4 (1,024)": dict(batch=1024),
            "  5 D steps per G step": dict(d_steps=5), "D with 2 hidden layers": dict(d_layers=2)}
results = {}
for name, change in settings.items():
    setting = dict(d_layers=1, lr_g=1e-3, batch=BATCH, d_steps=1) | change
    trial = ring_gan(setting["d_layers"], lr_g=setting["lr_g"])
    started = time.perf_counter()
    gan_steps(trial, ring_draw(setting["batch"]), SWEEP_STEPS, d_steps=setting["d_steps"])
    seconds = time.perf_counter() - started
    with torch.no_grad():
        samples = trial[0](eval_z)
    distances = torch.cdist(samples, centers)
    results[name] = (int((distances <= RADIUS).any(dim=0).sum()), float((distances.min(dim=1).values <= RADIUS).float().mean()), samples)
    print(f"{name:26s} {results[name][0]} of 8 modes, quality {results[name][1]:4.0%}  ({seconds:.1f} s, {WHERE})")

# %%
fig, axes = plt.subplots(1, len(results), figsize=(9.5, 2.3))
for ax, (name, (modes, good, samples)) in zip(axes, results.items()):
    plots.ring_scatter(ax, samples[:1000], centers, radius=RADIUS, title=f"{name.strip()}\n{modes}/8 modes, {good:.0%} good")
    ax.title.set_fontsize(8)
plt.show()
fig, ax = plt.subplots(figsize=(8, 2.4))
plots.provenance_bars(ax, [(f"{name.strip()} ({modes}/8 modes)", 100 * good, "measured") for name, (modes, good, _) in results.items()],
                      xlabel=f"% of G's samples within {RADIUS} of a mode after {SWEEP_STEPS} steps ({WHERE})", fmt="{:.0f}%")
plt.show()

# %% [markdown]
# What the runs say, on seed 0 (rerun with another seed and the numbers move, the pattern less so):
#
# - with one hidden layer, D is too weak a critic: G's samples gather in one streak that reaches one mode or a few;
# - a slower G reaches the modes only thinly: its samples are spread out, so a few land near every centre while most are nowhere, which is why coverage alone is not enough;
# - a bigger batch costs more per step and does not fix a weak D: more samples of the same too-simple decision;
# - more D steps per G step give G a better critic to follow, and it spreads over the ring; they cost a D step each;
# - a stronger D reaches every mode too, at a lower cost per step.
#
# There is no universal recipe: GANs are sensitive to these settings, so measure coverage and quality, not the losses.
#
# ## 5. A loop that never waits: host syncs
#
# A GPU runs its kernels asynchronously: a call like `D(real)` only *queues* work, and Python goes on to queue the next op while the GPU computes.
# As long as the CPU queues faster than the GPU runs, the GPU never idles.
# Reading a value breaks that: `.item()` must wait until every kernel queued before it has finished, then copy the result to the host, and while Python then queues the next step, the GPU has nothing to do.
# Every read of a tensor's value is such a **synchronisation**:
#
# - `loss.item()`, `float(loss)`, `int(t)`, `t.tolist()`, `t.numpy()`, `t.cpu()`;
# - printing a tensor, or formatting it in an f-string;
# - a Python `if` on a tensor (`if loss < 0.1:`, `if torch.isnan(loss):`), which calls `bool(t)`;
# - ops whose output size depends on the values (`t[mask]`, `nonzero`, `unique`): the host must know the size to allocate the result.
#
# On a CPU they cost next to nothing, so they go unnoticed until the code meets a GPU.
# `syncs.count_host_reads()` counts them on any machine, each with the line that made it.
# Below, a loop as many training scripts write it: `gan_steps` one step at a time, a NaN check, the losses kept as Python numbers, a log line.

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

# %%
with syncs.count_host_reads() as quiet_reads:
    history = gan_steps(device_parts, device_draw, 10)
print(f"gan_steps, 10 steps: {quiet_reads}")
with syncs.count_host_reads() as logging_reads:
    history = gan_steps(device_parts, device_draw, 200)
    finite = bool(torch.isfinite(history).all())  # the NaN check, once for all 200 steps
    means = [history[first:first + 50].mean(dim=0).tolist() for first in range(0, 200, 50)]  # a log line every 50 steps
print(f"200 steps, logged every 50 and checked once: {len(logging_reads)} host reads (all finite: {finite}); means {means[-1]}")

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
# On a CPU the difference between the two is only the work the reads do, not waiting: a read of a value the CPU has just computed is a function call, and formatting a tensor for the log line is the slowest of them.
# On a GPU every read costs at least a round trip between host and device plus the time the GPU then waits for Python to queue more work, and a step of these small networks is only a few dozen short kernels, so the waits can take much of the step.
# The rule: keep losses and checks on the device, and read them every N steps, as section 3's loop does (10 reads in 2,000 steps).
#
# ## 6. Mixed precision, `torch.compile` and CUDA graphs
#
# **Mixed precision** runs the matrix products in a 16-bit format and keeps the weights, the optimizer and the sensitive ops (losses, softmax, sums) in float32: `torch.autocast` chooses per op.
#
# - **bfloat16** has float32's 8 exponent bits and only 8 bits of mantissa: the same range, less precision.
#   Gradients do not underflow, so nothing else is needed.
#   CPUs with AVX-512 BF16 or AMX run it natively, and so do GPUs since the A100.
# - **float16** has 5 exponent bits: its smallest normal number is $6 \cdot 10^{-5}$, and small gradients underflow to 0.
#   `torch.amp.GradScaler` multiplies the loss by a large scale before `backward`, divides the gradients by it before the optimizer step, skips a step whose gradients overflowed and lowers the scale.
#
# That skip is a decision in Python, about values on the device: `GradScaler.step` reads whether any gradient was infinite, a host read every optimizer step, unless the optimizer can take the decision on the device itself (`Adam(fused=True)` can).
# Counted, for one step with each (the scaler works the same on any device):

# %%
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
# Steps per second of `gan_steps` on this notebook's device, each variant on fresh networks, each measured after a warm-up (the first compiled call compiles, and is timed apart):

# %%
# including_emulation=False: a T4 or V100 has no bfloat16 units, and by default torch says yes there too (it emulates them)
bf16_ok = torch.cuda.is_bf16_supported(including_emulation=False) if GPU else torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
variants = {"float32": (ring_gan(device=dev), {})}
if bf16_ok:
    variants["autocast bfloat16"] = (ring_gan(device=dev), dict(precision=torch.bfloat16))
else:
    print("no bfloat16 units here: autocast would emulate them, slower than float32, so it is left out")
if GPU:
    variants["autocast float16 + GradScaler (fused Adam)"] = (ring_gan(device=dev, fused=True),
                                                              dict(precision=torch.float16, scaler=torch.amp.GradScaler("cuda")))
G_c, D_c, opt_g_c, opt_d_c = ring_gan(device=dev)
compiled_parts = (torch.compile(G_c), torch.compile(D_c), opt_g_c, opt_d_c)
compile_started = time.perf_counter()
gan_steps(compiled_parts, device_draw, 2)  # the first steps trace and compile G and D, forward and backward
compile_seconds = time.perf_counter() - compile_started
variants["torch.compile (G and D)"] = (compiled_parts, {})
rates = {}
for name, (variant_parts, options) in variants.items():
    t = timing.measure(lambda: gan_steps(variant_parts, device_draw, 20, **options), warmup=2, min_run_time=0.3, num_threads=THREADS)
    timing.warn_if_noisy(t, name)
    rates[name] = 20 / t.median
    print(f"{name:44s} {rates[name]:7.0f} steps/s ({t.device})")
print(f"(torch.compile's first steps took {compile_seconds:.1f} s: compiling)")

# %% [markdown]
# **CUDA graphs** go further on a GPU: the whole step's kernel launches (forward, backward, both optimizers) are recorded once and replayed with a single call, so the CPU's launch cost disappears.
# A graph replays fixed work on fixed memory, so the step may not read anything on the host (a capture that meets a sync fails: a sync-free step is the ticket in), its inputs are copied into the same tensors each time, and Adam keeps its step count on the device (`capturable=True`).
# `torch.compile(mode="reduce-overhead")` does the same for the compiled parts automatically; below, the whole step is captured by hand with `torch.cuda.graph`, as PyTorch's CUDA-graphs documentation shows.

# %%
if GPU:
    graph_parts = ring_gan(device=dev, capturable=True)
    static_real, static_z = premade[0][0].clone(), premade[1][0].clone()
    side = torch.cuda.Stream()  # warm-up on a side stream before capture, as the documentation requires
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            gan_steps(graph_parts, lambda: (static_real, static_z), 1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_history = gan_steps(graph_parts, lambda: (static_real, static_z), 1)

    def replayed_steps(steps):
        for _ in range(steps):
            real, z = device_draw()
            static_real.copy_(real)
            static_z.copy_(z)
            graph.replay()

    t = timing.measure(replayed_steps, 20, warmup=2, min_run_time=0.3)
    timing.warn_if_noisy(t, "the CUDA graph")
    rates["CUDA graph of the whole step"] = 20 / t.median
    print(f"{'CUDA graph of the whole step':44s} {rates['CUDA graph of the whole step']:7.0f} steps/s ({t.device}); last losses {static_history[0].tolist()}")
else:
    print("No GPU here: CUDA graphs exist only on one. There, replaying the whole step removes every launch's CPU cost, which for networks"
          "\nthis small is most of the step; not measured here.")

# %%
fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(rates)))
plots.provenance_bars(ax, [(name, rate, "measured") for name, rate in rates.items()], xlabel=f"ring GAN training steps per second ({ON_DEV})", fmt="{:.0f}")
plt.show()

# %% [markdown]
# Read each bar against float32, on the machine it was measured on.
# On one CPU thread, a step of these networks is a few milliseconds of small matrix products and per-op overhead, and neither bfloat16 nor `torch.compile` is sure to pay there.
# The matrices are too small for bfloat16 units to matter much, and each compiled call adds overhead of its own (guards, the autograd wrapper around the generated code) to a step that is mostly overhead already; the bars say which paid on this machine.
# On a GPU the same step is a few dozen kernels of a few microseconds each, so launches and syncs set its time: the sync-free loop, then fewer kernels (`torch.compile`), then no launches at all (a CUDA graph) are what pay, while 16-bit arithmetic matters once the networks and batches are large enough to keep the GPU busy (the seed's 784-pixel images with big batches).
#
# ## 7. The seed's GAN on handwritten digits
#
# Back to the seed's own networks, on real images: the 1,437 training digits of module 08, 8 × 8 pixels, flattened to 64 values in [-1, 1] (`gan.digits_for_gan`).
# The seed's sizes, with 64 pixels instead of 784: G is 100 → 256 → 64 with `Tanh`, D is 64 → 256 → 1 logit; Adam at the seed's 2e-4 (betas 0.5, 0.999), batches of 64, the same `gan_steps`.
# The figure follows the losses and 25 of G's samples, from the same latents in every frame.

# %%
digits = gan.digits_for_gan("train")
torch.manual_seed(0)
G_digits, D_digits = gan.mlp_generator(100, 256, 64), gan.mlp_discriminator(64, 256)
digit_parts = (G_digits, D_digits, torch.optim.Adam(G_digits.parameters(), lr=2e-4, betas=(0.5, 0.999)),
               torch.optim.Adam(D_digits.parameters(), lr=2e-4, betas=(0.5, 0.999)))
picks = torch.Generator().manual_seed(0)
digit_draw = lambda: (digits[torch.randint(len(digits), (64,), generator=picks)], torch.randn(64, 100, generator=picks))  # noqa: E731
digit_z = torch.randn(25, 100, generator=torch.Generator().manual_seed(1))
snapshots, trained = {}, 0


def digits_panel(ax):
    with torch.no_grad():
        plots.image_grid(ax, G_digits(digit_z), 5, 5, title=f"G's samples after step {trained}")


with torch.no_grad():
    snapshots[0] = G_digits(digit_z)
digit_monitor = widgets.TrainingMonitor(2000, label=WHERE, unit="step", extra=digits_panel)
started = time.perf_counter()
for until in (300, 600, 1000, 1500, 2000):
    d_mean, g_mean = gan_steps(digit_parts, digit_draw, until - trained).mean(dim=0).tolist()
    trained = until
    digit_monitor.update(trained, {"D": d_mean, "G": g_mean})
    if trained in (300, 1000, 2000):
        with torch.no_grad():
            snapshots[trained] = G_digits(digit_z)
print(f"2000 steps in {time.perf_counter() - started:.1f} s with the figure's redraws ({WHERE})")

# %%
fig, axes = plt.subplots(1, len(snapshots) + 1, figsize=(9.5, 2.3))
plots.image_grid(axes[0], digits[:25], 5, 5, title="real digits")
for ax, (step, images) in zip(axes[1:], snapshots.items()):
    plots.image_grid(ax, images, 5, 5, title=f"G after {step} steps")
plt.show()

# %% [markdown]
# Before training, G's outputs are grey noise around 0, the middle of the `Tanh`.
# After a few hundred steps they have the digits' layout (a white border, ink in the middle) but much the same blur for every latent; by 2,000 steps (a few seconds on one thread) many of them look like digits, and different latents give different ones.
# An MLP has no notion of neighbouring pixels, which is why the strokes stay rough; convolutional generators and discriminators (DCGAN) are the next step for images.
#
# ## Summary
#
# - A GAN is a game: D learns to tell real from fake, G learns to fool D.
#   G minimises $-\log D(G(z))$ (non-saturating), which keeps its gradient where D rejects its samples.
# - A discriminator returns logits, and the loss is `BCEWithLogitsLoss`: `Sigmoid` then `BCELoss` returns a clamped 100 and a zero gradient once D is confident, and gets worse in 16 bits.
# - Judge a GAN on samples, not losses: count the modes its samples reach and the fraction of good samples.
#   Mode collapse answered here to D's strength and to the number of D steps per G step, not to the batch size; measure each change.
# - On a GPU, every read of a tensor's value stops the host until the queue drains.
#   Keep losses and checks on the device and read them every N steps; count the reads with `syncs.count_host_reads()` on any machine and with `torch.cuda.set_sync_debug_mode("warn")` on a GPU.
#   `GradScaler` needs a fused optimizer to stay sync-free.
# - Then remove launches: mixed precision for large networks, `torch.compile` to fuse, CUDA graphs to replay the whole step.
#
# ## What the course covered, and where to go next
#
# Modules 01-07 built the GPU from the bottom: what a kernel launch costs and how to time it honestly, the SIMT architecture and occupancy, coalesced memory and bank conflicts, warp divergence, streams and overlapped copies, profiling and fusion, and the compilation of one matrix product onto tiles and tensor cores.
# Modules 08-10 applied that to whole networks: convolutions as GEMMs, recurrences and their launches, and now a training loop kept on the device.
# To go further: the PyTorch performance tuning guide and the profiler's trace viewer on your own models; CUDA graphs and `torch.compile(mode="reduce-overhead")` for launch-bound training; Triton for the fused kernel no library offers; and for GANs, DCGAN and the Wasserstein GAN with gradient penalty (Gulrajani et al., 2017), the next steps towards stable training on real images.
#
# The assignment (`assignments/10_gan`) asks for the GAN losses from logits, the mode-coverage measure, a training step without host syncs, a ring GAN that covers its modes within a time budget, and a fast mixed-precision loop for a GPU.
