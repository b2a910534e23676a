"""Partial fine-tuning on cached lower blocks against full fine-tuning and frozen heads: validation score per minute.

Every run fits a TextClassifier (encoder-mlp on minilm, batch 32, max length 64) on the same stratified CLINC150
training texts, holding out 10% of them for validation (the curve), and is scored at the end on CLINC150's
validation.csv as the test set. The fine-tuning runs get the same training-loop time limit (--minutes) as a cap;
the curve's x axis is wall-clock time since the run started (model load, tokenising and
the lower blocks' pass included). Each fine-tuning run plans its own epoch count (--epochs-cached, --epochs-full),
as auto plans a time-bounded run's from its estimate: the warm-up and the linear decay span the epochs planned, so
a run planned for far more epochs than its time allows would spend it warming up. Writes a JSON of the curves
and one plot.

    .venv/bin/python benchmarks/partial_cached.py --n 4500 --epochs-cached 8 --epochs-full 3 --minutes 6
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.data.sampling import stratified_subset  # noqa: E402
from headswap.reports.plots import plot_curves_over_time  # noqa: E402

SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[1:4]
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))
# name: settings over the run's
RUNS = {
    "logistic head (frozen)": {"regime": "head-only", "head": "linear", "head_fit": "logistic", "epochs": 1},
    "mlp head (frozen)": {"regime": "head-only", "head": "mlp", "epochs": 20, "batch_size": 64},
    "partial-cached (top 2 of 6 blocks)": {"regime": "partial", "last_n": 2, "cache_lower": True},
    "partial (top 2 of 6, uncached)": {"regime": "partial", "last_n": 2},
    "full": {"regime": "full"},
}
DEFAULT_RUNS = ("logistic head (frozen)", "mlp head (frozen)", "partial-cached (top 2 of 6 blocks)", "full")
EPOCH_LINE = re.compile(r"validation \S+ ([0-9.]+)")


class EpochTimes(logging.Handler):
    """The wall-clock time of each validated epoch, from the epoch lines TextClassifier logs."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.start, self.points = time.perf_counter(), []

    def emit(self, record):
        m = EPOCH_LINE.search(record.getMessage())
        if m and "epoch" in record.getMessage():
            self.points.append((time.perf_counter() - self.start, float(m.group(1))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "clinc150"), help="folder with train.csv and validation.csv")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--n", type=int, default=None, help="training texts (stratified subset; default all)")
    ap.add_argument("--n-test", type=int, default=None, help="test texts (stratified subset; default all)")
    ap.add_argument("--minutes", type=float, default=6.0, help="training-loop time limit of each fine-tuning run")
    ap.add_argument("--epochs-cached", type=int, default=8, help="epochs planned for the partial runs")
    ap.add_argument("--epochs-full", type=int, default=3, help="epochs planned for the full run")
    ap.add_argument("--body-lr", type=float, default=1e-4)
    ap.add_argument("--runs", default=",".join(DEFAULT_RUNS), help="comma-separated, from: " + "; ".join(RUNS))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default="benchmarks/results/partial_cached.json")
    ap.add_argument("--plot", default="benchmarks/results/partial_cached.png")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.runs.split(",")
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        ap.error(f"unknown run(s) {'; '.join(unknown)}; choose from {'; '.join(RUNS)}")
    train = stratified_subset(load_dataset(Path(args.data) / "train.csv"), args.n, seed=0)
    test = stratified_subset(load_dataset(Path(args.data) / "validation.csv"), args.n_test, seed=0)
    logger = logging.getLogger("headswap.classifier.estimator")
    logger.setLevel(logging.INFO)
    results = {}
    for name in names:
        settings = {"strategy": "encoder-mlp", "model": args.model, "batch_size": 32, "max_length": 64,
                    "body_lr": args.body_lr, "progress": False, "seed": 0, **RUNS[name]}
        if settings["regime"] != "head-only":
            settings["time_limit"] = args.minutes * 60
            settings["epochs"] = args.epochs_full if settings["regime"] == "full" else args.epochs_cached
        handler = EpochTimes()
        logger.addHandler(handler)
        try:
            clf = TextClassifier(**settings).fit(train.texts, train.labels)
        finally:
            logger.removeHandler(handler)
        fit_s = time.perf_counter() - handler.start
        points = handler.points or [(fit_s, clf.history_[-1]["score"])]
        m = clf.evaluate(test.texts, test.labels)
        results[name] = {"settings": {k: v for k, v in settings.items() if k != "progress"}, "fit_seconds": fit_s,
                         "epochs_trained": len(clf.history_), "best_epoch": clf.best_epoch_,
                         "curve": points, "best_validation_macro_f1": max(s for _, s in points),
                         "test_macro_f1": m.score("macro_f1"), "test_accuracy": m.accuracy,
                         "trainable_params": clf.trainable_params_}
        print(f"{name}: {len(clf.history_)} epoch(s) in {fit_s:.0f} s, best validation macro F1 "
              f"{results[name]['best_validation_macro_f1']:.4f}, test macro F1 {m.score('macro_f1'):.4f}", flush=True)
        del clf
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                       "torch_threads": torch.get_num_threads(), "load_average": os.getloadavg()},
           "data": args.data, "n_train": len(train), "n_test": len(test), "model": args.model,
           "minutes": args.minutes, "body_lr": args.body_lr, "runs": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    plot_curves_over_time({k: v["curve"] for k, v in results.items()}, args.plot,
                          title=f"CLINC150, {len(train)} training texts: validation macro F1 over time")
    print(f"wrote {args.out} and {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
