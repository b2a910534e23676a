"""Bench results as files and log lines: results.json, results.md, the charts, the per-row confusion
matrices and the progress lines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

from headswap.reports.html_report import OOS_COLUMNS, model_display_name, oos_cells, write_html
from headswap.reports.report_text import duration, split_lines
from headswap.trials.plan import EVAL_FRACTION
from headswap.trials.rows import write_json


# What a bench or auto run writes into OUT (bench's confusion-*.png besides): a folder holding one of these that no
# run wrote is the user's, and is refused rather than overwritten.
RUN_FILES = ("results.json", "results.md", "report.html", "learning_curves.png", "quality_vs_speed.png", "arms.png",
             "model", ".arms")


def check_run_folder(out, flag: str = "--out") -> None:
    """Refuse an OUT whose files a run would replace, unless an earlier run wrote it (its results.json is a run's):
    a user's own results.md or report.html is never overwritten. Other files are left beside the run's."""
    from headswap.errors import HeadswapError

    out = Path(out)
    if not out.is_dir() or _is_run(out / "results.json"):
        return
    clash = sorted(p.name for p in out.iterdir()
                   if p.name in RUN_FILES or (p.name.startswith("confusion-") and p.suffix == ".png"))
    if clash:
        raise HeadswapError(f"{flag} {out} holds {', '.join(clash)}, which no headswap run wrote (there is no "
                            f"results.json of one), and the run would replace {'it' if len(clash) == 1 else 'them'}: "
                            f"give a new or empty folder")


def _is_run(path: Path) -> bool:
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(results, dict) and isinstance(results.get("meta"), dict) \
        and "headswap_version" in results["meta"]


def _human(n) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def md_num(value, fmt: str = ".3f") -> str:
    return "–" if value is None else format(value, fmt)


def md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _sorted_rows(rows: list[dict]) -> list[dict]:
    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: -r["macro_f1"])
    return ok + [r for r in rows if r.get("status") != "ok"]


def _row_notes(row: dict) -> str:
    notes = []
    if row.get("baseline"):
        notes.append("**baseline**")
    if "unparsed" in row and row.get("status") == "ok":     # strategies that parse generated answers
        notes.append(f"unparsed {row.get('unparsed', 0)}/{row.get('n_test', '?')}")
    if row.get("tied_embeddings"):
        notes.append("tied embeddings⁴")
    if row.get("status") != "ok":
        notes.append(f"**failed**: {row.get('error', '')[:160]}")
    return "; ".join(notes)


def render_markdown(results: dict) -> str:
    meta, rows = results["meta"], results["rows"]
    machine, data = meta["machine"], meta["data"]
    lines = ["# headswap bench", ""]
    gpu = f"GPU {machine['gpu']} · " if machine.get("gpu") else ""
    lines.append(f"{meta['date']} · {machine['platform']} · {machine['cpu_count']} CPUs · "
                 f"torch {machine['torch']} with {machine['torch_threads']} threads · {gpu}"
                 f"headswap {meta['headswap_version']}")
    lines.append("")
    args = meta["args"]
    sizes = [f"train {data['train']['used']} of {data['train']['rows']}"]
    val = data.get("validation") or {}
    sizes.append(f"validation {val['used']} of {val['rows']}" if val.get("file") else
                 f"validation: {EVAL_FRACTION:.0%} of the training subset")
    sizes.append(f"test {data['test']['used']} of {data['test']['rows']}")
    lines.append(f"Data `{args['data_dir']}`: {', '.join(sizes)} (stratified, seed {args['seed']}). "
                 f"Epochs {args['epochs']}, regime {args['regime']}, batch size {args['batch_size']}, "
                 f"max length {args['max_length']}"
                 + "".join(f", {name} {args[key]:g}" for key, name in (("body_lr", "body lr"), ("head_lr", "head lr"))
                           if args.get(key) is not None) + ".")
    lines.append("")
    held = split_lines(data, held_only=True)
    if held:
        lines += [f"- {line}" for line in held] + [""]
    lines.append("## Results on the test set, best macro F1 first")
    lines.append("")
    base = next((r for r in rows if r.get("baseline") and r.get("status") == "ok"), None)
    header = ("| # | model | strategy | regime | macro F1 | Δ vs baseline | weighted F1 | accuracy "
              "| trainable params | params / forward¹ | train s | inference texts/s | peak RSS Δ MB² "
              "| forward passes / text³ | notes |")
    lines.append(header)
    lines.append("|" + "|".join(["---:", "---", "---", "---"] + ["---:"] * 10 + ["---"]) + "|")
    for i, r in enumerate(_sorted_rows(rows), 1):
        ok = r.get("status") == "ok"
        name = f"**{r['model_name']}**" if r.get("baseline") else r["model_name"]
        delta = (f"{r['macro_f1'] - base['macro_f1']:+.3f}" if ok and base is not None and not r.get("baseline")
                 else "–")
        cells = [str(i), name, r["strategy"], r["regime"],
                 md_num(r.get("macro_f1")) if ok else "–", delta,
                 md_num(r.get("weighted_f1")) if ok else "–", md_num(r.get("accuracy")) if ok else "–",
                 _human(r.get("trainable_params")) if ok else "–", _human(r.get("effective_params")) if ok else "–",
                 md_num(r.get("train_seconds"), ".1f") if ok else "–",
                 md_num(r.get("texts_per_second"), ".1f") if ok else "–",
                 md_num(r.get("peak_rss_delta_mb"), ".0f"),
                 md_num(r.get("forward_passes_per_text"), ".2f") if ok else "–",
                 _row_notes(r)]
        lines.append("| " + " | ".join(md_cell(c) for c in cells) + " |")
    lines.append("")

    ok_rows = [r for r in _sorted_rows(rows) if r.get("status") == "ok"]
    if ok_rows:
        labels = ok_rows[0]["labels"]
        lines += ["## F1 per class", ""]
        lines.append("| model | strategy | regime | " + " | ".join(md_cell(lab) for lab in labels) + " |")
        lines.append("|---|---|---|" + "---:|" * len(labels))
        for r in ok_rows:
            name = f"**{r['model_name']}**" if r.get("baseline") else r["model_name"]
            lines.append(f"| {md_cell(name)} | {r['strategy']} | {r['regime']} | "
                         + " | ".join(md_num(r["f1_per_class"].get(lab)) for lab in labels) + " |")
        support = data["test"]["classes"]
        lines.append("| *test support* | | | " + " | ".join(str(support.get(lab, 0)) for lab in labels) + " |")
        lines.append("")

    lines += oos_table(rows)
    failed = [r for r in rows if r.get("status") != "ok"]
    if failed:
        lines += ["## Failed rows", ""]
        for r in failed:
            lines.append(f"- {r['model_name']} · {r['strategy']} · {r['regime']}: `{md_cell(r.get('error', ''))}`")
        lines.append("")
    if results.get("skipped"):
        lines += ["## Skipped combinations", ""]
        for s in results["skipped"]:
            lines.append(f"- {model_display_name(s['model'])} · {s['strategy']}"
                         + (f" · {s['regime']}" if s.get("regime") else "") + f": {s['reason']}")
        lines.append("")

    lines += ["## Charts", "", "- `quality_vs_speed.png`: macro F1 and inference texts/s per row, same order",
              "- `learning_curves.png`: validation macro F1 per epoch of every trained row"]
    for r in _sorted_rows(rows):
        if r.get("confusion_png"):
            lines.append(f"- `{r['confusion_png']}`: confusion matrix, {r['model_name']} · {r['strategy']} · "
                         f"{r['regime']}")
    lines.append("")
    lines += [
        "## Notes", "",
        "1. *Params / forward*: the classifier module's parameters, each tensor once: the body (including its "
        "input-embedding matrix, counted whole although a forward pass only reads the rows of its tokens) plus the "
        "head. slm-logits and slm-letters slice the LM head to the K answer tokens, so the vocabulary projection is "
        "not counted; generate-parse keeps the full LM head and applies it at every generated token. LoRA rows "
        "include their unmerged adapters; zero-shot rows have none. The baseline counts its LinearSVC weights.",
        "2. *Peak RSS Δ*: the highest resident set size sampled (every 0.1 s) while the row ran, minus the RSS "
        "at its start. torch's CPU allocations are invisible to tracemalloc, so process RSS is measured. "
        "results.json also has the process-wide high-water mark (getrusage ru_maxrss), which never goes down: "
        "a row after a larger one shows no increase there.",
        "3. *Forward passes / text*: measured as the sequences through the input embedding during test inference "
        "divided by the test texts: cross-encoder K (one per class), generate-parse 1 prefill + 1 per generated "
        "token, similarity 1 + K/N (class descriptions embedded once), everything else 1.",
        "4. *Tied embeddings*: the model's LM head is its input-embedding matrix. It is counted once, as the "
        "input lookup; slm-logits and slm-letters copy its K answer-token rows into their head (counted there), and "
        "generate-parse also uses it whole as the output projection at every generated token.",
        "",
        "Training time is the training loop (all epochs, validation included) without model loading; inference "
        "texts/s is test-set prediction, batch 32, on this machine's CPU threads.",
        "",
    ]
    return "\n".join(lines)


def oos_table(rows: list[dict]) -> list[str]:
    """The markdown out-of-scope section, when rows have an out_of_scope block."""
    with_oos = [r for r in _sorted_rows(rows) if r.get("status") == "ok" and isinstance(r.get("out_of_scope"), dict)]
    if not with_oos:
        return []
    lines = ["## Out of scope (reject option) on the test set", "",
             "AUROC: of separating out-of-scope from in-scope test texts by the score (0.5 = chance); FPR@95TPR: the "
             "share of out-of-scope texts accepted when 95% of in-scope texts are. In-scope accuracy counts a "
             "rejected in-scope text as wrong; the threshold was tuned on the validation data. The baseline's "
             "figures are TF-IDF + logistic regression's top probability with the same threshold rule.", "",
             "| " + " | ".join(OOS_COLUMNS) + " |", "|" + "|".join(["---"] * 4 + ["---:"] * 7) + "|"]
    lines += ["| " + " | ".join(md_cell(c) for c in oos_cells(r)) + " |" for r in with_oos]
    return lines + [""]


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
    md.write_text(render_markdown(results), encoding="utf-8")
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

