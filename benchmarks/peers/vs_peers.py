"""The harness against its peers on STS-B test with the packaged all-MiniLM-L6-v2, in one run.

    .venv/bin/python benchmarks/peers/vs_peers.py            # 3 rounds, ~5 minutes on 2 cores
    .venv/bin/python benchmarks/peers/vs_peers.py --out docs/measurements/vs_peers.md
    .venv/bin/python benchmarks/peers/vs_peers.py --rounds 2 \\
        --out docs/measurements/vs_peers_busy.md

Every step is a fresh process (a cold start is what a user pays), run in turn within each round so
machine drift hits all steps alike; medians over rounds are reported.

    (a) the harness, ``avg``, empty cache (fp32 and bf16)
    (b) MTEB's own STSBenchmark evaluation, same model, same data fed in locally (fp32)
    (c) sentence-transformers ``encode`` of both sides (fp32 and bf16), and with its ONNX Runtime
        and OpenVINO backends (``.venv-peers``, see ``benchmarks/peers/peer_env.py``; the model
        exported once beforehand, as the harness's model is installed beforehand; OpenVINO in its
        default bf16)
    (d) the harness, ``cls avg first-last whitening``, empty cache, whitening fit on the test split
        (``--fit-set test``) so (d) needs exactly the sentences of (a)
    (e) (d) again, warm (f) the user's cold command ``run_bench.py --methods avg --tasks stsb
    --dtype bf16`` itself, plots, page and history included, empty cache and output folder

Targets: (a)/(b) ≤ 0.5 with the fastest dtype whose Spearman moves ≤ 0.1 from fp32;
(d) ≤ 1.3 × (a); (e) ≤ 0.1 × (d); (f)/(b) ≤ 0.35 (the whole process against MTEB's).

"process s" is the wall time of the whole command (interpreter start and imports included);
"work s" is what the step times itself: for the harness ``harness.run`` (torch import included,
since the harness imports it lazily), for the peers model load + evaluate/encode (imports excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
VIEW_METHODS = ["cls", "avg", "first-last", "whitening"]


def harness_step(argv: list[str]) -> None:
    """In a child process: run the harness once and print {"seconds", "spearman": {method:
    value}}."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", nargs="+")
    parser.add_argument("--dtype")
    parser.add_argument("--cache-dir")
    parser.add_argument("--output-dir")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    started = time.perf_counter()
    import harness

    cfg = harness.BenchConfig(
        methods=tuple(args.methods),
        dtype=args.dtype,
        cache_dir=args.cache_dir,
        output_dir=args.output_dir,
        fit_set="test",
        progress=False,
        plots=False,
    )
    outcome = harness.run(cfg)
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "seconds": seconds,
                "spearman": {r["method"]["name"]: r["scores"]["spearman"] for r in outcome.records},
                "forwarded": outcome.sentences_forwarded,
            }
        )
    )


def cli_step(work: Path, dtype: str) -> dict:
    """The user's own cold command, ``run_bench.py --methods avg --tasks stsb --dtype DTYPE``, as a
    fresh process with an empty cache and output folder: plots, page and history included (what
    the (a) steps leave out). Its Spearman is read back from the scores.csv it wrote."""
    import csv

    out, cache = work / f"out-cli-{dtype}", work / f"cache-cli-{dtype}"
    command = [sys.executable, str(ROOT / "run_bench.py"), "--methods", "avg", "--tasks", "stsb"]
    command += ["--dtype", dtype, "--output-dir", str(out)]
    started = time.perf_counter()
    env = {**ENV, "STS_BENCH_CACHE": str(cache)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"step failed ({' '.join(command)}):\n{done.stderr[-2000:]}")
    with (out / "scores.csv").open(encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["method"] == "avg" and r["task"] == "STS-B"]
    return {"process": wall, "seconds": wall, "spearman": float(rows[0]["spearman"])}


def timed(command: list[str]) -> dict:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"step failed ({' '.join(command)}):\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = wall
    return result


def backend_step(backend: str, dtype: str, model: str, texts: Path, work: Path) -> dict:
    """sentence-transformers with ``backend`` as a fresh process; Spearman from the saved
    vectors."""
    import numpy as np

    from benchmarks.peers.baselines import _cosine_spearman, load_stsb_test
    from benchmarks.peers.peer_env import WORKER, python_for

    vectors = work / f"vectors-{backend}-{dtype}.npy"
    result = timed(
        [
            str(python_for(backend)),
            str(WORKER),
            "once",
            "--model",
            model,
            "--backend",
            backend,
            "--dtype",
            dtype,
            "--texts",
            str(texts),
            "--vectors",
            str(vectors),
        ]
    )
    s1, _, gold = load_stsb_test()
    embeddings = np.load(vectors)
    result["spearman"] = _cosine_spearman(embeddings[: len(s1)], embeddings[len(s1) :], gold)
    return result


def one_round(work: Path, exports: dict[str, str], texts: Path) -> dict[str, dict]:
    py = sys.executable
    me = str(Path(__file__).resolve())
    peers = str(ROOT / "benchmarks" / "peers" / "baselines.py")
    out: dict[str, dict] = {}

    def harness(name: str, methods: list[str], dtype: str, cache: str) -> None:
        out[name] = timed(
            [
                py,
                me,
                "--step",
                "--methods",
                *methods,
                "--dtype",
                dtype,
                "--cache-dir",
                str(work / cache),
                "--output-dir",
                str(work / f"out-{name}"),
            ]
        )

    harness("a fp32", ["avg"], "fp32", "cache-a-fp32")
    harness("a bf16", ["avg"], "bf16", "cache-a-bf16")
    out["f cli bf16"] = cli_step(work, "bf16")
    out["b mteb fp32"] = timed([py, peers, "mteb"])
    out["c st fp32"] = timed([py, peers, "st", "--dtype", "fp32"])
    out["c st bf16"] = timed([py, peers, "st", "--dtype", "bf16"])
    out["c st onnx fp32"] = backend_step("onnx", "fp32", exports["onnx"], texts, work)
    out["c st openvino bf16"] = backend_step("openvino", "bf16", exports["openvino"], texts, work)
    harness("d fp32", VIEW_METHODS, "fp32", "cache-d-fp32")
    harness("e fp32", VIEW_METHODS, "fp32", "cache-d-fp32")
    harness("d bf16", VIEW_METHODS, "bf16", "cache-d-bf16")
    harness("e bf16", VIEW_METHODS, "bf16", "cache-d-bf16")
    return out


def spearman_of(result: dict) -> float:
    value = result["spearman"]
    return value["avg"] if isinstance(value, dict) else value


def report(rounds: list[dict[str, dict]], load: str = "") -> str:
    steps = list(rounds[0])
    med = {
        s: {k: statistics.median(r[s][k] for r in rounds) for k in ("process", "seconds")}
        for s in steps
    }
    lines = [
        f"STS-B test, packaged all-MiniLM-L6-v2, CPU ({os.cpu_count()} cores), median of "
        f"{len(rounds)} round(s)",
        "",
        "| step | process s | work s | Spearman (avg) |",
        "|---|---:|---:|---:|",
    ]
    for step in steps:
        lines.append(
            f"| {step} | {med[step]['process']:.2f} | {med[step]['seconds']:.2f} | "
            f"{spearman_of(rounds[0][step]):.4f} |"
        )
    drift = abs(spearman_of(rounds[0]["a bf16"]) - spearman_of(rounds[0]["a fp32"]))
    dtype = (
        "bf16" if drift <= 0.1 and med["a bf16"]["process"] < med["a fp32"]["process"] else "fp32"
    )
    ratio = {
        k: {m: med[f"{k} {dtype}"][m] for m in ("process", "seconds")} for k in ("a", "d", "e")
    }
    b = med["b mteb fp32"]
    lines += [
        "",
        f"fastest harness dtype with |ΔSpearman| ≤ 0.1: {dtype} (Δ = {drift:.4f})",
        "",
        "| ratio | process | work | target |",
        "|---|---:|---:|---:|",
    ]
    checks = (
        ("(a)/(b)", ratio["a"], b, "≤ 0.5"),
        ("(f)/(b)", med["f cli bf16"], b, "≤ 0.35"),
        ("(d)/(a)", ratio["d"], ratio["a"], "≤ 1.3"),
        ("(e)/(d)", ratio["e"], ratio["d"], "≤ 0.1"),
    )
    for label, top, bottom, target in checks:
        lines.append(
            f"| {label} | {top['process'] / bottom['process']:.2f} | "
            f"{top['seconds'] / bottom['seconds']:.2f} "
            f"| {target} |"
        )
    warm_forwarded = {r[f"e {dtype}"]["forwarded"] for r in rounds}
    lines += ["", f"sentences run through the model in (e): {sorted(warm_forwarded)}"]
    if "c st openvino bf16" in med:
        peer = med["c st openvino bf16"]
        lines.append(
            f"(c) sentence-transformers + OpenVINO bf16 / (a) harness {dtype}: process "
            f"{peer['process'] / ratio['a']['process']:.2f}×, "
            f"work {peer['seconds'] / ratio['a']['seconds']:.2f}×"
        )
    if load:
        lines += ["", load]
    return "\n".join(lines)


def main() -> None:
    if "--step" in sys.argv:
        harness_step([a for a in sys.argv[1:] if a != "--step"])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from benchmarks.peers.baselines import load_stsb_test, packaged_model_dir
    from benchmarks.peers.peer_env import exported
    from benchmarks.report import load_line

    exports = {backend: exported(packaged_model_dir(), backend) for backend in ("onnx", "openvino")}
    load_at_start = os.getloadavg()
    s1, s2, _ = load_stsb_test()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="vs-peers-texts-") as keep:
        texts = Path(keep) / "texts.json"
        texts.write_text(json.dumps(s1 + s2), encoding="utf-8")
        for number in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="vs-peers-") as tmp:
                rounds.append(one_round(Path(tmp), exports, texts))
            print(f"round {number + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    text = report(rounds, load_line(load_at_start))
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
