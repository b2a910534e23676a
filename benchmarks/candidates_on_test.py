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
import json
import sys
import time
from pathlib import Path

from headswap import AutoClassifier
from headswap.data.load import load_dataset
from headswap.errors import HeadswapError


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
        test, val = args.data / args.test, args.data / "validation.csv"
        train, scored = load_dataset(args.data / "train.csv"), load_dataset(test)
        # validation.csv is what auto chooses on, unless it is the file scored
        X_val = y_val = None
        if val.is_file() and val != test:
            chosen_on = load_dataset(val)
            X_val, y_val = chosen_on.texts, chosen_on.labels
        args.out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        clf = AutoClassifier(budget=args.budget, models=args.models, strategies=args.strategies, blend=False,
                             lr_search=False, progress=False, prior=args.prior, out=str(args.out / "run"))
        clf.fit(train.texts, train.labels, X_val, y_val)
        board = clf.leaderboard(scored.texts, scored.labels)
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
