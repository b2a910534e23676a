"""Data that ships with headswap, to try it on straight after `pip install`, loaded the way scikit-learn's
`sklearn.datasets.load_*` functions load theirs. On the command line, `headswap demo --data` writes the file."""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPAM_CSV = HERE / "spam.csv"      # where it comes from, its licence and how it was cut: README.md beside it


def load_spam(*, return_X_y: bool = False, as_frame: bool = False):
    """300 labelled SMS messages (260 `ham`, 40 `spam`) from the SMS Spam Collection v.1 (CC BY 4.0).

    Returns a scikit-learn `Bunch`: `data` (the texts) and `target` (their labels), lists of str, or pandas Series
    named `text` and `label` with `as_frame=True`, which also fills `frame` (a DataFrame with both columns; pandas
    must be installed); `target_names` (`['ham', 'spam']`), `DESCR` (the source, licence and how it was cut) and
    `filename` (the CSV file, `text,label`). `return_X_y=True` returns `(data, target)` instead.

        texts, labels = load_spam(return_X_y=True)
    """
    from sklearn.utils import Bunch

    with open(SPAM_CSV, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    data, target, frame = [r["text"] for r in rows], [r["label"] for r in rows], None
    names = sorted(set(target))
    if as_frame:
        import pandas as pd
        frame = pd.DataFrame({"text": data, "label": target})
        data, target = frame["text"], frame["label"]
    if return_X_y:
        return data, target
    return Bunch(data=data, target=target, frame=frame, target_names=names,
                 DESCR=(HERE / "README.md").read_text(encoding="utf-8"), filename=str(SPAM_CSV))
