"""The fault matrix of the command line: every bad input and environment failure ends in one
``error:`` line and the exit code that means it (harness/runner/cli/exits.py), before anything is
computed when it can be seen up front. The cases are data: adding one is one line.

Trained artifacts and vectors are in tests/test_faults_artifacts.py, full and read-only disks in
tests/test_faults_disk.py; the SIGKILL/resume and two-runs-on-one-cache tests are in
tests/test_scale.py (``slow``).
"""

from __future__ import annotations

import errno
import json
import shutil

import pytest

# Files a case writes before it runs: name under tmp_path → bytes.
TOML = "bench.toml"
BASELINE = "baseline.csv"
NOT_UTF8 = b"methods = [\"avg\"]\n# caf\xe9\n"

# (case, files to write, extra arguments, exit code, text of the one error line)
CASES = [
    ("config: max_length not a number", {TOML: b'max_length = "abc"'}, [], 2, "max_length = 'abc': expected an int"),
    ("config: bootstrap not a number", {TOML: b'bootstrap = "many"'}, [], 2, "bootstrap = 'many': expected an integer"),
    ("config: methods not a list", {TOML: b"methods = 5"}, [], 2, "methods = 5: expected a list of strings"),
    ("config: seed not an integer", {TOML: b"seed = 1.5"}, [], 2, "seed = 1.5: expected an integer"),
    ("config: method option of the wrong type", {TOML: b'[whitening]\nk = "abc"'}, [], 2, "[whitening] k = 'abc'"),
    ("config: layer ids not integers", {TOML: b'first_last_layers = ["a", "b"]'}, [], 2, "expected a list of integers"),
    ("config: a string for a switch", {TOML: b'dry_run = "yes"'}, [], 2, "dry_run = 'yes': expected true or false"),
    ("config: not UTF-8", {TOML: NOT_UTF8}, [], 2, f"{TOML}:2: not valid UTF-8 (byte 23)"),
    ("config: not TOML", {TOML: b"max_length = "}, [], 2, "not valid TOML"),
    ("config: unknown setting", {TOML: b"max_lenght = 64"}, [], 2, "did you mean 'max_length'?"),
    ("config: negative learning rate", {TOML: b"[flow]\nlr = -1"}, [], 2, "[flow] lr = -1: must not be negative"),
    ("config: zero flow levels", {TOML: b"[flow]\nlevels = 0"}, [], 2, "expected a positive integer"),
    ("config: not a finite number", {TOML: b"tolerance = nan"}, [], 2, "tolerance = nan: expected a number"),
    ("config: option outside its choices", {TOML: b'[whitening]\nview = "pooler"'}, [], 2, "expected one of"),
    ("config: unknown method table", {TOML: b"[flw]\nlr = 1"}, [], 2, "unknown method 'flw'"),
    ("config: negative seed", {TOML: b"seed = -1"}, [], 2, "--seed -1: must not be negative"),
    ("config: negative threads", {TOML: b"threads = -2"}, [], 2, "--threads -2: must not be negative"),
    ("config: missing file", {}, ["--config", "{tmp}/none.toml"], 2, "no such file"),
    ("flag: zero flow levels", {}, ["--flow-levels", "0"], 2, "--flow-levels 0: expected a positive integer"),
    ("flag: unknown method", {}, ["--methods", "whitenin"], 2, "did you mean 'whitening'?"),
    ("flag: zero max length", {}, ["--max-length", "0"], 2, "--max-length 0: must be a positive integer"),
    ("flag: bad batch size", {}, ["--batch-size", "zero"], 2, "expected a number or 'auto'"),
    ("flag: unknown task", {}, ["--tasks", "sts2"], 2, "unknown task 'sts2'"),
    ("baseline: missing", {}, ["--baseline", "{tmp}/none.csv"], 2, "no such file"),
    ("baseline: bad quote", {BASELINE: b'method,backbone,STS-B\n"avg,m,80\n'}, ["--baseline", "{tmp}/" + BASELINE], 2,
     "not a readable CSV"),
    ("baseline: binary", {BASELINE: b"\x89PNG\r\n\x1a\n\x00\xff\xfe"}, ["--baseline", "{tmp}/" + BASELINE], 2,
     "not valid UTF-8 (byte 0)"),
    ("baseline: empty", {BASELINE: b""}, ["--baseline", "{tmp}/" + BASELINE], 2, "the file is empty"),
    ("baseline: non-numeric score", {BASELINE: b"method,backbone,STS-B\navg,m,high\n"},
     ["--baseline", "{tmp}/" + BASELINE], 2, f"{BASELINE}:2: column STS-B holds 'high', not a number"),
    ("baseline: not a leaderboard", {BASELINE: b"a,b\n1,2\n"}, ["--baseline", "{tmp}/" + BASELINE], 2,
     "expected a 'method' column"),
    ("output dir is a file", {"taken": b"x"}, ["--output-dir", "{tmp}/taken"], 2, "exists and is not a folder"),
    ("output dir under a file", {"taken": b"x"}, ["--output-dir", "{tmp}/taken/out"], 3, "cannot write there"),
    ("cache dir under a file", {"taken": b"x"}, ["--cache-dir", "{tmp}/taken/cache"], 3, "cannot write there"),
    ("gold 42 in an STS-B file", {"gold": b"42.0"}, [], 2, "sts-test.csv:1: gold score 42 is outside STS-B's range"),
    ("gold -3 in an STS-B file", {"gold": b"-3"}, [], 2, "gold score -3 is outside STS-B's range 0-5"),
    # Undefined is not a number: refused before encoding (tests/test_faults_verdicts.py: --allow-undefined).
    ("every gold score equal", {"gold_all": b"3.0"}, [], 2, "STS-B test (" + "{tmp}"),
    ("every gold score equal: the reason", {"gold_all": b"3.0"}, [], 2, "every gold score is equal"),
    ("one constant subset under mean", {"subset_gold": b"MSRpar=2.0"}, ["--tasks", "sts12", "--aggregation", "mean"],
     2, "subset MSRpar: every gold score is equal"),
    ("a 2-pair subset under wmean", {"subset_rows": b"MSRvid=2"}, ["--tasks", "sts12", "--aggregation", "wmean"], 2,
     "subset MSRvid: fewer than 3 pairs (2)"),
    ("an empty SentEval subset (0 bytes)", {"subset_rows": b"MSRpar=0"}, ["--tasks", "sts12"], 2,
     "STS.input.MSRpar.txt and STS.gs.MSRpar.txt hold no scored pair"),
    ("every SentEval subset empty", {"subset_rows": b"*=0"}, ["--tasks", "sts12"], 2, "hold no scored pair"),
    ("an empty sts-test.csv", {"stsb_test_rows": b"0"}, [], 2, "STS-B: its test split"),
    # Fit sets and lengths that cannot give two different vectors: before encoding.
    ("a fit corpus of one sentence", {"corpus.txt": b"a man is playing\n"},
     ["--methods", "whitening", "--fit-corpus", "{tmp}/corpus.txt"], 2, "holds 1 distinct sentence(s)"),
    ("--max-length below the special tokens", {}, ["--max-length", "1"], 2, "leaves no room for a word"),
    ("--max-length 2 with whitening", {}, ["--max-length", "2", "--methods", "whitening"], 2,
     "--max-length 2: "),
    ("a seed beyond 31 bits", {}, ["--seed", "99999999999999999999", "--methods", "flow"], 2,
     "seed = 99999999999999999999: expected an integer within 64 bits"),
    ("a seed beyond 31 bits, dry run", {}, ["--seed", "99999999999999999999", "--dry-run"], 2,
     "seed = 99999999999999999999: expected an integer within 64 bits"),
    ("a seed beyond 31 bits, within 64", {}, ["--seed", str(2**40), "--dry-run"], 2, "must be at most"),
    # A baseline that cannot give a verdict: before encoding (tests/test_faults_verdicts.py for the rest).
    ("baseline matches no row", {BASELINE: b"method,backbone,STS-B\nother,m,80\n"}, ["--baseline", "{tmp}/" + BASELINE],
     2, "1 of 1 scored cell(s) have no single baseline score: avg on STS-B"),
    ("baseline lacks the task", {BASELINE: b"method,STS12\navg,80\n"}, ["--baseline", "{tmp}/" + BASELINE], 2,
     "avg on STS-B (no baseline score"),
    ("baseline's task cell empty", {BASELINE: b"method,STS-B\navg,\n"}, ["--baseline", "{tmp}/" + BASELINE], 2,
     "no single baseline score"),
    ("baseline row twice", {BASELINE: b"method,STS-B\navg,80\navg,81\n"}, ["--baseline", "{tmp}/" + BASELINE], 2,
     "2 baseline rows"),
    ("baseline partial, still nothing", {BASELINE: b"method,STS-B\nother,80\n"},
     ["--baseline", "{tmp}/" + BASELINE, "--baseline-partial"], 2, "have no single baseline score"),
]

# Failures injected into the encode stage: (case, exception, exit code, text of the one error line)
INJECTED = [
    ("out of memory (MemoryError)", MemoryError(), 3, "out of memory"),
    ("out of memory (torch CPU allocator)", RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried "
                                                         "to allocate 8 GB"), 3, "out of memory"),
    ("disk full", OSError(errno.ENOSPC, "No space left on device", "/c/part.npy"), 3, "disk full at /c/part.npy"),
    ("permission denied", PermissionError(errno.EACCES, "Permission denied", "/c"), 3, "permission denied at /c"),
    ("read-only file system", OSError(errno.EROFS, "Read-only file system", "/c"), 3, "read-only file system"),
    ("any other I/O error", OSError(errno.EIO, "Input/output error"), 3, "I/O error"),
]


@pytest.fixture
def base_args(senteval_root, tiny_bert, tmp_path):
    """A small real run (avg on the fixture STS-B); ``gold`` in a case's files rewrites its first score."""
    root = tmp_path / "se"
    shutil.copytree(senteval_root, root)
    return ["--methods", "avg", "--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(root),
            "--backbone", str(tiny_bert), "--bootstrap", "0", "--no-plots"]


def prepare(tmp_path, files, args):
    """Write a case's files. Pseudo-files edit the SentEval fixture: ``gold`` (the first STS-B test
    pair's score), ``gold_all`` (every STS-B test score), ``subset_gold`` (``SUBSET=score``: every
    score of an STS12 subset), ``subset_rows`` (``SUBSET=n``, ``*`` for all: keep n pairs) and
    ``stsb_test_rows`` (keep n pairs of sts-test.csv)."""
    sts12, stsb = tmp_path / "se" / "STS" / "STS12-en-test", tmp_path / "se" / "STS" / "STSBenchmark" / "sts-test.csv"
    for name, data in files.items():
        text = data.decode() if name in ("gold", "gold_all", "subset_gold", "subset_rows", "stsb_test_rows") else ""
        if name in ("gold", "gold_all"):
            lines = stsb.read_text().splitlines()
            for i in range(len(lines) if name == "gold_all" else 1):
                fields = lines[i].split("\t")
                fields[4] = text
                lines[i] = "\t".join(fields)
            stsb.write_text("\n".join(lines) + "\n")
        elif name == "subset_gold":
            subset, _, score = text.partition("=")
            gold = sts12 / f"STS.gs.{subset}.txt"
            gold.write_text("".join(f"{score}\n" for _ in gold.read_text().splitlines()))
        elif name == "subset_rows":
            subset, _, n = text.partition("=")
            for path in sorted(sts12.glob(f"STS.*.{subset}.txt")):
                kept = path.read_text().splitlines()[:int(n)]
                path.write_text("".join(f"{line}\n" for line in kept))  # 0 rows: a 0-byte file
        elif name == "stsb_test_rows":
            stsb.write_text("".join(f"{line}\n" for line in stsb.read_text().splitlines()[:int(text)]))
        else:
            (tmp_path / name).write_bytes(data)
    if TOML in files:
        args = [*args, "--config", str(tmp_path / TOML)]
    return [a.replace("{tmp}", str(tmp_path)) for a in args]


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def nothing_computed(tmp_path) -> bool:
    return not list(tmp_path.glob("cache/vectors/*/part-*.npy")) and not list(tmp_path.glob("out/runs/*.json"))


@pytest.mark.parametrize(("case", "files", "args", "code", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_and_environment_cases(case, files, args, code, message, bench, base_args, tmp_path):
    got, _out, err = bench(*base_args, *prepare(tmp_path, files, args))
    assert got == code, err
    assert message.replace("{tmp}", str(tmp_path)) in one_error_line(err)
    assert nothing_computed(tmp_path)  # every case is seen before the first sentence is encoded


@pytest.mark.parametrize(("case", "error", "code", "message"), INJECTED, ids=[c[0] for c in INJECTED])
def test_environment_failures_are_one_line(case, error, code, message, bench, base_args, monkeypatch):
    import harness.runner.execution.run as scheduler

    def fail(plan, ctx):
        raise error

    monkeypatch.setattr(scheduler, "encode_stage", fail)
    got, _out, err = bench(*base_args)
    assert got == code and message in one_error_line(err)


def test_a_bug_exits_4_with_its_traceback_and_debug_shows_any_traceback(bench, base_args, monkeypatch):
    import harness.runner.execution.run as scheduler

    def bug(plan, ctx):
        raise ValueError("an index went wrong")

    monkeypatch.setattr(scheduler, "encode_stage", bug)
    got, _out, err = bench(*base_args)
    assert got == 4 and "Traceback" in err and err.strip().splitlines()[-1].startswith("error: internal error")
    got, _out, err = bench(*base_args, "--max-length", "0", "--debug")
    assert got == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("error: --max-length 0")
    monkeypatch.setenv("STS_BENCH_DEBUG", "1")
    got, _out, err = bench(*base_args, "--max-length", "0")
    assert got == 2 and "Traceback" in err


def test_readme_batch_size_auto_in_a_config_file_works(bench, base_args, tmp_path):
    got, _out, err = bench(*base_args, *prepare(tmp_path, {TOML: b'batch_size = "auto"\n'}, []))
    assert got == 0, err


def test_gold_out_of_range_under_the_flag_warns_and_never_overwrites_the_clean_result(bench, base_args, tmp_path,
                                                                                      caplog):
    assert bench(*base_args)[0] == 0
    clean = {p.name for p in (tmp_path / "out" / "runs").glob("*.json")}
    got, _out, err = bench(*base_args, *prepare(tmp_path, {"gold": b"42.0"}, []), "--allow-gold-out-of-range")
    assert got == 0, err
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    gold = [w for w in warnings if "gold score 42 is outside" in w]
    # the other warning: the clean run's record is on other data now (its gold changed), left out of the tables
    assert len(gold) == 1 and "sts-test.csv:1:" in gold[0] and len(warnings) == 2
    assert "its data changed" in next(w for w in warnings if w not in gold)
    both = {p.name for p in (tmp_path / "out" / "runs").glob("*.json")}
    assert clean < both and len(both) == 2  # other data, other result file


def test_a_200_character_option_value_is_cut_in_the_file_name_and_kept_in_the_json(bench, base_args, tiny_st,
                                                                                   tmp_path):
    deep = tmp_path / ("m" * 90) / ("o" * 90) / "tiny-st"
    shutil.copytree(tiny_st, deep)
    got, _out, err = bench(*base_args, "--methods", "sbert", "--sbert-model", str(deep))
    assert got == 0, err
    (path,) = (tmp_path / "out" / "runs").glob("sbert*.json")
    record = json.loads(path.read_text())
    assert len(path.name) < 100 and record["method"]["label"] == f"sbert[model={deep}]"
