"""Score the candidates `auto` weighs on test, not only the one it ships: AutoClassifier on a folder's train.csv (and
its validation.csv, where auto would choose on it), then leaderboard(X_test, y_test), AutoGluon's
leaderboard(test_data). The frozen heads come out as in a longer run on the same data (same split, same rungs, same
seeds): a short budget scores them on test, which auto's own results.json does only for the winner and TF-IDF.

    python benchmarks/candidates_on_test.py --data ../shared/data/emotion --budget 4m --prior PRIOR --out OUT
    python benchmarks/candidates_on_test.py --data ../shared/data/clinc150 --test validation.csv --budget 4m ...

--test: the file scored (default test.csv; for CLINC150 and GermEval 2018, whose test splits are kept back,
validation.csv, and then auto holds a tenth of train.csv out to choose on, as benchmarks/auto_runs.sh does).
Writes OUT/leaderboard.json (one row per candidate, best on validation first) and OUT/run/ (auto's results);
prints the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

from headswap import AutoClassifier
from headswap.errors import HeadswapError


def read(path: Path) -> tuple[list[str], list[str]]:
    if not path.is_file():
        raise HeadswapError(f"{path}: no such file")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"text", "label"} <= set(rows[0]):
        raise HeadswapError(f"{path} needs text and label columns and at least one row")
    return [r["text"] for r in rows], [r["label"] for r in rows]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, type=Path, help="a folder with train.csv (and validation.csv, test.csv)")
    p.add_argument("--test", default="test.csv", help="the file in --data scored on (default: %(default)s)")
    p.add_argument("--budget", default="4m", help="auto's budget (default: %(default)s)")
    p.add_argument("--models", nargs="+", default=None, help="auto's --model (default: auto's)")
    p.add_argument("--strategies", nargs="+", default=["encoder-mlp"], help="default: %(default)s")
    p.add_argument("--prior", default="shipped", help="auto's --prior: shipped, none or a table's file")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    try:
        test = args.data / args.test
        X, y = read(args.data / "train.csv")
        Xt, yt = read(test)
        # validation.csv is what auto chooses on, unless it is the file scored
        val = args.data / "validation.csv"
        Xv, yv = read(val) if val.is_file() and val != test else (None, None)
        args.out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        clf = AutoClassifier(budget=args.budget, models=args.models, strategies=args.strategies, blend=False,
                             lr_search=False, progress=False, prior=args.prior, out=str(args.out / "run"))
        clf.fit(X, y, Xv, yv)
        board = clf.leaderboard(Xt, yt)
    except HeadswapError as e:
        print(f"candidates_on_test: error: {e}", file=sys.stderr)
        return 2
    rows = json.loads(board.to_json(orient="records"))
    (args.out / "leaderboard.json").write_text(json.dumps(
        {"data": str(args.data), "test": args.test, "budget": args.budget, "prior": args.prior,
         "seconds": round(time.perf_counter() - start, 1), "rows": rows}, indent=1) + "\n")
    print(board.to_string(max_colwidth=60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
