"""Out-of-scope scores on CLINC150 (Larson et al. 2019, "full" variant): max-softmax, energy, Mahalanobis, kNN.

Data: /work/shared/data/clinc150/{train.csv,validation.csv} (150 intents + `oos`; the official test is kept back).
Every choice is made on a held-out slice of train.csv, seeded and stratified: 10% of each in-scope intent and half
of the 100 `oos` training texts ("tune"). validation.csv (3,000 in-scope + 100 oos) is only reported on.

Two set-ups, as in Larson et al.'s tables, with the same model and settings:
- threshold: trained on the in-scope texts only; out of scope is a threshold on a score;
- oos-class: the other 50 `oos` training texts are a 151st class, plus the same threshold rule.
For each, the best epoch (macro F1) is picked on the tune slice, the scores' statistics are fitted on the training
features, and for every score the threshold is tuned on the tune slice to give up at most --drop of in-scope
accuracy (a rejected in-scope text counts as wrong) against the same model without a threshold. reject_score auto's
pick (the best tune-slice AUROC) is recorded. The JSON is rewritten after each set-up, so a cut-off run keeps what
it measured.

    nice -n 5 .venv/bin/python benchmarks/clinc_oos.py --regime head-only --epochs 10 \
        --out benchmarks/results/clinc_oos.json
    nice -n 5 .venv/bin/python benchmarks/clinc_oos.py --regime full --epochs 1 --checkpoint-dir /tmp/clinc-ckpt \
        --out benchmarks/results/clinc_oos_full.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from headswap import TextClassifier, reject  # noqa: E402

from headswap.decisions import oos_scores
OOS = "oos"


def read(path: Path) -> tuple[list[str], list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def limited(data, limit: int | None):
    if limit is None:
        return data
    seen = defaultdict(int)
    keep = [i for i, lab in enumerate(data[1]) if (seen.__setitem__(lab, seen[lab] + 1) or seen[lab]) <= limit]
    return [data[0][i] for i in keep], [data[1][i] for i in keep]


def split(texts, labels, seed: int, share: float = 0.1) -> dict:
    """train (in-scope), oos_train (the oos texts that may train), tune (held out: in-scope share + the other oos)."""
    rng = random.Random(seed)
    by = defaultdict(list)
    for t, lab in zip(texts, labels):
        by[lab].append(t)
    out = {k: ([], []) for k in ("train", "oos_train", "tune")}
    for lab in sorted(by):
        rows = list(by[lab])
        rng.shuffle(rows)
        n = len(rows) // 2 if lab == OOS else round(share * len(rows))
        for name, part in (("tune", rows[:n]), ("oos_train" if lab == OOS else "train", rows[n:])):
            out[name][0].extend(part)
            out[name][1].extend([lab] * len(part))
    return out


def measure(clf, tune_data, test_data, drop: float) -> dict:
    """Per score: threshold tuned on tune_data for in-scope accuracy >= (no-threshold accuracy - drop); figures
    on test_data. One pass of the model over each data set."""
    def prepared(texts, labels):
        logits, feats = clf.logits_and_features(texts)
        y = np.array([clf.labels_.index(lab) if lab in clf.labels_ else -1 for lab in labels])
        is_oos = np.array([lab == OOS for lab in labels])
        probs = clf.target_.probabilities(logits, clf.temperature_)
        return probs, y, is_oos, clf.reject_step_.scores(clf.temperature_step_.apply(logits), logits, feats)
    k = clf.oos_index_
    t_probs, t_y, t_oos, t_scores = prepared(*tune_data)
    v_probs, v_y, v_oos, v_scores = prepared(*test_data)
    base_tune = reject.scores(t_probs, t_y, t_oos, None, k)["in_scope_accuracy"]
    target = max(base_tune - drop, 1e-6)     # a useless model still may not reject everything
    out = {"tune_in_scope_accuracy_without_threshold": base_tune, "reject_target": target,
           "validation_without_threshold": reject.scores(v_probs, v_y, v_oos, None, k), "scores": {}}
    for name in t_scores:
        score = None if name == "softmax" else t_scores[name]
        threshold, note = reject.tune(t_probs, t_y, t_oos, "in_scope_accuracy", target, k, score)
        at = reject.scores(v_probs, v_y, v_oos, (threshold or None) if score is None else threshold, k,
                           None if score is None else v_scores[name])
        out["scores"][name] = {"tune": oos_scores.figures(t_scores[name], t_oos),
                               "validation": oos_scores.figures(v_scores[name], v_oos),
                               "threshold": threshold, "note": note, "at_threshold": at}
    return out


def run_variant(name, train, tune_data, test_data, params, drop) -> dict:
    print(f"== {name}: {len(train[0])} training texts", flush=True)
    clf = TextClassifier(**params, out_of_scope=OOS, reject_score="auto")
    t0 = time.perf_counter()
    clf.fit(*train, *tune_data)
    seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = {"train_seconds": seconds, "epochs_run": len(clf.history_), "best_epoch": clf.best_epoch_,
           "history": clf.history_, "temperature": clf.temperature_,
           "auto_pick": clf.oos_score_["score"], "auto_tune_auroc": {
               n: f["auroc"] for n, f in clf.oos_score_["validation"].items()},
           **measure(clf, tune_data, test_data, drop)}
    out["measure_seconds"] = time.perf_counter() - t0
    base = out["validation_without_threshold"]["in_scope_accuracy"]
    print(f"   validation in-scope accuracy without threshold {base:.4f}; auto picked {out['auto_pick']}", flush=True)
    for n, s in out["scores"].items():
        a = s["at_threshold"]
        print(f"   {n:12s} AUROC {s['validation']['auroc']:.4f}  FPR@95TPR {s['validation']['fpr_at_95_tpr']:.3f}  "
              f"in-scope acc {a['in_scope_accuracy']:.4f}  oos recall {a['oos_recall']:.3f}  "
              f"precision {a['oos_precision'] or 0:.3f}", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("/work/shared/data/clinc150"))
    p.add_argument("--out", default="benchmarks/results/clinc_oos.json")
    p.add_argument("--model", default="minilm")
    p.add_argument("--regime", default="head-only")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--head-lr", type=float, default=1e-3)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--drop", type=float, default=0.01, help="in-scope accuracy given up for rejection")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", default="threshold,oos-class")
    p.add_argument("--limit", type=int, help="smoke test: at most this many texts per label of each file")
    p.add_argument("--checkpoint-dir", help="checkpoint each epoch (per variant) here and resume from it")
    args = p.parse_args()

    s = split(*limited(read(args.data / "train.csv"), args.limit), args.seed)
    test_data = limited(read(args.data / "validation.csv"), args.limit)
    counts = {k: {"texts": len(v[0]), "oos": v[1].count(OOS)} for k, v in s.items()}
    counts["validation.csv"] = {"texts": len(test_data[0]), "oos": test_data[1].count(OOS)}
    print(counts, flush=True)
    params = dict(model=args.model, strategy="encoder-mlp", regime=args.regime, epochs=args.epochs,
                  max_length=args.max_length, batch_size=args.batch_size, head_lr=args.head_lr, seed=args.seed,
                  progress=False)
    out_file, results = Path(args.out).resolve(), {}
    for name in args.variants.split(","):
        train = s["train"] if name == "threshold" else (s["train"][0] + s["oos_train"][0],
                                                        s["train"][1] + s["oos_train"][1])
        extra = {"checkpoint_dir": f"{args.checkpoint_dir}/{name}", "resume": True, "checkpoint_every": 100} \
            if args.checkpoint_dir else {}
        results[name] = run_variant(name, train, s["tune"], test_data, {**params, **extra}, args.drop)
        write(out_file, args, counts, params, results)   # after each set-up: a later failure keeps it


def write(out_file: Path, args, counts, params, results) -> None:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    out = {"benchmark": "clinc_oos", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_average_at_write": load,
           "command": "benchmarks/clinc_oos.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                                                          vars(args).items() if v is not None),
           "data": "CLINC150 full (clinc/oos-eval data_full.json): train.csv split into train/tune, validation.csv "
                   "reported", "split_counts": counts, "settings": params, "drop": args.drop,
           "definitions": {"auroc": "separating oos (positive) from in-scope texts by the score",
                           "fpr_at_95_tpr": "share of oos texts accepted when 95% of in-scope texts are",
                           "in_scope_accuracy": "a rejected in-scope text counts as wrong"},
           "results": results,
           "published_bert_official_test": {"oos_class": {"in_scope_accuracy": 0.969, "oos_recall": 0.403},
                                            "threshold": {"in_scope_accuracy": 0.962, "oos_recall": 0.523}}}
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(_lean(out), indent=1, default=float) + "\n")
    print(f"wrote {out_file}", flush=True)


def _lean(o):
    """The figures without per-class tables, label lists, histories or histograms (151 classes made 9 MB)."""
    if isinstance(o, dict):
        return {k: _lean(v) for k, v in o.items()
                if k not in ("confusion_matrix", "per_class", "labels", "history", "distribution")}
    return [_lean(v) for v in o] if isinstance(o, list) else o


if __name__ == "__main__":
    main()
