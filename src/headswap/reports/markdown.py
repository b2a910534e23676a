"""`headswap auto`'s results.md: the budget and the wall time it took, where each split came from, what ran, what was
skipped and why, the winner, its and the baseline's test scores (or that there was no test set), and their
out-of-scope figures when the run had an out-of-scope label."""

from __future__ import annotations


def render_markdown(results: dict) -> str:
    """What ran, what was skipped and why, the winner, and the test scores of the winner and the baseline."""
    from headswap.reports.html_report import rung_note
    from headswap.reports.report_text import has_test, split_lines
    from headswap.bench.report import md_cell, md_num, oos_table
    from headswap.reports.report_text import duration

    a = results["auto"]
    used = a.get("elapsed_seconds", 0)
    lines = ["# headswap auto", "",
             f"Budget {duration(a['budget_seconds'])}: used {duration(used)} of it "
             f"({a.get('budget_used', 0):.0%}), wall time counted from {a.get('counted_from', 'the start')}. "
             f"Winner on validation: **{a['winner']['model_name']} · {a['winner']['strategy']} · "
             f"{a['winner']['regime']}**, saved to `{a.get('model_dir')}`"
             + ("" if a.get("exported") else f" (not exported: {a.get('not_exported_because')})") + ".", ""]
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
    from headswap.bench.report import md_cell, md_num
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
