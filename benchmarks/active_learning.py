"""Active learning on frozen MiniLM features: random against uncertainty against uncertainty + diversity.

For each data set, seed and strategy: start from a seeded random labelled set (emotion: 200 texts; CLINC150: 2 per
class, 300), then in rounds of 200 ask headswap.classifier.suggest.select (the code behind `headswap suggest` and
TextClassifier.suggest) which pool texts to label next, "label" them from the data set's own labels, refit the head
and score macro F1 on the test set, until 2,000 labels. The model is a frozen-feature head: MiniLM's mean-pooled
features (headswap's encoder-mlp body, max_length 64), computed ONCE for pool and test and cached on disk, and a
scikit-learn logistic regression refit on the labelled features each round (what --head-fit logistic fits).

    .venv/bin/python benchmarks/active_learning.py --data emotion clinc150 --seeds 0 1 2 \\
        --out benchmarks/results/active_learning

--data takes the two built-in sets by name (folders of ../shared/data) or folders of your own. emotion: pool
train.csv (16,000), test test.csv (2,000), first labels 200 at random. CLINC150: pool train.csv (15,100), test
validation.csv (3,100; the official test split is kept back), first labels 2 per class. A folder of your own: pool
train.csv, test test.csv (validation.csv where there is none), first labels 2 per class. Everything is written under
--out: OUT/NAME.json per set (each finished curve at once; a rerun skips those it has), the features cached in
OUT/features/NAME.npz, and the curves in OUT/active_learning.png.
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

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SETS = {"emotion": ("train.csv", "test.csv", 200), "clinc150": ("train.csv", "validation.csv", None)}   # built in
STRATEGIES = ("random", "entropy", "margin", "margin-kmeans")
MODEL, MAX_LENGTH = "minilm", 64


def data_set(ref: str) -> tuple[str, Path, str, str, int | None]:
    """(name, folder, pool file, test file, first random labels or None for 2 per class) of a --data value: a
    built-in set's name or a folder with train.csv and test.csv (or validation.csv)."""
    if ref in SETS and not Path(ref).is_dir():
        return (ref, SHARED / ref, *SETS[ref])
    folder = Path(ref)
    test = next((f for f in ("test.csv", "validation.csv") if (folder / f).is_file()), None)
    if not (folder / "train.csv").is_file() or test is None:
        raise SystemExit(f"--data {ref}: not a built-in set ({', '.join(SETS)}) nor a folder with train.csv and "
                         "test.csv (or validation.csv)")
    return folder.resolve().name, folder, "train.csv", test, None


def features(ref: str, cache: Path) -> dict:
    """{pool_x, pool_y, test_x, test_y, classes} for data set `ref`: MiniLM pooled features from one pass of a
    headswap model (logits_and_features, what suggest reads), cached in `cache`/NAME.npz."""
    name, folder, pool_file, test_file, _ = data_set(ref)
    path = cache / f"{name}.npz"
    if path.exists():
        z = np.load(path, allow_pickle=False)
        return {k: z[k] for k in z.files}
    import torch

    from headswap import TextClassifier, load_dataset

    torch.set_num_threads(2)
    pool, test = load_dataset(folder / pool_file), load_dataset(folder / test_file)
    classes = sorted(set(pool.labels))
    # Any fitted head-only model carries the frozen body; its head is not used (features are read before it).
    first = {}
    for i, label in enumerate(pool.labels):
        first.setdefault(label, i)
    idx = list(first.values())
    clf = TextClassifier(model=MODEL, regime="head-only", head="linear", head_fit="logistic", max_length=MAX_LENGTH,
                         eval_fraction=0, progress=False)
    clf.fit([pool.texts[i] for i in idx], [pool.labels[i] for i in idx])
    t0 = time.perf_counter()
    pool_x = clf.logits_and_features(pool.texts)[1]
    test_x = clf.logits_and_features(test.texts)[1]
    seconds = time.perf_counter() - t0
    index = {c: k for k, c in enumerate(classes)}
    out = {"pool_x": np.asarray(pool_x, dtype=np.float32), "test_x": np.asarray(test_x, dtype=np.float32),
           "pool_y": np.array([index[v] for v in pool.labels]), "test_y": np.array([index[v] for v in test.labels]),
           "classes": np.array(classes), "feature_seconds": np.array(seconds),
           "pool_texts": np.array(pool.texts)}
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    print(f"{name}: features of {len(pool_x) + len(test_x)} texts in {seconds:.0f} s", file=sys.stderr)
    return out


def initial(y: np.ndarray, size: int | None, rng: np.random.Generator) -> np.ndarray:
    """The seeded first labels: `size` at random (emotion: 200), or 2 per class (None: CLINC150, your folders)."""
    if size is not None:
        return rng.choice(len(y), size=size, replace=False)
    return np.concatenate([rng.choice(np.flatnonzero(y == c), size=2, replace=False) for c in np.unique(y)])


def head():
    """The frozen-feature head refit each round: standardised features, L-BFGS logistic regression (the linear head
    `--head-fit logistic` fits)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))


def curve(data: dict, name: str, first: int | None, strategy: str, seed: int, batch: int, budget: int) -> dict:
    """One simulated labelling run: macro F1 on the test set at each labelled-set size, and selection seconds."""
    from sklearn.metrics import f1_score

    from headswap.classifier.suggest import select
    rng = np.random.default_rng(seed)
    x, y, tx, ty = data["pool_x"], data["pool_y"], data["test_x"], data["test_y"]
    labelled = np.zeros(len(y), dtype=bool)
    labelled[initial(y, first, rng)] = True
    sizes, f1, select_s, fit_s = [], [], [], []
    while True:
        t0 = time.perf_counter()
        clf = head().fit(x[labelled], y[labelled])
        fit_s.append(time.perf_counter() - t0)
        pred = clf.predict(tx)
        sizes.append(int(labelled.sum()))
        f1.append(float(f1_score(ty, pred, average="macro", labels=np.unique(y))))
        if labelled.sum() >= budget:
            break
        n = min(batch, budget - int(labelled.sum()))
        # the head knows only the classes it has seen: its probabilities are the columns of those
        probs = clf.predict_proba(x)
        t0 = time.perf_counter()
        picked, _ = select(probs, n, x, strategy, eligible=~labelled, seed=seed * 1000 + len(sizes))
        select_s.append(time.perf_counter() - t0)
        assert not labelled[picked].any() and len(set(picked.tolist())) == n
        labelled[picked] = True
    return {"set": name, "strategy": strategy, "seed": seed, "labels": sizes, "macro_f1": f1,
            "select_seconds": select_s, "fit_seconds": fit_s}


def labels_to_reach(sizes, scores, target) -> int | None:
    """The first labelled-set size whose mean macro F1 reaches `target` (None: never within the budget)."""
    return next((s for s, v in zip(sizes, scores) if v >= target - 1e-12), None)


def summarise(runs: list[dict], name: str, budget: int) -> dict:
    out = {}
    for strategy in STRATEGIES:
        mine = [r for r in runs if r["set"] == name and r["strategy"] == strategy]
        if not mine:
            continue
        f1 = np.array([r["macro_f1"] for r in mine])
        out[strategy] = {"labels": mine[0]["labels"], "mean": f1.mean(0).round(4).tolist(),
                         "std": f1.std(0).round(4).tolist(), "seeds": [r["seed"] for r in mine],
                         "mean_select_seconds": float(np.mean([s for r in mine for s in r["select_seconds"]]))}
    if "random" in out:
        target = out["random"]["mean"][-1]
        for strategy, s in out.items():
            s["labels_to_reach_random_at_budget"] = labels_to_reach(s["labels"], s["mean"], target)
        out["random_macro_f1_at_budget"] = target
    return out


def plot(summary: dict, path: Path, budget: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(summary)
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        for strategy in STRATEGIES:
            s = summary[name].get(strategy)
            if s is None:
                continue
            x, m, sd = np.array(s["labels"]), np.array(s["mean"]), np.array(s["std"])
            ax.plot(x, m, marker="o", ms=3, label=strategy)
            ax.fill_between(x, m - sd, m + sd, alpha=0.15)
        target = summary[name].get("random_macro_f1_at_budget")
        if target is not None:
            ax.axhline(target, ls="--", lw=0.8, color="grey", label=f"random at {budget:,} labels")
        ax.set_title(f"{name}: MiniLM frozen features + logistic regression")
        ax.set_xlabel("labelled texts")
        ax.set_ylabel("test macro F1 (mean of seeds, band: +-1 std)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=list(SETS), metavar="SET_OR_FOLDER",
                   help=f"built-in sets ({', '.join(SETS)}) or folders with train.csv and test.csv (default: both sets)")
    p.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "active_learning",
                   help="where everything is written: NAME.json, features/NAME.npz, active_learning.png")
    p.add_argument("--features-only", action="store_true", help="compute and cache the features, nothing else")
    args = p.parse_args(argv)
    sets = [data_set(ref) for ref in args.data]
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.out / "features"
    summary = {}
    for ref, (name, folder, pool_file, test_file, first) in zip(args.data, sets):
        data = features(ref, cache)
        if args.features_only:
            continue
        path = args.out / f"{name}.json"
        doc = json.loads(path.read_text()) if path.exists() else {"runs": []}
        done = {(r["strategy"], r["seed"]) for r in doc["runs"]}
        for seed in args.seeds:
            for strategy in args.strategies:
                if (strategy, seed) in done:
                    continue
                t0 = time.perf_counter()
                doc["runs"].append(curve(data, name, first, strategy, seed, args.batch, args.budget))
                r = doc["runs"][-1]
                print(f"{name} seed {seed} {strategy:14s} F1 at {r['labels'][0]}: {r['macro_f1'][0]:.4f}, at "
                      f"{r['labels'][-1]}: {r['macro_f1'][-1]:.4f} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
                doc.update({
                    "set": name, "pool": f"{name}/{pool_file}", "test": f"{name}/{test_file}",
                    "pool_texts": int(len(data["pool_y"])), "test_texts": int(len(data["test_y"])),
                    "model": f"{MODEL} mean-pooled frozen features (headswap encoder-mlp body, max_length {MAX_LENGTH})",
                    "head": "StandardScaler + LogisticRegression(max_iter=1000), refit each round",
                    "selection": "headswap.classifier.suggest.select", "batch": args.batch, "budget": args.budget,
                    "feature_seconds": float(data["feature_seconds"]),
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
                    "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")})
                doc["summary"] = summarise(doc["runs"], name, args.budget)
                path.write_text(json.dumps(doc, indent=1) + "\n")
        summary[name] = doc.get("summary") or summarise(doc["runs"], name, args.budget)
        s = summary[name]
        print(f"{name}: random at {args.budget}: {s.get('random_macro_f1_at_budget')}; labels to reach it: "
              + ", ".join(f"{k} {v.get('labels_to_reach_random_at_budget')}" for k, v in s.items()
                          if isinstance(v, dict)))
    if summary:
        plot(summary, args.out / "active_learning.png", args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
