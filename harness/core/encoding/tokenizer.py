"""The one tokenizer of a backbone folder, for every engine: its ``tokenizer.json`` as saved.

Both engines tokenize with the ``tokenizers.Tokenizer`` that :func:`read_tokenizer` builds from the
folder's ``tokenizer.json``: the native engines through :class:`BackboneTokenizer` (no transformers
import), the transformers engine (and trainers) through :func:`load_hf_tokenizer`, which keeps the
transformers object that ``AutoTokenizer`` picks (its special tokens, its model inputs) but hands
it this backend. So the two paths always see the same token ids.

Why ``tokenizer.json`` as saved and not what ``AutoTokenizer`` builds: from transformers 5 on,
``AutoTokenizer`` loads some checkpoints with a class of its choosing instead of the one the files
name (``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS`` in ``transformers.models.auto.
tokenization_auto``: ``qwen2``, ``phi3``, ``internlm2`` …), and that class rebuilds the normalizer
and pre-tokenizer from its own code, ignoring the file's. A Qwen2 checkpoint whose
``tokenizer.json`` splits digits as GPT-2 does (``" 12"`` one token) is then tokenized with Qwen's
split (``" "``, ``"1"``, ``"2"``) and NFC normalisation: other ids than the ones the model was
trained on, and other ids than transformers 4 gave. ``tokenizer.json`` is the serialised tokenizer
the checkpoint was saved with; transformers' own fix for such checkpoints is to load it as it is
(``TokenizersBackend``). A folder where ``tokenizer.json`` alone would not give the checkpoint's
ids (none, or a ``tokenizer_config.json`` asking for BOS/EOS tokens its post-processor does not
add) keeps ``AutoTokenizer`` on the transformers path and is refused by the native one
(:func:`tokenizer_reason`).

This module imports neither torch nor transformers at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.encoding import model_files as files
from harness.core.errors import UserError

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

__all__ = [
    "BackboneTokenizer",
    "leading_ids",
    "load_hf_tokenizer",
    "load_tokenizer",
    "read_tokenizer",
    "tokenizer_reason",
]

KNOWN = "A man is playing a guitar."  # a sentence any tokenizer of English gives some word ids


def tokenizer_reason(folder: Path) -> str:
    """'' when ``folder``'s ``tokenizer.json`` alone gives the checkpoint's token ids; otherwise
    why not: no ``tokenizer.json``, or a ``tokenizer_config.json`` that asks transformers to add
    a BOS/EOS token the file's post-processor does not add (or not to add one it does)."""
    if not (folder / "tokenizer.json").is_file():
        return "no tokenizer.json"
    if not (folder / "tokenizer_config.json").exists():
        return ""  # transformers reads tokenizer.json as it is too
    settings = files.read_model_json(folder / "tokenizer_config.json", files.TokenizerConfig)
    added = set(template_specials(folder) or [])
    for flag_name, token_name in (("add_bos_token", "bos_token"), ("add_eos_token", "eos_token")):
        wanted, token = settings.get(flag_name), settings.get(token_name)
        if isinstance(token, dict):
            token = token.get("content")
        if wanted is not None and isinstance(token, str) and wanted != (token in added):
            return f"tokenizer_config.json's {flag_name} disagrees with tokenizer.json"
    return ""


def template_specials(folder: Path) -> list[str] | None:
    """The special tokens the post-processor of ``folder``'s ``tokenizer.json`` adds to one text
    (read without loading a tokenizer); None when it has no such file or no post-processor."""
    if not (path := folder / "tokenizer.json").exists():
        return None
    processor = files.read_model_json(path, files.TokenizerFile).get("post_processor")
    return None if processor is None else _specials(processor)


def _specials(processor: files.PostProcessor) -> list[str]:
    """A template's special tokens, each of a Sequence's processors' in turn, or BERT's and
    RoBERTa's ``cls`` and ``sep`` (``[token, id]`` pairs); none for the others (ByteLevel)."""
    kind = processor.get("type")
    if kind == "Sequence":
        return [token for inner in processor.get("processors", []) for token in _specials(inner)]
    if kind in ("BertProcessing", "RobertaProcessing"):
        return [str(pair[0]) for pair in (processor.get("cls"), processor.get("sep")) if pair]
    return [p["SpecialToken"]["id"] for p in processor.get("single", []) if "SpecialToken" in p]


def read_tokenizer(folder: Path, max_length: int | None = None) -> Tokenizer:
    """``folder``'s ``tokenizer.json`` as a ``tokenizers.Tokenizer`` that reads words
    (:func:`check_reads_words`): no padding (checkpoints often ship a fixed-length padding
    setting; the engines pad batches), truncation at ``max_length`` tokens (None: none)."""
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception for a file it cannot parse
        raise UserError(
            f"{path} is not a tokenizer the tokenizers library can read ({str(err)[:120]}); copy "
            "the tokenizer files saved with the model into the folder again "
            "(tokenizer.save_pretrained(folder))"
        ) from None
    unknown = getattr(tokenizer.model, "unk_token", None) or "<unk>"  # a Unigram's is unnamed
    check_reads_words(
        folder, lambda text: tokenizer.encode(text, add_special_tokens=False).tokens, unknown
    )
    tokenizer.no_padding()
    if max_length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length)
    return tokenizer


def check_reads_words(folder: Path, tokenize: Callable[[str], list[str]], unknown: str) -> None:
    """One :class:`UserError` line unless ``tokenize`` (no special tokens added) reads a word of
    :data:`KNOWN`: a ``vocab.txt`` of special tokens alone or a junk ``*.model`` make every sentence
    ``[CLS] [UNK]… [SEP]``, a nonsense score with exit 0."""
    try:
        tokens = tokenize(KNOWN)
        problem = "" if set(tokens) - {unknown} else f"reads no word (tokens {tokens})"
    except Exception as err:  # tokenizers raises a bare Exception ("Missing [UNK] token")
        problem = f"fails ({(str(err).strip().splitlines() or [type(err).__name__])[0][:120]})"
    if problem:
        raise UserError(
            f"the tokenizer of {folder} {problem} on {KNOWN!r}; copy the tokenizer files saved "
            "with the model into the folder again (tokenizer.save_pretrained(folder))"
        )


class BackboneTokenizer:
    """:func:`read_tokenizer`'s tokenizer for the engines: ids, offsets, padding per batch, and the
    ids a prompt's prefix contributes to every text."""

    def __init__(self, folder: Path, max_length: int) -> None:
        self._tok = read_tokenizer(folder, max_length)
        self.pad_id = self._tok.padding["pad_id"] if self._tok.padding else 0
        config = folder / "tokenizer_config.json"
        if config.exists():
            pad_token = files.read_model_json(config, files.TokenizerConfig).get("pad_token")
            if isinstance(pad_token, str) and self._tok.token_to_id(pad_token) is not None:
                self.pad_id = self._tok.token_to_id(pad_token)

    @property
    def backend(self) -> Tokenizer:
        """The ``tokenizers.Tokenizer`` itself."""
        return self._tok

    def encode(self, texts: list[str]) -> list[tuple[list[int], list[int]]]:
        """(ids, type_ids) per text, special tokens included."""
        return [(e.ids, e.type_ids) for e in self._tok.encode_batch(texts)]

    def offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Each token's character span in its text (special tokens: (0, 0))."""
        return [e.offsets for e in self._tok.encode_batch(texts)]

    def prefix_ids(self, prefix: str) -> tuple[int, ...]:
        """The ids the tokenizer gives ``prefix`` at the start of a text (:func:`leading_ids`)."""
        return leading_ids(self._tok.encode(prefix))

    def pad(self, items: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        import numpy as np
        import torch

        length = max(len(ids) for ids, _ in items)
        ids = np.full((len(items), length), self.pad_id, dtype=np.int64)
        types = np.zeros((len(items), length), dtype=np.int64)
        mask = np.zeros((len(items), length), dtype=np.int64)
        for row, (token_ids, type_ids) in enumerate(items):  # numpy rows: no tensor per sentence
            ids[row, : len(token_ids)] = token_ids
            types[row, : len(type_ids)] = type_ids
            mask[row, : len(token_ids)] = 1
        return {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy(mask),
            "token_type_ids": torch.from_numpy(types),
        }


def leading_ids(encoding) -> tuple[int, ...]:
    """A prefix's ids as they start a text: with the leading special tokens (Llama's ``<s>``),
    without trailing ones (an end-of-text the template appends to every text)."""
    ids, special = list(encoding.ids), list(encoding.special_tokens_mask)
    while special and special[-1]:
        ids.pop()
        special.pop()
    return tuple(ids)


def load_tokenizer(folder: str | Path, max_length: int) -> BackboneTokenizer:
    """The tokenizer of the backbone in ``folder`` (its ``tokenizer.json`` as saved), truncating at
    ``max_length`` tokens: what the native engines run; :func:`load_hf_tokenizer` gives the same
    ids as a transformers object."""
    return BackboneTokenizer(Path(folder), max_length)


def load_hf_tokenizer(folder: str | Path, trust_remote_code: bool = False) -> Any:
    """The tokenizer of the backbone in ``folder`` as a transformers object (for the transformers
    engine and for trainers): ``AutoTokenizer``'s, whose class says which inputs the model takes
    and which special tokens it has, tokenizing with :func:`read_tokenizer`'s backend where
    :func:`tokenizer_reason` says ``tokenizer.json`` gives the checkpoint's ids. So it gives the
    ids :func:`load_tokenizer` gives, whatever class transformers chose. Raises what
    ``AutoTokenizer.from_pretrained`` raises; one reading no word is refused (check_reads_words)."""
    from transformers import AutoTokenizer

    folder = Path(folder)
    tokenizer = AutoTokenizer.from_pretrained(
        str(folder), local_files_only=True, trust_remote_code=trust_remote_code
    )
    if getattr(tokenizer, "is_fast", False) and not tokenizer_reason(folder):
        # The wrapper sets truncation and padding on its backend for each call.
        tokenizer._tokenizer = read_tokenizer(folder)  # checked there
    else:
        check_reads_words(folder, tokenizer.tokenize, tokenizer.unk_token)
    return tokenizer
