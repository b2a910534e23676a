"""Distillation into the static student on emotion: the static strategy (MiniLM distilled by model2vec into a
token table that trains, attention pooling, linear head) trained on the labels, against the same model trained
on a MiniLM teacher's probabilities (headswap.jobs.distill, student="static") with label weight 0 and 0.5.

The teacher's probabilities are read, not computed: --teacher-probs holds teacher-{train,validation,test}.npy
(float32 (N, K) predict_proba, rows in the order of the data's CSV files) and teacher.json ("labels": the
columns' class names, "test_macro_f1"). Every model picks its best epoch on the validation set's real labels and
is scored on the whole test set (macro F1, accuracy, agreement with the teacher's argmax). Rows are written to
--out after every fit, so an interrupted run keeps what it measured.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distill_static.py --teacher-probs /work/runs/teacher \\
        --seeds 0 1 2 --out benchmarks/results/distill_static.json
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

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.jobs.distill import distill  # noqa: E402
from headswap.metrics import metrics_from_predictions  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


class PrecomputedTeacher:
    """What distill() reads from a teacher when its probabilities are given: the class names."""

    multi_label, strategy, runtime_ = False, "encoder-mlp", "precomputed"

    def __init__(self, labels: list[str], model: str):
        self.labels_, self.model = labels, model

    def predict_proba(self, texts):
        raise RuntimeError("the teacher's probabilities are precomputed; pass teacher_probs")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher-probs", type=Path, default=Path("/work/runs/teacher"))
    p.add_argument("--data", type=Path, default=SHARED / "emotion")
    p.add_argument("--model", default="minilm")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--label-weights", type=float, nargs="+", default=[0.0, 0.5])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--limit", type=int, help="smoke test: only this many texts of each set")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/distill_static.json"))
    args = p.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    info = json.loads((args.teacher_probs / "teacher.json").read_text())
    labels = list(info["labels"])
    sets = {name: load_dataset(args.data / f"{name}.csv") for name in ("train", "validation", "test")}
    probs = {name: np.load(args.teacher_probs / f"teacher-{name}.npy") for name in sets}
    for name, data in sets.items():
        if probs[name].shape != (len(data), len(labels)):
            raise SystemExit(f"teacher-{name}.npy is {probs[name].shape}, the data has {len(data)} texts")
        if args.limit:
            data.texts, data.labels = data.texts[:args.limit], data.labels[:args.limit]
            probs[name] = probs[name][:args.limit]
    train, val, test = sets["train"], sets["validation"], sets["test"]
    index = {lab: k for k, lab in enumerate(labels)}
    target = np.array([index[y] for y in test.labels])
    teacher_pred = probs["test"].argmax(1)
    m = metrics_from_predictions(target, teacher_pred, labels)
    teacher_row = {"macro_f1": m.f1("macro"), "accuracy": m.accuracy, "recipe": info.get("recipe")}
    print(f"teacher (precomputed): macro F1 {m.f1('macro'):.4f}, accuracy {m.accuracy:.4f}", file=sys.stderr)
    teacher = PrecomputedTeacher(labels, info.get("model", "minilm"))
    settings = {"model": args.model, "epochs": args.epochs, "progress": False}
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": args.threads,
                    "note": "2 shared CPU cores (other jobs running)"},
        "command": " ".join(["benchmarks/distill_static.py", *sys.argv[1:]]),
        "data": str(args.data), "train_texts": len(train), "validation_texts": len(val), "test_texts": len(test),
        "student_settings": {**settings, "strategy": "static"}, "teacher": teacher_row, "rows": [],
    }

    def record(name: str, seed: int, weight, clf, seconds: float) -> None:
        pred = np.array([index[lab] for lab in clf.labels_])[clf.predict_proba(test.texts).argmax(1)]
        m = metrics_from_predictions(target, pred, labels)
        row = {"model": name, "seed": seed, "label_weight": weight, "macro_f1": m.f1("macro"),
               "accuracy": m.accuracy, "agreement_with_teacher": float(np.mean(pred == teacher_pred)),
               "best_epoch": clf.best_epoch_, "fit_seconds": seconds,
               "validation_macro_f1": [h.get("score") for h in clf.history_]}
        result["rows"].append(row)
        result["load_average"] = os.getloadavg()
        print(f"{name} seed {seed}: macro F1 {row['macro_f1']:.4f}, accuracy {row['accuracy']:.4f}, agreement "
              f"{row['agreement_with_teacher']:.4f}, best epoch {row['best_epoch']}, {seconds:.0f} s", file=sys.stderr)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))

    def student(seed: int, w: float) -> None:
        t0 = time.perf_counter()
        clf = distill(teacher, train.texts, train.labels, label_weight=w, progress=False, teacher_probs=probs["train"],
                      student="static", student_params={**settings, "seed": seed}, eval_texts=val.texts,
                      eval_labels=val.labels)
        record("static student", seed, w, clf, time.perf_counter() - t0)

    # The main comparison first (labels vs the first label weight, seed by seed), then the other label weights:
    # an interrupted run has the pairs that matter most.
    for seed in args.seeds:
        t0 = time.perf_counter()
        clf = TextClassifier(strategy="static", seed=seed, **settings).fit(train.texts, train.labels, val.texts,
                                                                          val.labels)
        record("static on labels", seed, None, clf, time.perf_counter() - t0)
        student(seed, args.label_weights[0])
    for w in args.label_weights[1:]:
        for seed in args.seeds:
            student(seed, w)

    summary = {}
    for row in result["rows"]:
        key = row["model"] + ("" if row["label_weight"] is None else f", label weight {row['label_weight']:g}")
        summary.setdefault(key, []).append(row)
    result["summary"] = {k: {"seeds": [r["seed"] for r in rows],
                             "macro_f1_mean": float(np.mean([r["macro_f1"] for r in rows])),
                             "macro_f1": [r["macro_f1"] for r in rows],
                             "accuracy_mean": float(np.mean([r["accuracy"] for r in rows]))}
                         for k, rows in summary.items()}
    args.out.write_text(json.dumps(result, indent=1))
    for k, s in result["summary"].items():
        print(f"{k}: macro F1 mean {s['macro_f1_mean']:.4f} {np.round(s['macro_f1'], 4).tolist()}, accuracy mean "
              f"{s['accuracy_mean']:.4f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
