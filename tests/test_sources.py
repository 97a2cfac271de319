from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.core.data.fitsets import build_fit_set
from harness.core.data.tasks import TASKS, load_task
from harness.core.errors import UserError


def load(name, source, splits=("test",), **locations):
    return load_task(TASKS[name], source, list(splits), locations=locations)


def test_senteval_sts_year_keeps_subsets_in_senteval_order(senteval_root):
    task = load("sts12", "senteval", senteval=str(senteval_root))
    sizes = task.eval.subset_sizes()
    assert list(sizes) == ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"]
    assert set(sizes.values()) == {6}
    assert task.eval.origin.endswith("STS12-en-test")


def test_senteval_drops_pairs_with_an_empty_gold_score(senteval_root):
    task = load("sts15", "senteval", senteval=str(senteval_root))
    assert len(task.eval) == 5 * 6  # the fixture adds one unscored line per subset
    assert "an unscored pair" not in task.eval.s1


def test_senteval_accepts_the_checkout_root_as_well_as_downstream(senteval_root):
    checkout = senteval_root.parent.parent
    assert len(load("sts13", "senteval", senteval=str(checkout)).eval) == 18


def test_senteval_stsb_and_sick_read_every_split(senteval_root):
    stsb = load("stsb", "senteval", ("train", "dev", "test"), senteval=str(senteval_root))
    sick = load("sickr", "senteval", ("train", "dev", "test"), senteval=str(senteval_root))
    assert {k: len(v) for k, v in stsb.splits.items()} == {"train": 12, "dev": 12, "test": 12}
    assert len(sick.eval) == 12 and sick.eval.gold[0] >= 1.0  # header line skipped


def test_senteval_normalizes_whitespace_like_senteval(tmp_path):
    folder = tmp_path / "STS" / "STS16-en-test"
    folder.mkdir(parents=True)
    for subset in TASKS["sts16"].place("senteval")["subsets"]:
        (folder / f"STS.input.{subset}.txt").write_text("a  man   is\tthe dog \n", encoding="utf-8")
        (folder / f"STS.gs.{subset}.txt").write_text("3\n", encoding="utf-8")
    task = load("sts16", "senteval", senteval=str(tmp_path))
    assert task.eval.s1[0] == "a man is" and task.eval.s2[0] == "the dog"


def test_senteval_missing_file_is_named(tmp_path, senteval_root):
    (tmp_path / "STS" / "STS14-en-test").mkdir(parents=True)
    with pytest.raises(UserError, match=r"missing STS/STS14-en-test/STS.input.deft-forum.txt"):
        load("sts14", "senteval", senteval=str(tmp_path))


def test_senteval_malformed_row_names_file_and_line(tmp_path):
    folder = tmp_path / "STS" / "STS16-en-test"
    folder.mkdir(parents=True)
    for subset in TASKS["sts16"].place("senteval")["subsets"]:
        (folder / f"STS.input.{subset}.txt").write_text("a b\tc d\nno tab here\n", encoding="utf-8")
        (folder / f"STS.gs.{subset}.txt").write_text("1\n2\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"STS.input.answer-answer.txt:2: expected 2 tab-separated sentences"):
        load("sts16", "senteval", senteval=str(tmp_path))


def test_senteval_empty_sentence_and_bad_score_are_reported(tmp_path):
    folder = tmp_path / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    (folder / "sts-test.csv").write_text("g\tf\ty\t1\t2.0\t \tsecond\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"sts-test.csv:1: sentence1 is empty"):
        load("stsb", "senteval", senteval=str(tmp_path))
    (folder / "sts-test.csv").write_text("g\tf\ty\t1\tfive\tfirst\tsecond\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"sts-test.csv:1: expected a numeric gold score, got 'five'"):
        load("stsb", "senteval", senteval=str(tmp_path))


def test_senteval_dir_that_is_not_senteval(tmp_path):
    with pytest.raises(UserError, match="found neither STS/ nor SICK/"):
        load("sts12", "senteval", senteval=str(tmp_path))
    with pytest.raises(UserError, match="no such directory"):
        load("sts12", "senteval", senteval=str(tmp_path / "nope"))
    with pytest.raises(UserError, match="needs --senteval-dir"):
        load("sts12", "senteval")


def test_hub_loader_reads_mteb_columns_from_a_local_folder(hub_root):
    task = load("stsb", "hub", ("train", "dev", "test"), hub=str(hub_root))
    assert set(task.splits) == {"train", "dev", "test"}  # dev is MTEB's "validation"
    assert task.eval.subsets is None and len(task.eval) == 10
    sts12 = load("sts12", "hub", ("test",), hub=str(hub_root))
    assert len(sts12.eval) == 10


def test_hub_loader_reports_missing_columns(tmp_path):
    folder = tmp_path / "sickr-sts"
    folder.mkdir()
    (folder / "test.jsonl").write_text(json.dumps({"sentence1": "a", "sentence2": "b"}) + "\n")
    with pytest.raises(UserError, match="missing column"):
        load("sickr", "hub", hub=str(tmp_path))


def test_hub_unreachable_is_one_clear_line():
    stsb = TASKS["stsb"]
    spec = replace(stsb, where={**stsb.where, "hub": {"path": "sts-bench-tests/no-such-dataset"}})
    with pytest.raises(UserError, match=r"could not load sts-bench-tests/no-such-dataset .*offline, use"):
        load_task(spec, "hub", ["test"])


def test_packaged_stsb_has_the_published_split_sizes():
    task = load("stsb", "packaged", ("train", "dev", "test"))
    assert {k: len(v) for k, v in task.splits.items()} == {"train": 5749, "dev": 1500, "test": 1379}
    assert task.eval.s1[0] == "A girl is styling her hair."  # the real test split, not dev
    assert len(task.eval.fingerprint) == 64


def test_packaged_source_only_has_stsb():
    with pytest.raises(UserError, match=r"STS12 is not packaged offline; pass --source senteval"):
        load("sts12", "packaged")


def test_fingerprint_changes_with_content(senteval_root, tmp_path):
    a = load("sts13", "senteval", senteval=str(senteval_root))
    b = load("sts13", "senteval", senteval=str(senteval_root))
    assert a.eval.fingerprint == b.eval.fingerprint
    changed = a.eval.__class__(a.eval.s1, a.eval.s2, (9.0, *a.eval.gold[1:]), a.eval.subsets, "x")
    assert changed.fingerprint != a.eval.fingerprint


def test_fit_sets(senteval_root, tmp_path):
    task = load("stsb", "senteval", ("train", "dev", "test"), senteval=str(senteval_root))
    target, test = build_fit_set("target", task), build_fit_set("test", task)
    assert set(test.sentences) < set(target.sentences)
    assert set(build_fit_set("train", task).sentences) == set(task.sentences(["train"]))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one sentence\n\ntwo sentences\none sentence\n", encoding="utf-8")
    fit = build_fit_set(f"corpus:{corpus}", task)
    assert fit.sentences == ("one sentence", "two sentences") and fit.name == "corpus:corpus.txt"
    sts12 = load("sts12", "senteval", senteval=str(senteval_root))
    with pytest.raises(UserError, match="no train split"):
        build_fit_set("train", sts12)
    with pytest.raises(UserError, match="no such file"):
        build_fit_set(f"corpus:{tmp_path / 'missing.txt'}", task)


def write_nli(root, rows_per_set=5):
    for name in ("snli", "multi_nli"):
        folder = root / name
        folder.mkdir(parents=True)
        rows = [{"premise": f"{name} premise {i}", "hypothesis": f"shared hypothesis {i % 2}", "label": 0}
                for i in range(rows_per_set)]
        (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def test_nli_fit_set_reads_snli_and_multinli_premises_and_hypotheses(tmp_path, senteval_root):
    from harness.core.data.fitsets import read_nli

    read_nli.cache_clear()
    task = load("stsb", "senteval", senteval=str(senteval_root))
    fit = build_fit_set("nli", task, {"hub": str(write_nli(tmp_path / "hub"))})
    assert fit.name == "nli" and len(fit.sentences) == 5 + 5 + 2  # hypotheses repeat across the two sets
    assert "snli premise 0" in fit.sentences and "multi_nli premise 4" in fit.sentences
    with pytest.raises(UserError, match=r"--fit-set nli: could not load .*--hub-root DIR"):
        build_fit_set("nli", task, {"hub": str(tmp_path / "empty")})
