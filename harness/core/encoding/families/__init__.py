"""Backbone families as a registry: which implementation runs a checkpoint, decided by asking the
families, never by a chain of ``model_type`` tests elsewhere.

Each family is one module of this package holding a :class:`Family` (``FAMILY``), registered by
one line below. :func:`family_of` answers with the family that takes a ``config.json``: the one
whose ``model_types`` hold its model type, else the first whose architectures take it, else the
transformers fallback. Resolution (:mod:`harness.core.encoding.backbone`) asks it whether the
checkpoint is a decoder, where its positions start and why it would not run natively;
:func:`harness.core.encoding.native.load_native` asks it for the loader.

Adding a family: a module here with ``FAMILY = Family(...)`` (its native loader importing its
implementation inside the function, so no torch at ``import harness``, and the cache's code digest
follows the import), and its line in :data:`BUILT_IN`. Code outside the repository registers one
with :func:`register_family`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.encoding.families import bert, causal, deberta, fallback, llama, mpnet, roberta
from harness.core.encoding.families.family import Family
from harness.core.errors import UserError
from harness.core.registry import Registry

__all__ = ["FAMILIES", "Family", "family_of", "family_of_folder", "is_causal", "register_family"]

FAMILIES: Registry[Family] = Registry("backbone family")
FALLBACK = fallback.FAMILY.name


def register_family(family: Family) -> Family:
    """Make ``family`` answer for its model types; refused when another family takes one of them
    already."""
    for name, other in FAMILIES.items():
        taken = sorted(set(family.model_types) & set(other.model_types))
        if taken:
            raise UserError(
                f"backbone family '{family.name}': model type '{taken[0]}' is taken by the "
                f"'{name}' family; unregister that one first (FAMILIES.unregister('{name}'))"
            )
    return FAMILIES.register(family.name, family)


# The built-in families, one line each; those before take a checkpoint first.
BUILT_IN = (
    bert.FAMILY,
    roberta.FAMILY,
    mpnet.FAMILY,
    deberta.FAMILY,
    llama.FAMILY,
    causal.FAMILY,
    fallback.FAMILY,
)
for _family in BUILT_IN:
    register_family(_family)


def family_of(config: dict[str, Any]) -> Family:
    """The family that takes the checkpoint ``config`` (its ``config.json``) describes.

    >>> family_of({"model_type": "xlm-roberta"}).name, family_of({"model_type": "opt"}).name
    ('roberta', 'causal-lm')
    >>> family_of({"model_type": "custom", "architectures": ["CustomForCausalLM"]}).name
    'causal-lm'
    >>> family_of({"model_type": "electra"}).name
    'transformers'
    """
    families = [family for _, family in FAMILIES.items()]
    model_type = config.get("model_type")
    for family in families:
        if model_type in family.model_types:
            return family
    for family in families:
        if family.takes_architecture(config):
            return family
    return FAMILIES[FALLBACK]


def is_causal(config: dict[str, Any]) -> bool:
    """Whether ``config`` describes a decoder whose token ``i`` attends only to tokens ``<= i``:
    its family is causal, or a causal family takes it by its architecture names or ``is_decoder``
    (a BERT saved as ``BertLMHeadModel``).

    >>> is_causal({"model_type": "qwen2"}), is_causal({"model_type": "bert"})
    (True, False)
    >>> is_causal({"model_type": "bert", "is_decoder": True})
    True
    """
    return family_of(config).causal or any(
        family.causal and family.takes_architecture(config) for _, family in FAMILIES.items()
    )


def family_of_folder(folder: str | Path) -> Family:
    """:func:`family_of` the checkpoint in ``folder`` (its ``config.json``, held to its schema; the
    fallback when it has none)."""
    from harness.core.encoding.model_files import model_config

    missing = not (Path(folder) / "config.json").exists()
    return FAMILIES[FALLBACK] if missing else family_of(model_config(folder))
