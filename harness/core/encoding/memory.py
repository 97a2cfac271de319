"""Will a backbone's weights fit? Asked before loading, so an LLM too large for the machine fails
with one line instead of swapping, or being killed by the kernel half-way through a run.

The weights' size is read from the safetensors headers (no tensor loaded); what is available is the
kernel's ``MemAvailable``, bounded by the process's cgroup limit (a container's), or the GPU's free
memory. The check keeps a margin for activations and the runtime (:data:`HEADROOM`).
"""

from __future__ import annotations

from harness.core import machine
from harness.core.encoding.backbone import BackboneRef, parameter_count
from harness.core.errors import ResourceError

BYTES_PER_WEIGHT = {"fp32": 4, "bf16": 2, "fp16": 2}
HEADROOM = 1.2  # weights × 1.2: activations of a CPU batch, the allocator, torch itself
GIB = 2**30


def weights_bytes(ref: BackboneRef, weights: str) -> int | None:
    """Bytes the backbone's parameters take in ``weights`` (None: unknown, .bin weights)."""
    count = parameter_count(ref.path)
    return None if count is None else count * BYTES_PER_WEIGHT[weights]


def check_weights_fit(
    ref: BackboneRef, weights: str, device: str, available: int | None = None
) -> None:
    """Raise :class:`ResourceError` (exit 3) when ``ref``'s weights in ``weights`` with
    :data:`HEADROOM` exceed what ``device`` has free; silent when either size is unknown.

    Worked example: 7.6e9 parameters in bf16 are 15.2 GB, × 1.2 = 18.2 GB: refused on a
    machine with 16 GB available, loaded on one with 24.
    """
    need = weights_bytes(ref, weights)
    have = machine.available_bytes(device) if available is None else available
    if need is None or have is None or need * HEADROOM <= have:
        return
    half = " (--dtype bf16 halves it)" if weights == "fp32" else ""
    raise ResourceError(
        f"backbone {ref.name}: its weights take {need / GIB:.1f} GiB in {weights}{half}, and "
        f"{device} has {have / GIB:.1f} GiB available; it would not fit with room to encode (needs "
        f"about {need * HEADROOM / GIB:.1f} GiB): use a smaller model, --dtype bf16, or a machine "
        "or device with more memory"
    )
