"""One self-contained HTML page for a bench (or auto) run: open it in any browser, offline.

    from headswap.reports.html_report import write_html
    write_html(json.load(open("bench-out/results.json")), "bench-out/report.html")

`results` is a bench results dict ({"meta": ..., "rows": [...], "skipped": [...]}, see headswap.bench),
optionally with an "auto" part. Everything is in the one file: inline CSS and the charts as base64 PNG data
URIs; no script, font or URL outside it. Sections have stable ids: summary, auto (when present), results,
quality-vs-speed, learning-curves, confusion, calibration (when a row has one) and skipped. A chart that
fails to draw becomes a line saying so; the rest of the page is kept. All text from the results (labels,
model names, errors) is HTML-escaped.

The markup is the Jinja2 template templates/report.html.j2 (autoescaped; headswap.reports.templating); this
module turns the results into its context: plain values (worded by headswap.reports.report_text), and small
mappings with a "kind" for the cells and lines that carry structure (see macros.html.j2's value()).
screenshot() and dump_dom() (headswap.reports.browser) drive a headless Chromium, for checking the page as a
browser renders it.
"""

from __future__ import annotations

import base64
import shlex
import tempfile
from pathlib import Path
from typing import Callable, Sequence

# Re-exported: the tests and benchmarks/render_report.py check the page through these.
from headswap.reports.browser import BROWSERS, dump_dom, find_browser, screenshot  # noqa: F401
from headswap.reports.report_text import (OOS_COLUMNS, duration, expected_lines, fmt_value, has_test, human, is_num,
                                        model_display_name, num, oos_cells, row_name, row_ok, rung_note, sorted_rows)
from headswap.reports.templating import environment
# label_audit builds its page from these blocks, under these names.

MAX_IMAGE_LABELS = 12     # confusion matrices with more classes are shaded HTML tables (a PNG gets unreadable)

SECTION_TITLES = (("summary", "Run"), ("auto", "Auto: candidates and winner"), ("arms", "Auto: where the budget went"),
                  ("results", "Results"),
                  ("quality-vs-speed", "Quality vs speed"), ("learning-curves", "Learning curves"),
                  ("confusion", "Confusion matrices"), ("calibration", "Calibration"),
                  ("out-of-scope", "Out of scope"), ("skipped", "Skipped"))


# ---- charts -------------------------------------------------------------------------------------------------------


class _Charts:
    """Draws headswap.reports.plots charts into a temporary folder and returns each as an image with a data URI; a chart
    that fails becomes an error line (and is remembered in .errors)."""

    def __init__(self, folder: Path):
        self.folder, self.count, self.errors = folder, 0, []

    def img(self, name: str, draw: Callable[[Path], object], alt: str) -> dict:
        self.count += 1
        path = self.folder / f"chart-{self.count}.png"
        try:
            draw(path)
            data = base64.b64encode(path.read_bytes()).decode("ascii")
        except Exception as e:  # one chart must not cost the page
            self.errors.append(f"{name}: {type(e).__name__}: {e}")
            return {"kind": "chart-error", "name": name, "error": f"{type(e).__name__}: {e}"}
        return {"kind": "image", "alt": alt, "src": f"data:image/png;base64,{data}"}


# ---- sections: each a mapping for the template, "id" first ---------------------------------------------------------


def _code(text) -> dict:
    return {"kind": "code", "text": text}


def _error(text) -> dict:
    return {"kind": "error", "text": text}


def _summary(results: dict) -> dict:
    meta = results.get("meta") or {}
    machine, args, data = meta.get("machine") or {}, meta.get("args") or {}, meta.get("data") or {}
    pairs = []
    if meta.get("date"):
        pairs.append(("date", meta["date"]))
    if meta.get("headswap_version"):
        pairs.append(("headswap", meta["headswap_version"]))
    if machine:
        bits = [machine.get("platform"),
                f"{machine['cpu_count']} CPUs" if machine.get("cpu_count") else None,
                f"{machine['memory_gb']} GB memory" if machine.get("memory_gb") else None,
                f"Python {machine['python']}" if machine.get("python") else None,
                (f"torch {machine['torch']}" + (f" with {machine['torch_threads']} threads"
                                                if machine.get("torch_threads") else ""))
                if machine.get("torch") else None,
                f"GPU {machine['gpu']}" if machine.get("gpu") else None]
        pairs.append(("machine", " · ".join(b for b in bits if b)))
    if args.get("data_dir"):
        pairs.append(("data", _code(args["data_dir"])))
    for split in ("train", "validation", "test"):
        info = data.get(split)
        if not isinstance(info, dict):
            continue
        if info.get("used") == 0 or (split == "validation" and not info.get("used")):
            pairs.append((split, info.get("source") or "held out of the training subset"))
            continue
        text = f"{info.get('used', '?')} of {info.get('rows', '?')} texts"
        classes = info.get("classes")
        if isinstance(classes, dict) and classes:
            text += f", {len(classes)} classes"
        if info.get("source") and info["source"] != info.get("file"):     # held out of a file, not a file of its own
            text += f": {info['source']}"
        pairs.append((split, text))
    given = args.get("settings") if isinstance(args.get("settings"), dict) else {}
    merged = {**given, **{k: v for k, v in args.items() if v is not None}}
    shown = (("budget_seconds", "budget"), ("epochs", "epochs"), ("regime", "regime"), ("batch_size", "batch size"),
             ("max_length", "max length"), ("body_lr", "body lr"), ("head_lr", "head lr"), ("seed", "seed"),
             ("train_limit", "train limit"), ("test_limit", "test limit"), ("quantize", "quantize"))
    settings = [f"{name} {duration(merged[key], '–') if key == 'budget_seconds' else fmt_value(merged[key])}"
                for key, name in shown if merged.get(key) is not None]
    settings += [f"{key.replace('_', ' ')} {fmt_value(value)}" for key, value in given.items()
                 if key not in dict(shown) and key != "progress" and value is not None
                 and isinstance(value, (str, int, float, bool))]
    if settings:
        pairs.append(("settings", ", ".join(settings)))
    command = meta.get("command")
    if command:
        text = shlex.join(str(c) for c in command) if isinstance(command, (list, tuple)) else str(command)
        pairs.append(("command", _code(text)))
    if is_num(meta.get("elapsed_seconds")):
        pairs.append(("elapsed", duration(meta["elapsed_seconds"], "–")))
    if meta.get("interrupted"):
        pairs.append(("interrupted", _error("yes: the run was stopped; only finished rows are shown")))
    for err in meta.get("plot_errors") or []:
        pairs.append(("chart error", _error(err)))
    return {"id": "summary", "pairs": pairs}


def _is_winner(candidate: dict, winner) -> bool:
    """Whether a candidate is the winner: the same model, strategy and regime (as far as the winner says), and
    the same learning rate when auto's search tuned one."""
    if not isinstance(winner, dict):
        return False
    wanted = {"model_name": winner.get("model_name") or winner.get("model"), "strategy": winner.get("strategy"),
              "regime": winner.get("regime")}
    wanted = {k: v for k, v in wanted.items() if v is not None}
    wanted.update({k: winner[k] for k in ("rung", "head") if winner.get(k) is not None})
    got = {"model_name": candidate.get("model_name") or candidate.get("model"),
           "strategy": candidate.get("strategy"), "regime": candidate.get("regime"),
           "rung": candidate.get("rung"), "head": candidate.get("head")}
    return bool(wanted) and all(got[k] == v for k, v in wanted.items()) \
        and candidate.get("tuned") == winner.get("tuned")


def _auto(auto: dict) -> dict:
    pairs = []
    winner = auto.get("winner")
    known = ("budget_seconds", "elapsed_seconds", "winner", "model_dir", "candidates")
    if "budget_seconds" in auto:
        pairs.append(("budget", duration(auto["budget_seconds"], "–")))
    if "elapsed_seconds" in auto:
        pairs.append(("elapsed", duration(auto["elapsed_seconds"], "–")))
    if winner is not None:
        shown = {"kind": "winner", "text": winner, "details": None}
        if isinstance(winner, dict):
            shown["text"] = row_name(winner)
            extra = {k: v for k, v in winner.items() if k not in ("model_name", "model", "strategy", "regime")}
            if extra:
                shown["details"] = ", ".join(f"{k.replace('_', ' ')} {fmt_value(v)}" for k, v in extra.items())
        pairs.append(("winner", shown))
    if auto.get("model_dir"):
        pairs.append(("model folder", _code(auto["model_dir"])))
    for key, value in auto.items():                 # anything else simple that auto records
        if key not in known and (value is None or isinstance(value, (str, int, float, bool))):
            pairs.append((key.replace("_", " "), fmt_value(value)))

    table = None
    candidates = [c for c in auto.get("candidates") or [] if isinstance(c, dict)]
    if candidates:
        header = [("tier", ""), ("model", ""), ("strategy", ""), ("regime", ""), ("rung", ""), ("status", ""),
                  ("estimated", "num"), ("took", "num"), ("validation macro F1", "num"), ("notes", "")]
        body = []
        for c in candidates:
            is_winner = bool(c.get("winner")) or (_is_winner(c, winner)
                                                  and c.get("status") not in ("skipped", "failed"))
            status = c.get("status")
            cls = "winner" if is_winner else ("failed" if status == "failed" else "")
            reason = {"kind": "reason", "text": rung_note({k: v for k, v in c.items() if k != "error"}),
                      "error": c.get("error")}
            body.append((cls, [c.get("tier") or "–", c.get("model_name") or c.get("model"), c.get("strategy"),
                               c.get("regime"), c.get("rung") or "–", {"kind": "status", "text": status,
                                                                       "winner": is_winner},
                               duration(c.get("estimated_seconds"), "–"), duration(c.get("seconds"), "–"),
                               num(c.get("validation_macro_f1")), reason]))
        table = {"header": header, "rows": body}
    return {"id": "auto", "pairs": pairs, "candidates": table}


def _arms(auto: dict, charts: "_Charts") -> dict:
    """auto's fine-tuning arms: their validation against time (a chart), slices, seconds and why each stopped."""
    from headswap.reports.report_text import arm_rows
    from headswap.reports.plots import plot_arm_curves

    arms = arm_rows(auto)
    header = [("arm", ""), ("slices (round: seconds)", ""), ("seconds", "num"), ("share of budget", "num"),
              ("epochs trained", "num"), ("validation macro F1", "num"), ("stopped", ""), ("why", "")]
    body = [("winner" if c.get("winner") else "", [
        c["name"], ", ".join(f"{'lead' if x['round'] == 'lead' else x['round'] + 1}: {x['seconds'] or 0:.0f}"
                             for x in c.get("slices") or []) or "–",
        duration(c.get("seconds"), "–"), f"{(c.get('seconds') or 0) / auto['budget_seconds']:.0%}",
        num(c.get("trained_epochs"), ".2f"), num(c.get("validation_macro_f1")),
        c.get("stopped_because") or c.get("status") or "–",
        c.get("reason") or ""]) for c in arms]
    return {"id": "arms", "chart": None if not any(c.get("slices") for c in arms) else
            charts.img("the arms' validation curves", lambda p: plot_arm_curves(arms, p),
                                              "validation macro F1 of each fine-tuning arm against time"),
            "table": {"header": header, "rows": body}}


def _notes_cell(row: dict, number: int) -> dict:
    lines = []
    if row.get("runtime"):
        lines.append(f"runtime {row['runtime']}")
    if "unparsed" in row and row_ok(row):
        lines.append(f"unparsed {row.get('unparsed', 0)}/{row.get('n_test', '?')}")
    if row.get("tied_embeddings"):
        lines.append("tied embeddings")
    failed = not row_ok(row)
    return {"kind": "notes", "lines": lines, "note": number if row.get("notes") else None,
            "plural": len(row.get("notes") or ()) > 1, "error": (row.get("error") or "failed") if failed else None,
            "traceback": row.get("traceback") if failed else None}


def _results(rows: Sequence[dict]) -> dict:
    if not rows:
        return {"id": "results", "table": None}
    base = next((r for r in rows if r.get("baseline") and row_ok(r) and is_num(r.get("macro_f1"))), None)
    header = [("#", "num"), ("model", "name"), ("strategy", "name"), ("regime", "name"), ("macro F1", "num"),
              ("Δ vs baseline", "num"), ("weighted F1", "num"), ("accuracy", "num"), ("trainable params", "num"),
              ("params / forward", "num"), ("train s", "num"), ("texts / s", "num"), ("peak RSS Δ MB", "num"),
              ("best epoch", "num"), ("notes", "")]
    body, long_notes = [], []
    for i, r in enumerate(sorted_rows(rows), 1):
        ok = row_ok(r)
        name = {"kind": "row-name", "text": r.get("model_name") or r.get("model") or "?",
                "baseline": bool(r.get("baseline")), "winner": bool(r.get("winner")), "failed": not ok}
        delta = (f"{r['macro_f1'] - base['macro_f1']:+.3f}" if ok and base is not None and not r.get("baseline")
                 and is_num(r.get("macro_f1")) else "–")
        cells = [str(i), name, r.get("strategy"), r.get("regime"),
                 num(r.get("macro_f1")), delta, num(r.get("weighted_f1")), num(r.get("accuracy")),
                 human(r.get("trainable_params")), human(r.get("effective_params")),
                 num(r.get("train_seconds"), ".1f"), num(r.get("texts_per_second"), ".1f"),
                 num(r.get("peak_rss_delta_mb"), ".0f"), r.get("best_epoch") or "–", _notes_cell(r, i)]
        if not ok:       # the error over the metric columns
            cells[4:] = [_notes_cell(r, i)]
        cls = "failed" if not ok else ("winner" if r.get("winner") else "baseline" if r.get("baseline") else "")
        body.append((cls, cells))
        if r.get("notes"):
            long_notes.append({"number": i, "name": row_name(r), "notes": list(r["notes"])})

    per_class = None
    ok_rows = [r for r in sorted_rows(rows) if row_ok(r) and isinstance(r.get("f1_per_class"), dict)]
    if ok_rows:
        labels = list(ok_rows[0].get("labels") or ok_rows[0]["f1_per_class"])
        for r in ok_rows[1:]:
            labels += [lab for lab in r.get("labels") or r["f1_per_class"] if lab not in labels]
        per_class = {"header": [("class", "")] + [(row_name(r), "num") for r in ok_rows],
                     "rows": [("", [lab] + [num(r["f1_per_class"].get(lab)) for r in ok_rows]) for lab in labels]}
    return {"id": "results", "table": {"header": header, "rows": body}, "long_notes": long_notes,
            "per_class": per_class}


def _heat_table(matrix, labels: Sequence[str]) -> dict:
    """A confusion matrix as a table shaded by the fraction of each true class (for many classes)."""
    rows = []
    for lab, counts in zip(labels, matrix):
        total = sum(counts) or 1
        # (count, shade, text colour: white on the dark cells, share of the true class)
        rows.append((lab, [(int(n), f"{n / total:.2f}", "#fff" if n / total > 0.5 else "#222", f"{n / total:.0%}")
                           for n in counts]))
    return {"kind": "heat", "labels": list(labels), "rows": rows}


def _confusions(rows: Sequence[dict], charts: _Charts) -> dict:
    from headswap.reports.plots import plot_confusion

    figures = []
    for r in sorted_rows(rows):
        matrix, labels = r.get("confusion"), r.get("labels")
        if not (row_ok(r) and matrix and labels):
            continue
        name = row_name(r)
        if len(labels) > MAX_IMAGE_LABELS:
            figures.append({"caption": [name], "wide": True, "body": _heat_table(matrix, [str(x) for x in labels])})
        else:
            img = charts.img(f"confusion matrix of {name}",
                             lambda p, m=matrix, lab=labels: plot_confusion(m, lab, p),
                             f"confusion matrix: {name}")
            figures.append({"caption": [name], "wide": False, "body": img})
    return {"id": "confusion", "figures": figures}


def _calibration(rows: Sequence[dict], charts: _Charts) -> dict:
    from headswap.reports.plots import plot_reliability

    figures = []
    for r in sorted_rows(rows):
        cal = r.get("calibration")
        if not isinstance(cal, dict):
            continue
        name = row_name(r)
        measures = []
        for key, what in (("before", "softmax"), ("after", "temperature-scaled")):
            m = cal.get(key)
            if isinstance(m, dict):
                measures.append(f"{what}: ECE {num(m.get('ece'), '.4f')}, Brier {num(m.get('brier'), '.4f')}")
        t = cal.get("temperature")
        if is_num(t):
            measures.append(f"temperature {t:.3f}")
        img = charts.img(f"reliability diagram of {name}", lambda p, c=cal, n=name: plot_reliability(c, p, n),
                         f"reliability diagram: {name}")
        figures.append({"caption": [name, "; ".join(measures)], "wide": False, "body": img})
    return {"id": "calibration", "figures": figures}


def _out_of_scope(rows: Sequence[dict], charts: _Charts) -> dict:
    """The out-of-scope table (oos_cells) and each row's score distributions."""
    from headswap.reports.plots import plot_oos_scores
    with_oos = [r for r in sorted_rows(rows) if row_ok(r) and isinstance(r.get("out_of_scope"), dict)]
    figures = []
    for r in with_oos:
        name, block = row_name(r), r["out_of_scope"]
        img = charts.img(f"out-of-scope scores of {name}", lambda p, b=block, n=name: plot_oos_scores(b, p, n),
                         f"out-of-scope score distributions: {name}")
        figures.append({"caption": [name], "wide": True, "body": img})
    return {"id": "out-of-scope", "table": {"header": [(c, "") for c in OOS_COLUMNS],
                                            "rows": [("", oos_cells(r)) for r in with_oos]}, "figures": figures,
            "expected": expected_lines(with_oos)}


def _skipped(skipped: Sequence[dict]) -> dict:
    if not skipped:
        return {"id": "skipped", "table": None}
    body = []
    for s in skipped:
        if not isinstance(s, dict):
            body.append(("", ["", "", "", s]))
            continue
        model = s.get("model_name") or (model_display_name(s["model"]) if s.get("model") else "?")
        body.append(("", [model, s.get("strategy"), s.get("regime") or "", s.get("reason")]))
    return {"id": "skipped", "table": {"header": [("model", ""), ("strategy", ""), ("regime", ""), ("reason", "")],
                                       "rows": body}}


# ---- the page -----------------------------------------------------------------------------------------------------


def render_html(results: dict, title: str | None = None) -> str:
    """The report page as one string (see the module docstring)."""
    from headswap.reports.plots import plot_learning_curves, plot_quality_vs_speed

    meta = results.get("meta") or {}
    rows = [r for r in results.get("rows") or [] if isinstance(r, dict)]
    auto = results.get("auto")
    if title is None:
        title = "headswap auto" if isinstance(auto, dict) else "headswap bench"
    sections = [_summary(results)]
    with tempfile.TemporaryDirectory(prefix="headswap-report-") as tmp:
        charts = _Charts(Path(tmp))
        if isinstance(auto, dict):
            sections.append(_auto(auto))
            if any(isinstance(c, dict) and c.get("halving") for c in auto.get("candidates") or []):
                sections.append(_arms(auto, charts))
        tested = has_test(results)     # without a test split there is nothing to show of test: no such sections
        if tested:
            sections.append(_results(rows))
            sections.append({"id": "quality-vs-speed", "chart": charts.img(
                "the quality vs speed chart", lambda p: plot_quality_vs_speed(rows, p),
                "macro F1 and inference texts/s per row")})
        trained = [r for r in rows if not r.get("baseline") and row_ok(r)
                   and any(is_num(h.get("score")) for h in r.get("history") or [] if isinstance(h, dict))]
        if trained:
            sections.append({"id": "learning-curves", "chart": charts.img(
                "the learning curves", lambda p: plot_learning_curves(trained, p),
                "validation macro F1 per epoch of each trained row")})
        if tested:
            sections.append(_confusions(rows, charts))
        if any(isinstance(r.get("calibration"), dict) for r in rows):
            sections.append(_calibration(rows, charts))
        if any(row_ok(r) and isinstance(r.get("out_of_scope"), dict) for r in rows):
            sections.append(_out_of_scope(rows, charts))
        sections.append(_skipped(results.get("skipped") or []))
    titles = dict(SECTION_TITLES)
    for section in sections:
        section["title"] = titles[section["id"]]
    return environment().get_template("report.html.j2").render(title=title, subtitle=meta.get("date") or "",
                                                                 sections=sections)


def write_html(results: dict, path, title: str | None = None) -> Path:
    """render_html(results, title) written atomically to `path`."""
    from headswap.saved.atomic import write_text
    return write_text(path, render_html(results, title))
