"""Decoder LLM backbones: last-token pooling, prompts as protocol, PromptEOL, refusals.

Every vector is checked against an independent computation: the family's own tokenizer on the
(prompted) text alone and ``AutoModelForCausalLM(...).hidden_states[-1][0, -1]`` in fp32, one text
at a time, while the harness encodes sentences of different lengths batched together. The prompt
text and PromptEOL's sentence preparation are written out here again, from the authors' code,
rather than taken from the harness.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from fixtures import DECODER_FAMILIES, pairs

from harness.runner.execution.export import read_embeddings

PROMPTEOL_TEXT = 'This sentence : "{}" means in one word:"'
DELTAS: dict[str, float] = {}  # family/method → max |Δ|, printed by the last test for the closing note


def _prepared(sentence: str) -> str:
    """kongds/scaling_sentemb evaluation.py's batcher, step by step, on what SentEval hands it: the
    sentence's tokens (``str.split()``) joined with one space."""
    sentence = " ".join(sentence.split())
    if len(sentence) > 0 and sentence[-1] not in ".?\"'":
        sentence += "."
    sentence = sentence.replace('"', "'")
    if len(sentence) > 0 and sentence[-1] == "?":
        sentence = sentence[:-1] + "."
    return sentence


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory) -> Path:
    """A TSV task whose sentences have 1 to ~12 words (batched together), some ending in '?'."""
    rng = np.random.default_rng(7)
    rows = pairs(rng, 30)
    rows += [("dog ?", "a man is playing the guitar in the park with two dogs ?", 1.0), ("cat", "red car", 0.0)]
    path = tmp_path_factory.mktemp("decoder-task") / "pairs.tsv"
    path.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in rows), encoding="utf-8")
    return path


def _independent(folder: Path, texts: list[str]) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")
            out.append(model(**ids, output_hidden_states=True).hidden_states[-1][0, -1].numpy())
    return np.stack(out)


def _export(root: Path, backbone: Path, label: str) -> tuple[list[str], np.ndarray]:
    from harness.runner.execution.export import read_embeddings

    folders = [p for p in (root / backbone.name).iterdir() if p.name == label or p.name.startswith(label)]
    assert len(folders) == 1, [p.name for p in (root / backbone.name).iterdir()]
    task = next(folders[0].iterdir())
    read = read_embeddings(task / "test")
    return read.sentences, read.vectors


@pytest.mark.parametrize("family", DECODER_FAMILIES)
def test_last_and_prompteol_equal_the_model_read_one_text_at_a_time(family, bench, tiny_decoders, pairs_file,
                                                                     tmp_path):
    folder = tiny_decoders[family]
    code, _out, err = bench("--backbone", str(folder), "--methods", "last", "prompteol", "--tasks",
                           f"file:{pairs_file}", "--export-embeddings", str(tmp_path / "vectors"))
    assert code == 0, err
    sentences, last = _export(tmp_path / "vectors", folder, "last")
    assert len({len(s.split()) for s in sentences}) > 5  # lengths mixed in the harness's batches
    expected = _independent(folder, sentences)
    DELTAS[f"{family} last"] = float(np.abs(last - expected).max())
    np.testing.assert_allclose(last, expected, atol=1e-4, rtol=0)
    sentences, prompted = _export(tmp_path / "vectors", folder, "prompteol")
    expected = _independent(folder, [PROMPTEOL_TEXT.format(_prepared(s)) for s in sentences])
    DELTAS[f"{family} prompteol"] = float(np.abs(prompted - expected).max())
    np.testing.assert_allclose(prompted, expected, atol=1e-4, rtol=0)
    assert not np.allclose(prompted, last, atol=1e-3)  # the prompt changed what the model read
    record = _record(tmp_path / "out", "prompteol")
    assert record["backbone"]["causal"] is True and record["backbone"]["weights"] == "fp32"
    assert record["protocol"]["prompt"] == ("'This sentence : \"{sentence}\" means in one word:\"' "
                                            "(sentence rule: prompteol)")


def _record(out: Path, label: str) -> dict:
    for path in sorted((out / "runs").rglob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["method"]["label"] == label:
            return record
    raise AssertionError(f"no record of {label} under {out}")


def _summary_encoded(text: str) -> int:
    found = re.search(r"backbone passes (\d+) sentence\(s\) encoded", text)
    assert found, text[-2000:]
    return int(found.group(1))


def test_a_prompt_is_part_of_the_view_its_cache_key_record_and_header(bench, tiny_decoders, pairs_file, tmp_path):
    folder = tiny_decoders["opt"]
    common = ["--backbone", str(folder), "--tasks", f"file:{pairs_file}", "--methods", "last"]
    code, out, err = bench(*common, "--set", "last.prompt=query: {sentence}", "--export-embeddings",
                           str(tmp_path / "v1"))
    assert code == 0, err
    label = "last[prompt=query: {sentence}]"
    sentences, vectors = _export(tmp_path / "v1", folder, "last[prompt=query")
    np.testing.assert_allclose(vectors, _independent(folder, [f"query: {s}" for s in sentences]), atol=1e-4, rtol=0)
    unique = len(sentences)
    assert _summary_encoded(err + out) == unique
    record = _record(tmp_path / "out", label)
    assert record["protocol"]["prompt"] == "'query: {sentence}'"
    assert record["method"]["spec"]["params"]["prompt"] == "query: {sentence}"
    board = (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    assert f"Inputs: {label} ({folder}): prompt 'query: {{sentence}}'" in board
    with open(tmp_path / "out" / "scores.csv", encoding="utf-8") as handle:
        assert "'query: {sentence}'" in handle.read()
    import html

    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    shown = html.unescape(page)  # whichever entity the escaper picks for the quotes
    assert "Inputs: last[prompt=query: {sentence}]" in page and "'query: {sentence}'" in shown
    assert "'query: {sentence}'" not in page  # the quotes themselves are escaped in the page
    code, out, err = bench(*common, "--set", "last.prompt=query: {sentence}")  # warm: nothing encoded
    assert code == 0 and _summary_encoded(err + out) == 0, err
    code, out, err = bench(*common, "--set", "last.prompt=passage: ")  # another prompt: encoded again
    assert code == 0 and _summary_encoded(err + out) == unique, err
    code, out, err = bench(*common)  # no prompt: a view of its own as well
    assert code == 0 and _summary_encoded(err + out) == unique, err


def test_per_side_prompts_read_each_side_under_its_own(bench, tiny_decoders, tmp_path):
    folder = tiny_decoders["qwen2"]
    task = tmp_path / "sides.tsv"  # no sentence on both sides, so each export row has one side's prompt
    rows = [(" ".join(a), " ".join(b), float(i % 5)) for i, (a, b) in enumerate(
        [(["a", "man"] * (1 + i % 3), ["the", "dog", "is"] + ["red"] * i) for i in range(8)])]
    task.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a} {i}\t{b}\t{g}\n" for i, (a, b, g) in
                                                          enumerate(rows)), encoding="utf-8")
    code, _, err = bench("--backbone", str(folder), "--tasks", f"file:{task}", "--methods", "last", "--set",
                         "last.prompt=query: ", "--set", "last.prompt2=passage: {sentence}", "--export-embeddings",
                         str(tmp_path / "v"))
    assert code == 0, err
    sentences, vectors = _export(tmp_path / "v", folder, "last[")
    first = [s for s in sentences if s.startswith("a man")]
    texts = [f"query: {s}" if s in first else f"passage: {s}" for s in sentences]
    np.testing.assert_allclose(vectors, _independent(folder, texts), atol=1e-4, rtol=0)
    record = _record(tmp_path / "out", "last[prompt=query: ,prompt2=passage: {sentence}]")
    assert record["protocol"]["prompt"] == "sentence 1: 'query: {sentence}' · sentence 2: 'passage: {sentence}'"


def _task_file(folder: Path, name: str, seed: int, marks: tuple[str, str]) -> Path:
    """A pairs file whose sentences carry their task's and side's mark (no sentence in two tasks or
    on both sides of an asymmetric one, so each export row is one (task, side)'s vector)."""
    rows = pairs(np.random.default_rng(seed), 10)
    path = folder / f"{name}.tsv"
    path.write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"{a} {marks[0]}{i}\t{b} {marks[1]}{i}\t{g}\n" for i, (a, b, g) in enumerate(rows)), encoding="utf-8")
    return path


PER_TASK = """# MTEB's model_prompts keys: a task, a task-side, a kind
sym = "Retrieve semantically similar text: {sentence}"
asym-query = "Question: "
asym-document = "Passage: {sentence}"
pairclass = "never read: no pairclass task in the run"
"""


def test_per_task_and_per_side_prompts_reach_the_tokenizer_and_the_record(bench, tiny_decoders, tmp_path):
    """Issue 41: each task reads its own entry (a side each on an asymmetric task), a task without
    one reads the method's own prompt, a second run encodes nothing, and no task's prompt is run on
    another task's sentences."""
    folder = tiny_decoders["qwen2"]
    (tmp_path / "prompts.toml").write_text(PER_TASK, encoding="utf-8")
    tasks = ["--tasks", f"file:{_task_file(tmp_path, 'sym', 1, ('s', 's'))}",
             f"file:{_task_file(tmp_path, 'asym', 2, ('q', 'd'))}?sides=query,document",
             f"file:{_task_file(tmp_path, 'plain', 3, ('p', 'p'))}"]
    common = ["--backbone", str(folder), *tasks, "--methods", "last", "prompteol", "--set", "last.prompt=Default: ",
              "--set", f"last.task_prompts=@{tmp_path / 'prompts.toml'}", "--set",
              f"prompteol.task_prompts=@{tmp_path / 'prompts.toml'}"]
    code, out, err = bench(*common, "--export-embeddings", str(tmp_path / "v"))
    assert code == 0, err
    entries = {"sym": ("Retrieve semantically similar text: {}",) * 2, "asym": ("Question: {}", "Passage: {}")}
    for method, fallback, prepare in (("last", "Default: {}", str), ("prompteol", PROMPTEOL_TEXT, _prepared)):
        label = next(p.name for p in (tmp_path / "v" / folder.name).iterdir() if p.name.startswith(f"{method}["))
        for task in ("sym", "asym", "plain"):
            read = read_embeddings(tmp_path / "v" / folder.name / label / task / "test")
            first, second = entries.get(task, (fallback, fallback))
            texts = [(first if re.search(r" [sqp]\d+$", s) else second).format(prepare(s)) for s in read.sentences]
            np.testing.assert_allclose(read.vectors, _independent(folder, texts), atol=1e-4, rtol=0,
                                       err_msg=f"{method} on {task}")
    # Each task's sentences under its own prompts only (both sides' on the asymmetric task, as prompt2
    # does): 2 methods × (sym 20 + asym 20 × 2 + plain 20), not each of 4 prompts on all 60 sentences
    assert _summary_encoded(err + out) == 2 * 80
    protocol = {(r["method"]["spec"]["name"], r["task"]["name"]): r["protocol"]["prompt"]
                for r in map(lambda p: json.loads(p.read_text(encoding="utf-8")),
                             sorted((tmp_path / "out" / "runs").rglob("*.json")))}
    assert protocol["last", "sym"] == "'Retrieve semantically similar text: {sentence}' (task_prompts: sym)"
    assert protocol["last", "asym"] == ("sentence 1: 'Question: {sentence}' · sentence 2: 'Passage: {sentence}' "
                                        "(task_prompts: asym-query, asym-document)")
    assert protocol["last", "plain"] == "'Default: {sentence}'"
    assert protocol["prompteol", "plain"] == ("'This sentence : \"{sentence}\" means in one word:\"' "
                                              "(sentence rule: prompteol)")
    board = (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    assert "'Retrieve semantically similar text: {sentence}' (task_prompts: sym) on sym;" in board
    code, out, err = bench(*common)  # warm: nothing encoded
    assert code == 0 and _summary_encoded(err + out) == 0, err
    (tmp_path / "prompts.toml").write_text(PER_TASK.replace("Question: ", "Query: "), encoding="utf-8")
    code, out, err = bench(*common, "--dry-run")  # the plan says which views are read on some tasks only
    assert code == 0 and "'Query: {sentence}' (20 sentences: per-task prompt)" in out + err, out + err
    (tmp_path / "prompts.toml").write_text(PER_TASK.replace("Question: ", "Query: "), encoding="utf-8")
    code, out, err = bench(*common)  # one entry changed: its task alone is encoded again under it, per method
    assert code == 0 and _summary_encoded(err + out) == 2 * 20, err


def test_per_task_prompts_are_refused_where_they_cannot_apply(bench, tiny_decoders, pairs_file, tmp_path, caplog):
    folder = tiny_decoders["opt"]
    common = ["--backbone", str(folder), "--tasks", f"file:{pairs_file}"]
    (tmp_path / "nested.toml").write_text('[qnli]\nquery = "q: "\n', encoding="utf-8")
    code, _, err = bench(*common, "--methods", "last", "--set", f"last.task_prompts=@{tmp_path / 'nested.toml'}")
    assert code == 2 and "'qnli-query' or 'qnli-document', MTEB's spelling" in err, err
    code, _, err = bench(*common, "--methods", "last", "--set", "last.task_prompts=sts=q: ")
    assert code == 2 and "@FILE" in err, err
    (tmp_path / "p.toml").write_text('sts = "q: "\n', encoding="utf-8")
    code, _, err = bench(*common, "--methods", "whitening", "--set", f"whitening.task_prompts=@{tmp_path / 'p.toml'}")
    assert code == 2 and "unknown option 'task_prompts' for method whitening" in err, err
    (tmp_path / "set.toml").write_text('a = "a: "\nb = "b: "\n', encoding="utf-8")
    code, _, err = bench(*common, "--methods", "last", "--set", f"last.prompt=@{tmp_path / 'set.toml'}", "--set",
                         f"last.task_prompts=@{tmp_path / 'p.toml'}")
    assert code == 2 and "task_prompts and a prompt set (prompt=@FILE) both choose" in err, err
    (tmp_path / "typo.toml").write_text(f'{pairs_file.stem}x = "q: "\nquery = "q: "\n', encoding="utf-8")
    code, _, err = bench(*common, "--methods", "last", "--set", f"last.task_prompts=@{tmp_path / 'typo.toml'}")
    assert code == 0, err
    said = caplog.text  # warnings go through logging ("WARNING: ..." on the console)
    assert f"'{pairs_file.stem}x' names no task, kind or side of this run (did you mean '{pairs_file.stem}'?)" in said
    assert "'query' is a side entry and pairs has no sides" in said


def test_mean_over_the_sentence_own_tokens_leaves_the_prompt_out(bench, tiny_decoders, pairs_file, tmp_path):
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = tiny_decoders["llama"]
    code, _, err = bench("--backbone", str(folder), "--tasks", f"file:{pairs_file}", "--methods", "avg-sentence",
                         "--set", "avg-sentence.prompt=Instruct: Retrieve similar text\nQuery: ",
                         "--export-embeddings", str(tmp_path / "v"))
    assert code == 0, err
    sentences, vectors = _export(tmp_path / "v", folder, "avg-sentence[")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()
    prefix = "Instruct: Retrieve similar text\nQuery: "
    for sentence, vector in zip(sentences[:6], vectors[:6]):
        encoded = tokenizer(prefix + sentence, return_offsets_mapping=True, return_tensors="pt")
        offsets = encoded.pop("offset_mapping")[0].tolist()
        own = [i for i, (start, end) in enumerate(offsets) if end > start and start >= len(prefix)]
        assert own and own[0] > 1  # the <s> and the prefix's tokens come first and are left out
        with torch.no_grad():
            states = model(**encoded, output_hidden_states=True).hidden_states[-1][0]
        np.testing.assert_allclose(vector, states[own].mean(dim=0).numpy(), atol=1e-5)


def test_cls_on_a_decoder_is_refused_before_encoding(bench, tiny_decoders, pairs_file):
    code, out, err = bench("--backbone", str(tiny_decoders["gpt2"]), "--tasks", f"file:{pairs_file}",
                           "--methods", "avg", "cls")
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "causal" in lines[0] and "--methods last" in lines[0], err
    assert "encode:" not in err + out and "Traceback" not in err
    code, _, err = bench("--backbone", str(tiny_decoders["gpt2"]), "--tasks", f"file:{pairs_file}",
                         "--methods", "whitening", "--set", "whitening.view=cls")
    assert code == 2 and "causal" in err


def test_whitening_over_the_last_view_shares_the_forward_pass(bench, tiny_decoders, pairs_file, tmp_path):
    folder = tiny_decoders["opt"]
    code, out, err = bench("--backbone", str(folder), "--tasks", f"file:{pairs_file}", "--methods", "last",
                           "whitening", "prompteol", "sn", "--set", "whitening.view=last", "--set", "sn.view=prompteol",
                           "--export-embeddings", str(tmp_path / "v"))
    assert code == 0, err
    sentences, last = _export(tmp_path / "v", folder, "last")
    # two views read (no prompt; PromptEOL's), so two passes of each unique sentence, not four
    assert _summary_encoded(err + out) == 2 * len(sentences)
    _, white = _export(tmp_path / "v", folder, "whitening[")
    x = last.astype(np.float64)  # the fit set is the task's sentences (target): whiten them independently
    centered = x - x.mean(axis=0)
    values, vectors = np.linalg.eigh(centered.T @ centered / (len(x) - 1))
    keep = values > values.max() * 1e-10
    expected = centered @ (vectors[:, keep] / np.sqrt(values[keep]))
    cosine = (white / np.linalg.norm(white, axis=1, keepdims=True)) @ (white / np.linalg.norm(white, axis=1,
                                                                                              keepdims=True)).T
    cosine_expected = (expected / np.linalg.norm(expected, axis=1, keepdims=True)) @ (
        expected / np.linalg.norm(expected, axis=1, keepdims=True)).T
    np.testing.assert_allclose(cosine, cosine_expected, atol=1e-3)  # columns' signs are arbitrary; cosines are not


def test_a_decoder_under_bf16_loads_its_weights_in_bf16_and_says_so(bench, tiny_decoders, pairs_file, tmp_path):
    folder = tiny_decoders["qwen2"]
    code, _, err = bench("--backbone", str(folder), "--tasks", f"file:{pairs_file}", "--methods", "last",
                         "--dtype", "bf16", "--export-embeddings", str(tmp_path / "v"))
    assert code == 0, err
    record = _record(tmp_path / "out", "last")
    assert record["backbone"]["weights"] == "bf16" and record["protocol"]["dtype"] == "bf16"
    assert "weights bf16" in (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    sentences, vectors = _export(tmp_path / "v", folder, "last")
    reference = _independent(folder, sentences)
    assert np.abs(vectors - reference).max() < 0.1  # bf16 rounding, not another computation


def test_a_model_too_large_for_memory_fails_in_one_line_before_loading(bench, tiny_decoders, pairs_file,
                                                                         monkeypatch):
    from harness.core import machine

    monkeypatch.setattr(machine, "available_bytes", lambda device: 1000)
    code, _out, err = bench("--backbone", str(tiny_decoders["llama"]), "--tasks", f"file:{pairs_file}",
                           "--methods", "last")
    assert code == 3, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "GiB" in lines[0] and "available" in lines[0], err
    assert "Traceback" not in err


def test_weights_fit_check_counts_the_safetensors_parameters(tiny_decoders):
    import torch
    from transformers import AutoModel

    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.memory import check_weights_fit, weights_bytes
    from harness.core.errors import ResourceError

    ref = resolve_backbone(str(tiny_decoders["gpt2"]))
    count = sum(p.numel() for p in AutoModel.from_pretrained(str(tiny_decoders["gpt2"])).parameters())
    assert weights_bytes(ref, "fp32") == 4 * count and weights_bytes(ref, "bf16") == 2 * count
    check_weights_fit(ref, "fp32", "cpu", available=int(4 * count * 1.3))
    with pytest.raises(ResourceError, match="bf16 halves it"):
        check_weights_fit(ref, "fp32", "cpu", available=4 * count)
    del torch


def test_a_sentence_vector_is_bit_identical_whatever_its_batch_mates(tiny_decoders):
    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.forward import ForwardPass
    from harness.core.encoding.pooling import View
    from harness.core.encoding.prompts import PROMPTEOL
    from harness.core.encoding.settings import EncodeSettings

    ref = resolve_backbone(str(tiny_decoders["qwen2"]))
    texts = ["a man is playing", "the dog", "two red cars are in the street with people", "a man is eating food"]
    views = [View("last", 2), View("last", 2, PROMPTEOL), View("mean", 1, PROMPTEOL)]
    forward = ForwardPass(ref, EncodeSettings(progress=False))
    together = forward.encode_all(texts, views)
    for i, text in enumerate(texts):
        alone = forward.encode_all([text], views)
        for view in views:
            assert alone[view][0].tobytes() == together[view][i].tobytes(), (text, str(view))


def test_last_token_pooling_reads_the_last_real_position_on_either_padding_side():
    import torch

    from harness.core.encoding.pooling import POOLINGS

    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    assert torch.equal(POOLINGS["last"](hidden, right), torch.stack([hidden[0, 1], hidden[1, 3]]))
    assert torch.equal(POOLINGS["last"](hidden, left), torch.stack([hidden[0, 3], hidden[1, 3]]))


def test_decoder_configs_resolve_with_their_layer_counts_and_as_causal(tiny_decoders, tiny_bert):
    from harness.core.encoding.backbone import resolve_backbone

    for family, folder in tiny_decoders.items():
        ref = resolve_backbone(str(folder))
        native = family in ("qwen2", "qwen3", "llama", "mistral")  # the native decoder families (issue 33)
        assert (ref.causal, ref.num_layers, ref.hidden_size, ref.native_ok) == (True, 2, 32, native), family
    assert resolve_backbone(str(tiny_bert)).causal is False


def test_prompteol_demonstration_goes_before_the_template_and_is_marked_selected(bench, tiny_decoders, pairs_file,
                                                                                 tmp_path):
    folder = tiny_decoders["opt"]
    code, _, err = bench("--backbone", str(folder), "--tasks", f"file:{pairs_file}", "--methods", "prompteol",
                         "--set", "prompteol.demo=A jockey riding a horse.=>Equestrian", "--set",
                         "prompteol.demo_selected_on=stsb dev", "--export-embeddings", str(tmp_path / "v"))
    assert code == 0, err
    sentences, vectors = _export(tmp_path / "v", folder, "prompteol[")
    demo = 'This sentence : "A jockey riding a horse." means in one word:"Equestrian".'
    expected = _independent(folder, [demo + PROMPTEOL_TEXT.format(_prepared(s)) for s in sentences])
    np.testing.assert_allclose(vectors, expected, atol=1e-4, rtol=0)
    record = _record(tmp_path / "out", "prompteol[demo=A jockey riding a horse.=>Equestrian]")
    assert record["protocol"]["selected_on"] == "stsb dev"
    board = (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    assert "| prompteol[demo=A jockey riding a horse.=>Equestrian] |" in board and "§" in board
    code, _, err = bench("--backbone", str(folder), "--tasks", f"file:{pairs_file}", "--methods", "prompteol",
                         "--set", "prompteol.demo=no word here")
    assert code == 2 and "SENTENCE=>WORD" in err


def _batcher(folder: Path, batch: list[list[str]]) -> np.ndarray:
    """PromptEOL's batcher (evaluation.py) re-written: SentEval's batch of token lists joined with
    ' ', the rule and the template (``.strip()``-ed), the tokenizer padding left with pad id 0, and
    the last layer's state at position -1 of every row."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.pad_token_id = 0
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    template = 'This_sentence_:_"*sent_0*"_means_in_one_word:"'.replace("_", " ")
    texts = []
    for s in (" ".join(tokens) for tokens in batch):
        if len(s) > 0 and s[-1] not in ".?\"'":
            s += "."
        s = s.replace('"', "'")
        if len(s) > 0 and s[-1] == "?":
            s = s[:-1] + "."
        texts.append(template.replace("*sent 0*", s).strip())
    # batch_encode_plus(texts, padding=True) as the batcher calls it (transformers 5 spells it __call__)
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        states = model(output_hidden_states=True, return_dict=True, **encoded).hidden_states
    return states[-1][:, -1, :].numpy()


def test_prompteol_on_the_packaged_stsb_equals_its_batcher_on_every_sentence(bench, tiny_decoders, tmp_path):
    """Issue 41: the packaged STS-B holds sentences with trailing whitespace that SentEval's loader
    (``text.split()``) drops; the authors' batcher never sees it, so neither may prompteol's rule
    (before, such a sentence got an extra '.': ``one... ."`` for ``one..."``)."""
    from harness.core.data.sources.packaged import stsb_dir

    folder = tiny_decoders["opt"]
    code, _, err = bench("--backbone", str(folder), "--methods", "prompteol", "--tasks", "stsb", "--source",
                         "packaged", "--export-embeddings", str(tmp_path / "v"), "--no-plots")
    assert code == 0, err
    sentences, vectors = _export(tmp_path / "v", folder, "prompteol")
    # Every sentence of the file's test split (the packaged file read here as SentEval's loader reads
    # its copy: fields 6 and 7 of each tab-separated line), and the ones with surrounding whitespace.
    lines = (stsb_dir() / "sts-test.csv").read_text(encoding="utf-8").splitlines()
    raw = {field for line in lines if line.strip() for field in line.split("\t")[5:7]}
    assert set(sentences) == raw and len(raw) == 2552
    padded = [s for s in sentences if s != s.strip()]
    assert len(padded) == 9, padded
    expected = np.concatenate([_batcher(folder, [s.split() for s in sentences[i:i + 16]])
                               for i in range(0, len(sentences), 16)])  # SentEval's batch size (test mode)
    DELTAS["opt prompteol packaged stsb"] = float(np.abs(vectors - expected).max())
    np.testing.assert_allclose(vectors, expected, atol=1e-5, rtol=0)
    at = [sentences.index(s) for s in padded]
    unprepared = _batcher(folder, [[s] for s in padded])  # the raw text, whitespace kept: what the old rule read
    assert np.abs(vectors[at] - unprepared).max() > 1e-2  # the test tells the two apart on this model


def test_zz_deltas_for_the_note(capsys):
    """Prints the independent-computation deltas the tests above measured (pytest -s shows them)."""
    with capsys.disabled():
        for name, delta in sorted(DELTAS.items()):
            print(f"max |Δ| {name}: {delta:.2e}")
    assert all(delta <= 1e-4 for delta in DELTAS.values())
