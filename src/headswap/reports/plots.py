"""Headless charts for benchmark and evaluation results (matplotlib, Agg; pyplot is never imported).

    plot_confusion(metrics, None, "confusion.png", "minilm / encoder-mlp")
    plot_learning_curves(rows, "learning_curves.png")
    plot_quality_vs_speed(rows, "quality_vs_speed.png")

Figures are built with ``matplotlib.figure.Figure`` and written through the Agg canvas, so nothing
depends on a display, on the global pyplot state, or on the MPLBACKEND a user has set.
`rows` are the row dicts of a benchmark's results.json (see headswap.bench).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

BASELINE_COLOR = "#7f7f7f"
ROW_COLOR = "#1f77b4"


def new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path) -> Path:
    from headswap.saved.atomic import atomic_path
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    return Path(path)


def row_label(row: dict) -> str:
    """Short display name of a benchmark row: 'model · strategy · regime'."""
    if row.get("label"):
        return str(row["label"])
    model = row.get("model_name") or row.get("model", "?")
    return f"{model} · {row.get('strategy', '?')} · {row.get('regime', '?')}"


def plot_confusion(metrics_or_matrix, labels: Sequence[str] | None, path, title: str | None = None) -> Path:
    """Confusion matrix (rows = true class, columns = predicted) as a PNG.

    `metrics_or_matrix` is a headswap Metrics (its labels are used when `labels` is None), a
    Metrics.to_dict() dict, or any square array of counts. Cells are shaded by the fraction of the true
    class (row-normalised recall) and annotated with the count and that fraction.
    """
    if hasattr(metrics_or_matrix, "confusion"):
        matrix = np.asarray(metrics_or_matrix.confusion)
        labels = list(labels) if labels is not None else list(metrics_or_matrix.labels)
    elif isinstance(metrics_or_matrix, dict) and "confusion_matrix" in metrics_or_matrix:
        matrix = np.asarray(metrics_or_matrix["confusion_matrix"])
        labels = list(labels) if labels is not None else list(metrics_or_matrix["labels"])
    else:
        matrix = np.asarray(metrics_or_matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"a confusion matrix must be square, got shape {matrix.shape}")
    k = matrix.shape[0]
    labels = [str(i) for i in range(k)] if labels is None else [str(lab) for lab in labels]
    if len(labels) != k:
        raise ValueError(f"{len(labels)} labels for a {k}x{k} confusion matrix")
    totals = matrix.sum(axis=1, keepdims=True)
    frac = np.divide(matrix, totals, out=np.zeros(matrix.shape, dtype=float), where=totals > 0)

    side = max(3.6, 1.0 + 0.75 * k)
    fig = new_figure(side + 1.2, side)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(frac, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="fraction of true class")
    long_names = max(map(len, labels)) > 5
    ax.set_xticks(range(k), labels, rotation=45 if long_names else 0, ha="right" if long_names else "center")
    ax.set_yticks(range(k), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    small = k > 6
    for i in range(k):
        for j in range(k):
            text = f"{int(matrix[i, j])}" if small else f"{int(matrix[i, j])}\n{frac[i, j]:.0%}"
            ax.text(j, i, text, ha="center", va="center", fontsize=8 if small else 9,
                    color="white" if frac[i, j] > 0.5 else "black")
    n, correct = int(matrix.sum()), int(np.trace(matrix))
    heading = [title] if title else []
    heading.append(f"accuracy {correct / n:.3f} ({correct}/{n})" if n else "no examples")
    ax.set_title("\n".join(heading), fontsize=10)
    return _save(fig, path)


def _scored_history(row: dict) -> list[tuple[int, float]]:
    points = []
    for h in row.get("history") or []:
        score = h.get("score")
        if score is not None and not (isinstance(score, float) and math.isnan(score)):
            points.append((int(h["epoch"]), float(score)))
    return points


def plot_learning_curves(rows: Sequence[dict], path, metric: str = "validation macro F1") -> Path:
    """Validation score per epoch of every trained row, on one chart (markers: with one epoch each row
    is a single point; rows are nudged sideways so ties stay visible). Rows without validation scores
    are left out; an empty chart says so."""
    curves = [(row_label(r), _scored_history(r)) for r in rows if r.get("status", "ok") == "ok"]
    curves = [(label, pts) for label, pts in curves if pts]
    fig = new_figure(8.0, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    markers = "osD^v<>pPX*h"
    max_epoch = 1
    # Rows often tie (and with one epoch each row is a single point): a small sideways offset per row
    # keeps every marker visible; the ticks stay on whole epochs.
    spread = min(0.3, 0.04 * (len(curves) - 1))
    for i, (label, pts) in enumerate(curves):
        xs, ys = zip(*pts)
        max_epoch = max(max_epoch, max(xs))
        shift = (i / (len(curves) - 1) - 0.5) * spread if len(curves) > 1 else 0.0
        ax.plot([x + shift for x in xs], ys, marker=markers[i % len(markers)], linestyle="-", markersize=7,
                label=label)
    if not curves:
        ax.text(0.5, 0.5, "no trained rows with validation scores", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_xticks(range(1, max_epoch + 1))
    ax.set_xlim(0.5, max_epoch + 0.5)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{metric} per epoch")
    if curves:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _save(fig, path)


def plot_quality_vs_speed(rows: Sequence[dict], path) -> Path:
    """Two panels sharing one row order (best macro F1 first): macro F1 bars, and inference texts/s bars
    on a log axis. The baseline row (row['baseline']) is grey; failed rows are left out."""
    ok = [r for r in rows if r.get("status", "ok") == "ok" and r.get("macro_f1") is not None]
    ok.sort(key=lambda r: -float(r["macro_f1"]))
    n = max(len(ok), 1)
    fig = new_figure(12.0, 1.2 + 0.42 * n)
    ax_f1 = fig.add_subplot(1, 2, 1)
    ax_speed = fig.add_subplot(1, 2, 2, sharey=ax_f1)
    if not ok:
        ax_f1.text(0.5, 0.5, "no successful rows", ha="center", va="center", transform=ax_f1.transAxes)
        return _save(fig, path)
    ys = np.arange(len(ok))
    labels = [row_label(r) + ("  (baseline)" if r.get("baseline") else "") for r in ok]
    colors = [BASELINE_COLOR if r.get("baseline") else ROW_COLOR for r in ok]
    f1 = [float(r["macro_f1"]) for r in ok]
    speed = [max(float(r.get("texts_per_second") or 0.0), 1e-3) for r in ok]
    ax_f1.barh(ys, f1, color=colors)
    for y, v in zip(ys, f1):
        ax_f1.text(min(v + 0.01, 0.9), y, f"{v:.3f}", va="center", fontsize=8)
    ax_f1.set_yticks(ys, labels, fontsize=8)
    ax_f1.invert_yaxis()
    ax_f1.set_xlim(0, 1.0)
    ax_f1.set_xlabel("macro F1 (test)")
    ax_f1.set_title("quality")
    ax_f1.grid(True, axis="x", alpha=0.3)
    ax_speed.barh(ys, speed, color=colors)
    ax_speed.set_xscale("log")
    for y, v in zip(ys, speed):
        ax_speed.text(v, y, f" {v:,.0f}" if v >= 10 else f" {v:.2g}", va="center", fontsize=8)
    ax_speed.set_xlim(min(speed) / 2, max(speed) * 8)
    from matplotlib.ticker import NullFormatter
    ax_speed.xaxis.set_minor_formatter(NullFormatter())   # the range spans over a decade: major ticks label it
    ax_speed.set_xlabel("inference texts/s (log scale)")
    ax_speed.set_title("speed")
    ax_speed.grid(True, axis="x", alpha=0.3)
    ax_speed.tick_params(axis="y", labelleft=False)
    # Above the panel titles whatever the height: a fixed figure fraction overlapped them with few rows.
    height = fig.get_figheight()
    fig.suptitle("macro F1 against inference speed (sorted by macro F1)", va="bottom",
                 y=fig.subplotpars.top + 0.35 / height)
    return _save(fig, path)


def plot_reliability(calibration: dict, path, title: str | None = None) -> Path:
    """Reliability diagram from headswap.decisions.calibration.report(): accuracy against confidence per bin, before
    and (when a temperature was fitted) after temperature scaling, with the diagonal of perfect calibration."""
    fig = new_figure(5.2, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([0, 1], [0, 1], color=BASELINE_COLOR, linestyle="--", linewidth=1, label="perfectly calibrated")
    series = [("before", "reliability_before", "#d62728", "softmax")]
    if calibration.get("temperature") is not None:
        t = calibration["temperature"]
        name = (f"temperatures {min(t):.2f}-{max(t):.2f}" if isinstance(t, list) else f"temperature {t:.2f}")
        series.append(("after", "reliability_after", ROW_COLOR, name))
    for key, bins_key, color, name in series:
        bins = [b for b in calibration[bins_key] if b["count"]]
        m = calibration[key]
        ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], marker="o", color=color,
                label=f"{name}: ECE {m['ece']:.3f}, Brier {m['brier']:.3f}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel(f"confidence of the predicted class ({calibration.get('bins', 15)} bins)")
    ax.set_ylabel("accuracy")
    ax.set_title(title or "reliability")
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path)


def plot_label_f1(metrics: dict, path, title: str | None = None) -> Path:
    """Multi-label evaluation: F1 per label (bars, sorted) with each label's support, and the macro average."""
    per = metrics["per_class"]
    order = sorted(per, key=lambda lab: per[lab]["f1"])
    fig = new_figure(7.0, max(3.0, 0.28 * len(order) + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    ax.barh(range(len(order)), [per[lab]["f1"] for lab in order], color=ROW_COLOR)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"{lab} ({per[lab]['support']})" for lab in order], fontsize=8)
    ax.axvline(metrics["macro"]["f1"], color=BASELINE_COLOR, linestyle="--",
               label=f"macro F1 {metrics['macro']['f1']:.3f}")
    ax.set_xlim(0, 1)
    ax.set_xlabel("F1 (label support in brackets)")
    ax.set_title(title or "F1 per label")
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def plot_oos_scores(block: dict, path, title: str | None = None) -> Path:
    """The distribution of each out-of-scope score over in-scope and out-of-scope texts (the histograms of
    headswap.classifier.reject_option.RejectOption.block's "distribution"), one panel per score, with its AUROC; the
    score in use marked."""
    dist = block.get("distribution") or {}
    names = [n for n, h in dist.items() if h.get("edges")]
    fig = new_figure(3.2 * max(len(names), 1), 2.8)
    for i, name in enumerate(names):
        h, ax = dist[name], fig.add_subplot(1, max(len(names), 1), i + 1)
        edges = np.asarray(h["edges"])
        for counts, colour, label in ((h["in_scope"], ROW_COLOR, "in scope"), (h["oos"], "#d62728", "out of scope")):
            c = np.asarray(counts, dtype=float)
            ax.stairs(c / max(c.sum(), 1), edges, fill=True, alpha=0.45, color=colour, label=label)
        auroc = (block.get("scores") or {}).get(name, {}).get("auroc")
        used = name == block.get("score")
        ax.set_title(f"{name}{' (used)' if used else ''}" + (f"\nAUROC {auroc:.3f}" if auroc is not None else ""),
                     fontsize=9)
        if used and block.get("threshold") is not None:
            # softmax's threshold is on the top probability; its score is 1 - that probability
            t = 1 - block["threshold"] if name == "softmax" else block["threshold"]
            ax.axvline(t, color="black", lw=1, ls="--")
        ax.set_xlabel("score (higher: more out of scope)", fontsize=8)
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.set_ylabel("share of texts", fontsize=8)
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_arm_curves(arms: Sequence[dict], path, metric: str = "validation macro F1") -> Path:
    """auto's fine-tuning arms against the clock: each arm's validation score at the time it was measured (seconds
    since the arms began), and its slices as bars under the curves, one lane per arm."""
    fig = new_figure(9.0, 5.2)
    ax = fig.add_subplot(1, 1, 1)
    markers = "osD^v<>pPX*h"
    shown = [a for a in arms if a.get("slices")]
    for i, a in enumerate(shown):
        color = f"C{i % 10}"
        pts = a.get("curve") or []
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker=markers[i % len(markers)], linestyle="-", markersize=5, color=color,
                    label=f"{a['name']} ({a.get('stopped_because') or a.get('status')})")
        lane = -0.04 - 0.03 * i
        for s in a["slices"]:
            if s.get("start") is not None and s.get("seconds") is not None:
                ax.plot([s["start"], s["start"] + s["seconds"]], [lane, lane], color=color, linewidth=5,
                        solid_capstyle="butt")
    if not shown:
        ax.text(0.5, 0.5, "no arm ran a slice", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("seconds since the arms began (bars: each arm's slices)")
    ax.set_ylabel(metric)
    ax.set_ylim(-0.06 - 0.03 * len(shown), 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{metric} of each arm against time")
    if shown:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _save(fig, path)


def plot_curves_over_time(curves: dict[str, list[tuple[float, float]]], path, metric: str = "validation macro F1",
                          title: str | None = None) -> Path:
    """Score against wall-clock minutes, one line per run: `curves` maps a label to its (seconds since the run
    started, score) points, e.g. one per validated epoch. What a budget buys, where epochs cost differently."""
    fig = new_figure(8.0, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    markers = "osD^v<>pPX*h"
    for i, (label, pts) in enumerate(curves.items()):
        if pts:
            xs, ys = zip(*sorted(pts))
            ax.plot([x / 60 for x in xs], ys, marker=markers[i % len(markers)], linestyle="-", markersize=5,
                    label=label)
    ax.set_xlabel("minutes since the run started (model load and caching included)")
    ax.set_ylabel(metric)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title or f"{metric} over time")
    if any(curves.values()):
        ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)
