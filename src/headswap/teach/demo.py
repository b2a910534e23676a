"""The head-swap capstone: pretrain a tiny LM on the SMS fixture, swap its LM head for a classifier
head, and train it three ways (head-only, partial, full) from the same pretrained weights."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from sklearn.model_selection import train_test_split

from headswap.nn.classifier import Classifier
from headswap.teach.fixture import fixture_split
from headswap.metrics import Metrics
from headswap.train.regimes import apply_regime, count_parameters
from headswap.teach.tiny import TinyConfig, pretrain_quick
from headswap.teach.tokenizer import ByteTokenizer
from headswap.train.loop import TrainConfig, evaluate, fit, snapshot

LABELS = ["ham", "spam"]


@dataclass
class RegimeRun:
    regime: str
    epochs: int
    head_lr: float
    body_lr: float
    last_n: int = 1


DEFAULT_RUNS = (
    RegimeRun("head-only", epochs=20, head_lr=1e-2, body_lr=0.0),
    RegimeRun("partial", epochs=10, head_lr=1e-2, body_lr=1e-3, last_n=1),
    RegimeRun("full", epochs=10, head_lr=1e-2, body_lr=1e-3),
)


def make_collate(tokenizer: ByteTokenizer):
    import torch

    def collate(items):
        enc = tokenizer([t for t, _ in items])
        return {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask,
                "labels": torch.tensor([y for _, y in items], dtype=torch.long)}
    return collate


def run_demo(pretrain_epochs: int = 8, epoch_scale: float = 1.0, pooling: str = "mean", head: str = "linear",
             seed: int = 0, progress: bool = True, log=print, runs=DEFAULT_RUNS) -> dict:
    start = time.perf_counter()
    cfg = TinyConfig()
    tr_x, tr_y, te_x, te_y = fixture_split(seed=seed)
    # Best-epoch selection uses a validation slice of the training split, never the test split.
    fit_x, val_x, fit_y, val_y = train_test_split(tr_x, tr_y, test_size=0.1, stratify=tr_y, random_state=seed)
    log(f"SMS fixture: {len(tr_x)} train ({len(fit_x)} fit + {len(val_x)} validation), {len(te_x)} test; "
        f"tiny transformer: hidden {cfg.hidden}, {cfg.heads} heads, {cfg.blocks} blocks, max length {cfg.max_len}")
    log(f"1. pretraining the body as a byte-level LM for {pretrain_epochs} epochs")
    body = pretrain_quick(tr_x, cfg, epochs=pretrain_epochs, seed=seed, log=log)
    body.causal = pooling != "cls"  # a prepended CLS only sees the text when attention runs both ways
    tokenizer = ByteTokenizer(max_length=cfg.max_len, add_cls=pooling == "cls")
    collate = make_collate(tokenizer)
    idx = {lab: i for i, lab in enumerate(LABELS)}
    items = lambda xs, ys: [(x, idx[y]) for x, y in zip(xs, ys)]  # noqa: E731
    fit_items, val_items, test_items = items(fit_x, fit_y), items(val_x, val_y), items(te_x, te_y)
    results = {}
    for step, run in enumerate(runs, start=2):
        epochs = max(1, round(run.epochs * epoch_scale))
        log(f"\n{step}. {run.regime}" + (f" (last {run.last_n} block)" if run.regime == "partial" else "")
            + f": {epochs} epochs, head lr {run.head_lr:g}, body lr {run.body_lr:g}")
        model = Classifier(snapshot(body), cfg.hidden, len(LABELS), pooling=pooling, head=head)
        apply_regime(model, run.regime, last_n=run.last_n)
        train_cfg = TrainConfig(epochs=epochs, batch_size=32, eval_batch_size=64, schedule="cosine",
                                head_lr=run.head_lr, body_lr=run.body_lr or None, seed=seed, metric="f1", progress=progress)
        result = fit(model, fit_items, collate, train_cfg, eval_items=val_items,
                     eval_labels=[y for _, y in val_items], label_names=LABELS, log=log)
        metrics: Metrics = evaluate(model, test_items, collate, [y for _, y in test_items], LABELS)
        metrics.extra.update(trainable_params=count_parameters(model), total_params=count_parameters(model, False),
                             train_seconds=result.train_seconds, best_epoch=result.best_epoch, epochs=epochs)
        log(f"--- {run.regime}: test split ({len(test_items)} messages) ---")
        log(metrics.report())
        log(f"trainable parameters: {metrics.extra['trainable_params']:,} of {metrics.extra['total_params']:,}; "
            f"train time {result.train_seconds:.1f} s; best epoch {result.best_epoch}/{epochs}")
        results[run.regime] = metrics
    total = time.perf_counter() - start
    log("\nsummary (test split, 'spam' positive):")
    log(f"{'regime':<10} {'precision':>9} {'recall':>7} {'F1':>6} {'trainable':>10} {'train s':>8}")
    for name, m in results.items():
        b = m.binary()
        log(f"{name:<10} {b['precision']:9.3f} {b['recall']:7.3f} {b['f1']:6.3f} "
            f"{m.extra['trainable_params']:>10,} {m.extra['train_seconds']:8.1f}")
    log(f"total demo time: {total:.1f} s")
    return {"results": {k: v.to_dict() for k, v in results.items()}, "total_seconds": total}


def write_json(summary: dict, path: str) -> None:
    """The summary as JSON, marked as headswap's (headswap.saved.outputs): a rerun may replace it, and nothing else."""
    from headswap.saved.atomic import write_text
    from headswap.saved.outputs import GENERATOR
    write_text(path, json.dumps({"generator": GENERATOR, **summary}, indent=2) + "\n")     # its first key: JSON_MARK
