"""Climbing auto's cost ladder (headswap.auto.ladder) within a time budget.

Cheap rungs (static, frozen heads) run when their estimate fits what is left after keeping room to ship the winner
(and, while fine-tuning arms follow, half of what is left stays theirs). The fine-tuning rungs are not climbed one
by one: they compete as arms of successive halving (headswap.auto.compete), which uses this class's probes,
costs and best-so-far.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from headswap.auto.budget import Budget, shown
from headswap.reports.report_text import duration
from headswap.auto.ladder import PROBE_GUESS, Costs, Rung
from headswap.auto.records import Entry, Status

# Candidates kept for the blend (headswap.auto.ship.blend_winner): the best on validation, each a model in memory
# (or an arm's bytes) with its validation probabilities.
POOL = 5


@dataclass
class Candidate:
    """A trained candidate kept for the blend: its row of the report (entry), the model (an arm on Ray comes back
    as bytes, loaded only when the blend takes it up) and its probabilities on every validation text: those of the
    kept weights, and `picked_from`, those of every validation they were picked among (an arm's, over all its
    slices; empty where nothing was picked), which the blend checks out of fold."""
    entry: Entry
    model: object
    proba: object
    picked_from: list = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.entry.validation_macro_f1

    def loaded(self):
        from headswap.auto.runners import load_shipped
        return load_shipped(self.model) if isinstance(self.model, bytes) else self.model


class ArmsRoom(Protocol):
    """The fine-tuning arms that follow the cheap rungs (headswap.auto.arms.Arms), as the cheap rungs ask them."""

    def spare(self) -> float:
        """What a cheap rung may take now and still leave the arms their cheapest first slice."""


def entry_for(rung: Rung, tuned: dict | None = None) -> Entry:
    """The row of `rung` (at the learning rates `tuned`, for a variant), before anything is known of it."""
    from headswap.reports.html_report import model_display_name

    return Entry(rung.model, model_display_name(rung.model), rung.strategy, rung.regime, rung.tier, rung=rung.name,
                 epochs=rung.epochs, head=rung.head or None, head_fit=rung.head_fit if rung.head else None,
                 tuned=tuned)


def validation_f1(clf) -> float:
    """The kept weights' validation macro F1: the best-scored entry of the training history (the loop restores
    it), whether entries are epochs or validations inside one; scored afresh when there is none."""
    scored = [h for h in getattr(clf, "history_", []) or [] if h.get("score") is not None
              and (h.get("metrics") or {}).get("macro")]
    if scored:
        return float(max(scored, key=lambda h: h["score"])["metrics"]["macro"]["f1"])
    raise ValueError("the classifier's training history holds no validation scores")


class Climb:
    """Runs rungs, keeps the best classifier on validation macro F1 (ties: the earlier, cheaper one)."""

    def __init__(self, settings: dict, train, validation, costs: Costs, budget: Budget,
                 log: Callable[[str], None], best, best_entry: Entry, *, prior=None, misfit: Iterable[str] = (),
                 blends: bool = False, arm_slots: int = 1):
        self.settings, self.train, self.validation, self.costs = settings, train, validation, costs
        self.budget, self.log = budget, log
        self.best, self.best_entry = best, best_entry      # the classifier to ship so far, and its row
        self.prior = prior    # headswap.auto.prior.Prior: which rungs came near the winner in earlier runs
        self.misfit = frozenset(misfit)  # models whose vocabulary does not fit the texts: their rungs go last
        self.blends = blends  # whether the winner may ship blended (the arms then leave room to ship a second model)
        self.arm_slots = max(1, arm_slots)    # fine-tuning arms that train at once (the runner's parallel)
        self.entries: list[Entry] = []
        self.halving: dict | None = None      # how the arms shared their time (Halving.summary, less the arms)
        self.probe_seconds: dict[str, float] = {}
        # (model, strategy): [(validation macro F1, rung, head state, head kind)] of the frozen rungs, for the arms to
        # start from
        self.heads: dict[tuple[str, str], list] = {}
        self.load_seen: dict[str, float] = {}       # each model's load time, as its first probe measured it
        self.done: set[int] = set()       # rungs (by id) run_tried ran
        self.unpaid: dict[tuple, float] = {}        # probes' seconds by cost key, not yet counted against a rung
        self.pool: list[Candidate] = []    # the POOL best on validation, best first

    def keep(self, entry: Entry, model, proba, picked_from: list | None = None) -> None:
        """Keep a candidate for the blend (its latest best replaces what it kept before); only the POOL best on
        validation stay. One without probabilities for every validation text (an out-of-scope model's leave its
        rejected texts out) is not kept. `picked_from` is held, not copied: an arm's later slices add to it."""
        if model is None or proba is None or len(proba) != len(self.validation):
            return
        picked_from = picked_from if picked_from is not None else []
        self.pool = [c for c in self.pool if c.entry is not entry] + [Candidate(entry, model, proba, picked_from)]
        self.pool.sort(key=lambda c: -c.score)
        del self.pool[POOL:]

    # ---- one rung -----------------------------------------------------------------------------------
    def skip(self, entry: Entry, reason: str) -> None:
        entry.skip(reason)
        self.log(f"  skip {entry.label}: {reason}")

    def take_lead(self, model, entry: Entry, rung: Rung) -> None:
        """`entry` is the best so far (its model, or None while an arm's bytes wait to be loaded): the budget keeps
        room to ship it (the blend prices its other members beside it)."""
        self.best, self.best_entry = model, entry
        self.budget.keep_for_shipping(self.costs.reserve(rung))

    def probe(self, rung: Rung, entry: Entry, most: float = math.inf) -> bool:
        from headswap.trials.measure import ProbeTooSlow, probe_static, probe_timing
        from headswap.trials.rows import error_fields

        if self.costs.probe(rung) is not None:
            return True
        guess = self.probe_seconds.get(rung.model, PROBE_GUESS.get(rung.kind, 30.0))
        measured = rung.model in self.probe_seconds
        # A probe that does not finish in its limit is stopped between steps and says the rung is too dear.
        spare, limit = self.budget.probe_room(guess, most, measured=measured)
        if limit is None:      # (a guess not measured is refused for the time left alone: Budget.probe_room)
            share = self.budget.probe_share()
            self.skip(entry, f"not timed: timing it takes about {duration(guess)}, over the {duration(share)} a probe "
                             f"may take (a tenth of the budget)" if measured and guess > share else
                             f"not timed: {shown(spare)} left to spend, and timing it takes about {duration(guess)}")
            return False
        # Frozen rungs are timed with the loop-trained head (what their epochs cost) on one batch: their probe's
        # cost is encoding its texts (256 of them at four batches: 15 s of a 60 s budget on 2 loaded cores), and a
        # step on cached features costs next to nothing.
        batches = 1 if rung.regime == "head-only" else 4
        try:
            probe = probe_static(rung, self.train, self.settings, time_limit=limit) if rung.strategy == "static" \
                else probe_timing(rung, self.train, {**rung.settings(self.settings), "head_fit": "loop"},
                                  batches=batches, time_limit=limit, load_guess=self.load_seen.get(rung.model, 0.0))
        except ProbeTooSlow as e:
            self.probe_seconds[rung.model] = self.budget.next_guess(guess, spare)
            self.skip(entry, f"too slow for the {duration(self.budget.left())} left: {e}")
            return False
        except Exception as e:  # the rung would fail the same way: record it, go on
            entry.fail(error_fields(e), "failed while timing a few batches")
            self.log(f"  {entry.label}: failed while timing a few batches: {entry.error}")
            return False
        self.costs.probes[rung.cost_key] = probe
        self.unpaid[rung.cost_key] = probe["probe_seconds"]
        self.probe_seconds[rung.model] = probe["probe_seconds"]
        self.load_seen[rung.model] = probe["load_seconds"] - probe.get("distill_seconds", 0.0)
        gc.collect()
        return True

    def arm_priced(self, rung: Rung, entry: Entry, most: float) -> bool:
        """Whether a fine-tuning rung has an estimate: on so few texts that its first slice trains no more than
        timing it would, guessed from its model's frozen rung (Costs.guess_arm) and tried; any other is probed (or
        was; its probe may take `most`)."""
        if self.costs.probe(rung) is None and self.costs.guess_arm(rung):
            self.log(f"  {entry.label}: not timed: an epoch is {math.ceil(self.costs.n_train / self.costs.batch(rung))}"
                     f" batches, so its first slice costs about what timing it would; priced from its body's frozen "
                     f"encoding (an epoch about {duration(self.costs.epoch_seconds(rung))})")
            return True
        return self.probe(rung, entry, most)

    def timed(self, rung: Rung, entry: Entry) -> bool:
        """Whether the rung has an estimate: a frozen rung on so few texts that trying it costs about what timing it
        would (Costs.tried) is priced from its probe's guess and tried; any other is probed (or was)."""
        if not self.costs.tried(rung):
            return self.probe(rung, entry)
        self.costs.guess(rung, self.probe_seconds.get(rung.model, PROBE_GUESS.get(rung.kind, 30.0)),
                         self.load_seen.get(rung.model))
        return True

    def run_tried(self, ladder: list[Rung]) -> None:
        """The frozen rungs tried without a probe (Costs.tried) on models whose vocabulary fits, before anything else is
        timed: each costs about what its probe would, so the fine-tuning arms' probes and the dearer rungs' are paid
        from what these leave, not the other way round (the README's one-minute run timed MiniLM's arms, then had no
        time for its frozen heads). A model's heads together (the first encodes, the rest reuse it), logistic first,
        models in the prior's order."""
        self.budget.begin_cheap_tier()
        first = [r for r in ladder if r.tier == "frozen" and self.costs.tried(r) and r.model not in self.misfit]
        rank = {}       # a model's heads: the prior's order of its best placed head, then the ladder's
        for i, r in enumerate(first):
            key = (r.model, r.strategy)
            rank[key] = min(rank.get(key, (self._order(r), i)), (self._order(r), i))
        for rung in sorted(first, key=lambda r: (rank[(r.model, r.strategy)], r.head_fit != "logistic")):
            self.done.add(id(rung))
            self.run(rung)

    def run_all(self, ladder: list[Rung], arms: ArmsRoom | None = None) -> None:
        """The cheap rungs (static, the encoders' frozen heads) timed first and run cheapest first, then the rest
        (the causal models' frozen heads) in ladder order, leaving out those run_tried ran. Fine-tuning rungs are
        headswap.auto.arms; `arms`, where one of them can run, leaves them their room."""
        cheap = [r for r in ladder if r.tier in ("static", "frozen") and id(r) not in self.done]
        self.budget.begin_cheap_tier()
        ready = []
        for rung in cheap:
            entry = entry_for(rung)
            if self._dropped(rung, entry):
                self.entries.append(entry)
            elif self.budget.spare() > 0 and self.timed(rung, entry):
                ready.append((self.costs.estimate(rung), rung))
            else:
                self.entries.append(entry)
                if entry.status is None:
                    self.skip(entry, "the budget was spent before this rung")
        # Cheapest first; the frozen rungs after the first of a model reuse its encoding pass, so they stay together.
        first = {}
        for est, rung in ready:
            first[(rung.model, rung.strategy)] = min(first.get((rung.model, rung.strategy), est), est)
        # The prior orders a model's frozen heads as one: its first pays the encoding pass the others reuse.
        proven = {}
        for _, rung in ready:
            key, order = (rung.model, rung.strategy), self._order(rung)
            proven[key] = min(proven.get(key, order), order)
        for _, rung in sorted(ready, key=lambda e: (e[1].model in self.misfit, proven[(e[1].model, e[1].strategy)],
                                                    first[(e[1].model, e[1].strategy)], e[1].head_fit != "logistic")):
            self.run(rung, arms)
        for rung in (r for r in ladder if r.tier not in ("static", "frozen") and id(r) not in self.done):
            self.run(rung, arms)

    def _order(self, rung: Rung) -> tuple:
        """The prior's order: rungs whose family came near the winner before go first (none: today's order)."""
        if self.prior is None:
            return ()
        from headswap.auto.prior import rung_family
        return self.prior.order(rung_family(rung))

    def _dropped(self, rung: Rung, entry: Entry) -> bool:
        """Skip a cheap rung the prior drops (Prior.dropped) before it is timed: its probe loads and encodes too."""
        if self.prior is None or not (rung.regime == "head-only" or rung.tier == "static"):
            return False
        from headswap.auto.prior import rung_family
        why = self.prior.dropped(rung_family(rung))
        if why:
            self.skip(entry, why)
        return why is not None

    def run(self, rung: Rung, arms: ArmsRoom | None = None) -> None:
        """Run one cheap rung where its estimate fits what the budget leaves it (beside `arms`, the fine-tuning
        arms that follow, where one can run), or record why not."""
        entry = entry_for(rung)
        self.entries.append(entry)
        if self._dropped(rung, entry):
            return
        if self.budget.spare() <= 0:
            return self.skip(entry, "the budget was spent before this rung")
        if not self.timed(rung, entry):
            return
        c, later = self.costs, arms is not None
        est, room = c.estimate(rung), self.budget.room(c.reserve(rung))
        entry.estimated_seconds = est
        share = self.budget.cheap_share(room, later)
        if est > share:
            return self.skip(entry, f"estimated {duration(est)}, over {shown(share)}: " + ("half of " if later else "")
                             + f"the {shown(room)} left after keeping {duration(c.reserve(rung))} to ship it")
        spare = arms.spare() if later else math.inf
        if est > spare:
            return self.skip(entry, f"estimated {duration(est)}, over the {shown(spare)} that the fine-tuning arms "
                                    f"can spare beside their cheapest first slice")
        most = room      # what the rung may train for: a rung the prior never saw pay, a tenth of the budget
        if self.prior is not None and (rung.regime == "head-only" or rung.tier == "static"):    # before the arms
            from headswap.auto.prior import UNPROVEN_SHARE, rung_family
            key = rung_family(rung)
            if not self.prior.proven(key):     # its probe counted against it
                most = self.budget.unproven_most(room, UNPROVEN_SHARE, self.unpaid.pop(rung.cost_key, 0.0))
                if est > most:
                    return self.skip(entry, f"estimated {duration(est)}; prior: " + self.prior.why_unproven(key, most))
        tier = self.budget.tier_left()
        if later and est > tier:
            # The cheap tier is held to a third of the budget, like any arm that does not lead: on emotion's 16,000
            # texts a second encoder's frozen pass took 278 s of 900 for validation 0.62 while the arms got 4 min.
            return self.skip(entry, f"estimated {duration(est)}, over the {shown(tier)} left of the cheap rungs' "
                                    f"third of the budget (the fine-tuning arms get the rest)")
        return self.train_rung(rung, entry, time_limit=self.budget.train_limit(most, c.load_seconds(rung)))

    def train_rung(self, rung: Rung, entry: Entry, time_limit: float, epochs: int | None = None,
                   eval_every: int = 0, learn: float | None = None, announce: bool = True, **extra) -> None:
        if announce:
            self.log(f"  {entry.label}: estimated {duration(entry.estimated_seconds)} ({duration(self.budget.left())} "
                     f"left)")
        settings = {**rung.settings(self.settings), **extra, "time_limit": time_limit,
                    "epochs": rung.epochs if epochs is None else epochs}
        if eval_every:
            settings["eval_every"] = eval_every
        clf = train_one(rung, settings, entry, self.train, self.validation, self.log)
        entry.plan = rung
        if clf is not None:
            if (self.costs.probe(rung) or {}).get("guessed"):      # tried without a probe: what it took prices the rest
                self.costs.learn_tried(rung, clf.build_seconds_, clf.train_seconds_)
                self.load_seen[rung.model] = clf.build_seconds_
            if learn is not None:
                self.costs.learn(rung, learn, entry.seconds)
            if rung.regime == "head-only":
                self.costs.encoded.add((rung.model, rung.strategy))
                head = getattr(clf.module_, "head", None)
                if head is not None:
                    self.heads.setdefault((rung.model, rung.strategy), []).append(
                        (entry.validation_macro_f1, entry.label,
                         {k: v.detach().cpu().clone() for k, v in head.state_dict().items()}, rung.head))
            self.keep(entry, clf, getattr(clf, "validation_proba_", None), getattr(clf, "validation_probas_", None))
            if entry.validation_macro_f1 > self.best_entry.validation_macro_f1:
                self.take_lead(clf, entry, rung)
        clf = None
        gc.collect()


def train_one(rung: Rung, settings: dict, entry: Entry, train, validation, log):
    """Train one rung on train (best weights on validation) and record it in entry; the classifier, or None when
    it failed (recorded, never raised: one failure must not end the run)."""
    from headswap.errors import TimeLimitReached
    from headswap.trials.plan import classifier_for
    from headswap.trials.rows import error_fields

    t0, clf = time.perf_counter(), None
    try:
        clf = classifier_for(rung, settings, epochs=settings["epochs"])
        clf.fit(train.texts, train.labels, eval_texts=validation.texts, eval_labels=validation.labels)
        f1 = validation_f1(clf)
        entry.status, entry.validation_macro_f1, entry.best_epoch = Status.RAN, f1, getattr(clf, "best_epoch_", None)
        if clf.notes_:
            entry.notes = list(clf.notes_)
        if clf.stopped_:
            entry.stopped = clf.stopped_
    except TimeLimitReached as e:   # its frozen features were not all encoded in its time: no head was trained
        entry.skip(f"stopped: {e}")
        log(f"    stopped: {e}")
        clf = None
    except Exception as e:
        entry.fail(error_fields(e), "failed while training")
        log(f"    failed: {entry.error}")
        clf = None
    entry.seconds = time.perf_counter() - t0
    if clf is not None:
        log(f"    validation macro F1 {entry.validation_macro_f1:.4f} ({entry.seconds:.0f} s)")
    return clf
