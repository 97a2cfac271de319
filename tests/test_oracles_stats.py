"""Oracles for scoring, bootstrap and significance, by value against scipy and explicit resamples.

The bootstrap's draws are read from its plan (the counts of each pair in each resample); every
resample is then rebuilt explicitly with ``np.repeat``, scored with scipy per subset and averaged
here, so the vectorised ranking, weighting and aggregation are checked against a loop that shares
none of their code. No torch: these run in about a second.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fixtures import resample_plan
from scipy.stats import pearsonr, spearmanr
from scipy.stats import t as student_t

from harness.core.bootstrap import ALL, percentile_interval, resampled_scores
from harness.core.scoring import aggregate, cosine_rows, pearson, score_split, spearman, undefined_reason
from harness.core.significance import Scored, paired_bootstrap, scored, williams, williams_t

ROUNDS = 40
ATOL = 1e-5  # on the ×100 scale: the resampled Pearson weights and ranks are float32


def split(seed: int = 0, sizes=(30, 12, 21)):
    """A split with three subsets of different sizes, tied gold scores and tied similarities."""
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    gold = rng.integers(0, 6, n).astype(float)
    cos = np.round(gold + rng.normal(0, 2.0, n), 1)
    labels = [name for name, size in zip("ABC", sizes) for _ in range(size)]
    return cos, gold, labels


def explicit_resamples(cos, gold, labels, aggregation, rounds, seed) -> np.ndarray:
    """Each resample rebuilt from the plan's draw counts and scored with scipy, subset by subset."""
    plan = resample_plan(np.asarray(gold, dtype=np.float64).tobytes(), tuple(labels), rounds, seed)
    names = list(dict.fromkeys(labels))
    out = []
    for b in range(rounds):
        if aggregation == "all":
            idx, counts = plan[ALL][0], plan[ALL][1]
            drawn = np.repeat(idx, counts[b])
            out.append(100 * spearmanr(cos[drawn], gold[drawn]).statistic)
            continue
        values, sizes = [], []
        for name in names:
            idx, counts = plan[name][0], plan[name][1]
            drawn = np.repeat(idx, counts[b])
            values.append(100 * spearmanr(cos[drawn], gold[drawn]).statistic)
            sizes.append(len(idx))
        out.append(np.mean(values) if aggregation == "mean" else np.dot(values, sizes) / sum(sizes))
    return np.array(out)


def test_the_plan_resamples_each_subset_to_its_own_size_with_replacement():
    _, gold, labels = split()
    plan = resample_plan(gold.tobytes(), tuple(labels), ROUNDS, 5)
    for name, size in (("A", 30), ("B", 12), ("C", 21)):
        idx, counts, _ = plan[name]
        np.testing.assert_array_equal(idx, np.flatnonzero(np.asarray(labels) == name))
        np.testing.assert_array_equal(counts.sum(axis=1), size)  # stratified: each subset keeps its size
        assert counts.min() == 0 and counts.max() >= 2  # with replacement: some drawn twice, some never
    idx, counts, _ = plan[ALL]
    np.testing.assert_array_equal(idx, np.arange(len(gold)))
    np.testing.assert_array_equal(counts, np.concatenate([plan[n][1] for n in "ABC"], axis=1))
    assert np.unique(counts, axis=0).shape[0] == ROUNDS  # every resample differs


@pytest.mark.parametrize("aggregation", ["all", "mean", "wmean"])
def test_resampled_scores_equal_scipy_on_the_explicit_resamples(aggregation):
    cos, gold, labels = split(1)
    fast = resampled_scores(cos, gold, labels, aggregation, ROUNDS, seed=9)
    np.testing.assert_allclose(fast, explicit_resamples(cos, gold, labels, aggregation, ROUNDS, 9), atol=ATOL)


def test_one_subset_resamples_all_pairs_whatever_the_aggregation():
    cos, gold, _ = split(2, sizes=(40,))
    labels = [""] * 40
    expected = explicit_resamples(cos, gold, labels, "all", ROUNDS, 3)
    for aggregation in ("all", "mean", "wmean"):
        np.testing.assert_allclose(resampled_scores(cos, gold, labels, aggregation, ROUNDS, 3), expected, atol=ATOL)


def test_percentile_interval_is_numpys_central_interval_of_the_finite_values():
    rng = np.random.default_rng(3)
    stats = rng.normal(size=501)
    with_nan = np.concatenate([stats, [np.nan, np.inf, -np.inf]])
    low, high = percentile_interval(with_nan)
    assert (low, high) == pytest.approx(tuple(np.percentile(stats, [2.5, 97.5])), abs=1e-12)
    assert percentile_interval(stats, 80.0) == pytest.approx(tuple(np.percentile(stats, [10, 90])), abs=1e-12)
    assert all(math.isnan(v) for v in percentile_interval(np.array([np.nan])))


@pytest.mark.parametrize("aggregation", ["all", "mean", "wmean"])
def test_score_split_by_value_against_scipy(aggregation):
    cos, gold, labels = split(4)
    scores = score_split(cos, gold, labels, aggregation, bootstrap=ROUNDS, seed=6)
    names, sizes = "ABC", np.array([30, 12, 21])
    rho = [100 * spearmanr(cos[np.asarray(labels) == n], gold[np.asarray(labels) == n]).statistic for n in names]
    r = [100 * pearsonr(cos[np.asarray(labels) == n], gold[np.asarray(labels) == n]).statistic for n in names]
    for name, value, linear in zip(names, rho, r):
        assert scores.subsets[name]["spearman"] == pytest.approx(value, abs=1e-9)
        assert scores.subsets[name]["pearson"] == pytest.approx(linear, abs=1e-9)
    expected = {"all": (100 * spearmanr(cos, gold).statistic, 100 * pearsonr(cos, gold).statistic),
                "mean": (np.mean(rho), np.mean(r)),
                "wmean": (np.dot(rho, sizes) / sizes.sum(), np.dot(r, sizes) / sizes.sum())}[aggregation]
    assert (scores.spearman, scores.pearson) == pytest.approx(expected, abs=1e-9)
    assert scores.n_pairs == 63 and scores.aggregation == aggregation
    low, high = np.percentile(explicit_resamples(cos, gold, labels, aggregation, ROUNDS, 6), [2.5, 97.5])
    assert scores.ci95 == pytest.approx((low, high), abs=ATOL)


def test_aggregate_weights_by_size_only_under_wmean():
    values, sizes = {"a": 10.0, "b": 40.0, "c": -5.0}, {"a": 1, "b": 3, "c": 6}
    assert aggregate(values, sizes, "mean") == pytest.approx(15.0)
    assert aggregate(values, sizes, "wmean") == pytest.approx((10 + 120 - 30) / 10)
    with pytest.raises(ValueError):
        aggregate(values, sizes, "all")


def test_cosine_rows_and_correlations_by_value():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(20, 7)), rng.normal(size=(20, 7))
    a[3] = 0
    cos, zero = cosine_rows(a, b)
    expected = [0.0 if not a[i].any() else a[i] @ b[i] / np.linalg.norm(a[i]) / np.linalg.norm(b[i])
                for i in range(20)]
    np.testing.assert_allclose(cos, expected, atol=1e-12)
    assert zero == 1
    x, y = rng.normal(size=50), rng.normal(size=50)
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert pearson(x, y) == pytest.approx(pearsonr(x, y).statistic, abs=1e-12)


def test_undefined_reasons_at_their_edges():
    assert undefined_reason([0.1, 0.2, 0.3], [1, 2, 3]) is None  # exactly 3 pairs is enough
    assert undefined_reason([0.1, np.nan, 0.3], [1, 2, 3]) == "a similarity is not a finite number"
    assert undefined_reason([0.1, np.inf, 0.3], [1, 2, 3]) == "a similarity is not a finite number"
    assert undefined_reason([0.5, 0.5, 0.6], [1, 1, 2]) is None  # ties are not constants


# -- significance -------------------------------------------------------------------------------

def williams_reference(r12: float, r13: float, r23: float, n: int) -> tuple[float, float]:
    """Steiger (1980) eq. 7, written out here; the p-value from scipy's t distribution with n − 3 df."""
    det = 1 - r12 ** 2 - r13 ** 2 - r23 ** 2 + 2 * r12 * r13 * r23
    rbar = (r12 + r13) / 2
    t = (r12 - r13) * np.sqrt((n - 1) * (1 + r23) / (2 * det * (n - 1) / (n - 3) + rbar ** 2 * (1 - r23) ** 3))
    return t, 2 * student_t.sf(abs(t), n - 3)


@pytest.mark.parametrize(("r12", "r13", "r23", "n"), [
    (0.8, 0.7, 0.9, 100), (0.3, 0.45, 0.2, 25), (-0.2, 0.1, 0.6, 12), (0.62, 0.6, 0.95, 1379), (0.5, 0.1, -0.3, 5),
])
def test_williams_t_equals_the_formula_and_scipys_t_tail(r12, r13, r23, n):
    t, p = williams_t(r12, r13, r23, n)
    expected_t, expected_p = williams_reference(r12, r13, r23, n)
    assert t == pytest.approx(expected_t, rel=1e-12)
    assert p == pytest.approx(expected_p, rel=1e-9)
    assert williams_t(r13, r12, r23, n) == pytest.approx((-t, p), rel=1e-9)
    assert all(math.isnan(v) for v in williams_t(r12, r13, r23, 3))


def test_paired_bootstrap_by_value_from_its_resamples():
    rng = np.random.default_rng(6)
    cos, gold, labels = split(7)
    other = cos + rng.normal(0, 1.5, len(cos))
    for aggregation in ("all", "wmean"):
        a, b = scored(cos, gold, labels, aggregation, rounds=ROUNDS, seed=2), scored(other, gold, labels, aggregation,
                                                                                   rounds=ROUNDS, seed=2)
        np.testing.assert_allclose(a.resamples, explicit_resamples(cos, gold, labels, aggregation, ROUNDS, 2),
                                   atol=ATOL)
        assert a.spearman == pytest.approx(score_split(cos, gold, labels, aggregation, bootstrap=0).spearman)
        result = paired_bootstrap(a, b)
        diffs = a.resamples - b.resamples
        assert result.delta == pytest.approx(a.spearman - b.spearman, abs=1e-12)
        assert (result.ci_low, result.ci_high) == pytest.approx(tuple(np.percentile(diffs, [2.5, 97.5])), abs=1e-12)
        below, above = int((diffs <= 0).sum()), int((diffs >= 0).sum())
        assert result.p_value == pytest.approx(min(1.0, 2 * (min(below, above) + 1) / (ROUNDS + 1)), abs=1e-12)
        assert result.test == f"paired bootstrap (B={ROUNDS})"


def test_paired_bootstrap_p_value_on_hand_made_resamples():
    """Differences 1..9 and −1: one of ten at or below 0 → p = 2 · (1 + 1) / 11."""
    a = Scored(np.zeros(3), 5.0, np.array([1.0, 2, 3, 4, 5, 6, 7, 8, 9, -1]) + 10)
    b = Scored(np.zeros(3), 2.0, np.full(10, 10.0))
    result = paired_bootstrap(a, b)
    assert result.p_value == pytest.approx(4 / 11) and result.delta == 3.0
    c = Scored(np.zeros(3), 2.0, np.array([np.nan] + [10.0] * 9))  # a NaN resample is left out
    assert paired_bootstrap(a, c).p_value == pytest.approx(min(1.0, 2 * (1 + 1) / 10))
    assert paired_bootstrap(a, a).p_value == 1.0


def test_williams_comparison_uses_the_spearman_correlations_over_all_pairs():
    cos, gold, labels = split(8)
    other = cos[::-1].copy() + np.linspace(0, 1, len(cos))
    a, b = scored(cos, gold, labels, "mean", rounds=ROUNDS), scored(other, gold, labels, "mean", rounds=ROUNDS)
    result = williams(a, b, gold)
    r12, r13 = spearmanr(cos, gold).statistic, spearmanr(other, gold).statistic
    _, p = williams_reference(r12, r13, spearmanr(cos, other).statistic, len(gold))
    assert result.p_value == pytest.approx(p, rel=1e-9)
    assert result.delta == pytest.approx(a.spearman - b.spearman) and math.isnan(result.ci_low)


# -- edges mutation testing found untested (docs/measurements/mutation.md) -----------------------

def test_student_t_tail_at_infinite_and_overflowing_t():
    from harness.core.significance import student_t_sf

    assert student_t_sf(float("-inf"), 5) == 1.0 and student_t_sf(float("inf"), 5) == 0.0
    for df in (1, 10):  # t² overflows to inf, so x = df / (df + t²) is exactly 0: the tail is 0 (scipy: ~1e-201)
        assert student_t_sf(1e200, df) == pytest.approx(student_t.sf(1e200, df), abs=1e-200)
        assert student_t_sf(-1e200, df) == pytest.approx(1.0, abs=1e-15)
    assert student_t_sf(0.0, 7) == 0.5


def test_williams_t_at_its_edges():
    assert williams_t(0.6, 0.4, 0.3, 4) == pytest.approx(williams_reference(0.6, 0.4, 0.3, 4), rel=1e-9)  # n − 3 = 1
    assert williams_t(0.7, 0.7, 0.2, 50) == (0.0, 1.0)  # equal correlations: no difference, whatever r23
    # |R| = 0 and r12 = −r13: the denominator is exactly 0, the difference is certain (sign of r12 − r13).
    assert williams_t(0.5, -0.5, 0.5, 10) == (math.inf, 0.0)
    assert williams_t(-0.5, 0.5, 0.5, 10) == (-math.inf, 0.0)


def test_the_defaults_are_1000_resamples_seeded_1234():
    cos, gold, labels = split(9)
    expected = resampled_scores(cos, gold, labels, "wmean", 1000, 1234)
    np.testing.assert_array_equal(scored(cos, gold, labels, "wmean").resamples, expected)
    scores = score_split(cos, gold, labels, "wmean")
    assert scores.ci95 == percentile_interval(expected) and scores.n_zero_vectors == 0
    one = score_split(cos, gold, labels, "wmean", bootstrap=1, seed=4)
    value = resampled_scores(cos, gold, labels, "wmean", 1, 4)[0]
    # one resample is the interval from it to the score it qualifies (an interval holds its own estimate)
    assert one.ci95 == (min(value, one.spearman), max(value, one.spearman)) and one.ci95[0] < one.ci95[1]
    assert score_split(cos, gold, labels, "wmean", bootstrap=0).ci95 is None


def test_undefined_splits_say_which_subset_and_only_when_there_are_several():
    gold = [1.0, 2, 3, 4, 5, 6]
    alone = score_split(np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]), [2.0] * 6, ["A"] * 6, "mean", bootstrap=0)
    assert alone.undefined == "every gold score is equal"  # one subset: the split's own reason
    flat = score_split(np.array([0.1, 0.2, 0.3, 0.5, 0.5, 0.5]), gold, list("AAABBB"), "mean", bootstrap=0)
    assert flat.undefined == "subset B: every similarity is equal (under --aggregation mean every subset must be " \
                             "defined)"
    assert flat.subsets["A"]["spearman"] == pytest.approx(100.0)
    plain = score_split(np.array([0.5] * 6), gold, None, "all", bootstrap=0)
    assert plain.undefined == "every similarity is equal" and plain.subsets == {}


def test_pearson_rows_are_vectorised_along_the_last_axis():
    from harness.core.scoring import _pearson_rows

    rng = np.random.default_rng(10)
    x, y = rng.normal(size=(3, 25)), rng.normal(size=(3, 25))
    np.testing.assert_allclose(_pearson_rows(x, y), [pearsonr(x[i], y[i]).statistic for i in range(3)], atol=1e-12)


def test_every_pair_is_drawn_by_some_resample():
    _, gold, labels = split(11)
    counts = resample_plan(gold.tobytes(), tuple(labels), ROUNDS, 8)[ALL][1]
    assert (counts.sum(axis=0) > 0).all()  # P(a pair is never drawn in 40 resamples of ≥ 12) < e^-38
    assert counts.mean() == pytest.approx(1.0)


def test_student_t_tail_far_out_with_few_degrees_of_freedom():
    from harness.core.significance import student_t_sf

    for df in (1, 2):
        for value in (1e3, 1e6):
            assert student_t_sf(value, df) == pytest.approx(student_t.sf(value, df), rel=1e-9)


def betacf_events(run):
    """Trace events inside ``_betacf`` while ``run()`` runs. The tracer already running (coverage's,
    say) is kept and called as before, so the lines these tests
    execute are still seen, and it is back in place afterwards."""
    import sys

    from harness.core import significance

    code, previous, events = significance._betacf.__code__, sys.gettrace(), [0]

    def chained(inner, counted):
        def local(frame, event, arg):
            if counted:
                events[0] += 1
            following = inner(frame, event, arg) if inner is not None else None
            return chained(following, counted) if following is not None or counted else None
        return local

    def tracer(frame, event, arg):
        inner = previous(frame, event, arg) if previous is not None else None
        counted = frame.f_code is code
        return chained(inner, counted) if inner is not None or counted else None

    sys.settrace(tracer)
    try:
        result = run()
    finally:
        sys.settrace(previous)
    return events[0], result


def test_the_continued_fraction_stops_once_converged():
    """Modified Lentz stops when a term changes the fraction by < 1e-15; its 10,000 terms are only a
    cap. Counted with a tracer: a few hundred line events per call, not the cap's ~100,000."""
    from harness.core import significance

    def tails():
        for value, df in ((3.674, 97), (0.3, 1376), (12.0, 3), (1.0, 10)):
            significance.student_t_sf(value, df)

    events, _ = betacf_events(tails)
    assert 0 < events < 4 * 2_000


def test_two_subsets_are_averaged_not_pooled():
    cos, gold, labels = split(12, sizes=(25, 18))
    for aggregation in ("mean", "wmean"):
        np.testing.assert_allclose(resampled_scores(cos, gold, labels, aggregation, ROUNDS, 1),
                                   explicit_resamples(cos, gold, labels, aggregation, ROUNDS, 1), atol=ATOL)


SECRET = b"test cache secret"


def tagged_name(key: str, data: bytes) -> str:
    """The name a memo file of ``key`` holding ``data`` has under :data:`SECRET` (written out here:
    HMAC-SHA256 of the key, a zero byte and the bytes)."""
    import hashlib
    import hmac

    mac = hmac.new(SECRET, key.encode() + b"\x00" + data, hashlib.sha256).hexdigest()
    return f"{key}-{mac}.npy"


@pytest.fixture
def memo_dir(tmp_path):
    """The folder of a disk memo under a cache secret: without one nothing is kept on disk
    (test_trust_memory.py)."""
    return tmp_path


def disk_memo(folder):
    """A fresh memo (a new process) over ``folder``, under :data:`SECRET`."""
    from harness.core import bootstrap

    return bootstrap.ResampleMemo(folder, SECRET)


def test_a_memo_file_of_another_dtype_is_replaced_not_read(memo_dir):
    from harness.core.hashing import npy_bytes

    cos, gold, labels = split(13)
    first = resampled_scores(cos, gold, labels, "all", ROUNDS, 3, disk_memo(memo_dir))
    (memo,) = memo_dir.glob("*.npy")
    key = memo.stem.rsplit("-", 1)[0]
    assert memo.name == tagged_name(key, memo.read_bytes())
    memo.unlink()
    data = npy_bytes(first.astype(np.float32))  # the right shape, a tag that verifies, the wrong dtype
    (memo_dir / tagged_name(key, data)).write_bytes(data)
    again = resampled_scores(cos, gold, labels, "all", ROUNDS, 3, disk_memo(memo_dir))
    assert again.dtype == np.float64
    np.testing.assert_array_equal(again, first)
    assert [p.name for p in memo_dir.glob("*.npy")] == [memo.name]


class _Touch:
    """Unpickling this creates a file: proof that a memo file was unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_a_memo_file_is_never_unpickled(memo_dir, tmp_path_factory):
    import io


    cos, gold, labels = split(14)
    first = resampled_scores(cos, gold, labels, "all", ROUNDS, 5, disk_memo(memo_dir))
    (memo,) = memo_dir.glob("*.npy")
    key = memo.stem.rsplit("-", 1)[0]
    memo.unlink()
    marker = tmp_path_factory.mktemp("pickle") / "unpickled"
    buffer = io.BytesIO()
    np.save(buffer, np.array([_Touch(marker)] * ROUNDS, dtype=object), allow_pickle=True)
    data = buffer.getvalue()
    (memo_dir / tagged_name(key, data)).write_bytes(data)  # even with a tag that verifies
    np.testing.assert_array_equal(resampled_scores(cos, gold, labels, "all", ROUNDS, 5, disk_memo(memo_dir)), first)
    assert not marker.exists()


def test_a_memo_file_removed_by_another_run_meanwhile_is_no_error(memo_dir, monkeypatch):
    from pathlib import Path


    cos, gold, labels = split(15)
    first = resampled_scores(cos, gold, labels, "all", ROUNDS, 6, disk_memo(memo_dir))
    real = Path.read_bytes

    def raced(path):
        if path.parent == memo_dir:  # another process removes the file between the listing and the read
            path.unlink()
            raise FileNotFoundError(str(path))
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", raced)
    np.testing.assert_array_equal(resampled_scores(cos, gold, labels, "all", ROUNDS, 6, disk_memo(memo_dir)), first)


def test_resample_ranks_are_the_average_ranks_within_each_resample():
    """Ranks of each item among the resample's draws (ties averaged, 1-based), as scipy ranks the
    expanded resample: the shift matters here even where a correlation of them would not see it."""
    from scipy.stats import rankdata

    from harness.core.bootstrap import _resample_ranks

    rng = np.random.default_rng(17)
    x = np.round(rng.normal(size=15), 1)  # ties
    counts = rng.multinomial(15, np.full(15, 1 / 15), size=6)
    ranks = _resample_ranks(x, counts)
    for b in range(6):
        drawn = np.repeat(np.arange(15), counts[b])
        expected = rankdata(x[drawn])  # one rank per draw; the copies of an item share it
        for i in np.flatnonzero(counts[b]):
            assert ranks[b, i] == expected[np.flatnonzero(drawn == i)[0]]


def test_a_score_without_a_bootstrap_draws_no_resamples(monkeypatch):
    """``bootstrap=0`` means no interval and no resampling (``scored`` asks for it so as to draw its
    resamples once, itself, with the caller's rounds)."""
    from harness.core import bootstrap, significance

    drawn: list[int] = []

    def counting(real):
        def resample(cos, gold, labels, aggregation, rounds, seed, *memo):
            drawn.append(rounds)
            return real(cos, gold, labels, aggregation, rounds, seed, *memo)
        return resample

    monkeypatch.setattr(bootstrap, "resampled_scores", counting(bootstrap.resampled_scores))
    monkeypatch.setattr(significance, "resampled_scores", counting(significance.resampled_scores))
    cos, gold, labels = split(16)
    assert score_split(cos, gold, labels, "mean", bootstrap=0).ci95 is None and drawn == []
    scored(cos, gold, labels, "mean", rounds=ROUNDS, seed=2)
    assert drawn == [ROUNDS]


def test_the_tail_uses_the_continued_fraction_on_the_side_where_it_converges_fast():
    """I_x(a, b) is evaluated directly for x < (a + 1) / (a + b + 2) and through 1 − I_{1−x}(b, a)
    otherwise, where the continued fraction needs O(√max(a, b)) terms (Numerical Recipes 6.4). On
    the wrong side it needs thousands. Each call here is counted with a tracer, against scipy too."""
    from harness.core.significance import student_t_sf

    for value, df in ((100.0, 1), (1.0, 5000), (0.01, 300), (0.7, 4), (5.0, 30)):
        events, tail = betacf_events(lambda value=value, df=df: student_t_sf(value, df))
        assert tail == pytest.approx(student_t.sf(value, df), rel=1e-10)
        assert 0 < events < 1_000, (value, df, events)


def test_one_subset_has_nothing_to_average_so_nothing_is_rounded():
    """With one subset, ``mean`` and ``wmean`` *are* ``all`` (the docstring's "equal"): the same
    array bit for bit, not all's values weighted by 40 and divided by 40 again, which rounds some
    of them (checked below, by hand, on these very values)."""
    cos, gold, _ = split(2, sizes=(40,))
    for labels in ([""] * 40, ["only"] * 40):
        pooled = resampled_scores(cos, gold, labels, "all", ROUNDS, 3)
        assert ((pooled * 40.0) / 40.0 != pooled).any()
        for aggregation in ("mean", "wmean"):
            np.testing.assert_array_equal(resampled_scores(cos, gold, labels, aggregation, ROUNDS, 3), pooled)


def test_the_tail_near_p_005_with_thousands_of_pairs_is_accurate_to_a_few_ulps_of_lgamma():
    """Williams' t near 2 with n − 3 = 2000 (the size of STS-B's test split): x = df / (df + t²)
    sits just below NR's crossover (a + 1) / (a + b + 2), where the direct continued fraction is
    the accurate side (~1e-12 from scipy; the reflected one is ~1.5e-11 off)."""
    from harness.core.significance import student_t_sf

    df = 2000
    for value in (1.96, 1.98, 2.0):
        x, a = df / (df + value ** 2), df / 2
        assert (a + 1) / (a + 0.5 + 3) < x < (a + 1) / (a + 0.5 + 2)
        assert student_t_sf(value, df) == pytest.approx(student_t.sf(value, df), rel=4e-12, abs=0)
