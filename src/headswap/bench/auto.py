"""`headswap auto`: pick the classifier to ship within a time budget.

    results = auto("data/emotion", budget_seconds=20 * 60, out="auto-out")

1. The data: DIR/train.csv, DIR/test.csv and DIR/validation.csv (without one, a stratified, seeded tenth of the
   training texts is held out as validation). Test is read once, at the end.
2. The TF-IDF + logistic-regression classifier (headswap.tfidf) always trains: it is the baseline and the
   fallback when nothing else fits.
3. The cost ladder (headswap.bench.ladder, run by headswap.bench.climb): `static`, then head-only rungs on frozen
   features (logistic regression, linear and MLP heads; one encoding pass per model), then fine-tuning, causal
   models last. Each rung's cost is estimated from a probe of a few batches per model and regime, corrected as the
   run measures. Cheap rungs run when they fit; a fine-tuning rung runs in full when it needs at most half of
   what is left, else it runs time-bounded with all that is left (validated every few steps, best weights kept)
   and the rungs after it are not run. Every rung not run says why.
4. With budget left, the best fine-tuned rung trains again with more epochs while its last epoch was its best,
   then at other learning rates (its body's): the neighbours of its rate on a half-decade grid (1e-5, 3e-5,
   1e-4, ...), then further in the direction that helped, while it helps (by more than LR_MARGIN of validation
   macro F1) and the rung's measured time fits what is left.
   Each try is a candidate of its own (`tuned`: the rate it ran at); a rate given on the command line is kept.
   The best validation macro F1 wins (never test). It is saved as OUT/model: a TF-IDF model directory, or a
   TextClassifier directory, exported to ONNX too when the strategy can be (and onnxruntime is installed).
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
from headswap.errors import ConfigError, HeadswapError

DEFAULT_MODELS = ("minilm", "smollm2-135m")
# Candidates by default only when installed; timed like the others.
OPTIONAL_MODELS = ("mpnet", "gemma3-270m", "multilingual-e5-small")
LR_GRID = tuple(sorted(float(f"{m}e{e}") for e in range(-7, 0) for m in (1, 3)))   # 1e-7, 3e-7, ..., 3e-1
LR_TRIES = 4          # most learning rates tried beyond the candidate's own
# A retrained rate must beat the best validation macro F1 so far by more than this to win or to lead the search
# on: macro F1 on a validation set of a few thousand texts moves by tenths of a point between seeds alone. (On
# emotion, 3 seeds, body_lr 3e-4 came within -0.2..+0.3 points of 1e-4 on validation, and was 0.7-2.5 points worse
# on test: without a margin the search drifted to it; BENCHMARKS.md "auto's learning-rate search".)
LR_MARGIN = 0.005
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
    return seconds


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
    from headswap.tfidf import TfidfClassifier

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


def default_models() -> tuple[str, ...]:
    """DEFAULT_MODELS, and each of OPTIONAL_MODELS whose packages are installed. Installed is not chosen: each
    candidate is still timed on one batch and runs only when its estimate fits what is left of the budget."""
    from headswap.models import installed

    return DEFAULT_MODELS + tuple(m for m in OPTIONAL_MODELS if installed(m))


def auto(data_dir, budget_seconds: float, *, models: Sequence[str] | None = None, strategies="all",
         out="auto-out", quantize: str = "none", log: Callable[[str], None] = print,
         command: Sequence[str] | None = None, lr_search: bool = True, more_epochs: bool = True,
         clock: Callable[[], float] = time.perf_counter, **settings) -> dict:
    """Run what fits in budget_seconds, pick the best on validation, ship it to OUT/model, score it on test.

    settings: TextClassifier settings for every candidate (epochs defaults to 1, as in bench). lr_search: spend
    what is left on the learning rate of the best trained candidate (see the module docstring). models: None for
    default_models() (minilm, smollm2-135m, and mpnet, gemma3-270m and multilingual-e5-small when installed).
    """
    from headswap import __version__
    from headswap.atomic import write_text
    from headswap.bench.html_report import model_display_name
    from headswap.bench.climb import Climb
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

    started = clock()
    if not budget_seconds or budget_seconds <= 0:
        raise ConfigError(f"budget must be more than zero seconds, got {budget_seconds}")
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
    models, fits = rank_by_fit(models, train.texts)         # bodies whose vocabulary fits the texts climb first
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
                     "more_epochs": more_epochs,
                     "settings": dict(settings)}}
    summary = {"budget_seconds": budget_seconds, "candidates": candidates, "vocabulary_fit": as_record(fits)}
    results = {"meta": meta, "rows": [], "skipped": [dict(s, model_name=model_display_name(s["model"]))
                                                     for s in skipped], "auto": summary}
    log(f"headswap auto: {len(train)} train, {len(validation)} validation, {len(test)} test texts; budget "
        f"{_fmt_duration(budget_seconds)}; a ladder of {len(ladder)} rungs above the TF-IDF baseline -> {out}")
    if fit_note(fits):
        log(fit_note(fits))

    # 1. The baseline: always, first.
    t0 = time.perf_counter()
    baseline = TfidfClassifier().fit(train.texts, train.labels)
    base_f1 = float(baseline.evaluate(validation.texts, validation.labels).f1("macro"))
    candidates.append({"model": "tfidf", "model_name": "tfidf", "strategy": baseline.strategy, "regime": "baseline",
                       "tier": "baseline", "status": "ran", "seconds": time.perf_counter() - t0, "validation_macro_f1": base_f1})
    log(f"  baseline TF-IDF + logistic regression: validation macro F1 {base_f1:.4f} "
        f"({time.perf_counter() - t0:.0f} s)")
    best, best_entry = baseline, candidates[0]

    # 2. The ladder, cheap to dear, within the budget (headswap.bench.climb); frozen rungs of one model share one
    # encoding pass. 3. With budget left: more epochs for the best fine-tuned rung, then its learning rate.
    costs = Costs(len(train), len(validation), len(test), full["batch_size"], n_classes=len(set(train.labels)))
    climb = Climb(settings, train, validation, costs, budget_seconds, left, log, best, best_entry)
    with feature_cache():
        climb.run_all(ladder)
    if more_epochs:
        climb.extend(share=0.5 if lr_search else 1.0)
    candidates.extend(climb.entries)
    best, best_entry = climb.best, climb.best_entry
    climb = None
    trained = [c for c in candidates[1:] if c.get("status") == "ran" and c["plan"].fine_tuning]
    if lr_search and trained and not any(c.get("time_bounded") for c in trained):
        top = max(trained, key=lambda c: c["validation_macro_f1"])
        for clf, entry in _lr_search(top, settings, train, validation, left, log):
            candidates.append(entry)
            if clf is not None and entry["validation_macro_f1"] > best_entry["validation_macro_f1"] + LR_MARGIN:
                best, best_entry = clf, entry
            clf = None
            gc.collect()
    elif lr_search and trained:
        log("  learning-rate search: not tried, the budget went to a time-bounded run")
    for c in candidates:
        c.pop("plan", None)

    # 5. Ship the winner; 6. score it (as shipped) and the baseline on test, once.
    best_entry["winner"] = True
    summary["winner"] = {k: best_entry[k] for k in ("model_name", "strategy", "regime", "rung", "head", "tuned",
                                                    "validation_macro_f1") if k in best_entry}
    tuned = "".join(f" · {k} {v:g}" for k, v in (best_entry.get("tuned") or {}).items())
    log(f"winner on validation: {best_entry['model_name']} · {best_entry['strategy']} · {best_entry['regime']}"
        f"{tuned} (macro F1 {best_entry['validation_macro_f1']:.4f})")
    from headswap.api import load_model
    target, not_exported = _ship(best, out, quantize, log)
    summary.update(model_dir=str(target), exported=not_exported is None)
    if not_exported:
        summary["not_exported_because"] = not_exported
    shipped = load_model(target, progress=False) if best is not baseline else baseline
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
    summary["elapsed_seconds"] = meta["elapsed_seconds"] = clock() - started
    summary["budget_used"] = summary["elapsed_seconds"] / budget_seconds
    write_json(results, out / "results.json")
    write_text(out / "results.md", render_markdown(results))
    try:
        from headswap.bench.html_report import write_html
        write_html(results, out / "report.html", title="headswap auto")
    except ImportError:
        pass
    log(f"wrote {target} and the report ({out / 'results.md'}) in {_fmt_duration(summary['elapsed_seconds'])}")
    return results


def lr_neighbours(rate: float) -> tuple[float | None, float | None]:
    """The LR_GRID values just above and just below `rate` (None past either end)."""
    above = [g for g in LR_GRID if g > rate * (1 + 1e-9)]
    below = [g for g in LR_GRID if g < rate * (1 - 1e-9)]
    return (above[0] if above else None), (below[-1] if below else None)


def _lr_search(top: dict, settings: dict, train, validation, left, log):
    """Yield (classifier or None, entry) for each learning rate tried on the `top` candidate: one step up and one
    down the grid, then on in the direction that beat `top`, while it keeps improving by more than LR_MARGIN and
    `top`'s measured time fits what is left of the budget. A rate the user set is not searched."""
    from headswap.bench.climb import train_one
    from headswap.bench.report import _fmt_duration
    from headswap.settings import default_body_lr, defaults

    p = top["plan"]
    name = "head_lr" if p.regime == "head-only" else "body_lr"
    if settings.get(name) is not None:
        log(f"  learning-rate search: {name} was given ({settings[name]:g}), so it is kept")
        return
    base = default_body_lr(p.regime) if name == "body_lr" else defaults()["head_lr"]
    up, down = lr_neighbours(base)
    queue = [(r, +1 if r == up else -1) for r in (up, down) if r is not None]
    best_f1, tries = top["validation_macro_f1"], 0
    log(f"  learning-rate search on {top['model_name']} · {p.strategy} · {p.regime}: {name} {base:g} gave "
        f"{best_f1:.4f}; trying {', '.join(f'{r:g}' for r, _ in queue)}")
    while queue and tries < LR_TRIES:
        rate, direction = queue.pop(0)
        entry = {"model": p.model, "model_name": top["model_name"], "strategy": p.strategy, "regime": p.regime,
                 "tuned": {name: rate}, "estimated_seconds": top["seconds"],
                 "reason": f"learning-rate search: {name} {rate:g} (the candidate ran at {base:g})"}
        if top["seconds"] > left():
            entry.update(status="skipped", reason=entry["reason"] + f"; needs about {_fmt_duration(top['seconds'])}, "
                                                                   f"{_fmt_duration(max(left(), 0))} left")
            log(f"  skip {name} {rate:g}: {entry['reason']}")
            yield None, entry
            return
        log(f"  {top['model_name']} · {p.strategy} · {name} {rate:g} ({_fmt_duration(left())} left)")
        tries += 1
        clf = train_one(p, {**settings, name: rate, "epochs": p.epochs}, entry, train, validation, log)
        yield clf, entry
        if clf is not None and entry["validation_macro_f1"] > best_f1 + LR_MARGIN:
            best_f1 = entry["validation_macro_f1"]
            queue = [(r, d) for r, d in queue if d == direction]       # the other way did not help, or is next
            step = lr_neighbours(rate)[0 if direction > 0 else 1]
            if step is not None and all(r != step for r, _ in queue):
                queue.append((step, direction))


def render_markdown(results: dict) -> str:
    """What ran, what was skipped and why, the winner, and the test scores of the winner and the baseline."""
    from headswap.bench.html_report import rung_note
    from headswap.bench.report import _cell, _fmt_duration, _num

    a = results["auto"]
    lines = ["# headswap auto", "", f"Budget {_fmt_duration(a['budget_seconds'])}, used "
             f"{_fmt_duration(a.get('elapsed_seconds', 0))}. Winner on validation: **{a['winner']['model_name']} · "
             f"{a['winner']['strategy']} · {a['winner']['regime']}**, saved to `{a.get('model_dir')}`"
             + ("" if a.get("exported") else f" (not exported: {a.get('not_exported_because')})") + ".", "",
             f"Budget used: {a.get('budget_used', 0):.0%}.", "", "## The ladder", "",
             "Cheap to dear: the baseline, static, heads on frozen features, fine-tuning, causal models last.", "",
             "| tier | model | strategy | regime | rung | status | estimated | took | validation macro F1 | notes |",
             "|---|---|---|---|---|---|---:|---:|---:|---|"]
    for c in a["candidates"]:
        name = f"**{c['model_name']}**" if c.get("winner") else c["model_name"]
        lines.append("| " + " | ".join(_cell(v) for v in (
            c.get("tier", "–"), name, c["strategy"], c["regime"], c.get("rung") or "–", c.get("status", "–"),
            _fmt_duration(c["estimated_seconds"]) if c.get("estimated_seconds") is not None else "–",
            _fmt_duration(c["seconds"]) if c.get("seconds") is not None else "–",
            _num(c.get("validation_macro_f1"), ".4f"), rung_note(c))) + " |")
    lines += ["", "## Test set (scored once, after the choice)", "",
              "| model | strategy | runtime | macro F1 | accuracy | texts/s |", "|---|---|---|---:|---:|---:|"]
    for r in results["rows"]:
        lines.append(f"| {_cell(r['model_name'])}{' (winner)' if r.get('winner') else ''} | {r['strategy']} | "
                     f"{r.get('runtime') or '–'} | {r['macro_f1']:.4f} | {r['accuracy']:.4f} | "
                     f"{r['texts_per_second']:.0f} |")
    if results.get("skipped"):
        lines += ["", "## Combinations not tried", ""]
        lines += [f"- {s['model_name']} · {s['strategy']}: {s['reason']}" for s in results["skipped"]]
    return "\n".join(lines) + "\n"

