"""Checks that run before the first sentence is encoded, so a run never fails after its compute
for a reason it could have seen at the start: the ``--baseline`` file is a readable leaderboard
CSV, and the output and cache folders can be written to.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.errors import ResourceError, UserError
from harness.runner.frames import GROUP_KEYS, ROW_KEYS, TASK_ORDER

if TYPE_CHECKING:
    import pandas as pd

    from harness.runner.config import BenchConfig

BASELINE_HINT = "pass a leaderboard.csv written by run_bench.py (results/leaderboard.csv)"


def read_baseline(path: str | Path) -> pd.DataFrame:
    """The baseline leaderboard CSV, checked: readable UTF-8 CSV, a ``method`` column, at least one
    task column, numbers (or empty cells) in every task column. Anything else is one UserError line.
    """
    import pandas as pd

    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"--baseline {path}: no such file; {BASELINE_HINT}")
    try:
        base = pd.read_csv(file, dtype={k: str for k in (*GROUP_KEYS, *ROW_KEYS)}, keep_default_na=False,
                           na_values=[""], encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"--baseline {path}: not UTF-8 text (byte {err.start}); {BASELINE_HINT}") from None
    except pd.errors.EmptyDataError:
        raise UserError(f"--baseline {path}: the file is empty; {BASELINE_HINT}") from None
    except (pd.errors.ParserError, ValueError) as err:
        first = (str(err).strip().splitlines() or ["unreadable"])[0][:160]
        raise UserError(f"--baseline {path}: not a readable CSV ({first}); {BASELINE_HINT}") from None
    tasks = [c for c in base.columns if c in TASK_ORDER]
    if "method" not in base.columns or not tasks:
        raise UserError(f"--baseline {path}: expected a 'method' column and task columns such as "
                        f"{', '.join(TASK_ORDER[:3])}; found {', '.join(map(str, base.columns[:8])) or 'none'}; "
                        f"{BASELINE_HINT}")
    for task in tasks:
        numbers = pd.to_numeric(base[task], errors="coerce")
        bad = base[task].notna() & numbers.isna()
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise UserError(f"--baseline {path}:{row + 2}: column {task} holds {base[task].iloc[row]!r}, "
                            f"not a number; {BASELINE_HINT}")
        base[task] = numbers
    return base


def check_writable(folder: str | Path, flag: str) -> None:
    """Create ``folder`` if needed and prove a file can be written there (then remove it)."""
    from harness.runner.exits import describe_os_error

    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {folder}: exists and is not a folder; pass a folder")
    probe = path / f".write-test-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"sts-bench")
    except OSError as err:
        raise ResourceError(f"{flag} {folder}: cannot write there: {describe_os_error(err)}") from None
    finally:
        with contextlib.suppress(OSError):  # the probe was never created
            probe.unlink(missing_ok=True)


def preflight(cfg: BenchConfig) -> None:
    """Everything a run can check before it computes; a dry run writes nothing, so it only reads."""
    if cfg.baseline:
        read_baseline(cfg.baseline)
    if not cfg.dry_run:
        check_writable(cfg.output_dir, "--output-dir")
        check_writable(cfg.cache_dir, "--cache-dir")
