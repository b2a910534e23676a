"""Trustworthy probabilities: temperature scaling (Guo et al., 2017) and the measures that judge it.

A trained classifier's softmax is often over- or under-confident. One number T, fitted on held-out data by
minimising the negative log-likelihood of softmax(logits / T), fixes most of it without changing a single
prediction (argmax is the same for every T > 0). Judged by expected calibration error (confidence against
accuracy in 15 equal-width bins) and the Brier score (squared error of the probability vector).
"""

from __future__ import annotations

import math

import numpy as np
import torch

T_RANGE = (0.05, 20.0)    # temperatures outside this are a sign of degenerate validation data, not calibration
BINS = 15


def _nll(logits: torch.Tensor, y: torch.Tensor, t: float) -> float:
    return float(torch.nn.functional.cross_entropy(logits / t, y))


def fit_temperature(logits, y) -> float:
    """The T in T_RANGE minimising the mean NLL of softmax(logits / T) against class indices y."""
    from scipy.optimize import minimize_scalar
    logits = torch.as_tensor(logits, dtype=torch.float64)
    y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    if len(y) == 0:
        raise ValueError("fit_temperature needs at least one labelled example")
    lo, hi = (math.log(v) for v in T_RANGE)
    res = minimize_scalar(lambda log_t: _nll(logits, y, math.exp(log_t)), bounds=(lo, hi), method="bounded",
                          options={"xatol": 1e-6})
    return float(math.exp(res.x))


def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    return torch.softmax(torch.as_tensor(logits, dtype=torch.float64) / temperature, -1).numpy()


def reliability_bins(probs: np.ndarray, y, bins: int = BINS) -> list[dict]:
    """Per equal-width confidence bin: count, mean confidence and accuracy of the top class."""
    probs, y = np.asarray(probs), np.asarray(y)
    conf, correct = probs.max(axis=1), probs.argmax(axis=1) == y
    # Bin i holds confidences in (i/bins, (i+1)/bins]; the lowest bin also takes exactly 0.
    index = np.clip(np.ceil(conf * bins).astype(int) - 1, 0, bins - 1)
    out = []
    for i in range(bins):
        sel = index == i
        n = int(sel.sum())
        out.append({"lower": i / bins, "upper": (i + 1) / bins, "count": n,
                    "confidence": float(conf[sel].mean()) if n else None,
                    "accuracy": float(correct[sel].mean()) if n else None})
    return out


def expected_calibration_error(probs, y, bins: int = BINS) -> float:
    """sum over bins of (bin share) x |accuracy - mean confidence|."""
    n = len(np.asarray(y))
    return float(sum(b["count"] / n * abs(b["accuracy"] - b["confidence"])
                     for b in reliability_bins(probs, y, bins) if b["count"])) if n else 0.0


def brier_score(probs, y) -> float:
    """Mean over texts of the squared distance between the probability vector and the one-hot label."""
    probs = np.asarray(probs, dtype=float)
    onehot = np.eye(probs.shape[1])[np.asarray(y)]
    return float(((probs - onehot) ** 2).sum(axis=1).mean())


def measures(logits, y, temperature: float = 1.0) -> dict:
    probs = softmax(logits, temperature)
    y = np.asarray(y)
    return {"ece": expected_calibration_error(probs, y), "brier": brier_score(probs, y),
            "nll": _nll(torch.as_tensor(logits, dtype=torch.float64), torch.as_tensor(y), temperature)}


def report(logits, y, temperature: float | None) -> dict:
    """Calibration of `logits` against y: before (T = 1) and, with a fitted temperature, after."""
    out = {"temperature": temperature, "bins": BINS, "before": measures(logits, y),
           "reliability_before": reliability_bins(softmax(logits), y)}
    if temperature is not None:
        out["after"] = measures(logits, y, temperature)
        out["reliability_after"] = reliability_bins(softmax(logits, temperature), y)
    return out


# ---- multi-label: one sigmoid, and one temperature, per label -------------------------------------------------


def _bce(logits: torch.Tensor, y: torch.Tensor, t: float) -> float:
    return float(torch.nn.functional.binary_cross_entropy_with_logits(logits / t, y))


def fit_label_temperatures(logits, y) -> list[float]:
    """Per label (column), the T in T_RANGE minimising the binary cross-entropy of sigmoid(logit / T)."""
    from scipy.optimize import minimize_scalar
    logits = torch.as_tensor(np.asarray(logits), dtype=torch.float64)
    y = torch.as_tensor(np.asarray(y), dtype=torch.float64)
    lo, hi = (math.log(v) for v in T_RANGE)
    out = []
    for k in range(logits.shape[1]):
        res = minimize_scalar(lambda log_t: _bce(logits[:, k], y[:, k], math.exp(log_t)), bounds=(lo, hi),
                              method="bounded", options={"xatol": 1e-6})
        out.append(float(math.exp(res.x)))
    return out


def _binary_view(logits, y, temperature) -> tuple[np.ndarray, np.ndarray]:
    """Every (text, label) decision as a two-class probability row [1 - p, p] and its 0/1 truth."""
    t = np.asarray(temperature if temperature is not None else 1.0, dtype=float)
    p = 1 / (1 + np.exp(-np.asarray(logits, dtype=float) / t))
    return np.stack([1 - p.ravel(), p.ravel()], 1), (np.asarray(y) > 0.5).astype(int).ravel()


def report_multi_label(logits, y, temperatures: list[float] | None) -> dict:
    """As report(), over every (text, label) decision of multi-label data: ECE and Brier of the binary
    probabilities (Brier here is the two-class one: 2 x the squared error of p)."""
    def measured(t):
        probs, truth = _binary_view(logits, y, t)
        return probs, truth, {"ece": expected_calibration_error(probs, truth), "brier": brier_score(probs, truth),
                              "nll": float(-np.log(np.clip(probs[np.arange(len(truth)), truth], 1e-12, 1)).mean())}
    probs, truth, before = measured(None)
    out = {"temperature": temperatures, "bins": BINS, "before": before,
           "reliability_before": reliability_bins(probs, truth)}
    if temperatures is not None:
        probs, truth, after = measured(temperatures)
        out["after"], out["reliability_after"] = after, reliability_bins(probs, truth)
    return out
