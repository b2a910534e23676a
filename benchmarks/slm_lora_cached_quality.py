"""What LoRA in the top blocks on cached lower ones (cache_lower) costs in quality: slm-logits on smollm2-135m trained
on a stratified sample of emotion's training texts, validated on a sample of its validation texts and scored on all
of test.csv, once per configuration.

A configuration is ADAPTERS:EPOCHS[:BODY_LR]: ADAPTERS `all` (LoRA in every block, the default) or `topN` (LoRA in
the top N blocks, the blocks below cached); BODY_LR defaults to the LoRA default.

    .venv/bin/python benchmarks/slm_lora_cached_quality.py --configs all:2:2e-3,top8:2:2e-3 \\
        --out benchmarks/results/slm_lora_cached_quality.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from sklearn.metrics import f1_score  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.data.sampling import stratified_split  # noqa: E402

SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[1:4]
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))


def settings(config: str) -> dict:
    adapters, epochs, *lr = config.split(":")
    kw = dict(strategy="slm-logits", model="smollm2-135m", regime="lora", epochs=int(epochs), seed=0)
    if lr:
        kw["body_lr"] = float(lr[0])
    if adapters != "all":
        kw.update(cache_lower=True, last_n=int(adapters.removeprefix("top")))
    return kw


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "emotion"), help="a folder with train.csv and test.csv; validation.csv, or validation is held out of train.csv")
    ap.add_argument("--n-train", type=int, default=1000)
    ap.add_argument("--n-val", type=int, default=500)
    ap.add_argument("--configs", default="all:2:2e-3,top8:2:2e-3")
    ap.add_argument("--out", default="benchmarks/results/slm_lora_cached_quality.json")
    args = ap.parse_args(argv)
    train, test = load_dataset(f"{args.data}/train.csv"), load_dataset(f"{args.data}/test.csv")
    if Path(args.data, "validation.csv").is_file():
        val = load_dataset(f"{args.data}/validation.csv")
        val, _ = stratified_split(val, 1 - args.n_val / len(val), seed=0)
    else:     # validation held out of train.csv, before the training sample is drawn
        train, val = stratified_split(train, args.n_val / len(train), seed=0)
    train, _ = stratified_split(train, 1 - args.n_train / len(train), seed=0)
    results = []
    for config in args.configs.split(","):
        kw = settings(config)
        t0 = time.perf_counter()
        clf = TextClassifier(progress=False, **kw).fit(train.texts, train.labels, val.texts, val.labels)
        fit_s = time.perf_counter() - t0
        f1 = f1_score(test.labels, clf.predict(test.texts), average="macro")
        results.append({"config": config, "fit_seconds": fit_s, "train_seconds": clf.train_seconds_,
                        "test_macro_f1": f1, "val_history": [h.get("score") for h in clf.history_],
                        "best_epoch": clf.best_epoch_, **kw})
        print(f"{config:16} fit {fit_s:6.0f} s  best validation {max(results[-1]['val_history']):.4f}  "
              f"test macro F1 {f1:.4f}", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"n_train": len(train), "n_val": len(val), "n_test": len(test),
                                             "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
