"""The logistic head's C: chosen by cross-validation on the training features (then refit on all of them and only
that fit validated), by validation where a class has one training text, and with a chunked text's windows in one
fold."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from headswap.train import logistic
from headswap.train.logistic import C_GRID, cv_folds, cv_sample, fit_logistic_head, macro_f1_score

pytestmark = pytest.mark.usefixtures("one_thread")

K, D = 3, 30


def _data(n: int, seed: int):
    """Three classes, each lifting its own 10 of 30 noisy features by 0.7: few enough texts that C=0.1 wins
    out of fold (0.85 against 0.79 for C=1 and C=10)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % K
    x = rng.normal(size=(n, D))
    for c in range(K):
        x[y == c, c * 10:(c + 1) * 10] += 0.7
    return x, y


def _items(x, y):
    return [{"features": torch.tensor(a, dtype=torch.float32), "label": int(b)} for a, b in zip(x, y)]


def _scorer(y_val):
    return lambda logits: ({"macro": {"f1": macro_f1_score(logits.numpy(), y_val)}},
                           macro_f1_score(logits.numpy(), y_val))


@pytest.fixture(scope="module")
def rigged():
    """Training data and a validation set drawn to favour C=10's fit over C=0.1's: validation alone would pick
    C=10 (or C=1), cross-validation picks C=0.1."""
    x, y = _data(60, 0)
    pool, y_pool = _data(3000, 1)
    scaler = StandardScaler().fit(x)
    fits = {c: LogisticRegression(C=c, max_iter=1000).fit(scaler.transform(x), y) for c in C_GRID}
    pred = {c: f.predict(scaler.transform(pool)) for c, f in fits.items()}
    pick = np.flatnonzero((pred[10.0] == y_pool) & (pred[0.1] != y_pool))[:9]
    pick = np.concatenate([pick, np.flatnonzero((pred[10.0] == y_pool) & (pred[0.1] == y_pool))[:9]])
    val_x, val_y = pool[pick], y_pool[pick]
    on_val = {c: macro_f1_score(np.eye(K)[pred[c][pick]], val_y) for c in C_GRID}
    assert max(on_val, key=on_val.get) != 0.1
    return x, y, val_x, val_y, scaler, fits


def test_cross_validation_chooses_c_and_only_the_refit_is_validated(rigged):
    x, y, val_x, val_y, scaler, fits = rigged
    lines, head = [], torch.nn.Linear(D, K)
    history, best, logits, every = fit_logistic_head(head, _items(x, y), 0, eval_items=_items(val_x, val_y),
                                                     score=_scorer(val_y), log=lines.append)
    assert [h.epoch for h in history] == [1, 2, 3]          # epoch i + 1 is C_GRID[i] (the reports read it so)
    assert best == 0        # C=0.1, where validation alone keeps C=10 (or 1)
    cv = [h.cv_score for h in history]
    assert cv[0] == max(cv) and cv[0] > cv[1] + 0.02, cv
    # the kept weights are C=0.1 fitted on every training text, its standardisation folded into the head
    with torch.no_grad():
        ours = torch.softmax(head(torch.tensor(x, dtype=torch.float32)), -1).numpy()
    assert np.allclose(ours, fits[0.1].predict_proba(scaler.transform(x)), atol=2e-3)
    # one validation: the kept fit's, not the best of three
    assert [h.score is not None for h in history] == [True, False, False]
    with torch.no_grad():
        again = head(torch.tensor(val_x, dtype=torch.float32))
    assert len(every) == 1 and torch.allclose(every[0], again) and torch.allclose(logits, again)
    assert history[0].score == macro_f1_score(again.numpy(), val_y)
    assert lines[-1].startswith("  logistic head C=0.1 chosen by cross-validation") and \
        f"validation {history[0].score:.4f}" in lines[-1]
    assert all(f"cross-validated macro_f1 {h.cv_score:.4f} (5 folds" in line for h, line in zip(history, lines))


def test_without_validation_data_cross_validation_still_chooses(rigged):
    x, y, *_ = rigged
    history, best, logits, every = fit_logistic_head(torch.nn.Linear(D, K), _items(x, y), 0)
    assert len(history) == len(C_GRID) and best == 0 and logits is None and every == []
    assert all(h.score is None and h.cv_score is not None for h in history)


def test_a_class_with_one_training_text_falls_back_to_validation(rigged):
    x, y, val_x, val_y, *_ = rigged
    keep = np.flatnonzero(y != 2)[:40].tolist() + [int(np.flatnonzero(y == 2)[0])]
    lines = []
    history, best, logits, every = fit_logistic_head(torch.nn.Linear(D, K), _items(x[keep], y[keep]), 0,
                                                     eval_items=_items(val_x, val_y), score=_scorer(val_y),
                                                     log=lines.append)
    assert lines[0] == "  logistic head: C chosen on validation, not by cross-validation: class 2 has 1 training text"
    scores = [h.score for h in history]
    assert None not in scores and best == scores.index(max(scores)) and len(every) == len(C_GRID)
    assert all(h.cv_score is None for h in history)
    # and without validation data: C=1, recorded as C_GRID's second entry
    history, best, _, _ = fit_logistic_head(torch.nn.Linear(D, K), _items(x[keep], y[keep]), 0)
    assert [h.epoch for h in history] == [C_GRID.index(1.0) + 1] and best == 0


def test_a_chunked_texts_windows_share_a_fold():
    y = np.repeat([0, 0, 1, 1, 1], 3)             # five texts of three windows each: two of class 0
    groups = np.repeat(np.arange(5), 3)
    splitter, why = cv_folds(y, groups)
    assert why is None and splitter.get_n_splits() == 2      # folds: texts per class, not windows
    for train, test in splitter.split(np.zeros((len(y), 1)), y, groups):
        assert not set(groups[train]) & set(groups[test])
    assert cv_folds(y[:12], groups[:12])[1] is None
    assert cv_folds(np.repeat([0, 1], [3, 6]), np.repeat([0, 1, 2], 3)) == (None, "class 0 has 1 training text")


def test_a_large_training_set_is_cross_validated_on_a_sample_and_refit_on_all(rigged, monkeypatch):
    monkeypatch.setattr(logistic, "CV_TEXTS", 30)
    y = np.repeat([0, 1, 2], [100, 50, 3])
    assert np.bincount(y[cv_sample(y, None, 0)]).tolist() == [20, 10, 3]    # shares of 30; a small class whole
    windows = np.repeat(y, 2), np.repeat(np.arange(len(y)), 2)             # each text as two windows
    kept = cv_sample(*windows, 0)
    assert np.bincount(windows[0][kept]).tolist() == [40, 20, 6] and np.all(np.bincount(windows[1][kept]) % 2 == 0)
    x, y, _, _, scaler, fits = rigged
    lines, head = [], torch.nn.Linear(D, K)
    history, best, _, _ = fit_logistic_head(head, _items(x, y), 0, log=lines.append)
    assert "(5 folds of 30 texts, " in lines[0] and "refit on every training text" in lines[-1]
    with torch.no_grad():
        ours = torch.softmax(head(torch.tensor(x, dtype=torch.float32)), -1).numpy()
    assert np.allclose(ours, fits[C_GRID[best]].predict_proba(scaler.transform(x)), atol=2e-3)


def test_the_model_card_shows_each_c_cross_validated_and_only_the_kept_one_validated(tmp_path):
    # a logistic head's history: one entry per C, only the kept one validated (saving such a model raised a
    # TypeError formatting the others' score None, and `headswap train --head-fit logistic` lost the model)
    from headswap.saved.model_card import write_model_card

    hist = [{"epoch": i + 1, "train_loss": 0.5 - i / 10, "score": 0.9 if i == 1 else None, "cv_score": 0.8 + i / 100}
            for i in range(3)]
    config = {"params": {"model": "m", "strategy": "encoder-mlp", "epochs": 1}, "regime": "head-only",
              "labels": ["a", "b"], "history": hist}
    write_model_card(tmp_path / "README.md", config, {"trainable_params": 10, "total_params": 100})
    card = (tmp_path / "README.md").read_text()
    assert "| epoch | train loss | validation score | cross-validated |" in card
    assert "| 1 | 0.5000 | – | 0.8000 |" in card and "| 2 | 0.4000 | 0.9000 | 0.8100 |" in card
