"""Glow on sentence vectors, as BERT-flow uses it (Li et al. 2020; Kingma & Dhariwal 2018).

BERT-flow reshapes a pooled vector to a 1×1 "image" with D channels, so every convolution is a
matrix product over channels. The flow, from input x to latent z:

    for level in 1..L:
        depth × [ actnorm → channel mixing → coupling ]
        if level < L: split channels in half; the second half is factored out (prior N(0, I))
    z = concat(factored parts..., top)           prior N(0, I) on every part

* actnorm: y = (x + b) · exp(3·s); b, s set from the first batch so y has zero mean, unit variance.
* mixing: ``permute`` reverses the channel order (BERT-flow's default) or ``conv1x1`` is Glow's
  invertible 1×1 convolution W = P·L·(U + diag(sign·exp(log_s))), started from a random rotation.
* coupling: x = [x1, x2]; ``additive``: z2 = x2 + NN(x1); ``affine``: z2 = (x2 + t)·sigmoid(r + 2),
  (t, r) = NN(x1). NN = linear → actnorm → relu → linear → actnorm → relu → zero-initialised linear.

log p(x) = log N(z; 0, I) + log|det ∂z/∂x|, where the log-determinant is the sum of the layers' own:
Σ 3·s for actnorm, Σ log_s for conv1x1, Σ log sigmoid(r + 2) for affine, and 0 for permute, additive
and splits. The loss is −log p(x) / (D · ln 2): bits per dimension. Worked example (D = 1, a single
actnorm with b = 0, s = 0): z = x, log p(x) = log N(x; 0, 1), and at x = 0 the loss is
0.5·ln(2π)/ln 2 ≈ 1.33 bits.
"""

from __future__ import annotations

import math

import torch
from torch import nn

LOGSCALE_FACTOR = 3.0  # actnorm and the zero layer learn s/3 (Glow's trick for faster convergence)


class ActNorm(nn.Module):
    """Per-channel affine map with data-dependent initialisation on its first forward call."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels))
        self.logs = nn.Parameter(torch.zeros(channels))
        self.register_buffer("initialized", torch.tensor(False))

    def forward(self, x: torch.Tensor, reverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.initialized and not reverse:
            with torch.no_grad():
                mean = x.mean(dim=0)
                std = ((x - mean) ** 2).mean(dim=0).sqrt()
                self.bias.copy_(-mean)
                self.logs.copy_(torch.log(1.0 / (std + 1e-6)) / LOGSCALE_FACTOR)
                # a buffer: mypy sees Module.__getattr__'s Tensor | Module
                self.initialized.fill_(True)  # type: ignore[operator]
        scale = self.logs * LOGSCALE_FACTOR
        logdet = scale.sum().expand(x.shape[0])
        if reverse:
            return x * torch.exp(-scale) - self.bias, -logdet
        return (x + self.bias) * torch.exp(scale), logdet


class Permute(nn.Module):
    """Reverse the channel order (a fixed permutation; log-determinant 0)."""

    def forward(self, x: torch.Tensor, reverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return x.flip(-1), x.new_zeros(x.shape[0])


class InvConv1x1(nn.Module):
    """Glow's invertible 1×1 convolution in LU form; y = x · W, log|det W| = Σ log_s."""

    def __init__(self, channels: int, generator: torch.Generator) -> None:
        super().__init__()
        rotation, _ = torch.linalg.qr(
            torch.rand(channels, channels, generator=generator, dtype=torch.float64)
        )
        p, lower, upper = torch.linalg.lu(rotation)
        diag = torch.diagonal(upper)
        self.register_buffer("p", p.float())
        self.register_buffer("sign_s", torch.sign(diag).float())
        self.register_buffer("mask", torch.tril(torch.ones(channels, channels), -1))
        self.lower = nn.Parameter(lower.float())
        self.upper = nn.Parameter(torch.triu(upper, 1).float())
        self.log_s = nn.Parameter(torch.log(diag.abs()).float())

    def weight(self) -> torch.Tensor:
        # p, sign_s and mask are buffers (register_buffer): mypy types them as Module.__getattr__'s
        # Tensor | Module
        eye = torch.eye(self.mask.shape[0], device=self.mask.device, dtype=self.log_s.dtype)  # type: ignore[index, arg-type]
        lower = self.lower * self.mask + eye  # type: ignore[operator]
        upper = self.upper * self.mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))  # type: ignore[operator]
        return self.p @ lower @ upper  # type: ignore[operator]

    def forward(self, x: torch.Tensor, reverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        logdet = self.log_s.sum().expand(x.shape[0])
        if reverse:
            return x @ torch.linalg.inv(self.weight()), -logdet
        return x @ self.weight(), logdet


class CouplingNet(nn.Module):
    """The coupling's NN; its last layer starts at zero so every coupling starts as the identity."""

    def __init__(self, inputs: int, width: int, outputs: int, generator: torch.Generator) -> None:
        super().__init__()
        self.first = nn.Linear(inputs, width, bias=False)
        self.second = nn.Linear(width, width, bias=False)
        for layer in (self.first, self.second):
            with torch.no_grad():
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * 0.05)
        self.norm1, self.norm2 = ActNorm(width), ActNorm(width)
        self.last = nn.Linear(width, outputs)
        self.last_logs = nn.Parameter(torch.zeros(outputs))
        nn.init.zeros_(self.last.weight)
        nn.init.zeros_(self.last.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm1(self.first(x))[0])
        h = torch.relu(self.norm2(self.second(h))[0])
        return self.last(h) * torch.exp(self.last_logs * LOGSCALE_FACTOR)


class Coupling(nn.Module):
    def __init__(self, channels: int, width: int, kind: str, generator: torch.Generator) -> None:
        super().__init__()
        self.kind = kind
        # x1: the half that conditions; x2: the half that moves
        self.keep = channels - channels // 2
        moved = channels // 2
        self.net = CouplingNet(self.keep, width, moved * (2 if kind == "affine" else 1), generator)

    def forward(self, x: torch.Tensor, reverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        x1, x2 = x[:, : self.keep], x[:, self.keep :]
        out = self.net(x1)
        if self.kind == "additive":
            x2 = x2 - out if reverse else x2 + out
            return torch.cat([x1, x2], dim=1), x.new_zeros(x.shape[0])
        shift, scale = out[:, 0::2], torch.sigmoid(out[:, 1::2] + 2.0)
        logdet = torch.log(scale).sum(dim=1)
        if reverse:
            return torch.cat([x1, x2 / scale - shift], dim=1), -logdet
        return torch.cat([x1, (x2 + shift) * scale], dim=1), logdet


class Glow(nn.Module):
    """A multi-scale Glow on (batch, D) vectors. ``forward`` returns (z, log p(x))."""

    def __init__(
        self,
        dim: int,
        levels: int = 2,
        depth: int = 3,
        width: int = 32,
        coupling: str = "additive",
        mixing: str = "permute",
        seed: int = 1234,
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.dim = dim
        self.levels = nn.ModuleList()
        self.kept: list[int] = []  # channels entering each level
        channels = dim
        for level in range(levels):
            self.kept.append(channels)
            steps = nn.ModuleList()
            for _ in range(depth):
                mix = Permute() if mixing == "permute" else InvConv1x1(channels, generator)
                steps.append(
                    nn.ModuleList(
                        [ActNorm(channels), mix, Coupling(channels, width, coupling, generator)]
                    )
                )
            self.levels.append(steps)
            if level < levels - 1:
                channels -= channels // 2  # the second half is factored out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logdet = x.new_zeros(x.shape[0])
        factored = []
        for number, steps in enumerate(self.levels):
            # a level is a ModuleList of steps, each a ModuleList of layers; torch types ModuleList
            # items as Module
            for step in steps:  # type: ignore[attr-defined]
                for layer in step:
                    x, delta = layer(x)
                    logdet = logdet + delta
            if number < len(self.levels) - 1:
                keep = x.shape[1] - x.shape[1] // 2
                factored.append(x[:, keep:])
                x = x[:, :keep]
        z = torch.cat([*factored, x], dim=1)
        log_prior = -0.5 * (z**2).sum(dim=1) - 0.5 * self.dim * math.log(2 * math.pi)
        return z, log_prior + logdet

    def inverse(self, z: torch.Tensor) -> torch.Tensor:
        sizes = [kept // 2 for kept in self.kept[:-1]]
        factored = list(torch.split(z, [*sizes, z.shape[1] - sum(sizes)], dim=1))
        x = factored.pop()
        for number in reversed(range(len(self.levels))):
            if number < len(self.levels) - 1:
                x = torch.cat([x, factored.pop()], dim=1)
            # a ModuleList, typed as Module
            for step in reversed(self.levels[number]):  # type: ignore[call-overload]
                for layer in reversed(step):
                    x, _ = layer(x, reverse=True)
        return x

    def bits_per_dim(self, x: torch.Tensor) -> torch.Tensor:
        """The training loss: mean negative log-likelihood in bits per dimension."""
        _, log_p = self(x)
        return -(log_p.mean()) / (self.dim * math.log(2))
