"""auto at small data and small budgets: a frozen rung whose whole encoding pass costs about its probe's is tried,
not timed (the README's one-minute run on 300 texts skipped every MiniLM rung as too dear to time), its measured
time prices the rungs that share its cost; on more texts it is still timed; a timing probe never takes more than
its share of the budget. On a fake clock, with the tests' tiny encoder."""

from __future__ import annotations

import pytest
from test_auto import world  # noqa: F401  (the tiny encoder, tiny causal LM and spam/ham data of auto's tests)
from test_auto_budget import TEXTS, FakeClock, _climb

import headswap.trials.measure
from headswap.auto.budget import PROBE_SHARE
from headswap.auto.climb import entry_for
from headswap.auto.ladder import PROBE_GUESS, TRY_PROBES, Costs, plan_ladder
from headswap.auto.records import Status
from headswap.trials.measure import ProbeTooSlow

pytestmark = pytest.mark.usefixtures("one_thread")


def _frozen(enc):
    """The tiny encoder's frozen rungs: logistic, linear and MLP heads, in ladder order."""
    rungs, _ = plan_ladder({enc: "encoder"}, ["encoder-mlp"], 1)
    return [r for r in rungs if r.regime == "head-only"]


def _no_probe(monkeypatch):
    calls = []

    def probe(rung, train, settings, batches=1, time_limit=None, load_guess=0.0):
        calls.append(time_limit)
        raise ProbeTooSlow(f"timing 2 training batches took over {time_limit:.0f} s")

    monkeypatch.setattr(headswap.trials.measure, "probe_timing", probe)
    return calls


def test_a_frozen_rung_on_few_texts_is_trained_without_a_probe_and_prices_the_next(world, monkeypatch):
    _, enc, _, _ = world
    calls = _no_probe(monkeypatch)
    climb, _ = _climb(enc, FakeClock(), budget=100.0)
    logistic, linear, _ = _frozen(enc)
    assert climb.costs.tried(logistic)      # 60 + 10 texts to encode; its probe would encode 120
    climb.run(logistic)
    entry = climb.entries[-1]
    assert calls == [] and entry.status == Status.RAN, entry
    measured = climb.costs.probe(logistic)
    assert not measured["guessed"] and measured["load_seconds"] == climb.load_seen[enc] > 0
    assert measured["inference_seconds_per_text"] > 0
    # the linear head shares its cost and its encoding: priced from what the logistic head took, and run
    assert climb.costs.probe(linear) is measured and not climb.costs.tried(linear)
    assert climb.costs.estimate(linear) == pytest.approx(measured["load_seconds"])
    climb.run(linear)
    assert calls == [] and climb.entries[-1].status == Status.RAN


def test_on_many_texts_the_frozen_rung_is_still_timed(world, monkeypatch):
    _, enc, _, _ = world
    calls = _no_probe(monkeypatch)
    climb, _ = _climb(enc, FakeClock(), budget=300.0)
    logistic = _frozen(enc)[0]
    n_validation = TRY_PROBES * climb.costs.probe_texts(logistic) - len(TEXTS) + 1     # one text too many
    climb.costs = Costs(len(TEXTS), n_validation, 10, 16)
    assert not climb.costs.tried(logistic)
    climb.run(logistic)
    entry = climb.entries[-1]
    assert len(calls) == 1 and entry.status == Status.SKIPPED and entry.reason.startswith("too slow"), entry


def test_a_try_the_budget_cannot_hold_is_skipped_untrained(world, monkeypatch):
    """Encoding cannot be cut short: a rung tried without a probe is priced from the probe's guess first, and is
    not started where that price does not fit what is left."""
    _, enc, _, _ = world
    calls = _no_probe(monkeypatch)
    clock = FakeClock()
    climb, _ = _climb(enc, clock, budget=100.0)
    logistic = _frozen(enc)[0]
    trained = []
    monkeypatch.setattr(climb, "train_rung", lambda *a, **kw: trained.append(a))
    clock.now += 100.0 - 2.0 - 2.0 - PROBE_GUESS["encoder"]     # spare: the probe's guess, short of the try's price
    climb.run(logistic)
    entry = climb.entries[-1]
    assert calls == [] and trained == [] and entry.status == Status.SKIPPED and "estimated" in entry.reason, entry


@pytest.mark.parametrize("budget", [1000.0, 2000.0])
def test_a_probe_never_takes_more_than_its_share_of_the_budget(world, monkeypatch, budget):
    """A quarter of what is left would be 240 s of 1,000: the probe gets its share, 100 s."""
    _, enc, _, _ = world
    calls = _no_probe(monkeypatch)
    climb, rung = _climb(enc, FakeClock(), budget=budget)       # full fine-tuning: always timed
    climb.probe(rung, entry_for(rung))
    assert calls == [pytest.approx(PROBE_SHARE * budget)] and calls[0] < climb.budget.spare() / 4


def test_a_probe_measured_over_its_share_is_not_started_and_a_guessed_one_is_cut_to_it(world, monkeypatch):
    """One minute: a tenth of it (6 s) cannot hold a probe of a model whose last probe took 10 s; one guessed at 10 s
    (PROBE_GUESS, any encoder's: the tests' tiny one takes under a second) starts, limited to the 6 s."""
    _, enc, _, _ = world
    calls = _no_probe(monkeypatch)
    climb, rung = _climb(enc, FakeClock(), budget=60.0, finish=1.0)
    assert climb.budget.spare() > 2 * PROBE_GUESS["encoder"]
    first = entry_for(rung)
    assert climb.probe(rung, first) is False and calls == [pytest.approx(6.0)], first       # (this fake is too slow)
    assert climb.probe_seconds[rung.model] >= PROBE_GUESS["encoder"]
    calls.clear()
    entry = entry_for(rung)
    assert climb.probe(rung, entry) is False
    assert calls == [] and entry.reason.startswith("not timed") and "a tenth of the budget" in entry.reason, entry


def test_what_a_probe_took_counts_against_its_rung():
    """A rung the prior never saw pay may take a tenth of the budget, its probe's seconds included."""
    from headswap.auto.budget import Budget

    clock = FakeClock()
    budget = Budget(900.0, clock, clock())
    assert budget.unproven_most(500.0, 0.10) == pytest.approx(90.0)
    assert budget.unproven_most(500.0, 0.10, probed=30.0) == pytest.approx(60.0)


def _fine(enc):
    """The tiny encoder's fine-tuning rungs in ladder order (cached partial, full, similarity, cross-encoder)."""
    rungs, _ = plan_ladder({enc: "encoder"}, ["encoder-mlp", "similarity", "cross-encoder"], 1)
    return [r for r in rungs if r.fine_tuning]


def test_an_arm_on_few_texts_is_priced_from_its_frozen_rung_not_timed(world, monkeypatch):
    """60 texts are 4 batches an epoch, half a probe's 8: the arms are priced from what the logistic head measured
    (a step TRAIN_PASSES passes of the trained blocks over its batch) and no probe runs."""
    from headswap.auto.arms import prepare
    from headswap.auto.ladder import TRAIN_PASSES

    _, enc, _, _ = world
    calls = _no_probe(monkeypatch)
    climb, _ = _climb(enc, FakeClock(), budget=100.0)
    climb.run(_frozen(enc)[0])
    frozen = climb.costs.probe(_frozen(enc)[0])["inference_seconds_per_text"]
    fine = _fine(enc)
    prepared = prepare(climb, fine, lr_search=False)
    assert calls == [] and [p.rung for p in prepared.plans] == fine
    batch = {r.strategy if r.regime == "full" else "partial": climb.costs.probe(r)["train_batch_seconds"] for r in fine}
    assert batch["encoder-mlp"] == pytest.approx(TRAIN_PASSES * 16 * frozen)
    assert batch["partial"] < batch["encoder-mlp"] < batch["similarity"]     # fewer blocks; class texts beside
    assert batch["cross-encoder"] == pytest.approx(2 * batch["encoder-mlp"])  # a pass per class, 2 classes
    assert all(climb.costs.probe(r)["guessed"] and climb.costs.estimate(r) > 0 for r in fine)


def test_an_arm_is_timed_where_no_frozen_rung_measured_its_body_or_its_epoch_is_dear(world, monkeypatch):
    from headswap.auto.arms import prepare
    from headswap.auto.ladder import ARM_PROBE_BATCHES

    _, enc, _, _ = world
    calls = _no_probe(monkeypatch)
    climb, _ = _climb(enc, FakeClock(), budget=100.0)
    full = [r for r in _fine(enc) if r.regime == "full"][0]
    prepare(climb, [full], lr_search=False)              # nothing measured of the body yet
    assert len(calls) == 1 and climb.costs.probe(full) is None
    climb, _ = _climb(enc, FakeClock(), budget=100.0)
    climb.run(_frozen(enc)[0])
    probes = climb.costs.probes
    climb.costs = Costs(16 * TRY_PROBES * ARM_PROBE_BATCHES + 1, 10, 10, 16, probes=probes)   # a batch too many
    assert not climb.costs.guess_arm(full) and climb.costs.probe(full) is None


def test_the_room_kept_to_ship_an_arm_grows_with_the_busy_cores_that_will_price_its_export(world, monkeypatch):
    """Shipping prices an export on cores as busy as now (ship.Prices): the arms keep room for it alike, or a run
    keeps the idle price, is refused the export at the busy one, and leaves the difference unspent."""
    from headswap.auto.arms import prepare

    _, enc, _, _ = world
    _no_probe(monkeypatch)
    climb, _ = _climb(enc, FakeClock(), budget=100.0)
    climb.run(_frozen(enc)[0])
    prepared = prepare(climb, [r for r in _fine(enc) if r.regime == "full"][:1], lr_search=False)
    rung = prepared.plans[0].rung
    idle = prepared.room()
    prepared.busy = 2.0
    assert prepared.reserve() == pytest.approx(2 * climb.costs.reserve(rung))
    assert idle - prepared.room() == pytest.approx(climb.costs.reserve(rung))


def test_where_no_arm_fits_beside_the_room_to_export_the_winner_that_room_goes_to_the_arms(world, monkeypatch):
    """The export is optional, the arm is not: on cores busy enough that the export's room leaves no first slice,
    the arms share what saving the winner for torch leaves."""
    from headswap.auto.arms import prepare
    from headswap.auto.compete import _arm, _share
    from headswap.auto.policy import admit

    _, enc, _, _ = world
    _no_probe(monkeypatch)
    clock = FakeClock()
    climb, _ = _climb(enc, clock, budget=100.0)
    climb.run(_frozen(enc)[0])
    prepared = prepare(climb, [r for r in _fine(enc) if r.regime == "full"][:1], lr_search=False)
    rung, entry = prepared.plans[0].rung, prepared.plans[0].entry
    arms = [_arm(climb.costs, rung, entry)]
    prepared.busy = 1.0
    clock.now += prepared.room() - 0.5 * arms[0].least_slice          # half a first slice short
    assert climb.costs.reserve(rung) - climb.costs.torch_reserve(rung) > arms[0].least_slice
    assert not admit(arms, climb.budget.share(prepared.room(), 1)).queue
    share = _share(climb, prepared, arms, 1)
    assert prepared.export is False and admit(arms, share).queue == [entry.arm_name]
    assert share.seconds == pytest.approx(prepared.room())
