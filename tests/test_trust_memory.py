"""Issue 30: scoring in memory bounded at any task size, and a bootstrap memo that cannot change a verdict.

* The resamples are drawn, ranked and scored a chunk at a time (:mod:`harness.core.bootstrap`).
  Checked against an independent numpy/scipy bootstrap (the same generator, the same draws, each
  resample rebuilt and scored with scipy), against the whole-matrix implementation the chunks
  replaced (written out below, bit for bit), and against numbers pinned from that implementation
  before the change.
* Memory: a bound on the bytes traced while scoring 200k pairs that the old rounds × pairs count
  matrix alone exceeds (a bound on bytes, not on time; time is benchmarks/studies/pairs_scale.py's).
* A task too large for memory is one ResourceError line, before any scoring.
* Row 2 of the issue: a forged memo (a wide interval named by its own hash) never reaches the
  interval, nor therefore the --baseline verdict.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from fixtures import resample_plan
from scipy.stats import spearmanr

from harness.core import bootstrap
from harness.core.bootstrap import percentile_interval, resampled_scores
from harness.core.errors import ResourceError
from harness.core.scoring import score_split
from harness.core.significance import paired_bootstrap, scored, williams

ATOL = 1e-5  # ×100 scale: the resampled ranks and weights are float32, scipy's float64


def case(seed: int, sizes: tuple[int, ...], ties: bool = True) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The inputs the pinned numbers were computed on (tied gold and similarities when ``ties``)."""
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    gold = rng.integers(0, 6, n).astype(float) if ties else rng.normal(size=n)
    cos = np.round(gold + rng.normal(0, 2.0, n), 1) if ties else gold + rng.normal(0, 1.0, n)
    labels = [f"s{k}" for k, size in enumerate(sizes) for _ in range(size)]
    return cos, gold, labels


# -- an independent bootstrap: numpy's generator, each resample rebuilt and scored by scipy --------

def numpy_bootstrap(cos, gold, labels, aggregation, rounds, seed) -> np.ndarray:
    """The resampling protocol written out: one generator; subset after subset (in order of first
    appearance), ``rounds × size`` uniform draws of that subset's pairs; resample b is row b of every
    subset's draws. ``all`` correlates the pooled resample, ``mean``/``wmean`` average per subset."""
    labels = np.asarray(labels)
    names = list(dict.fromkeys(labels.tolist()))
    rng = np.random.default_rng(seed)
    subsets = [np.flatnonzero(labels == name) for name in names]
    draws = [idx[rng.integers(0, len(idx), size=(rounds, len(idx)))] for idx in subsets]
    out = []
    for b in range(rounds):
        if aggregation == "all" or len(names) == 1:
            drawn = np.concatenate([d[b] for d in draws])
            out.append(100 * spearmanr(cos[drawn], gold[drawn]).statistic)
            continue
        values = [100 * spearmanr(cos[d[b]], gold[d[b]]).statistic for d in draws]
        sizes = [len(idx) for idx in subsets]
        out.append(np.mean(values) if aggregation == "mean" else np.dot(values, sizes) / sum(sizes))
    return np.array(out)


# -- the whole-matrix implementation the chunks replaced (harness/core/bootstrap.py before issue 30) --

def _whole_ranks(x, counts):
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    group = np.cumsum(np.r_[True, ordered[1:] != ordered[:-1]]) - 1
    per_group = np.add.reduceat(counts[:, order], starts, axis=1).astype(np.float32)
    below = np.cumsum(per_group, axis=1) - per_group
    ranks = np.empty(counts.shape, dtype=np.float32)
    ranks[:, order] = (below + (per_group + 1) / 2)[:, group]
    return ranks


def _whole_pearson(rx, ry, counts):
    w = (counts / counts.sum(axis=1, keepdims=True)).astype(np.float32)
    dx = rx - (w * rx).sum(axis=1, keepdims=True)
    dy = ry - (w * ry).sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        covariance = (w * dx * dy).sum(axis=1, dtype=np.float64)
        return 100 * covariance / np.sqrt((w * dx * dx).sum(axis=1, dtype=np.float64)
                                          * (w * dy * dy).sum(axis=1, dtype=np.float64))


def whole_matrix(cos, gold, labels, aggregation, rounds, seed) -> np.ndarray:
    """Every resample at once: the (rounds, n) count matrix and the ranks of both sides in it."""
    rng = np.random.default_rng(seed)
    label_array = np.asarray(labels)
    groups = {name: np.flatnonzero(label_array == name) for name in dict.fromkeys(labels)}
    counts = np.zeros((rounds, len(gold)), dtype=np.int32)
    for idx in groups.values():
        draws = rng.integers(0, len(idx), size=(rounds, len(idx))) + (np.arange(rounds) * len(idx))[:, None]
        counts[:, idx] = np.bincount(draws.ravel(), minlength=rounds * len(idx)).reshape(rounds, len(idx))
    if aggregation == "all" or len(groups) <= 1:
        return _whole_pearson(_whole_ranks(cos, counts), _whole_ranks(gold, counts), counts)
    values = np.stack([_whole_pearson(_whole_ranks(cos[idx], counts[:, idx]), _whole_ranks(gold[idx], counts[:, idx]),
                                      counts[:, idx]) for idx in groups.values()])
    weights = np.array([len(idx) for idx in groups.values()], dtype=float)
    if aggregation == "mean":
        weights = np.ones_like(weights)
    return (values * weights[:, None]).sum(axis=0) / weights.sum()


# -- values -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("aggregation", ["all", "mean", "wmean"])
@pytest.mark.parametrize("sizes", [(300,), (130, 70, 101)])
def test_the_chunked_bootstrap_equals_an_independent_numpy_bootstrap(sizes, aggregation):
    cos, gold, labels = case(21, sizes)
    rounds, seed = 300, 5
    expected = numpy_bootstrap(cos, gold, labels, aggregation, rounds, seed)
    for step in (7, 64, rounds):  # several chunks, one that does not divide the rounds, one chunk
        got = bootstrap._resampled_scores(cos, gold, labels, aggregation, rounds, seed, step=step)
        np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)
    low, high = np.percentile(expected, [2.5, 97.5])
    ci = score_split(cos, gold, labels, aggregation, bootstrap=rounds, seed=seed).ci95
    assert ci == pytest.approx((low, high), abs=ATOL)


# Pinned from the whole-matrix implementation before the change (numpy 2.4): (inputs, rounds, seed)
# → interval and the first three resampled scores.
PINNED = {
    ("one", "all"): ((65.47662585428748, 76.69841010153469),
                     (65.43803768219861, 66.0227415573159, 71.11820995899026)),
    ("three", "all"): ((60.28157272921772, 72.96161365766783),
                       (64.09172472355374, 63.8036228505733, 71.24876033016093)),
    ("three", "mean"): ((59.57497314337368, 73.3593220928026),
                        (63.55763250073028, 62.06961998721898, 71.1634210806151)),
    ("three", "wmean"): ((58.680275916488625, 72.32895566176522),
                         (61.73940426482926, 62.45535823355099, 70.95225241882778)),
    ("bigsub", "mean"): ((12.314646199692495, 79.30445460700984),
                         (78.81729252102986, 79.39646139051663, 12.529926375484782)),
    ("bigsub", "wmean"): ((68.09915831282352, 69.35569407292735),
                          (68.05498120288283, 69.02834430897617, 68.73378970003442)),
}
INPUTS = {"one": (case(1, (300,)), 1000, 1234), "three": (case(2, (130, 70, 101)), 1000, 7),
          "bigsub": (case(4, (9000, 3, 12001), ties=False), 17, 11)}


@pytest.mark.parametrize(("name", "aggregation"), list(PINNED))
def test_the_values_are_todays_for_the_same_seed(name, aggregation):
    """Same seed, same numbers: pinned ones (to 1e-9, across machines), and the whole-matrix
    implementation's to the last bit, in chunks that divide the rounds and chunks that do not."""
    (cos, gold, labels), rounds, seed = INPUTS[name]
    interval, first = PINNED[name, aggregation]
    values = resampled_scores(cos, gold, labels, aggregation, rounds, seed)
    assert percentile_interval(values) == pytest.approx(interval, abs=1e-9, rel=0)
    assert tuple(values[:3]) == pytest.approx(first, abs=1e-9, rel=0)
    whole = whole_matrix(cos, gold, labels, aggregation, rounds, seed)
    for step in (1, 3, 16, rounds - 1, rounds, rounds + 5):
        np.testing.assert_array_equal(bootstrap._resampled_scores(cos, gold, labels, aggregation, rounds, seed,
                                                                  step=step), whole)


def test_a_chunk_boundary_that_does_not_divide_the_rounds_reads_the_same_draws():
    """50 rounds in chunks of 7 (the last one 1 row), over three subsets (one of 3 pairs): the
    counts of every chunk are the rows of the whole matrix's counts, subset by subset."""
    cos, gold, labels = case(22, (40, 3, 25))
    rounds, seed = 50, 3
    plan = resample_plan(gold.tobytes(), tuple(labels), rounds, seed)
    groups = list(bootstrap.subset_indices(labels).values())
    chunks = list(bootstrap._count_chunks(groups, rounds, seed, 7))
    assert [r0 for r0, _ in chunks] == list(range(0, 50, 7)) and len(chunks[-1][1][0]) == 1
    for k, name in enumerate(bootstrap.subset_indices(labels)):
        np.testing.assert_array_equal(np.concatenate([parts[k] for _, parts in chunks]), plan[name][1])
    rng = np.random.default_rng(seed)  # and the whole matrix is numpy's draws, subset by subset
    for name, idx in bootstrap.subset_indices(labels).items():
        draws = rng.integers(0, len(idx), size=(rounds, len(idx)))
        np.testing.assert_array_equal(plan[name][1], [np.bincount(row, minlength=len(idx)) for row in draws])
    for aggregation in ("all", "mean", "wmean"):
        np.testing.assert_array_equal(bootstrap._resampled_scores(cos, gold, labels, aggregation, rounds, seed, step=7),
                                      whole_matrix(cos, gold, labels, aggregation, rounds, seed))


PAIRED = {"all": (9.435176115281635, 4.085626273123491, 15.08434925825051, 0.001998001998001998),
          "mean": (10.382544740472063, 4.578994962131573, 17.232262165006208, 0.001998001998001998),
          "wmean": (9.366714992189458, 3.730702752060774, 15.689263405028115, 0.001998001998001998)}


@pytest.mark.parametrize("aggregation", ["all", "mean", "wmean"])
def test_the_paired_test_equals_numpy_and_todays_numbers(aggregation):
    cos, gold, labels = case(2, (130, 70, 101))
    other = cos + np.random.default_rng(9).normal(0, 1.5, len(cos))
    a, b = scored(cos, gold, labels, aggregation, 1000, 7), scored(other, gold, labels, aggregation, 1000, 7)
    result = paired_bootstrap(a, b)
    assert (result.delta, result.ci_low, result.ci_high, result.p_value) == pytest.approx(PAIRED[aggregation],
                                                                                          abs=1e-9, rel=0)
    diffs = whole_matrix(cos, gold, labels, aggregation, 1000, 7) - whole_matrix(other, gold, labels, aggregation,
                                                                                  1000, 7)
    np.testing.assert_array_equal(a.resamples - b.resamples, diffs)
    independent = numpy_bootstrap(cos, gold, labels, aggregation, 200, 7) - numpy_bootstrap(other, gold, labels,
                                                                                             aggregation, 200, 7)
    short = paired_bootstrap(scored(cos, gold, labels, aggregation, 200, 7), scored(other, gold, labels, aggregation,
                                                                                   200, 7))
    assert (short.ci_low, short.ci_high) == pytest.approx(tuple(np.percentile(independent, [2.5, 97.5])), abs=ATOL)
    tail = min((independent <= 0).sum(), (independent >= 0).sum())
    assert short.p_value == pytest.approx(min(1.0, 2 * (tail + 1) / 201))
    assert williams(a, b, gold).p_value == pytest.approx(5.712551066847715e-05, rel=1e-9)


# -- memory -----------------------------------------------------------------------------------------

def test_scoring_200k_pairs_traces_far_less_than_the_old_count_matrix():
    """Score (with its interval) and compare two methods on 200k pairs, 150 resamples: the bytes
    traced at the peak stay below 48 MiB; the old implementation held the 150 × 200k int32 counts
    (114 MiB) and, as big, the ranks of gold and of each method within every resample."""
    import tracemalloc

    n, rounds = 200_000, 150
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 26, n) / 5.0
    cos, other = gold + rng.normal(0, 1, n), gold + rng.normal(0, 1.3, n)
    bound = 48 * 2**20
    assert rounds * n * 4 > 2 * bound  # the old counts alone
    tracemalloc.start()
    try:
        scores = score_split(cos, gold, None, "all", bootstrap=rounds, seed=1)
        result = paired_bootstrap(scored(cos, gold, None, "all", rounds, 1),
                                  scored(other, gold, None, "all", rounds, 1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < bound, f"peak traced {peak / 2**20:.0f} MiB"
    assert scores.ci95 is not None and result.p_value == pytest.approx(2 / (rounds + 1))  # every difference > 0


def test_memory_is_estimated_from_the_pairs_and_the_chunk():
    assert bootstrap.chunk_rounds(1_000, 1000) == 262  # 2^18 cells
    assert bootstrap.chunk_rounds(10_000_000, 1000) == 1  # never less than one resample
    one_row = bootstrap.scoring_bytes(10_000_000, 1000)
    assert one_row == bootstrap.BYTES_PER_PAIR * 10_000_000 + bootstrap.BYTES_PER_CELL * 10_000_000
    assert bootstrap.scoring_bytes(10_000_000, 10) == one_row  # rounds do not add memory, only time
    assert bootstrap.chunk_rounds(1_000, 1000, available=bootstrap.scoring_bytes(1_000, 1000, step=3)) == 3


def test_a_chunk_fitted_to_little_memory_gives_the_same_values(monkeypatch):
    from harness.core import machine

    cos, gold, labels = case(23, (500, 300))
    full = resampled_scores(cos, gold, labels, "wmean", 100, 2)  # no memo: every call computes
    monkeypatch.setattr(machine, "available_bytes", lambda device: bootstrap.scoring_bytes(800, 100, step=4))
    assert bootstrap.check_fits(800, 100) == 4
    np.testing.assert_array_equal(resampled_scores(cos, gold, labels, "wmean", 100, 2), full)


def test_a_task_too_large_for_memory_fails_before_scoring_with_one_line(monkeypatch):
    from harness.core import machine, scoring, significance

    monkeypatch.setattr(machine, "available_bytes", lambda device: 2**20)  # 1 MiB

    def no_scoring(*args, **kwargs):
        raise AssertionError("scored before the memory check")

    monkeypatch.setattr(scoring, "spearman", no_scoring)
    monkeypatch.setattr(bootstrap, "_count_chunks", no_scoring)
    cos, gold, labels = case(24, (20_000,))
    for call in (lambda: score_split(cos, gold, labels, "all", bootstrap=1000),
                 lambda: significance.scored(cos, gold, labels, "all", 1000),
                 lambda: resampled_scores(cos, gold, labels, "all", 1000, 1)):
        with pytest.raises(ResourceError) as caught:
            call()
        message = str(caught.value)
        assert "\n" not in message and message.startswith("scoring 20,000 pairs needs about ")
        assert "GiB" in message and "1 MiB" not in message and "available" in message
    monkeypatch.setattr(machine, "available_bytes", lambda device: None)  # unknown: no refusal
    assert bootstrap.check_fits(20_000, 1000) == bootstrap.chunk_rounds(20_000, 1000)


# -- row 2: a forged memo never decides an interval -------------------------------------------------

def forged(values: np.ndarray, baseline: float) -> np.ndarray:
    """A memo of the same shape and dtype whose interval is wide: the baseline −21 to +16 (the
    issue's "CI [−21.06, 15.99]" of the change)."""
    return baseline + np.linspace(-21.0, 16.0, len(values))


def plant(folder, key: str, data: bytes) -> list:
    """Forgeries where a reader would look: named by their own sha256 (as before issue 30), by a
    made-up tag, and an HMAC under the wrong secret."""
    import hmac

    other_secret = hmac.new(b"not the secret", key.encode() + b"\x00" + data, hashlib.sha256).hexdigest()
    names = [f"{key}-{hashlib.sha256(data).hexdigest()[:16]}.npy", f"{key}-{'0' * 64}.npy", f"{key}-{other_secret}.npy"]
    for name in names:
        (folder / name).write_bytes(data)
    return names


def drop_case():
    """A method 2.83 below its baseline, on 3000 pairs: its true interval excludes the baseline."""
    rng = np.random.default_rng(30)
    gold = rng.integers(0, 26, 3000) / 5.0
    cos = gold + rng.normal(0, 1.0, 3000)
    return cos, gold, [""] * 3000


def gate_says(spearman: float, ci: tuple[float, float] | None, baseline: float) -> bool:
    """The --baseline verdict (harness.runner.tables.gate) on one cell: a regression?"""
    from harness.runner.tables.gate import Match, verdict

    cell = {"method": "m", "backbone": "b", "task": "STS-B", "score": spearman, "spearman": spearman,
            "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None}
    table = verdict([Match(cell, baseline)], tolerance=1.0)
    return bool(table["regression"].iloc[0])


@pytest.mark.parametrize("secret", [None, b"the team's secret"])
def test_a_forged_wide_memo_does_not_change_the_verdict(tmp_path, secret):
    from harness.core.hashing import npy_bytes

    cos, gold, labels = drop_case()
    truth = score_split(cos, gold, labels, "all", bootstrap=1000, seed=1234)
    assert truth.spearman is not None and truth.ci95 is not None
    baseline = truth.spearman + 2.83
    assert gate_says(truth.spearman, truth.ci95, baseline)  # a real drop: a regression
    true_values = resampled_scores(cos, gold, labels, "all", 1000, 1234)
    wide = forged(true_values, baseline)
    assert not gate_says(truth.spearman, percentile_interval(wide), baseline)  # what a forgery would buy

    memo = bootstrap.ResampleMemo(tmp_path, secret)  # a new process, reading the cache another job wrote into
    key = bootstrap._key(cos, gold, labels, "all", 1000, 1234)
    names = plant(tmp_path, key, npy_bytes(wide))
    again = score_split(cos, gold, labels, "all", bootstrap=1000, seed=1234, memo=memo)
    assert again.ci95 == truth.ci95
    assert gate_says(again.spearman, again.ci95, baseline)
    for name in names:  # left alone (another secret's entry looks the same), never read
        assert (tmp_path / name).read_bytes() == npy_bytes(wide)
    written = sorted(set(p.name for p in tmp_path.glob("*.npy")) - set(names))
    assert len(written) == (1 if secret else 0)  # without a secret nothing is kept on disk


def test_a_valid_memo_copied_under_another_key_does_not_verify(tmp_path):
    """The tag covers the key: the genuine, wide memo of a noisy method, renamed to the key of a
    good one, is recomputed, not read."""
    secret = b"s"
    memo = bootstrap.ResampleMemo(tmp_path, secret)
    cos, gold, labels = drop_case()
    noisy = gold + np.random.default_rng(1).normal(0, 6.0, len(gold))
    resampled_scores(noisy, gold, labels, "all", 1000, 1234, memo)
    (theirs,) = tmp_path.glob("*.npy")
    key = bootstrap._key(cos, gold, labels, "all", 1000, 1234)
    theirs.rename(tmp_path / f"{key}-{theirs.stem.rsplit('-', 1)[1]}.npy")
    memo = bootstrap.ResampleMemo(tmp_path, secret)  # a new process
    assert memo.load(key, 1000) is None
    truth = whole_matrix(cos, gold, labels, "all", 1000, 1234)
    np.testing.assert_array_equal(resampled_scores(cos, gold, labels, "all", 1000, 1234, memo), truth)


def test_the_memo_travels_in_an_argument_and_is_read_back_only_with_its_secret(tmp_path, monkeypatch):
    cos, gold, labels = case(25, (200, 120))
    memo = bootstrap.ResampleMemo(tmp_path, b"secret")
    first = score_split(cos, gold, labels, "wmean", bootstrap=200, seed=3, memo=memo)
    assert len(list(tmp_path.glob("*.npy"))) == 1 and len(memo.entries) == 1
    memo = bootstrap.ResampleMemo(tmp_path, b"secret")  # a new process: only the disk remains

    def recompute(*args, **kwargs):
        raise AssertionError("recomputed although an authenticated memo was there")

    with monkeypatch.context() as patch:
        patch.setattr(bootstrap, "_resampled_scores", recompute)
        assert score_split(cos, gold, labels, "wmean", bootstrap=200, seed=3, memo=memo).ci95 == first.ci95
        with pytest.raises(AssertionError):  # another secret: the file does not verify, so it computes
            score_split(cos, gold, labels, "wmean", bootstrap=200, seed=3,
                        memo=bootstrap.ResampleMemo(tmp_path, b"another"))
        with pytest.raises(AssertionError):  # no secret: never read
            score_split(cos, gold, labels, "wmean", bootstrap=200, seed=3, memo=bootstrap.ResampleMemo(tmp_path))


def test_without_a_memo_nothing_is_kept_and_a_run_takes_the_cache_secret_from_the_environment(tmp_path,
                                                                                               monkeypatch):
    """No module default: a call without a memo keeps nothing (nothing on disk, nothing for the
    next call), and a run's memo (RunContext) takes the cache's secret, $STS_BENCH_CACHE_SECRET."""
    from harness.core.authenticity import SECRET_ENV
    from harness.runner.execution.context import RunContext
    from harness.runner.settings.config import BenchConfig

    cos, gold, labels = case(26, (100,))
    calls = []
    real = bootstrap._resampled_scores
    monkeypatch.setattr(bootstrap, "_resampled_scores", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = resampled_scores(cos, gold, labels, "all", 50, 1)
    np.testing.assert_array_equal(resampled_scores(cos, gold, labels, "all", 50, 1), first)
    assert len(calls) == 2 and not list(tmp_path.glob("*"))
    monkeypatch.setenv(SECRET_ENV, "from the environment")
    ctx = RunContext(BenchConfig(cache_dir=str(tmp_path / "cache")))
    try:
        assert ctx.resamples == bootstrap.ResampleMemo(tmp_path / "cache" / "bootstrap", b"from the environment")
    finally:
        ctx.close()
