"""Devices, dtypes and threads: what ``--device``, ``--dtype`` and the CPU affinity resolve to."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from harness.core.errors import UserError

if TYPE_CHECKING:
    import torch

DTYPES = ("fp32", "bf16", "fp16")


def device_list(requested: str) -> list[str]:
    """``cuda:0,1`` → ["cuda:0", "cuda:1"]; anything else is a single device (not yet checked)."""
    if requested.startswith("cuda:") and "," in requested:
        return [
            f"cuda:{index.strip()}"
            for index in requested.removeprefix("cuda:").split(",")
            if index.strip()
        ]
    return [requested]


def resolve_device(requested: str) -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``; ``cuda:N`` is checked to exist.
    A list (``cuda:0,1``) resolves to its first device: the one the main process uses."""
    import torch

    requested = device_list(requested)[0]
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(
                f"--device {requested}: no CUDA GPU is visible to torch; use --device cpu or auto"
            )
        index = requested.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise UserError(
                f"--device {requested}: this machine has {torch.cuda.device_count()} CUDA "
                f"device(s), cuda:0..cuda:{torch.cuda.device_count() - 1}"
            )
        return requested
    raise UserError(f"--device {requested}: expected auto, cpu, cuda, cuda:N or cuda:N,M,...")


def torch_dtype(name: str) -> torch.dtype | None:
    """The autocast dtype for ``--dtype``; ``None`` means plain fp32."""
    import torch

    if name not in DTYPES:
        raise UserError(f"--dtype {name}: expected one of {', '.join(DTYPES)}")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def available_cpus() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
