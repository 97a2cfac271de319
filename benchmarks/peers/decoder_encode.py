"""A decoder LLM's encode through the harness against a plain transformers loop, side by side in one
process, on the same sentences.

    .venv/bin/python benchmarks/peers/decoder_encode.py --family qwen2 --rounds 3   # tiny Qwen2
    .venv/bin/python benchmarks/peers/decoder_encode.py --family llama --hidden 256 --layers 4 \\
        --limit 1000
    .venv/bin/python benchmarks/peers/decoder_encode.py --backbone DIR --prompts prompteol \\
        --json out.json

What it measures: the seconds to encode the unique sentences of STS-B test (the packaged split,
2,552 sentences, or the first ``--limit``) into the last token's final hidden state, once through
the harness (``ForwardPass.encode_all`` with the view ``last@L`` under each prompt) and once through
a plain loop a user would write (``AutoTokenizer`` + ``AutoModel``, ``torch.inference_mode``, texts
sorted by length, ``--batch-size`` texts a batch padded on the left, ``hidden_states[-1][:, -1]``).
Both read the same prompted texts (``Prompt.apply``), truncated at the same ``--max-length`` tokens,
with the same torch thread count and fp32 weights. The plain loop passes position ids counted from
the attention mask, as ``generate`` does: without them a left-padded row's tokens sit at shifted
positions, which changes the vectors of a model with learned absolute positions (GPT-2).

The backbone is a tiny causal LM built here (``tests/fixtures.py``'s ``write_tiny_decoder``: hidden
32, 2 layers, or ``--hidden``/``--layers``), or any local checkpoint folder (``--backbone``). Both
models are loaded once, and before a prompt's timed rounds each encoder encodes its sentences once
untimed (the harness loads its model on first use; oneDNN builds a kernel per batch shape). Rounds
then alternate harness and plain (who goes first rotates:
:func:`benchmarks.side_by_side.round_order`), and medians are reported. Tokenization is inside the
timed encode for both. The ratio is plain / harness seconds (> 1: the harness is faster). The
largest |difference| between the two sets of vectors is reported too, and the script exits 1 when it
exceeds ``--tolerance``: a timing of wrong vectors is no timing.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from harness.core.encoding import Prompt  # noqa: E402

PROMPTS: dict[str, Prompt] = {"none": Prompt.NONE, "prompteol": Prompt.PROMPTEOL}
FAMILIES = ("opt", "qwen2", "llama", "gpt2")


def build_tiny_decoder(
    folder: Path, family: str, seed: int = 0, hidden: int | None = None, layers: int | None = None
) -> Path:
    """The test suite's tiny causal LM of ``family`` (hidden 32, 2 layers, its own tokenizer), or
    with ``hidden``/``layers`` the same config and tokenizer rebuilt at that size (feed-forward
    width at the fixture's 1.5x hidden, 4 attention heads), randomly initialised from ``seed``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fixtures import write_tiny_decoder
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # save_pretrained's "Writing model shards" bar

    write_tiny_decoder(folder, family, seed)
    if hidden is None and layers is None:
        return folder
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(folder))
    values = config.to_dict()
    for derived in ("head_dim", "layer_types"):  # recomputed from the new size
        values.pop(derived, None)
    if hidden is not None:
        if hidden % 8:
            raise SystemExit(
                f"--hidden {hidden}: must be a multiple of 8 (4 heads of an even width)"
            )
        if family == "gpt2":
            values.update(n_embd=hidden, n_inner=None)
        else:
            values["hidden_size"] = hidden
            values["ffn_dim" if family == "opt" else "intermediate_size"] = hidden * 3 // 2
            if family == "opt":
                values["word_embed_proj_dim"] = hidden
    if layers is not None:
        values["n_layer" if family == "gpt2" else "num_hidden_layers"] = layers
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(type(config).from_dict(values))
    model.save_pretrained(str(folder))
    return folder


def load_sentences(limit: int | None = None) -> list[str]:
    """The unique sentences of the packaged STS-B test split (2,552), or the first ``limit``."""
    from harness.core.data.tasks import get_task, load_task

    task = load_task(get_task("stsb", "packaged"), "packaged", ["test"])
    sentences = task.eval.sentences()
    return sentences[:limit] if limit else sentences


class HarnessEncoder:
    """The harness's forward pass on ``folder``: ``encode`` returns the view ``last@L`` (the last
    token of the final hidden layer) of each sentence under ``prompt``, in input order."""

    def __init__(
        self, folder: Path, threads: int, device: str = "cpu", max_length: int = 128
    ) -> None:
        from harness.core.encoding import EncodeSettings, ForwardPass, resolve_backbone

        self.ref = resolve_backbone(str(folder))
        self.forward = ForwardPass(
            self.ref,
            EncodeSettings(
                device=device, dtype="fp32", progress=False, threads=threads, max_length=max_length
            ),
        )

    def encode(self, sentences: Sequence[str], prompt: Prompt) -> np.ndarray:
        from harness.core.encoding import View

        view = View("last", self.ref.num_layers, prompt)
        return self.forward.encode_all(list(sentences), [view])[view]


class PlainEncoder:
    """What a user would write with transformers: the prompted texts, longest first, in batches of
    ``batch_size`` padded on the left, so position -1 is each row's last real token."""

    def __init__(
        self, folder: Path, batch_size: int = 32, device: str = "cpu", max_length: int = 128
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        # its load report (a causal LM's lm_head unused by AutoModel)
        hf_logging.set_verbosity_error()
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModel.from_pretrained(
            str(folder), local_files_only=True, dtype=torch.float32
        ).to(device)
        self.model.eval()
        self.device, self.batch_size, self.max_length = device, batch_size, max_length
        self.takes_positions = "position_ids" in inspect.signature(self.model.forward).parameters

    def encode(self, sentences: Sequence[str], prompt: Prompt) -> np.ndarray:
        import torch

        texts = [prompt.apply(s) for s in sentences]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        out = np.empty((len(texts), self.model.config.hidden_size), np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                batch = self.tokenizer(
                    [texts[i] for i in rows],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                extra = {}
                if (
                    self.takes_positions
                ):  # 0, 1, ... from each row's first real token, as generate() counts
                    extra["position_ids"] = (batch["attention_mask"].long().cumsum(-1) - 1).clamp(
                        min=0
                    )
                hidden = self.model(**batch, **extra, output_hidden_states=True).hidden_states[-1]
                out[rows] = hidden[:, -1, :].float().cpu().numpy()
        return out


@dataclass
class PromptResult:
    """One prompt's timings (seconds per round), and how far apart the two encoders' vectors are."""

    prompt: str
    harness_seconds: list[float] = field(default_factory=list)
    plain_seconds: list[float] = field(default_factory=list)
    max_abs_delta: float = float("nan")
    sentences: int = 0

    @property
    def harness_median(self) -> float:
        return statistics.median(self.harness_seconds)

    @property
    def plain_median(self) -> float:
        return statistics.median(self.plain_seconds)

    @property
    def ratio(self) -> float:
        """Plain seconds over harness seconds: above 1 the harness is faster."""
        from benchmarks.side_by_side import ratio

        return ratio(self.plain_median, self.harness_median)

    def summary(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "harness_median_s": self.harness_median,
            "plain_median_s": self.plain_median,
            "ratio_plain_over_harness": self.ratio,
            "harness_sentences_per_s": self.sentences / self.harness_median,
            "plain_sentences_per_s": self.sentences / self.plain_median,
        }


@dataclass
class Measurement:
    """Every prompt's result, and the last round's vectors of each encoder (for checks)."""

    results: list[PromptResult]
    harness_vectors: dict[str, np.ndarray]
    plain_vectors: dict[str, np.ndarray]
    impl: str


def _timed(fn: Callable[[], np.ndarray]) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    vectors = fn()
    return time.perf_counter() - started, vectors


def measure(
    folder: Path,
    sentences: Sequence[str],
    prompts: Sequence[str],
    rounds: int = 3,
    threads: int = 2,
    batch_size: int = 32,
    device: str = "cpu",
    max_length: int = 128,
) -> Measurement:
    """Load both encoders once, warm each up untimed, then per prompt alternate them for
    ``rounds`` (who goes first rotates)."""
    import torch

    from benchmarks.side_by_side import round_order

    torch.set_num_threads(threads)
    harness = HarnessEncoder(folder, threads, device, max_length)
    plain = PlainEncoder(folder, batch_size, device, max_length)
    results, harness_vectors, plain_vectors = [], {}, {}
    for name in prompts:
        prompt, result = PROMPTS[name], PromptResult(name, sentences=len(sentences))
        harness.encode(
            sentences, prompt
        )  # untimed: the harness's model loads on its first call; for both,
        plain.encode(sentences, prompt)  # oneDNN builds its kernels for this prompt's batch shapes
        for number in range(rounds):
            for side in round_order(("harness", "plain"), number, rounds):
                if side == "harness":
                    seconds, harness_vectors[name] = _timed(
                        lambda prompt=prompt: harness.encode(sentences, prompt)
                    )
                    result.harness_seconds.append(seconds)
                else:
                    seconds, plain_vectors[name] = _timed(
                        lambda prompt=prompt: plain.encode(sentences, prompt)
                    )
                    result.plain_seconds.append(seconds)
        result.max_abs_delta = float(np.abs(harness_vectors[name] - plain_vectors[name]).max())
        results.append(result)
    return Measurement(results, harness_vectors, plain_vectors, harness.forward.impl)


def failures(results: Sequence[PromptResult], tolerance: float) -> list[str]:
    """The prompts whose vectors disagree by more than ``tolerance`` (or are not finite)."""
    return [
        r.prompt for r in results if not np.isfinite(r.max_abs_delta) or r.max_abs_delta > tolerance
    ]


def machine() -> dict[str, Any]:
    """The CPU (:func:`benchmarks.report.cpu_facts`: model, half-precision flags, cores, bf16
    native), torch's threads and the versions that ran."""
    import torch
    import transformers

    from benchmarks.report import cpu_facts

    return {
        **cpu_facts(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def table(results: Sequence[PromptResult]) -> str:
    lines = [
        "| prompt | harness s (median) | plain s (median) | plain / harness | harness sent/s | "
        "plain sent/s "
        "| max abs delta |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        s = r.summary()
        lines.append(
            f"| {r.prompt} | {r.harness_median:.3f} | {r.plain_median:.3f} | {r.ratio:.2f}x "
            f"| {s['harness_sentences_per_s']:.0f} | {s['plain_sentences_per_s']:.0f} "
            f"| {r.max_abs_delta:.2e} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from benchmarks import side_by_side

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    side_by_side.add_options(parser, rounds=3, threads=2, json_out=True)  # fp32 only: no --dtypes
    parser.add_argument(
        "--family", choices=FAMILIES, default="qwen2", help="tiny decoder to build (default qwen2)"
    )
    parser.add_argument(
        "--backbone", type=Path, help="time this local checkpoint folder instead of a tiny one"
    )
    parser.add_argument(
        "--hidden", type=int, help="tiny decoder's hidden size (default the fixture's 32)"
    )
    parser.add_argument(
        "--layers", type=int, help="tiny decoder's layer count (default the fixture's 2)"
    )
    parser.add_argument("--seed", type=int, default=0, help="tiny decoder's initialisation seed")
    parser.add_argument("--prompts", nargs="+", choices=list(PROMPTS), default=list(PROMPTS))
    parser.add_argument("--limit", type=int, help="first N of STS-B test's 2,552 unique sentences")
    parser.add_argument(
        "--batch-size", type=int, default=32, help="the plain loop's texts per batch (default 32)"
    )
    parser.add_argument(
        "--max-length", type=int, default=128, help="truncation, tokens, for both (default 128)"
    )
    parser.add_argument("--device", default="cpu", help="torch device for both (default cpu)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="largest |difference| of the vectors accepted (default 1e-4); above it: exit 1",
    )
    args = parser.parse_args(argv)
    if args.backbone is not None and (args.hidden is not None or args.layers is not None):
        parser.error("--hidden/--layers size a tiny decoder; a --backbone has its own size")
    return side_by_side.check_options(parser, args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sentences = load_sentences(args.limit)
    with tempfile.TemporaryDirectory(prefix="decoder-encode-") as scratch:
        if args.backbone is not None:
            folder, name = args.backbone.expanduser().resolve(), str(args.backbone)
        else:
            folder = build_tiny_decoder(
                Path(scratch) / args.family, args.family, args.seed, args.hidden, args.layers
            )
            name = f"tiny {args.family} (hidden {args.hidden or 32}, {args.layers or 2} layers)"
        found = measure(
            folder,
            sentences,
            args.prompts,
            args.rounds,
            args.threads,
            args.batch_size,
            args.device,
            args.max_length,
        )
    host = machine()
    print(
        f"backbone: {name}; harness impl: {found.impl}; {len(sentences)} sentences (STS-B test), "
        f"{args.rounds} round(s), plain batch {args.batch_size}, max length {args.max_length}, "
        f"fp32, {args.device}"
    )
    from benchmarks.report import machine_line

    print(
        f"{machine_line(['fp32'], host)}; torch threads {host['torch_threads']}; "
        f"torch {host['torch']}, transformers {host['transformers']}"
    )
    print()
    print(table(found.results))
    print()
    print(
        "plain / harness > 1: the harness is faster. max abs delta: largest |harness - plain| over "
        "all vectors."
    )
    bad = failures(found.results, args.tolerance)
    if args.json is not None:
        report = {
            "backbone": name,
            "impl": found.impl,
            "sentences": len(sentences),
            "rounds": args.rounds,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "max_length": args.max_length,
            "device": args.device,
            "tolerance": args.tolerance,
            "machine": host,
            "prompts": [r.summary() for r in found.results],
            "ok": not bad,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if bad:
        print(
            f"FAIL: the vectors disagree by more than {args.tolerance:g} under prompt(s) "
            f"{', '.join(bad)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
