"""Builders for the offline fixtures the tests use: a tiny BERT (real HF files, made here), a
SentEval-layout data folder, and a local stand-in for MTEB's hub datasets."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

from harness.core import bootstrap
from harness.core.data.tasks import TASKS

WORDS = (
    "a man woman dog cat child is are was playing eating riding running sleeping guitar piano horse bike ball "
    "food grass street park house on in the with and red blue big small two three people car water tree sun"
).split()


def sentence(rng: np.random.Generator, base: list[str] | None = None, keep: int = 0) -> list[str]:
    """A random sentence from WORDS; with ``base``, its first ``keep`` words are reused."""
    words = list(base[:keep]) if base else []
    words += [str(w) for w in rng.choice(WORDS, size=int(rng.integers(3, 7)))]
    return words


def pairs(rng: np.random.Generator, n: int) -> list[tuple[str, str, float]]:
    """Pairs whose gold score (0-5) grows with the number of shared leading words."""
    out = []
    for _ in range(n):
        first = sentence(rng)
        keep = int(rng.integers(0, 6))
        second = sentence(rng, first, keep)
        out.append((" ".join(first), " ".join(second), float(min(keep, 5))))
    return out


def write_tiny_bert(folder: Path, seed: int = 0, with_pooler: bool = True) -> Path:
    """A 2-layer, 32-dim BERT with a word-level vocab, saved with save_pretrained."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "fox", "jumps", "quick", "brown"]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(str(folder))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=64)
    BertModel(config, add_pooling_layer=with_pooler).save_pretrained(str(folder))
    return folder


def write_tiny_mlm(bert_dir: Path, folder: Path, seed: int = 3) -> Path:
    """A 2-layer BertForMaskedLM (its MLM head saved: ``cls.predictions``) on the tiny BERT's
    vocabulary, the head's bias drawn below zero so that most words are inactive: sparse SPLADE
    vectors (methods/splade.py)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    _copy_tokenizer(bert_dir, folder)
    torch.manual_seed(seed)
    model = BertForMaskedLM(BertConfig.from_pretrained(bert_dir))
    with torch.no_grad():
        model.cls.predictions.bias.normal_(-0.15, 0.1)
    model.save_pretrained(str(folder))
    return folder


def _copy_tokenizer(bert_dir: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (bert_dir / name).is_file():
            (folder / name).write_bytes((bert_dir / name).read_bytes())


def write_tiny_roberta(bert_dir: Path, folder: Path, seed: int = 0) -> Path:
    """A 2-layer, 32-dim RoBERTa (positions from ``pad_token_id + 1``, one token type) with the tiny
    BERT's tokenizer files: what matters is that both encoders see the same token ids."""
    import torch
    from transformers import RobertaConfig, RobertaModel

    _copy_tokenizer(bert_dir, folder)
    vocab = (bert_dir / "vocab.txt").read_text(encoding="utf-8").split()
    torch.manual_seed(seed)
    config = RobertaConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=37, max_position_embeddings=66, pad_token_id=0, type_vocab_size=1)
    RobertaModel(config).save_pretrained(str(folder))
    return folder


def write_tiny_mpnet(bert_dir: Path, folder: Path, seed: int = 0) -> Path:
    """A 2-layer, 32-dim MPNet (relative position bias, positions from 2) with the tiny BERT's
    tokenizer files. Its words never map to id 1, which MPNet's embedding treats as padding."""
    import torch
    from transformers import MPNetConfig, MPNetModel

    _copy_tokenizer(bert_dir, folder)
    vocab = (bert_dir / "vocab.txt").read_text(encoding="utf-8").split()
    torch.manual_seed(seed)
    config = MPNetConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=37, max_position_embeddings=130, pad_token_id=1)
    model = MPNetModel(config)
    with torch.no_grad():  # the default init (std 0.02) leaves attention near uniform and the bias ~0
        model.encoder.relative_attention_bias.weight.normal_(0, 1.0)
        for layer in model.encoder.layer:
            layer.attention.attn.q.weight.normal_(0, 0.3)
            layer.attention.attn.k.weight.normal_(0, 0.3)
    model.save_pretrained(str(folder))
    return folder


# DeBERTa variants: v3's layout, and v2 options v3 does not use (absolute positions in the input,
# token types, a narrower embedding projected up, separate position projections, raw distances).
DEBERTA_VARIANTS = {
    "v3": {"relative_attention": True, "position_buckets": 8, "max_relative_positions": 128,
           "pos_att_type": ["p2c", "c2p"], "norm_rel_ebd": "layer_norm", "share_att_key": True,
           "position_biased_input": False, "type_vocab_size": 0},
    "v2-options": {"relative_attention": True, "position_buckets": -1, "max_relative_positions": 12,
                   "pos_att_type": "c2p|p2c", "norm_rel_ebd": "none", "share_att_key": False,
                   "position_biased_input": True, "type_vocab_size": 2, "embedding_size": 24},
    # no relative attention at all; the scale still counts pos_att_type's terms, as transformers does
    "absolute": {"relative_attention": False, "pos_att_type": ["p2c", "c2p"], "position_biased_input": True,
                 "type_vocab_size": 2},
}


def write_tiny_deberta(bert_dir: Path, folder: Path, variant: str = "v3", seed: int = 0) -> Path:
    """A 2-layer, 32-dim DeBERTa-v2 model of one of ``DEBERTA_VARIANTS`` with the tiny BERT's
    tokenizer files. ``v3`` uses 8 position buckets, so distances from 4 on are log-bucketed even
    in short test sentences."""
    import torch
    from transformers import DebertaV2Config, DebertaV2Model

    _copy_tokenizer(bert_dir, folder)
    vocab = (bert_dir / "vocab.txt").read_text(encoding="utf-8").split()
    torch.manual_seed(seed)
    config = DebertaV2Config(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=37, max_position_embeddings=130, pad_token_id=0,
                             **DEBERTA_VARIANTS[variant])
    model = DebertaV2Model(config)
    with torch.no_grad():  # the default init (std 0.02) leaves attention near uniform, position terms ~0
        if config.relative_attention:
            model.encoder.rel_embeddings.weight.normal_(0, 1.0)
        for layer in model.encoder.layer:
            for projection in ("query_proj", "key_proj", "pos_key_proj", "pos_query_proj"):
                if hasattr(layer.attention.self, projection):
                    getattr(layer.attention.self, projection).weight.normal_(0, 0.3)
    model.save_pretrained(str(folder))
    return folder


def write_sentence_transformer(bert_dir: Path, folder: Path) -> Path:
    """Wrap a tiny BERT as a sentence-transformers model (mean pooling + normalise)."""
    from sentence_transformers import SentenceTransformer, models

    modules = [models.Transformer(str(bert_dir), max_seq_length=32), models.Pooling(32, "mean"),
               models.Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def write_senteval(root: Path, seed: int = 0, per_subset: int = 6) -> Path:
    """SentEval's data/downstream layout with every STS year, STS-B and SICK; returns ``root``.

    STS15 gets one unscored pair (empty gold line) per subset, which loaders must drop.
    """
    rng = np.random.default_rng(seed)
    for spec in TASKS.values():
        place = spec.place("senteval")
        if place is None:
            continue
        folder = root / place["folder"]
        folder.mkdir(parents=True, exist_ok=True)
        layout = place.get("layout", "sts")
        if layout == "sts":
            for subset in place["subsets"]:
                rows = pairs(rng, per_subset)
                inputs = [f"{a}\t{b}" for a, b, _ in rows]
                golds = [f"{g:.2f}" for _, _, g in rows]
                if spec.name == "sts15":
                    inputs.append("an unscored pair\tthat must be dropped")
                    golds.append("")
                (folder / f"STS.input.{subset}.txt").write_text("\n".join(inputs) + "\n", encoding="utf-8")
                (folder / f"STS.gs.{subset}.txt").write_text("\n".join(golds) + "\n", encoding="utf-8")
        elif layout == "stsb":
            for split in ("train", "dev", "test"):
                lines = [f"main-captions\tMSRvid\t{split}\t{i:04d}\t{g:.3f}\t{a}\t{b}"
                         for i, (a, b, g) in enumerate(pairs(rng, per_subset * 2))]
                (folder / f"sts-{split}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        elif layout == "sick":
            for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
                lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
                lines += [f"{i}\t{a}\t{b}\t{1 + g * 0.8:.1f}\tNEUTRAL"
                          for i, (a, b, g) in enumerate(pairs(rng, per_subset * 2))]
                (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def write_hub(root: Path, seed: int = 1, n: int = 10) -> Path:
    """Local stand-ins for MTEB's datasets: ``<root>/<name>/<split>.jsonl`` with MTEB's columns."""
    rng = np.random.default_rng(seed)
    for spec in TASKS.values():
        place = spec.place("hub")
        if place is None or spec.kind != "sts":  # pair tasks: tests/test_pair_sources.py
            continue
        folder = root / place["path"].split("/")[-1]
        folder.mkdir(parents=True, exist_ok=True)
        for split in place.get("splits", ("test",)):
            hub_split = {"dev": "validation"}.get(split, split)
            scale = (lambda g: 1 + g * 0.8) if spec.name == "sickr" else (lambda g: g)  # SICK is rated 1-5
            rows = [{"sentence1": a, "sentence2": b, "score": scale(g)} for a, b, g in pairs(rng, n)]
            (folder / f"{hub_split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n",
                                                       encoding="utf-8")
    write_mteb_only(root, rng, n)
    return root


def write_mteb_only(root: Path, rng: np.random.Generator, n: int) -> None:
    """Two MTEB STS tasks sts-bench does not register, in the layout of their hub datasets: BIOSSES
    (one subset) and STSBenchmarkMultilingualSTS (language subsets, and a ``similarity_score`` column
    that only MTEB's own ``dataset_transform`` renames to ``score``)."""
    biosses = root / "biosses-sts"
    biosses.mkdir(parents=True, exist_ok=True)
    rows = [{"sentence1": a, "sentence2": b, "score": g} for a, b, g in pairs(rng, n)]
    (biosses / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    for lang in ("en", "de"):
        folder = root / "stsb_multi_mt" / lang
        folder.mkdir(parents=True, exist_ok=True)
        for split in ("train", "dev", "test"):
            rows = [{"sentence1": a, "sentence2": b, "similarity_score": g} for a, b, g in pairs(rng, n)]
            (folder / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")


def tree_copy(dest: Path) -> Path:
    """A copy of this checkout's files (tracked, or new and not ignored) at ``dest``: a user's tree."""
    root = Path(__file__).resolve().parent.parent
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        if (root / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, dest / name)
    return dest


DECODER_FAMILIES = ("opt", "qwen2", "qwen3", "llama", "mistral", "gpt2")
# Words of the prompts the tests use, so a prompted text has few unknown tokens.
PROMPT_WORDS = ("This sentence means in one word query Instruct Retrieve similar text Query : \" :\" \". ' . ? , !"
                .split(" "))


def _write_word_level(folder: Path, family: str) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens = dict.fromkeys(["<pad>", "<unk>", "<s>", "</s>", *WORDS, *PROMPT_WORDS])
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    bos = {"opt": "</s>", "llama": "<s>", "mistral": "<s>"}.get(family)
    if bos:
        tokenizer.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                                 special_tokens=[(bos, vocab[bos])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="</s>",
                                   bos_token="</s>" if family == "opt" else "<s>",
                                   pad_token="<pad>" if family in ("opt", "llama", "mistral") else None)
    fast.save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"  # keep the word-level tokenizer, not the family's BPE class
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return len(vocab)


def _write_byte_level_bpe(folder: Path, numbers: bool = False) -> int:
    """A byte-level BPE trained here on the fixture words (Qwen2's tokenizer class rebuilds a
    byte-level BPE from the files, so a word-level vocabulary would not survive loading); with
    ``numbers``, on NUMBERS too, declared as the generic fast class (see write_tiny_qwen2_numbers)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [" ".join(WORDS), " ".join(PROMPT_WORDS), 'This sentence : "a man is playing." means in one word:"'] * 3
    corpus += [" ".join(NUMBERS)] * 3 if numbers else []
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=460 if numbers else 400, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>").save_pretrained(str(folder))
    if numbers:
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        config_path.write_text(json.dumps(config), encoding="utf-8")
    return tokenizer.get_vocab_size()


# Numbers that a GPT-2-style byte-level BPE merges (" 12", " 2023") and Qwen2's pre-tokenizer splits
# digit by digit.
NUMBERS = "1 2 3 7 8 9 10 12 20 23 45 50 100 123 500 1999 2000 2012 2023".split()


def write_tiny_qwen2_numbers(folder: Path, seed: int = 0) -> Path:
    """A tiny Qwen2 whose tokenizer.json is a GPT-2-style byte-level BPE that merges digits, and
    whose tokenizer_config.json names the generic fast class (``PreTrainedTokenizerFast``:
    tokenizer.json as it is). transformers 5 overrides that class for the ``qwen2`` model type
    (``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS``): its ``Qwen2Tokenizer`` rebuilds the
    pre-tokenizer (each digit alone) and adds NFC, so ``AutoTokenizer`` gives other ids than the file
    on text with numbers or combining accents."""
    return write_tiny_decoder(folder, "qwen2", seed, numbers=True)


def write_tiny_decoder(folder: Path, family: str, seed: int = 0, numbers: bool = False) -> Path:
    """A 2-layer, 32-dim causal LM (OPT, Qwen2, Qwen3, Llama, Mistral or GPT-2 config) with a
    word-level tokenizer (``tokenizers``' WordLevel, whitespace pre-split; Qwen's: a byte-level BPE
    trained here) saved with save_pretrained: a real decoder on transformers' loading path. The
    special tokens are each family's own: OPT prepends ``</s>`` to every text, Llama and Mistral
    ``<s>``; Qwen and GPT-2 add none, and GPT-2 has no pad token."""
    import torch
    import transformers as hf

    folder.mkdir(parents=True, exist_ok=True)
    bpe = family in ("qwen2", "qwen3")
    size = _write_byte_level_bpe(folder, numbers) if bpe else _write_word_level(folder, family)
    torch.manual_seed(seed)
    shape = dict(vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=256)
    grouped = dict(intermediate_size=48, num_key_value_heads=2, **shape)
    if family == "opt":
        model = hf.OPTForCausalLM(hf.OPTConfig(ffn_dim=48, word_embed_proj_dim=32, pad_token_id=0, bos_token_id=3,
                                               eos_token_id=3, **shape))
    elif family == "qwen2":  # QKV bias
        model = hf.Qwen2ForCausalLM(hf.Qwen2Config(**grouped))
    elif family == "qwen3":  # q/k RMSNorm per head, an explicit head size
        model = hf.Qwen3ForCausalLM(hf.Qwen3Config(head_dim=8, **grouped))
    elif family in ("llama", "mistral"):
        config = (hf.LlamaConfig if family == "llama" else hf.MistralConfig)(bos_token_id=2, eos_token_id=3, **grouped)
        model = (hf.LlamaForCausalLM if family == "llama" else hf.MistralForCausalLM)(config)
    elif family == "gpt2":
        model = hf.GPT2LMHeadModel(hf.GPT2Config(vocab_size=size, n_embd=32, n_layer=2, n_head=4, n_positions=256,
                                                 bos_token_id=3, eos_token_id=3))
    else:
        raise ValueError(f"unknown decoder family {family!r}; known: {', '.join(DECODER_FAMILIES)}")
    # Norm weights start at 1 and biases at 0: left so, a norm weight or bias used in the wrong
    # place (or not at all) would compute the same states. Random values make them count.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0.0, 0.2)
            elif "norm" in name:
                parameter.uniform_(0.5, 1.5)
    model.save_pretrained(str(folder))
    return folder


def write_labelled_glue(root, senteval_root):
    """GLUE's folder (MRPC, RTE, QNLI, MNLI as download_glue_data.py writes them) holding the SentEval
    fixture's STS-B pairs, labelled by their gold score: MRPC 1 where gold >= 3, QNLI "entailment"
    where gold >= 3, MNLI entailment / neutral / contradiction by thirds of the scale."""
    from harness.core.data.tasks import get_task, load_task

    task = load_task(get_task("stsb"), "senteval", ["train", "dev", "test"], locations={"senteval": str(senteval_root)})

    def rows(split):
        data = task.splits[split]
        return list(zip(data.s1, data.s2, data.gold))

    data = root / "glue_data"
    for split, source in (("train", "train"), ("dev", "test")):
        pairs = rows(source)
        (data / "MRPC").mkdir(parents=True, exist_ok=True)
        (data / "MRPC" / f"{split}.tsv").write_text(
            "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
            + "".join(f"{int(g >= 3)}\t{i}\t{i}\t{a}\t{b}\n" for i, (a, b, g) in enumerate(pairs)),
            encoding="utf-8",
        )
        (data / "RTE").mkdir(parents=True, exist_ok=True)
        (data / "RTE" / f"{split}.tsv").write_text(
            "index\tsentence1\tsentence2\tlabel\n"
            + "".join(f"{i}\t{a}\t{b}\t{'entailment' if g >= 3 else 'not_entailment'}\n"
                      for i, (a, b, g) in enumerate(pairs)), encoding="utf-8")
        (data / "QNLI").mkdir(parents=True, exist_ok=True)
        (data / "QNLI" / f"{split}.tsv").write_text(
            "index\tquestion\tsentence\tlabel\n"
            + "".join(
                f"{i}\t{a}\t{b}\t{'entailment' if g >= 3 else 'not_entailment'}\n" for i, (a, b, g) in enumerate(pairs)
            ),
            encoding="utf-8",
        )
        nli = [
            "index",
            "promptID",
            "pairID",
            "genre",
            "s1bp",
            "s2bp",
            "s1p",
            "s2p",
            "sentence1",
            "sentence2",
            "label1",
            "gold_label",
        ]
        label = lambda g: "entailment" if g >= 3.4 else "neutral" if g >= 1.7 else "contradiction"  # noqa: E731
        (data / "MNLI").mkdir(parents=True, exist_ok=True)
        (data / "MNLI" / ("train.tsv" if split == "train" else "dev_matched.tsv")).write_text(
            "\t".join(nli)
            + "\n"
            + "".join(
                "\t".join([str(i), "1", str(i), "g", a, b, a, b, a, b, label(g), label(g)]) + "\n"
                for i, (a, b, g) in enumerate(pairs)
            ),
            encoding="utf-8",
        )
    return root, task


def resample_plan(
    gold_bytes: bytes, labels: tuple[str, ...], rounds: int, seed: int
) -> dict[str, tuple]:
    """The whole draw plan of a split (:mod:`harness.core.bootstrap` streams it in chunks and never
    builds this): {group: (indices, counts (rounds, len(indices)), ranks of gold within each
    resample)}; the key ``ALL`` (every pair, stratified by subset) is present as well."""
    gold = np.frombuffer(gold_bytes, dtype=np.float64)
    groups = bootstrap.subset_indices(labels)
    chunks = list(
        bootstrap._count_chunks(list(groups.values()), rounds, seed, bootstrap.chunk_rounds(len(gold), rounds))
    )
    plan: dict[str, tuple] = {}
    counts = np.zeros((rounds, len(gold)), dtype=np.int32)
    for k, (name, idx) in enumerate(groups.items()):
        counts[:, idx] = np.concatenate([parts[k] for _, parts in chunks])
        plan[name] = (idx, counts[:, idx], bootstrap._resample_ranks(gold[idx], counts[:, idx]))
    plan[bootstrap.ALL] = (np.arange(len(gold)), counts, bootstrap._resample_ranks(gold, counts))
    return plan
