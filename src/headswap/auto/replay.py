"""Replay auto's fine-tuning arms from recorded learning curves, in seconds (issue 69): the real policy
(headswap.auto.policy.Halving) and the real match loop (headswap.auto.compete.Match) drive a runner that trains
nothing. Each arm's recording says what its training reached after how many seconds, so a rule change can be judged on
every recorded set before any 15-minute run confirms it (as LCBench-style surrogate benchmarks judge schedulers).

A Recording holds the arms' share of the budget, the cheap candidates' validation scores (the best of them is what an
arm must beat), and per arm: the costs the policy planned with (Arm's epoch, overhead and one-off seconds, its group),
what a slice really costs besides training, its planned epochs, and its curve of (training seconds, epochs, validation
macro F1, test macro F1 or None) points. Reading one from a file, or from a run's results.json, is
headswap.auto.recording.
"""

from __future__ import annotations

import heapq
import json
import math
import time
from bisect import bisect_right
from dataclasses import asdict, dataclass, field

from headswap.errors import ConfigError

FORMAT = "headswap-replay/1"
TOLERANCE = 1e-6       # seconds: a slice that ends on a recorded point includes it


@dataclass
class ArmRecord:
    """One arm as recorded: its name as the policy names it, the estimates the policy planned with, and its truth."""
    name: str
    epoch_seconds: float            # the policy's estimates at the start (headswap.auto.policy.Arm)
    overhead_seconds: float
    once_seconds: float = 0.0
    group: str | None = None
    tuned: bool = False             # a learning-rate variant: it must beat the best by compete.lr_margin to lead
    planned_epochs: float = math.inf    # its learning-rate schedule's epochs: reaching them, it has finished
    # The truth, as recorded: a slice with a time limit of L seconds trains L + overrun_seconds along the curve (the
    # loop stops at a step after L, and validates), its group's first slice once_true more (the one-off pass,
    # inside the curve's seconds), then takes slice_seconds more (saving its checkpoint)
    overrun_seconds: float = 0.0
    once_true: float = 0.0
    slice_seconds: float = 0.0
    curve: list[list] = field(default_factory=list)     # [training seconds, epochs, validation, test or None]

    def epochs_at(self, trained: float) -> float:
        """Its progress after `trained` seconds of training: along the curve, and past its end at the curve's rate."""
        return _along(self.curve, trained, 1, extrapolate=True)

    def seconds_to_finish(self) -> float:
        """Training seconds at which it reaches its planned epochs (inf: never, or not known)."""
        if not self.curve or not math.isfinite(self.planned_epochs):
            return math.inf
        t, e = self.curve[-1][0], self.curve[-1][1]
        if e <= 0:
            return math.inf
        return t * self.planned_epochs / e if self.planned_epochs > e else _inverse(self.curve, self.planned_epochs)


@dataclass
class Recording:
    """Everything a replay needs of one run (to_json/from_json: the file benchmarks/replay.py reads)."""
    name: str
    budget_seconds: float
    arms_seconds: float             # what the arms shared (the run's Budget.share)
    parallel: int = 1
    n_validation: int = 0
    startup_seconds: float | None = None
    shipping_seconds: float | None = None
    cheap: list[dict] = field(default_factory=list)     # {"name", "seconds", "validation"} in the run's order
    arms: list[ArmRecord] = field(default_factory=list)     # in the order the policy was given them
    recorded: dict = field(default_factory=dict)    # what the run did: {"winner", "arms": {name: {...}}, "source"}
    approximations: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        doc = asdict(self)
        for a in doc["arms"]:      # JSON has no infinity: no planned end is written as null
            a["planned_epochs"] = a["planned_epochs"] if math.isfinite(a["planned_epochs"]) else None
        return json.dumps({"format": FORMAT, **doc}, indent=1, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, where: str = "recording") -> Recording:
        try:
            doc = json.loads(text)
            if doc.pop("format", None) != FORMAT:
                raise ConfigError(f"{where}: not a replay recording ({FORMAT})")
            doc["arms"] = [ArmRecord(**{**a, "planned_epochs": a.get("planned_epochs") or math.inf})
                           for a in doc.get("arms", [])]
            return cls(**doc)
        except (ValueError, TypeError, KeyError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"{where}: not a readable replay recording ({type(e).__name__}: {e})") from None


def _along(curve: list[list], x: float, column: int, extrapolate: bool = False) -> float:
    """Column `column` of `curve` at training seconds `x`, linear between points (from (0, 0) before the first)."""
    xs = [p[0] for p in curve]
    i = bisect_right(xs, x)
    if i >= len(curve):
        last = curve[-1]
        if not extrapolate or last[0] <= 0:
            return last[column]
        return last[column] * x / last[0]
    x0, y0 = (curve[i - 1][0], curve[i - 1][column]) if i else (0.0, 0.0)
    x1, y1 = curve[i][0], curve[i][column]
    return y1 if x1 <= x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _inverse(curve: list[list], epochs: float) -> float:
    """Training seconds at which the curve reaches `epochs` (on it: its epochs grow with its seconds)."""
    prev = (0.0, 0.0)
    for t, e, *_ in curve:
        if e >= epochs:
            return prev[0] if e <= prev[1] else prev[0] + (t - prev[0]) * (epochs - prev[1]) / (e - prev[1])
        prev = (t, e)
    return curve[-1][0]


class ReplayClock:
    """A clock that moves only when a replayed slice ends: the Budget's clock in a replay."""

    def __init__(self, start: float = 0.0):
        self.t = start

    def __call__(self) -> float:
        return self.t


class Weights:
    """What a replayed slice hands back in place of a classifier: the arm it stands for (shipping cleans nothing)."""

    def __init__(self, arm: str):
        self.arm = arm

    def set_params(self, **_) -> Weights:
        return self


class ReplayArms:
    """A Runner (headswap.auto.runners.Runner) that trains nothing: a slice with a time limit of L seconds moves the
    arm along its recorded curve as far as the recorded run trained past such a limit (ArmRecord's truth), returns
    the validation points it passes (and, where it stops between two, one at the stop, read between them), and takes
    that training plus the arm's recorded slice cost. An arm past the end of its curve gains nothing more (it has
    plateaued), or has finished where that end is its planned epochs. An arm with no curve (it never ran when
    recorded) spends its slices' time and gets no score: what it would have scored is not known, and the replay says
    so (`unrecorded`)."""

    def __init__(self, recording: Recording, clock: ReplayClock):
        self.arms = {a.name: a for a in recording.arms}
        self.parallel, self.clock = recording.parallel, clock
        self.trained = {name: 0.0 for name in self.arms}
        self.best: dict[str, float] = {}
        self.paid: set = set()
        self.pending: list = []      # (end on the clock, order, name, result)
        self.unrecorded: list[str] = []
        self.started = 0

    def start(self, name: str, rung, settings: dict, seen: int) -> None:
        arm, limit = self.arms.get(name), float(settings["time_limit"])
        if arm is None or not arm.curve:
            result, took = self._unrecorded(name, arm, limit)
        else:
            result, took = self._slice(arm, limit)
        self.started += 1
        heapq.heappush(self.pending, (self.clock.t + took, self.started, name, result))

    def _unrecorded(self, name: str, arm: ArmRecord | None, limit: float) -> tuple[dict, float]:
        """A slice of an arm the run never trained: it takes its time (at the policy's estimated rate) and says
        nothing of its score, so it can neither win nor be judged; the replay names it."""
        if name not in self.unrecorded:
            self.unrecorded.append(name)
        if arm is None:
            return {"points": [], "finished": False, "train_seconds": limit, "better": False}, limit
        once = self._once(arm, arm.once_seconds)
        self.trained[name] += limit
        return ({"points": [], "finished": False, "progress": self.trained[name] / max(arm.epoch_seconds, 1e-9),
                 "train_seconds": limit + once, "better": False, "history_length": 0},
                limit + once + arm.overhead_seconds)

    def _once(self, arm: ArmRecord, seconds: float) -> float:
        """`seconds` the first time a slice of the arm's group runs, 0 after: the one-off pass is made once."""
        key = arm.group if arm.group is not None else arm.name
        paid = key in self.paid
        self.paid.add(key)
        return 0.0 if paid else seconds

    def _slice(self, arm: ArmRecord, limit: float) -> tuple[dict, float]:
        once = self._once(arm, arm.once_true)
        before = self.trained[arm.name]
        end = min(before + max(limit + arm.overrun_seconds, 0.0) + once, arm.seconds_to_finish())
        train = max(end - before, 0.0)
        points = [(p[0] - before, float(p[2])) for p in arm.curve if before + TOLERANCE < p[0] <= end + TOLERANCE]
        last = arm.curve[-1][0]
        on_point = any(abs(p[0] - end) <= TOLERANCE for p in arm.curve)
        if arm.curve[0][0] < end < last - TOLERANCE and not on_point:
            points.append((train, float(_along(arm.curve, end, 2))))      # the validation at the stop
        self.trained[arm.name] = end
        best = max((v for _, v in points), default=None)
        better = best is not None and (arm.name not in self.best or best > self.best[arm.name])
        if better:
            self.best[arm.name] = best
        finished = end >= arm.seconds_to_finish() - TOLERANCE
        return ({"points": points, "finished": finished, "progress": arm.epochs_at(end), "train_seconds": train,
                 "better": better, "history_length": 0}, train + arm.slice_seconds)

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def wait(self) -> tuple[str, object, dict]:
        end, _, name, result = heapq.heappop(self.pending)
        self.clock.t = max(self.clock.t, end)
        return name, (None if result.get("error") else Weights(name)), result

    def close(self) -> None:
        self.pending.clear()


@dataclass
class Replay:
    """What a replay decided: the winner among the arms and cheap candidates, and each arm's outcome."""
    name: str
    winner: str
    winner_validation: float | None
    recorded_winner: str | None
    arms_seconds: float
    used_seconds: float
    arms: dict
    unrecorded: list[str]
    wall_seconds: float

    @property
    def same(self) -> bool | None:
        return None if self.recorded_winner is None else self.winner == self.recorded_winner


class _Board:
    """What compete.Match asks of Climb, for a replay: the best so far (the cheap candidates' best to begin), the
    validation size its learning-rate margin scales with, and a log."""

    def __init__(self, best_entry, n_validation: int, log):
        from types import SimpleNamespace

        self.best, self.best_entry, self.log = None, best_entry, log
        self.costs = SimpleNamespace(n_validation=n_validation)

    def keep(self, *_, **__) -> None:      # the blend's pool: the replay ships nothing
        return None

    def take_lead(self, model, entry, rung) -> None:
        self.best, self.best_entry = model, entry


def _entry(name: str, validation: float | None = None, tuned: bool = False):
    from headswap.auto.records import Entry

    e = Entry(name, name, "", "", "fine-tune", tuned={"replayed": 1.0} if tuned else None,
              validation_macro_f1=validation)
    e.arm = name
    return e


def replay(recording: Recording, log=lambda line: None) -> Replay:
    """Run today's policy and match loop on `recording`'s arms, on a replay clock, from the recorded share of the
    budget; the winner is the best on validation (an arm must beat the cheap candidates' best, a learning-rate
    variant by compete's margin), as auto's compete step picks it before the blend."""
    from headswap.auto.budget import Budget
    from headswap.auto.compete import Match
    from headswap.auto.policy import Arm, Halving

    wall = time.perf_counter()
    clock = ReplayClock()
    cheap = [_entry(c["name"], c["validation"]) for c in recording.cheap if c.get("validation") is not None]
    if not cheap:
        raise ConfigError(f"{recording.name}: no cheap candidate with a validation score (the TF-IDF baseline's)")
    best = cheap[0]
    for e in cheap[1:]:      # as the cheap rungs take the lead: strictly better only
        if e.validation_macro_f1 > best.validation_macro_f1:
            best = e
    board = _Board(best, recording.n_validation, log)
    budget = Budget(recording.budget_seconds, clock=clock)
    share = budget.share(recording.arms_seconds, recording.parallel)
    arms = [Arm(a.name, a.epoch_seconds, a.overhead_seconds, once_seconds=a.once_seconds, group=a.group)
            for a in recording.arms]
    runner = ReplayArms(recording, clock)
    jobs = {a.name: (None, {"epochs": a.planned_epochs}, _entry(a.name, tuned=a.tuned)) for a in recording.arms}
    policy = Halving(arms, share)
    Match(board, policy, jobs, runner).play()
    summary = policy.summary()
    outcome = {n: {k: a[k] for k in ("status", "stopped_because", "best", "seconds", "epochs")} |
               {"slices": len(a["slices"]), "starts": [sl["start"] for sl in a["slices"]]}
               for n, a in summary["arms"].items()}
    return Replay(recording.name, board.best_entry.arm or board.best_entry.model,
                  board.best_entry.validation_macro_f1, recording.recorded.get("winner"), recording.arms_seconds,
                  clock.t - share.start, outcome, runner.unrecorded, time.perf_counter() - wall)

