"""How the forward pass runs: one frozen value the runner resolves once and every method reads."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from harness.core.errors import UserError

if TYPE_CHECKING:
    import torch

# What --dtype takes: the precision of the forward pass (autocast, or a decoder's weights).
DTYPES = ("fp32", "bf16", "fp16")
# What --encoder-impl takes: transformers' Auto classes, the native engine, or native when it can.
IMPLS = ("auto", "native", "transformers")

# Token budget of an automatic batch: CPUs peak at a few thousand tokens per batch, GPUs far higher.
AUTO_TOKENS = {"cpu": 4096, "cuda": 65536}


def usable_length(requested: int, positions: int | None) -> int:
    """The truncation a model can take: ``max_length``, capped at its position embeddings (a model
    with 64 positions cannot read 128 tokens). ``usable_length(512, 64) == 64``."""
    return min(requested, positions) if positions else requested


@dataclass(frozen=True)
class EncodeSettings:
    """``max_length`` and ``dtype`` change the vectors (they are in the cache key); the rest only
    changes speed. ``window`` is the unit of work: sentences are cut into windows, each encoded (and
    cached) as a whole, on one device or worker. ``device`` is as requested (``auto``,
    ``cuda:0,1``); :meth:`device_now` turns it into one torch device."""

    DTYPES: ClassVar[tuple[str, ...]] = DTYPES
    IMPLS: ClassVar[tuple[str, ...]] = IMPLS

    device: str = "auto"
    dtype: str = "fp32"
    batch_size: int = 0  # sentences per batch; 0 = "auto": by token budget (max_tokens)
    max_tokens: int = 0  # token budget of an automatic batch; 0 = AUTO_TOKENS[device type]
    max_length: int = 128
    window: int = 2048
    threads: int = 0  # CPU threads; 0 = the cores this process may use
    trust_remote_code: bool = False
    progress: bool = True
    impl: str = "auto"  # "native" | "transformers" | "auto" (native when the checkpoint allows)
    # re-encode this many cached sentences per backbone and compare (0: trust the cache)
    verify_cache: int = 0

    def fixed_batch_size(self, default: int = 32) -> int:
        """A sentence count for code that batches by count only (sentence-transformers, pair
        scoring): ``batch_size``, or ``default`` when it is ``auto``."""
        return self.batch_size or default

    def device_now(self) -> str:
        """The one torch device this process runs on (``auto`` → ``cuda`` or ``cpu``; a list
        ``cuda:0,1`` → its first): :func:`harness.core.machine.resolve_device`."""
        from harness.core.machine import resolve_device

        return resolve_device(self.device)

    def autocast_dtype(self) -> torch.dtype | None:
        """The torch dtype of ``dtype`` for autocast; ``None`` means plain fp32."""
        return torch_dtype(self.dtype)


def torch_dtype(name: str) -> torch.dtype | None:
    """The autocast dtype for ``--dtype``; ``None`` means plain fp32."""
    import torch

    if name not in DTYPES:
        raise UserError(f"--dtype {name}: expected one of {', '.join(DTYPES)}")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


@contextlib.contextmanager
def inference_autocast(device: str, dtype: torch.dtype | None) -> Iterator[None]:
    """``torch.inference_mode()`` under autocast to ``dtype`` on ``device``'s type (``cuda:1``:
    cuda); ``dtype`` None: autocast off, plain fp32. How every inference forward here runs."""
    import torch

    enabled = dtype is not None
    with (
        torch.inference_mode(),
        torch.autocast(device.split(":")[0], dtype=dtype or torch.float32, enabled=enabled),
    ):
        yield
