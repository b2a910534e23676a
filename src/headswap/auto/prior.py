"""What auto learned from the project's own runs: which rungs won, or came within a point of the winner, on data of
which shape (a portfolio, as auto-sklearn 2.0 and AutoGluon's zero-shot portfolios choose what to try first from
past results).

The table (prior.json beside this module) is rebuilt from results files by `python benchmarks/build_prior.py`, never
written by hand: every auto run's results.json (benchmarks/results holds dozens) gives, for each candidate that ran,
its family (model kind, strategy, rung: "causal · causal-embedding-mlp · linear head"), the data's shape (training
texts, classes, out-of-scope label) and whether its validation macro F1 came within WITHIN of the run's best.

auto reads it before the cheap rungs: a rung whose family never came within a point in any run, or that no run has
tried, is "unproven", and takes at most UNPROVEN_SHARE of the budget before the arms start (SmolLM2's frozen head on
an English intent set took 31% of 15 minutes for 0.68 where MiniLM's read 0.949); proven rungs run first. A family
is judged on the most specific data it has runs of: this shape, then its size and classes, then any. With no table,
today's order and no cap.

Two more uses of the same table: a cheap rung whose family ran DROP_AFTER times or more on data of this very shape
and never came within a point is not tried at all (MiniLM's frozen heads on emotion: 0 of 42 runs, a minute of 15
spent each time on a head 20 points under the winner); and the fine-tuning arms are admitted in the order of how
often their family won on this data (arm_order: full fine-tuning won 6 of 7 runs on emotion, the cached partial 7
of 18, and with the cached partial first, full fine-tuning never got its first epoch). Imports no torch.
"""

from __future__ import annotations

import json
import math
from importlib.resources import files
from pathlib import Path

from headswap.reports.report_text import duration

WITHIN = 0.01              # of validation macro F1: "came within a point" of the run's best
UNPROVEN_SHARE = 0.10      # of the budget: the most an unproven cheap rung may take before the arms start
# Runs on data of this shape after which a cheap rung that never came within a point is not tried: fewer say little
# (a family near-tied on 4 of 6 runs of one shape would have looked hopeless after its first 2).
DROP_AFTER = 5
TABLE = "prior.json"


def family(kind: str, strategy: str, rung: str | None, regime: str) -> str:
    """A rung's family: its body's kind, strategy and rung name (regime when it has none). A body's frozen heads
    (logistic, linear, MLP) are one family: one encoding pass feeds them, and they rise or fall together."""
    return f"{kind} · {strategy} · {'frozen head' if regime == 'head-only' else rung or regime}"


def rung_family(rung) -> str:
    """family() of one of auto's ladder rungs (headswap.auto.ladder.Rung)."""
    return family(rung.kind, rung.strategy, rung.name, rung.regime)


def shape(n_train: int, n_classes: int, out_of_scope: bool) -> str:
    """A coarse bucket of the data: training texts by decade, classes (2, up to 20, more), out-of-scope or not."""
    size = "under 1k" if n_train < 1000 else "1k-10k" if n_train < 10000 else "10k+"
    classes = "2" if n_classes <= 2 else "3-20" if n_classes <= 20 else "21+"
    return f"{size} texts · {classes} classes" + (" · out-of-scope" if out_of_scope else "")


def _runs(root: Path):
    for path in sorted(root.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("auto"), dict) and data["auto"].get("candidates"):
            yield path, data


def build_table(root, kinds: dict[str, str]) -> dict:
    """The prior from every auto results file under `root`: {family: {shape: {"ran", "within", "won"}}} and the
    runs it read. kinds: model name -> kind ("encoder", "causal"); a model missing from it is skipped."""
    root = Path(root)
    table: dict[str, dict[str, dict[str, int]]] = {}
    runs = []
    for path, data in _runs(root):
        cands = [c for c in data["auto"]["candidates"] if c.get("status") == "ran"
                 and isinstance(c.get("validation_macro_f1"), (int, float)) and c.get("tier") != "blend"]
        if not cands:
            continue
        splits = data["meta"]["data"]
        train = splits["train"]
        n_train = train.get("used") or train.get("rows") or 0
        classes = next((s["classes"] for s in (train, splits.get("validation"), splits.get("test"))
                        if isinstance(s, dict) and s.get("classes")), None)
        if not classes:        # an older file that did not record its classes: its shape is unknown
            continue
        settings = (data["meta"].get("args") or {}).get("settings") or {}
        where = shape(n_train, len(classes), bool(settings.get("out_of_scope")))
        best = max(c["validation_macro_f1"] for c in cands)
        runs.append(str(path.relative_to(root)))
        for c in cands:
            if c["model"] == "tfidf" or c["model"] not in kinds:
                continue
            key = family(kinds[c["model"]], c["strategy"], c.get("rung"), c["regime"])
            cell = table.setdefault(key, {}).setdefault(where, {"ran": 0, "within": 0, "won": 0})
            cell["ran"] += 1
            cell["within"] += c["validation_macro_f1"] >= best - WITHIN
            cell["won"] += c["validation_macro_f1"] >= best
    return {"within": WITHIN, "runs": runs, "families": {k: dict(sorted(v.items())) for k, v in sorted(table.items())}}


def load_table() -> dict:
    """The shipped table; an empty one where it is missing or unreadable (every rung then unproven)."""
    try:
        return json.loads(files("headswap.auto").joinpath(TABLE).read_text())
    except (OSError, ValueError, ModuleNotFoundError):
        return {"families": {}, "runs": []}


class Prior:
    """Asks the table about one run's data."""

    def __init__(self, table: dict, n_train: int, n_classes: int, out_of_scope: bool):
        self.families = table.get("families", {})
        self.runs = len(table.get("runs", []))
        self.shape = shape(n_train, n_classes, out_of_scope)

    def _levels(self):
        """Which table cells count, most specific first: this shape; its size and classes with or without an
        out-of-scope label; any data."""
        bare = self.shape.split(" · out-of-scope")[0]
        return (("data of this shape", lambda w: w == self.shape),
                ("data of this size and classes", lambda w: w.split(" · out-of-scope")[0] == bare),
                ("any data", lambda w: True))

    def _cells(self, key: str) -> tuple[int, str, list[dict]]:
        """(level, what data it is, the family's cells there) at the most specific level it has runs of."""
        cells = self.families.get(key, {})
        for level, (said, match) in enumerate(self._levels()):
            here = [c for w, c in cells.items() if match(w)]
            if here:
                return level, said, here
        return 2, "any data", []

    def evidence(self, key: str) -> tuple[int, int, str]:
        """(runs that prove it, runs it ran in, on what data), on the most specific data this family has runs of:
        on data of this shape, or of its size and classes, a run proves it when it came within a point of the
        winner; on other data only when it won (within a point of 1.0 on an easy set, where everything is, says
        nothing of a hard one)."""
        level, said, here = self._cells(key)
        proof = "won" if level == 2 else "within"
        return sum(c[proof] for c in here), sum(c["ran"] for c in here), said

    def proven(self, key: str) -> bool:
        """Came near the winner before (evidence()); with no table at all, every rung is (today's rules)."""
        return not self.families or self.evidence(key)[0] > 0

    def order(self, key: str) -> tuple:
        """Sort key: proven families first, the most often near the winner before the rest."""
        within = self.evidence(key)[0]
        return (within == 0, -within)

    def dropped(self, key: str) -> str | None:
        """Why a cheap rung is not tried at all: its family ran DROP_AFTER times or more on data of this shape and
        never came within a point of the winner; None when it may run."""
        if not self.families:
            return None
        near, ran, said = self.evidence(key)
        if said != "data of this shape" or ran < DROP_AFTER or near:
            return None
        return (f"prior: in none of the {ran} earlier runs on {said} did it come within {WITHIN * 100:g} point of the "
                f"winner, so it is not tried")

    def arm_order(self, key: str) -> float:
        """Sort key for a fine-tuning arm: minus the lower bound of how often its family won on the most specific
        data it has runs of (Wilson's score interval at one standard error, so 1 win in 1 run does not outrank 6 in
        7); a family no run tried gets 0, and keeps the ladder's place among those."""
        won, ran, _ = self._wins(key)
        if not ran:
            return 0.0
        p, z2 = won / ran, 1.0
        low = (p + z2 / (2 * ran) - math.sqrt(z2 * p * (1 - p) / ran + z2 * z2 / (4 * ran * ran))) / (1 + z2 / ran)
        return -max(low, 0.0)

    def arm_evidence(self, key: str) -> str:
        """'won 6 of 7 earlier runs on data of this shape', for the log."""
        won, ran, said = self._wins(key)
        return f"won {won} of {ran} earlier runs on {said}" if ran else "no earlier run tried it"

    def _wins(self, key: str) -> tuple[int, int, str]:
        """(runs it won, runs it ran in, on what data) at the most specific level it has runs of."""
        _, said, here = self._cells(key)
        return sum(c["won"] for c in here), sum(c["ran"] for c in here), said

    def why_unproven(self, key: str, share_seconds: float) -> str:
        _, ran, said = self.evidence(key)
        near = "win" if said == "any data" else f"come within {WITHIN * 100:g} point of the winner"
        seen = (f"in none of the {ran} earlier runs on {said} that tried it did it {near}") if ran \
            else f"none of the {self.runs} earlier runs tried it"
        return (f"{seen}, so it may take {UNPROVEN_SHARE:.0%} of the budget before the arms start "
                f"({duration(share_seconds)} here)")
