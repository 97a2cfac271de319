from __future__ import annotations

import numpy as np
import pytest

from harness.core.encoding.backbone import resolve_backbone
from harness.core.encoding.pooling import View
from harness.core.encoding.provider import ViewProvider
from harness.core.encoding.settings import EncodeSettings
from harness.core.errors import UserError

SENTENCES = ["a man is playing guitar", "the dog", "two people are riding a horse in the park",
             "a cat is sleeping", "the dog"]


def hf_reference(folder, sentence: str, layer: int, pooling: str) -> np.ndarray:
    """The vector computed the plain way: one sentence, no padding, straight from transformers."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        out = model(**tok(sentence, return_tensors="pt"), output_hidden_states=True)
    if pooling == "pooler":
        return out.pooler_output[0].numpy()
    hidden = out.hidden_states[layer][0]
    return (hidden[0] if pooling == "cls" else hidden.mean(0)).numpy()


def test_resolution_reads_the_config_and_fingerprints_the_folder(tiny_bert, tmp_path):
    ref = resolve_backbone(str(tiny_bert), memo=tmp_path / "fingerprints.json")
    assert (ref.origin, ref.num_layers, ref.hidden_size) == ("local", 2, 32)
    assert len(ref.fingerprint) == 64 and not ref.is_sentence_transformer
    assert ref.layer_index(-1) == 2 and ref.layer_index(1) == 1 and ref.layer_index(0) == 0
    with pytest.raises(UserError, match="layer 5 is out of range"):
        ref.layer_index(5)


def test_missing_folder_and_unreachable_hub_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="no such directory"):
        resolve_backbone(str(tmp_path / "missing-model"))
    with pytest.raises(UserError, match=r"could not be fetched from the HuggingFace hub.*--backbone /path/to/model"):
        resolve_backbone("sts-bench-tests/no-such-model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"has no config\.json"):
        resolve_backbone(str(tmp_path / "empty"))


def test_an_unreachable_hub_is_asked_once_per_run(monkeypatch):
    """A paper preset resolves a missing hub model once per row; only the first asks the network
    (its rows share one HubFailures, papers/run.py). Outside a run nothing is remembered."""
    import huggingface_hub

    from harness.core.hub import HubFailures

    calls = []

    def unreachable(repo_id, **kwargs):
        calls.append(kwargs.get("local_files_only", False))
        raise OSError("network unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with HubFailures().current():
        for _ in range(3):
            with pytest.raises(UserError, match=r"could not be fetched .*\(network unreachable\)"):
                resolve_backbone("sts-bench-tests/asked-once")
        assert calls.count(False) == 1 and calls[:2] == [True, False]  # the local cache each time, the hub once
        with pytest.raises(UserError):
            resolve_backbone("sts-bench-tests/asked-once", revision="v2")  # another revision is asked anew
        assert calls.count(False) == 2
    with pytest.raises(UserError):  # another run (none here): asked again
        resolve_backbone("sts-bench-tests/asked-once")
    assert calls.count(False) == 3


def test_a_cached_hub_snapshot_resolves_offline_to_its_commit(tiny_bert, tmp_path, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for path in tiny_bert.iterdir():
        (snapshot / path.name).write_bytes(path.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    ref = resolve_backbone("org/tiny")
    assert (ref.origin, ref.fingerprint, ref.revision) == ("hub", commit, "main")


@pytest.mark.parametrize("impl", ["native", "transformers"])
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_one_forward_pass_serves_every_view_and_matches_plain_transformers(family, impl, tmp_path, request):
    tiny_bert = request.getfixturevalue(f"tiny_{family}")  # the checkpoint under test
    ref = resolve_backbone(str(tiny_bert))
    assert ref.native_ok
    provider = ViewProvider(ref, EncodeSettings(batch_size=2, progress=False, impl=impl), tmp_path)
    views = [View("cls", 2), View("mean", 2), View("mean", 1), View("mean", 0), View("pooler", 2)]
    provider.ensure(SENTENCES, views)
    assert provider.forward.sentences_forwarded == 4  # unique sentences, each once, for all views
    for view in views:
        got = provider.get(SENTENCES, view)
        assert got.dtype == np.float32 and got.shape == (5, 32)
        for i, sentence in enumerate(SENTENCES):
            # batched with padding, yet equal to the unpadded single-sentence computation
            np.testing.assert_allclose(got[i], hf_reference(tiny_bert, sentence, view.layer, view.pooling),
                                       atol=1e-5)
    warm = ViewProvider(ref, EncodeSettings(progress=False, impl=impl), tmp_path)
    warm.ensure(SENTENCES, views)
    assert warm.forwarded == 0 and warm._forward is None  # warm: the model is never even loaded


def test_cached_windows_are_skipped_and_a_window_with_anything_missing_is_encoded_whole(tiny_bert, tmp_path):
    ref = resolve_backbone(str(tiny_bert))
    one_per_window = ViewProvider(ref, EncodeSettings(window=1, progress=False), tmp_path / "a")
    one_per_window.ensure(SENTENCES[:2], [View("mean", 2)])
    one_per_window.ensure(SENTENCES, [View("mean", 2)])
    assert one_per_window.forwarded == 4  # 4 unique sentences, each encoded once
    whole = ViewProvider(ref, EncodeSettings(progress=False), tmp_path / "b")
    whole.ensure(SENTENCES[:2], [View("mean", 2)])
    whole.ensure(SENTENCES, [View("mean", 2)])
    assert whole.forwarded == 2 + 4  # the one window of the second job had 2 missing: all 4 ran again


def test_interrupted_encoding_keeps_finished_chunks(tiny_bert, tmp_path):
    ref = resolve_backbone(str(tiny_bert))
    many = [f"a man {w} the dog {i}" for i, w in enumerate(["is", "was", "are"] * 10)]
    provider = ViewProvider(ref, EncodeSettings(batch_size=4, window=8, progress=False), tmp_path)
    original = provider.forward.encode_windows

    def interrupted(windows, views):
        for number, chunk in enumerate(original(windows, views)):
            if number == 2:
                raise KeyboardInterrupt
            yield chunk

    provider.forward.encode_windows = interrupted
    with pytest.raises(KeyboardInterrupt):
        provider.ensure(many, [View("mean", 2)])
    resumed = ViewProvider(ref, EncodeSettings(batch_size=4, window=8, progress=False), tmp_path)
    assert len(resumed.store(View("mean", 2)).missing(many)) == len(many) - 16
    resumed.ensure(many, [View("mean", 2)])
    assert resumed.forward.sentences_forwarded == len(many) - 16


def test_bf16_autocast_stays_close_to_fp32(tiny_bert, tmp_path):
    ref = resolve_backbone(str(tiny_bert))
    fp32 = ViewProvider(ref, EncodeSettings(progress=False), tmp_path).get(SENTENCES, View("mean", 2))
    bf16 = ViewProvider(ref, EncodeSettings(dtype="bf16", progress=False), tmp_path).get(SENTENCES, View("mean", 2))
    cos = (fp32 * bf16).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(bf16, axis=1)
    assert cos.min() > 0.99 and not np.array_equal(fp32, bf16)


def test_native_tokenizer_matches_transformers_token_ids(tiny_bert):
    from transformers import AutoTokenizer

    from harness.core.encoding.native_bert import NativeTokenizer

    texts = [*SENTENCES, "Unknown WORDS, punctuation!  and   spaces", "a " * 100]
    ours = [ids for ids, _ in NativeTokenizer(tiny_bert, 16).encode(texts)]
    assert ours == AutoTokenizer.from_pretrained(tiny_bert)(texts, truncation=True, max_length=16)["input_ids"]


def test_native_impl_is_refused_for_checkpoints_it_does_not_implement(tiny_bert, tmp_path):
    folder = tmp_path / "electra-like"
    folder.mkdir()
    for path in tiny_bert.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    config = (folder / "config.json").read_text().replace('"model_type": "bert"', '"model_type": "electra"')
    (folder / "config.json").write_text(config)
    ref = resolve_backbone(str(folder))
    assert not ref.native_ok
    assert ViewProvider(ref, EncodeSettings(), tmp_path).impl == "transformers"
    with pytest.raises(UserError, match=r"--encoder-impl native: .* is not a plain BERT"):
        ViewProvider(ref, EncodeSettings(impl="native"), tmp_path)


def test_an_unreachable_hub_turns_on_offline_mode_for_the_rest_of_the_run(monkeypatch, caplog):
    """A failure to connect (not an answer of the hub) switches huggingface_hub and datasets to their
    offline mode, so later calls answer from the local caches at once instead of retrying."""
    import datasets.config
    import huggingface_hub.constants

    from harness.core.hub import once

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)

    def answered():
        raise ValueError("401: gated repository")

    with pytest.raises(UserError, match="gated"):
        once(("test", "gated"), answered, lambda err: f"refused ({err})")
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False  # the hub answered: still online

    def no_network():
        try:
            raise OSError("[Errno -2] Name or service not known")
        except OSError as dns:
            raise ConnectionError("could not reach the hub") from dns

    with pytest.raises(UserError, match="unreachable"):
        once(("test", "dns"), no_network, lambda err: "unreachable")
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True and datasets.config.HF_HUB_OFFLINE is True
    assert sum("hub is unreachable" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("impl", ["native", "transformers"])
def test_a_roberta_reads_as_many_tokens_as_its_positions_allow(tiny_roberta, tmp_path, impl):
    """RoBERTa's position table starts after its padding id (tiny RoBERTa: 66 rows, offset 1), so a
    long sentence is cut at 65 tokens, not at 66, which would index past the table."""
    ref = resolve_backbone(str(tiny_roberta))
    assert ref.max_positions == 65
    long, view = " ".join(["the quick brown fox"] * 30), View("mean", 2)  # ~120 tokens
    vectors = []
    for max_length in (512, 65):
        provider = ViewProvider(ref, EncodeSettings(max_length=max_length, progress=False, impl=impl),
                                tmp_path / str(max_length))
        provider.ensure([long], [view])
        vectors.append(provider.get([long], view))
    assert np.isfinite(vectors[0]).all()
    np.testing.assert_array_equal(vectors[0], vectors[1])  # 512 asked, 65 read
