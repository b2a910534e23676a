"""Words of a text and what belongs to each: the unit every explanation is given in. A word is a run of letters
and digits (with inner apostrophes: "don't") or a run of punctuation; word pieces, characters and n-grams are
mapped onto the words they overlap."""

from __future__ import annotations

import re

import numpy as np

WORD = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]+")


def word_spans(text: str) -> list[tuple[int, int]]:
    """Each word's [start, end) in text."""
    return [m.span() for m in WORD.finditer(text)]


def char_words(text: str, spans: list[tuple[int, int]]) -> np.ndarray:
    """For each character of text, the index of its word (-1 for whitespace)."""
    owner = np.full(len(text), -1, dtype=np.int64)
    for i, (s, e) in enumerate(spans):
        owner[s:e] = i
    return owner


def word_of(owner: np.ndarray, start: int, end: int) -> int:
    """The word covering most of text[start:end] (a token's characters); for a token of whitespace alone (a
    byte-level BPE's lone space piece) the word after it; -1 for a token of no characters (special tokens) or
    trailing whitespace."""
    if end <= start:
        return -1
    hit = owner[max(start, 0):max(end, 0)]
    hit = hit[hit >= 0]
    if not len(hit):
        after = owner[end:]
        after = after[after >= 0]
        return int(after[0]) if len(after) else -1
    values, counts = np.unique(hit, return_counts=True)
    return int(values[np.argmax(counts)])


def without_words(text: str, spans: list[tuple[int, int]], drop) -> str:
    """text with the words at indices `drop` deleted (one of the spaces around each removed, so words do not join
    and no double space is left)."""
    drop = sorted(set(int(i) for i in drop))
    out, at = [], 0
    for i in drop:
        s, e = spans[i]
        out.append(text[at:s])
        at = e
        if at < len(text) and text[at] == " " and (s == 0 or text[s - 1] == " "):
            at += 1     # "a cash prize" less "cash": "a prize", not "a  prize"
    out.append(text[at:])
    return "".join(out)
