"""The harness against its peers on STS-B test with the packaged all-MiniLM-L6-v2, in one run.

    .venv/bin/python benchmarks/peers/vs_peers.py            # 3 rounds, ~5 minutes on 2 cores
    .venv/bin/python benchmarks/peers/vs_peers.py --out docs/measurements/vs_peers.md
    .venv/bin/python benchmarks/peers/vs_peers.py --rounds 2 \\
        --out docs/measurements/vs_peers_busy.md
    .venv/bin/python benchmarks/peers/vs_peers.py \\
        --out docs/measurements/vs_peers_fastest_amx.md  # issue 44
    .venv/bin/python benchmarks/peers/vs_peers.py \\
        --out docs/measurements/vs_peers_fastest_amx_2.md  # issue 44, run again
    .venv/bin/python benchmarks/peers/vs_peers.py \\
        --out docs/measurements/vs_peers_fastest_amx_3.md  # issue 44, bytecode compiled
    .venv/bin/python benchmarks/peers/vs_peers.py \\
        --out docs/measurements/vs_peers_fastest_amx_4.md  # issue 44, bytecode, run again

Every step is a fresh process (a cold start is what a user pays). Within a round the steps run in
turn, in an order that rotates from round to round (:func:`benchmarks.side_by_side.round_order`;
(e) always right after its (d), whose cache it reads), so machine drift hits all steps alike;
medians over rounds are reported.

    (a) the harness, ``avg``, empty cache (in every dtype timed)
    (b) MTEB's own STSBenchmark evaluation, same model, same data fed in locally (fp32, and the
        CPU's fastest native dtype where that is not fp32)
    (c) sentence-transformers ``encode`` of both sides (every dtype timed), and with its ONNX
        Runtime and OpenVINO backends (``.venv-peers``, see ``benchmarks/peers/peer_env.py``; the
        model exported once beforehand, as the harness's model is installed beforehand; ONNX
        Runtime in fp32, OpenVINO in the CPU's fastest native dtype, its own default)
    (d) the harness, ``cls avg first-last whitening``, empty cache, whitening fit on the test split
        (``--fit-set test``) so (d) needs exactly the sentences of (a)
    (e) (d) again, warm
    (f) the user's cold command ``run_bench.py --methods avg --tasks stsb --dtype fastest``
        itself (the CPU's fastest native dtype, which it must pick), plots, page and history
        included, empty cache and output folder

The dtypes timed are fp32 and ``--dtypes`` (default ``fastest``: bf16 on a CPU with AMX or
AVX512-BF16, nothing more on an AVX2 one, where fp32 is the fastest); the header names the CPU
kind and them. Targets: (a)/(b) ≤ 0.5 with the fastest dtype whose Spearman moves ≤ 0.1 from fp32;
(d) ≤ 1.3 × (a); (e) ≤ 0.1 × (d); (f)/(b) ≤ 0.35 where bf16 is native, ≤ 0.45 on a CPU whose
fastest is fp32 (issue 44: the whole process against MTEB's, (b) its faster dtype).

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
# (f)/(b) at most this, by the CPU's fastest native dtype (issue 44)
CLI_TARGET = {"bf16": 0.35, "fp32": 0.45}


def steps_for(timed: Sequence[str], fastest: str) -> list[str]:
    """The steps in the report's order for the dtypes ``timed`` (fp32 first) on a CPU whose
    fastest native dtype is ``fastest``; a round runs them in units (a unit's steps in this order).

    >>> steps_for(["fp32"], "fp32")  # doctest: +NORMALIZE_WHITESPACE
    ['a fp32', 'f cli fp32', 'b mteb fp32', 'c st fp32', 'c st onnx fp32',
     'c st openvino fp32', 'd fp32', 'e fp32']
    >>> steps_for(["fp32", "bf16"], "bf16")[:6]
    ['a fp32', 'a bf16', 'f cli bf16', 'b mteb fp32', 'b mteb bf16', 'c st fp32']
    """
    mteb = list(dict.fromkeys(["fp32", fastest]))
    return [
        *(f"a {d}" for d in timed),
        f"f cli {fastest}",
        *(f"b mteb {d}" for d in mteb),
        *(f"c st {d}" for d in timed),
        "c st onnx fp32",
        f"c st openvino {fastest}",
        *(name for d in timed for name in (f"d {d}", f"e {d}")),
    ]


# The steps on a CPU with bf16 instructions, the default (what the report's test feeds it).
STEPS = tuple(steps_for(["fp32", "bf16"], "bf16"))


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
    """The user's own cold command, ``run_bench.py --methods avg --tasks stsb --dtype fastest``,
    as a fresh process with an empty cache and output folder: plots, page and history included
    (what the (a) steps leave out). Its Spearman is read back from the scores.csv it wrote, and
    so is the dtype it picked, which must be ``dtype`` (this CPU's fastest native one)."""
    import csv

    from benchmarks.side_by_side import run_process

    out, cache = work / f"out-cli-{dtype}", work / f"cache-cli-{dtype}"
    command = [sys.executable, str(ROOT / "run_bench.py"), "--methods", "avg", "--tasks", "stsb"]
    command += ["--dtype", "fastest", "--output-dir", str(out)]
    _, wall = run_process(command, env={"STS_BENCH_CACHE": str(cache)})
    with (out / "scores.csv").open(encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["method"] == "avg" and r["task"] == "STS-B"]
    if rows[0]["dtype"] != dtype:
        raise RuntimeError(f"--dtype fastest ran in {rows[0]['dtype']}, expected {dtype}")
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
    work: Path,
    exports: dict[str, str],
    texts: Path,
    number: int,
    rounds: int,
    timed: Sequence[str] = ("fp32", "bf16"),
    fastest: str = "bf16",
) -> dict[str, dict]:
    """Every step of :func:`steps_for` once, in units rotated by round
    (:func:`benchmarks.side_by_side.round_order`)."""
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

    def baseline(name: str, *arguments: str) -> Callable[[], None]:
        return peer(name, lambda: run_step([py, baselines, *arguments]))

    def backend(name: str, kind: str, dtype: str) -> Callable[[], None]:
        return peer(name, lambda: backend_step(kind, dtype, exports[kind], texts, work))

    mteb = list(dict.fromkeys(["fp32", fastest]))
    units: list[Sequence[Callable[[], None]]] = [
        *([harness(f"a {d}", ["avg"], d, f"cache-a-{d}")] for d in timed),
        [peer(f"f cli {fastest}", lambda: cli_step(work, fastest))],
        *([baseline(f"b mteb {d}", "mteb", "--dtype", d)] for d in mteb),
        *([baseline(f"c st {d}", "st", "--dtype", d)] for d in timed),
        [backend("c st onnx fp32", "onnx", "fp32")],
        [backend(f"c st openvino {fastest}", "openvino", fastest)],
        *(
            [  # (e) reads the cache (d) just filled
                harness(f"d {d}", VIEW_METHODS, d, f"cache-d-{d}"),
                harness(f"e {d}", VIEW_METHODS, d, f"cache-d-{d}"),
            ]
            for d in timed
        ),
    ]
    for unit in round_order(units, number, rounds):
        for step in unit:
            step()
    return {name: out[name] for name in steps_for(timed, fastest)}


def spearman_of(result: dict) -> float:
    value = result["spearman"]
    return value["avg"] if isinstance(value, dict) else value


def report(rounds: list[dict[str, dict]], facts: dict | None = None) -> list[str]:
    """The report's lines: every step's medians, then the target ratios. The dtypes timed and the
    CPU's fastest native one are read from the step names (:func:`steps_for`)."""
    from benchmarks.report import cpu_facts
    from benchmarks.side_by_side import header, table

    facts = cpu_facts() if facts is None else facts
    steps = list(rounds[0])
    timed = [s.removeprefix("a ") for s in steps if s.startswith("a ")]
    cli = next(s for s in steps if s.startswith("f cli "))
    fastest = cli.removeprefix("f cli ")
    med = {
        s: {k: statistics.median(r[s][k] for r in rounds) for k in ("process_s", "seconds")}
        for s in steps
    }
    lines = header(
        f"STS-B test, packaged all-MiniLM-L6-v2, CPU ({os.cpu_count()} cores), each step a fresh "
        "process",
        timed,
        len(rounds),
        facts=facts,
    )
    rows = []
    for step in steps:
        process, work = f"{med[step]['process_s']:.2f}", f"{med[step]['seconds']:.2f}"
        rows.append([step, process, work, f"{spearman_of(rounds[0][step]):.4f}"])
    lines += table(["step", "process s", "work s", "Spearman (avg)"], rows, right=[1, 2, 3])
    reference = spearman_of(rounds[0]["a fp32"])
    drifts = {d: abs(spearman_of(rounds[0][f"a {d}"]) - reference) for d in timed}
    dtype = min((d for d in timed if drifts[d] <= 0.1), key=lambda d: med[f"a {d}"]["process_s"])
    ratio = {
        k: {m: med[f"{k} {dtype}"][m] for m in ("process_s", "seconds")} for k in ("a", "d", "e")
    }
    mteb = min((s for s in steps if s.startswith("b mteb ")), key=lambda s: med[s]["process_s"])
    b = med[mteb]
    lines += [
        "",
        f"fastest harness dtype with |ΔSpearman| ≤ 0.1: {dtype} (Δ = {max(drifts.values()):.4f}); "
        f"(b) is {mteb}, the faster MTEB; (f) runs in {fastest}, this CPU's fastest native dtype",
        "",
    ]
    checks = (
        ("(a)/(b)", ratio["a"], b, "≤ 0.5"),
        ("(f)/(b)", med[cli], b, f"≤ {CLI_TARGET.get(fastest, 0.45)}"),
        ("(d)/(a)", ratio["d"], ratio["a"], "≤ 1.3"),
        ("(e)/(d)", ratio["e"], ratio["d"], "≤ 0.1"),
    )
    rows = []
    for label, top, bottom, target in checks:
        process = f"{top['process_s'] / bottom['process_s']:.2f}"
        rows.append([label, process, f"{top['seconds'] / bottom['seconds']:.2f}", target])
    lines += table(["ratio", "process", "work", "target"], rows, right=[1, 2, 3])
    if mteb != "b mteb fp32":
        fp32 = med["b mteb fp32"]
        lines.append(
            f"\n(f)/(b mteb fp32), against MTEB as it runs by default: process "
            f"{med[cli]['process_s'] / fp32['process_s']:.2f}"
        )
    warm_forwarded = {r[f"e {dtype}"]["forwarded"] for r in rounds}
    lines += ["", f"sentences run through the model in (e): {sorted(warm_forwarded)}"]
    openvino = f"c st openvino {fastest}"
    if openvino in med:
        peer = med[openvino]
        lines.append(
            f"(c) sentence-transformers + OpenVINO {fastest} / (a) harness {dtype}: process "
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
    sbs.add_options(
        parser, rounds=3, dtypes=["fastest"], dtype_choices=("fastest", "auto", "fp32", "bf16")
    )
    args = sbs.check_options(parser, parser.parse_args(argv))
    from benchmarks.report import cpu_facts
    from harness.core.machine import fastest_cpu_dtype

    facts = cpu_facts()
    fastest = fastest_cpu_dtype(bool(facts["bf16_native"]))
    timed = sbs.resolve_dtypes(["fp32", *args.dtypes], facts["bf16_native"])
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
                rounds.append(
                    one_round(Path(tmp), exports, texts, number, args.rounds, timed, fastest)
                )
            print(f"round {number + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    sbs.write(report(rounds, facts), args.out, load_at_start)


if __name__ == "__main__":
    main()
