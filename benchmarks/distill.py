"""Distillation on emotion: the TF-IDF + logistic regression student trained on a MiniLM teacher's probabilities
(headswap.jobs.distill), against the teacher itself and against the same TF-IDF model trained on the labels alone.

Rows, all scored on the whole emotion test set (macro F1, accuracy, agreement with the teacher's labels) and timed
in this one run (texts/s over the test set, fed 256 texts at a time as `headswap predict` does; best of --rounds
rounds): the teacher on torch and as its ONNX int8 export; TF-IDF on the labels; students distilled from the
emotion training texts with label weight 0 and 0.5; and students that also learn from the teacher's
probabilities on the GoEmotions training texts (unlabelled here: their labels are not used).

The teacher's probabilities on the training and unlabelled texts are cached under --cache (with the texts' hash,
checked on reuse), so a rerun skips the teacher inference.

    .venv/bin/python benchmarks/distill.py --teacher runs/cw-none --onnx runs/export-speed/onnx-int8 \\
        --threads 1 --save runs/distill/students --out benchmarks/results/distill.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.data.stream import iter_texts  # noqa: E402
from headswap.jobs.distill import distill, teacher_probabilities  # noqa: E402
from headswap.metrics import metrics_from_predictions  # noqa: E402
from headswap.saved.model_dir import read_config  # noqa: E402
from headswap.baseline.tfidf import TfidfClassifier  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CHUNK = 256     # texts per predict_proba call: `headswap predict`'s default --chunk-size


def cached_probabilities(teacher, texts: list[str], path: Path, teacher_dir: str) -> tuple[np.ndarray, float]:
    """The teacher's probabilities on texts, from path (.npy, with a .json of the texts' hash) or computed."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        info = json.loads(meta.read_text())
        if info.get("sha256") == digest and info.get("teacher") == str(Path(teacher_dir).resolve()):
            print(f"teacher probabilities: cached {path}", file=sys.stderr)
            return np.load(path), info["seconds"]
    print(f"teacher probabilities on {len(texts)} texts -> {path}", file=sys.stderr)
    probs, seconds = teacher_probabilities(teacher, texts, progress=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, probs)
    meta.write_text(json.dumps({"teacher": str(Path(teacher_dir).resolve()), "texts": len(texts), "sha256": digest,
                                "seconds": seconds, "texts_per_second": len(texts) / seconds}))
    return probs, seconds


def timed_probabilities(clf, texts: list[str], rounds: int) -> tuple[np.ndarray, list[float]]:
    """Probabilities on texts, CHUNK at a time, and the texts/s of each round."""
    speeds, probs = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = np.concatenate([clf.predict_proba(texts[i:i + CHUNK]) for i in range(0, len(texts), CHUNK)])
        speeds.append(len(texts) / (time.perf_counter() - t0))
        probs = out if probs is None else probs
    return probs, speeds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", default="runs/cw-none", help="the teacher's model directory (torch)")
    p.add_argument("--onnx", default="runs/export-speed/onnx-int8", help="the teacher's ONNX export, timed too "
                   "('' to skip)")
    p.add_argument("--data", type=Path, default=SHARED / "emotion")
    p.add_argument("--unlabeled", type=Path, default=SHARED / "go_emotions" / "train.csv")
    p.add_argument("--cache", type=Path, default=Path("runs/distill"))
    p.add_argument("--C", type=float, default=10.0, help="the TF-IDF models' inverse regularisation strength")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds over the test set (best is reported)")
    p.add_argument("--teacher-rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch and ONNX Runtime threads (default 1: the TF-IDF "
                   "models predict on one thread, and on a shared machine a second thread contends)")
    p.add_argument("--limit", type=int, help="smoke test: only this many texts of each set")
    p.add_argument("--save", type=Path, help="save each student here (a folder per row)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/distill.json"))
    args = p.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    train = load_dataset(args.data / "train.csv")
    test = load_dataset(args.data / "test.csv")
    unlabeled = [t for _, t in iter_texts(args.unlabeled)]
    if args.limit:
        train.texts, train.labels = train.texts[:args.limit], train.labels[:args.limit]
        test.texts, test.labels = test.texts[:args.limit], test.labels[:args.limit]
        unlabeled = unlabeled[:args.limit]
    teacher = TextClassifier.load(args.teacher, progress=False, runtime="torch")
    labels = list(teacher.labels_)
    index = {lab: k for k, lab in enumerate(labels)}
    target = np.array([index[y] for y in test.labels])
    tag = f"-{args.limit}" if args.limit else ""
    train_probs, train_seconds = cached_probabilities(teacher, train.texts, args.cache / f"teacher-train{tag}.npy",
                                                      args.teacher)
    unl_probs, unl_seconds = cached_probabilities(teacher, unlabeled, args.cache / f"teacher-unlabeled{tag}.npy",
                                                  args.teacher)

    rows, teacher_test = {}, None

    def score(name: str, clf, rounds: int, **extra) -> None:
        nonlocal teacher_test
        probs, speeds = timed_probabilities(clf, test.texts, rounds)
        col = [index[lab] for lab in clf.labels_]     # the classifier's class order -> the teacher's
        pred = np.array(col)[probs.argmax(1)]
        teacher_test = pred if teacher_test is None else teacher_test
        m = metrics_from_predictions(target, pred, labels)
        rows[name] = {"macro_f1": m.f1("macro"), "accuracy": m.accuracy,
                      "agreement_with_teacher": float(np.mean(pred == teacher_test)),
                      "texts_per_second": max(speeds), "texts_per_second_rounds": speeds, **extra}
        r = rows[name]
        print(f"{name}: macro F1 {r['macro_f1']:.4f}, accuracy {r['accuracy']:.4f}, agreement "
              f"{r['agreement_with_teacher']:.4f}, {r['texts_per_second']:.0f} texts/s", file=sys.stderr)

    score("teacher (MiniLM, torch)", teacher, args.teacher_rounds, model_dir=args.teacher)
    if args.onnx:
        import onnxruntime as ort
        onnx = TextClassifier.load(args.onnx, progress=False)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = args.threads
        graph = Path(args.onnx) / read_config(Path(args.onnx))["export"]["file"]
        onnx.module_.session = ort.InferenceSession(str(graph), options,
                                                    providers=["CPUExecutionProvider"])
        score("teacher (MiniLM, ONNX int8)", onnx, args.teacher_rounds, model_dir=args.onnx)

    def fitted(name: str, make) -> None:
        t0 = time.perf_counter()
        clf = make()
        fit = time.perf_counter() - t0
        record = getattr(clf, "distillation_", {})
        if record:      # the teacher's path and its (cached) seconds on these texts, for the saved config
            record["teacher"] = str(Path(args.teacher).resolve())
            record["teacher_seconds"] = round(train_seconds + (unl_seconds if record["unlabelled"] else 0), 3)
        if args.save:
            clf.save(args.save / re.sub(r"[^a-z0-9.]+", "-", name.lower().replace("+", "plus")).strip("-"))
        score(name, clf, args.rounds, fit_seconds=fit, train_texts=record.get("texts", len(train)) +
              record.get("unlabelled", 0), train_agreement_with_teacher=record.get("agreement"))

    both = np.concatenate([train_probs, unl_probs])
    fitted("TF-IDF on labels", lambda: TfidfClassifier(C=args.C).fit(train.texts, train.labels))
    for name, w, extra in [("student, label weight 0", 0.0, False), ("student, label weight 0.5", 0.5, False),
                           ("student + GoEmotions, label weight 0", 0.0, True),
                           ("student + GoEmotions, label weight 0.5", 0.5, True)]:
        fitted(name, lambda: distill(teacher, train.texts, train.labels, unlabeled if extra else None,
                                     label_weight=w, C=args.C, progress=False,
                                     teacher_probs=both if extra else train_probs))
        rows[name]["label_weight"] = w

    teacher_speed = rows["teacher (MiniLM, torch)"]["texts_per_second"]
    for r in rows.values():
        r["speed_x_teacher_torch"] = r["texts_per_second"] / teacher_speed
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "load_average_at_end": os.getloadavg()},
        "command": " ".join(["benchmarks/distill.py", *sys.argv[1:]]),
        "teacher": args.teacher, "data": str(args.data), "unlabeled": str(args.unlabeled),
        "train_texts": len(train), "unlabeled_texts": len(unlabeled), "test_texts": len(test), "C": args.C,
        "teacher_inference_seconds": {"train": train_seconds, "unlabeled": unl_seconds},
        "timing": f"texts/s over the test set, {CHUNK} texts per predict_proba call, best of {args.rounds} rounds "
                  f"({args.teacher_rounds} for the teachers), {args.threads} thread(s)",
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


def markdown(result: dict) -> str:
    lines = [f"Emotion test set ({result['test_texts']} texts); students trained on {result['train_texts']} emotion "
             f"training texts (+ {result['unlabeled_texts']} GoEmotions texts, unlabelled, where named). "
             f"{result['timing']}; {result['machine']['cpus']} CPUs, measured {result['date']}.", "",
             "| model | macro F1 | accuracy | agrees with teacher | texts/s | x teacher (torch) | fit s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in result["rows"].items():
        fit = f"{r['fit_seconds']:.0f}" if "fit_seconds" in r else "-"
        lines.append(f"| {name} | {r['macro_f1']:.3f} | {r['accuracy']:.3f} | {r['agreement_with_teacher']:.3f} | "
                     f"{r['texts_per_second']:,.0f} | {r['speed_x_teacher_torch']:.1f} | {fit} |")
    t = result["teacher_inference_seconds"]
    lines += ["", f"Teacher inference for the targets (once, cached): {t['train']:.0f} s on the training texts, "
              f"{t['unlabeled']:.0f} s on the GoEmotions texts."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
