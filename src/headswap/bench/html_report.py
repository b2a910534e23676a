"""One self-contained HTML page for a bench (or auto) run: open it in any browser, offline.

    from headswap.bench.html_report import write_html
    write_html(json.load(open("bench-out/results.json")), "bench-out/report.html")

`results` is a bench results dict ({"meta": ..., "rows": [...], "skipped": [...]}, see headswap.bench),
optionally with an "auto" part. Everything is in the one file: inline CSS and the charts as base64 PNG data
URIs; no script, font or URL outside it. Sections have stable ids: summary, auto (when present), results,
quality-vs-speed, learning-curves, confusion, calibration (when a row has one) and skipped. A chart that
fails to draw becomes a line saying so; the rest of the page is kept. All text from the results (labels,
model names, errors) is HTML-escaped.

screenshot() and dump_dom() drive a headless Chromium, for checking the page as a browser renders it.
"""

from __future__ import annotations

import base64
import math
import shlex
import shutil
import subprocess
import tempfile
from html import escape
from pathlib import Path
from typing import Callable, Sequence

MAX_IMAGE_LABELS = 12     # confusion matrices with more classes are shaded HTML tables (a PNG gets unreadable)

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       margin: 0; color: #222; background: #fff; line-height: 1.4; }
main { max-width: 1160px; margin: 0 auto; padding: 16px 20px 40px; }
h1 { font-size: 1.6em; margin: 0.4em 0 0.2em; }
h2 { font-size: 1.25em; margin: 1.6em 0 0.5em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
h3 { font-size: 1em; margin: 1em 0 0.4em; }
nav { font-size: 0.9em; color: #555; }
nav a { color: #1f5fa8; margin-right: 0.8em; text-decoration: none; }
table { border-collapse: collapse; font-size: 0.86em; margin: 0.4em 0; }
th, td { border: 1px solid #d4d4d4; padding: 3px 5px; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num, td.name { white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafafa; }
tr.baseline td { background: #eef0f3; }
tr.failed td { background: #fdecec; }
tr.winner td { background: #e3f4e1; font-weight: 600; }
.tag { display: inline-block; font-size: 0.78em; padding: 0 5px; border-radius: 3px; margin-left: 4px;
       background: #7f7f7f; color: #fff; font-weight: normal; }
.tag.failed { background: #c62828; }
.tag.winner { background: #2e7d32; }
.error { color: #b71c1c; }
.cellwrap { max-width: 30em; overflow-wrap: break-word; }
a.note { white-space: nowrap; }
ul.notes { font-size: 0.86em; color: #444; padding-left: 1.2em; }
.muted { color: #666; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0.4em 0; font-size: 0.92em; }
dl.kv dt { color: #555; }
dl.kv dd { margin: 0; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 6px; overflow-x: auto; white-space: pre-wrap; }
.scroll { overflow-x: auto; max-width: 100%; }
img.chart { max-width: 100%; height: auto; border: 1px solid #eee; }
.grid { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
figure { margin: 0; max-width: 100%; }
.grid figure { flex: 0 1 540px; }
.grid figure.wide { flex-basis: 100%; }
figcaption { font-size: 0.85em; color: #444; margin-bottom: 4px; }
table.heat td { text-align: right; font-size: 0.9em; padding: 2px 4px; min-width: 2.2em; }
table.heat th.col { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; font-weight: normal; }
table.heat th.row { white-space: nowrap; font-weight: normal; }
details summary { cursor: pointer; color: #555; font-size: 0.9em; }
"""

SECTION_TITLES = (("summary", "Run"), ("auto", "Auto: candidates and winner"), ("results", "Results"),
                  ("quality-vs-speed", "Quality vs speed"), ("learning-curves", "Learning curves"),
                  ("confusion", "Confusion matrices"), ("calibration", "Calibration"),
                  ("out-of-scope", "Out of scope"), ("skipped", "Skipped"))


# ---- small formatting helpers -------------------------------------------------------------------------------------


def _e(value) -> str:
    return escape("" if value is None else str(value), quote=True)


def _is_num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _num(value, fmt: str = ".3f") -> str:
    return format(value, fmt) if _is_num(value) else "–"


def _human(n) -> str:
    if not _is_num(n):
        return "–"
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _seconds(value) -> str:
    if not _is_num(value):
        return "–"
    if value < 90:
        return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
    if value < 5400:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _ok(row: dict) -> bool:
    return row.get("status", "ok") == "ok"


def model_display_name(ref: str) -> str:
    """'minilm' stays; a folder or file path becomes its last component (without .gguf)."""
    p = Path(str(ref))
    if len(p.parts) <= 1 and not p.suffix:
        return str(ref)
    name = p.name or str(ref)
    return name[:-5] if name.lower().endswith(".gguf") else name


def _row_name(row: dict) -> str:
    model = row.get("model_name") or row.get("model") or "?"
    return f"{model} · {row.get('strategy', '?')} · {row.get('regime', '?')}"


def _sorted_rows(rows: Sequence[dict]) -> list[dict]:
    """Best macro F1 first (as results.md), then rows without a score (failed) in run order."""
    scored = [r for r in rows if _ok(r) and _is_num(r.get("macro_f1"))]
    scored.sort(key=lambda r: -r["macro_f1"])
    return scored + [r for r in rows if not (_ok(r) and _is_num(r.get("macro_f1")))]


def _kv(pairs: Sequence[tuple[str, str]]) -> str:
    """A definition list; values are HTML already (escape before)."""
    items = "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in pairs)
    return f'<dl class="kv">{items}</dl>'


def _table(header: Sequence[tuple[str, str]], body: Sequence[tuple[str, Sequence[str]]], cls: str = "") -> str:
    """header: (text, class) per column; body: (tr class, cells as HTML) per row. A row with fewer cells than
    columns stretches its last cell over the rest."""
    ths = "".join(f'<th class="{c}">{_e(h)}</th>' if c else f"<th>{_e(h)}</th>" for h, c in header)
    trs = []
    for tr_cls, cells in body:
        tds = "".join(f'<td class="{c}">{cell}</td>' if c else f"<td>{cell}</td>"
                      for (_h, c), cell in zip(header, cells[:-1]))
        span = len(header) - len(cells) + 1
        c = header[len(cells) - 1][1] if span == 1 else ""
        tds += (f'<td colspan="{span}">' if span > 1 else f'<td class="{c}">' if c else "<td>") + f"{cells[-1]}</td>"
        trs.append(f'<tr class="{tr_cls}">{tds}</tr>' if tr_cls else f"<tr>{tds}</tr>")
    table_cls = f' class="{cls}"' if cls else ""
    return (f'<div class="scroll"><table{table_cls}><thead><tr>{ths}</tr></thead>'
            f'<tbody>{"".join(trs)}</tbody></table></div>')


# ---- charts -------------------------------------------------------------------------------------------------------


class _Charts:
    """Draws headswap.plots charts into a temporary folder and returns them as <img> tags with data URIs;
    a chart that fails becomes an error line (and is remembered in .errors)."""

    def __init__(self, folder: Path):
        self.folder, self.count, self.errors = folder, 0, []

    def img(self, name: str, draw: Callable[[Path], object], alt: str) -> str:
        self.count += 1
        path = self.folder / f"chart-{self.count}.png"
        try:
            draw(path)
            data = base64.b64encode(path.read_bytes()).decode("ascii")
        except Exception as e:  # one chart must not cost the page
            self.errors.append(f"{name}: {type(e).__name__}: {e}")
            return f'<p class="error">could not draw {_e(name)}: {_e(type(e).__name__)}: {_e(e)}</p>'
        return f'<img class="chart" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


# ---- sections -----------------------------------------------------------------------------------------------------


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}">\n<h2>{_e(title)}</h2>\n{body}\n</section>'


def _summary(results: dict) -> str:
    meta = results.get("meta") or {}
    machine, args, data = meta.get("machine") or {}, meta.get("args") or {}, meta.get("data") or {}
    pairs = []
    if meta.get("date"):
        pairs.append(("date", _e(meta["date"])))
    if meta.get("headswap_version"):
        pairs.append(("headswap", _e(meta["headswap_version"])))
    if machine:
        bits = [machine.get("platform"),
                f"{machine['cpu_count']} CPUs" if machine.get("cpu_count") else None,
                f"{machine['memory_gb']} GB memory" if machine.get("memory_gb") else None,
                f"Python {machine['python']}" if machine.get("python") else None,
                (f"torch {machine['torch']}" + (f" with {machine['torch_threads']} threads"
                                                if machine.get("torch_threads") else ""))
                if machine.get("torch") else None]
        pairs.append(("machine", _e(" · ".join(b for b in bits if b))))
    if args.get("data_dir"):
        pairs.append(("data", f"<code>{_e(args['data_dir'])}</code>"))
    for split in ("train", "validation", "test"):
        info = data.get(split)
        if not isinstance(info, dict):
            continue
        if split == "validation" and not info.get("file"):
            pairs.append(("validation", "held out of the training subset"))
            continue
        text = f"{info.get('used', '?')} of {info.get('rows', '?')} texts"
        classes = info.get("classes")
        if isinstance(classes, dict) and classes:
            text += f", {len(classes)} classes"
        pairs.append((split, _e(text)))
    given = args.get("settings") if isinstance(args.get("settings"), dict) else {}
    merged = {**given, **{k: v for k, v in args.items() if v is not None}}
    shown = (("budget_seconds", "budget"), ("epochs", "epochs"), ("regime", "regime"), ("batch_size", "batch size"),
             ("max_length", "max length"), ("body_lr", "body lr"), ("head_lr", "head lr"), ("seed", "seed"),
             ("train_limit", "train limit"), ("test_limit", "test limit"), ("quantize", "quantize"))
    settings = [f"{name} {_seconds(merged[key]) if key == 'budget_seconds' else _fmt_value(merged[key])}"
                for key, name in shown if merged.get(key) is not None]
    settings += [f"{key.replace('_', ' ')} {_fmt_value(value)}" for key, value in given.items()
                 if key not in dict(shown) and key != "progress" and value is not None
                 and isinstance(value, (str, int, float, bool))]
    if settings:
        pairs.append(("settings", _e(", ".join(settings))))
    command = meta.get("command")
    if command:
        text = shlex.join(str(c) for c in command) if isinstance(command, (list, tuple)) else str(command)
        pairs.append(("command", f"<code>{_e(text)}</code>"))
    if _is_num(meta.get("elapsed_seconds")):
        pairs.append(("elapsed", _e(_seconds(meta["elapsed_seconds"]))))
    if meta.get("interrupted"):
        pairs.append(("interrupted", '<span class="error">yes: the run was stopped; only finished rows are '
                                     'shown</span>'))
    for err in meta.get("plot_errors") or []:
        pairs.append(("chart error", f'<span class="error">{_e(err)}</span>'))
    return _kv(pairs) if pairs else '<p class="muted">no run metadata</p>'


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


def _auto(auto: dict) -> str:
    pairs = []
    winner = auto.get("winner")
    known = ("budget_seconds", "elapsed_seconds", "winner", "model_dir", "candidates")
    if "budget_seconds" in auto:
        pairs.append(("budget", _e(_seconds(auto["budget_seconds"]))))
    if "elapsed_seconds" in auto:
        pairs.append(("elapsed", _e(_seconds(auto["elapsed_seconds"]))))
    if winner is not None:
        if isinstance(winner, dict):
            text = _e(_row_name(winner))
            extra = {k: v for k, v in winner.items() if k not in ("model_name", "model", "strategy", "regime")}
            if extra:
                details = ", ".join(f"{k.replace('_', ' ')} {_fmt_value(v)}" for k, v in extra.items())
                text += f' <span class="muted">({_e(details)})</span>'
        else:
            text = _e(winner)
        pairs.append(("winner", f'<strong>{text}</strong>'))
    if auto.get("model_dir"):
        pairs.append(("model folder", f"<code>{_e(auto['model_dir'])}</code>"))
    for key, value in auto.items():                 # anything else simple that auto records
        if key not in known and (value is None or isinstance(value, (str, int, float, bool))):
            pairs.append((key.replace("_", " "), _e(_fmt_value(value))))
    parts = [_kv(pairs)] if pairs else []

    candidates = [c for c in auto.get("candidates") or [] if isinstance(c, dict)]
    if candidates:
        header = [("tier", ""), ("model", ""), ("strategy", ""), ("regime", ""), ("rung", ""), ("status", ""),
                  ("estimated", "num"), ("took", "num"), ("validation macro F1", "num"), ("notes", "")]
        body = []
        for c in candidates:
            is_winner = bool(c.get("winner")) or (_is_winner(c, winner)
                                                  and c.get("status") not in ("skipped", "failed"))
            status = c.get("status")
            status_html = _e(status) + (' <span class="tag winner">winner</span>' if is_winner else "")
            cls = "winner" if is_winner else ("failed" if status == "failed" else "")
            body.append((cls, [_e(c.get("tier") or "–"), _e(c.get("model_name") or c.get("model")),
                               _e(c.get("strategy")), _e(c.get("regime")), _e(c.get("rung") or "–"), status_html,
                               _e(_seconds(c.get("estimated_seconds"))), _e(_seconds(c.get("seconds"))),
                               _e(_num(c.get("validation_macro_f1"))), _reason(c)]))
        parts.append("<h3>Candidates</h3>" + _table(header, body))
    return "\n".join(parts) if parts else '<p class="muted">no auto details recorded</p>'


def _reason(candidate: dict) -> str:
    reason = _e(rung_note({k: v for k, v in candidate.items() if k != "error"}))
    if candidate.get("error"):
        reason += f'<div class="error cellwrap">{_e(candidate["error"])}</div>'
    return reason


def _fmt_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _notes_cell(row: dict, number: int) -> str:
    notes = []
    if row.get("runtime"):
        notes.append(_e(f"runtime {row['runtime']}"))
    if "unparsed" in row and _ok(row):
        notes.append(_e(f"unparsed {row.get('unparsed', 0)}/{row.get('n_test', '?')}"))
    if row.get("tied_embeddings"):
        notes.append("tied embeddings")
    if row.get("notes"):
        notes.append(f'<a class="note" href="#note-{number}">see note{"s" if len(row["notes"]) > 1 else ""}</a>')
    if not _ok(row):
        error = _e(row.get("error") or "failed")
        if row.get("traceback"):
            error += f"<details><summary>traceback</summary><pre>{_e(row['traceback'])}</pre></details>"
        notes.append(f'<div class="error">{error}</div>')
    return "<br>".join(notes)


def _results(rows: Sequence[dict]) -> str:
    if not rows:
        return '<p class="muted">no rows</p>'
    base = next((r for r in rows if r.get("baseline") and _ok(r) and _is_num(r.get("macro_f1"))), None)
    header = [("#", "num"), ("model", "name"), ("strategy", "name"), ("regime", "name"), ("macro F1", "num"),
              ("Δ vs baseline", "num"), ("weighted F1", "num"), ("accuracy", "num"), ("trainable params", "num"),
              ("params / forward", "num"), ("train s", "num"), ("texts / s", "num"), ("peak RSS Δ MB", "num"),
              ("best epoch", "num"), ("notes", "")]
    body, long_notes = [], []
    for i, r in enumerate(_sorted_rows(rows), 1):
        ok = _ok(r)
        name = _e(r.get("model_name") or r.get("model") or "?")
        if r.get("baseline"):
            name = f'<strong>{name}</strong> <span class="tag">baseline</span>'
        if r.get("winner"):
            name += ' <span class="tag winner">winner</span>'
        if not ok:
            name += ' <span class="tag failed">failed</span>'
        delta = (f"{r['macro_f1'] - base['macro_f1']:+.3f}" if ok and base is not None and not r.get("baseline")
                 and _is_num(r.get("macro_f1")) else "–")
        cells = [str(i), name, _e(r.get("strategy")), _e(r.get("regime")),
                 _num(r.get("macro_f1")), delta, _num(r.get("weighted_f1")), _num(r.get("accuracy")),
                 _human(r.get("trainable_params")), _human(r.get("effective_params")),
                 _num(r.get("train_seconds"), ".1f"), _num(r.get("texts_per_second"), ".1f"),
                 _num(r.get("peak_rss_delta_mb"), ".0f"), _e(r.get("best_epoch") or "–"), _notes_cell(r, i)]
        if not ok:       # the error over the metric columns
            cells[4:] = [_notes_cell(r, i)]
        cls = "failed" if not ok else ("winner" if r.get("winner") else "baseline" if r.get("baseline") else "")
        body.append((cls, cells))
        if r.get("notes"):
            items = "".join(f"<li>{_e(note)}</li>" for note in r["notes"])
            long_notes.append(f'<li id="note-{i}">#{i} {_e(_row_name(r))}<ul>{items}</ul></li>')
    parts = ["<p class=\"muted\">Test set, best macro F1 first. Δ is against the baseline; "
             "texts / s is test-set inference; params / forward counts each tensor a forward pass uses once.</p>",
             _table(header, body, "results")]
    if long_notes:
        parts.append(f'<ul class="notes">{"".join(long_notes)}</ul>')

    ok_rows = [r for r in _sorted_rows(rows) if _ok(r) and isinstance(r.get("f1_per_class"), dict)]
    if ok_rows:
        labels = list(ok_rows[0].get("labels") or ok_rows[0]["f1_per_class"])
        for r in ok_rows[1:]:
            labels += [lab for lab in r.get("labels") or r["f1_per_class"] if lab not in labels]
        header = [("class", "")] + [(_row_name(r), "num") for r in ok_rows]
        body = [("", [_e(lab)] + [_num(r["f1_per_class"].get(lab)) for r in ok_rows]) for lab in labels]
        parts.append('<h3 id="f1-per-class">F1 per class</h3>' + _table(header, body, "f1"))
    return "\n".join(parts)


def _heat_table(matrix, labels: Sequence[str]) -> str:
    """A confusion matrix as a table shaded by the fraction of each true class (for many classes)."""
    head = "".join(f'<th class="col">{_e(lab)}</th>' for lab in labels)
    trs = []
    for lab, counts in zip(labels, matrix):
        total = sum(counts) or 1
        cells = []
        for n in counts:
            frac = n / total
            color = "#fff" if frac > 0.5 else "#222"
            cells.append(f'<td style="background: rgba(31, 119, 180, {frac:.2f}); color: {color}" '
                         f'title="{frac:.0%}">{int(n)}</td>')
        trs.append(f'<tr><th class="row">{_e(lab)}</th>{"".join(cells)}</tr>')
    return (f'<div class="scroll"><table class="heat"><thead><tr><th>true \\ predicted</th>{head}</tr></thead>'
            f'<tbody>{"".join(trs)}</tbody></table></div>')


def _confusions(rows: Sequence[dict], charts: _Charts) -> str:
    from headswap.plots import plot_confusion

    figures = []
    for r in _sorted_rows(rows):
        matrix, labels = r.get("confusion"), r.get("labels")
        if not (_ok(r) and matrix and labels):
            continue
        name = _row_name(r)
        caption = f"<figcaption>{_e(name)}</figcaption>"
        if len(labels) > MAX_IMAGE_LABELS:
            figures.append(f'<figure class="wide">{caption}{_heat_table(matrix, [str(x) for x in labels])}</figure>')
        else:
            img = charts.img(f"confusion matrix of {name}",
                             lambda p, m=matrix, lab=labels: plot_confusion(m, lab, p),
                             f"confusion matrix: {name}")
            figures.append(f"<figure>{caption}{img}</figure>")
    if not figures:
        return '<p class="muted">no rows with a confusion matrix</p>'
    return ('<p class="muted">Rows are the true class, columns the predicted one; shading is the fraction of the '
            'true class.</p>\n<div class="grid">' + "\n".join(figures) + "</div>")


def _calibration(rows: Sequence[dict], charts: _Charts) -> str:
    from headswap.plots import plot_reliability

    figures = []
    for r in _sorted_rows(rows):
        cal = r.get("calibration")
        if not isinstance(cal, dict):
            continue
        name = _row_name(r)
        measures = []
        for key, what in (("before", "softmax"), ("after", "temperature-scaled")):
            m = cal.get(key)
            if isinstance(m, dict):
                measures.append(f"{what}: ECE {_num(m.get('ece'), '.4f')}, Brier {_num(m.get('brier'), '.4f')}")
        t = cal.get("temperature")
        if _is_num(t):
            measures.append(f"temperature {t:.3f}")
        img = charts.img(f"reliability diagram of {name}", lambda p, c=cal, n=name: plot_reliability(c, p, n),
                         f"reliability diagram: {name}")
        figures.append(f"<figure><figcaption>{_e(name)}<br>{_e('; '.join(measures))}</figcaption>{img}</figure>")
    return '<div class="grid">' + "\n".join(figures) + "</div>"


OOS_COLUMNS = ("model", "strategy", "regime", "score used", "AUROC", "FPR@95TPR", "best score (AUROC)",
               "in-scope acc. without threshold", "in-scope acc.", "oos recall", "oos precision")


def oos_cells(r: dict) -> list[str]:
    """One row of the out-of-scope table (headswap.oos.block of a row): the score in use and its threshold-free
    figures, the best score's AUROC, in-scope accuracy without and with the threshold, oos recall and precision."""
    o = r["out_of_scope"]
    figs = o.get("scores") or {}
    used = figs.get(o.get("score")) or {}
    known = {n: f["auroc"] for n, f in figs.items() if f.get("auroc") is not None}
    best = max(known, key=known.get) if known else None
    return [r["model_name"], r["strategy"], r["regime"], str(o.get("score")), _num(used.get("auroc"), ".4f"),
            _num(used.get("fpr_at_95_tpr")), f"{best} ({known[best]:.4f})" if best else "–",
            _num(o.get("in_scope_accuracy_without_threshold"), ".4f"), _num(o.get("in_scope_accuracy"), ".4f"),
            _num(o.get("oos_recall")), _num(o.get("oos_precision"))]


def _out_of_scope(rows: Sequence[dict], charts: _Charts) -> str:
    """The out-of-scope table (headswap.bench.report.oos_cells) and each row's score distributions."""
    from headswap.plots import plot_oos_scores
    with_oos = [r for r in _sorted_rows(rows) if _ok(r) and isinstance(r.get("out_of_scope"), dict)]
    table = _table([(c, "") for c in OOS_COLUMNS], [("", [_e(c) for c in oos_cells(r)]) for r in with_oos])
    figures = []
    for r in with_oos:
        name, block = _row_name(r), r["out_of_scope"]
        img = charts.img(f"out-of-scope scores of {name}", lambda p, b=block, n=name: plot_oos_scores(b, p, n),
                         f"out-of-scope score distributions: {name}")
        figures.append(f'<figure class="wide"><figcaption>{_e(name)}</figcaption>{img}</figure>')
    return ('<p class="muted">AUROC of separating out-of-scope from in-scope test texts by each score; FPR@95TPR: '
            'out-of-scope texts accepted when 95% of in-scope texts are; in-scope accuracy counts a rejected text '
            'as wrong.</p>' + table + '<div class="grid">' + "\n".join(figures) + "</div>")


def _skipped(skipped: Sequence[dict]) -> str:
    if not skipped:
        return '<p class="muted">none: every strategy ran on every model it was asked for</p>'
    body = []
    for s in skipped:
        if not isinstance(s, dict):
            body.append(("", ["", "", "", _e(s)]))
            continue
        model = s.get("model_name") or (model_display_name(s["model"]) if s.get("model") else "?")
        body.append(("", [_e(model), _e(s.get("strategy")), _e(s.get("regime") or ""), _e(s.get("reason"))]))
    return _table([("model", ""), ("strategy", ""), ("regime", ""), ("reason", "")], body)


# ---- the page -----------------------------------------------------------------------------------------------------


def render_html(results: dict, title: str | None = None) -> str:
    """The report page as one string (see the module docstring)."""
    from headswap.plots import plot_learning_curves, plot_quality_vs_speed

    meta = results.get("meta") or {}
    rows = [r for r in results.get("rows") or [] if isinstance(r, dict)]
    auto = results.get("auto")
    if title is None:
        title = "headswap auto" if isinstance(auto, dict) else "headswap bench"
    sections = [("summary", _summary(results))]
    with tempfile.TemporaryDirectory(prefix="headswap-report-") as tmp:
        charts = _Charts(Path(tmp))
        if isinstance(auto, dict):
            sections.append(("auto", _auto(auto)))
        sections.append(("results", _results(rows)))
        sections.append(("quality-vs-speed", charts.img(
            "the quality vs speed chart", lambda p: plot_quality_vs_speed(rows, p),
            "macro F1 and inference texts/s per row")))
        trained = [r for r in rows if not r.get("baseline") and _ok(r)
                   and any(_is_num(h.get("score")) for h in r.get("history") or [] if isinstance(h, dict))]
        if trained:
            sections.append(("learning-curves", charts.img(
                "the learning curves", lambda p: plot_learning_curves(trained, p),
                "validation macro F1 per epoch of each trained row")))
        sections.append(("confusion", _confusions(rows, charts)))
        if any(isinstance(r.get("calibration"), dict) for r in rows):
            sections.append(("calibration", _calibration(rows, charts)))
        if any(_ok(r) and isinstance(r.get("out_of_scope"), dict) for r in rows):
            sections.append(("out-of-scope", _out_of_scope(rows, charts)))
        sections.append(("skipped", _skipped(results.get("skipped") or [])))
    titles = dict(SECTION_TITLES)
    nav = "".join(f'<a href="#{sid}">{_e(titles[sid])}</a>' for sid, _ in sections)
    subtitle = _e(meta.get("date") or "")
    body = "\n".join(_section(sid, titles[sid], html) for sid, html in sections)
    return ("<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
            f'<header><h1>{_e(title)}</h1><div class="muted">{subtitle}</div><nav>{nav}</nav></header>\n'
            f"{body}\n</main>\n</body>\n</html>\n")


def write_html(results: dict, path, title: str | None = None) -> Path:
    """render_html(results, title) written atomically to `path`."""
    from headswap.atomic import write_text
    return write_text(path, render_html(results, title))


# ---- a real browser -----------------------------------------------------------------------------------------------

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    """The first headless-capable Chromium on PATH, or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def _run_browser(args: list[str], timeout: float, browser: str | None) -> subprocess.CompletedProcess:
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError(f"no Chromium found on PATH (looked for {', '.join(BROWSERS)}); on Debian: "
                                "apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="headswap-chromium-") as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}", *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{browser} did not finish within {timeout:g} s: {shlex.join(cmd)}") from e
    if done.returncode != 0:
        tail = "\n".join((done.stderr or "").strip().splitlines()[-8:])
        raise RuntimeError(f"{browser} exited with {done.returncode}: {shlex.join(cmd)}\n{tail}")
    return done


def screenshot(html_path, png_path, width: int = 1200, height: int = 2400, timeout: float = 90,
               browser: str | None = None) -> Path:
    """Render the page in headless Chromium to a width x height PNG."""
    html_path, png_path = Path(html_path).resolve(), Path(png_path).resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    if png_path.exists():
        png_path.unlink()
    _run_browser([f"--screenshot={png_path}", f"--window-size={width},{height}", html_path.as_uri()],
                 timeout, browser)
    if not png_path.is_file():
        raise RuntimeError(f"the browser exited without writing {png_path}")
    return png_path


def dump_dom(html_path, timeout: float = 90, browser: str | None = None) -> str:
    """The DOM as headless Chromium parsed it (serialised HTML)."""
    return _run_browser(["--dump-dom", Path(html_path).resolve().as_uri()], timeout, browser).stdout


def rung_note(c: dict) -> str:
    """A rung's one-line note: why it did not run, or how it was time-bounded and where it stopped."""
    parts = [c.get("error") or c.get("reason") or ""]
    bounded = c.get("time_bounded")
    if bounded:
        parts.append(f"time-bounded to {_seconds(bounded['limit_seconds'])} of training ({bounded['why']}), "
                     f"{bounded['epochs']} epochs planned, validated every {bounded['eval_every_steps']} steps: "
                     f"{bounded.get('stopped', '')}")
    if c.get("best_epoch") is not None and c.get("status") == "ran" and c.get("tier") not in ("baseline", None):
        if c.get("head_fit") == "logistic":    # its "epochs" are the strengths C tried (headswap.train.logistic)
            from headswap.train.logistic import C_GRID
            parts.append(f"C {C_GRID[c['best_epoch'] - 1]:g} chosen on validation")
        else:
            parts.append(f"best epoch {c['best_epoch']}")
    return "; ".join(p for p in parts if p)
