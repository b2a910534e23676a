"""Out-of-scope scores: how far a text is from what the classifier was trained on. Higher = more out of scope.

    softmax      1 - the top in-scope class's calibrated probability (Hendrycks & Gimpel 2017)
    energy       -logsumexp of the in-scope logits (Liu et al. 2020)
    mahalanobis  min over in-scope classes of (x - mu_c)^T P (x - mu_c) on the pooled features, with one shared
                 covariance fitted on the training features (Podolskiy et al. 2021; Ledoit-Wolf shrinkage keeps P
                 finite when there are fewer texts than dimensions)
    knn          cosine distance to the k-th nearest training feature (Sun et al. 2022; k = 10)

The statistics the feature scores need (class means, precision matrix, unit-length feature bank) are an
OosStatistics, fitted on the in-scope training features after fine-tuning and saved beside the weights as
safetensors (float32, so a reloaded model computes exactly the scores the saved one did).

Threshold-free figures (figures()): the AUROC of separating out-of-scope from in-scope texts by the score
(out of scope = positive, 0.5 = chance), and FPR@95TPR: the share of out-of-scope texts still accepted when the
threshold accepts 95% of the in-scope ones (in scope = positive, as in the energy and kNN papers). Lower is better.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCORES = ("softmax", "energy", "mahalanobis", "knn")
FEATURE_SCORES = ("mahalanobis", "knn")      # need the pooled features and the fitted statistics
STATS_FILE = "oos_statistics.safetensors"
DEFAULT_K = 10
MAX_BANK = 20000        # training features kept for kNN: memory and time stay bounded on large training sets
CHUNK = 2048            # query rows per matrix product against the bank


@dataclass
class OosStatistics:
    """What mahalanobis and knn read: per-class means (C, D), the shared precision matrix (D, D) and the bank of
    unit-length training features (M, D), all float32; k for knn."""

    means: np.ndarray
    precision: np.ndarray
    bank: np.ndarray
    k: int = DEFAULT_K

    @classmethod
    def fit(cls, features, y, oos_index: int | None = None, k: int = DEFAULT_K, max_bank: int = MAX_BANK,
            seed: int = 0) -> "OosStatistics":
        """From training features (N, D) and their class indices y; rows of the learned out-of-scope class (and
        any y < 0) are left out: the statistics describe what is in scope."""
        from sklearn.covariance import LedoitWolf
        x, y = np.asarray(features, dtype=np.float64), np.asarray(y)
        keep = (y >= 0) & (y != (-1 if oos_index is None else oos_index))
        x, y = x[keep], y[keep]
        if len(x) < 2:
            raise ValueError("out-of-scope statistics need at least two in-scope training features")
        classes = np.unique(y)
        means = np.stack([x[y == c].mean(0) for c in classes])
        centred = x - means[np.searchsorted(classes, y)]
        precision = LedoitWolf(assume_centered=True).fit(centred).precision_
        bank = x if len(x) <= max_bank else x[np.random.default_rng(seed).choice(len(x), max_bank, replace=False)]
        return cls(means.astype(np.float32), precision.astype(np.float32), _unit(bank).astype(np.float32),
                   int(min(k, len(bank))))

    def mahalanobis(self, features) -> np.ndarray:
        """(N,) min over classes of (x - mu)^T P (x - mu), as x P x - 2 x P mu + mu P mu (matrix products)."""
        x = np.asarray(features, dtype=np.float64)
        p, mu = self.precision.astype(np.float64), self.means.astype(np.float64)
        xp = x @ p
        d = (xp * x).sum(1)[:, None] - 2 * xp @ mu.T + ((mu @ p) * mu).sum(1)[None, :]
        return d.min(1)

    def knn(self, features) -> np.ndarray:
        """(N,) 1 - cosine similarity to the k-th most similar bank feature, in chunks of queries."""
        q = _unit(np.asarray(features, dtype=np.float64))
        bank = self.bank.astype(np.float64)
        out = np.empty(len(q))
        for s in range(0, len(q), CHUNK):
            sims = q[s:s + CHUNK] @ bank.T
            out[s:s + CHUNK] = 1.0 - np.partition(sims, -self.k, axis=1)[:, -self.k]
        return out

    def save(self, path: Path) -> None:
        from safetensors.numpy import save_file

        from headswap.saved.atomic import atomic_path
        with atomic_path(Path(path)) as tmp:
            save_file({"means": self.means, "precision": self.precision, "bank": self.bank}, str(tmp),
                      metadata={"k": str(self.k)})

    @classmethod
    def load(cls, path: Path) -> "OosStatistics":
        from safetensors import safe_open

        from headswap.errors import HeadswapError
        try:
            with safe_open(str(path), framework="numpy") as f:
                t = {name: f.get_tensor(name) for name in ("means", "precision", "bank")}
                k = int((f.metadata() or {}).get("k", DEFAULT_K))
        except Exception as e:     # a missing, truncated or foreign file
            raise HeadswapError(f"{path} cannot be read ({str(e).splitlines()[0][:160]}); the model directory is "
                                f"corrupt") from None
        d = t["means"].shape[-1]
        if t["means"].ndim != 2 or t["precision"].shape != (d, d) or t["bank"].ndim != 2 or \
                t["bank"].shape[1] != d or not 1 <= k <= len(t["bank"]):
            raise HeadswapError(f"{path} is corrupt: means {t['means'].shape}, precision {t['precision'].shape}, "
                                f"bank {t['bank'].shape}, k {k} do not fit together")
        return cls(t["means"], t["precision"], t["bank"], k)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def in_scope_columns(num_classes: int, oos_index: int | None) -> np.ndarray:
    return np.array([j for j in range(num_classes) if j != oos_index], dtype=np.int64)


def compute(name: str, probs=None, logits=None, features=None, stats: OosStatistics | None = None,
            oos_index: int | None = None) -> np.ndarray:
    """(N,) score `name` of each text, higher = more out of scope. softmax reads the calibrated probs, energy the
    raw logits, mahalanobis and knn the pooled features and the fitted stats."""
    if name == "softmax":
        p = np.asarray(probs, dtype=np.float64)
        return 1.0 - p[:, in_scope_columns(p.shape[1], oos_index)].max(1)
    if name == "energy":
        from scipy.special import logsumexp
        z = np.asarray(logits, dtype=np.float64)
        return -logsumexp(z[:, in_scope_columns(z.shape[1], oos_index)], axis=1)
    if name not in FEATURE_SCORES:
        raise ValueError(f"unknown out-of-scope score {name!r}; choose one of {', '.join(SCORES)}")
    if stats is None or features is None:
        raise ValueError(f"the {name} score needs the pooled features and fitted out-of-scope statistics")
    return stats.mahalanobis(features) if name == "mahalanobis" else stats.knn(features)


def figures(score, is_oos) -> dict:
    """{"auroc", "fpr_at_95_tpr"} of one score on texts of both kinds (None without both); see the module doc."""
    from sklearn.metrics import roc_auc_score, roc_curve
    score, is_oos = np.asarray(score, dtype=np.float64), np.asarray(is_oos, dtype=bool)
    if is_oos.all() or not is_oos.any():
        return {"auroc": None, "fpr_at_95_tpr": None}
    fpr, tpr, _ = roc_curve(~is_oos, -score)      # in scope positive, accepted when -score is high
    return {"auroc": float(roc_auc_score(is_oos, score)),
            "fpr_at_95_tpr": float(fpr[np.searchsorted(tpr, 0.95, side="left")])}


def pick(aurocs: dict[str, float | None]) -> str:
    """The score with the highest AUROC (the first listed on a tie; softmax when none has one)."""
    known = {k: v for k, v in aurocs.items() if v is not None}
    return max(known, key=lambda k: (known[k], -list(aurocs).index(k))) if known else "softmax"


def histogram(score, is_oos, bins: int = 40) -> dict:
    """{"edges", "in_scope", "oos"}: counts of each kind of text in `bins` equal bins over the 0.5-99.5th
    percentiles of the score (the extremes fall in the end bins): what a distribution plot draws."""
    score, is_oos = np.asarray(score, dtype=np.float64), np.asarray(is_oos, dtype=bool)
    if not len(score):
        return {"edges": [], "in_scope": [], "oos": []}
    lo, hi = np.percentile(score, [0.5, 99.5])
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    clipped = np.clip(score, edges[0], edges[-1])
    return {"edges": [float(e) for e in edges],
            "in_scope": np.histogram(clipped[~is_oos], edges)[0].tolist(),
            "oos": np.histogram(clipped[is_oos], edges)[0].tolist()}
