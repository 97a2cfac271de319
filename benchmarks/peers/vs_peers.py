"""The harness against its peers on STS-B test with the packaged all-MiniLM-L6-v2, in one run.

    .venv/bin/python benchmarks/peers/vs_peers.py            # 3 rounds, ~5 minutes on 2 cores
    .venv/bin/python benchmarks/peers/vs_peers.py --out docs/measurements/vs_peers.md
    .venv/bin/python benchmarks/peers/vs_peers.py --rounds 2 \\
        --out docs/measurements/vs_peers_busy.md

Every step is a fresh process (a cold start is what a user pays). Within a round the steps run in
turn, in an order that rotates from round to round (:func:`benchmarks.side_by_side.round_order`;
(e) always right after its (d), whose cache it reads), so machine drift hits all steps alike;
medians over rounds are reported.

    (a) the harness, ``avg``, empty cache (fp32 and bf16)
    (b) MTEB's own STSBenchmark evaluation, same model, same data fed in locally (fp32)
    (c) sentence-transformers ``encode`` of both sides (fp32 and bf16), and with its ONNX Runtime
        and OpenVINO backends (``.venv-peers``, see ``benchmarks/peers/peer_env.py``; the model
        exported once beforehand, as the harness's model is installed beforehand; OpenVINO in its
        default bf16)
    (d) the harness, ``cls avg first-last whitening``, empty cache, whitening fit on the test split
        (``--fit-set test``) so (d) needs exactly the sentences of (a)
    (e) (d) again, warm
    (f) the user's cold command ``run_bench.py --methods avg --tasks stsb --dtype bf16`` itself,
        plots, page and history included, empty cache and output folder

Targets: (a)/(b) ≤ 0.5 with the fastest dtype whose Spearman moves ≤ 0.1 from fp32;
(d) ≤ 1.3 × (a); (e) ≤ 0.1 × (d); (f)/(b) ≤ 0.35 (the whole process against MTEB's).

"process s" is the wall time of the whole command (interpreter start and imports included);
"work s" is what the step times itself: for the harness ``harness.run`` (torch import included,
since the harness imports it lazily), for the peers model load + evaluate/encode (imports excluded).
Options, steps, rounds and the report are the shared peer harness's
(:mod:`benchmarks.side_by_side`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
VIEW_METHODS = ["cls", "avg", "first-last", "whitening"]
# The steps in the report's order; a round runs them in units (a unit's steps in this order).
STEPS = (
    "a fp32",
    "a bf16",
    "f cli bf16",
    "b mteb fp32",
    "c st fp32",
    "c st bf16",
    "c st onnx fp32",
    "c st openvino bf16",
    "d fp32",
    "e fp32",
    "d bf16",
    "e bf16",
)


def harness_step(spec: dict) -> dict:
    """A step (a fresh process): run the harness once; seconds, Spearman per method, sentences
    forwarded."""
    started = time.perf_counter()
    import harness

    cfg = harness.BenchConfig(
        methods=tuple(spec["methods"]),
        dtype=spec["dtype"],
        cache_dir=spec["cache_dir"],
        output_dir=spec["output_dir"],
        fit_set="test",
        progress=False,
        plots=False,
    )
    outcome = harness.run(cfg)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "spearman": {r["method"]["name"]: r["scores"]["spearman"] for r in outcome.records},
        "forwarded": outcome.sentences_forwarded,
    }


def cli_step(work: Path, dtype: str) -> dict:
    """The user's own cold command, ``run_bench.py --methods avg --tasks stsb --dtype DTYPE``, as a
    fresh process with an empty cache and output folder: plots, page and history included (what
    the (a) steps leave out). Its Spearman is read back from the scores.csv it wrote."""
    import csv

    from benchmarks.side_by_side import run_process

    out, cache = work / f"out-cli-{dtype}", work / f"cache-cli-{dtype}"
    command = [sys.executable, str(ROOT / "run_bench.py"), "--methods", "avg", "--tasks", "stsb"]
    command += ["--dtype", dtype, "--output-dir", str(out)]
    _, wall = run_process(command, env={"STS_BENCH_CACHE": str(cache)})
    with (out / "scores.csv").open(encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["method"] == "avg" and r["task"] == "STS-B"]
    return {"process_s": wall, "seconds": wall, "spearman": float(rows[0]["spearman"])}


def backend_step(backend: str, dtype: str, model: str, texts: Path, work: Path) -> dict:
    """sentence-transformers with ``backend`` as a fresh process; Spearman from the saved
    vectors."""
    import numpy as np

    from benchmarks.peers.baselines import _cosine_spearman, load_stsb_test
    from benchmarks.peers.peer_env import WORKER, python_for
    from benchmarks.side_by_side import run_step

    vectors = work / f"vectors-{backend}-{dtype}.npy"
    command = [str(python_for(backend)), str(WORKER), "once", "--model", model]
    command += ["--backend", backend, "--dtype", dtype, "--texts", str(texts)]
    result = run_step([*command, "--vectors", str(vectors)])
    s1, _, gold = load_stsb_test()
    embeddings = np.load(vectors)
    result["spearman"] = _cosine_spearman(embeddings[: len(s1)], embeddings[len(s1) :], gold)
    return result


def one_round(
    work: Path, exports: dict[str, str], texts: Path, number: int, rounds: int
) -> dict[str, dict]:
    """Every step once, in units rotated by round (:func:`benchmarks.side_by_side.round_order`)."""
    from benchmarks.side_by_side import round_order, run_step, step_command

    py = sys.executable
    baselines = str(ROOT / "benchmarks" / "peers" / "baselines.py")
    out: dict[str, dict] = {}

    def harness(name: str, methods: list[str], dtype: str, cache: str) -> Callable[[], None]:
        spec = {"methods": methods, "dtype": dtype, "cache_dir": str(work / cache)}
        spec["output_dir"] = str(work / f"out-{name}")

        def step() -> None:
            out[name] = run_step(step_command(__file__, spec))

        return step

    def peer(name: str, make: Callable[[], dict]) -> Callable[[], None]:
        def step() -> None:
            out[name] = make()

        return step

    units: list[Sequence[Callable[[], None]]] = [
        [harness("a fp32", ["avg"], "fp32", "cache-a-fp32")],
        [harness("a bf16", ["avg"], "bf16", "cache-a-bf16")],
        [peer("f cli bf16", lambda: cli_step(work, "bf16"))],
        [peer("b mteb fp32", lambda: run_step([py, baselines, "mteb"]))],
        [peer("c st fp32", lambda: run_step([py, baselines, "st", "--dtype", "fp32"]))],
        [peer("c st bf16", lambda: run_step([py, baselines, "st", "--dtype", "bf16"]))],
        [
            peer(
                "c st onnx fp32",
                lambda: backend_step("onnx", "fp32", exports["onnx"], texts, work),
            )
        ],
        [
            peer(
                "c st openvino bf16",
                lambda: backend_step("openvino", "bf16", exports["openvino"], texts, work),
            )
        ],
        [  # (e) reads the cache (d) just filled
            harness("d fp32", VIEW_METHODS, "fp32", "cache-d-fp32"),
            harness("e fp32", VIEW_METHODS, "fp32", "cache-d-fp32"),
        ],
        [
            harness("d bf16", VIEW_METHODS, "bf16", "cache-d-bf16"),
            harness("e bf16", VIEW_METHODS, "bf16", "cache-d-bf16"),
        ],
    ]
    for unit in round_order(units, number, rounds):
        for step in unit:
            step()
    return {name: out[name] for name in STEPS}


def spearman_of(result: dict) -> float:
    value = result["spearman"]
    return value["avg"] if isinstance(value, dict) else value


def report(rounds: list[dict[str, dict]], facts: dict | None = None) -> list[str]:
    """The report's lines: every step's medians, then the target ratios."""
    from benchmarks.side_by_side import header, table

    steps = list(rounds[0])
    med = {
        s: {k: statistics.median(r[s][k] for r in rounds) for k in ("process_s", "seconds")}
        for s in steps
    }
    lines = header(
        f"STS-B test, packaged all-MiniLM-L6-v2, CPU ({os.cpu_count()} cores), each step a fresh "
        "process",
        ["fp32", "bf16"],
        len(rounds),
        facts=facts,
    )
    rows = []
    for step in steps:
        process, work = f"{med[step]['process_s']:.2f}", f"{med[step]['seconds']:.2f}"
        rows.append([step, process, work, f"{spearman_of(rounds[0][step]):.4f}"])
    lines += table(["step", "process s", "work s", "Spearman (avg)"], rows, right=[1, 2, 3])
    drift = abs(spearman_of(rounds[0]["a bf16"]) - spearman_of(rounds[0]["a fp32"]))
    faster = med["a bf16"]["process_s"] < med["a fp32"]["process_s"]
    dtype = "bf16" if drift <= 0.1 and faster else "fp32"
    ratio = {
        k: {m: med[f"{k} {dtype}"][m] for m in ("process_s", "seconds")} for k in ("a", "d", "e")
    }
    b = med["b mteb fp32"]
    lines += [
        "",
        f"fastest harness dtype with |ΔSpearman| ≤ 0.1: {dtype} (Δ = {drift:.4f})",
        "",
    ]
    checks = (
        ("(a)/(b)", ratio["a"], b, "≤ 0.5"),
        ("(f)/(b)", med["f cli bf16"], b, "≤ 0.35"),
        ("(d)/(a)", ratio["d"], ratio["a"], "≤ 1.3"),
        ("(e)/(d)", ratio["e"], ratio["d"], "≤ 0.1"),
    )
    rows = []
    for label, top, bottom, target in checks:
        process = f"{top['process_s'] / bottom['process_s']:.2f}"
        rows.append([label, process, f"{top['seconds'] / bottom['seconds']:.2f}", target])
    lines += table(["ratio", "process", "work", "target"], rows, right=[1, 2, 3])
    warm_forwarded = {r[f"e {dtype}"]["forwarded"] for r in rounds}
    lines += ["", f"sentences run through the model in (e): {sorted(warm_forwarded)}"]
    if "c st openvino bf16" in med:
        peer = med["c st openvino bf16"]
        lines.append(
            f"(c) sentence-transformers + OpenVINO bf16 / (a) harness {dtype}: process "
            f"{peer['process_s'] / ratio['a']['process_s']:.2f}×, "
            f"work {peer['seconds'] / ratio['a']['seconds']:.2f}×"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    from benchmarks import side_by_side as sbs

    argv = sys.argv[1:] if argv is None else argv
    if sbs.answer_step(argv, harness_step):
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = sbs.check_options(parser, sbs.add_options(parser, rounds=3).parse_args(argv))
    from benchmarks.peers.baselines import load_stsb_test, packaged_model_dir
    from benchmarks.peers.peer_env import exported

    exports = {backend: exported(packaged_model_dir(), backend) for backend in ("onnx", "openvino")}
    load_at_start = os.getloadavg()
    s1, s2, _ = load_stsb_test()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="vs-peers-texts-") as keep:
        texts = Path(keep) / "texts.json"
        texts.write_text(json.dumps(s1 + s2), encoding="utf-8")
        for number in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="vs-peers-") as tmp:
                rounds.append(one_round(Path(tmp), exports, texts, number, args.rounds))
            print(f"round {number + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    sbs.write(report(rounds), args.out, load_at_start)


if __name__ == "__main__":
    main()
