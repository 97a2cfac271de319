"""Sparse vectors (harness.core.sparse) and their cache (harness.core.sparse_store), checked against
dense numpy computations of the same definitions: the pair dot product and cosine, the active
dimensions, SPLADE's FLOPS (Σ_j p1_j p2_j, naver/splade's flops.py) and the bytes; the store keeps
vectors bit for bit, reads no pickle, and discards a part that is not what its name says."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest

from harness.core.artifacts import ArtifactStore
from harness.core.sparse import (
    SparseVectors,
    active_dims,
    describe,
    flops,
    pair_similarity,
    sparse_bytes,
)
from harness.core.sparse_store import SparseVectorStore


def random_sparse(rng, n, dim, density):
    dense = rng.random((n, dim)).astype(np.float32) + 0.01
    dense[rng.random((n, dim)) > density] = 0
    dense[0] = 0  # one zero vector: its cosine is undefined
    return dense


@pytest.fixture
def pairs():
    rng = np.random.default_rng(7)
    left, right = random_sparse(rng, 9, 40, 0.2), random_sparse(rng, 7, 40, 0.3)
    left_rows, right_rows = rng.integers(0, 9, 200), rng.integers(0, 7, 200)
    return left, left_rows, right, right_rows


def test_pair_dot_and_cosine_equal_dense_numpy_whatever_the_chunk(pairs):
    left, lr, right, rr = pairs
    a, b = left[lr].astype(np.float64), right[rr].astype(np.float64)
    dot = (a * b).sum(1)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cosine = np.where(norms > 0, dot / np.where(norms > 0, norms, 1), 0.0)
    sl, sr = SparseVectors.from_dense(left), SparseVectors.from_dense(right)
    whole, zero = pair_similarity(sl, lr, sr, rr, "dot")
    np.testing.assert_allclose(whole, dot, rtol=1e-12, atol=1e-12)
    assert zero == 0
    for chunk in (1, 5, 37):  # a chunk of a few stored values: many pairs per call, or one
        again, _ = pair_similarity(sl, lr, sr, rr, "dot", chunk=chunk)
        assert again.tobytes() == whole.tobytes()
    cos, undefined = pair_similarity(sl, lr, sr, rr, "cosine", chunk=11)
    np.testing.assert_allclose(cos, cosine, rtol=1e-12, atol=1e-12)
    assert undefined == int(((lr == 0) | (rr == 0)).sum()) > 0


def test_active_dims_flops_and_bytes_follow_their_definitions(pairs):
    left, lr, right, rr = pairs
    a, b = left[lr] != 0, right[rr] != 0  # every pair's two vectors, repeats counted
    mean_active = (a.sum() + b.sum()) / (2 * len(lr))
    expected_flops = float((a.mean(0) * b.mean(0)).sum())  # p1_j · p2_j summed over the vocabulary
    sl, sr = SparseVectors.from_dense(left), SparseVectors.from_dense(right)
    assert active_dims(sl, lr, sr, rr) == pytest.approx(mean_active, rel=1e-12)
    assert flops(sl, lr, sr, rr) == pytest.approx(expected_flops, rel=1e-12)
    vector = describe(sl, lr, sr, rr, "dot")
    assert vector["bytes_per_vector"] == int(np.floor(8 * mean_active + 0.5))
    assert (vector["dims"], vector["full_dims"], vector["precision"]) == ("full", 40, "sparse")
    assert sparse_bytes(76.3) == 610 and sparse_bytes(0.0625) == 1


def test_take_concat_and_dense_round_trip(pairs):
    left = pairs[0]
    vectors = SparseVectors.from_dense(left)
    rows = np.array([3, 0, 3, 8])
    np.testing.assert_array_equal(vectors.take(rows).to_dense(), left[rows])
    joined = SparseVectors.concat([vectors.take(rows[:2]), vectors.take(rows[2:])])
    np.testing.assert_array_equal(joined.to_dense(), left[rows])
    np.testing.assert_array_equal(vectors.active(), (left != 0).sum(1))


@pytest.mark.parametrize(
    "indptr, indices, values, why",
    [
        ([0, 2], [1, 1], [1.0, 2.0], "strictly increasing"),
        ([0, 2], [2, 1], [1.0, 2.0], "strictly increasing"),
        ([0, 1], [9], [1.0], "outside"),
        ([0, 1], [1], [0.0], "zero"),
        ([0, 1], [1], [np.nan], "zero, NaN"),
        ([0, 3], [1], [1.0], "indptr"),
        ([0, 2, 1], [1, 2], [1.0, 1.0], "indptr"),
    ],
)
def test_arrays_that_are_not_csr_vectors_are_refused(indptr, indices, values, why):
    with pytest.raises(ValueError, match=why):
        SparseVectors.from_arrays(
            np.array(indptr, np.int64), np.array(indices, np.int32), np.array(values, np.float32), 4
        )


def test_a_new_row_may_start_below_where_the_last_ended():
    vectors = SparseVectors.from_arrays(
        np.array([0, 2, 3], np.int64), np.array([2, 3, 0], np.int32), np.ones(3, np.float32), 4
    )
    assert vectors.to_dense().tolist() == [[0, 0, 1, 1], [1, 0, 0, 0]]


def test_the_store_keeps_vectors_bit_for_bit_and_in_the_order_asked(pairs, tmp_path):
    left = pairs[0]
    vectors = SparseVectors.from_dense(left)
    store = ArtifactStore(tmp_path).sparse_vectors({"model": "x"}, code=("harness.core.sparse",))
    texts = [f"sentence {i}" for i in range(len(left))]
    store.add(texts[:5], vectors.take(np.arange(5)))
    store.add(texts, vectors)  # the first five are kept from the first part
    assert store.missing([*texts, "new"]) == ["new"]
    fresh = ArtifactStore(tmp_path).sparse_vectors({"model": "x"}, code=("harness.core.sparse",))
    order = [texts[i] for i in (8, 0, 4, 4, 6)]
    got = fresh.get(order)
    assert got.to_dense().tobytes() == left[[8, 0, 4, 4, 6]].tobytes()
    assert sorted(p.suffix for p in fresh.dir.iterdir()) == [".json", ".npz", ".npz"]
    other = ArtifactStore(tmp_path).sparse_vectors({"model": "y"}, code=("harness.core.sparse",))
    assert other.dir != fresh.dir and other.missing(texts) == texts


def _rewrite(path, **arrays):
    """Write ``arrays`` as an .npz named by its own sha256 (so only the content is wrong)."""
    import hashlib

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    path.unlink()
    target = path.with_name(f"part-{hashlib.sha256(data).hexdigest()[:32]}.npz")
    target.write_bytes(data)
    return target


@pytest.mark.parametrize("damage", ["bytes", "pickle", "indices", "missing-array"])
def test_a_damaged_part_is_discarded_and_its_sentences_encoded_again(pairs, tmp_path, caplog, damage):
    vectors = SparseVectors.from_dense(pairs[0])
    store = SparseVectorStore(tmp_path, {"model": "x"})
    texts = [f"s{i}" for i in range(len(vectors))]
    store.add(texts, vectors)
    (part,) = store.dir.glob("part-*.npz")
    with np.load(part, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    if damage == "bytes":
        data = bytearray(part.read_bytes())
        data[len(data) // 2] ^= 0xFF
        part.write_bytes(bytes(data))
    elif damage == "pickle":  # an object array would need pickle to load: never read
        part = _rewrite(part, **{**arrays, "values": np.array([{"x": 1}] * len(arrays["values"]), dtype=object)})
    elif damage == "indices":
        part = _rewrite(part, **{**arrays, "indices": np.full_like(arrays["indices"], 99)})
    else:
        part = _rewrite(part, **{k: v for k, v in arrays.items() if k != "values"})
    with caplog.at_level(logging.WARNING, logger="sts_bench.cache"):
        fresh = SparseVectorStore(tmp_path, {"model": "x"})
        assert fresh.missing(texts) == texts
    assert "corrupt" in caplog.text and not part.exists()


def test_a_meta_file_of_another_key_discards_the_store(pairs, tmp_path, caplog):
    store = SparseVectorStore(tmp_path, {"model": "x"})
    store.add(["a"], SparseVectors.from_dense(pairs[0][:1] + 1))
    meta = store.dir / "meta.json"
    meta.write_text(meta.read_text().replace('"x"', '"z"'))
    with caplog.at_level(logging.WARNING, logger="sts_bench.cache"):
        assert SparseVectorStore(tmp_path, {"model": "x"}).missing(["a"]) == ["a"]
    assert "does not match its key" in caplog.text
