"""Load test for `headswap serve`: micro-batching against one request per model call. Not a test.

For each mode it starts `python -m headswap.serve` on 127.0.0.1 (a free port), waits for /health, sends a
few warm-up requests, then fires a fixed number of requests (default 400, single-text, 16 at a time) from
an asyncio httpx client on the same machine, under a hard time limit per mode (default 60 s: whatever is
unfinished then is cancelled and counted). It reports throughput (requests/s, texts/s), latency p50/p90/p99
and the server's own counters (model batches, texts per batch), writes JSON and prints a markdown table.

Only loopback is ever contacted. The client shares the CPU with the server, and on a shared machine
other load matters too: the JSON records the CPU count and load average at the start.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/load_test.py --model-dir /tmp/minilm-spam
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/load_test.py            # builds a tiny random encoder model
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = Path("/work/shared/data/sms_spam/test.csv")
MODES = {   # name -> extra `headswap serve` flags (max-batch-size / max-wait-ms are added for batched modes)
    "batched": [],
    "greedy": ["--max-wait-ms", "0"],   # merge only what is already queued, never wait
    "unbatched": ["--no-batching"],
}


def read_texts(path: Path, n: int) -> list[str]:
    if path.is_file():
        with path.open(newline="", encoding="utf-8") as f:
            texts = [row["text"] for _, row in zip(range(n), csv.DictReader(f)) if row.get("text", "").strip()]
        if texts:
            return texts
    return [f"message {i}: {w}" for i, w in enumerate(["win cash now", "see you at noon", "free entry txt win",
                                                        "running late sorry", "urgent you have won"] * (n // 5 + 1))]


def build_tiny_model(folder: Path) -> Path:
    """A random tiny BERT (tests/tiny_models.py) trained one epoch on 12 texts: measures serving overhead."""
    sys.path.insert(0, str(REPO / "tests"))
    from tiny_models import make_tiny_encoder

    from headswap import TextClassifier
    x = ["win cash now", "free entry txt win", "see you at noon", "ok on my way home", "urgent you have won",
         "running late sorry"] * 2
    y = ["spam", "spam", "ham", "ham", "spam", "ham"] * 2
    enc = make_tiny_encoder(folder / "encoder")
    clf = TextClassifier(strategy="encoder-mlp", model=str(enc), epochs=1, progress=False).fit(x, y)
    return clf.save(folder / "model")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, model_dir: Path, flags: list[str], log_path: Path, startup_timeout: float):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "headswap.serve", "--model-dir", str(model_dir), "--host", "127.0.0.1",
                    "--port", str(self.port), "--log-level", "warning", "--no-access-log", *flags]
        self.log_path, self.startup_timeout = log_path, startup_timeout

    def __enter__(self):
        self.log = self.log_path.open("w")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(base_url=self.url, timeout=5, trust_env=False) as c:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.tail()}")
                try:
                    if c.get("/health").status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"the server did not answer /health in {self.startup_timeout:.0f} s:\n"
                                       f"{self.tail()}")
                time.sleep(0.2)

    def tail(self) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log.close()


async def fire(url: str, texts: list[str], n_requests: int, per_request: int, concurrency: int,
               time_limit: float) -> dict:
    """n_requests POST /predict from `concurrency` workers; stops by itself after time_limit seconds."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    issued = 0

    async def worker(client: httpx.AsyncClient):
        nonlocal issued
        while issued < n_requests:
            i = issued
            issued += 1
            batch = [texts[(i * per_request + k) % len(texts)] for k in range(per_request)]
            t0 = time.perf_counter()
            try:
                r = await client.post("/predict", json={"texts": batch})
                ok = r.status_code == 200 and len(r.json()["predictions"]) == per_request
                key = None if ok else f"HTTP {r.status_code}"
            except httpx.HTTPError as e:
                key = type(e).__name__
            if key is None:
                latencies.append(time.perf_counter() - t0)
            else:
                errors[key] = errors.get(key, 0) + 1

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=time_limit, limits=limits, trust_env=False) as client:
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(worker(client)) for _ in range(concurrency)]
        done, pending = await asyncio.wait(tasks, timeout=time_limit)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        seconds = time.perf_counter() - t0
    for t in done:
        if t.exception() is not None:
            errors[type(t.exception()).__name__] = errors.get(type(t.exception()).__name__, 0) + 1
    lat = np.array(latencies) * 1000
    ok = len(latencies)
    return {"requests_sent": min(issued, n_requests), "requests_ok": ok, "errors": errors,
            "timed_out": bool(pending), "seconds": seconds,
            "requests_per_s": ok / seconds if seconds else 0.0,
            "texts_per_s": ok * per_request / seconds if seconds else 0.0,
            "latency_ms": {q: float(np.percentile(lat, int(q[1:]))) if ok else None for q in ("p50", "p90", "p99")}
            | {"mean": float(lat.mean()) if ok else None, "max": float(lat.max()) if ok else None}}


def run_mode(name: str, model_dir: Path, args, texts: list[str], log_dir: Path) -> dict:
    flags = list(MODES[name]) + ["--threads", str(args.server_threads)]
    if name != "unbatched":
        flags = ["--max-batch-size", str(args.max_batch_size)] + \
            ([] if "--max-wait-ms" in flags else ["--max-wait-ms", str(args.max_wait_ms)]) + flags
    with ServerProcess(model_dir, flags, log_dir / f"server-{name}.log", args.startup_timeout) as server:
        with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as c:
            health = c.get("/health").json()
            for i in range(args.warmup):
                c.post("/predict", json={"texts": [texts[i % len(texts)]] * args.texts_per_request})
            before = c.get("/stats").json()
        result = asyncio.run(fire(server.url, texts, args.requests, args.texts_per_request, args.concurrency,
                                  args.time_limit))
        with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as c:
            after = c.get("/stats").json()
    batches = after["batches"] - before["batches"]
    served = after["texts"] - before["texts"]
    result.update(mode=name, server_flags=flags, model=health["model"], strategy=health["strategy"],
                  model_batches=batches, texts_per_batch=served / batches if batches else None,
                  largest_batch=after["largest_batch"],
                  model_seconds=after["model_seconds"] - before["model_seconds"])
    return result


def markdown(results: list[dict], args) -> str:
    rows = [f"| mode | requests ok | errors | seconds | requests/s | texts/s | p50 ms | p90 ms | p99 ms | "
            f"model batches | texts/batch |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lat = r["latency_ms"]
        fmt = (lambda v: "-" if v is None else f"{v:.1f}")
        errors = r["requests_sent"] - r["requests_ok"]   # HTTP errors, transport errors, cancelled at the limit
        rows.append(f"| {r['mode']}{' (timed out)' if r['timed_out'] else ''} | {r['requests_ok']} | {errors} | "
                    f"{r['seconds']:.1f} | {r['requests_per_s']:.1f} | {r['texts_per_s']:.1f} | {fmt(lat['p50'])} | "
                    f"{fmt(lat['p90'])} | {fmt(lat['p99'])} | {r['model_batches']} | "
                    f"{fmt(r['texts_per_batch'])} |")
    head = (f"{args.requests} requests x {args.texts_per_request} text(s), concurrency {args.concurrency}, "
            f"batched: max {args.max_batch_size} texts / {args.max_wait_ms:g} ms; server torch threads "
            f"{args.server_threads}")
    return head + "\n\n" + "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", help="a saved headswap model (default: build a tiny random encoder model)")
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--texts-per-request", type=int, default=1)
    p.add_argument("--time-limit", type=float, default=60.0, help="hard limit per mode for the load phase, seconds")
    p.add_argument("--startup-timeout", type=float, default=180.0, help="seconds to wait for a server's /health")
    p.add_argument("--modes", default="batched,unbatched", help=f"comma-separated, from {', '.join(MODES)}")
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument("--max-wait-ms", type=float, default=5.0)
    p.add_argument("--server-threads", type=int, default=1, help="torch intra-op threads in the server")
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--data", default=str(DATA), help="CSV with a text column to draw request texts from")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "load_test.json"))
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        p.error(f"unknown modes {unknown}; choose from {list(MODES)}")
    for name in ("requests", "concurrency", "texts_per_request", "max_batch_size", "server_threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 < args.time_limit <= 600:
        p.error("--time-limit must be in (0, 600] seconds")

    texts = read_texts(Path(args.data), max(args.requests * args.texts_per_request, 64))
    tmp = Path(tempfile.mkdtemp(prefix="headswap-load-"))
    try:
        if args.model_dir:
            model_dir = Path(args.model_dir)
        else:
            print("no --model-dir: building a tiny random encoder model", file=sys.stderr)
            model_dir = build_tiny_model(tmp)
        load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
        results = []
        for name in modes:
            print(f"mode {name}: starting the server ...", file=sys.stderr)
            results.append(run_mode(name, model_dir, args, texts, tmp))
            r = results[-1]
            print(f"mode {name}: {r['requests_ok']} ok in {r['seconds']:.1f} s, {r['requests_per_s']:.1f} req/s, "
                  f"p50 {r['latency_ms']['p50'] or 0:.1f} ms", file=sys.stderr)
        report = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
                  "model_dir": str(model_dir) if args.model_dir else "(tiny random encoder, built)",
                  "machine": {"cpus": os.cpu_count(), "load_average_at_start": load_before,
                              "python": platform.python_version(), "platform": platform.platform()},
                  "results": results}
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
        print(markdown(results, args))
        print(f"\nwrote {out}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
