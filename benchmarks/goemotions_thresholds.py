"""GoEmotions test macro F1 of saved multi-label models under three decision rules: the GoEmotions paper's one
threshold (0.3) on the raw sigmoid, 0.5 on the raw sigmoid, and the model's own per-label temperatures and
thresholds tuned on validation (what `predict` does).

    .venv/bin/python benchmarks/goemotions_thresholds.py runs/goemotions-minilm-2ep runs/goemotions-minilm \\
        --out benchmarks/results/goemotions_thresholds.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from scipy.special import expit  # noqa: E402
from sklearn.metrics import f1_score  # noqa: E402

from headswap import load_dataset  # noqa: E402
from headswap.classifier.estimator import load_model  # noqa: E402
from headswap.data.multilabel import binarize, read_label_sets  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "go_emotions"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", type=Path, help="model directories saved by benchmarks/goemotions.py")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/goemotions_thresholds.json"))
    args = p.parse_args()
    test = load_dataset(DATA / "test.csv", label_column="labels")
    read_label_sets(test, "|")
    out = {}
    for path in args.models:
        clf = load_model(path, progress=False)
        y = binarize(test.labels, list(clf.labels_)) > 0.5
        logits = clf.decision_function(test.texts)     # one pass over the test set for all three rules
        raw = expit(np.asarray(logits))
        row = {f"raw@{t}": f1_score(y, raw >= t, average="macro", zero_division=0) for t in (0.3, 0.5)}
        # the model's own rule, as evaluate() applies it: per-label temperature, then per-label threshold
        row["tuned"] = f1_score(y, clf.target_.chosen(clf.target_.probabilities(logits, clf.temperature_), clf.thresholds_), average="macro", zero_division=0)
        out[str(path)] = row
        print(path, {k: round(v, 4) for k, v in row.items()}, flush=True)
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
