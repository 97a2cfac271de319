"""Prompt sets (issue 41): several prompts of one method in one run, each a row, their spread over
the prompts, and the prompt chosen on each task's dev split (§).

On a tiny Qwen2 (the native decoder: a prompt's prefix is computed once; its byte-level BPE reads
any prompt, where the word-level fixtures would read every unknown word as one token). Every number
is checked against a computation of its own: three single-prompt runs in a cache of their own, the
spread recomputed from the result files with numpy and the paired bootstrap on their pairs, and
the dev scores from exported vectors with scipy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from fixtures import pairs

PROMPTS = {"query": "query: {sentence}", "passage": "Passage about {sentence} here", "plain": ""}


@pytest.fixture(scope="module")
def task_file(tmp_path_factory) -> Path:
    """30 test pairs and 30 dev pairs, the split in a column."""
    rng = np.random.default_rng(11)
    rows = [(*row, "test") for row in pairs(rng, 30)] + [(*row, "dev") for row in pairs(rng, 30)]
    path = tmp_path_factory.mktemp("prompt-task") / "pairs.tsv"
    path.write_text("sentence1\tsentence2\tscore\tsplit\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompt-set") / "prompts.toml"
    path.write_text("".join(f"{name} = {json.dumps(text)}\n" for name, text in PROMPTS.items()), encoding="utf-8")
    return path


def _records(out: Path) -> dict[tuple[str, str], dict]:
    found = {}
    for path in (out / "runs").glob("*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        found[(record["method"]["label"], record["task"]["name"])] = record
    return found


def _encoded(text: str) -> int:
    found = re.search(r"backbone passes (\d+) sentence\(s\) encoded", text)
    assert found, text[-2000:]
    return int(found.group(1))


def _scored(record: dict):
    from harness.core.significance import scored

    pairs_ = record["pairs"]
    return scored(np.asarray(pairs_["similarity"]), pairs_["gold"], pairs_["subset"], "all", 1000, 1234)


def test_three_prompts_are_three_rows_equal_to_three_single_prompt_runs_with_their_spread(
        bench, tiny_decoders, task_file, prompt_file, tmp_path):
    from harness.core.significance import Scored, paired_bootstrap

    folder = tiny_decoders["qwen2"]
    tasks = ["--tasks", f"file:{task_file}", f"file:{task_file}?eval=dev&name=devpairs"]
    common = ["--backbone", str(folder), "--methods", "last", *tasks, "--no-plots"]
    code, out, err = bench(*common, "--set", f"last.prompt=@{prompt_file}")
    assert code == 0, err
    records = _records(tmp_path / "out")
    assert {label for label, _ in records} == {f"last[prompt={name}]" for name in PROMPTS}
    assert len(records) == 6  # three rows × two tasks
    unique = len({s for line in task_file.read_text(encoding="utf-8").splitlines()[1:] for s in line.split("\t")[:2]})
    assert _encoded(err) == 3 * unique  # one pass per distinct (prompt, sentence) text
    assert "prefix 'query: ' computed once" in err and "prefix 'Passage about ' computed once" in err
    for name, template in PROMPTS.items():
        record = records[(f"last[prompt={name}]", "pairs")]
        assert record["protocol"]["prompt_set"] == {
            "set": f"@{prompt_file}", "sha256": record["protocol"]["prompt_set"]["sha256"], "name": name,
            "names": list(PROMPTS), "select": None}
        assert record["method"]["spec"]["params"]["prompt"] == template
    board = out.index("| method")
    assert out.index("# Prompt sets: the spread over prompts") > board  # printed after the leaderboard

    # the second run of it encodes nothing
    code, out2, err2 = bench(*common, "--set", f"last.prompt=@{prompt_file}")
    assert code == 0 and _encoded(err2) == 0, err2
    assert "# Prompt sets" in out2

    # each row equals a run given that prompt alone, in a cache of its own
    for name, template in PROMPTS.items():
        single = ["--set", f"last.prompt={template}"] if template else []
        code, _, err = bench(*common, *single, "--cache-dir", str(tmp_path / "alone"), "--output-dir",
                             str(tmp_path / f"alone-{name}"))
        assert code == 0, err
        alone = _records(tmp_path / f"alone-{name}")
        for task in ("pairs", "devpairs"):
            mine = records[(f"last[prompt={name}]", task)]
            (theirs,) = [r for (label, t), r in alone.items() if t == task]
            np.testing.assert_allclose(mine["pairs"]["similarity"], theirs["pairs"]["similarity"], atol=1e-6)
            assert mine["scores"]["spearman"] == pytest.approx(theirs["scores"]["spearman"], abs=1e-6)

    # the spread, recomputed from the records
    with open(tmp_path / "out" / "prompts.csv", encoding="utf-8") as handle:
        import csv

        rows = {row["task"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"pairs", "devpairs", "Avg."}
    by_task = {task: {name: records[(f"last[prompt={name}]", task)] for name in PROMPTS} for task in ("pairs",
                                                                                                      "devpairs")}
    averages = {name: np.mean([by_task[t][name]["scores"]["spearman"] for t in by_task]) for name in PROMPTS}
    for task, values in [*((t, {n: r["scores"]["spearman"] for n, r in recs.items()}) for t, recs in by_task.items()),
                         ("Avg.", averages)]:
        row = rows[task]
        best, worst = max(values, key=values.get), min(values, key=values.get)
        assert (row["best"], row["worst"], int(row["n_prompts"])) == (best, worst, 3)
        assert float(row["min"]) == pytest.approx(min(values.values()), abs=1e-4)
        assert float(row["median"]) == pytest.approx(float(np.median(list(values.values()))), abs=1e-4)
        assert float(row["max"]) == pytest.approx(max(values.values()), abs=1e-4)
        if task == "Avg.":  # each round's mean over the tasks of that round's scores, paired
            sides = [np.mean([_scored(by_task[t][n]).resamples for t in by_task], axis=0) for n in (best, worst)]
            test = paired_bootstrap(Scored(np.empty(0), values[best], sides[0]),
                                    Scored(np.empty(0), values[worst], sides[1]))
        else:
            test = paired_bootstrap(_scored(by_task[task][best]), _scored(by_task[task][worst]))
        assert float(row["delta"]) == pytest.approx(test.delta, abs=1e-4)
        assert float(row["ci_low"]) == pytest.approx(test.ci_low, abs=1e-4)
        assert float(row["ci_high"]) == pytest.approx(test.ci_high, abs=1e-4)
        assert float(row["p_value"]) == pytest.approx(test.p_value, abs=1e-4)
        assert row["best_above_worst"] == ("yes" if test.delta > 0 and test.p_value < 0.05 else "no")
    shown = (tmp_path / "out" / "prompts.md").read_text(encoding="utf-8")
    assert f"## last[prompt=@{prompt_file}] · {folder}" in shown


def _dev_scores(root: Path, task_file: Path) -> dict[str, float]:
    """Each prompt's Spearman on the dev pairs, from its exported vectors: cosine, then scipy."""
    from scipy.stats import spearmanr

    from harness.runner.execution.export import read_embeddings

    out = {}
    for meta in root.rglob("meta.json"):
        rows = read_embeddings(meta.parent)
        vector = dict(zip(rows.sentences, rows.vectors.astype(np.float64)))
        name = re.fullmatch(r"last\[prompt=(\w+)\]", rows.meta["method"]).group(1)
        cosines, gold = [], []
        for line in task_file.read_text(encoding="utf-8").splitlines()[1:]:
            s1, s2, score, split = line.split("\t")
            if split == "dev":
                a, b = vector[s1], vector[s2]
                cosines.append(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
                gold.append(float(score))
        out[name] = 100 * spearmanr(cosines, gold).statistic
    return out


def test_prompt_select_dev_scores_the_prompt_best_on_the_dev_split_marked_selected(
        bench, tiny_decoders, task_file, prompt_file, tmp_path):
    folder = tiny_decoders["qwen2"]
    common = ["--backbone", str(folder), "--methods", "last", "--no-plots"]
    code, _, err = bench(*common, "--tasks", f"file:{task_file}?eval=dev&name=dev", "--set",
                         f"last.prompt=@{prompt_file}", "--export-embeddings", str(tmp_path / "vectors"),
                         "--output-dir", str(tmp_path / "dev-out"))
    assert code == 0, err
    dev = _dev_scores(tmp_path / "vectors", task_file)
    assert len({round(v, 6) for v in dev.values()}) == 3, dev  # one best
    best = max(dev, key=dev.get)

    code, out, err = bench(*common, "--tasks", f"file:{task_file}", "--set", f"last.prompt=@{prompt_file}",
                           "--set", "last.prompt_select=dev")
    assert code == 0, err
    label = f"last[prompt=@{prompt_file},prompt_select=dev]"
    (record,) = _records(tmp_path / "out").values()
    assert record["method"]["label"] == label
    chosen = record["protocol"]["prompt_set"]
    assert chosen["name"] == best and chosen["select"] == "dev"
    assert chosen["scores"] == pytest.approx(dev, abs=1e-6)
    assert record["method"]["spec"]["params"]["prompt"] == PROMPTS[best]
    assert record["protocol"]["selected_on"] == f"prompt '{best}' of 3 in @{prompt_file}, best on pairs dev"
    board = (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    assert re.search(rf"\| {re.escape(label)} +\| [^|]+\| +\| §", board), board
    assert "# Prompt sets" not in out and not (tmp_path / "out" / "prompts.md").exists()  # one prompt: no spread

    # its score is the chosen prompt's own, as a run given that prompt alone scores it
    single = ["--set", f"last.prompt={PROMPTS[best]}"] if PROMPTS[best] else []
    code, _, err = bench(*common, "--tasks", f"file:{task_file}", *single, "--output-dir", str(tmp_path / "one"))
    assert code == 0 and _encoded(err) == 0, err  # the selection encoded the test pairs under every prompt
    (alone,) = _records(tmp_path / "one").values()
    assert record["scores"]["spearman"] == alone["scores"]["spearman"]


@pytest.mark.parametrize(("options", "says"), [
    (["--set", "last.prompt_select=dev"], "last.prompt_select=dev chooses among a prompt set; give last.prompt=@FILE"),
    (["--set", "last.prompt=@missing.toml"], "last.prompt=@missing.toml: missing.toml: no such file"),
    (["--set", "last.prompt=@{bad}"], "prompt name 'two words' in"),
    (["--set", "last.prompt=@{set}", "--set", "last.prompt2=@{set}"], "a prompt set goes in prompt"),
    (["--set", "last.prompt=@{set}", "--set", "last.prompt_select=dev", "--tasks", "file:{flat}"],
     "has no dev split to choose a prompt on"),
])
def test_a_prompt_set_that_cannot_run_is_one_line_before_encoding(bench, tiny_decoders, task_file, prompt_file,
                                                                  tmp_path, options, says):
    bad = tmp_path / "bad.toml"
    bad.write_text('"two words" = "x {sentence}"\n', encoding="utf-8")
    flat = tmp_path / "flat.tsv"
    flat.write_text("".join(line + "\n" for line in task_file.read_text(encoding="utf-8").splitlines()
                            if not line.endswith("\tdev")), encoding="utf-8")
    options = [o.format(bad=bad, set=prompt_file, flat=flat) for o in options]
    tasks = [] if "--tasks" in options else ["--tasks", f"file:{task_file}"]
    code, _, err = bench("--backbone", str(tiny_decoders["qwen2"]), "--methods", "last", *tasks, *options)
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) == 1 and "encode:" not in err


def test_a_prompt_of_a_set_is_labelled_by_its_name_and_the_chosen_row_by_the_set():
    from harness.core.api import MethodSpec, PromptOfSet, SpecRequest
    from methods import get_method

    last = get_method("last")
    method = last(MethodSpec("last", "none", params=last.params_from(SpecRequest(params={"last": {"prompt": "q: "}}))),
                  None)
    assert method.label() == "last[prompt=q: ]"
    method.prompt_of_set = PromptOfSet("@p.toml", "0" * 64, "query", ("query", "plain"))
    assert method.label() == "last[prompt=query]"
    method.prompt_of_set = PromptOfSet("@p.toml", "0" * 64, "query", ("query", "plain"), select="dev")
    assert method.label() == "last[prompt=@p.toml]"


def test_the_plan_says_what_a_prompt_set_encodes_and_scores(bench, tiny_decoders, task_file, prompt_file):
    common = ["--backbone", str(tiny_decoders["qwen2"]), "--methods", "last", "--tasks", f"file:{task_file}",
              "--set", f"last.prompt=@{prompt_file}", "--dry-run"]
    code, out, err = bench(*common)
    assert code == 0, err
    assert "(scored: last[prompt=query] last[prompt=passage] last[prompt=plain])" in out
    assert "score jobs: 3 (3 method(s) × 1 task(s))" in out
    code, out, err = bench(*common, "--set", "last.prompt_select=dev")
    assert code == 0, err
    dev = sum(line.endswith("\tdev") for line in task_file.read_text(encoding="utf-8").splitlines())
    assert f"pairs dev {2 * dev} (prompt chosen: last[prompt=@{prompt_file},prompt_select=dev])" in out
    assert "score jobs: 1 (1 method(s) × 1 task(s))" in out
