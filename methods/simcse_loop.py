"""Unsupervised SimCSE training (Gao et al. 2021), resumable (imported lazily: uses torch).

Each sentence goes through the encoder twice in one batch; dropout makes the two views differ.
With z = MLP(h_[CLS]) the loss of a batch of n sentences is

    ℓ = mean_i −log( exp(cos(z_i, z'_i)/τ) / Σ_j exp(cos(z_i, z'_j)/τ) )

i.e. cross-entropy over the n × n cosine matrix divided by τ, the diagonal being the right answer
(in-batch negatives). The MLP (dense + tanh) is used in training only; the saved checkpoint is the
encoder, read at test time through ``cls_before_pooler``. Optimiser as SimCSE's HF Trainer run:
AdamW (weight decay 0, ε 1e-8), linear decay to 0, no warm-up.

Training state (weights, optimiser moments, scheduler step, RNG) is written every ``save_every``
steps as safetensors + JSON (never pickle) so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.hashing import atomic_write_bytes, atomic_write_text


def simcse_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """Cross-entropy of the (n, n) cosine-similarity matrix / τ against the diagonal."""
    similarity = F.cosine_similarity(z1[:, None, :], z2[None, :, :], dim=-1) / temperature
    return F.cross_entropy(similarity, torch.arange(len(z1), device=z1.device))


@dataclass(frozen=True)
class SimCSEConfig:
    temperature: float = 0.05
    lr: float = 3e-5
    batch_size: int = 64
    max_length: int = 32
    epochs: float = 1.0
    precision: str = "auto"  # "auto" | "fp32" | "bf16"
    save_every: int = 50


def bf16_available(device: str) -> bool:
    """Hardware bf16: AVX512-BF16/AMX on CPU, or a CUDA GPU that supports it."""
    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported()
    cpu = getattr(torch, "cpu", None)
    return bool(getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
                or getattr(cpu, "_is_amx_tile_supported", lambda: False)())


def resolve_precision(requested: str, device: str) -> str:
    if requested == "auto":
        return "bf16" if bf16_available(device) else "fp32"
    return requested


class _Mlp(nn.Module):
    def __init__(self, hidden: int, std: float, generator: torch.Generator) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        with torch.no_grad():
            self.dense.weight.copy_(torch.randn(hidden, hidden, generator=generator) * std)
            self.dense.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x))


@dataclass
class TrainResult:
    steps: int
    first_loss: float
    last_loss: float
    seconds: float
    sentences_per_second: float
    resumed_from_step: int
    precision: str


class SimCSETrainer:
    """Trains ``base`` (a local model folder) on ``sentences``; state lives under ``workdir``."""

    def __init__(self, base: Path, workdir: Path, config: SimCSEConfig, seed: int, device: str = "cpu",
                 progress: bool = True, stop_after: int | None = None) -> None:
        self.base, self.workdir, self.config, self.seed = base, workdir, config, seed
        self.device, self.progress = device, progress
        self.stop_after = stop_after  # tests: simulate an interruption after this many steps

    def discard_partial_state(self) -> None:
        """After the final checkpoint is written the resume state is dead weight."""
        for path in self._state_files():
            path.unlink(missing_ok=True)

    def _state_files(self) -> tuple[Path, Path]:
        return self.workdir / "partial" / "state.safetensors", self.workdir / "partial" / "state.json"

    def _save_state(self, model, mlp, optimizer, scheduler, step: int, first_loss: float) -> None:
        from safetensors.torch import save

        tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
        tensors.update({f"mlp.{k}": v for k, v in mlp.state_dict().items()})
        opt = optimizer.state_dict()
        for index, state in opt["state"].items():
            for name, value in state.items():
                tensors[f"opt.{index}.{name}"] = value if torch.is_tensor(value) else torch.tensor(value)
        tensors["rng"] = torch.get_rng_state()
        tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
        blob_path, json_path = self._state_files()
        atomic_write_bytes(blob_path, save(tensors))
        info = {"step": step, "first_loss": first_loss, "scheduler_last_epoch": scheduler.last_epoch,
                "param_groups": opt["param_groups"], "config": asdict(self.config), "seed": self.seed}
        atomic_write_text(json_path, json.dumps(info))  # written last: marks the state complete

    def _load_state(self, model, mlp, optimizer, scheduler) -> tuple[int, float]:
        from safetensors.torch import load

        blob_path, json_path = self._state_files()
        try:
            info = json.loads(json_path.read_text(encoding="utf-8"))
            tensors = load(blob_path.read_bytes())
        except (OSError, ValueError):
            return 0, math.nan  # no usable state: start over cleanly
        if info.get("config") != asdict(self.config) or info.get("seed") != self.seed:
            return 0, math.nan
        model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        mlp.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("mlp.")})
        state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            if key.startswith("opt."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        optimizer.load_state_dict({"state": state, "param_groups": info["param_groups"]})
        scheduler.last_epoch = info["scheduler_last_epoch"]
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]  # LambdaLR keeps the current lr here
        torch.set_rng_state(tensors["rng"])
        return int(info["step"]), float(info["first_loss"])

    def train(self, sentences: list[str]) -> TrainResult:
        from tqdm.auto import tqdm
        from transformers import AutoModel, AutoTokenizer

        from harness.forward import quiet_transformers

        quiet_transformers()
        config = self.config
        precision = resolve_precision(config.precision, self.device)
        torch.manual_seed(self.seed)
        tokenizer = AutoTokenizer.from_pretrained(self.base, local_files_only=True)
        model = AutoModel.from_pretrained(self.base, local_files_only=True, add_pooling_layer=False).to(self.device)
        model.train()
        hidden = model.config.hidden_size
        std = getattr(model.config, "initializer_range", 0.02)
        mlp = _Mlp(hidden, std, torch.Generator().manual_seed(self.seed)).to(self.device)
        params = list(model.parameters()) + list(mlp.parameters())
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0, eps=1e-8)
        n = len(sentences)
        per_epoch = math.ceil(n / config.batch_size)
        total = max(1, math.ceil(config.epochs * n / config.batch_size))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / total))
        start_step, first_loss = self._load_state(model, mlp, optimizer, scheduler)
        step, loss_value, started, seen = start_step, math.nan, time.perf_counter(), 0
        autocast = dict(device_type=self.device.split(":")[0], dtype=torch.bfloat16, enabled=precision == "bf16")
        bar = tqdm(total=total, initial=step, desc="simcse-train", unit="step",
                   disable=None if self.progress else True, leave=False)
        try:
            while step < total:
                epoch, offset = divmod(step, per_epoch)
                order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()
                batch = [sentences[i] for i in order[offset * config.batch_size:(offset + 1) * config.batch_size]]
                doubled = [s for s in batch for _ in (0, 1)]  # each sentence twice: two dropout masks
                inputs = tokenizer(doubled, padding=True, truncation=True, max_length=config.max_length,
                                   return_tensors="pt").to(self.device)
                with torch.autocast(**autocast):
                    cls = model(**inputs).last_hidden_state[:, 0]
                    z = mlp(cls).float()
                loss = simcse_loss(z[0::2], z[1::2], config.temperature)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                step += 1
                seen += len(batch)
                loss_value = loss.item()
                first_loss = loss_value if math.isnan(first_loss) else first_loss
                bar.update(1)
                bar.set_postfix(loss=f"{loss_value:.4f}")
                if step % config.save_every == 0 and step < total:
                    self._save_state(model, mlp, optimizer, scheduler, step, first_loss)
                if self.stop_after is not None and step - start_step >= self.stop_after:
                    raise KeyboardInterrupt
        finally:
            bar.close()
        seconds = time.perf_counter() - started
        model.eval()
        out = self.workdir / "model"
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        return TrainResult(step, first_loss, loss_value, seconds, seen / seconds if seconds else math.nan,
                           start_step, precision)
