"""How well `headswap audit` finds label errors: flip 5% of the training labels (seeded, each to another class
drawn uniformly), audit the noisy training set (TF-IDF, 5 stratified folds, as `headswap audit` does by default)
and measure how many of the flipped rows it finds, then train TF-IDF on the noisy data and on the noisy data
without the flagged rows and score both on the same test.csv.

Per dataset (SMS spam, emotion): precision and recall of cleanlab's own issue set against the flipped rows,
precision at k = the number flipped (the k lowest label-quality rows), the share of found flips whose suggested
label is the true one, near-duplicate counts, the audit's timing, and the test macro F1 of TfidfClassifier
(the same settings everywhere) trained on the original labels (a reference), on the noisy labels and on the
noisy labels with the flagged rows removed. The data files are only read; the flips live in memory.

Precision is measured against the injected flips only: a flagged row that was not flipped counts as a false
positive even when its original label is wrong (both datasets have some), so it is a lower bound. With
--audit-original the original labels are audited too (same folds and seed), which says how many of those
"false positives" the audit also flags without any injected noise.

    .venv/bin/python benchmarks/audit.py --out benchmarks/results/audit.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from headswap import load_dataset  # noqa: E402
from headswap.data.load import LabelledData  # noqa: E402
from headswap.jobs.label_audit import audit_data  # noqa: E402
from headswap.baseline.tfidf import TfidfClassifier  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def flip(labels: list[str], share: float, seed: int) -> tuple[list[str], list[int]]:
    """A copy of labels with round(share * N) of them, chosen by a seeded draw, each changed to another class
    drawn uniformly; and the flipped indices (sorted)."""
    rng = random.Random(seed)
    classes = sorted(set(labels))
    flipped = sorted(rng.sample(range(len(labels)), round(share * len(labels))))
    noisy = list(labels)
    for i in flipped:
        noisy[i] = rng.choice([c for c in classes if c != labels[i]])
    return noisy, flipped


def macro_f1(texts, labels, test) -> tuple[float, float]:
    """(test macro F1 of TfidfClassifier trained on texts/labels, fit seconds)."""
    t0 = time.perf_counter()
    clf = TfidfClassifier().fit(texts, labels)
    seconds = time.perf_counter() - t0
    return clf.evaluate(test.texts, test.labels).f1("macro"), seconds


def run(name: str, folder: Path, share: float, folds: int, seed: int, reference: bool, original: bool) -> dict:
    train, test = load_dataset(folder / "train.csv"), load_dataset(folder / "test.csv")
    noisy_labels, flipped = flip(train.labels, share, seed)
    noisy = LabelledData(train.texts, noisy_labels, str(folder / "train.csv") + " (5% flipped)", train.rows)
    print(f"{name}: {len(train)} training texts, {len(flipped)} labels flipped; auditing ({folds} folds)",
          file=sys.stderr)
    result = audit_data(noisy, "tfidf", folds, seed=seed, progress=True)
    truth, flips = train.labels, set(flipped)
    flagged = {r["index"] for r in result.issues()}
    hits = flagged & flips
    top_k = {r["index"] for r in result.label_issues[:len(flipped)]}
    right = sum(r["suggested_label"] == truth[r["index"]] for r in result.issues() if r["index"] in flips)
    kept = [i for i in range(len(train)) if i not in flagged]
    print(f"{name}: {len(flagged)} flagged, {len(hits)} of them flipped; training TF-IDF on noisy and cleaned data",
          file=sys.stderr)
    f1_noisy, fit_noisy = macro_f1(train.texts, noisy_labels, test)
    f1_clean, fit_clean = macro_f1([train.texts[i] for i in kept], [noisy_labels[i] for i in kept], test)
    row = {
        "data": str(folder), "train_texts": len(train), "test_texts": len(test), "classes": len(set(truth)),
        "flipped": len(flipped), "flip_share": share, "flagged": len(flagged), "flagged_and_flipped": len(hits),
        "precision": len(hits) / len(flagged) if flagged else None,
        "recall": len(hits) / len(flipped),
        "precision_at_k": len(top_k & flips) / len(flipped), "k": len(flipped),
        "suggested_label_right_on_found_flips": right / len(hits) if hits else None,
        "out_of_fold_accuracy_on_noisy_labels": result.summary["counts"]["out_of_fold_accuracy"],
        "near_duplicates": {k: result.summary["counts"][k] for k in
                            ("near_duplicate_groups", "near_duplicate_rows", "conflicting_label_groups",
                             "conflicting_label_rows")},
        "audit_seconds": result.summary["timing"],
        "macro_f1": {"noisy": f1_noisy, "noisy_minus_flagged": f1_clean},
        "removed_rows": len(flagged), "fit_seconds": {"noisy": fit_noisy, "noisy_minus_flagged": fit_clean},
    }
    if reference:
        row["macro_f1"]["original_labels"], row["fit_seconds"]["original_labels"] = macro_f1(train.texts, truth, test)
    if original:
        print(f"{name}: auditing the original labels", file=sys.stderr)
        before = {r["index"] for r in audit_data(train, "tfidf", folds, seed=seed, progress=True).issues()}
        row["original_labels_audit"] = {
            "flagged": len(before),
            "false_positives": len(flagged - flips),
            "false_positives_also_flagged_on_original_labels": len((flagged - flips) & before),
        }
    print(f"{name}: precision {row['precision']:.3f}, recall {row['recall']:.3f}, P@k {row['precision_at_k']:.3f}; "
          f"macro F1 noisy {f1_noisy:.4f}, cleaned {f1_clean:.4f}", file=sys.stderr)
    return row


def markdown(result: dict) -> str:
    lines = ["| data | train texts | flipped | flagged | precision | recall | P@k (k = flipped) | audit s | "
             "macro F1 original | macro F1 noisy | macro F1 noisy - flagged |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in result["datasets"].items():
        f1 = r["macro_f1"]
        original = f"{f1['original_labels']:.3f}" if "original_labels" in f1 else "-"
        lines.append(f"| {name} | {r['train_texts']:,} | {r['flipped']} | {r['flagged']} | {r['precision']:.3f} | "
                     f"{r['recall']:.3f} | {r['precision_at_k']:.3f} | {r['audit_seconds']['total_seconds']:.0f} | "
                     f"{original} | {f1['noisy']:.3f} | {f1['noisy_minus_flagged']:.3f} |")
    for name, r in result["datasets"].items():
        o = r.get("original_labels_audit")
        if o:
            lines.append(f"\n{name}: of the {o['false_positives']} flagged rows that were not flipped, "
                         f"{o['false_positives_also_flagged_on_original_labels']} are also flagged when the original "
                         f"labels are audited ({o['flagged']} flagged there).")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=["sms_spam", "emotion"], help="folders under --root")
    p.add_argument("--root", type=Path, default=SHARED)
    p.add_argument("--flip", type=float, default=0.05, help="share of training labels flipped (default: 0.05)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-reference", action="store_true", help="skip the model trained on the original labels")
    p.add_argument("--audit-original", action="store_true", help="also audit the original labels (one more audit "
                   "per dataset): how many flagged rows that were not flipped it flags without injected noise")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/audit.json"))
    args = p.parse_args()
    t0 = time.perf_counter()
    rows = {name: run(name, args.root / name, args.flip, args.folds, args.seed, not args.no_reference,
                      args.audit_original) for name in args.datasets}
    import cleanlab
    import sklearn
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_end": os.getloadavg()},
        "versions": {"cleanlab": cleanlab.__version__, "scikit-learn": sklearn.__version__},
        "command": " ".join(["benchmarks/audit.py", *sys.argv[1:]]),
        "setup": f"{args.flip:.0%} of train.csv's labels flipped (random.Random({args.seed}), each to another class "
                 f"uniformly); audit: TfidfClassifier, {args.folds} stratified folds (seed {args.seed}), "
                 "cleanlab.filter.find_label_issues ranked by self-confidence; F1: TfidfClassifier() on test.csv",
        "datasets": rows,
        "total_seconds": time.perf_counter() - t0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
