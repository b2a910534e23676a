"""Decisions leaned toward the rarer classes (headswap.decisions.balance): tuned for macro F1 on validation and kept
only where held-out folds agree; the step that applies it, saved and reloaded by a classifier and a blend, and
what predict, evaluate and batch prediction answer with it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import f1_score
from test_bench import HAM, SPAM
from test_blend import members  # noqa: F401

from headswap.baseline.blend import Blend, select
from headswap.classifier.estimator import load_model
from headswap.decisions import balance
from headswap.decisions.postprocess import Balance
from headswap.errors import HeadswapError
from headswap.jobs.predictions import decisions

pytestmark = pytest.mark.usefixtures("one_thread")


def shy_of_the_rare_class(n, seed, rare=0.25):
    """Probabilities of a model that learnt the classes' shares: a rare class's texts get a probability that
    leans toward it but seldom past 0.5, so the argmax misses many of them."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rare).astype(int)
    p_rare = np.clip(np.where(y == 1, rng.normal(0.45, 0.15, n), rng.normal(0.15, 0.1, n)), 0.01, 0.99)
    return np.column_stack([1 - p_rare, p_rare]), y, np.array([1 - rare, rare])


def _leans(probs, y, prior, seed=0):
    """(the tau tuned on all the texts, whether held-out folds prefer the lean to the argmax)."""
    return balance.best_tau(probs, y, prior), select([probs], y, ["a", "b"], seed=seed, prior=prior).lean_pays


def test_leaning_toward_a_rare_class_is_kept_and_raises_macro_f1_on_texts_it_never_saw():
    probs, y, prior = shy_of_the_rare_class(600, 0)
    tau, pays = _leans(probs, y, prior)
    assert tau > 0 and pays
    chosen = select([probs], y, ["a", "b"], prior=prior)
    assert chosen.alone_leaned_out_of_fold > chosen.alone_out_of_fold > 0 and chosen.out_of_fold is None
    fresh, y2, _ = shy_of_the_rare_class(5000, 1)
    leaned = f1_score(y2, balance.decide(fresh, prior, tau), average="macro")
    assert leaned > f1_score(y2, fresh.argmax(1), average="macro") + 0.02


def test_on_equal_classes_or_decisions_the_argmax_gets_right_nothing_leans():
    probs, y, _ = shy_of_the_rare_class(300, 2)
    assert _leans(probs, y, np.array([0.5, 0.5])) == (0.0, False)     # equal shares: every tau decides alike
    right = np.eye(2)[y] * 0.9 + 0.05
    assert _leans(right, y, np.array([0.75, 0.25])) == (0.0, False)


def test_a_lean_that_only_fits_validations_noise_is_not_kept():
    # calibrated probabilities of equal-quality classes: the argmax is already about the best decision, and the tau
    # that validation's draw prefers does not hold on its held-out folds
    rng = np.random.default_rng(3)
    leaned = kept = 0
    for seed in range(20):
        y = (rng.random(200) < 0.4).astype(int)
        p = np.clip(np.where(y == 1, rng.normal(0.7, 0.2, 200), rng.normal(0.3, 0.2, 200)), 0.01, 0.99)
        tau, pays = _leans(np.column_stack([1 - p, p]), y, np.array([0.6, 0.4]), seed=seed)
        leaned, kept = leaned + (tau > 0), kept + (tau > 0 and pays)
    assert leaned >= 9 and kept <= leaned // 2      # validation alone would lean in half the draws


def test_a_blends_lean_is_judged_against_the_blend_out_of_fold_not_its_weights_picked_on_all_the_texts():
    probs, y, prior = shy_of_the_rare_class(600, 5)
    rng = np.random.default_rng(6)
    other = np.clip(probs + rng.normal(0, 0.15, probs.shape), 0.01, None)
    other /= other.sum(1, keepdims=True)
    chosen = select([probs, other], y, ["a", "b"], prior=prior)
    plain = select([probs, other], y, ["a", "b"])
    assert (chosen.counts, chosen.out_of_fold, chosen.alone_out_of_fold) == (plain.counts, plain.out_of_fold,
                                                                            plain.alone_out_of_fold)
    assert plain.leaned_out_of_fold is None and plain.alone_leaned_out_of_fold is None
    assert chosen.alone_leaned_out_of_fold is not None
    assert (chosen.leaned_out_of_fold is not None) == (sum(c > 0 for c in chosen.counts) > 1)
    assert chosen.lean_pays == ((chosen.leaned_out_of_fold > chosen.out_of_fold) if chosen.kept else
                                (chosen.alone_leaned_out_of_fold > chosen.alone_out_of_fold))


def test_the_decision_is_the_argmax_of_p_over_prior_to_the_tau():
    rng = np.random.default_rng(4)
    probs, prior = rng.dirichlet(np.ones(4), 50), np.array([0.5, 0.3, 0.15, 0.05])
    for tau in (0.0, 0.5, 1.0):
        np.testing.assert_array_equal(balance.decide(probs, prior, tau), (probs / prior ** tau).argmax(1))


def test_the_step_saves_only_when_set_and_reloads_exactly(tmp_path):
    step = Balance()
    assert step.config() == {} and step.adjust(np.eye(2)) is not None
    step.set(0.7, [0.8, 0.2])
    again = Balance.load(tmp_path, json.loads(json.dumps(step.config())))
    assert again.balance == {"tau": 0.7, "prior": [0.8, 0.2]}
    probs = np.array([[0.7, 0.3], [0.9, 0.1]])
    np.testing.assert_array_equal(again.adjust(probs).argmax(1), balance.decide(probs, [0.8, 0.2], 0.7))
    assert again.adjust(probs).argmax(1).tolist() == [1, 0]
    assert Balance().set(0.0, [0.8, 0.2]).balance is None      # tau 0 is the argmax: nothing to save


@pytest.fixture(scope="module")
def spam(members):        # noqa: F811  (test_blend's classifier and TF-IDF model, and the texts they learnt)
    texts = [f"{SPAM[i % 3]} {i}" for i in range(12)] + [f"{HAM[i % 4]} {i}" for i in range(24)]
    return (*members, texts, ["spam"] * 12 + ["ham"] * 24)


def _lean_far(clf, texts) -> list[float]:
    """A lean so strong that the class clf answers least often wins wherever it has some probability; the prior."""
    least = int(np.argmin(np.bincount(clf.predict_proba(texts).argmax(1), minlength=2)))
    prior = [0.001 if k == least else 0.999 for k in range(2)]
    clf.balance_step_.set(1.5, prior)
    return prior


def test_a_classifier_predicts_evaluates_saves_and_reloads_its_lean(spam, tmp_path):
    root, model, _, texts, labels = spam
    before = model.predict(texts)
    prior = _lean_far(model, texts)
    try:
        probs = model.predict_proba(texts)
        expected = model.classes_[balance.decide(probs, prior, 1.5)]
        assert not np.array_equal(expected, before)       # the lean changed decisions
        np.testing.assert_array_equal(model.predict(texts), expected)
        m = model.evaluate(texts, labels)
        assert m.f1("macro") == pytest.approx(f1_score(labels, expected, average="macro"))
        assert decisions(model, probs) == ("label", [str(v) for v in expected])      # predict, serve, batch
        model.save(tmp_path / "leaned")
        again = load_model(tmp_path / "leaned", progress=False)
        assert again.balance_ == model.balance_
        np.testing.assert_array_equal(again.predict(texts), expected)
    finally:
        model.balance_step_.set(0, None)
    np.testing.assert_array_equal(model.predict(texts), before)


def test_a_blend_predicts_evaluates_saves_and_reloads_its_lean(spam, tmp_path):
    root, model, tfidf, texts, labels = spam
    blend = Blend([(model, 0.6), (tfidf, 0.4)])
    prior = _lean_far(blend, texts)
    probs = blend.predict_proba(texts)
    expected = blend.classes_[balance.decide(probs, prior, 1.5)]
    assert not np.array_equal(expected, blend.classes_[probs.argmax(1)])
    np.testing.assert_array_equal(blend.predict(texts), expected)
    assert blend.evaluate(texts, labels).f1("macro") == pytest.approx(f1_score(labels, expected, average="macro"))
    assert decisions(blend, probs) == ("label", [str(v) for v in expected])
    blend.save(tmp_path / "blend")
    again = load_model(tmp_path / "blend", progress=False)
    assert again.balance_step_.balance == blend.balance_step_.balance
    np.testing.assert_array_equal(again.predict(texts), expected)


@pytest.mark.parametrize("value, says", [
    ({"tau": -1, "prior": [0.5, 0.5]}, "balance must be"),
    ({"tau": 1, "prior": [1.0]}, "balance must be"),
    ({"tau": 1, "prior": [0.5, 0.5], "extra": 1}, "balance must be"),
    ("strong", "balance must be"),
])
def test_a_corrupt_lean_in_a_saved_config_is_one_clear_error(spam, tmp_path, value, says):
    root, model, *_ = spam
    model.save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "headswap_config.json").read_text())
    config["balance"] = value
    (tmp_path / "m" / "headswap_config.json").write_text(json.dumps(config))
    with pytest.raises(HeadswapError, match=says):
        load_model(tmp_path / "m", progress=False)


def test_a_lean_on_a_model_with_a_reject_option_is_refused(spam, tmp_path):
    root, model, *_ = spam
    model.save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "headswap_config.json").read_text())
    config["balance"] = {"tau": 1, "prior": [0.5, 0.5]}
    config["params"]["out_of_scope"] = "ham"
    (tmp_path / "m" / "headswap_config.json").write_text(json.dumps(config))
    with pytest.raises(HeadswapError, match="balance is set but the model is tuned to reject"):
        load_model(tmp_path / "m", progress=False)
