"""A replay recording (headswap.auto.replay.Recording) read from a run's results.json: what auto recorded of its arms
(slices, validation curve, seconds, trained epochs, planned epochs, estimated seconds) and of its cheap candidates.

results.json was not written to be replayed, so some of a recording is inferred, and the recording says so
(`approximations`):
- an arm trains at one rate over its run: its trained epochs over its training seconds, a slice's training seconds
  running from its start to its last validation (the one at its stop), so what a slice pays before training
  counts as training;
- what a slice costs besides training is what it took after that last validation (saving, the checkpoint);
- the policy's estimates: results.json keeps an arm's epoch plus overhead (estimated_seconds) and its first slice's
  plan (overhead, one-off pass and the round's target epochs of an epoch); an arm without a one-off pass (no cached
  lower blocks) is solved from the two, one with it takes the overhead of an arm on the same model that has none,
  and an arm that never ran takes a learning-rate sibling's estimates, else no one-off pass;
- the arms' order: those admitted in the order of their first slices, then those that took over as leader, then the
  rest in the report's order, learning-rate variants after rungs and arms on a model none of whose arms ran last
  (results.json does not keep the prior's order).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from headswap.auto.replay import FORMAT, ArmRecord, Recording
from headswap.errors import ConfigError

CHEAP_TIERS = {"baseline", "frozen", "static", "causal"}


def name_of(row: dict) -> str:
    """A candidate's name: an arm's as the policy names it, else its label (headswap.auto.records.Entry.label)."""
    if row.get("arm"):
        return row["arm"]
    rung, regime = row.get("rung"), row.get("regime")
    extra = f" · {rung}" if rung and rung != regime else ""
    return f"{row.get('model_name')} · {row.get('strategy')} · {regime}{extra}" + \
        "".join(f" · {k} {v:g}" for k, v in (row.get("tuned") or {}).items())


def from_results(doc: dict, name: str, source: str = "") -> Recording:
    """The recording of auto's results.json `doc`; ConfigError (one line, saying what is missing) when it cannot be
    replayed."""
    try:
        return _read(doc, name, source)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{name}: not an auto results.json this reader knows ({type(e).__name__}: {e})") from None


def _read(doc: dict, name: str, source: str) -> Recording:
    auto = doc.get("auto") if isinstance(doc, dict) else None
    if not isinstance(auto, dict) or not isinstance(auto.get("candidates"), list):
        raise ConfigError(f"{name}: not an auto run's results.json (no auto.candidates)")
    halving, rows = auto.get("halving"), auto["candidates"]
    if not isinstance(halving, dict) or not halving.get("budget_seconds"):
        raise ConfigError(f"{name}: no auto.halving (the arms' share of the budget): its arms never competed")
    arm_rows = [r for r in rows if r.get("halving") and r.get("estimated_seconds") is not None]
    ran = [r for r in arm_rows if r.get("slices")]
    if not ran:
        raise ConfigError(f"{name}: no arm ran a slice: nothing to replay")
    lacking = [name_of(r) for r in ran if r.get("trained_epochs") is None or not r.get("curve")]
    if lacking:
        raise ConfigError(f"{name}: arm {lacking[0]} has no trained_epochs or no curve (results.json from before "
                          f"auto recorded them): its curve's epochs cannot be placed")
    notes: list[str] = []
    arms, trained = zip(*(_arm(r, notes) for r in arm_rows))
    _estimate(arms, arm_rows, notes)
    _overruns(arms, arm_rows, trained)
    order = _order(arm_rows)
    data = (doc.get("meta") or {}).get("data") or {}
    validation = data.get("validation") or {}
    shipping = auto.get("shipping") or {}
    return Recording(
        name=name, budget_seconds=float(auto.get("budget_seconds") or halving["budget_seconds"]),
        arms_seconds=float(halving["budget_seconds"]), parallel=int(halving.get("parallel") or 1),
        n_validation=int(validation.get("used") or validation.get("rows") or 0),
        shipping_seconds=shipping.get("seconds"),
        cheap=[{"name": name_of(r), "seconds": r.get("seconds"), "validation": r.get("validation_macro_f1")}
               for r in rows if r.get("tier") in CHEAP_TIERS and not r.get("halving") and r.get("status") == "ran"],
        arms=[arms[i] for i in order],
        recorded={"source": source, "winner": _winner(auto, rows),
                  "arms": {name_of(r): {"status": r.get("status"), "stopped_because": r.get("stopped_because"),
                                        "best": r.get("validation_macro_f1"), "seconds": r.get("seconds"),
                                        "epochs": r.get("trained_epochs"), "slices": len(r.get("slices") or [])}
                           for r in arm_rows}},
        approximations=sorted(set(notes)))


def _arm(row: dict, notes: list[str]) -> tuple[ArmRecord, list[float]]:
    """The arm's truth from its slices and curve (one training rate; the time after its stop is its slice cost),
    and each slice's training seconds."""
    arm = ArmRecord(name_of(row), 0.0, 0.0, tuned=bool(row.get("tuned")),
                    planned_epochs=float(row["epochs"]) if row.get("epochs") else math.inf)
    slices = [s for s in row.get("slices") or [] if s.get("start") is not None and s.get("seconds") is not None]
    if not slices:
        return arm, []
    points = sorted(row.get("curve") or [])
    trained, curve, tails, each = 0.0, [], [], []
    for i, s in enumerate(slices):
        start, end = s["start"], s["start"] + s["seconds"]
        upto = slices[i + 1]["start"] if i + 1 < len(slices) else math.inf
        mine = [p for p in points if start <= p[0] < upto]
        for t, v in mine:
            curve.append([trained + t - start, None, float(v), None])
        last = mine[-1][0] if mine else start
        trained += last - start
        each.append(last - start)
        tails.append(max(end - last, 0.0))
    rate = float(row["trained_epochs"]) / trained if trained > 0 else 0.0
    for p in curve:
        p[1] = round(p[0] * rate, 4)
    arm.curve = [[round(p[0], 3), p[1], p[2], p[3]] for p in curve]
    arm.slice_seconds = round(sum(tails) / len(tails), 3)
    notes.append("each arm trains at one rate over its run, and what a slice pays before training counts as training")
    if row.get("stopped_because") == "finished":
        arm.planned_epochs = float(row["trained_epochs"])     # where it finished, whatever its plan said
    return arm, each


def _overruns(arms, rows: list[dict], trained: list[list[float]]) -> None:
    """How far each slice trained past its time limit as the run set it (its plan less the arm's overhead, and its
    one-off pass in its first slice): the arm's later slices' mean, and its first slice's extra (once_true). An arm
    with one slice overran, after its first, what its model's other arms did, else what its plan left to overhead."""
    runs: dict[str, list[float]] = {}
    for arm, row, each in zip(arms, rows, trained):
        limits = [s["planned_seconds"] - arm.overhead_seconds for s in row.get("slices") or []][:len(each)]
        if limits and (row["slices"][0].get("round") == 0):
            limits[0] -= arm.once_seconds
        over = [t - limit for t, limit in zip(each, limits)]
        if row.get("stopped_because") == "finished":
            over = over[:-1]      # its last slice ended at its planned epochs, not at its limit
        arm.overrun_seconds = sum(over[1:]) / len(over[1:]) if len(over) > 1 else None
        if arm.overrun_seconds is not None:
            runs.setdefault(row.get("model_name"), []).append(arm.overrun_seconds)
        arm.once_true = over[0] if over else 0.0
    for arm, row in zip(arms, rows):
        if arm.overrun_seconds is None:
            same = runs.get(row.get("model_name"))
            arm.overrun_seconds = sum(same) / len(same) if same else max(arm.overhead_seconds - arm.slice_seconds, 0.0)
        arm.overrun_seconds = round(arm.overrun_seconds, 3)
        arm.once_true = round(max(arm.once_true - arm.overrun_seconds, 0.0), 3)


def _estimate(arms: list[ArmRecord], rows: list[dict], notes: list[str]) -> None:
    """The policy's estimates at the start (epoch, overhead, one-off seconds) from estimated_seconds (its epoch plus
    overhead) and its least slice (overhead, one-off pass, a quarter epoch): that of its first slice's plan, or the one
    its refusal names (rounded as the report says durations); see the module's docstring for what is assumed."""
    firsts = [(r.get("slices") or [None])[0] for r in rows]
    firsts = [f if f and f.get("round") == 0 else None for f in firsts]
    overheads: dict[str, float] = {}      # model -> the overhead of an arm on it without a one-off pass
    for row, first in sorted(zip(rows, firsts), key=lambda rf: rf[1] is None):     # first slices before refusals
        if row.get("rung") == "partial-cached" or row.get("model_name") in overheads:
            continue
        est = row["estimated_seconds"]
        if first and abs(max(first["target_epochs"], 0.25) - 1) > 0.05:
            epoch = (first["planned_seconds"] - est) / (max(first["target_epochs"], 0.25) - 1)
            overhead = est - epoch if 0 < epoch <= est else None
        else:
            least = least_named(row.get("reason"))
            overhead = (least - 0.25 * est) / 0.75 if least is not None else None
        if overhead is not None:
            overheads[row.get("model_name")] = min(max(overhead, 0.0), est)
    for arm, row, first in zip(arms, rows, firsts):
        arm.group = _group(row)
        overhead = overheads.get(row.get("model_name"), 0.0)
        if row.get("model_name") not in overheads:
            notes.append("an arm on a model with no arm solved from its first slice: planned without overhead")
        arm.overhead_seconds = round(overhead, 3)
        arm.epoch_seconds = round(max(row["estimated_seconds"] - overhead, 1e-3), 3)
        if row.get("rung") == "partial-cached":
            least = (first["planned_seconds"] - (max(first["target_epochs"], 0.25) - 0.25) * arm.epoch_seconds
                     if first else least_named(row.get("reason")))
            if least is not None:
                # What it really paid is inside its curve's first training seconds (once_true stays 0)
                arm.once_seconds = round(max(least - overhead - 0.25 * arm.epoch_seconds, 0.0), 3)
                notes.append("a cached partial's estimated one-off pass: its least slice less its overhead and a "
                             "quarter epoch")
    # A rung and its learning-rate variants plan for the same pass until one of them has run (a variant's first slice,
    # planned after its rung's, shows none)
    once: dict[str, float] = {}
    for arm in arms:
        once[arm.group] = max(once.get(arm.group, 0.0), arm.once_seconds)
    for arm, row in zip(arms, rows):
        arm.once_seconds = once[arm.group]
        if row.get("rung") == "partial-cached" and not arm.once_seconds:
            notes.append("a cached partial whose least slice is not known: planned without a one-off pass")


_DURATION = r"(\d+(?:\.\d+)?) (s|min|h)"
_UNIT = {"s": 1.0, "min": 60.0, "h": 3600.0}


def least_named(reason: str | None) -> float | None:
    """The least slice a refused arm's reason names (policy.admit's words), in seconds; None when it names none."""
    def seconds(match, at=0):
        return float(match.group(1 + at)) * _UNIT[match.group(2 + at)]
    said = re.search(r"this one " + _DURATION, reason or "")
    if said:
        return seconds(said)
    said = re.search(r"its least slice \(" + _DURATION + r" of loading and start-up and (\d+)% of a " + _DURATION,
                     reason or "")
    if said:
        return seconds(said) + float(said.group(3)) / 100 * seconds(said, 3)
    return None


def _group(row: dict) -> str:
    """The arm's group: its rung without the learning rate (a rung and its variants share the one-off pass)."""
    return re.sub(r"( · (body|head)_lr [0-9.e+-]+)+$", "", name_of(row))


def _order(rows: list[dict]) -> list[int]:
    """The policy's order of the arms, as far as results.json shows it (see the module's docstring): those admitted
    in the order of their first slices, then those that took over as leader (the first that fit in the policy's
    order), then the rest, those on a model no arm of which ran last (a model whose vocabulary misfits the texts)."""
    ran_models = {r.get("model_name") for r in rows if r.get("slices")}

    def key(i):
        slices = rows[i].get("slices") or []
        first = slices[0] if slices else {}
        phase = 0 if first.get("round") == 0 else 1 if slices else 2
        return (phase, first.get("start") or 0.0, rows[i].get("model_name") not in ran_models,
                bool(rows[i].get("tuned")), i)
    return sorted(range(len(rows)), key=key)


def _winner(auto: dict, rows: list[dict]) -> str | None:
    """The candidate auto picked before blending: the winner's row, or the blended winner's own candidate (the
    best on validation of those of its model, strategy, regime and learning rate)."""
    won = [r for r in rows if r.get("winner")]
    row = won[0] if won else None
    pick = row or auto.get("winner")
    if pick is None:
        return None
    if row is not None and row.get("tier") != "blend" and " + " not in (row.get("strategy") or ""):
        return name_of(row)
    strategy = (pick.get("strategy") or "").split(" + ")[0]
    same = [r for r in rows if r.get("tier") != "blend" and r.get("model_name") == pick.get("model_name")
            and r.get("strategy") == strategy and r.get("regime") == pick.get("regime")
            and (r.get("tuned") or None) == (pick.get("tuned") or None) and r.get("validation_macro_f1") is not None
            and (pick.get("head") is None or r.get("head") in (None, pick.get("head")))]
    return name_of(max(same, key=lambda r: r["validation_macro_f1"])) if same else None


def load(path: Path) -> Recording:
    """A recording file (Recording.to_json), or a run's results.json read as one (from_results)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror or e})") from None
    if f'"{FORMAT}"' in text[:200]:
        return Recording.from_json(text, str(path))
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{path}: not JSON ({e})") from None
    return from_results(doc, path.stem if path.stem != "results" else f"{path.parent.name}/{path.stem}", str(path))
