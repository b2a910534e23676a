"""results.md, bench's and auto's: tables of the rows in markdown, worded as report.html words them (report_text).

bench's: the run, every row's scores against the baseline, F1 per class, out of scope, what failed and was skipped.
auto's: the budget and the wall time it took, where each split came from, what ran, what was skipped and why, the
winner, its and the baseline's test scores (or that there was no test set), and their out-of-scope figures when the
run had an out-of-scope label.
"""

from __future__ import annotations

from headswap.reports.html_report import OOS_COLUMNS, model_display_name, oos_cells
from headswap.reports.report_text import expected_lines, split_lines
from headswap.settings import defaults


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


def bench_markdown(results: dict) -> str:
    """bench's results.md: the run, every row's scores against the baseline, F1 per class, out of scope, what failed
    and was skipped, the charts and what the columns mean."""
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
                 f"validation: {defaults()['eval_fraction']:.0%} of the training subset")
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
    expected = expected_lines(with_oos)
    if expected:
        lines += ["", "What the validation texts promise for new ones (the threshold is set so that the target holds "
                  "at the lower end of this interval, where the validation texts can support it):", ""]
        lines += [f"- {md_cell(line)}" for line in expected]
    return lines + [""]


def auto_markdown(results: dict) -> str:
    """What ran, what was skipped and why, the winner, and the test scores of the winner and the baseline."""
    from headswap.reports.html_report import rung_note
    from headswap.reports.report_text import has_test
    from headswap.reports.report_text import duration

    a = results["auto"]
    used = a.get("elapsed_seconds", 0)
    lines = ["# headswap auto", "",
             f"Budget {duration(a['budget_seconds'])}: used {duration(used)} of it "
             f"({a.get('budget_used', 0):.0%}), wall time counted from {a.get('counted_from', 'the start')}. "
             f"Winner on validation: **{a['winner']['model_name']} · {a['winner']['strategy']} · "
             f"{a['winner']['regime']}**, saved to `{a.get('model_dir')}`"
             + ("" if a.get("exported") else f" (not exported: {a.get('not_exported_because')})") + ".", ""]
    lines += prior_lines(a.get("prior"))
    lines += decisions_lines(a.get("decisions"))
    lines += [f"**Warning:** {w}" for w in a.get("warnings") or []] + ([""] if a.get("warnings") else [])
    data = results.get("meta", {}).get("data") or {}
    if data:
        lines += [f"Data `{results['meta'].get('args', {}).get('data_dir')}`:", ""]
        lines += [f"- {line}" for line in split_lines(data)] + [""]
    lines += ["## The ladder", "",
              "Cheap to dear: the baseline, static, heads on frozen features, fine-tuning, causal models last.", "",
              "| tier | model | strategy | regime | rung | status | estimated | took | validation macro F1 | notes |",
              "|---|---|---|---|---|---|---:|---:|---:|---|"]
    for c in a["candidates"]:
        name = f"**{c['model_name']}**" if c.get("winner") else c["model_name"]
        lines.append("| " + " | ".join(md_cell(v) for v in (
            c.get("tier", "–"), name, c["strategy"], c["regime"], c.get("rung") or "–", c.get("status", "–"),
            duration(c["estimated_seconds"]) if c.get("estimated_seconds") is not None else "–",
            duration(c["seconds"]) if c.get("seconds") is not None else "–",
            md_num(c.get("validation_macro_f1"), ".4f"), rung_note(c))) + " |")
    lines += arms_markdown(a)
    if not has_test(results):
        lines += ["", "## Test set", "", "No test set: nothing was scored on test, and the winner was chosen on "
                  "validation alone (give a test.csv, or --test-fraction, to score it)."]
    else:
        lines += ["", "## Test set (scored once, after the choice)", "",
                  "| model | strategy | runtime | macro F1 | accuracy | texts/s |", "|---|---|---|---:|---:|---:|"]
    for r in results["rows"]:
        lines.append(f"| {md_cell(r['model_name'])}{' (winner)' if r.get('winner') else ''} | {r['strategy']} | "
                     f"{r.get('runtime') or '–'} | {r['macro_f1']:.4f} | {r['accuracy']:.4f} | "
                     f"{r['texts_per_second']:.0f} |")
    oos = oos_table(results["rows"])
    if oos:
        lines += [""] + oos[:-1]
    if results.get("skipped"):
        lines += ["", "## Combinations not tried", ""]
        lines += [f"- {s['model_name']} · {s['strategy']}: {s['reason']}" for s in results["skipped"]]
    return "\n".join(lines) + "\n"


def arms_markdown(a: dict) -> list[str]:
    """Where the budget went among the fine-tuning arms: each one's slices, seconds and why it stopped."""
    from headswap.reports.report_text import duration
    from headswap.reports.report_text import arm_rows

    arms = arm_rows(a)
    if not arms:
        return []
    h = a.get("halving")
    lines = ["", "## Where the budget went: the fine-tuning arms", "",
             f"Successive halving over {duration(h.get('budget_seconds', 0))}, {h.get('parallel', 1)} arm(s) at "
             f"a time; every arm of a round trains to the same share of an epoch, and no arm holds more than "
             f"{duration(h.get('cap_seconds', 0))} unless it leads. Slices are round: seconds (wall clock, loading "
             "included)." if h else
             "No arm got a slice of the budget: timing a few batches of each showed it too dear, or left no time.", ""]
    if a.get("arms_chart"):
        lines += [f"![validation of each arm against time]({a['arms_chart']})", ""]
    lines += ["| arm | slices | seconds | share of budget | epochs trained | best validation macro F1 | stopped | why |",
              "|---|---|---:|---:|---:|---:|---|---|"]
    for c in arms:
        slices = ", ".join(f"{'lead' if s['round'] == 'lead' else s['round'] + 1}: {s['seconds'] or 0:.0f}"
                           + (f" on {s['node'][:8]}" if s.get("node") else "") for s in c.get("slices") or [])
        lines.append("| " + " | ".join(md_cell(v) for v in (
            f"**{c['name']}**" if c.get("winner") else c["name"], slices or "–", f"{c.get('seconds') or 0:.0f}",
            f"{(c.get('seconds') or 0) / a['budget_seconds']:.0%}", md_num(c.get("trained_epochs"), ".2f"),
            md_num(c.get("validation_macro_f1"), ".4f"),
            c.get("stopped_because") or c.get("status"), c.get("reason") or "")) + " |")
    return lines


def prior_lines(p: dict | None) -> list[str]:
    """Which table of earlier runs ordered the rungs (headswap.auto.prior), in a sentence: a table built without some
    data sets says so, a leave-one-set-out run's shows it."""
    if not p or "table" not in p:     # a run before --prior recorded only the shipped table's size
        return []
    if p["table"] == "none":
        return ["Prior: none (the ladder's own order; no rung capped or dropped).", ""]
    which = "the shipped table" if p["table"] == "shipped" else f"`{p['table']}`"
    without = f", built without {', '.join(p['without'])}" if p.get("without") else ""
    runs = f"{p['runs']} run{'s' * (p['runs'] != 1)} on {', '.join(p['data_sets']) or 'no data set'}"
    return [f"Prior: {which}, {runs}{without}; this data's shape: {p['shape']}.", ""]


def decisions_lines(d: dict | None) -> list[str]:
    """Whether the winner's decisions lean toward the rarer classes (headswap.decisions.balance), in a sentence."""
    if not d or not d.get("tau"):
        return []
    before, after = d.get("argmax_out_of_fold_macro_f1"), d.get("out_of_fold_macro_f1")
    folds = "" if before is None or after is None else f"; out of fold {before:.4f} and {after:.4f}"
    figures = (f"validation macro F1 {d['argmax_macro_f1']:.4f} with the argmax, {d['validation_macro_f1']:.4f} "
               f"leaning{folds}")
    if d["kept"]:
        return [f"Its decisions lean toward the rarer classes (tau {d['tau']:g}): {figures}.", ""]
    return [f"Its decisions are the argmax: leaning toward the rarer classes (tau {d['tau']:g}) did not score higher "
            f"out of fold ({figures}).", ""]
