"""PromptEOL (Jiang et al. 2023, "Scaling Sentence Embeddings with Large Language Models",
arXiv 2307.16645): a decoder LLM reads ``This sentence : "<sentence>" means in one word:"`` and the
sentence's vector is the last layer's hidden state at the last token, where the model is about to
say the one word. With ``demo``, one in-context demonstration comes first (the paper's in-context
setting: run_icl.sh picks one per OPT size, each chosen on STS-B dev).

The sentence is prepared as the authors' ``evaluation.py`` sees and prepares it before the
template (``rule``): split on whitespace and rejoined with one space (its batcher receives
SentEval's tokens), then a final ``.`` when it does not end in ``.?"'``, ``"`` made ``'``, a final
``?`` made ``.``. On every source, so the packaged STS-B's sentences with surrounding whitespace
read as SentEval hands them over; other methods read the sentence as it is.
"""

from __future__ import annotations

from harness.core.api import Option
from harness.core.encoding import Prompt
from harness.core.errors import UserError
from methods.pooling import SAME, ViewMethod

DEMO_SEPARATOR = "=>"


def _demo(text: str) -> str:
    """``SENTENCE=>WORD`` (or empty), checked when the option is read. Not ``|``: the row label
    holds it, and a markdown table would split there."""
    if text and (
        text.count(DEMO_SEPARATOR) != 1
        or not all(part.strip() for part in text.split(DEMO_SEPARATOR))
    ):
        raise ValueError(
            "a demonstration is 'SENTENCE=>WORD', e.g. 'A jockey riding a horse.=>Equestrian', "
            f"not {text!r}"
        )
    return text


class PromptEOL(ViewMethod):
    name = "prompteol"
    summary = (
        'PromptEOL: the last token of \'This sentence : "{sentence}" means in one word:"\' '
        "(Jiang et al. 2023)"
    )
    pooling = "last"
    options = (
        Option(
            "demo",
            "",
            "one in-context demonstration 'SENTENCE=>WORD' put before the template (the paper's "
            "ICL setting, e.g. 'A jockey riding a horse.=>Equestrian'); empty: none",
            type=_demo,
        ),
        Option(
            "demo_selected_on",
            "",
            "where the demonstration was chosen, for the record and the leaderboard "
            "mark (the paper's: 'stsb dev'); empty: not selected on labelled data",
            in_label=False,
        ),
        Option(
            "rule",
            "prompteol",
            "sentence preparation before the template: prompteol (its code's: whitespace split and "
            "rejoined, then its final '.'/quote rule) or none (the sentence as it is)",
            choices=tuple(Prompt.RULES),
        ),
        Option("prompt", "", f"the template; empty: PromptEOL's {Prompt.PROMPTEOL.template!r}"),
        Option("prompt2", SAME, "the second sentence's template of each pair; same: prompt's"),
    )

    def base_prompt(self) -> Prompt:
        return Prompt(self._prefix() + Prompt.PROMPTEOL.template, self.spec.params["rule"])

    def side_prompt(self, side: int) -> Prompt:
        prompt = super().side_prompt(side)
        if prompt.template.startswith(self._prefix()):
            return prompt  # the default: the demonstration is already in front
        return Prompt(self._prefix() + prompt.template, prompt.rule)

    def _prefix(self) -> str:
        demo = str(self.spec.params.get("demo") or "")
        if not demo:
            return ""
        sentence, word = (part.strip() for part in demo.split(DEMO_SEPARATOR))
        return Prompt.demonstration(sentence, word)

    def selected_on(self) -> str | None:
        where = str(self.spec.params.get("demo_selected_on") or "").strip()
        if where and not self.spec.params.get("demo"):
            raise UserError(
                "prompteol: demo_selected_on names where a demonstration was chosen, but no demo "
                "is set; pass --set prompteol.demo='SENTENCE=>WORD' too"
            )
        return where or None
