"""Memory of `headswap serve` over many requests: does its RSS plateau or grow without bound? Not a test.

Starts `python -m headswap.serve` on 127.0.0.1 (a free port; loopback only), sends warm-up requests, then
a fixed number of requests (default 3,000) of random batch sizes (1..--max-texts texts) and random text
lengths (1..--max-words words of SMS text, so most token lengths up to the model's max_length occur), a few at
a time, under a hard time limit. The server's RSS (psutil) is sampled every --every requests. `--direct`
runs the same texts through `predict_proba` in this process instead (no HTTP): torch alone.

Extra environment for the server (e.g. MALLOC_ARENA_MAX=2) is given with --env; flags after `--` go to
`headswap serve`. Writes JSON (the RSS series, the settings, the machine) and prints a summary line.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/serve_memory.py --model-dir /tmp/minilm-spam --label base
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/serve_memory.py --model-dir /tmp/minilm-spam --label arena2 \\
        --env MALLOC_ARENA_MAX=2
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import platform
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
DATA = Path("/work/shared/data/sms_spam/train.csv")


def words(path: Path) -> list[str]:
    if path.is_file():
        with path.open(newline="", encoding="utf-8") as f:
            out = [w for row in csv.DictReader(f) for w in row.get("text", "").split()]
        if out:
            return out
    return "win cash now free entry see you at noon ok on my way home urgent you have won".split()


def payloads(n: int, max_texts: int, max_words: int, seed: int) -> list[list[str]]:
    rng, vocab = random.Random(seed), words(DATA)
    return [[" ".join(rng.choices(vocab, k=rng.randint(1, max_words))) for _ in range(rng.randint(1, max_texts))]
            for _ in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(proc: psutil.Process) -> float:
    return proc.memory_info().rss / 2**20


async def drive(url: str, jobs: list[list[str]], concurrency: int, every: int, proc: psutil.Process,
                deadline: float) -> tuple[list[tuple[int, float]], int, int]:
    series, done, failed = [(0, rss_mb(proc))], 0, 0
    queue = iter(jobs)
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as c:
        async def worker():
            nonlocal done, failed
            for texts in queue:
                if time.monotonic() > deadline:
                    return
                r = await c.post("/predict", json={"texts": texts})
                failed += r.status_code != 200
                done += 1
                if done % every == 0:
                    series.append((done, rss_mb(proc)))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    series.append((done, rss_mb(proc)))
    return series, done, failed


def serve(args, jobs):
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.update(kv.split("=", 1) for kv in args.env)
    cmd = [sys.executable, "-m", "headswap.serve", "--model-dir", str(args.model_dir), "--host", "127.0.0.1",
           "--port", str(port), "--no-access-log", "--log-level", "warning", *args.serve_args]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            try:
                if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() - t0 > 120:
                raise SystemExit(f"the server did not start: {server.stderr.read() if server.poll() is not None else 'timeout'}")
            time.sleep(0.2)
        proc = psutil.Process(server.pid)
        loaded = rss_mb(proc)
        with httpx.Client(base_url=url, timeout=60, trust_env=False) as c:
            for texts in jobs[:args.warmup]:
                c.post("/predict", json={"texts": texts})
        deadline = time.monotonic() + args.time_limit
        series, done, failed = asyncio.run(drive(url, jobs[args.warmup:], args.concurrency, args.every, proc,
                                                 deadline))
        stats = httpx.get(url + "/stats", timeout=5, trust_env=False).json()
        return loaded, series, done, failed, stats
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def direct(args, jobs):
    from headswap import TextClassifier
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    proc = psutil.Process()
    clf = TextClassifier.load(args.model_dir, progress=False)
    loaded = rss_mb(proc)
    for texts in jobs[:args.warmup]:
        clf.predict_proba(texts)
    trim = None
    if args.trim_every:
        import ctypes
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    series, deadline, done = [(0, rss_mb(proc))], time.monotonic() + args.time_limit, 0
    t0 = time.perf_counter()
    for texts in jobs[args.warmup:]:
        if time.monotonic() > deadline:
            break
        clf.predict_proba(texts)
        done += 1
        if trim is not None and done % args.trim_every == 0:
            trim(0)
        if done % args.every == 0:
            series.append((done, rss_mb(proc)))
    series.append((done, rss_mb(proc)))
    return loaded, series, done, 0, {"predict_seconds": time.perf_counter() - t0}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("--label", default="run")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--max-texts", type=int, default=16)
    p.add_argument("--max-words", type=int, default=120)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--time-limit", type=float, default=600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="--direct: torch threads")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="server environment")
    p.add_argument("--direct", action="store_true", help="predict_proba in this process, no server")
    p.add_argument("--trim-every", type=int, default=0, help="--direct: malloc_trim(0) every N requests")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "serve_memory.json")
    p.add_argument("serve_args", nargs="*", help="after --: flags for headswap serve")
    args = p.parse_args()
    jobs = payloads(args.warmup + args.requests, args.max_texts, args.max_words, args.seed)
    t0 = time.monotonic()
    loaded, series, done, failed, stats = (direct if args.direct else serve)(args, jobs)
    half = [mb for n, mb in series if n >= done / 2]
    run = {"label": args.label, "mode": "direct" if args.direct else "serve", "env": args.env,
           "serve_args": args.serve_args, "requests": done, "failed": failed, "seconds": time.monotonic() - t0,
           "rss_loaded_mb": loaded, "rss_after_warmup_mb": series[0][1], "rss_end_mb": series[-1][1],
           "rss_peak_mb": max(mb for _, mb in series), "growth_second_half_mb": half[-1] - half[0],
           "series": series, "server_stats": stats, "trim_every": args.trim_every,
           "settings": {k: getattr(args, k) for k in ("requests", "warmup", "max_texts", "max_words",
                                                       "concurrency", "seed")},
           "machine": {"cpus": os.cpu_count(), "load": os.getloadavg(), "python": platform.python_version()}}
    results = json.loads(args.out.read_text()) if args.out.is_file() else []
    results = [r for r in results if r["label"] != args.label] + [run]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"{args.label}: {done} requests ({failed} failed) in {run['seconds']:.0f}s; RSS loaded "
          f"{loaded:.0f} MB, after warm-up {series[0][1]:.0f}, end {series[-1][1]:.0f}, peak {run['rss_peak_mb']:.0f}; "
          f"second half {run['growth_second_half_mb']:+.0f} MB; {stats or ''}; series " +
          " ".join(f"{n}:{mb:.0f}" for n, mb in series))


if __name__ == "__main__":
    main()
