"""One prepared check of the CUDA paths; run it wherever a CUDA GPU is visible.

    .venv/bin/python benchmarks/tools/gpu_check.py          # prints a table; exits 0 without a GPU

1. autocast: the packaged MiniLM on STS-B test with --dtype fp32, bf16 and fp16 on cuda:0
   (cold caches): Spearman of ``avg`` and sentences/second of the encode stage;
2. OOM back-off: most of the GPU's free memory is taken first, then a large batch of long
   sentences is encoded; the run must finish (batches halved) with the same vectors as on CPU;
3. several devices: with two or more GPUs, ``--device cuda:0,1`` must give byte-equal vectors
   to a single-device run (one worker process per GPU);
4. native families on CUDA: bert-base, mpnet-base and deberta-v3-base shapes (random weights,
   ``benchmarks/peers/shapes.py``'s models): the native encoder against AutoModel on 2,048 STS-B
   sentences, max |Δ| of the mean-pooled last layer in fp32, and seconds of each in bf16;
5. decoders on CUDA: a tiny Qwen2, Qwen3 and Llama (the native decoder: packed causal attention,
   the shared prefix under PromptEOL) and OPT (AutoModel) from ``tests/fixtures.py``: ``last`` and
   PromptEOL vectors of 512 STS-B sentences on the device against the CPU's in fp32 (max |Δ|), and
   the dtype the weights were loaded in under --dtype bf16 (must be bf16).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def autocast_table() -> list[str]:
    import harness

    lines = ["| dtype | avg Spearman | encode sentences/s |", "|---|---:|---:|"]
    for dtype in ("fp32", "bf16", "fp16"):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = harness.BenchConfig(
                methods=("avg",),
                device="cuda:0",
                dtype=dtype,
                cache_dir=tmp,
                output_dir=f"{tmp}/out",
                progress=False,
                plots=False,
                bootstrap=0,
            )
            outcome = harness.run(cfg)
            record = outcome.records[0]
            rate = outcome.sentences_forwarded / record["timings"]["encode_stage_s"]
            lines.append(f"| {dtype} | {record['scores']['spearman']:.4f} | {rate:.0f} |")
    return lines


def vectors(device: str, texts: list[str], batch_size: int, cache: str):
    from harness.core.encoding import EncodeSettings, View, ViewProvider, resolve_backbone

    provider = ViewProvider(
        resolve_backbone("minilm"),
        EncodeSettings(device=device, batch_size=batch_size, max_length=512, progress=False),
        Path(cache),
    )
    from harness.runner.execution.backends import Backend

    provider.executor = Backend("local", device, None).executor()
    return provider.get(texts, View("mean", 6)), provider


def oom_check() -> list[str]:
    import numpy as np
    import torch

    texts = [" ".join(["word"] * 400) + f" {i}" for i in range(512)]
    with tempfile.TemporaryDirectory() as tmp:
        cpu, _ = vectors("cpu", texts, 64, f"{tmp}/cpu")
        free, _ = torch.cuda.mem_get_info(0)
        hog = torch.empty(int(free * 0.97), dtype=torch.uint8, device="cuda:0")
        started = time.perf_counter()
        try:
            gpu, provider = vectors("cuda:0", texts, 512, f"{tmp}/gpu")
        finally:
            del hog
            torch.cuda.empty_cache()
        seconds = time.perf_counter() - started
        cap = provider.forward._cap
    difference = float(np.abs(gpu - cpu).max())
    return [
        "OOM back-off: batch 512 of 400-token sentences with 97 % of GPU memory taken: finished "
        "in "
        f"{seconds:.1f} s, later batches capped at {cap}; max |gpu - cpu| = {difference:.2e}"
    ]


def multi_gpu_check() -> list[str]:
    import torch

    if torch.cuda.device_count() < 2:
        return ["several devices: only one GPU visible, skipped"]
    texts = [f"sentence number {i} about nothing in particular" for i in range(20000)]
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        one, _ = vectors("cuda:0", texts, 256, f"{tmp}/one")
        single = time.perf_counter() - started
        started = time.perf_counter()
        two, _ = vectors("cuda:0,1", texts, 256, f"{tmp}/two")
        double = time.perf_counter() - started
    equal = one.tobytes() == two.tobytes()
    return [
        f"several devices: cuda:0 {single:.1f} s, cuda:0,1 {double:.1f} s, byte-equal vectors: "
        f"{equal}"
    ]


def native_families_check(device: str = "cuda:0", count: int = 2048) -> list[str]:
    import numpy as np

    from benchmarks.peers.baselines import load_stsb_test
    from benchmarks.peers.shapes import build
    from harness.core.encoding import EncodeSettings, ForwardPass, View, resolve_backbone

    s1, s2, _ = load_stsb_test()
    texts = list(dict.fromkeys(s1 + s2))[:count]
    lines = [
        "| shape | fp32 max abs(native - AutoModel) | bf16 native s | bf16 AutoModel s | × |",
        "|---|---:|---:|---:|---:|",
    ]
    for shape in ("bert-base", "mpnet-base", "deberta-v3-base"):
        ref = resolve_backbone(str(build(shape)))
        view = View("mean", ref.num_layers)
        got: dict[tuple[str, str], np.ndarray] = {}
        seconds: dict[str, float] = {}
        for dtype in ("fp32", "bf16"):
            for impl in ("native", "transformers"):
                forward = ForwardPass(
                    ref, EncodeSettings(device=device, dtype=dtype, impl=impl, progress=False)
                )
                forward.encode_all(texts[:64], [view])  # load, first-call costs
                started = time.perf_counter()
                got[(dtype, impl)] = forward.encode_all(texts, [view])[view]
                seconds[f"{dtype} {impl}"] = time.perf_counter() - started
        difference = float(np.abs(got[("fp32", "native")] - got[("fp32", "transformers")]).max())
        native, auto_model = seconds["bf16 native"], seconds["bf16 transformers"]
        lines.append(
            f"| {shape} | {difference:.1e} | {native:.2f} | {auto_model:.2f} | "
            f"{auto_model / native:.2f} |"
        )
    return lines


def decoder_check(device: str = "cuda:0", count: int = 512) -> list[str]:
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from fixtures import write_tiny_decoder

    from benchmarks.peers.baselines import load_stsb_test
    from harness.core.encoding import EncodeSettings, ForwardPass, Prompt, View, resolve_backbone

    s1, s2, _ = load_stsb_test()
    texts = list(dict.fromkeys(s1 + s2))[:count]
    lines = [
        "| decoder | fp32 max abs(device - cpu), last | same, PromptEOL | bf16 weights dtype |",
        "|---|---:|---:|---|",
    ]
    for family in ("qwen2", "qwen3", "llama", "opt"):
        ref = resolve_backbone(str(write_tiny_decoder(Path(tempfile.mkdtemp()) / family, family)))
        views = [View("last", ref.num_layers), View("last", ref.num_layers, Prompt.PROMPTEOL)]
        on = {
            where: ForwardPass(ref, EncodeSettings(device=where, progress=False)).encode_all(
                texts, views
            )
            for where in ("cpu", device)
        }
        deltas = [float(np.abs(on[device][view] - on["cpu"][view]).max()) for view in views]
        half = ForwardPass(ref, EncodeSettings(device=device, dtype="bf16", progress=False))
        half.encode_all(texts[:8], views)
        loaded = next(half._engine.model.parameters()).dtype  # type: ignore[union-attr]
        lines.append(
            f"| {family} | {deltas[0]:.1e} | {deltas[1]:.1e} | "
            f"{str(loaded).removeprefix('torch.')} "
            f"({'ok' if loaded == torch.bfloat16 else 'WRONG'}) |"
        )
    return lines


def main() -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help; no options
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU is visible to torch: nothing to check here (exit 0)")
        return 0
    print(
        f"GPU: {torch.cuda.get_device_name(0)} × {torch.cuda.device_count()}, torch "
        f"{torch.__version__}"
    )
    for line in [
        *autocast_table(),
        "",
        *oom_check(),
        *multi_gpu_check(),
        "",
        *native_families_check(),
        "",
        *decoder_check(),
    ]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
