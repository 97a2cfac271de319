"""Where encode windows run: here (default), one worker process per GPU (``--device cuda:0,1``),
or on an existing cluster through joblib's dask or ray backends (``--backend dask|ray``).

Workers write into the same content-addressed cache (it must be shared storage on a real
cluster) and return how many sentences they encoded; the main process then rereads the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.core.encoding import WindowTask
from harness.core.errors import UserError
from harness.core.machine import device_list
from harness.runner.settings.config import BACKENDS

Executor = Callable[[WindowTask], tuple[int, set[str]]]


class Backend:
    """Builds the executor for a run and owns whatever it started (a dask client, ray)."""

    def __init__(self, backend: str, device: str, address: str | None) -> None:
        if backend not in BACKENDS:
            raise UserError(f"--backend {backend}: expected one of {', '.join(BACKENDS)}")
        self.backend, self.devices, self.address = backend, device_list(device), address
        self._client: Any = None
        # None: ray not used; True: this run started ray and stops it
        self._ray_started: bool | None = None

    def executor(self) -> Executor | None:
        if self.backend == "local":
            return self._per_device if len(self.devices) > 1 else None
        if self.backend == "dask":
            self._start_dask()
        else:
            self._start_ray()
        return self._on_cluster

    def _per_device(self, task: WindowTask) -> tuple[int, set[str]]:
        """One worker process per device, each taking every n-th window."""
        from joblib import Parallel, delayed

        groups = WindowTask.deal(task.windows, len(self.devices))
        tasks = [
            replace(task, windows=tuple(tuple(window) for window in group)).on_device(device)
            for group, device in zip(groups, self.devices)
        ]
        counts = Parallel(n_jobs=len(tasks), backend="loky")(
            delayed(WindowTask.run)(t) for t in tasks
        )
        return sum(counts), set(self.devices[: len(tasks)])

    def _on_cluster(self, task: WindowTask) -> tuple[int, set[str]]:
        """One cluster task per window; each worker resolves its own device (``auto``)."""
        from joblib import Parallel, delayed, parallel_config

        device = task.settings.device if len(self.devices) == 1 else "auto"
        tasks = [replace(task, windows=(window,)).on_device(device) for window in task.windows]
        with parallel_config(backend=self.backend):
            counts = Parallel(n_jobs=-1)(delayed(WindowTask.run)(t) for t in tasks)
        return sum(counts), {f"{self.backend} workers ({device})"}

    def _start_dask(self) -> None:
        if self._client is not None:
            return
        try:
            from dask.distributed import Client
        except ImportError:
            raise UserError(
                "--backend dask needs dask.distributed: pip install 'dask[distributed]'"
            ) from None
        if not self.address:
            raise UserError(
                "--backend dask needs --scheduler-address tcp://HOST:8786 (start one with `dask "
                "scheduler` and `dask worker tcp://HOST:8786`)"
            )
        try:
            self._client = Client(self.address, timeout=30)
        except OSError as err:
            raise UserError(
                f"--scheduler-address {self.address}: cannot reach the dask scheduler ({err})"
            ) from None

    def _start_ray(self) -> None:
        if self._ray_started is not None:
            return
        try:
            import ray
            from ray.util.joblib import register_ray
        except ImportError:
            raise UserError("--backend ray needs ray: pip install 'ray[default]'") from None
        self._ray_started = False
        if not ray.is_initialized():
            from harness.runner.execution.ray_local import start_ray

            self._ray_started = start_ray(self.address)
        register_ray()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._ray_started:
            import ray

            ray.shutdown()
        self._ray_started = None
