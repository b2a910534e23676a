"""MiniLM full fine-tuning on a GPU: texts/s and validation macro F1 of emotion, float32 (headswap's default on a
GPU) against bf16 autocast and larger batches, in one run.

Each variant fits a TextClassifier (encoder-mlp, regime full, max length 64; headswap's own loop, so the device and
precision are what `headswap train` picks without a flag) in a fresh process of its own: accelerate's precision is
fixed once per process. Texts/s is the training set over the first epoch's seconds; the test macro F1 is of the
epoch that validated best.

    python benchmarks/gpu_train_speed.py --data ../shared/data/emotion
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# name: (batch size, precision: "no" is float32, the default; "bf16" autocast, body learning rate, epochs)
VARIANTS = {
    "fp32-b32": (32, "no", 1e-4, 1),
    "bf16-b32": (32, "bf16", 1e-4, 1),
    "bf16-b128": (128, "bf16", 1e-4, 1),
    "bf16-b128-lr2e-4": (128, "bf16", 2e-4, 1),
    "bf16-b512-lr4e-4": (512, "bf16", 4e-4, 1),
    "fp32-b32-3ep": (32, "no", 1e-4, 3),
}


def one(args, name: str) -> dict:
    """Fit one variant in this process and say what it measured."""
    import torch
    from headswap import TextClassifier, load_dataset
    from sklearn.metrics import f1_score

    batch, precision, body_lr, epochs = VARIANTS[name]
    data = Path(args.data)
    train, val = load_dataset(data / "train.csv"), load_dataset(data / "validation.csv")
    if args.limit:      # a quick check of the script itself
        train, val = train.subset(range(args.limit)), val.subset(range(args.limit))
    test = load_dataset(data / "test.csv") if (data / "test.csv").is_file() else None
    clf = TextClassifier(strategy="encoder-mlp", model=args.model, regime="full", epochs=epochs, batch_size=batch,
                         max_length=64, body_lr=body_lr, progress=False, seed=0, temperature_scaling=False)
    t0 = time.perf_counter()
    clf.fit(train.texts, train.labels, eval_texts=val.texts, eval_labels=val.labels)
    fit_s = time.perf_counter() - t0
    first = clf.history_[0]
    out = {"variant": name, "batch_size": batch, "precision": precision, "body_lr": body_lr, "epochs": epochs,
           "n_train": len(train), "fit_seconds": fit_s, "epoch_seconds": first["seconds"],
           "texts_per_s": len(train) / first["seconds"],
           "validation_macro_f1": max(h["score"] for h in clf.history_),
           "gpu_memory_peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if torch.cuda.is_available() else 0.0}
    if test is not None:
        t0 = time.perf_counter()
        pred = clf.predict(test.texts)
        out["predict_texts_per_s"] = len(test) / (time.perf_counter() - t0)
        out["test_macro_f1"] = float(f1_score(test.labels, list(pred), average="macro"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="folder with train.csv, validation.csv (and test.csv)")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    ap.add_argument("--limit", type=int, default=0, help="only the first N training and validation texts")
    ap.add_argument("--one", help=argparse.SUPPRESS)    # run this variant in this process and print its JSON
    ap.add_argument("--out", default="benchmarks/results/gpu_train_speed.json")
    args = ap.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(one(args, args.one)), flush=True)
        return 0

    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    results = []
    for name in names:
        env = {**os.environ, "ACCELERATE_MIXED_PRECISION": VARIANTS[name][1]}
        proc = subprocess.run([sys.executable, __file__, "--data", args.data, "--model", args.model, "--limit",
                               str(args.limit), "--one", name],
                              env=env, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not lines:
            print(f"{name}: failed (exit {proc.returncode})\n{proc.stderr[-3000:]}", flush=True)
            continue
        r = json.loads(lines[-1][len("RESULT "):])
        results.append(r)
        print(f"{name}: {r['texts_per_s']:.0f} texts/s (first epoch {r['epoch_seconds']:.1f} s, fit "
              f"{r['fit_seconds']:.1f} s), validation macro F1 {r['validation_macro_f1']:.4f}, test "
              f"{r.get('test_macro_f1', float('nan')):.4f}, GPU memory peak {r['gpu_memory_peak_gib']:.2f} GiB",
              flush=True)
        write(args, results)
    return 0 if len(results) == len(names) else 1


def write(args, results: list) -> None:
    """The results so far: a run cut short by its time limit keeps the variants it finished."""
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__},
           "model": args.model, "strategy": "encoder-mlp", "regime": "full", "max_length": 64, "data": args.data,
           "variants": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
