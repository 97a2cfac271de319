"""Oracles for the Glow that BERT-flow fits (methods/training/glow.py), layer by layer.

tests/test_oracles.py checks the whole flow's loss against a brute-force Jacobian; these check what
that cannot see: the initialisation every fit starts from (actnorm's data-dependent init, the random
rotation of the 1×1 convolution, the 0.05-scaled hidden weights, the zero last layer), the
parameterisations (scales learnt as s/3, the affine coupling's shift/scale split), the inverse of
every layer, and the number of parameters the docstring's architecture implies (computed here
from that description, not from the modules).
"""

from __future__ import annotations

import math

import pytest
import torch

from methods.training.glow import ActNorm, Coupling, CouplingNet, Glow, InvConv1x1, Permute


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def shuffle_parameters(module: torch.nn.Module, seed: int = 1) -> None:
    """Every parameter to random values, so an identity or a zero start hides nothing."""
    g = generator(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def test_actnorm_starts_from_the_first_batch_with_zero_mean_unit_variance_and_learns_s_over_3():
    x = torch.randn(64, 5, generator=generator()) * torch.tensor([1.0, 2.0, 0.5, 3.0, 1.0]) + 4.0
    norm = ActNorm(5)
    y, logdet = norm(x)
    mean, std = x.mean(0), x.std(0, unbiased=False)
    assert torch.allclose(y.mean(0), torch.zeros(5), atol=1e-5)
    assert torch.allclose(y.std(0, unbiased=False), torch.ones(5), atol=1e-4)
    assert torch.allclose(norm.bias, -mean)
    # the stored parameter is s/3 (Glow's logscale_factor), so a step of the optimiser moves s 3× as far
    assert torch.allclose(norm.logs, torch.log(1 / (std + 1e-6)) / 3, atol=1e-6)
    assert torch.allclose(logdet, torch.full((64,), float(torch.log(1 / (std + 1e-6)).sum())), atol=1e-5)
    # the init happens once: a second batch is mapped with the first batch's statistics
    y2, _ = norm(x * 10)
    assert torch.allclose(y2, (x * 10 - mean) / (std + 1e-6), atol=1e-4)


def test_actnorm_on_a_constant_channel_stays_finite():
    x = torch.randn(16, 3, generator=generator())
    x[:, 1] = 2.5  # zero variance: the 1e-6 keeps log(1 / std) finite
    y, logdet = ActNorm(3)(x)
    assert torch.isfinite(y).all() and torch.isfinite(logdet).all()
    assert torch.equal(y[:, 1], torch.zeros(16))


def test_every_layer_inverts_and_its_inverse_has_the_negated_log_determinant():
    x = torch.randn(12, 6, generator=generator(2))
    layers = {"actnorm": ActNorm(6), "permute": Permute(), "conv1x1": InvConv1x1(6, generator(3)),
              "additive": Coupling(6, 8, "additive", generator(4)), "affine": Coupling(6, 8, "affine", generator(5))}
    for name, layer in layers.items():
        layer(torch.randn(32, 6, generator=generator(6)))  # data-dependent inits first
        shuffle_parameters(layer)
        y, logdet = layer(x)
        back, back_logdet = layer(y, reverse=True)
        assert torch.allclose(back, x, atol=1e-4), name
        assert torch.allclose(back_logdet, -logdet, atol=1e-5), name
        if name in ("actnorm", "conv1x1", "affine"):  # the volume-changing layers do change it
            assert logdet.abs().max() > 1e-3, name


def test_the_whole_flow_inverts():
    glow = Glow(6, levels=2, depth=2, width=8, coupling="affine", mixing="conv1x1", seed=7)
    glow(torch.randn(32, 6, generator=generator(8)))
    shuffle_parameters(glow, seed=9)
    glow.double()  # random convolutions are badly conditioned: float32 round-off would hide nothing but noise
    x = torch.randn(10, 6, generator=generator(10), dtype=torch.float64)
    z, _ = glow(x)
    assert torch.allclose(glow.inverse(z), x, atol=1e-9)


def test_the_1x1_convolution_starts_as_a_rotation_and_its_log_determinant_is_the_sum_of_log_s():
    conv = InvConv1x1(5, generator(11))
    w = conv.weight().double()
    assert torch.allclose(w @ w.T, torch.eye(5, dtype=torch.float64), atol=1e-5)
    assert abs(float(conv.log_s.detach().sum())) < 1e-5  # |det| of a rotation is 1
    shuffle_parameters(conv, seed=12)
    x = torch.randn(4, 5, generator=generator(13))
    y, logdet = conv(x)
    w = conv.weight()
    assert torch.allclose(y, x @ w, atol=1e-6)
    log_det = float(torch.linalg.slogdet(w.detach().double())[1])
    assert math.isclose(log_det, float(conv.log_s.detach().sum()), abs_tol=1e-5)
    assert torch.allclose(logdet, conv.log_s.sum().expand(4))


def test_the_coupling_net_starts_with_hidden_weights_of_std_0_05_and_a_zero_output():
    net = CouplingNet(64, 64, 6, generator(14))
    for layer in (net.first, net.second):
        assert layer.bias is None  # an actnorm follows: a bias would be a second, redundant shift
        assert 0.047 < float(layer.weight.std()) < 0.053  # 4096 draws of N(0, 0.05²)
        assert abs(float(layer.weight.mean())) < 0.003
    assert torch.equal(net(torch.randn(9, 64, generator=generator(15))), torch.zeros(9, 6))


def test_the_zero_layer_scales_its_output_by_exp_of_3_logs():
    net = CouplingNet(3, 4, 2, generator(16))
    x = torch.randn(5, 3, generator=generator(17))
    with torch.no_grad():
        net.last.bias.copy_(torch.tensor([0.5, -1.0]))
        net.last_logs.copy_(torch.tensor([0.2, -0.1]))
    expected = torch.tensor([0.5, -1.0]) * torch.exp(3 * torch.tensor([0.2, -0.1]))
    assert torch.allclose(net(x), expected.expand(5, 2))


def test_the_affine_coupling_shifts_by_the_even_outputs_and_scales_by_sigmoid_of_the_odd_plus_2():
    coupling = Coupling(5, 4, "affine", generator(18))  # keeps 3 channels, moves 2: the net gives 4 outputs
    out = torch.tensor([0.3, -0.4, -0.7, 1.1])  # (shift₀, raw scale₀, shift₁, raw scale₁)
    with torch.no_grad():
        coupling.net.last.bias.copy_(out)  # weights are zero: the net outputs its bias for every row
    x = torch.randn(6, 5, generator=generator(19))
    z, logdet = coupling(x)
    shift, scale = out[[0, 2]], torch.sigmoid(out[[1, 3]] + 2.0)
    assert torch.equal(z[:, :3], x[:, :3])
    assert torch.allclose(z[:, 3:], (x[:, 3:] + shift) * scale)
    assert torch.allclose(logdet, torch.log(scale).sum().expand(6))
    fresh = Coupling(5, 4, "affine", generator(18))  # at the start: no shift, scale sigmoid(2) ≈ 0.88
    z, logdet = fresh(x)
    assert torch.allclose(z[:, 3:], x[:, 3:] * torch.sigmoid(torch.tensor(2.0)))
    assert torch.allclose(logdet, torch.full((6,), 2 * math.log(1 / (1 + math.exp(-2)))))


def parameters_described(dim: int, levels: int, depth: int, width: int, coupling: str, mixing: str) -> int:
    """The parameter count of the module docstring's architecture, written out by hand."""
    total, channels = 0, dim
    for level in range(levels):
        keep, moved = channels - channels // 2, channels // 2
        outputs = moved * (2 if coupling == "affine" else 1)
        actnorm = 2 * channels
        mix = 0 if mixing == "permute" else 2 * channels * channels + channels  # L, U (full) and log_s
        net = keep * width + width * width + 2 * (2 * width) + (width * outputs + outputs) + outputs
        total += depth * (actnorm + mix + net)
        if level < levels - 1:
            channels = keep
    return total


@pytest.mark.parametrize("coupling", ["additive", "affine"])
@pytest.mark.parametrize("mixing", ["permute", "conv1x1"])
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_the_flow_has_the_parameters_its_description_implies(coupling, mixing, levels):
    glow = Glow(7, levels=levels, depth=2, width=5, coupling=coupling, mixing=mixing)
    assert sum(p.numel() for p in glow.parameters()) == parameters_described(7, levels, 2, 5, coupling, mixing)
    kinds = {type(step[1]) for level in glow.levels for step in level}
    assert kinds == {Permute if mixing == "permute" else InvConv1x1}
    assert glow.kept == [7, 4, 2][:levels]  # channels entering each level: the first half is kept
