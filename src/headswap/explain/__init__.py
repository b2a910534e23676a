"""Why a text got its label: a signed score per word of the text for the predicted class (or a given one).

    from headswap.explain import explain
    [ex] = explain(clf, ["WINNER! claim your cash prize"])
    ex.top(5)   # [('WINNER', 1.9), ('prize', 1.2), ...]

How the scores are found depends on the model (method="auto"):
- a torch TextClassifier: Integrated Gradients on the embedding layer (captum's LayerIntegratedGradients), from
  a baseline with the text's tokens replaced by padding (headswap.explain.gradients);
- an exported ONNX model (or method="occlusion"): each word deleted in turn and the text rescored
  (headswap.explain.occlusion);
- a TF-IDF model: each n-gram's tf-idf value times its coefficient, exactly the decision score
  (headswap.explain.linear).
Scores are in logit units for the explained class (the decision score of the TF-IDF model): positive words
push the text towards the class, negative ones away from it. Word pieces are summed into words
(headswap.explain.words); a chunked long text's windows map back onto the words of the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from headswap.errors import HeadswapError

METHODS = ("auto", "integrated-gradients", "occlusion", "coefficients")
STEPS = 32      # Integrated Gradients' interpolation steps unless told


@dataclass
class Explanation:
    """One text's word scores, for each explained label (the predicted one, or each predicted label of a
    multi-label model)."""

    text: str
    spans: list[tuple[int, int]]                         # each word's [start, end) in text
    scores: dict[str, np.ndarray] = field(default_factory=dict)     # label -> (words,) signed scores
    probabilities: dict[str, float] = field(default_factory=dict)   # label -> the model's probability
    method: str = ""

    @property
    def words(self) -> list[str]:
        return [self.text[s:e] for s, e in self.spans]

    @property
    def labels(self) -> list[str]:
        return list(self.scores)

    def top(self, n: int | None = 10, label: str | None = None) -> list[tuple[str, float]]:
        """The n words with the largest scores by magnitude (sign kept), for `label` (default: the first)."""
        scores = self.scores[label if label is not None else self.labels[0]]
        order = sorted(range(len(scores)), key=lambda i: -abs(float(scores[i])))
        return [(self.text[slice(*self.spans[i])], float(scores[i])) for i in order[:n]]

    def to_dict(self, top: int | None = None) -> dict:
        return {"text": self.text, "method": self.method,
                "labels": [{"label": lab, "probability": self.probabilities.get(lab),
                            "words": [{"word": w, "score": round(s, 6)} for w, s in self.top(top, lab)]}
                           for lab in self.labels]}


def explain(model, texts, label: str | None = None, method: str = "auto", steps: int = STEPS,
            batch_size: int = 64, progress: bool = False) -> list[Explanation]:
    """An Explanation per text of `texts` from `model` (a fitted TextClassifier, a TfidfClassifier, or anything
    load_model returns). label: explain this class instead of the predicted one(s). steps: Integrated
    Gradients' interpolation steps (more: closer to exact, slower); batch_size: texts rescored (occlusion) or
    interpolation points (gradients) per forward pass; progress: a bar over the texts (each costs a gradient
    pass of `steps` points, or a prediction per word: seconds a text for a transformer on a CPU)."""
    from headswap.data.load import as_list
    if isinstance(texts, str):
        texts = [texts]
    texts = as_list(texts, "texts to explain")
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise HeadswapError(f"text {i + 1} to explain is empty or not a string")
    if method not in METHODS:
        raise HeadswapError(f"unknown explanation method {method!r}; choose one of {', '.join(METHODS)}")
    if not hasattr(model, "labels_"):
        raise HeadswapError("this classifier is not fitted yet: call fit() or load a saved one to explain it")
    labels = [str(v) for v in model.labels_]
    if label is not None and str(label) not in labels:
        raise HeadswapError(f"label {label!r} is not one of the model's labels ({', '.join(labels)})")
    if not texts:
        return []
    probs = np.asarray(model.predict_proba(texts), dtype=np.float64)
    targets = [[labels.index(str(label))] if label is not None else _predicted(model, row) for row in probs]
    resolved = _method(model, method)
    if resolved == "coefficients":
        from headswap.explain.linear import tfidf_scores
        per_text = tfidf_scores(model, texts, targets)
    elif resolved == "occlusion":
        from headswap.explain.occlusion import occlusion_scores
        per_text = occlusion_scores(model, texts, targets, batch_size, progress)
    else:
        from headswap.explain.gradients import integrated_gradients
        per_text = integrated_gradients(model, texts, targets, steps, batch_size, progress)
    out = []
    for text, row, target, (spans, scores) in zip(texts, probs, targets, per_text):
        out.append(Explanation(text, spans, {labels[k]: s for k, s in zip(target, scores)},
                               {labels[k]: float(row[k]) for k in target}, resolved))
    return out


def _predicted(model, row: np.ndarray) -> list[int]:
    """The columns a model predicts from its probabilities: the most probable one, or for a multi-label model
    each label at or over its threshold (the most probable one when none is)."""
    if getattr(model, "multi_label", False):
        thresholds = getattr(model, "thresholds_", None)
        thresholds = np.asarray(thresholds if thresholds is not None else [0.5] * len(row))
        chosen = np.flatnonzero(row >= thresholds).tolist()
        return chosen or [int(np.argmax(row))]
    return [int(np.argmax(row))]


def _method(model, method: str) -> str:
    # A TF-IDF model is told by its parts (headswap.baseline.tfidf imports this module: no isinstance).
    is_tfidf = hasattr(model, "features_") and hasattr(getattr(model, "model_", None), "coef_")
    if method == "coefficients" and not is_tfidf:
        raise HeadswapError("method 'coefficients' explains a TF-IDF model; this one is "
                            f"{getattr(model, 'strategy', type(model).__name__)}")
    if method == "auto":
        if is_tfidf:
            return "coefficients"
        from headswap.explain.gradients import supports
        return "integrated-gradients" if supports(model) else "occlusion"
    if method == "integrated-gradients":
        from headswap.explain.gradients import supports
        if is_tfidf:
            raise HeadswapError("integrated-gradients needs a torch TextClassifier; this is a TF-IDF model, whose "
                                "words are explained exactly by its coefficients: use method 'coefficients' (or auto)")
        if not supports(model):
            raise HeadswapError("integrated-gradients needs a torch TextClassifier whose texts are encoded on their "
                                "own or in a prompt (not an ONNX export or the cross-encoder); use method "
                                "'occlusion' (or auto)")
    return method
