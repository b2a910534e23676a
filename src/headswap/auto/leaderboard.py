"""AutoClassifier's leaderboard, as AutoGluon's users know it: every candidate auto weighed, best on validation
first (Leaderboard, `leaderboard_`), and the same rows scored on test texts (`leaderboard(X_test, y_test)`): the
shipped model and every candidate auto still held in memory (the TF-IDF baseline and the pool of best candidates
the blend chooses from, headswap.auto.climb.POOL); the others say why they have no test score."""

from __future__ import annotations

import math

from headswap.auto.climb import POOL
from headswap.errors import HeadswapError

PANDAS_MISSING = "the leaderboard as a DataFrame needs pandas: pip install 'headswap[pandas]'"


def pandas():
    """pandas, or one line saying which extra brings it."""
    try:
        import pandas as pd
    except ImportError:
        raise HeadswapError(PANDAS_MISSING) from None
    return pd


def board_row(c: dict) -> dict:
    """A candidate's entry of results.json as a leaderboard row (Leaderboard.COLUMNS)."""
    rung = f" · {c['rung']}" if c.get("rung") not in (None, c.get("regime")) else ""
    return {"model": c.get("model_name", c.get("model")), "strategy": c.get("strategy"),
            "regime": (c.get("regime") or "") + rung, "validation_macro_f1": c.get("validation_macro_f1"),
            "fit_seconds": c.get("seconds"), "status": "winner" if c.get("winner") else c.get("status"),
            "why": c.get("stopped_because") or c.get("reason") or ""}


class Leaderboard(list):
    """Every candidate auto weighed, best validation score first, one dict per row with COLUMNS (fit_seconds: what
    auto spent training it; for a blend, choosing it); prints as a table, and to_pandas() gives a DataFrame."""

    COLUMNS = ("model", "strategy", "regime", "validation_macro_f1", "fit_seconds", "status", "why")

    def __init__(self, rows):
        super().__init__(sorted(rows, key=lambda r: -(r["validation_macro_f1"] or -1.0)))

    def to_pandas(self):
        return pandas().DataFrame(list(self), columns=list(self.COLUMNS))

    def __str__(self) -> str:
        def cell(row, key):
            value = row[key]
            if key == "validation_macro_f1":
                return "" if value is None else f"{value:.4f}"
            if key == "fit_seconds":
                return "" if value is None else f"{value:.0f}"
            return str(value or "")[:70]
        widths = {k: max(len(k), *(len(cell(r, k)) for r in self)) if self else len(k) for k in self.COLUMNS}
        lines = ["  ".join(k.ljust(widths[k]) for k in self.COLUMNS)]
        lines += ["  ".join(cell(r, k).ljust(widths[k]) for k in self.COLUMNS).rstrip() for r in self]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


TEST_COLUMNS = ("model", "strategy", "regime", "validation_macro_f1", "test_macro_f1", "fit_seconds",
                "texts_per_second", "status", "why")
NOT_KEPT = (f"not scored on test: auto keeps in memory only the {POOL} best on validation (for the blend), the "
            "TF-IDF baseline and the shipped model")


def scored(board: Leaderboard, models: list, X, y):
    """The leaderboard's rows, in its order, with TEST_COLUMNS: each row whose model is at hand (models: (row,
    model) pairs) scored by its evaluate on texts X with labels y (macro F1, predicted texts per second); NaN for
    the others, their `why` saying why."""
    pd = pandas()
    at = {id(row): model for row, model in models}
    out = []
    for row in board:
        model = at.get(id(row))
        test, speed, why = math.nan, math.nan, row["why"]
        if model is not None:
            if isinstance(model, bytes):     # an arm that ran on Ray came back as bytes (headswap.auto.runners)
                from headswap.auto.runners import load_shipped
                model = load_shipped(model)
            m = model.evaluate(X, y)
            test, speed = float(m.f1("macro")), float(m.extra.get("texts_per_second") or math.nan)
        elif row["status"] == "ran":
            why = f"{why}; {NOT_KEPT}" if why else NOT_KEPT
        out.append({**{k: row[k] for k in Leaderboard.COLUMNS}, "test_macro_f1": test, "texts_per_second": speed,
                    "why": why})
    return pd.DataFrame(out, columns=list(TEST_COLUMNS))
