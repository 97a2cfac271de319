"""Oracles for BERT-flow's fit: the recipe (REFERENCE.md, Table 7 and the code's optimiser), the
batches the loop feeds the flow, the loss it reports, and what the method does with a fit.

The loop's batches are read by wrapping ``Glow.bits_per_dim``: every input row carries its own index
in its first coordinate, so the test sees which rows each step used and what loss it returned, and
checks them against the schedule the docstring of ``train_flow`` promises (computed here). The
two fitting tests of tests/test_flow.py check that fitting *works*; these check that it follows the
recipe, in about a second each.
"""

from __future__ import annotations

import contextlib
import math
import time

import numpy as np
import pytest
import torch
from fakes import FakeContext

from harness.core.api import SpecRequest
from harness.core.data.fitsets import make_fit_set
from methods import get_method
from methods.training.flow_fit import AdamWeightDecay, FitStats, FlowConfig, latents, train_flow
from methods.training.glow import Glow

PAPER = {"levels": 2, "depth": 3, "width": 32, "lr": 1e-3, "batch_size": 32, "epochs": 1.0}


def test_the_defaults_are_the_papers_recipe():
    from methods.flow import BertFlow

    options = {o.name: o.default for o in BertFlow.options}
    assert {k: options[k] for k in PAPER} == PAPER
    assert (options["coupling"], options["mixing"], options["batches"], options["fit_dropout"]) == \
        ("additive", "permute", "sentences", False)
    config = FlowConfig()
    assert {k: getattr(config, k) for k in PAPER} == PAPER
    assert (config.weight_decay, config.clip, config.coupling, config.mixing) == (0.01, 1.0, "additive", "permute")
    defaults = AdamWeightDecay([torch.nn.Parameter(torch.zeros(1))], lr=0.1).defaults
    assert defaults == {"lr": 0.1, "weight_decay": 0.01, "betas": (0.9, 0.999), "eps": 1e-6}
    import inspect

    glow = {k: p.default for k, p in inspect.signature(Glow).parameters.items() if k != "dim"}
    assert glow == {"levels": 2, "depth": 3, "width": 32, "coupling": "additive", "mixing": "permute", "seed": 1234}


def test_adam_without_bias_correction_over_two_steps_by_hand():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    optimizer = AdamWeightDecay([p], lr=0.1, weight_decay=0.01)
    expected, m, v = np.array([1.0, -2.0]), 0.0, 0.0
    for grad in (np.array([0.5, -1.0]), np.array([-0.2, 3.0])):
        p.grad = torch.tensor(grad)
        optimizer.step()
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad ** 2
        expected = expected - 0.1 * (m / (np.sqrt(v) + 1e-6) + 0.01 * expected)
        np.testing.assert_allclose(p.detach().numpy(), expected, rtol=1e-12)
    frozen = torch.nn.Parameter(torch.tensor([3.0]))
    AdamWeightDecay([frozen], lr=0.1).step()  # no gradient: untouched
    assert frozen.item() == 3.0


@pytest.fixture
def spy(monkeypatch):
    """Rows (by their first coordinate) and loss of every ``bits_per_dim`` call of the fit loop."""
    calls: list[tuple[list[int], float]] = []
    real = Glow.bits_per_dim

    def recorded(self, x):
        loss = real(self, x)
        calls.append(([round(v) for v in x[:, 0].tolist()], float(loss)))
        return loss

    monkeypatch.setattr(Glow, "bits_per_dim", recorded)
    return calls


def indexed(n: int, dim: int = 6, seed: int = 0) -> np.ndarray:
    """Row i starts with i (exactly representable), the rest is noise."""
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    x[:, 0] = np.arange(n)
    return x


def ema(losses: list[float]) -> float:
    running = losses[0]
    for value in losses[1:]:
        running = 0.98 * running + 0.02 * value
    return running


def test_sentence_batches_keep_the_partial_last_batch(spy):
    x = indexed(10)
    config = FlowConfig(levels=1, depth=1, width=4, batch_size=4, epochs=2.0)
    started = time.perf_counter()
    _, stats = train_flow(lambda epoch: x, 6, 10, config, seed=3, progress=False)
    wall = time.perf_counter() - started
    # ceil(2 epochs · 10 rows / 4) = 5 steps: epoch 0 is 4 + 4 + 2 rows (a permutation), epoch 1 starts again.
    assert [len(rows) for rows, _ in spy] == [4, 4, 2, 4, 4] and stats.steps == 5
    assert sorted(r for rows, _ in spy[:3] for r in rows) == list(range(10))
    assert len(set(spy[3][0] + spy[4][0])) == 8
    losses = [loss for _, loss in spy]
    assert stats.first_bits_per_dim == losses[0] and stats.last_bits_per_dim == pytest.approx(ema(losses), rel=1e-12)
    assert 0 <= stats.seconds <= wall
    assert stats.recipe == {"optimizer": "AdamWeightDecay (BERT's: Adam without bias correction)", "lr": 1e-3,
                            "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "schedule": "constant",
                            "warmup_fraction": 0.0, "clip_grad_norm": 1.0, "device": "cpu", "batches": "sentences"}
    spy.clear()
    _, small = train_flow(lambda epoch: x[:3], 6, 3, FlowConfig(levels=1, depth=1, width=4, epochs=0.1),
                          seed=3, progress=False)
    assert small.steps == 1 and [len(rows) for rows, _ in spy] == [3]  # at least one step, however few rows


def test_pair_batches_drop_the_remainder_and_add_both_sides(spy):
    x = indexed(20)
    side_a, side_b = np.arange(10), np.arange(10) + 10  # pair i = rows (i, 10 + i)
    config = FlowConfig(levels=1, depth=1, width=4, batch_size=4, epochs=2.0)
    _, stats = train_flow(lambda epoch: x, 6, 20, config, seed=4, progress=False, pairs=(side_a, side_b))
    # int(2 epochs · 10 pairs / 4) = 5 steps of 4 pairs; each epoch has 2 full batches, 2 pairs dropped.
    assert stats.steps == 5 and len(spy) == 10
    a_calls, b_calls = spy[0::2], spy[1::2]
    for (a_rows, _), (b_rows, _) in zip(a_calls, b_calls):
        assert len(a_rows) == 4 and all(r < 10 for r in a_rows) and b_rows == [r + 10 for r in a_rows]
    for epoch in ((0, 1), (2, 3)):
        assert len(set(a_calls[epoch[0]][0] + a_calls[epoch[1]][0])) == 8
    losses = [a + b for (_, a), (_, b) in zip(a_calls, b_calls)]  # summed here in float64, there in float32
    assert stats.first_bits_per_dim == pytest.approx(losses[0], rel=1e-6)
    assert stats.last_bits_per_dim == pytest.approx(ema(losses), rel=1e-6)
    assert stats.recipe["batches"] == "pairs (loss: side a + side b; remainder dropped)"


def test_pair_batches_that_fill_the_epoch_exactly_are_all_kept_and_a_short_epoch_is_one_step(spy):
    """8 pairs in batches of 4: nothing is left over, so both batches run (int(1 · 8 / 4) = 2 steps,
    every pair once). 3 pairs, fewer than a batch: int(3 / 4) = 0, and at least one step runs, of
    the 3 pairs (as for sentence batches)."""
    x = indexed(16)
    config = FlowConfig(levels=1, depth=1, width=4, batch_size=4, epochs=1.0)
    _, stats = train_flow(lambda epoch: x, 6, 16, config, seed=5, progress=False,
                          pairs=(np.arange(8), np.arange(8) + 8))
    a_rows = [rows for rows, _ in spy[0::2]]
    assert stats.steps == 2 and [len(rows) for rows in a_rows] == [4, 4]
    assert sorted(a_rows[0] + a_rows[1]) == list(range(8))
    spy.clear()
    _, stats = train_flow(lambda epoch: x, 6, 16, config, seed=5, progress=False,
                          pairs=(np.arange(3), np.arange(3) + 8))
    assert stats.steps == 1 and len(spy) == 2 and sorted(spy[0][0]) == [0, 1, 2] and sorted(spy[1][0]) == [8, 9, 10]


def test_pair_batches_one_short_of_a_second_batch_drop_it(spy):
    """7 pairs in batches of 4: each epoch has one full batch and drops the 3 left over (not a batch
    of 3); int(2 · 7 / 4) = 3 steps, all of 4 pairs."""
    x = indexed(14)
    config = FlowConfig(levels=1, depth=1, width=4, batch_size=4, epochs=2.0)
    _, stats = train_flow(lambda epoch: x, 6, 14, config, seed=7, progress=False,
                          pairs=(np.arange(7), np.arange(7) + 7))
    assert stats.steps == 3 and [len(rows) for rows, _ in spy] == [4] * 6


def test_pair_epochs_continue_until_the_promised_steps_have_run(spy):
    """7 pairs in batches of 4, 4 epochs: int(4 · 7 / 4) = 7 steps, and with 3 pairs dropped per epoch
    each epoch gives one batch, so 7 epochs run (0..6), each asking for its own vectors. A bound
    computed as ceil(7 · 4 / 7) + 1 = 5 epochs would stop at 5 steps."""
    x = indexed(14)
    asked = []

    def batches_of_epoch(epoch):
        asked.append(epoch)
        return x

    config = FlowConfig(levels=1, depth=1, width=4, batch_size=4, epochs=4.0)
    _, stats = train_flow(batches_of_epoch, 6, 14, config, seed=7, progress=False,
                          pairs=(np.arange(7), np.arange(7) + 7))
    assert stats.steps == 7 and asked == list(range(7)) and [len(rows) for rows, _ in spy] == [4] * 14


def test_a_single_pair_in_batches_of_one_is_every_step(spy):
    """1 pair, batch 1, 3 epochs: int(3 · 1 / 1) = 3 steps, each of that one pair (side a row 0,
    side b row 1): no empty batch at the end of an epoch."""
    x = indexed(2)
    config = FlowConfig(levels=1, depth=1, width=4, batch_size=1, epochs=3.0)
    _, stats = train_flow(lambda epoch: x, 6, 2, config, seed=8, progress=False, pairs=(np.arange(1), np.arange(1) + 1))
    assert stats.steps == 3 and [rows for rows, _ in spy] == [[0], [1]] * 3


def test_the_progress_bar_counts_the_steps_and_shows_the_running_loss(monkeypatch):
    bars = []

    class Bar:
        def __init__(self, total):
            self.total, self.n, self.postfix, self.closed = total, 0, {}, False
            bars.append(self)

        def update(self, k):
            self.n += k

        def set_postfix(self, **postfix):
            self.postfix = postfix

        def close(self):
            self.closed = True

    import harness.core.progress

    monkeypatch.setattr(harness.core.progress, "progress_bar", lambda total, *args, **kwargs: Bar(total))
    x = indexed(10)
    config = FlowConfig(levels=1, depth=1, width=4, batch_size=4, epochs=2.0)
    _, stats = train_flow(lambda epoch: x, 6, 10, config, seed=3, progress=False)
    (bar,) = bars
    assert bar.total == bar.n == stats.steps == 5 and bar.closed
    assert bar.postfix == {"bits_per_dim": f"{stats.last_bits_per_dim:.3f}"}


def test_the_fit_shows_a_progress_bar_on_a_terminal_unless_asked_not_to(monkeypatch):
    """``progress`` defaults to on: tqdm then draws "fit flow" on a terminal (and stays quiet
    elsewhere, tqdm's own test); ``progress=False`` draws nothing even there."""
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    x, config = indexed(8), FlowConfig(levels=1, depth=1, width=4, batch_size=4, epochs=1.0)
    for kwargs, shown in (({}, True), ({"progress": False}, False)):
        terminal = Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        train_flow(lambda epoch: x, 6, 8, config, seed=6, **kwargs)
        monkeypatch.undo()
        assert ("fit flow" in terminal.getvalue()) == shown, terminal.getvalue()
        if shown:  # and it is erased when the fit ends (leave=False): the last thing drawn is blank
            assert terminal.getvalue().endswith("\r") and not terminal.getvalue().split("\r")[-2].strip()


def test_latents_do_not_depend_on_the_chunk_size():
    x = torch.randn(11, 6, generator=torch.Generator().manual_seed(0)).numpy()
    flow = FlowConfig(levels=2, depth=1, width=4).build(6, 1)
    flow(torch.from_numpy(x))  # data-dependent init
    flow.eval()
    whole = latents(flow, x)
    np.testing.assert_allclose(latents(flow, x, batch=3), whole, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(whole, flow(torch.from_numpy(x))[0].numpy(), atol=1e-6)
    empty = latents(flow, x[:0])
    assert empty.shape == (0, 6) and empty.dtype == np.float32


# -- the method -----------------------------------------------------------------------------------

SENTENCES = [f"a {w} is {v} in the park" for w in ("man", "dog", "cat", "child", "woman") for v in
             ("running", "sleeping", "eating", "playing")]


def flow_method(tmp_path, backbone, **params):
    request = SpecRequest(backbone=str(backbone), max_length=32,
                          params={"flow": {"levels": 1, "depth": 1, "width": 4, **params}})
    ctx = FakeContext(tmp_path / "cache", request)
    return get_method("flow").build(request, ctx), ctx


def test_the_training_plan_counts_the_steps(tiny_bert, tmp_path):
    method, _ = flow_method(tmp_path, tiny_bert, epochs=2.0, batch_size=8)
    assert method.training_plan(make_fit_set("test", SENTENCES, "x")) == "to train: ~5 flow steps on 20 sentences"
    pairs = [(SENTENCES[i], SENTENCES[i + 1]) for i in range(19)]
    paired, _ = flow_method(tmp_path, tiny_bert, epochs=2.0, batch_size=8, batches="pairs")
    assert paired.training_plan(make_fit_set("test", SENTENCES, "x", pairs)) == \
        "to train: ~4 flow steps on 19 pairs"  # int(2 · 19 / 8)


def test_flags_read_as_booleans():
    from methods.flow import _flag

    assert [_flag(v) for v in ("1", "true", "Yes", "on", True)] == [True] * 5
    assert [_flag(v) for v in ("0", "false", "no", "off", "", False)] == [False] * 6


@pytest.mark.parametrize(("first", "last", "refused"), [(2.0, 3.0, False), (2.0, 3.01, True), (2.0, 1.5, False),
                                                        (2.0, math.nan, True), (2.0, math.inf, True)])
def test_a_fit_whose_loss_rose_by_more_than_one_bit_is_refused(tiny_bert, tmp_path, monkeypatch, first, last,
                                                               refused):
    from harness.core.errors import UserError
    from methods.training import flow_fit

    def fake(batches_of_epoch, dim, n, config, seed, progress=True, pairs=None):
        return config.build(dim, seed), FitStats(1, first, last, 0.1234567, {"batches": "sentences"})

    monkeypatch.setattr(flow_fit, "train_flow", fake)
    method, _ = flow_method(tmp_path, tiny_bert)
    fit_set = make_fit_set("test", SENTENCES, "x")
    if refused:
        with pytest.raises(UserError, match="diverged"):
            method.fit(fit_set)
    else:
        method.fit(fit_set)
        assert method.fit_info["train_seconds"] == 0.123  # rounded to the millisecond


def test_dropout_fits_reencode_with_one_seed_per_epoch(tiny_bert, tmp_path, monkeypatch):
    from harness.core.encoding.provider import ViewProvider

    seeds = []
    real = ViewProvider.with_dropout

    def recorded(self, sentences, views, seed):
        seeds.append(seed)
        return real(self, sentences, views, seed)

    monkeypatch.setattr(ViewProvider, "with_dropout", recorded)
    method, _ = flow_method(tmp_path, tiny_bert, fit_dropout=True, epochs=3.0, batch_size=8)
    method.fit(make_fit_set("test", SENTENCES, "x"))
    assert seeds == [1234, 1235, 1236]  # the run's seed + epoch


def _recommit_latents(cache, data: bytes) -> None:
    """Replace the cached latents by ``data`` with a valid meta.json, as a damaged-but-checksummed
    or foreign file would be."""
    import json

    from harness.core.artifacts import ArtifactDir

    (z,) = cache.rglob("flow-latents/*/z.npy")
    key = json.loads((z.parent / "meta.json").read_text())["key"]
    folder = ArtifactDir(cache, "flow-latents", {k: v for k, v in key.items() if k not in ("schema", "kind")})
    assert folder.dir == z.parent
    folder.commit({"z.npy": data}, {})


@pytest.mark.parametrize("wrong", ["float64", "shape"])
def test_cached_latents_of_the_wrong_dtype_or_shape_are_recomputed(tiny_bert, tmp_path, wrong):
    from harness.core.hashing import npy_bytes

    method, ctx = flow_method(tmp_path, tiny_bert)
    method.fit(make_fit_set("test", SENTENCES, "x"))
    z = method.encode(SENTENCES[:4])
    bad = z.astype(np.float64) if wrong == "float64" else z[:, :-1]
    _recommit_latents(ctx.root, npy_bytes(np.ascontiguousarray(bad)))
    again = method.encode(SENTENCES[:4])
    assert again.dtype == np.float32 and again.shape == z.shape
    np.testing.assert_array_equal(again, z)


class _Touch:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_cached_latents_are_never_unpickled(tiny_bert, tmp_path):
    import io

    method, ctx = flow_method(tmp_path, tiny_bert)
    method.fit(make_fit_set("test", SENTENCES, "x"))
    z = method.encode(SENTENCES[:2])
    marker = tmp_path / "unpickled"
    buffer = io.BytesIO()
    np.save(buffer, np.array([[_Touch(marker)] * z.shape[1]] * 2, dtype=object), allow_pickle=True)
    _recommit_latents(ctx.root, buffer.getvalue())
    with contextlib.suppress(ValueError):  # refusing the file is fine; executing it is not
        method.encode(SENTENCES[:2])
    assert not marker.exists()
