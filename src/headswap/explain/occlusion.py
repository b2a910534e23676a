"""Occlusion: each word deleted in turn and the text rescored; a word's score is how much the explained class's
logit falls without it. Needs nothing but the model's scores, so it explains any model: an exported ONNX graph,
a blend, a cross-encoder. Costs one prediction per word (a chunked text's windows included)."""

from __future__ import annotations

import numpy as np

from headswap.explain.words import without_words, word_spans


# What stands for a text with its only word deleted: every model refuses a blank text, and a full stop is one
# token in every vocabulary that carries next to no class.
NOTHING = "."


def occlusion_scores(model, texts: list[str], targets: list[list[int]], batch_size: int = 64,
                     progress: bool = False):
    """[(spans, [word scores for each target column])] per text."""
    from tqdm.auto import tqdm
    out = []
    for text, target in tqdm(list(zip(texts, targets)), desc="explain", unit=" texts", disable=not progress):
        spans = word_spans(text)
        variants = [text] + [without_words(text, spans, [i]) for i in range(len(spans))]
        variants = [v if v.strip() else NOTHING for v in variants]
        scores = np.concatenate([logits(model, variants[at:at + batch_size])
                                 for at in range(0, len(variants), batch_size)])
        out.append((spans, [scores[0, k] - scores[1:, k] for k in target]))
    return out


def logits(model, texts: list[str]) -> np.ndarray:
    """(N, K) scores whose differences occlusion reports: the logits (the decision function) where the model
    has them, else log-probabilities. A binary scikit-learn decision function (one column, for class 1) is
    spread to the two columns -d/2 and d/2, whose difference is d."""
    if hasattr(model, "decision_function"):
        d = np.asarray(model.decision_function(texts), dtype=np.float64)
        return np.stack([-d / 2, d / 2], axis=1) if d.ndim == 1 else d
    return np.log(np.clip(np.asarray(model.predict_proba(texts), dtype=np.float64), 1e-12, None))
