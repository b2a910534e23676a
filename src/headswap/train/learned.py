"""After training: did the loss leave its start? A classifier that learned nothing from its texts (they all encode
alike, the learning rate is far too small) ends with the training loss of a constant answer, and then predicts the
same probabilities for every text; nothing errors, so it is said here.

The start is the loss of the best constant answer: the class frequencies, weighted as the loss weighs them. With
K balanced classes that is ln K, which a freshly initialised head (logits near 0) starts from; with unbalanced
ones it is lower, and a model that only learned the frequencies ends there too, so that is the mark, not ln K.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from contextlib import contextmanager

from headswap.data.once import warn_once

# The lowest epoch's training loss must be below (1 - TOLERANCE) x the constant answer's loss. 1 - loss/start is
# McFadden's pseudo-R^2, the share of the labels' uncertainty the texts explain; under 0.05 they explain next to
# nothing (McFadden read 0.2 to 0.4 as an excellent fit). A run whose texts all encode alike stays at 0 (ln 2
# exactly, on emoji-only texts through MiniLM), and the epoch's mean loss of a model that does learn falls well
# past 5% within its first epochs; a slow start that is still within it is worth the line too.
TOLERANCE = 0.05
_slices = [0]


@contextmanager
def slices_of_a_run():
    """Inside, each fit is one time-bounded slice of a longer run (auto's arms): a slice's first steps say nothing of
    what the run learns, so check_learned stays quiet; the other warnings still come."""
    _slices[0] += 1
    try:
        yield
    finally:
        _slices[0] -= 1


def constant_loss(labels: Sequence, class_weight: dict | None = None) -> float:
    """The cross-entropy of the best constant answer to `labels`: the entropy of the class frequencies, each
    weighted by its class weight (the weighted loss divides by the summed weights, as torch's does)."""
    counts = Counter(labels)
    mass = {k: n * (class_weight or {}).get(k, 1.0) for k, n in counts.items()}
    total = sum(mass.values())
    return -sum(m / total * math.log(m / total) for m in mass.values() if m > 0)


def warn_if_nothing_learned(history: Sequence[dict], labels: Sequence, class_weight: dict | None = None,
                            source: str = "training") -> bool:
    """Warn (once) when no epoch's training loss got below the constant answer's by TOLERANCE; return whether it
    warned. `history`: TextClassifier.history_ (single-label training on class labels)."""
    if not history or len(set(labels)) < 2:
        return False
    start, end = constant_loss(labels, class_weight), min(float(h["train_loss"]) for h in history)
    if not math.isfinite(end) or end < (1 - TOLERANCE) * start:
        return False
    epochs, k = len(history), len(set(labels))
    ln_k = f", ln {k}" if abs(start - math.log(k)) < 1e-9 else ""
    warn_once(("nothing learned", source, round(end, 6)),
              f"{source}: the training loss was at best {end:.4f} in {epochs} epoch{'s' if epochs != 1 else ''}, "
              f"not {TOLERANCE:.0%} below where it starts ({start:.4f}, the loss of answering the class frequencies "
              f"for every text{ln_k}): the model learned (almost) nothing from the texts and gives every text about "
              f"the same probabilities; check that the texts encode to distinct inputs for this model, or train "
              f"longer or with a higher learning rate")
    return True


def check_learned(clf, labels: Sequence, soft_targets: bool, multi_label: bool) -> bool:
    """warn_if_nothing_learned for a fitted TextClassifier, where its loss is cross-entropy on class labels: not
    for soft targets, multi-label data, or generate-parse (its loss is per answer token)."""
    if soft_targets or multi_label or clf.strategy == "generate-parse" or _slices[0]:
        return False
    return warn_if_nothing_learned(clf.history_, labels, clf.class_weight_)
