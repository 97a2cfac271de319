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


def test_the_six_papers_are_data_with_a_source_for_every_setting():
    assert PAPERS == ("bert-flow", "bert-whitening", "dse", "prompteol", "sbert", "simcse")
    for name in PAPERS:
        paper = load_paper(name)
        assert paper.rows and paper.title and paper.code
        for setting in [*paper.settings.values(), *paper.sources.values(),
                        *(s for options in paper.options.values() for s in options.values())]:
            assert setting.source, f"{name}: a setting without its source"
        for row in paper.rows:
            assert set(row.published) <= {*TASKS, "glue"}
            assert row.method in {"avg", "cls", "first-last", "whitening", "flow", "sbert", "simcse", "simcse-train",
                                  "cross-encoder", "dse", "prompteol"}


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


# The cheapest presets stay in `make test-fast` (harness/runner/papers/run.py end to end); the others
# cost seconds of CPU each and run the same code with other methods.
HEAVY_PRESETS = {"prompteol", "bert-flow", "sbert", "bert-whitening"}
PRESETS = [pytest.param(name, marks=pytest.mark.heavy) if name in HEAVY_PRESETS else name for name in PAPERS]


@pytest.mark.parametrize("name", PRESETS)
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
        assert "source=senteval (paper: packaged for stsb)" in line["status"] or name in ("simcse", "prompteol")
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


def test_prompteol_rows_average_to_the_readme_avg_column():
    """The README's Avg. column (kongds/scaling_sentemb), typed here apart from the TOML's per-task
    figures: a digit mistyped in either shows up as a row whose mean is off."""
    from harness.runner.papers.run import AVERAGE, average_line

    readme_avg = {"OPT 125M": 67.46, "OPT 350M": 69.02, "OPT 1.3B": 77.52, "OPT 2.7B": 78.18, "OPT 6.7B": 79.08,
                  "OPT 13B": 79.04, "OPT 30B": 78.94, "OPT 66B": 78.19}
    paper = load_paper("prompteol")
    assert [row.model for row in paper.rows] == list(readme_avg)
    for row in paper.rows:
        lines = [{"model": row.model, "setting": row.setting, "table": row.table, "task": task, "published": value,
                  "measured": value + 1.0, "status": "ran"} for task, value in row.published.items()]
        (average,) = average_line(paper, row, lines)
        assert average["task"] == AVERAGE and round(average["published"], 2) == readme_avg[row.model], row.model
        assert average["measured"] == pytest.approx(average["published"] + 1.0) and average["status"] == "ran"
    partial = [dict(line, measured=None) if i == 0 else line for i, line in enumerate(lines)]
    assert average_line(paper, paper.rows[-1], partial)[0]["measured"] is None


def test_prompteol_with_a_backbone_runs_every_row_on_it():
    plans = runs_of("prompteol", "--backbone", "/some/opt")
    assert len(plans) == 8
    for plan in plans.values():
        for _, _, cfg in plan.runs:
            assert cfg.backbone == "/some/opt" and cfg.aggregation == "all" and cfg.max_length == 2048
            assert cfg.method_params["prompteol"]["demo_selected_on"] == "stsb dev"
        assert any("model differs: /some/opt (paper: facebook/opt-" in d for d in plan.departures)
    demos = {plan.runs[0][2].method_params["prompteol"]["demo"] for plan in plans.values()}
    assert len(demos) == 8 and "A jockey riding a horse.=>Equestrian" in demos
    unchanged = runs_of("prompteol")
    assert {plan.runs[0][2].backbone for plan in unchanged.values()} == {f"facebook/opt-{size}" for size in (
        "125m", "350m", "1.3b", "2.7b", "6.7b", "13b", "30b", "66b")}


def test_paper_prompteol_runs_on_a_tiny_opt_with_the_published_figures(bench, tiny_decoders, senteval_root,
                                                                        tmp_path):
    # The fixture copy of STS-B (the packaged one is 8 OPT sizes × 2,552 sentences: minutes, not seconds)
    code, _, err = bench("--paper", "prompteol", "--backbone", str(tiny_decoders["opt"]), "--tasks", "stsb",
                         "--source", "senteval", "--senteval-dir", str(senteval_root))
    assert code == 0, err
    with open(tmp_path / "out" / "paper-prompteol.csv", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    ran = [line for line in lines if line["status"].startswith("ran")]
    assert [line["model"] for line in ran] == ["OPT 125M", "OPT 350M", "OPT 1.3B", "OPT 2.7B", "OPT 6.7B", "OPT 13B",
                                               "OPT 30B", "OPT 66B"]
    published = {line["model"]: float(line["published"]) for line in ran}
    assert published["OPT 125M"] == 67.80 and published["OPT 66B"] == 81.76  # STS-B, the README's table
    for line in ran:
        assert "model differs" in line["status"] and np.isfinite(float(line["measured"]))
    table = (tmp_path / "out" / "paper-prompteol.md").read_text(encoding="utf-8")
    assert "kongds/scaling_sentemb" in table and "run_icl.sh" in table
