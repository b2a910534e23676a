"""head_fit='logistic': a linear head fitted by scikit-learn's logistic regression on cached frozen features.

The cheapest head there is: one encoding pass, then L-BFGS on standardised features (seconds), instead of epochs
of AdamW. The fitted model is written into the classifier's nn.Linear head (the scaler folded into its weights),
so the result saves, loads, exports and predicts as any head-only classifier does.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch

from headswap.errors import ConfigError

C_GRID = (0.1, 1.0, 10.0)     # inverse regularisation strengths tried when there is validation data


def check(params: dict, soft_targets: bool = False) -> None:
    """Raise ConfigError when head_fit='logistic' cannot apply to these (regime-resolved) settings."""
    if params.get("head_fit") != "logistic":
        return
    problems = [why for bad, why in ((params["regime"] != "head-only", f"regime {params['regime']!r}"),
                                     (params["head"] != "linear", f"head {params['head']!r}"),
                                     (bool(params.get("multi_label")), "multi_label"),
                                     (soft_targets, "soft labels")) if bad]
    if problems:
        raise ConfigError(f"head_fit 'logistic' fits a linear head on frozen features: it needs regime head-only, "
                          f"head linear and single-label targets, not {', '.join(problems)}")


def fit_logistic_head(head: torch.nn.Linear, train_items: Sequence[dict], seed: int,
                      class_weight: Sequence[float] | None = None, eval_items: Sequence[dict] | None = None,
                      score: Callable[[torch.Tensor], float] | None = None, log: Callable[[str], None] | None = None):
    """Fit `head` (in place) on items {"features", "label"}; with eval_items and score(logits) -> float, the
    strength C is chosen from C_GRID by that score. Returns (history entries, best entry index, best eval logits,
    every C's eval logits)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from headswap.train.checkpoint import EpochLog

    if not isinstance(head, torch.nn.Linear):
        raise ConfigError(f"head_fit 'logistic' needs a linear head, got {type(head).__name__}")
    x = torch.stack([it["features"] for it in train_items]).double().cpu().numpy()
    y = np.array([int(it["label"]) for it in train_items])
    k = head.out_features
    scaler = StandardScaler().fit(x)
    xs = scaler.transform(x)
    weights = None if class_weight is None else {c: float(w) for c, w in enumerate(class_weight)}
    val = None if not eval_items or score is None else torch.stack([it["features"] for it in eval_items]).float()
    history, best, best_logits, best_state, every = [], None, None, None, []
    # Strong to weak regularisation, each fit starting from the last one's weights (warm_start): on 13,590 texts of
    # 151 classes each cold L-BFGS fit took minutes, a warm one a fraction of that.
    lr = LogisticRegression(max_iter=300, class_weight=weights, random_state=seed, warm_start=True)
    for c in (C_GRID if val is not None else (1.0,)):
        t0 = time.perf_counter()
        lr.set_params(C=c).fit(xs, y)
        w, b = _dense(lr, k)
        # Standardisation folded in: w (x - mean) / scale + b = (w / scale) x + (b - w mean / scale).
        w_raw = w / scaler.scale_
        b_raw = b - w_raw @ scaler.mean_
        with torch.no_grad():
            head.weight.copy_(torch.as_tensor(w_raw, dtype=head.weight.dtype))
            head.bias.copy_(torch.as_tensor(b_raw, dtype=head.bias.dtype))
        proba = lr.predict_proba(xs)
        loss = float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), np.searchsorted(lr.classes_, y)], 1e-12, 1))))
        entry = EpochLog(len(history) + 1, loss, time.perf_counter() - t0, steps=int(np.max(lr.n_iter_)))
        logits = None
        if val is not None:
            with torch.no_grad():      # the head sits where it trains (a GPU), the features where they were kept
                logits = head(val.to(head.weight.device)).cpu()
            entry.metrics, entry.score = score(logits)
            every.append(logits)
        history.append(entry)
        if log:
            val_txt = f", validation {entry.score:.4f}" if entry.score is not None else ""
            log(f"  logistic head C={c:g}: train loss {loss:.4f}{val_txt} ({entry.seconds:.1f} s)")
        if best is None or (entry.score is not None and entry.score > history[best].score):
            best, best_logits = len(history) - 1, logits
            best_state = (head.weight.detach().clone(), head.bias.detach().clone())
    with torch.no_grad():
        head.weight.copy_(best_state[0])
        head.bias.copy_(best_state[1])
    return history, best, best_logits, every


def _dense(lr, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(K, D) weights and (K,) biases whose softmax equals lr's probabilities (two classes: one coefficient row,
    split as -z/2, +z/2). Classes the training data lacked get a very low logit."""
    coef, intercept = lr.coef_, lr.intercept_
    if coef.shape[0] == 1 and len(lr.classes_) == 2:
        coef, intercept = np.vstack([-coef / 2, coef / 2]), np.array([-intercept[0] / 2, intercept[0] / 2])
    w = np.zeros((k, coef.shape[1]))
    b = np.full(k, -30.0)
    w[lr.classes_], b[lr.classes_] = coef, intercept
    return w, b


def train_logistic(module, train_items: Sequence[dict], cfg, eval_items=None, eval_labels=None,
                   label_names=None, positive_label="auto", eval_per_text=None, log=None):
    """The training loop's counterpart for head_fit='logistic' on a HeadOnFeatures module: a TrainResult with one
    history entry per C tried (the best restored)."""
    from headswap.train.loop import TrainResult, score_logits

    if cfg.soft_targets:
        raise ConfigError("head_fit 'logistic' trains on class labels; soft labels need head_fit 'loop'")

    def score(logits):
        m = score_logits(eval_per_text(logits) if eval_per_text else logits, eval_labels, label_names,
                         positive_label)
        return m.to_dict(), m.score(cfg.metric)

    t0 = time.perf_counter()
    history, best, best_logits, every = fit_logistic_head(module.head, train_items, cfg.seed, cfg.class_weight, eval_items,
                                                   score if eval_items is not None else None, log)
    seconds = time.perf_counter() - t0
    trainable = sum(p.numel() for p in module.head.parameters())
    return TrainResult(history, history[best].epoch, history[best].score, seconds, trainable,
                       len(train_items) / seconds if seconds > 0 else 0.0, best_eval_logits=best_logits,
                       eval_logits=every)
