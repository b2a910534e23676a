"""`headswap auto`: pick the classifier to ship within a time budget.

    results = auto("data/emotion", budget_seconds=20 * 60, out="auto-out")

1. The data: DIR/train.csv, and DIR/validation.csv and DIR/test.csv when there (without validation.csv, a
   stratified, seeded tenth of the training texts is held out as validation), or one labelled file as train.
   test_fraction holds a stratified, seeded share of train out as test first; with no test split, nothing is
   scored on test. Test is read once, at the end.
2. The TF-IDF baseline always trains, the fallback when nothing fits: logistic regression, then other C and a linear SVM
   while 5% of the budget allows, the best on validation kept (headswap.baseline.search).
3. The cost ladder (headswap.auto.ladder, run by headswap.auto.climb): `static`, then head-only rungs on frozen
   features (logistic regression, linear and MLP heads; one encoding pass per model), then fine-tuning, causal
   models last. Each rung's cost is estimated from a probe of a few batches per model and regime, corrected as the
   run measures. Cheap rungs run when they fit (keeping half of what is left for fine-tuning). Every rung not run
   says why.
4. The fine-tuning rungs, and each one's learning-rate neighbours on a half-decade grid (1e-5, 3e-5, 1e-4, ...;
   a rate given on the command line is kept), compete as arms of successive halving (headswap.auto.compete,
   headswap.auto.policy): short time-bounded slices with validation inside, the worse half stops after each
   round, the leader trains on until its validation stops improving or the budget ends; no arm holds more than a
   third of the budget unless it leads. With ray_address the arms run as Ray tasks on that cluster, several at
   once (headswap.auto.runners). Each arm is a candidate of its own (`tuned`: a rate it ran at).
   The best validation macro F1 wins (never test), blended and its decisions leaned toward rare classes where
   validation's held-out folds prefer it (headswap.auto.ship). It is saved as OUT/model: a TF-IDF model directory,
   a blend, or a TextClassifier directory, exported to ONNX too when the strategy can be.
The budget is wall time from `started` (the CLI: its process's start), and room is kept throughout to ship the
best so far and finish (headswap.auto.budget); a budget too small for the baseline alone is refused.
5. The shipped winner and the baseline are scored on test once, when there is a test split. OUT/results.json
   (bench's layout plus an "auto" entry), results.md and report.html say what ran, what was skipped and why, and
   where each split came from.
"""

from __future__ import annotations

import datetime
import gc
import time
from pathlib import Path
from typing import Callable, Sequence

from headswap.reports.markdown import auto_markdown
from headswap.auto.budget import (baseline_seconds, check_budget, check_seconds, end_line, finish_seconds,
                                   warm_up_charts)
from headswap.auto.ship import blend_winner, ship
from headswap.errors import ConfigError, ModelNotAvailable
from headswap.trials import DEFAULT_MODELS

# Candidates by default only when installed; timed like the others.
OPTIONAL_MODELS = ("mpnet", "gemma3-270m", "multilingual-e5-small")
def _data(data_dir, seed: int, out_of_scope: str | None = None, test_fraction: float | None = None,
          text_column: str = "text", label_column: str = "label"):
    """(train, validation, test or None, sizes): validation.csv, or a stratified tenth of train held out; test.csv,
    test_fraction of train held out first, or none. With out_of_scope, that label's rows are allowed in validation
    and test (each candidate rejects them; the test row reports it)."""
    from collections import Counter

    from headswap.trials.plan import BenchData, EVAL_FRACTION, held_out_source, load_bench_data, train_source

    data = data_dir if isinstance(data_dir, BenchData) else load_bench_data(
        data_dir, seed=seed, out_of_scope=out_of_scope, test_fraction=test_fraction, text_column=text_column,
        label_column=label_column, needs_test=False, who="auto")
    train, validation, sizes = data.train, data.validation, dict(data.sizes)
    if validation is None:
        from headswap.data.sampling import stratified_split
        train, validation = stratified_split(train, EVAL_FRACTION, seed)
        file = sizes["train"]["file"] or sizes["train"]["source"]
        held = ["test"] if sizes["test"]["used"] and not sizes["test"]["file"] else []
        sizes["validation"] = {"file": None, "rows": len(validation), "used": len(validation),
                               "classes": dict(sorted(Counter(validation.labels).items())),
                               "source": held_out_source(EVAL_FRACTION, f"the rest of {file}" if held else file, seed),
                               "note": f"no validation.csv: {EVAL_FRACTION:.0%} of the training texts held out "
                                       "(stratified, seeded) for best-epoch selection and for picking the winner"}
        sizes["train"] = {**sizes["train"], "used": len(train), "source": train_source(file, held + ["validation"])}
    return train, validation, data.test, sizes


def _convertible(models: list[str], specs: dict, spare: float) -> tuple[list[str], list[dict]]:
    """`models` less those whose first load would convert them into the model cache for longer than `spare`
    seconds leave room to then time one of their rungs, and a skip record for each of those."""
    from headswap.auto.ladder import PROBE_GUESS
    from headswap.reports.report_text import duration
    from headswap.models import conversion_seconds

    kept, skipped = [], []
    for m in models:
        convert = conversion_seconds(specs[m])
        timing = 2 * PROBE_GUESS.get(specs[m].kind, 30.0)    # the least room climb asks to time a rung
        if convert and convert + timing > spare:
            skipped.append({"model": m, "strategy": "all", "regime": "", "reason": (
                f"not in the model cache yet: converting it takes about {duration(convert)} (once) and timing "
                f"a first rung {duration(timing)} more, over the {duration(max(spare, 0))} this budget "
                f"leaves; a run with a larger budget converts it for the next ones")})
        else:
            kept.append(m)
    return kept, skipped


def default_models() -> tuple[str, ...]:
    """DEFAULT_MODELS, and each of OPTIONAL_MODELS whose packages are installed. Installed is not chosen: each
    candidate is still timed on one batch and runs only when its estimate fits what is left of the budget. A
    default one that is not installed (a pip install without smollm2's package) is skipped by auto, saying so."""
    from headswap.models import installed

    return DEFAULT_MODELS + tuple(m for m in OPTIONAL_MODELS if installed(m))


def auto(data_dir, budget_seconds: float, *, models: Sequence[str] | None = None, strategies="all",
         out="auto-out", quantize: str = "none", log: Callable[[str], None] = print,
         test_fraction: float | None = None, text_column: str = "text", label_column: str = "label",
         command: Sequence[str] | None = None, lr_search: bool = True, more_epochs: bool = True, blend: bool = True,
         clock: Callable[[], float] = time.perf_counter, started: float | None = None, ray_address: str | None = None,
         arm_cpus: float = 1, arm_gpus: float = 0, **settings) -> dict:
    """Run what fits in budget_seconds, pick the best on validation, ship it to OUT/model, score it on test.

    data_dir: a folder with train.csv (validation.csv and test.csv optional), one labelled CSV/TSV/JSONL/Parquet file, or
    splits in memory (headswap.trials.plan.memory_data: AutoClassifier's);
    text_column and label_column name the columns of every file. test_fraction (0-1): hold that share of train out
    as test, stratified and seeded (refused when there is a test.csv); without a test split nothing is scored on test.
    settings: TextClassifier settings for every candidate (epochs defaults to 1, as in bench: the least an arm
    plans). lr_search: the learning-rate neighbours of each fine-tuning rung compete as arms too. more_epochs: an
    arm's schedule may plan more epochs than `epochs` (as many as the budget could give it, at most
    MAX_PLANNED_EPOCHS), so a leader can train on. blend: ship a blend of the best candidates and the baseline
    where held-out folds of validation prefer it to the winner alone (headswap.auto.ship.blend_winner).
    ray_address: run the arms on that Ray cluster, each with arm_cpus CPUs and arm_gpus GPUs. models: None for
    default_models() (minilm, smollm2-135m, and mpnet, gemma3-270m and multilingual-e5-small when installed).
    started: when the budget began, on `clock` (the CLI passes its process's start); None: now. A budget too small
    for the TF-IDF baseline is refused (ConfigError) before anything is written.
    """
    from headswap import __version__
    from headswap.saved.atomic import write_text
    from headswap.reports.html_report import model_display_name
    from headswap.auto.budget import Budget
    from headswap.auto.climb import Climb
    from headswap.auto.compete import arms_can_run, arms_spare, compete, prepare
    from headswap.auto.ladder import Costs, plan_ladder
    from headswap.trials.measure import machine_info
    from headswap.trials.plan import BenchData, bench_files, parse_strategies
    from headswap.nn.inference import feature_cache
    from headswap.reports.report_text import duration, split_lines
    from headswap.text.language_fit import as_record, fit_note, rank_by_fit
    from headswap.trials.rows import write_json
    from headswap.saved.outputs import check_run_folder
    check_run_folder(out, "out")
    from_start = started is not None
    started = clock() if started is None else started
    settings, full = _checked(budget_seconds, arm_cpus, arm_gpus, quantize, settings)
    names = parse_strategies(strategies)
    in_memory = isinstance(data_dir, BenchData)           # AutoClassifier.fit's splits
    if not in_memory:
        bench_files(data_dir, test_fraction, who="auto")  # before the models: a wrong path or fraction at once
    models, specs, unavailable = _models(models)
    train, validation, test, sizes = _data(data_dir, full["seed"], full["out_of_scope"], test_fraction, text_column,
                                           label_column)
    n_test = len(test) if test is not None else 0
    n_classes = len(set(train.labels))
    budget = Budget(budget_seconds, clock, started, finish=finish_seconds(n_test))
    check_budget(budget_seconds, budget.spent(), len(train), len(validation), n_test, n_classes)
    warm_up_charts()
    # A model not yet converted into the cache converts at its first load (the vocabulary check's), in the budget:
    # one whose conversion leaves no time to use it is skipped before it starts.
    baseline_s = baseline_seconds(len(train), len(validation), n_test, n_classes) - budget.finish
    models, unconvertible = _convertible(models, specs, budget.spare(ship=baseline_s))
    unavailable += unconvertible
    from headswap.quiet import no_progress_bars
    with no_progress_bars(not full.get("progress", True)):     # transformers' GGUF conversion draws its own bars
        models, fits = rank_by_fit(models, train.texts)     # bodies whose vocabulary fits the texts climb first
    ladder, skipped = plan_ladder({m: specs[m].kind for m in models}, names, settings["epochs"], full["regime"],
                                  full["head"], chunking=full.get("chunk_stride") is not None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    candidates = []      # one entry per (model, strategy, regime): what auto knew, did and measured
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "headswap_version": __version__, "machine": machine_info(), "data": sizes,
            "command": list(command) if command is not None else None,
            "args": {"data_dir": "(in memory)" if in_memory else str(data_dir), "test_fraction": test_fraction, "text_column": text_column,
                     "label_column": label_column, "models": models, "strategies": names, "out": str(out),
                     "budget_seconds": budget_seconds, "quantize": quantize, "lr_search": lr_search,
                     "more_epochs": more_epochs, "blend": blend, "ray_address": ray_address,
                     "settings": dict(settings)}}
    summary = {"budget_seconds": budget_seconds, "candidates": candidates,
               "warnings": _data_warnings(train, validation, full),
               "vocabulary_fit": as_record(fits)}
    results = {"meta": meta, "rows": [], "skipped": [dict(s, model_name=model_display_name(s["model"]))
                                                     for s in unavailable + skipped], "auto": summary}
    log(f"headswap auto: {len(train)} train, {len(validation)} validation"
        + (f", {n_test} test texts" if test is not None else " texts and no test set") + "; budget "
        f"{duration(budget_seconds)} ({duration(budget.spent())} of it spent starting up); a ladder "
        f"of {len(ladder)} rungs above the TF-IDF baseline -> {out}")
    for line in filter(None, [end_line(budget_seconds, budget.spent()), fit_note(fits), *summary["warnings"]]):
        log(line)
    for line in split_lines(sizes, held_only=True):
        log(f"  {line}")
    for u in unavailable:
        log(f"  skip {model_display_name(u['model'])}: {u['reason']}")

    # 1. The baseline: always, first; then its C and a linear SVM while a small share of the budget allows.
    from headswap.baseline.search import SHARE, tune_tfidf
    baseline, search = tune_tfidf(train, validation, min(SHARE * budget_seconds, budget.spare()))
    base_f1 = search["validation_macro_f1"]
    candidates.append({"model": "tfidf", "model_name": "tfidf", "strategy": baseline.strategy, "regime": "baseline",
                       "tier": "baseline", "status": "ran", "seconds": search["seconds"], "validation_macro_f1": base_f1,
                       "reason": search["note"], "baseline_search": search})
    log(f"  baseline {search['name']}: validation macro F1 {base_f1:.4f} ({search['seconds']:.0f} s; {search['note']})")
    best, best_entry = baseline, candidates[0]

    # 2. The cheap rungs of the ladder within the budget (headswap.auto.climb); frozen rungs of one model share
    # one encoding pass. 3. The fine-tuning arms share what is left by successive halving (headswap.auto.compete).
    costs = Costs(len(train), len(validation), n_test, full["batch_size"], n_classes=n_classes)
    climb = Climb(settings, train, validation, costs, budget, log, best, best_entry)
    climb.misfit = {m for m, f in fits.items() if f is not None and not f.fits}
    climb.blends = blend and not full["out_of_scope"]     # a reject option is not blended (ship.blend_winner)
    from headswap.auto.prior import Prior, load_table
    climb.prior = Prior(load_table(), len(train), n_classes, bool(full["out_of_scope"]), misfit=bool(climb.misfit))
    summary["prior"] = {"shape": climb.prior.shape, "runs": climb.prior.runs, "sets": climb.prior.sets}
    fine = [r for r in ladder if r.fine_tuning]
    runner = None
    if ray_address and fine:      # joined first: a cluster that cannot be reached fails before any work
        from headswap.auto.runners import RayArms
        runner = RayArms(ray_address, train, validation, cpus=arm_cpus, gpus=arm_gpus, log=log)
    try:     # the arms are timed first: the cheap rungs leave them half of what is left only if one can run
        prepared = prepare(climb, fine, lr_search, parallel=runner.parallel if runner is not None else 1)
        if arms_can_run(climb, prepared[0]):
            climb.arms_spare = arms_spare(climb, prepared[0])
        with feature_cache():
            climb.run_all([r for r in ladder if not r.fine_tuning])
    except BaseException:
        if runner is not None:
            runner.close()
        raise
    with feature_cache():     # an arm's slices (and its learning-rate variants) share one pass of frozen blocks
        compete(climb, prepared, more_epochs=more_epochs, clock=clock, folder=out / ".arms", runner=runner)
    runner = None
    candidates.extend(climb.entries)
    best, best_entry = climb.best, climb.best_entry
    # 4. The best candidates and the baseline blended, where validation's held-out folds say it pays (headswap.auto.ship).
    shipping = {"left_seconds": round(budget.left(), 1), "reserved_seconds": round(budget.ship, 1)}  # vs. "seconds"
    if best is not baseline:      # and its decisions leaned toward the rarer classes where those folds say so
        best, best_entry = blend_winner(best, best_entry, climb, baseline, validation, candidates, log, train.labels,
                                        summary, blend)
    if getattr(climb, "halving", None):
        summary["halving"] = climb.halving
    climb = None
    for c in candidates:
        c.pop("plan", None)

    # 5. Ship the winner; 6. score it (as shipped) and the baseline on test, once.
    best_entry["winner"] = True
    summary["winner"] = {k: best_entry[k] for k in ("model_name", "strategy", "regime", "rung", "head", "tuned",
                                                    "balance", "validation_macro_f1") if k in best_entry}
    tuned = "".join(f" · {k} {v:g}" for k, v in (best_entry.get("tuned") or {}).items())
    log(f"winner on validation: {best_entry['model_name']} · {best_entry['strategy']} · {best_entry['regime']}"
        f"{tuned} (macro F1 {best_entry['validation_macro_f1']:.4f})")
    target, not_exported = ship(best, out, quantize, log)
    summary.update(model_dir=str(target), exported=not_exported is None, shipping=shipping,
                   **({"not_exported_because": not_exported} if not_exported else {}))
    if test is None:
        log("no test set: the winner and the baseline are not scored on test")
        shipped = None
    elif best is baseline:       # (headswap.classifier.estimator is not imported for it: 4 s on 2 loaded cores)
        shipped = baseline
    else:
        from headswap.classifier.estimator import load_model
        shipped = load_model(target, progress=False)
    del best
    gc.collect()
    results["rows"] += _test_rows(((baseline, candidates[0], True), (shipped, best_entry, False)), test, validation,
                                  best_entry, candidates[0], specs, full, log)
    shipping["seconds"] = round(shipping["left_seconds"] - budget.left(), 1)   # blend, save, export, score on test
    def write_results() -> None:     # the wall time so far in each: the report, like the user, waits on the rest
        summary["elapsed_seconds"] = meta["elapsed_seconds"] = budget.spent()
        summary["budget_used"] = summary["elapsed_seconds"] / budget_seconds
        write_json(results, out / "results.json")
        write_text(out / "results.md", auto_markdown(results))

    summary["counted_from"] = "the start of the command" if from_start else "the call of auto()"
    from headswap.reports.report_text import arm_rows
    arms = arm_rows(summary)
    if any(a.get("slices") for a in arms):      # a chart of no slices would say nothing
        try:
            from headswap.reports.plots import plot_arm_curves
            plot_arm_curves(arms, out / "arms.png")
            summary["arms_chart"] = "arms.png"
        except ImportError:
            pass
    write_results()
    try:
        from headswap.reports.html_report import write_html
        write_html(results, out / "report.html", title="headswap auto")
    except ImportError:
        pass
    write_results()
    log(f"wrote {target} and the report ({out / 'results.md'}); used {duration(summary['elapsed_seconds'])} "
        f"of budget {duration(budget_seconds)}")
    return results


def _checked(budget_seconds: float, arm_cpus: float, arm_gpus: float, quantize: str, settings: dict
             ) -> tuple[dict, dict]:
    """The options checked before anything is read: (the candidates' settings, with every default filled in)."""
    from headswap.classifier.runtime import QUANTIZE
    from headswap.settings import check as check_settings
    from headswap.settings import defaults

    number = isinstance(budget_seconds, (int, float)) and not isinstance(budget_seconds, bool)
    check_seconds(budget_seconds, f"{budget_seconds:g} s" if number else f"{budget_seconds!r:.40}")
    if not (arm_cpus > 0 and arm_gpus >= 0):
        raise ConfigError(f"an arm asks for more than 0 CPUs and at least 0 GPUs, got {arm_cpus:g} CPUs and "
                          f"{arm_gpus:g} GPUs")
    if quantize not in QUANTIZE:
        raise ConfigError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZE)}")
    bad = sorted(set(settings) - set(defaults()) | set(settings) & {"strategy", "model", "multi_label", "time_limit"})
    if bad:
        raise ConfigError(f"auto takes TextClassifier settings other than strategy, model, multi_label and time_limit "
                          f"(it gives each rung its share of the budget); got {bad}")
    settings = {"epochs": 1, **settings}
    if settings["epochs"] < 1:
        raise ConfigError("auto trains its candidates: epochs must be >= 1")
    check_settings(settings)
    full = {**defaults(), **settings}
    return settings, full


def _models(models) -> tuple[list[str], dict, list[dict]]:
    """(the models to try, their specs, a skip record for each default one not installed); a model the user named
    that is not available fails at once."""
    from headswap.models import resolve_model

    defaulted = models is None
    models = default_models() if defaulted else models
    models = list(dict.fromkeys(str(m) for m in ([models] if isinstance(models, str) else models)))
    if not models:
        raise ConfigError("no models given")
    specs, unavailable = {}, []
    for m in models:     # fails early on a model that is not available; a default one is skipped, saying why
        try:
            specs[m] = resolve_model(m)
        except ModelNotAvailable as e:
            if not defaulted:
                raise
            unavailable.append({"model": m, "strategy": "all", "regime": "", "reason": f"not installed: {e}"})
    models = [m for m in models if m in specs]
    return models, specs, unavailable


def _test_rows(scored, test, validation, best_entry: dict, baseline_entry: dict, specs: dict, full: dict, log
               ) -> list[dict]:
    """The shipped winner and the baseline scored on test, once: a results row each (one when the baseline won)."""
    from headswap.trials.rows import metric_fields

    rows = []
    for clf, entry, is_baseline in scored:
        if test is None or (is_baseline and best_entry is baseline_entry):
            continue       # no test set; or the baseline won: one row
        m = clf.evaluate(test.texts, test.labels)
        row = {"model": entry["model"], "model_name": entry["model_name"], "model_kind": "bag-of-n-grams"
               if entry["model"] == "tfidf" else specs[entry["model"]].kind, "strategy": entry["strategy"],
               "regime": entry["regime"], "epochs": entry.get("epochs"),
               **{k: entry[k] for k in ("tier", "rung", "head") if entry.get(k)},
               "baseline": entry["model"] == "tfidf", "status": "ok", "winner": entry is best_entry,
               "runtime": getattr(clf, "runtime_", None), **metric_fields(m),
               "texts_per_second": float(m.extra.get("texts_per_second", 0.0)),
               "trainable_params": int(m.extra.get("trainable_params", 0) or 0),
               "total_params": int(m.extra.get("total_params", 0) or 0),
               "train_seconds": entry.get("seconds"), "validation_macro_f1": entry["validation_macro_f1"],
               **{k: entry[k] for k in ("tuned", "balance") if entry.get(k)}}
        if "calibration" in m.extra:
            row["calibration"] = m.extra["calibration"]
        if m.extra.get("out_of_scope"):     # headswap.classifier.reject_option: the chosen score, every score's AUROC, the decisions
            row["out_of_scope"] = m.extra["out_of_scope"]
        elif entry["model"] == "tfidf" and full["out_of_scope"]:   # the max-probability rule, as bench's baseline
            from headswap.trials.rows import tfidf_reject_block
            row["out_of_scope"] = tfidf_reject_block(clf, validation, test, full["out_of_scope"],
                                                     full["reject_metric"], full["reject_target"])
        rows.append(row)
        log(f"  test: {row['model_name']} · {row['strategy']}{' (winner)' if row['winner'] else ''}: macro F1 "
            f"{row['macro_f1']:.4f}, {row['texts_per_second']:.0f} texts/s ({row['runtime']})")
    return rows


def _data_warnings(train, validation, settings: dict) -> list[str]:
    """What makes the winner's choice weak, said plainly: an out-of-scope label no text has, too few out-of-scope
    validation texts for a recall target (each rung's fit would say these two again), one class in validation."""
    from headswap.data.once import said
    from headswap.classifier.reject_option import few_out_of_scope_note, unseen_label_note

    oos, labels = settings.get("out_of_scope"), list(validation.labels)
    lines = [unseen_label_note(oos, list(train.labels) + labels)]
    if settings.get("reject_metric") == "oos_recall" and labels.count(oos):
        lines.append(few_out_of_scope_note(oos, labels.count(oos), settings["reject_target"]))
    for key in (("unseen out of scope", oos), ("few out of scope", oos, labels.count(oos))):
        said(key)
    lines, classes = [line for line in lines if line], sorted(set(labels) - {oos})
    if len(classes) != 1:
        return lines
    return lines + [f"validation holds {len(labels)} text{'s' if len(labels) != 1 else ''}, all of one class "
                    f"({classes[0]!r}" + (f" besides out-of-scope {oos!r}" if oos in labels else "")
                    + "): macro F1 on it cannot tell a model that tells the classes apart from one that does not, "
                      "so the winner is picked on little; give a validation.csv with texts of every class"]

