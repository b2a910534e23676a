"""How far a test macro F1 moves with the test sample alone: each results file's shipped row resampled by the
bootstrap (its test texts drawn again with replacement, 2,000 times, from the run's confusion matrix, which holds
everything macro F1 reads), giving the standard deviation and the 5-95% range.

    python benchmarks/f1_noise.py benchmarks/results/auto_blend/germeval2018-15m*.json
"""

import json
import sys

import numpy as np

from headswap.metrics import macro_f1

DRAWS = 2000


def noise(confusion, seed: int = 0) -> tuple[float, float, float, float]:
    """(macro F1, bootstrap standard deviation, 5th and 95th percentiles)."""
    c = np.asarray(confusion, dtype=float)
    n = int(c.sum())
    draws = np.random.default_rng(seed).multinomial(n, (c / n).ravel(), size=DRAWS).reshape(DRAWS, *c.shape)
    f = macro_f1(draws)
    return float(macro_f1(c)), float(f.std()), float(np.percentile(f, 5)), float(np.percentile(f, 95))


if __name__ == "__main__":
    for path in sys.argv[1:]:
        rows = json.load(open(path))["rows"]
        for row in rows:
            if row.get("confusion"):
                f, sd, lo, hi = noise(row["confusion"])
                who = "TF-IDF" if row.get("baseline") else "shipped"
                print(f"{path}: {who} test macro F1 {f:.4f} on {row['n_test']} texts, bootstrap sd {sd:.4f}, "
                      f"5-95% {lo:.4f}-{hi:.4f}")
