"""A fit's time_limit counts the frozen body's encoding pass (head-only's cached features): past it the fit stops
with TimeLimitReached naming how many texts were encoded, auto records the rung as stopped within its time, and
no partial features stay in the feature cache. On a fake clock that a slow encoding pass moves, batch by batch."""

from __future__ import annotations

import types

import pytest
from test_auto import world  # noqa: F401  (the tiny encoder, tiny causal LM and spam/ham data of auto's tests)
from test_auto_budget import LABELS, TEXTS, FakeClock

import headswap.auto.climb
import headswap.classifier.estimator
import headswap.nn.inference
from headswap.auto.budget import Budget
from headswap.auto.climb import Climb, entry_for
from headswap.auto.ladder import Costs, plan_ladder
from headswap.auto.records import Entry, Status
from headswap.classifier.estimator import TextClassifier
from headswap.data.load import from_lists
from headswap.errors import HeadswapError, TimeLimitReached
from headswap.nn.inference import feature_cache

pytestmark = pytest.mark.usefixtures("one_thread")

VAL_TEXTS = [f"win a free prize {i}" for i in range(8)] + [f"lunch at noon {i}" for i in range(8)]
VAL_LABELS = ["spam"] * 8 + ["ham"] * 8


@pytest.fixture
def slow(monkeypatch):
    """(fake clock, seconds each inference batch moves it, list of item counts of each feature pass): the
    estimator and the encoding pass read the clock."""
    clock, step, passes = FakeClock(), {"seconds": 0.0}, []
    fake = types.SimpleNamespace(perf_counter=clock)
    monkeypatch.setattr(headswap.nn.inference, "time", fake, raising=False)
    monkeypatch.setattr(headswap.classifier.estimator, "time", fake)

    class SlowLoader(headswap.nn.inference.DataLoader):
        def __iter__(self):
            for batch in super().__iter__():
                yield batch
                clock.now += step["seconds"]       # the batch's forward pass took this long
    monkeypatch.setattr(headswap.nn.inference, "DataLoader", SlowLoader)
    compute = headswap.classifier.estimator.compute_features
    monkeypatch.setattr(headswap.classifier.estimator, "compute_features",
                        lambda model, items, *a, **kw: passes.append(len(items)) or compute(model, items, *a, **kw))
    return clock, step, passes


def test_a_head_only_fit_stops_when_encoding_its_training_texts_passes_the_time_limit(world, slow):
    _, enc, _, _ = world
    clock, step, _ = slow
    step["seconds"] = 1.0
    clf = TextClassifier(model=enc, regime="head-only", head="linear", epochs=2, eval_fraction=0.0,
                         eval_batch_size=8, time_limit=2.5, progress=False)
    start = clock()
    with feature_cache() as store, pytest.raises(TimeLimitReached) as e:
        clf.fit(TEXTS, LABELS)
    # checked before each batch: batches at 0, 1 and 2 s ran, the fourth (at 3 s) did not start
    assert str(e.value) == "encoding the training texts took over the time limit of 2.5 s: 24 of 60 encoded"
    assert isinstance(e.value, HeadswapError)
    assert clock() - start == 3.0 and store == {}       # nothing of the partial pass is kept


def test_auto_records_a_frozen_rung_whose_encoding_overruns_as_stopped_and_the_next_head_encodes_afresh(world, slow,
                                                                                                          monkeypatch):
    _, enc, _, _ = world
    clock, step, passes = slow
    train, validation = from_lists(TEXTS, LABELS), from_lists(VAL_TEXTS, VAL_LABELS)
    rungs, _ = plan_ladder({enc: "encoder"}, ["encoder-mlp"], 1)
    logistic, linear, _ = [r for r in rungs if r.regime == "head-only"]
    base = Entry("tfidf", "tfidf", "tfidf-logreg", "baseline", "baseline", status=Status.RAN, validation_macro_f1=0.5)
    budget = Budget(100.0, clock, clock(), finish=2.0)
    climb = Climb({"progress": False, "eval_batch_size": 8}, train, validation, Costs(60, 16, 10, 16), budget,
                  lambda _: None, None, base)
    limits, real = [], headswap.auto.climb.train_one
    monkeypatch.setattr(headswap.auto.climb, "train_one", lambda rung, settings, *a: limits.append(
        settings["time_limit"]) or real(rung, settings, *a))
    step["seconds"] = 20.0      # 2 validation and 8 training batches: 200 s of a 100 s budget
    start = clock()
    with feature_cache() as store:
        climb.run(logistic)
        stopped = climb.entries[-1]
        assert stopped.status == Status.SKIPPED and stopped.validation_macro_f1 is None, stopped
        assert stopped.reason.startswith("stopped: encoding the training texts took over the time limit of "), \
            stopped.reason
        assert stopped.reason.endswith(" of 60 encoded") and climb.best_entry is base
        # within its limit and one batch, and within the budget and one batch
        assert clock() - start <= limits[0] + 20.0 and budget.left() >= -20.0
        assert (enc, "encoder-mlp") not in climb.costs.encoded
        step["seconds"] = 0.0
        later = entry_for(linear)
        climb.train_rung(linear, later, time_limit=1e6)
    assert later.status == Status.RAN, later
    assert passes == [16, 60, 60]      # validation once (complete, shared); training again, in full
    assert sorted(len(f) for f in store.values()) == [16, 60]


def test_several_heads_with_a_time_limit_still_share_one_encoding_pass(world, slow):
    _, enc, _, _ = world
    _, step, passes = slow
    step["seconds"] = 0.5
    with feature_cache() as store:
        for head in ("linear", "mlp"):
            TextClassifier(model=enc, regime="head-only", head=head, epochs=1, eval_batch_size=8, time_limit=60,
                           progress=False).fit(TEXTS, LABELS, eval_texts=VAL_TEXTS, eval_labels=VAL_LABELS)
    assert passes == [16, 60] and len(store) == 2


def test_the_training_loop_gets_what_encoding_left_of_the_time_limit(world, slow, monkeypatch):
    """Encoding takes 10 of the 11 s (each inference batch 1 s), a training step 0.25 s: the loop stops a second
    into its first epoch, not 11 s after it started."""
    import headswap.train.loop
    _, enc, _, _ = world
    clock, step, _ = slow
    monkeypatch.setattr(headswap.train.loop, "time", types.SimpleNamespace(perf_counter=clock))
    loss = headswap.train.loop._loss
    monkeypatch.setattr(headswap.train.loop, "_loss", lambda *a, **kw: setattr(clock, "now", clock.now + 0.25) or
                        loss(*a, **kw))
    step["seconds"] = 1.0
    clf = TextClassifier(model=enc, regime="head-only", head="linear", epochs=50, batch_size=8, eval_batch_size=8,
                         time_limit=11, progress=False)
    start = clock()
    clf.fit(TEXTS, LABELS, eval_texts=VAL_TEXTS, eval_labels=VAL_LABELS)
    assert clf.stopped_ == "time limit 11 s reached after 4 of 8 steps of epoch 1", clf.stopped_
    assert clock() - start == 11.0


def test_a_frozen_rungs_probe_whose_encoding_overruns_is_too_slow_not_failed(world, slow):
    """The probe's loop limit (0.8 of its 2 s) counts the sample's encoding: 2 of its 4 batches fit."""
    from headswap.trials.measure import ProbeTooSlow, probe_timing
    _, enc, _, _ = world
    _, step, _ = slow
    step["seconds"] = 1.0
    frozen = next(r for r in plan_ladder({enc: "encoder"}, ["encoder-mlp"], 1)[0] if r.regime == "head-only")
    with pytest.raises(ProbeTooSlow, match="^encoding the training texts took over the time limit of 1.6 s: 8 of 16"):
        probe_timing(frozen, from_lists(TEXTS, LABELS), {"progress": False, "head_fit": "loop", "eval_batch_size": 4},
                     time_limit=2.0)
