"""Labelled sentence pairs (the pairclass kind): every metric against an independent computation
(scikit-learn's average_precision_score / roc_auc_score, MTEB's PairClassification best-threshold
search), resampled values against the metric of the resample written out, the thresholds chosen on
another split, a classifier's decisions, and end to end: a pairs file with a label column."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from fixtures import write_labelled_glue
from sklearn.metrics import accuracy_score, average_precision_score, f1_score, roc_auc_score

from harness.core import pair_metrics as pm
from harness.core.kinds import Evidence
from harness.core.kinds.pairclass import LABELLED


def _evidence(similarity, gold, positive, threshold=None, threshold_split="", predicted=None):
    gold = np.asarray(gold, dtype=np.float64)
    extra = {"classes": int(max(gold.max() + 1, positive + 1, 2)), "positive": positive, "threshold": threshold,
             "predicted": None if predicted is None else [int(c) for c in predicted]}
    if threshold:
        extra["decision"] = f"threshold:{threshold_split}"
    return Evidence(np.asarray(similarity, dtype=np.float64), gold, None, extra)


def score_labelled(similarity, gold, positive, bootstrap=1000, seed=1234, threshold=None, threshold_split="",
                   decisions=None, main="ap"):
    """The labelled-pairs kind's score of one split (what a run records)."""
    evidence = _evidence(similarity, gold, positive, threshold, threshold_split, decisions)
    return LABELLED.score(evidence, main, bootstrap, seed)


def _mteb():
    from mteb.abstasks.pair_classification import AbsTaskPairClassification

    return AbsTaskPairClassification


def _cases(seed: int, count: int):
    """Random labelled similarities, rounded so that many are tied (MTEB and scikit-learn must
    agree on ties too)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(2, 80))
        labels = rng.integers(0, 2, size=n)
        similarity = np.round(rng.normal(size=n) + 0.8 * labels, int(rng.integers(0, 3)))
        if labels.all() or not labels.any() or np.all(similarity == similarity[0]):
            continue
        yield similarity, labels


def test_worked_example_of_the_docstring():
    ranked = pm.Ranked.of([0.9, 0.8, 0.8, 0.3], np.array([1, 0, 1, 0], dtype=bool))
    assert pm.average_precision(ranked)[0] == pytest.approx(100 * 5 / 6)
    assert pm.roc_auc(ranked)[0] == pytest.approx(87.5)
    assert [v[0] for v in pm.best_accuracy(ranked)] == pytest.approx([75.0, 0.85])
    assert [v[0] for v in pm.best_f1(ranked)] == pytest.approx([80.0, 0.55])


def test_ap_and_auc_equal_scikit_learn_and_best_thresholds_equal_mteb():
    mteb = _mteb()
    checked = 0
    for similarity, labels in _cases(0, 300):
        ranked = pm.Ranked.of(similarity, labels == 1)
        assert pm.average_precision(ranked)[0] == pytest.approx(
            100 * average_precision_score(labels, similarity), abs=1e-9
        )
        assert pm.roc_auc(ranked)[0] == pytest.approx(100 * roc_auc_score(labels, similarity), abs=1e-9)
        accuracy, threshold = (v[0] for v in pm.best_accuracy(ranked))
        their_accuracy, their_threshold = mteb._find_best_acc_and_threshold(None, list(similarity), labels, True)
        assert accuracy == pytest.approx(100 * their_accuracy, abs=1e-9)
        assert threshold == their_threshold
        f1, f1_threshold = (v[0] for v in pm.best_f1(ranked))
        their_f1, _, _, their_f1_threshold = mteb._find_best_f1_and_threshold(None, list(similarity), labels, True)
        assert np.nan_to_num(f1) == pytest.approx(100 * their_f1, abs=1e-9)
        if their_f1 > 0:
            assert f1_threshold == their_f1_threshold
        checked += 1
    assert checked > 200


def test_each_resample_scores_as_its_pairs_written_out():
    """Row b of the weights is resample b: the metric of the pairs repeated as often as drawn."""
    mteb = _mteb()
    rng = np.random.default_rng(5)
    for similarity, labels in _cases(1, 60):
        weights = rng.integers(0, 3, size=(4, len(labels)))
        threshold = {"accuracy": float(np.median(similarity)), "f1": float(similarity.min())}
        values = LABELLED.values(_evidence(similarity, labels, 1, threshold), weights)
        for b in range(len(weights)):
            index = np.repeat(np.arange(len(labels)), weights[b])
            y, s = labels[index], similarity[index]
            if len(y) < 2 or y.all() or not y.any() or np.all(s == s[0]):
                continue
            assert values["ap"][b] == pytest.approx(100 * average_precision_score(y, s))
            assert values["roc_auc"][b] == pytest.approx(100 * roc_auc_score(y, s))
            best, _ = mteb._find_best_acc_and_threshold(None, list(s), y, True)
            assert values["accuracy_best"][b] == pytest.approx(100 * best)
            predicted_acc = (s >= threshold["accuracy"]).astype(int)
            assert values["accuracy"][b] == pytest.approx(100 * accuracy_score(y, predicted_acc))
            predicted_f1 = (s >= threshold["f1"]).astype(int)
            assert values["f1"][b] == pytest.approx(100 * f1_score(y, predicted_f1))


def test_thresholds_come_from_the_threshold_split_and_apply_to_the_scored_one():
    rng = np.random.default_rng(2)
    train_labels = rng.integers(0, 2, 400)
    train = train_labels + rng.normal(size=400)
    chosen = pm.choose_thresholds(train, train_labels.astype(float), 1)
    best = pm.best_accuracy(pm.Ranked.of(train, train_labels == 1))[1][0]
    assert chosen is not None and chosen["accuracy"] == best
    test_labels = rng.integers(0, 2, 300)
    test = test_labels + rng.normal(size=300)
    scores = score_labelled(
        test, test_labels.astype(float), 1, bootstrap=0, threshold=chosen, threshold_split="train"
    )
    expected = 100 * accuracy_score(test_labels, (test >= chosen["accuracy"]).astype(int))
    assert scores.metrics["accuracy"]["value"] == pytest.approx(expected)
    assert scores.fields["decision"] == "threshold:train"
    # the best threshold on the scored split is at least as good as one chosen elsewhere
    assert scores.metrics["accuracy_best"]["value"] >= scores.metrics["accuracy"]["value"]


def test_the_positive_class_need_not_be_index_one_and_others_are_negatives():
    """QNLI's positive class (entailment) is label 0; MNLI's neutral and contradiction are both
    negatives of entailment."""
    gold = np.array([0, 1, 2, 0, 2, 1, 0, 2])
    similarity = np.array([0.9, 0.2, 0.4, 0.7, 0.1, 0.8, 0.6, 0.3])
    scores = score_labelled(similarity, gold.astype(float), 0, bootstrap=0)
    assert scores.metrics["ap"]["value"] == pytest.approx(100 * average_precision_score(gold == 0, similarity))
    assert scores.metrics["roc_auc"]["value"] == pytest.approx(100 * roc_auc_score(gold == 0, similarity))


def test_a_classifiers_argmax_gives_accuracy_over_every_class():
    gold = np.array([0, 1, 2, 2, 1, 0])
    predicted = np.array([0, 1, 1, 2, 1, 2])
    similarity = np.array([2.0, -1.0, -0.5, -2.0, 0.1, -0.2])
    scores = score_labelled(similarity, gold.astype(float), 0, bootstrap=0, decisions=predicted)
    assert scores.fields["decision"] == "argmax"
    assert scores.metrics["accuracy"]["value"] == pytest.approx(100 * accuracy_score(gold, predicted))
    assert scores.metrics["f1"]["value"] == pytest.approx(100 * f1_score(gold == 0, predicted == 0))


def test_intervals_hold_their_values_and_one_class_is_undefined():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 200)
    similarity = labels + rng.normal(size=200)
    scores = score_labelled(similarity, labels.astype(float), 1, bootstrap=200, seed=7)
    for name in ("ap", "roc_auc", "accuracy_best", "f1_best"):
        low, high = scores.metrics[name]["ci95"]
        assert low <= scores.metrics[name]["value"] <= high and high - low > 1
    assert scores.metrics["accuracy"] == {"value": None, "ci95": None}  # no threshold split
    again = score_labelled(similarity, labels.astype(float), 1, bootstrap=200, seed=7)
    assert again.metrics == scores.metrics  # the same draws: paired across methods
    one_class = score_labelled(similarity, np.ones(200), 1, bootstrap=10)
    assert one_class.undefined and one_class.main is None


def _labelled_file(tmp_path, senteval_root):
    """STS-B's pairs from the SentEval fixture, labelled 1 where gold >= 3, train and test."""
    from harness.core.data.tasks import get_task, load_task

    task = load_task(get_task("stsb"), "senteval", ["train", "test"], locations={"senteval": str(senteval_root)})
    path = tmp_path / "pairs_with_label.tsv"
    lines = ["sentence1\tsentence2\tlabel\tsplit"]
    for split in ("train", "test"):
        data = task.splits[split]
        lines += [f"{a}\t{b}\t{int(g >= 3)}\t{split}" for a, b, g in zip(data.s1, data.s2, data.gold)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, task


@pytest.mark.heavy
def test_a_pairs_file_with_a_label_column_is_scored_by_its_metrics(bench, tmp_path, senteval_root, tiny_bert):
    """The issue's command on fixtures: labelled pairs beside an STS task in one run; every metric
    in the record equals scikit-learn / MTEB on the record's own similarities, the console and the
    leaderboard name the score, STS keeps its table."""
    path, task = _labelled_file(tmp_path, senteval_root)
    code, out, err = bench(
        "--methods",
        "avg",
        "whitening",
        "--tasks",
        f"file:{path}",
        "stsb",
        "--source",
        "senteval",
        "--senteval-dir",
        str(senteval_root),
        "--backbone",
        str(tiny_bert),
        "--bootstrap",
        "200",
    )
    assert code == 0, err
    assert "pairs_with_label AP" in out + err and "STS-B   Spearman" in out + err
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*.json")]
    labelled = [r for r in records if r["task"].get("kind") == "pairclass"]
    assert {r["method"]["name"] for r in labelled} == {"avg", "whitening"}
    mteb = _mteb()
    for record in labelled:
        similarity = np.asarray(record["pairs"]["similarity"])
        labels = np.asarray(record["pairs"]["gold"]).astype(int)
        assert list(labels) == [int(g >= 3) for g in task.splits["test"].gold]
        metrics = record["scores"]["metrics"]
        assert metrics["ap"]["value"] == pytest.approx(100 * average_precision_score(labels, similarity))
        assert metrics["roc_auc"]["value"] == pytest.approx(100 * roc_auc_score(labels, similarity))
        best, _ = mteb._find_best_acc_and_threshold(None, list(similarity), labels, True)
        assert metrics["accuracy_best"]["value"] == pytest.approx(100 * best)
        threshold = record["scores"]["threshold"]["accuracy"]
        assert metrics["accuracy"]["value"] == pytest.approx(
            100 * accuracy_score(labels, (similarity >= threshold).astype(int))
        )
        assert record["protocol"]["decision"] == "threshold:train"
        low, high = metrics["ap"]["ci95"]
        assert low <= metrics["ap"]["value"] <= high
    # pair_metrics.csv: every thresholded metric with its threshold (§: MTEB's best cut of the record's pairs)
    import csv

    with (tmp_path / "out" / "pair_metrics.csv").open(encoding="utf-8", newline="") as handle:
        filed = {(r["method"], r["metric_name"]): r for r in csv.DictReader(handle) if r["task"] == "pairs_with_label"}
    for record in labelled:
        method, similarity = record["method"]["name"], list(record["pairs"]["similarity"])
        labels = np.asarray(record["pairs"]["gold"]).astype(int)
        _, accuracy_cut = mteb._find_best_acc_and_threshold(None, similarity, labels, True)
        *_, f1_cut = mteb._find_best_f1_and_threshold(None, similarity, labels, True)
        assert float(filed[method, "accuracy_best §"]["threshold"]) == pytest.approx(accuracy_cut, abs=1e-4)
        assert float(filed[method, "f1_best §"]["threshold"]) == pytest.approx(f1_cut, abs=1e-4)
        assert float(filed[method, "accuracy"]["threshold"]) == pytest.approx(record["scores"]["threshold"]["accuracy"],
                                                                              abs=1e-4)
    board = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "score=ap (labelled pairs)" in board
    scores_csv = (tmp_path / "out" / "scores.csv").read_text()
    assert ",ap," in scores_csv.splitlines()[1] or ",ap," in scores_csv
    history = (tmp_path / "out" / "history.md").read_text()
    assert "| ap " in history
    mteb_file = next(p for p in (tmp_path / "out" / "mteb").rglob("pairs_with_label.json") if "__avg-" in str(p))
    entry = json.loads(mteb_file.read_text())["scores"]["test"][0]
    avg = next(r for r in labelled if r["method"]["name"] == "avg")
    # MTEB's own PairClassification metrics of the same cosines: its file is MTEB's numbers
    cls = _mteb()
    theirs = cls._compute_metrics_values(
        cls.__new__(cls), list(avg["pairs"]["similarity"]), np.asarray(avg["pairs"]["gold"]).astype(int), True
    )
    for key, value in theirs.items():
        assert entry[f"cosine_{key}"] == pytest.approx(value, abs=1e-6), key
    assert entry["main_score"] == pytest.approx(avg["scores"]["metrics"]["ap"]["value"] / 100, abs=1e-6)
    # Issue 42: a labelled line of history.jsonl is shown only if its own blobs (similarities, classes, positive
    # class, thresholds) give its score and interval; a line appended with AP 99 and its check redone is not.
    import hashlib

    from harness.core.hashing import canonical_json
    from harness.runner.history.log import read_history

    out = tmp_path / "out"
    lines = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    ap_lines = [line for line in lines if line.get("metric") == "ap"]
    assert len(ap_lines) == 2 and len(read_history(out)) == len(lines)
    genuine = next(line for line in ap_lines if line["method"] == "avg")
    assert genuine["score"] == pytest.approx(avg["scores"]["metrics"]["ap"]["value"])
    body = {k: v for k, v in genuine.items() if k != "check"} | {"score": 99.0, "date": "2099-01-01T00:00:00+00:00"}
    with (out / "history.jsonl").open("a") as handle:
        handle.write(json.dumps({**body, "check": hashlib.sha256(canonical_json(body).encode()).hexdigest()}) + "\n")
    entries = read_history(out)
    assert len(entries) == len(lines) and all(entry["score"] != 99.0 for entry in entries)


@pytest.mark.heavy
def test_glue_tasks_from_their_folder_score_as_scikit_learn_and_mteb(bench, tmp_path, senteval_root, tiny_bert):
    """--source glue on a GLUE-layout fixture: MRPC (positive 1), QNLI (positive "entailment",
    label 0) and MNLI (3 classes, entailment against the other two) with thresholds chosen on
    train; each metric equals the independent computation on the record's similarities."""
    glue, task = write_labelled_glue(tmp_path / "glue", senteval_root)
    code, _, err = bench(
        "--methods",
        "avg",
        "--source",
        "glue",
        "--glue-dir",
        str(glue),
        "--tasks",
        "mrpc",
        "qnli",
        "mnli",
        "--backbone",
        str(tiny_bert),
        "--bootstrap",
        "100",
    )
    assert code == 0, err
    records = {
        json.loads(p.read_text())["task"]["name"]: json.loads(p.read_text())
        for p in (tmp_path / "out" / "runs").glob("*.json")
    }
    assert set(records) == {"mrpc", "qnli", "mnli"}
    gold = np.asarray(task.splits["test"].gold)
    expected_positive = {"mrpc": gold >= 3, "qnli": gold >= 3, "mnli": gold >= 3.4}
    mteb = _mteb()
    for name, record in records.items():
        similarity = np.asarray(record["pairs"]["similarity"])
        positive = expected_positive[name]
        index = record["task"]["classes"].index(record["task"]["positive"])
        assert list(np.asarray(record["pairs"]["gold"]) == index) == list(positive), name
        metrics = record["scores"]["metrics"]
        assert metrics["ap"]["value"] == pytest.approx(100 * average_precision_score(positive, similarity))
        assert metrics["roc_auc"]["value"] == pytest.approx(100 * roc_auc_score(positive, similarity))
        best, _ = mteb._find_best_acc_and_threshold(None, list(similarity), positive.astype(int), True)
        assert metrics["accuracy_best"]["value"] == pytest.approx(100 * best)
        best_f1, *_ = mteb._find_best_f1_and_threshold(None, list(similarity), positive.astype(int), True)
        assert metrics["f1_best"]["value"] == pytest.approx(100 * best_f1)
        threshold = record["scores"]["threshold"]
        assert metrics["f1"]["value"] == pytest.approx(100 * f1_score(positive, similarity >= threshold["f1"]))
        assert record["task"]["split"] == ("dev_matched" if name == "mnli" else "dev")
    # --pair-thresholds none: no threshold split is read or encoded; accuracy / F1 only at the
    # scored split's best threshold (§), AP and ROC AUC unchanged
    code, _, err = bench(
        "--methods",
        "avg",
        "--source",
        "glue",
        "--glue-dir",
        str(glue),
        "--tasks",
        "mrpc",
        "--backbone",
        str(tiny_bert),
        "--bootstrap",
        "100",
        "--pair-thresholds",
        "none",
        "--output-dir",
        str(tmp_path / "none"),
    )
    assert code == 0, err
    (path,) = (tmp_path / "none" / "runs").glob("*.json")
    record = json.loads(path.read_text())
    assert record["scores"]["decision"] == "none" and record["scores"]["threshold"] is None
    assert record["scores"]["metrics"]["accuracy"] == {"value": None, "ci95": None}
    assert record["scores"]["metrics"]["ap"] == records["mrpc"]["scores"]["metrics"]["ap"]


@pytest.mark.heavy
def test_the_gate_reads_a_labelled_tasks_main_score(bench, tmp_path, senteval_root, tiny_bert):
    """--baseline compares the main score (AP) of a labelled task as it does Spearman: the same
    run passes against itself; a baseline AP 20 points higher is a regression (exit 1)."""
    import csv

    path, _ = _labelled_file(tmp_path, senteval_root)
    args = ("--methods", "avg", "--tasks", f"file:{path}", "--backbone", str(tiny_bert), "--bootstrap", "200")
    assert bench(*args)[0] == 0
    board = tmp_path / "out" / "leaderboard.csv"
    code, out, err = bench(*args, "--baseline", str(board), "--output-dir", str(tmp_path / "again"))
    assert code == 0, err
    with board.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["metric"] == "ap"
    rows[0]["pairs_with_label"] = str(float(rows[0]["pairs_with_label"]) + 20)
    higher = tmp_path / "higher.csv"
    with higher.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    code, out, err = bench(*args, "--baseline", str(higher), "--output-dir", str(tmp_path / "third"))
    assert code == 1, out + err


def test_the_encode_line_counts_the_threshold_split(bench, tmp_path, senteval_root, tiny_bert):
    """The threshold split is encoded with the scored one, and the encode line says so: its counts
    add up to the unique sentences; --pair-thresholds none leaves it out."""
    path, task = _labelled_file(tmp_path, senteval_root)
    test = set(task.splits["test"].sentences())
    train = set(task.splits["train"].sentences()) - test
    args = ("--methods", "avg", "--tasks", f"file:{path}", "--backbone", str(tiny_bert), "--dry-run")
    code, out, err = bench(*args)
    assert code == 0, err
    assert (f"{len(test | train)} unique sentences: pairs_with_label test {len(test)} (scored: avg); "
            f"pairs_with_label train {len(train)} (accuracy / F1 thresholds)") in out + err
    code, out, err = bench(*args, "--pair-thresholds", "none")
    assert code == 0, err
    assert f"{len(test)} unique sentences: pairs_with_label test {len(test)} (scored: avg); views" in out + err


@pytest.mark.heavy
def test_an_mteb_pair_classification_task_runs_through_the_mteb_source(bench, tmp_path, senteval_root, tiny_bert):
    """--source mteb on TwitterURLCorpus (its hub copy: the fixture's STS-B test pairs, labelled):
    no threshold split, so accuracy / F1 only at the scored split's best threshold (§); the MTEB
    result file holds MTEB's own metrics of the record's cosines, under MTEB's task name."""
    from harness.core.data.tasks import get_task, load_task

    task = load_task(get_task("stsb"), "senteval", ["test"], locations={"senteval": str(senteval_root)})
    data = task.splits["test"]
    folder = tmp_path / "hub" / "twitterurlcorpus-pairclassification"
    folder.mkdir(parents=True)
    rows = [{"sent1": a, "sent2": b, "labels": int(g >= 3)} for a, b, g in zip(data.s1, data.s2, data.gold)]
    folder.joinpath("test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    code, _, err = bench("--methods", "avg", "--source", "mteb", "--tasks", "TwitterURLCorpus",
                           "--hub-root", str(tmp_path / "hub"), "--backbone", str(tiny_bert), "--bootstrap", "100")
    assert code == 0, err
    (path,) = (tmp_path / "out" / "runs").glob("*.json")
    record = json.loads(path.read_text())
    assert record["task"]["kind"] == "pairclass" and record["scores"]["decision"] == "none"
    assert record["scores"]["metrics"]["accuracy"]["value"] is None
    similarity = np.asarray(record["pairs"]["similarity"])
    labels = np.asarray([int(g >= 3) for g in data.gold])
    cls = _mteb()
    theirs = cls._compute_metrics_values(cls.__new__(cls), list(similarity), labels, True)
    assert record["scores"]["metrics"]["accuracy_best"]["value"] == pytest.approx(100 * theirs["accuracy"])
    (result,) = (tmp_path / "out" / "mteb").rglob("TwitterURLCorpus.json")
    entry = json.loads(result.read_text())["scores"]["test"][0]
    assert entry["main_score"] == pytest.approx(theirs["ap"], abs=1e-6)
    assert entry["cosine_f1"] == pytest.approx(theirs["f1"], abs=1e-6)
    # written without importing mteb, and byte for byte what mteb's TaskResult writes of it
    from mteb import TaskResult

    TaskResult.from_disk(result).to_disk(tmp_path / "again.json")
    assert result.read_text() == (tmp_path / "again.json").read_text() + "\n"


def test_pair_metrics_csv_gives_the_scored_splits_best_thresholds_from_the_records_pairs():
    """Issue 50: ``accuracy_best §`` and ``f1_best §`` carry their threshold in pair_metrics.csv,
    found again in the record's pairs (not stored): MTEB's best cut of the scored similarities,
    and a brute-force search over every cut reaches the metric's value there. The positive class
    is the record's (index 0 here: reading it as 1 would give other cuts)."""
    from harness.runner.tables.leaderboard import pair_metric_rows

    mteb = _mteb()
    rng = np.random.default_rng(11)
    positive = rng.integers(0, 2, 60).astype(bool)
    similarity = np.round(rng.normal(size=60) + 0.9 * positive, 1)  # ties, as real cosines have
    gold = np.where(positive, 0.0, 1.0)  # classes ["yes", "no"]: "yes", the positive one, is index 0
    scores = score_labelled(similarity, gold, 0, bootstrap=0)
    group = {"aggregation": "all", "source": "packaged", "dtype": "fp32", "max_length": 128,
             "first_last_layers": [1, -1], "prompt": None}
    record = {
        "created": "2026-12-03T00:00:00",
        "method": {"name": "avg", "label": "avg", "kind": "embedding", "spec": {"backbone": "m"}},
        "fit": None,
        "protocol": group,
        "task": {"name": "pairs", "title": "pairs", "fingerprint": "f", "n_pairs": 60, "source": "file",
                 "kind": "pairclass", "classes": ["yes", "no"], "positive": "yes"},
        "scores": {"main_score": "ap", "metrics": scores.metrics, "decision": "threshold:train",
                   "threshold": {"accuracy": 0.25, "f1": -0.5}},
        "pairs": {"similarity": [float(x) for x in similarity], "gold": [float(g) for g in gold], "subset": None},
    }
    rows = {row["metric_name"]: row for row in pair_metric_rows([record])}
    labels = positive.astype(int)
    _, accuracy_cut = mteb._find_best_acc_and_threshold(None, list(similarity), labels, True)
    *_, f1_cut = mteb._find_best_f1_and_threshold(None, list(similarity), labels, True)
    assert rows["accuracy_best §"]["threshold"] == pytest.approx(accuracy_cut, abs=1e-12)
    assert rows["f1_best §"]["threshold"] == pytest.approx(f1_cut, abs=1e-12)
    # brute force: every cut between two distinct similarities, at its midpoint
    values = np.unique(similarity)
    cuts = (values[1:] + values[:-1]) / 2
    best_accuracy = max(accuracy_score(labels, similarity >= c) for c in cuts)
    best_f1 = max(f1_score(labels, similarity >= c) for c in cuts)
    accuracy_at = accuracy_score(labels, similarity >= rows["accuracy_best §"]["threshold"])
    f1_at = f1_score(labels, similarity >= rows["f1_best §"]["threshold"])
    assert 100 * accuracy_at == pytest.approx(100 * best_accuracy)
    assert 100 * f1_at == pytest.approx(100 * best_f1)
    assert rows["accuracy_best §"]["value"] == pytest.approx(100 * best_accuracy)
    assert rows["f1_best §"]["value"] == pytest.approx(100 * best_f1)
    # the threshold split's thresholds stay the record's
    assert (rows["accuracy"]["threshold"], rows["f1"]["threshold"]) == (0.25, -0.5)
    assert all(math.isnan(rows[name]["threshold"]) for name in ("ap", "roc_auc"))
