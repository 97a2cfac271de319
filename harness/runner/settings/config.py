"""``BenchConfig``: every setting of a run, from CLI > config file (TOML) > defaults.

Each run-wide setting is declared once, here, as a field whose default is
:func:`~harness.runner.settings.declaration.setting`: its type, default, ``--help`` group and text,
choices, range and whether it is a protocol setting. The flags, config-file keys, checks,
``harness.evaluate``'s keyword arguments and :meth:`BenchConfig.protocol` are derived from these
fields (:mod:`.declaration`); adding a setting is adding a field. Fields are grouped as
``--help`` shows them. Choices from registries are callables that import them when called: this
module stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.api import SpecRequest
from harness.runner.settings.declaration import Alias, declared, reached, setting

if TYPE_CHECKING:
    from harness.core.encoding import EncodeSettings

BACKENDS = ("local", "dask", "ray")  # where encode windows run (harness.runner.execution.backends)
MAX_SEED = 2**31 - 1  # np.random.seed takes < 2**32; loops seed with seed + epoch
# torch.set_num_threads(100000) ends the process with a segmentation fault (exit 139, no message);
# no CPU a run is given has more than this many hardware threads
MAX_THREADS = 4096
VERIFY_UNDER_BASELINE = 32  # --verify-cache's default when a run gates on --baseline
DEFAULT_METHODS = ("cls", "avg", "first-last", "whitening", "flow", "sbert", "random")


def default_cache_dir() -> str:
    return os.environ.get("STS_BENCH_CACHE") or str(Path.home() / ".cache" / "sts-bench")


# Registries read when a choice list or a help line is needed, never when this module is imported.
def _methods_help() -> str:
    from methods import METHODS

    return (
        f"space- or comma-separated: {', '.join(METHODS)}, an installed plugin's name "
        "(--list), or a plugin file path/to/file.py:ClassName"
    )


def _tasks_help() -> str:
    from harness.core.data.tasks import TASKS

    return (
        f"{', '.join(TASKS)}, any MTEB STS task with --source mteb, or your own: file:PATH "
        "(CSV/TSV/JSONL) or hf:DIR_OR_ID, with ?KEY=VALUE&... options (see sts-bench list)"
    )


def _fit_set_help() -> str:
    from harness.core.data.fitsets import FIT_SET_KINDS

    return f"what fitting methods fit on: {', '.join(FIT_SET_KINDS)}"


def _sources() -> Sequence[str]:
    from harness.core.data.sources import run_sources

    return run_sources()


def _data_dir_help() -> str:
    from harness.core.data.sources import SOURCES, located

    places = "; ".join(f"{name}: {SOURCES[name].location}" for name in located())
    return f"where a source reads its data, repeatable ({places})"


def _data_dirs(locations: dict[str, str]) -> None:
    """Each key of --data-dir a source that reads a location; each value a non-empty path."""
    from harness.core.data.sources import SOURCES, located
    from harness.core.errors import UserError, did_you_mean

    for name, place in locations.items():
        given = f"--data-dir {name}={place}"
        if name not in SOURCES:
            names = located()
            raise UserError(
                f"{given}: unknown source '{name}'{did_you_mean(name, names)}; sources with a "
                f"location: {', '.join(names)}"
            )
        if not SOURCES[name].location:
            raise UserError(
                f"{given}: the {name} source reads no location ({SOURCES[name].summary}); "
                "leave it out"
            )
        if not place.strip():
            raise UserError(f"{given}: no location after '='; expected {name}=DIR")


def _dtypes() -> Sequence[str]:
    from harness.core.encoding import EncodeSettings
    from harness.core.machine import FASTEST

    return (*EncodeSettings.DTYPES, FASTEST)


def _available_cpus() -> int:
    from harness.core.machine import available_cpus

    return available_cpus()


def _impls() -> Sequence[str]:
    from harness.core.encoding import EncodeSettings

    return EncodeSettings.IMPLS


def _aggregations() -> Sequence[str]:
    from harness.core.scoring import AGGREGATIONS

    return AGGREGATIONS


def _method_words(words: Sequence[str]) -> tuple[str, ...]:
    # a plugin named by reference (x.py:Class) is loaded now, so its [table] and --set know it
    from harness.runner.settings.validate import method_names, split_names

    return method_names(split_names(words))


def _task_words(words: Sequence[str]) -> tuple[str, ...]:
    from harness.runner.settings.validate import split_tasks

    return split_tasks(words)


def _layers(text: str) -> tuple[int, ...]:
    from harness.runner.settings.validate import parse_layers

    return parse_layers(text)


def _batch_size(text: str) -> int:
    from harness.runner.settings.validate import parse_batch_size

    return parse_batch_size(text)


def _rounds(rounds: int) -> None:
    from harness.core.bootstrap import rounds_problem
    from harness.core.errors import UserError

    problem = rounds_problem(rounds)
    if problem:
        raise UserError(f"--bootstrap: {problem}")


def _devices(value: str) -> None:
    from harness.core.machine import check_devices

    check_devices(value)


def _some(flag: str) -> Any:
    def check(names: Sequence[str]) -> None:
        from harness.core.errors import UserError

        if not names:
            raise UserError(f"{flag}: needs at least one name")

    return check


def _two_layers(layers: Sequence[int]) -> None:
    from harness.core.errors import UserError

    if len(layers) != 2:
        raise UserError(
            f"--first-last-layers: expected two layer ids like 1,-1, got {tuple(layers)}"
        )


def _dims_words(words: Sequence[str]) -> tuple[str, ...]:
    # "64 128 full" or "64,128,full": each checked and written as parse_dims reads it
    from harness.core.compression import FULL, parse_dims
    from harness.runner.settings.validate import split_names

    return tuple(FULL if k is None else str(k) for k in parse_dims(split_names(words)))


def _precision_words(words: Sequence[str]) -> tuple[str, ...]:
    from harness.core.compression import check_precision
    from harness.runner.settings.validate import split_names

    return tuple(dict.fromkeys(check_precision(p.lower()) for p in split_names(words)))


def _similarity_words(words: Sequence[str]) -> tuple[str, ...]:
    from harness.core.compression import similarity_for
    from harness.runner.settings.validate import split_names

    names = tuple(dict.fromkeys(s.lower() for s in split_names(words)))
    for name in names:
        similarity_for("fp32", name)  # one error line for a name that is not a similarity
    return names


def _fit_set_name(name: str) -> None:
    from harness.core.data.fitsets import check_fit_set_name

    check_fit_set_name(name)


WHAT, DATA, ENCODING, SCHEDULING = "what to run", "data", "backbone and encoding", "scheduling"
STATISTICS, GATE, OUTPUTS = "statistics", "regression gate", "outputs"
VECTORS = "compressed vectors (scored from the same vectors, docs/COMPRESSION.md)"


@dataclass(frozen=True)
class BenchConfig:
    # -- what to run
    methods: tuple[str, ...] = setting(
        DEFAULT_METHODS,
        group=WHAT,
        help=_methods_help,
        metavar="METHOD",
        many=_method_words,
        check=_some("--methods"),
    )
    tasks: tuple[str, ...] = setting(
        ("stsb",),
        group=WHAT,
        help=_tasks_help,
        metavar="TASK",
        many=_task_words,
        check=_some("--tasks"),
    )
    # -- data
    source: str = setting(
        "packaged", group=DATA, choices=_sources, protocol=True, help="where tasks are read from"
    )
    # Where each source reads its data: read it through locations(), which adds the two older
    # spellings below (set from Python; the command line and config files fold them in here).
    data_dir: dict[str, str] = setting(  # noqa: RUF009 (a factory: each config its own dict)
        factory=dict, group=DATA, metavar="SOURCE=DIR", help=_data_dir_help, check=_data_dirs
    )
    senteval_dir: str | None = setting(
        None,
        group=DATA,
        metavar="DIR",
        fills=("data_dir", "senteval"),
        help="= --data-dir senteval=DIR: SentEval's data/downstream folder (--source senteval)",
    )
    glue_dir: str | None = setting(
        None,
        group=DATA,
        metavar="DIR",
        fills=("data_dir", "glue"),
        help="= --data-dir glue=DIR: the folder GLUE's download_glue_data.py writes (--source "
        "glue: mrpc, qqp, qnli, rte, mnli, mnli-mm, snli)",
    )
    hub_root: str | None = setting(
        None,
        group=DATA,
        metavar="DIR",
        fills=("data_dir", "hub"),
        help="= --data-dir hub=DIR: a local folder standing in for the hub (--source hub and "
        "mteb, --fit-set nli)",
    )
    fit_set: str = setting(
        "target",
        group=DATA,
        help=_fit_set_help,
        metavar="SET",
        check=_fit_set_name,
        protocol=True,
        alias=Alias("fit_corpus", "FILE", "same as --fit-set corpus:FILE", lambda f: f"corpus:{f}"),
    )
    allow_gold_out_of_range: bool = setting(
        False, group=DATA, help="warn instead of failing on a gold score outside the task's range"
    )
    allow_undefined: bool = setting(
        False,
        group=DATA,
        help="record a correlation that cannot be computed (constant gold or similarity, fewer "
        "than 3 pairs) as undefined and unranked instead of failing",
    )
    # -- backbone and encoding
    backbone: str = setting(
        "minilm",
        group=ENCODING,
        help="HF id, local folder, minilm (the packaged all-MiniLM-L6-v2), or an embeddings "
        "endpoint's http(s)://.../v1 (--methods endpoint)",
        reaches=("spec",),
    )
    revision: str | None = setting(
        None,
        group=ENCODING,
        help="hub revision (branch, tag or commit) of --backbone",
        reaches=("spec",),
    )
    max_length: int = setting(
        128,
        group=ENCODING,
        metavar="N",
        minimum=1,
        protocol=True,
        help="tokens per sentence, capped at the model's positions",
        reaches=("encode", "spec"),
    )
    first_last_layers: tuple[int, ...] = setting(
        (1, -1),
        group=ENCODING,
        metavar="I,J",
        text=_layers,
        check=_two_layers,
        protocol=True,
        help="hidden_states ids of first-last (SimCSE's paper table used 0,-1)",
        reaches=("spec",),
        passed=lambda cfg: tuple(cfg.first_last_layers),
    )
    dtype: str = setting(
        "fp32",
        group=ENCODING,
        choices=_dtypes,
        protocol=True,
        help="compute dtype (autocast); fastest: the fastest this machine runs natively (bf16 on "
        "AMX or AVX512-BF16, fp32 on AVX2; recorded as the dtype it picked)",
        reaches=("encode",),
    )
    device: str = setting(
        "auto",
        group=ENCODING,
        help="auto, cpu, cuda, cuda:N, or cuda:0,1,... (a worker per GPU)",
        check=_devices,
        reaches=("encode",),
    )
    encoder_impl: str = setting(
        "auto",
        group=ENCODING,
        choices=_impls,
        help="auto runs BERT, RoBERTa, MPNet and DeBERTa-v2/v3 with the built-in encoder",
        reaches=("encode.impl",),
    )
    # sentences per batch; 0 = "auto": batches by token budget (max_tokens)
    batch_size: int = setting(
        0,
        group=ENCODING,
        metavar="N|auto",
        text=_batch_size,
        minimum=0,
        shown="auto",
        help="sentences per batch, or auto: a token budget",
        reaches=("encode",),
    )
    max_tokens: int = setting(
        0,
        group=ENCODING,
        metavar="N",
        minimum=0,
        shown="4096 on CPU, 65536 on GPU",
        help="token budget of an auto batch",
        reaches=("encode",),
    )
    trust_remote_code: bool = setting(
        False, group=ENCODING, help="allow a checkpoint's own code (off)", reaches=("encode",)
    )
    # -- scheduling
    backend: str = setting(
        "local", group=SCHEDULING, choices=lambda: BACKENDS, help="where encode windows run"
    )
    scheduler_address: str | None = setting(
        None, group=SCHEDULING, metavar="ADDRESS", help="dask scheduler or ray cluster address"
    )
    threads: int = setting(
        0,
        group=SCHEDULING,
        metavar="N",
        minimum=0,
        maximum=MAX_THREADS,
        why_maximum="more threads than any CPU has: torch crashes there; 0 uses the cores this "
        "process may use",
        shown="the cores this process may use",
        help="CPU threads for torch",
        reaches=("encode",),
        passed=lambda cfg: cfg.threads or _available_cpus(),
    )
    cache_dir: str = setting(
        factory=default_cache_dir,
        group=SCHEDULING,
        metavar="DIR",
        shown="$STS_BENCH_CACHE or ~/.cache/sts-bench",
        help="embedding and artifact cache",
    )
    # None: VERIFY_UNDER_BASELINE under --baseline (a gate's verdict must not rest on a shared
    # cache), else 0: read it through cache_checks()
    verify_cache: int | None = setting(
        None,
        group=SCHEDULING,
        metavar="N",
        minimum=0,
        shown=f"{VERIFY_UNDER_BASELINE} under --baseline, else 0",
        help="re-encode N cached sentences per backbone and compare; a mismatch fails (exit 3)",
        reaches=("encode",),
        passed=lambda cfg: cfg.cache_checks(),
    )
    # -- statistics
    aggregation: str = setting(
        "all", group=STATISTICS, choices=_aggregations, protocol=True, help="over a task's subsets"
    )
    bootstrap: int = setting(
        1000,
        group=STATISTICS,
        metavar="N",
        minimum=0,
        help="rounds of the 95%% interval (at least 41); 0: off",
        check=_rounds,
    )
    pair_thresholds: str = setting(
        "task",
        group=STATISTICS,
        choices=lambda: ("task", "none"),
        help="labelled pairs: where accuracy / F1 thresholds are chosen: task (its threshold "
        "split, GLUE's train: encoded too), none (AP and ROC AUC need none; accuracy / F1 then "
        "only at the scored split's best threshold, marked §)",
    )
    seed: int = setting(
        1234,
        group=STATISTICS,
        minimum=0,
        maximum=MAX_SEED,
        help="of every draw, fit and training",
        why_maximum="numpy and the training loops take 32-bit seeds, and add offsets to them",
        reaches=("spec",),
    )
    # -- compressed vectors: axes over the vectors a method made, each combination a row
    dims: tuple[str, ...] = setting(
        ("full",),
        group=VECTORS,
        metavar="K|full",
        many=_dims_words,
        check=_some("--dims"),
        help="keep the first K dimensions of each vector; full: all of them",
    )
    precision: tuple[str, ...] = setting(
        ("fp32",),
        group=VECTORS,
        metavar="P",
        many=_precision_words,
        check=_some("--precision"),
        help="fp32, int8 and uint8 (ranges calibrated on --fit-set), binary and ubinary (sign "
        "bits, compared by Hamming distance)",
    )
    similarity: tuple[str, ...] = setting(
        ("cosine",),
        group=VECTORS,
        metavar="S",
        many=_similarity_words,
        check=_some("--similarity"),
        help="cosine, dot, euclidean, manhattan (distances negated)",
    )
    # -- regression gate
    baseline: str | None = setting(
        None,
        group=GATE,
        metavar="CSV",
        help="a leaderboard.csv to compare with: exit 1 on a regression, 2 on a cell it lacks",
    )
    baseline_partial: bool = setting(
        False, group=GATE, help="compare only the cells the baseline has"
    )
    tolerance: float = setting(0.5, group=GATE, metavar="POINTS", minimum=0, help="allowed drop")
    # -- outputs
    output_dir: str = setting(
        "results", group=OUTPUTS, metavar="DIR", help="runs/, leaderboards, plots, index.html"
    )
    export_embeddings: str | None = setting(
        None,
        group=OUTPUTS,
        metavar="DIR",
        help="write each scored method × task × split's sentences and vectors (.npy) under DIR",
    )
    diagnostics: bool = setting(
        False, group=OUTPUTS, help="anisotropy diagnostics per method and task"
    )
    cost: bool = setting(
        False, group=OUTPUTS, help="query × candidate cost of cross-encoder vs dse"
    )
    plots: bool = setting(True, group=OUTPUTS, help="no PNG plots")  # on: the flag is --no-plots
    progress: bool = setting(True, group=OUTPUTS, help="no progress bars", reaches=("encode",))
    # -- set by a subcommand (run_bench.py: a mode flag), not a flag of a run
    dry_run: bool = setting(
        False, group=None, command="plan", help="print the plan and run nothing"
    )
    history: bool = setting(
        False,
        group=None,
        command="history",
        help="draw each score by commit from history.jsonl and rebuild index.html; run nothing",
    )
    paper: str | None = setting(  # the names of the papers: harness.runner.cli.parser.mode_help
        None, group=None, command="paper", metavar="NAME", help="a paper's own protocol"
    )
    # Not settings of their own: method options (--set, [method] tables, checked by the method's
    # Options) and what the user gave (command line or config file), by field name or
    # "method.option": that overrides a --paper preset. Fields off their default count as given too.
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    explicit: frozenset[str] = frozenset()
    # Not a setting either: why ``dtype`` is what it is when the run picked it (``--dtype fastest``
    # resolved by harness.runner.execution.preflight.applied_dtype: "fastest on this CPU"); the
    # record keeps it beside the concrete dtype, which is what the protocol and cache keys hold.
    dtype_picked: str = ""

    def given(self) -> frozenset[str]:
        """The settings the user chose: those named in ``explicit`` and those off their default."""
        defaults = BenchConfig()
        changed = {
            f.name
            for f in fields(self)
            if f.name not in ("explicit", "method_params", "dtype_picked")
            and getattr(self, f.name) != getattr(defaults, f.name)
        }
        options = {
            f"{method}.{option}"
            for method, values in self.method_params.items()
            for option in values
        }
        return frozenset(self.explicit | changed | options)

    def cache_checks(self) -> int:
        """Cached sentences to re-encode and compare per backbone (``--verify-cache``, resolved)."""
        if self.verify_cache is not None:
            return self.verify_cache
        return VERIFY_UNDER_BASELINE if self.baseline else 0

    def locations(self) -> dict[str, str]:
        """Where each source reads its data (source → location): ``--data-dir`` and the older
        spellings that fill it (``senteval_dir``, ``glue_dir``, ``hub_root``); one line when two
        of them name different locations for one source."""
        out = dict(self.data_dir)
        for s in declared(BenchConfig):
            value = getattr(self, s.name)
            if s.fills is None or value is None:
                continue
            key = s.fills[1]
            if out.setdefault(key, value) != value:
                from harness.core.errors import UserError

                raise UserError(
                    f"{s.flag} {value} and --data-dir {key}={out[key]} name two locations of the "
                    f"{key} source; give one"
                )
        return out

    def spec_request(self) -> SpecRequest:
        """What methods build their specs from: the run-wide settings a method may read."""
        return SpecRequest(params=self.method_params, **reached(self, "spec"))

    def encode_settings(self) -> EncodeSettings:
        """How the run's forward passes run, resolved once (threads: the cores this process may
        use; the cache checks under ``--baseline``): every setting declared ``reaches="encode"``."""
        from harness.core.encoding import EncodeSettings

        return EncodeSettings(**reached(self, "encode"))

    def protocol(self) -> dict[str, Any]:
        """The run-wide settings that change scores (declared ``protocol=True``), as JSON values;
        printed with every table and stored per result."""
        values = {s.name: getattr(self, s.name) for s in declared(BenchConfig) if s.protocol}
        as_json = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
        return {"similarity": "cosine", **as_json}

    def vector_grid(self) -> tuple[Any, ...]:
        """The (dims, precision, similarity) settings every embedding method is scored in, the
        full vector first (:func:`harness.core.compression.vector_grid`)."""
        from harness.core.compression import vector_grid

        return vector_grid(self.dims, self.precision, self.similarity)

    def calibrates(self) -> bool:
        """Whether a precision asked needs ranges calibrated on the run's ``--fit-set``."""
        from harness.core.compression import needs_calibration

        return needs_calibration(self.precision)

    def validate(self) -> BenchConfig:
        """This config checked: every field by type, then every setting by its declaration
        (choices, range, its own check; in field order, the first bad one is the one line said),
        with plugin references (``x.py:Class``) loaded and replaced by their methods' names
        (``harness.run(BenchConfig(methods=("x.py:Class",)))`` as the CLI)."""
        from harness.core.errors import UserError
        from harness.runner.settings.validate import check_fields, check_setting, method_names

        check_fields(BenchConfig, {f.name: getattr(self, f.name) for f in fields(self)}, "config")
        for s in declared(BenchConfig):
            check_setting(s, getattr(self, s.name))
        self.locations()  # an older spelling and --data-dir naming two locations of a source
        if self.dry_run and self.history:
            # --history only writes (history.md and index.html, from disk): a dry run of it wrote
            # them all the same
            raise UserError(
                "--dry-run and --history do not combine: --history computes nothing, it only "
                "rewrites history.md and index.html from the records on disk; drop --dry-run to "
                "rewrite them, or --history to plan a run"
            )
        methods = method_names(self.methods)
        return self if methods == self.methods else replace(self, methods=methods)
