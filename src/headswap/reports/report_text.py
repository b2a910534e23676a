"""How values read in bench and auto reports (results.md and report.html alike): numbers, durations, model
and row names, the order of rows, a rung's note and a row of the out-of-scope table. Plain text, no markup."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence


def is_num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def num(value, fmt: str = ".3f") -> str:
    return format(value, fmt) if is_num(value) else "–"


def human(n) -> str:
    if not is_num(n):
        return "–"
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def duration(seconds: float, unknown: str = "?") -> str:
    """A duration as reports and log lines say it: '4.5 s', '45 s', '2.5 min', '1.2 h' (`unknown` when not a
    number). The one formatter of durations: every report, log line and message says them through it."""
    if not is_num(seconds):
        return unknown
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def row_ok(row: dict) -> bool:
    return row.get("status", "ok") == "ok"


def model_display_name(ref: str) -> str:
    """'minilm' stays; a folder or file path becomes its last component (without .gguf)."""
    p = Path(str(ref))
    if len(p.parts) <= 1 and not p.suffix:
        return str(ref)
    name = p.name or str(ref)
    return name[:-5] if name.lower().endswith(".gguf") else name


def row_name(row: dict) -> str:
    model = row.get("model_name") or row.get("model") or "?"
    return f"{model} · {row.get('strategy', '?')} · {row.get('regime', '?')}"


def sorted_rows(rows: Sequence[dict]) -> list[dict]:
    """Best macro F1 first (as results.md), then rows without a score (failed) in run order."""
    scored = [r for r in rows if row_ok(r) and is_num(r.get("macro_f1"))]
    scored.sort(key=lambda r: -r["macro_f1"])
    return scored + [r for r in rows if not (row_ok(r) and is_num(r.get("macro_f1")))]


def fmt_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


OOS_COLUMNS = ("model", "strategy", "regime", "score used", "AUROC", "FPR@95TPR", "best score (AUROC)",
               "in-scope acc. without threshold", "in-scope acc.", "oos recall", "oos precision")


def oos_cells(r: dict) -> list[str]:
    """One row of the out-of-scope table (a row's out_of_scope block, from
    headswap.classifier.reject_option.RejectOption.block): the score in use and its threshold-free figures, the best
    score's AUROC, in-scope accuracy without and with the threshold, oos recall and precision."""
    o = r["out_of_scope"]
    figs = o.get("scores") or {}
    used = figs.get(o.get("score")) or {}
    known = {n: f["auroc"] for n, f in figs.items() if f.get("auroc") is not None}
    best = max(known, key=known.get) if known else None
    return [r["model_name"], r["strategy"], r["regime"], str(o.get("score")), num(used.get("auroc"), ".4f"),
            num(used.get("fpr_at_95_tpr")), f"{best} ({known[best]:.4f})" if best else "–",
            num(o.get("in_scope_accuracy_without_threshold"), ".4f"), num(o.get("in_scope_accuracy"), ".4f"),
            num(o.get("oos_recall")), num(o.get("oos_precision"))]


def expected_lines(rows) -> list[str]:
    """For each row whose out-of-scope block says what its validation texts promised (the reject target set at the
    lower end of a 95% interval on the validation counts): 'name · strategy: out-of-scope recall 0.80, 95% interval
    ...'. What to read its test figures against."""
    from headswap.decisions.reject import describe_expectation
    return [f"{r['model_name']} · {r['strategy']}: {describe_expectation(r['out_of_scope']['expected'])}"
            for r in rows if (r.get("out_of_scope") or {}).get("expected")]


def rung_note(c: dict) -> str:
    """A rung's one-line note: why it did not run, or how it was time-bounded and where it stopped."""
    parts = [c.get("error") or c.get("reason") or ""]
    bounded = c.get("time_bounded")
    if bounded:
        parts.append(f"time-bounded to {duration(bounded['limit_seconds'], '–')} of training ({bounded['why']}), "
                     f"{bounded['epochs']} epochs planned, validated every {bounded['eval_every_steps']} steps: "
                     f"{bounded.get('stopped', '')}")
    if c.get("best_epoch") is not None and c.get("status") == "ran" and c.get("tier") not in ("baseline", None):
        if c.get("head_fit") == "logistic":    # its "epochs" are the strengths C tried (headswap.train.logistic)
            from headswap.train.logistic import C_GRID
            parts.append(f"C {C_GRID[c['best_epoch'] - 1]:g} chosen")     # by cross-validation on training, mostly
        else:
            parts.append(f"best epoch {c['best_epoch']}")
    return "; ".join(p for p in parts if p)


def arm_rows(auto: dict) -> list[dict]:
    """auto's candidates that were fine-tuning arms (headswap.auto.compete), each with its name."""
    return [{**c, "name": c.get("arm") or c.get("model_name")} for c in auto.get("candidates") or []
            if isinstance(c, dict) and c.get("halving")]


def split_lines(data: dict, held_only: bool = False) -> list[str]:
    """'split: where it came from (N texts)' for each split in a results' meta.data; held_only: only the splits not
    read whole from a file of their own (held out, or none)."""
    lines = []
    for split in ("train", "validation", "test"):
        info = data.get(split) if isinstance(data, dict) else None
        if not isinstance(info, dict):
            continue
        source = info.get("source") or info.get("file") or info.get("note")     # (results.json before "source")
        if source and not (held_only and source == info.get("file")):
            lines.append(f"{split}: {source}" + (f" ({info['used']} texts)" if info.get("used") else ""))
    return lines


def has_test(results: dict) -> bool:
    """Whether the run had a test split: a run without one scored nothing on test (auto on data without test.csv)."""
    test = ((results.get("meta") or {}).get("data") or {}).get("test")
    return not (isinstance(test, dict) and test.get("used") == 0 and not results.get("rows"))
