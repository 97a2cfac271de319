"""Every ``python run_bench.py`` and ``sts-bench`` command README and docs/*.md show runs and exits 0
— on fixtures where the data or models are missing offline (a tiny sentence-transformers BERT, a
SentEval-layout folder, a local dask cluster), so no doc can promise a command that crashes. The
embedded default itself, on the real MiniLM and STS-B, runs in tests/test_real.py. README stays a
front door (at most 250 lines), every link in README and docs/ resolves, and docs/REFERENCE.md is
the papers' data.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from harness.runner.cli.commands import main as commands_main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = (README, *sorted((ROOT / "docs").glob("*.md")))
# Fixture-sized settings for commands that would train for minutes on real data; the command's
# own flags are kept, these are added.
SPEED = {"--cost": ["--cross-encoder-model", "train", "--cross-encoder-epochs", "1", "--dse-top-k", "2",
                    "--cross-encoder-precision", "fp32", "--dse-precision", "fp32"]}


def readme_commands() -> list[str]:
    """``python run_bench.py ...`` and ``sts-bench ...`` lines of bash blocks (continuations joined,
    comments dropped) and inline code spans, README first, then docs/*.md, without repeats."""
    return list(dict.fromkeys(c for path in DOCS for c in commands_of(path.read_text(encoding="utf-8"))))


def commands_of(text: str) -> list[str]:
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith(("python run_bench.py", "sts-bench ")):
                found.append(" ".join(line.split()))
    found += [" ".join(span.split()) for span in re.findall(r"`(python run_bench\.py[^`]*)`", text)]
    return found


def test_readme_shows_the_commands_this_test_expects():
    readme, everywhere = commands_of(README.read_text(encoding="utf-8")), readme_commands()
    assert readme[0] == "python run_bench.py --methods flow whitening" and len(readme) >= 10
    assert any("--paper" in c for c in readme) and any("--baseline" in c for c in readme)
    assert "python run_bench.py --config examples/bench.toml --dtype bf16" in readme
    assert any("--aggregation wmean" in c for c in everywhere) and any("--backend dask" in c for c in everywhere)
    assert len(everywhere) > len(readme)  # the docs' commands run too


def test_readme_puts_its_commands_in_the_venv_the_two_commands_made():
    """After `make bench`, README's next command runs in .venv (issue 52: with the system Python it
    failed): it says to activate it, or to name its entry points, before its first run_bench.py
    command, and the first block of commands starts by activating it. run_bench.py under another
    Python says the same (tests/test_first_steps.py)."""
    text = README.read_text(encoding="utf-8")
    before = text[:text.index("## The command line")]  # the two commands, the leaderboard, From Python
    assert "make bench" in before and "`. .venv/bin/activate`" in before
    assert "`.venv/bin/python run_bench.py …`" in before and "`.venv/bin/sts-bench …`" in before
    first_block = re.findall(r"```bash\n(.*?)```", text[text.index("## The command line"):], re.S)[0]
    assert first_block.startswith(". .venv/bin/activate ")
    usage = (ROOT / "docs" / "USAGE.md").read_text(encoding="utf-8")  # USAGE's commands, the same way
    assert re.findall(r"```bash\n(.*?)```", usage, re.S)[0].startswith(". .venv/bin/activate ")


def test_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    head = "\n".join(text.splitlines()[:40])  # the first screen: the two commands and where results go
    assert "make bench" in head and "make test" in head and "results/index.html" in text
    linked = set(re.findall(r"\]\(docs/([\w.]+)", text))
    assert linked >= DOC_INDEX, f"README's index misses {DOC_INDEX - linked}"


# The docs README's index lists; the others are benchmark outputs the listed docs link to.
DOC_INDEX = {"USAGE.md", "METHODS.md", "COMPRESSION.md", "PROTOCOLS.md", "REFERENCE.md", "RESULTS.md",
             "BRING_YOUR_OWN.md",
             "PLUGINS.md", "MTEB.md", "CI_AND_HISTORY.md", "SCALING.md", "CACHE_AND_FAULTS.md", "PERFORMANCE.md",
             "ARCHITECTURE.md", "DEVELOPMENT.md"}


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors: a heading lower-cased, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_resolves(doc):
    text = doc.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.name}: {target}"
        if anchor and file.suffix == ".md":
            assert anchor in heading_anchors(file.read_text(encoding="utf-8")), f"{doc.name}: {target}"


def test_the_index_lists_every_doc_and_reference_is_the_papers_data():
    from harness.runner.presets.reference import reference_markdown

    assert {p.name for p in DOCS[1:]} >= DOC_INDEX
    assert (ROOT / "docs" / "REFERENCE.md").read_text(encoding="utf-8") == reference_markdown(), \
        "docs/REFERENCE.md is stale: python -m harness.runner.presets.reference > docs/REFERENCE.md"


def write_my_pairs(folder: Path) -> Path:
    """README's ``my_pairs.tsv``: fixture pairs under the header sentence1, sentence2, label."""
    import numpy as np
    from fixtures import pairs

    rows = pairs(np.random.default_rng(7), 12)
    path = folder / "my_pairs.tsv"
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in rows),
                    encoding="utf-8")
    return path


def write_labelled_pairs(folder: Path, senteval_root: Path) -> Path:
    """README's ``pairs_with_label.tsv``: the SentEval fixture's STS-B train and test pairs, class 1
    where gold >= 3, with a split column (thresholds are chosen on train)."""
    from harness.core.data.tasks import get_task, load_task

    task = load_task(get_task("stsb"), "senteval", ["train", "test"], locations={"senteval": str(senteval_root)})
    path = folder / "pairs_with_label.tsv"
    lines = ["sentence1\tsentence2\tlabel\tsplit"] + [
        f"{a}\t{b}\t{int(g >= 3)}\t{split}"
        for split in ("train", "test")
        for a, b, g in zip(task.splits[split].s1, task.splits[split].s2, task.splits[split].gold)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_my_tasks(folder: Path) -> Path:
    """The docs' ``my_tasks.toml``, as docs/BRING_YOUR_OWN.md shows it (its ``[[task]]`` block), beside
    my_pairs.tsv."""
    text = (ROOT / "docs" / "BRING_YOUR_OWN.md").read_text(encoding="utf-8")
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


# Every command of the docs through the CLI: a minute of CPU in all, the same code the CLI's own
# tests run; out of `make test-fast`, in `make test`.
@pytest.mark.heavy
@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_runs(command, bench, tiny_st, senteval_root, tmp_path, request, capsys):
    console_script = command.startswith("sts-bench ")
    argv = [a for a in shlex.split(command)[1 if console_script else 2:] if a != "..."]
    if "randproj" in command:  # the example plugin package, installed as the docs' pip line installs it
        request.getfixturevalue("example_plugin")
    if argv[:1] == ["list"]:  # `sts-bench list [METHOD]` takes no run flags
        assert commands_main(argv) == 0 and capsys.readouterr().out.strip()
        return
    substitutes = {"bert-base-uncased": str(tiny_st), "~/SentEval/data/downstream": str(senteval_root),
                   "DIR": str(senteval_root),
                   "/shared/sts-cache": str(tmp_path / "cache"), "bench.toml": str(tmp_path / "bench.toml"),
                   "embeddings/": str(tmp_path / "embeddings")}
    if "tcp://HOST:8786" in argv:
        substitutes["tcp://HOST:8786"] = request.getfixturevalue("dask_address")
    if "Qwen/Qwen2.5-0.5B" in argv or "facebook/opt-125m" in argv:  # decoders: tiny ones (fixtures.write_tiny_decoder)
        decoders = request.getfixturevalue("tiny_decoders")
        substitutes.update({"Qwen/Qwen2.5-0.5B": str(decoders["qwen2"]), "facebook/opt-125m": str(decoders["opt"])})
    if any(a.endswith("=~/llm2vec-mntp") for a in argv):  # a LoRA adapter: built with peft on the tiny Qwen2
        from test_bidirectional import write_adapter

        decoders = request.getfixturevalue("tiny_decoders")
        write_adapter(decoders["qwen2"], tmp_path / "llm2vec-mntp", causal_lm=True)
        substitutes["~/llm2vec-mntp"] = str(tmp_path / "llm2vec-mntp")
    if any(a.partition("=")[2].startswith("http") or a.startswith("http") for a in argv):  # an endpoint: a local
        # server of the docs' models (tests/endpoint_server.py)
        url = request.getfixturevalue("endpoint_url")
        substitutes.update({"https://api.openai.com/v1": url, "http://localhost:8000/v1": url})
    if "naver/splade-cocondenser-ensembledistil" in argv:  # SPLADE: a tiny BertForMaskedLM (fixtures.write_tiny_mlm)
        substitutes["naver/splade-cocondenser-ensembledistil"] = str(request.getfixturevalue("tiny_mlm"))
    if any(a.partition("=")[2] == "~/mteb-data" or a == "~/mteb-data" for a in argv):  # MTEB's datasets, as local
        # files (fixtures.write_hub)
        substitutes["~/mteb-data"] = str(request.getfixturevalue("hub_root"))
    # Files of this repo (a plugin file: examples/centered_avg.py:Centered) wherever pytest runs from.
    argv = [str(ROOT / a) if a.startswith("examples/") else substitutes.get(a, a) for a in argv]
    argv = [a.replace("=@examples/", f"=@{ROOT}/examples/") for a in argv]  # an option's @FILE: prompt, task_prompts
    argv = [f"{a.partition('=')[0]}={substitutes[a.partition('=')[2]]}" if a.partition("=")[2] in substitutes else a
            for a in argv]  # --data-dir senteval=~/SentEval/data/downstream
    if any(a.partition("=")[2] == "~/glue_data" or a == "~/glue_data" for a in argv):  # GLUE's folder: the
        # fixture's STS-B pairs, labelled (fixtures.write_labelled_glue); --glue-dir DIR or --data-dir glue=DIR
        from fixtures import write_labelled_glue

        substitutes["~/glue_data"] = str(write_labelled_glue(tmp_path / "glue", senteval_root)[0])
        argv = [substitutes.get(a, a) for a in argv]
        argv = [f"{a.partition('=')[0]}={substitutes[a.partition('=')[2]]}" if a.partition("=")[2] in substitutes
                else a for a in argv]
    if any("pairs_with_label.tsv" in a for a in argv):  # labelled pairs: STS-B's, gold >= 3 as class 1
        argv = [a.replace("pairs_with_label.tsv", str(write_labelled_pairs(tmp_path, senteval_root)))
                for a in argv]
    if any("my_pairs.tsv" in a or "my_tasks.toml" in a for a in argv):  # Tasks from files: fixture pairs
        argv = [a.replace("my_pairs.tsv", str(write_my_pairs(tmp_path))).replace(
            "my_tasks.toml", str(write_my_tasks(tmp_path))) for a in argv]
    (tmp_path / "bench.toml").write_text('methods = ["avg", "whitening"]\n\n[whitening]\nk = 16\n', encoding="utf-8")
    if argv[:1] == ["--paper"] and "minilm" in argv:  # a preset's rows on the tiny model: the packaged
        # MiniLM runs the presets in test_papers' `real` tests, on the packaged STS-B
        argv = [str(tiny_st) if a == "minilm" else a for a in argv]
    if "facebook/opt-125m" in command and "packaged" in argv:  # a tiny OPT per row: the fixture STS-B,
        # not the packaged one (8 rows × 2,552 sentences); test_papers runs this preset on the same
        argv = [a for a in argv if a not in ("--source", "packaged")]
    if "--backbone" not in argv:
        argv += ["--backbone", str(tiny_st)]
    if "--source" not in argv:
        argv += ["--source", "senteval", "--senteval-dir", str(senteval_root)]
    if "--dims" in argv:  # the fixture model has 32 dimensions: the command's cuts, an eighth as wide
        at = argv.index("--dims") + 1
        while at < len(argv) and not argv[at].startswith("--"):
            argv[at] = str(max(1, int(argv[at]) // 8)) if argv[at].isdigit() else argv[at]
            at += 1
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


def readme_python(heading: str, doc: Path = README) -> str:
    """The first ```python block after ``heading``."""
    text = doc.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text[text.index(heading):], re.S)[0]


@pytest.mark.parametrize(("doc", "heading"), [("README.md", "## From Python"),
                                              ("docs/BRING_YOUR_OWN.md", "### Encoders from Python")])
def test_the_encoder_example_runs(doc, heading, tiny_st, senteval_root, tmp_path, monkeypatch, capsys):
    """The harness.evaluate example of README and of docs/BRING_YOUR_OWN.md, on the fixtures: the tiny
    sentence-transformers BERT for the packaged MiniLM, the SentEval folder for the packaged STS-B,
    folders under tmp_path."""
    import harness

    code = readme_python(heading, ROOT / doc)
    assert 'resolve_backbone("minilm").path' in code and 'output_dir="my-eval"' in code
    code = code.replace('resolve_backbone("minilm").path', repr(str(tiny_st)))
    real = harness.evaluate

    def on_fixtures(encoder, **kwargs):
        kwargs["output_dir"] = tmp_path / kwargs["output_dir"]
        return real(encoder, **kwargs, backbone=str(tiny_st), source="senteval", senteval_dir=str(senteval_root),
                    cache_dir=str(tmp_path / "cache"), progress=False, plots=False)

    monkeypatch.setattr(harness, "evaluate", on_fixtures)
    space: dict = {}
    exec(compile(code, doc, "exec"), space)
    out = capsys.readouterr().out
    assert "st-minilm" in out and "avg" in out
    # sentence-transformers' mean pooling of the tiny BERT is the harness's avg of it: equal scores.
    scores = space["outcome"].scores.set_index("method")["spearman"]
    assert scores["st-minilm"] == pytest.approx(scores["avg"], abs=1e-4)
    assert (tmp_path / "my-eval" / "leaderboard.csv").is_file()
    assert (tmp_path / "my-eval" / "embeddings" / "none" / "st-minilm" / "stsb" / "test" / "vectors.npy").is_file()
