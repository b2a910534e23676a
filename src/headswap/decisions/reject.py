"""Out-of-scope texts: the reject option ("none of these").

A single-label classifier with `out_of_scope="oos"` answers "oos" for a text when its top in-scope class has a
calibrated probability below a threshold, or when an out-of-scope class learned from the data (training rows
labelled "oos") wins the argmax. The threshold is tuned on validation data after the temperature, for a target
in-scope accuracy (the highest threshold that keeps it) or out-of-scope recall (the lowest that reaches it):
both move one way as the threshold rises, so either target picks one threshold. Metrics follow Larson et al.
(2019, CLINC150): in-scope accuracy counts a rejected in-scope text as wrong; out-of-scope recall is the share of
out-of-scope texts rejected.
"""

from __future__ import annotations

import numpy as np


def top_in_scope(probs: np.ndarray, oos_index: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(index, probability) of each row's most probable in-scope class."""
    p = np.array(probs, dtype=np.float64, copy=True)
    if oos_index is not None:
        p[:, oos_index] = -1.0
    best = p.argmax(axis=1)
    return best, p[np.arange(len(p)), best]


def rejected(probs, threshold: float | None, oos_index: int | None, score=None) -> np.ndarray:
    """(N,) booleans: the out-of-scope class wins, or the top in-scope probability is below the threshold; or,
    given an out-of-scope `score` per row (headswap.decisions.oos_scores, higher = more out of scope), it is above it."""
    probs = np.asarray(probs)
    out = np.zeros(len(probs), dtype=bool)
    if not len(probs):
        return out
    if oos_index is not None:
        out |= probs.argmax(axis=1) == oos_index
    if score is not None:
        if threshold is not None:
            out |= np.asarray(score) > threshold
    elif threshold:
        out |= top_in_scope(probs, oos_index)[1] < threshold
    return out


def scores(probs, y, is_oos, threshold: float | None, oos_index: int | None, score=None) -> dict:
    """In-scope accuracy (a rejected in-scope text is wrong), out-of-scope recall, precision and F1, and the share
    rejected. y: each row's class index (any value on out-of-scope rows); is_oos: (N,) booleans; score: as in
    rejected()."""
    probs, y, is_oos = np.asarray(probs), np.asarray(y), np.asarray(is_oos, dtype=bool)
    rej = rejected(probs, threshold, oos_index, score)
    right = ~rej & (top_in_scope(probs, oos_index)[0] == y)
    n_in, n_oos = int((~is_oos).sum()), int(is_oos.sum())
    hit = int((rej & is_oos).sum())
    recall = hit / n_oos if n_oos else None
    precision = hit / int(rej.sum()) if rej.sum() else None
    f1 = (2 * precision * recall / (precision + recall)) if precision and recall else (0.0 if n_oos else None)
    return {"in_scope_accuracy": float(right[~is_oos].mean()) if n_in else None,
            "oos_recall": recall, "oos_precision": precision, "oos_f1": f1,
            "rejected": float(rej.mean()) if len(rej) else 0.0, "threshold": threshold,
            "in_scope_texts": n_in, "oos_texts": n_oos}


def tune(probs, y, is_oos, metric: str, target: float, oos_index: int | None,
         score=None) -> tuple[float | None, str | None]:
    """(threshold, a note when the target cannot be met). in_scope_accuracy: the highest threshold whose in-scope
    accuracy stays >= target; oos_recall: the lowest whose out-of-scope recall reaches it (needs oos rows). With a
    `score` per row the threshold is on it (reject above; None: reject nothing), else on the top probability (reject
    below; 0.0: nothing)."""
    probs, y, is_oos = np.asarray(probs), np.asarray(y), np.asarray(is_oos, dtype=bool)
    if metric == "oos_recall" and not is_oos.any():
        raise ValueError("an out-of-scope recall target needs out-of-scope texts in the validation data")
    # Thresholds halfway between consecutive confidences (and 0, and above the highest) reject one more group of
    # rows each; halfway, so that float noise between the validation run and a later one moves no decision. The
    # metric moves one way along them, so a bisection finds the threshold. A score's confidence is its negation.
    if score is None:
        conf = np.unique(top_in_scope(probs, oos_index)[1])
        top = (conf[-1] + 1.0) / 2 if conf[-1] < 1 else 1.0
        candidates = np.concatenate([[0.0], (conf[:-1] + conf[1:]) / 2, [top]])

        def threshold_of(i: int) -> float | None:
            return float(candidates[i])
    else:
        conf = np.unique(-np.asarray(score, dtype=np.float64))
        candidates = np.concatenate([[-np.inf], (conf[:-1] + conf[1:]) / 2, [conf[-1] + 1.0]])

        def threshold_of(i: int) -> float | None:
            return None if i == 0 else float(-candidates[i])

    def meets(i: int) -> bool:
        return scores(probs, y, is_oos, threshold_of(i), oos_index, score)[metric] >= target
    lo, hi = 0, len(candidates) - 1
    if metric == "in_scope_accuracy":      # falls as the threshold rises: the last candidate that meets it
        if not meets(0):
            return threshold_of(0), _unreachable(metric, scores(probs, y, is_oos, None, oos_index)[metric], target)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if meets(mid) else (lo, mid - 1)
    else:                                  # rises with the threshold: the first candidate that meets it
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if meets(mid) else (mid + 1, hi)
    return threshold_of(lo), None


def _unreachable(metric: str, best: float, target: float) -> str:
    return (f"reject option: validation {metric.replace('_', ' ')} is {best:.3f} before any text is rejected by "
            f"confidence, below the target {target:g}: no threshold meets it, so none is set")


def describe(s: dict) -> str:
    """One line of scores(): what a report prints."""
    def pct(v):
        return "n/a" if v is None else f"{100 * v:.1f}%"
    t = s.get("threshold")
    none = t is None or (t == 0 and s.get("score", "softmax") == "softmax")   # softmax's 0: nothing rejected
    return (f"in-scope accuracy {pct(s['in_scope_accuracy'])} ({s['in_scope_texts']} texts), out-of-scope recall "
            f"{pct(s['oos_recall'])}, precision {pct(s['oos_precision'])} ({s['oos_texts']} texts); "
            f"{pct(s['rejected'])} rejected, threshold {'none' if none else f'{t:.4f}'}")
