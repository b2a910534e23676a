"""A TF-IDF model's decision score, split exactly over the words of a text.

The logistic regression's score for class k is intercept_k + sum_f x_f * coef_kf over the text's n-grams f.
Each term goes to the words its n-gram's occurrences cover: a word unigram to its word, a word bigram half to
each of its two words, a character n-gram (char_wb: within one whitespace-separated token) to the words its
characters overlap. The scores of a text's words therefore sum to its decision score less the intercept.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from headswap.explain.words import char_words, word_spans


def tfidf_scores(model, texts: list[str], targets: list[list[int]]):
    """[(spans, [scores for each target column])] per text."""
    features = model.features_.transform(texts).tocsr()
    coef = np.asarray(model.model_.coef_, dtype=np.float64)
    names = {name: vec for name, vec in model.features_.transformer_list}
    offsets, at = {}, 0
    for name, vec in model.features_.transformer_list:    # each part's columns, in FeatureUnion order
        offsets[name], at = at, at + len(vec.vocabulary_)
    out = []
    for i, (text, target) in enumerate(zip(texts, targets)):
        spans = word_spans(text)
        owner = char_words(text, spans)
        # (column -> list of {word: share}) for every occurrence of each n-gram in the text
        shares: dict[int, list[dict[int, float]]] = defaultdict(list)
        for name, vec in names.items():
            for term, pieces in _occurrences(vec, text, owner):
                col = vec.vocabulary_.get(term)
                if col is not None:
                    shares[offsets[name] + col].append(pieces)
        row = features[i]
        scores = []
        for k in target:
            weights = _class_weights(coef, k)
            s = np.zeros(len(spans))
            for col, x in zip(row.indices, row.data):
                occ = shares.get(int(col))
                if not occ:
                    continue
                value = x * weights[col] / len(occ)
                for pieces in occ:
                    for w, part in pieces.items():
                        s[w] += value * part
            scores.append(s)
        out.append((spans, scores))
    return out


def _class_weights(coef: np.ndarray, k: int) -> np.ndarray:
    """Class k's coefficients; a binary model stores one row, for class 1 (class 0's score is its negative)."""
    if coef.shape[0] == 1:
        return coef[0] if k == 1 else -coef[0]
    return coef[k]


def _occurrences(vec, text: str, owner: np.ndarray):
    """(term, {word: share of the term}) for each n-gram occurrence vec's analyzer makes of text, as scikit-learn's
    word and char_wb analyzers make them (lowercased, the word token pattern, n-gram ranges)."""
    lo, hi = vec.ngram_range
    if vec.analyzer == "word":
        pattern = re.compile(vec.token_pattern)
        tokens = [(m.group(0).lower() if vec.lowercase else m.group(0), m.span()) for m in pattern.finditer(text)]
        for n in range(lo, hi + 1):
            for j in range(len(tokens) - n + 1):
                gram = tokens[j:j + n]
                words = [_word(owner, *span) for _, span in gram]
                yield " ".join(t for t, _ in gram), _even(words)
    elif vec.analyzer == "char_wb":
        for m in re.finditer(r"\S+", text):
            token = m.group(0).lower() if vec.lowercase else m.group(0)
            if len(token) != len(m.group(0)):     # lowercasing changed its length (rare letters): no char map
                continue
            padded = f" {token} "
            for n in range(lo, hi + 1):
                # scikit-learn's _char_wb_ngrams: a token shorter than n gives the whole padded token once
                starts = range(max(len(padded) - n + 1, 1))
                for j in starts:
                    chars = range(m.start() + j - 1, m.start() + min(j + n, len(padded)) - 1)
                    words = [owner[c] for c in chars if 0 <= c - m.start() < len(token) and owner[c] >= 0]
                    yield padded[j:j + n], _even(words)
                if n >= len(padded):    # scikit-learn stops at the n that takes the whole padded token
                    break
    else:   # another analyzer: its terms are not placed; they go to no word
        return


def _word(owner, start, end) -> int:
    hit = owner[start:end]
    hit = hit[hit >= 0]
    return int(hit[0]) if len(hit) else -1


def _even(words: list[int]) -> dict[int, float]:
    """Equal shares per covered position (a character or a word of a bigram), summed per word."""
    words = [w for w in words if w >= 0]
    share: dict[int, float] = defaultdict(float)
    for w in words:
        share[w] += 1.0 / len(words)
    return share
