"""A runnable offline tour of the newer families: a decoder LLM with a prompt set, SPLADE, and a
model behind an OpenAI-compatible embeddings endpoint. Nothing is downloaded.

    python examples/tour.py                  # in a temporary folder, removed at the end
    python examples/tour.py --workdir tour   # keeps the models, pairs, cache and results in ./tour

It builds what the hub would otherwise give you:

- ``pairs.tsv``: 16 sentence pairs with gold scores 0-5, your own STS task (``--tasks file:PATH``);
- ``decoder/``: a 2-layer, 32-dimension Llama (a causal LM) with random weights and a word-level
  tokenizer over the pairs' words, saved with ``save_pretrained`` like any hub checkpoint;
- ``splade/``: a 2-layer BERT with its masked-LM head (random weights), SPLADE's backbone;
- an OpenAI-compatible ``POST /v1/embeddings`` server on 127.0.0.1 (the standard library's
  http.server, in a thread of this process) whose model ``char-4grams`` is a bag of hashed
  character 4-grams;

and runs ``run_bench.py`` on each, printing the command first (copy it, with your own model in
place of the folder or the URL) and, after the run's own output, what to notice.

The decoder's and SPLADE's scores are those of random weights: noise, not a measurement of
anything. The endpoint's bag of character 4-grams is a real (if crude) model: its score is the one
number of the tour that means something. examples/README.md explains each step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "examples" / "prompts.toml"

# Your own STS task: sentence1, sentence2, a gold similarity from 0 (unrelated) to 5 (same meaning).
PAIRS = [
    ("A man is playing a guitar.", "A man plays the guitar.", 4.8),
    ("A man is playing a guitar.", "A woman is slicing an onion.", 0.2),
    ("A dog runs in the park.", "A dog is running through the grass.", 4.0),
    ("A dog runs in the park.", "The cat sleeps on the sofa.", 0.6),
    ("The children are playing football.", "Kids play soccer on a field.", 4.2),
    ("The children are playing football.", "The market closed lower today.", 0.0),
    ("A woman is cutting vegetables.", "A woman is slicing an onion.", 3.6),
    ("A woman is cutting vegetables.", "A man is driving a car.", 0.4),
    ("The cat sleeps on the sofa.", "A cat is sleeping on a couch.", 4.6),
    ("The cat sleeps on the sofa.", "A dog is running through the grass.", 0.8),
    ("Stocks fell sharply on Monday.", "The market closed lower today.", 3.4),
    ("Stocks fell sharply on Monday.", "A man plays the guitar.", 0.0),
    ("A man is driving a car.", "A person drives a vehicle on the road.", 4.0),
    ("A man is driving a car.", "Kids play soccer on a field.", 0.2),
    ("Two people are walking on the beach.", "A couple walks along the shore.", 4.4),
    ("Two people are walking on the beach.", "A woman is cutting vegetables.", 0.2),
]
DIMS = 256  # the endpoint model's vector width


def char_grams(texts: list[str], dims: int = DIMS) -> np.ndarray:
    """The endpoint's model, ``char-4grams``: each 4-character piece of each lower-cased word (its
    edges marked by spaces, punctuation dropped) adds 1 to one of ``dims`` buckets picked by its
    sha256. Sentences sharing words or word stems (play/playing) get similar vectors."""
    out = np.zeros((len(texts), dims), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().replace(".", " ").replace(",", " ").split():
            marked = f" {word} "
            for j in range(len(marked) - 3):
                digest = hashlib.sha256(marked[j : j + 4].encode()).digest()
                out[i, int.from_bytes(digest[:4], "little") % dims] += 1.0
    return out


def words_of(texts: list[str]) -> list[str]:
    """The tokens a whitespace-and-punctuation pre-tokenizer cuts ``texts`` into, in order."""
    from tokenizers import pre_tokenizers

    split = pre_tokenizers.Whitespace()
    return list(dict.fromkeys(w for t in texts for w, _ in split.pre_tokenize_str(t)))


def write_pairs(path: Path) -> Path:
    lines = ["sentence1\tsentence2\tscore", *(f"{a}\t{b}\t{g}" for a, b, g in PAIRS)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_decoder(folder: Path, vocabulary: list[str], seed: int = 0) -> Path:
    """A tiny Llama with random weights and a word-level tokenizer that prepends ``<s>``, saved as a
    hub checkpoint is. A real decoder (Qwen, Llama, Mistral, ...) is named the same way."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {
        token: i
        for i, token in enumerate(dict.fromkeys(["<pad>", "<unk>", "<s>", "</s>", *vocabulary]))
    }
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    ).save_pretrained(str(folder))
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        pad_token_id=vocab["<pad>"],
    )
    LlamaForCausalLM(config).save_pretrained(str(folder))
    return folder


def write_splade(folder: Path, vocabulary: list[str], seed: int = 0) -> Path:
    """A tiny BertForMaskedLM with random weights: SPLADE reads its masked-LM head, one weight per
    vocabulary word. The head's bias is drawn below 0, so most words stay inactive: sparse vectors,
    as a trained SPLADE's are."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = list(
        dict.fromkeys(
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(w.lower() for w in vocabulary)]
        )
    )
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(str(folder))
    torch.manual_seed(seed)
    model = BertForMaskedLM(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=37,
            max_position_embeddings=64,
        )
    )
    with torch.no_grad():
        model.cls.predictions.bias.normal_(-0.15, 0.1)
    model.save_pretrained(str(folder))
    return folder


class Server:
    """An OpenAI-compatible embeddings endpoint on 127.0.0.1 serving ``char-4grams``; counts the
    requests it answers. vLLM, text-embeddings-inference, Ollama or a LiteLLM proxy answer the same
    ``POST /v1/embeddings``."""

    model = "char-4grams"

    def __init__(self) -> None:
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet: the run's output is the tour's
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                texts = [body["input"]] if isinstance(body["input"], str) else list(body["input"])
                if self.path != "/v1/embeddings" or body.get("model") != server.model:
                    return self.reply(
                        404,
                        {"error": {"message": f"no model {body.get('model')!r} at {self.path}"}},
                    )
                server.requests += 1
                vectors = char_grams(texts)
                tokens = sum(len(t.split()) for t in texts)
                self.reply(
                    200,
                    {
                        "object": "list",
                        "model": server.model,
                        "data": [
                            {"object": "embedding", "index": i, "embedding": v.tolist()}
                            for i, v in enumerate(vectors)
                        ],
                        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                    },
                )

            def reply(self, status: int, answer: dict) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @contextmanager
    def running(self):
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()


def bench(args: list[str], common: list[str]) -> None:
    """Print the command, then run it in this process (the endpoint's server is a thread of it)."""
    import shlex

    import run_bench

    print(f"\n$ python run_bench.py {shlex.join(args)}", flush=True)
    code = run_bench.main([*args, *common])
    if code != 0:
        raise SystemExit(f"tour: the command above exited with {code}")


def rows(out: Path, method: str, backbone: str) -> list[dict]:
    """The leaderboard's rows of ``method`` (its name, prompt rows included) on ``backbone``: the
    leaderboard keeps the rows of every run into the same output folder."""
    import pandas as pd

    board = pd.read_csv(out / "leaderboard.csv")
    picked = board[board["method"].str.match(rf"^{method}(\[|$)") & (board["backbone"] == backbone)]
    return picked[["method", "backbone", "Avg."]].to_dict("records")


def notice(*lines: str) -> None:
    print("\n".join(["", *(f"  notice: {line}" for line in lines)]), flush=True)


def tour(work: Path) -> None:
    pairs = write_pairs(work / "pairs.tsv")
    texts = [s for a, b, _ in PAIRS for s in (a, b)]
    vocabulary = words_of(texts + PROMPTS.read_text(encoding="utf-8").split())
    decoder = write_decoder(work / "decoder", vocabulary)
    splade = write_splade(work / "splade", vocabulary)
    out = work / "results"
    task = ["--tasks", f"file:{pairs}"]
    common = ["--cache-dir", str(work / "cache"), "--output-dir", str(out)]
    common += "--no-progress --no-plots --bootstrap 200".split()

    print("== 1. A decoder LLM, with a prompt set (random weights: the scores are noise)")
    methods = ["--methods", "last", "avg-sentence", "--set", f"last.prompt=@{PROMPTS}"]
    bench(["--backbone", str(decoder), *methods, *task], common)
    prompted = ", ".join(r["method"] for r in rows(out, "last", str(decoder)))
    notice(
        f"one row per prompt of {PROMPTS.name}: {prompted}",
        "results/prompts.md keeps each prompt set's spread (best - worst, with its paired test)",
        "a real decoder: --backbone Qwen/Qwen2.5-0.5B (a hub id) or its local folder",
    )

    print("\n== 2. SPLADE: sparse vectors of a masked-LM head (random weights: the score is noise)")
    bench(["--backbone", str(splade), "--methods", "splade", *task], common)
    notice(
        "splade's vectors have one dimension per vocabulary word, compared by dot product (· dot)",
        "it needs a checkpoint with its MLM head (BertForMaskedLM); one without is refused",
        "a real one: --backbone naver/splade-cocondenser-ensembledistil",
    )

    print("\n== 3. A model behind an OpenAI-compatible endpoint (hashed 4-grams: crude, but real)")
    with Server().running() as server:
        model = ["--methods", "endpoint", "--set", f"endpoint.model={server.model}"]
        bench(["--backbone", server.url, *model, *task], common)
        sent = server.requests
        bench(["--backbone", server.url, *model, *task], common)  # again: every vector is cached
        host = server.url.split("/")[2]
        (row,) = rows(out, "endpoint", f"{server.model} @ {host}")
        notice(
            f"the backbone column names the endpoint: {row['backbone']} (model @ host:port)",
            f"the first run sent {sent} request(s), the second {server.requests - sent}: "
            "the vectors are cached under the URL and the model",
            f"Spearman x100 on the {len(PAIRS)} pairs: {row['Avg.']:.2f}",
            "a hosted one: --backbone https://api.openai.com/v1 "
            "--set endpoint.model=text-embedding-3-small (the key in $OPENAI_API_KEY)",
        )
    print(f"\nThe tour's rows, in one table: {out / 'leaderboard.md'} (and index.html, runs/)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workdir", type=Path, help="keep everything here (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # run_bench and the harness of this checkout
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        tour(args.workdir.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="sts-bench-tour-") as work:
            tour(Path(work))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
