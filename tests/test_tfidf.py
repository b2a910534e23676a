"""The TF-IDF + logistic regression classifier: trains on labels or on soft labels (exactly cross-entropy to
them), and reloads from its model directory with the same probabilities; damaged directories are clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headswap.errors import DataError, HeadswapError
from headswap.baseline.tfidf import TfidfClassifier

TEXTS = ["win cash now", "free prize call now", "urgent you have won", "see you at noon", "ok on my way home",
         "running late sorry", "claim your free prize", "call me when you are home"] * 2
LABELS = ["spam", "spam", "spam", "ham", "ham", "ham", "spam", "ham"] * 2
THREE = ["spam", "spam", "promo", "ham", "ham", "ham", "promo", "ham"] * 2
NEW = ["win a free prize", "see you at home", "late again"]


@pytest.mark.parametrize("labels", [LABELS, THREE])
def test_save_and_load_give_the_same_probabilities(tmp_path, labels):
    clf = TfidfClassifier().fit(TEXTS, labels)
    again = TfidfClassifier.load(clf.save(tmp_path / "m"))
    p = clf.predict_proba(NEW)
    assert p.shape == (len(NEW), len(set(labels)))
    np.testing.assert_array_equal(again.predict_proba(NEW), p)
    assert list(again.predict(NEW)) == list(clf.predict(NEW)) and again.labels_ == sorted(set(labels))
    config = json.loads((tmp_path / "m" / "headswap_config.json").read_text())
    assert config["kind"] == "tfidf" and config["labels"] == sorted(set(labels))


def test_integer_labels_stay_integers_through_save_and_load(tmp_path):
    y = [10 if lab == "spam" else 2 for lab in LABELS]
    clf = TfidfClassifier().fit(TEXTS, np.array(y))
    assert clf.classes_.tolist() == [2, 10] and clf.classes_.dtype.kind == "i" and clf.score(TEXTS, y) == 1.0
    again = TfidfClassifier.load(clf.save(tmp_path / "m"))
    assert again.classes_.tolist() == [2, 10] and all(isinstance(v, int) for v in again.predict(NEW).tolist())
    assert again.predict(NEW).tolist() == clf.predict(NEW).tolist() and again.labels_ == ["2", "10"]
    config = tmp_path / "m" / "headswap_config.json"     # an earlier save, without label_values: text labels
    config.write_text(json.dumps({k: v for k, v in json.loads(config.read_text()).items() if k != "label_values"}))
    assert TfidfClassifier.load(tmp_path / "m").classes_.tolist() == ["2", "10"]


def test_mixed_labels_and_no_texts_are_one_line():
    with pytest.raises(DataError, match=r"^training data: labels mix integers and strings \(1 at index 3, 'spam' "
                                        r"at index 0\)"):
        TfidfClassifier().fit(TEXTS, [1 if lab == "ham" else lab for lab in LABELS])
    clf = TfidfClassifier().fit(TEXTS, LABELS)
    for call in (clf.predict, clf.predict_proba, clf.decision_function):
        with pytest.raises(DataError, match=r"^prediction input: no texts \(at least one is needed\)$"):
            call([])


def test_one_hot_soft_labels_train_exactly_as_labels():
    hard = TfidfClassifier().fit(TEXTS, LABELS)
    onehot = np.array([[1.0, 0.0] if y == "ham" else [0.0, 1.0] for y in LABELS])
    soft = TfidfClassifier().fit(TEXTS, soft_labels=onehot, labels=["ham", "spam"])
    np.testing.assert_allclose(soft.predict_proba(NEW), hard.predict_proba(NEW), atol=1e-6)


def test_soft_labels_minimise_cross_entropy_to_them():
    """With weak regularisation the student's training loss is the soft cross-entropy: its minimum is at
    probabilities matching the targets, so a text whose two copies carry 0.7/0.3 is predicted near 0.7/0.3."""
    texts = ["alpha", "beta"]
    probs = np.array([[0.7, 0.3], [0.2, 0.8]])
    student = TfidfClassifier(C=1e6).fit(texts, soft_labels=probs, labels=["a", "b"])
    np.testing.assert_allclose(student.predict_proba(texts), probs, atol=0.02)


def test_bad_soft_labels_and_damaged_directories(tmp_path):
    with pytest.raises(HeadswapError, match="must be \\(texts, labels\\)"):
        TfidfClassifier().fit(TEXTS, soft_labels=np.ones((3, 2)) / 2, labels=["a", "b"])
    with pytest.raises(HeadswapError, match="summing to 1"):
        TfidfClassifier().fit(TEXTS, soft_labels=np.ones((len(TEXTS), 2)), labels=["a", "b"])
    with pytest.raises(HeadswapError, match="not both or neither"):
        TfidfClassifier().fit(TEXTS)
    with pytest.raises(HeadswapError, match="single class"):
        TfidfClassifier().fit(TEXTS, ["ham"] * len(TEXTS))
    d = TfidfClassifier().fit(TEXTS, LABELS).save(tmp_path / "m")
    (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:100])
    with pytest.raises(HeadswapError, match="damaged TF-IDF model"):
        TfidfClassifier.load(d)
    (d / "model.safetensors").unlink()
    with pytest.raises(HeadswapError, match="model.safetensors is missing"):
        TfidfClassifier.load(d)


def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "headswap.cli", *args], capture_output=True, text=True)


def test_predict_eval_and_serve_run_a_tfidf_directory(tmp_path):
    clf = TfidfClassifier().fit(TEXTS, LABELS)
    d = clf.save(tmp_path / "m")
    r = _cli("predict", "--model-dir", str(d), *NEW)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["label"] for x in rows] == list(clf.predict(NEW))
    np.testing.assert_allclose([[x["probabilities"][k] for k in ("ham", "spam")] for x in rows],
                               clf.predict_proba(NEW), atol=1e-6)
    data = tmp_path / "test.csv"
    data.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    r = _cli("eval", "--model-dir", str(d), "--data", str(data), "--out", str(tmp_path / "eval"), "-q")
    assert r.returncode == 0, r.stderr
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["accuracy"] == clf.evaluate(TEXTS, LABELS).accuracy
    assert "calibration (15-bin ECE, Brier)" in r.stdout
    r = _cli("predict", "--model-dir", str(d), "--runtime", "onnx", "hi")
    assert r.returncode == 2 and "runs on scikit-learn" in r.stderr
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from headswap.serve.app import create_app
    with TestClient(create_app(str(d))) as c:
        body = c.post("/predict", json={"texts": NEW}).json()
        assert [p["label"] for p in body["predictions"]] == list(clf.predict(NEW))
        assert c.get("/health").json()["strategy"] == "tfidf-logreg"


@pytest.mark.parametrize("texts", [["😀", "😀😀", "🎉 😀", "😡", "😡😡", "💢 😡"] * 2,     # emoji only
                                   ["a", "a b", "b a", "x", "x y", "y x"] * 2])              # one-letter words
def test_texts_without_a_two_letter_word_train_on_character_ngrams(tmp_path, texts, caplog):
    """scikit-learn's word vectorizer finds no token in them ('empty vocabulary', issue 33): the model is
    character n-grams alone, says so, and saves and reloads as such."""
    labels = ["joy", "joy", "joy", "anger", "anger", "anger"] * 2
    clf = TfidfClassifier().fit(texts, labels)
    assert [name for name, _ in clf.features_.transformer_list] == ["char"]
    assert list(clf.predict(texts[:6])) == labels[:6]
    again = TfidfClassifier.load(clf.save(tmp_path / "m"))
    np.testing.assert_array_equal(again.predict_proba(texts), clf.predict_proba(texts))
    config = json.loads((tmp_path / "m" / "headswap_config.json").read_text())
    assert list(config["vectorizers"]) == ["char"]
    soft = TfidfClassifier().fit(texts, soft_labels=[[0.9, 0.1] if y == "anger" else [0.2, 0.8] for y in labels],
                                 labels=["anger", "joy"])
    assert list(soft.predict(texts[:6])) == labels[:6]
    assert TfidfClassifier().fit(TEXTS, LABELS).features_.transformer_list[0][0] == "word"   # words when there are
