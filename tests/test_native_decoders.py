"""The native decoder (Llama, Mistral, Qwen2, Qwen3) against transformers' own models on the tiny
fixtures (tests/fixtures.py write_tiny_decoder): every hidden state, both attention paths, both
dtypes, the tokenizer's ids; vectors independent of batch-mates; shared-prefix reuse equal to
encoding the whole text; the checkpoints the native path refuses and why; and a whole run whose
scores equal the transformers implementation's."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from harness.core.encoding.backbone import native_reason, resolve_backbone  # noqa: E402
from harness.core.encoding.pooling import View  # noqa: E402
from harness.core.encoding.prompts import PROMPTEOL, Prompt  # noqa: E402
from harness.core.encoding.settings import EncodeSettings  # noqa: E402

NATIVE = ["qwen2", "qwen3", "llama", "mistral"]
# Words of the fixtures' vocabularies (word-level for Llama/Mistral, a BPE trained on them for Qwen).
TEXTS = ["a man is playing guitar", "the dog", "two people are riding a horse in the park",
         "a cat is sleeping on the grass with a small red ball and the big blue car in the street",
         "dog", 'This sentence : "a man is playing." means in one word:"']
INSTRUCT = Prompt("Instruct: Retrieve similar text\nQuery: ")


def transformers_states(folder, texts, dtype=torch.float32):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, dtype=dtype).eval()
    out = []
    with torch.inference_mode():  # one text at a time: no padding convention involved
        for text in texts:
            out.append(model(**tokenizer(text, return_tensors="pt"), output_hidden_states=True).hidden_states)
    return out


@pytest.mark.parametrize("family", NATIVE)
def test_every_hidden_state_matches_transformers(family, tiny_decoders):
    """A batch of mixed lengths, packed: every hidden state of every real token against
    transformers' base model run on each text alone, to 1e-5 in fp32. The last entry is the final
    norm's output, as transformers gives."""
    from harness.core.encoding.native import load_native
    from harness.core.encoding.native_llama import DecoderTokenizer

    folder = tiny_decoders[family]
    assert resolve_backbone(str(folder)).native_ok
    tokenizer = DecoderTokenizer(folder, 128)
    batch = tokenizer.pad(tokenizer.encode(TEXTS))
    with torch.inference_mode():
        states, pooled = load_native(folder)(**batch)
    assert pooled is None and len(states) == 3
    for row, reference in enumerate(transformers_states(folder, TEXTS)):
        length = int(batch["attention_mask"][row].sum())
        assert length == reference[0].shape[1]
        for ours, theirs in zip(states, reference):
            np.testing.assert_allclose(ours[row, :length].numpy(), theirs[0].numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", NATIVE)
def test_bf16_runs_and_stays_close_to_fp32(family, tiny_decoders):
    from harness.core.encoding.native import load_native
    from harness.core.encoding.native_llama import DecoderTokenizer

    folder = tiny_decoders[family]
    tokenizer = DecoderTokenizer(folder, 128)
    batch = tokenizer.pad(tokenizer.encode(TEXTS))
    mask = batch["attention_mask"].bool()
    with torch.inference_mode():
        fp32 = load_native(folder)(**batch)[0]
        half = load_native(folder, torch.bfloat16)(**batch)[0]
    assert half[-1].dtype == torch.bfloat16
    for a, b in zip(half, fp32):
        delta = (a.float()[mask] - b[mask]).abs().max().item()
        assert delta < 0.1, delta  # bf16 rounding, not another computation
    assert (half[-1].float()[mask] - fp32[-1][mask]).abs().max().item() > 0  # it did run in bf16


@pytest.mark.parametrize("family", NATIVE)
def test_bf16_fused_products_are_as_close_to_fp32_as_the_public_ops(family, tiny_decoders, monkeypatch):
    """bf16 on CPU runs oneDNN products with SiLU, the gate product and the residual adds inside
    them, on reordered weights (the module's own copies released). Against the fp32 states, the
    fused run is as accurate as the public ops (F.linear, F.silu) run with the fusion off, and it
    differs from that run (both paths ran)."""
    from harness.core.encoding import native_llama
    from harness.core.encoding.kernels import fused_linear_ops
    from harness.core.encoding.native import load_native

    if fused_linear_ops() is None:
        pytest.skip("this torch or CPU has no oneDNN bf16 fused linear: only the public path exists")
    folder = tiny_decoders[family]
    tokenizer = native_llama.DecoderTokenizer(folder, 128)
    batch = tokenizer.pad(tokenizer.encode(TEXTS))
    mask = batch["attention_mask"].bool()
    with torch.inference_mode():
        fp32 = load_native(folder)(**batch)[0]
        fused_model = load_native(folder, torch.bfloat16)
        fused = fused_model(**batch)[0]
        monkeypatch.setattr(native_llama, "fused_linear_available", lambda device, dtype: False)
        public_model = load_native(folder, torch.bfloat16)
        public = public_model(**batch)[0]
    layer = fused_model.layers[0]
    assert layer.qkv.weight.numel() == layer.gate_up.weight.numel() == 0  # released, packed copies kept
    assert public_model.layers[0].gate_up.weight.numel() > 0
    with pytest.raises(RuntimeError, match="after the first forward"):
        fused_model.set_compute_dtype(torch.float32)
    for f, p, reference in zip(fused, public, fp32):
        fused_error = (f.float()[mask] - reference[mask]).abs().max().item()
        public_error = (p.float()[mask] - reference[mask]).abs().max().item()
        assert fused_error <= 2 * public_error + 0.01, (fused_error, public_error)
    assert not torch.equal(fused[-1], public[-1])


@pytest.mark.parametrize("family", NATIVE)
def test_native_tokenizer_gives_transformers_ids(family, tiny_decoders):
    """Llama and Mistral prepend <s>, Qwen adds nothing: the ids equal the HF tokenizer's."""
    from transformers import AutoTokenizer

    from harness.core.encoding.native_llama import DecoderTokenizer

    folder = tiny_decoders[family]
    ours = DecoderTokenizer(folder, 128).encode([*TEXTS, "Instruct: Retrieve similar text\nQuery: a dog"])
    theirs = AutoTokenizer.from_pretrained(folder)
    for (ids, _), text in zip(ours, [*TEXTS, "Instruct: Retrieve similar text\nQuery: a dog"]):
        assert ids == theirs(text)["input_ids"], text
    first = {ids[0] for ids, _ in ours}
    if family in ("llama", "mistral"):
        assert first == {theirs.bos_token_id}
    else:
        assert theirs.bos_token_id not in first


def _forward(folder, **settings):
    from harness.core.encoding.forward import ForwardPass

    return ForwardPass(resolve_backbone(str(folder)), EncodeSettings(progress=False, **settings))


@pytest.mark.parametrize("family", NATIVE)
def test_a_vector_is_bit_identical_whatever_its_batch_mates(family, tiny_decoders):
    """Each sentence alone and packed with sentences of other lengths, with and without a shared
    prefix: the same bytes."""
    views = [View("last", 2), View("last", 2, PROMPTEOL), View("mean", 1, INSTRUCT), View("last", 1, INSTRUCT)]
    forward = _forward(tiny_decoders[family])
    together = forward.encode_all(TEXTS, views)
    assert forward.impl == "native"
    for i, text in enumerate(TEXTS):
        alone = forward.encode_all([text], views)
        for view in views:
            assert alone[view][0].tobytes() == together[view][i].tobytes(), (family, text, str(view))


def _without_reuse(monkeypatch):
    from harness.core.encoding import shared_prefix

    monkeypatch.setattr(shared_prefix, "shared_length", lambda ids, prefix: 0)


@pytest.mark.parametrize("family", NATIVE)
def test_prefix_reuse_equals_encoding_the_whole_text(family, tiny_decoders, monkeypatch):
    """PromptEOL and an instruction prompt: every view (the last token, the mean over all tokens,
    the prefix's included, and over the sentence's own) equals the whole text encoded, 1e-5 fp32;
    and the prefix really was shared."""
    views = [View(pooling, layer, prompt) for prompt in (PROMPTEOL, INSTRUCT)
             for pooling, layer in (("last", 2), ("mean", 1), ("mean_sentence", 2))]
    forward = _forward(tiny_decoders[family])
    reused = forward.encode_all(TEXTS, views)
    counts = forward.shared_prefixes()
    assert counts[PROMPTEOL.parts()[0]][0] == len(TEXTS)  # every text took the whole prefix
    full, part, none = counts[INSTRUCT.parts()[0]]
    assert full + part == len(TEXTS) and none == 0
    _without_reuse(monkeypatch)
    plain = _forward(tiny_decoders[family])
    whole = plain.encode_all(TEXTS, views)
    assert all(none == len(TEXTS) for _, _, none in plain.shared_prefixes().values())
    for view in views:
        np.testing.assert_allclose(reused[view], whole[view], atol=1e-5, rtol=0, err_msg=str(view))
    transformers = _forward(tiny_decoders[family], impl="transformers").encode_all(TEXTS, views)
    for view in views:
        np.testing.assert_allclose(reused[view], transformers[view], atol=1e-5, rtol=0, err_msg=str(view))


def test_tokens_merging_across_the_prefix_end_share_less_or_nothing(tiny_decoders, monkeypatch):
    """The fixture Qwen's byte-level BPE reads ``Query: `` alone as ``Query``, ``:``, ``Ġ`` but
    ``Query: is a man`` as ``Query``, ``:``, ``Ġis``…: the prefix's final space merged into the
    sentence's first word, so that text shares the prefix's first two tokens only (``Query: a dog``
    keeps ``Ġ`` apart: all three). ``Th`` + ``is a man`` reads ``This``…, whose first token is not
    the prefix's: encoded whole. Either way the vectors equal the whole text's."""
    from tokenizers import Tokenizer

    from harness.core.encoding.shared_prefix import leading_ids, shared_length

    folder = tiny_decoders["qwen2"]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    query, merged = Prompt("Query: "), Prompt("Th{sentence}")
    texts = ["a dog", "is a man", "is the dog"]

    def shared(prompt):
        prefix = leading_ids(tokenizer.encode(prompt.parts()[0]))
        return [shared_length(tokenizer.encode(prompt.apply(t)).ids, prefix) for t in texts]

    assert tokenizer.encode("Query: ").tokens == ["Query", ":", "Ġ"]
    assert tokenizer.encode("Query: is a man").tokens[:3] == ["Query", ":", "Ġis"]
    assert shared(query) == [3, 2, 2]
    assert tokenizer.encode("This a man").tokens[0] == "This"
    assert shared(merged) == [1, 0, 0]  # "Tha dog" keeps "Th"; "This…" shares nothing
    views = [View("last", 2, query), View("mean", 2, query), View("last", 2, merged), View("mean", 1, merged)]
    forward = _forward(folder)
    reused = forward.encode_all(texts, views)
    counts = forward.shared_prefixes()
    assert counts == {"Query: ": (1, 2, 0), "Th": (1, 0, 2)}  # (all shared, part shared, encoded whole)
    _without_reuse(monkeypatch)
    whole = _forward(folder).encode_all(texts, views)
    for view in views:
        np.testing.assert_allclose(reused[view], whole[view], atol=1e-5, rtol=0, err_msg=str(view))


def test_the_encode_note_says_how_the_prefix_is_computed(tiny_decoders, tiny_bert):
    from harness.core.encoding.shared_prefix import prefix_note

    ref = resolve_backbone(str(tiny_decoders["llama"]))
    note = prefix_note(ref, "native", PROMPTEOL, 128)
    # <s> This sentence : " → 5 tokens for the word-level tokenizer
    assert note.startswith("prefix 'This sentence : \"' (5 tokens) computed once and shared"), note
    assert "encoded whole" in note
    assert prefix_note(ref, "native", Prompt(), 128) == ""
    assert "encoded with each sentence (transformers encoder)" in prefix_note(ref, "transformers", PROMPTEOL, 128)


def test_a_sliding_window_matches_transformers_where_it_bites(tiny_decoders, tmp_path):
    """Mistral's window of 3 on texts of up to 20 tokens: each token sees itself and the two before
    it, as transformers masks it."""
    from harness.core.encoding.native import load_native
    from harness.core.encoding.native_llama import DecoderTokenizer

    folder = tmp_path / "mistral-window"
    shutil.copytree(tiny_decoders["mistral"], folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["sliding_window"] = 3
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert not native_reason(folder, config)
    tokenizer = DecoderTokenizer(folder, 128)
    batch = tokenizer.pad(tokenizer.encode(TEXTS))
    with torch.inference_mode():
        states = load_native(folder)(**batch)[0]
        unwindowed = load_native(tiny_decoders["mistral"])(**batch)[0]
    for row, reference in enumerate(transformers_states(folder, TEXTS)):
        length = int(batch["attention_mask"][row].sum())
        np.testing.assert_allclose(states[-1][row, :length].numpy(), reference[-1][0].numpy(), atol=1e-5, rtol=0)
    assert (states[-1] - unwindowed[-1]).abs().max() > 1e-3  # the window did bite


LLAMA3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}


@pytest.mark.parametrize("family, change, reason", [
    ("qwen3", {}, ""),
    ("llama", {}, ""),
    ("mistral", {"sliding_window": None}, ""),
    ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}, "rope type linear"),
    ("llama", {"rope_parameters": LLAMA3}, ""),  # Llama 3.x
    ("llama", {"rope_parameters": {**LLAMA3, "low_freq_factor": None}}, "rope type llama3 without its four parameters"),
    ("llama", {"rope_parameters": None, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope type dynamic"),
    ("llama", {"rope_parameters": None, "rope_theta": 5e5, "rope_scaling": None}, ""),  # transformers 4 layout
    ("qwen3", {"hidden_act": "gelu"}, "hidden_act gelu"),
    ("llama", {"attention_bias": True}, "attention bias"),
    ("llama", {"mlp_bias": True}, "MLP bias"),
    ("qwen2", {"use_sliding_window": True}, "sliding-window layers"),
    ("qwen2", {"layer_types": ["full_attention", "sliding_attention"]}, "non-full attention layers"),
    ("qwen3", {"partial_rotary_factor": 0.5}, "partial rotary"),
    ("qwen3", {"num_key_value_heads": 3}, "head counts"),
    ("gpt2", {}, "no native gpt2"),
    ("opt", {}, "no native opt"),
])
def test_native_decoders_are_used_only_for_what_they_implement(tiny_decoders, family, change, reason):
    folder = tiny_decoders[family]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8")) | change
    assert native_reason(folder, config) == reason
    assert (not native_reason(folder, config)) is (reason == "")


def test_llama3_rope_scaling_matches_transformers_where_it_bites(tiny_decoders, tmp_path):
    """Llama 3.x rescales its rope frequencies by wavelength: with a context of 16 every frequency of the tiny
    model's head size 8 is rescaled or interpolated, and every hidden state still equals transformers'."""
    from harness.core.encoding.native import load_native
    from harness.core.encoding.native_llama import DecoderTokenizer

    folder = tmp_path / "llama3"
    shutil.copytree(tiny_decoders["llama"], folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps(config | {"rope_parameters": LLAMA3}), encoding="utf-8")
    assert resolve_backbone(str(folder)).native_ok
    texts = [" ".join(["people playing guitar in the park"] * 4), "a man"]
    tokenizer = DecoderTokenizer(folder, 128)
    batch = tokenizer.pad(tokenizer.encode(texts))
    with torch.inference_mode():
        states, _ = load_native(folder)(**batch)
        plain, _ = load_native(tiny_decoders["llama"])(**batch)
    for row, reference in enumerate(transformers_states(folder, texts)):
        length = int(batch["attention_mask"][row].sum())
        for ours, theirs in zip(states, reference):
            np.testing.assert_allclose(ours[row, :length].numpy(), theirs[0].numpy(), atol=1e-5, rtol=0)
    assert (states[-1][0] - plain[-1][0]).abs().max() > 1e-3  # the scaling did change the states


def test_missing_files_and_disagreeing_tokenizer_flags_are_not_native(tiny_decoders, tmp_path):
    folder = tmp_path / "llama"
    shutil.copytree(tiny_decoders["llama"], folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    settings_path = folder / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text(encoding="utf-8"))
    settings_path.write_text(json.dumps(settings | {"add_eos_token": True}), encoding="utf-8")
    assert native_reason(folder, config) == "tokenizer_config.json's add_eos_token disagrees with tokenizer.json"
    settings_path.write_text(json.dumps(settings | {"add_bos_token": True, "add_eos_token": False}), encoding="utf-8")
    assert native_reason(folder, config) == ""  # the template adds <s> and no </s>: they agree
    (folder / "tokenizer.json").unlink()
    assert native_reason(folder, config) == "no tokenizer.json"


def test_native_impl_refused_with_the_reason(tiny_decoders, tmp_path):
    from harness.core.encoding.provider import ViewProvider
    from harness.core.errors import UserError

    ref = resolve_backbone(str(tiny_decoders["gpt2"]))
    with pytest.raises(UserError, match=r"is not a plain BERT.*\(no native gpt2\); use --encoder-impl transformers"):
        ViewProvider(ref, EncodeSettings(impl="native"), tmp_path)


def _records(out):
    records = {}
    for path in sorted((out / "runs").rglob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        records[record["method"]["label"]] = record
    return records


def _score_values(record):
    """Every number under the record's scores, flattened in a fixed order."""
    def walk(value):
        if isinstance(value, dict):
            for key in sorted(value):
                yield from walk(value[key])
        elif isinstance(value, list):
            for item in value:
                yield from walk(item)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield float(value)
    return list(walk(record["scores"]))


def test_a_run_on_qwen3_is_native_and_scores_as_transformers(bench, tiny_decoders, tmp_path):
    from fixtures import pairs

    rng = np.random.default_rng(3)
    task = tmp_path / "pairs.tsv"
    task.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in pairs(rng, 24)),
                    encoding="utf-8")
    common = ["--backbone", str(tiny_decoders["qwen3"]), "--methods", "last", "prompteol", "--tasks", f"file:{task}"]
    code, _, err = bench(*common, "--output-dir", str(tmp_path / "native"))
    assert code == 0, err
    # the encode line says how the prompt's prefix is computed, and how many texts shared it
    unique = len({s for line in task.read_text(encoding="utf-8").splitlines()[1:] for s in line.split("\t")[:2]})
    assert "prefix 'This sentence : \"' (" in err and "tokens) computed once and shared" in err
    counts = re.search(r"prefix 'This sentence : \"' computed once: shared whole by (\d+) text\(s\), in part by (\d+) "
                       r"\(tokens merged across its end\), not at all by (\d+)", err)
    assert counts and sum(map(int, counts.groups())) == unique, err
    code, _, err = bench(*common, "--encoder-impl", "transformers", "--output-dir", str(tmp_path / "hf"))
    assert code == 0, err
    assert "prefix 'This sentence : \"' encoded with each sentence (transformers encoder)" in err
    assert "computed once:" not in err
    native, hf = _records(tmp_path / "native"), _records(tmp_path / "hf")
    assert set(native) == set(hf) == {"last", "prompteol"}
    for label in native:
        assert native[label]["backbone"]["encoder_impl"] == "native"
        assert hf[label]["backbone"]["encoder_impl"] == "transformers"
        ours, theirs = _score_values(native[label]), _score_values(hf[label])
        assert ours and len(ours) == len(theirs)
        np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)


def test_loading_a_decoder_fills_nothing_at_random_and_imports_no_reference_ops(tiny_decoders):
    """The decoder is built on the meta device and takes the checkpoint's tensors: nothing is
    computed there (a meta arange or normal_ imports torch's reference ops and sympy, 800 modules,
    0.8 s of every decoder run), and the rope frequencies are real CPU numbers, transformers' own."""
    import subprocess
    import sys

    script = (
        "import sys, json, torch\n"
        "from pathlib import Path\n"
        "from harness.core.encoding.native_llama import load_decoder, rope_frequencies\n"
        "before = set(sys.modules)\n"
        f"model = load_decoder(Path({str(tiny_decoders['qwen2'])!r}))\n"
        "new = sorted(set(sys.modules) - before)\n"
        "print(json.dumps({'heavy': [m for m in new if m.startswith(('sympy', 'torch._refs', 'torch._decomp'))],\n"
        "    'device': model.inv_freq.device.type, 'freq': model.inv_freq.tolist(),\n"
        "    'meta': [n for n, p in [*model.named_parameters(), *model.named_buffers()] if p.is_meta]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["heavy"] == [] and seen["meta"] == [] and seen["device"] == "cpu"
    config = json.loads((tiny_decoders["qwen2"] / "config.json").read_text())
    theta = config.get("rope_theta") or config["rope_parameters"]["rope_theta"]
    head = config["hidden_size"] // config["num_attention_heads"]
    expected = 1.0 / theta ** (np.arange(0, head, 2) / head)  # RoFormer's frequencies, in numpy
    assert np.allclose(seen["freq"], expected, rtol=1e-6)
