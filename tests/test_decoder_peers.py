"""``benchmarks/peers/decoder_peers.py``: the harness's decoder encode against sentence-transformers with
last-token pooling. On the tiny Qwen3-layout shape, harness and st-torch only (the OpenVINO peer
needs ``.venv-peers``, which ``make test`` never builds): timings are positive, each printed ratio
is the ratio of the medians, the fp32 vectors agree, and they are the last token's final hidden
state of the prompted text, recomputed here with transformers one sentence at a time."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.peers import decoder_peers, decoder_shapes  # noqa: E402

# A benchmark script (not harness/ or methods/), minutes of CPU in subprocess encodes: out of
# `make test-fast`. Its module-scoped run is built once, on one worker (tests/conftest.py).
pytestmark = pytest.mark.heavy
SHARED_WORKER = "decoder-peers"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One benchmark run on 30 sentences, both prompts, fp32 and bf16, 1 thread, 2 rounds."""
    folder = tmp_path_factory.mktemp("decoder-peers")
    report = folder / "report.json"
    out = folder / "report.md"
    argv = ["--shapes", "tiny", "--encoders", "harness", "st-torch", "--dtypes", "fp32", "bf16",
            "--threads", "1", "--limit", "30", "--rounds", "2", "--warmup", "8",
            "--models", str(folder / "models"), "--json", str(report), "--out", str(out)]
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = decoder_peers.main(argv)
    return code, json.loads(report.read_text()), out.read_text(), printed.getvalue(), folder / "models"


def test_timings_are_positive_and_every_step_ran_each_round(run):
    code, data, _, _, _ = run
    assert code == 0 and data["ok"]
    steps = data["steps"]
    assert {(s["encoder"], s["dtype"], s["prompt"]) for s in steps} == {
        (e, d, p) for e in ("harness", "st-torch") for d in ("fp32", "bf16") for p in ("none", "instruct")}
    for step in steps:
        assert len(step["encode_s"]) == 2 and all(t > 0 for t in step["encode_s"])
        assert step["median_s"] == pytest.approx(statistics.median(step["encode_s"]))
        assert all(t > 0 for t in step["load_s"]) and all(p > e for p, e in zip(step["process_s"], step["encode_s"]))
    assert {s["impl"] for s in steps if s["encoder"] == "harness"} <= {"native", "transformers"}
    assert {s["impl"] for s in steps if s["encoder"] == "harness"} == set(data["impl"].values())


def test_ratios_are_the_medians_ratio_and_are_printed(run):
    _, data, markdown, printed, _ = run
    medians = {(s["dtype"], s["prompt"], s["encoder"]): s["median_s"] for s in data["steps"]}
    assert len(data["ratios"]) == 4
    for row in data["ratios"]:
        s = row["setting"]
        expected = medians[(s["dtype"], s["prompt"], "st-torch")] / medians[(s["dtype"], s["prompt"], "harness")]
        assert row["fastest_peer"] == "st-torch"
        assert row["ratio"] == pytest.approx(expected)
        line = f"ratio tiny {s['dtype']} 1t {s['prompt']}: fastest peer (st-torch) / harness = {row['ratio']:.2f}"
        assert line in printed
        assert f"**{row['ratio']:.2f}×**" in markdown
    # no OpenVINO in the test run: it was not asked for, so no note either
    assert "st-openvino" not in markdown


def test_fp32_vectors_agree_and_bf16_is_reported(run):
    _, data, _, _, _ = run
    assert {c["peer"] for c in data["agreement"]} == {"st-torch"}
    checks = {(c["dtype"], c["prompt"]): c for c in data["agreement"]}
    assert set(checks) == {(d, p) for d in ("fp32", "bf16") for p in ("none", "instruct")}
    for prompt in ("none", "instruct"):
        fp32 = checks[("fp32", prompt)]
        assert fp32["sentences"] == 30 and 0 <= fp32["max_abs_delta"] <= 1e-4 < fp32["max_abs_value"]
        # bf16 may round differently on the two sides, but it is the same model and token
        assert 0 <= checks[("bf16", prompt)]["max_abs_delta"] < 0.2 * checks[("bf16", prompt)]["max_abs_value"]


def test_flops_and_tokens_are_computed_from_the_prompted_texts(run):
    _, data, _, _, models = run
    folder = models / "decoder-tiny"
    sentences = decoder_peers_sentences(30)
    for prompt, prefix in decoder_peers.PROMPTS.items():
        lengths = decoder_shapes.tokens_per_sentence(folder, [prefix + s for s in sentences], 512)
        assert data["tokens"][f"tiny/{prompt}"] == sum(lengths)
        # independent count: per layer q,o = 64x64 each, k,v = 64x32 each, MLP 3 x 64x128; causal n^2
        per_token = 2 * 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128)
        attention = sum(2 * 2 * n * n * 64 for n in lengths)
        assert data["flops"][f"tiny/{prompt}"] == pytest.approx(per_token * sum(lengths) + attention)
    assert data["tokens"]["tiny/instruct"] > data["tokens"]["tiny/none"] + 30 * 8


def decoder_peers_sentences(limit: int) -> list[str]:
    from benchmarks.peers.decoder_encode import load_sentences

    return load_sentences(limit)


def test_the_vectors_are_the_last_token_of_the_prompted_text(run, tmp_path):
    """The harness step's vectors against a one-text-at-a-time transformers forward on texts
    written out here, ending in the tokenizer's appended ``<|endoftext|>``; sentence-transformers'
    last-token pooling of a right-padded batch reads the same token."""
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    *_, models = run
    folder = models / "decoder-tiny"
    sentences = decoder_peers_sentences(12)
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps(sentences))
    spec = {"model": str(folder), "texts": str(texts), "prompt": decoder_peers.INSTRUCTION, "dtype": "fp32",
            "threads": 1, "max_length": 512, "warmup": 0, "vectors": str(tmp_path / "h.npy")}
    assert decoder_peers.harness_step(spec)["encode_s"] > 0
    harness = np.load(tmp_path / "h.npy")

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    written = "Instruct: Retrieve semantically similar text.\nQuery: " + sentences[0]
    ids = tokenizer(written, return_tensors="pt")
    assert ids["input_ids"][0, -1].item() == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    with torch.inference_mode():
        expected = model(**ids).last_hidden_state[0, -1].numpy()
    assert np.abs(harness[0] - expected).max() <= 1e-4

    st = SentenceTransformer(str(folder), device="cpu", model_kwargs={"dtype": torch.float32})
    assert st.tokenizer.padding_side == "right"
    lengths = [len(tokenizer(s)["input_ids"]) for s in sentences]
    assert len(set(lengths)) > 1  # the batch is padded: the pooling must skip the padding
    peer = st.encode(sentences, prompt=decoder_peers.INSTRUCTION, batch_size=12, convert_to_numpy=True)
    assert np.abs(harness - peer).max() <= 1e-4
    # and the prompt is really read
    bare = st.encode(sentences, batch_size=12, convert_to_numpy=True)
    assert np.abs(bare - peer).max() > 1e-3


def test_the_real_shapes_match_the_published_configs():
    qwen, llama = decoder_shapes.SHAPES["qwen3-0.6b"].config, decoder_shapes.SHAPES["llama-1b"].config
    assert [qwen[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                              "head_dim", "intermediate_size", "vocab_size")] == [1024, 28, 16, 8, 128, 3072, 151936]
    assert [llama[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                               "intermediate_size", "vocab_size")] == [2048, 16, 32, 8, 8192, 128256]
    # Qwen3-0.6B's 28 layers hold 440M weights (0.6B with its 156M embedding): 2 FLOPs each per token
    assert decoder_shapes.SHAPES["qwen3-0.6b"].forward_flops([1]) == pytest.approx(2 * 28 * (
        1024 * 2048 * 2 + 2 * 1024 * 1024 + 3 * 1024 * 3072) + 2 * 28 * 2048)


def test_openvino_is_skipped_with_a_note_without_the_peer_venv(monkeypatch, tmp_path):
    monkeypatch.setattr(decoder_peers, "peer_venv_ready", lambda: False)
    import contextlib
    import io

    report = tmp_path / "r.json"
    with contextlib.redirect_stdout(io.StringIO()):
        code = decoder_peers.main(["--shapes", "tiny", "--encoders", "harness", "st-openvino", "--dtypes", "fp32",
                                   "--threads", "1", "--prompts", "none", "--limit", "4", "--rounds", "1",
                                   "--warmup", "0", "--models", str(tmp_path / "models"), "--json", str(report)])
    data = json.loads(report.read_text())
    assert code == 0 and [s["encoder"] for s in data["steps"]] == ["harness"]
    assert data["ratios"] == [] and any(re.search(r"st-openvino: not measured, \.venv-peers", n) for n in data["notes"])


def test_the_checkpoint_keeps_the_top_level_rope_theta_older_transformers_read(run):
    """transformers 5 saves the RoPE base only in ``rope_parameters``; the OpenVINO peer's 4.57 reads
    ``rope_theta`` and would otherwise export the default 10,000 (other vectors, same cost)."""
    *_, models = run
    config = json.loads((models / "decoder-tiny" / "config.json").read_text())
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == 1000000.0


def test_a_peer_whose_process_dies_is_left_out_and_said(tmp_path, monkeypatch):
    """OpenVINO 2026.4.1 dies of SIGFPE on one thread for these decoders: the benchmark records
    the peer's failure (the signal and its last stderr line), leaves it out of the medians and
    ratios, and still measures and reports the rest; a harness failure would end it."""
    real = decoder_peers.step_command

    def dying_peer(step, folder, texts, vectors, args):
        command = real(step, folder, texts, vectors, args)
        if step.encoder != "st-torch":
            return command
        kill = "import os, signal, sys; print('bad threads', file=sys.stderr); os.kill(os.getpid(), signal.SIGFPE)"
        return [sys.executable, "-c", kill]

    monkeypatch.setattr(decoder_peers, "step_command", dying_peer)
    report = tmp_path / "report.json"
    argv = ["--shapes", "tiny", "--encoders", "harness", "st-torch", "--dtypes", "fp32", "--threads", "1",
            "--prompts", "none", "--limit", "12", "--rounds", "2", "--warmup", "4",
            "--models", str(tmp_path / "models"), "--json", str(report)]
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        code = decoder_peers.main(argv)
    data = json.loads(report.read_text())
    assert code == 0
    assert [s["encoder"] for s in data["steps"]] == ["harness"]
    assert len(data["steps"][0]["encode_s"]) == 2  # the harness ran both rounds
    assert data["ratios"] == [] and data["agreement"] == []
    said = 'killed by SIGFPE; its last stderr line: "bad threads"'
    assert any("st-torch at tiny fp32 1t none: not measured" in n and said in n for n in data["notes"]), data["notes"]


def test_a_peer_that_disagrees_with_transformers_is_left_out_not_the_harness_failed():
    """st-torch is transformers' own model: the harness must match it; another peer that does not
    match it (OpenVINO's Llama-1B export measured 5.4 off) computes something else."""
    def check(peer, delta, shape="s", prompt="p"):
        return {"peer": peer, "shape": shape, "prompt": prompt, "max_abs_delta": delta}

    bad, wrong = decoder_peers.judge_agreement([check("st-torch", 1e-6), check("st-openvino", 5.4)], 1e-3)
    assert bad == [] and wrong == [("st-openvino", "s", "p", 5.4)]
    # the harness off transformers: a failure, whatever the other peer says
    failing = [check("st-torch", 0.5), check("st-openvino", 1e-6)]
    assert decoder_peers.judge_agreement(failing, 1e-3) == ([failing[0]], [])
    # no st-torch checked: every peer must agree
    assert decoder_peers.judge_agreement([check("st-openvino", 0.5)], 1e-3)[0] == [check("st-openvino", 0.5)]
    # st-torch checked on another shape only: no reference for this one
    mixed = [check("st-torch", 1e-6, shape="other"), check("st-openvino", 0.5)]
    assert decoder_peers.judge_agreement(mixed, 1e-3) == ([mixed[1]], [])
    # NaN never agrees
    assert decoder_peers.judge_agreement([check("st-torch", float("nan"))], 1e-3)[0]
