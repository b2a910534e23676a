"""Rebuild auto's prior (src/headswap/auto/prior.json) from every auto results file under benchmarks/results.

    python benchmarks/build_prior.py [RESULTS_DIR]
    python benchmarks/build_prior.py --without germeval2018 --out /tmp/prior-without-germeval2018.json

Which rung families came within a point of the winner, on which data sets of which shape: headswap.auto.prior.
--without leaves a data set's runs out (leave-one-set-out: benchmarks/prior_loso.py, and `headswap auto --prior FILE`
on that set); such a table is written where --out says, never over the shipped prior.json, which is the table of
every run. A set no run used leaves nothing out (stderr says so): the table is the full one, which never saw it.
"""

import argparse
import json
import sys
from pathlib import Path

from headswap.auto.prior import TABLE, build_table
from headswap.errors import HeadswapError
from headswap.models.registry import BUILTINS

ROOT = Path(__file__).resolve().parent
SHIPPED = ROOT.parent / "src" / "headswap" / "auto" / TABLE


def kinds() -> dict[str, str]:
    return {name: spec.kind for name, spec in BUILTINS.items()}


def main(root: Path = ROOT / "results", without=(), out: Path | None = None) -> dict:
    out = Path(out) if out is not None else None if without else SHIPPED
    if out is None:
        raise HeadswapError("--without needs --out: prior.json is the prior of every run")
    if without and out.resolve() == SHIPPED.resolve():
        raise HeadswapError(f"--out {out}: that is the shipped prior, which --without must not overwrite")
    table = build_table(root, kinds(), without)
    unseen = sorted(set(without) - set(table["without"]))
    if unseen:      # a set auto never ran on (auto_runs.sh LOSO=1 on a new set): the full table never saw it either
        print(f"build_prior: --without {', '.join(unseen)}: no auto run under {root} used it, so nothing is left "
              f"out for it (the runs used {', '.join(sorted([*table['sets'], *table['without']]))})", file=sys.stderr)
    out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(table['families'])} families from {len(table['runs'])} runs on {len(table['sets'])} data "
          f"sets" + (f" (without {', '.join(table['without'])})" if table["without"] else ""))
    return table


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=ROOT / "results")
    parser.add_argument("--without", action="append", default=[], metavar="SET",
                        help="leave out the runs on this data set (its folder's name, e.g. germeval2018)")
    parser.add_argument("--out", type=Path, help="where to write the table (default: the shipped prior.json)")
    args = parser.parse_args()
    try:
        main(args.results, args.without, args.out)
    except HeadswapError as e:
        print(f"build_prior: {e}", file=sys.stderr)
        sys.exit(2)
