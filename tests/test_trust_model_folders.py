"""A model folder is whole or refused, on every engine (issue 51): a tensor the architecture needs
missing or of another shape, a tokenizer that reads no word, an adapter whose config disagrees with
its tensors, overlapping tensors in a safetensors file, and ``attention=bidirectional`` on an
encoder are each one error line (exit 2 from the command line), never a score of random weights.

Each folder is the tiny fixture with one thing broken by hand here; what the error names (the file,
the tensor, the field) is what the test broke."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from harness.core.encoding.backbone import resolve_backbone  # noqa: E402
from harness.core.encoding.forward import ForwardPass  # noqa: E402
from harness.core.encoding.pooling import View  # noqa: E402
from harness.core.encoding.settings import EncodeSettings  # noqa: E402
from harness.core.errors import UserError  # noqa: E402

DROPPED = "encoder.layer.1.attention.self.query.weight"
TEXTS = ["a man is playing guitar", "the dog"]


def broken(good: Path, target: Path, change) -> Path:
    shutil.copytree(good, target)
    change(target)
    return target


def rewrite_weights(folder: Path, edit, name: str = "model.safetensors") -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / name))
    edit(tensors)
    save_file(tensors, str(folder / name), metadata={"format": "pt"})


def encode(folder: Path, impl: str):
    settings = EncodeSettings(device="cpu", threads=1, progress=False, impl=impl)
    return ForwardPass(resolve_backbone(str(folder)), settings).encode_all(TEXTS, [View("mean", 2)])


def refused(call, *names: str) -> str:
    """The one-line UserError ``call`` raises, naming each of ``names``."""
    with pytest.raises(UserError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and all(name in message for name in names), message
    return message


def one_error(code: int, err: str, *names: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert all(name in lines[0] for name in names), lines[0]


@pytest.fixture
def cli(senteval_root, tmp_path):
    def args(backbone: Path, *more: str) -> list[str]:
        return ["--methods", "avg", "--tasks", "stsb", "--source", "senteval", "--senteval-dir",
                str(senteval_root), "--backbone", str(backbone), "--bootstrap", "0", *more]
    return args


# -- 1. every tensor the architecture needs, with its shape ------------------------------------------

@pytest.mark.parametrize("impl", ["native", "transformers"])
def test_a_missing_tensor_is_refused_on_both_engines_and_no_engine_is_advised(impl, tiny_bert, tmp_path):
    """transformers used to start the missing query projection at random and score it (29.19 instead
    of 93.22 on MiniLM), the native engine's error advising exactly that engine."""
    folder = broken(tiny_bert, tmp_path / "lacking", lambda t: rewrite_weights(t, lambda w: w.pop(DROPPED)))
    message = refused(lambda: encode(folder, impl), str(folder / "model.safetensors"), f"lacks tensor {DROPPED}")
    assert "--encoder-impl" not in message


@pytest.mark.parametrize("impl", ["native", "transformers"])
def test_a_tensor_of_another_shape_is_refused_on_both_engines(impl, tiny_bert, tmp_path):
    def narrow(weights):
        weights[DROPPED] = weights[DROPPED][:16].clone()

    folder = broken(tiny_bert, tmp_path / "narrow", lambda t: rewrite_weights(t, narrow))
    refused(lambda: encode(folder, impl), str(folder / "model.safetensors"), "another shape")


def test_a_trainer_opening_a_folder_that_lacks_a_tensor_is_refused(tiny_bert, tmp_path):
    """The trainers' door (SimCSE, DSE, the cross-encoder's teacher) is checked too."""
    from harness.core.encoding.checkpoint import Checkpoint

    folder = broken(tiny_bert, tmp_path / "lacking", lambda t: rewrite_weights(t, lambda w: w.pop(DROPPED)))
    refused(lambda: Checkpoint.open(folder), f"lacks tensor {DROPPED}")
    assert Checkpoint.open(tiny_bert).model.config.hidden_size == 32  # the whole folder opens


def test_a_missing_tensor_is_exit_2_from_the_command_line(bench, cli, tiny_bert, tmp_path):
    folder = broken(tiny_bert, tmp_path / "lacking", lambda t: rewrite_weights(t, lambda w: w.pop(DROPPED)))
    for impl in ("native", "transformers"):
        code, _, err = bench(*cli(folder, "--encoder-impl", impl))
        one_error(code, err, "model.safetensors", DROPPED)


# -- 2. a tokenizer that reads words ------------------------------------------------------------------

def specials_only_vocab(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")


def junk_sentencepiece(folder: Path) -> None:
    for name in ("tokenizer.json", "vocab.txt"):
        (folder / name).unlink()
    (folder / "spiece.model").write_bytes(b"not a sentencepiece model" * 4)


def tokenizer_json_vocab(vocab):
    def change(folder: Path) -> None:
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        data["model"]["vocab"] = vocab
        (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    return change


SPECIALS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


@pytest.mark.parametrize(("case", "change", "impls", "says"), [
    ("vocab.txt of special tokens", specials_only_vocab, ["transformers"], "reads no word"),
    ("junk *.model", junk_sentencepiece, ["transformers"], "reads no word"),
    ("tokenizer.json of special tokens", tokenizer_json_vocab(SPECIALS), ["native", "transformers"],
     "reads no word"),
    ("empty WordPiece vocabulary", tokenizer_json_vocab({}), ["native", "transformers"], "Missing [UNK] token"),
])
def test_a_tokenizer_that_reads_no_word_is_refused(case, change, impls, says, tiny_bert, tmp_path):
    """Each used to pass the tokenizer-files check and score every sentence as [CLS] [UNK]… [SEP]
    (−26.49), or end in a tokenizers traceback."""
    folder = broken(tiny_bert, tmp_path / "tok", change)
    for impl in impls:
        refused(lambda impl=impl: encode(folder, impl), str(folder), says, "A man is playing a guitar.")


def test_a_tokenizer_reading_words_passes_and_gives_its_ids(tiny_bert):
    """The check reads the sentence the tokenizer itself reads: the fixture's vocabulary ids."""
    from harness.core.encoding.tokenizer import load_hf_tokenizer, load_tokenizer

    vocab = (tiny_bert / "vocab.txt").read_text(encoding="utf-8").split()
    want = [vocab.index(w) if w in vocab else vocab.index("[UNK]") for w in "a man is playing guitar".split()]
    assert load_tokenizer(tiny_bert, 64).encode(["a man is playing guitar"])[0][0][1:-1] == want
    assert load_hf_tokenizer(tiny_bert)("a man is playing guitar")["input_ids"][1:-1] == want


def test_an_empty_vocabulary_is_exit_2_from_the_command_line(bench, cli, tiny_bert, tmp_path):
    folder = broken(tiny_bert, tmp_path / "empty", tokenizer_json_vocab({}))
    code, _, err = bench(*cli(folder))
    one_error(code, err, "Missing [UNK] token")


# -- 3. an adapter's config agrees with its tensors ---------------------------------------------------

@pytest.fixture(scope="module")
def lora(tiny_decoders, tmp_path_factory) -> Path:
    from test_bidirectional import write_adapter  # peft's own LoRA: r=4, lora_alpha=8

    folder = tmp_path_factory.mktemp("lora") / "good"
    write_adapter(tiny_decoders["llama"], folder, True)
    return folder


def with_config(**fields):
    def change(folder: Path) -> None:
        config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        (folder / "adapter_config.json").write_text(json.dumps({**config, **fields}), encoding="utf-8")
    return change


@pytest.mark.parametrize(("fields", "names"), [
    ({"r": 8}, ["adapter_model.safetensors", "lora_A.weight", "r=8"]),  # 46.62 instead of 40.08
    ({"r": True}, ["adapter_config.json: r is not an integer"]),  # held to its schema (issue 51)
    ({"r": 0}, ["r=0"]),
    ({"use_rslora": "no"}, ["adapter_config.json: use_rslora is not true or false"]),
    ({"lora_alpha": 0}, ["lora_alpha=0", "positive number"]),  # the base model under the adapter's label
    ({"lora_alpha": "8"}, ["adapter_config.json: lora_alpha is not a number"]),
    ({"modules_to_save": ["embed_tokens"]}, ["modules_to_save", "not supported"]),  # a KeyError before
])
def test_an_adapter_config_that_disagrees_is_refused_by_name(fields, names, lora, tiny_decoders, tmp_path):
    base = resolve_backbone(str(tiny_decoders["llama"]))
    assert base.with_adapter(str(lora)).adapter.rank == 4  # the good adapter passes
    folder = broken(lora, tmp_path / "bad", with_config(**fields))
    refused(lambda: base.with_adapter(str(folder)), str(folder), *names)


def test_an_adapter_with_a_disagreeing_rank_is_exit_2_from_the_command_line(bench, cli, lora, tiny_decoders,
                                                                           tmp_path):
    folder = broken(lora, tmp_path / "bad", with_config(r=8))
    code, _, err = bench(*cli(tiny_decoders["llama"], "--set", f"avg.adapter={folder}"))
    one_error(code, err, "r=8")


def test_a_100k_deep_adapter_config_is_one_line_not_a_recursion_traceback(bench, cli, lora, tiny_decoders,
                                                                         tmp_path):
    """An ``adapter_config.json`` nested 100,000 deep (valid JSON the parser cannot hold) is one line naming the
    file, exit 2 (issue 51's fault matrix: the reader catches RecursionError)."""
    def deep(folder: Path) -> None:
        (folder / "adapter_config.json").write_text('{"peft_type": "LORA", "r": ' + "[" * 100_000 + "]" * 100_000
                                                    + "}", encoding="utf-8")

    folder = broken(lora, tmp_path / "bad", deep)
    base = resolve_backbone(str(tiny_decoders["llama"]))
    says = "adapter_config.json: not valid JSON (nested too deep)"
    refused(lambda: base.with_adapter(str(folder)), str(folder), says)
    code, _, err = bench(*cli(tiny_decoders["llama"], "--set", f"avg.adapter={folder}"))
    one_error(code, err, says)


# -- 4. tensors laid back to back ---------------------------------------------------------------------

def overlap(folder: Path, name: str = "model.safetensors") -> str:
    """The second of two same-shaped tensors pointed at the first's bytes (the header's length
    kept): safetensors' ``invalid offset``. Returns that tensor's name."""
    path = folder / name
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + length])
    by_shape: dict = {}
    for key, entry in header.items():
        if key != "__metadata__":
            by_shape.setdefault((entry["dtype"], tuple(entry["shape"])), []).append(key)
    first, second = next(keys for keys in by_shape.values() if len(keys) > 1)[:2]
    header[second]["data_offsets"] = header[first]["data_offsets"]
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= length
    path.write_bytes(raw[:8] + text.ljust(length) + raw[8 + length:])
    return second


def test_overlapping_tensors_are_one_line_naming_the_file(bench, cli, tiny_bert, lora, tiny_decoders, tmp_path):
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = broken(tiny_bert, tmp_path / "overlap", overlap)
    with pytest.raises(SafetensorError, match="invalid offset"):  # what the library said
        load_file(str(folder / "model.safetensors"))
    refused(lambda: resolve_backbone(str(folder)), str(folder / "model.safetensors"), "overlapping")
    code, _, err = bench(*cli(folder))
    one_error(code, err, str(folder / "model.safetensors"))
    adapter = broken(lora, tmp_path / "lora", lambda t: overlap(t, "adapter_model.safetensors"))
    refused(lambda: resolve_backbone(str(tiny_decoders["llama"])).with_adapter(str(adapter)),
            "adapter_model.safetensors", "overlapping")


def test_trailing_bytes_after_the_tensors_are_refused(tiny_bert, tmp_path):
    def pad(folder: Path) -> None:
        with open(folder / "model.safetensors", "ab") as out:
            out.write(b"\0" * 16)

    folder = broken(tiny_bert, tmp_path / "padded", pad)
    refused(lambda: resolve_backbone(str(folder)), str(folder / "model.safetensors"), "end at")


# -- 5. attention=bidirectional on an encoder, any method ---------------------------------------------

@pytest.mark.parametrize("method", ["sbert", "avg"])
def test_bidirectional_attention_on_an_encoder_is_refused_for_every_method(method, bench, cli, tiny_st):
    """sbert built its views without the option and labelled its row bidirectional."""
    args = cli(tiny_st)
    args[1] = method
    code, _, err = bench(*args, "--set", f"{method}.attention=bidirectional")
    one_error(code, err, "attention=bidirectional", "is not a decoder")
