"""examples/tour.py, the offline tour of the newer families (issue 52), runs as a user runs it and
scores what it says: its decoder's plain ``last`` row and its SPLADE row equal the same models read
here with transformers, its endpoint row equals the served model's vectors scored here with numpy
and scipy, the endpoint row names its model and host, a warm run sends nothing, and the number
examples/README.md quotes is the one the tour measures."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tour():
    spec = importlib.util.spec_from_file_location("sts_bench_tour", ROOT / "examples" / "tour.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rho(a: np.ndarray, b: np.ndarray, gold: list[float], dot: bool = False) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    sims = (a * b).sum(1) if dot else (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return 100 * spearmanr(sims, gold).statistic


def decoder_last(folder: Path, texts: list[str]) -> np.ndarray:
    """The last layer's state at each text's last token, one text at a time (no padding)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        return np.stack([model(**tokenizer(t, return_tensors="pt"), output_hidden_states=True).hidden_states[-1][0, -1]
                         .numpy() for t in texts])


def splade_vectors(folder: Path, texts: list[str]) -> np.ndarray:
    """SPLADE's max over tokens of log(1 + relu(MLM logits))."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForMaskedLM.from_pretrained(folder)
    with torch.no_grad():
        return np.stack([torch.log1p(torch.relu(model(**tokenizer(t, return_tensors="pt")).logits[0])).amax(0).numpy()
                         for t in texts])


@pytest.mark.heavy  # four end-to-end runs and the models read again here: ~10 CPU s
def test_the_tour_runs_offline_and_scores_what_it_says(tour, tmp_path, capsys):
    assert tour.main(["--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("$ python run_bench.py ") == 4 and "random weights" in out

    board = pd.read_csv(tmp_path / "results" / "leaderboard.csv")
    scores = dict(zip(zip(board["method"], board["backbone"]), board["Avg."]))
    decoder, splade = str(tmp_path / "decoder"), str(tmp_path / "splade")
    prompts = ("plain", "query", "instruct", "prompteol")
    port = re.search(r"--backbone http://127\.0\.0\.1:(\d+)/v1 ", out).group(1)
    endpoint = ("endpoint[model=char-4grams]", f"char-4grams @ 127.0.0.1:{port}")  # its model and host
    assert set(scores) == {*((f"last[prompt={p}]", decoder) for p in prompts), ("avg-sentence", decoder),
                           ("splade · dot", splade), endpoint}

    s1, s2, gold = (list(x) for x in zip(*tour.PAIRS))
    assert scores[("last[prompt=plain]", decoder)] == pytest.approx(
        rho(decoder_last(Path(decoder), s1), decoder_last(Path(decoder), s2), gold), abs=0.01)
    assert scores[("splade · dot", splade)] == pytest.approx(
        rho(splade_vectors(Path(splade), s1), splade_vectors(Path(splade), s2), gold, dot=True), abs=0.01)
    served = rho(tour.char_grams(s1), tour.char_grams(s2), gold)
    assert scores[endpoint] == pytest.approx(served, abs=0.005)
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "results" / "runs").glob("endpoint*.json")]
    assert record["endpoint"]["usage"]["requests"] == 0  # the warm run's
    assert "the first run sent 1 request(s), the second 0" in out

    # The one number of the tour that means something, as examples/README.md quotes it.
    readme = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    assert f"Spearman x100 on the 16 pairs: {served:.2f}" in readme
