"""The embedded default for real: the packaged all-MiniLM-L6-v2 on the packaged STS-B test split.

These take ~1 minute on 2 CPU cores (the default run encodes every STS-B sentence for whitening's
target fit set); CI runs them (``make test`` runs every marker).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import harness
from harness.runner.settings.config import BenchConfig

pytestmark = pytest.mark.real
BASELINE = Path(__file__).resolve().parent.parent / "results" / "baselines" / "embedded-default.csv"


@pytest.fixture(scope="module")
def shared_cache(real_cache) -> Path:
    return real_cache


def test_minilm_avg_reproduces_the_mteb_leaderboard_figure(shared_cache, tmp_path):
    cfg = BenchConfig(methods=("avg", "random"), cache_dir=str(shared_cache), output_dir=str(tmp_path),
                      progress=False, plots=False)
    scores = {r["method"]["name"]: r["scores"]["spearman"] for r in harness.run(cfg).records}
    assert scores["avg"] == pytest.approx(82.03, abs=0.05)  # MTEB STSBenchmark, all-MiniLM-L6-v2
    assert abs(scores["random"]) < 10


def test_minilm_avg_on_stsb_as_a_tsv_file_equals_stsb_to_every_digit(shared_cache, tmp_path):
    """The packaged STS-B test written as a TSV (fields 5, 6, 4 of sts-test.csv) and read as
    ``file:``: the same Spearman as ``--tasks stsb``, in one run and one table."""
    from harness.core.data.sources.packaged import stsb_dir

    lines = [line.split("\t") for line in (stsb_dir() / "sts-test.csv").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    path = tmp_path / "stsb-as-file.tsv"
    path.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{f[5]}\t{f[6]}\t{f[4]}\n" for f in lines),
                    encoding="utf-8")
    cfg = BenchConfig(methods=("avg",), tasks=("stsb", f"file:{path}"), cache_dir=str(shared_cache),
                      output_dir=str(tmp_path / "out"), progress=False, plots=False)
    scores = {r["task"]["name"]: r["scores"]["spearman"] for r in harness.run(cfg).records}
    assert scores["stsb-as-file"] == scores["stsb"] == pytest.approx(82.03, abs=0.05)
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv").set_index("method")
    assert board.loc["avg", "STS-B"] == board.loc["avg", "stsb-as-file"]


def test_embedded_default_matches_the_committed_baseline(bench, shared_cache, tmp_path):
    code, out, err = bench("--cache-dir", str(shared_cache), "--baseline", str(BASELINE))
    assert code == 0, out + err
    assert_readme_shows_this_board(out)
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv").set_index("method")
    assert set(board.index) == {"cls", "avg", "first-last", "whitening", "flow", "sbert", "random"}
    assert board.loc["sbert", "STS-B"] == pytest.approx(82.03, abs=0.05)
    assert board.loc["avg", "STS-B"] > board.loc["random", "STS-B"] + 60
    assert board.loc["flow", "fit_set"] == "target" and board.loc["flow", "STS-B"] > 70
    assert board.loc["whitening", "marks"] == "†"  # target holds the scored sentences
    significance = pd.read_csv(tmp_path / "out" / "significance.csv")
    boot = significance[significance["test"].str.startswith("paired bootstrap") & (significance["task"] != "Avg.")]

    def compared(a: str, b: str) -> pd.Series:
        row = boot[((boot["method_a"] == a) & (boot["method_b"] == b)) | ((boot["method_a"] == b)
                                                                        & (boot["method_b"] == a))]
        assert len(row) == 1
        return row.iloc[0]

    same = compared("avg", "sbert")  # the same vectors, by two code paths
    assert same["delta"] == 0 and same["p_value"] == 1
    assert compared("avg", "cls")["p_value"] < 0.01
    # Ranks with their uncertainty (issue 41): avg and sbert share rank 1 and cannot be told from
    # first-last; cls and random are settled; shown on the console, in leaderboard.md and on the page
    assert board.loc["avg", "rank"] == board.loc["sbert", "rank"] == 1
    assert (board.loc["random", "rank"], board.loc["random", "rank_low"], board.loc["random", "rank_high"]) == (7, 7, 7)
    assert board.loc["first-last", "rank_low"] == 1
    assert "| 1 (1–2) |" in out and "| 7       |" in out
    assert "| 1 (1–2) |" in (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    from browser import Browser, chromium_binary

    if chromium_binary() is not None:
        with Browser(tmp_path / "profile") as browser:
            browser.open((tmp_path / "out" / "index.html").as_uri())
            assert browser.errors == []
            shown = browser.evaluate(
                "(() => { const t = document.querySelector('table.board');"
                "const i = Array.from(t.tHead.rows[0].cells).findIndex(c => c.textContent === 'rank');"
                "return Array.from(t.tBodies[0].rows).map(r => r.cells[0].firstChild.textContent.trim() + ' '"
                " + r.cells[i].textContent.trim()); })()")
        assert "avg 1 (1–2)" in shown and "random 7" in shown


def board_lines(text: str) -> list[str]:
    """The first markdown table of ``text`` whose header starts ``| method``: its lines."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method "))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def assert_readme_shows_this_board(out: str) -> None:
    """README's leaderboard is the one the embedded default prints (issue 52: README's had no rank
    column and no ★ on Avg.): the same header and layout, the same rows in the same order with the
    same labels, marks and ranks; a score may differ by the CPU's rounding (flow's second decimal,
    README says which), by at most 0.1."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    shown = board_lines(readme[readme.index("It ends with this leaderboard"):])
    printed = board_lines(out)
    assert shown[:2] == printed[:2] and len(shown) == len(printed), (shown, printed)
    for ours, theirs in zip(shown[2:], printed[2:]):
        assert len(ours) == len(theirs), (ours, theirs)
        for a, b in zip(ours.split("|"), theirs.split("|")):
            number_a, number_b = (re.match(r"\s*(-?\d+\.\d+)", cell) for cell in (a, b))
            if number_a and number_b:  # a score, then its mark
                assert float(number_a.group(1)) == pytest.approx(float(number_b.group(1)), abs=0.1), (ours, theirs)
                a, b = a[number_a.end():], b[number_b.end():]
            assert a == b, (ours, theirs)


def test_a_ci_job_with_a_persisted_cache_catches_a_changed_method(shared_cache, tmp_path):
    """The regression the issue planted (whitening multiplying by sqrt(S) instead of dividing), in a copy
    of the tree, on the cache the real tests warmed: the gate fails it (exit 1), warm as it is."""
    import subprocess
    import sys

    from fixtures import tree_copy

    tree = tree_copy(tmp_path / "tree")
    command = [sys.executable, str(tree / "run_bench.py"), "--methods", "whitening", "--cache-dir", str(shared_cache),
               "--baseline", str(tree / "results" / "baselines" / "embedded-default.csv"), "--no-progress",
               "--no-plots"]
    done = subprocess.run([*command, "--output-dir", str(tmp_path / "a")], cwd=tree, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    whitening = tree / "methods" / "whitening.py"
    whitening.write_text(whitening.read_text().replace("/ np.sqrt(s[:keep])", "* np.sqrt(s[:keep])"))
    done = subprocess.run([*command, "--output-dir", str(tmp_path / "b")], cwd=tree, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "REGRESSION" in done.stdout and "| whitening" in done.stdout


def test_native_encoder_matches_transformers_on_minilm(shared_cache):
    import numpy as np

    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.pooling import View
    from harness.core.encoding.provider import ViewProvider
    from harness.core.encoding.settings import EncodeSettings

    ref = resolve_backbone("minilm")
    texts = ["A man is playing a guitar.", "Three dogs run through deep snow in a field near the woods."]
    views = [View("mean", 6), View("cls", 6), View("mean", 1), View("pooler", 6)]
    native = ViewProvider(ref, EncodeSettings(impl="native", progress=False), shared_cache)
    hf = ViewProvider(ref, EncodeSettings(impl="transformers", progress=False), shared_cache)
    for view in views:
        np.testing.assert_allclose(native.get(texts, view), hf.get(texts, view), atol=2e-5)


def test_simcse_train_on_minilm_through_the_cli(bench, shared_cache, tmp_path):
    import json

    from harness.core.data.sources.packaged import stsb_dir
    from harness.core.data.sources.rows import read_stsb_csv

    train = read_stsb_csv(stsb_dir() / "sts-train.csv")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(train.sentences()[:256]) + "\n", encoding="utf-8")
    code, out, err = bench("--methods", "simcse-train", "--simcse-train-corpus", f"corpus:{corpus}",
                           "--cache-dir", str(shared_cache))
    assert code == 0, out + err
    record = json.loads(next((tmp_path / "out" / "runs").glob("simcse-train*.json")).read_text())
    assert record["fit"]["steps"] == 4 and record["fit"]["fit_set"]["n_sentences"] == 256
    assert 60 < record["scores"]["spearman"] < 90  # MiniLM's [CLS] starts at 73.5
    checkpoint = Path(record["fit"]["checkpoint"])
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "tokenizer.json").is_file()
    code, out, err = bench("--methods", "simcse-train", "--simcse-train-corpus", f"corpus:{corpus}",
                           "--cache-dir", str(shared_cache))
    again = json.loads(next((tmp_path / "out" / "runs").glob("simcse-train*.json")).read_text())
    assert code == 0 and again["fit"]["loaded_from_cache"] is True
    assert again["scores"]["spearman"] == record["scores"]["spearman"]
