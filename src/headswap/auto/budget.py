"""`headswap auto`'s budget as the user waits it: wall time from the start of the process, not of auto().

The command spends seconds before auto() runs (Python, then torch and transformers: 3 s idle, 8-11 s on 2 loaded
cores) and after its last rung (shipping the winner, scoring test, the report, the interpreter's exit). The clock
therefore starts at the process's start (process_age), every step is bounded by what is left after keeping room
for those last steps (finish_seconds), and a budget too small for the TF-IDF baseline alone is refused before
anything is written (check_budget). Imports no torch.
"""

from __future__ import annotations

import io
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from headswap.auto.duration import fmt_seconds
from headswap.errors import ConfigError

# The report after the last rung: results.json, results.md and report.html with its charts, drawn warm (the
# charts' first draw, matplotlib's import and font set-up, is done early by warm_up_charts): 0.6-0.9 s for a
# two-row run on 2 loaded cores.
REPORT_SECONDS = 1.5
# The interpreter's exit after the last line: 1.4-2.9 s with torch loaded, 0.06-0.5 s once the CLI freezes the
# objects left (gc.freeze: the final collection then skips them), on 2 idle to loaded cores.
EXIT_SECONDS = 0.5
# The TF-IDF baseline, fitted and scored, per text: a lower bound on 2 idle cores (SMS spam 3,000 texts: 0.15 ms a
# training text; emotion, 6 classes: ~1 ms; CLINC150, 150 classes: ~2.4 ms; scoring ~0.1 ms a text, all measured
# at a load of 4.5 and halved). A floor, not an estimate: a budget under it is refused, one over it is tried.
TFIDF_FIT_SECONDS = 1.5e-4
TFIDF_FIT_SECONDS_PER_CLASS = 1e-5
TFIDF_SCORE_SECONDS = 1e-4
SAVE_SECONDS = 0.2            # saving the TF-IDF folder (0.02 s for 300 texts, 1.2 s for 16,000 on loaded cores)
# Of the budget, kept free to the very end besides every reserve: the clock is read between steps, not during them.
FINAL_MARGIN = 0.02


def process_age() -> float:
    """Seconds since this process started, never more than its true age (Linux's /proc to the clock tick; psutil
    elsewhere; 0 when neither can tell)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])      # starttime: ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        # Both are truncated: the start lies within the tick after `ticks`, so counting from that tick's end
        # errs short (by 20 ms at most), never long.
        return max(0.0, uptime - (ticks + 1) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil
        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:       # no psutil, or a platform it cannot read: count from now
        return 0.0


def process_start(clock: Callable[[], float] = time.perf_counter) -> float:
    """The process's start on `clock`: the clock and the process's age read at one instant. An age read later
    than the clock (after parsing the command line, say) would put the start that much too early, and a run
    would count seconds it never had."""
    age = process_age()       # first: the clock read after it errs late, never before the process (a busy machine
    return clock() - age      # took 0.1 ms between the two reads, and the start came out before the process)


# Of the budget (of the slot-seconds where arms train side by side): the most one part of the run may hold unless it
# leads on validation: an arm (headswap.auto.policy), the cheap rungs together before the arms (Budget.tier_left).
CAP = 1 / 3
# Of the budget: the most one timing probe may take. Probes of three rungs then skipped took 184, 126 and 99 s of a
# 15-minute run on 648 long German texts; a probe that cannot fit in this share is not started.
PROBE_SHARE = 0.10


@dataclass
class Budget:
    """auto's time, asked by every rule: one clock, what is left, and what is kept back to the end. No other module
    keeps a deadline or sums seconds left: each asks a question here.

    spare() is what may go to something that might not win (a probe, a rung, an arm's slice): what is left, less
    `finish` (what the end takes whatever wins: scoring the baseline on test, the report, the exit), `ship` (shipping
    the best so far: loading it, blending it, scoring test, saving and exporting; Costs.reserve of its rung, set by
    keep_for_shipping) and the final margin."""
    seconds: float
    clock: Callable[[], float] = time.perf_counter
    started: float = 0.0
    finish: float = 0.0
    ship: float = 0.0
    cheap_from: float | None = field(default=None, init=False)     # left() when the cheap rungs began
    shipping: dict | None = field(default=None, init=False)         # begin_shipping's record

    @property
    def margin(self) -> float:
        return FINAL_MARGIN * self.seconds

    # ---- the clock -----------------------------------------------------------------------------------------------
    def spent(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        return self.seconds - self.spent()

    def spare(self, ship: float | None = None) -> float:
        """What is left less the finish, the room to ship (the best so far's, or `ship`) and the margin."""
        return self.left() - self.finish - (self.ship if ship is None else ship) - self.margin

    def stopwatch(self) -> Callable[[], float]:
        """A step's own duration on the run's clock: call what this returns when the step ends."""
        start = self.clock()
        return lambda: self.clock() - start

    def over(self) -> bool:
        """Whether only the margin is left."""
        return self.left() <= self.margin

    def share_of_spare(self, share: float) -> float:
        """`share` of the budget, within spare(): what a step that may win but need not (the TF-IDF baseline's search
        beyond its first fit) may take: unproven_most's rule, its room all of spare()."""
        return self.unproven_most(self.spare(), share)

    def elapsed(self) -> tuple[float, float]:
        """(seconds spent, the share of the budget they are): what the report says was used."""
        spent = self.spent()
        return spent, spent / self.seconds

    def cap(self, slots: int = 1) -> float:
        """The most one arm (or the cheap rungs together) may hold unless it leads: a third of what the machines can
        give; with `slots` arms training side by side an arm's slot takes no time from another's, so the cap is of
        slot-seconds (on one machine, of the budget)."""
        return CAP * self.seconds * slots

    # ---- shipping -----------------------------------------------------------------------------------------------
    def keep_for_shipping(self, seconds: float) -> None:
        """The best so far changed: from now on `seconds` (Costs.reserve of its rung) stay free to ship it."""
        self.ship = seconds

    def spare_to_ship(self, more: float) -> float:
        """spare() where `more` seconds are kept to ship besides the best so far (a blend's other members)."""
        return self.spare(ship=self.ship + more)

    def spare_beside_baseline(self, baseline: float) -> float:
        """spare() before anything ran, with `baseline` seconds (baseline_seconds: fitting the TF-IDF baseline and
        the finish) kept back: what converting a model at its first load may take."""
        return self.spare(ship=baseline - self.finish)

    def begin_shipping(self) -> dict:
        """The record of shipping (results.json's auto.shipping): what was left and what was kept for it when the
        blend and the save began; end_shipping() adds the seconds it took."""
        self.shipping = {"left_seconds": round(self.left(), 1), "reserved_seconds": round(self.ship, 1)}
        return self.shipping

    def affords(self, cost: float, then: float = 0.0) -> bool:
        """Whether an optional step of shipping (a blend, an ONNX export) that costs `cost` seconds fits what is
        left, with `then` seconds of what must follow it (loading the saved winner back, scoring test), the finish
        and the margin: a run that would overrun ships what it has. (A hidden intent set at 15 minutes ended at
        101%: shipping took 33 s where 23 s were kept for it.)"""
        return self.left() - cost - then - self.finish - self.margin >= 0

    def skip_shipping(self, step: str, why: str) -> None:
        """`step` of shipping was left out for want of time: said in results.json's auto.shipping.skipped."""
        if self.shipping is None:
            self.begin_shipping()
        self.shipping.setdefault("skipped", []).append({"step": step, "why": why})

    def end_shipping(self) -> None:
        """Shipping (blend, save, export, scoring on test) is done: its seconds, against what was kept for it."""
        self.shipping["seconds"] = round(self.shipping["left_seconds"] - self.left(), 1)

    # ---- the cheap rungs ----------------------------------------------------------------------------------------
    def probe_room(self, guess: float, most: float = math.inf, measured: bool = True) -> tuple[float, float | None]:
        """(spare(), the most a probe guessed to take `guess` may take; None: it may not start). Loading the model
        and encoding the probe's texts cannot be cut short: a probe starts only where twice its guess is left to
        spend and, where the guess was `measured` (an earlier probe of the model), it is within PROBE_SHARE of the
        budget; it may take a quarter of what is left to spend, that share, and no more than `most`. A guess not
        measured (PROBE_GUESS, of any model of a kind) does not refuse: the share's limit stops the probe instead,
        and a small model's probe takes a second where the guess said ten."""
        spare, share = self.spare(), self.probe_share()
        refused = spare < 2 * guess or measured and guess > share
        return spare, (None if refused else min(spare / 4, share, most))

    def probe_share(self) -> float:
        """The most one timing probe may take: PROBE_SHARE of the budget."""
        return PROBE_SHARE * self.seconds

    def next_guess(self, guess: float, spare: float) -> float:
        """A probe stopped as too slow: the next probe of its model is guessed to take what this one did (the spare
        it shrank from `spare`), at least `guess`."""
        return max(guess, spare - self.spare())

    def room(self, reserve: float) -> float:
        """What a rung may take: spare(), less what shipping it (`reserve`) takes beyond shipping the best so far."""
        return self.spare() - max(reserve - self.ship, 0.0)

    @staticmethod
    def cheap_share(room: float, arms_follow: bool) -> float:
        """Of a cheap rung's room, what it may take: half while fine-tuning arms follow (the other half is theirs)."""
        return room / 2 if arms_follow else room

    def unproven_most(self, room: float, share: float, probed: float = 0.0) -> float:
        """What a rung the prior never saw pay may take: `share` of the budget less what its probe took (`probed`),
        within its room."""
        return min(room, share * self.seconds - probed)

    @staticmethod
    def train_limit(most: float, load: float) -> float:
        """The time limit a rung's training gets where it may take `most` seconds and loading takes `load`."""
        return max(most - load, 1.0)

    def begin_cheap_tier(self) -> None:
        """The cheap rungs begin (the first call counts: those tried before the arms are timed begin it)."""
        if self.cheap_from is None:
            self.cheap_from = self.left()

    def tier_left(self) -> float:
        """Seconds the rungs before the fine-tuning arms (static, every model's frozen heads) may still take: the cap
        (a third of the budget) from when they began (begin_cheap_tier), less what they took."""
        spent = 0.0 if self.cheap_from is None else self.cheap_from - self.left()
        return self.cap() - spent

    # ---- the fine-tuning arms -----------------------------------------------------------------------------------
    def arm_probe_limit(self, steps: float) -> float:
        """The most an arm's probe (2 x 4 training batches) may take where a first slice trains `steps` steps:
        twice what 8 batches may cost when that slice must fit in a third of the budget."""
        return 2 * 8 * CAP * self.seconds / steps

    def arms_reserve(self, needs: Sequence[ArmNeed], slots: int = 1) -> float:
        """Room to ship the winner among arms that need `needs`: the largest reserve of those that could get a first
        slice and still be shipped (an arm too dear for that does not decide how much the others keep back), a
        first slice within the cap unless no arm's is (policy.Halving admits no other). On emotion SmolLM2's LoRA
        arm, its least slice twice the cap, kept 2.5 minutes back to ship it where MiniLM's arms needed 30 s, and
        the run used 80% of its budget."""
        left, cap = self.spare(ship=0.0), self.cap(slots)
        fits = [(n.least, n.reserve) for n in needs if n.least + n.reserve <= left]
        under = [reserve for least, reserve in fits if least <= cap]
        if under:
            return max(under)
        if fits:
            return min(fits)[1]       # the cheapest least slice: the arm that runs alone
        return min(n.reserve for n in needs)

    def arms_room(self, needs: Sequence[ArmNeed], slots: int = 1, second: bool = False) -> float:
        """What arms that need `needs` would share if they began now: spare() with the room to ship the winner among
        them kept (and, with `second`, the room to save a second model of a blend for torch, its export asked at
        the end: ship.Prices). Without that room the blend had only TF-IDF to add: at 15 minutes on GermEval 2018
        the arms ran until 25 s were left, and each other candidate needed 36 s to ship. Priced as the winner's
        export, that room left a one-minute run on busy cores no arm, or no blend, where saving the MiniLM head
        took 2 s."""
        reserve = self.arms_reserve(needs, slots)
        member = max((n.member for n in needs), default=0.0)
        return self.spare(ship=reserve + (min(member, reserve) if second else 0.0))

    def arms_spare(self, needs: Sequence[ArmNeed], least: float, slots: int = 1, second: bool = False) -> float:
        """What a cheap rung may take now and still leave the arms the cheapest first slice, `least`."""
        return self.arms_room(needs, slots, second) - least

    def share(self, seconds: float, slots: int = 1) -> Share:
        """`seconds` (none when negative) given from now to arms training `slots` at a time."""
        return Share(self, max(seconds, 0.0), slots)


@dataclass(frozen=True)
class ArmNeed:
    """What a fine-tuning arm needs of the budget: its least useful slice, the room to ship it if it wins, and the
    room to ship it as a blend's second member (saved for torch: Costs.torch_reserve; its export is asked later)."""
    least: float
    reserve: float
    member: float


class Share:
    """Seconds of the budget given to the fine-tuning arms from when they were given (start, on the budget's clock):
    what is left of them and what one arm may hold. headswap.auto.policy.Halving asks it every time question."""

    def __init__(self, budget: Budget, seconds: float, slots: int = 1):
        self.budget, self.seconds, self.slots = budget, seconds, max(1, int(slots))
        self.start = budget.clock()
        self.deadline = self.start + seconds
        self.cap = budget.cap(self.slots)

    def now(self) -> float:
        return self.budget.clock()

    def left(self) -> float:
        return self.deadline - self.budget.clock()

    def remaining(self) -> float:
        """left(), or 0 once past the end."""
        return max(self.left(), 0)

    def given(self) -> float:
        return self.deadline - self.start

    def whole_epochs(self, epoch_seconds: float) -> int:
        """The epochs of `epoch_seconds` the whole share would buy one arm, counted up."""
        return math.ceil(self.seconds / max(epoch_seconds, 1e-9))

    def cut(self, planned: float, held: float, free: bool) -> tuple[float, float, bool]:
        """A slice of `planned` seconds cut to what is left and, unless `free` (it leads, or runs alone), to what an
        arm that holds `held` seconds has under the cap: (the slice, what was left, whether the cap cut it)."""
        left = self.left()
        room = math.inf if free else self.cap - held
        return min(planned, left, room), left, room < min(planned, left)

    def last_slice(self, planned: float, least: float) -> float:
        """A leader's slice of `planned` seconds, or what is left where that would leave less than `least` after."""
        return self.left() if self.left() - planned < least else planned

    def holds(self, least: float, held: float) -> bool:
        """Whether what is left, and the cap of an arm that holds `held`, both hold a slice of `least`."""
        return min(self.left(), self.cap - held) >= least

    def holds_alone(self, least: float) -> bool:
        """Whether what is left holds a slice of `least` for an arm that trains alone (no cap: it leads)."""
        return self.left() >= least


def shown(seconds: float) -> str:
    """Seconds left as a log line says them: a rule's answer may be below zero, never what is said to be left."""
    from headswap.reports.report_text import duration
    return duration(max(seconds, 0))


def finish_seconds(n_test: int) -> float:
    """What the end of the run takes whatever wins, besides shipping the winner (Costs.reserve): scoring the
    baseline on test, the report, the exit."""
    return n_test * TFIDF_SCORE_SECONDS + REPORT_SECONDS + EXIT_SECONDS


def baseline_seconds(n_train: int, n_validation: int, n_test: int, n_classes: int) -> float:
    """The least the TF-IDF baseline takes to fit, validate, save and score on test, by data size."""
    fit = n_train * (TFIDF_FIT_SECONDS + TFIDF_FIT_SECONDS_PER_CLASS * n_classes)
    return fit + n_validation * TFIDF_SCORE_SECONDS + SAVE_SECONDS + finish_seconds(n_test)


def check_budget(budget: float, spent: float, n_train: int, n_validation: int, n_test: int, n_classes: int) -> None:
    """Refuse a budget that cannot hold what was spent starting up plus the TF-IDF baseline, in one line that
    says the least budget that can."""
    need = spent + baseline_seconds(n_train, n_validation, n_test, n_classes)
    if budget < need:
        raise ConfigError(f"budget {_plain(budget)} is less than the TF-IDF baseline alone needs here: "
                          f"{_plain(spent)} already spent starting up, and about "
                          f"{_plain(need - spent)} to train, score and save it on {n_train} training texts; "
                          f"give --budget {fmt_seconds(need * 1.2 + 1)} or more")


def _plain(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    from headswap.reports.report_text import duration
    return duration(seconds)


def warm_up_charts() -> None:
    """Draw one throwaway chart now: matplotlib's import and font set-up (3-4.5 s on 2 loaded cores) then count as
    start-up, measured, and the report at the end is drawn warm (REPORT_SECONDS)."""
    try:
        from headswap.reports.plots import new_figure
        fig = new_figure(1, 1)
        fig.add_subplot().plot([0, 1], [0, 1])
        fig.savefig(io.BytesIO(), format="png")
    except Exception:       # no matplotlib: the report goes without charts, as it would anyway
        pass
