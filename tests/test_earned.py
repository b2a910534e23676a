"""Probabilities within the certainty a model earned (issue 68, headswap.decisions.earned): a model checked on n
validation texts gives no probability above 1 - 1/(n + 2) and none below 1/(n + 2) spread over the other classes;
the argmax (every prediction) does not change; the bound is saved, so a reloaded model gives the same numbers; the
TF-IDF model and a blend that auto ships are bounded the same way."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.baseline.blend import Blend
from headswap.baseline.tfidf import TfidfClassifier
from headswap.classifier.estimator import load_model
from headswap.decisions.earned import KEY, Earned
from headswap.decisions.postprocess import Temperature
from headswap.decisions.targets import MultiLabel
from headswap.errors import HeadswapError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_issue_s_certainty_becomes_what_30_texts_earn():
    bound = Earned.checked_on(30)
    assert bound.eps == 1 / 32 and Earned.checked_on(0) is None
    np.testing.assert_allclose(bound.clip([[1.05e-32, 1.0]]), [[1 / 32, 31 / 32]], rtol=1e-12)


def test_the_clip_keeps_every_row_s_argmax_order_and_sum_and_leaves_rows_inside_alone():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 5)) * rng.choice([1, 30, 300], size=(500, 1))    # from unsure to far too sure
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    bound = Earned.checked_on(40)
    clipped = bound.clip(probs)
    assert clipped.max() <= 1 - bound.eps + 1e-12 and clipped.min() >= bound.eps / 4 - 1e-12
    np.testing.assert_allclose(clipped.sum(1), 1, atol=1e-12)
    np.testing.assert_array_equal(clipped.argmax(1), probs.argmax(1))
    order = np.argsort(-probs, 1)       # no class goes ahead of one it was behind (those far below the floor tie)
    assert (np.diff(np.take_along_axis(clipped, order, 1), axis=1) <= 0).all()
    inside = probs.min(1) >= bound.eps / 4
    assert inside.any() and (~inside).any() and probs.max() > 1 - 1e-9       # both kinds of row were there
    np.testing.assert_array_equal(clipped[inside], probs[inside])
    multi = bound.clip(probs, multi_label=True)      # one probability per label: each within [eps, 1 - eps]
    np.testing.assert_array_equal(multi, np.clip(probs, bound.eps, 1 - bound.eps))


def test_the_temperature_step_saves_its_bound_and_a_damaged_one_is_refused():
    step = Temperature(0.05).checked_on(6)
    logits = np.array([[9.0, -9.0], [0.1, 0.0]])
    assert step.apply(logits).max() == pytest.approx(7 / 8)
    config = json.loads(json.dumps(step.config()))
    assert config[KEY] == {"validation_texts": 6, "eps": 0.125}
    np.testing.assert_array_equal(Temperature.load(None, config).apply(logits), step.apply(logits))
    assert Temperature.load(None, {"temperature": 0.05}).earned is None        # saved before the bound: as it was
    multi = Temperature([0.05, 0.05], MultiLabel()).checked_on(6)
    np.testing.assert_allclose(multi.apply(logits)[0], [7 / 8, 1 / 8])
    for bad in ({"validation_texts": 0, "eps": 0.5}, {"validation_texts": 6}, [6, 0.125], {"validation_texts": 6,
                                                                                          "eps": 2.0}):
        with pytest.raises(HeadswapError, match=f"^{KEY} must be"):
            Temperature.load(None, {"temperature": 1.0, KEY: bad})


TEXTS = ["win cash now", "free call now", "claim prize", "see you at noon", "ok home", "running late"] * 4
LABELS = ["spam", "spam", "spam", "ham", "ham", "ham"] * 4
VAL_TEXTS, VAL_LABELS = TEXTS[:6], LABELS[:6]      # texts it trained on: it separates them
NEW = ["win a free prize now", "see you at home", "call now", "late again", "cash prize claim", "ok noon"]


@pytest.fixture(scope="module")
def sure(tmp_path_factory):
    """A model checked on 6 validation texts it separates: its temperature alone would make it certain."""
    root = tmp_path_factory.mktemp("earned")
    enc = make_tiny_encoder(root / "enc")
    clf = TextClassifier(model=str(enc), strategy="encoder-mlp", epochs=8, head_lr=1e-2, progress=False)
    return clf.fit(TEXTS, LABELS, VAL_TEXTS, VAL_LABELS), root


def test_a_model_checked_on_six_texts_never_says_more_than_seven_in_eight(sure):
    clf, _ = sure
    logits = clf.decision_function(NEW + TEXTS)
    raw = clf.temperature_step_.target.probabilities(logits, clf.temperature_)
    assert raw.max() > 1 - 1e-3           # what predict_proba gave before the bound
    probs = clf.predict_proba(NEW + TEXTS)
    assert probs.max() <= np.float32(7 / 8) and probs.min() >= np.float32(1 / 8)
    np.testing.assert_array_equal(probs.argmax(1), logits.argmax(1))
    assert clf.predict(NEW + TEXTS).tolist() == clf.classes_[logits.argmax(1)].tolist()
    assert clf.decide(probs).tolist() == clf.predict(NEW + TEXTS).tolist()
    clf.calibrate(TEXTS, LABELS)          # calibrated again on 24 texts: bounded by those
    assert clf.temperature_step_.earned == Earned(24, 1 / 26)
    assert clf.predict_proba(NEW + TEXTS).max() <= np.float32(25 / 26)
    clf.calibrate(VAL_TEXTS, VAL_LABELS)


def test_the_bound_is_saved_and_reloads_exactly(sure, tmp_path):
    clf, _ = sure
    folder = clf.save(tmp_path / "m")
    assert json.loads((folder / "headswap_config.json").read_text())[KEY] == {"validation_texts": 6, "eps": 0.125}
    again = TextClassifier.load(folder, progress=False)
    np.testing.assert_array_equal(again.predict_proba(NEW), clf.predict_proba(NEW))


def test_tfidf_and_a_blend_are_bounded_as_auto_ships_them(sure, tmp_path):
    clf, _ = sure
    tfidf = TfidfClassifier(C=1e6).fit(TEXTS, LABELS)
    assert tfidf.predict_proba(NEW).max() > 1 - 1e-3
    tfidf.checked_on(len(VAL_TEXTS))
    probs = tfidf.predict_proba(NEW)
    assert probs.max() <= 7 / 8 + 1e-12 and (probs.argmax(1) == tfidf.model_.predict_proba(
        tfidf.features_.transform(NEW)).argmax(1)).all()
    again = load_model(tfidf.save(tmp_path / "tfidf"))
    np.testing.assert_array_equal(again.predict_proba(NEW), probs)
    assert not hasattr(TfidfClassifier(C=1e6).fit(TEXTS, LABELS), "earned_")     # a fresh fit is checked on nothing
    blend = Blend([(clf, 0.5), (TfidfClassifier(C=1e6).fit(TEXTS, LABELS), 0.5)])   # one member unbounded
    assert blend.predict_proba(NEW).max() <= np.float32(7 / 8)
    loaded = load_model(blend.save(tmp_path / "blend"), progress=False)
    np.testing.assert_array_equal(loaded.predict_proba(NEW), blend.predict_proba(NEW))
