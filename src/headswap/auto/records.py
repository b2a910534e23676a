"""What auto records of its candidates, in one vocabulary for the ladder, the policy and the report: an arm's state in
the policy (ArmStatus), the rule that stopped it or kept it from running (Stop), the policy's phase and decisions
(Phase, Action, Decision), an arm's slices (Slice)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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
