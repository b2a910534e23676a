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
checkpoint.py) sees the same batches as an uninterrupted run and ends with the same weights. Checkpoints
are written after every epoch and, with checkpoint_every=N, after every N steps inside one; a mid-epoch
checkpoint also holds the epoch's step count and running loss, and a resume skips the batches done.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, gather_object, set_seed
from torch import nn
from torch.utils.data import DataLoader, Sampler
from tqdm.auto import tqdm
from transformers import get_scheduler

from headswap.errors import ConfigError
from headswap.inference import compute_features, item_length, predict_logits  # noqa: F401 (re-exported)
from headswap.settings import RunSettings, TrainSettings, default_body_lr
from headswap.settings import check as check_settings
from headswap.train.checkpoint import (_resume_payload, _restore, _run_meta, _share, _trainable_state, rng_state,
                                      set_rng_state, write_checkpoint)
from headswap.metrics import Metrics, metrics_from_logits, multi_label_metrics

logger = logging.getLogger(__name__)
_HF_SCHEDULE = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


@dataclass
class TrainConfig(RunSettings, TrainSettings):
    """The loop's settings: headswap.settings' training and run settings (same names, defaults and checks),
    plus keep_best. body_lr None means the full-fine-tuning default."""

    keep_best: bool = True       # with validation data, restore the best epoch's weights at the end

    def __post_init__(self):
        if self.body_lr is None:
            self.body_lr = default_body_lr("full")
        check_settings(vars(self))
        w = self.class_weight
        if w is not None and (isinstance(w, (str, dict)) or not all(
                isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in w)):
            raise ConfigError(f"the training loop takes class_weight as one number > 0 per class, in class order "
                              f"(headswap.data.load_class_weights resolves 'balanced' and dicts), got {w!r}")
        if self.epochs < 1:
            raise ConfigError(f"the training loop needs epochs >= 1, got {self.epochs}")


@dataclass
class EpochLog:
    epoch: int
    train_loss: float
    seconds: float
    metrics: dict = field(default_factory=dict)   # validation metrics.to_dict(), when there is validation data
    score: float | None = None
    steps: int = 0                                # batches this process trained on in this epoch


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

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "best_eval_logits"}


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

    The fit loop sets `epoch` before each pass, and `start` (indices to skip) when it resumes inside an
    epoch. Deliberately no `set_epoch` method and no `generator` attribute: accelerate would otherwise drive
    the epoch from its own iteration counter (which restarts at 0 after a resume) and broadcast a generator
    state from process 0; neither is needed, since every process computes the same permutation from the
    same (seed, epoch).

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


def sampler_skip(step: int, cfg: TrainConfig, accelerator: Accelerator) -> int:
    """Training texts a mid-epoch resume skips: the batches every process trained before the checkpoint."""
    return step * cfg.batch_size * accelerator.num_processes


def default_accelerator(find_unused_parameters: bool = False) -> Accelerator:
    """The Accelerator fit() builds when none is passed; `accelerate launch` configures it through env vars.

    Under DDP, frozen parameters are no issue (DDP skips them), but a trainable parameter that the loss does
    not reach makes DDP fail at the second step. Every strategy and regime reaches all of its trainable
    parameters (tests/test_multiprocess.py checks), so the default leaves find_unused_parameters off: it
    costs an extra autograd-graph traversal per step and a warning per process. A custom model that needs
    it: pass fit(..., accelerator=default_accelerator(find_unused_parameters=True)).
    """
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)] if find_unused_parameters else []
    return Accelerator(kwargs_handlers=handlers)


def fit(model: nn.Module, train_items: Sequence, collate: Callable, cfg: TrainConfig,
        eval_items: Sequence | None = None, eval_labels: Sequence[int] | None = None,
        label_names: list[str] | None = None, positive_label: str | None = "auto",
        log: Callable[[str], None] | None = print, accelerator: Accelerator | None = None,
        on_epoch_end: Callable[[EpochLog], None] | None = None,
        notify: Callable[[str], None] | None = None) -> TrainResult:
    """Train `model` in place; with validation data, evaluate each epoch and (keep_best) restore the best.

    on_epoch_end(entry) runs on every process after each epoch, once its checkpoint (if any) is written.
    log takes the epoch lines; notify (default: log) the checkpoint and resume messages, which a quiet run
    still wants to see.
    """
    set_seed(cfg.seed)
    accelerator = accelerator or default_accelerator()
    main = accelerator.is_main_process

    def say(msg: str) -> None:    # checkpoint and resume messages, main process only
        if main:
            (notify or log or logger.info)(msg)

    def warn(msg: str) -> None:   # through logging, so that a warning shows even when `log` is a quiet logger
        if main:
            logger.warning(msg)

    groups = _param_groups(model, cfg)
    trainable = sum(p.numel() for g in groups for p in g["params"])
    optimizer = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
    lengths = [item_length(item) for item in train_items] if cfg.group_by_length else None
    sampler = EpochShuffle(len(train_items), cfg.seed, lengths, cfg.batch_size)
    loader = DataLoader(train_items, batch_size=cfg.batch_size, sampler=sampler, collate_fn=collate)
    # Steps counted on the un-sharded loader: accelerate advances the scheduler once per process.
    total_steps = cfg.epochs * len(loader)
    scheduler = get_scheduler(_HF_SCHEDULE[cfg.schedule], optimizer,
                              num_warmup_steps=math.ceil(cfg.warmup_ratio * total_steps),
                              num_training_steps=total_steps)
    history, best_state, best_score, best_epoch, done, rng_states = [], None, None, cfg.epochs, 0, None
    best_logits = None
    resumed_step, partial = 0, None     # a checkpoint written inside epoch done+1: its steps and loss so far
    meta = _run_meta(model, cfg, train_items, eval_items) if cfg.checkpoint_dir and main else {}
    if cfg.checkpoint_dir and cfg.resume:
        payload = _share(accelerator, lambda: _resume_payload(cfg, meta, say, warn))
        if payload is not None:
            _restore(model, optimizer, scheduler, payload)
            ck = payload["meta"]
            done, best_score, best_epoch = ck["epoch"], ck["best_score"], ck["best_epoch"]
            names = {f.name for f in fields(EpochLog)}
            history = [EpochLog(**{k: v for k, v in h.items() if k in names}) for h in ck["history"]]
            best_state, rng_states = payload["best"], payload["rng"]
            resumed_step = int(ck.get("step", 0))
            if resumed_step:
                partial = ck["partial"][accelerator.process_index % len(ck["partial"])]
            if len(rng_states) != accelerator.num_processes:
                warn(f"checkpoint was written by {len(rng_states)} process(es), this run has "
                     f"{accelerator.num_processes}; the result will not match an uninterrupted run exactly")
            where = f"step {resumed_step} of epoch {done + 1}" if resumed_step else f"epoch {done}/{cfg.epochs} done"
            say(f"resuming from checkpoint {payload['path']}: {where}, "
                + (f"continuing with epoch {done + 1}" if done < cfg.epochs else "nothing left to train"))
    elif cfg.checkpoint_dir and (Path(cfg.checkpoint_dir) / "last").exists():
        say(f"{cfg.checkpoint_dir} holds a checkpoint from an earlier run; resume is off, so training starts "
            f"from scratch and replaces it after the first epoch")
    own_loss = getattr(model, "computes_own_loss", False)
    weight = torch.tensor(cfg.class_weight, dtype=torch.float32) if cfg.class_weight is not None else None
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    weight = weight.to(accelerator.device) if weight is not None else None
    # The loss with class weights is scikit-learn's and torch's: each text counts w[its class], and the batch
    # loss is divided by the sum of its weights (all weights 1: the plain mean).
    own_kw = {"class_weight": weight} if weight is not None else {}
    raw_optimizer, raw_scheduler = optimizer.optimizer, scheduler.scheduler
    steps_per_epoch = len(loader)

    def save(epochs_done: int, step: int = 0, partial_state: dict | None = None) -> None:
        """Checkpoint after `epochs_done` whole epochs, plus `step` steps of the next one (mid-epoch)."""
        accelerator.wait_for_everyone()
        states = gather_object([rng_state()])   # every process's RNG, for an exact resume
        partials = gather_object([partial_state]) if step else None
        if main:
            write_checkpoint(cfg.checkpoint_dir,
                             {**meta, "epoch": epochs_done, "step": step, "partial": partials,
                              "history": [asdict(h) for h in history],
                              "best_score": best_score, "best_epoch": best_epoch,
                              "num_processes": accelerator.num_processes},
                             _trainable_state(accelerator.unwrap_model(model)), raw_optimizer.state_dict(),
                             raw_scheduler.state_dict(), states, best=best_state)
        accelerator.wait_for_everyone()

    pending_rng = rng_states[accelerator.process_index % len(rng_states)] if rng_states else None
    if pending_rng is not None and not resumed_step:
        # Restored last, after everything above that draws random numbers, so that epoch done+1 starts from
        # exactly the state an uninterrupted run had at that point. A mid-epoch checkpoint's state is restored
        # at the first batch instead: starting an epoch's DataLoader iterator draws a random number, which
        # the uninterrupted run had drawn before the checkpoint.
        set_rng_state(pending_rng)
        pending_rng = None
    show = cfg.progress and main
    start = time.perf_counter()
    for epoch in range(done + 1, cfg.epochs + 1):
        sampler.epoch = epoch
        model.train()
        t0, loss_sum, seen, steps = time.perf_counter(), 0.0, 0, 0
        if partial is not None and epoch == done + 1:
            # Mid-epoch resume: skip the batches (of every process) trained before the checkpoint.
            sampler.start = sampler_skip(resumed_step, cfg, accelerator)
            steps, loss_sum, seen = resumed_step, partial["loss_sum"], partial["seen"]
            t0 -= partial["seconds"]
        bar = tqdm(loader, desc=f"epoch {epoch}/{cfg.epochs}", disable=not show, leave=False,
                   initial=steps, total=steps_per_epoch)
        for batch in bar:
            if pending_rng is not None:
                set_rng_state(pending_rng)
                pending_rng = None
            labels = batch.pop("labels")
            # A strategy that trains on something other than its class logits (generate-parse's LM
            # loss) returns the loss itself; calling through the wrapper keeps gradient sync working.
            if own_loss:
                loss = model(**batch, labels=labels, **own_kw)
            elif labels.ndim == 2:     # multi-label: K independent sigmoids against 0/1 indicators
                loss = F.binary_cross_entropy_with_logits(model(**batch), labels, weight=weight)
            else:
                loss = F.cross_entropy(model(**batch), labels, weight=weight)
            optimizer.zero_grad(set_to_none=True)
            accelerator.backward(loss)
            if cfg.max_grad_norm:
                accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            loss_sum, seen, steps = loss_sum + loss.item() * len(labels), seen + len(labels), steps + 1
            bar.set_postfix(loss=f"{loss_sum / seen:.4f}")
            if cfg.checkpoint_dir and cfg.checkpoint_every and steps % cfg.checkpoint_every == 0 \
                    and steps < steps_per_epoch:
                save(epoch - 1, steps, {"loss_sum": loss_sum, "seen": seen, "seconds": time.perf_counter() - t0})
        sampler.start = 0
        if accelerator.num_processes > 1:   # the loss over every process's shard, the same on all of them
            totals = accelerator.reduce(torch.tensor([loss_sum, seen], dtype=torch.float64,
                                                     device=accelerator.device), "sum")
            loss_sum, seen = float(totals[0]), int(totals[1])
        entry = EpochLog(epoch, loss_sum / max(seen, 1), time.perf_counter() - t0, steps=steps)
        if eval_items is not None:
            logits = predict_logits(model, eval_items, collate, cfg.eval_batch_size, accelerator)
            m = score_logits(logits, eval_labels, label_names, positive_label)
            entry.metrics, entry.score = m.to_dict(), m.score(cfg.metric)
            if best_score is None or entry.score > best_score:
                best_score, best_epoch, best_logits = entry.score, epoch, logits
                if cfg.keep_best:
                    best_state = _trainable_state(accelerator.unwrap_model(model))
        history.append(entry)
        if log and main:
            val = f", validation {cfg.metric} {entry.score:.4f}" if entry.score is not None else ""
            log(f"  epoch {epoch}/{cfg.epochs}: train loss {entry.train_loss:.4f}{val} ({entry.seconds:.1f} s)")
        if cfg.checkpoint_dir:
            save(epoch)
        if on_epoch_end:
            on_epoch_end(entry)
    train_seconds = time.perf_counter() - start
    unwrapped = accelerator.unwrap_model(model)
    if best_state is not None:
        unwrapped.load_state_dict(best_state, strict=False)
        if log and main and best_epoch != cfg.epochs:
            log(f"  restored epoch {best_epoch} ({cfg.metric} {best_score:.4f})")
    else:
        best_epoch = cfg.epochs
    if not (cfg.keep_best or best_epoch == cfg.epochs):
        best_logits = None     # the weights left are the last epoch's, not those the logits came from
    n_train = len(train_items) * (cfg.epochs - done) - min(sampler_skip(resumed_step, cfg, accelerator),
                                                           len(train_items))
    return TrainResult(history, best_epoch, best_score, train_seconds, trainable,
                       n_train / train_seconds if train_seconds > 0 else 0.0, resumed_epoch=done,
                       best_eval_logits=best_logits)


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
