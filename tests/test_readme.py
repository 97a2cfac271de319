"""Every ``python run_bench.py`` command README shows runs and exits 0 — on fixtures where the data
or models are missing offline (a tiny sentence-transformers BERT, a SentEval-layout folder, a local
dask cluster), so README cannot promise a command that crashes. The embedded default itself, on
the real MiniLM and STS-B, runs in tests/test_real.py.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.runner.cli.commands import main as commands_main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# Fixture-sized settings for commands that would train for minutes on real data; the command's
# own flags are kept, these are added.
SPEED = {"--cost": ["--cross-encoder-model", "train", "--cross-encoder-epochs", "1", "--dse-top-k", "2",
                    "--cross-encoder-precision", "fp32", "--dse-precision", "fp32"]}


def readme_commands() -> list[str]:
    """``python run_bench.py ...`` and ``sts-bench ...`` lines of bash blocks (continuations joined,
    comments dropped) and inline code spans, in order, without repeats."""
    text = README.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("python run_bench.py", "sts-bench ")):
                found.append(" ".join(line.split()))
    found += [" ".join(span.split()) for span in re.findall(r"`(python run_bench\.py[^`]*)`", text)]
    return list(dict.fromkeys(found))


def test_readme_shows_the_commands_this_test_expects():
    commands = readme_commands()
    assert commands[0] == "python run_bench.py" and len(commands) >= 10
    assert any("--aggregation wmean" in c for c in commands) and any("--backend dask" in c for c in commands)


def write_my_pairs(folder: Path) -> Path:
    """README's ``my_pairs.tsv``: fixture pairs under the header sentence1, sentence2, label."""
    import numpy as np
    from fixtures import pairs

    rows = pairs(np.random.default_rng(7), 12)
    path = folder / "my_pairs.tsv"
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in rows),
                    encoding="utf-8")
    return path


def write_my_tasks(folder: Path) -> Path:
    """README's ``my_tasks.toml``, as README shows it (its ``[[task]]`` block), beside my_pairs.tsv."""
    text = README.read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if "[[task]]" in b)
    write_my_pairs(folder)
    path = folder / "my_tasks.toml"
    path.write_text(block, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def dask_address():
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c.scheduler_address


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_runs(command, bench, tiny_st, senteval_root, tmp_path, request, capsys):
    console_script = command.startswith("sts-bench ")
    argv = [a for a in shlex.split(command)[1 if console_script else 2:] if a != "..."]
    if argv[:1] == ["list"]:  # `sts-bench list [METHOD]` takes no run flags
        assert commands_main(argv) == 0 and capsys.readouterr().out.strip()
        return
    substitutes = {"bert-base-uncased": str(tiny_st), "~/SentEval/data/downstream": str(senteval_root),
                   "DIR": str(senteval_root),
                   "/shared/sts-cache": str(tmp_path / "cache"), "bench.toml": str(tmp_path / "bench.toml"),
                   "embeddings/": str(tmp_path / "embeddings")}
    if "tcp://HOST:8786" in argv:
        substitutes["tcp://HOST:8786"] = request.getfixturevalue("dask_address")
    if "~/mteb-data" in argv:  # MTEB's datasets, as local files (fixtures.write_hub)
        substitutes["~/mteb-data"] = str(request.getfixturevalue("hub_root"))
    # Files of this repo (a plugin file: examples/centered_avg.py:Centered) wherever pytest runs from.
    argv = [str(ROOT / a) if a.startswith("examples/") else substitutes.get(a, a) for a in argv]
    if any("my_pairs.tsv" in a or "my_tasks.toml" in a for a in argv):  # Tasks from files: fixture pairs
        argv = [a.replace("my_pairs.tsv", str(write_my_pairs(tmp_path))).replace(
            "my_tasks.toml", str(write_my_tasks(tmp_path))) for a in argv]
    (tmp_path / "bench.toml").write_text('methods = ["avg", "whitening"]\n\n[whitening]\nk = 16\n', encoding="utf-8")
    if "--backbone" not in argv:
        argv += ["--backbone", str(tiny_st)]
    if "--source" not in argv:
        argv += ["--source", "senteval", "--senteval-dir", str(senteval_root)]
    for flag, extra in SPEED.items():
        if flag in argv:
            argv += extra
    if "--baseline" in argv:  # the committed baseline is the real MiniLM's (tests/test_real.py gates on it); on
        # fixtures the gate compares against this very command's leaderboard, written first without --baseline
        at = argv.index("--baseline")
        first = [*argv[:at], *argv[at + 2:], "--output-dir", str(tmp_path / "base")]
        assert bench(*first)[0] == 0
        argv[at + 1] = str(tmp_path / "base" / "leaderboard.csv")
    if console_script:  # `sts-bench COMMAND ...`: the console script's entry point, with bench's folders
        code = commands_main([*argv, "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "out"),
                              "--no-progress"])
        out, err = capsys.readouterr()
    else:
        code, out, err = bench(*argv)
    assert code == 0, f"{command}\n{out}\n{err}"
    assert "Traceback" not in err
    if not {"--list", "--dry-run", "--history", "plan", "history"} & set(argv):  # those run no benchmark
        assert (tmp_path / "out" / "leaderboard.csv").is_file() and (tmp_path / "out" / "significance.csv").is_file()


def readme_python(heading: str) -> str:
    """The first ```python block after ``heading``."""
    text = README.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text[text.index(heading):], re.S)[0]


def test_the_encoder_example_runs(tiny_st, senteval_root, tmp_path, monkeypatch, capsys):
    """README's harness.evaluate example, on the fixtures: the tiny sentence-transformers BERT for the
    packaged MiniLM, the SentEval folder for the packaged STS-B, folders under tmp_path."""
    import harness

    code = readme_python("### Encoders from Python")
    assert 'resolve_backbone("minilm").path' in code and 'output_dir="my-eval"' in code
    code = code.replace('resolve_backbone("minilm").path', repr(str(tiny_st)))
    real = harness.evaluate

    def on_fixtures(encoder, **kwargs):
        kwargs["output_dir"] = tmp_path / kwargs["output_dir"]
        return real(encoder, **kwargs, backbone=str(tiny_st), source="senteval", senteval_dir=str(senteval_root),
                    cache_dir=str(tmp_path / "cache"), progress=False, plots=False)

    monkeypatch.setattr(harness, "evaluate", on_fixtures)
    space: dict = {}
    exec(compile(code, "README.md", "exec"), space)
    out = capsys.readouterr().out
    assert "st-minilm" in out and "avg" in out and "(24, 32)" in out  # the fixture's 12 STS-B test pairs
    # sentence-transformers' mean pooling of the tiny BERT is the harness's avg of it: equal scores.
    scores = space["outcome"].scores.set_index("method")["spearman"]
    assert scores["st-minilm"] == pytest.approx(scores["avg"], abs=1e-4)
    assert (tmp_path / "my-eval" / "leaderboard.csv").is_file()
    assert (tmp_path / "my-eval" / "embeddings" / "none" / "st-minilm" / "stsb" / "test" / "vectors.npy").is_file()
