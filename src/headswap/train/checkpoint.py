"""Training checkpoints, written atomically after every epoch (and every N steps inside one, when asked) so
that a killed run can resume.

Layout of a checkpoint directory D (TrainConfig.checkpoint_dir):

    D/last/                     the newest complete checkpoint
        trainable.safetensors   the trainable parameters (a frozen body is never copied)
        best.safetensors        the best epoch's trainable parameters (keep_best with validation data)
        optimizer.pt            optimizer state: AdamW moments, step counts, the groups' learning rates
        scheduler.pt            learning-rate scheduler state
        rng.pt                  python, numpy and torch (and CUDA) RNG states, one entry per process
        checkpoint.json         the completion marker, written last: epochs done, steps done in the next one
                                and their running loss (mid-epoch), history, best epoch and score,
                                the training settings, and the byte size and sha256 of every file above
    D/.tmp-<hex>/               a checkpoint being written
    D/.old-<hex>/               the previous checkpoint, moved aside while the new one takes its place

Write sequence (one writer: the main process, after every process has finished the epoch):

    1. mkdir D/.tmp-<hex>; write each data file into it, fsync each file;
    2. write checkpoint.json (sizes + sha256 of the files of step 1) and fsync it, then fsync the directory;
    3. if D/last exists: rename D/last -> D/.old-<hex>        (a directory cannot be renamed over a non-empty
                                                              one, so the old checkpoint is moved aside first)
    4. rename D/.tmp-<hex> -> D/last, fsync D;
    5. remove D/.old-<hex> and any other .tmp-* / .old-* left by earlier crashes.

Crash safety: renames within one directory are atomic, and a directory only ever gets the name `last` in
step 4, after its marker is on disk (step 2), so D/last is always either the old or the new complete
checkpoint. A crash during steps 1-2 leaves a .tmp-* without a valid marker; it is never loaded and is
removed by the next successful save. A crash between steps 3 and 4 leaves no D/last, but both the old
(.old-*) and the new (.tmp-*) checkpoint are complete; the loader then takes the complete one with the
highest epoch. A crash during step 5 only leaves garbage that the loader ignores. Nothing is deleted before
the new checkpoint is in place, so at every moment at least one complete checkpoint exists on disk.

Loading (find_checkpoint): a missing D/last is "no checkpoint" and a D/last without its marker is
"incomplete" (both: start from scratch, with a message naming what is missing). A marker whose files are
missing, truncated or fail their checksum, or that comes from another format version, is "corrupt" and
raises CheckpointError: something other than an interrupted save damaged it, and silently retraining
would hide that.

Run (at the end) is train.loop.fit()'s progress, which these checkpoints hold: it writes them and resumes
from them, so that fit() itself only trains.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, gather_object
from safetensors.torch import load_file, save_file
from torch import nn

from headswap.atomic import sha256_of
from headswap.errors import HeadswapError

FORMAT, FORMAT_VERSION = "headswap-checkpoint", 1
MARKER = "checkpoint.json"
TRAINABLE, BEST, OPTIMIZER, SCHEDULER, RNG = ("trainable.safetensors", "best.safetensors", "optimizer.pt",
                                             "scheduler.pt", "rng.pt")
REQUIRED = (TRAINABLE, OPTIMIZER, SCHEDULER, RNG)
LAST = "last"


class CheckpointError(HeadswapError):
    """A checkpoint exists but cannot be used: corrupt, or written by a different training setup."""


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


# ---- writing ------------------------------------------------------------------------------------------------------
def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:  # POSIX: makes renames and new entries durable; Windows cannot open a directory, and needs not
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_failure(e: BaseException, root: Path) -> str | None:
    """Why writing into root failed, when it is the machine's doing (a full disk, a permission); None for
    anything else. torch.save drops errno ("unexpected pos ..."), so a short write on a disk with under
    1 MiB free is taken for a full disk."""
    from headswap.model_dir import os_error_reason
    reason = os_error_reason(e)
    if reason is None and isinstance(e, RuntimeError) and "unexpected pos" in str(e):
        reason = "No space left on device" if shutil.disk_usage(root).free < 2**20 else str(e).splitlines()[0]
    return reason


def _jsonable(v):
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def _tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu").contiguous() for k, v in state.items()}


def write_checkpoint(root, meta: dict, trainable: dict[str, torch.Tensor], optimizer_state: dict,
                     scheduler_state: dict, rng_states: list[dict],
                     best: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a complete checkpoint to root/last atomically (see the module docstring); returns root/last."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tag = secrets.token_hex(6)
    tmp = root / f".tmp-{tag}"
    writers: dict[str, Callable[[Path], None]] = {
        TRAINABLE: lambda p: save_file(_tensors(trainable), str(p), metadata={"format": "pt"}),
        OPTIMIZER: lambda p: torch.save(optimizer_state, p),
        SCHEDULER: lambda p: torch.save(scheduler_state, p),
        RNG: lambda p: torch.save(rng_states, p),
    }
    if best is not None:
        writers[BEST] = lambda p: save_file(_tensors(best), str(p), metadata={"format": "pt"})
    tmp.mkdir()
    try:
        files = {}
        for name, write in writers.items():
            write(tmp / name)
            _fsync_file(tmp / name)
            files[name] = {"bytes": (tmp / name).stat().st_size, "sha256": sha256_of(tmp / name)}
        marker = {"format": FORMAT, "format_version": FORMAT_VERSION, **meta, "files": files}
        with open(tmp / MARKER, "x", encoding="utf-8") as f:   # the marker last: it declares the rest complete
            f.write(json.dumps(marker, indent=1, default=_jsonable))
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
    except BaseException as e:
        reason = _write_failure(e, root)       # before the partial files go and free their space
        shutil.rmtree(tmp, ignore_errors=True)
        if reason is None:
            raise
        kept = "the previous checkpoint is kept" if (root / LAST).is_dir() else "no checkpoint was written"
        if not any(root.iterdir()):
            root.rmdir()
        raise HeadswapError(f"writing a training checkpoint in {root} failed: {reason}; {kept}") from None
    last = root / LAST
    if last.exists():
        os.replace(last, root / f".old-{tag}")
    os.replace(tmp, last)
    _fsync_dir(root)
    for stale in [*root.glob(".old-*"), *root.glob(".tmp-*")]:
        shutil.rmtree(stale, ignore_errors=True)
    return last


# ---- reading ------------------------------------------------------------------------------------------------------
@dataclass
class Checkpoint:
    path: Path
    meta: dict     # the parsed checkpoint.json

    @property
    def epoch(self) -> int:
        """Whole epochs done."""
        return int(self.meta["epoch"])

    @property
    def step(self) -> int:
        """Steps done in the epoch after those (0: written at an epoch's end)."""
        return int(self.meta.get("step") or 0)

    def _read(self, name: str, tensors: bool):
        path = self.path / name
        try:
            if tensors:
                return load_file(str(path))
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # safetensors and pickle raise their own error types for damaged files
            raise CheckpointError(f"{path} cannot be read ({e}); the checkpoint is corrupt: delete "
                                  f"{self.path.parent} or run without resume") from None

    def trainable(self) -> dict[str, torch.Tensor]:
        return self._read(TRAINABLE, True)

    def best(self) -> dict[str, torch.Tensor] | None:
        return self._read(BEST, True) if BEST in self.meta["files"] else None

    def optimizer_state(self) -> dict:
        return self._read(OPTIMIZER, False)

    def scheduler_state(self) -> dict:
        return self._read(SCHEDULER, False)

    def rng_states(self) -> list[dict]:
        return self._read(RNG, False)


def _inspect(path: Path) -> tuple[dict | None, list[str]]:
    """(marker, []) for a complete checkpoint; (None, [what is missing]) for an incomplete one.
    Raises CheckpointError when the marker is there but the checkpoint does not match it."""
    marker = path / MARKER
    if not marker.is_file():
        missing = [f"{MARKER} (the completion marker, written last)"]
        missing += [name for name in REQUIRED if not (path / name).is_file()]
        return None, missing
    try:
        meta = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{marker} is corrupt ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{marker} is not a headswap training checkpoint")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} was written by an incompatible headswap version (checkpoint format "
                              f"{meta.get('format_version')!r}, this version reads {FORMAT_VERSION})")
    files = meta.get("files") or {}
    problems = [f"{name}: not listed in {MARKER}" for name in REQUIRED if name not in files]
    for name, want in files.items():
        f = path / name
        if not f.is_file():
            problems.append(f"{name}: missing")
        elif f.stat().st_size != want.get("bytes"):
            problems.append(f"{name}: {f.stat().st_size} bytes, {MARKER} says {want.get('bytes')}")
        elif sha256_of(f) != want.get("sha256"):
            problems.append(f"{name}: sha256 does not match {MARKER}")
    if problems:
        raise CheckpointError(f"checkpoint {path} is corrupt: " + "; ".join(problems))
    return meta, []


def find_checkpoint(root, info: Callable[[str], None], warn: Callable[[str], None]) -> Checkpoint | None:
    """The complete checkpoint to resume from, or None when there is none (saying why through info/warn).

    Raises CheckpointError for a corrupt root/last (see the module docstring)."""
    root = Path(root)
    last = root / LAST
    leftovers = sorted([*root.glob(".tmp-*"), *root.glob(".old-*")]) if root.is_dir() else []
    if last.is_dir():
        for p in leftovers:
            info(f"ignoring {p} (left by an interrupted checkpoint save; removed by the next save)")
        meta, missing = _inspect(last)
        if meta is None:
            warn(f"checkpoint {last} is incomplete, missing {', '.join(missing)}; not loading it, "
                 f"training starts from scratch")
            return None
        return Checkpoint(last, meta)
    # No `last`: either nothing was saved yet, or a save was interrupted between moving the old checkpoint
    # aside and renaming the new one into place (then both are complete).
    complete = []
    for p in leftovers:
        try:
            meta, missing = _inspect(p)
        except CheckpointError as e:
            warn(f"ignoring {p}: {e}")
            continue
        if meta is None:
            warn(f"ignoring incomplete checkpoint {p}, missing {', '.join(missing)} (interrupted save)")
        else:
            complete.append(Checkpoint(p, meta))
    if complete:
        best = max(complete, key=lambda c: (c.epoch, c.step))
        warn(f"{last} is missing (a save was interrupted while swapping checkpoints); using the complete "
             f"checkpoint {best.path} (epoch {best.epoch})")
        return best
    info(f"no checkpoint in {root}; training starts from scratch")
    return None


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


def _trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}


# Settings that change what training computes: a checkpoint written under other values cannot continue.
RESUME_KEYS = ("epochs", "batch_size", "head_lr", "body_lr", "weight_decay", "schedule", "warmup_ratio",
               "max_grad_norm", "seed", "metric", "keep_best", "group_by_length", "class_weight", "soft_targets",
               "max_length")
# What a checkpoint written before a key existed trained with.
_ADDED_LATER = {"group_by_length": False, "class_weight": None, "soft_targets": False}


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
                              "num_processes": acc.num_processes},
                             _trainable_state(acc.unwrap_model(self.model)), self.optimizer.state_dict(),
                             self.scheduler.state_dict(), states, best=self.best_state)
        acc.wait_for_everyone()

    def record(self, entry: EpochLog) -> bool:
        """Add a trained epoch to the history; True when its validation score is the best so far (with
        keep_best, its weights are then kept)."""
        self.history.append(entry)
        better = entry.score is not None and (self.best_score is None or entry.score > self.best_score)
        if not better:
            return False
        self.best_score, self.best_epoch = entry.score, entry.epoch
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
