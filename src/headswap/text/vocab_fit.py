"""How well a model's tokenizer reads a set of texts, measured on a sample: whether the texts stay distinct once
encoded, the share of unknown tokens, and word pieces per whitespace word.

A text the vocabulary cannot read (emoji through MiniLM's WordPiece, a script it lacks) becomes the unknown
token, and texts that encode alike are one input to the model: trained on them, a classifier can only learn the
class frequencies, and nothing errors. `measure` gives the figures (a language check reads unknown_rate and
pieces_per_word); `warn_if_inputs_alike` is the training-time warning.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from headswap.data.once import warn_once

SAMPLE = 2000               # texts tokenized at most: the figures are shares, and a sample this size fixes them
                            # to about +-2 points (95%), for milliseconds of tokenizing
ALL_UNKNOWN_SHARE = 0.1     # warn when at least this share of the texts is nothing but unknown tokens
DISTINCT_SHARE = 0.5        # ... or when the distinct texts encode to at most this share of distinct inputs


@dataclass(frozen=True)
class VocabFit:
    """Figures for `texts` sampled texts through one tokenizer (special tokens left out)."""

    texts: int                  # texts measured (a sample of at most SAMPLE)
    distinct_texts: int
    distinct_inputs: int        # distinct token-id sequences those texts encode to (cut at max_length, if given)
    all_unknown: int            # texts that encode to nothing but the unknown token (or to no token at all)
    unknown_rate: float         # unknown tokens / all tokens
    pieces_per_word: float      # tokens per whitespace-separated word (nan when there are no words)
    unknown_token: str | None   # the tokenizer's unknown token; None: it has none (byte-level BPE reads anything)
    given: int = 0              # texts given, of which `texts` were sampled
    tokens: int = 0             # tokens the sampled texts encode to, all told

    @property
    def inputs_alike(self) -> bool:
        """True when the texts (nearly) all look alike to the model: many are only unknown tokens, or the
        distinct texts collapse to far fewer distinct inputs."""
        if not self.texts:
            return False
        return (self.all_unknown >= ALL_UNKNOWN_SHARE * self.texts
                or self.distinct_texts > 1 and self.distinct_inputs <= DISTINCT_SHARE * self.distinct_texts)


def _ids(tokenizer, texts: list[str]) -> list[list[int]]:
    given = getattr(tokenizer, "deprecation_warnings", None)
    if isinstance(given, dict):     # whole texts on purpose: transformers' "longer than the maximum" would only alarm
        given["sequence-length-is-longer-than-the-specified-maximum"] = True
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def sampled(texts: Sequence[str], sample: int = SAMPLE, seed: int = 0) -> list[str]:
    """The seeded sample of at most `sample` of `texts` that measure() measures."""
    texts = list(texts)
    return random.Random(seed).sample(texts, sample) if len(texts) > sample else texts


def measure(tokenizer, texts: Sequence[str], sample: int = SAMPLE, seed: int = 0,
            max_length: int | None = None) -> VocabFit:
    """The VocabFit of `texts` through `tokenizer` (a Hugging Face tokenizer), on a seeded sample of at most
    `sample` texts. max_length: compare inputs cut to that many tokens, as the model would see them."""
    texts = list(texts)
    given = len(texts)
    texts = sampled(texts, sample, seed)
    rows = _ids(tokenizer, texts) if texts else []
    unk = getattr(tokenizer, "unk_token_id", None)
    tokens = sum(map(len, rows))
    unknown = sum(ids.count(unk) for ids in rows) if unk is not None else 0
    words = sum(len(t.split()) for t in texts)
    cut = (lambda ids: tuple(ids[:max_length])) if max_length else tuple
    return VocabFit(texts=len(texts), distinct_texts=len(set(texts)), distinct_inputs=len({cut(ids) for ids in rows}),
                    all_unknown=sum(all(i == unk for i in ids) for ids in rows),
                    unknown_rate=unknown / tokens if tokens else 0.0,
                    pieces_per_word=tokens / words if words else math.nan,
                    unknown_token=getattr(tokenizer, "unk_token", None) if unk is not None else None, given=given,
                    tokens=tokens)


def describe(fit: VocabFit) -> str:
    """What makes the texts look alike, in a few words for a warning."""
    parts = []
    if fit.all_unknown:
        what = f"the unknown token {fit.unknown_token!r}" if fit.unknown_token else "no token"
        parts.append(f"{fit.all_unknown} of {fit.texts} texts ({fit.all_unknown / fit.texts:.0%}) encode to nothing "
                     f"but {what}")
    parts.append(f"{fit.distinct_texts} distinct texts encode to {fit.distinct_inputs} distinct input"
                 f"{'s' if fit.distinct_inputs != 1 else ''}")
    sampled = f" (in a sample of {fit.texts} of the {fit.given})" if fit.given > fit.texts else ""
    return "; ".join(parts) + sampled


def warn_if_inputs_alike(tokenizer, texts: Sequence[str], model: str, source: str = "training data",
                         max_length: int | None = None) -> VocabFit | None:
    """Warn (once, through the data warnings' logger) when `texts` look (nearly) alike to `model`'s tokenizer;
    return the measure, or None when the tokenizer cannot be measured (not a Hugging Face tokenizer)."""
    try:
        fit = measure(tokenizer, texts, max_length=max_length)
    except (TypeError, AttributeError, KeyError):    # a tokenizer of another kind (headswap.teach's byte tokenizer)
        return None
    if fit.inputs_alike:
        warn_once(("inputs alike", source, str(model)),
                  f"{source}: the texts look alike to {model}'s tokenizer: {describe(fit)}, so the model cannot tell "
                  f"them apart and can only learn the class frequencies; use a model whose vocabulary covers these "
                  f"texts (emoji or a script it lacks become the unknown token)")
    return fit
