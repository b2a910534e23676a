"""`headswap auto`: pick the classifier to ship within a time budget.

    results = auto("data/emotion", budget_seconds=20 * 60, out="auto-out")

1. The data: DIR/train.csv, DIR/test.csv and DIR/validation.csv (without one, a stratified, seeded tenth of the
   training texts is held out as validation). Test is read once, at the end.
2. The TF-IDF + logistic-regression classifier (headswap.tfidf) always trains: it is the baseline and the
   fallback when nothing else fits.
3. The cost ladder (headswap.bench.ladder, run by headswap.bench.climb): `static`, then head-only rungs on frozen
   features (logistic regression, linear and MLP heads; one encoding pass per model), then fine-tuning, causal
   models last. Each rung's cost is estimated from a probe of a few batches per model and regime, corrected as the
   run measures. Cheap rungs run when they fit (keeping half of what is left for fine-tuning). Every rung not run
   says why.
4. The fine-tuning rungs, and each one's learning-rate neighbours on a half-decade grid (1e-5, 3e-5, 1e-4, ...;
   a rate given on the command line is kept), compete as arms of successive halving (headswap.bench.compete,
   headswap.bench.halving): short time-bounded slices with validation inside, the worse half stops after each
   round, the leader trains on until its validation stops improving or the budget ends; no arm holds more than a
   third of the budget unless it leads. With ray_address the arms run as Ray tasks on that cluster, several at
   once (headswap.bench.arms). Each arm is a candidate of its own (`tuned`: a rate it ran at).
   The best validation macro F1 wins (never test). It is saved as OUT/model: a TF-IDF model directory, or a
   TextClassifier directory, exported to ONNX too when the strategy can be (and onnxruntime is installed).
The budget is wall time from `started` (the CLI: its process's start), and room is kept throughout to ship the
best so far and finish (headswap.bench.budget); a budget too small for the baseline alone is refused.
5. The shipped winner and the baseline are scored on test once. OUT/results.json (bench's layout plus an
   "auto" entry), results.md and report.html say what ran, what was skipped and why.
"""

from __future__ import annotations

import datetime
import gc
import math
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from headswap import model_dir
from headswap.bench.auto_report import render_markdown
from headswap.bench.budget import DAY, baseline_seconds, check_budget, end_line, finish_seconds, warm_up_charts
from headswap.bench.compete import LR_GRID, LR_MARGIN, lr_neighbours  # noqa: F401 (as before: auto's rate grid)
from headswap.errors import ConfigError, HeadswapError

DEFAULT_MODELS = ("minilm", "smollm2-135m")
# Candidates by default only when installed; timed like the others.
OPTIONAL_MODELS = ("mpnet", "gemma3-270m", "multilingual-e5-small")
MAX_BUDGET_DAYS = 7     # a week: auto's longest budget (its arms train whole epochs from a few hours on)
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(text: str) -> float:
    """'20m', '1h30m', '90s', '1.5h' -> seconds; a bare number is minutes."""
    value = str(text).strip().lower()
    if value.startswith("-") and _DURATION.match(value[1:]) and value[1:]:
        raise ConfigError(f"budget {text!r} must be a time of more than zero")
    try:
        seconds = float(value) * 60
    except ValueError:
        match = _DURATION.match(value)
        if not value or not match or not any(match.groups()):
            raise ConfigError(f"budget {text!r} is not a duration: write e.g. 20m, 1h30m, 90s (a bare number is "
                              "minutes)") from None
        h, m, s = (float(g) if g else 0.0 for g in match.groups())
        seconds = h * 3600 + m * 60 + s
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"budget {text!r} must be a finite time of more than zero")
    check_budget_length(seconds, repr(text))
    return seconds


def check_budget_length(seconds: float, given: str) -> None:
    """Refuse a budget over MAX_BUDGET_DAYS: one of 1e9 (minutes, 1,900 years) is a typo, not a plan."""
    if seconds > MAX_BUDGET_DAYS * DAY:
        raise ConfigError(f"budget {given} is {seconds / DAY:,.1f} days, over the {MAX_BUDGET_DAYS} days auto takes "
                          f"(a bare number is minutes: --budget 90 is 90 min)")


def _data(data_dir, seed: int, out_of_scope: str | None = None):
    """(train, validation, test, sizes): validation.csv, or a stratified tenth of train held out. With out_of_scope,
    that label's rows are allowed in validation and test (each candidate rejects them; the test row reports it)."""
    from headswap.bench.plan import EVAL_FRACTION, load_bench_data
    from headswap.data.sampling import stratified_split

    data = load_bench_data(data_dir, seed=seed, out_of_scope=out_of_scope)
    train, validation, sizes = data.train, data.validation, dict(data.sizes)
    if validation is None:
        train, validation = stratified_split(train, EVAL_FRACTION, seed)
        sizes["validation"] = {"file": None, "used": len(validation),
                               "note": f"no validation.csv: {EVAL_FRACTION:.0%} of train.csv held out "
                                       "(stratified, seeded) for best-epoch selection and for picking the winner"}
        sizes["train"] = {**sizes["train"], "used": len(train)}
    return train, validation, data.test, sizes


def _ship(winner, out: Path, quantize: str, log) -> tuple[Path, str | None]:
    """Save the winner as OUT/model (exported to ONNX when it can be); returns (path, why not exported).
    OUT/model is swapped in whole (model_dir.save_into): files a user put there are kept."""
    why = []
    target = model_dir.save_into(out / "model", lambda folder: why.append(_write_winner(winner, folder, quantize,
                                                                                          log)))
    return target, why[0]


def _write_winner(winner, folder: Path, quantize: str, log) -> str | None:
    """Write the winner into the new, empty `folder`; returns why it was not exported (None when it was)."""
    from headswap.blend import Blend
    from headswap.tfidf import TfidfClassifier

    if isinstance(winner, Blend):     # the neural member is exported as it would be alone
        why = []
        winner.save(folder, save_model=lambda model, into: why.append(_write_winner(model, into, quantize, log)))
        return why[0]
    if isinstance(winner, TfidfClassifier):
        winner.save(folder)
        return "a TF-IDF model runs on scikit-learn; there is nothing to export"
    if not winner.strategy_.exportable or winner.model_spec_.kind != "encoder":
        winner.save(folder)
        return f"{winner.strategy} on a {winner.model_spec_.kind} model cannot be exported to ONNX"
    try:
        from headswap.runtime import import_onnxruntime
        import_onnxruntime()
    except HeadswapError as e:
        winner.save(folder)
        return str(e)
    from headswap.export import export

    staging = Path(tempfile.mkdtemp(prefix=".model-torch-", dir=folder.parent))
    try:
        winner.save(staging)
        try:
            entry = export(staging, folder, quantize=quantize)
        except Exception as e:  # the trained winner must not be lost to a failed export: ship it on torch
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(staging, folder)
            log(f"exporting the winner failed ({type(e).__name__}: {e}); saved it for torch instead")
            return f"export failed: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"exported the winner to ONNX ({entry['quantize']}); its logits differ from torch's by at most "
        f"{entry['check']['max_abs_logit_diff']:.2g} on the check texts")
    return None


def _convertible(models: list[str], specs: dict, spare: float) -> tuple[list[str], list[dict]]:
    """`models` less those whose first load would convert them into the model cache for longer than `spare`
    seconds leave room to then time one of their rungs, and a skip record for each of those."""
    from headswap.bench.ladder import PROBE_GUESS
    from headswap.bench.report import _fmt_duration
    from headswap.models import conversion_seconds

    kept, skipped = [], []
    for m in models:
        convert = conversion_seconds(specs[m])
        timing = 2 * PROBE_GUESS.get(specs[m].kind, 30.0)    # the least room climb asks to time a rung
        if convert and convert + timing > spare:
            skipped.append({"model": m, "strategy": "all", "regime": "", "reason": (
                f"not in the model cache yet: converting it takes about {_fmt_duration(convert)} (once) and timing "
                f"a first rung {_fmt_duration(timing)} more, over the {_fmt_duration(max(spare, 0))} this budget "
                f"leaves; a run with a larger budget converts it for the next ones")})
        else:
            kept.append(m)
    return kept, skipped


def default_models() -> tuple[str, ...]:
    """DEFAULT_MODELS, and each of OPTIONAL_MODELS whose packages are installed. Installed is not chosen: each
    candidate is still timed on one batch and runs only when its estimate fits what is left of the budget."""
    from headswap.models import installed

    return DEFAULT_MODELS + tuple(m for m in OPTIONAL_MODELS if installed(m))


def auto(data_dir, budget_seconds: float, *, models: Sequence[str] | None = None, strategies="all",
         out="auto-out", quantize: str = "none", log: Callable[[str], None] = print,
         command: Sequence[str] | None = None, lr_search: bool = True, more_epochs: bool = True, blend: bool = True,
         clock: Callable[[], float] = time.perf_counter, started: float | None = None, ray_address: str | None = None,
         arm_cpus: float = 1, arm_gpus: float = 0, **settings) -> dict:
    """Run what fits in budget_seconds, pick the best on validation, ship it to OUT/model, score it on test.

    settings: TextClassifier settings for every candidate (epochs defaults to 1, as in bench: the least an arm
    plans). lr_search: the learning-rate neighbours of each fine-tuning rung compete as arms too. more_epochs: an
    arm's schedule may plan more epochs than `epochs` (as many as the budget could give it, at most
    MAX_PLANNED_EPOCHS), so a leader can train on. blend: ship the winner blended with the baseline where validation
    prefers it (headswap.blend). ray_address: run the arms on that Ray cluster, each with arm_cpus
    CPUs and arm_gpus GPUs. models: None for default_models() (minilm, smollm2-135m, and mpnet, gemma3-270m and
    multilingual-e5-small when installed). started: when the budget began, on `clock` (the CLI passes its process's
    start); None: now. A budget too small for the TF-IDF baseline is refused (ConfigError) before anything is written.
    """
    from headswap import __version__
    from headswap.atomic import write_text
    from headswap.bench.html_report import model_display_name
    from headswap.bench.climb import FINAL_MARGIN, Climb
    from headswap.bench.compete import arms_can_run, arms_spare, compete, prepare
    from headswap.bench.ladder import Costs, plan_ladder
    from headswap.bench.measure import _machine
    from headswap.bench.plan import parse_strategies
    from headswap.inference import feature_cache
    from headswap.bench.report import _error_fields, _fmt_duration, _metric_fields, write_json
    from headswap.models import resolve_model
    from headswap.runtime import QUANTIZE
    from headswap.settings import check as check_settings
    from headswap.text.language_fit import as_record, fit_note, rank_by_fit
    from headswap.settings import defaults
    from headswap.tfidf import TfidfClassifier

    from headswap.bench.report import check_run_folder
    check_run_folder(out, "out")
    from_start = started is not None
    started = clock() if started is None else started
    if not budget_seconds or budget_seconds <= 0:
        raise ConfigError(f"budget must be more than zero seconds, got {budget_seconds}")
    check_budget_length(budget_seconds, f"{budget_seconds:g} s")
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
    names = parse_strategies(strategies)
    if models is None:
        models = default_models()
    models = list(dict.fromkeys(str(m) for m in ([models] if isinstance(models, str) else models)))
    if not models:
        raise ConfigError("no models given")
    specs = {m: resolve_model(m) for m in models}          # fails early on a model that is not available
    train, validation, test, sizes = _data(data_dir, full["seed"], full["out_of_scope"])
    n_classes = len(set(train.labels))
    check_budget(budget_seconds, clock() - started, len(train), len(validation), len(test), n_classes)
    warm_up_charts()
    # A model not yet converted into the cache converts at its first load (the vocabulary check's), in the budget:
    # one whose conversion leaves no time to use it is skipped before it starts.
    spare = budget_seconds - (clock() - started) - FINAL_MARGIN * budget_seconds \
        - baseline_seconds(len(train), len(validation), len(test), n_classes)
    models, unconverted = _convertible(models, specs, spare)
    from headswap.quiet import no_progress_bars
    with no_progress_bars(not full.get("progress", True)):     # transformers' GGUF conversion draws its own bars
        models, fits = rank_by_fit(models, train.texts)     # bodies whose vocabulary fits the texts climb first
    ladder, skipped = plan_ladder({m: specs[m].kind for m in models}, names, settings["epochs"], full["regime"],
                                  full["head"], chunking=full.get("chunk_stride") is not None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    def left() -> float:
        return budget_seconds - (clock() - started)

    candidates = []      # one entry per (model, strategy, regime): what auto knew, did and measured
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "headswap_version": __version__, "machine": _machine(), "data": sizes,
            "command": list(command) if command is not None else None,
            "args": {"data_dir": str(data_dir), "models": models, "strategies": names, "out": str(out),
                     "budget_seconds": budget_seconds, "quantize": quantize, "lr_search": lr_search,
                     "more_epochs": more_epochs, "blend": blend, "ray_address": ray_address,
                     "settings": dict(settings)}}
    summary = {"budget_seconds": budget_seconds, "candidates": candidates,
               "warnings": _data_warnings(train, validation, full),
               "vocabulary_fit": as_record(fits)}
    results = {"meta": meta, "rows": [], "skipped": [dict(s, model_name=model_display_name(s["model"]))
                                                     for s in unconverted + skipped], "auto": summary}
    log(f"headswap auto: {len(train)} train, {len(validation)} validation, {len(test)} test texts; budget "
        f"{_fmt_duration(budget_seconds)} ({_fmt_duration(clock() - started)} of it spent starting up); a ladder "
        f"of {len(ladder)} rungs above the TF-IDF baseline -> {out}")
    for line in filter(None, [end_line(budget_seconds, clock() - started), fit_note(fits), *summary["warnings"]]):
        log(line)
    for u in unconverted:
        log(f"  skip {model_display_name(u['model'])}: {u['reason']}")

    # 1. The baseline: always, first.
    t0 = time.perf_counter()
    baseline = TfidfClassifier().fit(train.texts, train.labels)
    base_f1 = float(baseline.evaluate(validation.texts, validation.labels).f1("macro"))
    candidates.append({"model": "tfidf", "model_name": "tfidf", "strategy": baseline.strategy, "regime": "baseline",
                       "tier": "baseline", "status": "ran", "seconds": time.perf_counter() - t0, "validation_macro_f1": base_f1})
    log(f"  baseline TF-IDF + logistic regression: validation macro F1 {base_f1:.4f} "
        f"({time.perf_counter() - t0:.0f} s)")
    best, best_entry = baseline, candidates[0]

    # 2. The cheap rungs of the ladder within the budget (headswap.bench.climb); frozen rungs of one model share
    # one encoding pass. 3. The fine-tuning arms share what is left by successive halving (headswap.bench.compete).
    costs = Costs(len(train), len(validation), len(test), full["batch_size"], n_classes=n_classes, blends=blend)
    climb = Climb(settings, train, validation, costs, budget_seconds, left, log, best, best_entry,
                  finish=finish_seconds(len(test)))
    climb.misfit = {m for m, f in fits.items() if f is not None and not f.fits}
    fine = [r for r in ladder if r.fine_tuning]
    runner = None
    if ray_address and fine:      # joined first: a cluster that cannot be reached fails before any work
        from headswap.bench.arms import RayArms
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
    # 4. The winner averaged with the baseline's probabilities, where validation says it pays (headswap.blend).
    if blend and best is not baseline:
        best, best_entry = _blend(best, best_entry, baseline, validation, candidates, log)
    if getattr(climb, "halving", None):
        summary["halving"] = climb.halving
    climb = None
    for c in candidates:
        c.pop("plan", None)

    # 5. Ship the winner; 6. score it (as shipped) and the baseline on test, once.
    best_entry["winner"] = True
    summary["winner"] = {k: best_entry[k] for k in ("model_name", "strategy", "regime", "rung", "head", "tuned",
                                                    "validation_macro_f1") if k in best_entry}
    tuned = "".join(f" · {k} {v:g}" for k, v in (best_entry.get("tuned") or {}).items())
    log(f"winner on validation: {best_entry['model_name']} · {best_entry['strategy']} · {best_entry['regime']}"
        f"{tuned} (macro F1 {best_entry['validation_macro_f1']:.4f})")
    target, not_exported = _ship(best, out, quantize, log)
    summary.update(model_dir=str(target), exported=not_exported is None)
    if not_exported:
        summary["not_exported_because"] = not_exported
    if best is baseline:       # (headswap.api is not imported for it: 4 s on 2 loaded cores)
        shipped = baseline
    else:
        from headswap.api import load_model
        shipped = load_model(target, progress=False)
    del best
    gc.collect()
    for clf, entry, is_baseline in ((baseline, candidates[0], True), (shipped, best_entry, False)):
        if is_baseline and best_entry is candidates[0]:
            continue       # the baseline won: one row
        m = clf.evaluate(test.texts, test.labels)
        row = {"model": entry["model"], "model_name": entry["model_name"], "model_kind": "bag-of-n-grams"
               if entry["model"] == "tfidf" else specs[entry["model"]].kind, "strategy": entry["strategy"],
               "regime": entry["regime"], "epochs": entry.get("epochs"),
               **{k: entry[k] for k in ("tier", "rung", "head") if entry.get(k)},
               "baseline": entry["model"] == "tfidf", "status": "ok", "winner": entry is best_entry,
               "runtime": getattr(clf, "runtime_", None), **_metric_fields(m),
               "texts_per_second": float(m.extra.get("texts_per_second", 0.0)),
               "trainable_params": int(m.extra.get("trainable_params", 0) or 0),
               "total_params": int(m.extra.get("total_params", 0) or 0),
               "train_seconds": entry.get("seconds"), "validation_macro_f1": entry["validation_macro_f1"],
               **({"tuned": entry["tuned"]} if entry.get("tuned") else {})}
        if "calibration" in m.extra:
            row["calibration"] = m.extra["calibration"]
        if m.extra.get("out_of_scope"):     # headswap.oos: the chosen score, every score's AUROC, the decisions
            row["out_of_scope"] = m.extra["out_of_scope"]
        elif entry["model"] == "tfidf" and full["out_of_scope"]:   # the max-probability rule, as bench's baseline
            from headswap.bench.baseline import tfidf_reject_block
            row["out_of_scope"] = tfidf_reject_block(clf, validation, test, full["out_of_scope"],
                                                     full["reject_metric"], full["reject_target"])
        results["rows"].append(row)
        log(f"  test: {row['model_name']} · {row['strategy']}{' (winner)' if row['winner'] else ''}: macro F1 "
            f"{row['macro_f1']:.4f}, {row['texts_per_second']:.0f} texts/s ({row['runtime']})")

    def write_results() -> None:     # the wall time so far in each: the report, like the user, waits on the rest
        summary["elapsed_seconds"] = meta["elapsed_seconds"] = clock() - started
        summary["budget_used"] = summary["elapsed_seconds"] / budget_seconds
        write_json(results, out / "results.json")
        write_text(out / "results.md", render_markdown(results))

    summary["counted_from"] = "the start of the command" if from_start else "the call of auto()"
    from headswap.bench.report_text import arm_rows
    arms = arm_rows(summary)
    if any(a.get("slices") for a in arms):      # a chart of no slices would say nothing
        try:
            from headswap.plots import plot_arm_curves
            plot_arm_curves(arms, out / "arms.png")
            summary["arms_chart"] = "arms.png"
        except ImportError:
            pass
    write_results()
    try:
        from headswap.bench.html_report import write_html
        write_html(results, out / "report.html", title="headswap auto")
    except ImportError:
        pass
    write_results()
    log(f"wrote {target} and the report ({out / 'results.md'}); used {_fmt_duration(summary['elapsed_seconds'])} "
        f"of budget {_fmt_duration(budget_seconds)}")
    return results


def _blend(best, entry: dict, baseline, validation, candidates: list, log):
    """(classifier, entry) to ship: `best`, or best blended with the TF-IDF baseline when that scores higher on
    validation (the pass over validation is in the budget's reserve for shipping: Costs.reserve)."""
    from headswap.blend import fit_blend, same_labels
    row = {"model": entry["model"], "model_name": entry["model_name"], "strategy": f"{entry['strategy']} + tfidf-logreg",
           "regime": entry["regime"], "tier": "blend", **{k: entry[k] for k in ("head", "tuned") if entry.get(k)}}
    why = ("a multi-label winner is not blended" if getattr(best, "multi_label", False) else
           "a winner with an out-of-scope label is not blended: its reject threshold was tuned on its own "
           "probabilities, which averaging would change" if getattr(best, "out_of_scope", None) is not None else
           "the winner's classes are not the baseline's" if not same_labels(best, baseline) else None)
    if why:
        candidates.append({**row, "status": "skipped", "reason": why})
        log(f"  blend with TF-IDF not tried: {why}")
        return best, entry
    t0 = time.perf_counter()
    blend, scores, out_of_fold = fit_blend(best, baseline, validation.texts, validation.labels)
    w = max(scores, key=lambda k: (scores[k], -k))
    row.update({"rung": f"TF-IDF weight {w:g}", "status": "ran" if blend else "not better",
                "seconds": time.perf_counter() - t0, "validation_macro_f1": scores[w],
                "blend_scores": {f"{k:g}": v for k, v in scores.items()}, "out_of_fold_macro_f1": out_of_fold})
    folds = "" if out_of_fold is None else f", out of fold {out_of_fold:.4f}"
    line = (f"validation macro F1 {scores[w]:.4f}{folds}, the winner alone {scores[0.0]:.4f} "
            f"({row['seconds']:.0f} s)")
    candidates.append(row)
    if blend is None:
        row["reason"] = (f"weight {w:g}: {line}; not better than the winner alone out of fold" if w else
                         "no TF-IDF weight scored higher on validation than the winner alone")
        log(f"  blend with TF-IDF not kept (weight {w:g}): {line}")
        return best, entry
    log(f"  blend with TF-IDF (weight {w:g}): {line}")
    return blend, row


def _data_warnings(train, validation, settings: dict) -> list[str]:
    """What makes the winner's choice weak, said plainly: an out-of-scope label no text has, validation texts of
    one class."""
    from headswap.data.once import said
    from headswap.oos import unseen_label_note

    note = unseen_label_note(settings.get("out_of_scope"), list(train.labels) + list(validation.labels))
    if note:
        said(("unseen out of scope", settings["out_of_scope"]))     # each rung's fit would say it again
    lines = [note] if note else []
    classes = sorted(set(validation.labels) - {settings.get("out_of_scope")})
    if len(classes) > 1:
        return lines
    n = len(validation)
    return lines + [f"validation holds {n} text{'s' if n != 1 else ''}, all of one class ({classes[0]!r}"
                    + (f" besides out-of-scope {settings['out_of_scope']!r}" if n > validation.labels.count(classes[0])
                       else "")
                    + "): macro F1 on it cannot tell a model that tells the classes apart from one that does not, "
                      "so the winner is picked on little; give a validation.csv with texts of every class"]

