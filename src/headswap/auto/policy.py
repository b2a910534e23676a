"""How auto shares a time budget among its fine-tuning arms: successive halving (Jamieson & Talwalkar 2016; one
bracket of Hyperband, Li et al. 2017) on wall-clock seconds, with a leader that trains on. Pure policy: no torch,
no Ray, no training; a clock is passed in, arms report what their slices measured, decisions come out.

An arm is one fine-tuning candidate (model x strategy x regime, or one of its learning rates), known to the policy
by its estimated cost: `epoch_seconds` (one epoch of training with its validations), `overhead_seconds` (what
every slice costs besides training: loading the model, the loop's start-up, the validation at the stop) and
`once_seconds` (what the first slice of its group pays once: a cached partial's pass of its frozen lower blocks).

1. Admission. An arm's least useful slice is its overhead (and its one-off cost, until paid) plus
   FIRST_SLICE_EPOCHS of an epoch. An arm whose least
   slice is over a third of the budget cannot run (the 1/3 rule below would stop it before it could lead); it says
   so. The rest are admitted in the order given (auto gives the rungs in ladder order, then their learning-rate
   variants), each while the budget still gives it and those before it a first slice, and, after an arm was
   refused, only if it is clearly cheaper (SAME_COST): n arms play ceil(log2 n) halving rounds and then a leader
   phase, each round gets about an equal share of what is left, and a round's share must hold every admitted arm's
   least slice. The rest say that the budget gave a first slice to the arms before them. So the slices follow from the
   estimates: a 5-minute budget admits one or two arms for a fraction of an epoch each, a 2-hour budget all of them
   for whole epochs.
2. Rounds. In round r every surviving arm gets a slice of the same wall-clock seconds (what is left over the
   rounds still to play and the leader phase, over the arms that run one after another: `parallel` run at once),
   or its least slice where that is more, the others' slices shrinking to make room.
   Ranked on their best validation score so far, the worse half stops (`halved`), keeping its best checkpoint: it
   stays a candidate for the winner, and may be picked up again (below).
3. The leader. With one arm left (or the rounds played), the best arm gets what is left, slice after slice, until
   a slice neither raises its validation score nor ties it at a lower validation loss (`plateau`), its planned
   epochs are done (`finished`), or the budget ends (`budget`). If it stops with time left, the best arm that was
   halved takes over under the same rules, or, where none was, the first arm not admitted whose first slice fits.
4. The 1/3 rule. No arm holds more than a third of the budget (CAP of `cap_seconds`, times the `parallel` slots
   that run arms at once) unless it leads on validation (the best score of all arms): a slice is cut to the arm's
   room under the cap; an arm without room stops (`cap`). Where no arm's least slice is under the cap, the
   cheapest one that the budget holds runs alone (it leads, being the only one).

Why not Ray Tune's schedulers. ASHA and HyperBand promote trials on a shared `time_attr` at fixed rung levels;
they know no total wall-clock budget that the trials share, nor that trials cost differently per unit of progress,
nor a cap on one trial's share unless it leads, nor a last trial that trains on until its validation stops
improving. A custom TrialScheduler could hold all of that, but only inside a Tune run: the single-machine default
must not start Ray (seconds of start-up and hundreds of MB on a small machine, for one process that trains one
arm at a time), and one policy must serve both. Tune's multi-node trial checkpoints also need storage every node
reaches (a shared file system or cloud storage since Ray 2.7), and a cluster without a shared disk must work. So
the policy lives here; on a cluster, headswap.auto.runners places each slice as a Ray task with the resources it
asks for, and moves the data, the models and the arms' checkpoints through Ray's object store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

ETA = 2                     # survivors per round: the better 1/ETA
CAP = 1 / 3                 # of the budget: the most an arm may hold unless it leads on validation
FIRST_SLICE_EPOCHS = 0.25   # the least share of an epoch a slice trains to say anything on validation
IMPROVEMENT = 1e-4          # a leader's slice must raise its best validation score by more than this to go on
# Once an arm is refused a first slice, a later one is admitted only if its least slice is under this share of the
# refused arm's: probes of rungs that cost the same differ by 5-10% from run to run, and such noise must not put a
# later rung (similarity) in place of an earlier one (encoder-mlp full) that costs the same.
SAME_COST = 0.8


@dataclass
class Slice:
    """One time-bounded run of an arm: `seconds` planned (wall clock, overhead included), `start`/`end` read on
    the policy's clock, the arm's best validation score before and after, where it ran."""
    arm: str
    round: int              # 0, 1, ...: halving rounds; the leader phase is "lead"
    seconds: float
    start: float | None = None
    end: float | None = None
    best_before: float | None = None
    best_after: float | None = None
    node: str | None = None

    def to_dict(self, origin: float = 0.0) -> dict:
        return {"round": self.round, "planned_seconds": round(self.seconds, 2),
                "start": None if self.start is None else round(self.start - origin, 2),
                "seconds": None if self.end is None or self.start is None else round(self.end - self.start, 2),
                "best_before": self.best_before, "best_after": self.best_after,
                **({"node": self.node} if self.node else {})}


@dataclass
class Arm:
    name: str
    epoch_seconds: float
    overhead_seconds: float
    status: str = "waiting"      # waiting, running (between slices too), stopped, not run, failed
    why: str | None = None       # why it stopped or did not run
    kind: str | None = None      # halved, plateau, finished, budget, cap, failed, not admitted, too dear
    best: float | None = None
    seconds: float = 0.0         # wall-clock seconds of its slices
    slices: list[Slice] = field(default_factory=list)
    curve: list[tuple[float, float]] = field(default_factory=list)    # (clock reading, validation score)
    # What the first slice of any arm of `group` pays once (a cached partial's pass of its frozen lower blocks, which
    # its later slices and its learning-rate variants reuse): 0 once one of them has run a slice.
    once_seconds: float = 0.0
    group: str | None = None

    @property
    def least_slice(self) -> float:
        return self.overhead_seconds + self.once_seconds + FIRST_SLICE_EPOCHS * self.epoch_seconds


class Halving:
    """Decides which arms train next and for how long: next() hands out slices, report() takes their results."""

    def __init__(self, arms: Sequence[Arm], budget_seconds: float, clock: Callable[[], float], parallel: int = 1,
                 cap_seconds: float | None = None):
        self.arms = {a.name: a for a in arms}
        if len(self.arms) != len(arms):
            raise ValueError("arm names must differ")
        self.clock, self.parallel = clock, max(1, int(parallel))
        self.start = clock()
        self.deadline = self.start + budget_seconds
        # A third of what the machines can give: with `parallel` slots an arm's slot does not take time from
        # another's, so the cap is of slot-seconds (on one machine, of the budget).
        self.cap = CAP * (budget_seconds if cap_seconds is None else cap_seconds) * self.parallel
        self.round: int | str = 0
        self.queue: list[str] = []
        self.running: dict[str, Slice] = {}
        self.leader: str | None = None
        self._admit(list(arms), budget_seconds)

    # ---- state ------------------------------------------------------------------------------------------------
    def left(self) -> float:
        return self.deadline - self.clock()

    def best(self) -> Arm | None:
        """The arm with the best validation score, stopped or not (ties: the earlier)."""
        scored = [a for a in self.arms.values() if a.best is not None]
        return max(scored, key=lambda a: a.best) if scored else None

    def leads(self, arm: Arm) -> bool:
        top = self.best()
        return top is not None and top.best is not None and arm.best is not None and arm.best >= top.best

    def live(self) -> list[Arm]:
        return [a for a in self.arms.values() if a.status in ("waiting", "running")]

    def _stop(self, arm: Arm, kind: str, why: str, status: str = "stopped") -> None:
        arm.status, arm.kind, arm.why = status, kind, why

    # ---- admission --------------------------------------------------------------------------------------------
    def _admit(self, arms: list[Arm], budget: float) -> None:
        fit, dear = [], []
        for a in arms:
            if a.least_slice > self.cap:
                dear.append(a)
                self._stop(a, "too dear", f"its least slice ({_s(a.overhead_seconds + a.once_seconds)} of loading "
                           f"and start-up and {FIRST_SLICE_EPOCHS:.0%} of a {_s(a.epoch_seconds)} epoch) is over a "
                           f"third of the budget ({_s(self.cap)}), and it would not be the only arm", "not run")
            else:
                fit.append(a)
        if not fit and dear:
            # The 1/3 rule binds an arm while another leads; an arm alone leads, so one whose least slice is over a
            # third may run alone where the budget holds it (a cached partial's first slice with its lower-block
            # pass, 119 s of emotion's 5 minutes, where the frozen heads alone would leave 29% of it unused).
            alone = min(dear, key=lambda a: a.least_slice)
            if self._fits([alone], budget):
                alone.status, alone.kind, alone.why = "waiting", None, None
                fit = [alone]
        admitted, refused = [], math.inf
        for a in fit:     # in the order given (a rung before its learning-rate variants), each while it still fits
            if a.least_slice >= SAME_COST * refused:
                self._stop(a, "not admitted", f"an arm before it that costs about as much or less ({_s(refused)} at "
                                              f"least, this one {_s(a.least_slice)}) got no first slice", "not run")
            elif self._fits(admitted + [a], budget):
                admitted.append(a)
            else:
                refused = min(refused, a.least_slice)
                self._stop(a, "not admitted", f"the budget gives a first slice to {len(admitted)} arm(s) before it, "
                                              f"and not to this one too (it needs {_s(a.least_slice)} at least)",
                           "not run")
        fit, n = admitted, len(admitted)
        self.queue = [a.name for a in fit[:n]]
        self.members = list(self.queue)
        self.slice_s = self._plan(n, budget)[1] if n else 0.0
        self.planned = self._round_slices(fit, budget) or {} if n else {}
        if n == 1:
            self.round, self.leader = "lead", self.queue[0]

    def _fits(self, arms: list[Arm], budget: float) -> bool:
        """Whether the first round's share holds every one of `arms`' first slices."""
        return self._round_slices(arms, budget) is not None

    def _round_slices(self, arms: list[Arm], left: float) -> dict[str, float] | None:
        """Each arm's slice in a round of `arms`: the same for all, except that an arm whose least slice is more gets
        that, the others' slices shrinking to make room (never below their own least); None when the round's share
        cannot hold every arm's least slice. An arm that needs a longer first slice to say anything (full
        fine-tuning on 16,000 texts: 2.4 min) then competes with cheaper ones, rather than losing its place to a
        cheap arm's learning-rate variant for want of a few seconds."""
        share, even = self._plan(len(arms), left)
        room = share * min(self.parallel, len(arms))
        if sum(a.least_slice for a in arms) > room * (1 + 1e-9):
            return None
        fixed: dict[str, float] = {}
        while True:
            rest = [a for a in arms if a.name not in fixed]
            level = min(even, (room - sum(fixed.values())) / len(rest)) if rest else even
            over = [a for a in rest if a.least_slice > level]
            if not over:
                return {a.name: fixed.get(a.name, level) for a in arms}
            fixed.update((a.name, a.least_slice) for a in over)

    def _plan(self, n: int, left: float) -> tuple[float, float]:
        """(the round's share of `left`, each arm's slice) for n arms still to halve."""
        rounds = math.ceil(math.log(n, ETA) - 1e-9) if n > 1 else 0
        share = left / (rounds + 1)
        return share, share / math.ceil(n / self.parallel)

    # ---- decisions --------------------------------------------------------------------------------------------
    def next(self) -> list[Slice]:
        """The slices to start now (none when running ones must report first, or when nothing is left to do)."""
        if not self.queue and not self.running:
            self._next_phase()
        out = []
        while self.queue and len(self.running) < self.parallel:
            arm = self.arms[self.queue.pop(0)]
            planned = self.planned.get(arm.name, self.slice_s) if self.round != "lead" else self._lead_slice(arm)
            seconds = self._fit(arm, planned)
            if seconds is None:
                continue
            s = Slice(arm.name, self.round, seconds, start=self.clock(), best_before=arm.best)
            arm.status = "running"
            self.running[arm.name] = s
            out.append(s)
        if not out and not self.running and (self.queue or self.live()):
            return self.next()
        return out

    def _fit(self, arm: Arm, planned: float) -> float | None:
        """The slice cut to what is left and to the arm's room under the cap; None (and the arm stopped) when too
        little of either is left for a useful slice."""
        left = self.left()
        room = math.inf if self.leads(arm) or len(self.live()) == 1 and arm.best is None else self.cap - arm.seconds
        seconds = min(planned, left, room)
        if seconds >= arm.least_slice:
            return seconds
        if room < min(planned, left):
            self._stop(arm, "cap", f"holds {_s(arm.seconds)}, about a third of the budget, and does not lead on "
                                   f"validation")
        else:
            self._stop(arm, "budget", f"the budget ended: {_s(max(left, 0))} left, a slice needs "
                                      f"{_s(arm.least_slice)}")
        return None

    def _lead_slice(self, arm: Arm) -> float:
        """A leader trains an epoch a slice (validated inside it), at least its least slice, and the last slice takes
        what is left when that would be less than a slice."""
        planned = max(arm.least_slice, arm.overhead_seconds + arm.epoch_seconds)
        return self.left() if self.left() - planned < arm.least_slice else planned

    def _next_phase(self) -> None:
        live = [a for a in self.live() if a.name in self.members] if self.round != "lead" else []
        if self.round != "lead" and len(live) > 1:
            ranked = sorted(live, key=lambda a: -a.best if a.best is not None else math.inf)
            keep = math.ceil(len(ranked) / ETA)
            worst_kept = ranked[keep - 1].best
            for i, a in enumerate(ranked[keep:], keep + 1):
                self._stop(a, "halved", f"halved after round {self.round + 1}: ranked {i} of {len(ranked)} on "
                                        f"validation ({_f(a.best)}; the survivors' worst {_f(worst_kept)})")
            survivors = ranked[:keep]
            if len(survivors) > 1:
                self.round += 1
                order = list(self.arms)
                self.members = sorted((a.name for a in survivors), key=order.index)
                self.queue = list(self.members)
                self.slice_s = self._plan(len(survivors), max(self.left(), 0))[1]
                self.planned = self._round_slices(survivors, max(self.left(), 0)) or {}
                return
        self.round = "lead"
        # The leader: the best arm that may still train (one that was halved keeps its checkpoint and can); failing
        # those, one that was not admitted, where what a finished leader left holds its first slice (SMS spam at
        # 5 minutes: the one arm admitted finished its planned epochs with 46 s of the arms' 126 s unused).
        pick = [a for a in self.arms.values() if a.status == "running" or a.kind in ("halved", "not admitted")
                and min(self.left(), self.cap - a.seconds) >= a.least_slice]
        if not pick:
            self.queue = []
            return
        top = max(pick, key=lambda a: (a.best if a.best is not None else -math.inf, -list(self.arms).index(a.name)))
        if top.kind in ("halved", "not admitted"):
            top.status, top.kind, top.why = "running", None, None
        for a in pick:
            if a is not top and a.status == "running":
                self._stop(a, "halved", f"the leader ({top.name}) got what was left")
        self.leader, self.queue = top.name, [top.name]

    # ---- results ----------------------------------------------------------------------------------------------
    def report(self, name: str, points: Sequence[tuple[float, float]] = (), error: str | None = None,
               finished: bool = False, node: str | None = None, improved: bool = False) -> None:
        """A slice ended: its validation points (clock reading, score), or its error; finished: the arm trained all
        its planned epochs; improved: its weights beat the arm's earlier ones (a tie at a lower validation loss
        included, as the training loop ranks them)."""
        arm, s = self.arms[name], self.running.pop(name)
        s.end, s.node = self.clock(), node
        arm.seconds += s.end - s.start
        for a in self.arms.values():     # the one-off pass is made: no later slice of the group pays it again
            if a is arm or arm.group is not None and a.group == arm.group:
                a.once_seconds = 0.0
        # A slice that ran past its plan ran past it in what the estimate left out (saving and resuming the
        # checkpoint, a slow validation): the arm's later slices plan for it, so they, and the run, end on time.
        arm.overhead_seconds += max(s.end - s.start - s.seconds, 0.0)
        arm.slices.append(s)
        arm.curve.extend((float(t), float(v)) for t, v in points)
        for _, v in points:
            if arm.best is None or v > arm.best:
                arm.best = float(v)
        s.best_after = arm.best
        if error is not None:
            return self._stop(arm, "failed", f"failed: {error}", "failed")
        if finished:
            return self._stop(arm, "finished", "trained all its planned epochs")
        if self.round == "lead":
            # A score that saturates (1.0 on a small, easy validation set) can only tie: a tie at a lower validation
            # loss is still progress, and the leader trains on as the arm alone would.
            gained = arm.best is not None and (s.best_before is None or arm.best > s.best_before + IMPROVEMENT
                                               or improved and arm.best >= s.best_before)
            if not gained:
                self._stop(arm, "plateau", f"validation stopped improving: its last slice ({_s(s.end - s.start)}) "
                                           f"did not beat {_f(s.best_before)}, nor tie it at a lower loss")
            elif self.left() > 0:
                self.queue.append(name)

    def finish(self) -> None:
        """The run is over: arms still running stop because the budget ended."""
        for a in self.live():
            if a.status == "waiting":
                self._stop(a, "budget", "the budget ended before its first slice", "not run")
            else:
                self._stop(a, "budget", "the budget ended")

    def summary(self) -> dict:
        return {"budget_seconds": self.deadline - self.start, "cap_seconds": self.cap, "parallel": self.parallel,
                "leader": self.leader,
                "arms": {n: {"status": a.status, "stopped_because": a.kind, "why": a.why, "best": a.best,
                             "seconds": round(a.seconds, 2), "slices": [s.to_dict(self.start) for s in a.slices],
                             "curve": [[round(t - self.start, 2), v] for t, v in a.curve]}
                         for n, a in self.arms.items()}}


def _s(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _f(score: float | None) -> str:
    return "no score" if score is None else f"{score:.4f}"
