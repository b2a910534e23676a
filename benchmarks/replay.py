"""Replay recorded `headswap auto` runs with today's halving policy, in seconds: for each recording (a replay
recording, or an auto run's results.json read as one), the arms' slices are replayed along their recorded learning
curves (headswap.auto.replay) and the winner compared with the one the run picked before its blend.

    python benchmarks/replay.py --recording benchmarks/results/auto_policy/*-15m*.json [--out DIR] [--strict]

Prints one row per recording: set, recorded winner, replayed winner, same?, how many of the arms that ran stopped
by the same rule as in the run, the arms' budget used, replay seconds;
a results.json that cannot be replayed is skipped with its reason. --out writes each recording (DIR/NAME.replay.json,
to replay later or edit) and the table (DIR/replay.md, DIR/replay.json). --strict exits 1 when any replay picks
another winner or takes 10 s or more.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from headswap.auto.recording import load
from headswap.auto.replay import replay
from headswap.errors import HeadswapError

LIMIT_SECONDS = 10.0      # issue 69: a replay judges a rule change in seconds, not a 15-minute run


def short(name: str | None) -> str:
    return "–" if name is None else name.replace(" · ", " ")


def as_recorded(result, recorded: dict) -> tuple[int, int]:
    """Of the arms that ran in the run or in its replay, how many stopped by the same rule: how close the replay
    comes to the run beyond its winner (rules changed since the run, and what a recording infers, move it)."""
    ran = [n for n, a in result.arms.items() if a["slices"] or (recorded.get(n) or {}).get("slices")]
    same = [n for n in ran if result.arms[n]["stopped_because"] == (recorded.get(n) or {}).get("stopped_because")]
    return len(same), len(ran)


def row(rec, result) -> dict:
    return {"set": rec.name, "recorded_winner": result.recorded_winner, "replayed_winner": result.winner,
            "stops_as_recorded": as_recorded(result, rec.recorded.get("arms") or {}),
            "replayed_validation": result.winner_validation, "same": result.same,
            "arms_seconds": round(result.arms_seconds, 1), "used_seconds": round(result.used_seconds, 1),
            "replay_seconds": round(result.wall_seconds, 3), "unrecorded": result.unrecorded, "arms": result.arms,
            "recorded_arms": rec.recorded.get("arms"), "approximations": rec.approximations}


def table(rows: list[dict], skipped: list[tuple[str, str]]) -> str:
    lines = ["| set | recorded winner | replayed winner | same? | arms stopped as recorded | arms' budget used | "
             "replay s |", "|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        same = "–" if r["same"] is None else "yes" if r["same"] else "**no**"
        used = f"{r['used_seconds']:.0f} of {r['arms_seconds']:.0f} s"
        stops = "{} of {}".format(*r["stops_as_recorded"])
        lines.append(f"| {r['set']} | {short(r['recorded_winner'])} | {short(r['replayed_winner'])} | {same} | "
                     f"{stops} | {used} | {r['replay_seconds']:.2f} |")
    lines += [""] * bool(skipped) + [f"skipped {path}: {why}" for path, why in skipped]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recording", nargs="+", required=True, type=Path, metavar="FILE",
                    help="replay recordings, or auto runs' results.json")
    ap.add_argument("--out", type=Path, help="write each recording and the table here")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a replay differs or takes 10 s or more")
    args = ap.parse_args(argv)
    rows, skipped = [], []
    for path in args.recording:
        try:
            rec = load(path)
            if any(r["set"] == rec.name for r in rows):
                rec.name = f"{path.parent.name}/{rec.name}"
            result = replay(rec)
        except HeadswapError as e:
            skipped.append((str(path), str(e)))
            continue
        rows.append(row(rec, result))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{rec.name.replace('/', '_')}.replay.json").write_text(rec.to_json() + "\n")
    text = table(rows, skipped)
    print(text)
    if args.out:
        (args.out / "replay.md").write_text(text + "\n")
        (args.out / "replay.json").write_text(json.dumps({"rows": rows, "skipped": skipped}, indent=1) + "\n")
    if not rows:
        print(f"error: none of the {len(args.recording)} recording(s) could be replayed", file=sys.stderr)
        return 2
    slow = [r for r in rows if r["replay_seconds"] >= LIMIT_SECONDS]
    return 1 if args.strict and (slow or any(r["same"] is False for r in rows)) else 0


if __name__ == "__main__":
    sys.exit(main())
