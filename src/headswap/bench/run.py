"""The bench run: the baseline, then every planned row (trained or zero-shot) with its time estimate, each
recorded and written as it finishes. See headswap.bench for what it measures and writes."""

from __future__ import annotations

import datetime
import gc
import os
import time
from pathlib import Path
from typing import Callable, Sequence

from headswap.bench.baseline import run_tfidf_baseline
from headswap.reports.html_report import model_display_name
from headswap.trials.measure import ForwardRows, PeakMemory, machine_info, param_counts, estimate_seconds, probe_timing
from headswap.trials.plan import (BenchData, PlannedRow, classifier_for, bench_files, load_bench_data, parse_strategies,
                                  plan_bench)
from headswap.reports.report_text import duration, split_lines
from headswap.bench.report import _describe_estimate, _log_row, _plot_row_confusion, write_outputs
from headswap.saved.outputs import check_run_folder
from headswap.trials.rows import error_fields, metric_fields, write_json
from headswap.errors import ConfigError
from headswap.settings import check as check_settings
from headswap.settings import defaults
from headswap.strategies import get
from headswap.trials import DEFAULT_MODELS


def run_model_row(p: PlannedRow, data: BenchData, settings: dict) -> dict:
    """Train (unless zero-shot) and evaluate one row; errors are caught and recorded in the row."""
    row = {"model": p.model, "model_name": model_display_name(p.model), "model_kind": p.kind,
           "strategy": p.strategy, "regime": p.regime, "epochs": p.epochs, "baseline": False, "status": "ok"}
    clf = None
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        try:
            clf = classifier_for(p, settings)
            validation = data.validation if p.epochs else None
            clf.fit(data.train.texts, data.train.labels,
                    eval_texts=validation.texts if validation is not None else None,
                    eval_labels=validation.labels if validation is not None else None)
            row["fit_seconds"] = time.perf_counter() - t0
            with ForwardRows(clf.module_) as forward:
                m = clf.evaluate(data.test.texts, data.test.labels)
            row.update(metric_fields(m))
            row.update(trainable_params=int(getattr(clf, "trainable_params_", 0) or 0),
                       total_params=int(m.extra.get("total_params", 0)),
                       **param_counts(clf.module_, p.kind == "causal"),
                       train_seconds=float(getattr(clf, "train_seconds_", 0.0)),
                       load_seconds=float(getattr(clf, "build_seconds_", 0.0)),
                       eval_seconds=float(m.extra.get("eval_seconds", 0.0)),
                       texts_per_second=float(m.extra.get("texts_per_second", 0.0)),
                       forward_passes_per_text=forward.per_text(len(data.test)),
                       forward_passes_nominal=get(p.strategy).passes_per_text(len(m.labels)),
                       history=_history(clf), best_epoch=getattr(clf, "best_epoch_", None),
                       notes=list(getattr(clf, "notes_", []) or []))
            if m.extra.get("calibration"):
                row["calibration"] = m.extra["calibration"]     # ECE/Brier before and after temperature
            if m.extra.get("out_of_scope"):      # headswap.classifier.reject_option.block: every score's AUROC, the decisions
                row["out_of_scope"] = m.extra["out_of_scope"]
            if "parse_counts" in m.extra:
                counts = m.extra.get("parse_counts", {})     # this evaluation's texts only
                row["parse_counts"] = dict(counts)
                row["unparsed"] = int(counts.get("unparsed", 0))
        except Exception as e:  # one failing row must not end the benchmark
            row.update(error_fields(e))
        row["wall_seconds"] = time.perf_counter() - t0
    row.update(mem.to_dict())
    del clf
    gc.collect()
    return row


def _history(clf) -> list[dict]:
    out = []
    for h in getattr(clf, "history_", []) or []:
        val = h.get("metrics") or {}
        out.append({"epoch": h.get("epoch"), "train_loss": h.get("train_loss"), "score": h.get("score"),
                    "seconds": h.get("seconds"), "validation_accuracy": val.get("accuracy")})
    return out


def run_bench(data_dir, models: Sequence[str] = DEFAULT_MODELS, strategies="all", *,
              train_limit: int | None = None, test_limit: int | None = None, out="bench-out",
              zero_shot: bool = True, log: Callable[[str], None] = print, estimate: bool = True,
              command: Sequence[str] | None = None, test_fraction: float | None = None, text_column: str = "text",
              label_column: str = "label", **settings) -> dict:
    """Benchmark strategies x models on DIR's split against TF-IDF + LinearSVC; write OUT; return the results.

    data_dir: a folder with train.csv and test.csv (validation.csv optional), or one labelled CSV/TSV/JSONL/Parquet file
    with test_fraction; text_column and label_column name the columns of every file. test_fraction (0-1): hold that
    share of train out as test, stratified and seeded (for data without a test.csv, which bench needs otherwise).
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
    bench_files(data_dir, test_fraction, needs_test=True)     # before the models: a wrong path or fraction at once
    models = [str(m) for m in ([models] if isinstance(models, (str, os.PathLike)) else models)]
    if not models:
        raise ConfigError("no models given")
    models = list(dict.fromkeys(models))
    specs = {m: resolve_model(m) for m in models}          # fails early on a model that is not available
    planned, skipped = plan_bench({m: spec.kind for m, spec in specs.items()}, names, epochs, regime, zero_shot,
                                  chunking=full.get("chunk_stride") is not None)
    data = load_bench_data(data_dir, train_limit, test_limit, seed, full["out_of_scope"], test_fraction=test_fraction,
                           text_column=text_column, label_column=label_column)
    check_run_folder(out, "out")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    args = {"data_dir": str(data_dir), "test_fraction": test_fraction, "text_column": text_column,
            "label_column": label_column, "models": models, "strategies": names, "regime": regime, "epochs": epochs,
            "train_limit": train_limit, "test_limit": test_limit, "out": str(out), "seed": seed,
            "batch_size": batch_size, "max_length": full["max_length"], "zero_shot": zero_shot,
            "head_lr": given.get("head_lr"), "body_lr": given.get("body_lr"), "settings": given}
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "headswap_version": __version__, "machine": machine_info(), "args": args,
            "command": list(command) if command is not None else None, "data": data.sizes,
            "models": {m: {"kind": s.kind, "path": s.path, "gguf_file": s.gguf_file, "builtin": s.builtin}
                       for m, s in specs.items()}}
    results = {"meta": meta, "rows": [], "skipped": skipped}
    used_names: set[str] = set()

    val = data.validation
    log(f"headswap bench: {data.sizes['train']['used']} train, "
        + (f"{len(val)} validation, " if val is not None else "validation held out of train, ")
        + f"{len(data.test)} test texts; {len(planned)} model rows + the TF-IDF baseline -> {out}")
    for line in split_lines(data.sizes, held_only=True):
        log(f"  {line}")
    for s in skipped:
        log(f"  skip {model_display_name(s['model'])} · {s['strategy']}: {s['reason']}")

    def add(row: dict) -> None:
        _plot_row_confusion(row, out, used_names, log)
        results["rows"].append(row)
        _log_row(row, log)
        write_json(results, out / "results.json")

    total = len(planned) + 1
    log(f"[1/{total}] baseline: TF-IDF (word 1-2 + char_wb 2-5 grams) + LinearSVC (estimate: seconds)")
    add(run_tfidf_baseline(data, seed, reject={k: full[k] for k in ("out_of_scope", "reject_metric", "reject_target")}
                           if full["out_of_scope"] is not None else None))

    probes: dict[tuple[str, str], dict] = {}
    try:
        for i, p in enumerate(planned, 2):
            label = f"[{i}/{total}] {model_display_name(p.model)} · {p.strategy} · {p.regime}"
            est = None
            if estimate:
                key = (p.model, p.strategy)
                try:
                    if key not in probes or (p.epochs and probes[key]["train_batch_seconds"] is None):
                        # timed with the loop-trained head, as auto's probes are: a logistic-regression fit has
                        # no epochs to time, and what it costs is the encoding pass the probe measures anyway
                        probes[key] = probe_timing(p, data.train, {**settings, "head_fit": "loop"})
                    est = estimate_seconds(probes[key], p.epochs, len(data.train),
                                           len(val) if val is not None else None, len(data.test), batch_size,
                                           p.regime)
                except Exception as e:  # the row would hit the same: record it without running the row
                    log(f"{label}: failed while timing a first batch")
                    add({"model": p.model, "model_name": model_display_name(p.model), "model_kind": p.kind,
                         "strategy": p.strategy, "regime": p.regime, "epochs": p.epochs, "baseline": False,
                         **error_fields(e)})
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
    log(f"wrote {out / 'report.html'}, {out / 'results.md'}, {out / 'results.json'} and charts in "
        f"{duration(meta['elapsed_seconds'])}"
        + (f"; {failed} row(s) failed (see results.md)" if failed else ""))
    return results
