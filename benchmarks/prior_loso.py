"""Judge auto's prior leave-one-set-out, offline: for each data set with recorded auto runs, what auto would decide
on that set's shape from the prior built without it (benchmarks/build_prior.py --without SET), beside the full
prior's decisions and beside what won in the set's own runs. A prior that only repeats a set's own history
would be right on it and say nothing of the next set; this asks what it says of a set it never saw.

    python benchmarks/prior_loso.py [RESULTS_DIR] --out benchmarks/results/prior_loso

Writes OUT/prior_loso.md (a table, one row per data set and shape, then each decision in full) and
OUT/prior_loso.json. Decisions, from headswap.auto.prior: the cheap rungs' order, those dropped (not tried) and
those capped (unproven: a tenth of the budget at most), and the order the fine-tuning arms are admitted in.
"""

import argparse
import json
import sys
from pathlib import Path

from build_prior import ROOT, kinds

from headswap.auto.prior import Prior, build_table
from headswap.errors import HeadswapError


def short(key: str) -> str:
    """'encoder · encoder-mlp · full' -> 'encoder-mlp full' (the kind only where neither it nor the strategy says)."""
    kind, strategy, rung = key.split(" · ")
    return ("" if kind == "encoder" or strategy.startswith(kind) else f"{kind} ") + f"{strategy} {rung}"


def cheap(key: str) -> bool:
    """A family of the rungs that run before the fine-tuning arms: frozen heads and static embeddings."""
    _, strategy, rung = key.split(" · ")
    return rung == "frozen head" or strategy == "static"


def decisions(prior: Prior, families) -> dict:
    rungs = sorted((f for f in families if cheap(f)), key=prior.order)
    arms = sorted((f for f in families if not cheap(f)), key=prior.arm_order)
    return {"rungs": rungs, "dropped": [f for f in rungs if prior.dropped(f)],
            "capped": [f for f in rungs if not prior.proven(f) and not prior.dropped(f)],
            "arms": arms, "arm_evidence": {f: prior.arm_evidence(f) for f in arms}}


def most_won(table: dict, name: str, where: str, among) -> tuple[str | None, int]:
    """The family best in the most of the set's runs of this shape, and in how many."""
    wins = {f: table["families"][f].get(where, {}).get(name, {}).get("won", 0) for f in among}
    best = max(sorted(wins), key=lambda f: wins[f], default=None)
    return (best, wins[best]) if best is not None and wins[best] else (None, 0)


def judge(root: Path) -> list[dict]:
    full = build_table(root, kinds())
    families = sorted(full["families"])
    rows = []
    for name, seen in full["sets"].items():
        loso = build_table(root, kinds(), [name])
        for where, runs in sorted(seen["shapes"].items()):
            best, won = most_won(full, name, where, families)
            best_arm, arm_won = most_won(full, name, where, [f for f in families if not cheap(f)])
            rows.append({"set": name, "shape": where, "runs": runs, "best": best, "best_runs": won,
                         "best_arm": best_arm, "best_arm_runs": arm_won,
                         "full": decisions(Prior(full, 0, 0, False, where=where), families),
                         "without": decisions(Prior(loso, 0, 0, False, where=where), families),
                         "sets_without": len(loso["sets"])})
    return rows


def _names(keys) -> str:
    return ", ".join(map(short, keys)) or "none"


def _decided(d: dict) -> str:
    return f"{_names(d['arms'][:1])}; {_names(d['dropped'])}; {_names(d['capped'])}"


def markdown(rows: list[dict], command: str) -> str:
    lines = [f"`{command}`", "",
             "| data set, shape (runs) | most often best in its runs | full prior: first arm; dropped; capped | "
             "without the set: first arm; dropped; capped | first arm its best? |", "|---|---|---|---|---|"]
    for r in rows:
        full, loso = r["full"], r["without"]
        best = f"{short(r['best'])} ({r['best_runs']})" if r["best"] else "TF-IDF or a blend"
        if r["best_arm"] and r["best_arm"] != r["best"]:
            best += f"; arm: {short(r['best_arm'])} ({r['best_arm_runs']})"
        right = "–" if not r["best_arm"] else "yes" if loso["arms"][:1] == [r["best_arm"]] else "no"
        lines.append(f"| {r['set']}, {r['shape']} ({r['runs']}) | {best} | {_decided(full)} | {_decided(loso)} "
                     f"| {right} |")
    lines += ["", "Each decision in full (cheap rungs in order, [dropped] or [capped]; arms in order, with the "
              "prior's reason):", ""]
    for r in rows:
        lines.append(f"- **{r['set']}, {r['shape']}** ({r['runs']} runs)")
        for label, d in (("full prior", r["full"]), (f"without {r['set']} ({r['sets_without']} sets)", r["without"])):
            marks = [short(f) + (" [dropped]" if f in d["dropped"] else " [capped]" if f in d["capped"] else "")
                     for f in d["rungs"]]
            arms = [f"{short(f)} ({d['arm_evidence'][f]})" for f in d["arms"]]
            lines.append(f"  - {label}: cheap rungs {', '.join(marks)}; arms {'; '.join(arms)}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=ROOT / "results")
    parser.add_argument("--out", type=Path, required=True, help="folder for prior_loso.md and prior_loso.json")
    args = parser.parse_args(argv)
    rows = judge(args.results)
    if not rows:
        raise HeadswapError(f"{args.results}: no auto results file to judge the prior on")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prior_loso.json").write_text(json.dumps(rows, indent=1) + "\n")
    text = markdown(rows, "python benchmarks/prior_loso.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    (args.out / "prior_loso.md").write_text(text)
    print(text, end="")
    return rows


if __name__ == "__main__":
    try:
        main()
    except HeadswapError as e:
        print(f"prior_loso: {e}", file=sys.stderr)
        sys.exit(2)
