"""Temperature scaling (issue 13): the fit checked against a temperature worked out by hand, the measures
against their definitions, and the temperature fitted on validation data, used by predict_proba, saved,
reloaded and reported by `headswap eval` with a reliability diagram."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.decisions.calibration import (brier_score, expected_calibration_error, fit_temperature, reliability_bins,
                                  report)
from headswap.errors import HeadswapError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_temperature_matches_the_hand_computed_optimum():
    # Three texts, logits (d, 0): two of class 0, one of class 1. NLL is minimal where the predicted
    # probability of class 0, sigmoid(d / T), equals the observed 2/3: d / T = ln 2.
    for d in (1.0, 3.0):
        t = fit_temperature([[d, 0.0]] * 3, [0, 0, 1])
        assert t == pytest.approx(d / math.log(2), rel=1e-4)


def test_temperature_sharpens_underconfident_logits_and_keeps_every_prediction():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (400,), generator=g)
    sharp = torch.randn(400, 4, generator=g) + 6 * torch.nn.functional.one_hot(y, 4)
    t = fit_temperature(sharp / 5, y)        # logits shrunk 5x: far too unsure of themselves
    assert t < 0.5
    assert torch.equal((sharp / 5 / t).argmax(1), (sharp / 5).argmax(1))


def test_ece_and_brier_by_hand():
    probs = np.array([[0.95, 0.05], [0.95, 0.05], [0.6, 0.4], [0.3, 0.7]])
    y = np.array([0, 1, 0, 1])
    # Bins of width 1/15: 0.95 -> bin 14 (2 texts, accuracy 1/2), 0.6 -> bin 8 (1 text, right), 0.7 -> bin 10
    # (1 text, right). ECE = 2/4 |0.5 - 0.95| + 1/4 |1 - 0.6| + 1/4 |1 - 0.7|.
    assert expected_calibration_error(probs, y) == pytest.approx(0.5 * 0.45 + 0.25 * 0.4 + 0.25 * 0.3)
    # Brier: per text, sum over classes of (p - onehot)^2.
    per_text = [2 * 0.05 ** 2, 2 * 0.95 ** 2, 2 * 0.4 ** 2, 2 * 0.3 ** 2]
    assert brier_score(probs, y) == pytest.approx(sum(per_text) / 4)
    bins = reliability_bins(probs, y)
    assert [b["count"] for b in bins] == [0] * 8 + [1, 0, 1, 0, 0, 0, 2]
    assert bins[14]["accuracy"] == 0.5 and bins[14]["confidence"] == pytest.approx(0.95)


def test_binary_brier_is_twice_scikit_learns():
    from sklearn.metrics import brier_score_loss
    rng = np.random.default_rng(0)
    p1 = rng.random(50)
    y = rng.integers(0, 2, 50)
    probs = np.stack([1 - p1, p1], 1)
    assert brier_score(probs, y) == pytest.approx(2 * brier_score_loss(y, p1))


def test_report_before_and_after():
    logits = [[2.0, 0.0]] * 3
    r = report(logits, [0, 0, 1], fit_temperature(logits, [0, 0, 1]))
    assert r["after"]["nll"] < r["before"]["nll"]
    assert r["after"]["ece"] == pytest.approx(0, abs=1e-4)     # p(class 0) = 2/3 = its accuracy
    assert "after" not in report(logits, [0, 0, 1], None)


# ---- through TextClassifier, the saved model and the command line ---------------------------------------------

TEXTS = ["win cash now", "free call now", "claim prize", "see you at noon", "ok home", "running late"] * 4
LABELS = ["spam", "spam", "spam", "ham", "ham", "ham"] * 4
VAL_TEXTS = ["win a prize", "call now free", "see you home", "late again", "cash now", "ok noon"]
VAL_LABELS = ["spam", "spam", "ham", "ham", "spam", "ham"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    root = tmp_path_factory.mktemp("cal")
    enc = make_tiny_encoder(root / "enc")
    # The tiny model's weights are seeded (tiny_models): unseeded, they came from whatever tests ran first, and on
    # some orders the temperature hit its bound on both text sets, so they could not be told apart.
    clf = TextClassifier(model=str(enc), epochs=2, progress=False).fit(TEXTS, LABELS, VAL_TEXTS, VAL_LABELS)
    return clf, root


def test_fit_calibrates_on_the_validation_data_and_predict_proba_uses_it(fitted):
    clf, _ = fitted
    index = {lab: i for i, lab in enumerate(clf.labels_)}
    logits = clf.decision_function(VAL_TEXTS)
    assert clf.temperature_ == pytest.approx(fit_temperature(logits, [index[v] for v in VAL_LABELS]), rel=1e-4)
    expected = torch.softmax(torch.from_numpy(clf.decision_function(TEXTS)) / clf.temperature_, -1).numpy()
    assert np.allclose(clf.predict_proba(TEXTS), expected, atol=1e-6)
    assert clf.temperature_ != pytest.approx(1.0, abs=1e-3)


def test_calibrate_refits_on_given_texts_and_no_temperature_scaling_leaves_softmax(fitted):
    clf, root = fitted
    before = clf.temperature_
    clf.calibrate(TEXTS, LABELS)
    assert clf.temperature_ != pytest.approx(before, rel=1e-3)
    clf.calibrate(VAL_TEXTS, VAL_LABELS)
    assert clf.temperature_ == pytest.approx(before, rel=1e-4)
    with pytest.raises(HeadswapError, match="calibration labels never seen in training: \\['eggs'\\]"):
        clf.calibrate(["x"], ["eggs"])
    plain = TextClassifier(model=str(root / "enc"), epochs=1, progress=False, temperature_scaling=False)
    plain.fit(TEXTS, LABELS, VAL_TEXTS, VAL_LABELS)
    assert plain.temperature_ is None
    assert np.allclose(plain.predict_proba(VAL_TEXTS),
                       torch.softmax(torch.from_numpy(plain.decision_function(VAL_TEXTS)), -1).numpy())


def test_the_temperature_is_saved_reloaded_and_a_corrupt_one_is_refused(fitted, tmp_path):
    clf, _ = fitted
    clf.save(tmp_path / "m")
    again = TextClassifier.load(tmp_path / "m", progress=False)
    assert again.temperature_ == clf.temperature_
    assert np.allclose(again.predict_proba(TEXTS), clf.predict_proba(TEXTS), atol=1e-6)
    cfg_file = tmp_path / "m" / "headswap_config.json"
    for bad in (-1.0, 0, "hot"):
        cfg = json.loads(cfg_file.read_text())
        cfg["temperature"] = bad
        cfg_file.write_text(json.dumps(cfg))
        with pytest.raises(HeadswapError, match="temperature must be a number > 0"):
            TextClassifier.load(tmp_path / "m", progress=False)


def test_eval_reports_calibration_and_draws_the_reliability_diagram(fitted, tmp_path):
    clf, _ = fitted
    clf.save(tmp_path / "m")
    data = tmp_path / "test.csv"
    data.write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in zip(VAL_TEXTS, VAL_LABELS)))
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "eval", "--model-dir", str(tmp_path / "m"), "--data",
                        str(data), "--out", str(tmp_path / "eval"), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"temperature {clf.temperature_:.3f}" in r.stdout
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    cal = metrics["extra"]["calibration"]
    assert cal["temperature"] == pytest.approx(clf.temperature_)
    assert sum(b["count"] for b in cal["reliability_after"]) == len(VAL_TEXTS)
    png = (tmp_path / "eval" / "reliability_diagram.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
