"""The one tokenizer every engine uses (harness/core/encoding/tokenizer.py): the same token ids on
the native and transformers paths on every family fixture, including a Qwen2 checkpoint whose
tokenizer class transformers 5 overrides, and on that one the same vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.core.encoding.backbone import resolve_backbone

# Fixture words, a prompt, numbers (which the Qwen2 fixture's BPE merges), a combining accent
# (NFC would compose it), punctuation and runs of spaces.
TEXTS = ["a man is playing guitar", "the dog", 'This sentence : "a man is playing." means in one word:"',
         "two 12 dogs in 2023 and 1999", "cafe\u0301 dog 100", "Unknown WORDS, punctuation!  and   spaces",
         "Instruct: Retrieve similar text\nQuery: a dog"]


@pytest.fixture(scope="module")
def tiny_qwen2_numbers(tmp_path_factory) -> Path:
    from fixtures import write_tiny_qwen2_numbers

    return write_tiny_qwen2_numbers(tmp_path_factory.mktemp("models") / "tiny-qwen2-numbers")


FIXTURES = ["bert", "roberta", "mpnet", "deberta", "opt", "qwen2", "qwen3", "llama", "mistral", "gpt2",
            "qwen2-numbers"]


def fixture_folder(name: str, request) -> Path:
    if name == "qwen2-numbers":
        return request.getfixturevalue("tiny_qwen2_numbers")
    if name in ("opt", "qwen2", "qwen3", "llama", "mistral", "gpt2"):
        return request.getfixturevalue("tiny_decoders")[name]
    return request.getfixturevalue(f"tiny_{name}")


@pytest.mark.parametrize("name", FIXTURES)
def test_native_and_transformers_paths_see_the_same_token_ids(name, request):
    """Both engines tokenize with the one loader's tokenizer: the same ids for every text, on every
    family fixture (for OPT and GPT-2, which have no native path, the loader's own ids)."""
    pytest.importorskip("torch")
    from harness.core.encoding.engines import NativeDecoderEngine, NativeEngine, TransformersEngine
    from harness.core.encoding.settings import EncodeSettings
    from harness.core.encoding.tokenizer import load_tokenizer

    folder = fixture_folder(name, request)
    ref = resolve_backbone(str(folder))
    settings = EncodeSettings(progress=False)
    transformers_ids = [item["input_ids"] for item in TransformersEngine(ref, settings, "cpu").tokenize(TEXTS)]
    assert transformers_ids == [ids for ids, _ in load_tokenizer(folder, 256).encode(TEXTS)]
    assert ref.native_ok is (name not in ("opt", "gpt2"))
    if ref.native_ok:
        engine = (NativeDecoderEngine if ref.causal else NativeEngine)(ref, settings, "cpu")
        assert [item[0] for item in engine.tokenize(TEXTS)] == transformers_ids


def test_the_overridden_qwen2_tokenizer_is_read_as_its_files_say(tiny_qwen2_numbers):
    """transformers 5's AutoTokenizer loads the fixture with Qwen2Tokenizer (its tokenizer_config
    names the generic fast class), which splits digits one by one and composes accents: other ids
    than the checkpoint's tokenizer.json gives. The harness's transformers tokenizer keeps the
    class (its inputs, special tokens) and gives the file's ids."""
    from transformers import AutoTokenizer

    from harness.core.encoding.tokenizer import load_hf_tokenizer, load_tokenizer

    file_ids = [ids for ids, _ in load_tokenizer(tiny_qwen2_numbers, 256).encode(TEXTS)]
    auto = AutoTokenizer.from_pretrained(str(tiny_qwen2_numbers))
    ours = load_hf_tokenizer(tiny_qwen2_numbers)
    assert type(ours) is type(auto) and ours.model_input_names == auto.model_input_names
    assert ours(TEXTS)["input_ids"] == file_ids
    if type(auto).__name__ == "Qwen2Tokenizer":  # the override this fixture exists for
        differ = [text for text, ids in zip(TEXTS, auto(TEXTS)["input_ids"]) if ids != file_ids[TEXTS.index(text)]]
        assert differ == ["two 12 dogs in 2023 and 1999", "cafe\u0301 dog 100"]


def test_the_overridden_qwen2_gives_the_same_vectors_on_both_paths(tiny_qwen2_numbers, tmp_path):
    """fp32 vectors of the native decoder and of transformers' model agree within 1e-5 on text
    whose ids transformers' own tokenizer class would change."""
    pytest.importorskip("torch")
    from harness.core.encoding.pooling import View
    from harness.core.encoding.provider import ViewProvider
    from harness.core.encoding.settings import EncodeSettings

    ref = resolve_backbone(str(tiny_qwen2_numbers))
    views = [View("mean", -1), View("last", -1), View("mean", 1)]
    vectors = {}
    for impl in ("native", "transformers"):
        provider = ViewProvider(ref, EncodeSettings(impl=impl, progress=False), tmp_path / impl)
        vectors[impl] = [provider.get(TEXTS, view) for view in views]
    for native, transformers in zip(vectors["native"], vectors["transformers"]):
        np.testing.assert_allclose(native, transformers, atol=1e-5)
