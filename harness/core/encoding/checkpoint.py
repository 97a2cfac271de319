"""A checkpoint opened for code that drives the model itself: the training loops (SimCSE, the
cross-encoder teacher, DSE's student), the pair scorer and sentence-transformers' pipeline.

The engine's own pass (:class:`~harness.core.encoding.forward.ForwardPass`) owns batching, pooling
and the cache; a trainer needs the transformers model and its tokenizer instead, and must still
truncate, batch and pool as the engine does, or a trained student and the evaluated student would
read different tokens or pool differently. This is that one place.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.encoding.backbone import max_positions
from harness.core.encoding.batching import equal_length_batches, topped_up
from harness.core.encoding.engines import check_loaded, quiet_transformers
from harness.core.encoding.pooling import pool_layers
from harness.core.encoding.settings import inference_autocast, usable_length
from harness.core.encoding.tokenizer import load_hf_tokenizer
from harness.core.errors import UserError

if TYPE_CHECKING:
    import torch

# What ``Checkpoint.open`` builds on the weights: the bare encoder (no pooling layer: the trainers
# pool through the pooling table), a sequence-classification head (a cross-encoder's) or the
# masked-language-model head the checkpoint was trained with (SPLADE reads its logits).
HEADS = ("encoder", "sequence-classification", "masked-lm")


@dataclass
class Checkpoint:
    """transformers' model and tokenizer of one folder, and the longest input the model reads."""

    model: Any
    tokenizer: Any
    positions: int | None  # position embeddings after the offset; None when the config says none

    @classmethod
    def open(
        cls, folder: str | Path, head: str = "encoder", num_labels: int | None = None
    ) -> Checkpoint:
        """Load ``folder`` offline with transformers' loading reports off (the harness reports what
        matters in one line). ``num_labels`` sets a new classification head's outputs. The
        ``masked-lm`` head must be in the checkpoint's weights: transformers would otherwise start
        a random one, so a checkpoint without it (a bare encoder) is one :class:`UserError` line."""
        from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

        if head not in HEADS:
            raise ValueError(f"head {head!r}: expected one of {', '.join(HEADS)}")
        quiet_transformers()
        tokenizer = load_hf_tokenizer(folder)  # the ids every engine reads for this checkpoint
        if head == "encoder":
            model, info = AutoModel.from_pretrained(
                folder, local_files_only=True, add_pooling_layer=False, output_loading_info=True
            )
            check_loaded(Path(folder), str(folder), info)  # no tensor trained from random
        elif head == "masked-lm":
            try:
                model, info = AutoModelForMaskedLM.from_pretrained(
                    folder, local_files_only=True, output_loading_info=True
                )
            except ValueError as err:  # a config no masked-LM class is registered for
                first = (str(err).strip().splitlines() or ["no masked-LM class"])[0][:160]
                raise UserError(f"{folder}: no masked-language-model head: {first}") from None
            missing = sorted(info["missing_keys"])
            if missing:
                raise UserError(
                    f"{folder}: the checkpoint has no masked-language-model head (missing "
                    f"{len(missing)} weights, e.g. {missing[0]}): a bare encoder's vocabulary "
                    "logits would come from a random head; give a checkpoint saved with its MLM "
                    "head (a *ForMaskedLM model, e.g. bert-base-uncased or a SPLADE model)"
                )
        else:
            labels = {} if num_labels is None else {"num_labels": num_labels}
            model = AutoModelForSequenceClassification.from_pretrained(
                folder, local_files_only=True, **labels
            )
        return cls(model, tokenizer, max_positions(model.config.to_dict()))

    def usable_length(self, requested: int) -> int:
        """``requested`` capped at the model's positions: ``max_length`` 512 on a 64-position
        model truncates at 64."""
        return usable_length(requested, self.positions)

    @staticmethod
    def quiet() -> None:
        """transformers' loading bars and reports off, for code that loads a model itself
        (sentence-transformers' ``SentenceTransformer``)."""
        quiet_transformers()

    # A forward as the engine runs one: inference mode under the autocast of a dtype (None: fp32).
    inference = staticmethod(inference_autocast)

    @staticmethod
    def batches(lengths: Sequence[int], batch_size: int) -> Iterator[tuple[list[int], list[int]]]:
        """(ids, rows) per batch, as the engine batches: items of one token length, longest first,
        ``batch_size`` at most; ``rows`` is ``ids`` topped up with repeats to the engine's minimum
        batch, and only the first ``len(ids)`` results are kept. A sentence's result then does not
        depend on its batch-mates.

        >>> list(Checkpoint.batches([40, 10, 40], 8))
        [([0, 2], [0, 2]), ([1], [1, 1, 1, 1, 1, 1, 1])]
        """
        for ids in equal_length_batches(lengths, batch_size, 0):
            yield ids, topped_up(ids, lengths)

    @staticmethod
    def pool(
        states: Sequence[torch.Tensor], mask: torch.Tensor, pooling: str, layers: Sequence[int]
    ) -> torch.Tensor:
        """``pooling`` (the engine's table: ``cls``, ``mean``, ``mean_nocls``, ``last`` …) of each
        of ``layers`` of ``states`` (hidden states, negative ids from the end), concatenated."""
        return pool_layers(states, mask, pooling, layers)
