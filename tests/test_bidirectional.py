"""Decoders without their causal mask (LLM2Vec, a view's ``attention=bidirectional``) and LoRA
adapters merged onto a backbone (``adapter=DIR``), on the tiny decoders of tests/fixtures.py.

References are independent of the harness: transformers' own forward (eager attention) given an
explicit non-causal 4D mask, and peft's own ``merge_and_unload`` of an adapter built here with
peft. Both engines (native and transformers) must give their vectors to 1e-5 in fp32."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from harness.core.encoding.backbone import resolve_backbone  # noqa: E402
from harness.core.encoding.forward import ForwardPass  # noqa: E402
from harness.core.encoding.pooling import View  # noqa: E402
from harness.core.encoding.prompts import Prompt  # noqa: E402
from harness.core.encoding.settings import EncodeSettings  # noqa: E402
from harness.core.errors import UserError  # noqa: E402

NATIVE = ["qwen2", "qwen3", "llama", "mistral"]
TEXTS = ["a man is playing guitar", "the dog", "two people are riding a horse in the park",
         "a cat is sleeping on the grass with a small red ball", "dog"]
INSTRUCT = Prompt("Retrieve similar text : ")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def settings(impl):
    return EncodeSettings(device="cpu", threads=1, progress=False, impl=impl)


def reference_states(model, tokenizer, text, bidirectional):
    """transformers' forward of one text: causal as the model is, or with an explicit all-visible
    4D mask (0 everywhere: one text, no padding)."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    mask = torch.zeros(1, 1, ids.shape[1], ids.shape[1]) if bidirectional else torch.ones_like(ids)
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states


def hf(folder):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize("family", NATIVE)
def test_bidirectional_views_equal_transformers_forward_with_a_non_causal_mask(family, tiny_decoders):
    """mean@last and mean@1 without the causal mask, on both engines, against transformers' eager
    forward with an explicit non-causal 4D mask; the causal view of the same pass stays causal, and
    the two differ (a mask left on, or dropped everywhere, fails)."""
    folder = tiny_decoders[family]
    ref = resolve_backbone(str(folder))
    assert ref.causal and ref.bidirectional_ok
    model, tokenizer = hf(folder)
    views = [View("mean", 2, bidirectional=True), View("mean", 1, bidirectional=True), View("mean", 2)]
    expected = {view: [] for view in views}
    for text in TEXTS:
        free, causal = reference_states(model, tokenizer, text, True), reference_states(model, tokenizer, text, False)
        for view in views:
            states = free if view.bidirectional else causal
            expected[view].append(states[view.layer][0].mean(0).numpy())
    for impl in ("native", "transformers"):
        got = ForwardPass(ref, settings(impl)).encode_all(TEXTS, views)
        for view in views:
            np.testing.assert_allclose(got[view], np.stack(expected[view]), atol=1e-5, rtol=0, err_msg=f"{impl} {view}")
    assert np.abs(np.stack(expected[views[0]]) - np.stack(expected[views[2]])).max() > 1e-2


def test_padded_transformers_batch_masks_padding_only(tiny_decoders):
    """A padded batch of mixed lengths on the transformers engine (a study's encode_batches): the
    padding keys are masked, nothing else, so every text's vector is its own."""
    folder = tiny_decoders["llama"]
    ref = resolve_backbone(str(folder))
    view = View("mean", 2, bidirectional=True)
    whole, _ = ForwardPass(ref, settings("transformers")).encode_batches(TEXTS, [view], [list(range(len(TEXTS)))],
                                                                          top_up=False)
    alone = ForwardPass(ref, settings("native")).encode_all(TEXTS, [view])[view]
    np.testing.assert_allclose(whole[view], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("impl", ["native", "transformers"])
def test_instruction_left_out_of_the_mean_as_llm2vec_does(impl, tiny_decoders):
    """Under an instruction, mean_sentence averages the sentence's tokens only. LLM2Vec's rule
    (llm2vec.py tokenize: ``embed_mask`` = the last n tokens, n the sentence's token count alone,
    add_special_tokens=False), computed here on transformers' bidirectional states of the whole
    prompted text, gives the same vector; the native decoder shares no prefix here (its states
    depend on the sentence after it)."""
    folder = tiny_decoders["llama"]
    ref = resolve_backbone(str(folder))
    model, tokenizer = hf(folder)
    view = View("mean_sentence", 2, INSTRUCT, bidirectional=True)
    expected = []
    for text in TEXTS:
        states = reference_states(model, tokenizer, INSTRUCT.apply(text), True)[-1][0]
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        expected.append(states[-n:].mean(0).numpy())
    forward = ForwardPass(ref, settings(impl))
    got = forward.encode_all(TEXTS, [view])[view]
    np.testing.assert_allclose(got, np.stack(expected), atol=1e-5, rtol=0)
    assert forward.shared_prefixes() in ({}, {"": (0, 0, 0)}) or not any(
        full or part for full, part, _ in forward.shared_prefixes().values())


def test_bidirectional_refused_where_it_means_nothing(tiny_bert, tiny_decoders, tmp_path):
    from harness.core.encoding.provider import ViewProvider

    with pytest.raises(UserError, match="is not a decoder, its attention is bidirectional already"):
        ViewProvider(resolve_backbone(str(tiny_bert)), settings("auto"), tmp_path).store(
            View("mean", 2, bidirectional=True))
    with pytest.raises(UserError, match="does not run without its causal mask"):
        ViewProvider(resolve_backbone(str(tiny_decoders["gpt2"])), settings("auto"), tmp_path).store(
            View("mean", 2, bidirectional=True))
    # position 0 has seen the whole text once the mask is gone: cls is no longer refused
    provider = ViewProvider(resolve_backbone(str(tiny_decoders["llama"])), settings("auto"), tmp_path)
    provider.store(View("cls", 2, bidirectional=True))
    with pytest.raises(UserError, match="causal"):
        provider.store(View("cls", 2))


def test_attention_is_in_the_view_key_and_a_causal_key_is_unchanged(tiny_decoders):
    from harness.core.encoding.windows import view_cache_key

    ref = resolve_backbone(str(tiny_decoders["llama"]))
    causal = view_cache_key(ref, settings("auto"), "native", View("mean", 2))
    free = view_cache_key(ref, settings("auto"), "native", View("mean", 2, bidirectional=True))
    assert "attention" not in causal and free == {**causal, "attention": "bidirectional"}
    assert str(View("mean", 2, bidirectional=True)) == "mean@2 bidirectional"


# -- adapters ---------------------------------------------------------------------------------------

def write_adapter(base, folder, causal_lm, seed=0):
    """A LoRA built with peft itself on ``base``, its B matrices random (peft starts them at zero,
    which would change nothing): saved from a *ForCausalLM (``causal_lm``: tensors named
    ``base_model.model.model.…``) or from the base model. Returns peft's merged base model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = (AutoModelForCausalLM if causal_lm else AutoModel).from_pretrained(base, attn_implementation="eager")
    config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False)
    wrapped = get_peft_model(model, config)
    wrapped.save_pretrained(str(folder))
    merged = wrapped.merge_and_unload().eval()
    return merged.base_model if causal_lm else merged


@pytest.mark.parametrize("family,causal_lm", [("llama", True), ("qwen2", False), ("mistral", True)])
def test_adapter_vectors_equal_peft_merged_model(family, causal_lm, tiny_decoders, tmp_path):
    """Both engines with the adapter merged equal peft's merged model's forward, causal and
    bidirectional (LLM2Vec's combination); an adapter saved from a *ForCausalLM (whose names peft
    would silently fail to match on the base model) lands too. The native engine merges it itself."""
    from transformers import AutoTokenizer

    folder = tiny_decoders[family]
    merged = write_adapter(folder, tmp_path / "lora", causal_lm)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ref = resolve_backbone(str(folder)).with_adapter(str(tmp_path / "lora"))
    assert ref.native_ok and ref.adapter.rank == 4 and ref.adapter.scale == 2.0
    views = [View("mean", 2), View("mean", 2, bidirectional=True)]
    expected = {view: np.stack([reference_states(merged, tokenizer, text, view.bidirectional)[2][0].mean(0).numpy()
                                for text in TEXTS]) for view in views}
    base = ForwardPass(resolve_backbone(str(folder)), settings("native")).encode_all(TEXTS, views[:1])[views[0]]
    assert np.abs(base - expected[views[0]]).max() > 1e-2  # the adapter changes the vectors
    for impl in ("native", "transformers"):
        got = ForwardPass(ref, settings(impl)).encode_all(TEXTS, views)
        for view in views:
            np.testing.assert_allclose(got[view], expected[view], atol=1e-5, rtol=0, err_msg=f"{impl} {view}")


def test_adapter_digest_is_in_the_cache_key(tiny_decoders, tmp_path):
    from harness.core.encoding.windows import view_cache_key

    folder = tiny_decoders["llama"]
    write_adapter(folder, tmp_path / "a", True, seed=0)
    write_adapter(folder, tmp_path / "b", True, seed=1)
    base = resolve_backbone(str(folder))
    keys = [view_cache_key(ref, settings("auto"), "native", View("mean", 2))
            for ref in (base, base.with_adapter(str(tmp_path / "a")), base.with_adapter(str(tmp_path / "b")))]
    assert "adapter" not in keys[0] and len({json.dumps(k, sort_keys=True) for k in keys}) == 3
    assert base.with_adapter(str(tmp_path / "a")).adapter.record()["sha256"] == keys[1]["adapter"]


def test_broken_adapters_are_refused_in_one_line(tiny_decoders, tmp_path):
    folder = tiny_decoders["llama"]
    base = resolve_backbone(str(folder))
    good = tmp_path / "good"
    write_adapter(folder, good, True)

    def broken(name, change):
        target = tmp_path / name
        shutil.copytree(good, target)
        change(target)
        return str(target)

    def truncate(target):
        path = target / "adapter_model.safetensors"
        path.write_bytes(path.read_bytes()[:-100])

    def retype(target):
        config = json.loads((target / "adapter_config.json").read_text())
        (target / "adapter_config.json").write_text(json.dumps({**config, "peft_type": "IA3"}))

    cases = {
        str(tmp_path / "nowhere"): "no such directory",
        broken("noconfig", lambda t: (t / "adapter_config.json").unlink()): "has no adapter_config.json",
        broken("noweights", lambda t: (t / "adapter_model.safetensors").unlink()): "has no adapter_model.safetensors",
        broken("truncated", truncate): "adapter_model.safetensors .*truncated",
        broken("badjson", lambda t: (t / "adapter_config.json").write_text("{")): "adapter_config.json: not valid JSON",
        broken("ia3", retype): "is a IA3 adapter, not a LoRA",
    }
    for path, message in cases.items():
        with pytest.raises(UserError, match=message) as caught:
            base.with_adapter(path)
        assert "\n" not in str(caught.value)
    # an adapter of another model (its B matrices for a narrower width): refused on both engines
    # when the weights load
    def narrower(target):
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(target / "adapter_model.safetensors"))
        save_file({k: v[:16] if ".lora_B." in k else v for k, v in tensors.items()},
                  str(target / "adapter_model.safetensors"))

    ref = base.with_adapter(broken("other", narrower))
    for impl in ("native", "transformers"):
        with pytest.raises(UserError, match=r"another model|does not fit backbone|match no module") as caught:
            ForwardPass(ref, settings(impl)).encode_all(TEXTS[:1], [View("mean", 2)])
        assert "\n" not in str(caught.value)


def test_a_run_records_the_adapter_and_attention(bench, tiny_decoders, tmp_path):
    """The CLI end to end: the options as ``--set``, the label, the record's adapter digest, the
    view in the encode line; a missing adapter is one error line and exit 2."""
    from fixtures import pairs

    folder = tiny_decoders["llama"]
    write_adapter(folder, tmp_path / "lora", True)
    rng = np.random.default_rng(3)
    task = tmp_path / "pairs.tsv"
    task.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in pairs(rng, 12)),
                    encoding="utf-8")
    common = ["--backbone", str(folder), "--methods", "avg-sentence", "--tasks", f"file:{task}",
              "--set", "avg-sentence.attention=bidirectional"]
    code, _, err = bench(*common, "--set", f"avg-sentence.adapter={tmp_path / 'lora'}")
    assert code == 0, err
    assert "+ adapter" in err and "mean_sentence@2 bidirectional" in err
    (path,) = sorted((tmp_path / "out" / "runs").rglob("*.json"))
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["method"]["spec"]["params"]["attention"] == "bidirectional"
    assert record["method"]["label"].startswith("avg-sentence[attention=bidirectional,adapter=")
    adapter = resolve_backbone(str(folder)).with_adapter(str(tmp_path / "lora")).adapter
    assert record["backbone"]["adapter"]["sha256"] == adapter.digest
    code, _, err = bench(*common, "--set", f"avg-sentence.adapter={tmp_path / 'none'}")
    assert code == 2 and "error: adapter" in err and "no such directory" in err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
