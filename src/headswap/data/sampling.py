"""Stratified, seeded sampling: a train/validation split that keeps every class on both sides, and a
subset of n records that keeps each class's share. Both are deterministic for a seed and keep file order."""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Sequence

import numpy as np

from headswap.data.load import LabelledData, warn_once
from headswap.errors import ConfigError, DataError

logger = logging.getLogger("headswap.data.load")   # the name tests and users filter on



def _per_class_split(labels: Sequence[str], idx: list[int], test_size: float, seed: int) -> list[int]:
    """Test indices: about ``test_size`` of each class, and at least one row of each class on each side."""
    rng = random.Random(seed)
    by_class: dict[str, list[int]] = {}
    for i in idx:
        by_class.setdefault(labels[i], []).append(i)
    test: list[int] = []
    for label in sorted(by_class):
        members = by_class[label]
        rng.shuffle(members)
        n_test = min(len(members) - 1, max(1, round(len(members) * test_size)))
        test.extend(members[:n_test])
    return test


def _keyed(data: LabelledData, by: Sequence):
    """A copy of `data` labelled with the keys `by`, and the function that maps records chosen from it back
    to `data`'s own records (and labels), by their row numbers."""
    where = {row: i for i, row in enumerate(data.rows)}
    keyed = LabelledData(data.texts, list(by), data.source, data.rows, data.row_unit)
    return keyed, lambda part: data.subset([where[row] for row in part.rows])


def stratified_split(data: LabelledData, test_size: float = 0.1, seed: int = 0,
                     by: Sequence | None = None, held_for: str = "validation") -> tuple[LabelledData, LabelledData]:
    """Split into ``(train, test)``, stratified by label and deterministic for a given ``seed``.

    Every class with at least two examples appears in both parts; a class with a single example stays in train.
    Records keep their file order (and row numbers) within each part. `by`: stratify by these keys instead
    of the labels (multi-label data: each row's first label). `held_for`: what the held-out part is for, as the
    messages name it ("validation", "test").
    """
    if by is not None:
        keyed, back = _keyed(data, by)
        return tuple(back(part) for part in stratified_split(keyed, test_size, seed, held_for=held_for))
    from sklearn.model_selection import train_test_split  # imported here: sklearn is slow to import

    if not data.labels:
        raise DataError(f"{data.source}: cannot make a stratified split of data without labels")
    if not 0 < test_size < 1:
        raise DataError(f"test_size must be between 0 and 1 (a fraction), got {test_size!r}")
    counts = Counter(data.labels)
    singles = sorted(label for label, c in counts.items() if c == 1)
    if singles:
        logger.info("%s: class(es) with one example kept in train only: %s", data.source, ", ".join(singles))
    splittable = [i for i, label in enumerate(data.labels) if counts[label] >= 2]
    if not splittable:
        raise DataError(f"{data.source}: cannot split: no class has two or more examples")
    n_classes = len({data.labels[i] for i in splittable})
    test_idx: list[int] | None = None
    try:
        _, test_idx = train_test_split(
            splittable,
            test_size=test_size,
            random_state=seed,
            stratify=[data.labels[i] for i in splittable],
        )
    except ValueError:
        pass  # too few rows for every class to reach both sides at this test_size
    # sklearn allocates test rows in proportion, so a rare class can get none on one side; then split per class.
    if test_idx is None or not (
        len({data.labels[i] for i in test_idx}) == n_classes
        and len({data.labels[i] for i in set(splittable) - set(test_idx)}) == n_classes
    ):
        test_idx = _per_class_split(data.labels, splittable, test_size, seed)
    test_set = set(test_idx)
    share = len(test_set) / len(data)
    if share > 2 * test_size:
        # Keeping every class on both sides costs one held-out text per class: with many classes and few
        # texts each, that is no longer the share asked for.
        what = (f"{data.source}: holding out {percent(test_size)} for {held_for} with every class on both sides "
                f"takes {len(test_set)} of {len(data)} texts ({share:.0%}; "
                + (f"{n_classes} classes)" if n_classes > 1 else "one class has two texts or more: validation "
                   "holds that class alone)"))
        if share >= 0.5:
            raise DataError(f"{what}; pass validation data (--eval-data) or --eval-fraction 0 to train without "
                            f"validation" if held_for == "validation" else what)
        logger.warning("%s", what)
    train_idx = [i for i in range(len(data)) if i not in test_set]
    seen = {data.texts[i] for i in train_idx}
    leaked = sum(data.texts[i] in seen for i in test_set)
    if leaked and held_for == "validation":
        # Kept, not moved: the split stays what the seed gives, and deduplicating is the user's call.
        message = (f"{data.source}: {leaked} of the {len(test_set)} texts held out for validation also appear in "
                   f"the training part (duplicate texts), so the validation score (which picks the best epoch "
                   f"and fits the calibration) is optimistic; remove duplicates to hold out unseen texts")
        warn_once(message, message)
    return data.subset(train_idx), data.subset(sorted(test_set))


def percent(share: float) -> str:
    """A share as a percentage a reader can tell from zero: 10%, 2.5%, 0.1%."""
    return f"{share:.0%}" if share >= 0.095 or share == 0 else f"{100 * share:.2g}%"


def stratified_subset(data: LabelledData, n: int | None, seed: int = 0, by: Sequence | None = None) -> LabelledData:
    """A deterministic, stratified subset of ``n`` records (all of ``data`` when n is None or >= len).

    Each class gets its share of ``n`` (largest remainder; at least one record per class when n allows),
    drawn by a seeded shuffle of that class, so the subset does not depend on file order (the CSVs are not
    shuffled). The chosen records keep their file order.
    """
    if n is None or n >= len(data):
        return data
    if by is not None:
        keyed, back = _keyed(data, by)
        return back(stratified_subset(keyed, n, seed))
    if n < 1:
        raise ConfigError(f"a subset needs at least one record, got {n}")
    if not data.labels:
        raise DataError(f"{data.source}: cannot take a stratified subset of data without labels")
    by_class: dict[str, list[int]] = {}
    for i, label in enumerate(data.labels):
        by_class.setdefault(label, []).append(i)
    classes = sorted(by_class)
    exact = {c: n * len(by_class[c]) / len(data) for c in classes}
    quota = {c: int(exact[c]) for c in classes}
    by_remainder = sorted(classes, key=lambda c: (-(exact[c] - quota[c]), c))
    for c in by_remainder[: n - sum(quota.values())]:
        quota[c] += 1
    if n >= len(classes):  # a rare class still gets one record, taken from the largest share
        for c in classes:
            if quota[c] == 0:
                donor = max(classes, key=lambda d: (quota[d], d))
                quota[donor] -= 1
                quota[c] = 1
    rng = random.Random(seed)
    chosen: list[int] = []
    for c in classes:
        members = list(by_class[c])
        rng.shuffle(members)
        chosen.extend(members[: quota[c]])
    chosen.sort()
    return data.subset(chosen)


def stratified_folds(y, folds: int, seed: int = 0) -> np.ndarray:
    """(N,) fold numbers 0..folds-1 for class indices y: each class dealt round the folds in a shuffled order, from a
    rotating start, so every fold holds its share of each class."""
    y = np.asarray(y)
    fold, rng = np.empty(len(y), dtype=int), np.random.default_rng(seed)
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        fold[members] = (np.arange(len(members)) + rng.integers(folds)) % folds
    return fold
