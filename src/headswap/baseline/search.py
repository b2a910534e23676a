"""auto's TF-IDF baseline as a candidate, not a fixed yardstick: after the plain fit (logistic regression, C 10),
the other strengths C and a linear SVM on the same features, each scored on validation, while a share of the
budget allows the next one. On a German news set the plain fit scored 0.717 on test where bench's TF-IDF +
LinearSVC (C 1) scored 0.808 (issue 69).

The features are fitted once; each further point of GRID fits only the linear model and scores the validation
features transformed once. The time bound is checked before each fit, against an estimate from the fits timed so
far, so a tiny budget gets the plain fit alone.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable

import numpy as np

from headswap.baseline.tfidf import TfidfClassifier, linear_model

# Of auto's budget, what the search may take, the plain fit included.
SHARE = 0.05
# A fit's cost against the logistic regression's, for an estimator not yet timed in the search: LinearSVC (C 1,
# liblinear) fit in 0.03-0.2 of the time of the plain logistic regression (C 10, lbfgs) on the features of
# GermEval 2018, SMS spam, emotion, HWU64 and CLINC150 (2 cores at load 3-5, 2026-11-29); 0.25 keeps a margin.
RELATIVE_COST = {"logistic": 1.0, "svm": 0.25}
# Tried in this order after the plain fit: bench's LinearSVC C 1 first, then outward from each estimator's usual
# strength (an SVM's best C on TF-IDF is lower than a logistic regression's).
GRID = (("svm", 1.0), ("svm", 0.3), ("logistic", 3.0), ("svm", 3.0), ("logistic", 30.0), ("logistic", 1.0),
        ("svm", 10.0))
NAMES = {"logistic": "logistic regression", "svm": "linear SVM"}


def describe(linear: str, C: float) -> str:
    return f"TF-IDF + {NAMES[linear]} C={C:g}"


def tune_tfidf(train, validation, seconds: float, clock: Callable[[], float] = time.perf_counter,
               grid=GRID) -> tuple[TfidfClassifier, dict]:
    """The plain TfidfClassifier fitted on train (.texts, .labels) and scored on validation, then each point
    (linear, C) of `grid` on its features whose estimated fit (_estimate) keeps the search within `seconds`.
    The best validation macro F1 wins (the earlier tried on a tie). An SVM winner's temperature is fitted on
    validation (its probabilities; not its decisions). Returns (the winner, its record: linear, C, temperature,
    validation_macro_f1, seconds, features_seconds, limit_seconds, tried [each point's linear, C,
    validation_macro_f1, seconds], not_tried, name, note)."""
    t0 = clock()
    plain = TfidfClassifier()
    rows, targets, _ = plain._prepare(train.texts, train.labels, None, None)
    features_seconds = clock() - t0
    val = plain.features_.transform(validation.texts)
    tried, best = [], []      # best: [the best so far, its F1]; the others are dropped (CLINC150's: 80 MB each)

    def attempt(clf: TfidfClassifier) -> None:
        start = clock()
        if clf is not plain:
            clf.features_, clf.classes_ = plain.features_, plain.classes_
        with warnings.catch_warnings():      # an unconverged fit is still judged on validation like the others
            warnings.simplefilter("ignore", category=_convergence_warning())
            clf._fit_head(rows, targets)
        f1 = _validation_f1(clf, val, validation)
        tried.append({"linear": clf.linear, "C": clf.C, "validation_macro_f1": f1, "seconds": clock() - start})
        if not best or f1 > best[1]:      # a tie keeps the earlier
            best[:] = clf, f1

    attempt(plain)
    tried[0]["seconds"] += features_seconds
    heads, not_tried = {(plain.linear, plain.C): tried[0]["seconds"] - features_seconds}, []
    for linear, C in (p for p in grid if p != (plain.linear, plain.C)):
        if clock() - t0 + _estimate(heads, linear, C) > seconds:
            not_tried.append({"linear": linear, "C": C})     # a cheaper point later in the grid may still fit
            continue
        attempt(TfidfClassifier(C=C, linear=linear))
        heads[(linear, C)] = tried[-1]["seconds"]
    best, f1 = best
    if best.linear == "svm":
        _fit_temperature(best, val, validation)
    record = {"linear": best.linear, "C": best.C, "validation_macro_f1": f1,
              "seconds": clock() - t0, "features_seconds": features_seconds, "limit_seconds": seconds,
              "tried": tried, "not_tried": not_tried, "name": describe(best.linear, best.C)}
    if best.linear == "svm":
        record["temperature"] = best.temperature
    record["note"] = note(record)
    return best, record


def note(record: dict) -> str:
    """The search in a line: what won among how many, and what was left untried and why."""
    n = len(record["tried"])
    if n == 1:
        said = "the plain fit alone"
    else:
        said = f"{NAMES[record['linear']]} C {record['C']:g} best on validation of {n} tried"
    if record["not_tried"]:
        said += (f"; {len(record['not_tried'])} more not tried: each would have passed the search's "
                 f"{record['limit_seconds']:.0f} s")
    return said


def _estimate(heads: dict, linear: str, C: float) -> float:
    """The seconds a fit of (linear, C) on the features may take, from the fits timed so far (`heads`): the dearest
    of that estimator at a C as large or larger (a larger C converges more slowly), twice its dearest at a smaller
    C, or, none of its own timed yet, the dearest of the others at RELATIVE_COST."""
    same = {c: s for (lin, c), s in heads.items() if lin == linear}
    if not same:
        return max(s * RELATIVE_COST[linear] / RELATIVE_COST[lin] for (lin, _), s in heads.items())
    above = [s for c, s in same.items() if c >= C]
    return max(above) if above else 2 * max(same.values())


def _validation_f1(clf: TfidfClassifier, val, validation) -> float:
    """Macro F1 as TfidfClassifier.evaluate measures it, on validation's features transformed once."""
    from headswap.baseline import evaluate_probabilities
    probs = clf.model_.predict_proba(val)
    return float(evaluate_probabilities(lambda _: probs, validation.texts, validation.labels, clf.labels_).f1("macro"))


def _fit_temperature(clf: TfidfClassifier, val, validation) -> None:
    """The temperature whose softmax of the SVM's validation scores has the least log-loss, folded into model_."""
    from headswap.decisions.calibration import fit_temperature
    m, before = clf.model_, clf.temperature
    scores = m.decision_function(val) * before     # the SVM's own scores
    logits = np.column_stack([np.zeros_like(scores), scores]) if scores.ndim == 1 else scores
    index = {lab: k for k, lab in enumerate(clf.labels_)}
    clf.temperature = fit_temperature(logits, [index[str(v)] for v in validation.labels])
    scale = before / clf.temperature
    clf.model_ = linear_model(m.coef_ * scale, m.intercept_ * scale, clf.C, clf.max_iter, m.classes_)


def _convergence_warning():
    from sklearn.exceptions import ConvergenceWarning
    return ConvergenceWarning
