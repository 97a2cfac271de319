"""The real command line, end to end, on the tiny BERT and the fixture data folders."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import harness
from harness.runner.cli.parser import from_cli
from harness.runner.settings.config import BenchConfig

ALL = ["cls", "avg", "first-last", "whitening", "sbert", "random"]


def senteval_args(senteval_root, model, *extra):
    return ["--source", "senteval", "--senteval-dir", str(senteval_root), "--backbone", str(model), *extra]


@pytest.mark.heavy  # every method on 7 tasks, twice; each method has its own oracle
def test_every_method_on_every_task_through_the_cli(bench, senteval_root, tiny_st, tmp_path):
    code, out, err = bench("--methods", *ALL, "--tasks", "sts12", "sts13", "sts14", "sts15", "sts16", "stsb",
                           "sickr", *senteval_args(senteval_root, tiny_st), "--bootstrap", "50")
    assert code == 0, err
    runs = sorted((tmp_path / "out" / "runs").glob("*.json"))
    assert len(runs) == len(ALL) * 7
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert set(board["method"]) == set(ALL)
    assert {"STS12", "STS16", "STS-B", "SICK-R", "Avg."} <= set(board.columns)
    assert board[["STS12", "STS-B", "SICK-R"]].notna().all().all()
    assert "## Protocol: aggregation=all · source=senteval" in out
    assert (tmp_path / "out" / "plots" / "leaderboard.png").stat().st_size > 1000
    # Gated on its own leaderboard: every cell the plan names up front is a cell of the records.
    code, _, err = bench("--methods", *ALL, "--tasks", "sts12", "sts13", "sts14", "sts15", "sts16", "stsb",
                         "sickr", *senteval_args(senteval_root, tiny_st), "--bootstrap", "50",
                         "--baseline", str(tmp_path / "out" / "leaderboard.csv"))
    assert code == 0, err


def test_result_json_records_spec_task_protocol_scores_and_env(bench, senteval_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "whitening", "--tasks", "sts12", "--aggregation", "wmean",
                         "--whitening-k", "8", *senteval_args(senteval_root, tiny_bert))
    assert code == 0, err
    (path,) = (tmp_path / "out" / "runs").glob("*.json")
    record = json.loads(path.read_text())
    assert record["schema_version"] == 2 and record["harness"]["version"] == harness.__version__
    assert record["method"]["label"] == "whitening[k=8]"
    assert record["method"]["spec"]["layers"] == [1, -1] and record["method"]["spec"]["post"] == "whitening"
    assert record["task"]["n_pairs"] == 30 and len(record["task"]["subsets"]) == 5
    assert len(record["task"]["fingerprint"]) == 64 and record["task"]["source"] == "senteval"
    assert record["protocol"]["aggregation"] == "wmean" and record["protocol"]["fit_set"] == "target"
    assert record["fit"]["fit_set"]["n_sentences"] > 0 and record["fit"]["dims_kept"] == 8
    assert set(record["subset_scores"]) == {"MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"}
    low, high = record["scores"]["spearman_ci95"]
    assert low <= record["scores"]["spearman"] <= high
    assert record["env"]["packages"]["torch"] and record["env"]["devices"] == ["cpu"]
    assert record["backbone"]["origin"] == "local" and len(record["backbone"]["fingerprint"]) == 64


def test_methods_sharing_a_backbone_share_one_forward_pass_and_a_warm_rerun_encodes_nothing(
        senteval_root, tiny_bert, tmp_path):
    cfg = BenchConfig(methods=("cls", "avg", "first-last", "whitening"), tasks=("sts13", "sts14"),
                      backbone=str(tiny_bert), source="senteval", senteval_dir=str(senteval_root),
                      fit_set="test", cache_dir=str(tmp_path / "c"), output_dir=str(tmp_path / "o"),
                      progress=False, plots=False, bootstrap=0)
    from harness.core.data.tasks import TASKS, load_task

    cold = harness.run(cfg)
    where = {"senteval": str(senteval_root)}
    unique = {s for name in ("sts13", "sts14")
              for s in load_task(TASKS[name], "senteval", ["test"], locations=where).eval.sentences()}
    assert cold.sentences_forwarded == len(unique)  # each sentence once, for 4 methods and 3 views
    warm = harness.run(cfg)
    assert warm.sentences_forwarded == 0
    assert [r["scores"]["spearman"] for r in warm.records] == [r["scores"]["spearman"] for r in cold.records]


def test_sbert_uses_the_checkpoint_pipeline(bench, senteval_root, tiny_st, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "sbert", "avg", "--tasks", "stsb", *senteval_args(senteval_root, tiny_st))
    assert code == 0, err
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv").set_index("method")
    # mean pooling + normalise over the same transformer: the same ranking as avg, hence the same Spearman
    assert board.loc["sbert", "STS-B"] == pytest.approx(board.loc["avg", "STS-B"], abs=1e-6)
    record = json.loads(next((tmp_path / "out" / "runs").glob("sbert__*.json")).read_text())
    assert record["method"]["spec"]["max_length"] == 32  # its own max_seq_length, not --max-length


def test_config_file_and_cli_precedence(tmp_path):
    config = tmp_path / "bench.toml"
    config.write_text('methods = ["avg", "cls"]\naggregation = "mean"\nbatch-size = 8\n[whitening]\nk = 16\n')
    cfg, _ = from_cli(["--config", str(config), "--aggregation", "wmean", "--fit-corpus", "c.txt"])
    assert cfg.methods == ("avg", "cls") and cfg.aggregation == "wmean" and cfg.batch_size == 8
    assert cfg.method_params == {"whitening": {"k": 16}} and cfg.fit_set == "corpus:c.txt"
    cfg, _ = from_cli(["--methods", "avg,cls", "random", "--first-last-layers", "0,-1"])
    assert cfg.methods == ("avg", "cls", "random") and cfg.first_last_layers == (0, -1)


@pytest.mark.parametrize(("args", "message"), [
    (["--methods", "whitenin"], "unknown method 'whitenin' (did you mean 'whitening'?)"),
    (["--tasks", "sts2"], "unknown task 'sts2'"),
    (["--tasks", "sts12"], "STS12 is not packaged offline; pass --source senteval --senteval-dir DIR"),
    (["--source", "senteval", "--senteval-dir", "/nonexistent/dir"], "--senteval-dir /nonexistent/dir: no such"),
    (["--aggregation", "median"], "--aggregation median: expected one of all, mean, wmean"),
    (["--fit-set", "nope"], "--fit-set nope: expected one of"),
    (["--backbone", "/no/such/model"], "backbone '/no/such/model': no such directory"),
    (["--backbone", "org/not-cached-model"], "could not be fetched from the HuggingFace hub"),
    (["--batch-size", "zero"], "argument --batch-size: expected a number or 'auto', got 'zero'"),
    (["--whitening-view", "pooler"], "argument --whitening-view: invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(bench, args, message):
    code, _out, err = bench(*args)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err


def test_empty_sentence_in_a_task_file_names_the_line(bench, tmp_path, tiny_bert):
    folder = tmp_path / "se" / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    (folder / "sts-test.csv").write_text("g\tf\ty\t1\t2.0\ta dog\tthe cat\ng\tf\ty\t2\t1.0\ta dog\t\n")
    code, _, err = bench("--methods", "avg", "--source", "senteval", "--senteval-dir", str(tmp_path / "se"),
                         "--backbone", str(tiny_bert))
    assert code == 2 and "sts-test.csv:2: sentence2 is empty" in err


def test_ctrl_c_exits_130_and_keeps_what_was_written(bench, monkeypatch):
    import harness.runner.execution.run as scheduler

    def interrupted(plan, ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(scheduler, "encode_stage", interrupted)
    code, _, err = bench("--methods", "random")
    assert code == 130 and "run the same command again to resume" in err


def test_baseline_regression_needs_a_drop_beyond_tolerance_and_outside_the_interval(bench, senteval_root,
                                                                                     tiny_bert, tmp_path):
    args = ["--methods", "avg", "random", "--tasks", "stsb", *senteval_args(senteval_root, tiny_bert)]
    code, _, err = bench(*args)
    assert code == 0, err
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    scores = pd.read_csv(tmp_path / "out" / "scores.csv").set_index("method")
    baseline = tmp_path / "baseline.csv"
    board.to_csv(baseline, index=False)
    assert bench(*args, "--baseline", str(baseline))[0] == 0
    avg = board["method"] == "avg"
    now, high = board.loc[avg, "STS-B"].item(), scores.loc["avg", "ci_high"]
    assert high - now > 1.5  # the fixture's few pairs leave a wide interval
    # A drop beyond the tolerance but inside this run's 95 % interval: reported, not a regression.
    board.loc[avg, "STS-B"] = now + 1.5
    board.to_csv(baseline, index=False)
    code, out, _ = bench(*args, "--baseline", str(baseline), "--tolerance", "1")
    assert code == 0 and "none a regression" in out and "| avg" in out
    # Beyond the interval as well: a regression, exit 1.
    board.loc[avg, "STS-B"] = high + 1.0
    board.to_csv(baseline, index=False)
    code, out, _ = bench(*args, "--baseline", str(baseline), "--tolerance", "1")
    assert code == 1
    assert "REGRESSION" in out and "| avg" in out and "random" not in out.split("REGRESSION")[1]
    assert bench(*args, "--baseline", str(tmp_path / "missing.csv"))[0] == 2


def test_hub_source_through_the_cli(bench, hub_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "avg", "--tasks", "sickr", "sts12", "--source", "hub", "--hub-root",
                         str(hub_root), "--backbone", str(tiny_bert))
    assert code == 0, err
    record = json.loads(next((tmp_path / "out" / "runs").glob("avg__sickr__*.json")).read_text())
    assert record["task"]["source"] == "hub" and record["task"]["n_pairs"] == 10


def test_list_prints_methods_and_tasks(bench):
    code, out, _ = bench("--list")
    assert code == 0
    for name in (*ALL, "sts12", "stsb", "sickr"):
        assert f"  {name} " in out
