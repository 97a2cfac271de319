"""DSE per task, as microsoft/Distilled-Sentence-Embedding does it on GLUE: a teacher cross-encoder
fine-tuned on the pair-classification task's train split (one logit per class), a student distilled
from its logits with the [u, v, u·v, |u−v|] → hidden → ReLU → classes head, both classifying pairs
(``classify_pairs``). Each output is checked against an independent computation: the teacher's
logits against transformers' own AutoModelForSequenceClassification on the saved weights, the
student's against its head recomputed by hand from its vectors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fakes import FakeContext
from fixtures import WORDS

from harness.core.api import SpecRequest
from harness.core.data.fitsets import make_fit_set
from harness.core.data.splits import SplitData, TaskSpec
from methods import get_method
from methods.dse import decision_scores, relative_degradation
from methods.training.pair_training import CrossEncoderConfig, StudentConfig, train_cross_encoder, train_student

MARKERS = ("red", "blue", "big")


def labelled_pairs(n: int, seed: int, classes: int) -> tuple[list[str], list[str], list[float]]:
    """Pairs whose class is the colour word the first sentence holds: learnable in a few steps by
    both sides (what is tested is how they learn, not what), and not what an untrained model says."""
    rng = np.random.default_rng(seed)
    plain = [w for w in WORDS if w not in MARKERS]
    s1, s2, gold = [], [], []
    for _ in range(n):
        label = int(rng.integers(0, classes))
        a = [MARKERS[label], *rng.choice(plain, size=3)]
        s1.append(" ".join(rng.permutation(a)))
        s2.append(" ".join(rng.choice(plain, size=4)))
        gold.append(float(label))
    return s1, s2, gold


def pair_task(name: str, classes: tuple[str, ...], positive: str, eval_split: str = "dev") -> TaskSpec:
    return TaskSpec(name=name, title=name.upper(), description="a toy pair-classification task",
                    splits=("train", eval_split), eval_split=eval_split, kind="pairclass", main_score="ap",
                    classes=classes, positive=positive, threshold_split="train",
                    gold_range=(0.0, float(len(classes) - 1)))


BINARY = pair_task("para", ("no", "yes"), "yes")
# The positive class first, as GLUE's QNLI and RTE have it (entailment = 0).
ENTAIL = pair_task("entail", ("entailment", "not_entailment"), "entailment")
NLI = pair_task("nli", ("entailment", "neutral", "contradiction"), "entailment", "dev_matched")
NLI_MM = pair_task("nli-mm", ("entailment", "neutral", "contradiction"), "entailment", "dev_mismatched")
STS = TaskSpec(name="stsb", title="STS-B", description="", splits=("train", "dev", "test"))


def split(s1, s2, gold) -> SplitData:
    return SplitData(tuple(s1), tuple(s2), tuple(gold), None, origin="test fixture")


def splits() -> dict[tuple[str, str], SplitData]:
    two = labelled_pairs(96, 1, 2)
    three = labelled_pairs(96, 2, 3)
    sts = labelled_pairs(48, 3, 3)
    out = {("para", "train"): split(*two), ("entail", "train"): split(two[0], two[1], [1 - g for g in two[2]]),
           ("nli", "train"): split(*three), ("nli-mm", "train"): split(*three),
           ("stsb", "train"): split(sts[0], sts[1], [2.5 * g for g in sts[2]])}
    return out


def context(tmp_path, backbone, **params) -> FakeContext:
    request = SpecRequest(backbone=str(backbone), max_length=32, params=params)
    return FakeContext(tmp_path / "cache", request, splits=splits())


TEACHER = {"model": "train", "epochs": 2.0, "lr": 1e-3, "batch_size": 16, "precision": "fp32"}
STUDENT = {"top_k": 1, "objective": "head", "head_width": 16, "epochs": 1.0, "lr": 1e-3, "cross_pairs": 0.0,
           "precision": "fp32"}
DEV = labelled_pairs(24, 9, 3)


def fit_set():
    return make_fit_set("test", sorted(set(DEV[0] + DEV[1])), "fixture")


def transformers_logits(folder, s1, s2) -> np.ndarray:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        inputs = tokenizer(list(s1), list(s2), padding=True, truncation=True, max_length=32, return_tensors="pt")
        return model(**inputs).logits.numpy()


@pytest.mark.parametrize("task", [BINARY, NLI], ids=["binary", "three-class"])
def test_teacher_is_a_classifier_of_the_task_its_logits_are_transformers(tiny_bert, tmp_path, task):
    ctx = context(tmp_path, tiny_bert, **{"cross-encoder": TEACHER})
    teacher = get_method("cross-encoder").build(ctx.request, ctx)
    teacher.begin_task(task)
    logits = teacher.classify_pairs(DEV[0], DEV[1], task.classes)
    assert logits.shape == (24, len(task.classes)) and logits.dtype == np.float32
    assert teacher.fit_info["train_task"] == task.name and teacher.fit_info["classes"] == list(task.classes)
    assert teacher.fit_info["train_pairs"] == 96 and ctx.trained == 1
    # the saved checkpoint, read by transformers itself: one logit per class, the same values
    np.testing.assert_allclose(logits, transformers_logits(teacher.checkpoint(), DEV[0], DEV[1]), atol=1e-5)
    # its score is the log-odds of the positive class
    p = task.positive_index
    others = np.delete(logits, p, axis=1).astype(np.float64)
    expected = logits[:, p] - np.log(np.exp(others).sum(axis=1))
    np.testing.assert_allclose(teacher.score_pairs(DEV[0], DEV[1]), expected, atol=1e-5)
    with pytest.raises(ValueError, match="trained on"):
        teacher.classify_pairs(DEV[0], DEV[1], task.classes[::-1])
    # cached: asked again, nothing is scored
    scored = ctx.pairs_scored
    np.testing.assert_array_equal(teacher.classify_pairs(DEV[0], DEV[1], task.classes), logits)
    assert ctx.pairs_scored == scored


def test_teacher_switches_with_the_task_and_mnli_mismatched_reuses_mnli(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, **{"cross-encoder": TEACHER})
    teacher = get_method("cross-encoder").build(ctx.request, ctx)
    teacher.begin_task(STS)
    sts = teacher.score_pairs(DEV[0][:4], DEV[1][:4])
    assert sts.shape == (4,) and not teacher.classifies() and teacher.fit_info["train_task"] == "stsb"
    with pytest.raises(Exception, match="classifies pairs only"):
        teacher.classify_pairs(DEV[0], DEV[1], ("a", "b"))
    teacher.begin_task(NLI)
    matched = teacher.classify_pairs(DEV[0], DEV[1], NLI.classes)
    teacher.begin_task(NLI_MM)  # the same train split: the same teacher
    np.testing.assert_array_equal(teacher.classify_pairs(DEV[0], DEV[1], NLI_MM.classes), matched)
    teacher.begin_task(STS)
    np.testing.assert_array_equal(teacher.score_pairs(DEV[0][:4], DEV[1][:4]), sts)
    assert ctx.trained == 2  # STS-B's regressor and one MNLI classifier
    assert teacher.labelled_training_for(BINARY) == (("para", "train"),)
    assert teacher.labelled_training_for(STS) == (("stsb", "train"),)
    # a pair task without a train split (MTEB's): the STS-B teacher's score, no classifier
    mteb = TaskSpec(name="dupes", title="Dupes", description="", kind="pairclass", main_score="ap",
                    classes=("no", "yes"), positive="yes", gold_range=(0.0, 1.0))
    assert teacher.classifier_for(mteb) is None and teacher.labelled_training_for(mteb) == (("stsb", "train"),)


def head_by_hand(folder, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    from safetensors.numpy import load_file

    w = load_file(str(folder / "head.safetensors"))
    features = np.concatenate([u, v, u * v, np.abs(u - v)], axis=1).astype(np.float64)
    hidden = np.maximum(features @ w["net.0.weight"].T + w["net.0.bias"], 0)
    return hidden @ w["net.2.weight"].T + w["net.2.bias"]


@pytest.mark.parametrize("task", [BINARY, ENTAIL, NLI], ids=["binary", "positive-first", "three-class"])
def test_student_head_classifies_as_its_weights_say(tiny_bert, tmp_path, task):
    from pathlib import Path

    ctx = context(tmp_path, tiny_bert, dse=STUDENT, **{"cross-encoder": TEACHER})
    student = get_method("dse").build(ctx.request, ctx)
    student.begin_task(task)
    student.fit(fit_set())
    assert ctx.trained == 2 and student.fit_info["train_task"] == task.name
    assert student.fit_info["train_pairs"] == 96  # the task's train pairs; no cross-pairs (the repo's)
    logits = student.classify_pairs(DEV[0], DEV[1], task.classes)
    assert logits.shape == (24, len(task.classes)) and logits.dtype == np.float32
    u, v = student.encode(DEV[0]), student.encode(DEV[1])
    by_hand = head_by_hand(Path(student.fit_info["checkpoint"]).parent, u, v)
    p = task.positive_index
    if len(task.classes) == 2:  # one output z: logits z for the positive class, 0 for the negative
        assert by_hand.shape == (24, 1) and student.fit_info["recipe"]["head_outputs"] == 1
        np.testing.assert_allclose(logits[:, p], by_hand[:, 0], atol=1e-4)
        np.testing.assert_array_equal(logits[:, 1 - p], 0)
        np.testing.assert_array_equal(logits.argmax(axis=1) == p, by_hand[:, 0] > 0)  # sigmoid(z) > 0.5
        np.testing.assert_allclose(student.score_pairs(DEV[0], DEV[1]), by_hand[:, 0], atol=1e-4)
    else:
        assert by_hand.shape == (24, 3)
        np.testing.assert_allclose(logits, by_hand, atol=1e-4)


def test_student_regresses_the_teachers_logit_difference(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, dse=STUDENT, **{"cross-encoder": TEACHER})
    student = get_method("dse").build(ctx.request, ctx)
    for task in (ENTAIL, NLI):
        student.begin_task(task)
        train = ctx.splits[(task.name, "train")]
        s1, s2, gold = student.training_pairs(fit_set())
        targets, labels, classes = student.distillation_targets(s1, s2, gold)
        logits = student.teacher().classify_pairs(train.s1, train.s2, task.classes)
        if task is ENTAIL:  # binary: positive minus negative logit; label 1 = the positive class
            assert classes == 2
            np.testing.assert_allclose(targets, logits[:, 0] - logits[:, 1], atol=1e-5)
            assert labels == [float(g == 0) for g in train.gold]
        else:
            assert classes == 3 and labels == list(train.gold)
            np.testing.assert_array_equal(targets, logits)


def test_student_training_follows_the_repos_loss(tiny_bert, tmp_path):
    """A binary student's head output learns the teacher's logit difference; 3 classes, all 3."""
    s1, s2, gold = labelled_pairs(256, 4, 3)
    logits = 4 * np.eye(3, dtype=np.float32)[np.array(gold, int)] - 2  # a confident teacher
    for classes, targets, labels in ((2, logits[:, 0] - logits[:, 1], [float(g == 0) for g in gold]),
                                     (3, logits, gold)):
        config = StudentConfig(top_k=1, objective="head", head_width=32, classes=classes, epochs=6.0, lr=2e-3,
                               batch_size=32, gold_weight=0.5, precision="fp32")
        result, head = train_student(tiny_bert, tmp_path / str(classes), s1, s2, targets, labels, config, seed=3,
                                     device="cpu", progress=False)
        assert result.last_loss < 0.85 * result.first_loss and head.net[2].out_features == (3 if classes == 3 else 1)
    with pytest.raises(ValueError, match="needs the head"):
        train_student(tiny_bert, tmp_path / "cos", s1, s2, logits, gold, StudentConfig(classes=3), seed=1,
                      device="cpu", progress=False)


def test_teacher_classifier_training_lowers_its_cross_entropy(tiny_bert, tmp_path):
    s1, s2, gold = labelled_pairs(256, 5, 3)
    config = CrossEncoderConfig(epochs=6.0, lr=2e-3, batch_size=16, precision="fp32")
    result = train_cross_encoder(tiny_bert, tmp_path, s1, s2, [int(g) for g in gold], config, seed=1, device="cpu",
                                 progress=False, num_labels=3)
    assert result.last_loss < 0.6 * result.first_loss  # measured: 1.10 → 0.49 (ln 3 = 1.10: chance)
    assert transformers_logits(tmp_path / "model", s1[:2], s2[:2]).shape == (2, 3)


def test_cosine_student_of_a_classifier_regresses_the_positive_probability(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, dse={**STUDENT, "objective": "cosine"}, **{"cross-encoder": TEACHER})
    student = get_method("dse").build(ctx.request, ctx)
    student.begin_task(BINARY)
    s1, s2, gold = student.training_pairs(fit_set())
    targets, labels, classes = student.distillation_targets(s1, s2, gold)
    logits = student.teacher().classify_pairs(s1, s2, BINARY.classes)
    assert labels == [float(g == 1) for g in gold]  # 1 = the positive class
    assert classes == 0 and not hasattr(student, "classify_pairs")  # an embedding method: cosine is its score
    np.testing.assert_allclose(targets, np.exp(logits[:, 1]) / np.exp(logits).sum(axis=1), atol=1e-5)


def test_decision_scores_are_sklearns():
    from sklearn.metrics import accuracy_score, f1_score

    rng = np.random.default_rng(3)
    for classes in (2, 3):
        logits, gold = rng.normal(size=(200, classes)), rng.integers(0, classes, 200)
        for positive in range(classes):
            got = decision_scores(logits, gold, positive)
            predicted = logits.argmax(axis=1)
            assert got["accuracy"] == pytest.approx(100 * accuracy_score(gold, predicted))
            assert got["f1"] == pytest.approx(100 * f1_score(gold == positive, predicted == positive))
    assert decision_scores(np.array([[1.0, 0.0]]), np.array([0]), 1)["f1"] is None
    assert relative_degradation(80.0, 76.0) == pytest.approx(5.0) and relative_degradation(0.0, 1.0) is None


def test_student_records_its_teacher_and_the_relative_degradation(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, dse=STUDENT, **{"cross-encoder": TEACHER})
    student = get_method("dse").build(ctx.request, ctx)
    student.begin_task(BINARY)
    student.fit(fit_set())
    dev = split(DEV[0], DEV[1], [min(g, 1.0) for g in DEV[2]])
    extra = student.annotate(dev, student.score_pairs(dev.s1, dev.s2))
    teacher = extra["teacher"]
    gold = np.array(dev.gold, dtype=int)
    expected_teacher = decision_scores(student.teacher().classify_pairs(dev.s1, dev.s2, BINARY.classes), gold, 1)
    expected_student = decision_scores(student.classify_pairs(dev.s1, dev.s2, BINARY.classes), gold, 1)
    assert teacher["metrics"] == expected_teacher and teacher["student_metrics"] == expected_student
    assert teacher["degradation"]["f1"] == relative_degradation(expected_teacher["f1"], expected_student["f1"])
    assert teacher["degradation_pct"] == relative_degradation(expected_teacher["accuracy"],
                                                              expected_student["accuracy"])
    assert extra["columns"] == {"vs teacher (%)": teacher["degradation_pct"]}
    assert student.labelled_training_for(BINARY) == (("para", "train"),)


# -- --paper dse end to end on a GLUE folder -------------------------------------------------------------------

# Each task's folder, header, and how a row is written from (s1, s2, class name): download_glue_data.py's layout.
GLUE_LAYOUT = {
    "MRPC": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", lambda i, a, b, c: f"{c}\t{i}\t{i + 1000}\t{a}\t{b}"),
    "QQP": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
            lambda i, a, b, c: f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{c}"),
    "QNLI": ("index\tquestion\tsentence\tlabel", lambda i, a, b, c: f"{i}\t{a}\t{b}\t{c}"),
    "RTE": ("index\tsentence1\tsentence2\tlabel", lambda i, a, b, c: f"{i}\t{a}\t{b}\t{c}"),
}
MNLI_HEADER = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
               "sentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")


def write_glue_fixture(root, train: int = 48, dev: int = 24):
    """glue_data/ as download_glue_data.py writes it, for MRPC, QQP, QNLI, RTE and MNLI, with the colour-word
    pairs above (class names as each file writes them: MRPC's and QQP's 0/1, QNLI's and RTE's names)."""
    from harness.core.data.tasks import TASKS

    data = root / "glue_data"
    names = {"MRPC": ("0", "1"), "QQP": ("0", "1"), "QNLI": TASKS["qnli"].classes, "RTE": TASKS["rte"].classes}
    for seed, (folder, (header, row)) in enumerate(GLUE_LAYOUT.items()):
        for split, n in (("train", train), ("dev", dev)):
            s1, s2, gold = labelled_pairs(n, 10 * seed + (split == "dev"), 2)
            lines = [header, *[row(i, a, b, names[folder][int(g)]) for i, (a, b, g) in enumerate(zip(s1, s2, gold))]]
            (data / folder).mkdir(parents=True, exist_ok=True)
            (data / folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    classes = TASKS["mnli"].classes
    for k, (split, n) in enumerate((("train", train), ("dev_matched", dev), ("dev_mismatched", dev))):
        s1, s2, gold = labelled_pairs(n, 100 + k, 3)
        rows = zip(s1, s2, [classes[int(g)] for g in gold])
        lines = [MNLI_HEADER, *[f"{i}\t{i}\t{i}e\tfiction\t( {a} )\t( {b} )\t(ROOT {a})\t(ROOT {b})\t{a}\t{b}\t{c}\t{c}"
                                for i, (a, b, c) in enumerate(rows)]]
        (data / "MNLI").mkdir(parents=True, exist_ok=True)
        (data / "MNLI" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


GLUE_TASKS = ("mrpc", "qqp", "qnli", "rte", "mnli", "mnli-mm")


@pytest.mark.heavy  # ~12 s: every row of the preset, 8 models trained
def test_paper_dse_runs_every_row_on_a_glue_folder(bench, tiny_bert, tmp_path):
    """`--paper dse --glue-dir FIXTURE`: every row runs (GLUE from the fixture, STS-B from the packaged copy, a
    fraction of an epoch each), the teacher and the student classify each GLUE task, records carry the ‡ mark of
    training on the task's own train split, and the degradation lines (and their average, the paper's 4.6 %) are
    100·(teacher − student)/teacher of the records' accuracies."""
    import csv
    import json

    glue = write_glue_fixture(tmp_path / "glue")
    code, _, err = bench("--paper", "dse", "--backbone", str(tiny_bert), "--glue-dir", str(glue), "--dse-top-k", "2",
                         "--cross-encoder-epochs", "0.05", "--dse-epochs", "0.05", "--bootstrap", "0")
    assert code == 0, err
    assert "Traceback" not in err and "trained on the labelled training split of the task" in err
    with open(tmp_path / "out" / "paper-dse.csv", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    assert all(line["status"].startswith("ran") for line in lines), [line["status"] for line in lines]
    assert all(np.isfinite(float(line["measured"])) for line in lines)
    records = [json.loads(path.read_text()) for path in (tmp_path / "out" / "runs").rglob("*.json")]
    newest = {}
    for rec in sorted(records, key=lambda r: r["created"]):
        newest[(rec["method"]["name"], rec["task"]["name"])] = rec
    for task in GLUE_TASKS:
        teacher, student = newest[("cross-encoder", task)], newest[("dse", task)]
        for rec in (teacher, student):
            assert rec["protocol"]["decision"] == "argmax" and rec["protocol"]["similarity"] == "classify_pairs"
            assert rec["protocol"]["labelled_training"]["data"] == f"{task} train"
            assert rec["fit"]["train_task"] == task.replace("-mm", "") or rec["fit"]["train_task"] == task
        accuracy = [rec["scores"]["metrics"]["accuracy"]["value"] for rec in (teacher, student)]
        assert student["teacher"]["metrics"]["accuracy"] == pytest.approx(accuracy[0])
        assert student["teacher"]["student_metrics"]["accuracy"] == pytest.approx(accuracy[1])
        assert student["teacher"]["degradation_pct"] == pytest.approx(relative_degradation(*accuracy))
    assert newest[("dse", "mnli")]["fit"]["recipe"]["head_outputs"] == 3
    assert newest[("dse", "mrpc")]["fit"]["recipe"]["head_outputs"] == 1
    average = [line for line in lines if line["task"] == "Avg."]
    assert len(average) == 1 and float(average[0]["published"]) == 4.6
    per_task = [float(line["measured"]) for line in lines
                if line["metric"] == "degradation_pct" and line["task"] in ("MRPC", "QQP", "QNLI", "RTE", "MNLI")]
    assert len(per_task) == 5 and float(average[0]["measured"]) == pytest.approx(np.mean(per_task), abs=1e-3)
    assert {line["task"] for line in lines if line["model"] == "DSE teacher (cross-encoder)"} == \
        {"MRPC", "QQP", "QNLI", "RTE", "MNLI", "MNLI-mm", "STS-B"}


def test_paper_dse_without_a_glue_folder_says_so_on_each_glue_line(bench, tiny_bert, tmp_path):
    import csv

    code, _, err = bench("--paper", "dse", "--backbone", str(tiny_bert), "--tasks", "mrpc", "mnli-mm",
                         "--dse-top-k", "2")
    assert code == 0, err
    assert "Traceback" not in err
    with open(tmp_path / "out" / "paper-dse.csv", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    glue = [line for line in lines if line["task"] in ("MRPC", "MNLI-mm")]
    assert glue and all(line["status"].startswith("not run: ") and "--glue-dir" in line["status"] for line in glue)
    assert all("\n" not in line["status"] for line in lines)


def test_the_cost_studys_head_matrix_scores_a_classifying_student_as_score_pairs(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, dse=STUDENT, **{"cross-encoder": TEACHER})
    student = get_method("dse").build(ctx.request, ctx)
    student.begin_task(NLI)
    student.fit(fit_set())
    queries, candidates = DEV[0][:3], DEV[1][:4]
    matrix = student.head_matrix(student.encode(queries), student.encode(candidates))
    pairs = student.score_pairs([q for q in queries for _ in candidates], candidates * len(queries))
    np.testing.assert_allclose(matrix, pairs.reshape(3, 4), atol=1e-5)
