"""AutoClassifier: `headswap auto` as a scikit-learn estimator over the same engine. clone, get_params and
set_params work; predicting before fit is scikit-learn's NotFittedError; lists, Series, DataFrames and Datasets
give auto the same splits; the shipped model saves and loads to the same predictions; leaderboard_ lists every
candidate results.json lists, and leaderboard(X_test, y_test) scores what auto kept as evaluate does."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from tiny_models import make_tiny_encoder

import headswap
import headswap.auto.climb
import headswap.auto.main
from headswap import AutoClassifier
from headswap.errors import ConfigError, DataError, HeadswapError

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


TEST_TEXTS = [f"win a free cash prize now {i}" for i in range(100)] + [f"lunch at noon today? {i}" for i in range(100)]
TEST_LABELS = ["spam"] * 100 + ["ham"] * 100


def test_leaderboard_scores_on_test_what_auto_kept_as_evaluate_does(fitted):
    frame = fitted.leaderboard(TEST_TEXTS, TEST_LABELS)
    board = fitted.leaderboard_
    assert list(frame.columns) == ["model", "strategy", "regime", "validation_macro_f1", "test_macro_f1",
                                   "fit_seconds", "texts_per_second", "status", "why"]
    assert frame["model"].tolist() == [r["model"] for r in board] and len(frame) == len(board)
    # the shipped model, against an evaluate of its saved folder (warmed up as model_ is: timing is the runtime's)
    shipped = headswap.load_model(fitted.out_ / "model", progress=False)
    shipped.predict(TEST_TEXTS[:4])
    m = shipped.evaluate(TEST_TEXTS, TEST_LABELS)
    winner = frame[frame["status"] == "winner"].iloc[0]
    assert winner["test_macro_f1"] == pytest.approx(m.f1("macro"), abs=1e-9)
    assert 1 / 20 < winner["texts_per_second"] / m.extra["texts_per_second"] < 20    # timing varies; same order
    # every candidate auto kept (the baseline, the pool: no more models than the pool held) has a test score
    kept = {id(fitted.best_)} | {id(row) for row, _ in fitted.candidates_}
    assert any(r["model"] == "tfidf" for r, _ in fitted.candidates_) or fitted.best_["model"] == "tfidf"
    assert 2 <= len(kept) and len(fitted.candidates_) <= headswap.auto.climb.POOL + 1
    for row, (_, line) in zip(board, frame.iterrows()):
        assert (0 <= line["test_macro_f1"] <= 1 and line["texts_per_second"] > 0) if id(row) in kept else (
            np.isnan(line["test_macro_f1"]) and np.isnan(line["texts_per_second"]) and line["why"])
    # a candidate whose model auto did not keep (here: left out of a copy's candidates_) is NaN, saying why
    lean = copy.copy(fitted)
    lean.candidates_ = [c for c in fitted.candidates_ if c[0]["status"] == "ran"][1:]
    dropped = next(r for r, _ in fitted.candidates_ if r["status"] == "ran")
    line = lean.leaderboard(TEST_TEXTS, TEST_LABELS).iloc[[id(r) for r in board].index(id(dropped))]
    assert np.isnan(line["test_macro_f1"]) and np.isnan(line["texts_per_second"])
    assert line["status"] == "ran" and "not scored on test: auto keeps in memory only the 5 best" in line["why"]
    # a table with text and label columns reads as X and y; without test data, leaderboard_ as a DataFrame
    table = fitted.leaderboard(pd.DataFrame({"text": TEST_TEXTS, "label": TEST_LABELS}))
    assert table["test_macro_f1"].fillna(-1).tolist() == frame["test_macro_f1"].fillna(-1).tolist()
    assert fitted.leaderboard().equals(board.to_pandas())
    with pytest.raises(ConfigError, match="y is missing"):
        fitted.leaderboard(TEST_TEXTS)


def test_without_its_candidates_the_leaderboard_scores_the_shipped_model_alone(fitted):
    lean = copy.copy(fitted)
    lean.candidates_ = []
    frame = lean.leaderboard(TEST_TEXTS[::10], TEST_LABELS[::10])
    assert frame["test_macro_f1"].notna().tolist() == [r is fitted.best_ for r in fitted.leaderboard_]


def test_the_leaderboard_says_in_one_line_which_extra_brings_pandas(fitted, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)     # import pandas raises ImportError
    for call in (fitted.leaderboard, fitted.leaderboard_.to_pandas, lambda: fitted.leaderboard(TEXTS, LABELS)):
        with pytest.raises(HeadswapError, match=r"^the leaderboard as a DataFrame needs pandas: "
                                                r"pip install 'headswap\[pandas\]'$"):
            call()


def test_what_auto_ships_says_no_more_than_its_six_validation_texts_earn(fitted):
    from headswap.baseline.blend import Blend
    from headswap.decisions.earned import Earned, of

    assert fitted.predict_proba(TEXTS + TEST_TEXTS).max() <= np.float32(7 / 8)      # a tenth of 60 validated
    model = headswap.load_model(fitted.out_ / "model", progress=False)
    members = [m for m, _ in model.members_] if isinstance(model, Blend) else [model]
    assert [of(m) for m in members] == [Earned(6, 1 / 8)] * len(members)


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


def test_integer_labels_come_back_as_integers_after_save_and_load_too(enc, tmp_path):
    clf = AutoClassifier(budget="30s", models=[enc], strategies="encoder-mlp", lr_search=False, progress=False,
                         out=str(tmp_path / "run")).fit(TEXTS, np.array([1] * 30 + [0] * 30))
    assert sorted(clf.classes_.tolist()) == [0, 1] and all(isinstance(v, int) for v in clf.predict(TEXTS[:3]).tolist())
    loaded = headswap.load_model(clf.save(tmp_path / "model"), progress=False)
    assert loaded.classes_.dtype.kind == "i" and loaded.predict(TEXTS[:3]).tolist() == clf.predict(TEXTS[:3]).tolist()
    assert all(isinstance(v, int) for v in loaded.predict(TEXTS[:3]).tolist())


@pytest.fixture
def no_auto(monkeypatch):
    """auto() replaced by a call that fails the test: what is refused must be refused before any work."""
    def trained(*args, **kwargs):
        raise AssertionError("auto ran")
    monkeypatch.setattr(headswap.auto.main, "auto", trained)


@pytest.mark.parametrize("budget,why", [(float("nan"), "finite time"), (float("inf"), "finite time"),
                                        (True, "not a duration"), (0, "more than zero"), (-2, "more than zero"),
                                        ("soon", "not a duration"), (1e9, "over the 7 days")])
def test_a_bad_budget_is_one_line_before_any_work(no_auto, tmp_path, budget, why):
    with pytest.raises(ConfigError, match=f"^budget .*{why}"):
        AutoClassifier(budget=budget, out=str(tmp_path / "run")).fit(TEXTS, LABELS)
    assert not (tmp_path / "run").exists()


def test_a_bare_number_is_minutes_as_on_the_command_line(monkeypatch):
    seen = []
    monkeypatch.setattr(headswap.auto.main, "auto", lambda data, seconds, **kw: seen.append(seconds) or 1 / 0)
    for budget in (2, 2.0, "2", "2m", "120s"):
        with pytest.raises(ZeroDivisionError):
            AutoClassifier(budget=budget).fit(TEXTS, LABELS)
    assert seen == [120] * 5


def test_an_out_that_cannot_take_the_run_is_one_line_before_any_work(no_auto, tmp_path):
    (tmp_path / "file").write_text("mine")
    with pytest.raises(HeadswapError, match="^out .*file is an existing file; give a directory$"):
        AutoClassifier(budget="1m", out=str(tmp_path / "file")).fit(TEXTS, LABELS)
    if Path("/proc/self").is_dir():        # a folder that takes no new files (Linux)
        with pytest.raises(HeadswapError, match=r"^out /proc/zz: cannot write in /proc \(it takes no new files\)"):
            AutoClassifier(budget="1m", out="/proc/zz").fit(TEXTS, LABELS)


def test_labels_mixing_integers_and_strings_are_one_line_before_any_work(no_auto):
    with pytest.raises(DataError, match=r"^training data: labels mix integers and strings \(1 at index 0, 'ham' at "
                                        r"index 30\)"):
        AutoClassifier(budget="1m").fit(TEXTS, [1] * 30 + ["ham"] * 30)
    with pytest.raises(DataError, match=r"^validation data: labels mix integers and strings"):
        AutoClassifier(budget="1m").fit(TEXTS, [1] * 30 + [0] * 30, X_val=TEXTS[:2], y_val=[1, "0"])
    with pytest.raises(DataError, match=r"index 0: label True: True/False labels name no class"):
        AutoClassifier(budget="1m").fit(TEXTS, [True] * 30 + [False] * 30)


def test_a_datasets_class_label_column_gives_auto_its_names(monkeypatch):
    seen = []
    monkeypatch.setattr(headswap.auto.main, "auto", lambda data, seconds, **kw: seen.append(data) or 1 / 0)
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["ham", "spam"])})
    ds = datasets.Dataset.from_dict({"text": TEXTS, "label": [1] * 30 + [0] * 30}, features=features)
    with pytest.raises(ZeroDivisionError):
        AutoClassifier(budget="1m").fit(ds, X_val=ds.select([0, 59]))
    assert seen[0].train.labels == LABELS and seen[0].validation.labels == ["spam", "ham"]


def test_predicting_no_texts_is_one_line(fitted):
    for call in (fitted.predict, fitted.predict_proba):
        with pytest.raises(DataError, match=r"^prediction input: no texts \(at least one is needed\)$"):
            call([])
