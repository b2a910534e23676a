"""auto's cost ladder: the rungs' order, a time-bounded run that stops on time and keeps its best weights, the
logistic head on cached features, probes shared by rungs of one cost, skip reasons, and budget accounting on a
fake clock."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from test_auto import with_out_of_scope, world  # noqa: F401  (the tiny encoder, tiny causal LM and spam/ham data of auto's tests)

import headswap.auto.runners
import headswap.auto.climb
import headswap.auto.ladder
import headswap.trials.measure
from headswap.classifier.estimator import TextClassifier, load_model
from headswap.auto.main import auto
from headswap.auto.ladder import FROZEN_HEADS, TIERS, Costs, plan_ladder
from headswap.errors import ConfigError
from headswap.nn.inference import feature_cache

pytestmark = pytest.mark.usefixtures("one_thread")


TEXTS = [f"free prize win cash {i}" for i in range(30)] + [f"see you at lunch today {i}" for i in range(30)]
LABELS = ["spam"] * 30 + ["ham"] * 30


def test_the_ladder_runs_cheap_to_dear_with_causal_models_last():
    rungs, skipped = plan_ladder({"enc": "encoder", "cau": "causal"},
                                 ["encoder-mlp", "static", "cross-encoder", "causal-embedding-mlp", "slm-logits"], 1)
    tiers = [r.tier for r in rungs]
    assert tiers == sorted(tiers, key=TIERS.index), tiers
    assert [r.strategy for r in rungs if r.tier == "static"] == ["static"]
    frozen = [(r.model, r.strategy, r.regime, r.head, r.head_fit) for r in rungs if r.tier == "frozen"]
    assert frozen == [("enc", "encoder-mlp", "head-only", h, fit) for _, h, fit in FROZEN_HEADS]
    assert {(r.strategy, r.regime) for r in rungs if r.tier == "fine-tune"} == {("encoder-mlp", "full"),
                                                                               ("cross-encoder", "full")}
    causal = [r for r in rungs if r.tier == "causal"]
    assert {r.model for r in causal} == {"cau"} and causal[0].regime == "head-only"     # its frozen heads first
    assert {(r.strategy, r.regime) for r in causal if r.fine_tuning} == {("causal-embedding-mlp", "lora"),
                                                                        ("slm-logits", "lora")}
    assert {(s["model"], s["strategy"]) for s in skipped} >= {("enc", "slm-logits"), ("cau", "static")}
    # the frozen rungs of one model and strategy share a probe; the full rungs of plain strategies share one
    assert len({r.cost_key for r in rungs if r.tier == "frozen"}) == 1
    ce = [r for r in rungs if r.strategy == "cross-encoder"][0]
    assert ce.cost_key != [r for r in rungs if r.tier == "fine-tune" and r.strategy == "encoder-mlp"][0].cost_key
    assert rungs[-1].cost_key != [r for r in rungs if r.tier == "fine-tune"][0].cost_key


def test_a_given_regime_or_head_narrows_the_ladder():
    rungs, _ = plan_ladder({"enc": "encoder"}, ["encoder-mlp"], 1, regime="full")
    assert [(r.tier, r.regime) for r in rungs] == [("fine-tune", "full")]
    rungs, _ = plan_ladder({"enc": "encoder"}, ["encoder-mlp"], 1, head="mlp")
    assert [(r.regime, r.head, r.head_fit) for r in rungs] == [("head-only", "mlp", "loop"), ("full", None, "loop")]


def test_a_time_bounded_run_stops_on_time_and_keeps_its_best_weights(world, monkeypatch):
    """The loop reads a clock that moves 0.1 s a reading, so where it stops does not depend on the machine's load."""
    import types

    import headswap.train.loop
    _, enc, _, _ = world
    readings = iter(range(10 ** 7))
    monkeypatch.setattr(headswap.train.loop, "time", types.SimpleNamespace(perf_counter=lambda: next(readings) / 10))
    t0 = time.perf_counter()
    clf = TextClassifier(model=enc, regime="full", epochs=100000, batch_size=4, time_limit=6.0, eval_every=3,
                         temperature_scaling=False, progress=False, seed=1)
    clf.fit(TEXTS[::2], LABELS[::2], eval_texts=TEXTS[1::2], eval_labels=LABELS[1::2])
    assert time.perf_counter() - t0 < 120       # it stopped (100,000 epochs would not)
    assert any(n.startswith("training stopped early: time limit 6 s") for n in clf.notes_), clf.notes_
    assert clf.train_seconds_ <= 6.0 + 1.0      # on the loop's clock: a reading or so past the limit
    scores = [h["score"] for h in clf.history_]
    assert len(scores) > 2 and any(h["steps"] % 8 for h in clf.history_)     # validated inside epochs too
    kept = clf.evaluate(TEXTS[1::2], LABELS[1::2]).f1("macro")
    assert kept == pytest.approx(max(scores))          # the best validated weights, not the last step's


def test_the_logistic_head_is_scikit_learns_logistic_regression_folded_into_a_linear_head(world, tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    _, enc, _, _ = world
    with feature_cache() as store:
        clf = TextClassifier(model=enc, regime="head-only", head="linear", head_fit="logistic", progress=False,
                             temperature_scaling=False)
        clf.fit(TEXTS[::2], LABELS[::2], eval_texts=TEXTS[1::3], eval_labels=LABELS[1::3])
        mlp = TextClassifier(model=enc, regime="head-only", head="mlp", epochs=2, progress=False)
        mlp.fit(TEXTS[::2], LABELS[::2], eval_texts=TEXTS[1::3], eval_labels=LABELS[1::3])
        assert len(store) == 2              # train and validation features, encoded once for both fits
    train_feats = next(f for f in store.values() if len(f) == len(TEXTS[::2]))
    x = train_feats.double().numpy()
    y = np.array([clf.labels_.index(lab) for lab in LABELS[::2]])
    c = (0.1, 1.0, 10.0)[clf.best_epoch_ - 1]
    scaler = StandardScaler().fit(x)
    ref = LogisticRegression(C=c, max_iter=1000, random_state=0).fit(scaler.transform(x), y)
    ours = clf.predict_proba(TEXTS[::2])     # within what its validation texts earn (headswap.decisions.earned)
    # within L-BFGS's tolerance of a cold fit: ours starts from the cross-validation folds' mean (1.3e-4 apart here)
    assert np.allclose(ours, clf.temperature_step_.earned.clip(ref.predict_proba(scaler.transform(x))), atol=5e-4)
    clf.save(tmp_path / "m")
    assert np.array_equal(load_model(tmp_path / "m", progress=False).predict_proba(TEXTS), clf.predict_proba(TEXTS))


def test_the_logistic_head_refuses_what_it_cannot_fit(world):
    _, enc, _, _ = world
    for bad in ({"regime": "full", "head": "linear"}, {"regime": "head-only", "head": "mlp"}):
        with pytest.raises(ConfigError, match="head_fit 'logistic'"):
            TextClassifier(model=enc, head_fit="logistic", **bad).fit(TEXTS, LABELS)


def _probes(monkeypatch):
    seen = []
    real = headswap.trials.measure.probe_timing

    def probe(p, *a, **kw):
        seen.append((p.strategy, p.regime))
        return real(p, *a, **kw)

    monkeypatch.setattr(headswap.trials.measure, "probe_timing", probe)
    return seen


def test_rungs_of_one_cost_share_a_probe_and_every_rung_ran_or_says_why(world, tmp_path, monkeypatch):
    _, enc, _, data = world
    probes = _probes(monkeypatch)
    results = auto(data, 600, models=[enc], strategies="encoder-mlp,similarity", out=tmp_path, progress=False,
                   log=lambda _: None, lr_search=False, more_epochs=False)
    cands = [c for c in results["auto"]["candidates"][1:] if c["tier"] != "blend"]     # (near ties blend after)
    assert [(c["tier"], c.get("rung")) for c in cands[:3]] == [("frozen", f"{name} head") for name, _, _ in FROZEN_HEADS]
    assert {c["tier"] for c in cands[3:]} == {"fine-tune"}
    assert all(c["status"] == "ran" and c["estimated_seconds"] >= 0 for c in cands), cands
    # one probe for each full fine-tuning (similarity also encodes its classes), one for the cached-partial rung; none
    # for the three frozen heads: on 60 texts trying the first costs what timing it would (tests/test_auto_small.py)
    assert sorted(probes) == [("encoder-mlp", "full"), ("encoder-mlp", "partial"), ("similarity", "full")], probes


def test_a_rung_that_does_not_fit_is_skipped_with_its_reason(world, tmp_path, monkeypatch):
    _, enc, cau, data = world
    monkeypatch.setattr(Costs, "estimate", lambda self, rung, epochs=None: 1e5 if rung.tier == "frozen" else 1.0)
    monkeypatch.setattr(Costs, "epoch_seconds", lambda self, rung: 1e5)
    # 100 s: a probe may take a tenth (an encoder's is guessed at 10 s)
    results = auto(data, 100, models=[enc, cau], strategies="encoder-mlp,slm-logits", out=tmp_path, progress=False,
                   log=lambda _: None, lr_search=False, more_epochs=False)
    by_rung = {(c["model_name"], c["tier"], c.get("rung")): c for c in results["auto"]["candidates"][1:]}
    frozen = by_rung[("tiny-enc", "frozen", "logistic head")]
    assert frozen["status"] == "skipped" and frozen["reason"].startswith("estimated 27.8 h, over"), frozen
    cached = by_rung[("tiny-enc", "fine-tune", "partial-cached")]  # an arm: a quarter of a 27.8 h epoch is over a third
    assert cached["status"] == "skipped" and "over a third of the budget" in cached["reason"], cached
    full = by_rung[("tiny-enc", "fine-tune", "full")]      # the same model's dearer arm: not even timed
    assert full["status"] == "skipped" and full["reason"].startswith("not timed: ") and "too dear" in full["reason"]
    lora = by_rung[("tiny-causal", "causal", "lora")]
    assert lora["status"] == "skipped" and lora["reason"], lora
    assert all(c.get("reason") for c in results["auto"]["candidates"][1:] if c["status"] == "skipped")
    md = (tmp_path / "results.md").read_text()
    assert "estimated 27.8 h, over" in md


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_budget_accounting_on_a_fake_clock(world, tmp_path, monkeypatch):
    """Frozen rungs cost 10 s, a fine-tuning epoch 60 s, and a slice takes the seconds it was given: the three arms
    (the full rung and its two learning-rate neighbours) halve, the leader trains on, and the run ends within
    budget with no arm but the leader holding over a third of it."""
    import headswap.auto.runners
    _, enc, _, data = world
    clock = FakeClock()
    budget = 600.0
    level = {3e-5: 1.6, 1e-4: 1.8, 1e-5: 1.4}     # over the baseline's 1.0 at most
    slices = []

    monkeypatch.setattr(Costs, "estimate", lambda self, rung, epochs=None: 10.0 if rung.tier == "frozen" else 60.0)
    monkeypatch.setattr(Costs, "epoch_seconds", lambda self, rung: 10.0 if rung.tier == "frozen" else 60.0)
    real_rung = headswap.auto.climb.train_one

    def train_one(rung, settings, entry, *a, **kw):
        clf = real_rung(rung, settings, entry, *a, **kw)
        clock.now += 10.0
        return clf

    real_slice = headswap.auto.runners.train_slice

    def train_slice(rung, settings, train, validation, seen):
        rate = settings.get("body_lr") or 3e-5
        n = sum(1 for r, _ in slices if r == rate)
        clf, result = real_slice(rung, settings, train, validation, seen) if n == 0 else (None, {"history_length": 0})
        slices.append((rate, settings["time_limit"]))
        took = settings["time_limit"] + 1.0
        clock.now += took       # a slice uses its whole limit (and a second of loading)
        result.update(points=[(took, level[rate] + 0.01 * n)], finished=False)     # every arm still climbing
        return clf, result

    monkeypatch.setattr(headswap.auto.climb, "train_one", train_one)
    monkeypatch.setattr(headswap.auto.runners, "train_slice", train_slice)
    # the arms here are the full rung's three rates: no cached-partial rung (it needs a block count) beside them
    monkeypatch.setattr(headswap.auto.ladder, "_blocks", lambda model: 0)
    results = auto(data, budget, models=[enc], strategies="encoder-mlp", out=tmp_path, progress=False,
                   log=lambda _: None, clock=clock, blend=False)
    a = results["auto"]
    arms = {(c.get("tuned") or {}).get("body_lr", 3e-5): c for c in a["candidates"] if c.get("halving")}
    assert set(arms) == {3e-5, 1e-4, 1e-5}
    assert arms[1e-5]["stopped_because"] == "halved" and len(arms[1e-5]["slices"]) == 1     # the worst: one slice
    lead = arms[1e-4]
    assert [s["round"] for s in lead["slices"]][-1] == "lead" and lead["stopped_because"] == "budget"
    assert lead["seconds"] > max(arms[r]["seconds"] for r in (3e-5, 1e-5))
    assert all(c["seconds"] <= budget / 3 + 1e-6 for r, c in arms.items() if r != 1e-4)
    assert lead.get("winner") and a["winner"]["tuned"] == {"body_lr": 1e-4}
    assert 0.8 * budget <= a["elapsed_seconds"] <= 1.05 * budget, a["elapsed_seconds"]
    assert a["budget_used"] == pytest.approx(a["elapsed_seconds"] / budget)
    assert [len(c["curve"]) for c in arms.values()] == [len(c["slices"]) for c in arms.values()]
    md = (tmp_path / "results.md").read_text()
    assert "## Where the budget went" in md and "![validation of each arm against time](arms.png)" in md
    assert (tmp_path / "arms.png").stat().st_size > 1000
    html = (tmp_path / "report.html").read_text()
    assert 'id="arms"' in html and "halved" in html and "data:image/png;base64," in html


def test_a_negative_budget_is_one_line(capsys):
    from headswap.cli.parser import main
    with pytest.raises(SystemExit) as e:
        main(["auto", "--data", "x", "--budget", "-5m"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "more than zero" in err[-1] and "expected one argument" not in err[-1]


def test_a_probe_that_overruns_its_limit_says_so(world):
    from headswap.auto.ladder import Rung
    from headswap.trials.measure import ProbeTooSlow, probe_timing
    from headswap.data.load import from_lists
    _, enc, _, _ = world
    rung = Rung(enc, "encoder", "encoder-mlp", "full", 1)
    data = from_lists(TEXTS, LABELS)
    probe = probe_timing(rung, data, {"progress": False, "batch_size": 4}, batches=2, time_limit=60)
    assert probe["train_batch_seconds"] > 0 and probe["inference_seconds_per_text"] > 0
    with pytest.raises(ProbeTooSlow, match="took over"):
        probe_timing(rung, data, {"progress": False, "batch_size": 4}, batches=2, time_limit=1e-6)


def test_auto_with_out_of_scope_reports_the_reject_figures_on_test(world, tmp_path, monkeypatch):
    _, enc, _, data = world
    folder = with_out_of_scope(data, tmp_path / "data")
    real = headswap.auto.runners.slice_points         # the arm's validation points say it beats the baseline
    monkeypatch.setattr(headswap.auto.runners, "slice_points", lambda *a: [(t, v + 1.0) for t, v in real(*a)])
    results = auto(folder, 600, models=[enc], strategies="encoder-mlp", out=tmp_path / "out", progress=False,
                   log=lambda _: None, lr_search=False, more_epochs=False, regime="full", out_of_scope="oos")
    winner = next(r for r in results["rows"] if r["winner"])
    block = winner["out_of_scope"]
    assert block["label"] == "oos" and block["oos_texts"] == 4 and 0 <= block["oos_recall"] <= 1
    assert set(block["scores"]) >= {"softmax", "energy"}
    base = next(r for r in results["rows"] if r["baseline"])["out_of_scope"]    # TF-IDF: the softmax rule too
    assert base["label"] == "oos" and base["oos_texts"] == 4 and list(base["scores"]) == ["softmax"]


def test_a_rung_that_fails_is_recorded_and_the_ladder_goes_on(world, tmp_path, monkeypatch):
    _, enc, cau, data = world
    real = headswap.trials.measure.probe_timing

    def probe(p, *a, **kw):
        if p.strategy == "slm-logits":      # e.g. two classes whose answers share a first token
            raise ConfigError("classes 'bill_balance' and 'bill_due' share the first token 'bill'")
        return real(p, *a, **kw)

    monkeypatch.setattr(headswap.trials.measure, "probe_timing", probe)
    results = auto(data, 600, models=[enc, cau], strategies="encoder-mlp,slm-logits,slm-letters", out=tmp_path,
                   progress=False, log=lambda _: None, lr_search=False, more_epochs=False, regime="full")
    by = {c["strategy"]: c for c in results["auto"]["candidates"][1:]}
    assert by["slm-logits"]["status"] == "failed" and "share the first token" in by["slm-logits"]["error"]
    assert by["slm-logits"]["reason"] == "failed while timing a few batches"
    assert by["slm-letters"]["status"] == "ran" and by["encoder-mlp"]["status"] == "ran"


@pytest.mark.usefixtures("fresh_warnings")
def test_a_probe_says_nothing_of_its_texts_the_real_fit_will_say(world, caplog):
    """Truncated texts are said once, by the fit that trains on them: the probe's few batches and its timed
    predictions (2, then up to 64 texts: one line each before) stay silent."""
    from headswap.auto.ladder import Rung
    from headswap.trials.measure import probe_timing
    from headswap.data.load import from_lists
    _, enc, _, _ = world
    data = from_lists(TEXTS, LABELS)
    with caplog.at_level("WARNING"):
        probe_timing(Rung(enc, "encoder", "encoder-mlp", "full", 1), data,
                     {"progress": False, "batch_size": 4, "max_length": 3}, batches=2, time_limit=60)
    assert not [r for r in caplog.records if "truncated" in r.getMessage()]


class _Encoder:
    def encode(self, texts):          # a text of n words is n tokens
        return [{"input_ids": [1] * len(t.split())} for t in texts]


class _Fitted:
    eval_batch_size = 4
    encoder_ = _Encoder()


def test_the_probes_inference_time_is_scaled_to_a_pass_in_order_of_length():
    """The timed call pads each batch of 4 to its longest text; a pass over the data set pads to about each text's
    own length, so a text costs the mean length over the padded length per text of the timed call."""
    from headswap.trials.measure import padding_share

    timed = ["a " * 2] * 3 + ["a " * 10] + ["a " * 4] * 4        # batches padded to 10 and 4: 56 tokens, 7 a text
    data = ["a " * 2, "a " * 5] * 50                                # 3.5 tokens a text
    assert padding_share(_Fitted(), timed, data) == pytest.approx(3.5 / 7)
    # a batch's fixed cost stays: never under a quarter, and never more than the timed call
    assert padding_share(_Fitted(), ["a " * 40] + ["a"] * 3, ["a"] * 10) == 0.25
    assert padding_share(_Fitted(), ["a"] * 4, ["a " * 9] * 10) == 1.0


def test_the_probe_reports_inference_scaled_by_its_padding(world, monkeypatch):
    """probe_timing's per-text inference time is what it timed times padding_share of the timed texts against the
    training texts."""
    from headswap.data.load import from_lists
    _, enc, _, _ = world
    rungs, _ = plan_ladder({enc: "encoder"}, ["encoder-mlp"], 1, regime="full")
    data = from_lists(TEXTS, LABELS)
    calls = []
    monkeypatch.setattr(headswap.trials.measure, "padding_share", lambda clf, timed, texts: calls.append(
        (list(timed), list(texts))) or 0.0)
    probe = headswap.trials.measure.probe_timing(rungs[0], data, {"progress": False, "batch_size": 4})
    assert probe["inference_seconds_per_text"] == 0.0
    (timed, texts), = calls
    assert set(timed) <= set(TEXTS) and len(timed) >= 2 and texts == list(data.texts)


def test_a_strategy_whose_package_is_missing_is_skipped_with_its_install_command(monkeypatch):
    """A wheel installed without the static extra: auto's static rung failed while timing ("No module named
    'model2vec'"); it is now skipped at planning, saying what to install, as bench does."""
    import sys

    monkeypatch.setitem(sys.modules, "model2vec", None)     # import model2vec raises ImportError
    rungs, skipped = plan_ladder({"minilm": "encoder"}, ["static", "encoder-mlp"], 1)
    assert all(r.strategy != "static" for r in rungs) and any(r.strategy == "encoder-mlp" for r in rungs)
    [static] = [s for s in skipped if s["strategy"] == "static"]
    assert "needs model2vec" in static["reason"] and "pip install 'headswap[static]'" in static["reason"]
