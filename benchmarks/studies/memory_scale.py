"""Peak memory and time of encoding 10k, 100k and 300k synthetic sentences (cold cache).

    .venv/bin/python benchmarks/studies/memory_scale.py \\
        --out docs/measurements/memory_scale.md  # ~9 min
    python benchmarks/studies/memory_scale.py --dtype fp32 \\
        --out docs/measurements/memory_scale_fp32.md
    .venv/bin/python benchmarks/studies/memory_scale.py --sizes 10000 30000

Each size runs in a fresh process (``/usr/bin/time`` reports its peak RSS): the packaged MiniLM
encodes the ``avg`` view of N distinct synthetic sentences into an empty cache, window by window.
Sentences are tokenized and encoded one window at a time and every finished window goes to
disk, so the vectors never accumulate in memory; peak RSS stays flat apart from the index of
sentence hashes (see docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORDS = (
    "the a man woman dog cat child plays runs eats rides sleeps guitar piano horse bike ball food "
    "grass "
    "street park house red blue big small two three people car water tree sun with on in and"
).split()


def child(n: int, cache: str, dtype: str) -> None:
    """In the measured process: encode N synthetic sentences."""
    import random

    from harness.core.encoding import EncodeSettings, View, ViewProvider, resolve_backbone

    rng = random.Random(0)
    sentences = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))) + f" {i}" for i in range(n)
    ]
    provider = ViewProvider(
        resolve_backbone("minilm"), EncodeSettings(dtype=dtype, progress=False), Path(cache)
    )
    provider.ensure(sentences, [View("mean", 6)])
    print(provider.forwarded)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    parser.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    lines = [
        f"dtype {args.dtype}, packaged MiniLM, avg view, empty cache, one process per size",
        "",
        "| sentences | wall s | sentences/s | peak RSS MiB |",
        "|---:|---:|---:|---:|",
    ]
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as cache:
            command = [
                "/usr/bin/time",
                "-f",
                "%e %M",
                sys.executable,
                __file__,
                "--child",
                str(n),
                cache,
                args.dtype,
            ]
            done = subprocess.run(
                command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
            )
        if done.returncode != 0:
            raise SystemExit(done.stderr[-2000:])
        wall, rss_kib = done.stderr.strip().splitlines()[-1].split()
        lines.append(
            f"| {n} | {float(wall):.1f} | {n / float(wall):.0f} | {int(rss_kib) / 1024:.0f} |"
        )
        print(lines[-1], flush=True)
    from benchmarks.report import emit, machine_line

    emit([machine_line([args.dtype]), "", *lines], args.out)


if __name__ == "__main__":
    main()
