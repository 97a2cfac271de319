"""The native encoders by family: the registry (:mod:`harness.core.encoding.families`) says which
loader runs a checkpoint.

Every encoder family runs the packed layers of :mod:`harness.core.encoding.native_encoder`; the
decoders (Llama, Mistral, Qwen2, Qwen3) run :mod:`harness.core.encoding.native_llama`. Which
checkpoints qualify is decided without torch by
:func:`harness.core.encoding.backbone.native_reason`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.encoding.backbone import incomplete_weights
from harness.core.encoding.families import family_of
from harness.core.encoding.model_files import model_config
from harness.core.encoding.native_encoder import NativeEncoder, NativeTokenizer
from harness.core.errors import UserError

if TYPE_CHECKING:
    import torch

    from harness.core.encoding.native_llama import NativeDecoder

__all__ = ["NativeTokenizer", "load_native"]


def load_native(folder: Path, dtype: torch.dtype | None = None) -> NativeEncoder | NativeDecoder:
    """The native model of the checkpoint in ``folder`` (one ``native_reason`` accepted),
    weights loaded, in eval mode. A tensor the family needs that the file lacks, or holds in
    another shape, is a user error (:func:`~harness.core.encoding.backbone.incomplete_weights`).
    An encoder's weights are fp32 (``set_compute_dtype`` sets its precision); a decoder's are in
    ``dtype`` (fp32 when None)."""
    config = model_config(folder)
    family = family_of(config)
    if family.load is None:
        raise UserError(
            f"backbone {folder}: no native {config.get('model_type')} (the {family.label} family "
            "runs through transformers); run it with --encoder-impl transformers"
        )
    try:
        return family.load(folder, config, dtype)
    except KeyError as missing:
        raise incomplete_weights(folder, str(folder), [str(missing.args[0])]) from None
    except RuntimeError as err:  # load_state_dict(strict=True): a tensor of another shape
        raise incomplete_weights(folder, str(folder), shape=str(err).split("\n")[-1]) from None
