"""Batches whose results do not depend on the batch: a sentence's vector is a function of the
sentence, never of which sentences happened to be encoded with it.

Why: the cache keeps whatever vector a sentence got the first time. If that depended on its
batch-mates, two cache histories (another task list, an interrupted run, a concurrent run) would
give the same sentence different vectors — ``avg`` on STS-B differed in the 8th digit. Two causes,
both removed here:

* **Padding.** A sentence padded to a longer batch-mate runs through matrix products and softmax
  sums of another shape, which round differently (up to ~1.4e-6 on MiniLM). For padded encoders
  (transformers, sentence-transformers, the cross-encoder) every batch holds sentences of *one*
  token length (:func:`equal_length_batches`), so there is no padding at all. The native encoder
  packs a batch's real tokens into one matrix and attends per group of equal length
  (:mod:`.kernels`): a sentence's rows never meet padding, so its batches may mix lengths
  (:func:`packed_batches`): fewer, fuller batches, 1.2× faster at 2 threads on STS-B test.
* **Tiny matrix products.** With more than one thread, CPU GEMM picks another kernel (another
  summation order) when a product has very few rows: a lone 6-token sentence (6 rows) came out
  differently from the same sentence in any larger batch. A batch with fewer than
  ``MIN_BATCH_TOKENS`` tokens is topped up with repeats of its own sentences (the extra rows are
  computed and dropped). Above that, a row of a product is the same whatever the other rows are.

Measured on this project's CPU (AMD EPYC, torch 2.13, native BERT, MiniLM on STS-B test, fp32 and
bf16): with both rules, the vector of every probed sentence was byte-identical for every batch
size, batch-mate set and position tried, and for 1, 2, 4 and 8 threads; the native encoder's
mixed-length batches gave every STS-B test vector byte-identical to its one-length batches (fp32
and bf16, 1 and 2 threads). ``tests/test_faults.py``
keeps this true on the tiny BERT for both encoder implementations. GPUs were not measured; there
the guarantee is the bound the tests check (1e-6).
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_BATCH_TOKENS = 64


def equal_length_batches(
    lengths: Sequence[int], batch_size: int, max_tokens: int
) -> list[list[int]]:
    """Index batches, longest length first (an out-of-memory error shows up in the first batch),
    each holding items of one length: ``batch_size`` items, or (``batch_size`` 0) as many as fit
    ``max_tokens`` tokens.

    >>> equal_length_batches([5, 3, 3, 2], 0, 8)
    [[0], [1, 2], [3]]
    >>> equal_length_batches([1, 9, 4, 9], 2, 0)
    [[1, 3], [2], [0]]
    """
    groups: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        groups.setdefault(length, []).append(index)
    batches: list[list[int]] = []
    for length in sorted(groups, reverse=True):
        ids = groups[length]
        size = batch_size if batch_size > 0 else max(1, max_tokens // max(1, length))
        batches += [ids[i : i + size] for i in range(0, len(ids), size)]
    return batches


def packed_batches(lengths: Sequence[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Index batches for an encoder that packs rows (no padding): longest first, each filled up to
    ``batch_size`` items or (``batch_size`` 0) ``max_tokens`` tokens, lengths mixed.

    >>> packed_batches([5, 3, 3, 2], 0, 8)
    [[0, 1], [2, 3]]
    >>> packed_batches([1, 9, 4, 9], 2, 0)
    [[1, 3], [2, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep input order
    batches: list[list[int]] = []
    tokens = 0
    for index in order:
        if not batches or (
            len(batches[-1]) >= batch_size
            if batch_size > 0
            else tokens + lengths[index] > max_tokens
        ):
            batches.append([])
            tokens = 0
        batches[-1].append(index)
        tokens += lengths[index]
    return batches


def topped_up(ids: Sequence[int], lengths: Sequence[int]) -> list[int]:
    """``ids`` repeated in turn until the batch has at least ``MIN_BATCH_TOKENS`` tokens
    (``lengths[i]``: tokens of item ``i``); the caller keeps the first ``len(ids)`` rows of the
    result.

    >>> topped_up([0, 1], [10, 10])
    [0, 1, 0, 1, 0, 1, 0]
    >>> topped_up([0, 1], [40, 30])
    [0, 1]
    """
    rows, tokens = list(ids), sum(lengths[i] for i in ids)
    while tokens < MIN_BATCH_TOKENS and ids:
        index = ids[len(rows) % len(ids)]
        rows.append(index)
        tokens += max(1, lengths[index])
    return rows
