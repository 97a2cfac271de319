"""The native encoders by family: which module loads a checkpoint's ``model_type``.

Every encoder family runs the packed layers of :mod:`harness.core.encoding.native_encoder`; the
decoders (Llama, Mistral, Qwen2, Qwen3) run :mod:`harness.core.encoding.native_llama`. Which
checkpoints qualify is decided without torch by
:func:`harness.core.encoding.backbone.native_supported`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.encoding.backbone import NATIVE_DECODER_TYPES
from harness.core.encoding.native_encoder import NativeEncoder, NativeTokenizer, read_config
from harness.core.errors import UserError

if TYPE_CHECKING:
    import torch

    from harness.core.encoding.native_llama import NativeDecoder

__all__ = ["NativeTokenizer", "load_native"]


def load_native(folder: Path, dtype: torch.dtype | None = None) -> NativeEncoder | NativeDecoder:
    """The native model of the checkpoint in ``folder`` (one ``native_supported`` accepted),
    weights loaded, in eval mode. A tensor the family needs and the file lacks is a user error.
    An encoder's weights are fp32 (``set_compute_dtype`` sets its precision); a decoder's are in
    ``dtype`` (fp32 when None)."""
    model_type = read_config(folder).get("model_type")
    try:
        if model_type in NATIVE_DECODER_TYPES:
            import torch

            from harness.core.encoding.native_llama import load_decoder

            return load_decoder(folder, dtype or torch.float32)
        if model_type == "mpnet":
            from harness.core.encoding.native_mpnet import load_native_mpnet

            return load_native_mpnet(folder)
        if model_type == "deberta-v2":
            from harness.core.encoding.native_deberta import load_native_deberta

            return load_native_deberta(folder)
        from harness.core.encoding.native_bert import load_native_bert

        return load_native_bert(folder)
    except KeyError as missing:
        raise UserError(
            f"backbone {folder}: model.safetensors lacks {missing.args[0]}, which a {model_type} "
            "checkpoint has; the file may be truncated or from another model: re-save it, or run "
            "it with --encoder-impl transformers"
        ) from None
