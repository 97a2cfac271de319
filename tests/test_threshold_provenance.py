"""Provenance of a labelled task's threshold (issue 50): the rows of the split accuracy / F1
thresholds are chosen on enter the task fingerprint a record carries, its id (file name) and its
MTEB ``dataset_revision``; the protocol names the split that decided. An STS task's fingerprint, and
so its record ids and MTEB revisions, stay the scored split's own."""

from __future__ import annotations

import json

import pytest

from harness.core.data.tasks import get_task, load_task
from harness.runner.records.schema import data_fingerprints, problems, seal
from harness.runner.records.store import current_data


def _write(path, rows):
    path.write_text(
        "sentence1\tsentence2\tlabel\tsplit\n" + "".join(f"{a}\t{b}\t{g}\t{s}\n" for a, b, g, s in rows),
        encoding="utf-8",
    )
    return path


def _rows(senteval_root):
    """STS-B's fixture pairs labelled 1 where gold >= 3: its train and test splits."""
    task = load_task(get_task("stsb"), "senteval", ["train", "test"], locations={"senteval": str(senteval_root)})
    return [
        (a, b, int(g >= 3), split)
        for split in ("train", "test")
        for a, b, g in zip(task.splits[split].s1, task.splits[split].s2, task.splits[split].gold)
    ]


def _flipped(rows):
    """Every train label flipped (the issue's case: threshold accuracy 83.54 → 24.73)."""
    return [(a, b, 1 - g if s == "train" else g, s) for a, b, g, s in rows]


def _records(out):
    return {p.name: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}


def _revision(out):
    (path,) = (out / "mteb").rglob("pairs.json")
    return json.loads(path.read_text())["dataset_revision"]


def test_the_fingerprint_of_a_task_without_an_extra_split_is_its_scored_splits(senteval_root):
    """The old way (SplitData.fingerprint of the scored split) for STS; an extra split's rows move
    it, and only its rows: the split it names, not the others the task has."""
    task = load_task(get_task("stsb"), "senteval", ["train", "dev", "test"], locations={"senteval": str(senteval_root)})
    assert task.fingerprint() == task.fingerprint([]) == task.splits["test"].fingerprint
    with_train = task.fingerprint(["train"])
    assert with_train not in {task.splits[s].fingerprint for s in ("train", "dev", "test")}
    assert task.fingerprint(["dev"]) != with_train
    train = task.splits["train"]
    moved = type(train)(train.s1, train.s2, (5.0 - train.gold[0], *train.gold[1:]), None, train.origin)
    changed = type(task)(task.spec, task.source, {**task.splits, "train": moved})
    assert changed.fingerprint() == task.fingerprint() and changed.fingerprint(["train"]) != with_train


@pytest.mark.heavy
def test_a_train_label_moves_the_record_id_and_mteb_revision(bench, tmp_path, senteval_root, tiny_bert):
    """Flipping the train labels of a labelled pairs file gives a new record (file name, task
    fingerprint) and MTEB dataset_revision; the record names the threshold split and keeps its own
    sha256 and size. Under --pair-thresholds none the train labels key nothing. The STS task of the
    same run keeps the scored split's own fingerprint and none of the new fields."""
    rows = _rows(senteval_root)
    pairs = _write(tmp_path / "pairs.tsv", rows)
    args = ["--methods", "avg", "--tasks", f"file:{pairs}", "stsb", "--source", "senteval"]
    args += ["--senteval-dir", str(senteval_root), "--backbone", str(tiny_bert), "--bootstrap", "0"]
    stsb = load_task(get_task("stsb"), "senteval", ["test"], locations={"senteval": str(senteval_root)})

    def run(out, *extra):
        code, _, err = bench(*args, *extra, "--output-dir", str(out))
        assert code == 0, err
        records = _records(out)
        (labelled,) = [(n, r) for n, r in records.items() if r["task"]["name"] == "pairs"]
        (sts,) = [r for r in records.values() if r["task"]["name"] == "stsb"]
        # STS: the fingerprint as computed before this change, nothing added to what keys its id
        assert sts["task"]["fingerprint"] == stsb.splits["test"].fingerprint
        assert "splits_read" not in sts["task"] and "threshold_split" not in sts["protocol"]
        return labelled, _revision(out)

    own = load_task(get_task(f"file:{pairs}"), "file", ["train", "test"])
    (name, record), revision = run(tmp_path / "a")
    assert record["protocol"]["threshold_split"] == "train"
    assert record["task"]["splits_read"] == {
        s: {"fingerprint": own.splits[s].fingerprint, "n_pairs": len(own.splits[s])} for s in ("test", "train")
    }
    assert record["task"]["fingerprint"] not in (own.splits["test"].fingerprint, "")
    assert revision == f"file-{record['task']['fingerprint'][:12]}"
    # a labelled record written before these fields stays readable, its data the scored split's
    older = {**record, "task": {k: v for k, v in record["task"].items() if k != "splits_read"}}
    older["protocol"] = {k: v for k, v in record["protocol"].items() if k != "threshold_split"}
    older["task"]["fingerprint"] = own.splits["test"].fingerprint
    assert problems(seal(older)) is None and data_fingerprints(older) == {"test": older["task"]["fingerprint"]}

    _write(pairs, _flipped(rows))
    (flipped_name, flipped), flipped_revision = run(tmp_path / "b")
    assert flipped["task"]["splits_read"]["test"] == record["task"]["splits_read"]["test"]
    assert flipped["task"]["splits_read"]["train"]["fingerprint"] != own.splits["train"].fingerprint
    assert flipped_name != name and flipped_revision != revision
    assert flipped["scores"]["threshold"] != record["scores"]["threshold"]

    # --pair-thresholds none: no split but the scored one is read; the train labels key nothing
    (none_name, none), none_revision = run(tmp_path / "c", "--pair-thresholds", "none")
    _write(pairs, rows)
    (again_name, _), again_revision = run(tmp_path / "d", "--pair-thresholds", "none")
    assert none_name == again_name and none_revision == again_revision
    assert none["task"]["fingerprint"] == own.splits["test"].fingerprint and "splits_read" not in none["task"]
    assert none["protocol"]["threshold_split"] is None


def _record(created: str, test: str, train: str | None = None) -> dict:
    """A labelled record as the tables key it: the scored split's sha256 and, when its threshold
    was chosen on train, train's (``task.fingerprint`` then hashes both: here their join)."""
    read = {"test": test, **({"train": train} if train else {})}
    task = {"title": "pairs", "split": "test", "fingerprint": "+".join(read.values())}
    if train:
        task["splits_read"] = {s: {"fingerprint": fp, "n_pairs": 3} for s, fp in read.items()}
    protocol = {"aggregation": "all", "source": "packaged", "dtype": "fp32", "max_length": 128}
    protocol["first_last_layers"] = [1, -1]
    return {"created": created, "task": task, "protocol": protocol, "scores": {"main_score": "ap"}}


def test_one_column_one_dataset_holds_each_split_a_record_read():
    """A classifier's record (no threshold split) and one under --pair-thresholds none sit beside a
    record whose threshold train chose: the same scored pairs. Train's labels changed leave out
    the records that read the older train only; the scored pairs changed leave out all older."""
    thresholded, classifier, untuned = _record("1", "T", "R"), _record("2", "T"), _record("3", "T")
    kept, stale = current_data([thresholded, classifier, untuned])
    assert kept == [thresholded, classifier, untuned] and stale == []
    flipped = _record("4", "T", "R2")
    kept, stale = current_data([thresholded, classifier, untuned, flipped])
    assert kept == [classifier, untuned, flipped]
    assert [(s.older, s.newest, s.records) for s in stale] == [(("T+R",), "T+R2", 1)]
    edited = _record("5", "T2")
    kept, stale = current_data([thresholded, classifier, untuned, flipped, edited])
    assert kept == [edited] and stale[0].older == ("T+R", "T", "T+R2") and stale[0].records == 4
