"""One verified store (issue 51): the dense and sparse vector stores share one reader, so a planted
sparse part is caught by ``--verify-cache`` and not read without the secret's tag, and sizes read
from cache files are held to the files' bytes before anything is allocated."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import zipfile

import numpy as np
import pytest

from harness.core.authenticity import SECRET_ENV
from harness.core.errors import ResourceError
from harness.core.sparse import SparseVectors
from harness.core.sparse_store import SparseVectorStore
from harness.core.vector_store import VectorStore

TEXTS = ["a man is playing a guitar", "two dogs on the grass", "the quick brown fox jumps"]


def splade(folder, cache, monkeypatch, *, verify=0, secret=None):
    """A splade method over ``folder`` caching under ``cache`` (as test_splade builds one)."""
    from dataclasses import replace

    from fakes import FakeContext

    from harness.core.api import SpecRequest
    from methods import get_method

    if secret:
        monkeypatch.setenv(SECRET_ENV, secret)
    request = SpecRequest(backbone=str(folder), max_length=16, params={"splade": {}})
    ctx = FakeContext(cache, request)
    ctx.encode = replace(ctx.encode, verify_cache=verify)
    return get_method("splade").build(request, ctx)


def plant_sparse(cache, secret=None) -> list:
    """Every sparse part replaced by well-formed vectors of the same sentences with other values,
    named by their own sha256 (passes every integrity check) or, given it, the secret's tag."""
    from harness.core.authenticity import tag

    planted = []
    for part in sorted(cache.glob("sparse-vectors/*/part-*.npz")):
        with np.load(part, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        arrays["values"] = (arrays["values"] * 3 + 1).astype(np.float32)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        data = buffer.getvalue()
        name = tag(secret, data) if secret else hashlib.sha256(data).hexdigest()
        part.unlink()
        planted.append(part.with_name(f"part-{name[:32]}.npz"))
        planted[-1].write_bytes(data)
    assert planted
    return planted


def test_verify_cache_catches_a_planted_sparse_part(tiny_mlm, tmp_path, monkeypatch):
    clean = splade(tiny_mlm, tmp_path / "c", monkeypatch).encode_sparse(TEXTS).to_dense()
    planted = plant_sparse(tmp_path / "c")
    fooled = splade(tiny_mlm, tmp_path / "c", monkeypatch).encode_sparse(TEXTS).to_dense()
    assert not np.allclose(fooled, clean)  # the hole, unguarded: every integrity check passes
    with pytest.raises(ResourceError, match="do not match a fresh encode") as caught:
        splade(tiny_mlm, tmp_path / "c", monkeypatch, verify=1000).encode_sparse(TEXTS)
    assert str(planted[0]) in str(caught.value)


def test_an_honest_sparse_cache_passes_verification(tiny_mlm, tmp_path, monkeypatch):
    clean = splade(tiny_mlm, tmp_path / "c", monkeypatch).encode_sparse(TEXTS).to_dense()
    again = splade(tiny_mlm, tmp_path / "c", monkeypatch, verify=2).encode_sparse(TEXTS)
    assert np.array_equal(again.to_dense(), clean)


def test_with_a_secret_a_sparse_part_without_its_tag_is_not_read(tiny_mlm, tmp_path, monkeypatch, caplog):
    clean = splade(tiny_mlm, tmp_path / "c", monkeypatch, secret="team").encode_sparse(TEXTS).to_dense()
    planted = plant_sparse(tmp_path / "c")  # named by sha256: no tag
    with caplog.at_level(logging.WARNING, logger="sts_bench.cache"):
        again = splade(tiny_mlm, tmp_path / "c", monkeypatch, secret="team").encode_sparse(TEXTS)
    assert np.array_equal(again.to_dense(), clean) and "not authenticated" in caplog.text
    assert all(path.is_file() for path in planted)  # left in place: it may be another user's
    plant_sparse(tmp_path / "c", secret=b"team")  # the secret's holder is trusted, as for dense parts
    assert not np.allclose(splade(tiny_mlm, tmp_path / "c", monkeypatch, secret="team")
                           .encode_sparse(TEXTS).to_dense(), clean)


def sparse_store(tmp_path):
    store = SparseVectorStore(tmp_path, {"model": "x"})
    store.add(["a", "b"], SparseVectors.from_dense(np.array([[0, 1.5, 0, 2], [3, 0, 0, 0]], np.float32)))
    return store


def test_a_sparse_part_whose_header_declares_10_to_the_10_floats_is_dropped_unallocated(tmp_path, caplog):
    """The header of ``values`` claims 10^10 float32 (40 GB): refused on its bytes, not allocated."""
    import tracemalloc

    store = sparse_store(tmp_path)
    (part,) = store.dir.glob("part-*.npz")
    with zipfile.ZipFile(part) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["values.npy"] = members["values.npy"].replace(b"(3,)", b"(10000000000,)")
    assert b"10000000000" in members["values.npy"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    data = buffer.getvalue()
    part.unlink()
    forged = part.with_name(f"part-{hashlib.sha256(data).hexdigest()[:32]}.npz")
    forged.write_bytes(data)
    tracemalloc.start()
    with caplog.at_level(logging.WARNING, logger="sts_bench.cache"):
        assert SparseVectorStore(tmp_path, {"model": "x"}).missing(["a", "b"]) == ["a", "b"]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 50 << 20 and not forged.exists()
    assert sum("is corrupt" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("make", [VectorStore, SparseVectorStore])
@pytest.mark.parametrize("dim", [10**12, 0, -3, 2.5, True])
def test_a_meta_json_width_out_of_bounds_discards_the_store(tmp_path, caplog, make, dim):
    store = make(tmp_path, {"model": "x"})
    vectors = np.array([[0, 1.5, 0, 2]], np.float32)
    store.add(["a"], vectors if make is VectorStore else SparseVectors.from_dense(vectors))
    meta = store.dir / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "dim": dim}))
    with caplog.at_level(logging.WARNING, logger="sts_bench.cache"):
        fresh = make(tmp_path, {"model": "x"})
        assert fresh.missing(["a"]) == ["a"] and fresh.dim is None
    assert sum("does not match its key" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("make", [VectorStore, SparseVectorStore])
@pytest.mark.parametrize("dim", [5, 3])
def test_a_meta_json_width_edited_is_recomputed_not_an_error_on_every_run(tmp_path, caplog, make, dim):
    """``"dim"`` edited to a width in bounds: the key's vectors say otherwise, so the store is
    discarded (it was exit 4 on every later run) and the vectors written again are read back."""
    vectors = np.array([[0, 1.5, 0, 2], [3, 0, 0, 0]], np.float32)
    wrap = (lambda v: v) if make is VectorStore else SparseVectors.from_dense
    store = make(tmp_path, {"model": "x"})
    store.add(["a"], wrap(vectors[:1]))
    meta = store.dir / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "dim": dim}))
    for _ in range(2):  # this run and the next
        with caplog.at_level(logging.WARNING, logger="sts_bench.cache"):
            again = make(tmp_path, {"model": "x"})
            again.add(["a", "b"], wrap(vectors))
            got = again.get(["b", "a"])
        assert np.array_equal(np.asarray(got if make is VectorStore else got.to_dense()), vectors[::-1])
    assert json.loads(meta.read_text())["dim"] == 4 and "cache:" in caplog.text
