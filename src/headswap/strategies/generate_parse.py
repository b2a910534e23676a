"""generate-parse: the naive way to classify with an LLM. Generate greedily from the task prompt, then
parse the output to a class (exact, then fuzzy, then a lone class name anywhere). Training is
teacher-forced LM loss on the answer; generation gives no real class probabilities."""

from __future__ import annotations

import difflib
import re

from headswap.strategies.base import Build, Strategy


class GenerateParse(Strategy):
    name = "generate-parse"
    description = "greedy generation from the prompted SLM, parsed to a class (exact, then fuzzy)"
    needs_causal = True
    zero_shot = True
    prompted = True
    has_head = False
    lm_head = True
    default_regime = "lora"
    chunkable = False     # the text sits inside the task prompt
    pooled_features = False   # no single vector per text (it generates)

    def text_encoder(self, b: Build):
        return b.prompt_encoder(cache=False)   # whole prompts: generation manages its own cache

    def build(self, b: Build):
        from headswap.nn.generative import GenerateParseClassifier
        from headswap.text.encoding import pad_id_of
        return GenerateParseClassifier(b.hf_model, b.tokenizer, b.prompt.answers, b.prompt.answer_separator,
                                       pad_id_of(b.tokenizer), parse=parse_answer)

    def extra_metrics(self, module, num_classes: int) -> dict:
        return {"parse_counts": dict(module.parse_counts)}

    def passes_per_text(self, num_classes: int) -> str:
        return "1 prefill + 1 per generated token"


def parse_answer(output: str, answers: list[str]) -> tuple[int | None, str]:
    """Map generated text to a class index: exact (case-insensitive) match of the first line or word,
    then the first answer the output starts with, then a fuzzy match of the first word, then the one answer
    that appears anywhere as a whole word ('search'; an untrained SLM often writes 'The answer is: spam');
    (None, 'unparsed') when none does, or when several answers appear."""
    text = output.strip()
    lowered = [a.lower() for a in answers]
    first_line = text.splitlines()[0].strip().strip(".!\"'`*").lower() if text else ""
    first_word = first_line.split()[0].strip(".,:;!\"'`*") if first_line else ""
    for candidate in (first_line, first_word):
        if candidate in lowered:
            return lowered.index(candidate), "exact"
    prefixed = [i for i, a in enumerate(lowered) if first_line.startswith(a)]
    if prefixed:  # the longest answer the output starts with ('positive' before 'pos')
        return max(prefixed, key=lambda i: len(lowered[i])), "exact"
    close = difflib.get_close_matches(first_word, lowered, n=1, cutoff=0.6) if first_word else []
    if close:
        return lowered.index(close[0]), "fuzzy"
    whole = text.lower()
    found = {i for i, a in enumerate(lowered) if re.search(rf"(?<!\w){re.escape(a)}(?!\w)", whole)}
    if len(found) == 1:
        return found.pop(), "search"
    return None, "unparsed"

