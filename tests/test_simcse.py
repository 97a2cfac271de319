"""SimCSE: checkpoints read through the right pooler, and unsupervised SimCSE trained here."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from fixtures import WORDS, write_tiny_bert

import harness
from harness.runner.settings.config import BenchConfig
from methods.simcse import choose_pooler
from methods.training.simcse_loop import SimCSEConfig, SimCSETrainer, simcse_loss


def test_loss_equals_the_hand_computed_value():
    # τ = 1. Cosines of z1 rows with z2 rows: [[1, .7071, 0], [0, .7071, 1], [.7071, 1, .7071]].
    # Row losses −s_ii + log Σ_j e^{s_ij}: 0.74857, 1.04147, 1.20606 → mean 0.99870.
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    z2 = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    assert float(simcse_loss(z1, z2, temperature=1.0)) == pytest.approx(0.99870, abs=1e-5)
    # τ = 0.05 scales the logits 20×: row 0 is nearly solved (≈ 0.0028), rows 1 and 2 each put their
    # best wrong candidate 5.86 logits above the right one (≈ 5.86 + log(1 + e^-5.86 + e^-20)) → 3.909.
    assert float(simcse_loss(z1, z2, temperature=0.05)) == pytest.approx(3.9090, abs=1e-3)


def test_pooler_is_chosen_by_name_as_simcse_does():
    assert choose_pooler("princeton-nlp/unsup-simcse-bert-base-uncased", "auto") == "cls_before_pooler"
    assert choose_pooler("princeton-nlp/sup-simcse-bert-base-uncased", "auto") == "pooler"
    assert choose_pooler("/models/my-unsup-simcse", "auto") == "cls_before_pooler"
    assert choose_pooler("princeton-nlp/unsup-simcse-bert-base-uncased", "pooler") == "pooler"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_bert):
    root = tmp_path_factory.mktemp("simcse")
    shutil.copytree(tiny_bert, root / "tiny-sup-simcse")
    shutil.copytree(tiny_bert, root / "tiny-unsup-simcse")
    write_tiny_bert(root / "tiny-sup-simcse-no-pooler", with_pooler=False)
    return root


def run_simcse(bench, senteval_root, model, *extra):
    return bench("--methods", "simcse", "--simcse-model", str(model), "--tasks", "stsb", "--source", "senteval",
                 "--senteval-dir", str(senteval_root), *extra)


def record_of(tmp_path, pattern="simcse*.json"):
    return json.loads(next((tmp_path / "out" / "runs").glob(pattern)).read_text())


@pytest.mark.parametrize(("name", "extra", "pooling", "pooler_used"), [
    ("tiny-sup-simcse", [], "pooler", "pooler"),
    ("tiny-unsup-simcse", [], "cls", "cls_before_pooler"),
    ("tiny-sup-simcse", ["--simcse-pooler", "cls_before_pooler"], "cls", "cls_before_pooler"),
    ("tiny-unsup-simcse", ["--simcse-pooler", "pooler"], "pooler", "pooler"),
])
def test_simcse_reads_the_right_pooler(bench, senteval_root, checkpoints, tmp_path, name, extra, pooling,
                                       pooler_used):
    code, _, err = run_simcse(bench, senteval_root, checkpoints / name, *extra)
    assert code == 0, err
    record = record_of(tmp_path)
    assert record["method"]["spec"]["pooling"] == pooling
    assert record["method"]["spec"]["params"]["pooler_used"] == pooler_used
    assert record["method"]["label"].startswith(f"simcse[{name}")


def test_pooler_and_cls_views_really_differ(bench, senteval_root, checkpoints, tmp_path):
    for extra in ([], ["--simcse-pooler", "cls_before_pooler"]):
        assert run_simcse(bench, senteval_root, checkpoints / "tiny-sup-simcse", *extra)[0] == 0
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*.json")]
    scores = {r["method"]["label"]: r["scores"]["spearman"] for r in records}
    assert set(scores) == {"simcse[tiny-sup-simcse]", "simcse[tiny-sup-simcse,cls_before_pooler]"}
    assert len(set(scores.values())) == 2


def test_a_checkpoint_without_pooler_weights_is_refused(bench, senteval_root, checkpoints):
    code, _, err = run_simcse(bench, senteval_root, checkpoints / "tiny-sup-simcse-no-pooler")
    assert code == 2
    assert "has no trained pooler weights (pooler.dense.*)" in err and "--simcse-pooler cls_before_pooler" in err
    assert run_simcse(bench, senteval_root, checkpoints / "tiny-sup-simcse-no-pooler",
                      "--simcse-pooler", "cls_before_pooler")[0] == 0


def test_random_pooler_weights_are_caught_when_the_model_is_loaded(checkpoints, tmp_path):
    """With .bin weights the pooler's presence is unknown until transformers loads the model."""
    from dataclasses import replace

    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.pooling import View
    from harness.core.encoding.provider import ViewProvider
    from harness.core.encoding.settings import EncodeSettings
    from harness.core.errors import UserError

    ref = replace(resolve_backbone(str(checkpoints / "tiny-sup-simcse-no-pooler")), pooler_weights=None)
    provider = ViewProvider(ref, EncodeSettings(impl="transformers", progress=False), tmp_path)
    with pytest.raises(UserError, match="would be random"):
        provider.get(["a man is playing"], View("pooler", 2))


def corpus(n: int = 200, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return list(dict.fromkeys(" ".join(rng.choice(WORDS, size=int(rng.integers(4, 9)))) for _ in range(n)))


def trainer(base, workdir, **kw):
    config = SimCSEConfig(**{"lr": 3e-4, "batch_size": 32, "epochs": 1.0, "precision": "fp32", "save_every": 2,
                             **kw})
    return SimCSETrainer(base, workdir, config, seed=42, progress=False)


def weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model" / "model.safetensors"))


def test_training_lowers_the_loss_and_is_reproducible(tiny_bert, tmp_path):
    sentences = corpus()
    first = trainer(tiny_bert, tmp_path / "a", epochs=3.0).train(sentences)
    assert first.steps == math.ceil(3 * len(sentences) / 32) and first.last_loss < first.first_loss
    again = trainer(tiny_bert, tmp_path / "b", epochs=3.0).train(sentences)
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert again.last_loss == first.last_loss and all(torch.equal(a[k], b[k]) for k in a)
    from safetensors.torch import load_file

    base = load_file(str(tiny_bert / "model.safetensors"))
    key = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(base[key], a[key])  # training changed the encoder


def test_an_interrupted_training_resumes_from_its_last_saved_step(tiny_bert, tmp_path):
    sentences = corpus()
    trainer(tiny_bert, tmp_path / "straight").train(sentences)
    stopped = trainer(tiny_bert, tmp_path / "resumed")

    def interrupt(steps_done: int) -> None:
        if steps_done == 3:
            raise KeyboardInterrupt

    stopped.on_step = interrupt
    with pytest.raises(KeyboardInterrupt):
        stopped.train(sentences)
    assert not (tmp_path / "resumed" / "model").exists()  # no checkpoint from a half-done run
    assert json.loads((tmp_path / "resumed" / "partial" / "state.json").read_text())["step"] == 2
    result = trainer(tiny_bert, tmp_path / "resumed").train(sentences)
    assert result.resumed_from_step == 2 and result.steps == math.ceil(len(sentences) / 32)
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_simcse_train_through_the_harness_trains_once_and_encodes(senteval_root, tiny_bert, tmp_path):
    (tmp_path / "corpus.txt").write_text("\n".join(corpus()) + "\n")
    cfg = BenchConfig(methods=("simcse-train", "cls"), tasks=("stsb", "sts12"), backbone=str(tiny_bert),
                      source="senteval", senteval_dir=str(senteval_root), cache_dir=str(tmp_path / "c"),
                      output_dir=str(tmp_path / "o"), progress=False, plots=False, bootstrap=0,
                      method_params={"simcse-train": {"corpus": f"corpus:{tmp_path / 'corpus.txt'}",
                                                      "lr": 3e-4, "precision": "fp32"}})
    cold = harness.run(cfg)
    assert cold.models_trained == 1  # one corpus → one model for both tasks
    trained = [r for r in cold.records if r["method"]["name"] == "simcse-train"]
    assert {r["fit"]["fit_set"]["name"] for r in trained} == {"corpus:corpus.txt"}
    assert trained[0]["protocol"]["fit_set"] == f"corpus:{tmp_path / 'corpus.txt'}"
    assert trained[0]["backbone"]["encoder_impl"] == "native"  # the saved checkpoint is a plain BERT
    cls = {r["task"]["name"]: r["scores"]["spearman"] for r in cold.records if r["method"]["name"] == "cls"}
    assert {r["task"]["name"]: r["scores"]["spearman"] for r in trained} != cls  # a different encoder now
    warm = harness.run(cfg)
    assert warm.models_trained == 0 and warm.sentences_forwarded == 0
    assert [r["scores"] for r in warm.records] == [r["scores"] for r in cold.records]
