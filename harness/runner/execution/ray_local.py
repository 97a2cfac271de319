"""Connecting to ray for ``--backend ray``: an existing cluster at ``--scheduler-address``, or, when
no address is given, a local ray started by the run (and stopped at its end).

A local ray gets one worker slot per core this process may use, no dashboard, and a small object
store: encode windows travel as a list of sentences and come back as a count, while the vectors go
through the shared cache on disk, so ray's shared memory carries almost nothing.
"""

from __future__ import annotations

import logging

from harness.core.errors import UserError

OBJECT_STORE_BYTES = 256 * 1024 * 1024


def start_ray(address: str | None) -> bool:
    """``ray.init`` for this run; True when it started a local ray that the run must stop."""
    import ray

    from harness.core.machine import available_cpus

    # joblib's ray pool warns on every call that it ignores a multiprocessing context it never uses.
    logging.getLogger("ray.util.multiprocessing.pool").setLevel(logging.ERROR)
    try:
        if address:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            return False
        ray.init(
            num_cpus=available_cpus(),
            include_dashboard=False,
            object_store_memory=OBJECT_STORE_BYTES,
            logging_level=logging.WARNING,
            log_to_driver=False,
            configure_logging=True,
        )
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = f"--scheduler-address {address}" if address else "a local ray"
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UserError(
            f"--backend ray: cannot start or reach {where} ({first}); start a cluster with `ray "
            "start --head` and pass its address, or omit --scheduler-address"
        ) from None
    return True
