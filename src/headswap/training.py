"""The one training loop every regime and strategy shares, built on accelerate.

The model is any nn.Module whose forward(**batch) returns (B, K) logits; `collate` turns a list of
dataset items into that batch plus a "labels" tensor. Parameters whose names start with one of the
model's `head_prefixes` train at `head_lr`, the rest at `body_lr`; frozen parameters never reach the
optimiser. Because the loop only talks to accelerate, `accelerate launch --num_processes N` runs it
data-parallel without changes.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import get_scheduler

from .metrics import Metrics, metrics_from_logits

SCHEDULES = ("constant", "linear", "cosine")
_HF_SCHEDULE = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


@dataclass
class TrainConfig:
    epochs: int = 10
    batch_size: int = 32
    eval_batch_size: int = 64
    head_lr: float = 1e-3
    body_lr: float = 1e-4        # smaller than head_lr: the body is pretrained, the head starts from noise
    weight_decay: float = 0.01
    schedule: str = "cosine"
    warmup_ratio: float = 0.06
    max_grad_norm: float | None = 1.0
    seed: int = 0
    metric: str = "macro_f1"     # the validation metric that picks the best epoch
    keep_best: bool = True
    progress: bool = True

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"epochs and batch_size must be >= 1 (got {self.epochs}, {self.batch_size})")


@dataclass
class EpochLog:
    epoch: int
    train_loss: float
    seconds: float
    metrics: dict = field(default_factory=dict)   # validation metrics.to_dict(), when there is validation data
    score: float | None = None


@dataclass
class TrainResult:
    history: list[EpochLog]
    best_epoch: int
    best_score: float | None
    train_seconds: float
    trainable_params: int
    texts_per_second: float

    def to_dict(self) -> dict:
        return asdict(self)


def _param_groups(model: nn.Module, cfg: TrainConfig) -> list[dict]:
    prefixes = getattr(model, "head_prefixes", ("head.",))
    head, body = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (head if name.startswith(prefixes) else body).append(p)
    groups = [{"params": ps, "lr": lr} for ps, lr in ((head, cfg.head_lr), (body, cfg.body_lr)) if ps]
    if not groups:
        raise ValueError("nothing to train: every parameter is frozen")
    return groups


def _trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}


def _length(item) -> int:
    if isinstance(item, dict):
        if "input_ids" in item:
            return len(item["input_ids"])
        if "pairs" in item:
            return max(len(p["input_ids"]) for p in item["pairs"])
    return 0


@torch.inference_mode()
def predict_logits(model: nn.Module, items: Sequence, collate: Callable, batch_size: int = 64,
                   accelerator: Accelerator | None = None, progress: bool = False, desc: str = "predict"):
    """(N, K) logits in the order of `items` (labels in the batches are ignored).

    Items are run in order of length, so each batch is padded only to its own longest text, and the
    rows are put back in input order at the end.
    """
    order = sorted(range(len(items)), key=lambda i: _length(items[i]))
    logits = _predict_in_order(model, [items[i] for i in order], collate, batch_size, accelerator, progress, desc)
    if len(logits) == 0:
        return logits
    restored = torch.empty_like(logits)
    restored[torch.tensor(order)] = logits
    return restored


def _predict_in_order(model, items, collate, batch_size, accelerator, progress, desc):
    was_training = model.training
    model.eval()
    loader = DataLoader(items, batch_size=batch_size, shuffle=False, collate_fn=collate)
    if accelerator is not None:
        loader = accelerator.prepare(loader)
    device = accelerator.device if accelerator else next(model.parameters()).device
    out = []
    for batch in tqdm(loader, desc=desc, disable=not progress, leave=False):
        batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
        batch.pop("labels", None)
        logits = model(**batch)
        out.append(accelerator.gather_for_metrics(logits) if accelerator else logits)
    model.train(was_training)
    return torch.cat(out).float().cpu() if out else torch.empty(0)


def fit(model: nn.Module, train_items: Sequence, collate: Callable, cfg: TrainConfig,
        eval_items: Sequence | None = None, eval_labels: Sequence[int] | None = None,
        label_names: list[str] | None = None, positive_label: str | None = "auto",
        log: Callable[[str], None] | None = print, accelerator: Accelerator | None = None) -> TrainResult:
    """Train `model` in place; with validation data, evaluate each epoch and (keep_best) restore the best."""
    set_seed(cfg.seed)
    accelerator = accelerator or Accelerator()
    groups = _param_groups(model, cfg)
    trainable = sum(p.numel() for g in groups for p in g["params"])
    optimizer = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
    loader = DataLoader(train_items, batch_size=cfg.batch_size, shuffle=True, collate_fn=collate,
                        generator=torch.Generator().manual_seed(cfg.seed))
    # Steps counted on the un-sharded loader: accelerate advances the scheduler once per process.
    total_steps = cfg.epochs * len(loader)
    scheduler = get_scheduler(_HF_SCHEDULE[cfg.schedule], optimizer,
                              num_warmup_steps=math.ceil(cfg.warmup_ratio * total_steps),
                              num_training_steps=total_steps)
    own_loss = getattr(model, "computes_own_loss", False)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    show = cfg.progress and accelerator.is_main_process
    history, best_state, best_score, best_epoch = [], None, None, cfg.epochs
    start = time.perf_counter()
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        t0, loss_sum, seen = time.perf_counter(), 0.0, 0
        bar = tqdm(loader, desc=f"epoch {epoch}/{cfg.epochs}", disable=not show, leave=False)
        for batch in bar:
            labels = batch.pop("labels")
            # A strategy that trains on something other than its class logits (generate-parse's LM
            # loss) returns the loss itself; calling through the wrapper keeps gradient sync working.
            loss = model(**batch, labels=labels) if own_loss else F.cross_entropy(model(**batch), labels)
            optimizer.zero_grad(set_to_none=True)
            accelerator.backward(loss)
            if cfg.max_grad_norm:
                accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            loss_sum, seen = loss_sum + loss.item() * len(labels), seen + len(labels)
            bar.set_postfix(loss=f"{loss_sum / seen:.4f}")
        entry = EpochLog(epoch, loss_sum / max(seen, 1), time.perf_counter() - t0)
        if eval_items is not None:
            logits = predict_logits(model, eval_items, collate, cfg.eval_batch_size, accelerator)
            m = metrics_from_logits(logits, eval_labels, label_names, positive_label)
            entry.metrics, entry.score = m.to_dict(), m.score(cfg.metric)
            if best_score is None or entry.score > best_score:
                best_score, best_epoch = entry.score, epoch
                if cfg.keep_best:
                    best_state = _trainable_state(accelerator.unwrap_model(model))
        history.append(entry)
        if log and accelerator.is_main_process:
            val = f", validation {cfg.metric} {entry.score:.4f}" if entry.score is not None else ""
            log(f"  epoch {epoch}/{cfg.epochs}: train loss {entry.train_loss:.4f}{val} ({entry.seconds:.1f} s)")
    train_seconds = time.perf_counter() - start
    unwrapped = accelerator.unwrap_model(model)
    if best_state is not None:
        unwrapped.load_state_dict(best_state, strict=False)
        if log and accelerator.is_main_process and best_epoch != cfg.epochs:
            log(f"  restored epoch {best_epoch} ({cfg.metric} {best_score:.4f})")
    else:
        best_epoch = cfg.epochs
    n_train = len(train_items) * cfg.epochs
    return TrainResult(history, best_epoch, best_score, train_seconds, trainable,
                       n_train / train_seconds if train_seconds > 0 else 0.0)


def evaluate(model: nn.Module, items: Sequence, collate: Callable, labels: Sequence[int],
             label_names: list[str], positive_label: str | None = "auto", batch_size: int = 64,
             progress: bool = False) -> Metrics:
    t0 = time.perf_counter()
    logits = predict_logits(model, items, collate, batch_size, progress=progress, desc="evaluate")
    seconds = time.perf_counter() - t0
    m = metrics_from_logits(logits, labels, label_names, positive_label)
    m.extra.update(eval_seconds=seconds, eval_texts_per_second=len(items) / seconds if seconds else 0.0)
    return m


def snapshot(model: nn.Module) -> nn.Module:
    """A deep copy, so each regime starts from the same pretrained weights."""
    return copy.deepcopy(model)
