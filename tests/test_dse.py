"""DSE: the cross-encoder teacher, the distilled student, and the query × candidate cost."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fixtures import WORDS, write_senteval

import harness
from harness.core.cost_model import ModelShape
from harness.core.scoring import spearman
from harness.runner.settings.config import BenchConfig
from harness.runner.studies.cost import measure
from methods.training.pair_training import (
    CrossEncoderConfig,
    StudentConfig,
    student_pool,
    train_cross_encoder,
    train_student,
)


def random_pairs(n: int, seed: int) -> tuple[list[str], list[str], list[float]]:
    """Pairs with a word-overlap (Jaccard) score: a teacher that is easy to learn from."""
    rng = np.random.default_rng(seed)
    s1, s2, score = [], [], []
    for _ in range(n):
        a = list(rng.choice(WORDS, size=6))
        b = a[: int(rng.integers(0, 7))] + list(rng.choice(WORDS, size=int(rng.integers(1, 5))))
        s1.append(" ".join(a))
        s2.append(" ".join(b))
        score.append(len(set(a) & set(b)) / len(set(a) | set(b)))
    return s1, s2, score


def test_cross_encoder_training_lowers_its_loss(tiny_bert, tmp_path):
    s1, s2, score = random_pairs(256, 0)
    config = CrossEncoderConfig(epochs=4.0, lr=1e-3, batch_size=16, precision="fp32")
    result = train_cross_encoder(tiny_bert, tmp_path, s1, s2, score, config, seed=1, device="cpu", progress=False)
    assert result.steps == 64 and result.last_loss < 0.5 * result.first_loss
    assert (tmp_path / "model" / "model.safetensors").is_file()


CLUSTER = {word: i % 5 for i, word in enumerate(WORDS)}  # hidden "synonym" classes


def cluster_pairs(n: int, seed: int) -> tuple[list[str], list[str], list[float]]:
    """A teacher the untrained model cannot already agree with: two sentences are similar when their
    words fall in the same hidden classes, whatever the words themselves."""
    rng = np.random.default_rng(seed)
    s1, s2, score = [], [], []
    for _ in range(n):
        a, b = list(rng.choice(WORDS, size=3)), list(rng.choice(WORDS, size=3))
        ca, cb = {CLUSTER[w] for w in a}, {CLUSTER[w] for w in b}
        s1.append(" ".join(a))
        s2.append(" ".join(b))
        score.append(len(ca & cb) / len(ca | cb))
    return s1, s2, score


def test_student_learns_the_teacher_on_held_out_pairs(tiny_bert, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    s1, s2, teacher = cluster_pairs(1024, 1)
    h1, h2, held_teacher = cluster_pairs(300, 2)

    def agreement(folder) -> float:
        tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
        with torch.no_grad():
            def embed(texts):
                inputs = tok(texts, padding=True, return_tensors="pt")
                return student_pool(model(**inputs, output_hidden_states=True).hidden_states,
                                    inputs["attention_mask"], "top4-concat", 2)
            cos = torch.nn.functional.cosine_similarity(embed(h1), embed(h2)).numpy()
        return spearman(cos, held_teacher)

    config = StudentConfig(top_k=2, epochs=3.0, lr=2e-3, batch_size=32, precision="fp32")
    result, _ = train_student(tiny_bert, tmp_path, s1, s2, teacher, [None] * len(s1), config, seed=3,
                              device="cpu", progress=False)
    before, after = agreement(tiny_bert), agreement(tmp_path / "model")
    assert result.last_loss < result.first_loss
    assert after > before + 0.25, (before, after)  # measured: 0.15 → 0.58


def test_the_head_objective_saves_a_head(tiny_bert, tmp_path):
    s1, s2, teacher = random_pairs(64, 4)
    config = StudentConfig(top_k=2, objective="head", epochs=1.0, batch_size=32, precision="fp32")
    _, head = train_student(tiny_bert, tmp_path, s1, s2, teacher, [0.5] * 64, config, seed=3, device="cpu",
                            progress=False)
    assert head is not None and (tmp_path / "head.safetensors").is_file()


@pytest.fixture(scope="module")
def dse_data(tmp_path_factory):
    return write_senteval(tmp_path_factory.mktemp("dse") / "se", per_subset=20)


def dse_cfg(root, model, tmp_path, methods=("cross-encoder", "dse", "avg"), **extra):
    params = {"cross-encoder": {"model": "train", "epochs": 3.0, "lr": 1e-3},
              "dse": {"epochs": 2.0, "lr": 1e-3, "top_k": 2}}
    return BenchConfig(methods=methods, tasks=("stsb",), backbone=str(model), source="senteval",
                       senteval_dir=str(root), cache_dir=str(tmp_path / "c"), output_dir=str(tmp_path / "o"),
                       progress=False, plots=False, bootstrap=0, method_params=params, **extra)


def test_teacher_and_student_through_the_harness_then_everything_is_cached(dse_data, tiny_bert, tmp_path):
    cold = harness.run(dse_cfg(dse_data, tiny_bert, tmp_path))
    assert cold.models_trained == 2 and cold.pairs_scored > 0
    by_name = {r["method"]["name"]: r for r in cold.records}
    teacher, student = by_name["cross-encoder"], by_name["dse"]
    assert teacher["method"]["kind"] == "pair-scorer" and teacher["protocol"]["similarity"] == "score_pairs"
    assert set(teacher["symmetry"]) == {"spearman_ab_vs_ba", "mean_abs_difference"}  # reported, not asserted
    assert teacher["fit"]["train_pairs"] == 40 and teacher["fit"]["loaded_from_cache"] is False
    assert student["teacher"]["spearman"] == pytest.approx(teacher["scores"]["spearman"])
    expected = 100 * (teacher["scores"]["spearman"] - student["scores"]["spearman"]) / teacher["scores"]["spearman"]
    assert student["teacher"]["degradation_pct"] == pytest.approx(expected)
    assert student["fit"]["train_pairs"] == 80  # 40 STS-B train pairs + 40 cross-pairs
    board = (tmp_path / "o" / "leaderboard.md").read_text()
    assert "vs teacher (%)" in board and "pair-scorer" in board
    # Warm, and gated on its own leaderboard: the cells the plan names before the run (trained
    # methods, pair scorers, declared columns) are the ones the records hold.
    warm = harness.run(dse_cfg(dse_data, tiny_bert, tmp_path, baseline=str(tmp_path / "o" / "leaderboard.csv")))
    assert warm.models_trained == 0 and warm.pairs_scored == 0 and warm.sentences_forwarded == 0
    assert [r["scores"] for r in warm.records] == [r["scores"] for r in cold.records]
    assert warm.exit_code == 0 and warm.regressions.empty


def test_cost_report_through_the_harness(dse_data, tiny_bert, tmp_path):
    harness.run(dse_cfg(dse_data, tiny_bert, tmp_path, methods=("cross-encoder", "dse"), cost=True))
    report = json.loads((tmp_path / "o" / "cost.json").read_text())
    row = report["rows"][0]
    assert (row["queries"], row["candidates"]) == (100, 100) and row["cross_extrapolated"] is False
    assert row["speedup_student"] > 1 and (tmp_path / "o" / "plots" / "cost.png").stat().st_size > 1000


def test_cost_needs_both_sides(bench, dse_data, tiny_bert):
    code, _, err = bench("--methods", "avg", "--cost", "--source", "senteval", "--senteval-dir", str(dse_data),
                         "--backbone", str(tiny_bert))
    assert code == 2 and "--methods cross-encoder dse" in err


def hash_embedding(texts: list[str]) -> np.ndarray:
    return np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=16) for t in texts])


def test_cost_paths_rank_alike_when_the_student_is_the_teacher():
    from harness.runner.studies.cost import cosine_matrix

    def teacher(left, right):  # a "cross-encoder" that is secretly the student's cosine
        return np.einsum("ij,ij->i", *(x / np.linalg.norm(x, axis=1, keepdims=True)
                                       for x in (hash_embedding(left), hash_embedding(right))))

    pool = [f"candidate {i}" for i in range(300)]
    queries = [f"query {i}" for i in range(5)]
    shape = ModelShape(2, 32, 37)
    rows, matrices = measure(teacher, hash_embedding, queries, pool, [100, 300], shape, shape,
                             lambda texts: [4] * len(texts), max_pairs=600)
    cross, student = matrices[100]
    assert (np.argsort(-cross, axis=1) == np.argsort(-student, axis=1)).all()
    np.testing.assert_allclose(cross, cosine_matrix(hash_embedding(queries), hash_embedding(pool[:100])))
    assert rows[1].cross_extrapolated and not rows[0].cross_extrapolated  # 5 × 300 > 600 pairs


def test_flop_estimate_matches_the_formula():
    shape = ModelShape(layers=2, hidden=4, intermediate=8)
    params = 2 * (4 * 16 + 2 * 4 * 8)
    assert shape.forward_flops([3]) == 2 * params * 3 + 4 * 2 * 9 * 4
