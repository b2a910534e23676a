"""auto's record of a run: results.json (bench's layout, its rows the winner and the baseline scored on test, plus an
"auto" entry with every candidate), results.md, report.html and the arms' chart, written as the run ends."""

from __future__ import annotations

from pathlib import Path

from headswap.auto.records import Entry


def begin_results(args: dict, command, sizes: dict, skipped: list[dict], summary: dict) -> dict:
    """The results a run fills in as it goes: meta (when, what ran it, on which data, with which arguments), the
    rows scored on test (none yet), what was skipped before the ladder, and auto's `summary`."""
    import datetime

    from headswap import __version__
    from headswap.reports.html_report import model_display_name
    from headswap.trials.measure import machine_info

    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "headswap_version": __version__, "machine": machine_info(), "data": sizes,
            "command": list(command) if command is not None else None, "args": args}
    return {"meta": meta, "rows": [], "skipped": [dict(s, model_name=model_display_name(s["model"])) for s in skipped],
            "auto": summary}


def scored_rows(scored, test, validation, best_entry: Entry, baseline_entry: Entry, specs: dict, full: dict, log
              ) -> list[dict]:
    """The shipped winner and the baseline scored on test, once: a results row each (one when the baseline won)."""
    from headswap.trials.rows import metric_fields

    rows = []
    for clf, entry, is_baseline in scored:
        if test is None or (is_baseline and best_entry is baseline_entry):
            continue       # no test set; or the baseline won: one row
        m, known = clf.evaluate(test.texts, test.labels), entry.to_dict()
        row = {"model": entry.model, "model_name": entry.model_name, "model_kind": "bag-of-n-grams"
               if entry.model == "tfidf" else specs[entry.model].kind, "strategy": entry.strategy,
               "regime": entry.regime, "epochs": entry.epochs,
               **{k: known[k] for k in ("tier", "rung", "head") if known.get(k)},
               "baseline": entry.model == "tfidf", "status": "ok", "winner": entry is best_entry,
               "runtime": getattr(clf, "runtime_", None), **metric_fields(m),
               "texts_per_second": float(m.extra.get("texts_per_second", 0.0)),
               "trainable_params": int(m.extra.get("trainable_params", 0) or 0),
               "total_params": int(m.extra.get("total_params", 0) or 0),
               "train_seconds": entry.seconds, "validation_macro_f1": entry.validation_macro_f1,
               **{k: known[k] for k in ("tuned", "balance") if known.get(k)}}
        if "calibration" in m.extra:
            row["calibration"] = m.extra["calibration"]
        if m.extra.get("out_of_scope"):     # headswap.classifier.reject_option: the chosen score, every score's AUROC, the decisions
            row["out_of_scope"] = m.extra["out_of_scope"]
        elif entry.model == "tfidf" and full["out_of_scope"]:   # the max-probability rule, as bench's baseline
            from headswap.trials.rows import tfidf_reject_block
            row["out_of_scope"] = tfidf_reject_block(clf, validation, test, full["out_of_scope"],
                                                     full["reject_metric"], full["reject_target"])
        rows.append(row)
        log(f"  test: {row['model_name']} · {row['strategy']}{' (winner)' if row['winner'] else ''}: macro F1 "
            f"{row['macro_f1']:.4f}, {row['texts_per_second']:.0f} texts/s ({row['runtime']})")
    return rows


def write_report(results: dict, candidates: list[Entry], out: Path, budget, counted_from: str) -> None:
    """results.json, results.md, report.html and the arms' chart in `out`; every candidate a row of results.json
    (Entry.to_dict: its keys as they always were). The wall time so far goes in each: the report, like the user,
    waits on the rest."""
    from headswap.reports.report_text import arm_rows

    summary = results["auto"]
    summary["counted_from"] = counted_from
    summary["candidates"] = [c.to_dict() for c in candidates]
    arms = arm_rows(summary)
    if any(a.get("slices") for a in arms):      # a chart of no slices would say nothing
        try:
            from headswap.reports.plots import plot_arm_curves
            plot_arm_curves(arms, out / "arms.png")
            summary["arms_chart"] = "arms.png"
        except ImportError:
            pass
    _write(results, out, budget)
    try:
        from headswap.reports.html_report import write_html
        write_html(results, out / "report.html", title="headswap auto")
    except ImportError:
        pass
    _write(results, out, budget)


def _write(results: dict, out: Path, budget) -> None:
    from headswap.reports.markdown import auto_markdown
    from headswap.saved.atomic import write_text
    from headswap.trials.rows import write_json

    summary = results["auto"]
    summary["elapsed_seconds"], summary["budget_used"] = budget.elapsed()
    results["meta"]["elapsed_seconds"] = summary["elapsed_seconds"]
    write_json(results, out / "results.json")
    write_text(out / "results.md", auto_markdown(results))
