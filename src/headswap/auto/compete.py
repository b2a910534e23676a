"""auto's fine-tuning arms (headswap.auto.arms) compete by successive halving (the policy: headswap.auto.policy; the
slices: headswap.auto.runners): the budget left after the cheap rungs, less the room to ship the winner, is what the
arms share. Every arm is recorded as a candidate with its slices, its validation curve, its seconds and why it
stopped; the best validated arm so far is Climb's best as it goes.
"""

from __future__ import annotations

import gc
import math
from pathlib import Path
from typing import TYPE_CHECKING

from headswap.auto.arms import Arms, ArmCosts, Plan, arm_costs
from headswap.auto import ladder
from headswap.auto.budget import Share, shown
from headswap.auto.policy import Arm, Halving, admit
from headswap.auto.records import Entry, Phase, Status
from headswap.reports.report_text import duration

if TYPE_CHECKING:
    from headswap.auto.runners import Runner

# A learning-rate variant must beat the best validation macro F1 so far by more than this to become the best:
# macro F1 on a validation set of a few thousand texts moves by tenths of a point between seeds alone. (On emotion,
# 3 seeds, body_lr 3e-4 came within -0.2..+0.3 points of 1e-4 on validation, and was 0.7-2.5 points worse on test:
# without a margin the search drifted to it; BENCHMARKS.md "auto's learning-rate search".)
LR_MARGIN = 0.005
# ... on MARGIN_TEXTS validation texts (emotion's, where it was measured). A score's noise grows as one over the
# square root of the texts it is read on, and so does the margin: a point on 500. On GermEval 2018's 451 a variant
# (body_lr 1e-4) led the default rate by 0.99 and 0.27 points on validation in two runs and scored 1.7 points under
# it on test both times.
MARGIN_TEXTS = 2000
MAX_PLANNED_EPOCHS = 10     # an arm's learning-rate schedule runs over at most this many epochs (or the user's)


def warm_start(climb, rung, settings: dict) -> dict:
    """The settings that start an arm from the best frozen head of its body and strategy fitted this run (linear
    probing, then fine-tuning: LP-FT, Kumar et al. 2022): the heads of its kind, best first, and the head's learning
    rate lowered to the body's, so that the first steps do not pull a fitted head away from its score before the
    body has learned anything (the intent set's full fine-tune ended its first slice at 0.929, below the 0.946 of
    the head it started from). A head the user set a learning rate for keeps it; none of its kind: no change."""
    from headswap.settings import default_body_lr
    from headswap.strategies import get

    kind = settings.get("head") or "auto"
    kind = get(rung.strategy).default_head if kind == "auto" else kind
    heads = sorted((h for h in climb.heads.get((rung.model, rung.strategy), ()) if h[3] == kind), key=lambda h: -h[0])
    if not heads:
        return {}
    out = {"start_heads": [(f"{name} ({score:.4f})", state) for score, name, state, _ in heads]}
    if climb.settings.get("head_lr") is None:
        out["head_lr"] = settings.get("body_lr") or default_body_lr(rung.regime)
    return out


def lr_margin(n_validation: int) -> float:
    """What a learning-rate variant must gain over the best so far on `n_validation` texts (LR_MARGIN on
    MARGIN_TEXTS, scaled as the noise of a score on that many)."""
    return LR_MARGIN * math.sqrt(MARGIN_TEXTS / max(n_validation, 1))


def _to_beat(climb, entry: Entry, before: float | None) -> float:
    """What an arm's new best must exceed to become what auto ships: the best so far (read before this slice's
    result updates the arm's entry), plus lr_margin() for a learning-rate variant taking the lead from another arm.
    An arm that already leads ships each improvement: its entry is the best entry, and comparing with the entry
    after its update would keep its first slice's weights for good."""
    if climb.best_entry is entry:
        return before if before is not None else -math.inf
    return climb.best_entry.validation_macro_f1 + (lr_margin(climb.costs.n_validation) if entry.tuned else 0.0)


def compete(climb, prepared: Arms, *, more_epochs: bool = True, folder, runner: Runner | None = None) -> None:
    """Run the prepared arms (prepare()) within what is left of climb's budget, record them in climb.entries, and
    make the best of them climb.best when it beats what the cheap rungs gave."""
    from headswap.auto.runners import LocalArms

    climb.entries.extend(prepared.entries)
    if not prepared.plans:
        return
    runner = runner or LocalArms(climb.train, climb.validation, Path(folder))
    prepared.busy = ladder.busy_factor()       # read once: it samples the machine for a tenth of a second
    if prepared.busy > 1:
        climb.log(f"  the cores read {prepared.busy:.2f} times as busy as idle ones: the room kept to ship is priced "
                  f"alike")
    arms = [_arm(climb.costs, rung, entry) for rung, _, entry in prepared.plans]
    share = _share(climb, prepared, arms, runner.parallel)
    jobs = _jobs(climb, prepared.plans, share, more_epochs)
    policy = Halving(arms, share)
    climb.log(f"  successive halving: {len(policy.queue)} of {len(jobs)} arms get a first slice of about "
              f"{duration(policy.slice_s)} ({shown(share.seconds)} to share, {runner.parallel} at a time)")
    Match(climb, policy, jobs, runner).play()
    _record(climb, policy, jobs)


def _arm(c: ArmCosts, rung, entry: Entry) -> Arm:
    """The rung (or learning-rate variant) `entry` as the policy knows it: its name and estimated costs. The first
    slice of the rung or of any of its learning-rate variants makes the lower-block pass, and the others reuse it
    (one group): each plans for it until one has run, as the variant admitted alone at 5 minutes on GermEval 2018
    must (planned without it, its slice ran 84 s of the 51 the arms had)."""
    epoch, overhead, _ = arm_costs(c, rung)
    return Arm(entry.arm_name, epoch, overhead, once_seconds=c.lower_pass(rung), group=repr(rung.cost_key))


def _share(climb, prepared: Arms, arms: list, parallel: int) -> Share:
    """The arms' share of the budget (Arms.room): what is left less the room to ship the winner among them, and a
    second blended model where that still admits an arm, and its ONNX export where that does (on cores as busy as
    now); where only some arms are admitted, the room to ship those alone, unless that admits one dearer to ship."""
    budget, plans = climb.budget, prepared.plans
    second, room = True, prepared.room()
    queue = admit(arms, budget.share(room, parallel)).queue
    if not queue and climb.blends:
        # The room kept to ship a second blended model is worth less than an arm: at 5 minutes on GermEval 2018 no
        # arm got a first slice beside it (e5's cheapest needed 55 s, 21 s were left) and the run used 77% of its
        # budget. blend_winner offers another candidate only while the time left pays for shipping it.
        second, room = False, prepared.room(second=False)
        climb.log("  no arm's first slice fits beside the room kept to ship a second blended model: that room goes "
                  "to the arms")
        queue = admit(arms, budget.share(room, parallel)).queue
    if not queue and prepared.export:
        # An ONNX export is optional (ship.Prices asks for it at the end), an arm is not: beside `make test`, on
        # cores 3.9 times as busy as idle, a one-minute run kept 34 s to export the winner, gave the arms none, was
        # then refused the export by 2 s and ended at 49% of its budget.
        # A second blended model saved for torch costs a second or two, and on few texts, where candidates tie on
        # validation, the blend is what ships the transformer at all: its room is kept while an arm still fits.
        prepared.export = False
        second, room = climb.blends, prepared.room()
        climb.log("  no arm's first slice fits beside the room kept to export the winner to ONNX: that room goes to "
                  "the arms, and the winner is exported only if the time left then holds it")
        queue = admit(arms, budget.share(room, parallel)).queue
        if not queue and second:
            second, room = False, prepared.room(second=False)
            queue = admit(arms, budget.share(room, parallel)).queue
    admitted = [p for p in plans if p.entry.arm_name in queue]
    wider = prepared.room(admitted, second) if admitted and len(admitted) < len(plans) else room
    if wider > room:
        # Only an admitted arm can win, so only theirs is the room to keep for shipping: on CLINC150 two MiniLM
        # arms (14 s to ship) were admitted of 12, yet twice a SmolLM2 arm's 65 s was kept, and the blend began
        # with 150 s left. The wider room is kept unless it admits an arm dearer to ship than those.
        queue = admit(arms, budget.share(wider, parallel)).queue
        chosen = [p for p in plans if p.entry.arm_name in queue]
        if chosen and prepared.reserve(chosen) <= prepared.reserve(admitted):
            climb.log(f"  the room kept to ship arms that were not admitted goes to the {len(chosen)} that were")
            room = wider
    return budget.share(room, parallel)


def _jobs(climb, plans: list[Plan], share: Share, more_epochs: bool) -> dict[str, tuple]:
    """Each arm's (rung, settings of its every slice, entry): its schedule planned over as many epochs as its share
    could give it (with more_epochs: so a leader can train on), from the best frozen head of its kind."""
    jobs = {}
    for rung, tuned, entry in plans:
        epoch, overhead, every = arm_costs(climb.costs, rung)
        planned = max(rung.epochs, min(MAX_PLANNED_EPOCHS, share.whole_epochs(epoch))) if more_epochs else rung.epochs
        settings = {**rung.settings(climb.settings), **tuned, "epochs": planned, "eval_every": every}
        settings.update(warm_start(climb, rung, settings))
        entry.arm, entry.epochs, entry.estimated_seconds = entry.arm_name, planned, round(overhead + epoch, 2)
        if tuned:
            entry.reason = "learning-rate variant: " + ", ".join(f"{k} {v:g}" for k, v in tuned.items())
        jobs[entry.arm] = (rung, settings, entry)
    return jobs


class Match:
    """The arms' slices on a runner as the policy hands them out: each result told to the policy, recorded in its
    arm's entry, offered to the blend, and made climb's best when it leads."""

    def __init__(self, climb, policy, jobs: dict[str, tuple], runner: Runner):
        self.climb, self.policy, self.jobs, self.runner = climb, policy, jobs, runner
        self.seen: dict[str, int] = {}           # each arm's training-history entries so far
        self.validated: dict[str, list] = {}     # each arm's probabilities at every validation of its slices
        self.blob: bytes | None = None           # the best arm's model, as a Ray worker sent it, until loaded

    def play(self) -> None:
        from headswap.auto.runners import load_shipped

        try:
            while True:
                for s in self.policy.ask():
                    self.start(s)
                if not self.runner.busy:
                    break
                name, clf, result = self.runner.wait()
                self.take(name, clf, result)
                clf = None
                gc.collect()
            self.policy.finish()
        finally:
            self.runner.close()
        if self.blob is not None:
            self.climb.best = load_shipped(self.blob)

    def start(self, s) -> None:
        rung, settings, _ = self.jobs[s.arm]
        arm = self.policy.arms[s.arm]     # its overhead as its earlier slices corrected it, and a one-off pass
        overhead = arm.overhead_seconds + arm.once_seconds
        said_round = "lead" if s.phase is Phase.LEAD else s.round + 1
        self.climb.log(f"  {s.arm}: slice of {duration(s.seconds)} (round {said_round}, "
                       f"{duration(self.policy.share.left())} left)")
        self.runner.start(s.arm, rung, {**settings, "time_limit": max(s.seconds - overhead, 1.0)},
                          self.seen.get(s.arm, 0))

    def take(self, name: str, clf, result: dict) -> None:
        """A slice came back: told to the policy, recorded in its entry, kept for the blend, the best if it leads."""
        climb, policy = self.climb, self.policy
        start = policy.running[name].start
        self.seen[name] = result.get("history_length", self.seen.get(name, 0))
        self.validated.setdefault(name, []).extend(result.get("validation_probas") or [])
        before = policy.arms[name].best
        decision = policy.tell(name, [(start + t, v) for t, v in result["points"]], error=result.get("error"),
                               finished=result.get("finished", False), node=result.get("node"),
                               improved=result.get("better", False), progress=result.get("progress"),
                               train_seconds=result.get("train_seconds"))
        arm, (rung, _, entry) = policy.arms[name], self.jobs[name]
        to_beat = _to_beat(climb, entry, before)
        if result.get("notes"):
            entry.notes = result["notes"]
        if result.get("started_from"):
            entry.started_from = result["started_from"]
            climb.log(f"    {name} started from the head of {result['started_from']}")
        if arm.best is not None:
            entry.validation_macro_f1 = arm.best
        climb.log(f"    {name}: " + (f"failed: {result['error']}" if result.get("error") else
                                     f"best validation macro F1 {arm.best:.4f}" if arm.best is not None else
                                     "no validation yet") + (f"; {decision.why}" if decision.why else ""))
        # The slice's fit kept weights better than the arm's earlier ones: a higher score, or the same at a lower
        # validation loss (a saturated score, 1.0 on SMS spam, would otherwise ship the first slice to reach it).
        improved = result.get("better", False)
        if improved and arm.best is not None:
            climb.keep(entry, clf, result.get("validation_proba"), self.validated[name])
        ahead = arm.best is not None and (arm.best > to_beat or climb.best_entry is entry and arm.best == to_beat)
        if clf is not None and improved and ahead:
            from headswap.auto.runners import clean_for_shipping

            if not isinstance(clf, bytes):
                clean_for_shipping(clf)
            self.blob = clf if isinstance(clf, bytes) else None
            climb.take_lead(None if self.blob is not None else clf, entry, rung)


def _record(climb, policy, jobs: dict[str, tuple]) -> None:
    """Each arm's entry as the policy ends it: its slices, curve, seconds, epochs and why it stopped."""
    summary = policy.summary()
    for name, (rung, settings, entry) in jobs.items():
        a, arm = summary["arms"][name], policy.arms[name]
        entry.status = arm.outcome
        entry.seconds, entry.slices, entry.curve = a["seconds"], a["slices"], a["curve"]
        entry.stopped_because, entry.trained_epochs, entry.halving, entry.plan = arm.kind, a["epochs"], True, rung
        if a["best"] is not None:
            entry.validation_macro_f1 = a["best"]
        if a["why"]:
            entry.explain(a["why"])
        if entry.status is Status.FAILED:
            entry.error = a["why"] or 'no validation score'
    climb.halving = {k: v for k, v in summary.items() if k != "arms"}
