"""Calibration of a saved classifier: temperature fitted on a validation file, measured on a test file.

Loads the model, fits the temperature on --val (replacing any saved one), and reports the test set's expected
calibration error (15 bins), Brier score and NLL with the plain softmax and with the temperature, plus the
reliability diagram. Predicted classes (and so F1) are the same either way.

    .venv/bin/python benchmarks/calibration.py --model-dir runs/emotion-minilm \\
        --val ../shared/data/emotion/validation.csv --test ../shared/data/emotion/test.csv \\
        --out benchmarks/results/calibration-emotion-minilm.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.reports.plots import plot_reliability  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, type=Path)
    p.add_argument("--val", required=True, type=Path)
    p.add_argument("--test", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    clf = TextClassifier.load(args.model_dir, progress=False)
    val, test = load_dataset(args.val), load_dataset(args.test)
    t0 = time.perf_counter()
    clf.calibrate(val.texts, val.labels)
    fit_s = time.perf_counter() - t0
    m = clf.evaluate(test.texts, test.labels)
    cal = m.extra["calibration"]
    result = {"model_dir": str(args.model_dir), "strategy": clf.strategy, "model": clf.model,
              "validation": str(args.val), "n_validation": len(val), "test": str(args.test), "n_test": len(test),
              "temperature": clf.temperature_, "calibrate_seconds": fit_s, "test_macro_f1": m.f1("macro"),
              "before": cal["before"], "after": cal["after"], "reliability_before": cal["reliability_before"],
              "reliability_after": cal["reliability_after"]}
    args.out.write_text(json.dumps(result, indent=1))
    plot_reliability(cal, args.out.with_suffix(".png"), title=f"{clf.strategy} on {clf.model}: {args.test.name}")
    b, a = cal["before"], cal["after"]
    print(f"{clf.strategy} on {clf.model}: temperature {clf.temperature_:.3f} (fitted on {len(val)} texts); test "
          f"macro F1 {m.f1('macro'):.4f}; ECE {b['ece']:.4f} -> {a['ece']:.4f}, Brier {b['brier']:.4f} -> "
          f"{a['brier']:.4f}, NLL {b['nll']:.4f} -> {a['nll']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
