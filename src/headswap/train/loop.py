"""The one training loop every regime and strategy shares, built on accelerate.

The model is any nn.Module whose forward(**batch) returns (B, K) logits; `collate` turns a list of
dataset items into that batch plus a "labels" tensor. Parameters whose names start with one of the
model's `head_prefixes` train at `head_lr`, the rest at `body_lr`; frozen parameters never reach the
optimiser. Because the loop only talks to accelerate, `accelerate launch --num_processes N` runs it
data-parallel without changes: each process trains on its own shard of every epoch (batch_size is per
process), DDP averages the gradients, evaluation gathers every process's logits, and only the main process
logs and writes checkpoints.

Reproducibility and resume: the shuffle order of epoch e is a pure function of (seed, e), not hidden
generator state, so a run resumed from a checkpoint (TrainConfig.checkpoint_dir, resume=True; see
checkpoint.Run) sees the same batches as an uninterrupted run and ends with the same weights. Checkpoints
are written after every epoch and, with checkpoint_every=N, after every N steps inside one; a mid-epoch
checkpoint also holds the epoch's step count and running loss, and a resume skips the batches done.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, set_seed
from torch import nn
from torch.utils.data import DataLoader, Sampler
from tqdm.auto import tqdm
from transformers import get_scheduler

from headswap.errors import ConfigError
from headswap.nn.inference import compute_features, item_length, predict_logits  # noqa: F401 (re-exported)
from headswap.settings import RunSettings, TrainSettings, default_body_lr
from headswap.settings import check as check_settings
from headswap.train.checkpoint import EpochLog, Run, rng_state, set_rng_state
from headswap.metrics import Metrics, metrics_from_logits, multi_label_metrics

logger = logging.getLogger(__name__)
# Every validation's logits are kept for the caller (auto's blend check) up to this many bytes in all; past it none
# are (CLINC150's 1,510 held-out texts of 151 classes: 0.9 MB a validation).
KEEP_EVAL_LOGITS_BYTES = 256 * 2**20
_HF_SCHEDULE = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


@dataclass
class TrainConfig(RunSettings, TrainSettings):
    """The loop's settings: headswap.settings' training and run settings (same names, defaults and checks),
    plus keep_best. body_lr None means the full-fine-tuning default."""

    keep_best: bool = True       # with validation data, restore the best epoch's weights at the end
    # Single-label training on (N, K) probability targets (distillation) instead of class indices: a label is
    # then a row of probabilities, which the batch carries as (B, K) floats, as multi-label indicators are.
    soft_targets: bool = False
    # The text encoder's max_length: the token ids trained on depend on it, so a resume checks it (and says so,
    # rather than that the training data differ). None: not known to the loop (a direct caller).
    max_length: int | None = None
    # The time.perf_counter() time_limit counts from, where the fit started its clock before the loop (the encoding
    # pass of cached features counts against it); None: the loop's start.
    clock_start: float | None = None

    def __post_init__(self):
        if self.body_lr is None:
            self.body_lr = default_body_lr("full")
        check_settings({k: v for k, v in vars(self).items() if k != "max_length" or v is not None})
        w = self.class_weight
        if w is not None and (isinstance(w, (str, dict)) or not all(
                isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in w)):
            raise ConfigError(f"the training loop takes class_weight as one number > 0 per class, in class order "
                              f"(headswap.data.load_class_weights resolves 'balanced' and dicts), got {w!r}")
        if self.epochs < 1:
            raise ConfigError(f"the training loop needs epochs >= 1, got {self.epochs}")


@dataclass
class TrainResult:
    history: list[EpochLog]
    best_epoch: int
    best_score: float | None
    train_seconds: float
    trainable_params: int
    texts_per_second: float
    resumed_epoch: int = 0    # epochs restored from a checkpoint instead of trained in this call
    best_eval_logits: torch.Tensor | None = None   # validation logits of the kept epoch, when this call computed them
    stopped: str | None = None     # why training ended before its last epoch (time_limit), None when it did not
    # every validation's logits in this call, in order: the kept epoch was picked among them (auto's blend checks
    # that pick out of fold, headswap.baseline.blend.select); none past KEEP_EVAL_LOGITS_BYTES
    eval_logits: list = field(default_factory=list)

    def to_dict(self) -> dict:
        out = asdict(replace(self, best_eval_logits=None, eval_logits=[]))     # the logits are not copied
        return {k: v for k, v in out.items() if k not in ("best_eval_logits", "eval_logits")}


def _param_groups(model: nn.Module, cfg: TrainConfig) -> list[dict]:
    prefixes = getattr(model, "head_prefixes", ("head.",))
    head, body = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (head if name.startswith(prefixes) else body).append(p)
    groups = [{"params": ps, "lr": lr} for ps, lr in ((head, cfg.head_lr), (body, cfg.body_lr)) if ps]
    if not groups:
        raise ConfigError("nothing to train: every parameter is frozen")
    return groups


def epoch_seed(seed: int, epoch: int) -> int:
    """The shuffle seed of one epoch, a pure function of (run seed, epoch)."""
    return int(np.random.SeedSequence([seed % 2**64, epoch]).generate_state(1, np.uint64)[0])


class EpochShuffle(Sampler[int]):
    """A random permutation per epoch, drawn from a generator seeded with epoch_seed(seed, epoch).

    fit() sets `epoch` before each pass, and `start` (indices to skip) when it resumes inside an epoch
    (checkpoint.Run.start_epoch). Deliberately no `set_epoch` method and no `generator` attribute:
    accelerate would otherwise drive the epoch from its own iteration counter (which restarts at 0 after a
    resume) and broadcast a generator state from process 0; neither is needed, since every process computes
    the same permutation from the same (seed, epoch).

    With `lengths` and `batch_size` (group_by_length), the order keeps its randomness but each run of
    batch_size indices holds texts of similar length, as transformers' LengthGroupedSampler does: the
    permutation is cut into mega-batches of 50 batches, each sorted by length and cut into batches, and the
    batches are shuffled (a short last batch stays last, so the DataLoader's batches are exactly these).
    """

    MEGA = 50

    def __init__(self, n: int, seed: int, lengths: Sequence[int] | None = None, batch_size: int = 1):
        self.n, self.seed, self.epoch, self.start = n, seed, 1, 0
        self.lengths, self.batch_size = lengths, batch_size

    def __len__(self) -> int:
        return self.n - self.start

    def order(self) -> list[int]:
        g = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        perm = torch.randperm(self.n, generator=g).tolist()
        if self.lengths is None:
            return perm
        b, size = self.batch_size, self.MEGA * self.batch_size
        batches = []
        for i in range(0, self.n, size):
            mega = sorted(perm[i:i + size], key=lambda j: -self.lengths[j])
            batches += [mega[k:k + b] for k in range(0, len(mega), b)]
        short = [batches.pop()] if batches and len(batches[-1]) < b else []
        shuffled = [batches[k] for k in torch.randperm(len(batches), generator=g).tolist()]
        return [j for batch in shuffled + short for j in batch]

    def __iter__(self):
        return iter(self.order()[self.start:])


def default_accelerator(find_unused_parameters: bool = False) -> Accelerator:
    """The Accelerator fit() builds when none is passed; `accelerate launch` configures it through env vars.

    Under DDP, frozen parameters are no issue (DDP skips them), but a trainable parameter that the loss does
    not reach makes DDP fail at the second step. Every strategy and regime reaches all of its trainable
    parameters (tests/test_multiprocess.py checks), so the default leaves find_unused_parameters off: it
    costs an extra autograd-graph traversal per step and a warning per process. A custom model that needs
    it: pass fit(..., accelerator=default_accelerator(find_unused_parameters=True)).
    """
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)] if find_unused_parameters else []
    # accelerate trains on a GPU when there is one, in float32 unless `accelerate launch` or its environment
    # (ACCELERATE_MIXED_PRECISION=bf16) asks for autocast: these bodies are small enough that the casts cost more
    # than bf16 matmuls save (MiniLM full fine-tuning on an H100, batch 32: 2,198 texts/s in float32, 649 with bf16
    # autocast, the same validation F1; benchmarks/gpu_train_speed.py).
    return Accelerator(kwargs_handlers=handlers)


# One fused kernel per step instead of torch's CPU default, a loop of ~8 elementwise passes per tensor: 4-5x less
# optimizer time on CPU for MiniLM (benchmarks/train_speed.py), the same update up to float rounding. (CPU
# fused AdamW came with torch 2.4.)
ADAMW_KERNEL = {"fused": True} if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4) else {}


def _optimizer(model: nn.Module, cfg: TrainConfig, steps_per_epoch: int):
    """AdamW over the trainable parameters, head and body at their own learning rates, and its schedule."""
    optimizer = torch.optim.AdamW(_param_groups(model, cfg), weight_decay=cfg.weight_decay, **ADAMW_KERNEL)
    # Steps counted on the un-sharded loader: accelerate advances the scheduler once per process.
    total = cfg.epochs * steps_per_epoch
    scheduler = get_scheduler(_HF_SCHEDULE[cfg.schedule], optimizer,
                              num_warmup_steps=math.ceil(cfg.warmup_ratio * total), num_training_steps=total)
    return optimizer, scheduler


def _over_processes(accelerator: Accelerator, loss_sum: float, seen: int) -> tuple[float, int]:
    """An epoch's loss sum and text count over every process's shard, the same on all of them."""
    if accelerator.num_processes == 1:
        return loss_sum, seen
    totals = accelerator.reduce(torch.tensor([loss_sum, seen], dtype=torch.float64, device=accelerator.device), "sum")
    return float(totals[0]), int(totals[1])


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None = None):
    """Cross-entropy of (B, K) logits to (B, K) probability targets q. With class weights w each text's term
    -sum_k w_k q_k log p_k is divided by the batch's total sum_i sum_k w_k q_ik, so that one-hot targets give
    exactly F.cross_entropy(logits, class indices, weight=w) (torch's own probability-target loss divides by
    the batch size instead)."""
    if weight is None:
        return F.cross_entropy(logits, targets)
    weighted = targets * weight
    return -(weighted * F.log_softmax(logits, -1)).sum() / weighted.sum()


def _loss(model: nn.Module, batch: dict, labels: torch.Tensor, weight: torch.Tensor | None, own_loss: bool,
          soft: bool = False):
    """The batch's training loss. With class weights it is scikit-learn's and torch's: each text counts
    w[its class], and the sum is divided by the sum of the batch's weights (all weights 1: the plain mean).
    soft: labels are (B, K) probability targets of single-label data (soft_cross_entropy)."""
    # A strategy that trains on something other than its class logits (generate-parse's LM loss) returns the
    # loss itself; calling through the (DDP) wrapper keeps gradient sync working.
    if own_loss:
        return model(**batch, labels=labels, **({"class_weight": weight} if weight is not None else {}))
    if soft:
        return soft_cross_entropy(model(**batch), labels, weight)
    if labels.ndim == 2:     # multi-label: K independent sigmoids against 0/1 indicators
        return F.binary_cross_entropy_with_logits(model(**batch), labels, weight=weight)
    return F.cross_entropy(model(**batch), labels, weight=weight)


def fit(model: nn.Module, train_items: Sequence, collate: Callable, cfg: TrainConfig,
        eval_items: Sequence | None = None, eval_labels: Sequence[int] | None = None,
        label_names: list[str] | None = None, positive_label: str | None = "auto",
        log: Callable[[str], None] | None = print, accelerator: Accelerator | None = None,
        on_epoch_end: Callable[[EpochLog], None] | None = None,
        notify: Callable[[str], None] | None = None,
        eval_per_text: Callable[[torch.Tensor], torch.Tensor] | None = None) -> TrainResult:
    """Train `model` in place; with validation data, evaluate each epoch and (keep_best) restore the best.

    eval_per_text maps the eval items' logits to one row per eval label (chunked texts: their windows'
    logits aggregated, headswap.nn.inference.per_text); best_eval_logits stays per item.

    on_epoch_end(entry) runs on every process after each epoch, once its checkpoint (if any) is written.
    log takes the epoch lines; notify (default: log) the checkpoint and resume messages, which a quiet run
    still wants to see.
    """
    set_seed(cfg.seed)
    accelerator = accelerator or default_accelerator()
    main = accelerator.is_main_process
    lengths = [item_length(item) for item in train_items] if cfg.group_by_length else None
    if lengths is not None and len(set(lengths)) <= 1:
        lengths = None       # nothing to group (cached features): the plain shuffle, as without grouping
    sampler = EpochShuffle(len(train_items), cfg.seed, lengths, cfg.batch_size)
    loader = DataLoader(train_items, batch_size=cfg.batch_size, sampler=sampler, collate_fn=collate)
    optimizer, scheduler = _optimizer(model, cfg, len(loader))
    trainable = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
    # Warnings go through logging, so that they show even when `log` is a quiet logger.
    run = Run(cfg, accelerator, say=notify or log or logger.info, warn=logger.warning)
    run.resume(model, optimizer, scheduler, train_items, eval_items)
    own_loss = getattr(model, "computes_own_loss", False)     # read before DDP wraps the model
    if own_loss and cfg.soft_targets:
        raise ConfigError(f"{type(model).__name__} computes its own training loss and cannot train on probability "
                          f"targets (soft labels)")
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    weight = None if cfg.class_weight is None else torch.tensor(cfg.class_weight, dtype=torch.float32,
                                                                device=accelerator.device)
    steps_per_epoch = len(loader)
    run.begin(model, optimizer, scheduler, steps_per_epoch)
    best_logits, eval_logits, start = None, [], time.perf_counter()
    deadline = None if cfg.time_limit is None else (start if cfg.clock_start is None else cfg.clock_start) + \
        cfg.time_limit
    stopped = None     # why training ended before its last epoch (the time limit), for the log and the result

    def validated(entry: EpochLog) -> bool:
        """Score the model on the validation items into `entry`, record it; True when it is the best so far."""
        nonlocal best_logits, eval_logits
        logits = None
        if eval_items is not None:
            logits = predict_logits(model, eval_items, collate, cfg.eval_batch_size, accelerator)
            per = eval_per_text(logits) if eval_per_text else logits
            m = score_logits(per, eval_labels, label_names, positive_label)
            entry.metrics, entry.score = m.to_dict(), m.score(cfg.metric)
            if eval_logits is not None:
                eval_logits.append(logits)
                if sum(t.numel() * t.element_size() for t in eval_logits) > KEEP_EVAL_LOGITS_BYTES:
                    eval_logits = None      # a long run on a large validation set: none rather than a growing heap
            if np.ndim(eval_labels) == 1:
                entry.val_loss = float(F.cross_entropy(torch.as_tensor(per).float(), torch.as_tensor(eval_labels)))
        best = run.record(entry)
        if best:
            best_logits = logits
        return best

    for epoch in range(run.resumed_epoch + 1, cfg.epochs + 1):
        model.train()
        steps, loss_sum, seen, seconds = run.start_epoch(epoch, sampler)
        t0 = time.perf_counter() - seconds
        bar = tqdm(loader, desc=f"epoch {epoch}/{cfg.epochs}", disable=not (cfg.progress and main), leave=False,
                   initial=steps, total=steps_per_epoch)
        for batch in run.batches(bar):
            labels = batch.pop("labels")
            loss = _loss(model, batch, labels, weight, own_loss, cfg.soft_targets)
            optimizer.zero_grad(set_to_none=True)
            accelerator.backward(loss)
            if cfg.max_grad_norm:
                accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            loss_sum, seen, steps = loss_sum + loss.item() * len(labels), seen + len(labels), steps + 1
            bar.set_postfix(loss=f"{loss_sum / seen:.4f}")
            if run.mid_epoch_due(steps):
                run.save(epoch - 1, steps, {"loss_sum": loss_sum, "seen": seen, "seconds": time.perf_counter() - t0})
            if deadline is not None and steps < steps_per_epoch and time.perf_counter() >= deadline:
                stopped = f"time limit {cfg.time_limit:.4g} s reached after {steps} of {steps_per_epoch} steps of " \
                          f"epoch {epoch}"
                break
            if cfg.eval_every and eval_items is not None and steps % cfg.eval_every == 0 and steps < steps_per_epoch:
                # Validation inside the epoch: a run cut short keeps the best weights seen, not only epoch ends'.
                part = EpochLog(epoch, loss_sum / max(seen, 1), time.perf_counter() - t0, steps=steps)
                validated(part)
                if log and main:
                    log(f"  epoch {epoch}/{cfg.epochs}, step {steps}/{steps_per_epoch}: validation {cfg.metric} "
                        f"{part.score:.4f}")
                model.train()
        bar.close()
        partial = {"loss_sum": loss_sum, "seen": seen, "seconds": time.perf_counter() - t0}   # this process's
        loss_sum, seen = _over_processes(accelerator, loss_sum, seen)
        entry = EpochLog(epoch, loss_sum / max(seen, 1), time.perf_counter() - t0, steps=steps)
        kept = rng_state() if stopped else None     # validating draws random numbers an unstopped run did not
        validated(entry)
        if kept is not None:
            set_rng_state(kept)
        if log and main:
            val = f", validation {cfg.metric} {entry.score:.4f}" if entry.score is not None else ""
            part = f" (stopped at step {steps}/{steps_per_epoch}: time limit)" if stopped else ""
            log(f"  epoch {epoch}/{cfg.epochs}{part}: train loss {entry.train_loss:.4f}{val} ({entry.seconds:.1f} s)")
        if stopped:
            # A run cut short by its time limit checkpoints where it stopped, as mid-epoch (a resume must not take
            # the epoch as complete), so that a time-sliced run (auto's arms) resumes without losing steps.
            run.save(epoch - 1, steps, partial)
            break
        run.save(epoch)
        if on_epoch_end:
            on_epoch_end(entry)
        if deadline is not None and epoch < cfg.epochs and time.perf_counter() >= deadline:
            stopped = f"time limit {cfg.time_limit:.4g} s reached after epoch {epoch} of {cfg.epochs}"
            break
    train_seconds = time.perf_counter() - start
    # Under mixed precision, prepare() wrapped the module's forward in autocast, in place: take it off, so that the
    # fitted model predicts in float32 as it saves and reloads (the caller holds the same module).
    accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    if run.restore_best() and log and main and (stopped or run.best_epoch != cfg.epochs):
        log(f"  restored the best validated weights: epoch {run.best_epoch} ({cfg.metric} {run.best_score:.4f})")
    if not (cfg.keep_best or run.best_epoch == cfg.epochs) or (stopped and not cfg.keep_best):
        best_logits = None     # the weights left are the last step's, not those the logits came from
    if stopped and log and main:
        log(f"  {stopped}")
    if stopped:    # the items of the full epochs before, and the batches of the one cut short
        n_train = min(len(train_items) * (epoch - 1 - run.resumed_epoch) + steps * cfg.batch_size,
                      len(train_items) * (epoch - run.resumed_epoch))
    else:
        n_train = len(train_items) * (cfg.epochs - run.resumed_epoch) - min(run.skipped, len(train_items))
    return TrainResult(run.history, run.best_epoch, run.best_score, train_seconds, trainable,
                       n_train / train_seconds if train_seconds > 0 else 0.0, resumed_epoch=run.resumed_epoch,
                       best_eval_logits=best_logits, stopped=stopped, eval_logits=eval_logits or [])


def score_logits(logits, labels, label_names, positive_label="auto"):
    """Metrics of logits against class indices (N,), or against (N, K) indicators for multi-label data
    (each label predicted where its logit >= 0: sigmoid 0.5; tuned thresholds come after training)."""
    if np.ndim(labels) == 2:
        return multi_label_metrics(logits, labels, label_names)
    return metrics_from_logits(logits, labels, label_names, positive_label)


def evaluate(model: nn.Module, items: Sequence, collate: Callable, labels: Sequence[int],
             label_names: list[str], positive_label: str | None = "auto", batch_size: int = 64,
             progress: bool = False) -> Metrics:
    t0 = time.perf_counter()
    logits = predict_logits(model, items, collate, batch_size, progress=progress, desc="evaluate")
    seconds = time.perf_counter() - t0
    m = score_logits(logits, labels, label_names, positive_label)
    m.extra.update(eval_seconds=seconds, eval_texts_per_second=len(items) / seconds if seconds else 0.0)
    return m


def snapshot(model: nn.Module) -> nn.Module:
    """A deep copy, so each regime starts from the same pretrained weights."""
    return copy.deepcopy(model)
