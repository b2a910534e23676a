"""Out-of-scope scores beyond max-softmax (issue 31): each score against a brute-force computation, the
threshold-free figures against their definitions, the statistics' exact round trip, and the option end to end
(reject_score auto and fixed, save/load, ONNX, predict, serve, the command line, refusals)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from test_reject import VAL_LABELS, VAL_TEXTS, enc  # noqa: F401  (the same validation texts and tiny encoder)

from headswap import TextClassifier

from headswap.classifier import reject_option as oos
from headswap.errors import ConfigError, HeadswapError
from headswap.decisions.oos_scores import OosStatistics, compute, figures, pick
from headswap.decisions.reject import scores, tune

pytestmark = pytest.mark.usefixtures("one_thread")


def _data(seed=0, n=120, d=6, k=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    x = rng.normal(size=(n, d)) + 3 * np.eye(k, d)[y]
    return x, y, rng


def test_mahalanobis_is_the_smallest_class_distance_under_the_shared_precision():
    x, y, rng = _data()
    y[:10] = 3                      # a learned out-of-scope class: left out of the means and the covariance
    stats = OosStatistics.fit(x, y, oos_index=3)
    assert stats.means.shape == (3, 6) and stats.means.dtype == np.float32
    inside = y != 3
    np.testing.assert_allclose(stats.means, np.stack([x[inside & (y == c)].mean(0) for c in range(3)]), rtol=1e-5)
    q = rng.normal(size=(15, 6)) * 2
    p, mu = stats.precision.astype(np.float64), stats.means.astype(np.float64)
    brute = [min(float((v - m) @ p @ (v - m)) for m in mu) for v in q]
    np.testing.assert_allclose(stats.mahalanobis(q), brute, rtol=1e-8, atol=1e-8)
    # The precision is the inverse of the (shrunk) covariance of the class-centred in-scope features.
    from sklearn.covariance import LedoitWolf
    centred = x[inside] - mu[y[inside]]
    np.testing.assert_allclose(stats.precision, LedoitWolf(assume_centered=True).fit(centred).precision_,
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k", [1, 10])
def test_knn_is_the_cosine_distance_to_the_kth_nearest_training_feature(k, monkeypatch):
    import headswap.decisions.oos_scores as mod
    monkeypatch.setattr(mod, "CHUNK", 7)     # several chunks of queries
    x, y, rng = _data(1)
    stats = OosStatistics.fit(x, y, k=k)
    q = rng.normal(size=(20, 6))
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ unit.T
    brute = 1 - np.sort(cos, axis=1)[:, ::-1][:, k - 1]
    np.testing.assert_allclose(stats.knn(q), brute, rtol=1e-6, atol=1e-6)


def test_the_knn_bank_is_bounded():
    x, y, _ = _data(2, n=300)
    stats = OosStatistics.fit(x, y, max_bank=50)
    assert stats.bank.shape == (50, 6) and np.allclose(np.linalg.norm(stats.bank, axis=1), 1, atol=1e-6)


def test_softmax_and_energy_read_the_in_scope_columns():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(8, 4)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(compute("softmax", probs=probs), 1 - probs.max(1))
    np.testing.assert_allclose(compute("softmax", probs=probs, oos_index=2), 1 - np.delete(probs, 2, 1).max(1))
    np.testing.assert_allclose(compute("energy", logits=logits, oos_index=0),
                               -np.log(np.exp(logits[:, 1:]).sum(1)), rtol=1e-10)
    with pytest.raises(ValueError, match="needs the pooled features"):
        compute("knn", probs=probs, logits=logits)


def test_statistics_save_and_load_exactly(tmp_path):
    x, y, rng = _data(4)
    stats = OosStatistics.fit(x, y, k=5)
    stats.save(tmp_path / "s.safetensors")
    again = OosStatistics.load(tmp_path / "s.safetensors")
    q = rng.normal(size=(9, 6))
    assert again.k == 5
    assert np.array_equal(again.mahalanobis(q), stats.mahalanobis(q)) and np.array_equal(again.knn(q), stats.knn(q))
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(HeadswapError, match="cannot be read"):
        OosStatistics.load(tmp_path / "bad.safetensors")


@pytest.mark.parametrize("seed", range(3))
def test_auroc_and_fpr_at_95_tpr_follow_their_definitions(seed):
    rng = np.random.default_rng(seed)
    is_oos = rng.random(80) < 0.3
    score = rng.normal(size=80) + 1.2 * is_oos
    f = figures(score, is_oos)
    pos, neg = score[is_oos], score[~is_oos]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert f["auroc"] == pytest.approx(pairs)
    # Accept a text when its score is at most t: the fewest oos texts accepted while >= 95% in-scope ones are.
    best = min((score[is_oos] <= t).mean() for t in np.unique(score) if (score[~is_oos] <= t).mean() >= 0.95)
    assert f["fpr_at_95_tpr"] == pytest.approx(best)
    assert figures(score, np.zeros(80, bool)) == {"auroc": None, "fpr_at_95_tpr": None}


def test_pick_takes_the_best_auroc_and_the_first_on_a_tie():
    assert pick({"softmax": 0.9, "energy": 0.95, "knn": 0.93}) == "energy"
    assert pick({"softmax": 0.9, "energy": 0.9}) == "softmax"
    assert pick({"softmax": None, "energy": None}) == "softmax"


@pytest.mark.parametrize("seed", range(4))
def test_a_score_threshold_is_the_highest_that_keeps_the_accuracy_target(seed):
    rng = np.random.default_rng(seed)
    n = 50
    probs = rng.dirichlet(np.ones(3), n)
    is_oos = rng.random(n) < 0.3
    y = np.where(is_oos, -1, rng.integers(0, 3, n))
    score = rng.normal(size=n) + is_oos
    target = scores(probs, y, is_oos, None, None)["in_scope_accuracy"] * 0.8
    t, note = tune(probs, y, is_oos, "in_scope_accuracy", target, None, score)
    assert note is None
    got = scores(probs, y, is_oos, t, None, score)
    assert got["in_scope_accuracy"] >= target
    ok = [u for u in np.unique(score) if scores(probs, y, is_oos, float(u), None, score)["in_scope_accuracy"] >= target]
    assert got["rejected"] == max(scores(probs, y, is_oos, float(u), None, score)["rejected"] for u in ok)
    t, _ = tune(probs, y, is_oos, "oos_recall", 0.6, None, score)
    assert scores(probs, y, is_oos, t, None, score)["oos_recall"] >= 0.6


# ---- end to end on a tiny encoder --------------------------------------------------------------------------
TEXTS = ["win cash now", "free prize call", "claim your reward", "see you at noon", "running late sorry",
         "dinner at home"] * 4
LABELS = ["spam", "spam", "spam", "ham", "ham", "ham"] * 4

@pytest.fixture(scope="module")
def knn_model(enc):
    return TextClassifier(model=str(enc), epochs=2, progress=False, out_of_scope="oos", reject_score="knn",
                          reject_metric="oos_recall", reject_target=1.0).fit(TEXTS, LABELS, VAL_TEXTS, VAL_LABELS)


def test_predict_rejects_exactly_the_texts_whose_score_is_above_the_threshold(knn_model):
    clf = knn_model
    assert clf.oos_score_["score"] == "knn" and clf.reject_threshold_ is None
    logits, feats = clf.logits_and_features(VAL_TEXTS)
    knn = clf.oos_statistics_.knn(feats)
    pred = clf.predict(VAL_TEXTS)
    assert [p == "oos" for p in pred] == (knn > clf.oos_score_["threshold"]).tolist()
    assert all(p == "oos" for p, lab in zip(pred, VAL_LABELS) if lab == "oos")     # recall target 1.0
    probs, score = clf.predict_scored(VAL_TEXTS)
    np.testing.assert_array_equal(score, knn)
    assert clf.decide(probs, score).tolist() == pred.tolist()
    with pytest.raises(HeadswapError, match="knn score"):
        clf.decide(probs)


def test_the_statistics_reload_exactly_and_the_saved_model_decides_the_same(knn_model, tmp_path):
    knn_model.save(tmp_path / "m")
    assert (tmp_path / "m" / "oos_statistics.safetensors").is_file()
    again = TextClassifier.load(tmp_path / "m", progress=False)
    assert again.oos_score_["score"] == "knn" and again.oos_score_["threshold"] == knn_model.oos_score_["threshold"]
    assert np.array_equal(again.predict_scored(VAL_TEXTS)[1], knn_model.predict_scored(VAL_TEXTS)[1])
    assert again.predict(VAL_TEXTS).tolist() == knn_model.predict(VAL_TEXTS).tolist()
    (tmp_path / "m" / "oos_statistics.safetensors").unlink()
    with pytest.raises(HeadswapError, match="oos_statistics.safetensors is missing"):
        TextClassifier.load(tmp_path / "m", progress=False)


def test_an_exported_model_gives_the_features_and_rejects_as_torch_does(knn_model, tmp_path):
    pytest.importorskip("onnxruntime")
    from headswap.jobs.export import export
    src = knn_model.save(tmp_path / "m")
    export(src, tmp_path / "onnx")
    exported = TextClassifier.load(tmp_path / "onnx", progress=False)
    assert exported.runtime_ == "onnx"
    np.testing.assert_allclose(exported.logits_and_features(VAL_TEXTS)[1], knn_model.logits_and_features(VAL_TEXTS)[1],
                               atol=1e-4)
    np.testing.assert_allclose(exported.predict_scored(VAL_TEXTS)[1], knn_model.predict_scored(VAL_TEXTS)[1],
                               atol=1e-4)
    assert exported.predict(VAL_TEXTS).tolist() == knn_model.predict(VAL_TEXTS).tolist()


def test_auto_picks_the_score_with_the_best_validation_auroc(enc):
    clf = TextClassifier(model=str(enc), epochs=2, progress=False, out_of_scope="oos").fit(
        TEXTS, LABELS, VAL_TEXTS, VAL_LABELS)
    entry = clf.oos_score_
    assert set(entry["validation"]) == {"softmax", "energy", "mahalanobis", "knn"}
    is_oos = np.array([lab == "oos" for lab in VAL_LABELS])
    order = [i for i, lab in enumerate(VAL_LABELS) if lab != "oos"] + [i for i, lab in enumerate(VAL_LABELS)
                                                                       if lab == "oos"]
    logits, feats = clf.logits_and_features([VAL_TEXTS[i] for i in order])
    values = clf.reject_step_.scores(clf.temperature_step_.apply(logits), logits, feats)
    aurocs = {n: figures(v, is_oos[order])["auroc"] for n, v in values.items()}
    assert aurocs == pytest.approx({n: f["auroc"] for n, f in entry["validation"].items()})
    assert entry["score"] == max(aurocs, key=lambda n: (aurocs[n], -list(aurocs).index(n)))
    assert any(note.startswith("reject_score auto: " + entry["score"]) for note in clf.notes_)
    report = oos.report(clf, VAL_TEXTS, VAL_LABELS)
    assert report["score"] == entry["score"] and report["oos_texts"] == 3
    assert report["scores"]["knn"]["auroc"] == pytest.approx(aurocs["knn"])


def test_auto_without_out_of_scope_validation_texts_falls_back_to_softmax_and_says_why(enc):
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, out_of_scope="oos").fit(
        TEXTS, LABELS, VAL_TEXTS[:6], VAL_LABELS[:6])
    assert clf.oos_score_["score"] == "softmax"
    assert any("no out-of-scope texts to compare" in note for note in clf.notes_)


def test_a_score_a_strategy_cannot_compute_is_refused_in_one_line(enc, tmp_path):
    with pytest.raises(ConfigError, match="strategy 'cross-encoder' has no pooled features .* supports auto, "
                                          "softmax and energy"):
        TextClassifier(model=str(enc), strategy="cross-encoder", out_of_scope="oos",
                       reject_score="mahalanobis").resolved_params()
    with pytest.raises(ConfigError, match="set out_of_scope"):
        TextClassifier(model=str(enc), reject_score="knn").resolved_params()
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in zip(TEXTS, LABELS)))
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "train", "--data", str(data), "--model", str(enc),
                        "--strategy", "cross-encoder", "--out-of-scope", "oos", "--reject-score", "knn", "--out",
                        str(tmp_path / "m"), "-q"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "reject_score 'knn'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_command_line_flag_reaches_the_saved_config_and_eval_reports_every_score(enc, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name, texts, labels in (("train", TEXTS, LABELS), ("validation", VAL_TEXTS, VAL_LABELS),
                                ("test", VAL_TEXTS, VAL_LABELS)):
        (data / f"{name}.csv").write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in zip(texts, labels)))
    run = [sys.executable, "-m", "headswap.cli"]
    r = subprocess.run(run + ["train", "--data", str(data), "--model", str(enc), "--epochs", "2", "--out-of-scope",
                              "oos", "--reject-score", "mahalanobis", "--out", str(tmp_path / "m"), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    config = json.loads((tmp_path / "m" / "headswap_config.json").read_text())
    assert config["params"]["reject_score"] == "mahalanobis" and config["oos_score"]["score"] == "mahalanobis"
    r = subprocess.run(run + ["eval", "--model-dir", str(tmp_path / "m"), "--data", str(data), "--out",
                              str(tmp_path / "ev"), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "mahalanobis* AUROC" in r.stdout and "knn AUROC" in r.stdout
    block = json.loads((tmp_path / "ev" / "metrics.json").read_text())["extra"]["out_of_scope"]
    assert set(block["scores"]) == {"softmax", "energy", "mahalanobis", "knn"} and block["score"] == "mahalanobis"
    assert (tmp_path / "ev" / "oos_scores.png").is_file()
    r = subprocess.run(run + ["predict", "--model-dir", str(tmp_path / "m"), "--data", str(data / "test.csv"),
                              "--out", str(tmp_path / "pred.jsonl"), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    clf = TextClassifier.load(tmp_path / "m", progress=False)
    assert [row["label"] for row in rows] == [str(v) for v in clf.predict(VAL_TEXTS)]


def test_the_server_rejects_by_the_score(knn_model):
    from fastapi.testclient import TestClient

    from headswap.serve.app import create_app
    client = TestClient(create_app(knn_model))
    got = client.post("/predict", json={"texts": VAL_TEXTS}).json()["predictions"]
    assert [p["label"] for p in got] == [str(v) for v in knn_model.predict(VAL_TEXTS)]
    assert set(got[0]["probabilities"]) == {"ham", "spam"}


def test_bench_takes_out_of_scope_test_rows_and_reports_every_score(enc, tmp_path):
    from headswap.bench.run import run_bench
    data = tmp_path / "data"
    data.mkdir()
    oos_texts = ["the weather in paris", "translate this to french", "how tall is a giraffe", "book a flight"]
    for name, texts, labels in (("train", TEXTS, LABELS), ("validation", VAL_TEXTS, VAL_LABELS),
                                ("test", VAL_TEXTS[:6] + oos_texts, VAL_LABELS[:6] + ["oos"] * 4)):
        (data / f"{name}.csv").write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in zip(texts, labels)))
    results = run_bench(data, models=[str(enc)], strategies="encoder-mlp", epochs=1, out=tmp_path / "out",
                        progress=False, estimate=False, log=lambda _msg: None, out_of_scope="oos")
    base, row = results["rows"]
    assert row["status"] == "ok" and base["status"] == "ok", (row.get("error"), base.get("error"))
    assert base["n_test"] == row["n_test"] == 6          # the oos rows are not a class of either
    block = row["out_of_scope"]
    assert block["oos_texts"] == 4 and block["in_scope_texts"] == 6
    assert set(block["scores"]) == {"softmax", "energy", "mahalanobis", "knn"}
    assert 0 <= block["scores"]["knn"]["auroc"] <= 1
    b = base["out_of_scope"]
    assert b["score"] == "softmax" and b["oos_texts"] == 4 and b["scores"]["softmax"]["auroc"] is not None
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Out of scope (reject option) on the test set" in md
    # what each row's validation texts promised (in-scope accuracy 0.95 by default): 6 texts cannot support it
    for r in (row, base):
        e = r["out_of_scope"]["expected"]
        assert e["metric"] == "in_scope_accuracy" and e["texts"] == 6 and not e["supported"]
        assert f"- {r['model_name']} · {r['strategy']}: in-scope accuracy " in md
    assert md.count("on 6 in-scope validation texts: these validation texts cannot support the target 0.95") == 2
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="out-of-scope"' in html and "out-of-scope score distributions" in html
    assert "What the validation texts promise for new ones" in html


def test_refit_adds_the_feature_scores_to_a_model_fitted_without_them(enc):
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, out_of_scope="oos", reject_score="softmax",
                         reject_metric="oos_recall", reject_target=1.0).fit(TEXTS, LABELS, VAL_TEXTS, VAL_LABELS)
    assert clf.oos_statistics_ is None and clf.oos_score_["score"] == "softmax"
    with pytest.raises(HeadswapError, match="needs out-of-scope statistics"):
        clf.set_params(reject_score="mahalanobis")
        clf.calibrate(VAL_TEXTS, VAL_LABELS)
    oos.refit(clf, TEXTS, LABELS, VAL_TEXTS, VAL_LABELS, reject_score="mahalanobis")
    assert clf.oos_score_["score"] == "mahalanobis" and clf.oos_statistics_ is not None
    feats = clf.logits_and_features(VAL_TEXTS)[1]
    expect = clf.oos_statistics_.mahalanobis(feats) > clf.oos_score_["threshold"]
    assert [p == "oos" for p in clf.predict(VAL_TEXTS)] == expect.tolist()
