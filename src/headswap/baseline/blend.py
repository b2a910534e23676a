"""A classifier blended with the TF-IDF baseline: p = (1 - w) p_model + w p_tfidf, w picked on validation.

A lexical model and a neural one make different mistakes (a rare word, a name, a misspelling the body's word
pieces blur), so their averaged probabilities can beat both; `auto` ships the blend only when validation says so
(headswap.auto.main). The blend is a model directory of its own kind holding both members, each saved as it
would be alone: predict, eval, serve and batch prediction load it with load_model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from headswap.errors import HeadswapError
from headswap.saved.model_dir import CONFIG_FILE, FORMAT_VERSION, read_config

KIND = "blend"
MEMBERS = "members"          # OUT/members/model and OUT/members/tfidf
WEIGHTS = tuple(round(w, 2) for w in np.arange(0.0, 0.95, 0.1))   # the TF-IDF share tried; 0 is the model alone


FOLDS = 5   # the weight is checked out of fold: each fold blended with the weight the other folds chose


def choose_weight(p_model: np.ndarray, p_tfidf: np.ndarray, y: np.ndarray, labels: list[str],
                  metric: str = "macro_f1", seed: int = 0) -> tuple[float, dict[float, float], float | None]:
    """The TF-IDF share w (of WEIGHTS) whose blend scores best on validation by `metric` (the smallest on a tie,
    so the model alone wins ties); every w's score; and the out-of-fold score that confirmed it.

    A weight picked on a few hundred texts is partly picked for their noise (on GermEval's 451, a blend 2.3 points
    ahead on validation was 1.4 behind on test). So each of FOLDS stratified folds is blended with the weight the
    other folds pick, and w is kept only when those out-of-fold blends score higher than the model alone."""
    def score(probs, idx) -> float:
        return float(score_logits(np.log(np.clip(probs[idx], 1e-12, 1)), y[idx], labels).score(metric))

    def pick(idx) -> tuple[float, dict[float, float]]:
        scores = {w: score((1 - w) * p_model + w * p_tfidf, idx) for w in WEIGHTS}
        best = max(scores.values())
        return min(w for w, s in scores.items() if s >= best), scores

    from headswap.train.loop import score_logits
    everything = np.arange(len(y))
    w, scores = pick(everything)
    if w == 0 or len(y) < 2 * FOLDS:
        return w if len(y) >= 2 * FOLDS else 0.0, scores, None
    fold = np.empty(len(y), dtype=int)
    rng = np.random.default_rng(seed)
    for k in np.unique(y):             # stratified: each class dealt round the folds in a shuffled order
        members = rng.permutation(np.flatnonzero(y == k))
        fold[members] = (np.arange(len(members)) + rng.integers(FOLDS)) % FOLDS
    out = np.empty_like(p_model)
    for f in range(FOLDS):
        w_f = pick(np.flatnonzero(fold != f))[0]
        here = fold == f
        out[here] = (1 - w_f) * p_model[here] + w_f * p_tfidf[here]
    out_of_fold = score(out, everything)
    return (w if out_of_fold > scores[0.0] else 0.0), scores, out_of_fold


def fit_blend(model, tfidf, texts: list[str], labels: list, metric: str = "macro_f1"):
    """(blend or None, each weight's score, the out-of-fold score): the blend of two fitted classifiers with the
    TF-IDF weight choose_weight keeps on the labelled (validation) texts, None where it keeps none."""
    columns = tfidf_columns(model, tfidf)
    p_model, p_tfidf = model.predict_proba(texts), tfidf.predict_proba(texts)[:, columns]
    index = {lab: k for k, lab in enumerate(map(str, model.labels_))}
    w, scores, out_of_fold = choose_weight(p_model, p_tfidf, np.array([index[str(v)] for v in labels]),
                                           list(index), metric)
    return (Blend(model, tfidf, w) if w > 0 else None), scores, out_of_fold


def same_labels(model, tfidf) -> bool:
    """Whether the two classifiers know the same labels, in whatever order."""
    return sorted(map(str, model.labels_)) == sorted(map(str, tfidf.labels_))


def tfidf_columns(model, tfidf) -> list[int]:
    """Where each of the model's labels is among TF-IDF's columns (TF-IDF sorts labels as text, a TextClassifier
    sorts numeric ones as numbers: "10" and "2" swap); an error when they are not the same labels."""
    if not same_labels(model, tfidf):
        raise HeadswapError(f"a blend's members must have the same labels; got {list(model.labels_)} and "
                            f"{list(tfidf.labels_)}")
    theirs = {str(lab): k for k, lab in enumerate(tfidf.labels_)}
    return [theirs[str(lab)] for lab in model.labels_]


class Blend:
    """model's and tfidf's probabilities averaged, tfidf with weight `weight`, in the model's label order (the
    same labels). Single-label models without a reject option only."""

    multi_label, out_of_scope, label_separator = False, None, None

    def __init__(self, model, tfidf, weight: float):
        if not 0 < weight < 1:
            raise HeadswapError(f"a blend's TF-IDF weight is between 0 and 1, got {weight!r}")
        self.columns_ = tfidf_columns(model, tfidf)
        if getattr(model, "multi_label", False) or getattr(model, "out_of_scope", None) is not None:
            raise HeadswapError("a blend takes a single-label model without a reject option")
        self.model_, self.tfidf_, self.weight = model, tfidf, float(weight)

    @property
    def labels_(self) -> list[str]:
        return [str(c) for c in self.model_.labels_]

    @property
    def classes_(self) -> np.ndarray:
        return np.asarray(self.model_.classes_)      # what the model alone predicts: ints stay ints

    @property
    def strategy(self) -> str:
        return f"{self.model_.strategy} + tfidf-logreg"

    @property
    def model(self) -> str:
        return self.model_.model

    @property
    def runtime_(self) -> str:
        return f"{self.model_.runtime_} + scikit-learn"

    @property
    def progress(self) -> bool:
        return getattr(self.model_, "progress", False)

    @progress.setter
    def progress(self, value: bool) -> None:
        self.model_.progress = value

    def predict_proba(self, X) -> np.ndarray:
        texts = list(X)
        return ((1 - self.weight) * self.model_.predict_proba(texts)
                + self.weight * self.tfidf_.predict_proba(texts)[:, self.columns_]).astype(np.float32)

    def decision_function(self, X) -> np.ndarray:
        """Log-probabilities: the logits whose softmax is predict_proba."""
        return np.log(np.clip(self.predict_proba(X), 1e-12, 1))

    def predict(self, X) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(1)]

    def score(self, X, y) -> float:
        return float(np.mean([str(p) == str(t) for p, t in zip(self.predict(X), y)]))

    def evaluate(self, X, y):
        """Metrics on labelled texts, with timing, parameter counts and calibration in extra (as TextClassifier)."""
        from headswap.baseline import evaluate_probabilities
        m = evaluate_probabilities(self.predict_proba, X, y, self.labels_)
        counts = self.model_.summary()
        n_tfidf = int(self.tfidf_.model_.coef_.size + self.tfidf_.model_.intercept_.size)
        m.extra.update(strategy=self.strategy, model=self.model, regime=counts.get("regime", "-"),
                       runtime=self.runtime_, blend_weight=self.weight,
                       trainable_params=int(counts.get("trainable_params", 0)) + n_tfidf,
                       total_params=int(counts.get("total_params", 0)) + n_tfidf)
        return m

    def summary(self) -> dict:
        return {**self.model_.summary(), "strategy": self.strategy, "runtime": self.runtime_,
                "blend_weight": self.weight}

    # ---- save / load: each member in its own folder, as it saves alone ------------------------------------
    def save(self, path, save_model=None) -> Path:
        """Write the blend into `path`; save_model(model, folder) writes the neural member (default: its own
        save; auto passes its exporter)."""
        from headswap.saved.atomic import atomic_path
        path = Path(path)
        (path / MEMBERS).mkdir(parents=True, exist_ok=True)
        (save_model or (lambda m, folder: m.save(folder)))(self.model_, path / MEMBERS / "model")
        self.tfidf_.save(path / MEMBERS / "tfidf")
        config = {"format": "headswap", "format_version": FORMAT_VERSION, "kind": KIND, "labels": self.labels_,
                  "weight": self.weight, "members": {"model": f"{MEMBERS}/model", "tfidf": f"{MEMBERS}/tfidf"}}
        with atomic_path(path / CONFIG_FILE) as tmp:
            tmp.write_text(json.dumps(config, indent=1))
        return path

    @classmethod
    def load(cls, path, load_model) -> "Blend":
        """The blend saved in `path`; load_model(folder) loads its neural member (headswap.classifier.estimator.load_model passes
        TextClassifier.load with its runtime)."""
        from headswap.baseline.tfidf import TfidfClassifier
        path = Path(path)
        config = read_config(path)
        if config.get("kind") != KIND:
            raise HeadswapError(f"{path} is not a blend (kind {config.get('kind')!r})")
        w = config.get("weight")
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0 < w < 1:
            raise HeadswapError(f"{path / CONFIG_FILE} is corrupt: weight must be a number between 0 and 1, got "
                                f"{w!r:.80}")
        folders = {}
        for name in ("model", "tfidf"):
            folder = path / MEMBERS / name
            if not folder.is_dir() or folder.is_symlink():
                raise HeadswapError(f"{path} is a damaged blend: its member {MEMBERS}/{name} is missing")
            folders[name] = folder
        blend = cls(load_model(folders["model"]),
                    TfidfClassifier.load(folders["tfidf"]), w)
        if blend.labels_ != [str(v) for v in config.get("labels") or ()]:
            raise HeadswapError(f"{path / CONFIG_FILE} is corrupt: its labels are not its members'")
        return blend
