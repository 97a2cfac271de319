"""Backbone families as a registry (harness/core/encoding/families): the generic registry, which
family takes which checkpoint, a family registered from this test module run end to end, and the
code digest of the vector cache covering the family modules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.core.encoding.backbone import native_reason, position_offset, resolve_backbone
from harness.core.encoding.families import FAMILIES, Family, family_of, register_family
from harness.core.errors import UserError
from harness.core.registry import Registry

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ["a man is playing guitar", "the dog", 'This sentence : "a man is playing." means in one word:"']


def test_registry_registers_lists_and_refuses_with_a_reason():
    things = Registry[int]("thing")
    assert things.register("one", 1) == 1 and things.register("two", 2) == 2
    assert things.names() == ["one", "two"] and things.items() == [("one", 1), ("two", 2)]
    assert "one" in things and len(things) == 2
    with pytest.raises(UserError, match="cannot register thing 'one': the name is taken"):
        things.register("one", 3)
    with pytest.raises(UserError, match=r"unknown thing 'onee' \(did you mean 'one'\?\); things: one, two"):
        things["onee"]
    assert things.unregister("one") == 1 and things.names() == ["two"]


@pytest.mark.parametrize("config, family, causal, offset, reason", [
    ({"model_type": "bert"}, "bert", False, 0, None),
    ({"model_type": "bert", "is_decoder": True, "architectures": ["BertLMHeadModel"]}, "bert", True, 0, None),
    ({"model_type": "roberta", "pad_token_id": 1}, "roberta", False, 2, None),
    ({"model_type": "camembert", "pad_token_id": 1}, "roberta", False, 2, "no native camembert"),
    ({"model_type": "mpnet"}, "mpnet", False, 2, None),
    ({"model_type": "deberta-v2"}, "deberta-v2", False, 0, None),
    ({"model_type": "deberta"}, "transformers", False, 0, "no native deberta"),
    ({"model_type": "qwen3"}, "llama", True, 0, None),
    ({"model_type": "opt"}, "causal-lm", True, 0, "no native opt"),
    ({"model_type": "custom", "architectures": ["CustomForCausalLM"]}, "causal-lm", True, 0, "no native custom"),
    ({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"]}, "transformers", False, 0,
     "no native gemma3"),
])
def test_each_checkpoint_has_one_family(config, family, causal, offset, reason, tmp_path):
    from harness.core.encoding.families import is_causal

    assert family_of(config).name == family
    assert is_causal(config) is causal and position_offset(config) == offset
    if reason is not None:
        assert native_reason(tmp_path, config) == reason
    elif family_of(config).load is not None:  # a native family: the files come first
        assert native_reason(tmp_path, config) == "no tokenizer.json"


def test_a_family_may_not_take_a_model_type_another_holds():
    with pytest.raises(UserError, match="model type 'bert' is taken by the 'bert' family"):
        register_family(Family(name="my-bert", label="my BERT", model_types=("bert",)))
    assert "my-bert" not in FAMILIES


# A family as code outside the harness would add it: one declaration and one registration. It takes
# checkpoints of a model type transformers does not know, and runs them with BERT's native layers.
def toy_check(folder: Path, config: dict) -> str:
    from harness.core.encoding.families import bert

    return bert.check(folder, config)


def toy_load(folder: Path, config: dict, dtype=None):
    from harness.core.encoding.native_bert import load_native_bert

    return load_native_bert(folder)


TOY = Family(name="toy", label="toy BERT", model_types=("toy-bert",), load=toy_load, check=toy_check)


@pytest.fixture
def toy_family():
    register_family(TOY)
    yield TOY
    FAMILIES.unregister("toy")


def test_a_family_registered_from_outside_runs_end_to_end(toy_family, tiny_bert, tmp_path):
    """A tiny BERT saved under the model type ``toy-bert``: with the toy family registered it
    resolves as native and the ViewProvider encodes it; each vector equals transformers' BertModel
    on the same weights, masked mean of its last layer, to 1e-5. Its module is in the vectors' code
    digest. Unregistered, nothing takes it natively any more."""
    torch = pytest.importorskip("torch")
    from transformers import AutoTokenizer, BertModel

    from harness.core.encoding.pooling import View
    from harness.core.encoding.provider import ViewProvider
    from harness.core.encoding.settings import EncodeSettings
    from harness.core.encoding.windows import ENCODER_CODE, encoder_code

    folder = tmp_path / "toy"
    shutil.copytree(tiny_bert, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "toy-bert"}))
    ref = resolve_backbone(str(folder))
    assert ref.native_ok and not ref.causal and family_of({"model_type": "toy-bert"}) is TOY
    assert {*ENCODER_CODE, __name__} <= set(encoder_code(ref))
    provider = ViewProvider(ref, EncodeSettings(progress=False), tmp_path / "cache")
    assert provider.impl == "native"
    texts = TEXTS
    ours = provider.get(texts, View("mean", -1))

    tokenizer, model = AutoTokenizer.from_pretrained(tiny_bert), BertModel.from_pretrained(tiny_bert).eval()
    with torch.inference_mode():
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        last = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        want = ((last * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(ours, want, atol=1e-5)

    FAMILIES.unregister("toy")
    try:
        assert not resolve_backbone(str(folder)).native_ok
        with pytest.raises(UserError, match=r"unknown backbone family 'toy'"):
            FAMILIES["toy"]
    finally:
        register_family(TOY)  # for the fixture to unregister


def test_the_vector_digest_covers_every_family_and_its_loader():
    """The vectors' code digest follows imports, those inside functions too: every built-in family
    module, the native modules its loader imports, and the tokenizer are in it."""
    from harness.core.codekeys import CodeDigests
    from harness.core.encoding.windows import ENCODER_CODE

    covered = set(CodeDigests(None).modules(*ENCODER_CODE))
    families = {family.load.__module__ for _, family in FAMILIES.items() if family.load is not None}
    expected = {
        *(f"harness.core.encoding.families.{name}" for name in
          ("bert", "roberta", "mpnet", "deberta", "llama", "causal", "fallback", "family")),
        *families, "harness.core.registry", "harness.core.encoding.tokenizer",
        *(f"harness.core.encoding.native_{name}" for name in ("bert", "mpnet", "deberta", "llama")),
    }
    assert expected <= covered, expected - covered
    # A built-in family adds nothing the digest did not cover: its vectors keep ENCODER_CODE's key.
    from harness.core.codekeys import code_digest

    for _, family in FAMILIES.items():
        assert code_digest(*sorted({*ENCODER_CODE, *family.code})) == code_digest(*ENCODER_CODE)


def test_asking_the_registry_imports_no_torch_nor_tokenizers():
    code = ("import sys; from harness.core.encoding.backbone import native_reason; "
            "from harness.core.encoding.families import is_causal; "
            "from pathlib import Path; native_reason(Path('.'), {'model_type': 'bert'}); is_causal({}); "
            "print(sorted(m for m in ('torch', 'tokenizers', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
