"""What auto records of its candidates, in one vocabulary for the ladder, the policy and the report: every row of the
ladder (Entry) and its outcome (Status), an arm's state in the policy (ArmStatus), the rule that stopped it or kept it
from running (Stop), the policy's phase and decisions (Phase, Action, Decision), an arm's slices (Slice)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any


class ArmStatus(str, Enum):
    """An arm's state in the policy (headswap.auto.policy.Halving)."""
    WAITING = "waiting"
    RUNNING = "running"         # between its slices too
    STOPPED = "stopped"
    NOT_RUN = "not run"
    FAILED = "failed"


class Stop(str, Enum):
    """The rule that stopped an arm, or kept it from running (a row's `stopped_because`)."""
    HALVED = "halved"
    PLATEAU = "plateau"
    FINISHED = "finished"
    BUDGET = "budget"
    CAP = "cap"
    FAILED = "failed"
    NOT_ADMITTED = "not admitted"
    TOO_DEAR = "too dear"


class Status(str, Enum):
    """A row's outcome in the report: it ran, was skipped (saying why), failed, or (a blend) was not better."""
    RAN = "ran"
    SKIPPED = "skipped"
    FAILED = "failed"
    NOT_BETTER = "not better"


class _Unset:
    """A field never set: left out of results.json, where None is written as null."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(eq=False)
class Entry:
    """One row of auto's ladder in results.json's auto.candidates: the baseline, a rung, an arm (a fine-tuning rung or
    one of its learning-rate variants) or the blend; what auto knew of it, did with it and measured. A field left
    None (or UNSET) is not written; `plan`, the rung it ran, is never written. Rows are told apart by identity."""
    model: str
    model_name: str
    strategy: str
    regime: str
    tier: str
    rung: str | None = None
    epochs: int | None = None
    head: str | None = None
    head_fit: str | None = None
    tuned: dict | None = None               # a learning-rate variant: the rate it ran at
    status: Status | None = None
    reason: str | None = None               # why it was skipped, stopped or is a variant
    estimated_seconds: float | None = None
    validation_macro_f1: float | None = None
    best_epoch: int | None = UNSET
    notes: list | None = None
    stopped: str | None = None              # why its training stopped early (the classifier's stopped_)
    seconds: float | None = None
    error: str | None = None
    traceback: str | None = None
    arm: str | None = None                  # the arm's name in the policy
    halving: bool | None = None
    slices: list | None = None
    curve: list | None = None
    stopped_because: Stop | None = UNSET
    trained_epochs: float | None = None
    started_from: str | None = None         # the frozen head an arm started from
    winner: bool | None = None
    balance: dict | None = None             # its decisions leaned toward the rarer classes (headswap.decisions.balance)
    out_of_fold_macro_f1: float | None = UNSET      # the blend's, and the best alone's, on validation's held-out folds
    alone_out_of_fold_macro_f1: float | None = UNSET
    members: list | None = None
    left_seconds: float | None = None       # what was left when the blend began
    priced_out: list | None = None          # candidates the time left could not pay to ship beside the winner
    baseline_search: dict | None = None     # the TF-IDF baseline's: what was tried, and won (headswap.baseline.search)
    plan: Any = field(default=None, repr=False)     # the rung it ran (ladder.Rung); a blend's: its members'

    @property
    def label(self) -> str:
        extra = f" · {self.rung}" if self.rung and self.rung != self.regime else ""
        return f"{self.model_name} · {self.strategy} · {self.regime}{extra}"

    @property
    def arm_name(self) -> str:
        """The name of its arm: its label, and a learning-rate variant's rate."""
        return self.label + "".join(f" · {k} {v:g}" for k, v in (self.tuned or {}).items())

    def skip(self, reason: str, status: Status = Status.SKIPPED) -> None:
        self.status, self.reason = status, reason

    def fail(self, error: dict, reason: str) -> None:
        """It failed: `error` as headswap.trials.rows.error_fields gives it, and what it was doing."""
        self.error, self.traceback = error["error"], error["traceback"]
        self.status, self.reason = Status.FAILED, reason

    def keep_out(self, kind: Stop) -> None:
        """A fine-tuning rung that never gets to halving still has a row in the report's arms table: `kind` in
        halving's words."""
        self.arm, self.halving, self.seconds, self.slices, self.stopped_because = self.arm_name, True, 0.0, [], kind

    def explain(self, why: str) -> None:
        """Add `why` to the reason it already has."""
        self.reason = (self.reason + "; " if self.reason else "") + why

    def to_dict(self) -> dict:
        """The row as results.json writes it."""
        nullable = {f.name for f in fields(self) if f.default is UNSET}
        return {k: v.value if isinstance(v, Enum) else v for k, v in vars(self).items()
                if k != "plan" and v is not UNSET and (v is not None or k in nullable)}


class Phase(str, Enum):
    """Rounds of halving, then the leader's."""
    HALVING = "halving"
    LEAD = "lead"


class Action(str, Enum):
    """What tell() decides for the arm whose slice ended."""
    CONTINUE = "continue"       # it leads: its next slice is queued
    HALVE = "halve"             # it waits for its round's end, where the worse half stops
    STOP = "stop"               # it stops: `stop` says by which rule


@dataclass(frozen=True)
class Decision:
    """tell()'s answer (as Ray Tune's on_result returns CONTINUE, PAUSE or STOP): the action, and for a stop its rule
    and reason."""
    action: Action
    stop: Stop | None = None
    why: str | None = None


@dataclass
class Slice:
    """One time-bounded run of an arm: `seconds` planned (wall clock, overhead included) to reach `target` epochs of
    progress; `start`/`end` read on the policy's clock; the arm's best validation score before and after."""
    arm: str
    round: int              # 0, 1, ...: the halving round (in the leader phase, the last one's)
    seconds: float
    target: float = 0.0
    phase: Phase = Phase.HALVING
    start: float | None = None
    end: float | None = None
    best_before: float | None = None
    best_after: float | None = None
    node: str | None = None

    @property
    def label(self) -> int | str:
        """The round as results.json says it: 0, 1, ..., or "lead"."""
        return Phase.LEAD.value if self.phase is Phase.LEAD else self.round

    def to_dict(self, origin: float = 0.0) -> dict:
        return {"round": self.label, "planned_seconds": round(self.seconds, 2), "target_epochs": round(self.target, 3),
                "start": None if self.start is None else round(self.start - origin, 2),
                "seconds": None if self.end is None or self.start is None else round(self.end - self.start, 2),
                "best_before": self.best_before, "best_after": self.best_after,
                **({"node": self.node} if self.node else {})}
