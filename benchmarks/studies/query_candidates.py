"""Query × candidate cost of the cross-encoder teacher against its DSE student, on the embedded
default (both trained from the packaged MiniLM on STS-B train; cached after the first run).

    .venv/bin/python benchmarks/studies/query_candidates.py   # Q = 100, C = 100 / 1000 / 10000
    .venv/bin/python benchmarks/studies/query_candidates.py --dtype bf16
    .venv/bin/python benchmarks/studies/query_candidates.py --out docs/measurements/cost.md

Queries and candidates are STS-B sentences (test + the fit set), shuffled with the seed. (a) is
measured up to 10,000 pairs and extrapolated beyond from its measured pairs/second (marked in
the table); (b) and (c) are always measured. Same table as ``run_bench.py --cost``; the target is
(a)/(b) ≥ 50× at Q = 100, C = 1000.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import harness
    from harness.runner.settings.config import default_cache_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--cache-dir", default=default_cache_dir())
    parser.add_argument("--output-dir", default="results")
    parser.add_argument("--out", help="also write the run's cost.md (markdown) to this file")
    args = parser.parse_args()
    cfg = harness.BenchConfig(
        methods=("cross-encoder", "dse"),
        cost=True,
        dtype=args.dtype,
        cache_dir=args.cache_dir,
        output_dir=args.output_dir,
        plots=False,
    )
    harness.run(cfg)
    out = Path(args.output_dir)
    from benchmarks.report import emit, machine_line

    cost = (out / "cost.md").read_text(encoding="utf-8").rstrip("\n").splitlines()
    emit([*cost[:1], "", machine_line([args.dtype]), *cost[1:]], args.out)  # under its title
    rows = {row["candidates"]: row for row in json.loads((out / "cost.json").read_text())["rows"]}
    if 1000 in rows:
        ratio = rows[1000]["speedup_student"]
        print(
            f"(a)/(b) at Q=100, C=1000: {ratio:.0f}x (target >= 50x: "
            f"{'met' if ratio >= 50 else 'NOT met'})"
        )


if __name__ == "__main__":
    main()
