"""headswap bench: every strategy on every model, on one split, against a TF-IDF + LinearSVC baseline.

    results = run_bench("/data/sms_spam", models=["minilm", "smollm2-135m"], strategies="all",
                        epochs=1, train_limit=1000, test_limit=500, out="bench-out")

For each (model, strategy) that fits (causal-only strategies run on causal LMs, encoder-only ones on
encoders, similarity on both) it trains one row (``epochs`` epochs in the strategy's regime) and, for
zero-shot strategies, adds an untrained row. Every row sees the same stratified, seeded subsets of the
train/validation/test files. A row that fails is recorded with its error; the run goes on.

Writes OUT/results.json (rows + run metadata, rewritten after every row so an interrupted run keeps what
it has), OUT/results.md (tables), OUT/confusion-<model>-<strategy>-<regime>.png per row,
OUT/learning_curves.png and OUT/quality_vs_speed.png.
"""

from __future__ import annotations

import datetime
import gc
import json
import math
import os
import platform
import random
import re
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from headswap.data.load import LabelledData, check_eval_labels, check_training_data, load_dataset
from headswap.errors import ConfigError, DataError
from headswap.settings import check as check_settings
from headswap.settings import defaults
from headswap.data.sampling import stratified_subset
from headswap.strategies import get, names as strategy_names

DEFAULT_MODELS = ("minilm", "smollm2-135m")
BASELINE_MODEL, BASELINE_STRATEGY, BASELINE_REGIME = "tfidf", "tfidf-linearsvc", "baseline"
ZERO_SHOT_REGIME = "zero-shot"
MIN_VALIDATION = 200          # validation.csv is cut to min(len, max(MIN_VALIDATION, train_limit // 5))
EVAL_FRACTION = 0.1           # TextClassifier's default, used for estimates when there is no validation.csv


# ---------------------------------------------------------------------------------------------------------------
# Data


def validation_limit(n_validation: int, train_limit: int | None) -> int:
    """How many validation.csv records best-epoch selection uses: all, unless training is limited."""
    if train_limit is None:
        return n_validation
    return min(n_validation, max(MIN_VALIDATION, train_limit // 5))


@dataclass
class BenchData:
    train: LabelledData
    validation: LabelledData | None
    test: LabelledData
    sizes: dict


def _split_info(path: Path, full: LabelledData, used: LabelledData) -> dict:
    return {"file": str(path), "rows": len(full), "used": len(used),
            "classes": dict(sorted(Counter(used.labels).items()))}


def load_bench_data(data_dir, train_limit: int | None = None, test_limit: int | None = None,
                    seed: int = 0) -> BenchData:
    """DIR/train.csv and DIR/test.csv (DIR/validation.csv when present), cut to stratified subsets."""
    folder = Path(data_dir).expanduser()
    if not folder.is_dir():
        raise DataError(f"data folder {str(folder)!r} does not exist (expected train.csv and test.csv in it)")
    for name in ("train.csv", "test.csv"):
        if not (folder / name).is_file():
            raise DataError(f"{folder / name} is missing: a bench data folder needs train.csv and test.csv "
                            "(columns text,label) and may have validation.csv")
    train_full = load_dataset(folder / "train.csv")
    test_full = load_dataset(folder / "test.csv")
    check_training_data(train_full)
    train = stratified_subset(train_full, train_limit, seed)
    test = stratified_subset(test_full, test_limit, seed)
    check_training_data(train)
    check_eval_labels(train.labels, test)
    sizes = {"train": _split_info(folder / "train.csv", train_full, train),
             "test": _split_info(folder / "test.csv", test_full, test)}
    validation = None
    if (folder / "validation.csv").is_file():
        val_full = load_dataset(folder / "validation.csv")
        validation = stratified_subset(val_full, validation_limit(len(val_full), train_limit), seed)
        check_eval_labels(train.labels, validation)
        sizes["validation"] = _split_info(folder / "validation.csv", val_full, validation)
    else:
        sizes["validation"] = {"file": None, "note": f"no validation.csv: TextClassifier holds out "
                               f"{EVAL_FRACTION:.0%} of the training subset (stratified, seeded) for best-epoch "
                               "selection"}
    return BenchData(train, validation, test, sizes)


# ---------------------------------------------------------------------------------------------------------------
# Planning


def parse_strategies(spec) -> list[str]:
    """'all', 'a,b', ['a', 'b'] or ['a,b'] -> strategy names (checked, duplicates dropped, order kept)."""
    if spec is None:
        spec = "all"
    items = [spec] if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in items:
        for name in str(item).split(","):
            name = name.strip()
            if not name:
                continue
            if name == "all":
                names.extend(strategy_names())
            elif name not in strategy_names():
                raise ConfigError(f"unknown strategy {name!r}; choose from all, {', '.join(strategy_names())}")
            else:
                names.append(name)
    names = list(dict.fromkeys(names))
    if not names:
        raise ConfigError("no strategies given; use --strategies all or a comma-separated list")
    return names


@dataclass
class PlannedRow:
    model: str          # the reference as given (built-in name, folder or .gguf path)
    kind: str           # encoder | causal
    strategy: str
    regime: str         # the training regime, or "zero-shot"
    epochs: int

    @property
    def zero_shot(self) -> bool:
        return self.epochs == 0


def strategy_fits(strategy: str, kind: str) -> str | None:
    """None when `strategy` runs on a model of `kind`; otherwise why not."""
    if get(strategy).needs_causal and kind != "causal":
        return f"{strategy} needs a causal language model; this model is an {kind}"
    if get(strategy).encoder_only and kind != "encoder":
        return f"{strategy} is benchmarked on bidirectional encoders only; this model is a {kind} LM"
    return None


def plan_bench(model_kinds: dict[str, str], strategies: Sequence[str], epochs: int = 1, regime: str = "auto",
               zero_shot: bool = True) -> tuple[list[PlannedRow], list[dict]]:
    """The rows to run, in order, and the (model, strategy) combinations skipped, each with a reason."""
    rows, skipped = [], []
    for model, kind in model_kinds.items():
        for strategy in strategies:
            reason = strategy_fits(strategy, kind)
            if reason:
                skipped.append({"model": model, "strategy": strategy, "reason": reason})
                continue
            trained_regime = get(strategy).default_regime if regime == "auto" else regime
            if epochs > 0:
                if trained_regime == "head-only" and strategy == "generate-parse":
                    skipped.append({"model": model, "strategy": strategy, "regime": trained_regime,
                                    "reason": "generate-parse has no separate head to train in the head-only regime"})
                else:
                    rows.append(PlannedRow(model, kind, strategy, trained_regime, epochs))
            if get(strategy).zero_shot and (zero_shot or epochs == 0):
                rows.append(PlannedRow(model, kind, strategy, ZERO_SHOT_REGIME, 0))
            elif epochs == 0:
                skipped.append({"model": model, "strategy": strategy, "regime": ZERO_SHOT_REGIME,
                                "reason": f"epochs=0 and {strategy} has no zero-shot form (its head starts untrained)"})
    return rows, skipped


# ---------------------------------------------------------------------------------------------------------------
# Measurements


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


def _param_counts(module, causal: bool) -> dict:
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


# ---------------------------------------------------------------------------------------------------------------
# Rows


def model_display_name(ref: str) -> str:
    """'minilm' stays; a folder or file path becomes its last component (without .gguf)."""
    p = Path(str(ref))
    if len(p.parts) <= 1 and not p.suffix:
        return str(ref)
    name = p.name or str(ref)
    return name[:-5] if name.lower().endswith(".gguf") else name


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def _history(clf) -> list[dict]:
    out = []
    for h in getattr(clf, "history_", []) or []:
        val = h.get("metrics") or {}
        out.append({"epoch": h.get("epoch"), "train_loss": h.get("train_loss"), "score": h.get("score"),
                    "seconds": h.get("seconds"), "validation_accuracy": val.get("accuracy")})
    return out


def _metric_fields(m) -> dict:
    fields = {"macro_f1": m.f1("macro"), "weighted_f1": m.f1("weighted"), "accuracy": m.accuracy,
              "labels": list(m.labels), "f1_per_class": {lab: float(f) for lab, f in zip(m.labels, m.f1_per_class)},
              "confusion": m.confusion.tolist(), "n_test": int(m.confusion.sum())}
    if m.binary() is not None:
        fields["binary"] = {"positive_label": m.positive_label, **m.binary()}
    return fields


def _error_fields(e: BaseException) -> dict:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": "".join(tb[-6:])}


def _classifier(p: PlannedRow, settings: dict, **overrides):
    """The row's TextClassifier: the run's settings, the row's strategy, model, regime and epochs."""
    from headswap.api import TextClassifier

    # Zero-shot rows are built in the "full" regime: nothing trains, and no (zero-initialised) LoRA
    # adapters slow the forward pass down or add parameters that do nothing.
    return TextClassifier(**{**settings, "strategy": p.strategy, "model": p.model,
                             "regime": "full" if p.zero_shot else p.regime, "epochs": p.epochs, **overrides})


def probe_timing(p: PlannedRow, train: LabelledData, settings: dict) -> dict:
    """Time training and inference on one batch of a small stratified sample of the training data: the
    basis of the row's time estimate. A trained row's probe runs two one-batch epochs: the second gives
    the steady per-batch time, the first minus the second the one-off start-up cost. Inference is timed
    after a two-text warm-up."""
    batch_size = settings.get("batch_size", defaults()["batch_size"])
    n = min(len(train), max(batch_size, len(set(train.labels))))
    sample = stratified_subset(train, n, settings.get("seed", 0))
    t0 = time.perf_counter()
    clf = _classifier(p, settings, epochs=2 if p.epochs else 0, eval_fraction=0.0, progress=False,
                      batch_size=len(sample))
    clf.fit(sample.texts, sample.labels)
    batch_s = startup_s = None
    if p.epochs:
        first, second = (h["seconds"] for h in clf.history_[:2])
        batch_s, startup_s = second * batch_size / len(sample), max(0.0, first - second)
    texts = sample.texts[:32]
    clf.predict_proba(texts[:2])
    t1 = time.perf_counter()
    clf.predict_proba(texts)
    infer = time.perf_counter() - t1
    result = {"load_seconds": clf.build_seconds_, "train_batch_seconds": batch_s, "train_startup_seconds": startup_s,
              "inference_seconds_per_text": infer / len(texts), "probe_seconds": time.perf_counter() - t0}
    del clf
    gc.collect()
    return result


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


def run_model_row(p: PlannedRow, data: BenchData, settings: dict) -> dict:
    """Train (unless zero-shot) and evaluate one row; errors are caught and recorded in the row."""
    row = {"model": p.model, "model_name": model_display_name(p.model), "model_kind": p.kind,
           "strategy": p.strategy, "regime": p.regime, "epochs": p.epochs, "baseline": False, "status": "ok"}
    clf = None
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        try:
            clf = _classifier(p, settings)
            validation = data.validation if p.epochs else None
            clf.fit(data.train.texts, data.train.labels,
                    eval_texts=validation.texts if validation is not None else None,
                    eval_labels=validation.labels if validation is not None else None)
            row["fit_seconds"] = time.perf_counter() - t0
            with ForwardRows(clf.module_) as forward:
                m = clf.evaluate(data.test.texts, data.test.labels)
            row.update(_metric_fields(m))
            row.update(trainable_params=int(getattr(clf, "trainable_params_", 0) or 0),
                       total_params=int(m.extra.get("total_params", 0)),
                       **_param_counts(clf.module_, p.kind == "causal"),
                       train_seconds=float(getattr(clf, "train_seconds_", 0.0)),
                       load_seconds=float(getattr(clf, "build_seconds_", 0.0)),
                       eval_seconds=float(m.extra.get("eval_seconds", 0.0)),
                       texts_per_second=float(m.extra.get("texts_per_second", 0.0)),
                       forward_passes_per_text=forward.per_text(len(data.test)),
                       forward_passes_nominal=get(p.strategy).passes_per_text(len(m.labels)),
                       history=_history(clf), best_epoch=getattr(clf, "best_epoch_", None),
                       notes=list(getattr(clf, "notes_", []) or []))
            if "parse_counts" in m.extra:
                counts = m.extra.get("parse_counts", {})     # this evaluation's texts only
                row["parse_counts"] = dict(counts)
                row["unparsed"] = int(counts.get("unparsed", 0))
        except Exception as e:  # one failing row must not end the benchmark
            row.update(_error_fields(e))
        row["wall_seconds"] = time.perf_counter() - t0
    row.update(mem.to_dict())
    del clf
    gc.collect()
    return row


def run_tfidf_baseline(data: BenchData, seed: int = 0) -> dict:
    """TF-IDF (word 1-2 grams + char_wb 2-5 grams, sublinear tf) + LinearSVC, on the same split."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import FeatureUnion, Pipeline
    from sklearn.svm import LinearSVC

    from headswap.metrics import metrics_from_predictions

    row = {"model": BASELINE_MODEL, "model_name": BASELINE_MODEL, "model_kind": "bag-of-n-grams",
           "strategy": BASELINE_STRATEGY, "regime": BASELINE_REGIME, "epochs": None, "baseline": True,
           "status": "ok", "description": "TF-IDF word 1-2 grams + char_wb 2-5 grams (sublinear tf, FeatureUnion) "
                                          "+ LinearSVC (C=1), scikit-learn"}
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        try:
            labels = sorted(set(data.train.labels))
            index = {lab: i for i, lab in enumerate(labels)}
            features = FeatureUnion([
                ("word", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True)),
                ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True)),
            ])
            pipe = Pipeline([("tfidf", features), ("svm", LinearSVC(C=1.0, random_state=seed))])
            pipe.fit(data.train.texts, [index[v] for v in data.train.labels])
            train_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            pred = pipe.predict(data.test.texts)
            eval_s = time.perf_counter() - t1
            m = metrics_from_predictions([index[v] for v in data.test.labels], pred, labels)
            svm = pipe.named_steps["svm"]
            n_params = int(svm.coef_.size + svm.intercept_.size)
            row.update(_metric_fields(m))
            row.update(trainable_params=n_params, total_params=n_params, effective_params=n_params,
                       embedding_params=None, n_features=int(svm.coef_.shape[1]), train_seconds=train_s,
                       fit_seconds=train_s, load_seconds=0.0, eval_seconds=eval_s,
                       texts_per_second=len(data.test) / eval_s if eval_s else 0.0,
                       forward_passes_per_text=None, forward_passes_nominal="no transformer",
                       history=[], best_epoch=None, notes=[])
        except Exception as e:
            row.update(_error_fields(e))
        row["wall_seconds"] = time.perf_counter() - t0
    row.update(mem.to_dict())
    return row


# ---------------------------------------------------------------------------------------------------------------
# Output


def _jsonable(value):
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def write_json(results: dict, path) -> Path:
    from headswap.atomic import write_text
    return write_text(path, json.dumps(results, indent=2, default=_jsonable) + "\n")


def _human(n) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _num(value, fmt: str = ".3f") -> str:
    return "–" if value is None else format(value, fmt)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _sorted_rows(rows: list[dict]) -> list[dict]:
    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: -r["macro_f1"])
    return ok + [r for r in rows if r.get("status") != "ok"]


def _row_notes(row: dict) -> str:
    notes = []
    if row.get("baseline"):
        notes.append("**baseline**")
    if row.get("strategy") == "generate-parse" and row.get("status") == "ok":
        notes.append(f"unparsed {row.get('unparsed', 0)}/{row.get('n_test', '?')}")
    if row.get("tied_embeddings"):
        notes.append("tied embeddings⁴")
    if row.get("status") != "ok":
        notes.append(f"**failed**: {row.get('error', '')[:160]}")
    return "; ".join(notes)


def render_markdown(results: dict) -> str:
    meta, rows = results["meta"], results["rows"]
    machine, data = meta["machine"], meta["data"]
    lines = ["# headswap bench", ""]
    lines.append(f"{meta['date']} · {machine['platform']} · {machine['cpu_count']} CPUs · "
                 f"torch {machine['torch']} with {machine['torch_threads']} threads · "
                 f"headswap {meta['headswap_version']}")
    lines.append("")
    args = meta["args"]
    sizes = [f"train {data['train']['used']} of {data['train']['rows']}"]
    val = data.get("validation") or {}
    sizes.append(f"validation {val['used']} of {val['rows']}" if val.get("file") else
                 f"validation: {EVAL_FRACTION:.0%} of the training subset")
    sizes.append(f"test {data['test']['used']} of {data['test']['rows']}")
    lines.append(f"Data `{args['data_dir']}`: {', '.join(sizes)} (stratified, seed {args['seed']}). "
                 f"Epochs {args['epochs']}, regime {args['regime']}, batch size {args['batch_size']}, "
                 f"max length {args['max_length']}"
                 + "".join(f", {name} {args[key]:g}" for key, name in (("body_lr", "body lr"), ("head_lr", "head lr"))
                           if args.get(key) is not None) + ".")
    lines.append("")
    lines.append("## Results on the test set, best macro F1 first")
    lines.append("")
    base = next((r for r in rows if r.get("baseline") and r.get("status") == "ok"), None)
    header = ("| # | model | strategy | regime | macro F1 | Δ vs baseline | weighted F1 | accuracy "
              "| trainable params | params / forward¹ | train s | inference texts/s | peak RSS Δ MB² "
              "| forward passes / text³ | notes |")
    lines.append(header)
    lines.append("|" + "|".join(["---:", "---", "---", "---"] + ["---:"] * 10 + ["---"]) + "|")
    for i, r in enumerate(_sorted_rows(rows), 1):
        ok = r.get("status") == "ok"
        name = f"**{r['model_name']}**" if r.get("baseline") else r["model_name"]
        delta = (f"{r['macro_f1'] - base['macro_f1']:+.3f}" if ok and base is not None and not r.get("baseline")
                 else "–")
        cells = [str(i), name, r["strategy"], r["regime"],
                 _num(r.get("macro_f1")) if ok else "–", delta,
                 _num(r.get("weighted_f1")) if ok else "–", _num(r.get("accuracy")) if ok else "–",
                 _human(r.get("trainable_params")) if ok else "–", _human(r.get("effective_params")) if ok else "–",
                 _num(r.get("train_seconds"), ".1f") if ok else "–",
                 _num(r.get("texts_per_second"), ".1f") if ok else "–",
                 _num(r.get("peak_rss_delta_mb"), ".0f"),
                 _num(r.get("forward_passes_per_text"), ".2f") if ok else "–",
                 _row_notes(r)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines.append("")

    ok_rows = [r for r in _sorted_rows(rows) if r.get("status") == "ok"]
    if ok_rows:
        labels = ok_rows[0]["labels"]
        lines += ["## F1 per class", ""]
        lines.append("| model | strategy | regime | " + " | ".join(_cell(lab) for lab in labels) + " |")
        lines.append("|---|---|---|" + "---:|" * len(labels))
        for r in ok_rows:
            name = f"**{r['model_name']}**" if r.get("baseline") else r["model_name"]
            lines.append(f"| {_cell(name)} | {r['strategy']} | {r['regime']} | "
                         + " | ".join(_num(r["f1_per_class"].get(lab)) for lab in labels) + " |")
        support = data["test"]["classes"]
        lines.append("| *test support* | | | " + " | ".join(str(support.get(lab, 0)) for lab in labels) + " |")
        lines.append("")

    failed = [r for r in rows if r.get("status") != "ok"]
    if failed:
        lines += ["## Failed rows", ""]
        for r in failed:
            lines.append(f"- {r['model_name']} · {r['strategy']} · {r['regime']}: `{_cell(r.get('error', ''))}`")
        lines.append("")
    if results.get("skipped"):
        lines += ["## Skipped combinations", ""]
        for s in results["skipped"]:
            lines.append(f"- {model_display_name(s['model'])} · {s['strategy']}"
                         + (f" · {s['regime']}" if s.get("regime") else "") + f": {s['reason']}")
        lines.append("")

    lines += ["## Charts", "", "- `quality_vs_speed.png`: macro F1 and inference texts/s per row, same order",
              "- `learning_curves.png`: validation macro F1 per epoch of every trained row"]
    for r in _sorted_rows(rows):
        if r.get("confusion_png"):
            lines.append(f"- `{r['confusion_png']}`: confusion matrix, {r['model_name']} · {r['strategy']} · "
                         f"{r['regime']}")
    lines.append("")
    lines += [
        "## Notes", "",
        "1. *Params / forward*: the classifier module's parameters, each tensor once: the body (including its "
        "input-embedding matrix, counted whole although a forward pass only reads the rows of its tokens) plus the "
        "head. slm-logits and slm-letters slice the LM head to the K answer tokens, so the vocabulary projection is "
        "not counted; generate-parse keeps the full LM head and applies it at every generated token. LoRA rows "
        "include their unmerged adapters; zero-shot rows have none. The baseline counts its LinearSVC weights.",
        "2. *Peak RSS Δ*: the highest resident set size sampled (every 0.1 s) while the row ran, minus the RSS "
        "at its start. torch's CPU allocations are invisible to tracemalloc, so process RSS is measured. "
        "results.json also has the process-wide high-water mark (getrusage ru_maxrss), which never goes down: "
        "a row after a larger one shows no increase there.",
        "3. *Forward passes / text*: measured as the sequences through the input embedding during test inference "
        "divided by the test texts: cross-encoder K (one per class), generate-parse 1 prefill + 1 per generated "
        "token, similarity 1 + K/N (class descriptions embedded once), everything else 1.",
        "4. *Tied embeddings*: the model's LM head is its input-embedding matrix. It is counted once, as the "
        "input lookup; slm-logits and slm-letters copy its K answer-token rows into their head (counted there), and "
        "generate-parse also uses it whole as the output projection at every generated token.",
        "",
        "Training time is the training loop (all epochs, validation included) without model loading; inference "
        "texts/s is test-set prediction, batch 32, on this machine's CPU threads.",
        "",
    ]
    return "\n".join(lines)


def write_outputs(results: dict, out: Path, log: Callable[[str], None] = print) -> list[Path]:
    """results.json, results.md, learning_curves.png and quality_vs_speed.png (confusion PNGs are per row)."""
    from headswap.plots import plot_learning_curves, plot_quality_vs_speed

    written = [write_json(results, out / "results.json")]
    charts = (("learning_curves.png", plot_learning_curves,
               [r for r in results["rows"] if r.get("epochs") and not r.get("baseline")]),
              ("quality_vs_speed.png", plot_quality_vs_speed, results["rows"]))
    for name, plot, rows in charts:
        try:
            written.append(plot(rows, out / name))
        except Exception as e:  # a chart must not cost the numbers
            log(f"could not draw {name}: {type(e).__name__}: {e}")
            results["meta"].setdefault("plot_errors", []).append(f"{name}: {type(e).__name__}: {e}")
    md = out / "results.md"
    md.write_text(render_markdown(results), encoding="utf-8")
    written.append(md)
    write_json(results, out / "results.json")
    return written


def _machine() -> dict:
    import torch

    info = {"platform": platform.platform(), "machine": platform.machine(), "processor": platform.processor(),
            "python": platform.python_version(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads()}
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    try:
        import psutil
        info["memory_gb"] = round(psutil.virtual_memory().total / 2 ** 30, 1)
    except ImportError:
        pass
    return info


def _fmt_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _confusion_name(row: dict, used: set[str]) -> str:
    base = f"confusion-{_slug(row['model_name'])}-{_slug(row['strategy'])}-{_slug(row['regime'])}"
    name, n = base + ".png", 2
    while name in used:
        name, n = f"{base}-{n}.png", n + 1
    used.add(name)
    return name


def _plot_row_confusion(row: dict, out: Path, used: set[str], log) -> None:
    from headswap.plots import plot_confusion

    if row.get("status") != "ok":
        return
    name = _confusion_name(row, used)
    try:
        plot_confusion(row["confusion"], row["labels"], out / name,
                       f"{row['model_name']} · {row['strategy']} · {row['regime']}")
        row["confusion_png"] = name
    except Exception as e:
        log(f"could not draw {name}: {type(e).__name__}: {e}")


# ---------------------------------------------------------------------------------------------------------------
# The run


def run_bench(data_dir, models: Sequence[str] = DEFAULT_MODELS, strategies="all", *,
              train_limit: int | None = None, test_limit: int | None = None, out="bench-out",
              zero_shot: bool = True, log: Callable[[str], None] = print, estimate: bool = True,
              command: Sequence[str] | None = None, **settings) -> dict:
    """Benchmark strategies x models on DIR's split against TF-IDF + LinearSVC; write OUT; return the results.

    estimate: time a training batch and an inference batch before each row and print the extrapolated time.
    command: the command line to record in the metadata (the CLI passes sys.argv).
    """
    from headswap import __version__
    from headswap.models import resolve_model

    started = time.perf_counter()
    unknown = sorted(set(settings) - set(defaults()) | set(settings) & {"strategy", "model"})
    if unknown:
        raise ConfigError(f"run_bench takes TextClassifier settings other than strategy and model; got {unknown}")
    settings = {"epochs": 1, **settings}       # bench's one default of its own: one epoch per row
    check_settings(settings)
    given = dict(settings)
    full = {**defaults(), **settings}
    regime, epochs, seed, batch_size = full["regime"], full["epochs"], full["seed"], full["batch_size"]
    for name, value in (("train_limit", train_limit), ("test_limit", test_limit)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    names = parse_strategies(strategies)
    models = [str(m) for m in ([models] if isinstance(models, (str, os.PathLike)) else models)]
    if not models:
        raise ConfigError("no models given")
    models = list(dict.fromkeys(models))
    specs = {m: resolve_model(m) for m in models}          # fails early on a model that is not available
    planned, skipped = plan_bench({m: spec.kind for m, spec in specs.items()}, names, epochs, regime, zero_shot)
    data = load_bench_data(data_dir, train_limit, test_limit, seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    args = {"data_dir": str(data_dir), "models": models, "strategies": names, "regime": regime, "epochs": epochs,
            "train_limit": train_limit, "test_limit": test_limit, "out": str(out), "seed": seed,
            "batch_size": batch_size, "max_length": full["max_length"], "zero_shot": zero_shot,
            "head_lr": given.get("head_lr"), "body_lr": given.get("body_lr"), "settings": given}
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "headswap_version": __version__, "machine": _machine(), "args": args,
            "command": list(command) if command is not None else None, "data": data.sizes,
            "models": {m: {"kind": s.kind, "path": s.path, "gguf_file": s.gguf_file, "builtin": s.builtin}
                       for m, s in specs.items()}}
    results = {"meta": meta, "rows": [], "skipped": skipped}
    used_names: set[str] = set()

    val = data.validation
    log(f"headswap bench: {data.sizes['train']['used']} train, "
        + (f"{len(val)} validation, " if val is not None else "validation held out of train, ")
        + f"{len(data.test)} test texts; {len(planned)} model rows + the TF-IDF baseline -> {out}")
    for s in skipped:
        log(f"  skip {model_display_name(s['model'])} · {s['strategy']}: {s['reason']}")

    def add(row: dict) -> None:
        _plot_row_confusion(row, out, used_names, log)
        results["rows"].append(row)
        _log_row(row, log)
        write_json(results, out / "results.json")

    total = len(planned) + 1
    log(f"[1/{total}] baseline: TF-IDF (word 1-2 + char_wb 2-5 grams) + LinearSVC (estimate: seconds)")
    add(run_tfidf_baseline(data, seed))

    probes: dict[tuple[str, str], dict] = {}
    try:
        for i, p in enumerate(planned, 2):
            label = f"[{i}/{total}] {model_display_name(p.model)} · {p.strategy} · {p.regime}"
            est = None
            if estimate:
                key = (p.model, p.strategy)
                try:
                    if key not in probes or (p.epochs and probes[key]["train_batch_seconds"] is None):
                        probes[key] = probe_timing(p, data.train, settings)
                    est = estimate_seconds(probes[key], p.epochs, len(data.train),
                                           len(val) if val is not None else None, len(data.test), batch_size,
                                           p.regime)
                except Exception as e:  # the row would hit the same: record it without running the row
                    log(f"{label}: failed while timing a first batch")
                    add({"model": p.model, "model_name": model_display_name(p.model), "model_kind": p.kind,
                         "strategy": p.strategy, "regime": p.regime, "epochs": p.epochs, "baseline": False,
                         **_error_fields(e)})
                    continue
            log(f"{label}: {_describe_estimate(est, p.epochs)}" if est is not None else label)
            row = run_model_row(p, data, settings)
            if est is not None:
                row["estimated_seconds"] = est["total"]
            add(row)
    except KeyboardInterrupt:
        meta["interrupted"] = True
        meta["elapsed_seconds"] = time.perf_counter() - started
        log(f"interrupted: writing the {len(results['rows'])} finished row(s) to {out}")
        write_outputs(results, out, log)
        raise

    meta["elapsed_seconds"] = time.perf_counter() - started
    write_outputs(results, out, log)
    failed = sum(r.get("status") != "ok" for r in results["rows"])
    log(f"wrote {out / 'results.md'}, {out / 'results.json'} and charts in {_fmt_duration(meta['elapsed_seconds'])}"
        + (f"; {failed} row(s) failed (see results.md)" if failed else ""))
    return results


def _describe_estimate(est: dict, epochs: int) -> str:
    speed = f" at ~{_rate(est['texts_per_second'])} texts/s" if est["texts_per_second"] else ""
    train = (f"training ~{_fmt_duration(est['train'])} ({epochs} epoch{'s' if epochs != 1 else ''}), "
             if epochs else "")
    return (f"estimated {_fmt_duration(est['total'])} (load {est['load']:.0f} s, {train}"
            f"test ~{_fmt_duration(est['test'])}{speed})")


def _log_row(row: dict, log) -> None:
    if row.get("status") != "ok":
        log(f"      failed: {row.get('error')}")
        return
    extra = f", unparsed {row['unparsed']}" if "unparsed" in row else ""
    est = f" (estimated {_fmt_duration(row['estimated_seconds'])})" if row.get("estimated_seconds") else ""
    log(f"      macro F1 {row['macro_f1']:.3f}, accuracy {row['accuracy']:.3f}, "
        f"{_rate(row['texts_per_second'])} texts/s"
        f"{extra}; took {_fmt_duration(row['wall_seconds'])}{est}")
