"""How long the command line takes to answer --help: this checkout against an earlier revision, in one run.

    .venv/bin/python benchmarks/cli_startup.py --compare 1d6f5bf --repeats 7

The earlier revision is checked out into a temporary git worktree and run with the same interpreter
(PYTHONPATH pointing at its src/). Runs alternate between the two, so machine noise hits both alike; the
median of the repeats is reported, and the ratio. JSON to benchmarks/results/cli_startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (["--help"], ["train", "--help"], ["bench", "--help"])


def timed(src: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from headswap.cli import main; sys.exit(main())", *args],
                   env=env, check=False, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", metavar="REV", help="git revision to time against (e.g. 1d6f5bf)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cli_startup.json"))
    args = ap.parse_args()
    sources = {"this checkout": ROOT / "src"}
    with tempfile.TemporaryDirectory() as tmp:
        if args.compare:
            worktree = Path(tmp) / "old"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.compare],
                           check=True, capture_output=True)
            sources[args.compare] = worktree / "src"
        try:
            times = {name: {" ".join(c): [] for c in COMMANDS} for name in sources}
            for _ in range(args.repeats):
                for command in COMMANDS:
                    for name, src in sources.items():
                        times[name][" ".join(command)].append(timed(src, command))
        finally:
            if args.compare:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                               check=False, capture_output=True)
    result = {"python": sys.version.split()[0], "repeats": args.repeats, "load_average": os.getloadavg(),
              "median_seconds": {n: {c: statistics.median(v) for c, v in t.items()} for n, t in times.items()},
              "all_seconds": times}
    for command in (" ".join(c) for c in COMMANDS):
        line = f"headswap {command:<14}" + "".join(
            f"  {name}: {result['median_seconds'][name][command]:.3f} s" for name in sources)
        if args.compare:
            med = result["median_seconds"]
            line += f"  ({med[args.compare][command] / med['this checkout'][command]:.0f}x faster)"
        print(line)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
