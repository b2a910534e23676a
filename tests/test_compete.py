"""auto's fine-tuning arms (headswap.auto.compete) on a fake clock and a fake runner: what auto ships is the arm's
best weights after its last improving slice, not after its first. No training: slices report given scores."""

from __future__ import annotations

import math
import types

import pytest

from headswap.auto.budget import Budget
from headswap.auto.climb import Climb
from headswap.auto.arms import Arms, Plan
from headswap.auto.compete import compete
from headswap.auto.ladder import Rung
from headswap.auto.records import Entry
from headswap.data.load import from_lists

VALIDATION = from_lists(["a", "b"], ["x", "y"])


def row(strategy: str, regime: str, rung: str | None = None, tuned: dict | None = None) -> Entry:
    """The report's row of a fine-tuning rung of the model "enc"."""
    return Entry("enc", "enc", strategy, regime, "fine-tune", rung=rung or regime, tuned=tuned)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Costs:
    """What compete asks of auto's cost model (compete.ArmCosts): an epoch takes `epoch` s, loading 5 s, validation
    is free, shipping takes `ship` s (headswap.auto.ladder.Costs estimates each from a probe of a real model)."""

    def __init__(self, epoch: float = 100.0, ship: float = 0.0, n_validation: int = 2000):
        self.n_train, self.n_validation, self.factor = 1600, n_validation, {}
        self.epoch, self.ship = epoch, ship

    def epoch_seconds(self, rung):
        return self.epoch

    def per_text(self, rung):
        return 0.0

    def probe(self, rung):
        return {}

    def eval_every(self, rung, epochs):
        return 25

    def load_seconds(self, rung):
        return 5.0

    def reserve(self, rung):
        return self.ship

    def torch_reserve(self, rung):       # a blend's second member priced as the winner (these tests' rooms)
        return self.reserve(rung)

    def batch(self, rung):
        return 16

    def lower_pass(self, rung):
        return 0.0


class Runner:
    """Each slice takes its planned seconds on the clock and reports the next of `scores[arm]` at its end; the
    classifier it returns is a fresh object, so the test can tell which slice's weights auto kept."""
    parallel = 1

    def __init__(self, clock, scores, better=None):
        self.clock, self.scores, self.started, self.done = clock, scores, [], []
        # arm: whether each slice's fit beat its earlier ones (ties: lower loss); by default, as train_slice says
        # it of slices whose losses do not tie: a score above the arm's earlier best
        self.better, self.best = better or {}, {}

    def start(self, name, rung, settings, seen):
        self.started.append(name)
        self.settings = getattr(self, "settings", {})
        self.settings.setdefault(name, settings)
        took = settings["time_limit"] + 5.0
        self.clock.now += took
        score = self.scores[name].pop(0)
        clf = types.SimpleNamespace(slice=len(self.started), score=score, set_params=lambda **kw: None)
        result = {"points": [(took, score)], "history_length": seen + 1, "finished": False,
                  "validation_proba": f"probabilities of slice {len(self.started)}",
                  "validation_probas": [f"validation in slice {len(self.started)}"]}
        before = self.best.get(name)
        result["better"] = self.better[name].pop(0) if name in self.better else before is None or score > before
        self.best[name] = score if before is None else max(before, score)
        self.done.append((name, clf, result))

    @property
    def busy(self):
        return bool(self.done)

    def wait(self):
        return self.done.pop(0)

    def close(self):
        pass


class Recorded(Climb):
    """A Climb that records what the arms offer the blend (keep: rung, slice, probabilities, those it was picked
    among) and which rungs it times (probe); the test's Costs holds every probe already, except that a model in
    `slow` is timed too slow, saying `slow[model]`."""

    def __init__(self, *args, slow: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.kept, self.probed, self.slow = [], [], slow or {}

    def keep(self, entry, model, proba, picked_from=None):
        self.kept.append((entry.rung, model.slice, proba, picked_from))
        super().keep(entry, model, proba, picked_from)

    def probe(self, rung, entry, most=math.inf):
        self.probed.append((rung.model, rung.strategy))
        if rung.model in self.slow:
            self.skip(entry, self.slow[rung.model])
            return False
        return super().probe(rung, entry, most)


def climb_for(clock, budget=900.0, costs=None, log=None, slow=None, **kwargs) -> Recorded:
    baseline = Entry("tfidf", "tfidf", "tfidf-logreg", "baseline", "baseline", validation_macro_f1=0.5)
    return Recorded({}, None, VALIDATION, costs or Costs(), Budget(budget, clock, 0.0), log or (lambda msg: None),
                    None, baseline, slow=slow, **kwargs)


def arms_of(climb, plans) -> Arms:
    """The arms of `plans`, (rung, tuned rate, entry) each, as prepare() would give them."""
    plans = [Plan(*p) for p in plans]
    return Arms(climb, plans, [p.entry for p in plans])


def test_a_leading_arm_ships_the_weights_of_its_best_slice_not_its_first():
    clock = Clock()
    rung = Rung("enc", "encoder", "encoder-mlp", "full", 1)
    entry = row("encoder-mlp", "full")
    # it leads after its first slice (0.6 over TF-IDF's 0.5), improves twice, then stops improving
    runner = Runner(clock, {"enc · encoder-mlp · full": [0.6, 0.7, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]})
    climb = climb_for(clock)
    compete(climb, arms_of(climb, [(rung, {}, entry)]), folder="unused", runner=runner)
    assert len(runner.started) >= 3
    assert climb.best_entry is entry and entry.validation_macro_f1 == 0.8
    assert climb.best.score == 0.8 and climb.best.slice == 3      # the slice that reached 0.8, not the first
    # each slice that improved the arm is offered to the blend with its validation probabilities, and no other
    assert [k[:3] for k in climb.kept] == [("full", k, f"probabilities of slice {k}") for k in (1, 2, 3)]
    # the kept weights were picked among every slice's validations, those of the slices that did not improve too
    assert climb.kept[-1][3] == [f"validation in slice {k}" for k in range(1, len(runner.started) + 1)]
    assert len(runner.started) > 3


def test_an_arm_that_takes_the_lead_is_the_one_whose_shipping_the_budget_keeps_room_for():
    """The blend prices its other members beside the winner's own reserve: an arm that leads must set it (emotion's
    arms took the lead from TF-IDF, and the blend was priced with nothing kept to ship the arm)."""
    clock = Clock()
    rung = Rung("enc", "encoder", "encoder-mlp", "full", 1)
    entry = row("encoder-mlp", "full")
    runner = Runner(clock, {"enc · encoder-mlp · full": [0.6, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7]})
    climb = climb_for(clock, costs=Costs(ship=12.0))
    compete(climb, arms_of(climb, [(rung, {}, entry)]), folder="unused", runner=runner)
    assert climb.best_entry is entry and climb.budget.ship == 12.0


def test_a_leader_whose_score_saturates_ships_the_slice_that_ties_it_at_a_lower_validation_loss():
    """SMS spam: validation macro F1 reaches 1.0 in the first slice, and later slices can only tie it; the training
    loop keeps a tie at a lower validation loss, and auto ships that slice, not the first to reach 1.0."""
    clock = Clock()
    rung = Rung("enc", "encoder", "encoder-mlp", "full", 1)
    entry = row("encoder-mlp", "full")
    runner = Runner(clock, {"enc · encoder-mlp · full": [1.0] * 8},
                    better={"enc · encoder-mlp · full": [True, True, False] + [False] * 5})
    climb = climb_for(clock)
    compete(climb, arms_of(climb, [(rung, {}, entry)]), folder="unused", runner=runner)
    assert climb.best_entry is entry and climb.best.slice == 2


def test_a_learning_rate_variant_takes_the_lead_only_past_the_margin_and_then_ships_its_improvements():
    clock = Clock()
    rung = Rung("enc", "encoder", "encoder-mlp", "full", 1)
    plain = row("encoder-mlp", "full")
    tuned = row("encoder-mlp", "full", tuned={"body_lr": 1e-4})
    runner = Runner(clock, {"enc · encoder-mlp · full": [0.700] * 10,
                            "enc · encoder-mlp · full · body_lr 0.0001": [0.703, 0.720, 0.740] + [0.740] * 7})
    climb = climb_for(clock)
    compete(climb, arms_of(climb, [(rung, {}, plain), (rung, {"body_lr": 1e-4}, tuned)]), folder="unused", runner=runner)
    assert climb.best_entry is tuned and climb.best.score == 0.740


def test_the_margin_a_learning_rate_variant_must_clear_grows_on_fewer_validation_texts():
    """Half a point on 2,000 texts, a point on 500: on 451 the same lead (0.6 points) does not ship the variant."""
    from headswap.auto.compete import LR_MARGIN, lr_margin

    assert lr_margin(2000) == pytest.approx(LR_MARGIN) and lr_margin(500) == pytest.approx(2 * LR_MARGIN)
    for n, variant_ships in ((2000, True), (451, False)):
        clock = Clock()
        rung = Rung("enc", "encoder", "encoder-mlp", "full", 1)
        plain = row("encoder-mlp", "full")
        tuned = row("encoder-mlp", "full", tuned={"body_lr": 1e-4})
        runner = Runner(clock, {"enc · encoder-mlp · full": [0.700] * 10,
                                "enc · encoder-mlp · full · body_lr 0.0001": [0.706] * 10})
        climb = climb_for(clock, costs=Costs(n_validation=n))
        compete(climb, arms_of(climb, [(rung, {}, plain), (rung, {"body_lr": 1e-4}, tuned)]), folder="unused", runner=runner)
        assert (climb.best_entry is tuned) == variant_ships


def test_a_model_too_dear_for_a_first_slice_is_timed_once_not_for_each_of_its_rungs():
    """Its cheapest fine-tuning rung says it (probed too dear, or a probe cut short as too slow); the model's later
    rungs are skipped untimed, and another model's rungs are still timed."""
    from headswap.auto.arms import prepare

    class Big(Costs):
        def epoch_seconds(self, rung):
            return 10_000.0 if rung.model == "big" else 100.0

    for too_slow in (False, True):
        slow = {"big": "too slow for the 14 min left: timing 8 batches took over 9 s"} if too_slow else {}
        climb = climb_for(Clock(), costs=Big(), slow=slow)
        rungs = [Rung("big", "causal", s, "lora", 1, tier="causal") for s in
                 ("causal-embedding-mlp", "slm-hidden-mlp", "slm-logits")] + \
                [Rung("enc", "encoder", "encoder-mlp", "full", 1)]
        arms = prepare(climb, rungs, lr_search=False)
        entries = arms.entries
        assert climb.probed == [("big", "causal-embedding-mlp"), ("enc", "encoder-mlp")]
        assert [e.reason.startswith("not timed") for e in entries[1:3]] == [True, True]
        assert [p[0].model for p in arms.plans] == (["enc"] if too_slow else ["big", "enc"])
        # the rungs kept from halving still have a row in the arms table, saying why
        assert [e.stopped_because or None for e in entries] == \
            (["too dear"] * 3 if too_slow else [None, "too dear", "too dear"]) + [None]


def test_arms_on_a_body_whose_vocabulary_misfits_wait_behind_every_arm_on_one_that_fits():
    """Learning-rate variants of the fitting body's arms included; otherwise the ladder's order."""
    from headswap.auto.arms import prepare

    climb = climb_for(Clock(), misfit={"minilm"})
    rungs = [Rung("e5", "encoder", "encoder-mlp", "partial", 1), Rung("minilm", "encoder", "encoder-mlp", "partial", 1),
             Rung("e5", "encoder", "encoder-mlp", "full", 1), Rung("minilm", "encoder", "encoder-mlp", "full", 1)]
    plans = prepare(climb, rungs).plans
    order = [(rung.model, rung.regime, bool(tuned)) for rung, tuned, _ in plans]
    fitting = [o for o in order if o[0] == "e5"]
    assert order[:len(fitting)] == fitting and len(fitting) > 2 and any(t for _, _, t in fitting)
    assert order[:2] == [("e5", "partial", False), ("e5", "full", False)]
    assert order[len(fitting):][:2] == [("minilm", "partial", False), ("minilm", "full", False)]


def test_arms_come_in_the_prior_s_order_rungs_before_their_learning_rate_variants():
    """On emotion's shape full fine-tuning won 6 of 7 earlier runs and the cached partial 7 of 18 (one data set: a
    hint, which orders the arms): full comes first, where the ladder puts the cheaper cached partial first; a family
    no run tried keeps its ladder place after."""
    from headswap.auto.arms import prepare
    from headswap.auto.prior import Prior, shape

    where = shape(16000, 6, False)
    table = {"runs": ["x"], "families": {
        "encoder · encoder-mlp · full": {where: {"emotion": {"ran": 7, "within": 6, "won": 6}}},
        "encoder · encoder-mlp · partial-cached": {where: {"emotion": {"ran": 18, "within": 8, "won": 7}}}}}
    logged = []
    climb = climb_for(Clock(), prior=Prior(table, 16000, 6, False), log=logged.append)
    rungs = [Rung("enc", "encoder", "encoder-mlp", "partial", 1, name="partial-cached"),
             Rung("enc", "encoder", "encoder-mlp", "full", 1, name="full"),
             Rung("enc", "encoder", "similarity", "full", 1, name="full")]
    plans = prepare(climb, rungs).plans
    order = [(rung.strategy, rung.regime, bool(tuned)) for rung, tuned, _ in plans]
    assert order[:3] == [("encoder-mlp", "full", False), ("encoder-mlp", "partial", False), ("similarity", "full", False)]
    assert all(tuned for _, _, tuned in order[3:]) and order[3][:2] == ("encoder-mlp", "full")
    assert any("the best in 86% of the runs on the one data set of this size and classes, emotion: a hint" in line
               for line in logged)
    plans = prepare(climb_for(Clock()), rungs).plans      # no prior: the ladder's order
    assert [(r.strategy, r.regime) for r, t, _ in plans if not t][:2] == [("encoder-mlp", "partial"), ("encoder-mlp", "full")]


def test_the_room_kept_to_ship_the_winner_is_not_set_by_an_arm_over_the_cap():
    """An arm whose least slice is over a third of the budget never runs beside others (policy.Halving), so its
    dear shipping (a causal LM's 150 s against an encoder's 30 s) must not shrink what the others share; where
    no arm's least slice is under the cap, the cheapest runs alone and its reserve is kept."""
    class Dear(Costs):
        def epoch_seconds(self, rung):        # least slice: 5 s loading + a quarter epoch
            return 2000.0 if rung.kind == "causal" else self.epoch

        def reserve(self, rung):
            return 150.0 if rung.kind == "causal" else 30.0

    climb = climb_for(Clock(), costs=Dear())
    enc, lm = Rung("enc", "encoder", "encoder-mlp", "full", 1), Rung("lm", "causal", "slm-logits", "lora", 1)
    assert arms_of(climb, [(enc, {}, {}), (lm, {}, {})]).reserve() == 30.0
    assert arms_of(climb, [(lm, {}, {})]).reserve() == 150.0      # alone over the cap: it may run, so it is shipped
    # two at once: the cap is of slot-seconds
    climb = climb_for(Clock(), costs=Dear(epoch=1000.0), arm_slots=2)
    assert arms_of(climb, [(enc, {}, {}), (lm, {}, {})]).reserve() == 150.0


def test_the_arms_table_lists_arms_that_never_got_a_slice_when_halving_never_ran():
    """Every fine-tuning arm too dear to time (a slow machine): the report still names each and why, rather than
    dropping the section."""
    from headswap.reports.markdown import arms_markdown
    from headswap.auto.arms import prepare

    slow = "too slow for the 62 s left: timing 8 batches took over 20 s"
    climb = climb_for(Clock(), slow={"enc": slow, "other": slow})
    rungs = [Rung("enc", "encoder", "encoder-mlp", "full", 1), Rung("other", "encoder", "encoder-mlp", "full", 1)]
    arms = prepare(climb, rungs)
    plans, entries = arms.plans, arms.entries
    for e in entries:
        e.arm = e.model_name = e.model
    lines = arms_markdown({"candidates": [e.to_dict() for e in entries], "budget_seconds": 90.0})
    assert plans == [] and any("No arm got a slice" in line for line in lines)
    rows = [line for line in lines if line.startswith(("| enc", "| other"))]
    assert len(rows) == 2 and all("too dear" in r and "timing 8 batches" in r for r in rows), rows


def test_an_arm_is_offered_its_model_and_strategys_frozen_heads_of_its_kind_best_first():
    from headswap.settings import default_body_lr

    clock = Clock()
    rung, other = Rung("enc", "encoder", "encoder-mlp", "full", 1), Rung("enc", "encoder", "similarity", "full", 1)
    entries = [row(s, "full") for s in ("encoder-mlp", "similarity")]
    runner = Runner(clock, {"enc · encoder-mlp · full": [0.9] * 9, "enc · similarity · full": [0.8] * 9})
    climb = climb_for(clock)
    climb.heads.update({("enc", "encoder-mlp"): [(0.7, "enc · encoder-mlp · head-only · linear", {"w": 1}, "mlp"),
                                            (0.8, "enc · encoder-mlp · head-only · mlp", {"w": 2}, "mlp"),
                                            (0.9, "enc · encoder-mlp · head-only · logistic", {"w": 3}, "linear")]})
    compete(climb, arms_of(climb, [(rung, {}, entries[0]), (other, {}, entries[1])]), folder="unused",
            runner=runner)
    offered = runner.settings["enc · encoder-mlp · full"]["start_heads"]
    assert [name for name, _ in offered] == ["enc · encoder-mlp · head-only · mlp (0.8000)",
                                             "enc · encoder-mlp · head-only · linear (0.7000)"]
    assert "start_heads" not in runner.settings["enc · similarity · full"]     # no frozen rung of its strategy
    # the linear head (0.9) is not the arm's kind (mlp); from a fitted head, the head learns at the body's rate
    assert runner.settings["enc · encoder-mlp · full"]["head_lr"] == default_body_lr("full")
    assert runner.settings["enc · similarity · full"].get("head_lr") is None


def test_a_cached_arms_first_slice_trains_for_its_plan_less_its_lower_block_pass():
    """The cached partial's first slice makes the pass of its frozen lower blocks (outside the loop's time limit):
    that slice's time limit leaves room for it, its later slices' do not, and no slice runs past its plan."""
    clock = Clock()
    rung = Rung("enc", "encoder", "encoder-mlp", "partial", 1, last_n=2)
    entry = row("encoder-mlp", "partial", rung="partial-cached")
    limits = []

    class Timed(Runner):
        def start(self, name, rung, settings, seen):
            limits.append(settings["time_limit"])
            super().start(name, rung, {**settings, "time_limit": settings["time_limit"] + (30.0 if seen == 0 else 0)},
                          seen)
    runner = Timed(clock, {"enc · encoder-mlp · partial · partial-cached": [0.6, 0.7, 0.8] + [0.8] * 8})
    class Cached(Costs):
        def lower_pass(self, rung):
            return 30.0 if rung.last_n else 0.0

    climb = climb_for(clock, costs=Cached())
    compete(climb, arms_of(climb, [(rung, {}, entry)]), folder="unused", runner=runner)
    slices = entry.slices
    assert len(slices) >= 2
    # the load (5 s) is each slice's overhead; the pass, 30 s, the first slice's alone
    assert limits[0] == pytest.approx(slices[0]["planned_seconds"] - 5.0 - 30.0)
    assert limits[1] == pytest.approx(slices[1]["planned_seconds"] - 5.0)
    assert [s["seconds"] for s in slices] == pytest.approx([s["planned_seconds"] for s in slices])


def test_the_room_kept_for_a_second_blended_model_goes_to_the_arms_when_no_arm_fits_beside_it():
    """At 5 minutes on GermEval 2018 the room to ship the winner and a second blended model (46 s each) left the
    arms 21 s, under the cheapest first slice, and the run used 77% of its budget: then that second room is given
    to the arms. Where even the winner's room leaves no first slice, no arm runs."""
    class Dear(Costs):
        def reserve(self, rung):
            return 140.0

    rung = Rung("enc", "encoder", "encoder-mlp", "full", 1)
    for budget, runs in ((300.0, True), (170.0, False)):
        clock = Clock()
        entry = row("encoder-mlp", "full")
        runner = Runner(clock, {"enc · encoder-mlp · full": [0.6] * 9})
        said = []
        climb = climb_for(clock, budget, costs=Dear(), log=said.append, blends=True)
        # 300 s less twice 140 s and the 6 s margin: 14 s, under the 30 s least slice (5 s loading, a quarter epoch)
        compete(climb, arms_of(climb, [(rung, {}, entry)]), folder="unused", runner=runner)
        assert bool(runner.started) is runs, (budget, said)
        assert any("room kept to ship a second blended model" in line for line in said)
        if runs:
            assert climb.best_entry is entry and clock.now <= budget - 140.0


def test_the_room_kept_to_ship_an_arm_that_was_not_admitted_goes_to_the_arms_that_were():
    """A causal arm whose first slice fits (so Arms.reserve counts its 150 s to ship) but that halving does not admit
    beside the encoder arm cannot win: the arms then share what is left less the encoder's 30 s to ship, not
    the causal arm's 150 s (on CLINC150 the blend began with 150 s left, twice a SmolLM2 arm's reserve)."""
    class Two(Costs):
        def epoch_seconds(self, rung):       # the causal arm's least slice, 5 s + a quarter of 1000 s, is under the
            return 1000.0 if rung.kind == "causal" else 100.0     # 300 s cap; a judged epoch of it does not fit

        def reserve(self, rung):
            return 150.0 if rung.kind == "causal" else 30.0

    clock = Clock()
    enc, lm = Rung("enc", "encoder", "encoder-mlp", "full", 1), Rung("lm", "causal", "slm-logits", "lora", 1)
    entries = [Entry(m, m, r.strategy, r.regime, r.tier, rung=r.regime) for m, r in (("enc", enc), ("lm", lm))]
    runner = Runner(clock, {"enc · encoder-mlp · full": [0.6 + i / 100 for i in range(30)]})
    said = []
    climb = climb_for(clock, costs=Two(), log=said.append)
    plans = [(enc, {}, entries[0]), (lm, {}, entries[1])]
    assert arms_of(climb, plans).reserve() == 150.0
    compete(climb, arms_of(climb, plans), folder="unused", runner=runner)
    assert set(runner.started) == {"enc · encoder-mlp · full"}, said
    assert any("goes to the 1 that were" in line for line in said), said
    assert 900.0 - 150.0 < clock.now <= 900.0 - 30.0, (clock.now, said)


def test_an_arm_whose_epoch_outlasts_the_arms_share_does_not_run_before_one_that_can_be_judged():
    """A German set at 15 minutes: the prior put e5's similarity arm first (an epoch of 10.3 min; the arms had 4.4)
    and, admitted alone, it took all of them for half an epoch while the cheaper arm never ran. The arm that can
    train a judged epoch runs first."""
    class German(Costs):
        def epoch_seconds(self, rung):
            return 618.0 if rung.strategy == "similarity" else 84.0

    clock = Clock()
    clock.now = 900.0 - 264.0        # the cheap rungs have run: 4.4 minutes are left
    dear, cheap = Rung("enc", "encoder", "similarity", "full", 1), Rung("enc", "encoder", "encoder-mlp", "full", 1)
    entries = [row("similarity", "full"), row("encoder-mlp", "full")]
    runner = Runner(clock, {"enc · similarity · full": [0.70] * 9, "enc · encoder-mlp · full": [0.74] * 9})
    climb = climb_for(clock, costs=German())
    compete(climb, arms_of(climb, [(dear, {}, entries[0]), (cheap, {}, entries[1])]), folder="unused", runner=runner)
    assert runner.started[0] == "enc · encoder-mlp · full", runner.started
    assert climb.best_entry is entries[1]
