"""Predictions written as JSON lines, one per input record in input order, a chunk at a time: what predict,
batch prediction and the server answer for each row (the label, or labels, and where the top classes tie).

Reading the rows, and resuming an interrupted run, is headswap.data.stream's.
"""

from __future__ import annotations

import json
import logging
from typing import Iterable, TextIO

logger = logging.getLogger(__name__)


def decisions(clf, probs, oos_score=None) -> tuple[str, list]:
    """What predict answers for each row of clf.predict_proba's output: ("label", a name per row) or, for a
    multi-label model, ("labels", a list of names per row). oos_score: each row's out-of-scope score, for a model
    that rejects by one (TextClassifier.predict_scored)."""
    if not len(probs):
        return ("labels" if getattr(clf, "multi_label", False) else "label"), []
    if getattr(clf, "multi_label", False):
        return "labels", [[str(v) for v in s] for s in clf.decide(probs)]
    if getattr(clf, "out_of_scope", None) is not None:    # the reject option may answer a label of its own
        return "label", [str(v) for v in (clf.decide(probs) if oos_score is None else clf.decide(probs, oos_score))]
    if hasattr(clf, "decide"):      # a TextClassifier or a blend: its decisions may lean toward rare classes
        return "label", [str(v) for v in clf.decide(probs)]
    labels = [str(v) for v in clf.labels_]
    return "label", [labels[int(i)] for i in probs.argmax(axis=1)]


TIE = 1e-6     # top probabilities this close are a tie: the 6 decimals predict writes could not tell them apart


def tied_classes(probs, labels: list, answers: list) -> list[list[str] | None]:
    """Per row of single-label probabilities: the classes tied for the top (within TIE) when the answer is one
    of two or more of them, else None. A tie's answer is the first tied class in label order (numpy's argmax,
    as scikit-learn's predict), which decides nothing: predict marks it rather than pass it off as a choice."""
    import numpy as np
    probs = np.asarray(probs, dtype=np.float64)
    if not probs.size:
        return [None] * len(answers)
    near = probs.max(axis=1, keepdims=True) - probs <= TIE     # one vectorised pass: a million rows stay cheap
    out: list[list[str] | None] = [None] * len(answers)
    for i in np.flatnonzero(near.sum(axis=1) > 1):
        tied = [str(lab) for lab, on in zip(labels, near[i]) if on]
        out[i] = tied if answers[i] in tied else None
    return out


def warn_ties(ties: int, texts: int, marked: str = 'those rows list the tied classes under "tied"') -> None:
    if ties:
        logger.warning("%d of %d texts are ties: their top classes' probabilities are equal (within %g), so the "
                       "label given, the first tied class in label order, decides nothing; %s", ties, texts, TIE,
                       marked)


def predict_stream(clf, rows: Iterable[tuple[int, str]], out: TextIO, chunk_size: int = 256,
                   done: int = 0, progress: bool = True, model: str | None = None) -> int:
    """Predict `rows` chunk by chunk, writing JSON lines to `out`; returns the number of rows written.
    `done`: rows predicted by an earlier run (already skipped in `rows`), for the progress bar; `model`:
    the model's fingerprint, recorded in every line."""
    from tqdm.auto import tqdm

    labels = list(clf.labels_)
    rows = iter(rows)
    written = 0
    # One truncation note for the whole stream, not one per chunk.
    encoder = getattr(clf, "encoder_", None)
    truncated = ties = 0
    if encoder is not None:
        encoder.quiet = True
    bar = tqdm(desc="predict", unit=" rows", disable=not progress, initial=done)
    from headswap.classifier.reject_option import scored_proba, split_scored
    run = scored_proba(clf)
    while True:
        chunk = [r for _, r in zip(range(chunk_size), rows)]
        if not chunk:
            break
        try:
            probs, score = split_scored(clf, run([t for _, t in chunk]))
        except BaseException:
            if encoder is not None:
                encoder.quiet = False
            raise
        truncated += encoder.truncated if encoder is not None else 0
        key, answers = decisions(clf, probs, score)
        tied = tied_classes(probs, [str(v) for v in labels], answers) if key == "label" else [None] * len(chunk)
        for (number, text), p, answer, tie in zip(chunk, probs, answers, tied):
            record = {"row": number, "text": text, key: answer,
                      "probabilities": {lab: round(float(v), 6) for lab, v in zip(labels, p)}}
            if tie:     # only on a tie, so every existing reader of the lines reads them as before
                record["tied"] = tie
                ties += 1
            if model is not None:
                record["model"] = model
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        out.flush()
        written += len(chunk)
        bar.update(len(chunk))
    bar.close()
    warn_ties(ties, written)
    if encoder is not None:
        encoder.quiet = False
        if truncated:
            logger.warning("%d of %d texts were longer than %d tokens and were truncated (raise max_length to keep "
                           "more)", truncated, written, encoder.max_length)
    return written
