"""A training run's progress (Run), which train.loop.fit() saves in checkpoints and resumes from, so that fit()
itself only trains. The checkpoint directory itself (layout, atomic write, checked read) is
headswap.train.checkpoint_files.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, gather_object
from torch import nn

# MARKER and TRAINABLE are not used here: they stay importable from this module, as before the split.
from headswap.train.checkpoint_files import (
    LAST,
    MARKER,
    TRAINABLE,
    CheckpointError,
    find_checkpoint,
    write_checkpoint,
)

# ---- RNG states ---------------------------------------------------------------------------------------------------
def rng_state() -> dict:
    """This process's RNG states, in a form torch.load(weights_only=True) accepts (no numpy arrays)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---- resuming a training run (train.loop.fit) ---------------------------------------------------------------------
@dataclass
class EpochLog:
    """One trained epoch, as fit() returns it and a checkpoint's history stores it."""
    epoch: int
    train_loss: float
    seconds: float
    metrics: dict = field(default_factory=dict)   # validation metrics.to_dict(), when there is validation data
    score: float | None = None
    steps: int = 0                                # batches this process trained on in this epoch
    val_loss: float | None = None                 # validation cross-entropy (single-label): breaks ties of score
    cv_score: float | None = None                 # a logistic head's C: its cross-validated score on training data


def better_than(score, loss, best_score, best_loss) -> bool:
    """Whether a validation (score, loss) beats the best so far: a higher score, or the same score at a lower loss.
    A score that saturates (1.0 on a small, easy validation set) or moves in coarse steps ties often, and then the
    first checkpoint to reach it would be kept over better-trained ones."""
    if score is None:
        return False
    if best_score is None or score > best_score:
        return True
    return score == best_score and loss is not None and best_loss is not None and loss < best_loss


def _trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}


# Settings that change what training computes: a checkpoint written under other values cannot continue.
RESUME_KEYS = ("epochs", "batch_size", "head_lr", "body_lr", "weight_decay", "schedule", "warmup_ratio",
               "max_grad_norm", "seed", "metric", "keep_best", "group_by_length", "class_weight", "soft_targets",
               "max_length", "train_embeddings")
# What a checkpoint written before a key existed trained with.
_ADDED_LATER = {"group_by_length": False, "class_weight": None, "soft_targets": False, "train_embeddings": True}


def data_digest(items: Sequence | None) -> str:
    """sha256 over the items' content (texts, token ids, labels, feature tensors): a checkpoint is only
    resumed on the data it was trained on (e.g. not by the next fold of a cross-validation)."""
    h = hashlib.sha256()

    def feed(v) -> None:
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu()
            h.update(f"T{v.dtype}{tuple(v.shape)}".encode())
            h.update(v.contiguous().view(torch.uint8).numpy().tobytes() if v.numel() else b"")
        elif isinstance(v, np.ndarray):
            h.update(f"A{v.dtype}{v.shape}".encode() + np.ascontiguousarray(v).tobytes())
        elif isinstance(v, dict):
            h.update(b"{")
            for k in sorted(v, key=str):
                feed(k)
                feed(v[k])
            h.update(b"}")
        elif isinstance(v, (list, tuple)) and all(type(x) in (int, float, str, bool) for x in v):
            h.update(f"{type(v).__name__}{v!r}".encode())       # token ids: one repr, not one call per id
        elif isinstance(v, (list, tuple)):
            h.update(b"[")
            for x in v:
                feed(x)
            h.update(b"]")
        else:
            h.update(f"{type(v).__name__}:{v!r};".encode())

    feed(list(items) if items is not None else None)
    return h.hexdigest()


def _run_meta(model: nn.Module, cfg, train_items: Sequence, eval_items: Sequence | None) -> dict:
    return {"settings": {k: getattr(cfg, k) for k in RESUME_KEYS}, "n_train": len(train_items),
            "n_eval": len(eval_items) if eval_items is not None else 0,
            "train_sha256": data_digest(train_items), "eval_sha256": data_digest(eval_items),
            "trainable": {n: list(p.shape) for n, p in model.named_parameters() if p.requires_grad}}


def _check_compatible(ckpt_meta: dict, want: dict, where) -> None:
    saved = ckpt_meta.get("settings", {})
    theirs = {**_ADDED_LATER, **saved}
    # max_length: a checkpoint from before it was recorded is not refused for lacking it.
    changed = [k for k, v in want["settings"].items() if theirs.get(k) != v and (k != "max_length" or k in saved)]
    diffs = [f"{k}={theirs.get(k)!r} there, {want['settings'][k]!r} here" for k in changed]
    diffs += [f"{k}: {ckpt_meta.get(k)} there, {want[k]} here" for k in ("n_train", "n_eval")
              if ckpt_meta.get(k) != want[k]]
    for kind, name in (("train", "training"), ("eval", "validation")):
        same_size = ckpt_meta.get(f"n_{kind}") == want[f"n_{kind}"]
        # Another max_length tokenizes the same texts to other ids: that, not the data, is what differs.
        if same_size and ckpt_meta.get(f"{kind}_sha256") != want[f"{kind}_sha256"] and "max_length" not in changed:
            diffs.append(f"the {name} data differ (same size, other content)")
    if ckpt_meta.get("trainable") != want["trainable"]:
        theirs, ours = ckpt_meta.get("trainable") or {}, want["trainable"]
        odd = sorted(set(theirs) ^ set(ours)) or sorted(k for k in ours if theirs.get(k) != ours[k])
        diffs.append(f"trainable parameters differ ({len(theirs)} there, {len(ours)} here; e.g. {odd[:3]})")
    if diffs:
        raise CheckpointError(f"checkpoint {where} was written by a different training setup, so this run "
                              f"cannot continue it: {'; '.join(diffs)}. Delete it or run without resume")


def _resume_payload(cfg, want: dict, say: Callable[[str], None], warn: Callable[[str], None]):
    """Main process: find, validate and read the checkpoint to resume from (None: start from scratch)."""
    ckpt = find_checkpoint(cfg.checkpoint_dir, say, warn)
    if ckpt is None:
        return None
    _check_compatible(ckpt.meta, want, ckpt.path)
    if not (1 <= ckpt.epoch <= cfg.epochs or (ckpt.step > 0 and 0 <= ckpt.epoch < cfg.epochs)):
        raise CheckpointError(f"checkpoint {ckpt.path} is at epoch {ckpt.epoch}, outside 1..{cfg.epochs}")
    return {"path": str(ckpt.path), "meta": ckpt.meta, "trainable": ckpt.trainable(), "best": ckpt.best(),
            "optimizer": ckpt.optimizer_state(), "scheduler": ckpt.scheduler_state(), "rng": ckpt.rng_states()}


def _share(accelerator: Accelerator, make: Callable[[], object]):
    """Run `make` on the main process and hand its result (or its CheckpointError) to every process."""
    box = [None]
    if accelerator.is_main_process:
        try:
            box[0] = ("ok", make())
        except CheckpointError as e:
            box[0] = ("error", str(e))
    if accelerator.num_processes > 1:
        broadcast_object_list(box)
    kind, value = box[0]
    if kind == "error":
        raise CheckpointError(value)
    return value


def _restore(model: nn.Module, optimizer, scheduler, payload: dict) -> None:
    """Load trainable parameters, optimizer and scheduler state into the unprepared objects."""
    where = payload["path"]
    missing, unexpected = model.load_state_dict(payload["trainable"], strict=False)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    lacking = sorted(trainable - set(payload["trainable"]))
    if unexpected or lacking:
        raise CheckpointError(f"checkpoint {where} does not fit this model: unexpected {unexpected[:3]}, "
                              f"missing {lacking[:3]}")
    try:
        optimizer.load_state_dict(payload["optimizer"])
        scheduler.load_state_dict(payload["scheduler"])
    except (ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(f"checkpoint {where}: optimizer or scheduler state does not fit ({e})") from None


class Run:
    """One fit() call's progress: what its checkpoints save and a resume restores.

    resumed_epoch whole epochs came from the checkpoint, plus resumed_step steps of the next one with their
    running loss `partial` (a mid-epoch checkpoint); all 0/None when training starts from scratch. history
    holds an EpochLog per epoch; best_score, best_epoch and best_state (its trainable weights, with keep_best)
    the best validation epoch so far. Without cfg.checkpoint_dir nothing is read or written.

    fit() calls resume() on the model, optimizer and scheduler before accelerate prepares them, begin() after,
    then per epoch start_epoch(), batches(), save() inside it when mid_epoch_due(), record() and save().
    """

    def __init__(self, cfg, accelerator: Accelerator, say: Callable[[str], None], warn: Callable[[str], None]):
        self.cfg, self.accelerator = cfg, accelerator
        main = accelerator.is_main_process     # messages come once, from the main process
        self.say, self.warn = (say, warn) if main else (lambda msg: None, lambda msg: None)
        self.resumed_epoch, self.resumed_step, self.partial = 0, 0, None
        self.history: list[EpochLog] = []
        self.best_score, self.best_epoch, self.best_state = None, cfg.epochs, None
        self.best_loss = None
        self.meta = {}       # the run's setup that every checkpoint records (main process)
        self._rng = None     # this process's RNG state from the checkpoint, until it is restored

    @property
    def skipped(self) -> int:
        """Training texts a mid-epoch resume skips: the batches every process trained before the checkpoint."""
        return self.resumed_step * self.cfg.batch_size * self.accelerator.num_processes

    def resume(self, model: nn.Module, optimizer, scheduler, train_items: Sequence,
               eval_items: Sequence | None) -> None:
        """With cfg.resume, load the checkpoint (read and checked on the main process, shared with the others)
        into the not yet prepared model, optimizer and scheduler, and take its progress."""
        cfg, acc = self.cfg, self.accelerator
        if not cfg.checkpoint_dir:
            return
        if acc.is_main_process:
            self.meta = _run_meta(model, cfg, train_items, eval_items)
        if not cfg.resume:
            if (Path(cfg.checkpoint_dir) / LAST).exists():
                self.say(f"{cfg.checkpoint_dir} holds a checkpoint from an earlier run; resume is off, so training "
                         f"starts from scratch and replaces it after the first epoch")
            return
        payload = _share(acc, lambda: _resume_payload(cfg, self.meta, self.say, self.warn))
        if payload is None:
            return
        _restore(model, optimizer, scheduler, payload)
        ck = payload["meta"]
        self.resumed_epoch, self.best_score, self.best_epoch = ck["epoch"], ck["best_score"], ck["best_epoch"]
        self.best_loss = ck.get("best_loss")     # None in checkpoints written before ties were broken on it
        names = {f.name for f in fields(EpochLog)}
        self.history = [EpochLog(**{k: v for k, v in h.items() if k in names}) for h in ck["history"]]
        self.best_state, rng = payload["best"], payload["rng"]
        self.resumed_step = int(ck.get("step", 0))
        if self.resumed_step:
            self.partial = ck["partial"][acc.process_index % len(ck["partial"])]
        if len(rng) != acc.num_processes:
            self.warn(f"checkpoint was written by {len(rng)} process(es), this run has {acc.num_processes}; "
                      f"the result will not match an uninterrupted run exactly")
        self._rng = rng[acc.process_index % len(rng)] if rng else None
        done, step = self.resumed_epoch, self.resumed_step
        where = f"step {step} of epoch {done + 1}" if step else f"epoch {done}/{cfg.epochs} done"
        self.say(f"resuming from checkpoint {payload['path']}: {where}, "
                 + (f"continuing with epoch {done + 1}" if done < cfg.epochs else "nothing left to train"))

    def begin(self, model: nn.Module, optimizer, scheduler, steps_per_epoch: int) -> None:
        """Once accelerate has prepared them: keep what save() writes, and restore an end-of-epoch checkpoint's
        RNG states. fit() calls this last, after everything that draws random numbers, so that the next epoch
        starts from exactly the state an uninterrupted run had there."""
        self.model, self.optimizer, self.scheduler = model, optimizer.optimizer, scheduler.scheduler
        self.steps_per_epoch = steps_per_epoch
        if self._rng is not None and not self.resumed_step:
            set_rng_state(self._rng)
            self._rng = None

    def start_epoch(self, epoch: int, sampler) -> tuple[int, float, int, float]:
        """Point the sampler at `epoch`. Returns the epoch's (steps, loss_sum, seen, seconds) so far: zeros,
        except in the epoch a mid-epoch checkpoint was written in, whose trained batches the sampler skips."""
        sampler.epoch, sampler.start = epoch, 0
        if self.partial is None or epoch != self.resumed_epoch + 1:
            return 0, 0.0, 0, 0.0
        sampler.start = self.skipped
        return self.resumed_step, self.partial["loss_sum"], self.partial["seen"], self.partial["seconds"]

    def batches(self, loader):
        """The epoch's batches. A mid-epoch checkpoint's RNG states are restored at the first one, not in
        begin(): starting the DataLoader's iterator draws a random number, which the uninterrupted run had
        drawn before the checkpoint."""
        for batch in loader:
            if self._rng is not None:
                set_rng_state(self._rng)
                self._rng = None
            yield batch

    def mid_epoch_due(self, steps: int) -> bool:
        """Whether a checkpoint is due after `steps` steps of an epoch (checkpoint_every; its end: save())."""
        every = self.cfg.checkpoint_every
        return bool(self.cfg.checkpoint_dir and every and steps % every == 0 and steps < self.steps_per_epoch)

    def save(self, epochs_done: int, step: int = 0, partial: dict | None = None) -> None:
        """Checkpoint after `epochs_done` whole epochs, plus `step` steps of the next one whose running loss is
        `partial` (mid-epoch). Every process must call it: each one's RNG states go into the checkpoint."""
        if not self.cfg.checkpoint_dir:
            return
        acc = self.accelerator
        acc.wait_for_everyone()
        states = gather_object([rng_state()])
        partials = gather_object([partial]) if step else None
        if acc.is_main_process:
            write_checkpoint(self.cfg.checkpoint_dir,
                             {**self.meta, "epoch": epochs_done, "step": step, "partial": partials,
                              "history": [asdict(h) for h in self.history],
                              "best_score": self.best_score, "best_epoch": self.best_epoch,
                              "best_loss": self.best_loss,
                              "num_processes": acc.num_processes},
                             _trainable_state(acc.unwrap_model(self.model)), self.optimizer.state_dict(),
                             self.scheduler.state_dict(), states, best=self.best_state)
        acc.wait_for_everyone()

    def record(self, entry: EpochLog) -> bool:
        """Add a trained epoch to the history; True when its validation score is the best so far, or ties it
        at a lower validation loss (with keep_best, its weights are then kept)."""
        self.history.append(entry)
        if not better_than(entry.score, entry.val_loss, self.best_score, self.best_loss):
            return False
        self.best_score, self.best_epoch, self.best_loss = entry.score, entry.epoch, entry.val_loss
        if self.cfg.keep_best:
            self.best_state = _trainable_state(self.accelerator.unwrap_model(self.model))
        return True

    def restore_best(self) -> bool:
        """At the end: load the kept best weights into the model, if any (True); otherwise the last epoch's
        weights stay, and best_epoch says so."""
        if self.best_state is None:
            self.best_epoch = self.cfg.epochs
            return False
        self.accelerator.unwrap_model(self.model).load_state_dict(self.best_state, strict=False)
        return True
