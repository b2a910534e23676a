"""auto's fine-tuning rungs as arms (the competition among them: headswap.auto.compete). Each fine-tuning rung is
timed by its probe (Climb.probe; on a few hundred texts, priced from its body's frozen rung: Climb.arm_priced) and
becomes an arm, and so do its learning-rate neighbours on LR_GRID (unless the rate was given); what each arm needs
of the budget (its least slice, the room to ship it) follows from its probe.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol

from headswap.auto.budget import ArmNeed
from headswap.auto.ladder import Rung
from headswap.auto.policy import GRACE_EPOCHS, Arm
from headswap.auto.records import Entry, Status, Stop

LR_GRID = tuple(sorted(float(f"{m}e{e}") for e in range(-7, 0) for m in (1, 3)))   # 1e-7, 3e-7, ..., 3e-1
SLICE_VALIDATIONS = 2       # validations an arm's slice overhead counts: the one at the stop, and calibration's




def lr_neighbours(rate: float) -> tuple[float | None, float | None]:
    """The LR_GRID values just above and just below `rate` (None past either end)."""
    above = [g for g in LR_GRID if g > rate * (1 + 1e-9)]
    below = [g for g in LR_GRID if g < rate * (1 - 1e-9)]
    return (above[0] if above else None), (below[-1] if below else None)


def lr_variants(rung, settings: dict) -> list[dict]:
    """The learning rates to try besides the rung's own: one step up and one down the grid; none when the rate
    was given."""
    from headswap.settings import default_body_lr, defaults

    name = "head_lr" if rung.regime == "head-only" else "body_lr"
    if settings.get(name) is not None:
        return []
    base = default_body_lr(rung.regime) if name == "body_lr" else defaults()["head_lr"]
    return [{name: r} for r in lr_neighbours(base) if r is not None]


class ArmCosts(Protocol):
    """What an arm's plan asks of auto's cost model (headswap.auto.ladder.Costs, from each rung's probe)."""
    n_train: int
    n_validation: int
    factor: dict

    def probe(self, rung: Rung) -> dict | None: ...

    def epoch_seconds(self, rung: Rung) -> float: ...

    def per_text(self, rung: Rung) -> float: ...

    def batch(self, rung: Rung) -> int: ...

    def load_seconds(self, rung: Rung) -> float: ...

    def lower_pass(self, rung: Rung) -> float: ...

    def eval_every(self, rung: Rung, epochs: int) -> int: ...

    def reserve(self, rung: Rung) -> float: ...

    def torch_reserve(self, rung: Rung) -> float: ...


class Plan(NamedTuple):
    """A fine-tuning arm as prepare() plans it: its rung, the learning rates it is tried at (none: the rung's
    own), and its row of the report."""
    rung: Rung
    tuned: dict
    entry: Entry


def prepare(climb, rungs: list[Rung], lr_search: bool = True) -> Arms:
    """Probe the fine-tuning `rungs` and add each one's learning-rate variants: the Arms, their plans being
    Plans. The entries (every rung's, probed or not) join climb.entries in compete()."""
    from headswap.auto.climb import entry_for

    plans, entries = [], []
    dear: dict[str, str] = {}     # model: why its later fine-tuning rungs are not timed
    for rung in rungs:
        entry = entry_for(rung)
        entries.append(entry)
        if climb.budget.over():
            climb.skip(entry, "the budget was spent before this rung")
            entry.keep_out(Stop.BUDGET)
            continue
        if rung.model in dear:
            climb.skip(entry, dear[rung.model])
            entry.keep_out(Stop.TOO_DEAR)
            continue
        if climb.arm_priced(rung, entry, most=_probe_limit(climb, rung)):
            plans.append(Plan(rung, {}, entry))      # too dear or not, halving decides its slices and says why
            if least_slice(climb.costs, rung) <= climb.budget.cap(climb.arm_slots):
                continue
        else:
            too_slow = (entry.reason or "").startswith("too slow")
            entry.keep_out(Stop.TOO_DEAR if too_slow else Stop.FAILED if entry.status is Status.FAILED else Stop.BUDGET)
            if not too_slow:
                continue                         # failed, or not timed for want of time: says nothing of the rest
        # A model's fine-tuning rungs come cheapest first (the ladder's order: cached partial, full, similarity,
        # cross-encoder; unprompted LoRA, prompted, generation), so one too dear for a first slice says the same
        # of the rest; timing each would spend minutes loading it (six SmolLM2 probes took ~5 min of 15).
        dear[rung.model] = f"not timed: {entry.label} was too dear for a first slice, and this rung costs as much " \
                           f"a step or more"
    if lr_search and plans and climb.settings.get("body_lr") is not None:
        climb.log(f"  learning-rate variants: body_lr was given ({climb.settings['body_lr']:g}), so it is kept")
    for rung, _, entry in list(plans) if lr_search else ():
        for tuned in lr_variants(rung, climb.settings):
            e = entry_for(rung, tuned)
            entries.append(e)
            plans.append(Plan(rung, tuned, e))
    # Arms on a body whose vocabulary does not fit the texts wait behind every arm on one that fits, learning-rate
    # variants included: on German tweets MiniLM's two arms (its frozen heads 12 points under multilingual-e5-small's)
    # took 4 of the 8 minutes the arms shared, while the variants of e5's leading arm were never admitted. Then the
    # rungs before their learning-rate variants, each in the order of how often its family won before on such data
    # (the prior; a stable sort: the ladder's order otherwise): on emotion the cached partial came first, and the
    # budget that trains two arms to an epoch each before judging them had no room beside it for full fine-tuning's
    # 5-minute epoch, the family that won 6 of the 7 earlier runs there.
    from headswap.auto.prior import rung_family
    prior = climb.prior
    rank = {id(entry): prior.arm_order(rung_family(rung)) if prior is not None else 0.0 for rung, _, entry in plans}
    plans.sort(key=lambda plan: (plan.rung.model in climb.misfit, bool(plan.tuned), rank[id(plan.entry)]))
    if prior is not None and len(set(rank.values())) > 1:
        climb.log("  arms in the prior's order: " + "; ".join(
            f"{e.label} ({prior.arm_evidence(rung_family(rung))})" for rung, tuned, e in plans if not tuned))
    return Arms(climb, plans, entries)


def _probe_limit(climb, rung: Rung) -> float:
    """The most an arm's probe (2 x 4 training batches) may take: twice what 8 batches may cost when a quarter epoch
    must fit in a third of the budget. A probe slower than that times an arm that could not get a first slice."""
    steps = max(1.0, math.ceil(climb.costs.n_train / climb.costs.batch(rung)) * GRACE_EPOCHS)
    return climb.budget.arm_probe_limit(steps)


def least_slice(c: ArmCosts, rung: Rung) -> float:
    """The probed rung's least useful slice, as halving.Arm counts it (its overhead and a first share of an epoch)."""
    epoch, overhead, _ = arm_costs(c, rung)
    return Arm("", epoch, overhead, once_seconds=c.lower_pass(rung)).least_slice


def arm_costs(c: ArmCosts, rung: Rung) -> tuple[float, float, int]:
    """An arm's (epoch seconds with its validations inside, overhead seconds a slice, validate every N steps)."""
    epoch, val = c.epoch_seconds(rung), c.n_validation * c.per_text(rung) * c.factor.get(rung.model, 1.0)
    startup = c.probe(rung).get("train_startup_seconds") or 0.0
    every = c.eval_every(rung, rung.epochs)
    in_epoch = max(math.ceil(math.ceil(c.n_train / c.batch(rung)) / every) - 1, 0) * val
    return epoch + in_epoch, c.load_seconds(rung) + startup + SLICE_VALIDATIONS * val, every


class Arms:
    """The probed fine-tuning arms (prepare()): `plans` (rung, tuned rate, entry), every rung's `entries`, and what
    they need of the budget (Budget.arms_room), recomputed as the run corrects its estimates."""

    def __init__(self, climb, plans: list[Plan], entries: list[Entry]):
        self.climb, self.plans, self.entries = climb, plans, entries
        # The cheapest first slice, as probed: each cheap rung may take half of what is left, so two in a row could
        # take three quarters: at 5 minutes on emotion the frozen logistic and linear heads (77 and 13 s) left the
        # arms 62 s, where the cheapest needed 74 s, and the run ended at 64% of its budget with TF-IDF.
        self.least = min((least_slice(climb.costs, r) for r, _, _ in plans), default=math.inf)
        # How many times busier than idle the cores are (ladder.busy_factor) when the arms share the budget: shipping
        # prices its exports on cores that busy (ship.Prices), so the room kept for it is scaled alike. Beside `make
        # test` a one-minute run kept 19 s at idle prices, then priced the winner's export at 18 s on cores 2.1 times
        # as busy, had 17 s, exported nothing and ended at 74% of its budget.
        self.busy = 1.0
        # Whether the room kept to ship the winner holds its ONNX export (False: saving it for torch; compete's
        # share gives the export's room to the arms where none of them fits beside it).
        self.export = True

    def needs(self, plans: list[Plan] | None = None) -> list[ArmNeed]:
        c = self.climb.costs
        ship = c.reserve if self.export else c.torch_reserve
        return [ArmNeed(least_slice(c, rung), self.busy * ship(rung), self.busy * c.torch_reserve(rung))
                for rung, _, _ in (self.plans if plans is None else plans)]

    def reserve(self, plans: list[Plan] | None = None) -> float:
        """Room to ship the winner among these arms (or `plans` of them): Budget.arms_reserve."""
        return self.climb.budget.arms_reserve(self.needs(plans), self.climb.arm_slots)

    def room(self, plans: list[Plan] | None = None, second: bool = True) -> float:
        """What the arms (or `plans` of them) would share if they began now: Budget.arms_room, with room for a
        second blended model when auto blends and `second`."""
        return self.climb.budget.arms_room(self.needs(plans), self.climb.arm_slots, second and self.climb.blends)

    def spare(self) -> float:
        """What a cheap rung may take now and still leave the cheapest arm its first slice."""
        return self.climb.budget.arms_spare(self.needs(), self.least, self.climb.arm_slots, self.climb.blends)

    def can_run(self) -> bool:
        """Whether any arm's first slice fits what is left (after the room to ship): only then do the cheap rungs
        leave the arms half of what is left, and their cheapest first slice. An arm over the 1/3 cap may run alone
        (policy.Halving)."""
        return bool(self.plans) and self.spare() >= 0
