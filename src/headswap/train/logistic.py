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

C_GRID = (0.1, 1.0, 10.0)     # inverse regularisation strengths tried, strong to weak; entry i's epoch is i + 1
CV_FOLDS = 5                  # at most: fewer when a class has fewer training texts
# Cross-validation fits on at most this many training texts (each class's share, and at least CV_FOLDS of each),
# the refit on all. Each fold's first, cold fit dominates: on 13,500 CLINC150 texts of 151 classes (MiniLM
# features, 2 shared cores, load 4-6) five folds on every text took 4.2-4.5x the time of fitting the three C on
# all (102 s against 24 s), five folds of 4,000 texts 2.6-2.8x (66 s). A sample ranks C for a smaller training
# set, where stronger regularisation may do better (there it chose C=0.1, all texts C=1, 0.001 apart out of fold);
# C multiplies the summed loss, so the regularisation per text already weakens as texts are added.
CV_TEXTS = 4000


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


def macro_f1_score(logits: np.ndarray, y: np.ndarray) -> float:
    """Macro F1 of logits' argmax against y: the cross-validation score when the caller gives none."""
    from headswap.metrics import confusion_matrix, macro_f1

    k = logits.shape[1]
    return float(macro_f1(confusion_matrix(y, logits.argmax(1), k)))


def fit_logistic_head(head: torch.nn.Linear, train_items: Sequence[dict], seed: int,
                      class_weight: Sequence[float] | None = None, eval_items: Sequence[dict] | None = None,
                      score: Callable[[torch.Tensor], tuple] | None = None, log: Callable[[str], None] | None = None,
                      cv_score: tuple[str, Callable[[np.ndarray, np.ndarray], float]] = ("macro_f1", macro_f1_score)):
    """Fit `head` (in place) on items {"features", "label"[, "text": the chunked text it is a window of]}. The
    strength C is chosen from C_GRID by cv_score (its name, fn(out-of-fold logits, labels)) in stratified k-fold
    cross-validation on the training features, then refit on all of them; only that fit is scored on eval_items by
    score(logits) -> (metrics, score), so that score is not the best of several. Where a class has under 2 training
    texts, C is chosen by the validation score instead (C=1 without eval_items). Returns (history entries, one per
    C tried, the kept entry's index, its eval logits, the eval logits C was chosen among: the kept one's alone when
    cross-validation chose)."""
    from sklearn.preprocessing import StandardScaler

    if not isinstance(head, torch.nn.Linear):
        raise ConfigError(f"head_fit 'logistic' needs a linear head, got {type(head).__name__}")
    x = torch.stack([it["features"] for it in train_items]).double().cpu().numpy()
    y = np.array([int(it["label"]) for it in train_items])
    groups = np.array([it["text"] for it in train_items]) if train_items and "text" in train_items[0] else None
    # Standardised once on all training features, folds included: no labels are read, and the fit is then foldable
    # into the head the same way whichever C wins.
    scaler = StandardScaler().fit(x)
    xs = scaler.transform(x)
    weights = None if class_weight is None else {c: float(w) for c, w in enumerate(class_weight)}
    val = None if not eval_items or score is None else torch.stack([it["features"] for it in eval_items]).float()
    sample = cv_sample(y, groups, seed)
    fold, why = cv_folds(y[sample], None if groups is None else groups[sample], seed)
    if fold is None:
        if log:
            log(f"  logistic head: C {'chosen on validation' if val is not None else '= 1'}, not by "
                f"cross-validation: {why}")
        return _pick_on_validation(head, xs, y, scaler, weights, seed, val, score, log)
    return _pick_by_cv(head, xs, y, groups, sample, scaler, weights, seed, val, score, log, fold, cv_score)


def cv_sample(y: np.ndarray, groups: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """The indices cross-validation fits on: every item, or the windows of at most about CV_TEXTS texts, each
    class's share of them and at least CV_FOLDS of each class (all where it has fewer)."""
    units = np.arange(len(y)) if groups is None else groups
    if len(np.unique(units)) <= CV_TEXTS:
        return np.arange(len(y))
    rng, kept = np.random.default_rng(seed), []
    total = len(np.unique(units))
    for c in np.unique(y):
        own = rng.permutation(np.unique(units[y == c]))
        kept.append(own[:max(CV_FOLDS, round(CV_TEXTS * len(own) / total))])
    return np.flatnonzero(np.isin(units, np.concatenate(kept)))


def cv_folds(y: np.ndarray, groups: np.ndarray | None = None, seed: int = 0):
    """(the k-fold splitter on (y, groups), None) where every class has two training texts, else (None, why not).
    Windows of one chunked text (groups) stay in one fold: a window scored against its siblings would reward C
    for memorising."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    classes = np.unique(y)
    if len(classes) < 2:
        return None, "one class"
    counts = {c: len(set(groups[y == c])) if groups is not None else int(np.sum(y == c)) for c in classes}
    lone = min(counts, key=counts.get)
    if counts[lone] < 2:
        return None, f"class {lone} has {counts[lone]} training text"
    n = min(CV_FOLDS, counts[lone])
    if groups is None:
        return StratifiedKFold(n, shuffle=True, random_state=seed), None
    return StratifiedGroupKFold(n, shuffle=True, random_state=seed), None


def _pick_by_cv(head, xs, y, groups, sample, scaler, weights, seed, val, score, log, splitter, cv_score):
    """C by out-of-fold cv_score on the items `sample`, then the chosen C refit on every training text and only
    that fit validated."""
    from headswap.train.checkpoint import EpochLog

    k, (metric, cv_fn) = head.out_features, cv_score
    cx, cy = xs[sample], y[sample]
    splits = list(splitter.split(cx, cy, None if groups is None else groups[sample]))
    oof = np.zeros((len(C_GRID), len(cy), k))
    losses, seconds, steps = np.zeros((len(C_GRID), len(splits))), np.zeros(len(C_GRID)), [0] * len(C_GRID)
    starts = [[] for _ in C_GRID]        # each fold's solution at each C, when it saw every class
    classes = np.unique(y)
    for f, (tr, te) in enumerate(splits):
        # Strong to weak regularisation along each fold's path, warm-started as the refit below is.
        lr = _model(weights, seed)
        for i, c in enumerate(C_GRID):
            t0 = time.perf_counter()
            lr.set_params(C=c).fit(cx[tr], cy[tr])
            seconds[i] += time.perf_counter() - t0
            w, b = _dense(lr, k)
            oof[i, te] = cx[te] @ w.T + b
            losses[i, f], steps[i] = _loss(lr, cx[tr], cy[tr]), max(steps[i], int(np.max(lr.n_iter_)))
            if np.array_equal(lr.classes_, classes):
                starts[i].append((lr.coef_.copy(), lr.intercept_.copy()))
    cv = [cv_fn(oof[i], cy) for i in range(len(C_GRID))]
    chosen = int(np.argmax(cv))          # the first best: the stronger regularisation on a tie
    # The refit starts from the folds' mean solution at that C: a cold fit is the dear one (see CV_TEXTS).
    lr = _model(weights, seed)
    if len(starts[chosen]) == len(splits):
        lr.coef_, lr.intercept_ = (np.mean([s[j] for s in starts[chosen]], axis=0) for j in (0, 1))
    t0 = time.perf_counter()
    lr.set_params(C=C_GRID[chosen]).fit(xs, y)
    _load(head, lr, scaler)
    # An entry's train loss is its folds' mean, the kept one's that of the refit on every text.
    history = [EpochLog(i + 1, float(np.mean(losses[i])), float(seconds[i]), steps=steps[i], cv_score=cv[i])
               for i in range(len(C_GRID))]
    kept = history[chosen]
    kept.train_loss, kept.steps = _loss(lr, xs, y), int(np.max(lr.n_iter_))
    refit = time.perf_counter() - t0
    kept.seconds += refit
    logits = _validate(head, val, score, kept)
    if log:
        of = f" of {len(cy)} texts" if len(cy) < len(y) else ""
        for c, entry in zip(C_GRID, history):
            log(f"  logistic head C={c:g}: cross-validated {metric} {entry.cv_score:.4f} ({len(splits)} folds{of}, "
                f"{entry.seconds - (refit if entry is kept else 0):.1f} s)")
        val_txt = f", validation {kept.score:.4f}" if kept.score is not None else ""
        log(f"  logistic head C={C_GRID[chosen]:g} chosen by cross-validation, refit on every training text: "
            f"train loss {kept.train_loss:.4f}{val_txt} ({refit:.1f} s)")
    return history, chosen, logits, [] if logits is None else [logits]


def _pick_on_validation(head, xs, y, scaler, weights, seed, val, score, log):
    """C by the validation score (C=1 without validation data): each C fit on every training text."""
    from headswap.train.checkpoint import EpochLog

    history, best, best_logits, best_state, every = [], None, None, None, []
    lr = _model(weights, seed)
    for c in (C_GRID if val is not None else (1.0,)):
        t0 = time.perf_counter()
        lr.set_params(C=c).fit(xs, y)
        _load(head, lr, scaler)
        entry = EpochLog(C_GRID.index(c) + 1, _loss(lr, xs, y), time.perf_counter() - t0,
                         steps=int(np.max(lr.n_iter_)))
        logits = _validate(head, val, score, entry)
        if logits is not None:
            every.append(logits)
        history.append(entry)
        if log:
            val_txt = f", validation {entry.score:.4f}" if entry.score is not None else ""
            log(f"  logistic head C={c:g}: train loss {entry.train_loss:.4f}{val_txt} ({entry.seconds:.1f} s)")
        if best is None or (entry.score is not None and entry.score > history[best].score):
            best, best_logits = len(history) - 1, logits
            best_state = (head.weight.detach().clone(), head.bias.detach().clone())
    with torch.no_grad():
        head.weight.copy_(best_state[0])
        head.bias.copy_(best_state[1])
    return history, best, best_logits, every


def _model(weights, seed):
    """The regression every fit uses; warm_start: each fit starts from the last one's weights (strong to weak
    regularisation along C_GRID: on 13,590 texts of 151 classes each cold L-BFGS fit took minutes)."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=300, class_weight=weights, random_state=seed, warm_start=True)


def _loss(lr, xs: np.ndarray, y: np.ndarray) -> float:
    proba = lr.predict_proba(xs)
    return float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), np.searchsorted(lr.classes_, y)], 1e-12, 1))))


def _load(head: torch.nn.Linear, lr, scaler) -> None:
    """lr's fit written into head, the standardisation folded in: w (x - mean) / scale + b = (w / scale) x +
    (b - w mean / scale)."""
    w, b = _dense(lr, head.out_features)
    w_raw = w / scaler.scale_
    b_raw = b - w_raw @ scaler.mean_
    with torch.no_grad():
        head.weight.copy_(torch.as_tensor(w_raw, dtype=head.weight.dtype))
        head.bias.copy_(torch.as_tensor(b_raw, dtype=head.bias.dtype))


def _validate(head: torch.nn.Linear, val, score, entry):
    """The head's validation logits (None without validation data), their metrics and score set on entry."""
    if val is None:
        return None
    with torch.no_grad():      # the head sits where it trains (a GPU), the features where they were kept
        logits = head(val.to(head.weight.device)).cpu()
    entry.metrics, entry.score = score(logits)
    return logits


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
    history entry per C tried (the chosen one's weights kept), C cross-validated by cfg.metric."""
    from headswap.train.loop import TrainResult, score_logits

    if cfg.soft_targets:
        raise ConfigError("head_fit 'logistic' trains on class labels; soft labels need head_fit 'loop'")

    def score(logits):
        m = score_logits(eval_per_text(logits) if eval_per_text else logits, eval_labels, label_names,
                         positive_label)
        return m.to_dict(), m.score(cfg.metric)

    def cv_score(logits, y):    # per training item: a chunked text's windows each count (its folds group them)
        return score_logits(logits, y, label_names, positive_label).score(cfg.metric)

    t0 = time.perf_counter()
    history, best, best_logits, every = fit_logistic_head(
        module.head, train_items, cfg.seed, cfg.class_weight, eval_items, score if eval_items is not None else None,
        log, (cfg.metric, macro_f1_score if cfg.metric == "macro_f1" else cv_score))
    seconds = time.perf_counter() - t0
    trainable = sum(p.numel() for p in module.head.parameters())
    return TrainResult(history, history[best].epoch, history[best].score, seconds, trainable,
                       len(train_items) / seconds if seconds > 0 else 0.0, best_eval_logits=best_logits,
                       eval_logits=every)
