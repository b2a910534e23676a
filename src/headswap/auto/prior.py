"""What auto learned from the project's own runs: which rungs won, or came within a point of the winner, on which
data sets of which shape (a portfolio, as auto-sklearn 2.0 and AutoGluon's zero-shot portfolios choose what to try
first from past results).

The table (prior.json beside this module) is rebuilt from results files by `python benchmarks/build_prior.py`, never
written by hand: every auto run's results.json (benchmarks/results holds over a hundred) gives, for each candidate
that ran, its family (model kind, strategy, rung: "causal · causal-embedding-mlp · linear head"), the data set (its
training classes and their counts, whatever folder it was copied to), the data's shape (training texts, classes,
out-of-scope label, a body whose vocabulary does not fit) and whether its validation macro F1 came within WITHIN of
the run's best.

Each data set is one vote: its vote for a family is the share of its runs in which the family came near the winner,
so 30 repeats on SMS spam weigh as much as one run on GermEval 2018 (counting runs, a new 2-class set inherited
SMS spam's history as 35 independent runs); in a run, a family's best candidate speaks for it. A family is judged on
the most specific data sets it has runs of (Prior._levels): this shape (a fine bucket, only where 2 data sets or
more of it tried the family), its coarse size and classes, the same out-of-scope or not, its size, then any.
Evidence from one data set is a hint: it orders the rungs, but a level whose only set says "never near" passes the
judgement on to coarser data, and no rung is dropped on fewer than DROP_AFTER sets.

auto reads it before the cheap rungs: a rung that no data set proves (came within a point on this shape or its size
and classes; won, on other data) is "unproven", and takes at most UNPROVEN_SHARE of the budget before the arms start
(SmolLM2's frozen head on an English intent set took 31% of 15 minutes for 0.68 where MiniLM's read 0.949); proven
rungs run first. A cheap rung that DROP_AFTER data sets or more of this shape tried, and on none came within a
point, is not tried at all; the fine-tuning arms are admitted in the order of the data sets' votes for their
family's wins (arm_order). With no table, today's order and no cap. A run may ask another table (read_table: one
built without the data set it runs on judges auto on a set the prior never saw) or none. Imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from importlib.resources import files
from pathlib import Path
from typing import NamedTuple

from headswap.errors import ConfigError
from headswap.reports.report_text import duration

WITHIN = 0.01              # of validation macro F1: "came within a point" of the run's best
UNPROVEN_SHARE = 0.10      # of the budget: the most an unproven cheap rung may take before the arms start
# Data sets that make evidence rather than a hint: fewer order the rungs, but neither make a fine bucket count nor
# cap a rung alone (repeats on one set say how a family fares there, not on the next set of that shape).
ENOUGH_SETS = 2
# Data sets of this shape after which a cheap rung that never came within a point on any of them is not tried.
DROP_AFTER = 2
TABLE = "prior.json"
SHIPPED, NONE = "shipped", "none"      # a run's prior: the shipped table, or no table at all
CELL = ("ran", "within", "won")
# Fine buckets (upper bound, name, the coarse bucket it lies in): training texts below the bound, classes up to it.
SIZES = ((300, "under 300", "under 1k"), (1000, "300-1k", "under 1k"), (3000, "1k-3k", "1k-10k"),
         (10000, "3k-10k", "1k-10k"), (30000, "10k-30k", "10k+"), (math.inf, "30k+", "10k+"))
CLASSES = ((2, "2", "2"), (5, "3-5", "3-20"), (20, "6-20", "3-20"), (100, "21-100", "21+"), (math.inf, "101+", "21+"))
OOS, MISFIT = "out-of-scope", "vocabulary misfit"
_COARSE = {**{f"{fine} texts": f"{big} texts" for _, fine, big in SIZES},
           **{f"{fine} classes": f"{big} classes" for _, fine, big in CLASSES}}


def family(kind: str, strategy: str, rung: str | None, regime: str) -> str:
    """A rung's family: its body's kind, strategy and rung name (regime when it has none). A body's frozen heads
    (logistic, linear, MLP) are one family: one encoding pass feeds them, and they rise or fall together."""
    return f"{kind} · {strategy} · {'frozen head' if regime == 'head-only' else rung or regime}"


def rung_family(rung) -> str:
    """family() of one of auto's ladder rungs (headswap.auto.ladder.Rung)."""
    return family(rung.kind, rung.strategy, rung.name, rung.regime)


def shape(n_train: int, n_classes: int, out_of_scope: bool, misfit: bool = False) -> str:
    """The fine bucket of the data: training texts (SIZES), classes (CLASSES), an out-of-scope label, and whether some
    body's vocabulary does not fit the texts (German tweets read through MiniLM's English word pieces)."""
    size = next(name for bound, name, _ in SIZES if n_train < bound)
    classes = next(name for bound, name, _ in CLASSES if n_classes <= bound)
    return " · ".join([f"{size} texts", f"{classes} classes"] + [OOS] * bool(out_of_scope) + [MISFIT] * bool(misfit))


def coarse(where: str) -> str:
    """The coarse bucket a fine shape lies in: training texts by decade, classes (2, up to 20, more), out-of-scope."""
    return " · ".join(_COARSE.get(part, part) for part in where.split(" · ") if part != MISFIT)


def _bare(where: str) -> str:
    return where.replace(f" · {OOS}", "")


def _runs(root: Path):
    for path in sorted(root.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("auto"), dict) and data["auto"].get("candidates"):
            yield path, data


class Run(NamedTuple):
    path: str                   # relative to the results folder
    fingerprint: str            # the data set: its training classes and their counts, hashed
    folder: str | None          # the folder its training file lay in, which names the set
    where: str                  # shape()
    results: dict               # family -> (came within WITHIN of the run's best, was the best)


def _records(root: Path, kinds: dict[str, str]):
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
        fits = data["auto"].get("vocabulary_fit") or {}
        misfit = any(isinstance(f, dict) and f.get("fits") is False for f in fits.values())
        n_classes = classes if isinstance(classes, int) else len(classes)    # a count, or the classes themselves
        where = shape(n_train, n_classes, bool(settings.get("out_of_scope")), misfit)
        # The same texts copied to /tmp/ge or /tmp/auto-runs/germeval2018 are one data set: named by what they hold.
        fingerprint = hashlib.sha1(json.dumps([train.get("rows"), classes], sort_keys=True).encode()).hexdigest()[:8]
        best = max(c["validation_macro_f1"] for c in cands)
        results: dict[str, tuple[bool, bool]] = {}      # a family's best candidate speaks for it in the run
        for c in cands:
            if c["model"] != "tfidf" and c["model"] in kinds:
                key, f1 = family(kinds[c["model"]], c["strategy"], c.get("rung"), c["regime"]), c["validation_macro_f1"]
                near, won = results.get(key, (False, False))
                results[key] = (near or f1 >= best - WITHIN, won or f1 >= best)
        folder = Path(train["file"]).parent.name if train.get("file") else None
        yield Run(str(path.relative_to(root)), fingerprint, folder or None, where, results)


def _names(records: list[Run]) -> dict[str, str]:
    """fingerprint -> the data set's name: the folder most of its runs read it from (the fingerprint when none did,
    with it where two sets share a folder name)."""
    folders: dict[str, Counter] = {}
    for r in records:
        folders.setdefault(r.fingerprint, Counter())[r.folder or r.fingerprint] += 1
    names = {fp: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for fp, c in folders.items()}
    taken = Counter(names.values())
    return {fp: name if taken[name] == 1 else f"{name}-{fp}" for fp, name in names.items()}


def build_table(root, kinds: dict[str, str], without=()) -> dict:
    """The prior from every auto results file under `root`: {family: {shape: {data set: {"ran", "within", "won"}}}},
    the runs it read and the data sets they used, leaving out the runs on the data sets named in `without`; its
    "without" names those it left out (a set no run used has none to leave: a set auto never ran on is one the full
    table never saw). kinds: model name -> kind ("encoder", "causal"); a model missing from it is skipped."""
    root = Path(root)
    records = list(_records(root, kinds))
    names = _names(records)
    without = sorted(set(without) & set(names.values()))
    table: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    sets: dict[str, dict] = {}
    runs = []
    for run in records:
        name = names[run.fingerprint]
        if name in without:
            continue
        runs.append(run.path)
        seen = sets.setdefault(name, {"fingerprint": run.fingerprint, "runs": 0, "shapes": {}})
        seen["runs"] += 1
        seen["shapes"][run.where] = seen["shapes"].get(run.where, 0) + 1
        for key, (within, won) in run.results.items():
            cell = table.setdefault(key, {}).setdefault(run.where, {}).setdefault(name, {"ran": 0, "within": 0,
                                                                                       "won": 0})
            cell["ran"] += 1
            cell["within"] += within
            cell["won"] += won
    families = {k: {w: dict(sorted(c.items())) for w, c in sorted(v.items())} for k, v in sorted(table.items())}
    return {"within": WITHIN, "runs": runs, "sets": dict(sorted(sets.items())), "without": without,
            "families": families}


def load_table() -> dict:
    """The shipped table; an empty one where it is missing or unreadable (every rung then unproven)."""
    try:
        return json.loads(files("headswap.auto").joinpath(TABLE).read_text())
    except (OSError, ValueError, ModuleNotFoundError):
        return {"families": {}, "runs": [], "sets": {}}


def read_table(source=SHIPPED, flag: str = "--prior") -> dict:
    """The table a run asks: SHIPPED's, NONE (no table: today's order, nothing capped or dropped), or a file as
    benchmarks/build_prior.py writes. A file that cannot be read or holds no such table is one line naming it
    (ConfigError), asked before any work."""
    if source is None or str(source) == SHIPPED:
        return load_table()
    if str(source) == NONE:
        return {"families": {}, "runs": [], "sets": {}, "without": []}
    path, where = Path(source), f"{flag} {source}"
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file (give a table as benchmarks/build_prior.py writes, "
                          f"{SHIPPED!r} or {NONE!r})") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: a folder, not a table as benchmarks/build_prior.py writes") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not JSON (not UTF-8 text)") from None
    except ValueError as e:
        raise ConfigError(f"{where}: not JSON ({e})") from None
    problem = _not_a_table(table)
    if problem:
        raise ConfigError(f"{where}: not a prior table as benchmarks/build_prior.py writes: {problem}")
    return table


def _not_a_table(table) -> str | None:
    """What keeps `table` from being one build_table wrote (Prior divides by each cell's runs), or None."""
    if not isinstance(table, dict):
        return f"a JSON {type(table).__name__}, not an object"
    missing = [k for k in ("families", "runs", "sets") if k not in table]
    if missing:
        return f"no {' or '.join(map(repr, missing))}"
    for key, kind in (("families", dict), ("runs", list), ("sets", dict), ("without", list)):
        if not isinstance(table.get(key, kind()), kind):
            return f"{key!r} is not a JSON {'object' if kind is dict else 'array'}"
    for key, cells in table["families"].items():
        for where, by_set in (cells.items() if isinstance(cells, dict) else [("?", cells)]):
            for name, cell in (by_set.items() if isinstance(by_set, dict) else [("?", by_set)]):
                if not _counted(cell):
                    return (f"family {key!r}, shape {where!r}, data set {name!r}: {json.dumps(cell)[:60]} is not "
                            f"whole counts of runs (ran > 0, within and won at most ran)")
    return None


def _counted(cell) -> bool:
    """A cell as build_table counts it: its runs, and those within a point and won among them."""
    if not (isinstance(cell, dict) and all(type(cell.get(k)) is int for k in CELL)):
        return False
    return cell["ran"] > 0 and 0 <= cell["within"] <= cell["ran"] and 0 <= cell["won"] <= cell["ran"]


def table_record(source: str, table: dict) -> dict:
    """What results.json keeps of a run's table: which one (SHIPPED, NONE, or the file as given), the data sets it
    holds and those it was built without (a leave-one-set-out run is told from the others by them)."""
    return {"table": str(source), "data_sets": sorted(table.get("sets", {})),
            "without": list(table.get("without", []))}


class Evidence(NamedTuple):
    """What the data sets at one level of specificity say of a family."""
    level: int
    said: str                          # "of this shape", ...
    sets: dict[str, dict[str, int]]    # data set -> {"ran", "within", "won"} over its runs at this level
    proof: str                         # "within" a point of the winner, or "won" (on data of other classes)

    def near(self, proof: str | None = None) -> list[str]:
        """The data sets on which the family came near the winner (proof), the most often first."""
        proof = proof or self.proof
        return sorted((s for s, c in self.sets.items() if c[proof]), key=lambda s: -self.share(s, proof))

    def share(self, name: str, proof: str | None = None) -> float:
        cell = self.sets[name]
        return cell[proof or self.proof] / cell["ran"]

    def votes(self, proof: str | None = None) -> float:
        """Each data set's vote: the share of its runs in which the family came near (or won)."""
        return sum(self.share(s, proof) for s in self.sets)

    def counted(self) -> str:
        n = len(self.sets)
        return f"{n} data set{'s' * (n != 1)} {self.said}"


class Prior:
    """Asks the table about one run's data."""

    def __init__(self, table: dict, n_train: int, n_classes: int, out_of_scope: bool, misfit: bool = False,
                 where: str | None = None):
        self.families = table.get("families", {})
        self.runs = len(table.get("runs", []))
        self.sets = len(table.get("sets", {}))
        self.shape = where or shape(n_train, n_classes, out_of_scope, misfit)

    def _levels(self):
        """Which table cells count, most specific first, and what proves a family there: this fine shape; its coarse
        size and classes with the same out-of-scope label; with or without it (a run within a point of its winner);
        its size, whose texts set what the budget can train; any data (a win: within a point of 1.0 on an easy set,
        where everything is, says nothing of a hard one)."""
        mine = coarse(self.shape)
        size = mine.split(" · ")[0]
        return (("of this shape", lambda w: w == self.shape, "within"),
                ("of this size and classes", lambda w: coarse(w) == mine, "within"),
                ("of this size and classes, out-of-scope or not", lambda w: _bare(coarse(w)) == _bare(mine), "within"),
                ("of this size", lambda w: coarse(w).split(" · ")[0] == size, "won"),
                ("of any shape", lambda w: True, "won"))

    def _found(self, key: str):
        """Evidence at each level the family has runs at, most specific first; the fine shape counts only where
        ENOUGH_SETS data sets of it tried the family (else its coarse bucket says the same, with more sets)."""
        cells = self.families.get(key, {})
        for level, (said, match, proof) in enumerate(self._levels()):
            sets: dict[str, dict[str, int]] = {}
            for where, by_set in cells.items():
                if match(where):
                    for name, cell in by_set.items():
                        mine = sets.setdefault(name, {"ran": 0, "within": 0, "won": 0})
                        for k in mine:
                            mine[k] += cell[k]
            if sets and (level or len(sets) >= ENOUGH_SETS):
                yield Evidence(level, said, sets, proof)

    def evidence(self, key: str) -> Evidence | None:
        """What judges the family: the most specific level (_levels) where a data set proves it or where ENOUGH_SETS
        data sets tried it. A level whose one data set never saw it near is a hint, and coarser data judge; with
        none that does, that hint."""
        hint = None
        for ev in self._found(key):
            if ev.near() or len(ev.sets) >= ENOUGH_SETS:
                return ev
            hint = hint or ev
        return hint

    def proven(self, key: str) -> bool:
        """A data set saw it near the winner (evidence()); with no table at all, every rung is (today's rules)."""
        if not self.families:
            return True
        ev = self.evidence(key)
        return ev is not None and bool(ev.near())

    def order(self, key: str) -> tuple:
        """Sort key: proven families first, those proven on the most specific data (on this shape before any shape),
        then the most data sets' votes for them."""
        ev = self.evidence(key)
        return (not self.proven(key), ev.level if ev else len(self._levels()), -(ev.votes() if ev else 0.0))

    def dropped(self, key: str) -> str | None:
        """Why a cheap rung is not tried at all: DROP_AFTER data sets or more of this shape (or of its size and
        classes) tried its family and on none did it come within a point of the winner; None when it may run."""
        if not self.families:
            return None
        ev = self.evidence(key)
        if ev is None or ev.level > 1 or len(ev.sets) < DROP_AFTER or ev.near():
            return None
        return (f"prior: on none of the {ev.counted()} that tried it ({', '.join(sorted(ev.sets))}) did it come "
                f"within {WITHIN * 100:g} point of the winner, so it is not tried")

    def arm_order(self, key: str) -> float:
        """Sort key for a fine-tuning arm: minus the lower bound of its family's share of wins, each data set one vote
        (its share of runs won) on the most specific data it has runs of, by Wilson's score interval at one standard
        error over the data sets: one set, however often won, counts 0.5 at most, two won in 9 runs of 10 0.55; a
        family no run tried gets 0, and keeps the ladder's place among those."""
        ev = next(self._found(key), None)
        if ev is None:
            return 0.0
        n = len(ev.sets)
        p, z2 = ev.votes("won") / n, 1.0
        low = (p + z2 / (2 * n) - math.sqrt(z2 * p * (1 - p) / n + z2 * z2 / (4 * n * n))) / (1 + z2 / n)
        return -max(low, 0.0)

    def arm_evidence(self, key: str) -> str:
        """'the best on 2 of 2 data sets of this size and classes: sms_spam in 68% of its runs, germeval2018 52%', for
        the log; one data set is named as the hint it is."""
        ev = next(self._found(key), None)
        if ev is None:
            return "no earlier data set tried it"
        if len(ev.sets) == 1:
            name = next(iter(ev.sets))
            return f"the best in {ev.share(name, 'won'):.0%} of the runs on the one data set {ev.said}, {name}: a hint"
        shares = ", ".join(f"{s} {ev.share(s, 'won'):.0%}" for s in sorted(ev.sets, key=lambda s: -ev.share(s, "won")))
        return f"the best on {len(ev.near('won'))} of {ev.counted()}, share of each one's runs: {shares}"

    def why_unproven(self, key: str, share_seconds: float) -> str:
        ev = self.evidence(key)
        if ev is None:
            seen = f"none of the {self.sets} data sets it knows tried it"
        else:
            near = "won" if ev.proof == "won" else f"came within {WITHIN * 100:g} point of the winner"
            seen = f"it {near} on none of the {ev.counted()} that tried it"
            if len(ev.sets) < ENOUGH_SETS:
                (name, cell), = ev.sets.items()
                seen = (f"it {near} in none of the {cell['ran']} runs on the one data set {ev.said} that tried it, "
                        f"{name} (a hint: capped as if none had tried it)")
        return (f"{seen}, so it may take {UNPROVEN_SHARE:.0%} of the budget before the arms start "
                f"({duration(share_seconds)} here)")
