"""Causal language models that transformers' ``AutoModel`` loads as a base model from a causal-LM
checkpoint (its hidden states equal ``AutoModelForCausalLM``'s), run through transformers only; and
any checkpoint whose architecture is a causal LM or whose config says ``is_decoder``. (The
Llama-style decoders the harness runs natively are :mod:`.llama`.)"""

from __future__ import annotations

from harness.core.encoding.families.family import Family

FAMILY = Family(
    name="causal-lm",
    label="causal language model",
    model_types=(
        "gpt2",
        "gpt_neo",
        "gptj",
        "gpt_neox",
        "opt",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi",
        "phi3",
        "falcon",
        "bloom",
        "olmo",
        "olmo2",
        "stablelm",
        "starcoder2",
        "cohere",
        "granite",
    ),
    architectures=("ForCausalLM", "LMHeadModel"),
    decoder_flag=True,
    causal=True,
)
