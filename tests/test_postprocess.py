"""The post-processing steps (headswap.decisions.postprocess) on their own: fitted on logits, applied to numpy or torch
logits, and saved and loaded back exactly (through JSON, as headswap_config.json holds them)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from headswap.decisions import reject
from headswap.decisions.calibration import fit_label_temperatures, fit_temperature
from headswap.data.multilabel import tune_thresholds
from headswap.errors import HeadswapError
from headswap.decisions.oos_scores import STATS_FILE, OosStatistics
from headswap.decisions.postprocess import Reject, Temperature, Thresholds, oos_column
from headswap.decisions.targets import MultiLabel


def _data(n=200, k=3, seed=0):
    """Logits that are overconfident for their labels (a temperature above 1 fixes that)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k)) * 4
    logits[np.arange(n), y] += rng.normal(1.0, 3.0, n)
    return logits.astype(np.float32), y


def _reloaded(step, tmp_path, **kw):
    step.save(tmp_path)
    return type(step).load(tmp_path, json.loads(json.dumps(step.config())), **kw)


def test_temperature_fits_applies_to_numpy_and_torch_and_reloads_exactly(tmp_path):
    logits, y = _data()
    t = Temperature().fit(logits, y)
    assert t.temperature == fit_temperature(logits, y) and t.temperature > 1
    expected = torch.softmax(torch.from_numpy(logits).double() / t.temperature, -1).numpy()
    np.testing.assert_array_equal(t.apply(logits), expected)
    np.testing.assert_array_equal(t.apply(torch.from_numpy(logits)), expected)
    again = _reloaded(t, tmp_path)
    assert again.temperature == t.temperature
    np.testing.assert_array_equal(again.apply(logits), t.apply(logits))
    assert Temperature().apply(logits) == pytest.approx(torch.softmax(torch.from_numpy(logits).double(), -1).numpy())


def test_multi_label_temperature_and_thresholds_fit_per_label_and_reload_exactly(tmp_path):
    logits, y = _data(k=4, seed=1)
    onehot = np.eye(4)[y]
    target = MultiLabel()
    t = Temperature(target=target).fit(logits, onehot)
    assert t.temperature == fit_label_temperatures(logits, onehot)
    probs = t.apply(torch.from_numpy(logits))
    t_col = torch.tensor(t.temperature, dtype=torch.float64)
    np.testing.assert_array_equal(probs, torch.sigmoid(torch.from_numpy(logits).double() / t_col).numpy())
    th = Thresholds([0.5] * 4, target).fit(probs, onehot)
    assert th.thresholds == tune_thresholds(probs, onehot).tolist()
    classes = np.array(list("abcd"), dtype=object)
    decided = th.decide(probs, classes)
    assert decided == [tuple(c for c, p, h in zip(classes, row, th.thresholds) if p >= h) for row in probs]
    t2, th2 = _reloaded(t, tmp_path, target=target), _reloaded(th, tmp_path, target=target)
    assert t2.temperature == t.temperature and th2.thresholds == th.thresholds
    assert th2.decide(t2.apply(logits), classes) == decided


def test_single_label_thresholds_are_the_argmax():
    logits, y = _data()
    th = Thresholds().fit(logits, y)
    assert th.thresholds is None and th.config() == {"thresholds": None}
    classes = np.array([10, 20, 30])
    np.testing.assert_array_equal(th.decide(logits, classes), classes[logits.argmax(1)])


def test_reject_by_softmax_tunes_as_headswap_reject_and_reloads_exactly(tmp_path):
    logits, y = _data(seed=2)
    is_oos = np.zeros(len(y), dtype=bool)
    is_oos[:40] = True
    probs = Temperature().fit(logits[40:], y[40:]).apply(logits)
    step = Reject()
    notes = step.fit(probs, logits, None, y, is_oos, score="softmax", metric="oos_recall", target=0.5)
    assert notes == []
    expected, _ = reject.tune(probs, y, is_oos, "oos_recall", 0.5, None, confidence=reject.CONFIDENCE)
    assert step.threshold == expected and step.entry["score"] == "softmax" and step.entry["statistics"] is None
    rejected = step.rejected(probs)
    np.testing.assert_array_equal(rejected, probs.max(1) < expected)
    assert rejected[is_oos].mean() >= 0.5
    again = _reloaded(step, tmp_path)
    assert (again.threshold, again.entry) == (step.threshold, step.entry)
    decided = again.decide(np.array(["a"] * len(y), dtype=object), probs, value="oos")
    assert [d == "oos" for d in decided] == rejected.tolist()
    assert not (tmp_path / STATS_FILE).exists()


def test_reject_picks_a_feature_score_and_reloads_its_statistics_exactly(tmp_path):
    rng = np.random.default_rng(3)
    k, d = 3, 8
    centres = rng.normal(0, 4, (k, d))
    y_train = rng.integers(0, k, 300)
    train = centres[y_train] + rng.normal(0, 1, (300, d))
    y = np.concatenate([rng.integers(0, k, 60), np.full(30, -1)])
    is_oos = y < 0
    feats = np.where(is_oos[:, None], rng.normal(0, 4, (90, d)) + 12, centres[np.maximum(y, 0)]
                     + rng.normal(0, 1, (90, d)))
    logits = rng.normal(0, 1, (90, k)).astype(np.float32)    # uninformative: the features must tell
    probs = Temperature().apply(logits)
    step = Reject().fit_statistics(train, y_train)
    notes = step.fit(probs, logits, feats, y, is_oos, score="auto", metric="oos_recall", target=0.9)
    assert step.entry["score"] in ("mahalanobis", "knn") and notes[0].startswith("reject_score auto: ")
    assert step.threshold is None and step.entry["statistics"] == STATS_FILE
    score = step.scores(probs, logits, feats, [step.score_name])[step.score_name]
    np.testing.assert_array_equal(step.rejected(probs, score), score > step.entry["threshold"])
    with pytest.raises(HeadswapError, match="pass the scores"):
        step.rejected(probs)
    again = _reloaded(step, tmp_path)
    assert (tmp_path / STATS_FILE).is_file() and again.entry == step.entry
    for name in ("means", "precision", "bank"):
        np.testing.assert_array_equal(getattr(again.statistics, name), getattr(step.statistics, name))
    np.testing.assert_array_equal(again.scores(probs, logits, feats)[step.score_name], score)
    assert again.report(probs, logits, feats, y, is_oos) == step.report(probs, logits, feats, y, is_oos)
    assert isinstance(again.statistics, OosStatistics)


def test_reject_with_a_learned_out_of_scope_class_rejects_its_argmax():
    assert oos_column(["ham", "oos", "spam"], "oos") == 1 and oos_column(["ham", "spam"], "oos") is None
    probs = np.array([[0.2, 0.7, 0.1], [0.6, 0.1, 0.3], [0.4, 0.2, 0.4]])
    step = Reject(oos_index=1, threshold=0.5)
    np.testing.assert_array_equal(step.rejected(probs), [True, False, True])
    np.testing.assert_array_equal(step.decide(np.array([0, 0, 2]), probs, value=1), [1, 0, 1])


def test_reject_load_refuses_a_missing_statistics_file(tmp_path):
    with pytest.raises(HeadswapError, match="is missing"):
        Reject.load(tmp_path, {"oos_score": {"score": "knn", "threshold": 0.3, "statistics": STATS_FILE}})
