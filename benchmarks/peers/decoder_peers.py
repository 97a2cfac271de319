"""Decoder LLM encode, the harness against sentence-transformers on torch and on OpenVINO.

    python benchmarks/peers/decoder_peers.py --limit 443 --rounds 3 \\
        --out docs/measurements/decoder_peers.md
    python benchmarks/peers/decoder_peers.py --shapes llama-1b --limit 443 --rounds 2 \\
        --out docs/measurements/decoder_peers_llama1b.md
    python benchmarks/peers/decoder_peers.py --threads 1 --limit 443 --rounds 1 \\
        --out docs/measurements/decoder_peers_1thread.md
    python benchmarks/peers/decoder_peers.py --dtypes fp32 --limit 443 --rounds 1 \\
        --out docs/measurements/decoder_peers_fp32.md
    python benchmarks/peers/decoder_peers.py --rounds 1 \\
        --out docs/measurements/decoder_peers_full.md  # all 2,552 sentences
    .venv/bin/python benchmarks/peers/decoder_peers.py --limit 443 --rounds 3 \\
        --out docs/measurements/decoder_peers_fastest_amx.md  # issue 44: the native dtype
    .venv/bin/python benchmarks/peers/decoder_peers.py --limit 443 --rounds 3 \\
        --out docs/measurements/decoder_peers_fastest_amx_2.md  # issue 44: no meta-device imports
    .venv/bin/python benchmarks/peers/decoder_peers.py --shapes qwen3-0.6b llama-1b \\
        --dtypes bf16 fp32 --threads 1 2 --rounds 2    # the whole matrix, hours on 2 cores
    .venv/bin/python benchmarks/peers/decoder_peers.py --shapes tiny --encoders harness st-torch \\
        --limit 40 --rounds 1       # a smoke run, seconds

The models are randomly initialised checkpoints of published shapes, built locally
(:mod:`benchmarks.decoder_shapes`: Qwen3-0.6B's and Llama-3.2-1B's configs, bf16 safetensors, a
byte-level BPE trained on STS-B train, the sentence-transformers files with last-token pooling);
throughput does not depend on the weights. Sentences: the unique sentences of the packaged STS-B
test split (2,552) or the first ``--limit``, read bare (``none``) or under the instruction prompt
(``instruct``: ``Instruct: Retrieve semantically similar text.\\nQuery: {sentence}``, given to
sentence-transformers as ``encode(prompt=...)``; both sides tokenize the joined string).

Encoders: ``harness`` is the harness's forward pass as a run uses it (``ForwardPass.encode_all``
with the view ``last@L``, ``--encoder-impl auto``: the native decoder where it supports the
checkpoint, else transformers; the report says which ran); ``st-torch`` is sentence-transformers'
``encode`` (batch ``--batch-size``) on torch in the step's dtype; ``st-openvino`` the same folder
exported to OpenVINO IR once (in ``.venv-peers``, see :mod:`benchmarks.peer_env`; skipped when that
environment is not built: ``make test`` never builds it) with that precision hint. Last-token
pooling takes the same token on both sides: sentence-transformers reads the last position whose
attention mask is 1 (right padding here; it is padding-side independent), the harness the last
token of each sequence (it groups rows by length or packs them, never pads). The fp32 vectors of
the harness and of each peer are compared (max |difference|; above ``--tolerance`` the script
exits 1): when no fp32 step was timed, a check on the first ``--check-limit`` sentences runs once,
untimed.

``--dtypes`` is by default ``fastest``: the fastest dtype this CPU computes natively (bf16 with
AMX or AVX512-BF16, else fp32), on every side; the report names the CPU kind and that dtype, and
issue 44's targets (the fastest peer / the harness at least 1.25 bare, 1.5 with the instruction,
Qwen3-0.6B at 2 threads) are judged in that dtype.

Each step (encoder × shape × prompt × dtype × threads) is a fresh process: load, an untimed
encode of the first ``--warmup`` sentences (first-call kernel builds), then the timed encode of all
of them (tokenization included). Within a round every step runs once, in an order that rotates
from round to round; medians over ``--rounds`` are reported. The ratios are fastest peer seconds
over harness seconds (> 1: the harness is faster), each from medians of this one run. "% of
peak": useful FLOPs (weights and causal attention over the real token counts, padding not counted)
per second over a square matmul in the step's own dtype, timed by this process at the same thread
count (the probe of ``benchmarks/peers/throughput.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.side_by_side import STEP_ENV, StepFailed, run_step  # noqa: E402

ENV = {**os.environ, **STEP_ENV}
PEER_STEP = ROOT / "benchmarks" / "peers" / "decoder_peer_step.py"
ENCODERS = ("harness", "st-torch", "st-openvino")
INSTRUCTION = "Instruct: Retrieve semantically similar text.\nQuery: "
PROMPTS = {"none": "", "instruct": INSTRUCTION}
# Issue 44's targets: (shape, threads, prompt) -> fastest peer / harness at least this, in the
# fastest dtype this CPU computes natively (bf16 on AMX or AVX512-BF16, fp32 on AVX2).
TARGETS = {
    ("qwen3-0.6b", 2, "instruct"): 1.5,
    ("qwen3-0.6b", 2, "none"): 1.25,
}


# Why the harness's prompted rows can pass 100 % of the peak, said in every report that has one.
SHARED_PREFIX_NOTE = (
    "the native decoder ran the prompt's fixed prefix once and lets every sentence attend to its "
    "keys and values (harness/core/encoding/shared_prefix.py; exact by causality), so with the "
    "instruction prompt it computes far fewer tokens than the peers; its % of peak there is "
    "the peers' work per second (what a user compares), not the chip's utilisation"
)


@dataclass(frozen=True, order=True)
class Setting:
    """What one comparison holds fixed: shape, dtype, threads, prompt."""

    shape: str
    dtype: str
    threads: int
    prompt: str

    def label(self) -> str:
        return f"{self.shape} {self.dtype} {self.threads}t {self.prompt}"


@dataclass
class Step:
    """One encoder under one setting: its timings over rounds and what it reported."""

    setting: Setting
    encoder: str
    encode_s: list[float] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)
    process_s: list[float] = field(default_factory=list)
    impl: str = ""
    shared_prefixes: dict[str, Any] = field(default_factory=dict)
    failure: str = ""  # a peer whose process failed: why (it is then left out)

    @property
    def median(self) -> float:
        return statistics.median(self.encode_s)


# ---------------------------------------------------------------------------------------------
# The harness step (a child process of this script)


def harness_step(spec: dict[str, Any]) -> dict[str, Any]:
    """Load the harness's forward pass on ``spec["model"]``, encode the warm-up sentences untimed,
    then all of them timed; save the ``last@L`` vectors and return the timings and the impl."""
    import numpy as np

    from harness.core.encoding import EncodeSettings, ForwardPass, Prompt, View, resolve_backbone

    texts = json.loads(Path(spec["texts"]).read_text(encoding="utf-8"))
    prompt = Prompt(spec["prompt"] + Prompt.SLOT) if spec["prompt"] else Prompt.NONE
    started = time.perf_counter()
    ref = resolve_backbone(spec["model"])
    settings = EncodeSettings(
        device="cpu",
        dtype=spec["dtype"],
        progress=False,
        threads=spec["threads"],
        max_length=spec["max_length"],
        impl="auto",
    )
    forward = ForwardPass(ref, settings)
    forward.token_lengths(texts[:1])  # loads the model (the forward pass loads on first use)
    loaded = time.perf_counter()
    view = View("last", ref.num_layers, prompt)
    if spec["warmup"]:
        forward.encode_all(texts[: spec["warmup"]], [view])
    warm = time.perf_counter()
    vectors = forward.encode_all(texts, [view])[view]
    done = time.perf_counter()
    if spec.get("vectors"):
        np.save(spec["vectors"], np.asarray(vectors, dtype=np.float32))
    return {
        "load_s": loaded - started,
        "warmup_s": warm - loaded,
        "encode_s": done - warm,
        "impl": forward.impl,
        # per prompt prefix: texts that reused all of it, part of it, none (native decoder only)
        "shared_prefixes": getattr(forward, "shared_prefixes", dict)(),
    }


# ---------------------------------------------------------------------------------------------
# Running steps


def peer_venv_ready() -> bool:
    """Whether ``.venv-peers`` is built with the current pins (never built by this script)."""
    from benchmarks.peers.peer_env import PEER_REQUIREMENTS, PEER_VENV

    stamp = PEER_VENV / ".installed"
    return (PEER_VENV / "bin" / "python").exists() and (
        stamp.is_file() and stamp.read_text(encoding="utf-8") == "\n".join(PEER_REQUIREMENTS)
    )


def openvino_export(folder: Path) -> Path:
    """``folder`` exported to OpenVINO IR (made once under ``.cache/peers/``, keyed on the weights'
    path, size and mtime and on config.json's text)."""
    from benchmarks.peers.peer_env import EXPORTS, PEER_VENV

    weights = sorted(folder.glob("*.safetensors"))[0].stat()
    config = (folder / "config.json").read_text(encoding="utf-8")
    tag = hashlib.sha256(
        f"{folder.resolve()}|{weights.st_size}|{weights.st_mtime_ns}|{config}".encode()
    ).hexdigest()[:12]
    target = EXPORTS / f"{folder.name}-{tag}-openvino"
    if not (target / "modules.json").is_file():
        print(f"exporting {folder.name} to OpenVINO IR ...", file=sys.stderr, flush=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        command = [str(PEER_VENV / "bin" / "python"), str(PEER_STEP), "export"]
        done = subprocess.run(
            [*command, "--model", str(folder), "--to", str(target)],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"exporting {folder} to OpenVINO failed:\n{done.stderr[-2000:]}")
    return target


def step_command(
    step: Step, folder: Path, texts: Path, vectors: Path, args: argparse.Namespace
) -> list[str]:
    """The command line of one step's fresh process."""
    s = step.setting
    if step.encoder == "harness":
        spec = {
            "model": str(folder),
            "texts": str(texts),
            "prompt": PROMPTS[s.prompt],
            "dtype": s.dtype,
            "threads": s.threads,
            "max_length": args.max_length,
            "warmup": args.warmup,
            "vectors": str(vectors),
        }
        from benchmarks.side_by_side import step_command as own_step

        return own_step(__file__, spec)
    from benchmarks.peers.peer_env import PEER_VENV

    backend = step.encoder.removeprefix("st-")
    python = sys.executable if backend == "torch" else str(PEER_VENV / "bin" / "python")
    model = folder if backend == "torch" else openvino_export(folder)
    return [
        python,
        str(PEER_STEP),
        "encode",
        "--model",
        str(model),
        "--backend",
        backend,
        "--dtype",
        s.dtype,
        "--threads",
        str(s.threads),
        "--texts",
        str(texts),
        "--prompt",
        PROMPTS[s.prompt],
        "--batch-size",
        str(args.batch_size),
        "--warmup",
        str(args.warmup),
        "--vectors",
        str(vectors),
    ]


def vectors_path(work: Path, setting: Setting, encoder: str, tag: str = "") -> Path:
    name = f"{setting.shape}-{setting.dtype}-{setting.threads}-{setting.prompt}-{encoder}{tag}"
    return work / f"{name}.npy"


def max_abs_delta(a_path: Path, b_path: Path) -> tuple[float, float]:
    """(max |a - b|, max |a|) of two saved vector sets."""
    import numpy as np

    a, b = np.load(a_path), np.load(b_path)
    if a.shape != b.shape:
        return float("inf"), float(np.abs(a).max())
    return float(np.abs(a - b).max()), float(np.abs(a).max())


# ---------------------------------------------------------------------------------------------
# The machine and the report


def machine() -> dict[str, Any]:
    """The CPU (:func:`benchmarks.report.cpu_facts`: model name, bf16 flags, cores, whether it
    computes bf16, and so the fastest dtype it computes natively) and the versions that ran."""
    import importlib.metadata

    from benchmarks.report import cpu_facts
    from harness.core.machine import fastest_cpu_dtype

    info: dict[str, Any] = cpu_facts()
    info["fastest_dtype"] = fastest_cpu_dtype(bool(info["bf16_native"]))
    for package in ("torch", "transformers", "sentence-transformers", "tokenizers"):
        info[package] = importlib.metadata.version(package)
    if peer_venv_ready():
        from benchmarks.peers.peer_env import PEER_REQUIREMENTS

        info["peer_venv"] = [p for p in PEER_REQUIREMENTS if p.split("=")[0] in _PEER_SHOWN]
    return info


_PEER_SHOWN = ("sentence-transformers[onnx,openvino]", "transformers", "openvino", "optimum-intel")


def ratio_rows(steps: Sequence[Step], native: str) -> list[dict[str, Any]]:
    """Per setting: the harness's median, the fastest peer's, and fastest peer / harness; a target
    (:data:`TARGETS`) where the setting's dtype is ``native``, the CPU's fastest native dtype."""
    from benchmarks.side_by_side import ratio

    rows = []
    for setting in sorted({s.setting for s in steps}):
        mine = [s for s in steps if s.setting == setting]
        ours = next((s for s in mine if s.encoder == "harness"), None)
        peers = [s for s in mine if s.encoder != "harness"]
        if ours is None or not peers:
            continue
        fastest = min(peers, key=lambda s: s.median)
        key = (setting.shape, setting.threads, setting.prompt)
        rows.append(
            {
                "setting": asdict(setting),
                "harness_s": ours.median,
                "fastest_peer": fastest.encoder,
                "fastest_peer_s": fastest.median,
                "ratio": ratio(fastest.median, ours.median),
                "per_peer": {p.encoder: ratio(p.median, ours.median) for p in peers},
                "target": TARGETS.get(key) if setting.dtype == native else None,
            }
        )
    return rows


def report(
    steps: Sequence[Step],
    data: dict[str, Any],
    command: str,
    load: str,
) -> str:
    from benchmarks.report import machine_line

    host = data["machine"]
    flags = ", ".join(host["flags"]) or "none of avx512_bf16 / amx_bf16"
    lines = [
        "# Decoder encode: the harness against sentence-transformers (last-token pooling)",
        "",
        f"`{command}`",
        "",
        f"Measured {data['date']} on {host['cpu']} ({host['cores']} cores, bf16 flags: {flags}); "
        f"torch {host['torch']}, transformers {host['transformers']}, sentence-transformers "
        f"{host['sentence-transformers']}"
        + (f"; OpenVINO peer: {', '.join(host['peer_venv'])}" if host.get("peer_venv") else "")
        + ". The machine is shared with other jobs.",
        "",
        machine_line(sorted({s.setting.dtype for s in steps}), host),
        "",
        f"{data['sentences']} unique STS-B test sentences"
        + (" (the first --limit)" if data["limited"] else "")
        + f"; median of {data['rounds']} round(s), each step a fresh process; harness encoder: "
        + ", ".join(sorted(set(data["impl"].values())) or ["not run"])
        + ".",
        "",
        "| shape | dtype | threads | prompt | encoder | tokens | encode s | sentences/s "
        "| % of peak | load s | process s |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for step in sorted(steps, key=lambda s: (s.setting, ENCODERS.index(s.encoder))):
        s = step.setting
        tokens = data["tokens"][f"{s.shape}/{s.prompt}"]
        flops = data["flops"][f"{s.shape}/{s.prompt}"]
        share = 100 * flops / step.median / (data["peak_gflops"][str(s.threads)][s.dtype] * 1e9)
        name = f"{step.encoder} ({step.impl})" if step.impl else step.encoder
        lines.append(
            f"| {s.shape} | {s.dtype} | {s.threads} | {s.prompt} | {name} | {tokens} "
            f"| {step.median:.2f} | {data['sentences'] / step.median:.0f} | {share:.0f} % "
            f"| {statistics.median(step.load_s):.1f} | {statistics.median(step.process_s):.1f} |"
        )
    lines += [
        "",
        "Fastest peer / harness, from the medians above (> 1: the harness is faster):",
        "",
        "| shape | dtype | threads | prompt | harness s | fastest peer | its s | ratio | target |",
        "|---|---|---:|---|---:|---|---:|---:|---|",
    ]
    for row in data["ratios"]:
        s = row["setting"]
        target = row["target"]
        met = target is not None and row["ratio"] >= target
        verdict = "—" if target is None else f"≥ {target} {'met' if met else 'MISSED'}"
        lines.append(
            f"| {s['shape']} | {s['dtype']} | {s['threads']} | {s['prompt']} "
            f"| {row['harness_s']:.2f} | {row['fastest_peer']} | {row['fastest_peer_s']:.2f} "
            f"| **{row['ratio']:.2f}×** | {verdict} |"
        )
    lines += [
        "",
        "Vectors, harness against each peer (max |difference| over all vectors, and the largest "
        "|value| for scale; fp32 must agree, bf16 rounds differently on each side):",
        "",
        "| shape | dtype | prompt | peer | sentences | max abs delta | max abs value |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for check in data["agreement"]:
        lines.append(
            f"| {check['shape']} | {check['dtype']} | {check['prompt']} | {check['peer']} "
            f"| {check['sentences']} "
            f"| {check['max_abs_delta']:.2e} | {check['max_abs_value']:.2f} |"
        )
    lines += [""] + [f"- {line}" for line in data["notes"]]
    lines += [
        "",
        "Matmul peak probe (bf16 / fp32 GFLOP/s): "
        + "; ".join(
            f"{t} thread(s) {p['bf16']:.0f} / {p['fp32']:.0f}"
            for t, p in data["peak_gflops"].items()
        ),
        "",
        load,
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from benchmarks import side_by_side
    from benchmarks.peers.decoder_shapes import SHAPES

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # the defaults are the headline measurement; the options select more of the matrix
    side_by_side.add_options(
        parser,
        rounds=3,
        dtypes=["fastest"],
        dtype_choices=("fastest", "bf16", "fp32"),
        threads=[2],
        json_out=True,
    )
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["qwen3-0.6b"])
    parser.add_argument("--prompts", nargs="+", choices=list(PROMPTS), default=list(PROMPTS))
    parser.add_argument("--encoders", nargs="+", choices=ENCODERS, default=list(ENCODERS))
    parser.add_argument("--limit", type=int, help="first N of STS-B test's 2,552 unique sentences")
    parser.add_argument("--batch-size", type=int, default=32, help="sentence-transformers' batch")
    parser.add_argument("--warmup", type=int, default=64, help="sentences encoded untimed first")
    parser.add_argument("--max-length", type=int, default=512, help="truncation, tokens, for all")
    parser.add_argument("--check-limit", type=int, default=64, help="sentences of the fp32 check")
    parser.add_argument("--tolerance", type=float, default=1e-3, help="fp32 max |delta| accepted")
    parser.add_argument("--models", type=Path, help="where the checkpoints are built")
    args = side_by_side.check_options(parser, parser.parse_args(argv))
    args.dtypes = side_by_side.resolve_dtypes(args.dtypes)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if any(t < 1 for t in args.threads):
        parser.error("--threads must be at least 1")
    return args


def agreement_checks(
    args: argparse.Namespace,
    encoders: Sequence[str],
    folders: dict[str, Path],
    work: Path,
    texts_file: Path,
    notes: list[str],
) -> list[dict[str, Any]]:
    """Each peer against the harness for each (shape, prompt), in fp32 (where they must agree:
    the same token of the same model) and in the timed other dtypes (informational: bf16 rounds
    differently on each side). fp32 comes from the timed fp32 steps' vectors at the largest thread
    count, or, when no fp32 step was timed, from one untimed run of each encoder on the first
    ``--check-limit`` sentences. A peer whose process failed there is left out (said in
    ``notes``)."""
    peers = [e for e in encoders if e != "harness"]
    if "harness" not in encoders or not peers:
        return []
    texts = json.loads(texts_file.read_text(encoding="utf-8"))
    threads = max(args.threads)
    subset = work / "check-texts.json"
    checked = min(len(texts), args.check_limit)
    subset.write_text(json.dumps(texts[:checked]), encoding="utf-8")
    checks = []
    for dtype in ["fp32", *(d for d in args.dtypes if d != "fp32")]:
        for shape in args.shapes:
            for prompt in args.prompts:
                setting = Setting(shape, dtype, threads, prompt)
                sentences = len(texts)
                if dtype not in args.dtypes:  # the untimed fp32 check
                    sentences = checked
                    for encoder in ["harness", *peers]:
                        out = vectors_path(work, setting, encoder)
                        step = Step(setting, encoder)
                        try:
                            run_step(step_command(step, folders[shape], subset, out, args))
                        except StepFailed as failed:
                            if encoder == "harness":
                                raise
                            notes.append(
                                f"{encoder}: no fp32 check at {setting.label()}, its "
                                f"process failed ({failed.reason})"
                            )
                for peer in peers:
                    if not vectors_path(work, setting, peer).is_file():  # it failed there
                        continue
                    delta, scale = max_abs_delta(
                        vectors_path(work, setting, "harness"), vectors_path(work, setting, peer)
                    )
                    checks.append(
                        {
                            "shape": shape,
                            "dtype": dtype,
                            "prompt": prompt,
                            "peer": peer,
                            "sentences": sentences,
                            "max_abs_delta": delta,
                            "max_abs_value": scale,
                        }
                    )
    return checks


def judge_agreement(
    fp32: Sequence[dict[str, Any]], tolerance: float
) -> tuple[list[dict[str, Any]], list[tuple[str, str, str, float]]]:
    """(the checks that fail the benchmark, the peers to leave out). sentence-transformers on
    torch runs transformers' own model: where it was checked, the harness must match it, and
    another peer that does not match it computes something else (left out of the ratios, not a
    failure of the harness). Without it, the harness must match every peer checked.

    >>> checks = [{"peer": "st-torch", "shape": "s", "prompt": "p", "max_abs_delta": 1e-6},
    ...           {"peer": "st-openvino", "shape": "s", "prompt": "p", "max_abs_delta": 5.0}]
    >>> judge_agreement(checks, 1e-3)
    ([], [('st-openvino', 's', 'p', 5.0)])
    >>> judge_agreement(checks[1:], 1e-3)[0] == checks[1:]
    True
    """
    off = [c for c in fp32 if not c["max_abs_delta"] <= tolerance]
    reference = {(c["shape"], c["prompt"]): c for c in fp32 if c["peer"] == "st-torch"}
    bad, wrong_peers = [], []
    for check in off:
        ref = reference.get((check["shape"], check["prompt"]))
        if check["peer"] != "st-torch" and ref is not None and ref["max_abs_delta"] <= tolerance:
            wrong_peers.append(
                (check["peer"], check["shape"], check["prompt"], check["max_abs_delta"])
            )
        else:
            bad.append(check)
    return bad, wrong_peers


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.side_by_side import answer_step, in_rounds

    argv = list(sys.argv[1:] if argv is None else argv)
    if answer_step(argv, harness_step):
        return 0
    args = parse_args(argv)
    from benchmarks.peers.decoder_encode import load_sentences
    from benchmarks.peers.decoder_shapes import MODELS, SHAPES, build, tokens_per_sentence
    from benchmarks.peers.throughput import matmul_peak
    from benchmarks.report import load_line

    load_at_start = os.getloadavg()
    sentences = load_sentences(args.limit)
    notes: list[str] = []
    encoders = list(args.encoders)
    if "st-openvino" in encoders and not peer_venv_ready():
        encoders.remove("st-openvino")
        notes.append(
            "st-openvino: not measured, .venv-peers is not built (it is built by "
            "benchmarks/peers/peer_env.py's peer_python(), never by make test)"
        )
    folders = {shape: build(shape, args.max_length, args.models or MODELS) for shape in args.shapes}
    if "st-openvino" in encoders:
        for shape in list(folders):
            try:
                openvino_export(folders[shape])
            except RuntimeError as err:
                notes.append(f"st-openvino on {shape}: not measured ({str(err).splitlines()[-1]})")
                encoders.remove("st-openvino")
                break
    settings = [
        Setting(shape, dtype, threads, prompt)
        for shape in args.shapes
        for dtype in args.dtypes
        for threads in args.threads
        for prompt in args.prompts
    ]
    steps = [Step(setting, encoder) for setting in settings for encoder in encoders]
    with tempfile.TemporaryDirectory(prefix="decoder-peers-") as tmp:
        work = Path(tmp)
        texts_file = work / "texts.json"
        texts_file.write_text(json.dumps(sentences), encoding="utf-8")
        for step in in_rounds(steps, args.rounds):  # who goes first rotates
            if step.failure:
                continue
            out = vectors_path(work, step.setting, step.encoder)
            command = step_command(step, folders[step.setting.shape], texts_file, out, args)
            try:
                result = run_step(command)
            except StepFailed as failed:
                if step.encoder == "harness":
                    raise
                step.failure = failed.reason
                notes.append(
                    f"{step.encoder} at {step.setting.label()}: not measured, its "
                    f"process failed ({failed.reason})"
                )
                continue
            step.encode_s.append(result["encode_s"])
            step.load_s.append(result["load_s"])
            step.process_s.append(result["process_s"])
            step.impl = result.get("impl", "")
            step.shared_prefixes = result.get("shared_prefixes") or {}
        steps = [s for s in steps if not s.failure]
        agreement = agreement_checks(args, encoders, folders, work, texts_file, notes)
    import torch

    peaks = {}
    for threads in sorted(set(args.threads)):
        torch.set_num_threads(threads)
        peaks[str(threads)] = {
            "bf16": matmul_peak(torch.bfloat16) / 1e9,
            "fp32": matmul_peak(torch.float32) / 1e9,
        }
    tokens, flops = {}, {}
    for shape in args.shapes:
        for prompt in args.prompts:
            texts = [PROMPTS[prompt] + s for s in sentences]
            lengths = tokens_per_sentence(folders[shape], texts, args.max_length)
            tokens[f"{shape}/{prompt}"] = sum(lengths)
            flops[f"{shape}/{prompt}"] = SHAPES[shape].forward_flops(lengths)
    data: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "sentences": len(sentences),
        "limited": args.limit is not None,
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "warmup": args.warmup,
        "max_length": args.max_length,
        "impl": {s.setting.label(): s.impl for s in steps if s.encoder == "harness"},
        "tokens": tokens,
        "flops": flops,
        "peak_gflops": peaks,
        "steps": [
            {**asdict(s.setting), "encoder": s.encoder, "impl": s.impl, "median_s": s.median}
            | {"shared_prefixes": s.shared_prefixes}
            | {"encode_s": s.encode_s, "load_s": s.load_s, "process_s": s.process_s}
            for s in steps
        ],
        "agreement": agreement,
        "notes": notes,
    }
    fp32 = [c for c in agreement if c["dtype"] == "fp32"]
    bad, wrong_peers = judge_agreement(fp32, args.tolerance)
    for peer, shape, prompt, delta in wrong_peers:
        notes.append(
            f"{peer} on {shape} ({prompt}): left out of the ratios, its fp32 vectors differ from "
            f"transformers' own (st-torch, which the harness matches) by up to {delta:.2e}: "
            "another computation, so its time is no comparison"
        )
    data["ratios"] = ratio_rows(
        [
            s
            for s in steps
            if (s.encoder, s.setting.shape, s.setting.prompt)
            not in {(p, sh, pr) for p, sh, pr, _ in wrong_peers}
        ],
        data["machine"]["fastest_dtype"],
    )
    if any(s.shared_prefixes for s in steps):
        notes.append(SHARED_PREFIX_NOTE)
    shown = "benchmarks/peers/decoder_peers.py " + " ".join(argv)
    text = report(steps, data, shown, load_line(load_at_start))
    print(text)
    for row in data["ratios"]:
        label = Setting(**row["setting"]).label()
        print(f"ratio {label}: fastest peer ({row['fastest_peer']}) / harness = {row['ratio']:.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")  # printed above, with the ratios
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**data, "ok": not bad}, indent=1) + "\n", encoding="utf-8")
    if bad:
        print(
            f"FAIL: harness and peer fp32 vectors differ by more than {args.tolerance:g}: "
            + ", ".join(
                f"{c['peer']} {c['shape']} {c['prompt']} {c['max_abs_delta']:.2e}" for c in bad
            ),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
