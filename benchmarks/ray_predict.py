"""`headswap predict --engine ray` against the plain local `headswap predict` on the same model and data:
texts/s of each, the ratio, Ray's start-up, and its overhead per batch (the slope of wall time against the
number of batches, over several batch sizes). Both run in this process; the local run writes JSON lines, the
Ray run Parquet. Best of --rounds for each.

    .venv/bin/python benchmarks/ray_predict.py --model-dir /tmp/emotion-tfidf --out benchmarks/results/ray_predict.json

Without --model-dir a TF-IDF model is trained on --train first (saved to --work, reused next time).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARED = Path("/work/shared/data")


def run_local(model_dir: str, data: str, out: Path) -> float:
    from headswap.cli.parser import main
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    with redirect_stderr(io.StringIO()) as err, redirect_stdout(io.StringIO()):
        rc = main(["predict", "--model-dir", model_dir, "--data", data, "--out", str(out), "-q"])
    wall = time.perf_counter() - t0
    assert rc == 0, err.getvalue()
    return wall


def run_ray(model_dir: str, data: str, out: Path, batch_size: int, concurrency: int) -> float:
    from headswap.jobs.batch import predict_ray
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    predict_ray(data, out, model_dir, batch_size=batch_size, concurrency=concurrency, quiet=True)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", help="a saved headswap model (default: train TF-IDF on --train into --work)")
    ap.add_argument("--train", default=str(SHARED / "emotion" / "train.csv"))
    ap.add_argument("--data", default=str(SHARED / "emotion" / "test.csv"))
    ap.add_argument("--repeat", type=int, default=5, help="the data repeated this many times (more batches)")
    ap.add_argument("--batch-sizes", default="50,200,1000", help="comma-separated; the first is the headline")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", default="runs/ray-predict")
    ap.add_argument("--out", default="benchmarks/results/ray_predict.json")
    args = ap.parse_args(argv)

    import numpy as np
    import ray

    from headswap.data.stream import iter_texts
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model_dir = args.model_dir
    if model_dir is None:
        model_dir = str(work / "tfidf")
        if not (Path(model_dir) / "config.json").exists():
            from headswap import load_dataset
            from headswap.baseline.tfidf import TfidfClassifier
            d = load_dataset(args.train)
            t0 = time.perf_counter()
            TfidfClassifier().fit(d.texts, d.labels).save(model_dir)
            print(f"trained TF-IDF on {len(d.texts)} texts in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.repeat > 1:     # the same texts k times: enough batches for the per-batch overhead to show
        import csv
        texts = [t for _, t in iter_texts(args.data)] * args.repeat
        data = work / f"data-x{args.repeat}.csv"
        with open(data, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text"])
            w.writerows([t] for t in texts)
        args.data = str(data)
    n = sum(1 for _ in iter_texts(args.data))
    sizes = [int(s) for s in args.batch_sizes.split(",")]

    local = min(run_local(model_dir, args.data, work / "local.jsonl") for _ in range(args.rounds))
    print(f"local: {local:.2f} s, {n / local:.0f} texts/s", file=sys.stderr)

    # Cold: the command as a user runs it, starting (and stopping) its own local Ray.
    cold = run_ray(model_dir, args.data, work / "ray.parquet", sizes[0], args.concurrency)
    print(f"ray cold (starts Ray): {cold:.2f} s", file=sys.stderr)

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=args.concurrency, include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False)
    start = time.perf_counter() - t0
    warm = {}
    try:
        for bs in sizes:
            warm[bs] = min(run_ray(model_dir, args.data, work / "ray.parquet", bs, args.concurrency)
                           for _ in range(args.rounds))
            print(f"ray warm, batch {bs}: {warm[bs]:.2f} s, {n / warm[bs]:.0f} texts/s", file=sys.stderr)
    finally:
        ray.shutdown()
    batches = np.array([-(-n // bs) for bs in sizes], dtype=float)
    times = np.array([warm[bs] for bs in sizes])
    slope, intercept = (np.polyfit(batches, times, 1) if len(sizes) > 1 else (float("nan"), float("nan")))

    # The answers agree (the test suite checks this too).
    import pyarrow.parquet as pq
    got = pq.read_table(work / "ray.parquet").column("label").to_pylist()
    want = [json.loads(line)["label"] for line in (work / "local.jsonl").read_text(encoding="utf-8").splitlines()]
    assert got == want, "ray and local labels differ"

    head = sizes[0]
    result = {
        "what": "headswap predict --engine ray vs local predict, same model and data (benchmarks/ray_predict.py)",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "note": "shared with other jobs (a running benchmark and other agents)"},
        "ray": ray.__version__, "model_dir": model_dir, "data": args.data, "repeat": args.repeat, "texts": n,
        "concurrency": args.concurrency, "rounds": args.rounds,
        "local_s": round(local, 3), "local_texts_per_s": round(n / local, 1),
        "ray_cold_s": round(cold, 3), "ray_cold_texts_per_s": round(n / cold, 1),
        "ray_start_s": round(start, 3),
        "ray_warm_s": {str(bs): round(t, 3) for bs, t in warm.items()},
        "ray_warm_texts_per_s": {str(bs): round(n / t, 1) for bs, t in warm.items()},
        "ratio_warm_vs_local": round(local / warm[head], 3), "ratio_cold_vs_local": round(local / cold, 3),
        "overhead_per_batch_ms": round(slope * 1000, 2), "fixed_overhead_s": round(intercept, 3),
        "labels_agree": True,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
