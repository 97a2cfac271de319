"""Bootstrap resamples of pairs, shared by every method scored on one split.

The draws depend only on (gold, subset labels, rounds, seed), so every method is resampled with the
same draws: intervals of different methods are comparable and a difference of two methods is a
*paired* bootstrap (:mod:`harness.core.significance`). Resamples are described by draw counts, so
a Spearman per resample is array work over (rounds, n), with no per-resample sort.
"""

from __future__ import annotations

import functools
import hashlib
import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.core.codekeys import code_digest
from harness.core.hashing import atomic_write_bytes, npy_bytes

ALL = "\x00all"  # the plan's key for every pair; no subset label is this string


def _resample_ranks(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Average ranks of each item within every resample, without sorting each resample.

    A bootstrap resample is described by ``counts[b, i]`` = how often item i was drawn. Items are
    sorted once; within resample b an item's rank is (draws of all smaller values) + (draws of its
    own value + 1) / 2 — the average rank of its tied copies. Everything is O(B·n) array work.
    """
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    group = np.cumsum(np.r_[True, ordered[1:] != ordered[:-1]]) - 1
    # float32 is exact here: ranks are sums of counts (< 2^24) and halves.
    per_group = np.add.reduceat(counts[:, order], starts, axis=1).astype(np.float32)
    below = np.cumsum(per_group, axis=1) - per_group
    ranks = np.empty(counts.shape, dtype=np.float32)
    ranks[:, order] = (below + (per_group + 1) / 2)[:, group]
    return ranks


def _weighted_pearson(rx: np.ndarray, ry: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """×100 Pearson of each row pair, each item weighted by its draw count."""
    w = (counts / counts.sum(axis=1, keepdims=True)).astype(np.float32)
    dx = rx - (w * rx).sum(axis=1, keepdims=True)
    dy = ry - (w * ry).sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        covariance = (w * dx * dy).sum(axis=1, dtype=np.float64)
        return 100 * covariance / np.sqrt((w * dx * dx).sum(axis=1, dtype=np.float64)
                                          * (w * dy * dy).sum(axis=1, dtype=np.float64))


def _weighted_spearman(x: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Spearman ×100 of each resample given by ``counts`` (B, n): Pearson of the resample's ranks,
    each item weighted by how often it was drawn."""
    return _weighted_pearson(_resample_ranks(x, counts), _resample_ranks(y, counts), counts)


@functools.lru_cache(maxsize=8)
def _resample_plan(gold_bytes: bytes, labels: tuple[str, ...], rounds: int, seed: int) -> dict[str, tuple]:
    """Bootstrap draws for one split, shared by every method scored on it (same seed → same draws,
    so methods are compared on identical resamples, and the gold side is ranked once).

    Returns {group: (indices, counts (rounds, len(indices)), ranks of gold within each resample)};
    the key ``ALL`` (every pair, stratified by subset) is present as well.
    """
    gold = np.frombuffer(gold_bytes, dtype=np.float64)
    rng = np.random.default_rng(seed)
    label_array = np.asarray(labels)
    groups = {name: np.flatnonzero(label_array == name) for name in dict.fromkeys(labels)}
    counts = np.zeros((rounds, len(gold)), dtype=np.int32)
    for idx in groups.values():
        # counts[b, i] = how often pair i is drawn in resample b: a bincount of uniform draws.
        draws = rng.integers(0, len(idx), size=(rounds, len(idx))) + (np.arange(rounds) * len(idx))[:, None]
        counts[:, idx] = np.bincount(draws.ravel(), minlength=rounds * len(idx)).reshape(rounds, len(idx))
    plan = {name: (idx, counts[:, idx], _resample_ranks(gold[idx], counts[:, idx])) for name, idx in groups.items()}
    plan[ALL] = (np.arange(len(gold)), counts, _resample_ranks(gold, counts))
    return plan


# Resampled scores are a pure function of their inputs, so they are memoised by content: in this
# process (a run scores each method for its interval and again for every paired comparison) and,
# once the runner names a folder (:func:`remember_resamples_in`, inside the cache), on disk, so a
# warm re-run reads 1000 numbers per (method, task) instead of ranking 1000 resamples again.
_memo: dict[str, np.ndarray] = {}
_memo_dir: Path | None = None


def remember_resamples_in(folder: Path | None) -> None:
    """Also keep resampled scores as ``<folder>/<content hash>.npy`` (None: in memory only)."""
    global _memo_dir
    _memo_dir = Path(folder) if folder is not None else None


def resampled_scores(cos: np.ndarray, gold: np.ndarray, labels: Sequence[str], aggregation: str,
                     rounds: int, seed: int) -> np.ndarray:
    """The aggregated Spearman ×100 of each of ``rounds`` resamples of the pairs, stratified by
    subset (each subset is resampled to its own size). Equal (gold, labels, rounds, seed) give equal
    resamples, so two methods' arrays are paired draw by draw.

    A split with one subset (or none: STS-B, SICK-R, MTEB's copies) has nothing to average, so
    ``mean`` and ``wmean`` equal ``all`` there, as in :func:`harness.core.scoring.score_split`.
    """
    gold = np.asarray(gold, dtype=np.float64)
    cos = np.asarray(cos, dtype=np.float64)
    digest = hashlib.sha256(cos.tobytes() + gold.tobytes())
    # The digest of this module's code (and what it imports) is part of the key: a changed
    # resampling is recomputed, never read back warm (harness.core.codekeys).
    digest.update("\x1f".join([code_digest(__name__), *labels, aggregation, str(rounds), str(seed)]).encode("utf-8"))
    key = digest.hexdigest()[:40]
    if key not in _memo:
        # None (not memoised on disk) for a moment: the next lines replace it before anyone reads it
        _memo[key] = _load_memo(key, rounds)  # type: ignore[assignment]
        if _memo[key] is None:
            _memo[key] = _resampled_scores(cos, gold, labels, aggregation, rounds, seed)
            _store_memo(key, _memo[key])
    return _memo[key].copy()


def _load_memo(key: str, rounds: int) -> np.ndarray | None:
    """The memoised scores of ``key``, or None. Files are named ``<key>-<sha256 of their bytes>.npy``
    and checked against that name, and for their shape and dtype, before use; a file that fails is
    removed (a torn write of a killed run, an edit) and the scores are computed again."""
    if _memo_dir is None:
        return None
    for path in _memo_dir.glob(f"{key}-*.npy"):
        try:
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest()[:16] == path.stem.rsplit("-", 1)[1]:
                values = np.load(io.BytesIO(data), allow_pickle=False)
                if values.shape == (rounds,) and values.dtype == np.float64:
                    return values
        except (OSError, ValueError):
            pass
        path.unlink(missing_ok=True)
    return None


def _store_memo(key: str, values: np.ndarray) -> None:
    if _memo_dir is not None:
        data = npy_bytes(values)
        atomic_write_bytes(_memo_dir / f"{key}-{hashlib.sha256(data).hexdigest()[:16]}.npy", data)


def _resampled_scores(cos: np.ndarray, gold: np.ndarray, labels: Sequence[str], aggregation: str,
                      rounds: int, seed: int) -> np.ndarray:
    plan = _resample_plan(gold.tobytes(), tuple(labels), rounds, seed)
    subsets = [name for name in plan if name != ALL]
    if aggregation == "all" or len(subsets) <= 1:
        return _spearman_of_resamples(cos, *plan[ALL])
    values = np.stack([_spearman_of_resamples(cos, *plan[name]) for name in subsets])
    weights = np.array([len(plan[name][0]) for name in subsets], dtype=float)
    if aggregation == "mean":
        weights = np.ones_like(weights)
    return (values * weights[:, None]).sum(axis=0) / weights.sum()


def percentile_interval(stats: np.ndarray, level: float = 95.0) -> tuple[float, float]:
    """The central ``level`` % percentile interval of the finite values (NaN, NaN when none is)."""
    stats = stats[np.isfinite(stats)]
    if not len(stats):
        return (math.nan, math.nan)
    low, high = np.percentile(stats, [(100 - level) / 2, 100 - (100 - level) / 2])
    return (float(low), float(high))


def _spearman_of_resamples(cos: np.ndarray, idx: np.ndarray, counts: np.ndarray, gold_ranks: np.ndarray) -> np.ndarray:
    return _weighted_pearson(_resample_ranks(cos[idx], counts), gold_ranks, counts)
