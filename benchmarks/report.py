"""Shared by every benchmark: the machine it ran on, its load, and the report printed and kept.

Every speed benchmark says which CPU it ran on (its model name, and whether it computes bf16 in
hardware: :func:`harness.core.machine.half_native_on_cpu`, oneDNN's own test) and the dtypes it
timed, in :func:`machine_line`: a bf16 timing on a CPU that emulates bf16 is no bf16 timing.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# CPU flags that say how a CPU computes bf16 and fp16 (reported as they are, for the reader)
HALF_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16", "avx_ne_convert")


def cpu_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The CPU's model name (``/proc/cpuinfo``, else the platform's), its half-precision flags,
    the cores this process may use, and whether it computes bf16 natively (imports torch)."""
    from harness.core.machine import available_cpus, half_native_on_cpu

    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = [flag for flag in HALF_FLAGS if flag in value.split()]
    except OSError:
        pass
    return {
        "cpu": model,
        "flags": flags,
        "cores": available_cpus(),
        "bf16_native": half_native_on_cpu("bf16"),
    }


def machine_line(dtypes: Sequence[str], facts: dict[str, Any] | None = None) -> str:
    """One line for a report's header: the CPU kind, the fastest dtype it computes natively (what
    ``--dtype fastest`` picks: :func:`harness.core.machine.fastest_cpu_dtype`) and the dtypes
    timed.

    >>> facts = {"cpu": "Xeon", "flags": ["amx_bf16"], "cores": 2, "bf16_native": True}
    >>> machine_line(["fp32", "bf16"], facts)
    'CPU: Xeon, 2 cores, bf16 native (amx_bf16), fastest native dtype bf16; dtype: fp32, bf16'
    >>> print(machine_line(["fp32"], {**facts, "flags": [], "bf16_native": False}))
    CPU: Xeon, 2 cores, bf16 emulated (no bf16 instructions): slower than fp32, fastest native dtype fp32; dtype: fp32
    """  # noqa: E501
    from harness.core.machine import fastest_cpu_dtype

    facts = cpu_facts() if facts is None else facts
    if facts["bf16_native"]:
        half = "bf16 native" + (f" ({', '.join(facts['flags'])})" if facts["flags"] else "")
    else:
        half = "bf16 emulated (no bf16 instructions): slower than fp32"
    fastest = fastest_cpu_dtype(bool(facts["bf16_native"]))
    return (
        f"CPU: {facts['cpu']}, {facts['cores']} cores, {half}, fastest native dtype {fastest}; "
        f"dtype: {', '.join(dtypes)}"
    )


def load_line(started: tuple[float, float, float]) -> str:
    """The machine's load averages (1/5/15 min) when the run started and now: the machine is shared,
    and a busy one makes 2-thread timings much slower and noisier."""
    now = os.getloadavg()
    return (
        f"load average at start {started[0]:.2f} / {started[1]:.2f} / {started[2]:.2f}, at end "
        f"{now[0]:.2f} / {now[1]:.2f} / {now[2]:.2f} ({os.cpu_count()} cores)"
    )


def emit(lines: list[str], out: str | Path | None) -> None:
    """Print the report and, with ``out``, keep it as a markdown file (folders made)."""
    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n", encoding="utf-8")
