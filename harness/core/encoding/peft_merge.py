"""A LoRA adapter merged into a transformers model by peft itself (the transformers path; the
native decoder merges its own: :func:`harness.core.encoding.native_llama.merge_lora`).

peft's ``PeftModel.from_pretrained`` matches the file's tensors by name and, where none match,
only warns: an adapter saved from a ``*ForCausalLM`` (``base_model.model.model.layers…``) put on
the base model the harness reads (``layers…``) would leave the weights as they were. So the
adapter's tensors are renamed onto the base model's modules first
(:func:`harness.core.encoding.adapters.adapter_module_names`), loaded with
``set_peft_model_state_dict``, and every LoRA weight of the file must have landed, else one error
line.
"""

from __future__ import annotations

from typing import Any

from harness.core.encoding.adapters import CONFIG, FIX, PEFT_PREFIX, WEIGHTS, AdapterRef
from harness.core.encoding.model_files import AdapterConfig
from harness.core.errors import UserError
from harness.core.hashing import read_json


def merge_adapter(model: Any, adapter: AdapterRef, backbone: str) -> Any:
    """``model`` (a transformers base model) with ``adapter``'s LoRA merged into its weights
    (``merge_and_unload``): the model a plain forward then runs."""
    from pathlib import Path

    from peft import LoraConfig, PeftModel, set_peft_model_state_dict
    from safetensors.torch import load_file

    folder = Path(adapter.path)
    fields = read_json(folder / CONFIG, AdapterConfig, FIX)
    known = set(LoraConfig.__dataclass_fields__)  # a newer peft's fields an older one lacks
    config = LoraConfig(**{k: v for k, v in fields.items() if k in known})
    config.inference_mode = True
    tensors = load_file(str(folder / WEIGHTS))
    prefix = getattr(model, "base_model_prefix", "")
    modules = {name for name, _ in model.named_modules()}
    renamed = {}
    for key, value in tensors.items():
        name = key.removeprefix(PEFT_PREFIX)
        if prefix and name.startswith(prefix + ".") and name.split(".lora_")[0] not in modules:
            name = name.removeprefix(prefix + ".")  # saved from a *ForCausalLM: its head's prefix
        renamed[PEFT_PREFIX + name] = value.to(model.dtype)
    try:
        wrapped = PeftModel(model, config)
        result = set_peft_model_state_dict(wrapped, renamed)
    except (ValueError, RuntimeError) as err:  # no such target module; a tensor of another shape
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UserError(
            f"adapter {adapter.path} does not fit backbone {backbone} ({first}); pass the "
            "backbone it was trained on (base_model_name_or_path in its adapter_config.json)"
        ) from None
    lost = list(getattr(result, "unexpected_keys", []) or [])
    missing = [k for k in getattr(result, "missing_keys", []) or [] if ".lora_" in k]
    if lost or missing:
        example = (lost or missing)[0]
        raise UserError(
            f"adapter {adapter.path}: {len(lost) or len(missing)} LoRA tensor(s) match no module "
            f"of backbone {backbone} (e.g. {example}); it was trained on another model: pass the "
            "backbone it names (base_model_name_or_path in its adapter_config.json)"
        )
    return wrapped.merge_and_unload()
