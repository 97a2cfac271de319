"""The shared peer harness: what every side-by-side benchmark does the same way.

A peer benchmark times the harness and something else (sentence-transformers, MTEB, a plain
transformers loop, another batching) on the same sentences, and its figures are ratios of medians.
The parts they share live here, so each script holds only what it measures:

- **options**: :func:`add_options` gives a parser ``--rounds``, ``--dtypes``, ``--threads``,
  ``--out`` and ``--json`` with one meaning everywhere, and :func:`check_options` refuses what
  cannot run; :func:`resolve_dtypes` turns ``fastest`` into the fastest dtype this CPU computes
  natively (bf16 with AMX or AVX512-BF16, else fp32: :func:`harness.core.machine.fastest_cpu_dtype`)
  and ``auto`` into fp32, plus bf16 where the CPU computes it (on a CPU that emulates bf16, a bf16
  timing says nothing about bf16). A benchmark that defaults to ``fastest`` times both sides in
  the dtype a user of this CPU would pick, and its header says which.
- **fresh processes**: each side of a cold measurement runs in a process of its own (as a run
  does: one process for both would share oneDNN's kernel cache and the imports). A script answers
  its own steps with :func:`answer_step` (``script --step JSON`` prints one JSON line), launched by
  :func:`step_command`; :func:`run_step` runs any step command and reads its last stdout line as
  JSON, adding ``process_s``; a step that fails raises :class:`StepFailed`, with a one-line
  :attr:`StepFailed.reason` a benchmark can record when it leaves a peer out.
- **alternating rounds**: :func:`round_order` rotates who goes first from round to round, evenly
  over the rounds, so a machine that drifts (the machine is shared) slows every side alike;
  :func:`in_rounds` walks them and says on stderr when each is done.
- **medians and ratios**: :class:`Timings` keeps each side's seconds per round; a ratio is one
  side's median over another's (:func:`ratio`: > 1, the second side is faster).
- **the report**: :func:`header` opens it with what was timed, the CPU kind and dtypes
  (:func:`benchmarks.report.machine_line`) and the rounds; :func:`table` writes a markdown table;
  :func:`write` closes it with the load averages and prints it, keeping it as ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
# What every step process gets: offline, and no tokenizer thread pool fighting the timed threads.
STEP_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
DTYPES = ("fp32", "bf16", "fp16")
FASTEST = "fastest"  # the fastest dtype this CPU computes natively, resolved by resolve_dtypes

T = TypeVar("T")

# -- options ------------------------------------------------------------------------------------


def add_options(
    parser: argparse.ArgumentParser,
    *,
    rounds: int = 3,
    dtypes: Sequence[str] | None = None,
    dtype_choices: Sequence[str] = DTYPES,
    threads: int | Sequence[int] | None = None,
    json_out: bool = False,
) -> argparse.ArgumentParser:
    """The options every peer benchmark spells the same way. ``dtypes`` None: the benchmark fixes
    its dtypes (no ``--dtypes``); ``threads`` None: no ``--threads``; a list: several thread counts
    (one setting each), an int: one for every side (0: the cores this process may use)."""
    parser.add_argument(
        "--rounds",
        type=int,
        default=rounds,
        help=f"alternating rounds, medians reported ({rounds})",
    )
    if dtypes is not None:
        parser.add_argument(
            "--dtypes",
            nargs="+",
            choices=list(dtype_choices),
            default=list(dtypes),
            help=f"dtypes timed ({' '.join(dtypes)}); fastest: the fastest this CPU computes "
            "natively (bf16 with AMX or AVX512-BF16, else fp32); auto: fp32, and bf16 where the "
            "CPU has it",
        )
    if isinstance(threads, int):
        parser.add_argument(
            "--threads",
            type=int,
            default=threads,
            help=f"threads of every side ({threads}; 0: all)",
        )
    elif threads is not None:
        parser.add_argument(
            "--threads",
            type=int,
            nargs="+",
            default=list(threads),
            help=f"thread counts, one setting each ({' '.join(map(str, threads))})",
        )
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    if json_out:
        parser.add_argument("--json", type=Path, help="also write every timing as JSON")
    return parser


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Refuse what cannot run: no round, or a negative thread count (0 is "all cores")."""
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    threads = getattr(args, "threads", None)
    if threads is not None and any(
        t < 0 for t in (threads if isinstance(threads, list) else [threads])
    ):
        parser.error("--threads must be 0 (all cores) or more")
    return args


def resolve_dtypes(dtypes: Sequence[str], bf16_native: bool | None = None) -> list[str]:
    """``fastest`` becomes bf16 where the CPU computes bf16, else fp32; ``auto`` becomes fp32, and
    bf16 where the CPU computes it; duplicates go, order stays. ``bf16_native`` answers the CPU
    probe (None: ask oneDNN, :func:`harness.core.machine.half_native_on_cpu`).

    >>> resolve_dtypes(["auto"], bf16_native=True), resolve_dtypes(["auto"], bf16_native=False)
    (['fp32', 'bf16'], ['fp32'])
    >>> resolve_dtypes(["fastest"], bf16_native=True), resolve_dtypes(["fastest"], False)
    (['bf16'], ['fp32'])
    >>> resolve_dtypes(["bf16", "auto"], bf16_native=True)
    ['bf16', 'fp32']
    """
    from harness.core.machine import fastest_cpu_dtype

    if {"auto", FASTEST} & set(dtypes) and bf16_native is None:
        from harness.core.machine import half_native_on_cpu

        bf16_native = half_native_on_cpu("bf16")
    found: list[str] = []
    for dtype in dtypes:
        if dtype == "auto":
            found += ["fp32", "bf16"] if bf16_native else ["fp32"]
        elif dtype == FASTEST:
            found.append(fastest_cpu_dtype(bool(bf16_native)))
        else:
            found.append(dtype)
    return list(dict.fromkeys(found))


# -- fresh processes ----------------------------------------------------------------------------


class StepFailed(SystemExit):
    """A step's process failed. Uncaught, it ends the benchmark with the step's stderr; a benchmark
    that can go on without that side records :attr:`reason` instead.

    >>> StepFailed(["python", "x.py"], -8, "Traceback\\nbad threads\\n").reason
    'killed by SIGFPE; its last stderr line: "bad threads"'
    >>> StepFailed(["python", "x.py"], 3, "").reason
    'exit 3'
    """

    def __init__(self, command: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"step failed ({' '.join(command[1:3])} ...):\n{stderr[-3000:]}")
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        if returncode < 0:
            died = f"killed by {signal.Signals(-returncode).name}"
        else:
            died = f"exit {returncode}"
        self.returncode = returncode
        self.reason = f'{died}; its last stderr line: "{lines[-1]}"' if lines else died


def run_process(
    command: Sequence[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> tuple[str, float]:
    """Run one process (the environment plus :data:`STEP_ENV` and ``env``); its stdout and wall
    seconds. A failure raises :class:`StepFailed`."""
    started = time.perf_counter()
    done = subprocess.run(
        list(command),
        cwd=cwd,
        env={**os.environ, **STEP_ENV, **(env or {})},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise StepFailed(command, done.returncode, done.stderr)
    return done.stdout, wall


def last_json(stdout: str) -> dict[str, Any]:
    """The JSON object on a step's last non-empty stdout line (whatever it printed before).

    >>> last_json('loading...\\n{"seconds": 1.5}\\n\\n')
    {'seconds': 1.5}
    """
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the step printed nothing")
    found = json.loads(lines[-1])
    if not isinstance(found, dict):
        raise ValueError(f"the step's last line is no JSON object: {lines[-1][:200]}")
    return found


def run_step(
    command: Sequence[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> dict[str, Any]:
    """Run one step in a fresh process: its last stdout line as JSON, plus ``process_s`` (the
    wall time of the whole process, interpreter start and imports included)."""
    stdout, wall = run_process(command, env, cwd)
    return {**last_json(stdout), "process_s": wall}


def step_command(script: str | Path, spec: dict[str, Any]) -> list[str]:
    """The command that runs ``script``'s own step on ``spec`` (see :func:`answer_step`)."""
    return [sys.executable, str(Path(script).resolve()), "--step", json.dumps(spec)]


def answer_step(argv: Sequence[str], step: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    """If ``argv`` is ``--step JSON`` (a step of this script), print ``step(spec)`` as one JSON
    line and return True; else False, and the script runs as the benchmark."""
    if list(argv[:1]) != ["--step"]:
        return False
    print(json.dumps(step(json.loads(argv[1]))), flush=True)
    return True


# -- alternating rounds -------------------------------------------------------------------------


def round_order(items: Sequence[T], number: int, rounds: int) -> list[T]:
    """``items`` in the order round ``number`` (0-based) of ``rounds`` runs them: rotated so that
    who goes first moves evenly through the list over the rounds (``number * len // rounds``).

    >>> [round_order("ab", n, 2) for n in range(2)]
    [['a', 'b'], ['b', 'a']]
    >>> [round_order("abcd", n, 2) for n in range(2)]
    [['a', 'b', 'c', 'd'], ['c', 'd', 'a', 'b']]
    """
    shift = number * len(items) // max(rounds, 1)
    return [*items[shift:], *items[:shift]]


def in_rounds(items: Sequence[T], count: int, say: bool = True) -> Iterator[T]:
    """Every item of every round, in :func:`round_order`; with ``say``, a line on stderr after
    each round (the rounds of a long benchmark take minutes)."""
    for number in range(count):
        yield from round_order(items, number, count)
        if say:
            print(f"round {number + 1}/{count} done", file=sys.stderr, flush=True)


# -- medians and ratios -------------------------------------------------------------------------


def ratio(slower: float, faster: float) -> float:
    """``slower / faster`` seconds: how many times faster the second is (> 1: it is faster).

    >>> ratio(3.0, 1.5)
    2.0
    """
    return slower / faster


class Timings:
    """Each side's seconds, one per round, and their medians."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}

    def add(self, side: str, seconds: float) -> None:
        self.seconds.setdefault(side, []).append(seconds)

    def median(self, side: str) -> float:
        return statistics.median(self.seconds[side])

    def medians(self) -> dict[str, float]:
        return {side: self.median(side) for side in self.seconds}

    def ratio(self, side: str, base: str) -> float:
        """``base``'s median over ``side``'s: how many times faster ``side`` is than ``base``."""
        return ratio(self.median(base), self.median(side))


# -- the report ---------------------------------------------------------------------------------


def header(
    what: str,
    dtypes: Sequence[str],
    rounds: int,
    title: str | None = None,
    facts: dict[str, Any] | None = None,
) -> list[str]:
    """A report's opening lines: its title (``# title``), what was timed, the CPU kind and dtypes,
    and how the medians were taken.

    >>> facts = {"cpu": "Xeon", "flags": [], "cores": 2, "bf16_native": True}
    >>> for line in header("STS-B test, MiniLM", ["bf16"], 3, "A against B", facts):
    ...     print(line)
    # A against B
    <BLANKLINE>
    STS-B test, MiniLM; median of 3 alternating rounds
    <BLANKLINE>
    CPU: Xeon, 2 cores, bf16 native, fastest native dtype bf16; dtype: bf16
    <BLANKLINE>
    """
    from benchmarks.report import machine_line

    opening = [f"# {title}", ""] if title else []
    noun = "round" if rounds == 1 else "alternating rounds"
    return [
        *opening,
        f"{what}; median of {rounds} {noun}",
        "",
        machine_line(dtypes, facts),
        "",
    ]


def table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()
) -> list[str]:
    """A markdown table: ``columns`` as its head, the columns at indexes ``right`` right-aligned
    (numbers), cells as ``str`` gives them, pipes escaped.

    >>> table(["side", "s"], [["a|b", 1.5]], right=[1])
    ['| side | s |', '|---|---:|', '| a\\\\|b | 1.5 |']
    """

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    rule = ["---:" if i in right else "---" for i in range(len(columns))]
    return [
        "| " + " | ".join(map(cell, columns)) + " |",
        "|" + "|".join(rule) + "|",
        *("| " + " | ".join(map(cell, row)) + " |" for row in rows),
    ]


def write(
    lines: Sequence[str],
    out: str | Path | None,
    load_at_start: tuple[float, float, float] | None = None,
) -> str:
    """Close the report with the load averages since ``load_at_start``, print it, and keep it in
    ``out`` (markdown); returns its text."""
    from benchmarks.report import emit, load_line

    lines = list(lines)
    if load_at_start is not None:
        lines += ["", load_line(load_at_start)]
    emit(lines, out)
    return "\n".join(lines)
