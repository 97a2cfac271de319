"""The one pooling table: every way of turning a layer's token vectors into a sentence vector.

Inference (:mod:`harness.core.encoding.forward`) and every training loop (DSE's student, SimCSE)
pool through :data:`POOLINGS`, so a model is evaluated exactly as it was trained. Adding a pooling
is one entry here. The functions use tensor methods only: this module does not import torch.

A *view* is one pooling of one hidden layer of the sentence under a prompt (none by default):
``mean@12`` is the masked mean of ``hidden_states[12]``. ``pooler`` is BERT's pooler output (dense +
tanh over [CLS]) and ignores the layer. ``last`` is the hidden state of the last token the tokenizer
produced for the (prompted) text: a causal model's only position that has seen all of it.
``mean_sentence`` averages the sentence's own tokens only, leaving the prompt and special tokens out
(sentence-transformers' ``include_prompt=False``): it reads the *sentence mask*
(:data:`SENTENCE_MASK`) the forward pass builds from the tokenizer's offsets. ``weightedmean``
(SGPT's position-weighted mean), ``max`` and ``mean_sqrt_len`` are sentence-transformers' pooling
modes of those names (``mean_sqrt_len_tokens`` there), so a checkpoint's own pooling is a view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.core.encoding.prompts import NO_PROMPT, Prompt
from harness.core.errors import UserError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from harness.core.encoding.backbone import BackboneRef


def cls_token(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The vector at position 0 ([CLS]); SimCSE's ``cls_before_pooler``."""
    return hidden[:, 0]


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over non-padding positions, so a sentence's vector does not depend on its batch-mates'
    lengths. Worked example: tokens (1, 3) and (5, 7) with mask (1, 0) → 1 and 3, padding
    ignored."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def masked_mean_no_cls(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The masked mean without position 0 ([CLS]): DSE's pooling."""
    mask = mask.clone()
    mask[:, 0] = 0
    return masked_mean(hidden, mask)


def last_token(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The vector at each row's last non-padding position, whichever side the padding is on. Worked
    example: mask (1, 1, 0) → position 1 (right padding); mask (0, 1, 1) → position 2 (left)."""
    import torch

    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = (
        torch.where(mask.bool(), positions, torch.full_like(positions, -1)).amax(dim=1).clamp(min=0)
    )
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def weighted_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SGPT's position-weighted mean (Muennighoff 2022; sentence-transformers' ``weightedmean``):
    the i-th real token weighs i, so later tokens, which a causal model has let see more of the
    text, count more. Weights count real tokens only, whichever side the padding is on. Worked
    example: tokens (1, 3, 5) with mask (1, 1, 0) → (1·1 + 2·3) / 3 = 7/3; with mask (0, 1, 1)
    (left padding) → (1·3 + 2·5) / 3 = 13/3."""
    positions = mask.cumsum(dim=1) * mask  # 1..n over the real tokens, 0 on padding
    weights = positions.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def masked_max(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each dimension's largest value over the non-padding positions (sentence-transformers'
    ``max``). Worked example: tokens (1, 9), (5, 7) and padding (20, 20) → (5, 9)."""
    import torch

    low = torch.finfo(hidden.dtype).min  # padding never wins
    return torch.where(mask.unsqueeze(-1).bool(), hidden, low).amax(dim=1)


def mean_sqrt_len(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The masked sum divided by the square root of the token count (sentence-transformers'
    ``mean_sqrt_len_tokens``). Worked example: tokens 1, 3 and 5 → 9 / √3 ≈ 5.196."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0).sqrt()


POOLINGS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cls": cls_token,
    "mean": masked_mean,
    "mean_nocls": masked_mean_no_cls,
    "last": last_token,
    # over the sentence mask: the prompt's and special tokens left out
    "mean_sentence": masked_mean,
    "weightedmean": weighted_mean,
    "max": masked_max,
    "mean_sqrt_len": mean_sqrt_len,
}
POOLER = "pooler"  # BERT's pooler output: not a function of one layer, served by the engine
ATTENTION_MASK, SENTENCE_MASK = "attention_mask", "sentence_mask"
# The mask each pooling reads (the attention mask unless named here).
POOLING_MASKS = {"mean_sentence": SENTENCE_MASK}
# Poolings that read position 0: on a causal model that position has seen one token.
POSITION_ZERO = ("cls", POOLER)


@dataclass(frozen=True, order=True)
class View:
    """``pooling`` of ``hidden_states[layer]`` (layer already made non-negative; see
    ``BackboneRef.layer_index``) of the text ``prompt`` makes of each sentence; ``bidirectional``:
    a decoder run without its causal mask, every token attending to every token of its text
    (LLM2Vec). It changes the pass, not only the pooling: views differing in it never share one."""

    pooling: str
    layer: int
    prompt: Prompt = NO_PROMPT
    bidirectional: bool = False

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS and self.pooling != POOLER:
            raise ValueError(
                f"unknown pooling {self.pooling!r}; known: {', '.join([*POOLINGS, POOLER])}"
            )

    def check_on(self, ref: BackboneRef) -> None:
        """Refuse this view where ``ref`` cannot give it meaningfully (:func:`check_view_on`)."""
        check_view_on(ref, self)

    @property
    def mask(self) -> str:
        """The batch mask this view's pooling reads."""
        return POOLING_MASKS.get(self.pooling, ATTENTION_MASK)

    def __str__(self) -> str:
        return (
            f"{self.pooling}@{self.layer}"
            + (" bidirectional" if self.bidirectional else "")
            + (f" under prompt {self.prompt}" if self.prompt else "")
        )


def check_attention(ref: BackboneRef) -> None:
    """Refuse ``attention=bidirectional`` (any method's) where it means nothing: on an encoder (its
    attention is bidirectional already) or a decoder whose family does not run without its mask."""
    if not ref.causal:
        raise UserError(
            f"attention=bidirectional: backbone {ref.name} is not a decoder, its attention is "
            "bidirectional already; leave attention at its default"
        )
    if not ref.bidirectional_ok:
        raise UserError(
            f"attention=bidirectional: backbone {ref.name} is a decoder of a family the harness "
            "does not run without its causal mask (Llama, Mistral, Qwen2 and Qwen3 it does); "
            "leave attention at its default"
        )


def check_view_on(ref: BackboneRef, view: View) -> None:
    """Refuse a view a backbone cannot give meaningfully: on a causal model, position 0 ([CLS],
    the pooler) has attended to one token, so its vector says almost nothing about the sentence
    (unless the view lifts the causal mask); a bidirectional view where :func:`check_attention`
    refuses it."""
    if view.bidirectional:
        check_attention(ref)
    elif ref.causal and view.pooling in POSITION_ZERO:
        raise UserError(
            f"backbone {ref.name} is a causal (decoder) model: its position 0 has seen only the "
            f"first token, so '{view.pooling}' pooling reads almost nothing of the sentence; use "
            "--methods last (its last token, which has seen the whole text), prompteol, or avg"
        )


def pool_layers(
    states: Sequence[torch.Tensor], mask: torch.Tensor, pooling: str, layers: Sequence[int]
) -> torch.Tensor:
    """``pooling`` of each of ``layers`` (hidden_states ids, negative from the end), concatenated:
    the tensor form of reading the views (pooling, layer) one by one and joining them."""
    import torch

    parts = [POOLINGS[pooling](states[layer], mask) for layer in layers]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def pool_view(
    states: Sequence[torch.Tensor],
    pooled: torch.Tensor | None,
    masks: Mapping[str, torch.Tensor],
    view: View,
) -> np.ndarray | None:
    """One view of a batch as float32 numpy (None for ``pooler`` when the engine has no trained
    pooler); ``masks`` holds the attention mask and, when a view reads it, the sentence mask."""
    if view.pooling == POOLER:
        return None if pooled is None else pooled.float().cpu().numpy()
    return POOLINGS[view.pooling](states[view.layer].float(), masks[view.mask]).cpu().numpy()
