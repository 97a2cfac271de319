"""Bootstrap resamples of pairs, shared by every method scored on one split, in chunks of resamples.

The draws depend only on (gold, subset labels, rounds, seed), so every method is resampled with the
same draws: intervals of different methods are comparable and a difference of two methods is a
*paired* bootstrap (:mod:`harness.core.significance`). Resamples are described by draw counts, so
a Spearman per resample is array work over (resamples, n), with no per-resample sort.

**Memory grows with the pairs, not pairs × resamples.** The resamples are drawn, ranked and scored
a chunk of rows at a time (:data:`CHUNK_CELLS` resample × pair cells, fewer when memory is short,
at least one resample): a 1M-pair split with 1000 resamples holds a few resamples at once, not
the 1000 × 1M count matrix and its ranks (16 GB). The chunks read the generator's stream in the
order the whole matrix did, so the values are the same bit for bit whatever the chunk size:

* one generator, seeded once; subset after subset, each subset's ``rounds × size`` uniform draws in
  row order. NumPy's ``Generator.integers`` continues the stream exactly across calls (PCG64 keeps
  its spare 32-bit half in the bit generator's state), so drawing rows ``[0, 3)`` then ``[3, 7)``
  gives the same integers as rows ``[0, 7)`` at once;
* with several subsets the chunk of rows ``[r0, r1)`` needs every subset's rows ``[r0, r1)``, which
  sit at different places of the stream. :func:`_subset_streams` runs through the stream once
  (drawing and dropping, a chunk at a time) and keeps the generator's state where each subset
  begins; each subset then draws from its own copy of the generator, in step with the chunks;
* every row is ranked and correlated on its own (ranks are sums of counts; each sum runs along one
  row), so a row's value does not depend on which rows share its chunk.

Worked example of the draws (seed 7, subsets of sizes 3 and 2, 4 rounds, chunks of 3 rounds): the
whole matrix reads ``integers(0, 3, (4, 3))`` then ``integers(0, 2, (4, 2))``; chunk 1 reads rows
0-2 of the first and, from the state saved after its 12 draws, rows 0-2 of the second; chunk 2 row
3 of each. The tests check chunked against whole, value by value.

**A task too large for memory fails before scoring** with one
:class:`~harness.core.errors.ResourceError` line (:func:`check_fits`): the bytes a score needs are
estimated from the pairs and the chunk.

**A memo on disk never decides a score unverified.** Resampled scores are memoised by the
:class:`ResampleMemo` the caller passes (the run's, held by its ``RunContext``: an interval and
every paired comparison of a method share one computation); a call with none memoises nothing and
nothing is process-wide, so two runs in one process share no resample. On disk they are kept
only under the cache secret (:mod:`harness.core.authenticity`): the file's name carries
``HMAC(secret, key ‖ bytes)`` and a file whose tag does not verify is never read. Without a secret
nothing is read from or written to disk, and a run recomputes: a checksum in a file's name
proves nothing (whoever plants a file can name it by its own hash), and a spot check of a few
resamples cannot see the one changed value that moves a percentile across a baseline.
"""

from __future__ import annotations

import functools
import hashlib
import io
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.authenticity import tag, valid
from harness.core.codekeys import code_digest
from harness.core.errors import ResourceError
from harness.core.hashing import atomic_write_bytes, npy_bytes, read_regular

ALL = "\x00all"  # the plan's key for every pair; no subset label is this string
# Resample × pair cells ranked at once. Measured on 2 cores: 50k pairs × 200 resamples take 25-28
# ns a cell in chunks of 2^16-2^19 cells, 39 at 2^21, 72 at 2^23 (the whole matrix, as before,
# was slower still: a chunk that stays in the CPU's cache is the fast one); 2^18 cells are ~10 MB.
CHUNK_CELLS = 1 << 18
# Bytes a chunk needs per cell at its peak (draws, counts, both sides' ranks, weights, Pearson's
# temporaries: 36-44 measured with tracemalloc) and a score needs per pair outside the chunks (the
# sides' rank plans, the Spearman of all pairs, subset codes: up to 58 measured), with margins.
BYTES_PER_CELL = 48
BYTES_PER_PAIR = 128
# What a run holds per pair besides the scoring (checked before encoding, :func:`check_fits`'s
# ``held``): the pairs' sentences as read, gold and labels, each side's row of every pair and its
# similarity, and the record's per-pair lists (Python floats) and their JSON. Measured with
# benchmarks/studies/million_pairs.py: (peak at 1M pairs - peak at 100k) / 900k, with a margin.
RUN_BYTES_PER_PAIR = 1024
GIB = 2**30
# The fewest resamples a 95 % percentile interval is drawn from: each end must lie inside the
# resamples, with one resample beyond it (0.025 × (N − 1) ≥ 1, so N ≥ 41); with fewer an end is the
# most extreme resample, and one resample "interval" is a single draw. 0 turns intervals off.
MIN_ROUNDS = 41
# The most: beyond a few thousand resamples the ends of a 95 % interval move by less than a
# hundredth of a point, and every record's interval is drawn again when it is read (a forged
# record must not make reading it cost hours).
MAX_ROUNDS = 1_000_000
# Bytes each resample costs beyond the chunks (:func:`check_rounds`; :func:`scoring_bytes` counts a
# score's pairs): its score per subset while a split is scored (a float64 each, at most 5 subsets
# in the bundled tasks, 4 metrics for labelled pairs) and the aggregated score kept per (method,
# task) for the paired tests, with margins.
BYTES_PER_ROUND = 64


def chunk_rounds(n: int, rounds: int, available: int | None = None) -> int:
    """Resamples per chunk for ``n`` pairs: :data:`CHUNK_CELLS` cells, fewer when ``available``
    bytes are short, at least one (:func:`check_fits` refuses when one does not fit).

    >>> chunk_rounds(1379, 1000), chunk_rounds(50_000, 1000), chunk_rounds(500_000, 1000)
    (190, 5, 1)
    """
    step = max(1, min(rounds, CHUNK_CELLS // max(n, 1)))
    if available is not None:
        spare = available - BYTES_PER_PAIR * n
        step = max(1, min(step, spare // (BYTES_PER_CELL * max(n, 1))))
    return step


def scoring_bytes(n: int, rounds: int, step: int | None = None) -> int:
    """Bytes a score of ``n`` pairs with ``rounds`` resamples needs at its peak, about.

    >>> round(scoring_bytes(1_000_000, 1000) / 2**20)  # 1M pairs: one resample per chunk
    168
    """
    if rounds <= 0:
        return BYTES_PER_PAIR * n
    step = chunk_rounds(n, rounds) if step is None else step
    return BYTES_PER_PAIR * n + BYTES_PER_CELL * step * n


def rounds_problem(rounds: int) -> str | None:
    """Why ``rounds`` cannot give a 95 % interval (None: it can, or 0: no interval).

    >>> rounds_problem(1) is not None, rounds_problem(0), rounds_problem(1000)
    (True, None, None)
    """
    if 0 < rounds < MIN_ROUNDS:
        return (
            f"{rounds} resample(s) cannot give a 95 % interval: each end must lie inside the "
            f"resamples (0.025 × (N − 1) ≥ 1), so at least {MIN_ROUNDS}; use 1000, or 0 for no "
            "interval"
        )
    if rounds > MAX_ROUNDS:
        return (
            f"{rounds:,} resamples: at most {MAX_ROUNDS:,} (beyond a few thousand the ends of a "
            "95 % interval move by less than a hundredth of a point; every record's interval is "
            "drawn again when it is read)"
        )
    return None


def check_rounds(rounds: int, kept: int, available: int | None = None) -> None:
    """Raise :class:`ResourceError` (one line, before anything is encoded) when ``rounds``
    resamples of ``kept`` (method, task) scores cannot be held in the memory available (None: the
    machine's; an unknown amount passes). The advice is about --bootstrap, the one thing to
    lower."""
    if available is None:
        from harness.core import machine

        available = machine.available_bytes("cpu")
    need = BYTES_PER_ROUND * rounds * max(kept, 1)
    if available is not None and need > available:
        raise ResourceError(
            f"--bootstrap {rounds:,} keeps {rounds:,} resampled scores per method and task: about "
            f"{need / GIB:.1f} GiB for {kept} score(s), and this machine has "
            f"{available / GIB:.1f} GiB available: lower --bootstrap (1000 is the default; the "
            "ends of a 95 % interval move by hundredths of a point beyond it)"
        )


def check_fits(n: int, rounds: int, available: int | None = None, held: int = 0) -> int:
    """Raise :class:`ResourceError` (one line) when scoring ``n`` pairs cannot fit in the memory
    available (``available`` bytes; None reads the machine's, and an unknown amount passes); else
    return the resamples per chunk to use. ``held``: bytes per pair the caller keeps besides the
    scoring (the run's check before encoding passes :data:`RUN_BYTES_PER_PAIR`).

    Worked example: 20M pairs need 20M × 128 B = 2.4 GiB outside the chunks and 20M × 48 B = 0.9
    GiB for a chunk of one resample (2^18 cells are less than a row), 3.3 GiB in all: refused with
    2 GiB available, scored with 8, whatever the rounds.
    """
    if available is None:
        from harness.core import machine

        available = machine.available_bytes("cpu")
    if available is None:
        return chunk_rounds(n, rounds)
    step = chunk_rounds(n, rounds, max(0, available - held * n))
    need = scoring_bytes(n, rounds, step) + held * n
    if need > available:
        raise ResourceError(
            f"scoring {n:,} pairs needs about {need / GIB:.1f} GiB of memory and this machine has "
            f"{available / GIB:.1f} GiB available: split the task into smaller files or use a "
            "machine with more memory"
        )
    return step


@dataclass(frozen=True)
class _Ranks:
    """How to rank one vector within any resample: its sort order and tie groups, found once.

    ``where[i]`` is the tie group of item i (groups numbered in sorted order); ``starts`` are the
    sorted positions where a group begins (None: no ties, every item its own group).
    """

    order: np.ndarray
    starts: np.ndarray | None
    where: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray) -> _Ranks:
        order = np.argsort(x, kind="stable")
        ordered = x[order]
        new = np.r_[True, ordered[1:] != ordered[:-1]]
        group = np.cumsum(new) - 1
        where = np.empty(len(x), dtype=np.intp)
        where[order] = group  # item order[p] is in the group of sorted position p
        return cls(order, None if new.all() else np.flatnonzero(new), where)

    def within(self, counts: np.ndarray) -> np.ndarray:
        """Average ranks of each item within every resample of ``counts`` (rows), float32.

        Within resample b an item's rank is (draws of all smaller values) + (draws of its own value
        + 1) / 2, the average rank of its tied copies. The same float32 operations, in the same
        order, as ranking the whole matrix: each is along one row.
        """
        sorted_counts = np.take(counts, self.order, axis=1)
        # float32 is exact here: ranks are sums of counts and halves, exact below 2^23 pairs.
        per_group = (
            sorted_counts
            if self.starts is None
            else np.add.reduceat(sorted_counts, self.starts, axis=1)
        ).astype(np.float32)
        # below + (per_group + 1) / 2, in place (the same float32 operations, fewer temporaries)
        ranks = np.cumsum(per_group, axis=1)
        ranks -= per_group
        per_group += 1
        per_group /= 2
        ranks += per_group
        return np.take(ranks, self.where, axis=1)


def _resample_ranks(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Average ranks of each item within every resample (rows of ``counts``), without sorting each
    one."""
    return _Ranks.of(x).within(counts)


def _weighted_pearson(rx: np.ndarray, ry: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """×100 Pearson of each row pair, each item weighted by its draw count."""
    w = (counts / counts.sum(axis=1, keepdims=True)).astype(np.float32)
    dx = rx - (w * rx).sum(axis=1, keepdims=True)
    dy = ry - (w * ry).sum(axis=1, keepdims=True)
    # w·dx·dy is (w·dx)·dy in float32, so w·dx is formed once for the covariance and x's variance
    wdx = w * dx
    wdy = np.multiply(w, dy, out=w)  # w is not needed after this
    with np.errstate(invalid="ignore", divide="ignore"):
        covariance = (wdx * dy).sum(axis=1, dtype=np.float64)
        return (
            100
            * covariance
            / np.sqrt(
                (np.multiply(wdx, dx, out=wdx)).sum(axis=1, dtype=np.float64)
                * (np.multiply(wdy, dy, out=wdy)).sum(axis=1, dtype=np.float64)
            )
        )


def _weighted_spearman(x: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Spearman ×100 of each resample given by ``counts`` (B, n): Pearson of the resample's ranks,
    each item weighted by how often it was drawn."""
    return _weighted_pearson(_resample_ranks(x, counts), _resample_ranks(y, counts), counts)


@functools.lru_cache(maxsize=64)
def _subset_streams(
    sizes: tuple[int, ...], rounds: int, seed: int
) -> tuple[Mapping[str, Any], ...]:
    """The generator's state where each subset's draws begin: subset k's ``rounds × sizes[k]``
    draws follow those of subsets 0..k-1 in the one stream the whole matrix was drawn from. Found
    by drawing and dropping the earlier subsets' draws, a chunk at a time (a few ns per draw)."""
    rng = np.random.default_rng(seed)
    states = []
    for k, size in enumerate(sizes):
        states.append(rng.bit_generator.state)
        if k + 1 < len(sizes):  # the last subset's end is nobody's start
            step = chunk_rounds(size, rounds)
            for r0 in range(0, rounds, step):
                rng.integers(0, size, size=(min(step, rounds - r0), size))
    return tuple(states)


def _count_chunks(
    groups: Sequence[np.ndarray], rounds: int, seed: int, step: int
) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Yield (first row, [draw counts (rows, len(group)) int32 of each group]) for chunks of
    ``step`` resamples: ``counts[b, i]`` = how often item i of the group is drawn in resample b."""
    generators = []
    for state in _subset_streams(tuple(len(idx) for idx in groups), rounds, seed):
        generator = np.random.Generator(np.random.PCG64())
        generator.bit_generator.state = state
        generators.append(generator)
    for r0 in range(0, rounds, step):
        c = min(step, rounds - r0)
        parts = []
        for generator, idx in zip(generators, groups):
            m = len(idx)
            # a bincount of uniform draws, each row's draws shifted into its own block of m bins
            draws = generator.integers(0, m, size=(c, m))
            draws += (np.arange(c) * m)[:, None]
            parts.append(np.bincount(draws.ravel(), minlength=c * m).reshape(c, m).astype(np.int32))
        yield r0, parts


def subset_indices(labels: Sequence[str]) -> dict[str, np.ndarray]:
    """The pairs of each subset, in order of first appearance: ``{"A": [0, 2], "B": [1]}`` for
    ``["A", "B", "A"]``. Labels become int32 codes, not a NumPy string array (4 bytes a pair, not 4
    per character of the longest label: 64 for "answers-students")."""
    names = {name: k for k, name in enumerate(dict.fromkeys(labels))}
    if len(names) == 1:
        return {next(iter(names)): np.arange(len(labels))}
    codes = np.fromiter((names[label] for label in labels), dtype=np.int32, count=len(labels))
    return {name: np.flatnonzero(codes == k) for name, k in names.items()}


@dataclass(frozen=True)
class ResampleMemo:
    """Resampled scores already computed (``entries``, in memory), where they are kept on disk
    (``folder``) and the secret that authenticates them.

    Without a secret nothing is kept on disk (see the module docstring). Files are
    ``<key>-<HMAC-SHA256(secret, key ‖ 0 ‖ bytes)>.npy``; the tag binds a file to its key, so a
    valid memo of another split or method copied under this key's name does not verify either.
    Two memos never share entries (``ResampleMemo(None)`` is a fresh, empty, in-memory one).
    """

    folder: Path | None
    secret: bytes | None = None
    # Resampled scores are a pure function of their inputs, so they are kept by content key.
    entries: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def on_disk(self) -> bool:
        return self.folder is not None and bool(self.secret)

    def load(self, key: str, rounds: int) -> np.ndarray | None:
        """The memoised scores of ``key``, or None. A file whose tag does not verify (planted, torn,
        edited, written under another secret) is left alone and never parsed; one whose tag verifies
        is parsed without pickle and checked for shape and dtype, and removed if it fails."""
        if not self.on_disk:
            return None
        assert self.folder is not None and self.secret
        for path in self.folder.glob(f"{key}-*.npy"):
            try:
                data = read_regular(path)
            except OSError:
                continue  # removed by another run meanwhile, or a FIFO or device: never read
            if not valid(
                self.secret, key.encode("ascii") + b"\x00" + data, path.stem.rsplit("-", 1)[1]
            ):
                # not ours: planted, damaged, or another secret's (a cache shared by two teams)
                continue
            try:
                values = np.load(io.BytesIO(data), allow_pickle=False)
                if values.shape == (rounds,) and values.dtype == np.float64:
                    return values
            except ValueError:
                pass
            path.unlink(missing_ok=True)  # ours, yet unusable (written by older code): replaced
        return None

    def store(self, key: str, values: np.ndarray) -> None:
        if self.on_disk:
            assert self.folder is not None and self.secret
            data = npy_bytes(values)
            signed = tag(self.secret, key.encode("ascii") + b"\x00" + data)
            atomic_write_bytes(self.folder / f"{key}-{signed}.npy", data)

    def recall(
        self, keys: Sequence[str], rounds: int, compute: Callable[[], Sequence[np.ndarray]]
    ) -> list[np.ndarray]:
        """The resampled scores kept under ``keys`` (in memory, else on disk), or ``compute()``'s,
        one array per key, then kept under them; copies, so a caller cannot change a memo."""
        found = [self.entries.get(key) for key in keys]
        if any(values is None for values in found):
            found = [self.load(key, rounds) for key in keys]
            if any(values is None for values in found):
                computed = list(compute())
                for key, values in zip(keys, computed):
                    self.store(key, values)
                found = list(computed)
            self.entries.update(zip(keys, found))  # type: ignore[arg-type]
        return [np.array(values) for values in found]


def resampled_scores(
    cos: np.ndarray,
    gold: np.ndarray,
    labels: Sequence[str],
    aggregation: str,
    rounds: int,
    seed: int,
    memo: ResampleMemo | None = None,
) -> np.ndarray:
    """The aggregated Spearman ×100 of each of ``rounds`` resamples of the pairs, stratified by
    subset (each subset is resampled to its own size). Equal (gold, labels, rounds, seed) give equal
    resamples, so two methods' arrays are paired draw by draw.

    A split with one subset (or none: STS-B, SICK-R, MTEB's copies) has nothing to average, so
    ``mean`` and ``wmean`` equal ``all`` there, as in :func:`harness.core.scoring.score_split`.

    ``memo``: where the scores are looked up and kept (None: nowhere, computed for this call).
    """
    gold = np.asarray(gold, dtype=np.float64)
    cos = np.asarray(cos, dtype=np.float64)
    memo = ResampleMemo(None) if memo is None else memo
    key = _key(cos, gold, labels, aggregation, rounds, seed)
    (values,) = memo.recall(
        [key], rounds, lambda: [_resampled_scores(cos, gold, labels, aggregation, rounds, seed)]
    )
    return values


def _key(
    cos: np.ndarray,
    gold: np.ndarray,
    labels: Sequence[str],
    aggregation: str,
    rounds: int,
    seed: int,
) -> str:
    """The content key of a resampling: sha256 of the similarities, gold, this module's code digest
    (a changed resampling is recomputed, never read back warm: harness.core.codekeys), the labels
    and the settings, ``\x1f``-separated. Fed in pieces (the arrays as buffers, the labels 64k at a
    time), so the key of a million pairs costs no copy of them."""
    digest = hashlib.sha256(np.ascontiguousarray(cos).data)
    digest.update(np.ascontiguousarray(gold).data)
    digest.update(code_digest(__name__).encode("utf-8"))
    for start in range(0, len(labels), 1 << 16):
        digest.update(("\x1f" + "\x1f".join(labels[start : start + (1 << 16)])).encode("utf-8"))
    digest.update("\x1f".join(["", aggregation, str(rounds), str(seed)]).encode("utf-8"))
    return digest.hexdigest()[:40]


def _resampled_scores(
    cos: np.ndarray,
    gold: np.ndarray,
    labels: Sequence[str],
    aggregation: str,
    rounds: int,
    seed: int,
    step: int | None = None,
) -> np.ndarray:
    """The work of :func:`resampled_scores`, ``step`` resamples at a time (None: what fits, see
    :func:`check_fits`, which refuses a task whose single resample does not)."""
    groups = list(subset_indices(labels).values())
    step = check_fits(len(gold), rounds) if step is None else step
    pooled = aggregation == "all" or len(groups) <= 1
    # Each side is sorted once per call, for every chunk: as the whole matrix ranked it.
    sides = (
        [(_Ranks.of(cos), _Ranks.of(gold))]
        if pooled
        else [(_Ranks.of(cos[idx]), _Ranks.of(gold[idx])) for idx in groups]
    )
    values = np.empty((len(sides), rounds))
    for r0, parts in _count_chunks(groups, rounds, seed, step):
        if pooled and len(groups) > 1:
            counts = np.empty((len(parts[0]), len(gold)), dtype=np.int32)
            for idx, part in zip(groups, parts):
                counts[:, idx] = part
            parts = [counts]
        for k, ((cos_ranks, gold_ranks), counts) in enumerate(zip(sides, parts)):
            values[k, r0 : r0 + len(counts)] = _weighted_pearson(
                cos_ranks.within(counts), gold_ranks.within(counts), counts
            )
    if pooled:
        return values[0]
    weights = np.array([len(idx) for idx in groups], dtype=float)
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
