"""``--export-embeddings DIR``: the vectors scored, per (method, task, split), read back equal to an
independent computation (transformers, one sentence at a time), in the split's first-seen sentence
order, without a second forward pass; pair scorers are skipped with a note."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence

import numpy as np
import pytest

import harness
from harness.core.api import PairScoringMethod
from harness.core.errors import UserError
from harness.runner.execution.export import read_embeddings
from harness.runner.settings.config import BenchConfig


def hf_mean(folder, sentence: str) -> np.ndarray:
    """avg computed the plain way: last layer's mean over the tokens of one unpadded sentence."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        out = model(**tok(sentence, return_tensors="pt"), output_hidden_states=True)
    return out.hidden_states[-1][0].mean(0).numpy()


def split_sentences(senteval_root) -> list[str]:
    """STS-B test's sentences from the fixture's CSV: s1 then s2 of each pair, first-seen order."""
    with (senteval_root / "STS" / "STSBenchmark" / "sts-test.csv").open(encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return list(dict.fromkeys([r[5] for r in rows] + [r[6] for r in rows]))


def test_cli_export_round_trips_and_matches_the_method_computed_independently(bench, tiny_st, senteval_root,
                                                                                tmp_path):
    out = tmp_path / "vectors"
    code, _, err = bench("--methods", "avg,random", "--tasks", "stsb", "--backbone", str(tiny_st), "--source",
                              "senteval", "--senteval-dir", str(senteval_root), "--export-embeddings", str(out))
    assert code == 0, err
    expected = split_sentences(senteval_root)
    folder = out / "tiny-st" / "avg" / "stsb" / "test"
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "sentences.jsonl", "vectors.npy"]
    vectors = np.load(folder / "vectors.npy", allow_pickle=False)
    lines = [json.loads(line) for line in (folder / "sentences.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [line["index"] for line in lines] == list(range(len(expected)))
    assert [line["sentence"] for line in lines] == expected
    assert vectors.dtype == np.float32 and vectors.shape == (len(expected), 32)
    for i in (0, len(expected) // 2, len(expected) - 1):
        np.testing.assert_allclose(vectors[i], hf_mean(tiny_st, expected[i]), atol=1e-5)
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert (meta["method"], meta["backbone"], meta["task"], meta["split"]) == ("avg", str(tiny_st), "stsb", "test")
    assert (meta["dims"], meta["count"]) == (32, len(expected))
    import hashlib

    assert meta["vectors_sha256"] == hashlib.sha256((folder / "vectors.npy").read_bytes()).hexdigest()
    assert (out / "none" / "random" / "stsb" / "test" / "vectors.npy").is_file()  # no backbone: "none"
    read = read_embeddings(folder)
    assert read.sentences == expected and np.array_equal(read.vectors, vectors)


def test_export_reads_no_sentence_twice_and_python_gets_the_same_vectors(tiny_bert, senteval_root, tmp_path):
    def cfg(export: str | None, out: str) -> BenchConfig:
        return BenchConfig(methods=("avg", "cls"), tasks=("stsb",), backbone=str(tiny_bert), source="senteval",
                           senteval_dir=str(senteval_root), cache_dir=str(tmp_path / f"cache-{out}"),
                           output_dir=str(tmp_path / out), progress=False, plots=False, bootstrap=0,
                           export_embeddings=export)

    plain = harness.run(cfg(None, "plain"))
    exported = harness.run(cfg(str(tmp_path / "emb"), "exported"))
    assert plain.embedding_dirs == [] and len(exported.embedding_dirs) == 2
    assert exported.sentences_forwarded == plain.sentences_forwarded == len(split_sentences(senteval_root))
    # Warm, with export: the vectors come from the cache; no model runs.
    warm = harness.run(cfg(str(tmp_path / "emb-warm"), "exported"))
    assert warm.sentences_forwarded == 0
    rows = exported.embeddings("avg", "STS-B")
    again = warm.embeddings("avg", "stsb", split="test")
    assert rows.sentences == again.sentences == split_sentences(senteval_root)
    np.testing.assert_array_equal(rows.vectors, again.vectors)
    assert not np.allclose(rows.vectors, exported.embeddings("cls", "stsb").vectors)
    with pytest.raises(UserError, match="no embeddings of flow on stsb"):
        exported.embeddings("flow", "stsb")


class WordOverlap(PairScoringMethod):
    """A pair scorer without a model: the share of words two sentences have in common."""

    name = "overlap"
    summary = "Jaccard overlap of words (a test's pair scorer)"

    @classmethod
    def make_spec(cls, request, ctx):
        from dataclasses import replace

        return replace(super().make_spec(request, ctx), backbone="none", revision=None, pooling="none", layers=())

    def score_pairs(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        return np.array([len(set(a.split()) & set(b.split())) / len(set(a.split()) | set(b.split()))
                         for a, b in zip(s1, s2)])


def test_a_pair_scorer_has_no_vectors_and_is_skipped_with_a_note(tiny_bert, senteval_root, tmp_path, capsys,
                                                                  monkeypatch):
    import methods

    monkeypatch.setattr(methods, "PROCESS", methods.Registry())  # registered for this test only
    methods.register_method(WordOverlap)
    outcome = harness.run(BenchConfig(methods=("overlap", "avg"), tasks=("stsb", "sts12"), backbone=str(tiny_bert),
                                      source="senteval", senteval_dir=str(senteval_root),
                                      cache_dir=str(tmp_path / "c"), output_dir=str(tmp_path / "o"), progress=False,
                                      plots=False, bootstrap=0, export_embeddings=str(tmp_path / "emb")))
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("export:")]
    assert notes == ["export: overlap scores pairs as a whole; it has no sentence vectors to export (skipped)"]
    assert sorted(str(p.relative_to(tmp_path / "emb")) for p in outcome.embedding_dirs) == \
        ["tiny-bert/avg/sts12/test", "tiny-bert/avg/stsb/test"]
    assert not (tmp_path / "emb" / "none").exists()


def test_an_altered_export_is_refused_on_read(tiny_bert, senteval_root, tmp_path):
    class Ones:
        def encode(self, texts):
            return np.ones((len(texts), 3)) + np.arange(len(texts))[:, None]

    outcome = harness.evaluate(Ones(), tasks="stsb", output_dir=tmp_path / "out", name="ones",
                               backbone=str(tiny_bert), source="senteval", senteval_dir=str(senteval_root),
                               cache_dir=str(tmp_path / "c"), progress=False, plots=False, bootstrap=0)
    (folder,) = outcome.embedding_dirs
    assert folder == tmp_path / "out" / "embeddings" / "none" / "ones" / "stsb" / "test"
    assert outcome.embeddings("ones", "stsb").vectors.shape == (len(split_sentences(senteval_root)), 3)
    data = bytearray((folder / "vectors.npy").read_bytes())
    data[-1] ^= 1
    (folder / "vectors.npy").write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"vectors\.npy: does not match the checksum"):
        read_embeddings(folder)
    (folder / "meta.json").unlink()
    with pytest.raises(UserError, match="not a complete embeddings export"):
        read_embeddings(folder)
    off = harness.evaluate(Ones(), tasks="stsb", output_dir=tmp_path / "out2", name="ones",
                           backbone=str(tiny_bert), source="senteval", senteval_dir=str(senteval_root),
                           cache_dir=str(tmp_path / "c"), progress=False, plots=False, bootstrap=0,
                           export_embeddings=None)
    assert off.embedding_dirs == [] and not (tmp_path / "out2" / "embeddings").exists()


def test_an_export_folder_that_is_a_file_fails_before_anything_runs(bench, tiny_st, senteval_root, tmp_path):
    (tmp_path / "taken").write_text("x", encoding="utf-8")
    code, _, err = bench("--methods", "avg", "--tasks", "stsb", "--backbone", str(tiny_st), "--source", "senteval",
                         "--senteval-dir", str(senteval_root), "--export-embeddings", str(tmp_path / "taken"))
    assert code == 2 and "error: --export-embeddings" in err and "is not a folder" in err
    assert not (tmp_path / "out" / "runs").exists()
