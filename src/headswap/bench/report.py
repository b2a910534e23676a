"""Bench results as files and log lines: results.json, results.md (headswap.reports.markdown), the charts, the
per-row confusion matrices and the progress lines."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from headswap.reports.html_report import write_html
from headswap.reports.markdown import bench_markdown
from headswap.reports.report_text import duration
from headswap.trials.rows import write_json


def write_outputs(results: dict, out: Path, log: Callable[[str], None] = print) -> list[Path]:
    """results.json, results.md, learning_curves.png, quality_vs_speed.png (confusion PNGs are per row) and
    report.html (all of it on one self-contained page)."""
    from headswap.reports.plots import plot_learning_curves, plot_quality_vs_speed

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
    md.write_text(bench_markdown(results), encoding="utf-8")
    written.append(md)
    try:
        written.append(write_html(results, out / "report.html"))
    except Exception as e:  # the page must not cost the numbers either
        log(f"could not write report.html: {type(e).__name__}: {e}")
        results["meta"].setdefault("plot_errors", []).append(f"report.html: {type(e).__name__}: {e}")
    write_json(results, out / "results.json")
    return written


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
    from headswap.reports.plots import plot_confusion

    if row.get("status") != "ok":
        return
    name = _confusion_name(row, used)
    try:
        plot_confusion(row["confusion"], row["labels"], out / name,
                       f"{row['model_name']} · {row['strategy']} · {row['regime']}")
        row["confusion_png"] = name
    except Exception as e:
        log(f"could not draw {name}: {type(e).__name__}: {e}")


def _describe_estimate(est: dict, epochs: int) -> str:
    speed = f" at ~{_rate(est['texts_per_second'])} texts/s" if est["texts_per_second"] else ""
    train = (f"training ~{duration(est['train'])} ({epochs} epoch{'s' if epochs != 1 else ''}), "
             if epochs else "")
    return (f"estimated {duration(est['total'])} (load {est['load']:.0f} s, {train}"
            f"test ~{duration(est['test'])}{speed})")


def _log_row(row: dict, log) -> None:
    if row.get("status") != "ok":
        log(f"      failed: {row.get('error')}")
        return
    extra = f", unparsed {row['unparsed']}" if "unparsed" in row else ""
    est = f" (estimated {duration(row['estimated_seconds'])})" if row.get("estimated_seconds") else ""
    log(f"      macro F1 {row['macro_f1']:.3f}, accuracy {row['accuracy']:.3f}, "
        f"{_rate(row['texts_per_second'])} texts/s"
        f"{extra}; took {duration(row['wall_seconds'])}{est}")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"

