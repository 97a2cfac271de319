"""Checks that run before the first sentence is encoded, so a run never fails after its compute
for a reason it could have seen at the start: the ``--baseline`` file is a readable leaderboard
CSV (read once, here, before anything is written), the output and cache folders and every cache
subfolder the run may write can be written to, and the settings that depend on the backbone
(``--max-length`` against its positions and special tokens) are settled, and so is
``--dtype fastest`` (the concrete dtype this machine runs fastest, :func:`applied_dtype`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.errors import ResourceError, UserError
from harness.runner.records.lock import refuse_linked_folders

if TYPE_CHECKING:
    from harness.runner.settings.config import BenchConfig
    from harness.runner.tables.gate import Baseline


def settle(cfg: BenchConfig) -> BenchConfig:
    """The settings as they will apply: tasks named twice (``stsb STS-B``) scored once (two
    different tasks of one name, a file named like another, are an error), and ``--max-length``
    checked against the backbone: below what its tokenizer can apply (its special tokens plus one
    word piece) is an error; above its positions it is capped, with one warning, and the capped
    value is what the cache keys and records hold."""
    import logging
    from dataclasses import replace

    from harness.core.data.tasks import get_task

    log = logging.getLogger("sts_bench.settings")
    names: dict[str, str] = {}
    for given in cfg.tasks:
        spec = get_task(given, cfg.source)
        canonical = spec.name
        clash = canonical in names and given != names[canonical]
        if clash and (spec.own or get_task(names[canonical], cfg.source).own):
            raise UserError(
                f"--tasks: two tasks are named '{canonical}' ({names[canonical]} and {given}); "
                "every task needs its own name in the tables: add ?name=OTHER to one"
            )
        if canonical in names:
            log.warning(
                "--tasks: '%s' is the task '%s' given again as '%s'; it is scored once",
                given,
                canonical,
                names[canonical],
            )
        else:
            names[canonical] = given
    if len(names) < len(cfg.tasks):
        cfg = replace(cfg, tasks=tuple(names.values()))
    return applied_dtype(replace(cfg, max_length=applied_max_length(cfg)))


def applied_dtype(cfg: BenchConfig) -> BenchConfig:
    """``--dtype fastest`` as this machine resolves it (:func:`harness.core.machine.fastest_dtype`:
    bf16 on a CPU with AMX or AVX512-BF16, fp32 on one without, bf16 or fp16 on a GPU by its
    compute capability): the concrete dtype is what the protocol, the cache keys and the tables
    hold, and ``dtype_picked`` says it was picked (the record's ``env``). One line says so. Any
    other dtype is left as given. Refused with workers elsewhere (``--scheduler-address``): their
    hardware is not this machine's, so this machine cannot say what is fastest there."""
    from dataclasses import replace

    from harness.core.machine import FASTEST, fastest_dtype
    from harness.runner.settings.console import say

    if cfg.dtype != FASTEST:
        return cfg
    if cfg.scheduler_address:
        raise UserError(
            f"--dtype fastest: the encode windows run on the workers of {cfg.scheduler_address}, "
            "whose hardware this machine cannot probe; give their dtype (fp32 runs everywhere; "
            "bf16 where they have AMX, AVX512-BF16 or an Ampere or newer GPU)"
        )
    dtype, why = fastest_dtype(cfg.device)
    say(f"--dtype fastest: {dtype} ({why}; recorded as dtype {dtype})")
    return replace(cfg, dtype=dtype, dtype_picked=why)


def applied_max_length(cfg: BenchConfig) -> int:
    """``--max-length`` as the run's backbone applies it (see :func:`settle`)."""
    import logging

    from harness.core.artifacts import ArtifactStore
    from harness.core.encoding import resolve_backbone

    try:
        ref = resolve_backbone(
            cfg.backbone, cfg.revision, ArtifactStore(cfg.cache_dir).fingerprint_memo
        )
    except UserError:
        return cfg.max_length  # not resolvable here: the method that needs it reports why
    specials = ref.special_tokens()
    if cfg.max_length <= specials:
        raise UserError(
            f"--max-length {cfg.max_length}: {ref.name} adds {specials} special tokens to every "
            f"sentence, so it leaves no room for a word; use at least {specials + 1}"
        )
    if ref.max_positions and cfg.max_length > ref.max_positions:
        # the default, above a small model's reach: its maximum, quietly
        if "max_length" not in cfg.given():
            return ref.max_positions
        logging.getLogger("sts_bench.settings").warning(
            "--max-length %d: %s reads at most %d tokens; using %d (recorded with every score)",
            cfg.max_length,
            ref.name,
            ref.max_positions,
            ref.max_positions,
        )
        return ref.max_positions
    return cfg.max_length


def check_writable(folder: str | Path, flag: str) -> None:
    """Create ``folder`` if needed and prove a file can be written there (then remove it)."""
    from harness.runner.settings.console import describe_os_error

    path = Path(folder).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {folder}: exists and is not a folder; pass a folder")
    probe = path / f".write-test-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"sts-bench")
    except OSError as err:
        raise ResourceError(
            f"{flag} {folder}: cannot write there: {describe_os_error(err)}"
        ) from None
    finally:
        with contextlib.suppress(OSError):  # the probe was never created
            probe.unlink(missing_ok=True)


def preflight(cfg: BenchConfig) -> Baseline | None:
    """Everything a run can check before it computes; a dry run writes nothing, so it only reads.
    Returns the baseline as read now, before this run writes anything (it may sit in the output)."""
    baseline = None
    if cfg.baseline:
        from harness.runner.tables.gate import load_baseline

        baseline = load_baseline(cfg.baseline)
    if not cfg.dry_run:
        check_writable(cfg.output_dir, "--output-dir")
        check_writable(cfg.cache_dir, "--cache-dir")
        if cfg.export_embeddings:
            # Inside the output folder, the export goes through real folders only, as every other
            # output does: a linked OUT/embeddings is refused before even the probe is written.
            refuse_linked_folders(
                Path(cfg.output_dir).expanduser(),
                Path(cfg.export_embeddings).expanduser() / "meta.json",
            )
            check_writable(cfg.export_embeddings, "--export-embeddings")
        for sub in _existing_subfolders(Path(cfg.output_dir).expanduser(), depth=1):
            check_writable(sub, "--output-dir")
    return baseline


def _existing_subfolders(root: Path, depth: int) -> list[Path]:
    """Folders under ``root`` down to ``depth`` levels (symlinks not followed)."""
    found, level = [], [root]
    for _ in range(depth):
        level = [p for folder in level for p in _subfolders(folder)]
        found += level
    return found


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []


def check_cache_writable(cfg: BenchConfig) -> None:
    """Every existing folder of the cache a run may write into (``vectors/<key>``, ``flows/<key>``,
    ``reports``, ``bootstrap``...) is writable; run after planning, before the first sentence is
    encoded. Kind folders get a real write (a read-only mount shows only then); the key folders
    below them, possibly thousands, are checked with ``os.access`` and ``statvfs``."""
    from harness.runner.settings.console import describe_os_error

    root = Path(cfg.cache_dir).expanduser()
    for kind in _subfolders(root):
        check_writable(kind, "--cache-dir")
        for folder in _subfolders(kind):
            if not _writable(folder):
                error = OSError(
                    errno.EROFS if _read_only_mount(folder) else errno.EACCES,
                    "read-only file system" if _read_only_mount(folder) else "not writable",
                    str(folder),
                )
                raise ResourceError(
                    f"--cache-dir {cfg.cache_dir}: cannot write there: {describe_os_error(error)}"
                )


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK) and not _read_only_mount(folder)


def _read_only_mount(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
