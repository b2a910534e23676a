"""Out-of-scope texts: the reject option ("none of these").

A single-label classifier with `out_of_scope="oos"` answers "oos" for a text when its top in-scope class has a
calibrated probability below a threshold, or when an out-of-scope class learned from the data (training rows
labelled "oos") wins the argmax. The threshold is tuned on validation data after the temperature, for a target
in-scope accuracy (the highest threshold that keeps it) or out-of-scope recall (the lowest that reaches it):
both move one way as the threshold rises, so either target picks one threshold. Metrics follow Larson et al.
(2019, CLINC150): in-scope accuracy counts a rejected in-scope text as wrong; out-of-scope recall is the share of
out-of-scope texts rejected.

A target read on a few validation texts is a noisy figure: TextClassifier tunes with `confidence`, so that the
target holds at the lower end of the metric's 95% interval on the validation counts (interval(): Wilson's), not
only at its point estimate; expectation() records what to expect on new texts, with that interval, and whether
the validation texts can support the target at all.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

# The interval a reject target is set and reported with: the target must hold at its lower end.
CONFIDENCE = 0.95


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


def interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of the proportion k/n (Wilson 1927): unlike the normal approximation it stays
    inside [0, 1] and does not shrink to a point at 0/n or n/n (Brown, Cai and DasGupta 2001 recommend it)."""
    if n <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def counts(s: dict, metric: str) -> tuple[int, int]:
    """(successes, texts) behind a scores() metric: in-scope texts right, or out-of-scope texts rejected."""
    n = s["in_scope_texts"] if metric == "in_scope_accuracy" else s["oos_texts"]
    return (round(s[metric] * n) if s[metric] is not None else 0), n


def tune(probs, y, is_oos, metric: str, target: float, oos_index: int | None, score=None,
         confidence: float | None = None) -> tuple[float | None, str | None]:
    """(threshold, a note when the target cannot be met). in_scope_accuracy: the highest threshold whose in-scope
    accuracy stays >= target; oos_recall: the lowest whose out-of-scope recall reaches it (needs oos rows). With a
    `score` per row the threshold is on it (reject above; None: reject nothing), else on the top probability (reject
    below; 0.0: nothing). With `confidence`, "meets the target" is read at the lower end of the metric's interval
    on these counts; where no threshold meets it there, the point estimate's threshold, and a note that says the
    validation texts cannot support the target."""
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

    def at(i: int) -> dict:
        return scores(probs, y, is_oos, threshold_of(i), oos_index, score)

    def bound(i: int) -> float:      # the metric at the i-th threshold: its point estimate, or its interval's low end
        s = at(i)
        return s[metric] if confidence is None else interval(*counts(s, metric), confidence)[0]
    last = len(candidates) - 1
    # in-scope accuracy falls as the threshold rises (the last candidate that meets the target); out-of-scope
    # recall rises with it (the first); where the target is met at all, it is met at the loosest end
    loosest = 0 if metric == "in_scope_accuracy" else last
    if bound(loosest) < target:
        if confidence is not None:
            threshold, note = tune(probs, y, is_oos, metric, target, oos_index, score)
            return threshold, note or _unsupported(metric, at(loosest), target, confidence)
        return threshold_of(0), _unreachable(metric, scores(probs, y, is_oos, None, oos_index)[metric], target)
    lo, hi = 0, last
    while lo < hi:
        if metric == "in_scope_accuracy":
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if bound(mid) >= target else (lo, mid - 1)
        else:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if bound(mid) >= target else (mid + 1, hi)
    return threshold_of(lo), None


def _unsupported(metric: str, best: dict, target: float, confidence: float) -> str:
    """The note when even the loosest threshold's interval does not reach the target (`best`: its scores())."""
    k, n = counts(best, metric)
    low = interval(k, n, confidence)[0]
    if metric == "oos_recall":
        what = (f"the validation data holds {n} out-of-scope text{'s' if n != 1 else ''}: even with every one "
                f"rejected, the lower end of out-of-scope recall's {confidence:.0%} interval is {low:.3f}")
    else:
        what = (f"validation in-scope accuracy is {best[metric]:.3f} on {n} texts before the threshold rejects any, "
                f"and the lower end of its {confidence:.0%} interval {low:.3f}")
    return (f"reject option: {what}, below the target {target:g}: these validation texts cannot support it. The "
            f"threshold meets it on them at the point estimate only, and new texts may fall short; more validation "
            f"texts can support it")


def _unreachable(metric: str, best: float, target: float) -> str:
    return (f"reject option: validation {metric.replace('_', ' ')} is {best:.3f} before any text is rejected by "
            f"confidence, below the target {target:g}: no threshold meets it, so none is set")


def expectation(probs, y, is_oos, threshold: float | None, metric: str, target: float, oos_index: int | None,
                score=None, confidence: float = CONFIDENCE) -> dict | None:
    """What the validation rows promise for new texts at `threshold`: the metric, its interval on their counts,
    on how many texts, and whether the target holds at the interval's lower end (supported). None without texts
    to read the metric on."""
    s = scores(probs, y, is_oos, threshold, oos_index, score)
    k, n = counts(s, metric)
    if not n:
        return None
    low, high = interval(k, n, confidence)
    return {"metric": metric, "value": s[metric], "low": low, "high": high, "texts": n, "confidence": confidence,
            "target": target, "supported": low >= target}


def describe_expectation(e: dict) -> str:
    """One line of expectation(): 'out-of-scope recall 0.80, 95% interval 0.74-0.85 on 120 validation texts; ...'."""
    name = "out-of-scope recall" if e["metric"] == "oos_recall" else "in-scope accuracy"
    kind = "out-of-scope" if e["metric"] == "oos_recall" else "in-scope"
    line = (f"{name} {e['value']:.2f}, {e['confidence']:.0%} interval {e['low']:.2f}-{e['high']:.2f} on "
            f"{e['texts']} {kind} validation text{'s' if e['texts'] != 1 else ''}")
    if e["supported"]:
        return line + f": the target {e['target']:g} holds at the interval's lower end"
    return line + (f": these validation texts cannot support the target {e['target']:g} (the interval's lower end "
                   f"is below it), so new texts may fall short of it")


def describe(s: dict) -> str:
    """One line of scores(): what a report prints."""
    def pct(v):
        return "n/a" if v is None else f"{100 * v:.1f}%"
    t = s.get("threshold")
    none = t is None or (t == 0 and s.get("score", "softmax") == "softmax")   # softmax's 0: nothing rejected
    return (f"in-scope accuracy {pct(s['in_scope_accuracy'])} ({s['in_scope_texts']} texts), out-of-scope recall "
            f"{pct(s['oos_recall'])}, precision {pct(s['oos_precision'])} ({s['oos_texts']} texts); "
            f"{pct(s['rejected'])} rejected, threshold {'none' if none else f'{t:.4f}'}")
