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

tau is tuned on validation, and kept only where held-out folds of validation prefer it to the argmax: each fold
decided with the tau the other folds chose, on the model or blend the other folds chose
(headswap.baseline.blend.select), since the argmax's figure on all the texts is that of weights picked on them.
"""

from __future__ import annotations

import numpy as np

from headswap.metrics import confusion_matrix, macro_f1

TAUS = tuple(round(0.1 * i, 1) for i in range(16))   # 0 (argmax) to 1.5: Menon et al. tune tau up to 2


def offsets(prior, tau: float) -> np.ndarray:
    """What each class's log-probability gains: -tau log prior, shifted so that the most common class's is 0."""
    log_prior = np.log(np.asarray(prior, dtype=np.float64))
    return -tau * (log_prior - log_prior.max())


def scores(probs, prior, tau: float) -> np.ndarray:
    """(N, K) scores whose row argmax is the leaned decision: p / prior^tau, the exp of log p - tau log prior (up to
    a constant); probs themselves at tau 0."""
    if not tau:
        return np.asarray(probs)
    return np.asarray(probs, dtype=np.float64) * np.exp(offsets(prior, tau))


def decide(probs, prior, tau: float) -> np.ndarray:
    """(N,) class indices: each row's argmax of log p - tau log prior (the plain argmax at tau 0)."""
    return scores(probs, prior, tau).argmax(axis=1)


def best_tau(probs, y, prior, taus=TAUS) -> float:
    """The tau whose decisions score the highest macro F1 on probabilities (N, K) with class indices y (ties: the
    smaller tau, the argmax first)."""
    probs, y = np.asarray(probs, dtype=np.float64), np.asarray(y)
    k = probs.shape[1]
    return max(taus, key=lambda t: (float(macro_f1(confusion_matrix(y, decide(probs, prior, t), k))), -t))


def class_shares(labels, names) -> np.ndarray | None:
    """Each of `names`' share of `labels` (the training texts' classes), or None when one of them has none."""
    from collections import Counter
    counts = Counter(str(v) for v in labels)
    shares = np.array([counts[str(n)] for n in names], dtype=np.float64)
    return shares / shares.sum() if shares.all() else None
