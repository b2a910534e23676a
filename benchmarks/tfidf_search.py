"""auto's TF-IDF baseline, plain (logistic regression, C 10) against tuned (headswap.baseline.search: logistic
regression and a linear SVM over a few C, the best on validation, within 5% of a budget), on the splits auto reads:
validation.csv where there is one, otherwise a stratified, seeded tenth of train held out. Both are scored on
test where the set has one, once, after the choice.

    .venv/bin/python benchmarks/tfidf_search.py --data germeval2018 emotion hwu64 clinc150 sms_spam \\
        --out benchmarks/results/tfidf_search

--data takes folders of ../shared/data by name, or folders of one's own (train.csv; validation.csv and test.csv
optional). --budget: the auto budget whose 5% bounds the search (default 15 minutes: 45 s). --every: each point
tried is refitted and scored on test too, to see whether validation's choice holds there. Writes only under --out:
OUT/tfidf_search.json (each set's figures, every point tried, the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def folder_of(ref: str) -> Path:
    folder = Path(ref) if Path(ref).is_dir() else SHARED / ref
    if not (folder / "train.csv").is_file():
        raise SystemExit(f"--data {ref}: neither a folder with train.csv nor a set of {SHARED}")
    return folder


def splits(folder: Path, seed: int):
    """(train, validation, test or None) as auto reads them (headswap.auto.main: validation.csv, or a seeded,
    stratified tenth of train held out)."""
    from headswap.data.sampling import stratified_split
    from headswap.trials.plan import EVAL_FRACTION, load_bench_data
    data = load_bench_data(folder, seed=seed, needs_test=False, who="tfidf_search")
    train, validation = data.train, data.validation
    if validation is None:
        train, validation = stratified_split(train, EVAL_FRACTION, seed)
    return train, validation, data.test


def measure(folder: Path, seconds: float, seed: int, every: bool = False) -> dict:
    from headswap.baseline.search import tune_tfidf
    from headswap.baseline.tfidf import TfidfClassifier
    train, validation, test = splits(folder, seed)
    t0 = time.perf_counter()
    plain = TfidfClassifier().fit(train.texts, train.labels)
    plain_f1 = plain.evaluate(validation.texts, validation.labels).f1("macro")
    plain_s = time.perf_counter() - t0
    tuned, record = tune_tfidf(train, validation, seconds)
    out = {"data": str(folder), "train": len(train), "validation": len(validation),
           "test": len(test) if test is not None else 0, "classes": len(set(train.labels)),
           "plain": {"validation_macro_f1": plain_f1, "seconds": plain_s}, "tuned": record}
    if test is not None:
        out["plain"]["test_macro_f1"] = plain.evaluate(test.texts, test.labels).f1("macro")
        out["tuned"]["test_macro_f1"] = tuned.evaluate(test.texts, test.labels).f1("macro")
        if every:
            every_point_on_test(tuned, record["tried"], train, test)
    return out


def every_point_on_test(tuned, tried: list[dict], train, test) -> None:
    """Each tried point refitted on the search's features and scored on test, into its entry: whether the choice
    on validation holds on test (not what auto does: auto reads test once, for the winner)."""
    from headswap.baseline.tfidf import TfidfClassifier
    rows = tuned.features_.transform(train.texts)
    index = {lab: k for k, lab in enumerate(tuned.labels_)}
    targets = [index[str(v)] for v in train.labels]
    for point in tried:
        clf = TfidfClassifier(C=point["C"], linear=point["linear"])
        clf.features_, clf.classes_ = tuned.features_, tuned.classes_
        clf._fit_head(rows, targets)
        point["test_macro_f1"] = clf.evaluate(test.texts, test.labels).f1("macro")


def table(results: list[dict]) -> str:
    lines = ["| set | train · validation · test · classes | plain: validation · test · s | tuned: chosen | "
             "validation · test · s | tried |", "|---|---|---|---|---|---|"]
    for r in results:
        p, t = r["plain"], r["tuned"]
        test = lambda d: f"{d['test_macro_f1']:.4f}" if "test_macro_f1" in d else "–"    # noqa: E731
        lines.append(f"| {Path(r['data']).name} | {r['train']} · {r['validation']} · {r['test']} · {r['classes']} | "
                     f"{p['validation_macro_f1']:.4f} · {test(p)} · {p['seconds']:.1f} | {t['name']} | "
                     f"{t['validation_macro_f1']:.4f} · {test(t)} · {t['seconds']:.1f} | "
                     f"{len(t['tried'])} of {len(t['tried']) + len(t['not_tried'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--budget", type=float, default=900.0, help="auto's budget in seconds (its 5%% bounds the search)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", action="store_true", help="score every tried point on test too (refitted; slow)")
    args = ap.parse_args(argv)
    from headswap.baseline.search import SHARE
    import headswap.decisions.calibration  # noqa: F401  (torch's import, before any timing: evaluate reads it)
    folders = [folder_of(ref) for ref in args.data]       # every name checked before any work
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
           "cpus": os.cpu_count(), "load_before": os.getloadavg(), "budget_seconds": args.budget,
           "search_seconds": SHARE * args.budget, "command": [sys.executable, *sys.argv], "sets": []}
    for folder in folders:
        doc["sets"].append(measure(folder, SHARE * args.budget, args.seed, args.every))
        print(table(doc["sets"][-1:]).splitlines()[-1], flush=True)
    doc["load_after"] = os.getloadavg()
    (args.out / "tfidf_search.json").write_text(json.dumps(doc, indent=1))
    print(table(doc["sets"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
