"""Rebuild auto's prior (src/headswap/auto/prior.json) from every auto results file under benchmarks/results.

    python benchmarks/build_prior.py [RESULTS_DIR]

Which rungs won, or came within a point of the winner, by data shape: headswap.auto.prior.
"""

import json
import sys
from pathlib import Path

from headswap.auto.prior import TABLE, build_table
from headswap.models.registry import BUILTINS

ROOT = Path(__file__).resolve().parent


def main(root: Path = ROOT / "results") -> dict:
    kinds = {name: spec.kind for name, spec in BUILTINS.items()}
    table = build_table(root, kinds)
    out = ROOT.parent / "src" / "headswap" / "auto" / TABLE
    out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(table['families'])} families from {len(table['runs'])} runs")
    return table


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "results")
