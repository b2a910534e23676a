"""The static tier: MiniLM distilled by model2vec into static token vectors (strategy `static`, its first
recipe and its defaults) against TF-IDF + LinearSVC (the bench baseline), in one run; emotion by default.

Macro F1 on the whole emotion test set; prediction speed in texts/s on one core (torch.set_num_threads(1),
RAYON_NUM_THREADS=1 for the Rust tokenizers), fed --chunk texts per call as `headswap predict` does, best of
--rounds rounds, the rows taking turns within each round. Fit time includes loading MiniLM and, on the first
run only, distilling it (cached under HEADSWAP_CACHE/static). The machine may be shared: compare the rows' ratios, taken in the same run, rather than absolute numbers.

    .venv/bin/python benchmarks/static.py --seeds 0 1 2 --out benchmarks/results/static.json
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
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")        # model2vec tokenizes with the Rust tokenizer's pool
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.bench.baseline import tfidf_svm  # noqa: E402
from headswap.metrics import metrics_from_predictions  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def speed(predict, texts: list[str], chunk: int, rounds: int) -> float:
    """Texts per second of predict over all texts, `chunk` at a time; the best of `rounds`."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i in range(0, len(texts), chunk):
            predict(texts[i:i + chunk])
        best = min(best, time.perf_counter() - t0)
    return len(texts) / best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "emotion"))
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--rows", default="before,default",
                    help="comma-separated: 'default' (the strategy's defaults: the table trains, attention pooling, "
                         "linear head, the training texts' words added) and 'before' (the first recipe: frozen "
                         "table, mean pooling, MLP head, the encoder's vocabulary)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of the 'default' row")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--head-lr", type=float, default=None, help="default: the settings' default")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/static.json")
    args = ap.parse_args()

    folder = Path(args.data)
    train = load_dataset(str(folder / "train.csv"))
    val = load_dataset(str(folder / "validation.csv"))
    test = load_dataset(str(folder / "test.csv"))
    labels = sorted(set(train.labels))
    rows = []

    torch.set_num_threads(1)
    pipe = tfidf_svm(0)
    t0 = time.perf_counter()
    pipe.fit(train.texts, train.labels)
    fit_s = time.perf_counter() - t0
    m = metrics_from_predictions([labels.index(v) for v in test.labels],
                                 [labels.index(v) for v in pipe.predict(test.texts)], labels)
    rows.append({"row": "tfidf-linearsvc", "macro_f1": m.f1("macro"), "accuracy": m.accuracy, "fit_seconds": fit_s})
    predictors = [pipe.predict]
    print(json.dumps(rows[-1]), file=sys.stderr)

    recipes = {"before": dict(regime="head-only", pooling="mean", head="mlp", static_vocab_min_count=0),
               "default": {}}
    for name in [r for r in args.rows.split(",") if r]:
        for seed in (args.seeds if name == "default" else [0]):
            torch.set_num_threads(1)
            t0 = time.perf_counter()
            kw = dict(strategy="static", model=args.model, epochs=args.epochs, batch_size=args.batch_size,
                      progress=False, seed=seed, **recipes[name])
            if args.head_lr:
                kw["head_lr"] = args.head_lr
            clf = TextClassifier(**kw)
            clf.fit(train.texts, train.labels, eval_texts=val.texts, eval_labels=val.labels)
            fit_s = time.perf_counter() - t0
            m = clf.evaluate(test.texts, test.labels)
            p = clf.resolved_params()
            rows.append({"row": f"static-{name}", "seed": seed, "model": args.model,
                         **{k: p[k] for k in ("regime", "pooling", "head", "static_vocab_min_count", "epochs",
                                              "batch_size", "head_lr", "body_lr")},
                         "words_added": len(clf.static_vocabulary_), "table_rows":
                             clf.module_.body.embeddings.num_embeddings,
                         "macro_f1": m.f1("macro"), "accuracy": m.accuracy,
                         "fit_seconds_incl_load_and_distill": fit_s})
            predictors.append(clf.predict)
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

    # Speed rounds interleave the rows, so a load change on a shared machine hits every row alike.
    torch.set_num_threads(1)
    best = [0.0] * len(rows)
    for _ in range(args.rounds):
        for i, predict in enumerate(predictors):
            best[i] = max(best[i], speed(predict, test.texts, args.chunk, 1))
    for row, tps in zip(rows, best):
        row["texts_per_second"] = tps

    base = rows[0]
    for r in rows[1:]:
        r["speed_ratio_vs_tfidf"] = r["texts_per_second"] / base["texts_per_second"]
        r["macro_f1_minus_tfidf"] = r["macro_f1"] - base["macro_f1"]
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
           "cpu_count": os.cpu_count(), "load_average": os.getloadavg(), "threads": 1, "chunk": args.chunk,
           "rounds": args.rounds, "data": str(folder), "test_texts": len(test), "torch": torch.__version__,
           "command": "python " + " ".join(sys.argv), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
