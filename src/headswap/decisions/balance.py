"""Decisions for macro F1 on unequal classes: post-hoc logit adjustment (Menon et al. 2021, "Long-tail learning via
logit adjustment").

A classifier trained with cross-entropy answers the class with the highest probability, which maximises accuracy.
Macro F1 weighs a rare class's F1 as much as a common one's, and is higher when the decisions lean toward the rare
classes: each text goes to

    argmax_k  log p_k - tau * log prior_k

where prior is the training data's class shares; tau = 0 is the argmax, tau = 1 the decision that treats every
class as equally likely (balanced error). On GermEval 2018 (a third of the tweets offensive) the argmax of a
fine-tuned e5 scored 0.7770 test macro F1 and its adjusted decision 0.7933 (tau 0.8, tuned on its 451 validation
texts); on balanced classes every tau decides the same.

tau is tuned on validation, and kept only where held-out folds of validation prefer it to the argmax (each fold
decided with the tau the other folds chose), as a blend is (headswap.baseline.blend).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headswap.data.sampling import stratified_folds
from headswap.metrics import confusion_matrix, macro_f1

TAUS = tuple(round(0.1 * i, 1) for i in range(16))   # 0 (argmax) to 1.5: Menon et al. tune tau up to 2
FOLDS = 5


def offsets(prior, tau: float) -> np.ndarray:
    """What each class's log-probability gains: -tau log prior, shifted so that the most common class's is 0."""
    log_prior = np.log(np.asarray(prior, dtype=np.float64))
    return -tau * (log_prior - log_prior.max())


def decide(probs, prior, tau: float) -> np.ndarray:
    """(N,) class indices: each row's argmax of log p - tau log prior (the plain argmax at tau 0)."""
    probs = np.asarray(probs, dtype=np.float64)
    if not tau:
        return probs.argmax(axis=1)
    return (np.log(np.clip(probs, 1e-300, None)) + offsets(prior, tau)).argmax(axis=1)


@dataclass
class Tuning:
    """What tune() found: the tau chosen on all validation texts, and the macro F1 of the argmax and of the tuned
    decision there and out of fold. kept: the out-of-fold tuned decision scored above the argmax."""
    tau: float
    argmax: float
    tuned: float
    out_of_fold: float | None

    @property
    def kept(self) -> bool:
        return self.tau > 0 and self.out_of_fold is not None and self.out_of_fold > self.argmax


def tune(probs, y, prior, taus=TAUS, folds: int = FOLDS, seed: int = 0) -> Tuning:
    """tau for macro F1 on validation probabilities (N, K) with class indices y, and its out-of-fold check (ties:
    the smaller tau, the argmax first)."""
    probs, y = np.asarray(probs, dtype=np.float64), np.asarray(y)
    k = probs.shape[1]

    def score(tau, rows) -> float:
        return float(macro_f1(confusion_matrix(y[rows], decide(probs[rows], prior, tau), k)))

    def best(rows) -> float:
        return max(taus, key=lambda t: (score(t, rows), -t))

    everything = np.arange(len(y))
    tau = best(everything)
    argmax, tuned = score(0.0, everything), score(tau, everything)
    if not tau or len(y) < 2 * folds:
        return Tuning(tau, argmax, tuned, None)
    fold, decided = stratified_folds(y, folds, seed), np.empty(len(y), dtype=int)
    for f in range(folds):
        here = fold == f
        decided[here] = decide(probs[here], prior, best(np.flatnonzero(~here)))
    return Tuning(tau, argmax, tuned, float(macro_f1(confusion_matrix(y, decided, k))))
