"""The sentence-pair classification tasks from each source that has them, on fixtures built here in
each layout: GLUE's own folder (``--source glue``, what download_glue_data.py writes), a local hub
folder (``--source hub``: nyu-mll/glue, stanfordnlp/snli, nyu-mll/multi_nli, MTEB's copies) and
MTEB's task objects (``--source mteb``). Pairs and labels are checked against the fixture's
contents, labels as the class indices of each dataset's label order (QNLI's and RTE's 0 is
entailment)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from harness.core.data.sources import SOURCES
from harness.core.data.tasks import TASKS, get_task, load_task
from harness.core.errors import UserError

# Each GLUE task's fixture rows: (sentence 1, sentence 2, the label as the file writes it).
MRPC = [("He said so.", "So he said.", "1"), ("A cat sat.", "The market fell 3%.", "0"),
        ('Quotes " stay "as written".', "Tabs\u00a0and  spaces  too", "1")]
QQP = [("How do I learn Python?", "What is the best way to learn Python?", "1"),
       ("Why is the sky blue?", "How tall is Everest?", "0")]
QNLI = [("Who wrote Hamlet?", "Hamlet was written by Shakespeare.", "entailment"),
        ("When did it rain?", "The sun is a star.", "not_entailment"),
        ("What is H2O?", "Water is H2O.", "entailment")]
RTE = [("Paris is the capital of France.", "France has a capital.", "entailment"),
       ("A dog barked.", "A cat meowed.", "not_entailment")]
MNLI_MATCHED = [("The man is sleeping.", "A person rests.", "entailment"),
                ("The man is sleeping.", "A woman dances.", "neutral"),
                ("The man is sleeping.", "The man is awake.", "contradiction")]
MNLI_MISMATCHED = [("Prices rose in May.", "Prices fell in May.", "contradiction"),
                   ("Prices rose in May.", "Something happened in May.", "entailment")]
SNLI = [("A boy jumps.", "A child moves.", "entailment"), ("A boy jumps.", "A boy sleeps.", "contradiction"),
        ("A boy jumps.", "A boy jumps high.", "-"), ("A boy jumps.", "The boy is happy.", "neutral")]


def mnli_lines(rows, labels=1):
    """MNLI's and SNLI's layout: parses, then sentence1, sentence2, label1..labelN, gold_label."""
    header = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
              "sentence1_parse", "sentence2_parse", "sentence1", "sentence2",
              *[f"label{k}" for k in range(1, labels + 1)], "gold_label"]
    lines = ["\t".join(header)]
    for i, (a, b, gold) in enumerate(rows):
        lines.append("\t".join([str(i), "1", f"{i}e", "fiction", f"( {a} )", f"( {b} )", f"(ROOT {a})",
                                f"(ROOT {b})", a, b, *[gold] * labels, gold]))
    return lines


def write(path: Path, lines: list[str], bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")


def write_glue(root: Path) -> Path:
    """The folder download_glue_data.py writes (glue_data/), each train split a copy of dev."""
    data = root / "glue_data"
    for split in ("train", "dev"):
        write(data / "MRPC" / f"{split}.tsv", ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
                                               *[f"{g}\t{i}\t{i + 100}\t{a}\t{b}" for i, (a, b, g) in enumerate(MRPC)]],
              bom=True)  # the original MRPC file starts with a byte-order mark, which the script keeps
        write(data / "QQP" / f"{split}.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                                              *[f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{g}"
                                                for i, (a, b, g) in enumerate(QQP)]])
        write(data / "QNLI" / f"{split}.tsv", ["index\tquestion\tsentence\tlabel",
                                               *[f"{i}\t{a}\t{b}\t{g}" for i, (a, b, g) in enumerate(QNLI)]])
        write(data / "RTE" / f"{split}.tsv", ["index\tsentence1\tsentence2\tlabel",
                                              *[f"{i}\t{a}\t{b}\t{g}" for i, (a, b, g) in enumerate(RTE)]])
    write(data / "MNLI" / "train.tsv", mnli_lines(MNLI_MATCHED + MNLI_MISMATCHED))
    write(data / "MNLI" / "dev_matched.tsv", mnli_lines(MNLI_MATCHED, labels=5))
    write(data / "MNLI" / "dev_mismatched.tsv", mnli_lines(MNLI_MISMATCHED, labels=5))
    for split in ("train", "dev", "test"):
        write(data / "SNLI" / f"{split}.tsv", mnli_lines(SNLI, labels=5 if split != "train" else 1))
    return root


def load(name, source, splits=(), **locations):
    """Task ``name`` from ``source``: its eval split (a run always loads it) and ``splits``."""
    spec = TASKS[name]
    return load_task(spec, source, list(dict.fromkeys([spec.eval_split, *splits])), locations=locations)


def pairs_of(split):
    return list(zip(split.s1, split.s2, split.gold))


# -- GLUE's own folder ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("task", "split", "rows", "gold"), [
    ("mrpc", "dev", MRPC, [1.0, 0.0, 1.0]),  # 0 not_equivalent, 1 equivalent
    ("qqp", "dev", QQP, [1.0, 0.0]),  # 0 not_duplicate, 1 duplicate
    ("qnli", "dev", QNLI, [0.0, 1.0, 0.0]),  # 0 entailment, 1 not_entailment
    ("rte", "train", RTE, [0.0, 1.0]),
    ("mnli", "dev_matched", MNLI_MATCHED, [0.0, 1.0, 2.0]),  # entailment, neutral, contradiction
    ("mnli-mm", "dev_mismatched", MNLI_MISMATCHED, [2.0, 0.0]),
    ("mnli", "train", MNLI_MATCHED + MNLI_MISMATCHED, [0.0, 1.0, 2.0, 2.0, 0.0]),
])
def test_glue_folder_gives_each_tasks_pairs_and_labels_as_written(tmp_path, task, split, rows, gold):
    root = write_glue(tmp_path)
    loaded = load(task, "glue", [split], glue=str(root))  # the parent of glue_data/ is accepted too
    assert pairs_of(loaded.splits[split]) == [(a, b, g) for (a, b, _), g in zip(rows, gold)]
    assert loaded.splits[split].locate(0).endswith(f"{split}.tsv:2")  # line 1 is the header


def test_glue_sentences_are_kept_as_written(tmp_path):
    loaded = load("mrpc", "glue", glue=str(write_glue(tmp_path) / "glue_data"))
    assert loaded.eval.s1[2] == 'Quotes " stay "as written".'  # no csv quoting: GLUE reads with quotechar=None
    assert loaded.eval.s2[2] == "Tabs\u00a0and  spaces  too"


def test_mnli_and_mnli_mm_share_train_and_score_their_own_dev(tmp_path):
    root = str(write_glue(tmp_path))
    matched = load("mnli", "glue", ["train", "dev_matched"], glue=root)
    mismatched = load("mnli-mm", "glue", ["train", "dev_mismatched"], glue=root)
    assert matched.splits["train"] == mismatched.splits["train"]
    assert set(matched.splits) == {"train", "dev_matched"} and set(mismatched.splits) == {"train", "dev_mismatched"}
    assert matched.eval.s2 == ("A person rests.", "A woman dances.", "The man is awake.")
    assert mismatched.eval.s2 == ("Prices fell in May.", "Something happened in May.")


def test_snli_drops_pairs_without_a_gold_label(tmp_path):
    loaded = load("snli", "glue", ["train", "dev", "test"], glue=str(write_glue(tmp_path)))
    for split in ("train", "dev", "test"):
        assert pairs_of(loaded.splits[split]) == [("A boy jumps.", "A child moves.", 0.0),
                                                  ("A boy jumps.", "A boy sleeps.", 2.0),
                                                  ("A boy jumps.", "The boy is happy.", 1.0)]
    assert loaded.eval.locate(2).endswith("SNLI/test.tsv:5")  # the '-' row (line 4) left out, lines kept


def test_qqp_skips_lines_with_missing_fields_as_glues_processor_does(tmp_path, caplog):
    root = write_glue(tmp_path)
    path = root / "glue_data" / "QQP" / "dev.tsv"
    lines = path.read_text(encoding="utf-8").splitlines()
    # a question broken over two lines by a stray newline (as in the real train file), and an empty one
    lines[2:2] = ["7\t14\t15\tHow do I", "cook rice?\tWhat is rice?\t0", "8\t16\t17\t\tWhat is rice?\t0"]
    write(path, lines)
    with caplog.at_level(logging.WARNING, logger="sts_bench.sources"):
        loaded = load("qqp", "glue", glue=str(root))
    assert pairs_of(loaded.eval) == [(a, b, float(g)) for a, b, g in QQP]
    (record,) = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert "QQP/dev.tsv: skipped 3 line(s) with missing fields or an empty question" in record.getMessage()
    assert loaded.eval.locate(1).endswith("QQP/dev.tsv:6")


@pytest.mark.parametrize(("task", "file", "line", "message"), [
    ("rte", "RTE/dev.tsv", "9\tonly two fields",
     r"RTE/dev.tsv:4: expected 4 tab-separated fields as in the header, got 2"),
    ("rte", "RTE/dev.tsv", "9\ta\tb\tentailment\textra", r"RTE/dev.tsv:4: expected 4 tab-separated fields"),
    ("qnli", "QNLI/dev.tsv", "9\tq?\ts.\tmaybe",
     r"QNLI/dev.tsv:5: label 'maybe' is not a class of QNLI; expected entailment, not_entailment"),
    ("mrpc", "MRPC/dev.tsv", "2\t1\t2\ta\tb",
     r"MRPC/dev.tsv:5: label '2' is not a class of MRPC; expected 0..1 \(0 not_equivalent, 1 equivalent\)"),
    ("qnli", "QNLI/dev.tsv", "9\t \tsentence.\tentailment", r"QNLI/dev.tsv:5: question is empty"),
    ("mnli", "MNLI/dev_matched.tsv", "\t".join(["x"] * 16).replace("x", "entailment", 1),
     r"MNLI/dev_matched.tsv:5: label 'x' is not a class of MNLI; expected entailment, neutral, contradiction"),
])
def test_a_malformed_glue_row_is_one_error_naming_file_and_line(tmp_path, task, file, line, message):
    root = write_glue(tmp_path)
    path = root / "glue_data" / file
    path.write_text(path.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=message):
        load(task, "glue", glue=str(root))


def test_a_missing_glue_file_or_folder_is_named(tmp_path):
    root = write_glue(tmp_path)
    (root / "glue_data" / "MNLI" / "dev_mismatched.tsv").unlink()
    with pytest.raises(UserError, match=r"GLUE dir .*glue_data is missing MNLI/dev_mismatched.tsv \(MNLI-mm's "
                                        r"dev_mismatched split\); fetch it with GLUE's download_glue_data.py"):
        load("mnli-mm", "glue", glue=str(root))
    # a scored split missing is only fetched; a threshold split (GLUE's train) may also be done without (issue 52)
    with pytest.raises(UserError) as missing_dev:
        load("mnli-mm", "glue", glue=str(root))
    assert "--pair-thresholds" not in str(missing_dev.value)
    (root / "glue_data" / "MRPC" / "train.tsv").unlink()
    with pytest.raises(UserError, match=r"is missing MRPC/train.tsv \(MRPC's train split\); fetch it with GLUE's "
                                        r"download_glue_data.py \(--tasks MRPC\); or score without it: "
                                        r"--pair-thresholds none \(and --fit-set test\)$"):
        load("mrpc", "glue", ("train",), glue=str(root))
    with pytest.raises(UserError, match=r"found none of CoLA, SST-2, MRPC.* in it \(or in glue_data/\)"):
        load("mrpc", "glue", glue=str(tmp_path / "glue_data" / "MRPC"))
    with pytest.raises(UserError, match=r"--glue-dir .*nowhere: no such directory"):
        load("mrpc", "glue", glue=str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"--source glue needs --glue-dir DIR"):
        load("mrpc", "glue")
    with pytest.raises(UserError, match=r"STS-B is not a GLUE task \(it has no 'glue' entry\)"):
        load("stsb", "glue", glue=str(root))


def test_a_glue_file_of_another_layout_names_the_columns_it_lacks(tmp_path):
    root = write_glue(tmp_path)
    write(root / "glue_data" / "RTE" / "dev.tsv", ["index\tpremise\thypothesis\tlabel", "0\ta\tb\tentailment"])
    with pytest.raises(UserError, match=r"RTE/dev.tsv:1: the header lacks column\(s\) sentence1, sentence2 "
                                        r"\(it has index, premise, hypothesis, label\)"):
        load("rte", "glue", glue=str(root))


def test_glue_dir_is_the_glue_sources_data_dir(tmp_path, bench):
    from harness.runner.cli.parser import from_cli

    cfg, _ = from_cli(["--glue-dir", "/g", "--hub-root", "/h"])
    assert cfg.locations() == {"glue": "/g", "hub": "/h"}
    assert SOURCES["glue"].location_in(cfg.locations()) == "/g"
    code, _, err = bench("--source", "glue", "--tasks", "mrpc", "--methods", "random", "--dry-run")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: --source glue needs --glue-dir DIR (the folder GLUE's download_glue_data.py writes "
        "(MRPC/, QQP/, MNLI/ ...))")
    code, _, err = bench("--glue-dir", "/a", "--data-dir", "glue=/b", "--tasks", "mrpc", "--dry-run")
    assert code == 2 and "name two values of glue" in err
    code, _, err = bench("--tasks", "mrpc", "--methods", "random", "--dry-run")  # --source packaged
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: MRPC is not packaged offline; pass --source glue --glue-dir DIR or --source hub")


# -- a local hub folder ----------------------------------------------------------------------------------------


def jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def parquet(path: Path, rows: list[dict]) -> None:
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(rows).to_parquet(str(path))


def hub_rows(rows, columns, labels):
    """Rows of a hub dataset: the sentences under ``columns`` and each label's class index."""
    return [{columns[0]: a, columns[1]: b, "label": labels.index(g), "idx": i} for i, (a, b, g) in enumerate(rows)]


NLI = ("entailment", "neutral", "contradiction")


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory) -> Path:
    """A hub root in the layouts a local copy comes in: a snapshot of the hub repository (jsonl and
    parquet shards per config) and a save_to_disk folder."""
    import datasets

    root = tmp_path_factory.mktemp("hub")
    glue = root / "glue"
    for split in ("train", "validation"):
        jsonl(glue / "mrpc" / f"{split}.jsonl", [{"sentence1": a, "sentence2": b, "label": int(g), "idx": i}
                                                 for i, (a, b, g) in enumerate(MRPC)])
        parquet(glue / "qqp" / f"{split}-00000-of-00001.parquet",
                [{"question1": a, "question2": b, "label": int(g), "idx": i} for i, (a, b, g) in enumerate(QQP)])
        parquet(glue / "qnli" / f"{split}-00000-of-00001.parquet",
                hub_rows(QNLI, ("question", "sentence"), ("entailment", "not_entailment")))
    rte_rows = hub_rows(RTE, ("sentence1", "sentence2"), ("entailment", "not_entailment"))
    rte = {split: datasets.Dataset.from_list(rte_rows) for split in ("train", "validation")}
    datasets.DatasetDict(rte).save_to_disk(str(glue / "rte"))
    for split, rows in (("validation_matched", MNLI_MATCHED), ("validation_mismatched", MNLI_MISMATCHED),
                        ("train", MNLI_MATCHED + MNLI_MISMATCHED)):
        parquet(glue / "mnli" / f"{split}-00000-of-00001.parquet", hub_rows(rows, ("premise", "hypothesis"), NLI))
    for split in ("train", "validation", "test"):
        rows = [{"premise": a, "hypothesis": b, "label": NLI.index(g) if g != "-" else -1} for a, b, g in SNLI]
        parquet(root / "snli" / "plain_text" / f"{split}-00000-of-00001.parquet", rows)
    return root


@pytest.mark.parametrize(("task", "split", "rows", "gold"), [
    ("mrpc", "dev", MRPC, [1.0, 0.0, 1.0]),
    ("mrpc", "train", MRPC, [1.0, 0.0, 1.0]),
    ("qqp", "dev", QQP, [1.0, 0.0]),
    ("qnli", "dev", QNLI, [0.0, 1.0, 0.0]),
    ("rte", "dev", RTE, [0.0, 1.0]),  # a save_to_disk folder
    ("mnli", "dev_matched", MNLI_MATCHED, [0.0, 1.0, 2.0]),
    ("mnli-mm", "dev_mismatched", MNLI_MISMATCHED, [2.0, 0.0]),
    ("snli", "test", [r for r in SNLI if r[2] != "-"], [0.0, 2.0, 1.0]),  # label -1 dropped
])
def test_hub_folder_gives_each_tasks_pairs_and_labels(hub_folder, task, split, rows, gold):
    loaded = load(task, "hub", [split], hub=str(hub_folder))
    assert pairs_of(loaded.splits[split]) == [(a, b, g) for (a, b, _), g in zip(rows, gold)]


def test_glue_folder_and_hub_folder_give_the_same_pairs(hub_folder, tmp_path):
    glue = str(write_glue(tmp_path))
    for task in ("mrpc", "qqp", "qnli", "rte", "mnli", "mnli-mm", "snli"):
        from_hub = load(task, "hub", hub=str(hub_folder)).eval
        assert load(task, "glue", glue=glue).eval.fingerprint == from_hub.fingerprint, task


def test_mnli_is_read_from_multi_nli_without_glue_mnli(hub_folder, tmp_path):
    root = tmp_path / "hub"
    for split, rows in (("validation_matched", MNLI_MATCHED), ("validation_mismatched", MNLI_MISMATCHED)):
        parquet(root / "multi_nli" / "data" / f"{split}-00000-of-00001.parquet",
                hub_rows(rows, ("premise", "hypothesis"), NLI))
    (root / "glue" / "mrpc").mkdir(parents=True)  # glue/ without mnli/
    loaded = load("mnli-mm", "hub", hub=str(root))
    assert pairs_of(loaded.eval) == [(a, b, float(NLI.index(g))) for a, b, g in MNLI_MISMATCHED]
    assert loaded.eval.origin.endswith("multi_nli/data")
    assert loaded.eval.fingerprint == load("mnli-mm", "hub", hub=str(hub_folder)).eval.fingerprint


def test_hub_folder_without_the_dataset_or_its_split_is_named(hub_folder, tmp_path):
    with pytest.raises(UserError, match=r"--hub-root .*: found no glue/ or multi_nli/ holding MNLI's data"):
        load("mnli", "hub", hub=str(tmp_path))
    jsonl(tmp_path / "glue" / "mrpc" / "validation.jsonl", [{"sentence1": "a", "sentence2": "b", "label": 1}])
    with pytest.raises(UserError, match=r"--hub-root: .*glue/mrpc holds no train split of nyu-mll/glue \(expected "
                                        r"train.jsonl, train-\*.parquet"):
        load("mrpc", "hub", ["train"], hub=str(tmp_path))


def test_a_bad_hub_row_is_one_error_naming_the_row(tmp_path):
    jsonl(tmp_path / "glue" / "mrpc" / "validation.jsonl",
          [{"sentence1": "a", "sentence2": "b", "label": 1}, {"sentence1": "c", "sentence2": "d", "label": 3}])
    with pytest.raises(UserError, match=r"glue/mrpc \[validation\] row 1: label '3' is not a class of MRPC"):
        load("mrpc", "hub", hub=str(tmp_path))
    jsonl(tmp_path / "glue" / "qqp" / "validation.jsonl", [{"question1": "a", "question2": "b", "is_duplicate": 1}])
    with pytest.raises(UserError, match=r"glue/qqp split validation: missing column\(s\) label; expected question1, "
                                        r"question2, label"):
        load("qqp", "hub", hub=str(tmp_path))


# -- MTEB's PairClassification tasks ---------------------------------------------------------------------------

SPRINT_TEST = [("how to reset my phone", "reset phone steps", 1), ("billing question", "signal is weak", 0),
               ("unlock a sim", "sim unlock code", 1)]
SPRINT_DEV = [("voicemail setup", "set up voicemail", 1), ("roaming fees", "screen cracked", 0)]
TWITTER = [("nice game tonight", "great game tonight", 1), ("rain again", "new phone who dis", 0)]


@pytest.fixture(scope="module")
def mteb_folder(tmp_path_factory) -> Path:
    """MTEB's hub copies as their pinned revisions store them: Sprint and TwitterSemEval2015 as
    one row of lists per split (MTEB's older layout), TwitterURLCorpus one row per pair."""
    root = tmp_path_factory.mktemp("mteb-hub")

    def lists(rows):
        return [{"sent1": [a for a, _, _ in rows], "sent2": [b for _, b, _ in rows], "labels": [g for _, _, g in rows]}]

    jsonl(root / "sprintduplicatequestions-pairclassification" / "test.jsonl", lists(SPRINT_TEST))
    jsonl(root / "sprintduplicatequestions-pairclassification" / "validation.jsonl", lists(SPRINT_DEV))
    jsonl(root / "twittersemeval2015-pairclassification" / "test.jsonl", lists(TWITTER))
    jsonl(root / "twitterurlcorpus-pairclassification" / "test.jsonl",
          [{"sent1": a, "sent2": b, "labels": g} for a, b, g in TWITTER])
    return root


@pytest.mark.parametrize("source", ["hub", "mteb"])
@pytest.mark.parametrize(("task", "split", "rows"), [
    ("sprintduplicatequestions", "test", SPRINT_TEST),
    ("sprintduplicatequestions", "dev", SPRINT_DEV),
    ("twittersemeval2015", "test", TWITTER),
    ("twitterurlcorpus", "test", TWITTER),
])
def test_mteb_pair_classification_tasks_from_the_hub_and_through_mteb(mteb_folder, source, task, split, rows):
    if source == "mteb":
        pytest.importorskip("mteb")
    loaded = load(task, source, [split], hub=str(mteb_folder))
    assert pairs_of(loaded.splits[split]) == [(a, b, float(g)) for a, b, g in rows]


def test_mteb_names_the_declared_pair_tasks_and_refuses_others(mteb_folder):
    pytest.importorskip("mteb")
    assert get_task("TwitterURLCorpus", "mteb") is TASKS["twitterurlcorpus"]
    assert get_task("SprintDuplicateQuestions", "mteb").classes == ("not_duplicate", "duplicate")
    with pytest.raises(UserError, match=r"SprintDuplicateQuestions-VN is a PairClassification task; --source mteb "
                                        r"reads STS tasks .* and the PairClassification tasks declared"):
        get_task("SprintDuplicateQuestions-VN", "mteb")


def test_mteb_pair_rows_with_a_bad_label_or_missing_folder_are_one_line(tmp_path):
    pytest.importorskip("mteb")
    jsonl(tmp_path / "twitterurlcorpus-pairclassification" / "test.jsonl",
          [{"sent1": "a", "sent2": "b", "labels": 1}, {"sent1": "c", "sent2": "d", "labels": 2}])
    with pytest.raises(UserError, match=r"twitterurlcorpus-pairclassification \[test\] row 1: label '2' is not a "
                                        r"class of TwitterURLCorpus; expected 0..1"):
        load("twitterurlcorpus", "mteb", hub=str(tmp_path))
    with pytest.raises(UserError, match=r"cannot read .*twittersemeval2015-pairclassification .*columns sent1, sent2, "
                                        r"labels"):
        load("twittersemeval2015", "mteb", hub=str(tmp_path))
