"""A sentence-transformers checkpoint's pipeline on the shared backbone pass (issue 44), and the
poolings it needs in the one pooling table (issue 43: SGPT's weighted mean, max, mean/√n).

Every check is against an independent computation: numpy for the poolings, sentence-transformers'
own ``Pooling`` module on the same tensors, and ``SentenceTransformer(folder).encode`` for the
``sbert`` method on tiny checkpoints built here by sentence-transformers itself (each pooling mode,
Dense layers with tanh and identity, Normalize, an older config's boolean keys, do_lower_case).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from fakes import FakeContext
from fixtures import WORDS, pairs

from harness.core.api import SpecRequest
from harness.core.encoding import Prompt, View
from harness.core.encoding.pooling import POOLINGS
from harness.core.errors import UserError
from methods import get_method
from methods.sbert import SBert, SBertOwnModel

RNG = np.random.default_rng(11)
SENTENCES = list(dict.fromkeys(s for a, b, _ in pairs(RNG, 12) for s in (a, b)))
# one sentence longer than the fixtures' max_seq_length (32): sentence-transformers cuts it there too
LONG = " ".join(WORDS[:20] + WORDS[:20])
PROBE = [*SENTENCES, LONG, "a"]


def st_modules():
    from sentence_transformers.sentence_transformer import modules

    return modules


def build_st(
    bert: Path,
    folder: Path,
    mode,
    dense: tuple[str, ...] = (),
    normalize: bool = False,
    include_prompt: bool = True,
    layer_norm: bool = False,
) -> Path:
    """A sentence-transformers checkpoint over the tiny BERT, saved by sentence-transformers:
    Transformer → Pooling(mode) → (LayerNorm) → a Dense per ``dense`` entry ('tanh' / 'identity')
    → Normalize."""
    from sentence_transformers import SentenceTransformer

    modules = st_modules()
    torch.manual_seed(len(folder.name))
    layers = [
        modules.Transformer(str(bert), max_seq_length=32),
        modules.Pooling(32, mode, include_prompt=include_prompt),
    ]
    width = 32 * (len(mode) if isinstance(mode, tuple) else 1)
    if layer_norm:
        layers.append(modules.LayerNorm(width))
    for activation in dense:
        function = torch.nn.Tanh() if activation == "tanh" else torch.nn.Identity()
        layers.append(modules.Dense(width, 12, activation_function=function))
        width = 12
    if normalize:
        layers.append(modules.Normalize())
    SentenceTransformer(modules=layers, device="cpu").save(str(folder))
    return folder


def st_encode(folder: Path, sentences, **kwargs) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    return model.encode(list(sentences), convert_to_numpy=True, batch_size=8, **kwargs)


def sbert(tmp_path: Path, folder: Path | str, **params):
    ctx = FakeContext(
        tmp_path / "cache",
        SpecRequest(backbone=str(folder), max_length=128, params={"sbert": params} if params else {}),
    )
    return get_method("sbert").build(ctx.request, ctx), ctx


# -- the pooling table ----------------------------------------------------------------------------


def padded(lengths, width, left=False):
    positions = np.arange(width)[None]
    n = np.array(lengths)[:, None]
    return ((positions >= width - n) if left else (positions < n)).astype(np.int64)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_weighted_mean_max_and_mean_sqrt_len_by_value(left):
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(4, 6, 3))
    lengths = [6, 2, 4, 1]
    mask = padded(lengths, 6, left)
    real = [hidden[i, 6 - n :] if left else hidden[i, :n] for i, n in enumerate(lengths)]
    # SGPT: the i-th real token weighs i (1..n), wherever the padding is
    expected = {
        "weightedmean": np.stack(
            [(r * np.arange(1, len(r) + 1)[:, None]).sum(0) / (len(r) * (len(r) + 1) / 2) for r in real]
        ),
        "max": np.stack([r.max(0) for r in real]),
        "mean_sqrt_len": np.stack([r.sum(0) / np.sqrt(len(r)) for r in real]),
    }
    h, m = torch.from_numpy(hidden), torch.from_numpy(mask)
    for name, value in expected.items():
        np.testing.assert_allclose(POOLINGS[name](h, m).numpy(), value, atol=1e-12, err_msg=name)
    # padding that holds the largest values never wins the max
    loud = h.clone()
    loud[m == 0] = 1e6
    np.testing.assert_allclose(POOLINGS["max"](loud, m).numpy(), expected["max"], atol=1e-12)
    np.testing.assert_allclose(POOLINGS["weightedmean"](loud, m).numpy(), expected["weightedmean"], atol=1e-12)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("weightedmean", "weightedmean"),
        ("max", "max"),
        ("mean_sqrt_len", "mean_sqrt_len_tokens"),
        ("mean", "mean"),
        ("last", "lasttoken"),
    ],
)
def test_the_poolings_equal_sentence_transformers_pooling_module(ours, theirs, left):
    pooling = st_modules().Pooling(5, theirs)
    hidden = torch.from_numpy(np.random.default_rng(1).normal(size=(3, 7, 5)).astype(np.float32))
    mask = torch.from_numpy(padded([7, 3, 5], 7, left))
    features = {"token_embeddings": hidden.clone(), "attention_mask": mask}
    want = pooling(features)["sentence_embedding"]
    np.testing.assert_allclose(POOLINGS[ours](hidden, mask).numpy(), want.numpy(), atol=1e-6)


def test_wmean_is_a_method_and_a_base_view(tiny_bert, tmp_path):
    from methods.pooling import BASE_VIEWS

    ctx = FakeContext(tmp_path / "cache", SpecRequest(backbone=str(tiny_bert), max_length=32))
    method = get_method("wmean").build(ctx.request, ctx)
    assert method.backbone_views() == [View("weightedmean", 2)] and "wmean" in BASE_VIEWS
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(str(tiny_bert)), AutoModel.from_pretrained(str(tiny_bert))
    expected = []
    for text in SENTENCES[:4]:
        with torch.no_grad():
            states = model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0].numpy()
        weights = np.arange(1, len(states) + 1)[:, None]
        expected.append((states * weights).sum(0) / weights.sum())
    np.testing.assert_allclose(method.encode(SENTENCES[:4]), np.stack(expected), atol=1e-5)
    whitening = get_method("whitening").build(
        SpecRequest(backbone=str(tiny_bert), max_length=32, params={"whitening": {"view": "wmean"}}), ctx
    )
    assert whitening.backbone_views() == [View("weightedmean", 2)]


# -- sbert: the checkpoint's pipeline on the shared pass ------------------------------------------

PIPELINES = {
    "mean": ("mean", (), True),
    "cls+tanh": ("cls", ("tanh",), False),
    "max": ("max", (), False),
    "mean_sqrt_len": ("mean_sqrt_len_tokens", ("identity",), False),
    "weightedmean+identity+tanh+normalize": ("weightedmean", ("identity", "tanh"), True),
    "lasttoken+normalize": ("lasttoken", (), True),
    "mean,max+tanh+normalize": (("mean", "max"), ("tanh",), True),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_sbert_equals_sentence_transformers_encode(tiny_bert, tmp_path, name):
    mode, dense, normalize = PIPELINES[name]
    folder = build_st(tiny_bert, tmp_path / "st", mode, dense, normalize)
    method, ctx = sbert(tmp_path, folder)
    assert type(method) is SBert  # the shared pass, not sentence-transformers
    got = method.encode(PROBE)
    np.testing.assert_allclose(got, st_encode(folder, PROBE), atol=1e-5, rtol=0)
    assert ctx.forwarded == 0 and method.spec.max_length == 32  # its own max_seq_length
    modes = mode if isinstance(mode, tuple) else (mode,)
    assert len(method.backbone_views()) == len(modes)
    post = method.spec.post or ""
    assert post.count("dense") == len(dense) and ("normalize" in post) == normalize
    if dense:  # the record names the Dense weights by digest: other weights, another spec
        assert re.search(r"dense 32→12 \w+ \(sha256 [0-9a-f]{12}\)", post) or "dense 64→12" in post


def test_an_older_checkpoints_boolean_pooling_keys(tiny_bert, tmp_path):
    folder = build_st(tiny_bert, tmp_path / "st", "mean", ("tanh",), True)
    config = folder / "1_Pooling" / "config.json"
    config.write_text(
        json.dumps(
            {
                "word_embedding_dimension": 32,
                "pooling_mode_cls_token": False,
                "pooling_mode_mean_tokens": False,
                "pooling_mode_max_tokens": True,
                "pooling_mode_mean_sqrt_len_tokens": False,
            }
        )
    )
    method, _ = sbert(tmp_path, folder)
    assert method.backbone_views()[0].pooling == "max"
    np.testing.assert_allclose(method.encode(PROBE), st_encode(folder, PROBE), atol=1e-5, rtol=0)


def test_do_lower_case_lowers_the_text_as_sentence_transformers_does(tiny_bert, tmp_path):
    from transformers import BertTokenizer

    cased = tmp_path / "cased-bert"
    shutil.copytree(tiny_bert, cased)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (cased / name).unlink(missing_ok=True)
    BertTokenizer(str(cased / "vocab.txt"), do_lower_case=False).save_pretrained(str(cased))
    folder = build_st(cased, tmp_path / "st", "mean")
    shouting = [s.title() for s in SENTENCES[:6]]
    plain, _ = sbert(tmp_path / "a", folder)
    as_saved = plain.encode(shouting)
    np.testing.assert_allclose(as_saved, st_encode(folder, shouting), atol=1e-5, rtol=0)
    settings = folder / "sentence_bert_config.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "do_lower_case": True}))
    lowered, _ = sbert(tmp_path / "b", folder)
    assert lowered.backbone_views()[0].prompt == Prompt("", "lower")
    got = lowered.encode(shouting)
    np.testing.assert_allclose(got, st_encode(folder, shouting), atol=1e-5, rtol=0)
    assert np.abs(got - as_saved).max() > 1e-3  # the cased tokenizer read [UNK]s before


def test_include_prompt_false_pools_every_token_without_a_prompt_and_the_sentence_under_one(tiny_bert, tmp_path):
    folder = build_st(tiny_bert, tmp_path / "st", "mean", include_prompt=False)
    method, ctx = sbert(tmp_path, folder)
    # sentence-transformers leaves a prompt out only when there is one: here every token is pooled
    np.testing.assert_allclose(method.encode(PROBE), st_encode(folder, PROBE), atol=1e-5, rtol=0)
    prompted, _ = sbert(tmp_path / "p", folder, prompt="query: ")
    (view,) = prompted.backbone_views()
    assert view == View("mean_sentence", 2, Prompt("query: "))
    avg_sentence = get_method("avg-sentence").build(
        SpecRequest(backbone=str(folder), max_length=32, params={"avg-sentence": {"prompt": "query: "}}), ctx
    )
    np.testing.assert_allclose(prompted.encode(SENTENCES), avg_sentence.encode(SENTENCES), atol=1e-6)
    max_folder = build_st(tiny_bert, tmp_path / "st-max", "max", include_prompt=False)
    refused, _ = sbert(tmp_path / "m", max_folder, prompt="query: ")
    with pytest.raises(UserError, match="include_prompt=False"):
        refused.backbone_views()


def test_a_module_the_harness_does_not_run_falls_back_to_sentence_transformers(tiny_bert, tmp_path):
    folder = build_st(tiny_bert, tmp_path / "st", "mean", ("tanh",), True, layer_norm=True)
    method, ctx = sbert(tmp_path, folder)
    assert type(method) is SBertOwnModel and method.backbone_views() == []
    assert method.spec.post == "sentence-transformers encode: module LayerNorm is not one the harness runs"
    assert "LayerNorm" in method.describe_encode(PROBE) and method.encoder_impl() == "sentence-transformers"
    np.testing.assert_allclose(method.encode(PROBE), st_encode(folder, PROBE), atol=1e-6, rtol=0)
    assert ctx.forwarded == len(PROBE)


def test_the_fallback_is_named_in_the_encode_line_and_the_record(bench, senteval_root, tiny_bert, tmp_path):
    folder = build_st(tiny_bert, tmp_path / "st", "mean", layer_norm=True)
    code, out, err = bench(
        "--methods",
        "sbert",
        "--tasks",
        "stsb",
        "--source",
        "senteval",
        "--senteval-dir",
        str(senteval_root),
        "--backbone",
        str(folder),
    )
    assert code == 0, err
    assert re.search(
        r"^encode: sbert \(own model\): 0 cached, \d+ to encode with sentence-transformers "
        r"\(module LayerNorm is not one the harness runs\)$",
        out + err,
        re.M,
    ), out + err
    (path,) = (tmp_path / "out" / "runs").glob("sbert__*.json")
    record = json.loads(path.read_text())
    why = "sentence-transformers encode: module LayerNorm is not one the harness runs"
    assert record["method"]["spec"]["post"] == why
    assert record["method"]["spec"]["pooling"] == "sentence-transformers"
    assert record["backbone"]["encoder_impl"] == "sentence-transformers"


def test_dense_weights_only_in_a_pickle_are_left_to_sentence_transformers(tiny_bert, tmp_path):
    from safetensors.torch import load_file

    folder = build_st(tiny_bert, tmp_path / "st", "mean", ("tanh",), True)
    weights = folder / "2_Dense" / "model.safetensors"
    torch.save(load_file(str(weights)), folder / "2_Dense" / "pytorch_model.bin")
    weights.unlink()
    method, _ = sbert(tmp_path, folder)
    assert type(method) is SBertOwnModel and "not in safetensors (a pickle)" in (method.spec.post or "")
    np.testing.assert_allclose(method.encode(PROBE), st_encode(folder, PROBE), atol=1e-6, rtol=0)


def test_damaged_dense_weights_are_one_error_line(tiny_bert, tmp_path):
    folder = build_st(tiny_bert, tmp_path / "st", "mean", ("tanh",), True)
    weights = folder / "2_Dense" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-40])
    with pytest.raises(UserError, match=r"holds no Dense weights of its config's shape \(12, 32\)"):
        sbert(tmp_path, folder)


def test_the_sentence_transformers_pipeline_option_and_the_shared_pass_agree(tiny_bert, tmp_path):
    folder = build_st(tiny_bert, tmp_path / "st", "weightedmean", ("tanh",), True)
    shared, _ = sbert(tmp_path / "a", folder)
    own, _ = sbert(tmp_path / "b", folder, pipeline="sentence-transformers")
    assert type(own) is SBertOwnModel and "sbert.pipeline=sentence-transformers" in (own.spec.post or "")
    np.testing.assert_allclose(shared.encode(PROBE), own.encode(PROBE), atol=1e-5, rtol=0)
    with pytest.raises(UserError, match="reads no prompt"):
        sbert(tmp_path / "c", folder, pipeline="sentence-transformers", prompt="query: ")


# -- one pass for two max_lengths -------------------------------------------------------------------


def test_a_longer_max_length_reads_the_shorter_pass_for_sentences_that_fit(tiny_bert, tmp_path):
    from dataclasses import replace

    from harness.core.encoding import ViewProvider
    from harness.core.encoding.settings import EncodeSettings

    settings = EncodeSettings(device="cpu", threads=1, progress=False)
    from harness.core.encoding.backbone import resolve_backbone

    ref = resolve_backbone(str(tiny_bert))
    short = ViewProvider(ref, replace(settings, max_length=8), tmp_path / "cache")
    long = ViewProvider(ref, replace(settings, max_length=32), tmp_path / "cache")
    alone = ViewProvider(ref, replace(settings, max_length=32), tmp_path / "alone")
    assert long.share_shorter(short)
    view = View("mean", 2)
    fits = long.fits_shorter(PROBE, Prompt.NONE)
    assert fits.any() and not fits.all()  # the fixture's sentences: some within 8 tokens, some not
    got = long.get(PROBE, view)
    np.testing.assert_array_equal(got, alone.get(PROBE, view))  # the same vectors as on its own
    assert short.forwarded == fits.sum() and long.forwarded == (~fits).sum()


def test_avg_and_sbert_share_one_backbone_pass(bench, senteval_root, tiny_st, tmp_path):
    """tiny-st's max_seq_length is 32 and the run's --max-length 64: two lengths, one pass."""
    from harness.core.data.tasks import TASKS, load_task

    code, out, err = bench(
        "--methods",
        "avg",
        "sbert",
        "--tasks",
        "stsb",
        "--source",
        "senteval",
        "--senteval-dir",
        str(senteval_root),
        "--backbone",
        str(tiny_st),
        "--max-length",
        "64",
    )
    assert code == 0, err
    unique = set(
        load_task(TASKS["stsb"], "senteval", ["test"], locations={"senteval": str(senteval_root)}).eval.sentences()
    )
    summary = re.search(
        r"backbone passes (\d+) sentence\(s\) encoded, (\d+) from cache; other encodes (\d+);", out + err
    )
    assert summary and summary.groups() == (str(len(unique)), "0", "0"), out + err
    (line,) = re.findall(r"^encode: .*$", out + err, re.M)  # one job: sbert's views joined avg's
    assert re.search(r"scored: (avg sbert|sbert avg)\)", line), line
    record = json.loads(next((tmp_path / "out" / "runs").glob("sbert__*.json")).read_text())
    spec = record["method"]["spec"]
    assert (spec["pooling"], spec["post"], spec["max_length"]) == ("mean", "normalize", 32)
    assert record["backbone"]["encoder_impl"] == "native"


@pytest.mark.real
def test_sbert_on_the_packaged_minilm_equals_sentence_transformers_encode(tmp_path):
    """All-MiniLM-L6-v2 (mean pooling, Normalize, max_seq_length 256) on STS-B test sentences, the
    longest among them, through the harness's pass and through sentence-transformers."""
    from harness.core.data.tasks import TASKS, load_task
    from harness.core.encoding.backbone import resolve_backbone

    sentences = sorted(set(load_task(TASKS["stsb"], "packaged", ["test"]).eval.sentences()), key=len)
    probe = sentences[:40] + sentences[-40:]
    method, _ = sbert(tmp_path, "minilm")
    assert type(method) is SBert and method.spec.max_length == 256 and method.spec.post == "normalize"
    folder = Path(resolve_backbone("minilm").path)
    np.testing.assert_allclose(method.encode(probe), st_encode(folder, probe), atol=1e-5, rtol=0)
