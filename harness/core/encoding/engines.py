"""The two encoder implementations behind the forward pass: transformers' Auto classes (any
BERT-like checkpoint) and :mod:`harness.core.encoding.native` (the families with a native loader,
:mod:`harness.core.encoding.families`, without importing transformers). Both expose tokenize /
length / batch / forward, so the forward pass does not care which runs, and both tokenize with the
one tokenizer of :mod:`harness.core.encoding.tokenizer`, so they see the same ids."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.encoding.backbone import BackboneRef, incomplete_weights
from harness.core.encoding.settings import IMPLS, torch_dtype, usable_length
from harness.core.errors import UserError

if TYPE_CHECKING:
    import torch

    from harness.core.encoding.settings import EncodeSettings


def resolve_impl(ref: BackboneRef, requested: str) -> str:
    """Which encoder implementation runs ``ref``: see :mod:`harness.core.encoding.native`."""
    if requested not in IMPLS:
        raise UserError(f"--encoder-impl {requested}: expected one of {', '.join(IMPLS)}")
    if requested == "native" and not ref.native_ok:
        from harness.core.encoding.families import FAMILIES

        labels = [family.label for _, family in FAMILIES.items() if family.load is not None]
        raise UserError(
            f"--encoder-impl native: {ref.name} is not a plain {', '.join(labels[:-1])} or "
            f"{labels[-1]} with model.safetensors and tokenizer.json "
            f"({not_native_because(ref)}); use --encoder-impl transformers"
        )
    if requested == "auto":
        return "native" if ref.native_ok else "transformers"
    return requested


def not_native_because(ref: BackboneRef) -> str:
    """Why ``ref`` runs through transformers, in a few words ('' when it runs natively)."""
    from harness.core.encoding.backbone import native_reason
    from harness.core.encoding.model_files import model_config

    if ref.adapter is not None and not ref.native_ok:  # the native decoder merges plain LoRAs only
        return ref.adapter.native_reason or "an adapter on a backbone other than a native decoder"

    return native_reason(Path(ref.path), model_config(ref.path))


def quiet_transformers() -> None:
    """Turn off transformers' per-tensor "Loading weights" bar and its load reports: the harness
    checks what matters itself (a missing pooler) and reports it in one line."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _version_at_least(package: str, wanted: tuple[int, ...]) -> bool:
    import importlib.metadata
    import re

    numbers = re.findall(r"\d+", importlib.metadata.version(package))[: len(wanted)]
    return tuple(int(n) for n in numbers) >= wanted


def load_hf(ref: BackboneRef, trust_remote_code: bool = False, weights: str = "fp32"):
    """Load tokenizer and encoder from the resolved local folder (never from the network), the
    weights in ``weights`` with ``low_cpu_mem_usage`` (no second fp32 copy while loading); also
    returns the weight names the checkpoint lacked (a pooler, started at random; any other lacking
    tensor, or one of another shape, is refused: :func:`check_loaded`). The tokenizer gives the
    native engines' ids (:func:`harness.core.encoding.tokenizer.load_hf_tokenizer`)."""
    import torch
    from transformers import AutoModel

    from harness.core.encoding.tokenizer import load_hf_tokenizer

    quiet_transformers()
    # transformers 4.56 renamed torch_dtype to dtype (the old name warns from 5.0 on)
    dtype_arg = "dtype" if _version_at_least("transformers", (4, 56)) else "torch_dtype"
    try:
        tokenizer = load_hf_tokenizer(ref.path, trust_remote_code)
        model, info = AutoModel.from_pretrained(
            ref.path,
            local_files_only=True,
            trust_remote_code=trust_remote_code,
            output_loading_info=True,
            low_cpu_mem_usage=True,
            ignore_mismatched_sizes=True,  # reported below, in one line naming the tensor
            **{dtype_arg: torch_dtype(weights) or torch.float32},
        )
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UserError(f"backbone {ref.name}: could not load from {ref.path}: {first}") from None
    check_loaded(Path(ref.path), ref.name, info)
    if tokenizer.pad_token is None:
        # Batches hold texts of one token length, so nothing is ever padded; transformers' pad()
        # still wants a pad token to exist (GPT-2, Llama and Qwen tokenizers have none).
        tokenizer.pad_token = (
            tokenizer.eos_token or tokenizer.unk_token or tokenizer.convert_ids_to_tokens(0)
        )
    if ref.adapter is not None:
        from harness.core.encoding.peft_merge import merge_adapter

        model = merge_adapter(model, ref.adapter, ref.name)
    return tokenizer, model.eval(), list(info["missing_keys"])


def check_loaded(folder: Path, name: str, info: dict) -> None:
    """transformers' loading report refused when the file lacks a tensor, which it starts at random
    (a pooler alone may be: never handed out), or holds one of another shape."""
    lost = sorted(k for k in info.get("missing_keys", []) if "pooler" not in k)
    wrong = list(info.get("mismatched_keys", []))
    if lost or wrong:
        shape = f"{wrong[0][0]}: {list(wrong[0][1])}, not {list(wrong[0][2])}" if wrong else ""
        raise incomplete_weights(folder, name, lost, shape)


def bidirectional_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The (batch, 1, L, L) additive mask of attention without the causal mask: 0 where query
    ``i`` may read key ``j`` (``j`` a real token of its row, wherever it stands), the dtype's
    lowest value at padding. transformers takes a 4D mask as given, in every version since 4.38
    and with eager and SDPA attention alike (``config.is_causal = False`` is transformers 5's
    alone; an attention module's ``is_causal`` flag is read only without a mask).

    >>> import torch
    >>> bidirectional_mask(torch.tensor([[1, 1, 0]]), torch.float32)[0, 0].eq(0).int().tolist()
    [[1, 1, 0], [1, 1, 0], [1, 1, 0]]
    """
    import torch

    keys = attention_mask.bool()[:, None, None, :].expand(-1, 1, attention_mask.shape[1], -1)
    out = torch.zeros(keys.shape, dtype=dtype, device=attention_mask.device)
    return out.masked_fill_(~keys, torch.finfo(dtype).min)


def tokenizer_sentence_masks(encodings, spans: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The sentence mask of each text (:func:`~harness.core.encoding.prompts.sentence_token_mask`)
    from a ``tokenizers`` encoding's offsets."""
    from harness.core.encoding.prompts import sentence_token_mask

    return [sentence_token_mask(list(offsets), span) for offsets, span in zip(encodings, spans)]


class TransformersEngine:
    """Tokenizer and encoder through transformers' Auto classes (any BERT-like checkpoint)."""

    packs_rows = False  # padded batches: the forward pass gives it batches of one token length

    def __init__(self, ref: BackboneRef, settings: EncodeSettings, device: str) -> None:
        weights = ref.weight_dtype(settings.dtype)
        self.tokenizer, model, missing = load_hf(ref, settings.trust_remote_code, weights)
        self.model = model.to(device)
        self.max_length = usable_length(settings.max_length, ref.max_positions)
        # transformers fills absent pooler weights with random ones; never hand those out.
        self.pooler_random = any("pooler" in key for key in missing)
        # Encoders: fp32 weights, mixed precision from autocast. Half weights compute in their
        # dtype.
        self.handles_dtype = weights != "fp32"

    def tokenize(self, texts: list[str], prefix: str = "") -> list[dict]:
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_length)
        return [{k: encoded[k][i] for k in encoded} for i in range(len(texts))]

    def sentence_masks(self, texts: list[str], spans: Sequence[tuple[int, int]]) -> list[list[int]]:
        """Per text, 1 for the sentence's own tokens (the tokenizer's character offsets)."""
        if not self.tokenizer.is_fast:
            raise UserError(
                "mean_sentence pooling needs a fast tokenizer (tokenizer.json) for character "
                "offsets; this backbone has a slow one: use mean pooling"
            )
        encoded = self.tokenizer(
            texts, truncation=True, max_length=self.max_length, return_offsets_mapping=True
        )
        return tokenizer_sentence_masks(encoded["offset_mapping"], spans)

    @staticmethod
    def length(item: dict) -> int:
        return len(item["input_ids"])

    def batch(self, items: list[dict]) -> dict:
        return dict(self.tokenizer.pad(items, return_tensors="pt"))

    def forward(
        self, batch: dict, bidirectional: bool = False
    ) -> tuple[Sequence[torch.Tensor], torch.Tensor | None]:
        if bidirectional:  # the decoder's causal mask replaced by the padding mask alone
            dtype = next(self.model.parameters()).dtype
            batch = {**batch, "attention_mask": bidirectional_mask(batch["attention_mask"], dtype)}
        output = self.model(**batch, output_hidden_states=True, return_dict=True)
        pooled = None if self.pooler_random else getattr(output, "pooler_output", None)
        return output.hidden_states, pooled


class NativeEngine:
    """:mod:`harness.core.encoding.native`: the same function as transformers' model without
    importing it. It does its own mixed precision (``handles_dtype``), so the forward pass runs it
    without autocast. It packs a batch's real tokens (``packs_rows``), so its batches may mix token
    lengths."""

    packs_rows = True

    def __init__(self, ref: BackboneRef, settings: EncodeSettings, device: str) -> None:
        from harness.core.encoding.native import load_native
        from harness.core.encoding.tokenizer import load_tokenizer

        folder = Path(ref.path)
        self.max_length = usable_length(settings.max_length, ref.max_positions)
        self.tokenizer = load_tokenizer(folder, self.max_length)
        self.model = load_native(folder).to(device)
        compute = torch_dtype(settings.dtype)
        if compute is not None:
            self.model.set_compute_dtype(compute)
        self.handles_dtype = True

    def tokenize(self, texts: list[str], prefix: str = "") -> list[tuple[list[int], list[int]]]:
        return self.tokenizer.encode(texts)

    def sentence_masks(self, texts: list[str], spans: Sequence[tuple[int, int]]) -> list[list[int]]:
        return tokenizer_sentence_masks(self.tokenizer.offsets(texts), spans)

    @staticmethod
    def length(item: tuple[list[int], list[int]]) -> int:
        return len(item[0])

    def batch(self, items: list) -> dict:
        return self.tokenizer.pad(items)

    def forward(
        self, batch: dict, bidirectional: bool = False
    ) -> tuple[Sequence[torch.Tensor], torch.Tensor | None]:
        # an encoder's attention is bidirectional already (check_view_on refuses the option)
        return self.model(**batch)


class NativeDecoderEngine(NativeEngine):
    """:mod:`harness.core.encoding.native_llama` (Llama, Mistral, Qwen2, Qwen3): the native
    engine's packed rows with causal attention, and a prompt's fixed prefix computed once.
    :meth:`tokenize` marks how many leading tokens each text shares with the prefix's own tokens
    (:func:`harness.core.encoding.shared_prefix.shared_length`); ``prefix_counts`` counts, per
    prefix, the texts that reused all of it, part of it (a BPE merge across its end), and none
    (encoded whole)."""

    def __init__(self, ref: BackboneRef, settings: EncodeSettings, device: str) -> None:
        import torch

        from harness.core.encoding.native import load_native
        from harness.core.encoding.tokenizer import load_tokenizer

        folder = Path(ref.path)
        self.max_length = usable_length(settings.max_length, ref.max_positions)
        self.tokenizer = load_tokenizer(folder, self.max_length)
        model = load_native(folder, torch_dtype(settings.dtype) or torch.float32)
        if ref.adapter is not None:  # merged before the first forward, which may pack the weights
            from harness.core.encoding.native_llama import NativeDecoder, merge_lora

            assert isinstance(model, NativeDecoder)  # a causal native backbone: the decoder
            merge_lora(model, ref.adapter)
        self.model = model.to(device)
        self.handles_dtype = True
        self.prefix_counts: dict[str, list[int]] = {}

    def tokenize(self, texts: list[str], prefix: str = "") -> list:
        """(ids, type ids, prefix ids, shared length) per text."""
        from harness.core.encoding.shared_prefix import shared_length

        items = self.tokenizer.encode(texts)
        if not prefix:
            return [(ids, types, (), 0) for ids, types in items]
        shared = self.tokenizer.prefix_ids(prefix)
        out = [(ids, types, shared, shared_length(ids, shared)) for ids, types in items]
        counts = self.prefix_counts.setdefault(prefix, [0, 0, 0])
        for item in out:
            counts[0 if item[3] == len(shared) else 1 if item[3] else 2] += 1
        return out

    def batch(self, items: list) -> dict:
        import torch

        batch = self.tokenizer.pad([(ids, types) for ids, types, _, _ in items])
        shared = next((item[2] for item in items if item[3]), ())
        if shared:
            batch["prefix_ids"] = torch.tensor(shared, dtype=torch.long)
            batch["prefix_skip"] = torch.tensor([item[3] for item in items], dtype=torch.long)
        return batch

    @staticmethod
    def computed_length(item: tuple) -> int:
        """The tokens the model computes for the text: its length less the prefix tokens it
        shares (what a batch's token budget counts)."""
        return len(item[0]) - item[3]

    def forward(
        self, batch: dict, bidirectional: bool = False
    ) -> tuple[Sequence[torch.Tensor], torch.Tensor | None]:
        return self.model(**batch, bidirectional=bidirectional)
