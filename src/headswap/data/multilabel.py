"""Multi-label data: each text carries a set of labels ("a|b" in a CSV cell, a JSON list in JSONL).

Label sets are checked row by row like everything else in headswap.data: an empty set, an empty or
space-padded name, a name repeated in one row or a list element holding the separator is a DataError naming
the row. Decision thresholds (one per label) are tuned here too, on validation probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headswap.data.once import warn_once
from headswap.data.records import unicode_problem
from headswap.errors import DataError


def label_sets(labels: Sequence, separator: str, where=lambda i: f"index {i}") -> list[tuple[str, ...]]:
    """One tuple of label names per row, in the row's order. `labels` holds strings (split at `separator`)
    or lists (JSONL); where(i) names row i in errors."""
    if not separator:
        raise DataError("the label separator must not be empty")
    out = []
    for i, value in enumerate(labels):
        if isinstance(value, str):
            names = value.split(separator)
        elif isinstance(value, (list, tuple)):
            names = list(value)
            for name in names:
                if isinstance(name, str) and separator in name:
                    raise DataError(f"{where(i)}: label {name!r} contains the separator {separator!r}; choose "
                                    f"another separator (label_separator / --label-separator)")
        else:
            raise DataError(f"{where(i)}: a multi-label row needs labels joined by {separator!r} or a list, "
                            f"got {type(value).__name__}")
        row = []
        for name in names:
            if isinstance(name, int) and not isinstance(name, bool):
                name = str(name)
            if not isinstance(name, str):
                raise DataError(f"{where(i)}: label {name!r} is a {type(name).__name__}, not a string")
            if (problem := unicode_problem(name)) is not None:
                raise DataError(f"{where(i)}: label {name!r}: {problem}")
            if name == "":
                raise DataError(f"{where(i)}: empty label in {value!r} (a separator {separator!r} with nothing "
                                f"on one side)" if isinstance(value, str) else f"{where(i)}: empty label in the list")
            if name != name.strip():
                raise DataError(f"{where(i)}: label {name!r} starts or ends with a space; labels are matched "
                                f"exactly, so remove the space")
            if name in row:
                raise DataError(f"{where(i)}: label {name!r} appears twice in one row")
            row.append(name)
        out.append(tuple(row))
    return out


def check_no_empty_sets(sets: Sequence[tuple[str, ...]], where) -> None:
    """Every row needs at least one label: an empty cell is more often a mistake than 'none of these'."""
    for i, row in enumerate(sets):
        if not row:
            raise DataError(f"{where(i)}: no labels; every multi-label row needs at least one (add a class such "
                            f"as 'none' for texts where nothing applies)")


def binarize(sets: Sequence[tuple[str, ...]], labels: Sequence[str]) -> np.ndarray:
    """(N, K) float32 indicator matrix, columns in `labels` order."""
    index = {lab: k for k, lab in enumerate(labels)}
    y = np.zeros((len(sets), len(labels)), dtype=np.float32)
    for i, row in enumerate(sets):
        for name in row:
            y[i, index[name]] = 1.0
    return y


def to_sets(indicator: np.ndarray, labels: Sequence[str]) -> list[tuple[str, ...]]:
    return [tuple(lab for lab, on in zip(labels, row) if on) for row in np.asarray(indicator, dtype=bool)]


GRID = np.round(np.arange(0.01, 1.0, 0.01), 2)


def tune_thresholds(probs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per label, the threshold on the grid 0.01..0.99 that maximises that label's F1 on (probs, y); ties go
    to the threshold nearest 0.5, and a label with no positive example keeps 0.5."""
    probs, y = np.asarray(probs, dtype=float), np.asarray(y) > 0.5
    out = np.full(probs.shape[1], 0.5)
    for k in range(probs.shape[1]):
        pos = y[:, k]
        if not pos.any():
            continue
        pred = probs[:, k][None, :] >= GRID[:, None]                  # (thresholds, N)
        tp = (pred & pos).sum(1)
        f1 = 2 * tp / np.maximum(pred.sum(1) + pos.sum(), 1)
        best = np.flatnonzero(np.isclose(f1, f1.max()))
        out[k] = GRID[best[np.argmin(np.abs(GRID[best] - 0.5))]]
    return out


def label_names(sets: Sequence[tuple[str, ...]]) -> list[str]:
    """The sorted names that occur in any label set."""
    return sorted({name for row in sets for name in row})


def read_label_sets(data, separator: str, where=None) -> list[str]:
    """Turn loaded labels into label sets in place (errors name the row: data.where, or `where`); return
    the sorted label names."""
    where = where or data.where
    data.labels = label_sets(data.labels, separator, where)
    check_no_empty_sets(data.labels, where)
    return label_names(data.labels)


def check_eval_label_sets(known: Sequence[str], data, separator: str) -> None:
    """As read_label_sets, then fail on the first label training never saw, naming its line."""
    if not data.labels:
        raise DataError(f"{data.source}: evaluation data needs labels, and this data has none")
    read_label_sets(data, separator)
    known = set(known)
    for i, row in enumerate(data.labels):
        unseen = [name for name in row if name not in known]
        if unseen:
            raise DataError(f"{data.where(i)}: label(s) not in the training data: {', '.join(map(repr, unseen))}. "
                            f"Known labels: {', '.join(sorted(known))}")


# Separators a label set is commonly written with in one CSV cell ("joy|love", "joy;love", "joy,love",
# "joy+love"), looked for besides the --label-separator given: a multi-label file with any of them, trained
# without --multi-label, silently makes every combination a class.
LOOKALIKE_SEPARATORS = ("|", ";", ",", "+")


def warn_if_label_sets(names: Sequence[str], source: str, separator: str = "|") -> None:
    """Warn when single-label training data looks multi-label: several class names joined by `separator` or one
    of LOOKALIKE_SEPARATORS ('admiration|joy', 'admiration;joy') whose parts recur, so that every combination
    would silently become a class of its own. At most one warning: for the first separator that fits."""
    for sep in dict.fromkeys((separator, *LOOKALIKE_SEPARATORS)):
        joined = [n for n in names if isinstance(n, str) and sep in n]
        parts = [p for n in joined for p in n.split(sep)]
        if "" in parts or any(p != p.strip() for p in parts):   # 'C++', 'a, b': not names joined by sep
            continue
        recurring = len(set(parts)) < len(parts) or any(p in set(names) for p in parts)
        if len(joined) >= 2 and recurring:
            how = "--multi-label" if sep == "|" else f"--multi-label --label-separator '{sep}'"
            warn_once(("label sets", *sorted(joined)), f"{source}: {len(joined)} of the {len(names)} labels join "
                      f"names with {sep!r} (e.g. {joined[0]!r}), which looks like multi-label data; each combination "
                      f"is trained as a class of its own: pass {how} (multi_label=True"
                      f"{'' if sep == '|' else f', label_separator={sep!r}'}) if a text has a set of labels")
            return
