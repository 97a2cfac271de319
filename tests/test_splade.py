"""``splade`` (methods/splade.py) against independent computations on a tiny BertForMaskedLM saved
here: sentence-transformers' ``SparseEncoder`` (an MLM ``Transformer`` + ``SpladePooling``) loaded
from the same folder, and numpy over transformers' own MLM logits, for both poolings and both
activations; STS Spearman and active dimensions as ``SparseEmbeddingSimilarityEvaluator`` reports
them; a whole run's record, scores.csv and frontier; the cache; and the refusal of a backbone
without an MLM head."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeContext
from scipy.stats import spearmanr

from harness.core.api import SpecRequest
from harness.core.errors import UserError
from methods import get_method
from tests.test_evaluate import settings, stsb_test_pairs

ROOT = Path(__file__).resolve().parent.parent
# our activation → sentence-transformers' SpladePooling activation_function of the same function
ST_ACTIVATION = {"log1p_relu": "relu", "log1p_log1p_relu": "log1p_relu"}
# one longer than max_length 16 tokens: truncated alike by all three
SENTENCES = [
    "a man is playing a guitar",
    "two dogs on the grass",
    "the quick brown fox jumps",
    "a",
    "a man is playing a guitar and two dogs on the grass and the quick brown fox jumps on a big red car",
]


def build(folder, tmp_path, **options):
    request = SpecRequest(backbone=str(folder), max_length=16, params={"splade": options})
    ctx = FakeContext(tmp_path / "cache", request)
    return get_method("splade").build(request, ctx), ctx


def numpy_splade(folder, sentences, activation, pooling, max_length=16):
    """log(1 + relu(logits)) (once more log1p for the second activation) pooled over each sentence's
    tokens, in numpy, from transformers' BertForMaskedLM logits of one sentence at a time."""
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = BertForMaskedLM.from_pretrained(folder).eval()
    out = []
    for text in sentences:
        inputs = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            logits = model(**inputs).logits[0].numpy().astype(np.float64)
        values = np.log1p(np.maximum(logits, 0))
        if activation == "log1p_log1p_relu":
            values = np.log1p(values)
        out.append(values.max(0) if pooling == "max" else values.sum(0))
    return np.array(out)


def sparse_encoder(folder, activation, pooling, max_length=16):
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SpladePooling, Transformer

    mlm = Transformer(str(folder), transformer_task="fill-mask", max_seq_length=max_length)
    return SparseEncoder(
        modules=[mlm, SpladePooling(pooling, activation_function=ST_ACTIVATION[activation])], device="cpu"
    )


@pytest.mark.parametrize("activation", ["log1p_relu", "log1p_log1p_relu"])
@pytest.mark.parametrize("pooling", ["max", "sum"])
def test_vectors_equal_sparse_encoder_and_numpy(tiny_mlm, tmp_path, activation, pooling):
    method, ctx = build(tiny_mlm, tmp_path, activation=activation, pooling=pooling)
    ours = method.encode_sparse(SENTENCES)
    st = (
        sparse_encoder(tiny_mlm, activation, pooling)
        .encode(SENTENCES, convert_to_tensor=True, convert_to_sparse_tensor=False)
        .numpy()
    )
    reference = numpy_splade(tiny_mlm, SENTENCES, activation, pooling)
    dense = ours.to_dense()
    np.testing.assert_allclose(dense, st, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dense, reference, rtol=1e-5, atol=1e-5)
    # sparse as SPLADE vectors are: exactly the words some token activates are stored
    np.testing.assert_array_equal(ours.active(), (reference > 0).sum(1))
    assert 0 < ours.active().mean() < 0.8 * ours.dim
    assert ctx.forwarded == len(SENTENCES)
    assert method.spec.pooling == f"splade-{pooling}" and method.label() == (
        "splade" if (activation, pooling) == ("log1p_relu", "max") else method.label()
    )


def test_sts_spearman_and_active_dims_equal_the_evaluators(tiny_mlm, senteval_root, tmp_path):
    from sentence_transformers.sparse_encoder.evaluation import SparseEmbeddingSimilarityEvaluator

    from harness.core.compression import distinct_rows
    from harness.core.sparse import active_dims, pair_similarity

    s1, s2, gold = stsb_test_pairs(senteval_root)
    method, _ = build(tiny_mlm, tmp_path)
    (u1, rows1), (u2, rows2) = distinct_rows(s1), distinct_rows(s2)
    left, right = method.encode_sparse(u1), method.encode_sparse(u2)
    dot, _ = pair_similarity(left, rows1, right, rows2, "dot")
    evaluator = SparseEmbeddingSimilarityEvaluator(
        s1, s2, list(gold / 5), main_similarity="dot", name="t", write_csv=False
    )
    metrics = evaluator(sparse_encoder(tiny_mlm, "log1p_relu", "max"))
    assert 100 * spearmanr(dot, gold).statistic == pytest.approx(100 * metrics["t_spearman_dot"], abs=1e-6)
    assert active_dims(left, rows1, right, rows2) == pytest.approx(metrics["t_active_dims"], rel=1e-9)


def run_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, str(ROOT / "run_bench.py"), *args], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def test_a_run_records_sparse_costs_in_scores_and_frontier(tiny_mlm, senteval_root, tmp_path):
    import harness
    from harness.runner.records.schema import checksum, problems
    from harness.runner.settings.config import BenchConfig

    kwargs = settings(tiny_mlm, senteval_root, tmp_path)
    cfg = BenchConfig(
        methods=("avg", "splade"),
        tasks=("stsb",),
        output_dir=str(tmp_path / "out"),
        bootstrap=100,
        max_length=16,
        **kwargs,
    )
    outcome = harness.run(cfg)
    record = next(r for r in outcome.records if r["method"]["name"] == "splade")
    s1, s2, gold = stsb_test_pairs(senteval_root)
    # independent: numpy vectors of every pair's sentences, dot products, Spearman
    a = numpy_splade(tiny_mlm, s1, "log1p_relu", "max")
    b = numpy_splade(tiny_mlm, s2, "log1p_relu", "max")
    np.testing.assert_allclose(record["pairs"]["similarity"], (a * b).sum(1), rtol=1e-5)
    assert record["scores"]["spearman"] == pytest.approx(100 * spearmanr((a * b).sum(1), gold).statistic, abs=1e-3)
    vector = record["vector"]
    active = ((a > 0).sum() + (b > 0).sum()) / (2 * len(s1))
    assert vector["active_dims"] == pytest.approx(active, rel=1e-9)
    assert vector["flops"] == pytest.approx(float(((a > 0).mean(0) * (b > 0).mean(0)).sum()), rel=1e-9)
    assert vector["bytes_per_vector"] == int(np.floor(8 * active + 0.5))
    assert (vector["precision"], vector["similarity"], record["protocol"]["similarity"]) == ("sparse", "dot", "dot")
    assert vector["full_dims"] == record["embed_dim"] == len((tiny_mlm / "vocab.txt").read_text().split())
    # the sealed file verifies (its sparse vector fields checked), and an edited cost or label does not
    (path,) = [
        p
        for p in (tmp_path / "out" / "runs").rglob("*.json")
        if json.loads(p.read_text(encoding="utf-8"))["method"]["name"] == "splade"
    ]
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert problems(stored) is None
    for field, value, said in (
        ("bytes_per_vector", vector["bytes_per_vector"] + 1, "bytes_per_vector"),
        ("flops", vector["full_dims"] + 1.0, "flops"),
    ):
        edited = json.loads(json.dumps(stored))
        edited["vector"][field] = value
        edited["checksum"] = checksum(edited)
        assert said in problems(edited)
    edited = json.loads(json.dumps(stored))
    edited["method"]["label"] = "splade"
    edited["checksum"] = checksum(edited)
    assert "does not say its similarity" in problems(edited)
    with (tmp_path / "out" / "scores.csv").open(encoding="utf-8") as f:
        rows = {r["method"]: r for r in csv.DictReader(f)}
    # the row names its similarity, as every row compared by another than cosine does
    assert record["method"]["label"] == "splade · dot"
    assert float(rows["splade · dot"]["active_dims"]) == pytest.approx(active, rel=1e-5)
    assert float(rows["splade · dot"]["flops"]) == pytest.approx(vector["flops"], rel=1e-5)
    assert rows["avg"]["active_dims"] == rows["avg"]["flops"] == ""  # not measured on dense vectors
    with (tmp_path / "out" / "frontier.csv").open(encoding="utf-8") as f:
        frontier = {r["method"]: r for r in csv.DictReader(f)}
    assert set(frontier) == {"avg", "splade · dot"}
    sparse = frontier["splade · dot"]
    assert sparse["bytes_per_vector"] == str(vector["bytes_per_vector"]) and sparse["of"] == "splade"
    assert float(sparse["active_dims"]) == pytest.approx(active, rel=1e-5)
    assert sparse["full_vector"] == "splade · dot" and frontier["avg"]["active_dims"] == ""
    text = (tmp_path / "out" / "frontier.md").read_text(encoding="utf-8")
    assert "active dims | FLOPS |" in text and f"| {active:.1f} |" in text
    # the page's frontier has the same costs beside bytes per vector (blank on the dense row)
    from harness.runner.page.frontier_tables import frontier_table

    page_rows = [{**r, "active_dims": r["active_dims"] or None, "flops": r["flops"] or None, "pareto": False,
                  "spearman": float(r["spearman"]), "ci_low": None, "ci_high": None, "marks": "",
                  "full_vector": r["full_vector"]} for r in frontier.values()]
    table = frontier_table(page_rows)
    heads = [h.text for h in table.head]
    assert heads[heads.index("bytes/vector") + 1:heads.index("bytes/vector") + 3] == ["active dims", "FLOPS"]
    cells = {row[1].text: [c.text for c in row] for row in table.rows}
    at = heads.index("active dims")
    assert cells["splade · dot"][at:at + 2] == [f"{active:.1f}", f"{vector['flops']:.2f}"]
    assert cells["avg"][at:at + 2] == ["", ""]
    assert [h.text for h in frontier_table(page_rows[:1] if page_rows[0]["method"] == "avg" else page_rows[1:]).head
            ].count("FLOPS") == 0  # a task of dense rows only keeps the dense columns
    # warm: the vectors come from the sparse cache, equal, nothing forwarded
    warm = harness.run(BenchConfig(**{**cfg.__dict__, "output_dir": str(tmp_path / "warm")}))
    again = next(r for r in warm.records if r["method"]["name"] == "splade")
    assert again["pairs"]["similarity"] == record["pairs"]["similarity"] and warm.sentences_forwarded == 0
    # cosine asked: the same cached vectors (the similarity is not part of what they are), compared by cosine
    cosine = harness.run(
        BenchConfig(
            **{
                **cfg.__dict__,
                "output_dir": str(tmp_path / "cos"),
                "methods": ("splade",),
                "method_params": {"splade": {"similarity": "cosine"}},
            }
        )
    )
    (rec,) = cosine.records
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    np.testing.assert_allclose(rec["pairs"]["similarity"], (a * b).sum(1) / norms, rtol=1e-5)
    assert (rec["method"]["label"], rec["vector"]["similarity"], cosine.sentences_forwarded) == (
        "splade[similarity=cosine]",
        "cosine",
        0,
    )


def test_the_similarities_offered_are_those_the_run_accepts():
    from harness.core import sparse
    from methods import splade

    assert splade.SIMILARITIES == sparse.SIMILARITIES


def test_a_backbone_without_an_mlm_head_is_refused_in_one_line(tiny_bert, senteval_root, tmp_path):
    method, _ = build(tiny_bert, tmp_path)
    with pytest.raises(UserError, match="no masked-language-model head") as err:
        method.encode_sparse(SENTENCES)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"splade: --backbone {tiny_bert}")
    done = run_cli(
        "--methods",
        "splade",
        "--tasks",
        "stsb",
        "--backbone",
        str(tiny_bert),
        "--source",
        "senteval",
        "--senteval-dir",
        str(senteval_root),
        "--cache-dir",
        str(tmp_path / "c"),
        "--output-dir",
        str(tmp_path / "o"),
        "--no-plots",
        "--bootstrap",
        "0",
        cwd=tmp_path,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "masked-language-model head" in errors[0]
    assert "Traceback" not in done.stderr


def test_a_sparse_plugin_without_encode_sparse_is_refused_and_a_bad_answer_is_one_line():
    from harness.core.errors import PluginError
    from harness.method_api import SparseEmbeddingMethod, SparseVectors
    from harness.runner.execution.sparse_sides import checked
    from methods import PROCESS

    class NoVectors(SparseEmbeddingMethod):
        name, summary = "no-vectors", "a sparse method that forgot encode_sparse"

    with pytest.raises(PluginError, match="defines no encode_sparse"):
        PROCESS.layer(NoVectors)
    good = SparseVectors.from_dense(np.eye(2, 5, dtype=np.float32))
    assert checked(good, 2, NoVectors) is good
    for answer, said in ((np.eye(2, 5), "it must return SparseVectors"), (good, "2 vectors for 3 sentences")):
        with pytest.raises(PluginError, match=said):
            checked(answer, 3, NoVectors)
