"""--paper: each paper's protocol pinned against its stated settings, overrides recorded, and every
preset run end to end on the fixtures (tiny model, SentEval folder) and, where data allows, MiniLM."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from harness.core.data.tasks import TASKS
from harness.runner.cli.parser import from_cli
from harness.runner.papers.data import PAPERS, load_paper
from harness.runner.papers.run import CSV_COLUMNS, resolve


def test_the_five_papers_are_data_with_a_source_for_every_setting():
    assert PAPERS == ("bert-flow", "bert-whitening", "dse", "sbert", "simcse")
    for name in PAPERS:
        paper = load_paper(name)
        assert paper.rows and paper.title and paper.code
        for setting in [*paper.settings.values(), *paper.sources.values(),
                        *(s for options in paper.options.values() for s in options.values())]:
            assert setting.source, f"{name}: a setting without its source"
        for row in paper.rows:
            assert set(row.published) <= {*TASKS, "glue"}
            assert row.method in {"avg", "cls", "first-last", "whitening", "flow", "sbert", "simcse", "simcse-train",
                                  "cross-encoder", "dse"}


def runs_of(name: str, *flags: str) -> dict[str, list]:
    cfg, _ = from_cli(["--paper", name, *flags])
    return {f"{plan.row.model} ({plan.row.setting})": plan for plan in resolve(load_paper(name), cfg)}


def test_bert_whitening_preset_is_the_papers_protocol():
    plans = runs_of("bert-whitening")
    plan = plans["BERT-base-whitening (target)"]
    by_source = {source: (tasks, cfg) for source, tasks, cfg in plan.runs}
    assert by_source["packaged"][0] == ["stsb"]
    assert by_source["senteval"][0] == ["sts12", "sts13", "sts14", "sts15", "sts16", "sickr"]
    cfg = by_source["packaged"][1]
    assert (cfg.aggregation, cfg.max_length, cfg.first_last_layers, cfg.fit_set) == ("wmean", 64, (1, -1),
                                                                                      "target-pairs")
    assert cfg.backbone == "bert-base-uncased" and cfg.methods == ("whitening",) and not plan.departures
    assert plans["BERT-base-whitening-256 (target)"].runs[0][2].method_params["whitening"]["k"] == 256
    assert plans["BERT-base-whitening (NLI)"].runs[0][2].fit_set == "nli"
    assert plans["SBERT-base-NLI-whitening-256 (target)"].runs[0][2].backbone == \
        "sentence-transformers/bert-base-nli-mean-tokens"


def test_bert_flow_preset_fits_on_pair_batches_with_dropout():
    plans = runs_of("bert-flow")
    flow = plans["BERT-base-flow (target)"].runs[0][2]
    options = flow.method_params["flow"]
    assert (options["levels"], options["depth"], options["width"], options["batches"], options["fit_dropout"]) == \
        (3, 3, 32, "pairs", True)
    assert (options["lr"], options["batch_size"], options["epochs"]) == (1e-3, 32, 1.0)
    assert (flow.max_length, flow.aggregation, flow.fit_set) == (64, "wmean", "target-pairs")
    nli = plans["BERT-base-flow (NLI)"].runs[0][2]
    assert nli.fit_set == "nli" and nli.method_params["flow"]["epochs"] == 0.15
    assert nli.method_params["flow"]["lr"] == 2e-5
    assert plans["BERT-large-flow (target)"].runs[0][2].backbone == "bert-large-uncased"


def test_simcse_sbert_and_dse_presets():
    simcse = runs_of("simcse")
    first_last = simcse["BERT-base first-last (embeddings + last layer)"].runs[0]
    assert first_last[0] == "senteval" and first_last[2].first_last_layers == (0, -1)
    assert (first_last[2].aggregation, first_last[2].max_length, first_last[2].seed) == ("all", 512, 42)
    trained = simcse["Unsup-SimCSE-BERT-base (trained here (run_unsup_example.sh))"].runs[0][2]
    recipe = trained.method_params["simcse-train"]
    assert (recipe["select_every"], recipe["batch_size"], recipe["lr"], recipe["max_length"]) == (125, 64, 3e-5, 32)
    assert recipe["corpus"].startswith("wiki1m:")
    sbert = runs_of("sbert")["SBERT-NLI-base (published checkpoint)"].runs
    assert {source for source, _, _ in sbert} == {"packaged", "senteval"} and sbert[0][2].aggregation == "all"
    dse = runs_of("dse")["DSE student (relative degradation vs teacher (%))"]
    cfg = dse.runs[0][2]
    student, teacher = cfg.method_params["dse"], cfg.method_params["cross-encoder"]
    assert (student["objective"], student["head_width"], student["gold_weight"], student["cross_pairs"]) == \
        ("head", 512, 0.5, 0.0)
    assert (student["epochs"], student["select_every"], student["weight_decay"]) == (5.0, "epoch", 0.01)
    assert (teacher["base"], teacher["epochs"], teacher["model"]) == ("bert-large-uncased-whole-word-masking", 3.0,
                                                                     "train")
    assert dse.skipped == {"glue": "not run: not an sts-bench task"}


def test_explicit_flags_override_the_preset_and_the_table_says_so():
    plans = runs_of("bert-whitening", "--max-length", "128", "--backbone", "minilm", "--whitening-k", "8")
    plan = plans["BERT-base-whitening-256 (target)"]
    cfg = plan.runs[0][2]
    assert cfg.max_length == 128 and cfg.backbone == "minilm" and cfg.method_params["whitening"]["k"] == 8
    assert "max_length=128 (paper: 64)" in plan.departures
    assert "model differs: minilm (paper: bert-base-uncased)" in plan.departures
    assert "--whitening-k=8 (paper: 256)" in plan.departures
    fixed = plans["SBERT-base-NLI-whitening-256 (target)"].runs[0][2]
    assert fixed.backbone == "sentence-transformers/bert-base-nli-mean-tokens"  # a row's own model stays


@pytest.mark.parametrize("name", PAPERS)
def test_every_preset_runs_end_to_end_on_the_fixtures(name, bench, tiny_st, senteval_root, tmp_path):
    # Every task from the fixture folder (STS-B too: the presets read the raw copy, 15k sentences); the
    # tiny model has 2 layers, DSE pools 4. Both are overrides, and the table must say so.
    extra = ["--source", "senteval", *(["--dse-top-k", "2"] if name == "dse" else [])]
    code, _, err = bench("--paper", name, "--backbone", str(tiny_st), "--senteval-dir", str(senteval_root), *extra)
    assert code == 0, err
    assert "Traceback" not in err
    with open(tmp_path / "out" / f"paper-{name}.csv", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    assert tuple(lines[0]) == CSV_COLUMNS
    ran = [line for line in lines if line["status"].startswith("ran")]
    assert ran, "no row of the preset ran on the fixtures"
    for line in ran:
        assert np.isfinite(float(line["measured"])) and "model differs" in line["status"]
        assert "source=senteval (paper: packaged for stsb)" in line["status"] or name == "simcse"
        if line["published"]:
            assert float(line["delta"]) == pytest.approx(float(line["measured"]) - float(line["published"]), abs=1e-3)
    for line in lines:
        if not line["status"].startswith("ran"):
            assert line["status"].startswith("not run: ") and not line["measured"]
    assert (tmp_path / "out" / f"paper-{name}.md").read_text(encoding="utf-8").startswith("# ")


@pytest.mark.real
def test_bert_whitening_on_minilm_reproduces_the_independent_computation(bench, tmp_path):
    """whitening 79.70 and whitening-256 80.17 on raw STS-B (first-last, max_length 64, fit on both
    sides of every pair of every split, repeats kept), as an independent computation gives."""
    code, _, err = bench("--paper", "bert-whitening", "--backbone", "minilm")
    assert code == 0, err
    with open(tmp_path / "out" / "paper-bert-whitening.csv", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    measured = {(r["model"], r["setting"], r["task"]): r["measured"] for r in lines}
    assert float(measured[("BERT-base-whitening", "target", "STS-B")]) == pytest.approx(79.70, abs=0.05)
    assert float(measured[("BERT-base-whitening-256", "target", "STS-B")]) == pytest.approx(80.17, abs=0.05)
    assert measured[("BERT-base-whitening", "target", "STS12")] == ""  # no SentEval folder: said why, not run
