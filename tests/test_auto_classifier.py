"""AutoClassifier: `headswap auto` as a scikit-learn estimator over the same engine. clone, get_params and
set_params work; predicting before fit is scikit-learn's NotFittedError; lists, Series, DataFrames and Datasets
give auto the same splits; the shipped model saves and loads to the same predictions; leaderboard_ lists every
candidate results.json lists."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from tiny_models import make_tiny_encoder

import headswap
import headswap.auto.main
from headswap import AutoClassifier

pd = pytest.importorskip("pandas")
datasets = pytest.importorskip("datasets")

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = [f"free prize win cash {i}" for i in range(30)] + [f"see you at lunch today {i}" for i in range(30)]
LABELS = ["spam"] * 30 + ["ham"] * 30


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("autoclf") / "enc"))


@pytest.fixture(scope="module")
def fitted(enc, tmp_path_factory):
    out = tmp_path_factory.mktemp("autoclf-run") / "run"
    clf = AutoClassifier(budget="40s", models=[enc], strategies="encoder-mlp", lr_search=False, out=str(out),
                         progress=False)
    return clf.fit(pd.DataFrame({"text": TEXTS, "label": LABELS}))


def test_it_is_a_scikit_learn_estimator():
    clf = AutoClassifier(budget="5m", models=["minilm"], out_of_scope="oos")
    params = clf.get_params()
    assert params["budget"] == "5m" and params["models"] == ["minilm"] and params["out_of_scope"] == "oos"
    copy = clone(clf).set_params(budget=90, seed=3)
    assert copy.get_params()["budget"] == 90 and copy.seed == 3 and clf.budget == "5m"
    for call in (lambda: clf.predict(["a"]), lambda: clf.predict_proba(["a"]), lambda: clf.save("x")):
        with pytest.raises(NotFittedError):
            call()


def test_fit_predicts_saves_and_loads_the_same(fitted, tmp_path):
    texts = ["win a free prize", "lunch at noon?"]
    assert set(fitted.predict(texts).tolist()) <= set(fitted.classes_.tolist())
    probabilities = fitted.predict_proba(texts)
    assert probabilities.shape == (2, 2) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    assert sorted(fitted.classes_.tolist()) == ["ham", "spam"]
    folder = fitted.save(tmp_path / "model")
    loaded = headswap.load_model(folder, progress=False)
    assert loaded.predict(texts).tolist() == fitted.predict(texts).tolist()
    np.testing.assert_allclose(loaded.predict_proba(texts), probabilities, atol=1e-6)
    assert fitted.score(TEXTS, LABELS) > 0.5 and fitted.report_.is_file()


def test_the_leaderboard_lists_every_candidate_of_results_json(fitted):
    candidates = json.loads((fitted.out_ / "results.json").read_text())["auto"]["candidates"]
    board = fitted.leaderboard_
    assert len(board) == len(candidates) and [r["status"] for r in board].count("winner") == 1
    assert fitted.best_ in board and fitted.best_["validation_macro_f1"] == max(
        r["validation_macro_f1"] for r in board if r["validation_macro_f1"] is not None)
    frame = board.to_pandas()
    assert list(frame.columns) == list(board.COLUMNS) and len(frame) == len(candidates)
    text = str(board)
    assert text.splitlines()[0].split() == list(board.COLUMNS) and "tfidf" in text


def test_every_input_form_gives_auto_the_same_splits(monkeypatch):
    seen = []

    def capture(data, seconds, **kw):
        seen.append((data.train.texts, data.train.labels, data.validation and data.validation.texts, seconds))
        raise StopIteration
    monkeypatch.setattr(headswap.auto.main, "auto", capture)
    df = pd.DataFrame({"text": TEXTS, "label": LABELS})
    ds = datasets.Dataset.from_pandas(df)
    for X, y in [(TEXTS, LABELS), (df["text"], df["label"]), (df, None), (ds, None)]:
        with pytest.raises(StopIteration):
            AutoClassifier(budget="2m").fit(X, y, X_val=df.head(4), y_val=None)
    assert all(s == seen[0] for s in seen) and seen[0][3] == 120 and seen[0][2] == TEXTS[:4]


def test_integer_labels_come_back_as_integers(enc, tmp_path):
    clf = AutoClassifier(budget=30, models=[enc], strategies="encoder-mlp", lr_search=False, progress=False,
                         out=str(tmp_path / "run")).fit(TEXTS, [1] * 30 + [0] * 30)
    assert sorted(clf.classes_.tolist()) == [0, 1] and all(isinstance(v, int) for v in clf.predict(TEXTS[:3]).tolist())
