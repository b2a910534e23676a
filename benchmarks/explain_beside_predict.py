"""/predict's latency while /explain works, on a real `headswap serve`. Not a test (tests/test_serve_explain.py is).

Starts `python -m headswap.serve --model-dir MODEL` on 127.0.0.1 (a free port), waits for /health, then sends one
/explain of 16 texts of about 600 characters (SMS spam test messages joined) and, while it runs, a single-text
/predict every half second and a second /explain (which should be refused with 429 and Retry-After). Writes
OUT/explain_beside_predict.json and prints one line per figure. Only loopback is contacted.

    HF_HUB_OFFLINE=1 .venv/bin/headswap train --data ../shared/data/sms_spam --model minilm --regime head-only \\
        --head linear --head-fit logistic --train-limit 600 --out runs/minilm-spam -q
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/explain_beside_predict.py --model-dir runs/minilm-spam \\
        --out runs/explain-beside-predict
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "sms_spam" / "test.csv"


def long_texts(n: int = 16, chars: int = 600) -> list[str]:
    with open(DATA, newline="", encoding="utf-8") as f:
        messages = [row["text"] for row in csv.DictReader(f)]
    texts, at = [], 0
    for _ in range(n):
        text = ""
        while len(text) < chars:
            text, at = f"{text} {messages[at % len(messages)]}".strip(), at + 1
        texts.append(text[:chars])
    return texts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def measure(url: str, texts: list[str]) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await client.post("/predict", json={"texts": ["warm up"]})
        t0 = time.perf_counter()
        explaining = asyncio.create_task(client.post("/explain", json={"texts": texts}))
        await asyncio.sleep(0.5)
        second = await client.post("/explain", json={"texts": texts[:1]})
        latencies = []
        while not explaining.done():
            t = time.perf_counter()
            r = await client.post("/predict", json={"texts": ["are we still on for lunch?"]})
            r.raise_for_status()
            latencies.append(time.perf_counter() - t)
            await asyncio.sleep(0.5)
        first = await explaining
        explain_seconds = time.perf_counter() - t0
    first.raise_for_status()
    return {"explain_texts": len(texts), "explain_chars": sum(map(len, texts)) / len(texts),
            "explain_seconds": round(explain_seconds, 2), "predicts_during_explain": len(latencies),
            "predict_seconds_max": round(max(latencies), 3) if latencies else None,
            "predict_seconds_median": round(sorted(latencies)[len(latencies) // 2], 3) if latencies else None,
            "second_explain_status": second.status_code, "second_explain_retry_after": second.headers.get("retry-after"),
            "load_average_at_start": os.getloadavg()[0], "cpus": os.cpu_count()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True, help="folder for explain_beside_predict.json")
    args = p.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "headswap.serve", "--model-dir", args.model_dir, "--host",
                               "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None:
                sys.exit(f"the server ended: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.5)
        result = asyncio.run(measure(url, long_texts()))
    finally:
        server.terminate()
        server.wait(timeout=60)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "explain_beside_predict.json").write_text(json.dumps(result, indent=1) + "\n")
    for k, v in result.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
