"""Pieces every fine-tuning loop here shares (imported lazily: uses torch): precision choice,
AdamW with a linear schedule, and resumable training state stored as safetensors + JSON.

Resumable state = module weights, optimiser moments, scheduler position, torch RNG state and a
few numbers, written every ``save_every`` steps under ``<workdir>/partial/``. ``state.json`` is
written last and carries the run's identity (settings + seed) and the sha256 of the tensors: a
state from other settings, or a half-written one, is ignored, and a damaged one is discarded with
one warning; training then starts over cleanly. No pickle is written or read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import nn

from harness.core.errors import UserError
from harness.core.hashing import atomic_write_bytes, atomic_write_text, read_json

log = logging.getLogger("sts_bench.training")


def bf16_available(device: str) -> bool:
    """Hardware bf16: AVX512-BF16/AMX on CPU, or a CUDA GPU that supports it."""
    if device.startswith("cuda"):
        return torch.cuda.is_bf16_supported()
    cpu = getattr(torch, "cpu", None)
    return bool(
        getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
        or getattr(cpu, "_is_amx_tile_supported", lambda: False)()
    )


def resolve_precision(requested: str, device: str) -> str:
    """``auto`` → bf16 where the hardware has it, else fp32."""
    if requested == "auto":
        return "bf16" if bf16_available(device) else "fp32"
    return requested


def autocast(device: str, precision: str) -> torch.autocast:
    return torch.autocast(
        device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=precision == "bf16"
    )


ADAMW_BETAS = (0.9, 0.999)
ADAMW_EPS = 1e-8
CLIP_NORM = 1.0  # HF Trainer's default gradient clipping


def adamw_linear(
    params, lr: float, total_steps: int, warmup_fraction: float = 0.0, weight_decay: float = 0.0
):
    """AdamW (ε 1e-8) with linear warm-up over ``warmup_fraction`` of the steps, then linear decay
    to 0 — the HF Trainer / sentence-transformers schedule the reference recipes used."""
    optimizer = torch.optim.AdamW(
        params, lr=lr, weight_decay=weight_decay, eps=ADAMW_EPS, betas=ADAMW_BETAS
    )
    warmup = int(total_steps * warmup_fraction)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class StateMeta(TypedDict):  # state.json, written last by TrainState.save
    identity: Any
    step: int
    scheduler_last_epoch: int
    param_groups: list[dict[str, Any]]
    extra: dict[str, Any]
    sha256: str


class TrainState:
    """Save and restore a training loop's state under ``workdir/partial``."""

    def __init__(self, workdir: Path, identity: dict[str, Any]) -> None:
        self.blob = Path(workdir) / "partial" / "state.safetensors"
        self.meta = Path(workdir) / "partial" / "state.json"
        self.identity = json.loads(json.dumps(identity))
        # tensors a loop keeps aside (the best dev weights), restored by load
        self.kept: dict[str, torch.Tensor] = {}

    def save(
        self,
        modules: dict[str, nn.Module],
        optimizer,
        scheduler,
        step: int,
        extra: dict[str, Any],
        kept: dict[str, torch.Tensor] | None = None,
    ) -> None:
        from safetensors.torch import save

        tensors: dict[str, torch.Tensor] = {f"keep.{k}": v for k, v in (kept or {}).items()}
        for prefix, module in modules.items():
            tensors.update({f"{prefix}.{k}": v for k, v in module.state_dict().items()})
        opt = optimizer.state_dict()
        for index, state in opt["state"].items():
            for name, value in state.items():
                tensors[f"opt.{index}.{name}"] = (
                    value if torch.is_tensor(value) else torch.tensor(value)
                )
        tensors["rng"] = torch.get_rng_state()
        blob = save({k: v.detach().contiguous().cpu() for k, v in tensors.items()})
        atomic_write_bytes(self.blob, blob)
        info = {
            "identity": self.identity,
            "step": step,
            "scheduler_last_epoch": scheduler.last_epoch,
            "param_groups": opt["param_groups"],
            "extra": extra,
            "sha256": hashlib.sha256(blob).hexdigest(),
        }
        atomic_write_text(self.meta, json.dumps(info))  # last: marks the state complete

    def load(
        self, modules: dict[str, nn.Module], optimizer, scheduler
    ) -> tuple[int, dict[str, Any]]:
        """Restore and return (step, extra); (0, {}) when there is no usable state."""
        from safetensors import SafetensorError
        from safetensors.torch import load

        if not self.meta.exists():
            return 0, {}
        try:
            info = read_json(self.meta, StateMeta, "discarded")
            blob = self.blob.read_bytes()
            if info["sha256"] != hashlib.sha256(blob).hexdigest():
                raise ValueError("state.safetensors does not match the checksum in state.json")
            tensors = load(blob)
        except (OSError, ValueError, SafetensorError, UserError) as err:
            log.warning(
                "training state under %s is unusable (%s); training starts over",
                self.meta.parent,
                err,
            )
            self.discard()
            return 0, {}
        if info.get("identity") != self.identity:
            return 0, {}
        for prefix, module in modules.items():
            cut = len(prefix) + 1
            module.load_state_dict(
                {k[cut:]: v for k, v in tensors.items() if k.startswith(prefix + ".")}
            )
        state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            if key.startswith("opt."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        optimizer.load_state_dict({"state": state, "param_groups": info["param_groups"]})
        scheduler.last_epoch = info["scheduler_last_epoch"]
        # LambdaLR keeps the lr here
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
        torch.set_rng_state(tensors["rng"])
        self.kept = {k[5:]: v for k, v in tensors.items() if k.startswith("keep.")}
        return info["step"], info["extra"]

    def discard(self) -> None:
        self.blob.unlink(missing_ok=True)
        self.meta.unlink(missing_ok=True)


def total_steps(n_items: int, batch_size: int, epochs: float) -> int:
    """ceil(epochs · n / batch): fractional epochs stop part-way through the last one."""
    return max(1, math.ceil(epochs * n_items / batch_size))


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The data order of one epoch, a pure function of (seed, epoch): what makes resuming exact."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


@dataclass(frozen=True)
class DevSelection:
    """Model selection on a dev set, as SimCSE's and DSE's recipes do: every ``every`` optimiser
    steps (-1: at the end of every epoch) and at the last step, ``evaluate()`` scores the current
    weights (higher is better, e.g. Spearman on STS-B dev); the best weights are kept and restored
    at the end. ``data`` names the dev set for the record. Never a scored split: the caller makes
    sure."""

    every: int
    evaluate: Callable[[], float]
    data: str


def _snapshot(modules: dict[str, nn.Module]) -> dict[str, torch.Tensor]:
    return {
        f"{prefix}.{k}": v.detach().cpu().clone()
        for prefix, module in modules.items()
        for k, v in module.state_dict().items()
    }


def _restore(modules: dict[str, nn.Module], tensors: dict[str, torch.Tensor]) -> None:
    for prefix, module in modules.items():
        cut = len(prefix) + 1
        module.load_state_dict(
            {k[cut:]: v for k, v in tensors.items() if k.startswith(prefix + ".")}
        )


@dataclass
class LoopResult:
    steps: int
    first_loss: float
    last_loss: float
    seconds: float
    items_per_second: float
    resumed_from_step: int
    precision: str
    recipe: dict[str, Any]  # every optimiser setting that changes the result, for the record
    # dev selection: the chosen step, its dev score, every evaluation
    selection: dict[str, Any] | None = None


def loop_recipe(
    lr: float, warmup: float, weight_decay: float, device: str, precision: str
) -> dict[str, Any]:
    """What :func:`run_loop` trains with, as data."""
    return {
        "optimizer": "AdamW",
        "lr": lr,
        "betas": list(ADAMW_BETAS),
        "eps": ADAMW_EPS,
        "weight_decay": weight_decay,
        "schedule": "linear warm-up, then linear decay to 0",
        "warmup_fraction": warmup,
        "clip_grad_norm": CLIP_NORM,
        "device": device,
        "precision": precision,
    }


def run_loop(
    workdir: Path,
    identity: dict,
    modules: dict[str, nn.Module],
    n: int,
    config: Any,
    seed: int,
    device: str,
    progress: bool,
    desc: str,
    batch_loss,
    on_step=None,
    selection: DevSelection | None = None,
) -> LoopResult:
    """The shared training loop: seeded order per epoch, AdamW + linear schedule, gradient clipping
    at norm 1.0 (HF Trainer's default), autocast, a running loss on the bar, resumable state.
    ``config``: the caller's training settings, read for ``batch_size``, ``epochs``, ``lr``,
    ``warmup``, ``weight_decay``, ``precision`` (:func:`resolve_precision`) and ``save_every``.
    ``batch_loss(indices)`` returns the loss of those items; ``on_step(steps_done_this_run)`` is
    called after every step (progress hooks; tests use it to interrupt)."""
    from harness.core.progress import progress_bar

    batch_size, save_every = config.batch_size, config.save_every
    precision = resolve_precision(config.precision, device)
    total = total_steps(n, batch_size, config.epochs)
    per_epoch = math.ceil(n / batch_size)
    params = [p for module in modules.values() for p in module.parameters()]
    optimizer, scheduler = adamw_linear(
        params, config.lr, total, config.warmup, config.weight_decay
    )
    state = TrainState(workdir, identity)
    start, extra = state.load(modules, optimizer, scheduler)
    first, running = extra.get("first_loss", math.nan), extra.get("running_loss", math.nan)
    every = (per_epoch if selection.every < 0 else selection.every) if selection is not None else 0
    evaluations: list[list[float]] = extra.get("evaluations", [])
    best = state.kept  # the best weights so far (restored when resuming)
    step, seen, started = start, 0, time.perf_counter()
    bar = progress_bar(total, desc, "step", progress, initial=step)
    try:
        while step < total:
            epoch, offset = divmod(step, per_epoch)
            indices = epoch_order(n, seed, epoch)[offset * batch_size : (offset + 1) * batch_size]
            with autocast(device, precision):
                loss = batch_loss(indices)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
            optimizer.step()
            scheduler.step()
            step, seen = step + 1, seen + len(indices)
            value = loss.item()
            first = value if math.isnan(first) else first
            running = value if math.isnan(running) else 0.95 * running + 0.05 * value
            bar.update(1)
            bar.set_postfix(loss=f"{running:.4f}")
            if selection is not None and (step % every == 0 or step == total):
                for module in modules.values():
                    module.eval()
                with torch.no_grad():
                    score = float(selection.evaluate())
                for module in modules.values():
                    module.train()
                if not evaluations or score > max(s for _, s in evaluations):
                    best = _snapshot(modules)
                evaluations.append([step, score])
            if step % save_every == 0 and step < total:
                state.save(
                    modules,
                    optimizer,
                    scheduler,
                    step,
                    {"first_loss": first, "running_loss": running, "evaluations": evaluations},
                    best,
                )
            if on_step is not None:
                on_step(step - start)
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    state.discard()
    chosen = None
    if selection is not None and evaluations:
        _restore(modules, best)
        step_kept, score_kept = max(evaluations, key=lambda e: e[1])
        chosen = {
            "data": selection.data,
            "every_steps": every,
            "chosen_step": int(step_kept),
            "dev_score": score_kept,
            "evaluations": evaluations,
        }
    return LoopResult(
        step,
        first,
        running,
        seconds,
        seen / seconds if seconds else math.nan,
        start,
        precision,
        loop_recipe(config.lr, config.warmup, config.weight_decay, device, precision),
        chosen,
    )
