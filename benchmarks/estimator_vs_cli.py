"""AutoClassifier and `headswap auto` are one engine: on the same data and budget they ship the same kind of winner
and score alike on test. Runs the CLI (a subprocess: its budget counts from its process's start) and then
AutoClassifier.fit on train.csv with validation.csv as X_val (its budget counts from the call), one after the other,
and scores both shipped models on test.csv with scikit-learn's macro F1.

    .venv/bin/python benchmarks/estimator_vs_cli.py --data ../shared/data/emotion --budget 5m \\
        --out benchmarks/results/estimator/emotion-5m.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pandas as pd  # noqa: E402
from sklearn.metrics import f1_score  # noqa: E402


def winner(results: dict) -> dict:
    return {k: results["auto"]["winner"].get(k) for k in ("model_name", "strategy", "regime", "rung",
                                                          "validation_macro_f1")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a folder with train.csv, validation.csv and test.csv")
    p.add_argument("--budget", default="5m")
    p.add_argument("--out", required=True, help="the JSON file to write")
    args = p.parse_args()
    data, work = Path(args.data), Path(tempfile.mkdtemp(prefix="estimator-vs-cli-"))
    test = pd.read_csv(data / "test.csv")
    runs = {}

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "headswap.cli", "auto", "--data", str(data), "--budget", args.budget,
                    "--out", str(work / "cli"), "-q"], check=True)
    cli = json.loads((work / "cli" / "results.json").read_text())
    row = next(r for r in cli["rows"] if r.get("winner"))
    runs["cli"] = {"winner": winner(cli), "test_macro_f1": row["macro_f1"], "wall_seconds": time.perf_counter() - t0,
                   "budget_used": cli["auto"]["budget_used"]}

    from headswap import AutoClassifier
    t0 = time.perf_counter()
    clf = AutoClassifier(budget=args.budget, out=str(work / "python"), progress=False).fit(
        pd.read_csv(data / "train.csv"), X_val=pd.read_csv(data / "validation.csv"))
    seconds = time.perf_counter() - t0
    predicted = clf.predict(test["text"])
    runs["python"] = {"winner": winner(clf.results_), "test_macro_f1": f1_score(test["label"], predicted,
                                                                                 average="macro"),
                      "wall_seconds": seconds, "budget_used": clf.results_["auto"]["budget_used"]}
    runs["difference"] = abs(runs["cli"]["test_macro_f1"] - runs["python"]["test_macro_f1"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"data": str(data), "budget": args.budget, **runs}, indent=2) + "\n")
    print(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
