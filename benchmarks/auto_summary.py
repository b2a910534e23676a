"""One line per auto run: budget used, what shipped, test macro F1 against TF-IDF, the out-of-scope figures, and
the share of the budget the cheap rungs took before the arms began (benchmarks/auto_runs.sh writes the files).

    python benchmarks/auto_summary.py benchmarks/results/auto_policy/*.json
"""

import json
import sys


def summary(path: str) -> str:
    r = json.load(open(path))
    a = r["auto"]
    rows = {("tfidf" if row["baseline"] else "winner"): row for row in r["rows"]}
    win = a["winner"]
    shipped = f"{win['model_name']} · {win['strategy']} · {win['regime']}" + (f" · {win['rung']}" if win.get("rung") else "")
    test = rows.get("winner", rows.get("tfidf"))
    cheap = sum(c.get("seconds") or 0 for c in a["candidates"] if c.get("tier") in ("static", "frozen", "causal")
                and not c.get("halving"))
    dearest = max(((c.get("seconds") or 0, c) for c in a["candidates"] if not c.get("halving")
                   and c.get("tier") in ("static", "frozen", "causal")), key=lambda x: x[0], default=(0, None))
    arms = [c for c in a["candidates"] if c.get("halving") and c.get("slices")]
    line = (f"{path}: used {a['elapsed_seconds']:.0f} s of {a['budget_seconds']:.0f} ({a['budget_used']:.0%}); shipped "
            f"{shipped} (validation {win['validation_macro_f1']:.4f}); test macro F1 {test['macro_f1']:.4f}, TF-IDF "
            f"{rows['tfidf']['macro_f1'] if 'tfidf' in rows else test['macro_f1']:.4f}; cheap rungs {cheap:.0f} s "
            f"(the dearest {dearest[0]:.0f} s = {dearest[0] / a['budget_seconds']:.0%}); arms that trained: "
            + ", ".join(f"{c['arm']} {c.get('validation_macro_f1', 0):.4f} in {c['seconds']:.0f} s "
                        f"({c.get('stopped_because')})" for c in arms))
    oos = test.get("out_of_scope")
    if oos:
        line += f"; out-of-scope: {json.dumps({k: v for k, v in oos.items() if not isinstance(v, (dict, list))})}"
    return line


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(summary(p))
