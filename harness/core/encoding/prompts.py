"""Prompts: the text a backbone reads for a sentence, as a value of the view.

A :class:`Prompt` is a template with one ``{sentence}`` slot and no other ``{name}`` (without it,
a prefix: ``query: `` reads ``query: <sentence>``) and a sentence rule applied before the sentence
goes into the slot. It is part of a :class:`~harness.core.encoding.pooling.View`, so it lands in the
vector cache key, the record and the protocol header by the same road as pooling and layer, and
methods that share (backbone, prompt, pooling, layer) share one forward pass.

The prompted text is built by string concatenation and tokenized as a whole, special tokens
included, as PromptEOL's code does (``template.replace('*sent 0*', s)``). That is not the same as
tokenizing the prompt and the sentence apart (sentence-transformers' ``prompt=``, #3234): a BPE
tokenizer may merge characters across the boundary. The sentence's own characters are
:meth:`Prompt.span`, from which the forward pass finds the sentence's own tokens (the
``mean_sentence`` pooling: sentence-transformers' ``include_prompt=False``).

>>> p = Prompt('This sentence : "{sentence}" means in one word:"', "prompteol")
>>> p.apply('He asked "why?"')
'This sentence : "He asked \\'why?\\'" means in one word:"'
>>> Prompt("query: ").apply("two dogs")
'query: two dogs'
>>> Prompt("query: ").span("two dogs")
(7, 15)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from harness.core.errors import UserError

SLOT = "{sentence}"
PLACEHOLDER = re.compile(r"(?<!\{)\{[A-Za-z_]\w*\}(?!\})")  # {sent}; {}, {{x}}, {"a": 1} are text


def prompteol_rule(sentence: str) -> str:
    """PromptEOL's sentence preparation, as its ``evaluation.py`` sees and prepares a sentence
    before the template. Its batcher receives SentEval's tokens (each sentence split on whitespace)
    and joins them with one space, so the text is first split and rejoined on whitespace (leading,
    trailing and repeated whitespace gone, on every source); then a final ``.`` when it does not
    end in one of ``.?"'``, every ``"`` made ``'`` (the template quotes the sentence), then a final
    ``?`` made ``.``.

    >>> prompteol_rule("a dog runs"), prompteol_rule("is it?"), prompteol_rule('say "hi"')
    ('a dog runs.', 'is it.', "say 'hi'")
    >>> prompteol_rule("This is a great one... "), prompteol_rule(" two  dogs ")
    ('This is a great one...', 'two dogs.')
    """
    sentence = " ".join(sentence.split())
    if sentence and sentence[-1] not in ".?\"'":
        sentence += "."
    sentence = sentence.replace('"', "'")
    if sentence.endswith("?"):
        sentence = sentence[:-1] + "."
    return sentence


# Sentence rules by name: what a prompt does to the sentence before it goes into the slot.
RULES: dict[str, Callable[[str], str]] = {
    "none": lambda sentence: sentence,
    "prompteol": prompteol_rule,
    # a sentence-transformers checkpoint whose Transformer sets do_lower_case
    "lower": str.lower,
}


@dataclass(frozen=True, order=True)
class Prompt:
    """A template (``{sentence}`` once, or a prefix without it) and a sentence rule (:data:`RULES`).
    The empty prompt reads the sentence as it is (``Prompt.NONE``); ``Prompt.PROMPTEOL`` is
    PromptEOL's template with its sentence rule."""

    SLOT: ClassVar[str] = SLOT
    RULES: ClassVar[Mapping[str, Callable[[str], str]]] = RULES
    NONE: ClassVar[Prompt]
    PROMPTEOL: ClassVar[Prompt]

    template: str = ""
    rule: str = "none"

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown sentence rule {self.rule!r}; known: {', '.join(RULES)}")
        times, bad = self.template.count(SLOT), set(PLACEHOLDER.findall(self.template)) - {SLOT}
        if times > 1 or bad:  # one line; the caller puts where the prompt came from in front
            what = f"{min(bad)}: no such placeholder" if bad else f"{SLOT} appears {times} times"
            raise UserError(
                f"{what}; a prompt's one placeholder is {SLOT}: write it once where the sentence "
                "goes, or leave it out for a prefix"
            )

    def __bool__(self) -> bool:
        return bool(self.template) or self.rule != "none"

    def parts(self) -> tuple[str, str]:
        """(prefix, suffix) around the sentence."""
        prefix, _, suffix = self.template.partition(SLOT)
        return prefix, suffix

    def apply(self, sentence: str) -> str:
        """The text the backbone reads for ``sentence``."""
        prefix, suffix = self.parts()
        return prefix + RULES[self.rule](sentence) + suffix

    def span(self, sentence: str) -> tuple[int, int]:
        """Character span [start, end) of the (rule-prepared) sentence inside :meth:`apply`'s
        text."""
        start = len(self.parts()[0])
        return start, start + len(RULES[self.rule](sentence))

    def key(self) -> dict[str, str]:
        """The prompt in cache keys and records."""
        return {"template": self.template, "rule": self.rule}

    @staticmethod
    def demonstration(sentence: str, word: str) -> str:
        """PromptEOL's in-context demonstration: :func:`demonstration`."""
        return demonstration(sentence, word)

    def __str__(self) -> str:
        if not self:
            return "none"
        text = repr(
            self.template if SLOT in self.template or not self.template else self.template + SLOT
        )
        return text if self.rule == "none" else f"{text} (sentence rule: {self.rule})"


NO_PROMPT = Prompt()


def sentence_token_mask(offsets: list[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    """1 for each token whose characters lie in ``span`` (the sentence's own tokens), 0 for the
    prompt's tokens and for special tokens (offsets (0, 0)). A token that straddles the boundary
    (a BPE merge across it) counts as the sentence's.

    >>> sentence_token_mask([(0, 0), (0, 5), (5, 6), (7, 10), (10, 11)], (7, 10))
    [0, 0, 0, 1, 0]
    """
    start, end = span
    return [1 if stop > begin and begin < end and stop > start else 0 for begin, stop in offsets]


# PromptEOL's template (Jiang et al. 2023; kongds/scaling_sentemb evaluation.py
# --mask_embedding_sentence_template 'This_sentence_:_"*sent_0*"_means_in_one_word:"', underscores
# standing for spaces) with the sentence preparation its code applies.
PROMPTEOL_TEMPLATE = 'This sentence : "{sentence}" means in one word:"'
PROMPTEOL = Prompt(PROMPTEOL_TEMPLATE, "prompteol")
Prompt.NONE, Prompt.PROMPTEOL = NO_PROMPT, PROMPTEOL


def demonstration(sentence: str, word: str) -> str:
    """PromptEOL's in-context demonstration, put before the template (run_icl.sh: one per OPT size).

    >>> demonstration("A jockey riding a horse.", "Equestrian")
    'This sentence : "A jockey riding a horse." means in one word:"Equestrian".'
    """
    return PROMPTEOL_TEMPLATE.replace(SLOT, sentence) + word + '".'
