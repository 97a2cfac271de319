"""Shared-prefix reuse on the native decoder: a prompt's fixed prefix (the text before
``{sentence}``: PromptEOL's ``This sentence : "``, an instruction's ``Instruct: …\\nQuery: ``) is
run through the model once per (backbone, prompt, dtype), and every sentence attends to its keys and
values, its own tokens continuing the positions after it.

It is exact by causality: a decoder's state at a position depends only on the tokens up to it, so a
text whose first ``s`` token ids are the prefix's first ``s`` ids has, at those positions, the
prefix's own states. Per sentence, ``s`` is :func:`shared_length`: the whole prefix, or a token or
two less where the tokenizer merges characters across the prefix's end (a byte-level BPE reads
``Query: `` + ``a dog`` as ``Query``, ``:``, `` a``, `` dog``, so the prefix's final space token is
not the text's), or nothing (encoded whole). The rule looks at the sentence alone, so a vector never
depends on its batch-mates; with and without reuse the vectors agree to rounding (1e-6 in fp32),
and reuse is not part of any cache key: it is how the vectors are computed, not which.

This module imports no torch: :func:`prefix_note` describes the plan for ``--dry-run`` and the
encode line.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from harness.core.encoding.backbone import BackboneRef
from harness.core.encoding.prompts import Prompt
from harness.core.encoding.tokenizer import leading_ids, load_tokenizer, read_tokenizer
from harness.core.errors import UserError

__all__ = ["check_prefix", "leading_ids", "prefix_note", "reuses_prefix", "shared_length"]


def shared_length(ids: Sequence[int], prefix: Sequence[int]) -> int:
    """How many leading tokens of a text (``ids``) take the shared prefix's keys and values: those
    equal to the prefix's own ids (``prefix``), position by position, keeping at least one token of
    the text to compute.

    >>> shared_length([5, 6, 7, 8], [5, 6, 7]), shared_length([5, 6, 9, 8], [5, 6, 7])
    (3, 2)
    >>> shared_length([5, 6, 7], [5, 6, 7]), shared_length([4, 6, 7], [5, 6, 7])
    (2, 0)
    """
    count = 0
    for mine, theirs in zip(ids[: len(ids) - 1], prefix):
        if mine != theirs:
            break
        count += 1
    return count


def reuses_prefix(ref: BackboneRef, impl: str) -> bool:
    """Whether this backbone's forward pass computes prompt prefixes once: the native decoder."""
    return impl == "native" and ref.causal


def prefix_note(ref: BackboneRef, impl: str, prompt: Prompt, max_length: int) -> str:
    """One clause for the encode line: how ``prompt``'s prefix is computed on ``ref``, '' when the
    prompt has no prefix. Tokenizes the prefix (``tokenizers`` only, no torch).

    e.g. ``prefix 'This sentence : "' (7 tokens) computed once, shared by every sentence whose
    tokens start with its tokens (the others encoded whole)``
    """
    prefix = prompt.parts()[0]
    if not prefix:
        return ""
    check_prefix(ref, prompt, max_length)  # before the encode line says it will be encoded
    if not reuses_prefix(ref, impl):
        return f"prefix {prefix!r} encoded with each sentence ({impl} encoder)"
    tokens = len(_prefix_ids(ref.path, prefix, max_length))
    return (
        f"prefix {prefix!r} ({tokens} tokens) computed once and shared; a sentence whose tokens "
        "merge across its end shares all but the merged tokens, one sharing none is encoded whole"
    )


def check_prefix(ref: BackboneRef, prompt: Prompt, max_length: int) -> None:
    """Refuse a prompt whose prefix alone fills ``max_length`` tokens (special tokens included):
    truncation would cut every sentence away, and the Spearman be undefined."""
    prefix = prompt.parts()[0]
    if not prefix or not (Path(ref.path) / "tokenizer.json").is_file():
        return
    if (tokens := _prefix_tokens(ref.path, prefix)) >= max_length:
        raise UserError(
            f"prompt {prefix[:40]!r}... is {tokens} tokens on {ref.name} and --max-length is "
            f"{max_length}: no token of a sentence is left; shorten it or raise --max-length"
        )


@functools.lru_cache(maxsize=64)
def _prefix_tokens(folder: str, prefix: str) -> int:
    return len(read_tokenizer(Path(folder)).encode(prefix).ids)


@functools.lru_cache(maxsize=64)
def _prefix_ids(folder: str, prefix: str, max_length: int) -> tuple[int, ...]:
    return load_tokenizer(folder, max_length).prefix_ids(prefix)
