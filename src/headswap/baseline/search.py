"""auto's TF-IDF baseline as a candidate, not a fixed yardstick: a linear SVM and logistic regression at a few
strengths C on the same features, cheapest first, each scored on validation, while a share of the budget allows
the next one. On a German news set the plain logistic regression (C 10) scored 0.717 on test where bench's TF-IDF
+ LinearSVC (C 1) scored 0.808 (issue 69).

The features are fitted once; each point of GRID fits only the linear model and scores the validation features
transformed once. The time bound is checked before each fit after the first, against an estimate from the fits
timed so far, so a tiny budget gets the first, the cheap SVM, alone.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable

import numpy as np

from headswap.baseline.tfidf import TfidfClassifier, linear_model

# Of auto's budget, what the search may take, the first fit included.
SHARE = 0.05
# A fit's cost, (least, most), against LinearSVC's at C 1 (liblinear), for an estimator not yet timed in the
# search: the logistic regression at C 10 (lbfgs) took 5.5-41 times as long on the features of GermEval 2018, SMS
# spam, emotion, HWU64 and CLINC150 (2 cores at load 3-5, 2026-11-29, benchmarks/results/tfidf_search/). An untimed
# estimator is priced at its most over the timed one's least, so the estimate errs long: 50 times the SVM's fit for
# the first logistic regression (4 times, the inverse of the SVM's old 0.25, would have let it run to 1.4-10 times
# its estimate), 0.2 of a logistic regression's for an SVM.
RELATIVE_COST = {"svm": (1.0, 1.0), "logistic": (5.0, 50.0)}
# Tried in this order, cheapest first, so that a bounded share reaches the SVM (the logistic regression alone took
# the whole 45 s of a 15-minute budget on emotion, HWU64 and CLINC150, where the SVM won on validation on two):
# bench's LinearSVC C 1, then outward from each estimator's usual strength (an SVM's best C on TF-IDF is lower
# than a logistic regression's); the logistic regression, the dearer, last, from the old plain fit's C 10.
GRID = (("svm", 1.0), ("svm", 0.3), ("svm", 3.0), ("svm", 10.0), ("logistic", 10.0), ("logistic", 3.0),
        ("logistic", 30.0), ("logistic", 1.0))
NAMES = {"logistic": "logistic regression", "svm": "linear SVM"}


def describe(linear: str, C: float) -> str:
    return f"TF-IDF + {NAMES[linear]} C={C:g}"


def tune_tfidf(train, validation, seconds: float, clock: Callable[[], float] = time.perf_counter,
               grid=GRID) -> tuple[TfidfClassifier, dict]:
    """Each point (linear, C) of `grid` fitted on train's (.texts, .labels) features and scored on validation: the
    first always, each other when its estimated fit (_estimate) keeps the search within `seconds`. The best
    validation macro F1 wins; on a tie a logistic regression, then the earlier tried. An SVM winner's temperature
    is fitted on validation (its probabilities; not its decisions). Returns (the winner, its record: linear, C,
    temperature, validation_macro_f1, seconds, features_seconds, limit_seconds, tried [each point's linear, C,
    validation_macro_f1, seconds; the first's with the features'], not_tried, name, note)."""
    t0 = clock()
    (linear, C), *rest = grid
    first = TfidfClassifier(C=C, linear=linear)
    rows, targets, _ = first._prepare(train.texts, train.labels, None, None)
    features_seconds = clock() - t0
    val = first.features_.transform(validation.texts)
    tried, best = [], []      # best: [the best so far, its rank]; the others are dropped (CLINC150's: 80 MB each)
    heads, not_tried = {}, []      # heads: each fit's seconds, the features' not included

    def attempt(clf: TfidfClassifier) -> None:
        start = clock()
        if clf is not first:
            clf.features_, clf.classes_ = first.features_, first.classes_
        with warnings.catch_warnings():      # an unconverged fit is still judged on validation like the others
            warnings.simplefilter("ignore", category=_convergence_warning())
            clf._fit_head(rows, targets)
        f1 = _validation_f1(clf, val, validation)
        heads[(clf.linear, clf.C)] = took = clock() - start
        tried.append({"linear": clf.linear, "C": clf.C, "validation_macro_f1": f1, "seconds": took})
        # A tie goes to a logistic regression, tried after the cheaper SVM: its probabilities are its own, fitted on
        # train, where the SVM's rest on one temperature fitted on the validation texts that chose it (and the
        # plain logistic fit won such ties when it came first); between the same estimator, to the earlier tried.
        rank = (f1, clf.linear == "logistic")
        if not best or rank > best[1]:
            best[:] = clf, rank

    attempt(first)
    tried[0]["seconds"] += features_seconds
    for linear, C in rest:
        if clock() - t0 + _estimate(heads, linear, C) > seconds:
            not_tried.append({"linear": linear, "C": C})     # a cheaper point later in the grid may still fit
            continue
        attempt(TfidfClassifier(C=C, linear=linear))
    best, (f1, _) = best
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
        said = f"{NAMES[record['linear']]} C {record['C']:g} alone"
    else:
        said = f"{NAMES[record['linear']]} C {record['C']:g} best on validation of {n} tried"
    if record["not_tried"]:
        said += (f"; {len(record['not_tried'])} more not tried: each would have passed the search's "
                 f"{record['limit_seconds']:.0f} s")
    return said


def _estimate(heads: dict, linear: str, C: float) -> float:
    """The seconds a fit of (linear, C) on the features may take, from the fits timed so far (`heads`, in the order
    fitted): the dearest of that estimator at a C as large or larger (a larger C converges more slowly), twice its
    dearest at a smaller C, or, none of its own timed yet, the first timed of another (GRID's first of each is the
    point RELATIVE_COST was measured at) at its most over that one's least."""
    same = {c: s for (lin, c), s in heads.items() if lin == linear}
    if not same:
        (lin, _), s = next(iter(heads.items()))
        return s * RELATIVE_COST[linear][1] / RELATIVE_COST[lin][0]
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
