"""auto's TF-IDF baseline is tuned (headswap.baseline.search): a linear SVM and logistic regression over a few C,
the cheap SVM first, the best on validation kept, within a share of the budget; a tuned SVM saves and reloads with
the same outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headswap.baseline import search
from headswap.baseline.search import GRID, tune_tfidf
from headswap.baseline.tfidf import TfidfClassifier
from headswap.data.records import from_lists
from headswap.errors import HeadswapError

WORDS = {"sport": "match goal team coach league", "money": "bank loan rate stock market",
         "food": "recipe bake soup salad dinner"}
FILLER = "the a today this new big some really".split()


def noisy_split(n: int, flip: float, seed: int):
    """Texts of three topics, each two topic words among filler; a share `flip` of the labels drawn at random."""
    rng = np.random.default_rng(seed)
    labels, texts = [], []
    for i in range(n):
        label = list(WORDS)[i % 3]
        words = list(rng.choice(WORDS[label].split(), 2)) + list(rng.choice(FILLER, 4))
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label if rng.random() >= flip else list(WORDS)[rng.integers(3)])
    return from_lists(texts, labels)


@pytest.fixture(scope="module")
def data():
    return noisy_split(240, 0.35, 0), noisy_split(90, 0.0, 1)


def test_the_chosen_point_is_the_best_on_validation_of_all_tried(data):
    train, validation = data
    clf, record = tune_tfidf(train, validation, seconds=600)
    tried = record["tried"]
    assert [(t["linear"], t["C"]) for t in tried] == list(GRID) and not record["not_tried"]
    assert GRID[0] == ("svm", 1.0) and {lin for lin, _ in GRID[4:]} == {"logistic"}    # the cheap SVMs first
    assert len({t["validation_macro_f1"] for t in tried}) > 1, "the points should differ for the test to mean much"
    best = max(tried, key=lambda t: (t["validation_macro_f1"], t["linear"] == "logistic"))   # first of the best
    assert (record["linear"], record["C"]) == (clf.linear, clf.C) == (best["linear"], best["C"])
    assert record["validation_macro_f1"] == best["validation_macro_f1"]
    assert clf.evaluate(validation.texts, validation.labels).f1("macro") == pytest.approx(best["validation_macro_f1"])
    assert record["name"] == search.describe(clf.linear, clf.C) and "best on validation of 8 tried" in record["note"]


def test_a_linear_svm_that_scores_higher_on_validation_is_chosen_and_calibrated(data):
    train, validation = data
    plain = TfidfClassifier().fit(train.texts, train.labels).evaluate(validation.texts, validation.labels)
    svm = TfidfClassifier(C=0.3, linear="svm").fit(train.texts, train.labels).evaluate(validation.texts,
                                                                                        validation.labels)
    assert svm.f1("macro") > plain.f1("macro")      # label noise: the plain C 10 fits it, the SVM less so
    clf, record = tune_tfidf(train, validation, seconds=600, grid=(("svm", 0.3), ("logistic", 10.0)))
    assert len(record["tried"]) == 2 and (record["linear"], record["C"], clf.strategy) == ("svm", 0.3,
                                                                                          "tfidf-linearsvc")
    assert record["temperature"] == clf.temperature != 1.0
    p = clf.predict_proba(validation.texts)
    np.testing.assert_allclose(p.sum(1), 1.0)
    y = [clf.labels_.index(v) for v in validation.labels]
    loss = lambda probs: -np.mean(np.log(probs[np.arange(len(y)), y]))    # noqa: E731
    raw = TfidfClassifier(C=0.3, linear="svm").fit(train.texts, train.labels).predict_proba(validation.texts)
    assert loss(p) < loss(raw)         # the fitted temperature, not 1, gives the lower validation log-loss
    assert list(clf.predict(validation.texts)) == [clf.labels_[k] for k in raw.argmax(1)]   # decisions unchanged


def test_no_time_for_a_second_fit_keeps_the_first_the_cheap_linear_svm(data):
    train, validation = data
    clf, record = tune_tfidf(train, validation, seconds=0.0)
    assert [(t["linear"], t["C"]) for t in record["tried"]] == [("svm", 1.0)]
    assert [(t["linear"], t["C"]) for t in record["not_tried"]] == list(GRID[1:])
    assert record["note"] == "linear SVM C 1 alone; 7 more not tried: each would have passed the search's 0 s"
    assert record["name"] == "TF-IDF + linear SVM C=1" and record["temperature"] == clf.temperature != 1.0
    svm = TfidfClassifier(C=1.0, linear="svm", temperature=clf.temperature).fit(train.texts, train.labels)
    np.testing.assert_allclose(clf.predict_proba(validation.texts), svm.predict_proba(validation.texts), atol=1e-9)


@pytest.mark.parametrize("grid, chosen", [
    ((("svm", 1.0), ("logistic", 3.0)), ("logistic", 3.0)),        # an SVM's tie with a logistic regression: the latter
    ((("svm", 1.0), ("svm", 0.3), ("logistic", 3.0), ("logistic", 1.0)), ("logistic", 3.0)),   # the first of those
    ((("svm", 1.0), ("svm", 0.3)), ("svm", 1.0))])                  # two SVMs: the earlier tried
def test_a_tie_on_validation_goes_to_a_logistic_regression_then_to_the_earlier_tried(grid, chosen):
    train, validation = noisy_split(120, 0.0, 0), noisy_split(60, 0.0, 1)     # no noise: every point scores 1
    clf, record = tune_tfidf(train, validation, seconds=600, grid=grid)
    assert [t["validation_macro_f1"] for t in record["tried"]] == [1.0] * len(grid)
    assert (record["linear"], record["C"]) == (clf.linear, clf.C) == chosen
    assert ("temperature" in record) == (clf.linear == "svm")


SVMS = ["svm 1", "svm 0.3", "svm 3", "svm 10"]


@pytest.mark.parametrize("seconds, tried", [
    (0, ["svm 1"]),                                 # the first fit always: the SVM, not the 20 times dearer logistic
    (1.5, ["svm 1", "svm 0.3"]),                    # C 3's estimate, twice C 1's 0.5 s, would pass 1.5 s
    (26, SVMS),                                     # 2 s spent + the first logistic's 25 s estimate (50 x 0.5 s) > 26
    (27, SVMS + ["logistic 10", "logistic 3"]),
    (40, SVMS + ["logistic 10", "logistic 3", "logistic 1"]),      # C 30's estimate, 2 x 10 s, would pass 40 s
    (50, SVMS + ["logistic 10", "logistic 3", "logistic 30", "logistic 1"])])
def test_a_point_runs_only_when_its_estimate_keeps_the_search_within_its_time(data, monkeypatch, seconds, tried):
    """On a fake clock a logistic regression fits in 10 s, a linear SVM in 0.5 s, the features in none: a point is
    fitted when the time spent plus its estimate (search._estimate) stays within `seconds`; one that would not is
    passed over for the cheaper ones after it."""
    train, validation = data
    now = [0.0]
    fit_head = TfidfClassifier._fit_head

    def timed(self, *args, **kwargs):
        now[0] += 10 if self.linear == "logistic" else 0.5
        return fit_head(self, *args, **kwargs)
    monkeypatch.setattr(TfidfClassifier, "_fit_head", timed)
    _, record = tune_tfidf(train, validation, seconds=seconds, clock=lambda: now[0])
    assert [f"{t['linear']} {t['C']:g}" for t in record["tried"]] == tried
    assert len(record["not_tried"]) == len(GRID) - len(tried) and record["seconds"] <= max(seconds, 0.5)
    assert record["seconds"] == sum(10 if t.startswith("logistic") else 0.5 for t in tried)


def test_the_estimate_of_a_dearer_c_doubles_and_an_untimed_estimator_is_priced_from_the_others():
    heads = {("svm", 1.0): 1.5, ("logistic", 10.0): 4.0}
    assert search._estimate(heads, "svm", 0.3) == 1.5 and search._estimate(heads, "logistic", 3.0) == 4.0
    assert search._estimate(heads, "svm", 3.0) == 3.0 and search._estimate(heads, "logistic", 30.0) == 8.0
    # priced so as to overestimate: the SVM C 1 took 1/41 to 1/5.5 of the logistic regression's time (C 10)
    svms = {("svm", 1.0): 0.5, ("svm", 10.0): 3.0}
    assert search._estimate(svms, "logistic", 10.0) == 25.0         # 50 x the first SVM's, the one measured
    assert search._estimate({("logistic", 10.0): 4.0}, "svm", 1.0) == pytest.approx(0.8)


def test_a_tuned_svm_reloads_with_identical_outputs_and_an_earlier_reader_gets_them_too(data, tmp_path):
    train, validation = data
    clf, record = tune_tfidf(train, validation, seconds=600, grid=(("svm", 0.3),))
    assert clf.linear == "svm"
    again = TfidfClassifier.load(clf.save(tmp_path / "m"))
    texts = validation.texts + ["goal goal goal", "unknown words only"]
    np.testing.assert_array_equal(again.predict_proba(texts), clf.predict_proba(texts))
    assert list(again.predict(texts)) == list(clf.predict(texts))
    assert (again.strategy, again.C, again.temperature) == ("tfidf-linearsvc", 0.3, clf.temperature)
    config_file = tmp_path / "m" / "headswap_config.json"
    config = json.loads(config_file.read_text())
    assert config["params"] == {"C": 0.3, "max_iter": 2000}       # what every earlier version reads
    del config["linear"]      # an earlier version ignores the new key: the coefficients alone give the outputs
    config_file.write_text(json.dumps(config))
    older = TfidfClassifier.load(tmp_path / "m")
    np.testing.assert_array_equal(older.predict_proba(texts), clf.predict_proba(texts))
    config_file.write_text(json.dumps({**config, "linear": "svm"}))
    with pytest.raises(HeadswapError, match=r"its linear model 'svm' is not one headswap saves; the model directory "
                                            r"is damaged$"):
        TfidfClassifier.load(tmp_path / "m")


def test_bad_settings_are_one_line():
    texts, labels = ["a b", "c d", "e f", "g h"], ["x", "y", "x", "y"]
    with pytest.raises(HeadswapError, match="^TfidfClassifier linear must be one of logistic, svm; got 'tree'$"):
        TfidfClassifier(linear="tree").fit(texts, labels)
    with pytest.raises(HeadswapError, match="temperature must be a number above 0"):
        TfidfClassifier(linear="svm", temperature=0).fit(texts, labels)
    with pytest.raises(HeadswapError, match="soft_labels train the logistic regression only"):
        TfidfClassifier(linear="svm").fit(texts, soft_labels=np.full((4, 2), 0.5), labels=["x", "y"])
