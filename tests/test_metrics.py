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


def _confused(k: int):
    """k classes; class i's texts are right 3 times, and class i < 12 is taken for class i + 1 (i + 1) times."""
    labels = [f"intent_{i:03d}" for i in range(k)]
    true, pred = [], []
    for i in range(k):
        true += [i] * 3
        pred += [i] * 3
        if i < 12:
            true += [i] * (i + 1)
            pred += [(i + 1) % k] * (i + 1)
    return metrics_from_predictions(true, pred, labels), labels


def test_up_to_20_classes_the_report_prints_the_whole_matrix():
    m, labels = _confused(20)
    report = m.report(chart="out/confusion_matrix.png")
    assert "confusion matrix (rows = true, columns = predicted):" in report and "most confused" not in report
    assert report.splitlines()[-1].split() == [labels[-1]] + ["0"] * 19 + ["3"]


def test_above_20_classes_the_report_lists_the_most_confused_pairs_instead():
    """Issue 33: CLINC150's 151 x 151 matrix printed lines 3,952 characters wide."""
    m, labels = _confused(151)
    report = m.report(chart="out/confusion_matrix.png")
    assert "confusion matrix (rows" not in report and max(map(len, report.splitlines())) < 120
    pairs = report.split("most confused")[1].splitlines()[1:11]
    assert pairs == [f"  {labels[i]} -> {labels[i + 1]}: {i + 1}" for i in range(11, 1, -1)]
    assert report.splitlines()[-1] == "the whole confusion matrix: out/confusion_matrix.png"
    assert m.most_confused(top=3) == [(labels[11], labels[12], 12), (labels[10], labels[11], 11),
                                      (labels[9], labels[10], 10)]


def test_class_list_is_short_above_20_classes():
    from headswap.metrics import class_list
    assert class_list([f"c{i}" for i in range(20)]) == ", ".join(f"c{i}" for i in range(20))
    assert class_list([f"c{i}" for i in range(10_000)]) == "c0, c1, c2, c3, c4, c5, c6, c7, ... and 9992 more"
