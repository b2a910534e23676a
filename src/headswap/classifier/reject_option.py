"""The reject option of a TextClassifier (headswap.classifier.estimator), on any out-of-scope score
(headswap.decisions.oos_scores): RejectOption, a post-processing step that fits, decides, saves and loads as the
others do (headswap.decisions.postprocess). Its arithmetic and saved state are the Reject step's; what it adds is
the work on texts: the out-of-scope rows set apart, the statistics that mahalanobis and knn read fitted on training
features, the score picked and its threshold tuned on validation texts, each text's score at prediction. It reads
the classifier through Model (one pass of the model: logits and pooled features) and its settings (Settings).

    clf = TextClassifier(out_of_scope="oos", reject_score="auto").fit(train_texts, train_labels, val_t, val_l)
    clf.predict_scored(texts)                  # (probabilities, each text's score or None for softmax)
    reject_option.report(clf, test_texts, test_labels)   # {"score", "scores": {name: {auroc, fpr_at_95_tpr}}, ...}
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from headswap.decisions import oos_scores, reject
from headswap.decisions.oos_scores import FEATURE_SCORES
from headswap.decisions.postprocess import Reject, Temperature
from headswap.errors import ConfigError, HeadswapError

log = logging.getLogger(__name__)


class Model(Protocol):
    """What the reject option reads from its classifier: one pass of the model over texts, and its temperature."""

    temperature_step_: Temperature

    def logits_and_features(self, X, features: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """((N, K) logits, (N, D) pooled features or None) of the texts X."""


@dataclass(frozen=True)
class Settings:
    """The settings the reject option works by (headswap.settings): the out-of-scope label (None: no reject
    option), the score to reject by (auto: the best validation AUROC), and the target its threshold is tuned for."""

    label: str | None = None
    score: str = "auto"
    metric: str = "in_scope_accuracy"
    target: float = 0.95

    @classmethod
    def of(cls, clf) -> "Settings":
        """A TextClassifier's (its out_of_scope, reject_score, reject_metric and reject_target)."""
        return cls(clf.out_of_scope, clf.reject_score, clf.reject_metric, clf.reject_target)

    def wants_statistics(self, pooled_features: bool) -> bool:
        """Whether fitting should fit the feature scores' statistics: the score may be one of them, and the
        strategy has the pooled features they read."""
        return self.label is not None and self.score in ("auto",) + FEATURE_SCORES and pooled_features


@dataclass
class RejectOption(Reject):
    """The reject option as TextClassifier runs it on texts: the Reject step (its score, threshold and
    statistics, saved and loaded as that step saves them) and the steps around it that read texts."""

    # ---- which rows are out of scope ----------------------------------------------------------------------
    def set_apart(self, data, label: str | None):
        """(data without its out-of-scope rows, their texts) when `label` (out_of_scope) is no class the model
        learned; otherwise (data, None)."""
        from headswap.classifier.fit_data import set_apart
        if data is None or label is None:
            return data, None
        return set_apart(data, label if self.oos_index is None else None)

    def rows(self, y_in, outside: int) -> tuple[np.ndarray, np.ndarray]:
        """(class index, is out of scope) of rows that are the in-scope rows' class indices y_in (the out-of-scope
        class, if learned, counts as out of scope) followed by `outside` rows whose label is no class (index -1)."""
        y = np.concatenate([np.asarray(y_in, dtype=np.int64), np.full(outside, -1)])
        is_oos = y == self.oos_index if self.oos_index is not None else np.zeros(len(y), dtype=bool)
        is_oos[len(y) - outside:] = True
        return y, is_oos

    def check_data(self, settings: Settings, labels, val, outside) -> list[str]:
        """Before training: fail now, not after it, when the threshold cannot be tuned as asked on validation
        data `val` and its out-of-scope texts `outside` (labels: the training data's classes). Returns the notes
        a user should see in the model's notes."""
        from headswap.data.once import warn_once
        label, notes = settings.label, []
        if label is None:
            return notes
        if self.oos_index is None and not outside:
            note = unseen_label_note(label, list(labels) + list(val.labels if val else []))
            if note:
                warn_once(("unseen out of scope", label), note)
        if val is None:
            note = (f"out_of_scope {label!r}: no validation data, so no reject threshold is tuned"
                    + (" (the out-of-scope class still rejects)" if self.oos_index is not None else ""))
            log.warning(note)
            notes.append(note)
        elif settings.metric == "oos_recall":
            n = len(outside or ()) + list(val.labels).count(label)
            if not n:
                raise ConfigError(f"reject_metric oos_recall needs out-of-scope texts (label {label!r}) in the "
                                  f"validation data, and it has none")
            note = few_out_of_scope_note(label, n, settings.target)
            if note:
                warn_once(("few out of scope", label, n), note)
                notes.append(note)
        return notes

    # ---- fitting ----------------------------------------------------------------------------------------
    def fit_statistics_on_texts(self, model: Model, texts, labels, classes: list[str], seed: int = 0) -> None:
        """Fit the feature scores' statistics on training texts and their labels (classes: the logit order)."""
        feats = model.logits_and_features(list(texts))[1]
        if feats is None:
            raise HeadswapError("this model's strategy has no pooled features per text for the mahalanobis and knn "
                                "scores")
        y = np.array([classes.index(str(lab)) if str(lab) in classes else -1 for lab in labels])
        self.fit_statistics(feats, y, seed=seed)

    def tune(self, model: Model, settings: Settings, logits, y, texts, outside) -> list[str]:
        """On the validation data (in-scope `texts` with class indices y and their logits, plus the `outside`
        texts of an out-of-scope label the model never learned): pick the score and tune its threshold. Returns
        the notes a user should see."""
        if settings.score in FEATURE_SCORES and self.statistics is None:
            raise HeadswapError(f"reject_score {settings.score!r} needs out-of-scope statistics fitted on the "
                                f"training features; fit them first with headswap.classifier.reject_option.refit")
        logits = np.asarray(logits)
        feats = model.logits_and_features(texts)[1] if self.statistics is not None and texts is not None else None
        if outside:
            more_logits, more_feats = model.logits_and_features(outside, features=feats is not None)
            logits = np.concatenate([logits, more_logits])
            feats = None if feats is None else np.concatenate([feats, more_feats])
        y, is_oos = self.rows(y, len(outside or []))
        return self.fit(model.temperature_step_.apply(logits), logits, feats, y, is_oos, settings.score,
                        settings.metric, settings.target)

    # ---- deciding -----------------------------------------------------------------------------------------
    def scored(self, model: Model, X) -> tuple[np.ndarray, np.ndarray | None]:
        """(predict_proba's (N, K) probabilities, each text's score, or None when it rejects by softmax: the
        probabilities are enough)."""
        name = self.score_name
        logits, feats = model.logits_and_features(X, features=name in FEATURE_SCORES)
        probs = model.temperature_step_.apply(logits).astype(np.float32)
        if name == "softmax":
            return probs, None
        return probs, self.scores(probs, logits, feats, [name])[name]

    def value(self, classes: np.ndarray, label: str):
        """What predict answers for a rejected text: the out-of-scope class's value, or the label itself (an
        integer when the classes are integers and it reads as one)."""
        if self.oos_index is not None:
            return classes[self.oos_index]
        if classes.dtype.kind in "iu" and label.lstrip("-").isdigit():
            return int(label)
        return label

    def block(self, probs, logits, feats, y_in, n_outside: int, label: str) -> dict:
        """Metrics.extra["out_of_scope"] on rows that are in-scope texts (class indices y_in) followed by
        n_outside texts of an out-of-scope label the model never learned: Reject.report's figures, and the label."""
        y, is_oos = self.rows(y_in, n_outside)
        return {"label": label, **self.report(probs, logits, feats, y, is_oos)}


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


# ---- on a fitted classifier, through its public methods -------------------------------------------------------
def scored_proba(clf):
    """A function texts -> (N, K) probabilities, with the out-of-scope score as an extra last column when the
    model needs one to decide (split it off with split_scored): one array that batching can slice by rows. Any
    model: one without a reject option by a score (TF-IDF, a blend) gives its predict_proba."""
    if (getattr(clf, "out_of_scope", None) is None or not hasattr(clf, "oos_score_")
            or clf.reject_step_.score_name == "softmax"):
        return clf.predict_proba

    def run(texts):
        probs, score = clf.predict_scored(texts)
        return np.column_stack([probs, score.astype(np.float32)])
    return run


def split_scored(clf, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(probabilities, scores or None) from what scored_proba(clf) returned."""
    rows = np.asarray(rows)
    if rows.ndim == 2 and rows.shape[1] == len(clf.labels_) + 1:
        return rows[:, :-1], rows[:, -1]
    return rows, None


def refit(clf, train_texts, train_labels, val_texts, val_labels, reject_score: str | None = None) -> None:
    """Fit the statistics on training texts and tune the reject option on validation texts (that may include
    out-of-scope rows), e.g. to compare scores on a classifier fitted before. reject_score overrides clf's."""
    from headswap.decisions.targets import check_known
    if reject_score is not None:
        clf.set_params(reject_score=reject_score)
        clf.resolved_params()
    step = clf.reject_step_
    if clf.strategy_.pooled_features:
        step.fit_statistics_on_texts(clf, train_texts, train_labels, list(clf.labels_), seed=clf.seed)
    data, outside = step.set_apart(clf.target_.read(val_texts, val_labels, "validation data"), clf.out_of_scope)
    check_known(clf.target_, data.labels, clf.labels_, "validation")
    y = clf.target_.encode(data.labels, clf.labels_)
    clf.notes_.extend(step.tune(clf, Settings.of(clf), clf.decision_function(data.texts), y, data.texts,
                                outside))


def report(clf, texts, labels) -> dict:
    """The out-of-scope figures of a fitted classifier on labelled texts that include out-of-scope rows: score,
    threshold, in_scope_accuracy, in_scope_accuracy_without_threshold, oos_recall, oos_precision, oos_f1, rejected,
    scores: {name: {"auroc", "fpr_at_95_tpr"}} (see headswap.decisions.oos_scores) and distribution: {name: histogram
    of the in-scope and out-of-scope texts' values} (headswap.decisions.oos_scores.histogram)."""
    step = clf.reject_step_
    data, outside = step.set_apart(clf.target_.read(texts, labels, "evaluation data"), clf.out_of_scope)
    outside = outside or []
    logits, feats = clf.logits_and_features(data.texts + outside, features=clf.oos_statistics_ is not None)
    return step.block(clf.temperature_step_.apply(np.asarray(logits)), logits, feats,
                      clf.target_.encode(data.labels, clf.labels_), len(outside), clf.out_of_scope)


# ---- figures ------------------------------------------------------------------------------------------------
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
    threshold, note, expected = None, None, None
    if val_probs is not None and len(val_probs):
        vy, v_oos = rows(val_labels)
        if metric == "oos_recall" and not v_oos.any():
            note = "no out-of-scope validation texts for an out-of-scope recall target: no threshold"
        else:
            threshold, note = reject.tune(np.asarray(val_probs), vy, v_oos, metric, target, k,
                                          confidence=reject.CONFIDENCE)
            expected = reject.expectation(np.asarray(val_probs), vy, v_oos, threshold or None, metric, target, k)
    ty, t_oos = rows(test_labels)
    probs = np.asarray(test_probs)
    score = oos_scores.compute("softmax", probs=probs, oos_index=k)
    out = {"label": out_of_scope, "score": "softmax", **reject.scores(probs, ty, t_oos, threshold or None, k)}
    out["in_scope_accuracy_without_threshold"] = reject.scores(probs, ty, t_oos, None, k)["in_scope_accuracy"]
    out["scores"] = {"softmax": oos_scores.figures(score, t_oos)}
    out["distribution"] = {"softmax": oos_scores.histogram(score, t_oos)}
    if expected:
        out["expected"] = expected
    if note:
        out["note"] = note
    return out
