"""Running auto's fine-tuning arms a slice at a time (the policy that decides the slices: headswap.auto.policy).

A slice is one TextClassifier.fit with the arm's planned epochs (fixed for the arm, so the learning-rate schedule
runs as in one uninterrupted run), a time_limit, validation every few steps, and checkpoint_dir + resume: the loop
checkpoints where the time limit stops it and the next slice continues from there, with the optimizer, scheduler,
RNG and best-so-far weights (headswap.train.loop, headswap.train.checkpoint). After each slice the classifier holds
the arm's best validated weights.

LocalArms runs slices one after another in this process. RayArms runs them as Ray tasks on a cluster, each with
the CPUs (and GPU) it asks for; nothing needs a shared disk: the training data, any model given as a local folder
or file, and each arm's checkpoint travel through Ray's object store, and an arm's best model comes back as bytes
only when a slice improved it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Protocol


def slice_points(history: list[dict], seen: int, build_seconds: float, train_seconds: float,
                 steps_per_epoch: int) -> list[tuple[float, float]]:
    """The slice's new validation points as (seconds after the slice started, validation macro F1): history
    entries after the first `seen`, placed along the slice's training time by their step."""
    def step(h):
        return (h["epoch"] - 1) * steps_per_epoch + (h.get("steps") or steps_per_epoch)
    new = [h for h in history[seen:] if h.get("score") is not None and (h.get("metrics") or {}).get("macro")]
    if not new:
        return []
    first = step(history[seen - 1]) if seen else 0
    span = max(step(new[-1]) - first, 1)
    return [(build_seconds + train_seconds * (step(h) - first) / span, float(h["metrics"]["macro"]["f1"]))
            for h in new]


def train_slice(rung, settings: dict, train, validation, seen: int) -> tuple[object | None, dict]:
    """One slice of an arm (settings carry its epochs, time_limit, eval_every, checkpoint_dir and resume=True):
    (the classifier or None, {points, finished, history_length, error, seconds})."""
    from headswap.trials.plan import classifier_for
    from headswap.trials.rows import error_fields
    from headswap.train.checkpoint import better_than
    from headswap.train.learned import slices_of_a_run

    t0 = time.perf_counter()
    settings = {**settings, "resume": Path(settings["checkpoint_dir"]).is_dir()}
    heads = settings.pop("start_heads", None)
    said = io.StringIO()
    try:
        clf = classifier_for(rung, settings, epochs=settings["epochs"])
        with contextlib.redirect_stderr(said), slices_of_a_run():   # resume lines: one per slice, nothing to act on
            clf.fit(train.texts, train.labels, eval_texts=validation.texts, eval_labels=validation.labels,
                    start_heads=None if settings["resume"] else heads)   # a later slice resumes from the checkpoint
    except Exception as e:  # one arm's failure must not end the run
        return None, {"error": error_fields(e)["error"], "points": [], "finished": False, "history_length": seen,
                      "seconds": time.perf_counter() - t0}
    finally:
        for line in said.getvalue().splitlines():
            if not line.startswith(("resuming from checkpoint", "no checkpoint in")):
                print(line, file=sys.stderr)
    spe = max(1, math.ceil(len(train) / settings.get("batch_size", 16)))
    history = clf.history_ or []
    points = slice_points(history, seen, clf.build_seconds_, clf.train_seconds_, spe)
    last = history[-1] if history else None     # the validation at the slice's stop: where training got to
    progress = (last["epoch"] - 1 + (last.get("steps") or spe) / spe) if last else None
    return clf, {"points": points, "finished": clf.stopped_ is None, "history_length": len(history),
                 "progress": progress, "train_seconds": clf.train_seconds_,
                 "better": better_than(*_best(history[seen:]), *_best(history[:seen])),
                 "notes": list(clf.notes_), "started_from": getattr(clf, "started_from_", None),
                 "validation_proba": getattr(clf, "validation_proba_", None),
                 "validation_probas": getattr(clf, "validation_probas_", None) or [],
                 "seconds": time.perf_counter() - t0}


def _best(history: list[dict]) -> tuple:
    """The best (validation score, validation loss) of these history entries, as the training loop ranks them."""
    from headswap.train.checkpoint import better_than

    best = (None, None)
    for h in history:
        if better_than(h.get("score"), h.get("val_loss"), *best):
            best = (h.get("score"), h.get("val_loss"))
    return best


def clean_for_shipping(clf) -> None:
    """The winner does not carry the arm's slicing (checkpoint folder, resume, the last slice's time limit)."""
    clf.set_params(checkpoint_dir=None, resume=False, time_limit=None)


class Runner(Protocol):
    """Where an arm's slices run (compete() drives it; the policy never sees it): `parallel` slices at once; start()
    begins one, wait() returns a finished one as (arm name, its classifier or bytes or None, its result), busy says
    whether one is running or waiting to be collected, close() frees what it holds."""

    parallel: int

    def start(self, name: str, rung, settings: dict, seen: int) -> None: ...

    @property
    def busy(self) -> bool: ...

    def wait(self) -> tuple[str, object, dict]: ...

    def close(self) -> None: ...


class LocalArms:
    """Slices one after another, in this process."""

    parallel = 1

    def __init__(self, train, validation, folder: Path):
        self.train, self.validation, self.folder = train, validation, Path(folder)
        self.done: list[tuple[str, object, dict]] = []

    def start(self, name: str, rung, settings: dict, seen: int) -> None:
        settings = {**settings, "checkpoint_dir": str(self.folder / _slug(name))}
        clf, result = train_slice(rung, settings, self.train, self.validation, seen)
        self.done.append((name, clf, result))

    @property
    def busy(self) -> bool:
        return bool(self.done)

    def wait(self) -> tuple[str, object, dict]:
        return self.done.pop(0)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


# ---- Ray --------------------------------------------------------------------------------------------------------
def pack(path: Path) -> bytes:
    """A folder or file as an uncompressed tar (its contents under its own name)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(path), arcname=Path(path).name)
    return buf.getvalue()


def unpack(blob: bytes, into: Path) -> Path:
    """Extract `pack`'s tar into `into` (refusing members outside it); the path of what was packed."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
        names = tar.getnames()
        root = into.resolve()
        for m in tar.getmembers():
            if not (root / m.name).resolve().is_relative_to(root) or m.issym() or m.islnk():
                raise ValueError(f"refusing tar member {m.name!r}")
        tar.extractall(into)
    return into / names[0].split("/")[0]


def _model_here(ref: str, blob: bytes | None) -> str:
    """On a worker: the model as this node sees it, unpacked once per node from `blob` when it was sent."""
    if blob is None:
        return ref
    digest = hashlib.sha256(blob).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / "headswap-ray-models" / digest
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=target.parent))
        unpack(blob, staging)
        try:
            os.replace(staging, target)
        except OSError:    # another slice on this node unpacked it first
            shutil.rmtree(staging, ignore_errors=True)
    return str(target / Path(ref).name)


def remote_slice(rung, settings: dict, data, model_blob: bytes | None, checkpoint: bytes | None, seen: int,
                 driver_ref: str | None, threads: int) -> dict:
    """A slice on a Ray worker: the arm's checkpoint and model arrive as bytes, and leave as bytes (the model only
    when this slice improved the arm's best; its base-model reference rewritten to the driver's)."""
    import ray
    import torch

    torch.set_num_threads(max(1, threads))
    train, validation = data
    work = Path(tempfile.mkdtemp(prefix="headswap-arm-"))
    try:
        ckpt_dir = unpack(checkpoint, work) if checkpoint else work / "checkpoint"
        local = _model_here(rung.model, model_blob)
        clf, result = train_slice(dataclasses.replace(rung, model=local),
                                  {**settings, "checkpoint_dir": str(ckpt_dir)}, train, validation,
                                  seen)
        result["node"] = ray.get_runtime_context().get_node_id()
        result["checkpoint"] = pack(ckpt_dir) if ckpt_dir.is_dir() else checkpoint
        if clf is not None and result["better"]:      # better than the arm's earlier slices (ties: lower loss)
            clean_for_shipping(clf)
            folder = clf.save(work / "model")
            if model_blob is not None and driver_ref is not None:
                _point_at(folder, local, driver_ref)
            result["model"] = pack(folder)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _point_at(folder: Path, local: str, driver_ref: str) -> None:
    """A model trained on the node's copy of a local model names the driver's path, as a local run's would."""
    from headswap.saved.model_dir import CONFIG_FILE

    path = Path(folder) / CONFIG_FILE
    config = json.loads(path.read_text())
    for holder, key in ((config.get("params") or {}, "model"), (config.get("base_model") or {}, "ref")):
        if isinstance(holder.get(key), str):
            holder[key] = holder[key].replace(str(Path(local).resolve()), driver_ref).replace(local, driver_ref)
    path.write_text(json.dumps(config, indent=2))


class RayArms:
    """Slices as Ray tasks on the cluster at `address`, `cpus` CPUs and `gpus` GPUs each; as many at once as the
    cluster's resources hold."""

    def __init__(self, address: str, train, validation, cpus: float = 1, gpus: float = 0, log=print):
        from headswap.jobs.batch import import_ray
        from headswap.errors import ConfigError, HeadswapError
        try:    # a head on this machine: Ray asks 8.8.8.8 for no node address (import_ray)
            ray = import_ray(address)
        except ImportError:
            raise HeadswapError("--ray-address needs Ray, which is not installed: pip install 'headswap[ray]'") \
                from None

        if not ray.is_initialized():
            import logging
            check_reachable(address)
            try:
                ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise ConfigError(f"--ray-address {address}: cannot connect to a Ray cluster there ({e})") from None
            self.owns = True
        else:
            self.owns = False
        total = ray.cluster_resources()
        self.parallel = int(total.get("CPU", 0) // cpus) if cpus else 1
        if gpus:
            self.parallel = min(self.parallel, int(total.get("GPU", 0) // gpus))
        if self.parallel < 1:
            raise ConfigError(f"--ray-address {address}: the cluster has {total.get('CPU', 0):g} CPUs and "
                              f"{total.get('GPU', 0):g} GPUs; an arm asks for {cpus:g} CPUs and {gpus:g} GPUs")
        self.ray, self.cpus, self.gpus = ray, cpus, gpus
        self.data = ray.put((train, validation))
        self.models: dict[str, tuple[object, str | None]] = {}
        self.checkpoints: dict[str, bytes | None] = {}
        self.pending: dict[object, str] = {}
        self.task = ray.remote(remote_slice)
        log(f"  Ray cluster at {address}: {total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs, "
            f"{len(ray.nodes())} node(s); {self.parallel} arm(s) at once")

    def _model(self, ref: str):
        if ref not in self.models:
            path = Path(ref)
            if path.exists():     # a local folder or file: the nodes get it through the object store
                self.models[ref] = (self.ray.put(pack(path)), str(path.resolve()))
            else:                 # a built-in name: each node has it installed
                self.models[ref] = (None, None)
        return self.models[ref]

    def start(self, name: str, rung, settings: dict, seen: int) -> None:
        blob, driver_ref = self._model(rung.model)
        ref = self.task.options(num_cpus=self.cpus, num_gpus=self.gpus).remote(
            rung, settings, self.data, blob, self.checkpoints.get(name), seen, driver_ref,
            int(self.cpus) or 1)
        self.pending[ref] = name

    @property
    def busy(self) -> bool:
        return bool(self.pending)

    def wait(self) -> tuple[str, object, dict]:
        (ref,), _ = self.ray.wait(list(self.pending), num_returns=1)
        name = self.pending.pop(ref)
        try:
            result = self.ray.get(ref)
        except Exception as e:   # the task itself died (a worker lost): the arm fails, the run goes on
            return name, None, {"error": f"{type(e).__name__}: {e}", "points": [], "finished": False}
        self.checkpoints[name] = result.pop("checkpoint", None)
        return name, result.pop("model", None), result

    def close(self) -> None:
        self.checkpoints.clear()
        if self.owns:
            self.ray.shutdown()


def check_reachable(address: str) -> None:
    """One line, at once, for a HOST:PORT or ray://HOST:PORT nothing answers at (ray.init would retry for minutes)."""
    import socket

    from headswap.errors import ConfigError

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return      # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise ConfigError(f"--ray-address {address}: nothing answers there ({e.strerror or e}); start the cluster "
                          f"with `ray start --head` and give its address") from None


def load_shipped(blob: bytes):
    """A model that came back from a worker as bytes, loaded here."""
    from headswap.classifier.estimator import load_model

    folder = Path(tempfile.mkdtemp(prefix="headswap-winner-"))
    try:
        return load_model(unpack(blob, folder), progress=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in name)[:80] + "-" + \
        hashlib.sha256(name.encode()).hexdigest()[:8]
