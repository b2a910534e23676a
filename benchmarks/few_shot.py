"""Few labelled texts: setfit against encoder-mlp, similarity and TF-IDF + LinearSVC at K texts per class.

For each data set, K in --sizes and seed in --seeds: K training texts per class drawn (seeded) from train.csv,
each strategy trained on exactly those texts (no validation split: with 8 texts a class there is none to
spare, as in the SetFit paper), and scored on the full test.csv. Settings are fixed before any run, never
tuned on test: setfit is SetFit's recipe (20 pair rounds, one contrastive epoch at 2e-5, then a linear head,
here trained 50 epochs at 1e-2 on the cached embeddings in place of logistic regression); encoder-mlp fine-tunes
fully for 10 epochs; similarity fine-tunes fully for 10 epochs from the class-name embeddings.

Each finished run is appended to the JSON file at once, and a rerun skips the runs it already holds, so the
benchmark can be stopped and carried on. At the end (or with --report) it writes a mean +- std table and the
learning-curve plot.

    .venv/bin/python benchmarks/few_shot.py --data emotion sms_spam --sizes 8 16 64 --seeds 0 1 2 3 4 \\
        --out benchmarks/results/few_shot.json

--model swaps the body of every strategy (default minilm; e.g. mpnet, the 110M body of SetFit's paper figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.bench.baseline import tfidf_svm  # noqa: E402
from headswap.metrics import metrics_from_predictions  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
STRATEGIES = {
    "setfit": dict(strategy="setfit", model="minilm", regime="head-only", head="linear", epochs=50, head_lr=1e-2,
                   body_lr=2e-5, pair_iterations=20, batch_size=16),
    "encoder-mlp": dict(strategy="encoder-mlp", model="minilm", regime="full", epochs=10, body_lr=5e-5,
                        batch_size=16),
    "similarity": dict(strategy="similarity", model="minilm", regime="full", epochs=10, body_lr=5e-5,
                       batch_size=16),
}


def sample_per_class(data, k: int, seed: int):
    """k texts of every class, drawn with a seeded shuffle per class (file order does not matter)."""
    rng = random.Random(seed)
    by_class: dict[str, list[int]] = {}
    for i, label in enumerate(data.labels):
        by_class.setdefault(label, []).append(i)
    chosen = []
    for label in sorted(by_class):
        members = list(by_class[label])
        rng.shuffle(members)
        if len(members) < k:
            raise SystemExit(f"{data.source}: class {label!r} has only {len(members)} texts, fewer than {k}")
        chosen += members[:k]
    rng.shuffle(chosen)
    return [data.texts[i] for i in chosen], [data.labels[i] for i in chosen]


def run_one(name: str, texts, labels, test, seed: int, model: str = "minilm") -> dict:
    t0 = time.perf_counter()
    if name == "tfidf":
        pipe = tfidf_svm(seed)
        classes = sorted(set(labels))
        pipe.fit(texts, [classes.index(v) for v in labels])
        pred = [classes[i] for i in pipe.predict(test.texts)]
        train_s = time.perf_counter() - t0
    else:
        clf = TextClassifier(**{**STRATEGIES[name], "model": model}, seed=seed, eval_fraction=0, progress=False)
        clf.fit(texts, labels)
        train_s = time.perf_counter() - t0
        pred = list(clf.predict(test.texts))
    classes = sorted(set(test.labels))
    m = metrics_from_predictions([classes.index(v) for v in test.labels], [classes.index(v) for v in pred],
                                 classes)
    return {"macro_f1": m.f1("macro"), "accuracy": m.accuracy, "train_seconds": train_s,
            "seconds": time.perf_counter() - t0}


def _model(run: dict) -> str:
    """The run's body; runs written before --model existed used minilm (tfidf has none)."""
    return run.get("model") or ("-" if run["strategy"] == "tfidf" else "minilm")


def report(results: dict, out: Path) -> None:
    from headswap.reports.plots import new_figure, _save

    rows = results["runs"]
    lines = ["| data | texts per class | strategy | model | macro F1 (mean +- std) | accuracy (mean +- std) | seeds |",
             "|---|---:|---|---|---|---|---:|"]
    series: dict = {}
    for d in sorted({r["data"] for r in rows}):
        for k in sorted({r["k"] for r in rows if r["data"] == d}):
            for s, model in [(s, m) for s in ["setfit", "encoder-mlp", "similarity", "tfidf"]
                             for m in sorted({_model(r) for r in rows})]:
                got = [r for r in rows if (r["data"], r["k"], r["strategy"], _model(r)) == (d, k, s, model)]
                if not got:
                    continue
                f1 = np.array([r["macro_f1"] for r in got])
                acc = np.array([r["accuracy"] for r in got])
                lines.append(f"| {d} | {k} | {s} | {model} | {f1.mean():.3f} +- {f1.std():.3f} | "
                             f"{acc.mean():.3f} +- {acc.std():.3f} | {len(got)} |")
                label = s if model == "minilm" else f"{s} ({model})"
                series.setdefault(d, {}).setdefault(label, []).append((k, f1.mean(), f1.std()))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    fig = new_figure(5.5 * max(1, len(series)), 4.2)
    for n, (d, by_strategy) in enumerate(sorted(series.items()), start=1):
        ax = fig.add_subplot(1, len(series), n)
        for s, points in by_strategy.items():
            ks, means, stds = zip(*points)
            ax.errorbar(ks, means, yerr=stds, marker="o", capsize=3, label=s)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({k for pts in by_strategy.values() for k, _, _ in pts}))
        ax.get_xaxis().set_major_formatter(__import__("matplotlib").ticker.ScalarFormatter())
        ax.set_xlabel("labelled texts per class")
        ax.set_ylabel("test macro F1 (mean +- std over seeds)")
        ax.set_title(d)
        ax.legend(fontsize=8)
    _save(fig, out.with_name(out.stem + "_learning_curve.png"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=["emotion", "sms_spam"])
    p.add_argument("--sizes", nargs="+", type=int, default=[8, 16, 64])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--strategies", nargs="+", default=["setfit", "encoder-mlp", "similarity", "tfidf"])
    p.add_argument("--model", default="minilm", help="the body every strategy uses (tfidf has none)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/few_shot.json"))
    p.add_argument("--report", action="store_true", help="only rewrite the table and plot from --out")
    args = p.parse_args()
    results = json.loads(args.out.read_text()) if args.out.exists() else {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "settings": {k: {**v, "model": args.model} for k, v in STRATEGIES.items()}, "runs": []}
    if not args.report:
        done = {(r["data"], r["k"], r["seed"], r["strategy"], _model(r)) for r in results["runs"]}
        for d in args.data:
            train, test = load_dataset(SHARED / d / "train.csv"), load_dataset(SHARED / d / "test.csv")
            for k in args.sizes:
                for seed in args.seeds:
                    texts, labels = sample_per_class(train, k, seed)
                    for s in args.strategies:
                        model = "-" if s == "tfidf" else args.model
                        if (d, k, seed, s, model) in done:
                            continue
                        r = run_one(s, texts, labels, test, seed, args.model)
                        r.update(data=d, k=k, seed=seed, strategy=s, model=model, n_train=len(texts), n_test=len(test),
                                 finished=datetime.now(timezone.utc).isoformat(timespec="seconds"))
                        results["runs"].append(r)
                        args.out.write_text(json.dumps(results, indent=1))
                        print(f"{d} k={k} seed={seed} {s}: macro F1 {r['macro_f1']:.3f}, accuracy "
                              f"{r['accuracy']:.3f} ({r['seconds']:.0f} s)", flush=True)
    report(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
