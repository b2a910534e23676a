"""How auto shares its fine-tuning arms' time: successive halving (Jamieson & Talwalkar 2016; one bracket of
Hyperband, Li et al. 2017) in units of training progress, with a leader that trains on. Pure policy: no torch, no
Ray, no training; the arms' share of the budget (headswap.auto.budget.Share) answers every time question; ask()
says which arms train next and for how long, tell() takes what a slice measured (as Ray Tune's TrialScheduler and
scikit-learn's successive halving split deciding from running).

An arm is one fine-tuning candidate (model x strategy x regime, or one of its learning rates), known by its
estimated cost: `epoch_seconds` (one epoch with its validations), `overhead_seconds` (what every slice costs besides
training: loading, the loop's start-up, the validation at the stop) and `once_seconds` (what the first slice of its
group pays once: a cached partial's pass of its frozen lower blocks). Its `progress` is the epochs it has trained.

1. Arms are judged at equal progress, and not before JUDGE_EPOCHS (an epoch: ASHA's grace period, Li et al. 2020,
   in epochs rather than seconds). Every arm of a round trains to the same share of an epoch, so a full fine-tune whose epoch costs five times a cached
   partial's gets five times the seconds, and is not halved for being slower per second: the intent set of 15,100
   texts halved full fine-tuning after a 40-second slice (0.1 epoch, inside its learning-rate warm-up) at 0.929,
   where two epochs alone reach 0.96. A round's progress is what its share of the time left buys: the time left
   over the rounds still to play and the leader phase, less the arms' overheads, over the sum of their epoch costs.
2. Admission. An arm's least slice is its overhead (and one-off cost, until paid) plus GRACE_EPOCHS of an epoch. Arms
   are admitted in the order given (the ladder's, then learning-rate variants): the first where its least slice
   fits, each later one while the first round still trains every admitted arm to JUDGE_EPOCHS; after a refusal,
   only a clearly cheaper one (SAME_COST). On 2 CPU cores in 15 minutes that is a cached partial and full
   fine-tuning; learning-rate variants join as budgets grow. Arms whose first judged epoch fits the share go before
   those whose does not (judged_first): one that cannot reach a judgement is not admitted alone while a cheaper one can.
   An arm whose least slice is over the 1/3 cap is refused unless it would be the only arm.
3. Rounds. Ranked on their best validation score at the round's progress, the worse half stops (`halved`) and keeps
   its best checkpoint: it stays a candidate, and may take over later. Rates are corrected from what each slice
   measured, so the next round's slices reach the same progress.
4. The leader. The best arm gets what is left an epoch at a time until its validation has not improved for
   PATIENCE_EPOCHS of training (`plateau`: patience in epochs, not one slice), its planned epochs are done
   (`finished`), or the budget ends (`budget`). If it stops with time left, the best halved arm takes over, or the
   first arm not admitted whose first slice fits.
5. The 1/3 rule. No arm holds more than a third of the budget (Share.cap: of slot-seconds with `parallel` slots)
   unless it leads on validation; where no arm's least slice is under the cap, the cheapest runs alone.

Why not Ray Tune's schedulers. ASHA and HyperBand promote trials on a shared `time_attr` at fixed rung levels; they
know no total wall-clock budget that trials share, nor a cap on one trial's share unless it leads, nor a last trial
that trains on until its validation stops improving; and the single-machine default must not start Ray (seconds of
start-up and hundreds of MB for one process that trains one arm at a time). On a cluster, headswap.auto.runners
places each slice as a Ray task and moves data, models and checkpoints through Ray's object store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from headswap.auto.budget import Share, shown
from headswap.auto.records import Action, ArmStatus, Decision, Phase, Slice, Status, Stop
from headswap.reports.report_text import duration

ETA = 2                     # survivors per round: the better 1/ETA
GRACE_EPOCHS = 0.25         # the least share of an epoch a slice trains
# Arms are compared only once each has trained this much: within its first epoch a fine-tune is still in its
# learning-rate warm-up (6% of up to 10 planned epochs), and the intent set's full fine-tune read 0.953 at a quarter
# epoch, below the 0.967 of the head it started from, where a cached partial read 0.965.
JUDGE_EPOCHS = 1.0
# A leader stops on a plateau only after this many epochs without a better validation. One epoch stopped MiniLM's
# full fine-tune on CLINC150 at 3.1 of its 5-6 planned epochs in the two weakest of its runs (test 0.9553 and, with
# --out-of-scope, 0.9480), before its learning rate had decayed; where it trained to 4.6 epochs it read 0.9572.
PATIENCE_EPOCHS = 2.0
IMPROVEMENT = 1e-4          # a validation score must rise by more than this to count as better
# Once an arm is refused a first slice, a later one is admitted only if its least slice is under this share of the
# refused arm's: probes of rungs that cost the same differ by 5-10% from run to run, and such noise must not put a
# later rung (similarity) in place of an earlier one (encoder-mlp full) that costs the same.
SAME_COST = 0.8


@dataclass
class Arm:
    name: str
    epoch_seconds: float
    overhead_seconds: float
    status: ArmStatus = ArmStatus.WAITING
    why: str | None = None       # why it stopped or did not run
    kind: Stop | None = None
    best: float | None = None
    seconds: float = 0.0         # wall-clock seconds of its slices
    progress: float = 0.0        # epochs trained
    gained_at: float = 0.0       # progress at its last better validation
    slices: list[Slice] = field(default_factory=list)
    curve: list[tuple[float, float]] = field(default_factory=list)    # (clock reading, validation score)
    # What the first slice of any arm of `group` pays once (a cached partial's pass of its frozen lower blocks, which
    # its later slices and its learning-rate variants reuse): 0 once one of them has run a slice.
    once_seconds: float = 0.0
    group: str | None = None

    @property
    def least_slice(self) -> float:
        return self.overhead_seconds + self.once_seconds + GRACE_EPOCHS * self.epoch_seconds

    @property
    def outcome(self) -> Status:
        """Its row's status in the report: skipped when it never ran; ran when it has a score, else failed."""
        return Status.SKIPPED if self.status is ArmStatus.NOT_RUN else Status.RAN if self.best is not None \
            else Status.FAILED

    def seconds_to(self, target: float) -> float:
        """The slice that takes this arm from its progress to `target` epochs (at least GRACE_EPOCHS on)."""
        return self.overhead_seconds + self.once_seconds + max(target - self.progress, GRACE_EPOCHS) * self.epoch_seconds


@dataclass(frozen=True)
class Admission:
    """Which arms a share admits to the first round (`queue`, in order), the progress that round trains them to
    (`target`, epochs), and why each other arm does not run (`refused`: name -> (rule, reason))."""
    queue: list[str]
    target: float
    refused: dict[str, tuple[Stop, str]]


def admit(arms: Sequence[Arm], share: Share) -> Admission:
    """Admission (rule 2; the 1/3 rule, 5): pure, so the arms' room can be chosen before the policy is built."""
    budget, parallel, refused = share.seconds, share.slots, {}
    fit, dear = [], []
    for a in arms:
        if a.least_slice > share.cap:
            dear.append(a)
            refused[a.name] = (Stop.TOO_DEAR, f"its least slice ({duration(a.overhead_seconds + a.once_seconds)} of "
                               f"loading and start-up and {GRACE_EPOCHS:.0%} of a {duration(a.epoch_seconds)} epoch) "
                               f"is over a third of the budget ({duration(share.cap)}), and it would not be the only arm")
        else:
            fit.append(a)
    if not fit and dear:
        # The 1/3 rule binds an arm while another leads; an arm alone leads, so one whose least slice is over a
        # third may run alone where the budget holds it (a cached partial's first slice with its lower-block
        # pass, 119 s of emotion's 5 minutes, where the frozen heads alone would leave 29% of it unused).
        alone = min(dear, key=lambda a: a.least_slice)
        if _epochs([alone], budget, parallel) is not None:
            del refused[alone.name]
            fit = [alone]
    admitted, least_refused = [], math.inf
    for a in judged_first(fit, budget):     # a rung before its learning-rate variants, each while it still fits
        if a.least_slice >= SAME_COST * least_refused:
            refused[a.name] = (Stop.NOT_ADMITTED, f"an arm before it that costs about as much or less "
                                                  f"({duration(least_refused)} at least, this one "
                                                  f"{duration(a.least_slice)}) got no first slice")
        elif _epochs(admitted + [a], budget, parallel, JUDGE_EPOCHS if admitted else GRACE_EPOCHS) is not None:
            admitted.append(a)
        else:
            least_refused = min(least_refused, a.least_slice)
            refused[a.name] = (Stop.NOT_ADMITTED, f"the budget trains {len(admitted)} arm(s) before it to "
                                                  f"{JUDGE_EPOCHS:g} epoch each before judging them, and not this "
                                                  f"one too")
    target = (_epochs(admitted, budget, parallel, 0.0) or 0.0) if admitted else 0.0
    return Admission([a.name for a in admitted], target, refused)


def judged_first(arms: Sequence[Arm], seconds: float) -> list[Arm]:
    """`arms` in the order given, those whose first judged epoch fits in `seconds` first: on a German set e5's
    similarity arm, first in the prior's order and admitted alone, took all 4.4 minutes the arms had for half of its
    10.3-minute epoch, and the 89-s cached partial never ran."""
    fits = [a.seconds_to(JUDGE_EPOCHS) <= seconds for a in arms]
    return [a for a, f in zip(arms, fits) if f] + [a for a, f in zip(arms, fits) if not f]


def _epochs(arms: list[Arm], left: float, parallel: int, least: float = GRACE_EPOCHS) -> float | None:
    """The progress (epochs, from where the arms are) that a round of `arms` buys with its share of `left`: the
    share, run `parallel` at once, less their overheads, over their epoch costs; None under `least`."""
    n = len(arms)
    rounds = math.ceil(math.log(n, ETA) - 1e-9) if n > 1 else 0
    room = left / (rounds + 1) * min(parallel, n)
    once: dict = {}     # a group's one-off pass is paid once, by whichever of its arms runs first
    for a in arms:
        key = a.group if a.group is not None else id(a)
        once[key] = max(once.get(key, 0.0), a.once_seconds)
    fixed = sum(a.overhead_seconds for a in arms) + sum(once.values())
    per_epoch = sum(a.epoch_seconds for a in arms)
    epochs = (room - fixed) / per_epoch if per_epoch > 0 else math.inf
    return epochs if epochs >= least * (1 - 1e-9) else None


class Halving:
    """Decides which arms train next and for how long: ask() hands out slices, tell() takes their results and says
    what it decided. Built once, on the share of the budget the arms get (Budget.share)."""

    def __init__(self, arms: Sequence[Arm], share: Share):
        self.arms = {a.name: a for a in arms}
        if len(self.arms) != len(arms):
            raise ValueError("arm names must differ")
        # Every time question (what is left, an arm's cap, the clock a slice is timed by) is the share's
        self.share, self.parallel, self.cap = share, share.slots, share.cap
        admission = admit(arms, share)
        for name, (kind, why) in admission.refused.items():
            self._stop(self.arms[name], kind, why, ArmStatus.NOT_RUN)
        self.queue, self.members = list(admission.queue), list(admission.queue)    # members: the round's arms
        self.target = admission.target          # the epochs every arm of this round trains to
        self.round, self.phase = 0, Phase.HALVING
        self.running: dict[str, Slice] = {}
        self.leader: str | None = None
        if len(self.queue) == 1:
            self.phase, self.leader = Phase.LEAD, self.queue[0]

    # ---- state ------------------------------------------------------------------------------------------------
    def best(self) -> Arm | None:
        """The arm with the best validation score, stopped or not (ties: the earlier)."""
        scored = [a for a in self.arms.values() if a.best is not None]
        return max(scored, key=lambda a: a.best) if scored else None

    def leads(self, arm: Arm) -> bool:
        top = self.best()
        return top is not None and top.best is not None and arm.best is not None and arm.best >= top.best

    def live(self) -> list[Arm]:
        return [a for a in self.arms.values() if a.status in (ArmStatus.WAITING, ArmStatus.RUNNING)]

    def _stop(self, arm: Arm, kind: Stop, why: str, status: ArmStatus = ArmStatus.STOPPED) -> Decision:
        arm.status, arm.kind, arm.why = status, kind, why
        return Decision(Action.STOP, kind, why)

    @property
    def slice_s(self) -> float:
        """The first round's planned slice of the cheapest admitted arm (for the log line)."""
        arms = [self.arms[n] for n in self.members]
        return min((a.seconds_to(self.target) for a in arms), default=0.0)

    # ---- slices -----------------------------------------------------------------------------------------------
    def ask(self) -> list[Slice]:
        """The slices to start now (none when running ones must tell first, or when nothing is left to do)."""
        while True:
            if not self.queue and not self.running:
                self._next_phase()
            out = self._start()
            # None started and none running, though arms are queued or live: their slices did not fit what is left
            # (and they stopped), so the next phase decides again
            if out or self.running or not (self.queue or self.live()):
                return out

    def _start(self) -> list[Slice]:
        out = []
        while self.queue and len(self.running) < self.parallel:
            arm = self.arms[self.queue.pop(0)]
            lead = self.phase is Phase.LEAD
            target = arm.progress + 1.0 if lead else self.target
            planned = self._lead_slice(arm) if lead else arm.seconds_to(target)
            seconds = self._fit(arm, planned)
            if seconds is None:
                continue
            s = Slice(arm.name, self.round, seconds, target=target, phase=self.phase, start=self.share.now(),
                      best_before=arm.best)
            arm.status = ArmStatus.RUNNING
            self.running[arm.name] = s
            out.append(s)
        return out

    def _fit(self, arm: Arm, planned: float) -> float | None:
        """The slice cut to what is left and to the arm's room under the cap; None (and the arm stopped) when too
        little of either is left for a useful slice."""
        alone = len(self.live()) == 1 and arm.best is None
        seconds, left, capped = self.share.cut(planned, arm.seconds, self.leads(arm) or alone)
        if seconds >= arm.least_slice:
            return seconds
        if capped:
            self._stop(arm, Stop.CAP, f"holds {duration(arm.seconds)}, about a third of the budget, and does not lead on "
                                      f"validation")
        else:
            self._stop(arm, Stop.BUDGET, f"the budget ended: {shown(left)} left, a slice needs "
                                         f"{duration(arm.least_slice)}")
        return None

    def _lead_slice(self, arm: Arm) -> float:
        """A leader trains an epoch a slice (validated inside it), and the last slice takes what is left when that
        would be less than a slice."""
        return self.share.last_slice(max(arm.least_slice, arm.overhead_seconds + arm.epoch_seconds), arm.least_slice)

    # ---- phases -----------------------------------------------------------------------------------------------
    def _next_phase(self) -> None:
        """Nothing queued or running: the round ends (another round, or the leader's phase), or a new leader."""
        if self.phase is Phase.LEAD or not self._halve():
            self._lead()

    def _halve(self) -> bool:
        """The round's end (rule 3): the worse half of its live arms stops; True when the survivors play another."""
        live = [a for a in self.live() if a.name in self.members]
        if len(live) <= 1:
            return False
        ranked = sorted(live, key=lambda a: -a.best if a.best is not None else math.inf)
        keep = math.ceil(len(ranked) / ETA)
        worst_kept = ranked[keep - 1].best
        for i, a in enumerate(ranked[keep:], keep + 1):
            self._stop(a, Stop.HALVED, f"halved after round {self.round + 1} at {a.progress:.2f} epochs: ranked "
                                       f"{i} of {len(ranked)} on validation ({_f(a.best)}; the survivors' worst "
                                       f"{_f(worst_kept)})")
        survivors = ranked[:keep]
        more = _epochs(survivors, self.share.remaining(), self.parallel) if len(survivors) > 1 else None
        if more is None:
            return False
        self.round += 1
        order = list(self.arms)
        self.members = sorted((a.name for a in survivors), key=order.index)
        self.queue = list(self.members)
        self.target = max(a.progress for a in survivors) + more
        return True

    def _lead(self) -> None:
        """The leader (rule 4): the best arm that may still train (one that was halved keeps its checkpoint and can);
        failing those, one not admitted (or too dear for the cap: alone it leads) whose first slice what a finished
        leader left holds (SMS spam at 5 minutes: the one arm admitted finished with 46 s of the arms' 126 s unused)."""
        self.phase = Phase.LEAD
        pick = [a for a in self.arms.values() if a.status == ArmStatus.RUNNING or a.kind in (
            Stop.HALVED, Stop.NOT_ADMITTED) and self.share.holds(a.least_slice, a.seconds)
            or a.kind is Stop.TOO_DEAR and self.share.holds_alone(a.least_slice)]
        if not pick:
            self.queue = []
            return
        top = max(pick, key=lambda a: (a.best if a.best is not None else -math.inf, -list(self.arms).index(a.name)))
        if top.kind in (Stop.HALVED, Stop.NOT_ADMITTED, Stop.TOO_DEAR):
            top.status, top.kind, top.why = ArmStatus.RUNNING, None, None
            top.gained_at = top.progress      # its patience counts from the takeover
        for a in pick:
            if a is not top and a.status == ArmStatus.RUNNING:
                self._stop(a, Stop.HALVED, f"the leader ({top.name}) got what was left")
        self.leader, self.queue = top.name, [top.name]

    # ---- results ----------------------------------------------------------------------------------------------
    def tell(self, name: str, points: Sequence[tuple[float, float]] = (), error: str | None = None,
             finished: bool = False, node: str | None = None, improved: bool = False,
             progress: float | None = None, train_seconds: float | None = None) -> Decision:
        """A slice ended: its validation points (clock reading, score), or its error; finished: the arm trained all
        its planned epochs; improved: its weights beat the arm's earlier ones (a tie at a lower validation loss
        included, as the training loop ranks them); progress: the epochs the arm has now trained, and
        train_seconds the slice's training time (both as the runner measured them; None: from the plan)."""
        arm, s = self.arms[name], self.running.pop(name)
        s.end, s.node = self.share.now(), node
        self._measure(arm, s, progress, train_seconds)
        self._score(arm, s, points, improved)
        if error is not None:
            return self._stop(arm, Stop.FAILED, f"failed: {error}", ArmStatus.FAILED)
        if finished:
            return self._stop(arm, Stop.FINISHED, "trained all its planned epochs")
        if self.phase is Phase.HALVING:
            return Decision(Action.HALVE)
        waited = arm.progress - arm.gained_at
        if waited >= PATIENCE_EPOCHS - 1e-9:
            return self._stop(arm, Stop.PLATEAU, f"validation stopped improving: {waited:.1f} epochs without beating "
                                                 f"{_f(arm.best)}, nor tying it at a lower loss")
        # Past the end of the share, its next slice is cut to nothing and the budget stops it (ask)
        self.queue.append(name)
        return Decision(Action.CONTINUE)

    def _measure(self, arm: Arm, s: Slice, progress: float | None, train_seconds: float | None) -> None:
        """The arm's seconds, progress and rates, corrected by what slice `s` measured."""
        took = s.end - s.start
        arm.seconds += took
        once = arm.once_seconds
        for a in self.arms.values():     # the one-off pass is made: no later slice of the group pays it again
            if a is arm or arm.group is not None and a.group == arm.group:
                a.once_seconds = 0.0
        if progress is None:     # no measure: the plan's training seconds at the estimated rate
            trained = max(min(took, s.seconds) - arm.overhead_seconds - once, 0.0)
            progress = arm.progress + trained / arm.epoch_seconds if arm.epoch_seconds > 0 else s.target
        done = max(progress - arm.progress, 0.0)
        if train_seconds is not None and done > 0.02 and train_seconds - once > 0:
            # The rate the slice measured (its training time holds the one-off pass): the next round's slices reach
            # the same progress as the other arms'.
            arm.epoch_seconds = (train_seconds - once) / done
            arm.overhead_seconds = max(arm.overhead_seconds, took - train_seconds)
        else:
            # A slice that ran past its plan ran past it in what the estimate left out (saving and resuming the
            # checkpoint, a slow validation): the arm's later slices plan for it, so they, and the run, end on time.
            arm.overhead_seconds += max(took - s.seconds, 0.0)
        arm.progress = max(progress, arm.progress)
        arm.slices.append(s)

    @staticmethod
    def _score(arm: Arm, s: Slice, points: Sequence[tuple[float, float]], improved: bool) -> None:
        """The arm's curve and best score after slice `s`, and where it last gained."""
        arm.curve.extend((float(t), float(v)) for t, v in points)
        before = arm.best
        for _, v in points:
            if arm.best is None or v > arm.best:
                arm.best = float(v)
        s.best_after = arm.best
        # A score that saturates (1.0 on a small, easy validation set) can only tie: a tie at a lower validation loss
        # is still progress, and the leader trains on as the arm alone would.
        if arm.best is not None and (before is None or arm.best > before + IMPROVEMENT or improved
                                     and arm.best >= before):
            arm.gained_at = arm.progress

    def finish(self) -> None:
        """The run is over: arms still running stop because the budget ended."""
        for a in self.live():
            if a.status == ArmStatus.WAITING:
                self._stop(a, Stop.BUDGET, "the budget ended before its first slice", ArmStatus.NOT_RUN)
            else:
                self._stop(a, Stop.BUDGET, "the budget ended")

    def summary(self) -> dict:
        origin = self.share.start
        return {"budget_seconds": self.share.given(), "cap_seconds": self.cap, "parallel": self.parallel,
                "leader": self.leader,
                "arms": {n: {"status": a.status.value, "stopped_because": a.kind.value if a.kind else None,
                             "why": a.why, "best": a.best, "seconds": round(a.seconds, 2),
                             "epochs": round(a.progress, 3), "slices": [s.to_dict(origin) for s in a.slices],
                             "curve": [[round(t - origin, 2), v] for t, v in a.curve]}
                         for n, a in self.arms.items()}}


def _f(score: float | None) -> str:
    return "no score" if score is None else f"{score:.4f}"
