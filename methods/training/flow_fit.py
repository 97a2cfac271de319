"""Fitting a Glow on sentence vectors the way BERT-flow's code does (imported lazily: uses torch).

Only the flow trains; the vectors are fixed inputs. The optimizer is BERT's AdamWeightDecay as
``optimization_bert_flow.py`` uses it for the flow: Adam *without* bias correction, epsilon 1e-6,
decoupled weight decay 0.01, gradient clipping to global norm 1.0 and a constant learning rate.
Bias correction matters here: without it the first few hundred steps move ~3× further than
``torch.optim.AdamW`` would, and one epoch of STS-B is only ~480 steps. BERT's exclusion list
("LayerNorm", "bias") matches no flow variable in the TF code, so every flow parameter is decayed.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from methods.training.glow import Glow


class AdamWeightDecay:
    """m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;  p ← p − lr·(m / (√v + ε) + wd·p).

    A plain class rather than a ``torch.optim.Optimizer``: that base class imports
    ``torch._dynamo`` when it is built (2-4 s of imports on 2 cores, more than the whole fit of
    the embedded default), for hooks and compilation this fit never uses. The update is the same
    multi-tensor operations either way, so the weights are bit for bit the same.
    """

    def __init__(
        self,
        params,
        lr: float,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
    ) -> None:
        self.defaults: dict[str, Any] = {
            "lr": lr,
            "weight_decay": weight_decay,
            "betas": betas,
            "eps": eps,
        }
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), **self.defaults}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:  # the update rule is the class docstring
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if p not in self.state:
                    self.state[p] = {"m": torch.zeros_like(p), "v": torch.zeros_like(p)}
            grads = [p.grad for p in params]
            ms, vs = [self.state[p]["m"] for p in params], [self.state[p]["v"] for p in params]
            beta1, beta2 = group["betas"]
            # Multi-tensor ops: one kernel launch per operation for all ~70 flow tensors.
            torch._foreach_mul_(ms, beta1)
            torch._foreach_add_(ms, grads, alpha=1 - beta1)
            torch._foreach_mul_(vs, beta2)
            torch._foreach_addcmul_(vs, grads, grads, value=1 - beta2)
            denominators = torch._foreach_add(torch._foreach_sqrt(vs), group["eps"])
            updates = torch._foreach_div(ms, denominators)
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
            torch._foreach_add_(params, updates, alpha=-group["lr"])


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread while the flow fits, as many as before afterwards. The fit's operations
    are tiny (a batch of 32 vectors, ~70 tensors of at most 6,144 numbers), so a second thread only
    adds a handoff per operation, and on a busy machine each handoff can wait a whole time slice:
    measured on 2 shared cores, the multi-tensor square root took 0.12-0.19 ms on one thread and
    0.7-40 ms on two, and the embedded default's fit 11 s instead of 2. No operation of the fit
    splits a sum across threads, so the weights are the same bit for bit
    (``tests/test_flow.py``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class FlowConfig:
    levels: int = 2
    depth: int = 3
    width: int = 32
    coupling: str = "additive"
    mixing: str = "permute"
    lr: float = 1e-3
    batch_size: int = 32
    epochs: float = 1.0
    weight_decay: float = 0.01
    clip: float = 1.0

    def build(self, dim: int, seed: int) -> Glow:
        return Glow(dim, self.levels, self.depth, self.width, self.coupling, self.mixing, seed)


@dataclass
class FitStats:
    steps: int
    first_bits_per_dim: float
    last_bits_per_dim: float
    seconds: float
    recipe: dict[str, Any]  # every optimiser setting that changes the result, for the record


def train_flow(
    batches_of_epoch,
    dim: int,
    n: int,
    config: FlowConfig,
    seed: int,
    device: str = "cpu",
    progress: bool = True,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[Glow, FitStats]:
    """Fit a Glow. ``batches_of_epoch(epoch)`` returns that epoch's (n, dim) float32 array (the same
    cached vectors every epoch, or freshly dropout-encoded ones); rows are shuffled with ``seed``.

    Sentence batches (``pairs`` None): ``ceil(epochs · n / batch_size)`` steps over the n rows, so
    fractional epochs (BERT-flow's NLI setting uses 0.15) stop part-way through the last one.

    Pair batches (``pairs`` = row indices of side a and side b, BERT-flow's ``run_siamese.py``): a
    batch is ``batch_size`` pairs, the loss the mean NLL of side a plus that of side b, the last
    partial batch of an epoch is dropped, and ``int(epochs · P / batch_size)`` steps run. Worked
    example: STS-B target has P = 5749 + 1500 + 1379 = 8628 pairs → int(8628 / 32) = 269 steps.

    On the CPU the fit runs on one thread (:func:`one_thread`).
    """
    from harness.core.progress import progress_bar

    with one_thread() if device == "cpu" else contextlib.nullcontext():
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        flow = config.build(dim, seed).to(device)
        optimizer = AdamWeightDecay(
            flow.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        items = n if pairs is None else len(pairs[0])
        if pairs is None:
            total = max(1, math.ceil(config.epochs * n / config.batch_size))
            last_start = n  # keep the partial last batch
        else:
            total = max(1, int(config.epochs * items / config.batch_size))
            last_start = items - config.batch_size + 1  # drop remainder
            side_a, side_b = (
                torch.from_numpy(np.asarray(pairs[0])),
                torch.from_numpy(np.asarray(pairs[1])),
            )
        started, step, first, running = time.perf_counter(), 0, math.nan, math.nan
        bar = progress_bar(total, "fit flow", "step", progress)
        try:
            # Every epoch runs at least one batch, so this ends after ``total`` steps. (A bound
            # computed from ``total · batch_size / items`` undercounts pair epochs, whose remainder
            # is dropped: 7 pairs in batches of 4 give 1 step per epoch, not 7 / 4.)
            epoch = -1
            while step < total:
                epoch += 1
                data = torch.from_numpy(
                    np.ascontiguousarray(batches_of_epoch(epoch), dtype=np.float32)
                )
                order = torch.randperm(items, generator=generator)
                for start in range(0, max(last_start, 1), config.batch_size):
                    if step == total:
                        break
                    chosen = order[start : start + config.batch_size]
                    if pairs is None:
                        loss = flow.bits_per_dim(data[chosen].to(device))
                    else:
                        loss = flow.bits_per_dim(
                            data[side_a[chosen]].to(device)
                        ) + flow.bits_per_dim(data[side_b[chosen]].to(device))
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(flow.parameters(), config.clip)
                    optimizer.step()
                    value = loss.item()
                    first = value if step == 0 else first
                    running = value if step == 0 else 0.98 * running + 0.02 * value
                    step += 1
                    bar.update(1)
                    bar.set_postfix(bits_per_dim=f"{running:.3f}")
        finally:
            bar.close()
        flow.eval()
        recipe = {
            "optimizer": "AdamWeightDecay (BERT's: Adam without bias correction)",
            "lr": config.lr,
            "betas": list(optimizer.defaults["betas"]),
            "eps": optimizer.defaults["eps"],
            "weight_decay": config.weight_decay,
            "schedule": "constant",
            "warmup_fraction": 0.0,
            "clip_grad_norm": config.clip,
            "device": device,
            "batches": "sentences"
            if pairs is None
            else "pairs (loss: side a + side b; remainder dropped)",
        }
        return flow, FitStats(step, first, running, time.perf_counter() - started, recipe)


def latents(flow: Glow, x: np.ndarray, device: str = "cpu", batch: int = 4096) -> np.ndarray:
    """The flow's latent z for each row of x, float32; cosine on z is BERT-flow's similarity."""
    out = []
    with torch.no_grad():
        for start in range(0, len(x), batch):
            chunk = torch.from_numpy(
                np.ascontiguousarray(x[start : start + batch], dtype=np.float32)
            ).to(device)
            out.append(flow(chunk)[0].cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, flow.dim), np.float32)
