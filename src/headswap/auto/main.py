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

import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from headswap.auto.budget import Budget, baseline_seconds, check_budget, finish_seconds, warm_up_charts
from headswap.auto.duration import check_seconds, end_line
from headswap.auto.data import Data, data_warnings, read_data
from headswap.auto.prior import SHIPPED, read_table
from headswap.auto.records import Entry, Status
from headswap.auto.results import begin_results, scored_rows, write_report
from headswap.auto.ship import Prices, blend_winner, ship
from headswap.errors import ConfigError, ModelNotAvailable
from headswap.reports.report_text import duration
from headswap.trials import DEFAULT_MODELS

# Candidates by default only when installed; timed like the others.
OPTIONAL_MODELS = ("mpnet", "gemma3-270m", "multilingual-e5-small")


@dataclass
class Run:
    """What the steps of one run read: its data and budget, the candidates' settings (`full`: with every default
    filled in), where it writes, its log, and the options of auto() that steps after the first decide by."""
    data: Data
    budget: Budget
    settings: dict
    full: dict
    out: Path
    log: Callable[[str], None]
    lr_search: bool = True
    more_epochs: bool = True
    blend: bool = True
    quantize: str = "none"
    ray_address: str | None = None
    arm_cpus: float = 1
    arm_gpus: float = 0
    prior: str = SHIPPED       # the table asked for (headswap.auto.prior.read_table), and what it read
    table: dict | None = None


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
         arm_cpus: float = 1, arm_gpus: float = 0, kept: list | None = None, prior=SHIPPED, **settings) -> dict:
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
    for the TF-IDF baseline is refused (ConfigError) before anything is written. kept: a list given (position in
    results["auto"]["candidates"], model) of the baseline and the candidates held for the blend (AutoClassifier's
    leaderboard), no model more. prior: the table that orders, caps and drops rungs (headswap.auto.prior.read_table):
    "shipped", "none", or a file as benchmarks/build_prior.py writes (one built without this data set judges auto on
    data it never saw); results.json records which.
    """
    from headswap.saved.outputs import check_run_folder
    from headswap.trials.plan import BenchData, bench_files, parse_strategies

    check_run_folder(out, "out")
    from_start, started = started is not None, clock() if started is None else started
    settings, full = _checked(budget_seconds, arm_cpus, arm_gpus, quantize, settings)
    table = read_table(prior, "prior")      # before the data and the models: a bad file is one line at once
    prior = SHIPPED if prior is None else str(prior)
    names = parse_strategies(strategies)
    in_memory = isinstance(data_dir, BenchData)           # AutoClassifier.fit's splits
    if not in_memory:
        bench_files(data_dir, test_fraction, who="auto")  # before the models: a wrong path or fraction at once
    models, specs, unavailable = _models(models)
    data = read_data(data_dir, full["seed"], full["out_of_scope"], test_fraction, text_column, label_column)
    budget = _budget(budget_seconds, clock, started, data)
    run = Run(data, budget, settings, full, Path(out), log, lr_search, more_epochs, blend, quantize, ray_address,
              arm_cpus, arm_gpus, prior, table)
    models, fits, ladder, unconvertible, skipped = _ladder(run, models, specs, names)
    unavailable += unconvertible
    run.out.mkdir(parents=True, exist_ok=True)
    args = {"data_dir": "(in memory)" if in_memory else str(data_dir), "test_fraction": test_fraction,
            "text_column": text_column, "label_column": label_column, "models": models, "strategies": names,
            "out": str(run.out), "budget_seconds": budget_seconds, "quantize": quantize, "lr_search": lr_search,
            "more_epochs": more_epochs, "blend": blend, "ray_address": ray_address, "prior": run.prior,
            "settings": dict(settings)}
    candidates: list[Entry] = []      # one per (model, strategy, regime): what auto knew, did and measured
    results = _begin(run, args, command, fits, unavailable, skipped, len(ladder), candidates)
    baseline = _baseline(run, candidates)
    best, best_entry, prices = _pick(run, ladder, fits, baseline, candidates, results["auto"], kept)
    target, shipped = _ship(run, best, best_entry, baseline, results["auto"], prices)
    del best       # (the shipped model, loaded back, is what test scores)
    gc.collect()
    results["rows"] += scored_rows(((baseline, candidates[0], True), (shipped, best_entry, False)), data.test,
                                   data.validation, best_entry, candidates[0], specs, full, log)
    budget.end_shipping()      # blend, save, export, score on test
    write_report(results, candidates, run.out, budget,
                 "the start of the command" if from_start else "the call of auto()")
    log(f"wrote {target} and the report ({run.out / 'results.md'}); used "
        f"{duration(results['auto']['elapsed_seconds'])} of budget {duration(budget_seconds)}")
    return results


def _budget(seconds: float, clock: Callable[[], float], started: float, data: Data) -> Budget:
    """The run's budget, counted from `started`; refused (ConfigError) where it cannot hold the TF-IDF baseline
    beside what starting up spent."""
    budget = Budget(seconds, clock, started, finish=finish_seconds(data.n_test))
    check_budget(seconds, budget.spent(), len(data.train), len(data.validation), data.n_test, data.n_classes)
    warm_up_charts()
    return budget


def _ladder(run: Run, models: list[str], specs: dict, names: list[str]) -> tuple:
    """(the models to climb, each one's vocabulary fit, the ladder, the models skipped for want of time to convert
    them, the (model, strategy) pairs that cannot run). A model not yet converted into the cache converts at its
    first load (the vocabulary check's), in the budget: one whose conversion leaves no time to use it is skipped
    before it starts. Bodies whose vocabulary fits the texts climb first."""
    from headswap.auto.ladder import plan_ladder
    from headswap.quiet import no_progress_bars
    from headswap.text.language_fit import rank_by_fit

    data, full = run.data, run.full
    baseline = baseline_seconds(len(data.train), len(data.validation), data.n_test, data.n_classes)
    models, unconvertible = _convertible(models, specs, run.budget.spare_beside_baseline(baseline))
    with no_progress_bars(not full.get("progress", True)):     # transformers' GGUF conversion draws its own bars
        models, fits = rank_by_fit(models, data.train.texts)
    ladder, skipped = plan_ladder({m: specs[m].kind for m in models}, names, run.settings["epochs"], full["regime"],
                                  full["head"], chunking=full.get("chunk_stride") is not None)
    return models, fits, ladder, unconvertible, skipped


def _begin(run: Run, args: dict, command, fits: dict, unavailable: list[dict], skipped: list[dict], rungs: int,
           candidates: list[Entry]) -> dict:
    """The results the run fills in (headswap.auto.results), and the lines that say what it will do."""
    from headswap.reports.html_report import model_display_name
    from headswap.reports.report_text import split_lines
    from headswap.text.language_fit import as_record, fit_note

    data, budget, log = run.data, run.budget, run.log
    summary = {"budget_seconds": budget.seconds, "candidates": candidates, "warnings": data_warnings(data, run.full),
               "vocabulary_fit": as_record(fits)}
    results = begin_results(args, command, data.sizes, unavailable + skipped, summary)
    log(f"headswap auto: {len(data.train)} train, {len(data.validation)} validation"
        + (f", {data.n_test} test texts" if data.test is not None else " texts and no test set") + "; budget "
        f"{duration(budget.seconds)} ({duration(budget.spent())} of it spent starting up); a ladder "
        f"of {rungs} rungs above the TF-IDF baseline -> {run.out}")
    for line in filter(None, [end_line(budget.seconds, budget.spent()), fit_note(fits), *summary["warnings"]]):
        log(line)
    for line in split_lines(data.sizes, held_only=True):
        log(f"  {line}")
    for u in unavailable:
        log(f"  skip {model_display_name(u['model'])}: {u['reason']}")
    return results


def _baseline(run: Run, candidates: list[Entry]):
    """The TF-IDF baseline, always, first: the fallback when nothing else fits. A linear SVM, then other C and
    logistic regression while a small share of the budget allows, the best on validation kept
    (headswap.baseline.search). Its row is the first candidate."""
    from headswap.baseline.search import SHARE, tune_tfidf

    validation = run.data.validation
    baseline, search = tune_tfidf(run.data.train, validation, run.budget.share_of_spare(SHARE))
    baseline.checked_on(len(validation))       # its probabilities claim no more than validation checked (earned)
    f1 = search["validation_macro_f1"]
    candidates.append(Entry("tfidf", "tfidf", baseline.strategy, "baseline", "baseline", status=Status.RAN,
                            seconds=search["seconds"], validation_macro_f1=f1, reason=search["note"],
                            baseline_search=search))
    run.log(f"  baseline {search['name']}: validation macro F1 {f1:.4f} ({search['seconds']:.0f} s; {search['note']})")
    return baseline


def _pick(run: Run, ladder: list, fits: dict, baseline, candidates: list[Entry], summary: dict,
          kept: list | None = None) -> tuple:
    """(classifier, entry, what shipping it costs) to ship, picked on validation: the cheap rungs and the fine-tuning
    arms (_climb), then the best candidates and the baseline blended where validation's held-out folds say it pays
    and the time left holds it, and its decisions leaned toward the rarer classes where they say so
    (headswap.auto.ship)."""
    climb, runner = _climb(run, fits, baseline, candidates[0], summary, any(r.fine_tuning for r in ladder))
    _search(run, climb, ladder, runner)
    candidates.extend(climb.entries)
    if kept is not None:       # by position: results.json's rows are made from the entries at the end
        at = {id(e): i for i, e in enumerate(candidates)}
        kept += [(0, baseline)] + [(at[id(c.entry)], c.model) for c in climb.pool if id(c.entry) in at]
    best, best_entry = climb.best, climb.best_entry
    run.budget.begin_shipping()      # what is left and kept for it; end_shipping() adds what it took
    # The baseline too: when it leads, candidates validation cannot tell from it may still be blended with it
    late = Prices.of(best, best_entry, run.budget, climb.costs).blend() if run.blend else None
    if late is not None:
        run.log(f"  blend not tried: {late}")
    best, best_entry = blend_winner(best, best_entry, climb, baseline, run.data.validation, candidates, run.log,
                                    run.data.train.labels, summary, run.blend and late is None)
    if climb.halving:
        summary["halving"] = climb.halving
    return best, best_entry, Prices.of(best, best_entry, run.budget, climb.costs)


def _climb(run: Run, fits: dict, baseline, baseline_entry: Entry, summary: dict, fine: bool) -> tuple:
    """(the run's Climb, where its arms train: the Ray cluster at ray_address, or None for this process). The
    cluster is joined first: one that cannot be reached fails before any work."""
    from headswap.auto.climb import Climb
    from headswap.auto.ladder import Costs
    from headswap.auto.prior import Prior, table_record

    data, full = run.data, run.full
    costs = Costs(len(data.train), len(data.validation), data.n_test, full["batch_size"], n_classes=data.n_classes)
    misfit = {m for m, f in fits.items() if f is not None and not f.fits}
    prior = Prior(run.table, len(data.train), data.n_classes, bool(full["out_of_scope"]), misfit=bool(misfit))
    summary["prior"] = {**table_record(run.prior, run.table), "shape": prior.shape, "runs": prior.runs,
                        "sets": prior.sets}
    runner = None
    if run.ray_address and fine:
        from headswap.auto.runners import RayArms
        runner = RayArms(run.ray_address, data.train, data.validation, cpus=run.arm_cpus, gpus=run.arm_gpus,
                         log=run.log)
    # a reject option is not blended (ship.blend_winner)
    climb = Climb(run.settings, data.train, data.validation, costs, run.budget, run.log, baseline, baseline_entry,
                  prior=prior, misfit=misfit, blends=run.blend and not full["out_of_scope"],
                  arm_slots=runner.parallel if runner is not None else 1)
    return climb, runner


def _search(run: Run, climb, ladder: list, runner) -> None:
    """The cheap rungs within the budget (headswap.auto.climb), then the fine-tuning arms share what is left by
    successive halving (headswap.auto.compete). Frozen rungs on so few texts that trying them costs about what timing
    them would run first; then the arms are timed: the cheap rungs leave them half of what is left only if one can
    run. Frozen rungs of one model share one encoding pass, and an arm's slices (and its
    learning-rate variants) one pass of frozen blocks."""
    from headswap.auto.arms import prepare
    from headswap.auto.compete import compete
    from headswap.nn.inference import feature_cache

    try:
        with feature_cache():
            climb.run_tried([r for r in ladder if not r.fine_tuning])       # cheaper than timing, so first
            prepared = prepare(climb, [r for r in ladder if r.fine_tuning], run.lr_search)
            climb.run_all([r for r in ladder if not r.fine_tuning], prepared if prepared.can_run() else None)
    except BaseException:
        if runner is not None:
            runner.close()
        raise
    with feature_cache():
        compete(climb, prepared, more_epochs=run.more_epochs, folder=run.out / ".arms", runner=runner)


def _ship(run: Run, best, best_entry: Entry, baseline, summary: dict, prices: Prices | None = None) -> tuple:
    """Ship the winner to OUT/model, exported to ONNX when it can be and `prices` say the time left holds it
    (headswap.auto.ship): (its folder, the model to score on test: loaded back as shipped, the baseline itself, or
    None without a test split)."""
    best_entry.winner, row = True, best_entry.to_dict()
    summary["winner"] = {k: row[k] for k in ("model_name", "strategy", "regime", "rung", "head", "tuned", "balance",
                                             "validation_macro_f1") if k in row}
    tuned = "".join(f" · {k} {v:g}" for k, v in (best_entry.tuned or {}).items())
    run.log(f"winner on validation: {best_entry.model_name} · {best_entry.strategy} · {best_entry.regime}"
            f"{tuned} (macro F1 {best_entry.validation_macro_f1:.4f})")
    target, not_exported = ship(best, run.out, run.quantize, run.log, prices)
    summary.update(model_dir=str(target), exported=not_exported is None, shipping=run.budget.shipping,
                   **({"not_exported_because": not_exported} if not_exported else {}))
    if run.data.test is None:
        run.log("no test set: the winner and the baseline are not scored on test")
        return target, None
    if best is baseline:       # (headswap.classifier.estimator is not imported for it: 4 s on 2 loaded cores)
        return target, baseline
    from headswap.classifier.estimator import load_model
    return target, load_model(target, progress=False)


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


def _convertible(models: list[str], specs: dict, spare: float) -> tuple[list[str], list[dict]]:
    """`models` less those whose first load would convert them into the model cache for longer than `spare`
    seconds leave room to then time one of their rungs, and a skip record for each of those."""
    from headswap.auto.budget import shown
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
                f"a first rung {duration(timing)} more, over the {shown(spare)} this budget "
                f"leaves; a run with a larger budget converts it for the next ones")})
        else:
            kept.append(m)
    return kept, skipped
