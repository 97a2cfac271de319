"""Tasks that bring their own data (``--tasks file:PATH``, ``hf:DIR``, ``[[task]]``): read exactly as
the registry's copy of the same pairs, scored in one run and one table with registry tasks, and
refused with ``file:line`` when the data is broken."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures import pairs

from harness.core.data.declared import parse_entry
from harness.core.data.sources.packaged import stsb_dir
from harness.core.data.tasks import TASKS, get_task, load_task
from harness.core.errors import UserError
from harness.runner.cli.parser import from_cli, split_tasks


def stsb_rows(path: Path) -> list[tuple[str, str, str]]:
    """(sentence1, sentence2, score) of an STS-B csv, fields 5, 6, 4 (0-based), score text as written."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            fields = line.split("\t")
            rows.append((fields[5], fields[6], fields[4]))
    return rows


def write_tsv(path: Path, rows, header=("sentence1", "sentence2", "score")) -> Path:
    path.write_text("\t".join(header) + "\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in rows), encoding="utf-8")
    return path


def read(entry: str, splits=("test",)):
    spec = get_task(entry)
    return load_task(spec, "packaged", list(splits))


# -- the same pairs, whatever the format ------------------------------------------------------------

def test_a_tsv_of_the_packaged_stsb_test_is_the_stsb_task(tmp_path):
    stsb = load_task(TASKS["stsb"], "packaged", ["test"]).eval
    mine = read(f"file:{write_tsv(tmp_path / 'pairs.tsv', stsb_rows(stsb_dir() / 'sts-test.csv'))}")
    assert (mine.source, mine.spec.name, len(mine.eval)) == ("file", "pairs", 1379)
    assert mine.eval.s1 == stsb.s1 and mine.eval.s2 == stsb.s2 and mine.eval.gold == stsb.gold
    assert mine.eval.fingerprint == stsb.fingerprint  # content, not path
    assert mine.eval.where[0] == f"{tmp_path / 'pairs.tsv'}:2"  # line 1 is the header


def test_stsb_own_file_read_by_field_numbers(tmp_path):
    """STS-B's file itself: tab-separated, no header, score in field 5 (1-based), sentences in 6 and 7."""
    stsb = load_task(TASKS["stsb"], "packaged", ["test"]).eval
    mine = read(f"file:{stsb_dir() / 'sts-test.csv'}?format=tsv&header=no&score=5&s1=6&s2=7&name=sts-b-file").eval
    assert mine.fingerprint == stsb.fingerprint and mine.gold == stsb.gold


def test_csv_and_jsonl_hold_the_same_pairs_as_the_tsv(tmp_path):
    rows = [("a man, said \"hi\"", "a man said hi", 4.5), ("two dogs", "a cat\non a mat", 1.0),
            ("x y", "y x", 2.25), ("sun", "water", 0.0)]
    with open(tmp_path / "p.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["Sentence1", "Sentence2", "Label"])  # case-insensitive names, label for score
        writer.writerows(rows)
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "score": g}) + "\n"
                                              for a, b, g in rows), encoding="utf-8")
    expected = (tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows))
    for name in ("p.csv", "p.jsonl"):
        split = read(f"file:{tmp_path / name}").eval
        assert (split.s1, split.s2, split.gold) == expected, name
    # the CSV's second data row starts on line 3; its quoted sentence runs onto line 4
    assert read(f"file:{tmp_path / 'p.csv'}").eval.where[:3] == tuple(f"{tmp_path / 'p.csv'}:{n}" for n in (2, 3, 5))


def test_split_and_subset_columns_and_a_column_mapping(tmp_path):
    path = tmp_path / "mine.tsv"
    path.write_text("id\tleft\tright\tgold\tpart\tgroup\n"
                    "1\ta b\tb a\t1\ttrain\tx\n2\tc d\td c\t2\ttest\tx\n3\te f\tf e\t3\tTEST\ty\n"
                    "4\tg h\th g\t4\tvalidation\ty\n5\ti j\tj i\t0.5\ttest\ty\n", encoding="utf-8")
    task = read(f"file:{path}?s1=left&s2=right&score=gold&split=part&subset=group&range=0,4",
                ("test", "train", "dev"))
    assert set(task.splits) == {"test", "train", "dev"} and task.spec.gold_range == (0.0, 4.0)
    assert task.eval.s1 == ("c d", "e f", "i j") and task.eval.subsets == ("x", "y", "y")
    assert task.splits["dev"].gold == (4.0,) and task.splits["train"].s2 == ("b a",)


def test_an_hf_dataset_folder_with_a_column_mapping(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = pairs(np.random.default_rng(3), 8)
    columns = {"text_a": [r[0] for r in rows], "text_b": [r[1] for r in rows], "rating": [r[2] / 5 for r in rows]}
    datasets.Dataset.from_dict(columns).save_to_disk(str(tmp_path / "single"))
    task = read(f"hf:{tmp_path / 'single'}?s1=text_a&s2=text_b&score=rating&range=0,1")
    assert (task.source, task.spec.name) == ("hf", "single")
    assert task.eval.s1 == tuple(columns["text_a"]) and task.eval.gold == tuple(columns["rating"])
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns),
                               "validation": datasets.Dataset.from_dict({k: v[:4] for k, v in columns.items()})})
    dd.save_to_disk(str(tmp_path / "dict"))
    task = read(f"hf:{tmp_path / 'dict'}?s1=text_a&s2=text_b&score=rating&range=0,1&eval=validation",
                ("dev", "train"))
    assert task.spec.eval_split == "dev" and task.eval.s2 == tuple(columns["text_b"][:4])
    assert len(task.splits["train"]) == 8
    blank = {**columns, "text_a": [*columns["text_a"][:2], " ", *columns["text_a"][3:]]}
    datasets.Dataset.from_dict(blank).save_to_disk(str(tmp_path / "bad" / "single"))
    with pytest.raises(UserError, match=r"single row 2: sentence 1 is empty"):
        read(f"hf:{tmp_path / 'bad' / 'single'}?s1=text_a&s2=text_b&score=rating&range=0,1")


# -- broken data: one line naming file:line ---------------------------------------------------------

GOOD = "sentence1\tsentence2\tscore\na b\tb a\t1\nc d\td c\t2\ne f\tf e\t3\n"


@pytest.mark.parametrize(("name", "text", "query", "message"), [
    ("t.tsv", "left\tsentence2\tscore\na\tb\t1\n", "", r"t\.tsv:1: no column for sentence 1"),
    ("t.tsv", GOOD, "?score=gold", r"t\.tsv:1: no column 'gold' \(score=gold\)"),
    ("t.tsv", GOOD.replace("\t2\n", "\tabout two\n"), "", r"t\.tsv:3: expected a numeric gold score"),
    ("t.tsv", GOOD.replace("e f\t", " \t"), "", r"t\.tsv:4: sentence 1 is empty"),
    ("t.tsv", GOOD.replace("c d\td c\t2", "c d"), "", r"t\.tsv:3: expected at least 3 tab-separated fields"),
    ("t.tsv", "sentence1\tsentence2\tscore\na\tb\t1\nc\td\t2\n", "", r"t\.tsv:3: .*only 2 pair\(s\).*at least 3"),
    ("t.tsv", GOOD.replace("\t3\n", "\t7\n"), "", r"t\.tsv:4: gold score 7 is outside t's range 0-5"),
    ("t.tsv", GOOD, "?range=2.5,5", r"t\.tsv:2: gold score 1 is outside t's range 2.5-5 \(2 such scores"),
    ("t.tsv", "sentence1\tsentence2\tscore\tsplit\na\tb\t1\tholdout\n", "", r"t\.tsv:2: split 'holdout'"),
    ("t.tsv", "sentence1\tsentence2\tscore\tsplit\na\tb\t1\ttrain\n", "", r"t\.tsv: no pair of the test split"),
    ("t.tsv", "sentence1\tsentence2\tscore\n", "", r"t\.tsv: no pairs in it"),
    ("t.jsonl", '{"sentence1": "a", "sentence2": "b", "score": 1}\n{"sentence1": "c", "score": 2}\n', "",
     r"t\.jsonl:2: no 'sentence2' key"),
    ("t.jsonl", '{"sentence1": "a", "sentence2": "b", "score": 1}\n{"sentence1": "c",\n', "",
     r"t\.jsonl:2: not valid JSON"),
    ("t.csv", 'sentence1,sentence2,score\na,b,1\n"c, d",e,high\n', "", r"t\.csv:3: expected a numeric gold score"),
    ("t.txt", GOOD, "", r"cannot tell the format of t\.txt"),
    ("t.tsv", GOOD, "?colour=red", r"unknown key 'colour'"),
    ("t.tsv", GOOD, "?range=5,0", r"range=5,0: expected finite LOW < HIGH"),
    ("stsb.tsv", GOOD, "", r"its name 'stsb' is a registered task's; .*name=OTHER"),
    ("t.tsv", GOOD, "?header=no&s1=sentence1", r"without a header, columns are field numbers"),
])
def test_broken_files_fail_with_file_and_line(tmp_path, name, text, query, message):
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        read(f"file:{tmp_path / name}{query}", ("test", "train"))


def test_allow_gold_out_of_range_keeps_the_pairs(tmp_path):
    (tmp_path / "t.tsv").write_text(GOOD.replace("\t3\n", "\t7\n"), encoding="utf-8")
    task = load_task(get_task(f"file:{tmp_path / 't.tsv'}"), "packaged", ["test"], lenient_gold=True)
    assert task.eval.gold == (1.0, 2.0, 7.0)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"nowhere\.tsv: no such file"):
        parse_entry(f"file:{tmp_path / 'nowhere.tsv'}")


# -- entries, config files ----------------------------------------------------------------------------

def test_task_entries_keep_their_commas():
    assert split_tasks(["stsb,file:a.tsv?range=-1,1", "sickr,sts12", "file:b.csv,hf:org/x?range=0,1"]) == (
        "stsb", "file:a.tsv?range=-1,1", "sickr", "sts12", "file:b.csv", "hf:org/x?range=0,1")


def test_a_config_file_declares_tasks_with_paths_from_its_folder(tmp_path, monkeypatch):
    folder = tmp_path / "conf"
    folder.mkdir()
    write_tsv(folder / "pairs.tsv", [("a b", "b a", 1), ("c d", "d c", 2), ("e f", "f e", 0.5)])
    (folder / "bench.toml").write_text('tasks = ["stsb"]\n\n[[task]]\nfile = "pairs.tsv"\nname = "mine"\n'
                                       'range = [0, 2]\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # not the config's folder: the path is read from the config's
    cfg, _ = from_cli(["--config", str(folder / "bench.toml")])
    assert cfg.tasks == ("stsb", f"file:{folder / 'pairs.tsv'}?name=mine&range=0,2")
    task = read(cfg.tasks[1])
    assert (task.spec.name, task.spec.gold_range, task.eval.gold) == ("mine", (0.0, 2.0), (1.0, 2.0, 0.5))
    (folder / "bad.toml").write_text('[[task]]\nfile = "pairs.tsv"\nrnage = [0, 1]\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.toml: \[\[task\]\] #1: unknown key 'rnage' \(did you mean 'range'\?\)"):
        from_cli(["--config", str(folder / "bad.toml")])


def test_mteb_tasks_take_their_gold_range_from_mteb():
    pytest.importorskip("mteb")
    from harness.core.data.sources.mteb_tasks import mteb_task, spec_from_task

    assert spec_from_task(mteb_task("RUParaPhraserSTS")).gold_range == (-1.0, 1.0)
    assert spec_from_task(mteb_task("BIOSSES")).gold_range == (0.0, 5.0)  # MTEB's default scale


# -- one run, one table ---------------------------------------------------------------------------------

def test_stsb_and_its_own_pairs_as_a_file_score_the_same_in_one_table(bench, senteval_root, tiny_bert, tmp_path):
    """The fixture SentEval STS-B test as a TSV, next to ``stsb`` from --source senteval: same Spearman
    to the last digit, one leaderboard with both columns, the file's source in its records."""
    rows = stsb_rows(senteval_root / "STS" / "STSBenchmark" / "sts-test.csv")
    path = write_tsv(tmp_path / "my-stsb.tsv", rows)
    code, out, err = bench("--methods", "avg", "cls", "--tasks", "stsb", f"file:{path}", "--source", "senteval",
                           "--senteval-dir", str(senteval_root), "--backbone", str(tiny_bert), "--bootstrap", "50")
    assert code == 0, out + err
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "out" / "runs").glob("*.json"))]
    by = {(r["method"]["name"], r["task"]["name"]): r for r in records}
    assert set(by) == {(m, t) for m in ("avg", "cls") for t in ("stsb", "my-stsb")}
    for method in ("avg", "cls"):
        mine, theirs = by[method, "my-stsb"], by[method, "stsb"]
        assert mine["scores"]["spearman"] == theirs["scores"]["spearman"]
        assert mine["task"]["fingerprint"] == theirs["task"]["fingerprint"]
        assert (mine["task"]["source"], mine["protocol"]["task_source"], mine["protocol"]["source"]) == \
            ("file", "file", "senteval")
        assert theirs["protocol"]["task_source"] == "senteval"
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert len(board) == 2 and {"STS-B", "my-stsb"} <= set(board.columns)
    assert (board["STS-B"] == board["my-stsb"]).all()
    assert out.count("## Protocol") == 1
    # the table says which task read its own data, where from, and what content (stsb is the group's source)
    own = f"Tasks with their own data: my-stsb: file {path} (sha256 {by['avg', 'my-stsb']['task']['fingerprint'][:12]})"
    for text in (out, (tmp_path / "out" / "leaderboard.md").read_text()):
        assert [line for line in text.splitlines() if line.startswith("Tasks with")] == [own]
    scores = pd.read_csv(tmp_path / "out" / "scores.csv")
    assert set(scores.loc[scores["task"] == "my-stsb", "task_data"]) == {own.split("my-stsb: ")[1]}
    assert scores.loc[scores["task"] == "STS-B", "task_data"].str.startswith("senteval ").all()
    mteb = json.loads(next((tmp_path / "out" / "mteb").glob("*avg*/*/my-stsb.json")).read_text())
    fingerprint = by["avg", "my-stsb"]["task"]["fingerprint"]
    assert mteb["task_name"] == "my-stsb" and mteb["dataset_revision"] == f"file-{fingerprint[:12]}"
    history = [json.loads(line) for line in (tmp_path / "out" / "history.jsonl").read_text().splitlines()]
    assert {(h["task"], h["task_source"]) for h in history} == {("STS-B", "senteval"), ("my-stsb", "file")}


def test_a_moved_file_keeps_its_records_and_vectors(bench, tiny_bert, tmp_path):
    rows = pairs(np.random.default_rng(5), 10)
    (tmp_path / "a").mkdir()
    first = write_tsv(tmp_path / "a" / "mine.tsv", rows)
    args = ("--methods", "avg", "--backbone", str(tiny_bert), "--bootstrap", "0")
    assert bench(*args, "--tasks", f"file:{first}")[0] == 0
    before = {p.name for p in (tmp_path / "out" / "runs").glob("*.json")}
    (tmp_path / "b").mkdir()
    moved = first.rename(tmp_path / "b" / "mine.tsv")
    code, out, err = bench(*args, "--tasks", f"file:{moved}")
    assert code == 0, out + err
    assert {p.name for p in (tmp_path / "out" / "runs").glob("*.json")} == before  # overwritten, not added
    assert "0 sentence(s) encoded" in err + out


def test_two_tasks_of_one_name_are_refused(bench, tiny_bert, tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        write_tsv(tmp_path / folder / "mine.tsv", pairs(np.random.default_rng(len(folder)), 5))
    code, _, err = bench("--methods", "avg", "--backbone", str(tiny_bert), "--tasks",
                         f"file:{tmp_path / 'a' / 'mine.tsv'}", f"file:{tmp_path / 'b' / 'mine.tsv'}")
    assert code == 2 and "two tasks are named 'mine'" in err and "Traceback" not in err
