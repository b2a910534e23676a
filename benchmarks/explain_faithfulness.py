"""Faithfulness of `headswap explain`: ERASER's comprehensiveness (DeYoung et al. 2020) on emotion.

For each test text, the predicted class's probability with the text whole, then with its top 20% words by
attribution deleted, and with 20% of its words picked at random deleted (several draws). A faithful explanation
names words the model relies on: deleting them lowers the probability more than deleting random ones.

Two models, both trained on --train-limit texts of emotion's train.csv (a stratified sample, seed 0):
- MiniLM (all-MiniLM-L6-v2), frozen body, linear head fitted by logistic regression on its mean-pooled features
  (the cheap head-only strategy), explained by Integrated Gradients (--steps);
- TF-IDF + logistic regression (headswap.baseline.tfidf), explained by its coefficients.

    .venv/bin/python benchmarks/explain_faithfulness.py --data ../shared/data/emotion \\
        --out benchmarks/results/explain/faithfulness.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.data.sampling import stratified_subset  # noqa: E402
from headswap.explain import explain  # noqa: E402
from headswap.explain.words import without_words  # noqa: E402
from headswap.baseline.tfidf import TfidfClassifier  # noqa: E402


def comprehensiveness(model, texts, fraction: float, draws: int, seed: int, **explain_kw) -> dict:
    t0 = time.perf_counter()
    exs = explain(model, texts, **explain_kw)
    explain_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    variants, owners, kinds = [], [], []
    for i, ex in enumerate(exs):
        n = len(ex.spans)
        k = max(1, round(fraction * n))
        scores = ex.scores[ex.labels[0]]
        top = np.argsort(-scores, kind="stable")[:k]
        picks = [("top", top)] + [(f"random{d}", rng.choice(n, size=k, replace=False)) for d in range(draws)]
        for kind, drop in picks:
            text = without_words(ex.text, ex.spans, drop)
            variants.append(text if text.strip() else " ")
            owners.append(i)
            kinds.append(kind)
    labels = [str(v) for v in model.labels_]
    cols = np.array([labels.index(ex.labels[0]) for ex in exs])
    full = np.array([ex.probabilities[ex.labels[0]] for ex in exs])
    probs = np.asarray(model.predict_proba(variants))[np.arange(len(variants)), cols[owners]]
    drops = {}
    for kind, o, p in zip(kinds, owners, probs):
        drops.setdefault(kind, np.zeros(len(exs)))[o] = full[o] - p
    random_means = [float(drops[f"random{d}"].mean()) for d in range(draws)]
    random_per_text = np.mean([drops[f"random{d}"] for d in range(draws)], axis=0)
    return {"method": exs[0].method, "texts": len(exs), "explain_seconds": round(explain_s, 1),
            "explain_seconds_per_text": round(explain_s / len(exs), 3),
            "mean_words": float(np.mean([len(ex.spans) for ex in exs])),
            "mean_probability": float(full.mean()),
            "drop_top": float(drops["top"].mean()),
            "drop_random": float(np.mean(random_means)), "drop_random_per_draw": random_means,
            "drop_random_std_over_draws": float(np.std(random_means)),
            "texts_top_beats_random": float(np.mean(drops["top"] > random_per_text))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data/emotion"))
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/explain/faithfulness.json"))
    p.add_argument("--texts", type=int, default=500, help="test texts (the first N of test.csv)")
    p.add_argument("--train-limit", type=int, default=4000)
    p.add_argument("--fraction", type=float, default=0.2)
    p.add_argument("--draws", type=int, default=5)
    p.add_argument("--steps", type=int, default=16, help="Integrated Gradients steps")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    train = stratified_subset(load_dataset(args.data / "train.csv"), args.train_limit, args.seed)
    test = load_dataset(args.data / "test.csv")
    texts, truth = test.texts[:args.texts], test.labels[:args.texts]
    results = {"data": str(args.data.name), "train_texts": len(train), "test_texts": len(texts),
               "fraction": args.fraction, "draws": args.draws, "seed": args.seed,
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {args.threads}, "
                          f"load average at start {os.getloadavg()[0]:.1f}",
               "models": {}}
    t0 = time.perf_counter()
    minilm = TextClassifier(model="minilm", regime="head-only", head="linear", head_fit="logistic",
                            progress=False, seed=args.seed).fit(train.texts, train.labels)
    fit_minilm = time.perf_counter() - t0
    t0 = time.perf_counter()
    tfidf = TfidfClassifier().fit(train.texts, train.labels)
    fit_tfidf = time.perf_counter() - t0
    for name, model, fit_s, kw in (
            ("tfidf-logreg", tfidf, fit_tfidf, {}),
            ("minilm head-only (logistic head)", minilm, fit_minilm, {"steps": args.steps})):
        acc = float(np.mean([str(a) == str(b) for a, b in zip(model.predict(texts), truth)]))
        r = comprehensiveness(model, texts, args.fraction, args.draws, args.seed, **kw)
        r.update(fit_seconds=round(fit_s, 1), test_accuracy=acc, **({"ig_steps": args.steps} if kw else {}))
        results["models"][name] = r
        print(f"{name}: accuracy {acc:.3f}; probability drop, top {args.fraction:.0%} words deleted "
              f"{r['drop_top']:.3f}, random {args.fraction:.0%} {r['drop_random']:.3f} "
              f"(+-{r['drop_random_std_over_draws']:.3f} over {args.draws} draws); top beats random on "
              f"{r['texts_top_beats_random']:.0%} of texts; explain {r['explain_seconds_per_text']} s/text",
              flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
