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

Run, the training progress these checkpoints hold, is in headswap.train.checkpoint.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from headswap.saved.atomic import sha256_of
from headswap.errors import HeadswapError

FORMAT, FORMAT_VERSION = "headswap-checkpoint", 1
MARKER = "checkpoint.json"
TRAINABLE, BEST, OPTIMIZER, SCHEDULER, RNG = ("trainable.safetensors", "best.safetensors", "optimizer.pt",
                                             "scheduler.pt", "rng.pt")
REQUIRED = (TRAINABLE, OPTIMIZER, SCHEDULER, RNG)
LAST = "last"


class CheckpointError(HeadswapError):
    """A checkpoint exists but cannot be used: corrupt, or written by a different training setup."""


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
    from headswap.saved.model_dir import os_error_reason
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
