"""TF-IDF + logistic regression as a classifier of its own: the fast model that a user may ship when it is good
enough, and the student that distillation trains on a transformer's probabilities.

Its whole state (each vectorizer's vocabulary and idf weights, the coefficients) is saved as safetensors and
JSON in a model directory, so it reloads exactly and without pickle.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.pipeline import FeatureUnion

from headswap.data.load import as_list, warn_once
from headswap.data.records import label_type, some_texts
from headswap.errors import HeadswapError
from headswap.saved.model_dir import (CONFIG_FILE, FORMAT_VERSION, WEIGHTS_FILE, check_regular, label_classes,
                                      read_config)

KIND = "tfidf"
LINEAR = ("logistic", "svm")
# Below this a soft label's class is left out of the repeated rows: it adds nothing to the loss.
MIN_SOFT_WEIGHT = 1e-6


def tfidf_features():
    """Word 1-2 grams and char_wb 2-5 grams, sublinear tf: the bench baseline's features. Texts with no word
    of two letters (emoji, one-letter words) fit the character n-grams alone (WordsOptional)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    return WordsOptional([
        ("word", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True)),
        ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)),
    ])


class WordsOptional(FeatureUnion):
    """A FeatureUnion that, when no training text has a word of two or more letters (scikit-learn's token
    pattern; its word vectorizer then raises 'empty vocabulary'), drops the word part and fits the others: a
    model of emoji or one-letter texts still trains. The fitted union lists the parts it used, and so does a
    saved TfidfClassifier's config ("vectorizers")."""

    def fit(self, X, y=None, **params):
        self.fit_transform(X, y, **params)
        return self

    def fit_transform(self, X, y=None, **params):
        try:
            return super().fit_transform(X, y, **params)
        except ValueError as e:
            names = [name for name, _ in self.transformer_list]
            if "empty vocabulary" not in str(e) or "word" not in names or len(names) == 1:
                raise
        # Once: audit fits one model per fold, bench one per row.
        warn_once(("tfidf", "no words"), "no text has a word of two or more letters: the TF-IDF features are "
                                         "character n-grams only")
        self.transformer_list = [(n, t) for n, t in self.transformer_list if n != "word"]
        return super().fit_transform(X, y, **params)


class TfidfClassifier(ClassifierMixin, BaseEstimator):
    """TF-IDF features and a linear model (scikit-learn), with fit/predict/predict_proba.

    linear "logistic": a multinomial logistic regression. fit(X, y) trains on labels; fit(X, soft_labels=P,
    labels=L) on an (N, K) matrix of probabilities over L (a teacher's predict_proba): each text is repeated once
    per class, weighted by its probability, which makes the logistic loss exactly the cross-entropy to the soft
    labels. linear "svm": a LinearSVC (labels only), whose probabilities are the softmax of its decision scores
    divided by `temperature` (auto fits it on validation: headswap.baseline.search); the scaled scores are kept
    as a logistic regression's coefficients, so both save, load and explain alike.
    """

    def __init__(self, C: float = 10.0, max_iter: int = 2000, linear: str = "logistic", temperature: float = 1.0):
        self.C = C
        self.max_iter = max_iter
        self.linear = linear
        self.temperature = temperature

    def fit(self, X, y=None, *, soft_labels=None, labels=None):
        rows, targets, weights = self._prepare(X, y, soft_labels, labels)
        self._fit_head(rows, targets, weights)
        return self

    def _prepare(self, X, y, soft_labels, labels):
        """Checks the arguments, fits the features and sets classes_: (feature rows, class indices, weights)."""
        from scipy.sparse import vstack
        texts = some_texts(X, "training data")
        if self.linear not in LINEAR:
            raise HeadswapError(f"TfidfClassifier linear must be one of {', '.join(LINEAR)}; got {self.linear!r}")
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise HeadswapError(f"TfidfClassifier temperature must be a number above 0; got {self.temperature!r}")
        if (y is None) == (soft_labels is None):
            raise HeadswapError("TfidfClassifier.fit takes labels y or soft_labels (with labels), not both or neither")
        if soft_labels is not None and self.linear != "logistic":
            raise HeadswapError("soft_labels train the logistic regression only (linear='logistic')")
        if soft_labels is not None:     # checked before any work
            probs = np.asarray(soft_labels, dtype=np.float64)
            if labels is None or probs.shape != (len(texts), len(labels)):
                raise HeadswapError(f"soft_labels must be (texts, labels) = ({len(texts)}, "
                                    f"{len(labels) if labels is not None else '?'}) probabilities; got "
                                    f"{probs.shape}")
            if not np.all(np.isfinite(probs)) or (probs < 0).any() or not np.allclose(probs.sum(1), 1, atol=1e-3):
                raise HeadswapError("soft_labels rows must be probabilities (finite, >= 0, summing to 1)")
        self.__dict__.pop("distillation_", None)    # a refit model is no longer the distilled one
        self.__dict__.pop("earned_", None)          # nor checked on the texts that checked it
        self.features_ = tfidf_features()
        feats = self.features_.fit_transform(texts)
        if soft_labels is not None:
            self.classes_ = np.array(list(labels), dtype=object)
            keep = [np.flatnonzero(probs[:, k] >= MIN_SOFT_WEIGHT) for k in range(len(labels))]
            rows = vstack([feats[idx] for idx in keep])
            targets = np.concatenate([np.full(len(idx), k) for k, idx in enumerate(keep)])
            weights = np.concatenate([probs[idx, k] for k, idx in enumerate(keep)])
        else:
            y = as_list(y, "training data", "labels")
            if label_type(y, "training data") is int:     # integer labels stay integers, as scikit-learn's do
                self.classes_ = np.array(sorted({int(v) for v in y}))
            else:
                self.classes_ = np.array(sorted({str(v) for v in y}), dtype=object)
            index = {str(lab): k for k, lab in enumerate(self.classes_)}
            rows, targets, weights = feats, np.array([index[str(v)] for v in y]), None
        if len(set(targets.tolist())) < 2:
            raise HeadswapError("training data has a single class; a classifier needs at least two")
        return rows, targets, weights

    def _fit_head(self, rows, targets, weights=None) -> None:
        """The linear model on feature rows of class indices `targets` (of classes_): model_."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.svm import LinearSVC
        if self.linear == "svm":
            svm = LinearSVC(C=self.C, max_iter=self.max_iter, random_state=0).fit(rows, targets)
            self.model_ = linear_model(svm.coef_ / self.temperature, svm.intercept_ / self.temperature, self.C,
                                       self.max_iter, svm.classes_)
        else:
            self.model_ = LogisticRegression(C=self.C, max_iter=self.max_iter).fit(rows, targets,
                                                                                   sample_weight=weights)
        if len(self.model_.classes_) != len(self.classes_):
            missing = sorted(set(self.classes_) - {self.classes_[k] for k in self.model_.classes_})
            raise HeadswapError(f"no training text has weight on the classes {missing}")

    def decision_function(self, X) -> np.ndarray:
        return self.model_.decision_function(self.features_.transform(some_texts(X, "prediction input")))

    def predict_proba(self, X) -> np.ndarray:
        """(N, K) probabilities; once checked_on(n), within the certainty n texts earn (headswap.decisions.earned)."""
        probs = self.model_.predict_proba(self.features_.transform(some_texts(X, "prediction input")))
        earned = getattr(self, "earned_", None)
        return probs if earned is None else earned.clip(probs)

    def checked_on(self, n: int) -> "TfidfClassifier":
        """Bound predict_proba by the n validation texts that checked this model (auto's, which chose it)."""
        from headswap.decisions.earned import Earned
        self.earned_ = Earned.checked_on(n)
        return self

    def predict(self, X) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(1)]

    @property
    def labels_(self) -> list[str]:
        return [str(c) for c in self.classes_]

    def explain(self, X, **kwargs):
        """Each word's share of the decision score per text: headswap.explain.explain (label)."""
        from headswap.explain import explain
        return explain(self, X, **kwargs)

    # What predict, eval and serve read from any saved classifier.
    multi_label, model, runtime_ = False, KIND, "scikit-learn"

    @property
    def strategy(self) -> str:
        return "tfidf-linearsvc" if self.linear == "svm" else "tfidf-logreg"     # the first: bench's baseline's name

    def evaluate(self, X, y):
        """Metrics on labelled texts, with timing, parameter count and calibration in extra (as TextClassifier)."""
        from headswap.baseline import evaluate_probabilities
        m = evaluate_probabilities(self.predict_proba, X, y, self.labels_)
        n_params = int(self.model_.coef_.size + self.model_.intercept_.size)
        m.extra.update(strategy=self.strategy, model=self.model, regime="-", runtime=self.runtime_,
                       trainable_params=n_params, total_params=n_params)
        return m

    # ---- save / load: vocabularies and idf weights, coefficients; no pickle ----------------------------------
    def save(self, path) -> Path:
        from safetensors.numpy import save_file

        from headswap.saved.atomic import atomic_path
        from headswap.saved.outputs import check_save
        path = Path(path)
        check_save(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {"coef": self.model_.coef_, "intercept": self.model_.intercept_}
        vectorizers = {}
        for name, vec in self.features_.transformer_list:
            tensors[f"{name}.idf"] = vec.idf_
            params = {k: v for k, v in vec.get_params().items() if k != "dtype"}
            vectorizers[name] = {"params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
                                 "vocabulary": {t: int(i) for t, i in vec.vocabulary_.items()}}
        with atomic_path(path / WEIGHTS_FILE) as tmp:
            save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp))
        # params keep the keys every earlier version reads; the saved coefficients already hold an SVM's scores
        # over its temperature, so an earlier version loads it too, as a logistic regression of the same outputs.
        params = self.get_params()
        config = {"format": "headswap", "format_version": FORMAT_VERSION, "kind": KIND,
                  "labels": self.labels_, "label_values": self.classes_.tolist(),
                  "params": {k: params[k] for k in ("C", "max_iter")}, "vectorizers": vectorizers,
                  "linear": {k: params[k] for k in ("linear", "temperature")}}
        if getattr(self, "distillation_", None) is not None:
            config["distillation"] = self.distillation_    # where a distilled student came from (headswap.jobs.distill)
        if getattr(self, "earned_", None) is not None:
            config.update(self.earned_.config())
        with atomic_path(path / CONFIG_FILE) as tmp:
            tmp.write_text(json.dumps(config))
        return path

    @classmethod
    def load(cls, path) -> "TfidfClassifier":
        from safetensors.numpy import load_file
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.pipeline import FeatureUnion
        path = Path(path)
        config = read_config(path)     # present, readable, of this format version
        if config.get("kind") != KIND:
            raise HeadswapError(f"{path} is not a TF-IDF model (kind {config.get('kind')!r})")
        check_regular(path / WEIGHTS_FILE)
        if not (path / WEIGHTS_FILE).is_file():
            raise HeadswapError(f"{path} is not a saved TF-IDF model: {WEIGHTS_FILE} is missing")
        try:
            tensors = load_file(str(path / WEIGHTS_FILE))
        except Exception as e:   # safetensors raises its own types for damaged files
            raise HeadswapError(f"{path} is a damaged TF-IDF model ({str(e).splitlines()[0][:200]})") from None
        linear = config.get("linear", {})       # absent before the linear SVM: a logistic regression
        if not (isinstance(linear, dict) and linear.get("linear", "logistic") in LINEAR and set(linear) <= {
                "linear", "temperature"} and isinstance(linear.get("temperature", 1.0), (int, float))):
            raise HeadswapError(f"{path}: its linear model {linear!r:.80} is not one headswap saves; the model "
                                f"directory is damaged")
        clf = cls(**config["params"], **linear)
        parts = []
        for name, spec in config["vectorizers"].items():
            params = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["params"].items()}
            vec = TfidfVectorizer(**{**params, "vocabulary": spec["vocabulary"]})
            idf = tensors[f"{name}.idf"]
            if idf.shape != (len(spec["vocabulary"]),):
                raise HeadswapError(f"{path}: {name} idf weights ({idf.shape[0]}) do not match its vocabulary "
                                    f"({len(spec['vocabulary'])} terms); the model directory is damaged")
            vec.idf_ = idf
            parts.append((name, vec))
        clf.features_ = FeatureUnion(parts)
        labels = config["labels"]
        n_features = sum(len(spec["vocabulary"]) for spec in config["vectorizers"].values())
        rows = 1 if len(labels) == 2 else len(labels)
        if tensors["coef"].shape != (rows, n_features):
            raise HeadswapError(f"{path}: coefficients {tensors['coef'].shape} do not fit {len(labels)} labels and "
                                f"{n_features} features; the model directory is damaged")
        clf.model_ = linear_model(tensors["coef"], tensors["intercept"], clf.C, clf.max_iter, np.arange(len(labels)))
        clf.classes_ = label_classes(path / CONFIG_FILE, config)
        if config.get("distillation") is not None:
            clf.distillation_ = config["distillation"]
        from headswap.decisions.earned import Earned
        if (earned := Earned.load(config)) is not None:
            clf.earned_ = earned
        return clf


def linear_model(coef, intercept, C: float, max_iter: int, classes):
    """A fitted LogisticRegression of these coefficients: predict_proba is the softmax of X coef^T + intercept (the
    sigmoid of the one row for two classes), whichever model they came from."""
    from sklearn.linear_model import LogisticRegression
    model = LogisticRegression(C=C, max_iter=max_iter)
    model.coef_, model.intercept_ = np.asarray(coef), np.asarray(intercept)
    model.classes_, model.n_features_in_ = np.asarray(classes), model.coef_.shape[1]
    return model
