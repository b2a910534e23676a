"""What a row (bench's, or a rung of auto's) measures besides its scores: peak memory, forward passes per text,
parameter counts, a time estimate from one probed batch, and the machine it ran on."""

from __future__ import annotations

import gc
import math
import os
import platform
import sys
import threading
import time

from headswap.trials.plan import EVAL_FRACTION, PlannedRow, classifier_for
from headswap.data.load import LabelledData
from headswap.data.once import muted
from headswap.data.sampling import stratified_subset
from headswap.errors import TimeLimitReached
from headswap.settings import defaults


def _rss_bytes() -> int | None:
    """The process's current resident set size."""
    try:
        import psutil
        return psutil.Process().memory_info().rss
    except ImportError:
        pass
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _maxrss_bytes() -> int | None:
    """The process-wide RSS high-water mark (getrusage; never goes down)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024   # bytes on macOS, KiB on Linux


def _mb(value: int | None) -> float | None:
    return None if value is None else round(value / 2 ** 20, 1)


class PeakMemory:
    """Peak RSS while a block runs, sampled by a background thread (torch's CPU allocations bypass
    tracemalloc, so RSS is what can be measured). Also records getrusage's process-wide high-water mark,
    which only shows a row's memory when that row sets a new record."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        rss = _rss_bytes()
        if rss is not None and (self.peak is None or rss > self.peak):
            self.peak = rss

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        self.start = self.peak = _rss_bytes()
        self.maxrss_start = _maxrss_bytes()
        self._thread = threading.Thread(target=self._loop, name="headswap-bench-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.maxrss_end = _maxrss_bytes()

    def to_dict(self) -> dict:
        delta = None if self.start is None or self.peak is None else self.peak - self.start
        maxrss_delta = (None if self.maxrss_start is None or self.maxrss_end is None
                        else self.maxrss_end - self.maxrss_start)
        return {"rss_start_mb": _mb(self.start), "peak_rss_mb": _mb(self.peak), "peak_rss_delta_mb": _mb(delta),
                "process_maxrss_mb": _mb(self.maxrss_end), "process_maxrss_delta_mb": _mb(maxrss_delta)}


def input_embedding(module):
    """The nn.Embedding the module's Hugging Face model looks input tokens up in (None if not found)."""
    from torch import nn

    for m in module.modules():
        get = getattr(m, "get_input_embeddings", None)
        if not callable(get):
            continue
        try:
            emb = get()
        except (NotImplementedError, AttributeError):
            continue
        if isinstance(emb, nn.Embedding):
            return emb
    return None


class ForwardRows:
    """Counts the sequences that go through the input embedding while a block runs: one per forward pass
    of the transformer per text (K per text for cross-encoder, 1 prefill + 1 per generated token for
    generate-parse, the K class descriptions once for similarity)."""

    def __init__(self, module):
        self.embedding = input_embedding(module)
        self.rows = self.calls = 0
        self._handle = None

    def _hook(self, _module, args, _output) -> None:
        if args and hasattr(args[0], "shape"):
            self.rows += int(args[0].shape[0]) if args[0].dim() > 1 else 1
            self.calls += 1

    def __enter__(self) -> "ForwardRows":
        if self.embedding is not None:
            self._handle = self.embedding.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.remove()

    def per_text(self, n_texts: int) -> float | None:
        return round(self.rows / n_texts, 2) if self.embedding is not None and n_texts else None


def param_counts(module, causal: bool) -> dict:
    """Parameters of the classifier module: every distinct tensor once (tied weights once)."""
    from headswap.train.regimes import count_parameters

    emb = input_embedding(module)
    out = {"effective_params": count_parameters(module, trainable_only=False),
           "embedding_params": int(emb.weight.numel()) if emb is not None else None}
    if causal:  # (BERT configs say tie_word_embeddings too, about an MLM head headswap never loads)
        config = next((m.config for m in module.modules() if hasattr(getattr(m, "config", None), "model_type")),
                      None)
        out["tied_embeddings"] = bool(getattr(config, "tie_word_embeddings", False))
    return out


class ProbeTooSlow(Exception):
    """A probe given a time limit did not finish its timing within it."""


def probe_timing(p: PlannedRow, train: LabelledData, settings: dict, batches: int = 1,
                 time_limit: float | None = None, load_guess: float = 0.0) -> dict:
    """Time training and inference on a small stratified sample of the training data: the basis of the row's
    time estimate. A trained row's probe runs two epochs of `batches` batches each (one batch of all the sample's
    texts when batches is 1, as bench does): the second gives the steady per-batch time (the first batches, warm-up
    included, are not counted), the first minus the second the one-off start-up cost. Inference is timed over up
    to 64 texts after a two-text warm-up.

    time_limit bounds the whole probe, loading included: the training loop gets what is left of it after
    `load_guess` (the model's load time, when an earlier probe measured it) and a share for inference, and
    ProbeTooSlow is raised as soon as the limit is passed, before the next step starts."""
    from headswap.settings import REJECT_SETTINGS

    batch_size = settings.get("batch_size", defaults()["batch_size"])
    classes = len(set(train.labels))
    n = min(len(train), max(batch_size * batches, classes if batches == 1 else min(classes, 2 * batch_size * batches)))
    sample = stratified_subset(train, n, settings.get("seed", 0))
    # The sample has no validation texts: an out-of-scope threshold would have nothing to tune on (and would say so
    # once per probe), and its statistics are a small part of the cost.
    settings = {**settings, "out_of_scope": None, **{k: defaults()[k] for k in REJECT_SETTINGS}}
    per_epoch = batches
    t0 = time.perf_counter()
    loop_limit = None if time_limit is None else max(0.8 * (time_limit - load_guess), 0.05)
    clf = classifier_for(p, settings, epochs=2 if p.epochs else 0, eval_fraction=0.0, progress=False,
                      batch_size=len(sample) if batches == 1 else batch_size, time_limit=loop_limit)
    with muted():
        try:
            clf.fit(sample.texts, sample.labels)
        except TimeLimitReached as e:     # a frozen body's encoding pass counts against the loop's limit
            raise ProbeTooSlow(str(e)) from e
    if p.epochs and (len(clf.history_) < 2 or clf.stopped_) or _over(t0, time_limit):
        raise ProbeTooSlow(f"timing {2 * per_epoch} training batches " + (
            f"took over {time_limit:.0f} s" if time_limit is not None else "gave fewer than two timed epochs"))
    batch_s = startup_s = None
    if p.epochs:
        first, second = (h["seconds"] for h in clf.history_[:2])
        steps = max(clf.history_[1].get("steps") or per_epoch, 1)
        batch_s = second / steps if batches > 1 else second * batch_size / len(sample)
        startup_s = max(0.0, first - second)
    # One call over 64 texts (a call's fixed cost is small against that); fewer where a text takes one forward pass
    # per class (cross-encoder: 151 passes each on CLINC150).
    passes = clf.strategy_.passes_per_text(len(clf.labels_)).split()[0]
    texts = sample.texts[:max(4, 64 // int(passes))] if passes.isdigit() else sample.texts[:64]
    with muted():      # its texts' warnings (truncation) belong to the real fit, said once there
        t1 = time.perf_counter()
        clf.predict_proba(texts[:2])
        if time_limit is not None:       # as many texts as the limit leaves room for, by the warm-up's pace
            each = (time.perf_counter() - t1) / 2
            texts = texts[:max(2, min(len(texts), int((t0 + time_limit - time.perf_counter()) / max(each, 1e-6))))]
        t1 = time.perf_counter()
        clf.predict_proba(texts)
        infer = time.perf_counter() - t1
        infer *= padding_share(clf, texts, train.texts)
    head = getattr(clf.module_, "head", None)
    result = {"feature_dim": getattr(head, "in_features", None),
              "load_seconds": clf.build_seconds_, "train_batch_seconds": batch_s, "train_startup_seconds": startup_s,
              "inference_seconds_per_text": infer / len(texts), "probe_seconds": time.perf_counter() - t0}
    del clf
    gc.collect()
    return result


def padding_share(clf, timed: list[str], texts: list[str], most: int = 256) -> float:
    """What a pass over `texts` costs a text against what the timed call over `timed` cost one, by tokens run
    (padding included): a pass runs texts in order of length, so each batch pads to about its own texts' length,
    where a call over a few dozen texts pads half of them to the longest of all (emotion's tweets: 43.5 tokens a
    text timed, 22.6 in a whole pass). At most 1 (fewer texts than a batch pad no less), and at least 1/4 (a
    batch's fixed cost does not shrink with its texts)."""
    from headswap.nn.inference import item_length

    def tokens(sample: list[str]) -> list[int]:
        with muted():
            return [item_length(item) for item in clf.encoder_.encode(list(sample))]
    timed_lengths = sorted(tokens(timed))
    b = max(int(clf.eval_batch_size), 1)
    padded = sum(len(timed_lengths[i:i + b]) * max(timed_lengths[i:i + b])
                 for i in range(0, len(timed_lengths), b)) / max(len(timed), 1)
    sample = texts[::max(1, len(texts) // most)][:most]
    whole = sum(tokens(sample)) / max(len(sample), 1)
    return min(1.0, max(0.25, whole / padded)) if padded > 0 else 1.0


# static's full regime trains its whole table (30k+ rows) with AdamW at every step: on emotion (16,000 texts, table
# cached) the rung took 273 s in all on 2 loaded cores (auto, 2026-11-25): ~59 texts/s, rounded down.
STATIC_TRAIN_TEXTS_PER_SECOND = 55.0
STATIC_TEXTS_PER_SECOND = 5000.0          # and predicts faster (6,400/s on one loaded core, BENCHMARKS.md)


def _over(t0: float, limit: float | None) -> bool:
    return limit is not None and time.perf_counter() - t0 > limit


def probe_static(p: PlannedRow, train: LabelledData, settings: dict, time_limit: float | None = None) -> dict:
    """probe_timing's figures for strategy static without distilling anything: its cost is the distillation
    (every vocabulary token through the encoder once, unless the table for this vocabulary is cached), timed on
    256 single-token inputs as model2vec runs them, plus training at a fixed rate. ProbeTooSlow when loading the
    model alone took over time_limit."""
    import torch

    from headswap.models import load_model, resolve_model
    from headswap.strategies.static import cache_dir, training_vocabulary, table_name

    from transformers.utils import logging as hf_logging

    t0 = time.perf_counter()
    if not settings.get("progress", True):
        hf_logging.disable_progress_bar()
    try:
        model, tokenizer, _ = load_model(resolve_model(p.model))
    finally:
        hf_logging.enable_progress_bar()
    load = time.perf_counter() - t0
    if _over(t0, time_limit):
        raise ProbeTooSlow(f"loading the model took {load:.0f} s, over {time_limit:.0f} s")
    vocabulary = training_vocabulary(tokenizer, train.texts, settings.get("static_vocab_min_count",
                                                                          defaults()["static_vocab_min_count"]))
    cached = (cache_dir(model, table_name(model), vocabulary) / "model.safetensors").is_file()
    distill = 0.0
    if not cached:
        specials = [t for t in (tokenizer.cls_token_id, tokenizer.sep_token_id) if t is not None]
        ids = torch.tensor([[*specials[:1], 1000 + i, *specials[1:]] for i in range(256)])
        with torch.inference_mode():
            model(input_ids=ids[:16], attention_mask=torch.ones_like(ids[:16]))
            t1 = time.perf_counter()
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
            distill = (time.perf_counter() - t1) / len(ids) * (len(tokenizer) + len(vocabulary))
    batch = settings.get("batch_size", defaults()["batch_size"])
    del model
    gc.collect()
    return {"load_seconds": load + distill, "distill_seconds": distill, "table_cached": cached,
            "train_batch_seconds": batch / STATIC_TRAIN_TEXTS_PER_SECOND, "train_startup_seconds": 0.0,
            "inference_seconds_per_text": 1.0 / STATIC_TEXTS_PER_SECOND, "probe_seconds": time.perf_counter() - t0}


def estimate_seconds(probe: dict, epochs: int, n_train: int, n_validation: int | None, n_test: int,
                     batch_size: int, regime: str = "auto") -> dict:
    """Extrapolate a probe to a row: model load + epochs x (batches + validation) + test inference."""
    per_text = probe["inference_seconds_per_text"]
    train_s = 0.0
    if epochs:
        if n_validation is None:  # TextClassifier holds out eval_fraction of the training data
            n_validation = round(EVAL_FRACTION * n_train) if n_train >= 20 else 0
            n_train -= n_validation
        batches = math.ceil(n_train / batch_size)
        train_s = (probe.get("train_startup_seconds") or 0.0) + \
            epochs * (batches * (probe["train_batch_seconds"] or 0.0) + n_validation * per_text)
        if regime == "head-only":  # the frozen body's features are computed once, outside the epochs
            train_s += (n_train + n_validation) * per_text
    test_s = n_test * per_text
    return {"total": probe["load_seconds"] + train_s + test_s, "load": probe["load_seconds"], "train": train_s,
            "test": test_s, "texts_per_second": 1.0 / per_text if per_text else None}


def machine_info() -> dict:
    import torch

    info = {"platform": platform.platform(), "machine": platform.machine(), "processor": platform.processor(),
            "python": platform.python_version(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():     # where fit() trains (accelerate's choice): the report says so
        info["gpu"] = torch.cuda.get_device_name(0)
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    try:
        import psutil
        info["memory_gb"] = round(psutil.virtual_memory().total / 2 ** 30, 1)
    except ImportError:
        pass
    return info
