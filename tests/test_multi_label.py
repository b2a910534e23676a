"""Multi-label classification (issue 13): label sets in, one sigmoid per label, thresholds and temperatures
tuned per label on validation data (checked against hand-worked values), metrics equal to scikit-learn's,
and the label set out of predict, `headswap predict` and serve; bad label sets are one clear line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from tiny_models import make_tiny_causal, make_tiny_encoder

from headswap import TextClassifier
from headswap.decisions.calibration import fit_label_temperatures
from headswap.data.multilabel import binarize, check_no_empty_sets, label_sets, tune_thresholds
from headswap.errors import ConfigError, DataError, HeadswapError
from headswap.metrics import multi_label_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "claim prize", "see you at noon", "ok home", "running late",
         "win free cash prize", "see you home late"] * 3
SETS = [["spam", "money"], ["spam"], ["spam", "money"], ["ham"], ["ham"], ["ham", "late"], ["spam", "money"],
        ["ham", "late"]] * 3
VAL_TEXTS = ["cash prize now", "call me home", "late again sorry", "free win", "noon ok", "late late"]
VAL_SETS = [["spam", "money"], ["ham"], ["ham", "late"], ["spam"], ["ham"], ["ham", "late"]]


# ---- label sets -----------------------------------------------------------------------------------------------


def test_label_sets_from_cells_and_lists():
    assert label_sets(["a|b", "c", ["d", "e"], ("f",), [3]], "|") == [("a", "b"), ("c",), ("d", "e"), ("f",), ("3",)]
    assert label_sets(["a;b|c"], ";") == [("a", "b|c")]


@pytest.mark.parametrize("value, message", [
    ("a||b", "index 0: empty label in 'a||b'"),
    ("a|", "empty label"),
    ("a| b", "label ' b' starts or ends with a space"),
    ("a|a", "label 'a' appears twice in one row"),
    (["a|b"], "label 'a|b' contains the separator '|'"),
    ([None], "label None is a NoneType, not a string"),
    (3.5, "a multi-label row needs labels joined by '|' or a list, got float"),
])
def test_bad_label_sets_name_the_row(value, message):
    with pytest.raises(DataError, match=message.replace("|", r"\|").replace("(", r"\(").replace(")", r"\)")):
        label_sets([value], "|")


def test_an_empty_label_set_is_refused():
    with pytest.raises(DataError, match="row 2: no labels; every multi-label row needs at least one"):
        check_no_empty_sets([("a",), ()], lambda i: f"row {i + 1}")


# ---- thresholds, temperatures and metrics against hand-worked values -------------------------------------------


def test_thresholds_maximise_each_labels_f1_and_ties_go_nearest_one_half():
    probs = np.array([[0.9, 0.9, 0.2], [0.6, 0.3, 0.1], [0.4, 0.2, 0.3], [0.2, 0.1, 0.1]])
    y = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 0], [0, 0, 0]])
    # Label 0: every threshold in (0.4, 0.6] separates the classes (F1 1): 0.5 is among them.
    # Label 1: (0.2, 0.3] does: the nearest to 0.5 on the grid is 0.30. Label 2 has no positive: 0.5.
    assert tune_thresholds(probs, y).tolist() == pytest.approx([0.5, 0.3, 0.5])


def test_thresholds_trade_precision_for_recall_when_that_raises_f1():
    # One positive at 0.35 and one at 0.8, negatives at 0.3 and 0.1: at 0.5, F1 = 2/3; from 0.31 to 0.35 both
    # positives are caught and no negative (F1 1); the nearest of those to 0.5 is 0.35.
    probs = np.array([[0.35], [0.8], [0.3], [0.1]])
    assert tune_thresholds(probs, np.array([[1], [1], [0], [0]])).tolist() == pytest.approx([0.35])


def test_label_temperatures_match_the_hand_computed_optimum():
    # Per label: three texts with logit d, two positive: BCE is minimal where sigmoid(d / T) = 2/3, T = d / ln 2.
    logits = np.array([[1.0, 3.0]] * 3)
    y = np.array([[1, 1], [1, 0], [0, 1]])
    assert fit_label_temperatures(logits, y) == pytest.approx([1 / math.log(2), 3 / math.log(2)], rel=1e-4)


def test_metrics_equal_scikit_learns():
    from sklearn.metrics import accuracy_score, f1_score, hamming_loss
    rng = np.random.default_rng(0)
    logits, y = rng.normal(size=(60, 5)), rng.integers(0, 2, (60, 5))
    thresholds = [0.3, 0.5, 0.5, 0.7, 0.6]
    m = multi_label_metrics(logits, y, list("abcde"), thresholds)
    pred = (1 / (1 + np.exp(-logits)) >= np.array(thresholds)).astype(int)
    for avg in ("micro", "macro", "weighted", "samples"):
        assert m.f1(avg) == pytest.approx(f1_score(y, pred, average=avg, zero_division=0))
    assert m.accuracy == pytest.approx(accuracy_score(y, pred))
    assert m.hamming_loss == pytest.approx(hamming_loss(y, pred))
    d = m.to_dict()
    assert d["per_class"]["a"]["support"] == int(y[:, 0].sum()) and d["thresholds"]["d"] == 0.7
    assert "Hamming loss" in m.report() and m.score("samples_f1") == pytest.approx(m.f1("samples"))
    with pytest.raises(ConfigError, match="does not apply to multi-label data"):
        m.score("f1")


# ---- TextClassifier ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("ml")
    return {"enc": make_tiny_encoder(root / "enc"), "lm": make_tiny_causal(root / "lm"), "root": root}


@pytest.fixture(scope="module")
def fitted(models):
    clf = TextClassifier(model=str(models["enc"]), multi_label=True, epochs=3, head_lr=1e-2, progress=False)
    return clf.fit(TEXTS, SETS, VAL_TEXTS, VAL_SETS)


def test_fit_predict_and_probabilities(fitted):
    clf = fitted
    assert clf.labels_ == ["ham", "late", "money", "spam"]
    probs = clf.predict_proba(TEXTS)
    assert probs.shape == (len(TEXTS), 4) and ((probs >= 0) & (probs <= 1)).all()
    assert not np.allclose(probs.sum(1), 1)              # independent sigmoids, not a softmax
    logits = torch.from_numpy(clf.decision_function(TEXTS)).double()
    t = torch.tensor(clf.temperature_, dtype=torch.float64)
    eps = 1 / (len(VAL_TEXTS) + 2)      # kept within what the validation texts earn (headswap.decisions.earned)
    np.testing.assert_allclose(probs, np.clip(torch.sigmoid(logits / t).numpy(), eps, 1 - eps), atol=1e-6)
    pred = clf.predict(TEXTS)
    expected = [tuple(lab for lab, p, th in zip(clf.labels_, row, clf.thresholds_) if p >= th) for row in probs]
    assert pred == expected and all(isinstance(p, tuple) for p in pred)
    assert len(clf.thresholds_) == 4 and len(clf.temperature_) == 4
    # thresholds were tuned on the validation probabilities
    val_probs = clf.predict_proba(VAL_TEXTS)
    assert clf.thresholds_ == pytest.approx(tune_thresholds(val_probs, binarize(
        [tuple(s) for s in VAL_SETS], clf.labels_)).tolist())
    assert 0 <= clf.score(TEXTS, ["|".join(s) for s in SETS]) <= 1


def test_evaluate_gives_multi_label_metrics_and_calibration(fitted):
    m = fitted.evaluate(VAL_TEXTS, VAL_SETS)
    d = m.to_dict()
    assert d["multi_label"] and set(d) >= {"micro", "macro", "samples", "hamming_loss", "subset_accuracy"}
    assert d["n"] == len(VAL_TEXTS) and sum(c["support"] for c in d["per_class"].values()) == 9
    cal = m.extra["calibration"]
    assert cal["temperature"] == fitted.temperature_
    assert sum(b["count"] for b in cal["reliability_before"]) == len(VAL_TEXTS) * 4    # every (text, label)


def test_save_and_reload_predict_the_same(fitted, tmp_path):
    fitted.save(tmp_path / "m")
    again = TextClassifier.load(tmp_path / "m", progress=False)
    assert again.multi_label and again.thresholds_ == fitted.thresholds_
    assert again.predict(TEXTS) == fitted.predict(TEXTS)
    cfg_file = tmp_path / "m" / "headswap_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["thresholds"] = cfg["thresholds"][:2]
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(HeadswapError, match="2 thresholds for 4 labels"):
        TextClassifier.load(tmp_path / "m", progress=False)
    cfg["thresholds"] = [1.5] * 4
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(HeadswapError, match="thresholds must be a list of numbers between 0 and 1"):
        TextClassifier.load(tmp_path / "m", progress=False)


@pytest.mark.parametrize("strategy, model, regime", [("similarity", "enc", "full"), ("slm-logits", "lm", "lora"),
                                                     ("slm-hidden-mlp", "lm", "lora")])
def test_other_strategies_train_multi_label(models, strategy, model, regime):
    clf = TextClassifier(strategy=strategy, model=str(models[model]), regime=regime, multi_label=True, epochs=1,
                         progress=False).fit(TEXTS, SETS, VAL_TEXTS, VAL_SETS)
    probs = clf.predict_proba(VAL_TEXTS)
    assert probs.shape == (len(VAL_TEXTS), 4) and len(clf.predict(VAL_TEXTS)) == len(VAL_TEXTS)
    if strategy == "slm-logits":
        head = clf.module_.head
        assert head.offset.requires_grad and not head.weight.requires_grad
        assert not torch.equal(head.offset.detach(), torch.zeros_like(head.offset))   # the per-class offsets trained
        assert "tag a text with every one of these classes" in clf.prompt_.prefix


def test_refusals(models):
    enc = str(models["enc"])
    with pytest.raises(ConfigError, match="'cross-encoder' picks one class per text and cannot do multi-label"):
        TextClassifier(strategy="cross-encoder", model=enc, multi_label=True).resolved_params()
    with pytest.raises(ConfigError, match="class_weight is for single-label data"):
        TextClassifier(model=enc, multi_label=True, class_weight="balanced").resolved_params()
    with pytest.raises(ConfigError, match="'micro_f1' is for multi-label data"):
        TextClassifier(model=enc, metric="micro_f1").resolved_params()
    with pytest.raises(ConfigError, match="label_separator must be a non-empty string"):
        TextClassifier(model=enc, multi_label=True, label_separator="").resolved_params()
    with pytest.raises(HeadswapError, match=r"evaluation labels never seen in training: \['anger'\]"):
        TextClassifier(model=enc, multi_label=True, epochs=1, progress=False).fit(TEXTS, SETS, ["x"], [["anger"]])


# ---- the command line ----------------------------------------------------------------------------------------


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "headswap.cli", *map(str, args)], capture_output=True, text=True)


def test_train_eval_predict_from_csv_and_jsonl(models, tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    (data / "train.csv").write_text("text,labels\n" + "".join(f"{t},{'|'.join(s)}\n" for t, s in zip(TEXTS, SETS)))
    (data / "validation.jsonl").write_text("".join(json.dumps({"text": t, "labels": s}) + "\n"
                                                   for t, s in zip(VAL_TEXTS, VAL_SETS)))
    r = _cli("train", "--data", data / "train.csv", "--eval-data", data / "validation.jsonl", "--label-column",
             "labels", "--multi-label", "--model", models["enc"], "--epochs", "1", "--out", tmp_path / "m", "-q")
    assert r.returncode == 0, r.stderr
    r = _cli("eval", "--model-dir", tmp_path / "m", "--data", data / "validation.jsonl", "--label-column", "labels",
             "--out", tmp_path / "ev", "-q")
    assert r.returncode == 0, r.stderr
    assert "Hamming loss" in r.stdout and (tmp_path / "ev" / "per_label_f1.png").stat().st_size > 5000
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["multi_label"]
    r = _cli("predict", "--model-dir", tmp_path / "m", "--data", data / "train.csv", "--out", tmp_path / "p.jsonl",
             "-q")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    clf = TextClassifier.load(tmp_path / "m", progress=False)
    assert [tuple(row["labels"]) for row in rows] == clf.predict(TEXTS)
    assert set(rows[0]["probabilities"]) == {"ham", "late", "money", "spam"} and "label" not in rows[0]


def test_cli_bad_label_sets_are_one_line(models, tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("text,labels\n" + "".join(f"{t},{'|'.join(s)}\n" for t, s in zip(TEXTS, SETS)) + "odd,a||b\n")
    r = _cli("train", "--data", train, "--label-column", "labels", "--multi-label", "--model", models["enc"],
             "--out", tmp_path / "m", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"line {len(TEXTS) + 2}: empty label in 'a||b'" in r.stderr.strip().splitlines()[-1]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(json.dumps({"text": "x", "label": ["a", "b"]}) + "\n" + json.dumps({"text": "y", "label": "a"}))
    r = _cli("train", "--data", jsonl, "--model", models["enc"], "--out", tmp_path / "m2", "-q")
    assert r.returncode == 2
    assert "line 1: the label is a list, which is multi-label data; train with --multi-label" in r.stderr
    val = tmp_path / "val.csv"
    val.write_text("text,labels\nhello,ham|anger\n")
    (tmp_path / "ok.csv").write_text(train.read_text().replace("odd,a||b\n", ""))
    r = _cli("train", "--data", tmp_path / "ok.csv", "--eval-data", val, "--label-column", "labels", "--multi-label",
             "--model", models["enc"], "--out", tmp_path / "m3", "-q")
    assert r.returncode == 2 and "val.csv, line 2: label(s) not in the training data: 'anger'" in r.stderr


def test_serve_returns_the_label_set(fitted):
    from fastapi.testclient import TestClient

    from headswap.serve.app import create_app
    with TestClient(create_app(fitted, batching=False)) as c:
        body = c.post("/predict", json={"texts": VAL_TEXTS[:3]}).json()
    preds = body["predictions"]
    assert [tuple(p["labels"]) for p in preds] == fitted.predict(VAL_TEXTS[:3])
    assert "label" not in preds[0]
    np.testing.assert_allclose([[p["probabilities"][lab] for lab in fitted.labels_] for p in preds],
                               fitted.predict_proba(VAL_TEXTS[:3]), atol=1e-6)
