"""BERT-flow's Glow: invertibility, exact log-determinant, actnorm init, and that fitting works."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.core.scoring import spearman
from methods.training.flow_fit import FlowConfig, latents, train_flow
from methods.training.glow import ActNorm, Glow
from methods.whitening import whitening_transform

ROOT = Path(__file__).resolve().parent.parent
COMBOS = [(c, m) for c in ("additive", "affine") for m in ("permute", "conv1x1")]


def warmed(glow: Glow, x: torch.Tensor) -> Glow:
    """Run the data-dependent init, then perturb every parameter so the test is not at identity."""
    glow(x)
    with torch.no_grad():
        for p in glow.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return glow


@pytest.mark.parametrize(("coupling", "mixing"), COMBOS)
def test_x_to_z_to_x_round_trips(coupling, mixing):
    torch.manual_seed(0)
    x = torch.randn(64, 12, dtype=torch.float64) * 3 + 1
    glow = warmed(Glow(12, levels=3, depth=2, width=16, coupling=coupling, mixing=mixing).double(), x)
    with torch.no_grad():
        z, _ = glow(x)
        back = glow.inverse(z)
    assert z.shape == x.shape and not torch.allclose(z, x)
    np.testing.assert_allclose(back.numpy(), x.numpy(), atol=1e-4)


@pytest.mark.parametrize(("coupling", "mixing"), COMBOS)
def test_log_determinant_equals_the_brute_force_jacobian(coupling, mixing):
    torch.manual_seed(1)
    x = torch.randn(16, 8, dtype=torch.float64)
    glow = warmed(Glow(8, levels=2, depth=3, width=8, coupling=coupling, mixing=mixing).double(), x)
    for row in x[:4]:
        z, log_p = glow(row[None])
        log_prior = -0.5 * (z ** 2).sum() - 4 * math.log(2 * math.pi)
        jacobian = torch.autograd.functional.jacobian(lambda v: glow(v[None])[0][0], row)
        logdet = float((log_p[0] - log_prior).detach())
        assert logdet == pytest.approx(float(torch.linalg.slogdet(jacobian)[1]), abs=1e-8)


def test_actnorm_initialises_to_zero_mean_unit_variance():
    x = torch.randn(500, 6) * torch.tensor([1, 2, 3, 4, 5, 6.0]) + 7
    y, _ = ActNorm(6)(x)
    np.testing.assert_allclose(y.mean(0).detach().numpy(), 0, atol=1e-5)
    np.testing.assert_allclose(y.std(0, unbiased=False).detach().numpy(), 1, atol=1e-4)


def test_worked_example_of_the_docstring():
    glow = Glow(1, levels=1, depth=0)
    assert float(glow.bits_per_dim(torch.zeros(1, 1))) == pytest.approx(0.5 * math.log(2 * math.pi) / math.log(2))


def synthetic(n: int = 3000, d: int = 16, seed: int = 0):
    """x = A·g + b with a badly conditioned A and a large offset: the anisotropic cone in miniature."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d)) @ np.diag(np.logspace(0, 2.5, d))
    g = rng.normal(size=(n, d))
    return (g @ a.T + 40.0).astype(np.float32), g


def test_fitting_lowers_the_nll_and_makes_the_latent_isotropic():
    x, _ = synthetic()
    flow, stats = train_flow(lambda epoch: x, x.shape[1], len(x), FlowConfig(epochs=3), seed=3, progress=False)
    assert stats.last_bits_per_dim < stats.first_bits_per_dim - 1
    before, after = np.linalg.cond(np.cov(x.T)), np.linalg.cond(np.cov(latents(flow, x).T))
    assert after * 10 < before, (before, after)


def test_flow_and_whitening_recover_similarity_that_raw_cosine_misses():
    x, g = synthetic(n=4000)
    rng = np.random.default_rng(9)
    left, right = rng.integers(0, 4000, 1500), rng.integers(0, 4000, 1500)
    g2 = g[right] * 0.5 + g[left] * rng.uniform(0, 1, (1500, 1))  # pairs with graded true similarity
    x2 = (g2 @ np.linalg.lstsq(g, x - 40, rcond=None)[0] + 40).astype(np.float32)
    gold = np.einsum("ij,ij->i", g[left], g2) / np.linalg.norm(g[left], axis=1) / np.linalg.norm(g2, axis=1)

    def score(a, b):
        cos = np.einsum("ij,ij->i", a, b) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        return spearman(cos, gold)

    raw = score(x[left], x2)
    mu, w, _ = whitening_transform(x)
    whitened = score((x[left] - mu) @ w, (x2 - mu) @ w)
    flow, _ = train_flow(lambda epoch: x, 16, len(x), FlowConfig(epochs=3), seed=5, progress=False)
    flowed = score(latents(flow, x[left]), latents(flow, x2))
    assert whitened > raw + 0.2 and flowed > raw + 0.2, (raw, whitened, flowed)


def test_same_seed_gives_byte_equal_latents():
    x, _ = synthetic(n=400)
    runs = [latents(train_flow(lambda e: x, 16, 400, FlowConfig(), seed=11, progress=False)[0], x) for _ in range(2)]
    assert runs[0].tobytes() == runs[1].tobytes()
    other = latents(train_flow(lambda e: x, 16, 400, FlowConfig(), seed=12, progress=False)[0], x)
    assert other.tobytes() != runs[0].tobytes()


def test_fractional_epochs_stop_part_way():
    x, _ = synthetic(n=640)
    _, stats = train_flow(lambda e: x, 16, 640, FlowConfig(epochs=0.15, batch_size=32), seed=1, progress=False)
    assert stats.steps == 3  # ceil(0.15 * 640 / 32)


def test_optimizer_is_adam_without_bias_correction_plus_decoupled_decay():
    from methods.training.flow_fit import AdamWeightDecay

    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = AdamWeightDecay([p], lr=0.1, weight_decay=0.01)
    p.grad = torch.tensor([0.5, 0.5])
    opt.step()
    m, v = 0.1 * 0.5, 0.001 * 0.25
    expected = torch.tensor([1.0, -2.0]) - 0.1 * (m / (math.sqrt(v) + 1e-6) + 0.01 * torch.tensor([1.0, -2.0]))
    np.testing.assert_allclose(p.detach().numpy(), expected.numpy(), rtol=1e-6)


def flow_cfg(senteval_root, model, tmp_path, **extra):
    from harness.runner.settings.config import BenchConfig

    params = {"flow": {"epochs": 2.0, **extra}}
    return BenchConfig(methods=("flow",), tasks=("stsb",), backbone=str(model), source="senteval",
                       senteval_dir=str(senteval_root), cache_dir=str(tmp_path / "c"), output_dir=str(tmp_path / "o"),
                       progress=False, plots=False, bootstrap=0, method_params=params)


def test_flow_trains_once_then_loads_its_weights_from_the_cache(senteval_root, tiny_bert, tmp_path):
    import harness

    cfg = flow_cfg(senteval_root, tiny_bert, tmp_path)
    cold = harness.run(cfg)
    assert cold.models_trained == 1
    fit = cold.records[0]["fit"]
    assert fit["loaded_from_cache"] is False and fit["steps"] == 5  # ceil(2 epochs * 72 sentences / 32)
    assert fit["fit_set"]["name"] == "target" and (tmp_path / "c" / "flows").is_dir()
    warm = harness.run(cfg)
    assert warm.models_trained == 0 and warm.sentences_forwarded == 0
    assert warm.records[0]["fit"]["loaded_from_cache"] is True
    assert warm.records[0]["scores"]["spearman"] == cold.records[0]["scores"]["spearman"]
    other_seed = harness.run(cfg.__class__(**{**cfg.__dict__, "seed": 7}))
    assert other_seed.models_trained == 1  # the seed is part of the weights' key


def test_flow_fit_with_dropout_reencodes_the_fit_set(senteval_root, tiny_bert, tmp_path):
    import harness

    cfg = flow_cfg(senteval_root, tiny_bert, tmp_path, fit_dropout=True)
    outcome = harness.run(cfg)
    record = outcome.records[0]
    assert record["fit"]["fit_dropout"] is True and record["method"]["label"] == "flow[epochs=2.0,fit_dropout=True]"
    # the cached pass (72 sentences of all splits) + two dropout epochs over the 72 fit-set sentences
    assert outcome.sentences_forwarded == 72 + 2 * 72


def test_flow_options_reach_the_spec_through_the_cli(bench, senteval_root, tiny_bert, tmp_path):
    import json

    code, _, err = bench("--methods", "flow", "--tasks", "sts12", "--source", "senteval", "--senteval-dir",
                         str(senteval_root), "--backbone", str(tiny_bert), "--flow-coupling", "affine",
                         "--flow-mixing", "conv1x1", "--flow-levels", "3", "--flow-fit-dropout", "--fit-set", "test")
    assert code == 0, err
    record = json.loads(next((tmp_path / "out" / "runs").glob("flow*.json")).read_text())
    params = record["method"]["spec"]["params"]
    chosen = (params["coupling"], params["mixing"], params["levels"], params["fit_dropout"])
    assert chosen == ("affine", "conv1x1", 3, True)
    assert record["protocol"]["fit_set"] == "test"


def test_a_diverging_fit_is_refused_with_the_fix(bench, senteval_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "flow", "--tasks", "stsb", "--source", "senteval", "--senteval-dir",
                         str(senteval_root), "--backbone", str(tiny_bert), "--flow-lr", "50", "--flow-epochs", "5")
    assert code == 2
    assert "flow: the fit on fit set 'target' diverged" in err and "lower --flow-lr" in err
    assert not list((tmp_path / "cache").glob("flows/*/meta.json"))  # nothing diverged is cached


def test_the_fit_runs_on_one_thread_with_the_weights_of_a_multi_threaded_fit(monkeypatch):
    """train_flow fits on one thread (its tiny operations only wait for a second one) and puts
    torch's thread count back; the weights are those of the same fit on two threads, bit for bit."""
    import contextlib

    from methods.training import flow_fit

    x, _ = synthetic(n=640)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        one, _ = train_flow(lambda e: x, 16, 640, FlowConfig(), seed=7, progress=False)
        assert torch.get_num_threads() == 2
        with monkeypatch.context() as patch:  # the same fit left on 2 threads
            patch.setattr(flow_fit, "one_thread", contextlib.nullcontext)
            two, _ = train_flow(lambda e: x, 16, 640, FlowConfig(), seed=7, progress=False)
    finally:
        torch.set_num_threads(before)
    for (name, a), (_, b) in zip(one.state_dict().items(), two.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_the_optimizer_steps_as_torch_adamw_would_without_bias_correction():
    """Against torch.optim.AdamW (an independent implementation), its bias correction undone by
    scaling lr and eps per step, without weight decay (AdamW decays before the step, this one with
    it: the by-hand tests check the decay)."""
    from methods.training.flow_fit import AdamWeightDecay

    torch.manual_seed(0)
    start = torch.randn(5, dtype=torch.float64)
    grads = [torch.randn(5, dtype=torch.float64) for _ in range(4)]
    ours = torch.nn.Parameter(start.clone())
    theirs = torch.nn.Parameter(start.clone())
    opt = AdamWeightDecay([ours], lr=0.01, weight_decay=0.0)
    reference = torch.optim.AdamW([theirs], lr=0.01, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0)
    for step, grad in enumerate(grads, 1):
        ours.grad = grad.clone()
        opt.step()
        opt.zero_grad(set_to_none=True)
        assert ours.grad is None
        # AdamW's step: p -= (lr'/c1) · m / (sqrt(v)/sqrt(c2) + eps'); with lr' = lr·c1/sqrt(c2)
        # and eps' = eps/sqrt(c2) that is p -= lr · m / (sqrt(v) + eps), the uncorrected update.
        c1, c2 = 1 - 0.9**step, 1 - 0.999**step
        reference.param_groups[0].update(lr=0.01 * c1 / math.sqrt(c2), eps=1e-6 / math.sqrt(c2))
        theirs.grad = grad.clone()
        reference.step()
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)


def test_a_fit_imports_no_torch_dynamo():
    """torch.optim.Optimizer imports torch._dynamo (seconds of imports); the fit does not."""
    code = ("import sys, numpy as np; from methods.training.flow_fit import FlowConfig, train_flow; "
            "x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32); "
            "train_flow(lambda e: x, 8, 64, FlowConfig(), seed=0, progress=False); "
            "print('torch._dynamo' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]
