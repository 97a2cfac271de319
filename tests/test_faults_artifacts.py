"""Faults in what the harness reads back from disk: trained artifacts, training state and vector
parts. Nothing damaged is ever loaded: it is reported in one warning line, discarded and rebuilt,
and the run ends with the numbers of a clean run. The cases are data. Full and read-only disks are
in tests/test_faults_disk.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeContext
from fixtures import pairs

from harness.core.api import PairScoringMethod, SpecRequest
from harness.core.data.fitsets import make_fit_set
from harness.core.data.splits import SplitData
from methods import get_method

PAIRS = pairs(np.random.default_rng(7), 40)
SENTENCES = list(dict.fromkeys([a for a, _, _ in PAIRS] + [b for _, b, _ in PAIRS]))
TRAIN = SplitData(tuple(a for a, _, _ in PAIRS), tuple(b for _, b, _ in PAIRS), tuple(g for _, _, g in PAIRS),
                  None, origin="test fixture")
TEACHER = {"model": "train", "epochs": 1.0, "precision": "fp32"}

# name → (method, its options): every trained method, on the tiny BERT and a 40-pair fixture
TRAINED = {
    "flow": ("flow", {"flow": {"levels": 1, "depth": 1, "width": 8}}),
    "simcse-train": ("simcse-train", {"simcse-train": {"batch_size": 16, "precision": "fp32"}}),
    "cross-encoder": ("cross-encoder", {"cross-encoder": TEACHER}),
    "dse": ("dse", {"dse": {"top_k": 1, "precision": "fp32"}, "cross-encoder": TEACHER}),
    "dse-head": ("dse", {"dse": {"top_k": 1, "objective": "head", "precision": "fp32"}, "cross-encoder": TEACHER}),
}

# (trained method, file of its artifact folder, damage)
ARTIFACT_CASES = [
    ("flow", "flow.safetensors", "flip"),
    ("flow", "flow.safetensors", "truncate"),
    ("flow", "meta.json", "flip"),
    ("simcse-train", "model/model.safetensors", "flip"),
    ("simcse-train", "model/model.safetensors", "truncate"),
    ("simcse-train", "model/config.json", "truncate"),
    ("cross-encoder", "model/model.safetensors", "flip"),
    ("cross-encoder", "model/model.safetensors", "truncate"),
    ("cross-encoder", "model/model.safetensors", "empty"),
    ("dse", "model/model.safetensors", "flip"),
    ("dse", "model/model.safetensors", "truncate"),
    ("dse", "model/tokenizer.json", "delete"),
    ("dse-head", "head.safetensors", "flip"),
    ("dse-head", "head.safetensors", "truncate"),
]


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "flip":  # one bit in the middle of the file
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1:])
    elif how == "truncate":
        path.write_bytes(data[:len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "delete":
        path.unlink()
    else:
        raise ValueError(how)


def build(name: str, root: Path, backbone: Path):
    method_name, params = TRAINED[name]
    ctx = FakeContext(root, SpecRequest(backbone=str(backbone), max_length=32, params=params),
                      splits={("stsb", "train"): TRAIN})
    return get_method(method_name).build(ctx.request, ctx), ctx


def fit_and_score(method) -> np.ndarray:
    """Fit (pair scorers fit on first use), then the numbers a score is computed from."""
    if isinstance(method, PairScoringMethod):
        if method.uses_fit_set:
            method.fit(make_fit_set("test", SENTENCES, "fixture"))
        return method.score_pairs(TRAIN.s1[:8], TRAIN.s2[:8])
    method.fit(make_fit_set("test", SENTENCES, "fixture"))
    return method.encode(SENTENCES[:8])


@pytest.fixture(scope="module")
def clean(tiny_bert, tmp_path_factory):
    """Each trained method's cache after one clean training, and the numbers it gives (made on demand)."""
    made: dict[str, tuple[Path, np.ndarray]] = {}

    def get(name: str) -> tuple[Path, np.ndarray]:
        if name not in made:
            root = tmp_path_factory.mktemp(f"clean-{name}")
            method, _ = build(name, root, tiny_bert)
            made[name] = (root, fit_and_score(method))
        return made[name]

    return get


@pytest.mark.parametrize(("name", "file", "how"), ARTIFACT_CASES, ids=["-".join(c) for c in ARTIFACT_CASES])
def test_a_damaged_artifact_is_discarded_retrained_and_scores_like_a_clean_run(name, file, how, clean, tiny_bert,
                                                                              tmp_path, caplog):
    root, expected = clean(name)
    shutil.copytree(root, tmp_path / "cache")
    method, ctx = build(name, tmp_path / "cache", tiny_bert)
    fit_set = None if name == "cross-encoder" else make_fit_set("test", SENTENCES, "fixture")
    folder = method.artifact(fit_set)
    assert folder.complete()  # the copy is intact before the damage
    damage(folder.path(file), how)
    assert not folder.complete()
    got = fit_and_score(method)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "artifact:" in warnings[0] and "training it again" in warnings[0]
    assert ctx.trained == 1  # this artifact only (DSE's teacher was intact)
    np.testing.assert_array_equal(got, expected)  # the same numbers as the clean run
    assert folder.complete()


def test_a_damaged_flow_through_the_cli_scores_like_the_clean_run(bench, senteval_root, tiny_bert, tmp_path,
                                                                    caplog):
    """The issue's first two rows: flipped bytes loaded silently (13.19 instead of 79.95), a
    truncated file raised SafetensorError on every later run."""
    args = ["--methods", "flow", "--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(senteval_root),
            "--backbone", str(tiny_bert), "--flow-levels", "1", "--flow-depth", "1", "--bootstrap", "0", "--no-plots"]

    def score() -> float:
        (path,) = (tmp_path / "out" / "runs").glob("flow*.json")
        return json.loads(path.read_text())["scores"]["spearman"]

    assert bench(*args)[0] == 0
    first = score()
    (weights,) = (tmp_path / "cache").glob("flows/*/flow.safetensors")
    for how in ("flip", "truncate"):
        caplog.clear()
        damage(weights, how)
        code, _out, err = bench(*args)
        assert code == 0 and "Traceback" not in err and score() == first
        assert sum("does not match its checksum" in r.getMessage() for r in caplog.records) == 1


def test_damaged_training_state_is_discarded_and_training_starts_over(tiny_bert, tmp_path, caplog):
    import torch
    from safetensors.torch import load_file

    from methods.training.simcse_loop import SimCSEConfig, SimCSETrainer

    def trainer(workdir: Path) -> SimCSETrainer:
        config = SimCSEConfig(lr=3e-4, batch_size=16, precision="fp32", save_every=2)
        return SimCSETrainer(tiny_bert, workdir, config, seed=42, progress=False)

    trainer(tmp_path / "straight").train(SENTENCES)
    stopped = trainer(tmp_path / "resumed")

    def interrupt(steps_done: int) -> None:
        if steps_done == 3:
            raise KeyboardInterrupt

    stopped.on_step = interrupt
    with pytest.raises(KeyboardInterrupt):
        stopped.train(SENTENCES)
    damage(tmp_path / "resumed" / "partial" / "state.safetensors", "flip")
    result = trainer(tmp_path / "resumed").train(SENTENCES)
    assert result.resumed_from_step == 0
    assert sum("training state" in r.getMessage() and "starts over" in r.getMessage() for r in caplog.records) == 1
    a, b = (load_file(str(tmp_path / run / "model" / "model.safetensors")) for run in ("straight", "resumed"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# -- vectors -----------------------------------------------------------------------------------

# (encoder implementation, settings of a second cache history: window, batch size, token budget, threads)
# (and dtype). The native encoder's batches mix token lengths; the transformers path's hold one.
HISTORIES = [
    ("native", 7, 3, 0, 1, "fp32"),
    ("native", 5, 0, 48, 2, "fp32"),
    ("native", 6, 0, 80, 2, "bf16"),
    ("transformers", 7, 3, 0, 1, "fp32"),
    ("transformers", 11, 0, 48, 2, "fp32"),
]


@pytest.mark.parametrize(("impl", "window", "batch", "tokens", "threads", "dtype"), HISTORIES)
def test_a_sentences_vector_does_not_depend_on_the_caches_history(impl, window, batch, tokens, threads, dtype,
                                                                   tiny_bert, tmp_path):
    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.pooling import View
    from harness.core.encoding.provider import ViewProvider
    from harness.core.encoding.settings import EncodeSettings

    ref, views = resolve_backbone(str(tiny_bert)), [View("mean", 2), View("cls", 2), View("mean", 1)]
    whole = ViewProvider(ref, EncodeSettings(impl=impl, threads=2, dtype=dtype, progress=False), tmp_path / "whole")
    whole.ensure(SENTENCES, views)
    settings = EncodeSettings(impl=impl, window=window, batch_size=batch, max_tokens=tokens, threads=threads,
                              dtype=dtype, progress=False)
    shuffled = [SENTENCES[i] for i in np.random.default_rng(3).permutation(len(SENTENCES))]
    for start in (0, 5, 17):  # three runs, each encoding what the earlier ones left, in other company
        ViewProvider(ref, settings, tmp_path / "pieces").ensure(shuffled[:start + 10], views)
    pieces = ViewProvider(ref, settings, tmp_path / "pieces")
    pieces.ensure(SENTENCES, views)
    for view in views:
        assert pieces.get(SENTENCES, view).tobytes() == whole.get(SENTENCES, view).tobytes()


def store_with(root: Path, rows: list[tuple[str, float]]):
    """A store whose parts each hold one (sentence, constant vector) row, written in this order."""
    from harness.core.vector_store import VectorStore

    writers = [VectorStore(root, {"model": "m"}) for _ in rows]
    for writer in writers:
        writer.missing([])  # each has read the store before any of them writes: concurrent runs
    for writer, (text, value) in zip(writers, rows):
        writer.add([text], np.full((1, 4), value, np.float32))
    return VectorStore(root, {"model": "m"})


def test_the_cache_keeps_one_row_per_sentence_and_reads_are_deterministic(tmp_path):
    from harness.core.hashing import text_digest

    store = store_with(tmp_path, [("a", 1.0), ("a", 2.0), ("b", 3.0)])
    parts = {p.name: np.load(p) for p in sorted(store.dir.glob("part-*.npy"))}
    assert len(parts) == 3
    first = next(part["vec"][0, 0] for part in parts.values() if part["key"][0].tobytes() == text_digest("a"))
    got = store.get(["a", "b"])
    assert got[0, 0] == first and got[1, 0] == 3.0  # the first part by name wins
    rows = sum(len(np.load(p)) for p in store.dir.glob("part-*.npy"))
    assert rows == 2 and len(list(store.dir.glob("part-*.npy"))) == 2  # the repeat was dropped


def test_a_folder_named_like_a_part_is_removed_with_one_warning(tmp_path, caplog):
    store = store_with(tmp_path, [("a", 1.0)])
    (store.dir / "part-0000.npy").mkdir()
    store.refresh()
    assert store.missing(["a", "b"]) == ["b"]
    assert sum("is a folder" in r.getMessage() for r in caplog.records) == 1
    assert not (store.dir / "part-0000.npy").exists()
