import numpy as np
import pytest
from sklearn import metrics as skm

from headswap.metrics import metrics_from_logits, metrics_from_predictions


@pytest.mark.parametrize("seed", range(20))
def test_metrics_agree_with_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 7))
    n = int(rng.integers(1, 60))
    labels = [f"c{i}" for i in range(k)]
    y = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * rng.uniform(0.1, 3)
    # Push some predictions to one class so zero-division cases (a class never predicted) occur.
    if seed % 3 == 0:
        logits[:, 0] += 5
    m = metrics_from_logits(logits, y, labels, positive_label=None)
    pred = logits.argmax(1)
    all_k = list(range(k))
    assert m.accuracy == pytest.approx(skm.accuracy_score(y, pred))
    np.testing.assert_array_equal(m.confusion, skm.confusion_matrix(y, pred, labels=all_k))
    for avg in ("macro", "weighted"):
        p, r, f, _ = skm.precision_recall_fscore_support(y, pred, labels=all_k, average=avg, zero_division=0)
        assert (m.precision(avg), m.recall(avg), m.f1(avg)) == pytest.approx((p, r, f))
    p, r, f, s = skm.precision_recall_fscore_support(y, pred, labels=all_k, average=None, zero_division=0)
    np.testing.assert_allclose(m.f1_per_class, f)
    np.testing.assert_allclose(m.precision_per_class, p)
    np.testing.assert_allclose(m.recall_per_class, r)
    np.testing.assert_array_equal(m.support, s)


@pytest.mark.parametrize("seed", range(10))
def test_binary_metrics_agree_with_scikit_learn(seed):
    rng = np.random.default_rng(100 + seed)
    y, pred = rng.integers(0, 2, 40), rng.integers(0, 2, 40)
    m = metrics_from_predictions(y, pred, ["ham", "spam"])  # 'spam' positive by default
    assert m.positive_label == "spam"
    b = m.binary()
    assert b["precision"] == pytest.approx(skm.precision_score(y, pred, zero_division=0))
    assert b["recall"] == pytest.approx(skm.recall_score(y, pred, zero_division=0))
    assert b["f1"] == pytest.approx(skm.f1_score(y, pred, zero_division=0))
    m0 = metrics_from_predictions(y, pred, ["ham", "spam"], positive_label="ham")
    assert m0.binary()["f1"] == pytest.approx(skm.f1_score(y, pred, pos_label=0, zero_division=0))


def test_report_json_and_score_names():
    m = metrics_from_predictions([0, 1, 1, 2], [0, 1, 2, 2], ["a", "b", "c"])
    d = m.to_dict()
    assert d["confusion_matrix"] == [[1, 0, 0], [0, 1, 1], [0, 0, 1]]
    assert d["per_class"]["b"]["recall"] == 0.5
    assert "confusion matrix" in m.report() and "macro avg" in m.report()
    assert m.score("macro_f1") == pytest.approx(skm.f1_score([0, 1, 1, 2], [0, 1, 2, 2], average="macro"))
    with pytest.raises(ValueError, match="positive label"):
        m.score("f1")
    with pytest.raises(ValueError, match="shape"):
        metrics_from_logits(np.zeros((3, 2)), [0, 1, 1], ["a", "b", "c"])
