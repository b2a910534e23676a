"""The bench's reference row: TF-IDF + LinearSVC on the same split as the model rows."""

from __future__ import annotations

import time

from headswap.trials.measure import PeakMemory
from headswap.trials.plan import BenchData
from headswap.trials.rows import error_fields, metric_fields, tfidf_reject_block

BASELINE_MODEL, BASELINE_STRATEGY, BASELINE_REGIME = "tfidf", "tfidf-linearsvc", "baseline"


def tfidf_svm(seed: int = 0, multi_label: bool = False):
    """The baseline's scikit-learn pipeline: TF-IDF word 1-2 grams + char_wb 2-5 grams (sublinear tf) and a
    LinearSVC (C=1); for multi-label data one LinearSVC per label (one-vs-rest) on an indicator matrix."""
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.svm import LinearSVC

    from headswap.baseline.tfidf import tfidf_features
    svm = LinearSVC(C=1.0, random_state=seed)
    return Pipeline([("tfidf", tfidf_features()), ("svm", OneVsRestClassifier(svm) if multi_label else svm)])


def run_tfidf_baseline(data: BenchData, seed: int = 0, reject: dict | None = None) -> dict:
    """TF-IDF (word 1-2 grams + char_wb 2-5 grams, sublinear tf) + LinearSVC, on the same split. With reject
    (out_of_scope, reject_metric, reject_target): the test's out-of-scope rows are left out of its metrics, and
    the row's out_of_scope block is the max-probability rule on TF-IDF + logistic regression (headswap.baseline.tfidf),
    whose probabilities a LinearSVC lacks, tuned on the validation data as the model rows are."""
    from headswap.metrics import metrics_from_predictions

    row = {"model": BASELINE_MODEL, "model_name": BASELINE_MODEL, "model_kind": "bag-of-n-grams",
           "strategy": BASELINE_STRATEGY, "regime": BASELINE_REGIME, "epochs": None, "baseline": True,
           "status": "ok", "description": "TF-IDF word 1-2 grams + char_wb 2-5 grams (sublinear tf, FeatureUnion) "
                                          "+ LinearSVC (C=1), scikit-learn"}
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        try:
            labels = sorted(set(data.train.labels))
            index = {lab: i for i, lab in enumerate(labels)}
            pipe = tfidf_svm(seed)
            pipe.fit(data.train.texts, [index[v] for v in data.train.labels])
            train_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            pred = pipe.predict(data.test.texts)
            eval_s = time.perf_counter() - t1
            keep = [i for i, v in enumerate(data.test.labels) if v in index]    # out-of-scope rows: no class
            m = metrics_from_predictions([index[data.test.labels[i]] for i in keep], pred[keep], labels)
            svm = pipe.named_steps["svm"]
            n_params = int(svm.coef_.size + svm.intercept_.size)
            row.update(metric_fields(m))
            row.update(trainable_params=n_params, total_params=n_params, effective_params=n_params,
                       embedding_params=None, n_features=int(svm.coef_.shape[1]), train_seconds=train_s,
                       fit_seconds=train_s, load_seconds=0.0, eval_seconds=eval_s,
                       texts_per_second=len(data.test) / eval_s if eval_s else 0.0,
                       forward_passes_per_text=None, forward_passes_nominal="no transformer",
                       history=[], best_epoch=None, notes=[])
            if reject is not None:
                row["out_of_scope"] = _reject_block(data, reject)
        except Exception as e:
            row.update(error_fields(e))
        row["wall_seconds"] = time.perf_counter() - t0
    row.update(mem.to_dict())
    return row


def _reject_block(data: BenchData, reject: dict) -> dict:
    from headswap.baseline.tfidf import TfidfClassifier
    clf = TfidfClassifier().fit(data.train.texts, data.train.labels)    # learns the label when train has it
    out = tfidf_reject_block(clf, data.validation, data.test, reject["out_of_scope"], reject["reject_metric"],
                             reject["reject_target"])
    out["model"] = "TF-IDF + logistic regression (headswap.baseline.tfidf), its probabilities"
    return out
