"""What this machine offers: devices, CPU cores, free memory, half-precision instructions.

Facts of the machine, not of the encoding engine: the scheduler (``--device cuda:0,1``), the
bootstrap's memory check, the engine and the benchmarks all ask the same questions, so the answers
live here, below all of them. Importing this module loads nothing heavy; torch is imported by the
functions that need it.

>>> device_list("cuda:0,1")
['cuda:0', 'cuda:1']
>>> device_list("cpu")
['cpu']
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from harness.core.errors import UserError

log = logging.getLogger("sts_bench.machine")


def device_list(requested: str) -> list[str]:
    """``cuda:0,1`` → ["cuda:0", "cuda:1"]; anything else is a single device (not yet checked)."""
    if requested.startswith("cuda:") and "," in requested:
        return [
            f"cuda:{index.strip()}"
            for index in requested.removeprefix("cuda:").split(",")
            if index.strip()
        ]
    return [requested]


def check_devices(requested: str) -> None:
    """Raise the one-line :class:`UserError` of :func:`resolve_device` for any device of
    ``requested`` this machine does not have; run up front, so a device is checked even when every
    sentence is cached and nothing is encoded (``--device tpu`` passed then). torch is imported
    only for a ``cuda`` device.

    >>> check_devices("tpu")
    Traceback (most recent call last):
    ...
    harness.core.errors.UserError: --device tpu: expected auto, cpu, cuda, cuda:N or cuda:N,M,...
    """
    for device in device_list(requested.strip()):
        if device not in ("auto", "cpu"):
            resolve_device(device)


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


def available_cpus() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in path.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_available(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """memory.max − memory.current of this process's cgroup (v2); None when unlimited or unknown."""
    try:
        limit = (root / "memory.max").read_text(encoding="ascii").strip()
        if limit == "max":
            return None
        return int(limit) - int((root / "memory.current").read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def available_bytes(device: str) -> int | None:
    """Memory a model or the scorer may still take on ``device`` (None: unknown): the kernel's
    ``MemAvailable`` bounded by this process's cgroup limit, or the GPU's free memory."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    known = [value for value in (_meminfo_available(), _cgroup_available()) if value is not None]
    return min(known) if known else None


def mkldnn_supports(namespace: Any, test: str, logger: logging.Logger = log) -> bool:
    """oneDNN's private test ``namespace.<test>()`` (``torch.ops.mkldnn``); False when this torch
    lacks it or it fails: a renamed or changed private op means "no", not a crash, and ``logger``
    (the asking module's) says why at debug level."""
    try:
        return bool(getattr(namespace, test)())
    except Exception as error:
        logger.debug(
            "torch.ops.mkldnn.%s unusable (%s: %s): taken as unsupported",
            test,
            type(error).__name__,
            error,
        )
        return False


def half_native_on_cpu(dtype: str) -> bool:
    """Whether this CPU computes ``dtype`` (``bf16`` or ``fp16``) products in hardware, by oneDNN's
    own test. Without it torch emulates the type, slower than fp32 (measured 4x for bf16 on an AVX2
    Zen 4 at 2 threads); ``fp32`` is native everywhere."""
    if dtype == "fp32":
        return True
    import torch

    test = {"bf16": "_is_mkldnn_bf16_supported", "fp16": "_is_mkldnn_fp16_supported"}[dtype]
    return mkldnn_supports(torch.ops.mkldnn, test)


# What ``--dtype fastest`` may pick, from the safest to the fastest where the hardware has it.
FASTEST = "fastest"
_SPEED_RANK = ("fp32", "fp16", "bf16")


def fastest_cpu_dtype(bf16_native: bool | None = None) -> str:
    """The fastest dtype this CPU computes natively: ``bf16`` where it has bf16 instructions
    (AMX-BF16, AVX512-BF16: oneDNN's own test, :func:`half_native_on_cpu`), else ``fp32``; an
    emulated bf16 is slower than fp32 (7.7x measured on an AVX2-only AMD EPYC, issue 44).
    ``bf16_native`` answers the probe (a test, or a benchmark that already asked).

    >>> fastest_cpu_dtype(bf16_native=True), fastest_cpu_dtype(bf16_native=False)
    ('bf16', 'fp32')
    """
    native = half_native_on_cpu("bf16") if bf16_native is None else bf16_native
    return "bf16" if native else "fp32"


def fastest_cuda_dtype(capability: tuple[int, int]) -> str:
    """The fastest dtype a GPU of compute ``capability`` computes in its tensor cores: ``bf16``
    from Ampere (8.0) on, ``fp16`` on Volta and Turing (7.x), ``fp32`` before (no tensor cores).
    bf16 before fp16 where both run: as fast, and with fp32's range it cannot overflow.

    >>> fastest_cuda_dtype((9, 0)), fastest_cuda_dtype((7, 5)), fastest_cuda_dtype((6, 1))
    ('bf16', 'fp16', 'fp32')
    """
    if capability >= (8, 0):
        return "bf16"
    return "fp16" if capability >= (7, 0) else "fp32"


def fastest_dtype(requested_device: str) -> tuple[str, str]:
    """What ``--dtype fastest`` means on ``requested_device`` (as ``--device`` gives it): the
    concrete dtype and why, for the record (``("bf16", "fastest on this CPU")``). On several GPUs
    the dtype every one of them runs fast (the slowest pick); on a CPU :func:`fastest_cpu_dtype`.
    The answer depends on the machine, so a run's scores do too: the default stays ``fp32``."""
    devices = [resolve_device(device) for device in device_list(requested_device.strip())]
    if all(device == "cpu" for device in devices):
        return fastest_cpu_dtype(), "fastest on this CPU"
    import torch

    picks = {}
    for device in devices:
        capability = tuple(torch.cuda.get_device_capability(torch.device(device)))
        picks[device] = (fastest_cuda_dtype((capability[0], capability[1])), capability)
    dtype = min((pick for pick, _ in picks.values()), key=_SPEED_RANK.index)
    shown = ", ".join(f"{d} {c[0]}.{c[1]}" for d, (_, c) in picks.items())
    where = "this GPU" if len(picks) == 1 else "these GPUs"
    return dtype, f"fastest on {where} (compute capability {shown})"
