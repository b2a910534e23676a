"""The reject option of a fitted TextClassifier, on any out-of-scope score (headswap.decisions.oos_scores).

The step itself (its arithmetic, state and saving) is headswap.decisions.postprocess.Reject, the classifier's reject_step_;
this module feeds it from the classifier: which rows are out of scope, the logits and pooled features of texts.
fit_statistics() fits what mahalanobis and knn read on the training features; tune() has the step pick a score
(reject_score, or auto: the best validation AUROC) and tune its threshold on the validation texts;
predict_scored() gives what the step decides on; report() gives the threshold-free figures of every score and
the decisions at the threshold on labelled texts that include out-of-scope rows.

    from headswap.classifier import reject_option as oos
    clf = TextClassifier(out_of_scope="oos", reject_score="auto").fit(train_texts, train_labels, val_t, val_l)
    oos.report(clf, test_texts, test_labels)    # {"score", "scores": {name: {auroc, fpr_at_95_tpr}}, ...}
"""

from __future__ import annotations

import logging
import math

import numpy as np

from headswap.decisions import oos_scores, reject
from headswap.errors import ConfigError, HeadswapError
from headswap.decisions.oos_scores import FEATURE_SCORES

log = logging.getLogger(__name__)


def wants_statistics(clf) -> bool:
    """Whether fitting `clf` should fit the feature scores' statistics: its reject score may be one of them."""
    return (clf.out_of_scope is not None and clf.reject_score in ("auto",) + FEATURE_SCORES
            and clf.strategy_.pooled_features)


def score_name(clf) -> str:
    """The score `clf` rejects by (softmax for models tuned before there was a choice)."""
    step = getattr(clf, "reject_step_", None)    # unfitted: softmax, and inference then says it is unfitted
    return step.score_name if step is not None else "softmax"


# ---- which rows are out of scope ----------------------------------------------------------------------------
def without_outside(clf, data):
    """(data without its out-of-scope rows, their texts) when out_of_scope is a label that training never
    saw as a class; otherwise (data, None)."""
    from headswap.classifier.fit_data import set_apart
    if data is None or clf.out_of_scope is None:
        return data, None
    return set_apart(data, clf.out_of_scope if clf.oos_index_ is None else None)


def unseen_label_note(out_of_scope, labels) -> str | None:
    """One line when no text of `labels` (training and validation) carries the out-of-scope label: a typo such
    as OOS for oos trains and tunes on in-scope texts alone and then answers the typo. None when one does."""
    if out_of_scope is None or out_of_scope in labels:
        return None
    key = str(out_of_scope).strip().casefold()
    alike = [lab for lab in dict.fromkeys(labels) if str(lab).strip().casefold() == key]
    return (f"out-of-scope label {out_of_scope!r}: no training or validation text has it"
            + (f" (the data has {alike[0]!r}, which differs only in case or spaces)" if alike else "")
            + f"; the reject threshold is tuned on in-scope texts alone and predict answers {out_of_scope!r} for "
              f"the texts it rejects")


# An out-of-scope recall read on n texts has a binomial standard error of sqrt(t(1 - t) / n) at the target t: over
# this, a threshold that meets the target on validation can miss it widely on new texts. auto on CLINC150 holds out 10
# of the training file's 100 out-of-scope texts; where they read 0.8 or more, the 100 of its test split read 0.42.
FEW_OUT_OF_SCOPE_ERROR = 0.05


def few_out_of_scope_note(out_of_scope, n: int, target: float) -> str | None:
    """One line when `n` out-of-scope validation texts are too few to tune an out-of-scope recall `target` on."""
    error = math.sqrt(target * (1 - target) / n) if n > 0 else 0.0
    if error <= FEW_OUT_OF_SCOPE_ERROR:
        return None
    return (f"validation holds {n} out-of-scope text{'s' if n != 1 else ''} ({out_of_scope!r}): the reject threshold "
            f"reaches out-of-scope recall {target:g} on them, a figure with a standard error of about {error:.0%} "
            f"on so few, so new texts may fall well short of it; more out-of-scope validation texts set it surely")


def check_reject_data(clf, val, oos_texts) -> None:
    """Before training: fail now, not after it, when the reject threshold cannot be tuned as asked."""
    if clf.out_of_scope is None:
        return
    if clf.oos_index_ is None and not oos_texts:
        from headswap.data.once import warn_once
        note = unseen_label_note(clf.out_of_scope, list(clf.fitted_.labels) + list(val.labels if val else []))
        if note:
            warn_once(("unseen out of scope", clf.out_of_scope), note)
    if val is None:
        note = (f"out_of_scope {clf.out_of_scope!r}: no validation data, so no reject threshold is tuned"
                + (" (the out-of-scope class still rejects)" if clf.oos_index_ is not None else ""))
        log.warning(note)
        clf.notes_.append(note)
    elif clf.reject_metric == "oos_recall":
        n = len(oos_texts or ()) + list(val.labels).count(clf.out_of_scope)
        if not n:
            raise ConfigError(f"reject_metric oos_recall needs out-of-scope texts (label {clf.out_of_scope!r}) in "
                              f"the validation data, and it has none")
        note = few_out_of_scope_note(clf.out_of_scope, n, clf.reject_target)
        if note:
            from headswap.data.once import warn_once
            warn_once(("few out of scope", clf.out_of_scope, n), note)
            clf.notes_.append(note)


def reject_rows(clf, y_in, outside: int) -> tuple[np.ndarray, np.ndarray]:
    """(class index, is out of scope) of rows that are the in-scope rows' class indices y_in (the out-of-scope
    class, if learned, counts as out of scope) followed by `outside` rows whose label is no class (index -1)."""
    y = np.concatenate([np.asarray(y_in, dtype=np.int64), np.full(outside, -1)])
    is_oos = y == clf.oos_index_ if clf.oos_index_ is not None else np.zeros(len(y), dtype=bool)
    is_oos[len(y) - outside:] = True
    return y, is_oos


def reject_value(clf):
    """What predict answers for a rejected text: the out-of-scope class's value, or the label itself (an
    integer when the classes are integers and it reads as one)."""
    if clf.oos_index_ is not None:
        return clf.classes_[clf.oos_index_]
    if clf.classes_.dtype.kind in "iu" and clf.out_of_scope.lstrip("-").isdigit():
        return int(clf.out_of_scope)
    return clf.out_of_scope



# ---- inference ----------------------------------------------------------------------------------------------
def infer(clf, texts, features: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """((N, K) logits, (N, D) pooled features or None) of `texts` from one pass of the model, a chunked text's
    windows aggregated (logits as the model does, features by their mean). Features only when asked for and
    the model has them."""
    from headswap.data.load import from_lists
    from headswap.nn.inference import per_text
    clf._check_fitted()
    texts = from_lists(texts, None, "prediction input").texts
    if not (features and clf.strategy_.pooled_features):
        return clf.decision_function(texts), None
    items = clf.encoder_.encode(texts)
    clf.encoder_.report_truncation(len(texts))
    clf.module_.start_predict()
    logits, feats = clf.module_.logits_and_features(items, clf.encoder_.collate, clf.eval_batch_size, clf.progress)
    return per_text(logits, items, clf.chunk_aggregate_), per_text(feats, items, "mean")


def compute_all(clf, logits, feats, names=None) -> dict[str, np.ndarray]:
    """{score: (N,) values} of `names` (default: every score `clf` can compute from these)."""
    return clf.reject_step_.scores(clf.temperature_step_.apply(np.asarray(logits)), logits, feats, names)


def predict_scored(clf, X) -> tuple[np.ndarray, np.ndarray | None]:
    """(predict_proba's (N, K) probabilities, each text's out-of-scope score or None): what decide() needs when the
    model rejects by a score other than softmax; None for softmax (the probabilities are enough)."""
    name = score_name(clf)
    logits, feats = infer(clf, X, features=name in FEATURE_SCORES)
    probs = clf.temperature_step_.apply(logits).astype(np.float32)
    if clf.out_of_scope is None or name == "softmax":
        return probs, None
    return probs, compute_all(clf, logits, feats, [name])[name]


def scored_proba(clf):
    """A function texts -> (N, K) probabilities, with the out-of-scope score as an extra last column when the
    model needs one to decide (split it off with split_scored): one array that batching can slice by rows."""
    if getattr(clf, "out_of_scope", None) is None or not hasattr(clf, "oos_score_") or score_name(clf) == "softmax":
        return clf.predict_proba

    def run(texts):
        probs, score = predict_scored(clf, texts)
        return np.column_stack([probs, score.astype(np.float32)])
    return run


def split_scored(clf, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(probabilities, scores or None) from what scored_proba(clf) returned."""
    rows = np.asarray(rows)
    if rows.ndim == 2 and rows.shape[1] == len(clf.labels_) + 1:
        return rows[:, :-1], rows[:, -1]
    return rows, None


# ---- fitting ------------------------------------------------------------------------------------------------
def fit_statistics(clf, items_or_texts, y) -> None:
    """Fit the reject step's statistics (clf.oos_statistics_) on training data: encoded items (or cached
    {"features": ...} items) with their class indices y, or texts with their labels."""
    from headswap.nn.inference import compute_features
    if items_or_texts and isinstance(items_or_texts[0], str):
        feats = infer(clf, list(items_or_texts))[1]
        y = np.array([clf.labels_.index(str(lab)) if str(lab) in clf.labels_ else -1 for lab in y])
    elif items_or_texts and "features" in items_or_texts[0]:
        feats = np.stack([np.asarray(it["features"]) for it in items_or_texts])
    else:
        feats = compute_features(clf.module_, items_or_texts, clf.encoder_.collate, clf.eval_batch_size,
                                 clf.progress, "out-of-scope statistics").numpy()
    if feats is None:
        raise HeadswapError(f"strategy {clf.strategy!r} has no pooled features per text for the mahalanobis and knn "
                            f"scores")
    clf.reject_step_.fit_statistics(feats, y, seed=clf.seed)


def tune(clf, logits, y, texts, oos_texts) -> None:
    """On the validation data (in-scope `texts` with class indices y and their logits, plus the `oos_texts` of
    an out_of_scope label the model never learned): pick the score and tune its threshold (reject_metric,
    reject_target). Sets clf.oos_score_ (and reject_threshold_ for softmax, as models before the choice saved)."""
    stats = clf.oos_statistics_
    asked = clf.reject_score
    if asked in FEATURE_SCORES and stats is None:
        raise HeadswapError(f"reject_score {asked!r} needs out-of-scope statistics fitted on the training features; "
                            f"fit them first with headswap.classifier.reject_option.fit_statistics(clf, train_texts, "
                            f"train_labels)")
    logits = np.asarray(logits)
    feats = infer(clf, texts)[1] if stats is not None and texts is not None else None
    if oos_texts:
        more_logits, more_feats = infer(clf, oos_texts, features=feats is not None)
        logits = np.concatenate([logits, more_logits])
        feats = None if feats is None else np.concatenate([feats, more_feats])
    y, is_oos = reject_rows(clf, y, len(oos_texts or []))
    clf.notes_.extend(clf.reject_step_.fit(clf.temperature_step_.apply(logits), logits, feats, y, is_oos, asked,
                                           clf.reject_metric, clf.reject_target))


def refit(clf, train_texts, train_labels, val_texts, val_labels, reject_score: str | None = None) -> None:
    """Fit the statistics on training texts and tune the reject option on validation texts (that may include
    out-of-scope rows), e.g. to compare scores on a classifier fitted before. reject_score overrides clf's."""
    from headswap.decisions.targets import check_known
    if reject_score is not None:
        clf.set_params(reject_score=reject_score)
        clf.resolved_params()
    if clf.strategy_.pooled_features:
        fit_statistics(clf, list(train_texts), list(train_labels))
    data, outside = without_outside(clf, clf.target_.read(val_texts, val_labels, "validation data"))
    check_known(clf.target_, data.labels, clf.labels_, "validation")
    y = clf.target_.encode(data.labels, clf.labels_)
    tune(clf, clf.decision_function(data.texts), y, data.texts, outside)


# ---- figures ------------------------------------------------------------------------------------------------
def block(clf, logits, feats, y_in, n_outside: int) -> dict:
    """Metrics.extra["out_of_scope"]: the decisions at the tuned threshold (headswap.decisions.reject.scores) and without it,
    and every computable score's AUROC and FPR@95TPR, on rows that are in-scope texts (class indices y_in)
    followed by n_outside texts of an out_of_scope label the model never learned."""
    y, is_oos = reject_rows(clf, y_in, n_outside)
    probs = clf.temperature_step_.apply(np.asarray(logits))
    return {"label": clf.out_of_scope, **clf.reject_step_.report(probs, logits, feats, y, is_oos)}


def report(clf, texts, labels) -> dict:
    """The out-of-scope figures of a fitted classifier on labelled texts that include out-of-scope rows: score,
    threshold, in_scope_accuracy, in_scope_accuracy_without_threshold, oos_recall, oos_precision, oos_f1, rejected,
    scores: {name: {"auroc", "fpr_at_95_tpr"}} (see headswap.decisions.oos_scores) and distribution: {name: histogram of the
    in-scope and out-of-scope texts' values} (headswap.decisions.oos_scores.histogram)."""
    data, outside = without_outside(clf, clf.target_.read(texts, labels, "evaluation data"))
    outside = outside or []
    logits, feats = infer(clf, data.texts + outside, features=clf.oos_statistics_ is not None)
    return block(clf, logits, feats, clf.target_.encode(data.labels, clf.labels_), len(outside))


def describe_scores(block: dict) -> str:
    """One line: each score's AUROC and FPR@95TPR, the one in use marked."""
    return "; ".join(f"{n}{'*' if n == block.get('score') else ''} AUROC {f['auroc']:.4f}, FPR@95TPR "
                     f"{f['fpr_at_95_tpr']:.3f}" for n, f in block["scores"].items() if f["auroc"] is not None)


def probability_block(classes, out_of_scope: str, val_probs, val_labels, test_probs, test_labels, metric: str,
                      target: float) -> dict:
    """The max-probability rule on any classifier's probabilities (the bench's TF-IDF baseline): the threshold
    tuned on the validation rows as TextClassifier tunes it, the decisions and the softmax figures on the test
    rows. classes: the probability columns' labels (out_of_scope among them when it was learned as a class)."""
    classes = [str(c) for c in classes]
    k = classes.index(out_of_scope) if out_of_scope in classes else None

    def rows(labels):
        y = np.array([classes.index(lab) if lab in classes and lab != out_of_scope else -1 for lab in labels])
        return y, np.array([lab == out_of_scope for lab in labels])
    threshold, note = None, None
    if val_probs is not None and len(val_probs):
        vy, v_oos = rows(val_labels)
        if metric == "oos_recall" and not v_oos.any():
            note = "no out-of-scope validation texts for an out-of-scope recall target: no threshold"
        else:
            threshold, note = reject.tune(np.asarray(val_probs), vy, v_oos, metric, target, k)
    ty, t_oos = rows(test_labels)
    probs = np.asarray(test_probs)
    score = oos_scores.compute("softmax", probs=probs, oos_index=k)
    out = {"label": out_of_scope, "score": "softmax", **reject.scores(probs, ty, t_oos, threshold or None, k)}
    out["in_scope_accuracy_without_threshold"] = reject.scores(probs, ty, t_oos, None, k)["in_scope_accuracy"]
    out["scores"] = {"softmax": oos_scores.figures(score, t_oos)}
    out["distribution"] = {"softmax": oos_scores.histogram(score, t_oos)}
    if note:
        out["note"] = note
    return out
