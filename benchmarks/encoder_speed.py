"""Encoder inference: headswap's predict path vs sentence-transformers' encode on the same model, texts and
batch size, in one run; plus achieved GFLOP/s against the measured matmul peak.

    .venv/bin/python benchmarks/encoder_speed.py --n 512 --batch-size 32 --out benchmarks/results/encoder_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.data.sampling import stratified_split  # noqa: E402
from headswap.models import resolve_model  # noqa: E402
from headswap.bench.perf import forward_flops, matmul_peak_gflops  # noqa: E402
from headswap.train.loop import predict_logits  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "emotion" / "test.csv"))
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/encoder_speed.json")
    args = ap.parse_args(argv)

    data = load_dataset(args.data)
    if args.n < len(data):
        data, _ = stratified_split(data, 1 - args.n / len(data), seed=0)
    texts = data.texts
    clf = TextClassifier(strategy="encoder-mlp", model="minilm", epochs=1, progress=False, max_length=128)
    clf.fit(texts[:32], data.labels[:32])  # a head to run; its quality does not matter here
    items = clf.encoder_.encode(texts)
    run_headswap = lambda: predict_logits(clf.module_, items, clf.encoder_.collate, args.batch_size)  # noqa: E731

    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(resolve_model("minilm").path, device="cpu")
    run_st = lambda: st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)  # noqa: E731

    with torch.inference_mode():
        run_headswap(), run_st()  # warm-up
        t_hs, all_hs = best_of(run_headswap, args.repeats)
        t_st, all_st = best_of(run_st, args.repeats)

    # FLOPs of the whole pass over the texts, in the same length-sorted batches predict uses.
    order = sorted(range(len(items)), key=lambda i: len(items[i]["input_ids"]))
    flops = sum(forward_flops(clf.module_, clf.encoder_.collate([items[i] for i in order[s:s + args.batch_size]]))
                for s in range(0, len(order), args.batch_size))
    peak = matmul_peak_gflops()
    tokens = sum(len(it["input_ids"]) for it in items)
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__},
        "texts": len(texts), "tokens": tokens, "batch_size": args.batch_size, "data": args.data,
        "headswap_texts_per_s": len(texts) / t_hs, "sentence_transformers_texts_per_s": len(texts) / t_st,
        "ratio_headswap_over_st": t_st / t_hs,
        "headswap_seconds_all": all_hs, "st_seconds_all": all_st,
        "forward_gflop": flops / 1e9, "achieved_gflops": flops / t_hs / 1e9, "matmul_peak_gflops": peak,
        "fraction_of_peak": flops / t_hs / 1e9 / peak,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in result.items()
                      if not k.endswith("_all")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
