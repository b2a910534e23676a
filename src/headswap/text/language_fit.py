"""Whether a body's vocabulary was made for the language of the texts, from headswap.text.vocab_fit's figures.

An English vocabulary reads German words as pieces ("Vollidiot" -> "vol", "##lid", "##iot"): nothing errors, the
model just sees fragments it learned little about. Pieces per word is the tell, measured on the texts' words alone
(letters only; @handles, #tags, links and numbers left out, which split in every vocabulary). Measured on the
shared data's training texts:

| tokenizer | English (SMS, emotion, CLINC150, GoEmotions) | German tweets (GermEval 2018) |
|---|---|---|
| minilm (English WordPiece) | 1.04 - 1.14 | 2.12 |
| smollm2-135m (English-first BPE) | 1.07 - 1.20 | 2.28 |
| multilingual-e5-small (XLM-R's SentencePiece) | 1.12 - 1.23 | 1.43 |

so PIECES_PER_WORD sits between the two groups. The unknown-token rate (on the texts as they are) catches what
pieces cannot spell at all: a script the vocabulary lacks.

Chinese, Japanese, Thai, Lao, Khmer, Burmese and Tibetan are written without spaces between words, so a "word"
there is a whole clause and pieces per word says nothing (multilingual-e5-small: 5.6 on Chinese it reads well).
When most letters of the texts are of those scripts, pieces per character is judged instead: a vocabulary made
for the script reads a character in one piece or less (a character per piece, or words of several characters),
one without it spells each character in its UTF-8 bytes (2-3 pieces) or as the unknown token.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from headswap.data.once import warn_once
from headswap.text.vocab_fit import measure, sampled

PIECES_PER_WORD = 1.6       # above: the vocabulary was not made for these words
PIECES_PER_CHARACTER = 1.5  # above, for texts written without spaces: it spells their characters in bytes
UNSPACED_SHARE = 0.5        # texts are judged per character when at least this share of their letters is of
                            # a script written without spaces
UNKNOWN_RATE = 0.02         # above: a share of the text is unreadable to it
# Built-in bodies made for many languages, cheapest first, with how to get each (README, docs/other-languages.md).
MULTILINGUAL = {"multilingual-e5-small": "make install-e5", "gemma3-270m": "make install-gemma"}

_LETTERS = re.compile(r"[^\W\d_]{2,}")
# Scripts written without spaces between words: Thai, Lao, Tibetan, Myanmar, Khmer, Hiragana, Katakana (and
# its halfwidth forms) and the CJK ideographs (with extension A, the compatibility block and the supplementary
# planes' extensions).
_UNSPACED = re.compile("[\u0e00-\u0fff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
                       "\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]")
_NOT_WORDS = ("@", "#", "http", "www.", "&")


@dataclass(frozen=True)
class LanguageFit:
    pieces_per_word: float      # tokens per word of letters (nan: the texts have no such words)
    unknown_rate: float         # unknown tokens / tokens, on the texts as they are
    texts: int                  # texts measured (a sample)
    pieces_per_character: float | None = None   # tokens per letter of those words, when the texts are mostly
                                                # of a script written without spaces (what is judged then)

    @property
    def unspaced(self) -> bool:
        """True when the texts are mostly of a script written without spaces: judged per character."""
        return self.pieces_per_character is not None

    @property
    def fits(self) -> bool:
        pieces = (self.pieces_per_character > PIECES_PER_CHARACTER if self.unspaced
                  else self.pieces_per_word > PIECES_PER_WORD)
        return not (pieces or self.unknown_rate > UNKNOWN_RATE)

    def pieces(self) -> str:
        """The pieces figure judged, in a few words."""
        if self.unspaced:
            return f"{self.pieces_per_character:.2f} pieces per character"
        return "no words" if math.isnan(self.pieces_per_word) else f"{self.pieces_per_word:.2f} word pieces per word"

    def figures(self) -> str:
        unspaced = " (a script written without spaces: judged per character, not per word)" if self.unspaced else ""
        return f"{self.pieces()}{unspaced}, {self.unknown_rate:.1%} unknown tokens"

    def made_for(self) -> str:
        """What a vocabulary made for the language reads, for the warning."""
        return "at most about 1 piece per character" if self.unspaced else "about 1.1-1.4 pieces per word"


def words_only(text: str) -> str:
    """The words of letters in `text`, space-joined: what pieces per word is measured on."""
    return " ".join(w for part in str(text).split() if not part.lower().startswith(_NOT_WORDS)
                    for w in _LETTERS.findall(part))


def language_fit(tokenizer, texts: Sequence[str]) -> LanguageFit | None:
    """The fit of `tokenizer` to `texts` (on vocab_fit's seeded sample), or None for a tokenizer it cannot
    measure (not a Hugging Face one)."""
    picked = sampled(texts)
    only = [words_only(t) for t in picked]
    try:
        raw = measure(tokenizer, picked)
        words = measure(tokenizer, only)
    except (TypeError, AttributeError, KeyError):
        return None
    letters = sum(len(t) - t.count(" ") for t in only)
    unspaced = sum(len(_UNSPACED.findall(t)) for t in only)
    per_character = words.tokens / letters if letters and unspaced >= UNSPACED_SHARE * letters else None
    return LanguageFit(words.pieces_per_word, raw.unknown_rate, raw.texts, per_character)


def alternatives(model: str) -> str:
    """The multilingual built-ins other than `model`, each with how to get it."""
    return " or ".join(f"{name} ({how})" for name, how in MULTILINGUAL.items() if name != str(model))


def warn_if_language_misfits(tokenizer, texts: Sequence[str], model: str,
                             source: str = "training data") -> LanguageFit | None:
    """Warn once, in one line, when `model`'s vocabulary does not fit the language of `texts`; return the fit."""
    fit = language_fit(tokenizer, texts)
    if fit is not None and not fit.fits:
        others = alternatives(model)
        warn_once(("language misfit", source, str(model)),
                  f"{source}: {model}'s vocabulary does not fit these texts' language: {fit.figures()} on a sample "
                  f"of {fit.texts} texts (a vocabulary made for the language: {fit.made_for()}); "
                  f"{'a multilingual body reads them whole: ' + others + '; ' if others else ''}the TF-IDF baseline "
                  f"(headswap bench, auto) needs no vocabulary")
    return fit


def rank_by_fit(models: Iterable[str], texts: Sequence[str]) -> tuple[list[str], dict[str, LanguageFit | None]]:
    """`models` with those whose vocabulary fits `texts` first (order kept otherwise), and each one's fit."""
    from headswap.models import load_tokenizer

    def fit(model: str) -> LanguageFit | None:
        try:
            return language_fit(load_tokenizer(model), texts)
        except Exception:   # noqa: BLE001 - a body that cannot load fails in its own rungs, with its own message
            return None
    fits = {m: fit(m) for m in models}
    return sorted(fits, key=lambda m: fits[m] is not None and not fits[m].fits), fits


def fit_note(fits: dict[str, LanguageFit | None]) -> str | None:
    """One line for auto's log when some body does not fit (None when all do), and the record for its results."""
    poor = [m for m, f in fits.items() if f is not None and not f.fits]
    if not poor:
        return None
    told = "; ".join(f"{m} " + (f.pieces() if f.unspaced else f"{f.pieces_per_word:.2f}")
                     + ("" if f.fits else " (does not fit)")
                     for m, f in fits.items() if f is not None)
    return (f"  vocabulary fit (word pieces per word, on the training texts): {told}; bodies that fit climb first"
            + ("" if len(poor) < len(fits) else f"; none fits: try {alternatives('')}"))


def as_record(fits: dict[str, LanguageFit | None]) -> dict:
    return {m: dict(asdict(f), fits=f.fits) if f is not None else None for m, f in fits.items()}
