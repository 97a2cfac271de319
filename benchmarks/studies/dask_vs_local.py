"""The dask backend against the local one on a two-backbone job, in one run.

    .venv/bin/python benchmarks/studies/dask_vs_local.py \\
        --out docs/measurements/dask_vs_local.md  # ~1 min

The job: ``avg`` with the packaged MiniLM plus ``simcse`` (cls_before_pooler) with a copy of it
in another folder — two backbones, two encode jobs — on STS-B test, cold caches. The dask side
starts a LocalCluster of 2 worker processes and connects through ``--scheduler-address``, as a
user would with a real cluster; both sides run torch with the same thread count (the cores of this
process), which byte-equal results require. On 2 cores expect a ratio near 1:
the point is that the results are byte-equal and that the path to a cluster works.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import argparse

    from dask.distributed import LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()

    import harness
    from harness.core.encoding import resolve_backbone

    with tempfile.TemporaryDirectory() as tmp:
        twin = Path(tmp) / "minilm-copy-unsup"
        shutil.copytree(resolve_backbone("minilm").path, twin)

        def run(name: str, **extra) -> tuple[float, list]:
            cfg = harness.BenchConfig(
                methods=("avg", "simcse"),
                method_params={"simcse": {"model": str(twin)}},
                cache_dir=f"{tmp}/cache-{name}",
                output_dir=f"{tmp}/out-{name}",
                progress=False,
                plots=False,
                bootstrap=0,
                **extra,
            )
            started = time.perf_counter()
            outcome = harness.run(cfg)
            return time.perf_counter() - started, [
                (r["method"]["label"], r["scores"]) for r in outcome.records
            ]

        local_s, local = run("local")
        with LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster:
            dask_s, distributed = run(
                "dask", backend="dask", scheduler_address=cluster.scheduler_address
            )
    equal = json.dumps(local) == json.dumps(distributed)
    from benchmarks.report import emit, machine_line

    emit(
        [
            machine_line(["fp32"]),
            "",
            "| backend | seconds |",
            "|---|---:|",
            f"| local | {local_s:.1f} |",
            f"| dask LocalCluster, 2 workers | {dask_s:.1f} |",
            "",
            f"dask / local = {dask_s / local_s:.2f}; scores byte-equal: {equal}",
        ],
        args.out,
    )


if __name__ == "__main__":
    main()
