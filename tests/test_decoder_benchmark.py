"""``benchmarks/peers/decoder_encode.py``: the harness's decoder encode timed against a plain transformers
loop. On a tiny Qwen2 both timings are positive, the two agree to fp32 rounding under both prompts,
and the harness's vectors are the last token's final hidden state of the prompted text, recomputed
here with a causal LM one sentence at a time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures import write_tiny_decoder  # noqa: E402

from benchmarks.peers import decoder_encode  # noqa: E402


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory) -> Path:
    return write_tiny_decoder(tmp_path_factory.mktemp("decoder-bench") / "qwen2", "qwen2")


def test_main_reports_positive_timings_and_agreeing_vectors(tiny_qwen2, tmp_path, capsys):
    report = tmp_path / "report.json"
    code = decoder_encode.main(["--backbone", str(tiny_qwen2), "--limit", "40", "--rounds", "1", "--threads", "1",
                                "--json", str(report)])
    assert code == 0
    data = json.loads(report.read_text())
    assert (data["sentences"], data["rounds"], data["ok"]) == (40, 1, True)
    assert [p["prompt"] for p in data["prompts"]] == ["none", "prompteol"]
    for p in data["prompts"]:
        assert 0 <= p["max_abs_delta"] <= 1e-4
        assert len(p["harness_seconds"]) == len(p["plain_seconds"]) == 1
        assert p["harness_median_s"] > 0 and p["plain_median_s"] > 0
        assert p["ratio_plain_over_harness"] == pytest.approx(p["plain_median_s"] / p["harness_median_s"])
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("| none", "| prompteol"))]
    assert len(table) == 2


def test_harness_vectors_are_the_last_token_of_the_prompted_text(tiny_qwen2):
    """The benchmark's vectors against a one-sentence-at-a-time causal LM on texts written out here
    (not through ``Prompt.apply``): the prompt is really read, and the batching changes nothing."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sentences = decoder_encode.load_sentences(40)
    assert sentences[0] == "A girl is styling her hair."
    found = decoder_encode.measure(tiny_qwen2, sentences, ["none", "prompteol"], rounds=1, threads=1)
    assert [r.prompt for r in found.results] == ["none", "prompteol"]
    assert all(r.max_abs_delta <= 1e-4 for r in found.results)

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen2))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen2), dtype=torch.float32).eval()
    longest = max(range(len(sentences)), key=lambda i: len(sentences[i]))
    texts = {"none": sentences[0], "prompteol": 'This sentence : "A girl is styling her hair." means in one word:"'}
    for prompt, text in texts.items():
        with torch.inference_mode():
            ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=128)
            expected = model(**ids, output_hidden_states=True).hidden_states[-1][0, -1].numpy()
        assert np.abs(found.harness_vectors[prompt][0] - expected).max() <= 1e-4, prompt
        assert np.abs(found.plain_vectors[prompt][0] - expected).max() <= 1e-4, prompt
    # the longest sentence sits in a padded batch of the plain loop; still the same vector
    with torch.inference_mode():
        ids = tokenizer(sentences[longest], return_tensors="pt", truncation=True, max_length=128)
        expected = model(**ids, output_hidden_states=True).hidden_states[-1][0, -1].numpy()
    assert np.abs(found.harness_vectors["none"][longest] - expected).max() <= 1e-4
    # the prompt changes what is read: the two prompts' vectors differ
    assert np.abs(found.harness_vectors["none"] - found.harness_vectors["prompteol"]).max() > 1e-3


def test_disagreeing_or_nan_vectors_fail():
    results = [decoder_encode.PromptResult("none", [1.0], [1.0], 5e-5),
               decoder_encode.PromptResult("prompteol", [1.0], [1.0], 2e-4),
               decoder_encode.PromptResult("nan", [1.0], [1.0], float("nan"))]
    assert decoder_encode.failures(results, 1e-4) == ["prompteol", "nan"]


def test_hidden_and_layers_resize_the_tiny_decoder(tmp_path):
    from transformers import AutoConfig

    folder = decoder_encode.build_tiny_decoder(tmp_path / "llama", "llama", hidden=64, layers=3)
    config = AutoConfig.from_pretrained(str(folder))
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (64, 3, 96)
    vectors = decoder_encode.HarnessEncoder(folder, threads=1).encode(["a dog runs", "two cats"],
                                                                      decoder_encode.PROMPTS["none"])
    assert vectors.shape == (2, 64) and np.isfinite(vectors).all()
