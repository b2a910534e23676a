"""What fit() trains and validates on, read once and checked before anything loads: the texts and labels (or a
teacher's soft labels), the classes (a parent's first), the validation data (given, or eval_fraction of the
training texts held out), and the validation texts of an out-of-scope label that is no class, set apart for the
reject option. Every problem is one line naming it (headswap.decisions.targets, headswap.data)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headswap.data.load import LabelledData, as_list, labels_of_table, load_descriptions
from headswap.data.records import label_type
from headswap.data.sampling import stratified_split
from headswap.decisions.postprocess import oos_column
from headswap.decisions.targets import check_known, read_soft_labels
from headswap.errors import HeadswapError


@dataclass
class FitData:
    train: LabelledData
    val: LabelledData | None
    val_outside: list[str] | None     # validation texts of out_of_scope when it is no class (None: none)
    labels: list[str]                 # class names in logit order
    classes: np.ndarray               # the caller's label values
    descriptions: dict[str, str]
    soft: np.ndarray | None = None    # (N, K) soft targets of train's rows (fit on a teacher's probabilities)

    def y_train(self, target):
        """Each training text's target: its class (indices, or 0/1 rows for multi-label), or its soft row."""
        if self.soft is not None:
            return [tuple(row) for row in self.soft]    # a tuple, which the encoder keeps
        return target.encode(self.train.labels, self.labels)

    def y_val(self, target):
        return target.encode(self.val.labels, self.labels) if self.val is not None else None


def read_fit_data(clf, X, y, eval_texts, eval_labels, descriptions, soft_labels, labels, parent) -> FitData:
    """fit()'s arguments read as clf's settings say (target_, out_of_scope, eval_fraction, seed, ...)."""
    target = clf.target_
    if isinstance(X, LabelledData):
        X, y = X.texts, (X.labels if soft_labels is None else y)
    y = labels_of_table(X, y) if soft_labels is None else y     # a DataFrame's or Dataset's "label" column
    soft = None
    if soft_labels is not None:
        X, y, (soft, labels) = read_soft_labels(X, y, soft_labels, labels, clf.multi_label, clf.out_of_scope)
    elif y is None:
        raise HeadswapError("fit needs labels y (or soft_labels with their class names in labels)")
    elif labels is not None:
        raise HeadswapError("fit's labels names the columns of soft_labels; pass them with soft_labels")
    y = as_list(y, "training data", "labels")
    if soft is None and not target.multi_label:     # 1 and "ham" together, or True/False: one line, before any work
        label_type(y, "training data", clf.out_of_scope)
    train = target.read(X, y, "training data")
    names, classes = (labels, np.array(labels, dtype=object)) if soft is not None else target.classes(train, y)
    names, classes = (names, classes) if parent is None else parent.grow(names, classes)
    if len(names) < 2:
        raise HeadswapError(f"training data has a single class {names[0]!r}; a classifier needs at least two")
    descriptions = load_descriptions(descriptions if descriptions is not None else clf.descriptions, names)
    if eval_texts is not None:
        val = target.read(eval_texts, eval_labels, "evaluation data")
    elif clf.eval_fraction and clf.epochs > 0 and len(train) >= 20:
        train, val = stratified_split(train, clf.eval_fraction, clf.seed, by=target.stratify_by(train.labels))
        if soft is not None:    # from_lists numbers the rows 1..N: the split's rows pick their targets
            soft = soft[[r - 1 for r in train.rows]]
    else:
        val = None
    # an out-of-scope label that training learned as a class stays in; one that it did not is set apart
    val, outside = set_apart(val, clf.out_of_scope if oos_column(names, clf.out_of_scope) is None else None)
    if val is not None:
        check_known(target, val.labels, names, "evaluation")
    return FitData(train, val, outside, names, classes, descriptions, soft)


def set_apart(data: LabelledData | None, outside_label: str | None):
    """(data without its rows labelled outside_label, their texts), or (data, None) when it has none: the texts
    of an out-of-scope label that is no class, which only the reject option reads."""
    if data is None or outside_label is None:
        return data, None
    outside = [i for i, lab in enumerate(data.labels) if lab == outside_label]
    if not outside:
        return data, None
    if len(outside) == len(data):
        raise HeadswapError(f"{data.source}: every text is labelled {outside_label!r} (out of scope); "
                            f"calibration and evaluation need in-scope texts too")
    gone = set(outside)
    return data.subset([i for i in range(len(data)) if i not in gone]), [data.texts[i] for i in outside]
