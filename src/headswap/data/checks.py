"""Checks that loaded data can train or evaluate a classifier: labelled, one label per text, two classes or more,
no evaluation label that training never saw."""

from __future__ import annotations

from collections.abc import Sequence

from headswap.data.once import warn_once
from headswap.data.records import LabelledData
from headswap.errors import DataError

def check_training_data(data: LabelledData, label_separator: str = "|") -> list[str]:
    """Check that ``data`` can train a classifier (labelled, at least two classes); return the label names.
    label_separator: the --label-separator given, looked for (with the usual ones) in labels that look like
    multi-label sets."""
    if not data.labels:
        raise DataError(f"{data.source}: training data needs labels, and this data has none")
    check_single_labels(data)
    names = data.label_names()
    warn_lookalike_labels(names, data.source)
    warn_weak_labels(data)
    from headswap.data.multilabel import warn_if_label_sets
    warn_if_label_sets(names, data.source, label_separator)
    if len(names) < 2:
        raise DataError(
            f"{data.source}: training data needs at least 2 classes, but every record "
            f"({len(data)} in all) has the label {names[0]!r}"
        )
    return names


def warn_lookalike_labels(labels: Sequence[str], source: str) -> None:
    """Warn about labels that differ only by surrounding whitespace ('ham' and 'ham '): they are separate
    classes that print alike. They stay as written (labels are never altered here); the user decides."""
    groups: dict[str, list[str]] = {}
    for label in dict.fromkeys(labels):
        if isinstance(label, str):
            groups.setdefault(label.strip(), []).append(label)
    for same in map(sorted, groups.values()):
        if len(same) > 1:
            names = ", ".join(map(repr, same[:-1])) + f" and {same[-1]!r}"
            warn_once(("labels", *same), f"{source}: labels {names} differ only by surrounding whitespace, so they "
                                         f"are {len(same)} separate classes; labels are kept exactly as written: "
                                         f"fix the data if they are one class")


# Below these a model has next to nothing to learn from (the warning comes before training, not as "learned
# nothing" after it): a class of one text cannot also be held out to validate it.
FEWEST_TEXTS, FEWEST_PER_CLASS = 10, 2


def warn_weak_labels(data: LabelledData) -> None:
    """Warn, once each, about training data that cannot teach what its labels say: the same text under two or
    more labels, a class with a single text, or fewer than FEWEST_TEXTS texts in all."""
    from collections import Counter

    first: dict[str, dict] = {}      # text -> {label: index of its first row}
    for i, (text, label) in enumerate(zip(data.texts, data.labels)):
        first.setdefault(text.strip(), {}).setdefault(label, i)
    clashes = {text: labels for text, labels in first.items() if len(labels) > 1}
    if clashes:
        rows = sum(1 for text in data.texts if text.strip() in clashes)
        text, labels = next(iter(clashes.items()))
        shown = " and ".join(f"{label!r} ({data.where(i)})" for label, i in list(labels.items())[:3])
        warn_once(("conflicting labels", len(clashes), text),
                  f"{data.source}: {len(clashes)} text{'s' if len(clashes) != 1 else ''} ({rows} rows) "
                  f"{'carry' if len(clashes) != 1 else 'carries'} more than one label, e.g. {text[:60]!r} as {shown}: no model can learn both, and validation counts "
                  f"one of them wrong; fix the labels (headswap audit lists likely label errors)")
    counts = Counter(data.labels)
    single = sorted(str(label) for label, n in counts.items() if n < FEWEST_PER_CLASS)
    if single:
        warn_once(("single text classes", *single),
                  f"{data.source}: {len(single)} class{'es' if len(single) != 1 else ''} with a single training "
                  f"text ({', '.join(map(repr, single[:5]))}{', ...' if len(single) > 5 else ''}): too few to learn "
                  f"a class from, and none can be held out to validate it; label more texts of "
                  f"{'them' if len(single) != 1 else 'it'}")
    if len(data) < FEWEST_TEXTS:
        warn_once(("few texts", len(data), len(counts)),
                  f"{data.source}: {len(data)} training texts for {len(counts)} classes: too few for a model to "
                  f"learn from (validation, calibration and the reject threshold have next to nothing to go on); "
                  f"label at least {FEWEST_TEXTS}, better tens a class")


def check_single_labels(data: LabelledData) -> None:
    """A list label (JSONL) is a multi-label row: refuse it here rather than make it a class of its own."""
    for i, label in enumerate(data.labels):
        if isinstance(label, tuple):
            raise DataError(f"{data.where(i)}: the label is a list, which is multi-label data; train with "
                            f"--multi-label (multi_label=True)")


def check_eval_labels(train_labels: Sequence[str], eval_data: LabelledData, out_of_scope: str | None = None) -> None:
    """Fail if ``eval_data`` has a label that training never saw (the model could never predict it), other
    than the out-of-scope label that the reject option answers."""
    if not eval_data.labels:
        raise DataError(f"{eval_data.source}: evaluation data needs labels, and this data has none")
    check_single_labels(eval_data)
    known = set(train_labels) | ({out_of_scope} if out_of_scope is not None else set())
    first_seen: dict[str, int] = {}
    for i, label in enumerate(eval_data.labels):
        if label not in known and label not in first_seen:
            first_seen[label] = i
    if first_seen:
        unseen = "; ".join(f"{label!r} (first at {eval_data.where(i)})" for label, i in first_seen.items())
        raise DataError(
            f"{eval_data.source}: label(s) not in the training data: {unseen}. "
            f"Known labels: {', '.join(sorted(known))}"
        )
