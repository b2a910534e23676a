"""Multi-label on GoEmotions (28 labels): minilm encoder-mlp (or --strategy static) against one-vs-rest TF-IDF +
LinearSVC, one run.

Both train on the same training texts (all 43,410, or a stratified --train-limit of them); the encoder picks its
best epoch and tunes each label's temperature and threshold on validation.csv; both are scored once on the full
test.csv (5,427 texts). Writes JSON (every metric, per label) and the per-label F1 chart.

    .venv/bin/python benchmarks/goemotions.py --epochs 2 --out benchmarks/results/goemotions.json
    .venv/bin/python benchmarks/goemotions.py --strategy static --epochs 3 --batch-size 16 --max-length 128 \
        --model-out runs/goemotions-static --out benchmarks/results/goemotions-static.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.bench.baseline import tfidf_svm  # noqa: E402
from headswap.data.multilabel import binarize, read_label_sets  # noqa: E402
from headswap.data.sampling import stratified_subset  # noqa: E402
from headswap.metrics import MultiLabelMetrics  # noqa: E402
from headswap.reports.plots import plot_label_f1  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "go_emotions"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-limit", type=int)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--strategy", choices=("encoder-mlp", "static"), default="encoder-mlp")
    p.add_argument("--body-lr", type=float, help="default: 1e-4 for encoder-mlp, the strategy's own for static")
    p.add_argument("--head-lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--model-out", type=Path, default=Path("runs/goemotions-minilm"))
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/goemotions.json"))
    args = p.parse_args()

    splits = {name: load_dataset(DATA / f"{name}.csv", label_column="labels") for name in ("train", "validation",
                                                                                          "test")}
    labels = read_label_sets(splits["train"], "|")
    for name in ("validation", "test"):
        read_label_sets(splits[name], "|")
    train = splits["train"]
    if args.train_limit:
        train = stratified_subset(train, args.train_limit, 0, by=[row[0] for row in train.labels])
    val, test = splits["validation"], splits["test"]
    y_test = binarize(test.labels, labels)
    result = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count()}, "n_train": len(train),
              "n_validation": len(val), "n_test": len(test), "labels": labels, "rows": {}}

    t0 = time.perf_counter()
    svm = tfidf_svm(0, multi_label=True).fit(train.texts, binarize(train.labels, labels))
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    predicted = svm.predict(test.texts)
    predict_s = time.perf_counter() - t0
    m = MultiLabelMetrics(labels, y_test > 0.5, predicted > 0.5)
    result["rows"]["tfidf-linearsvc-ovr"] = {**m.to_dict(), "train_seconds": train_s,
                                             "test_texts_per_second": len(test) / predict_s}
    print(f"TF-IDF + LinearSVC one-vs-rest: macro F1 {m.f1('macro'):.4f}, micro {m.f1('micro'):.4f} "
          f"({train_s:.0f} s)", flush=True)
    args.out.write_text(json.dumps(result, indent=1))

    body_lr = args.body_lr if args.body_lr or args.strategy == "static" else 1e-4
    clf = TextClassifier(strategy=args.strategy, model="minilm", multi_label=True, epochs=args.epochs,
                         body_lr=body_lr, head_lr=args.head_lr, batch_size=args.batch_size,
                         max_length=args.max_length, checkpoint_dir=str(args.model_out) + "-checkpoints",
                         checkpoint_every=200, resume=True, progress=False)
    t0 = time.perf_counter()
    clf.fit(train.texts, train.labels, val.texts, val.labels)
    train_s = time.perf_counter() - t0
    clf.save(args.model_out)
    t0 = time.perf_counter()
    clf.predict_proba(test.texts)
    predict_s = time.perf_counter() - t0
    m = clf.evaluate(test.texts, test.labels)
    row = {**m.to_dict(), "train_seconds": train_s, "test_texts_per_second": len(test) / predict_s,
           "history": clf.history_,
           "settings": {k: getattr(clf, k) for k in ("epochs", "body_lr", "head_lr", "batch_size", "max_length")}}
    result["rows"][f"minilm-{args.strategy}"] = row
    print(f"minilm {args.strategy}: macro F1 {m.f1('macro'):.4f}, micro {m.f1('micro'):.4f}, samples "
          f"{m.f1('samples'):.4f} ({train_s:.0f} s)\n{m.report()}", flush=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    plot_label_f1(m.to_dict(), args.out.with_suffix(".png"), title=f"GoEmotions test: minilm {args.strategy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
