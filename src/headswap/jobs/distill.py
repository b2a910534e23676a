"""Distillation: train a fast student on a teacher's probabilities: TF-IDF + logistic regression (headswap.baseline.tfidf,
the default) or the static strategy (a TextClassifier on a model2vec table: headswap.strategies.static).

The teacher (any saved single-label classifier: a TextClassifier directory, an exported ONNX one, or a
classifier already loaded) labels every training text with its probabilities; texts with a label may mix in
the one-hot label (`label_weight`: 0 = the teacher's probabilities only, 1 = the labels only), and unlabelled
texts, which cost nothing to collect, add the teacher's knowledge where the labels have none. The student
minimises the cross-entropy to these soft targets, and its model directory records where it came from.
"""

from __future__ import annotations

import os
import time

import numpy as np

from headswap.errors import HeadswapError


def teacher_probabilities(teacher, texts, progress: bool = True) -> tuple[np.ndarray, float]:
    """(N, K) probabilities over teacher.labels_, as float64 rows summing to 1, and the seconds they took."""
    before = getattr(teacher, "progress", None)
    if before is not None:
        teacher.progress = progress
    try:
        t0 = time.perf_counter()
        probs = np.asarray(teacher.predict_proba(list(texts)), dtype=np.float64)
        seconds = time.perf_counter() - t0
    finally:
        if before is not None:
            teacher.progress = before
    return probs / probs.sum(1, keepdims=True), seconds


def load_teacher(teacher, progress: bool = True):
    """A loaded single-label classifier from a classifier or a model directory."""
    if isinstance(teacher, (str, os.PathLike)):
        from headswap.classifier.estimator import load_model
        teacher = load_model(teacher, progress=progress)
    if getattr(teacher, "multi_label", False):
        raise HeadswapError("the teacher is a multi-label classifier; distillation supports single-label teachers "
                            "only (the student is a single-label softmax model)")
    if not hasattr(teacher, "predict_proba") or not hasattr(teacher, "labels_"):
        raise HeadswapError(f"the teacher must be a fitted classifier or a model directory, got "
                            f"{type(teacher).__name__}")
    return teacher


def soft_targets(teacher_probs: np.ndarray, teacher_labels, labels=None, label_weight: float = 0.0) -> np.ndarray:
    """(1 - label_weight) * teacher probabilities + label_weight * one-hot labels (rows of texts with labels
    first; rows past len(labels) are unlabelled texts and keep the teacher's probabilities)."""
    targets = np.array(teacher_probs, dtype=np.float64, copy=True)
    if labels is not None and label_weight > 0:
        index = {lab: k for k, lab in enumerate(teacher_labels)}
        onehot = np.zeros((len(labels), len(teacher_labels)))
        onehot[np.arange(len(labels)), [index[str(v)] for v in labels]] = 1.0
        targets[:len(labels)] = (1 - label_weight) * targets[:len(labels)] + label_weight * onehot
    return targets


STUDENTS = ("tfidf", "static")


def distill(teacher, texts, labels=None, unlabeled=None, label_weight: float = 0.0, C: float = 10.0,
            progress: bool = True, teacher_probs=None, student: str = "tfidf", student_params: dict | None = None,
            eval_texts=None, eval_labels=None):
    """Train a student on `teacher`'s probabilities over `texts` plus `unlabeled` texts.

    teacher: a model directory (TextClassifier, exported ONNX or TF-IDF) or a loaded single-label classifier.
    labels: optional labels of `texts`, mixed into their targets with weight `label_weight` (in [0, 1]).
    teacher_probs: the teacher's (len(texts) + len(unlabeled), K) probabilities when already computed (e.g.
    cached); the teacher is then not run.

    student "tfidf": a TfidfClassifier, C its inverse regularisation strength. student "static": a
    TextClassifier(strategy="static", **student_params) fitted on the soft targets (TextClassifier.fit's
    soft_labels); eval_texts/eval_labels (real labels) pick its best epoch, else its eval_fraction split of the
    training texts, scored against the targets' most probable class.

    The student's `distillation_` (saved in its config) records the teacher, the text counts, label_weight,
    the teacher's seconds and the student's agreement with the teacher's argmax on the training texts.
    """
    from headswap.baseline.tfidf import TfidfClassifier

    if student not in STUDENTS:
        raise HeadswapError(f"unknown student {student!r}; choose one of {', '.join(STUDENTS)}")
    student_params = dict(student_params or {})
    if student == "tfidf" and student_params:
        raise HeadswapError(f"student_params {sorted(student_params)} are settings of the static student; the tfidf "
                            f"student takes only C")
    if student == "tfidf" and eval_texts is not None:
        raise HeadswapError("eval_texts pick the static student's best epoch; the tfidf student has no epochs")
    if student_params.get("strategy", "static") != "static":
        raise HeadswapError(f"the static student's strategy is 'static', not {student_params['strategy']!r}")
    for name in ("multi_label", "out_of_scope"):
        if student_params.get(name):
            raise HeadswapError(f"student_params {name}={student_params[name]!r}: the student is a single-label "
                                f"model trained on soft targets")
    texts = list(texts)
    unlabeled = None if unlabeled is None else list(unlabeled)
    if not texts:
        raise HeadswapError("no texts to distill on: the list of training texts is empty")
    if unlabeled is not None and not unlabeled:
        raise HeadswapError("the unlabelled texts are an empty list; pass None for none, or some texts")
    try:
        label_weight = float(label_weight)
    except (TypeError, ValueError):
        raise HeadswapError(f"label_weight must be a number in [0, 1], got {label_weight!r}") from None
    if not 0.0 <= label_weight <= 1.0:      # NaN fails this too
        raise HeadswapError(f"label_weight must be in [0, 1] (0: teacher only, 1: labels only), got {label_weight}")
    if labels is not None:
        labels = [str(v) for v in labels]
        if len(labels) != len(texts):
            raise HeadswapError(f"{len(texts)} texts but {len(labels)} labels")
    elif label_weight > 0:
        raise HeadswapError(f"label_weight {label_weight} mixes in labels, but no labels were given")
    if student == "static":     # the settings checked before the teacher runs
        from headswap.classifier.estimator import TextClassifier
        try:
            model = TextClassifier(**{**student_params, "strategy": "static", "progress": progress})
        except TypeError as e:
            raise HeadswapError(f"student_params: {e}") from None
        model.resolved_params()
    source = os.fspath(teacher) if isinstance(teacher, (str, os.PathLike)) else None
    teacher = load_teacher(teacher, progress)
    teacher_labels = [str(v) for v in teacher.labels_]
    if labels is not None:
        unknown = sorted(set(labels) - set(teacher_labels))
        if unknown:
            raise HeadswapError(f"labels the teacher does not know: {', '.join(map(repr, unknown))}; the teacher's "
                                f"labels: {', '.join(teacher_labels)}")
    everything = texts + (unlabeled or [])
    if teacher_probs is None:
        teacher_probs, seconds = teacher_probabilities(teacher, everything, progress)
    else:
        teacher_probs, seconds = np.asarray(teacher_probs, dtype=np.float64), None
        if teacher_probs.shape != (len(everything), len(teacher_labels)):
            raise HeadswapError(f"teacher_probs must be (texts, labels) = ({len(everything)}, {len(teacher_labels)}), "
                                f"got {teacher_probs.shape}")
    targets = soft_targets(teacher_probs, teacher_labels, labels, label_weight)
    if student == "tfidf":
        student = TfidfClassifier(C=C).fit(everything, soft_labels=targets, labels=teacher_labels)
    else:
        student = model.fit(everything, soft_labels=targets, labels=teacher_labels, eval_texts=eval_texts,
                            eval_labels=eval_labels)
    agree = student.predict_proba(everything).argmax(1) == teacher_probs.argmax(1)
    student.distillation_ = {
        "student": "tfidf" if isinstance(student, TfidfClassifier) else "static", "teacher": source,
        "teacher_strategy": getattr(teacher, "strategy", None),
        "teacher_model": getattr(teacher, "model", None), "teacher_runtime": getattr(teacher, "runtime_", None),
        "texts": len(texts), "labelled": len(texts) if labels is not None else 0,
        "unlabelled": len(unlabeled or []), "label_weight": label_weight,
        "teacher_seconds": None if seconds is None else round(seconds, 3),
        # The share of training texts on which the student's argmax is the teacher's.
        "agreement": round(float(agree[:len(texts)].mean()), 6),
        "agreement_unlabelled": round(float(agree[len(texts):].mean()), 6) if unlabeled else None,
    }
    return student
