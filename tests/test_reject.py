"""The reject option (issue 25): out-of-scope texts answered with their own label. The threshold search is
checked against a brute force over every threshold, the scores against hand counts, and the option end to end
through TextClassifier, a saved model, `headswap train`, `eval`, `predict` and the server's decisions."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.errors import ConfigError, HeadswapError
from headswap.decisions.postprocess import Reject
from headswap.decisions.reject import describe_expectation, interval, rejected, scores, top_in_scope, tune

pytestmark = pytest.mark.usefixtures("one_thread")

# Four texts over classes (a, b, oos): two in scope (a, b), two out of scope.
PROBS = np.array([[0.9, 0.05, 0.05],    # a, confident
                  [0.3, 0.6, 0.1],      # b, unsure
                  [0.5, 0.1, 0.4],      # oos, looks like a
                  [0.2, 0.2, 0.6]])     # oos, the oos class wins
Y = np.array([0, 1, 2, 2])
IS_OOS = np.array([False, False, True, True])


def test_rejected_by_threshold_and_by_the_out_of_scope_class():
    assert rejected(PROBS, None, None).tolist() == [False] * 4
    assert rejected(PROBS, None, 2).tolist() == [False, False, False, True]
    # Top in-scope probabilities: 0.9, 0.6, 0.5, 0.2.
    assert top_in_scope(PROBS, 2)[1].tolist() == [0.9, 0.6, 0.5, 0.2]
    assert rejected(PROBS, 0.55, 2).tolist() == [False, False, True, True]
    assert rejected(PROBS, 0.61, 2).tolist() == [False, True, True, True]
    assert rejected(PROBS[:0], 0.5, 2).tolist() == []


def test_scores_count_a_rejected_in_scope_text_as_wrong():
    s = scores(PROBS, Y, IS_OOS, 0.61, 2)
    assert s["in_scope_accuracy"] == 0.5          # b was rejected
    assert s["oos_recall"] == 1.0 and s["oos_precision"] == pytest.approx(2 / 3)
    assert s["oos_f1"] == pytest.approx(0.8) and s["rejected"] == 0.75
    s = scores(PROBS, Y, IS_OOS, None, None)     # no option at all: nothing rejected
    assert s["in_scope_accuracy"] == 1.0 and s["oos_recall"] == 0.0 and s["oos_precision"] is None


def _brute(probs, y, is_oos, metric, target, k):
    """Every threshold on a fine grid and at each confidence: the best one that meets the target."""
    conf = top_in_scope(probs, k)[1]
    grid = np.unique(np.concatenate([np.linspace(0, 1, 2001), np.nextafter(conf, 2.0), np.nextafter(conf, -1)]))
    grid = grid[(grid >= 0) & (grid <= 1)]
    ok = [t for t in grid if scores(probs, y, is_oos, float(t), k)[metric] >= target]
    return ok


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [None, 3])
def test_tuned_threshold_is_the_best_that_meets_the_target(seed, k):
    rng = np.random.default_rng(seed)
    n = 60
    logits = rng.normal(size=(n, 4)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    is_oos = rng.random(n) < 0.3
    y = np.where(is_oos, 3, rng.integers(0, 3, n)) if k is not None else np.where(is_oos, -1, rng.integers(0, 4, n))
    base = scores(probs, y, is_oos, None, k)["in_scope_accuracy"]
    target = base * 0.8
    t, note = tune(probs, y, is_oos, "in_scope_accuracy", target, k)
    assert note is None
    s = scores(probs, y, is_oos, t, k)
    assert s["in_scope_accuracy"] >= target
    # Nothing higher keeps the target, so no threshold rejects more out-of-scope texts at that accuracy.
    ok = _brute(probs, y, is_oos, "in_scope_accuracy", target, k)
    assert s["oos_recall"] == max(scores(probs, y, is_oos, float(u), k)["oos_recall"] for u in ok)
    assert not any(u > t and scores(probs, y, is_oos, float(u), k)["rejected"] > s["rejected"] for u in ok)

    t, note = tune(probs, y, is_oos, "oos_recall", 0.7, k)
    s = scores(probs, y, is_oos, t, k)
    assert note is None and s["oos_recall"] >= 0.7
    ok = _brute(probs, y, is_oos, "oos_recall", 0.7, k)
    assert s["in_scope_accuracy"] == max(scores(probs, y, is_oos, float(u), k)["in_scope_accuracy"] for u in ok)


def test_an_unreachable_accuracy_target_sets_no_threshold_and_says_so():
    t, note = tune(PROBS, np.array([1, 1, 2, 2]), IS_OOS, "in_scope_accuracy", 0.9, 2)   # a is wrong already
    assert t == 0.0 and "in scope accuracy is 0.500" in note and "target 0.9" in note
    with pytest.raises(ValueError, match="needs out-of-scope texts"):
        tune(PROBS[:2], Y[:2], IS_OOS[:2], "oos_recall", 0.5, None)


# ---- a target kept at the lower end of its interval on the validation counts (issue 69) ---------------------------

def test_the_interval_is_wilsons():
    stats = pytest.importorskip("scipy.stats")
    for k, n in [(0, 10), (8, 10), (10, 10), (160, 200), (3, 3), (57, 120)]:
        ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert interval(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


def _oos_validation(n_oos: int, n_in: int = 300):
    """Two classes, softmax top probabilities: the out-of-scope texts' all distinct and below every in-scope
    text's, so a threshold rejects the k least confident out-of-scope texts and nothing else."""
    top = np.concatenate([np.linspace(0.9, 0.99, n_in), np.linspace(0.5, 0.89, n_oos)])
    probs = np.column_stack([top, 1 - top])
    is_oos = np.arange(len(top)) >= n_in
    return probs, np.where(is_oos, -1, 0), is_oos


def test_a_recall_target_met_at_the_point_estimate_is_set_where_its_lower_bound_meets_it():
    """200 out-of-scope validation texts and a target of 0.8: the point estimate's threshold rejects exactly 160
    of them (0.80, whose interval reaches down to 0.74); the threshold set reaches 0.8 at the interval's lower end,
    and is the loosest that does."""
    probs, y, is_oos = _oos_validation(200)
    point, _ = tune(probs, y, is_oos, "oos_recall", 0.8, None)
    assert scores(probs, y, is_oos, point, None)["oos_recall"] == 0.8
    step = Reject()
    notes = step.fit(probs, np.log(probs), None, y, is_oos, score="softmax", metric="oos_recall", target=0.8)
    assert notes == [] and step.threshold > point
    k = int(rejected(probs, step.threshold, None)[is_oos].sum())
    assert interval(k, 200)[0] >= 0.8 > interval(k - 1, 200)[0] and k > 160
    assert int(rejected(probs, step.threshold, None)[~is_oos].sum()) == 0
    e = step.entry["expected"]
    assert e == {"metric": "oos_recall", "value": k / 200, "low": interval(k, 200)[0], "high": interval(k, 200)[1],
                 "texts": 200, "confidence": 0.95, "target": 0.8, "supported": True}
    assert describe_expectation(e) == (f"out-of-scope recall {k / 200:.2f}, 95% interval {e['low']:.2f}-"
                                       f"{e['high']:.2f} on 200 out-of-scope validation texts: the target 0.8 holds "
                                       f"at the interval's lower end")


def test_an_accuracy_target_is_kept_at_its_lower_bound_too():
    """In-scope accuracy falls as the threshold rises: at its lower bound the threshold is looser than at the
    point estimate (fewer in-scope texts rejected)."""
    rng = np.random.default_rng(0)
    top = rng.uniform(0.5, 1.0, 400)      # every in-scope text right: a rejected one is the only way to be wrong
    probs = np.column_stack([top, 1 - top])
    y = np.zeros(400, dtype=int)
    is_oos = np.zeros(400, dtype=bool)
    point, _ = tune(probs, y, is_oos, "in_scope_accuracy", 0.9, None)
    bound, note = tune(probs, y, is_oos, "in_scope_accuracy", 0.9, None, confidence=0.95)
    assert note is None and bound < point
    assert scores(probs, y, is_oos, point, None)["in_scope_accuracy"] >= 0.9
    right = int((~rejected(probs, bound, None)).sum())
    assert interval(right, 400)[0] >= 0.9 and right > int((~rejected(probs, point, None)).sum())


def test_too_few_out_of_scope_texts_for_the_target_are_said_plainly():
    """10 out-of-scope validation texts: even all 10 rejected show recall 0.72 at the interval's lower end, below
    0.8. The threshold is then the point estimate's, and the note and the expectation say the texts cannot
    support the target."""
    probs, y, is_oos = _oos_validation(10, n_in=50)
    point, _ = tune(probs, y, is_oos, "oos_recall", 0.8, None)
    threshold, note = tune(probs, y, is_oos, "oos_recall", 0.8, None, confidence=0.95)
    assert threshold == point
    assert "holds 10 out-of-scope texts" in note and "95% interval is 0.722" in note and "cannot support it" in note
    step = Reject()
    assert step.fit(probs, np.log(probs), None, y, is_oos, score="softmax", metric="oos_recall", target=0.8) == [note]
    e = step.entry["expected"]
    assert e["value"] == 0.8 and e["texts"] == 10 and not e["supported"]
    assert "cannot support the target 0.8" in describe_expectation(e)


def test_results_md_says_what_the_validation_texts_promise():
    from headswap.reports.markdown import oos_table
    probs, y, is_oos = _oos_validation(200)
    step = Reject()
    step.fit(probs, np.log(probs), None, y, is_oos, score="softmax", metric="oos_recall", target=0.8)
    block = {"label": "oos", **step.report(probs, np.log(probs), None, y, is_oos)}
    row = {"status": "ok", "model_name": "MiniLM", "strategy": "encoder-mlp", "regime": "full", "macro_f1": 0.9,
           "out_of_scope": block}
    md = "\n".join(oos_table([row]))
    assert f"- MiniLM · encoder-mlp: {describe_expectation(step.entry['expected'])}" in md


# ---- through TextClassifier, a saved model and the command line -------------------------------------------------

TEXTS = ["win cash now", "free call now", "claim prize", "see you at noon", "ok home", "running late"] * 4
LABELS = ["spam", "spam", "spam", "ham", "ham", "ham"] * 4
VAL_TEXTS = ["win a prize", "call now free", "see you home", "late again", "cash now", "ok noon",
             "the weather in paris", "translate this to french", "how tall is a giraffe"]
VAL_LABELS = ["spam", "spam", "ham", "ham", "spam", "ham", "oos", "oos", "oos"]


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("reject") / "enc")


@pytest.fixture(scope="module")
def fitted(enc):
    # softmax: these tests check the top-probability rule; tests/test_oos_scores.py covers the other scores.
    return TextClassifier(model=str(enc), epochs=2, progress=False, out_of_scope="oos", reject_metric="oos_recall",
                          reject_target=1.0, reject_score="softmax").fit(TEXTS, LABELS, VAL_TEXTS, VAL_LABELS)


def test_fit_tunes_the_threshold_on_the_validation_texts_and_predict_answers_oos(fitted):
    clf = fitted
    assert clf.labels_ == ["ham", "spam"] and clf.oos_index_ is None
    probs = clf.predict_proba(VAL_TEXTS)
    is_oos = np.array([lab == "oos" for lab in VAL_LABELS])
    y = np.array([clf.labels_.index(lab) if lab != "oos" else -1 for lab in VAL_LABELS])
    t, _ = tune(probs, y, is_oos, "oos_recall", 1.0, None)
    assert clf.reject_threshold_ == pytest.approx(t, rel=1e-6)
    pred = clf.predict(VAL_TEXTS)
    # Target recall 1.0: every out-of-scope validation text is turned away, and exactly the texts whose top
    # probability is below the threshold are.
    assert all(p == "oos" for p, lab in zip(pred, VAL_LABELS) if lab == "oos")
    assert [p == "oos" for p in pred] == (probs.max(1) < clf.reject_threshold_).tolist()
    assert clf.decide(probs).tolist() == pred.tolist()


def test_evaluate_scores_in_scope_rows_as_usual_and_reports_out_of_scope(fitted):
    m = fitted.evaluate(VAL_TEXTS, VAL_LABELS)
    assert m.labels == ["ham", "spam"] and int(np.sum(m.confusion)) == 6
    o = m.extra["out_of_scope"]
    assert o["label"] == "oos" and o["oos_texts"] == 3 and o["in_scope_texts"] == 6 and o["oos_recall"] == 1.0
    pred = fitted.predict(VAL_TEXTS)
    right = [p == lab for p, lab in zip(pred, VAL_LABELS) if lab != "oos"]
    assert o["in_scope_accuracy"] == pytest.approx(np.mean(right))


def test_the_threshold_is_saved_and_reloads_exactly_and_a_corrupt_one_is_refused(fitted, tmp_path):
    fitted.save(tmp_path / "m")
    again = TextClassifier.load(tmp_path / "m", progress=False)
    assert again.reject_threshold_ == fitted.reject_threshold_ and again.out_of_scope == "oos"
    assert again.predict(VAL_TEXTS).tolist() == fitted.predict(VAL_TEXTS).tolist()
    cfg_file = tmp_path / "m" / "headswap_config.json"
    for bad in (1.5, -0.1, "high"):
        cfg = json.loads(cfg_file.read_text())
        cfg["reject_threshold"] = bad
        cfg_file.write_text(json.dumps(cfg))
        with pytest.raises(HeadswapError, match="reject_threshold must be a number in"):
            TextClassifier.load(tmp_path / "m", progress=False)


def test_an_out_of_scope_class_in_the_training_data_is_learned_and_rejects(enc):
    texts = TEXTS + ["weather in paris", "giraffe height", "french please"] * 4
    labels = LABELS + ["oos"] * 12
    clf = TextClassifier(model=str(enc), epochs=2, progress=False, out_of_scope="oos", reject_target=0.01).fit(
        texts, labels, VAL_TEXTS, VAL_LABELS)
    assert clf.labels_ == ["ham", "oos", "spam"] and clf.oos_index_ == 1
    probs = clf.predict_proba(texts)
    expect = (probs.argmax(1) == 1) | (np.delete(probs, 1, axis=1).max(1) < (clf.reject_threshold_ or 0))
    assert [p == "oos" for p in clf.predict(texts)] == expect.tolist()


def test_integer_classes_get_an_integer_reject_label(enc):
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, out_of_scope="-1", reject_metric="oos_recall",
                         reject_target=1.0)
    clf.fit(TEXTS, [1 if lab == "spam" else 0 for lab in LABELS], VAL_TEXTS,
            [{"spam": 1, "ham": 0, "oos": -1}[lab] for lab in VAL_LABELS])
    pred = clf.predict(VAL_TEXTS)
    assert pred.dtype.kind == "i" and -1 in pred.tolist() and set(pred.tolist()) <= {-1, 0, 1}


def test_settings_the_option_cannot_work_with_are_refused_before_training(enc):
    with pytest.raises(ConfigError, match="single-label"):
        TextClassifier(model=str(enc), multi_label=True, out_of_scope="oos").resolved_params()
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, out_of_scope="oos", reject_metric="oos_recall")
    with pytest.raises(ConfigError, match="needs out-of-scope texts .label 'oos'. in the validation data"):
        clf.fit(TEXTS, LABELS, VAL_TEXTS[:6], VAL_LABELS[:6])
    assert not hasattr(clf, "module_")      # refused before anything was built
    with pytest.raises(HeadswapError, match="every text is labelled 'oos'"):
        TextClassifier(model=str(enc), epochs=1, progress=False, out_of_scope="oos").fit(
            TEXTS, LABELS, VAL_TEXTS[6:], VAL_LABELS[6:])


def _csv(path, texts, labels):
    path.write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in zip(texts, labels)))


def test_the_command_line_trains_evaluates_and_predicts_with_the_reject_option(fitted, enc, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _csv(data / "train.csv", TEXTS, LABELS)
    _csv(data / "validation.csv", VAL_TEXTS, VAL_LABELS)
    _csv(data / "test.csv", VAL_TEXTS, VAL_LABELS)
    run = [sys.executable, "-m", "headswap.cli"]
    r = subprocess.run(run + ["train", "--data", str(data), "--model", str(enc), "--epochs", "2", "--out-of-scope",
                              "oos", "--reject-metric", "oos_recall", "--reject-target", "1", "--out",
                              str(tmp_path / "m"), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "out of scope (oos): in-scope accuracy" in r.stdout and "out-of-scope recall 100.0%" in r.stdout
    r = subprocess.run(run + ["eval", "--model-dir", str(tmp_path / "m"), "--data", str(data), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "out-of-scope recall 100.0%, precision" in r.stdout and "(3 texts)" in r.stdout
    r = subprocess.run(run + ["predict", "--model-dir", str(tmp_path / "m"), "--data", str(data / "test.csv"),
                              "--out", str(tmp_path / "pred.jsonl"), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    clf = TextClassifier.load(tmp_path / "m", progress=False)
    assert [row["label"] for row in rows] == [str(v) for v in clf.predict(VAL_TEXTS)]
    assert sum(row["label"] == "oos" for row in rows) >= 3
    r = subprocess.run(run + ["train", "--data", str(data), "--model", str(enc), "--reject-target", "0",
                              "--out", str(tmp_path / "m2"), "-q"], capture_output=True, text=True)
    assert r.returncode == 2 and "--reject-target" in r.stderr and "Traceback" not in r.stderr


def test_the_server_answers_the_reject_label(fitted):
    from fastapi.testclient import TestClient

    from headswap.serve.app import create_app
    client = TestClient(create_app(fitted))
    got = client.post("/predict", json={"texts": VAL_TEXTS}).json()["predictions"]
    assert [p["label"] for p in got] == [str(v) for v in fitted.predict(VAL_TEXTS)]
    assert set(got[0]["probabilities"]) == {"ham", "spam"}


def test_an_exported_model_rejects_as_the_torch_one_does(fitted, tmp_path):
    from headswap.jobs.export import export
    src = fitted.save(tmp_path / "m")
    export(src, tmp_path / "onnx")
    exported = TextClassifier.load(tmp_path / "onnx", progress=False)
    assert exported.runtime_ == "onnx" and exported.reject_threshold_ == fitted.reject_threshold_
    assert exported.predict(VAL_TEXTS).tolist() == fitted.predict(VAL_TEXTS).tolist()
    assert "oos" in exported.predict(VAL_TEXTS).tolist()


@pytest.mark.parametrize("flag, value", [("--reject-score", "energy"), ("--reject-target", "0.9"),
                                         ("--reject-metric", "oos_recall"),
                                         ("--reject-metric", "in_scope_accuracy")])    # the default, given
@pytest.mark.parametrize("command", ["train", "bench", "auto"])
def test_a_reject_setting_without_out_of_scope_is_refused_before_any_work(enc, tmp_path, monkeypatch, command, flag,
                                                                          value):
    """Without --out-of-scope there is no threshold: each reject setting is refused alike, in one line, before
    training starts (the entry points are patched to fail the test if reached)."""
    import headswap.auto.main
    import headswap.bench.run
    from cli_run import invoke

    def started(*a, **kw):
        raise AssertionError(f"{command} {flag} {value} without --out-of-scope started the work")

    for target, name in ((TextClassifier, "fit"), (headswap.bench.run, "run_bench"), (headswap.auto.main, "auto")):
        monkeypatch.setattr(target, name, started)
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        _csv(data / f"{split}.csv", TEXTS, LABELS)
    argv = {"train": ["train", "--data", str(data / "train.csv")], "bench": ["bench", "--data", str(data)],
            "auto": ["auto", "--data", str(data), "--budget", "1m"]}[command]
    rc, _, err = invoke(argv + ["--model", str(enc), "--out", str(tmp_path / "out"), flag, value, "-q"])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert flag in lines[0] and "--out-of-scope" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
    # the same values given with the default are no change, and pass this check
    with pytest.raises(AssertionError, match="started the work"):
        invoke(argv + ["--model", str(enc), "--out", str(tmp_path / "out"), "-q"])


def test_an_out_of_scope_label_no_text_has_is_named(enc, caplog):
    """--out-of-scope OOS on data labelled oos: a warning that no text has the label, naming the near-miss;
    without it the run tuned on in-scope texts alone, without a word, and predict answered OOS."""
    import logging

    from headswap.data.once import _warned
    from headswap.classifier.reject_option import unseen_label_note

    _warned.discard(("unseen out of scope", "OOS"))
    with caplog.at_level(logging.WARNING):
        TextClassifier(model=str(enc), epochs=1, progress=False, out_of_scope="OOS").fit(
            TEXTS + VAL_TEXTS[6:] * 2, LABELS + VAL_LABELS[6:] * 2, VAL_TEXTS, VAL_LABELS)
    said = [r.getMessage() for r in caplog.records if "out-of-scope label 'OOS'" in r.getMessage()]
    assert len(said) == 1 and "(the data has 'oos', which differs only in case or spaces)" in said[0], said
    assert unseen_label_note("oos", LABELS + VAL_LABELS) is None and unseen_label_note(None, LABELS) is None
    assert "differs" not in unseen_label_note("none", LABELS)


def test_too_few_out_of_scope_validation_texts_for_a_recall_target_are_said_once_with_their_error(enc, caplog):
    """auto on CLINC150 tuned out-of-scope recall 0.8 on the 10 out-of-scope texts it held out, and test's 100 read
    0.42: a recall target on so few texts is warned of (once), noted on the model and in auto's warnings."""
    import logging
    import types

    from headswap.auto.data import Data, data_warnings
    from headswap.classifier.reject_option import few_out_of_scope_note
    from headswap.data.once import _warned

    assert "about 13%" in few_out_of_scope_note("oos", 10, 0.8)         # sqrt(0.8 * 0.2 / 10)
    assert few_out_of_scope_note("oos", 100, 0.8) is None                  # 4%: within the bound
    _warned.discard(("few out of scope", "oos", 3))
    with caplog.at_level(logging.WARNING):
        clf = TextClassifier(model=str(enc), epochs=1, progress=False, out_of_scope="oos", reject_metric="oos_recall",
                             reject_target=0.8, reject_score="softmax")
        for _ in range(2):
            clf.fit(TEXTS, LABELS, VAL_TEXTS, VAL_LABELS)
    said = [r.getMessage() for r in caplog.records if "out-of-scope texts ('oos')" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("validation holds 3 out-of-scope texts ('oos')"), said
    assert said[0] in clf.notes_
    split = types.SimpleNamespace
    data = Data(split(labels=LABELS), split(labels=VAL_LABELS), None, {})
    settings = {"out_of_scope": "oos", "reject_metric": "oos_recall", "reject_target": 0.8}
    assert data_warnings(data, settings) == said
    assert data_warnings(data, {**settings, "reject_metric": "in_scope_accuracy"}) == []
