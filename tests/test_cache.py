from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from harness.core.encoding.pooling import View
from harness.core.encoding.provider import ViewProvider
from harness.core.hashing import fingerprint_dir, key_hash, text_digest
from harness.core.vector_store import VectorStore

BASE_KEY = {"kind": "view", "backbone": "m", "origin": "local", "fingerprint": "abc", "pooling": "mean",
            "layer": 6, "max_length": 128, "dtype": "fp32"}


@pytest.mark.parametrize("field", sorted(BASE_KEY))
def test_every_key_field_changes_the_store(tmp_path, field):
    changed = {**BASE_KEY, field: "something else"}
    assert key_hash(changed) != key_hash(BASE_KEY)
    assert VectorStore(tmp_path, changed).dir != VectorStore(tmp_path, BASE_KEY).dir


def test_view_provider_key_covers_weights_pooling_layer_length_dtype(tiny_bert, tmp_path):
    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.settings import EncodeSettings

    ref = resolve_backbone(str(tiny_bert))
    keys = set()
    for settings in (EncodeSettings(), EncodeSettings(max_length=64), EncodeSettings(dtype="bf16")):
        provider = ViewProvider(ref, settings, tmp_path)
        for view in (View("mean", 2), View("mean", 1), View("cls", 2)):
            keys.add(key_hash(provider.cache_key(view)))
    assert len(keys) == 9
    assert ViewProvider(ref, EncodeSettings(batch_size=3, device="cpu"), tmp_path).cache_key(View("mean", 2)) == \
        ViewProvider(ref, EncodeSettings(), tmp_path).cache_key(View("mean", 2))  # speed knobs only


def test_round_trip_and_dedupe(tmp_path):
    store = VectorStore(tmp_path, BASE_KEY)
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    store.add(["a", "b", "a"], vectors)
    assert len(store) == 2
    again = VectorStore(tmp_path, BASE_KEY)
    assert again.missing(["b", "c", "a", "c"]) == ["c"]
    np.testing.assert_array_equal(again.get(["b", "a"]), vectors[[1, 0]])
    meta = json.loads((store.dir / "meta.json").read_text())
    assert meta["key"]["pooling"] == "mean" and meta["dim"] == 4  # the key in plain text


def test_digests_ending_in_zero_bytes_survive_a_reload(tmp_path):
    text = next(f"s{i}" for i in range(100000) if hashlib.sha256(f"s{i}".encode()).digest()[-1] == 0)
    assert text_digest(text).endswith(b"\x00")
    VectorStore(tmp_path, BASE_KEY).add([text], np.ones((1, 2), np.float32))
    assert VectorStore(tmp_path, BASE_KEY).missing([text]) == []


def test_truncated_part_is_detected_discarded_and_warned(tmp_path, caplog):
    store = VectorStore(tmp_path, BASE_KEY)
    store.add(["a", "b"], np.ones((2, 4), np.float32))
    store.add(["c"], np.ones((1, 4), np.float32))
    parts = sorted(store.dir.glob("part-*.npy"))
    assert len(parts) == 2
    victim = min(parts, key=lambda p: p.stat().st_size)  # the one-row part holding "c"
    victim.write_bytes(victim.read_bytes()[:-5])
    assert VectorStore(tmp_path, BASE_KEY).missing(["a", "b", "c"]) == ["c"]
    assert "is corrupt" in caplog.text
    assert not victim.exists()


def test_altered_bytes_are_detected_by_the_checksum(tmp_path, caplog):
    store = VectorStore(tmp_path, BASE_KEY)
    store.add(["a"], np.zeros((1, 4), np.float32))
    part = next(store.dir.glob("part-*.npy"))
    data = bytearray(part.read_bytes())
    data[-1] ^= 0xFF
    part.write_bytes(bytes(data))
    assert VectorStore(tmp_path, BASE_KEY).missing(["a"]) == ["a"]
    assert "checksum mismatch" in caplog.text


def test_foreign_meta_is_discarded(tmp_path, caplog):
    store = VectorStore(tmp_path, BASE_KEY)
    store.add(["a"], np.zeros((1, 4), np.float32))
    (store.dir / "meta.json").write_text('{"key": {"other": 1}, "dim": 4}')
    assert VectorStore(tmp_path, BASE_KEY).missing(["a"]) == ["a"]
    assert "does not match its key" in caplog.text


def test_no_temporary_files_are_left_and_no_pickle_is_needed(tmp_path):
    store = VectorStore(tmp_path, BASE_KEY)
    store.add(["a", "b"], np.ones((2, 3), np.float32))
    names = [p.name for p in store.dir.iterdir()]
    assert not any(n.startswith(".tmp") for n in names)
    part = np.load(next(store.dir.glob("part-*.npy")), allow_pickle=False)
    assert part["vec"].shape == (2, 3)


def test_model_fingerprint_is_memoised_and_tracks_content(tiny_bert, tmp_path):
    memo = tmp_path / "fingerprints.json"
    first = fingerprint_dir(tiny_bert, memo)
    assert fingerprint_dir(tiny_bert, memo) == first and memo.is_file()
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in tiny_bert.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    assert fingerprint_dir(copy, memo) == first  # same content elsewhere: same fingerprint
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("37", "38"))
    assert fingerprint_dir(copy, memo) != first
