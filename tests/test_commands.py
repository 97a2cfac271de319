"""The command line people read: grouped help built from the registries and BenchConfig, method
options through ``--set``, modes as ``sts-bench`` subcommands, and ``python run_bench.py`` as it was."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from harness.runner.cli.commands import build_command_parser, listing, method_options
from harness.runner.cli.parser import build_parser, from_cli
from harness.runner.settings.config import BenchConfig
from methods import all_methods, get_method

ROOT = Path(__file__).resolve().parent.parent


def option_lines(help_text: str) -> list[str]:
    return [line for line in help_text.splitlines() if re.match(r"^  -", line)]


def test_top_level_help_is_at_most_about_40_options_in_groups():
    text = build_parser().format_help()
    # 43: --export-embeddings (issue 21); 44: --verify-cache (issue 30); 47: --dims, --precision, --similarity (32);
    # 48: --data-dir (issue 39: every source's location; --senteval-dir and --hub-root stay as its older spellings);
    # 50: --glue-dir (GLUE's folder, the flag DSE's and BERT-flow's presets name) and --pair-thresholds (issue 40);
    # 46: the older spellings --senteval-dir, --glue-dir, --hub-root and --fit-corpus work but are not listed (52)
    assert len(option_lines(text)) <= 46
    for group in ("what to run", "data", "backbone and encoding", "scheduling", "statistics", "regression gate",
                  "outputs"):
        assert f"\n{group}:" in text
    assert "--whitening-k" not in text and "WHITENING.K" not in text  # the generated flags are hidden aliases
    run_help = build_command_parser()._subparsers._group_actions[0].choices["run"].format_help()
    # modes are subcommands; 43: issue 32's axes; 44: --data-dir (issue 39); 46: --glue-dir, --pair-thresholds (40)
    assert len(option_lines(run_help)) <= 42 and "--dry-run" not in run_help  # 42: issue 52's hidden spellings


def test_every_default_in_help_is_the_configs_own():
    """Help is built from BenchConfig: change a default there and the help follows (never typed twice)."""
    defaults = BenchConfig()
    shown = {}
    for action in build_parser()._actions:
        found = re.search(r"\(default: ([^)]+)\)$", action.help or "")
        if found:
            shown[action.dest] = found.group(1)
    assert {"aggregation", "max_length", "tolerance", "output_dir", "first_last_layers", "seed"} <= set(shown)
    for dest, text in shown.items():
        if hasattr(defaults, dest) and dest not in ("batch_size", "max_tokens", "threads", "cache_dir", "verify_cache"):
            value = getattr(defaults, dest)
            expected = ",".join(map(str, value)) if dest == "first_last_layers" else \
                " ".join(value) if isinstance(value, tuple) else str(value)
            assert text == expected, dest
    from harness.runner.settings.config import VERIFY_UNDER_BASELINE

    assert shown["verify_cache"] == f"{VERIFY_UNDER_BASELINE} under --baseline, else 0"  # resolved by cache_checks()
    assert BenchConfig(baseline="b.csv").cache_checks() == VERIFY_UNDER_BASELINE and defaults.cache_checks() == 0
    source = next(a for a in build_parser()._actions if a.dest == "source")
    assert "mteb" in source.metavar  # the sources come from the registry


@pytest.mark.parametrize(("word", "value"), [("on", True), ("YES", True), ("1", True), ("true", True),
                                             ("off", False), ("no", False), ("0", False), ("False", False)])
def test_a_yes_no_option_reads_the_usual_words(word, value):
    cfg, _ = from_cli(["--methods", "flow", "--set", f"flow.fit_dropout={word}"])
    assert cfg.method_params == {"flow": {"fit_dropout": value}}


def test_set_is_the_generated_flag_and_the_config_table():
    via_set, _ = from_cli(["--methods", "whitening", "--set", "whitening.k=16", "--set", "flow.lr=1e-4"])
    via_flag, _ = from_cli(["--methods", "whitening", "--whitening-k", "16", "--flow-lr", "1e-4"])
    assert via_set.method_params == via_flag.method_params == {"whitening": {"k": 16}, "flow": {"lr": 1e-4}}
    assert "whitening.k" in via_set.given()


@pytest.mark.parametrize(("argv", "message"), [
    (["--set", "whitening.k"], "expected METHOD.OPTION=VALUE"),
    (["--set", "k=3"], "expected METHOD.OPTION=VALUE"),
    (["--set", "flow.lr=abc"], "--set flow.lr=abc: expected a number"),
    (["--set", "flow.levels=two"], "--set flow.levels=two: expected an integer"),
    (["--set", "whitening.kk=3"], "did you mean 'k'?"),
    (["--set", "whitenin.k=3"], "did you mean 'whitening'?"),
    (["--set", "flow.levels=0"], "--set flow.levels=0: expected a positive integer"),
    (["--set", "flow.fit_dropout=maybe"], "--set flow.fit_dropout=maybe: expected true or false"),
    (["--set", "abtt.k=0"], "--set abtt.k=0: k must be auto or a positive integer (directions to remove), not '0'"),
])
def test_a_bad_set_is_one_line(argv, message):
    from harness.core.errors import UserError

    with pytest.raises(UserError, match=re.escape(message)):
        from_cli(argv)


def test_list_method_shows_every_option_with_the_codes_default():
    for cls in all_methods():
        text = method_options(cls)
        for opt in cls.options:
            assert re.search(rf"^  {re.escape(opt.name)} +default {re.escape(repr(opt.default))}[;:]", text, re.M)
    assert "whitening" in listing() and "corpus:FILE" in listing() and "mteb" in listing()
    assert listing("flow") == method_options(get_method("flow"))


def sts_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from harness.runner.cli.commands import main; "
                           "sys.exit(main(sys.argv[1:]))", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.heavy  # six CLI runs in subprocesses
def test_subcommands_run_what_the_flags_run(senteval_root, tiny_bert, tmp_path):
    common = ["--methods", "avg", "whitening", "--tasks", "stsb", "--source", "senteval", "--senteval-dir",
              str(senteval_root), "--backbone", str(tiny_bert), "--cache-dir", str(tmp_path / "c"), "--no-progress",
              "--no-plots"]
    old = subprocess.run([sys.executable, "run_bench.py", *common, "--whitening-k", "8", "--output-dir",
                          str(tmp_path / "old")], capture_output=True, text=True, cwd=ROOT)
    new = sts_bench("run", *common, "--set", "whitening.k=8", "--output-dir", str(tmp_path / "new"))
    assert old.returncode == new.returncode == 0, old.stderr + new.stderr
    assert old.stdout == new.stdout  # the same leaderboard table
    plan = sts_bench("plan", *common, "--output-dir", str(tmp_path / "plan"))
    assert plan.returncode == 0 and "plan (dry run)" in plan.stdout and not (tmp_path / "plan").exists()
    history = sts_bench("history", "--output-dir", str(tmp_path / "new"), "--no-plots")
    assert history.returncode == 0 and (tmp_path / "new" / "history.md").is_file()
    listed = sts_bench("list", "whitening")
    assert listed.returncode == 0 and listed.stdout.strip() == method_options(get_method("whitening"))
    bad = sts_bench("paper", "bert-flw")
    assert bad.returncode == 2 and "did you mean 'bert-flow'?" in bad.stderr


def test_every_benchconfig_field_is_reachable_from_the_command_line():
    """A setting added to BenchConfig that no flag or subcommand sets is a setting users cannot reach."""
    reachable = {action.dest for action in build_parser()._actions} | {"dry_run", "history", "paper", "list"}
    reachable |= {"method_params", "explicit", "fit_set", "set_options", "scheduler_address", "progress", "plots",
                  "dtype_picked"}  # set by --dtype fastest when a run resolves it, not by the user
    missing = {f.name for f in fields(BenchConfig)} - reachable
    assert not missing, missing


def test_the_console_script_is_installed():
    script = Path(sys.executable).parent / "sts-bench"
    assert script.is_file(), "reinstall the project (make venv) to get the sts-bench command"
    done = subprocess.run([str(script), "list"], capture_output=True, text=True)
    assert done.returncode == 0 and "Methods" in done.stdout
    assert json.dumps(done.returncode) == "0"


@pytest.mark.parametrize("argv", [["run_bench.py", "--list"], ["-c", "from harness.runner.cli.commands import main; "
                                                                     "raise SystemExit(main(['list']))"]])
def test_a_reader_that_goes_away_is_not_an_error(argv):
    """``sts-bench list | head -3``: the pipe's reader leaves before the listing is written; the command
    ends quietly with 141 (128 + SIGPIPE, as git does), not with an I/O error line."""
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the interpreter has started: the first write finds no reader
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == ""


def test_each_setting_is_declared_once_and_every_surface_follows():
    """Flags of both command surfaces, config-file keys, harness.evaluate's keywords and the record's
    protocol are derived from BenchConfig's declarations: each declared setting is on each of them."""
    from harness.runner.cli.parser import from_mapping
    from harness.runner.execution.from_python import accepted_settings
    from harness.runner.settings.declaration import declared

    run_parser = build_command_parser()._subparsers._group_actions[0].choices["run"]
    for parser in (build_parser(), run_parser):
        flags = {action.dest: action.option_strings for action in parser._actions}
        for s in declared(BenchConfig):
            if s.command is None:
                assert flags[s.name] == [s.flag], s.name
    for s in declared(BenchConfig):
        if s.default is not None and s.many is None:  # a config-file key of its own name takes its default
            assert from_mapping({s.name: s.default}, "bench.toml") == {s.name: s.default}, s.name
    assert set(accepted_settings()) == {s.name for s in declared(BenchConfig)} - {
        "methods", "tasks", "output_dir", "dry_run", "history", "paper"}
    # Written into every record: changing this set changes what records say (schema readers, tables).
    assert set(BenchConfig().protocol()) == {"similarity", "aggregation", "source", "fit_set", "first_last_layers",
                                             "max_length", "dtype"}
    assert BenchConfig(first_last_layers=(0, -1)).protocol()["first_last_layers"] == [0, -1]  # JSON: a list


@pytest.mark.parametrize(("argv", "command", "given"), [
    ([], "run", {}),
    (["--dry-run", "--tasks", "stsb"], "plan", {"dry_run": True, "tasks": ["stsb"]}),
    (["--history", "--no-plots"], "history", {"history": True, "plots": False}),
    (["--paper", "sbert", "--dry-run"], "paper", {"paper": "sbert", "dry_run": True}),
    (["--list"], "list", {"method": None}),
    (["--list", "whitening"], "list", {"method": "whitening"}),
])
def test_run_bench_modes_are_the_subcommands(argv, command, given):
    from harness.runner.cli.parser import run_bench_command

    assert run_bench_command(argv) == (command, given)


@pytest.mark.parametrize(("settings", "message"), [
    ({"seed": True}, "seed = True: expected an integer"),  # True is an int to Python, not to a user
    ({"max_length": "64"}, "max_length = '64': expected an integer"),  # no conversion of text
    ({"tolerance": float("inf")}, "tolerance = inf: expected a number"),
    ({"first_last_layers": [1, "a"]}, "expected a list of integers"),
    ({"bootstrap": -5}, "--bootstrap -5: must not be negative"),
    ({"dtype": "fp33"}, "--dtype fp33: expected one of fp32, bf16, fp16, fastest (did you mean 'fp32'?)"),
])
def test_a_config_built_in_python_is_checked_as_the_command_line_is(settings, message):
    from dataclasses import replace

    from harness.core.errors import UserError

    with pytest.raises(UserError, match=re.escape(message)):
        replace(BenchConfig(), **settings).validate()
