"""MiniLM full fine-tuning speed (encoder-mlp): today's training settings against the new ones, in one run.

Every variant fits a TextClassifier (headswap's own fit, train.loop.fit inside) for one epoch over the same
stratified emotion training texts (batch 32, max length 64, body learning rate 1e-4, as BENCHMARKS' emotion
fine-tune), validating on the same validation texts; the variants take turns, so a loaded machine slows them
alike, and each one's figure is the median of its repeats. Also reported: FLOPs of each variant's epoch counted
by torch's FlopCounterMode over its own batches (forward, backward and optimizer; padding counts, since it is
computed; AdamW's elementwise work is not counted as FLOPs), the achieved GFLOP/s against the fp32 matmul peak
measured in the same run at the model's own layer shapes and thread count, and where a step's time goes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_speed.py --n 320 --n-val 320 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.bench.perf import matmul_peak_at_shapes, matmul_peak_gflops  # noqa: E402
from headswap.data.sampling import stratified_subset  # noqa: E402
from headswap.classifier.fitted import Fitted  # noqa: E402
from headswap.nn.inference import item_length, predict_logits  # noqa: E402
from headswap.train import loop  # noqa: E402

# ../shared/data beside the checkout (or beside a folder of worktrees)
SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[1:4]
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))
TODAY = {"group_by_length": False, "train_embeddings": True}     # the settings before this benchmark
# name: (description, settings over the run's, AdamW kernel options)
VARIANTS = {
    "today": ("random batches, embedding table trained, torch's default (for-loop) AdamW", TODAY, {}),
    "grouped": ("today + length-grouped batches", {**TODAY, "group_by_length": True}, {}),
    "frozen-embeddings": ("today + word-embedding table frozen", {**TODAY, "train_embeddings": False}, {}),
    "fused-adamw": ("today + fused AdamW", TODAY, {"fused": True}),
    "new": ("the new defaults: grouped batches, fused AdamW (embedding table trained, as before)", {},
            {"fused": True}),
    "new+frozen-embeddings": ("the new defaults with the word-embedding table frozen", {"train_embeddings": False},
                              {"fused": True}),
}


@contextmanager
def adamw(kernel: dict):
    saved = loop.ADAMW_KERNEL
    loop.ADAMW_KERNEL = kernel
    try:
        yield
    finally:
        loop.ADAMW_KERNEL = saved


def classifier(args, overrides: dict, seed: int) -> TextClassifier:
    return TextClassifier(strategy="encoder-mlp", model=args.model, regime="full", epochs=1,
                          batch_size=args.batch_size, max_length=args.max_length, body_lr=args.body_lr,
                          progress=False, seed=seed, temperature_scaling=False, **overrides)


def epoch_order(clf: TextClassifier, items: list) -> list[int]:
    """The batches' order the loop draws for epoch 1 of this classifier's settings."""
    lengths = [item_length(i) for i in items] if clf.group_by_length else None
    return loop.EpochShuffle(len(items), clf.seed, lengths, clf.batch_size).order()


def epoch_flops(clf: TextClassifier, items: list) -> int:
    """FLOPs of one epoch's steps (forward, backward, AdamW), counted once per batch shape: a step's count depends
    only on (texts, padded length)."""
    module, collate, b = clf.module_, clf.encoder_.collate, clf.batch_size
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.0)      # lr 0: counting must not move the weights
    order, by_shape, total = epoch_order(clf, items), {}, 0
    module.train()
    for s in range(0, len(order), b):
        batch = collate([items[i] for i in order[s:s + b]])
        shape = tuple(batch["input_ids"].shape)
        if shape not in by_shape:
            labels = batch.pop("labels")
            with FlopCounterMode(display=False) as counter:
                F.cross_entropy(module(**batch), labels).backward()
                opt.step()
            opt.zero_grad(set_to_none=True)
            by_shape[shape] = counter.get_total_flops()
        total += by_shape[shape]
    module.eval()
    return total


def padding(clf: TextClassifier, items: list) -> dict:
    lengths, order, b = [item_length(i) for i in items], epoch_order(clf, items), clf.batch_size
    real = sum(lengths)
    padded = sum(max(lengths[i] for i in order[s:s + b]) * len(order[s:s + b]) for s in range(0, len(order), b))
    return {"real_tokens_per_text": real / len(items), "padded_tokens_per_text": padded / len(items),
            "padding_share": 1 - real / padded}


def profile_phases(clf: TextClassifier, texts: list, y: list, val_texts: list, kernel: dict, steps: int) -> dict:
    """Seconds per step of each phase, timed around the loop's own calls on the variant's first batches, and the
    per-run costs: tokenising the texts, and one validation pass."""
    module, enc, b = clf.module_, clf.encoder_, clf.batch_size
    t0 = time.perf_counter()
    items = enc.encode(texts, y)
    tokenise = time.perf_counter() - t0
    order = epoch_order(clf, items)
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, **kernel)
    phases = defaultdict(float)
    steps = max(1, min(steps, len(items) // b))
    module.train()
    for s in range(0, steps * b, b):
        t0 = time.perf_counter()
        batch = enc.collate([items[i] for i in order[s:s + b]])
        labels = batch.pop("labels")
        t1 = time.perf_counter()
        loss = F.cross_entropy(module(**batch), labels)
        t2 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        t4 = time.perf_counter()
        opt.step()
        t5 = time.perf_counter()
        for k, v in (("collate (padding, tensors)", t1 - t0), ("forward", t2 - t1), ("backward", t3 - t2),
                     ("gradient clipping", t4 - t3), ("optimizer", t5 - t4)):
            phases[k] += v / steps
    val_items = enc.encode(val_texts)
    t0 = time.perf_counter()
    predict_logits(module, val_items, enc.collate, clf.eval_batch_size)
    validate = time.perf_counter() - t0
    return {"seconds_per_step": dict(phases), "tokenise_seconds_per_1000_texts": tokenise / len(texts) * 1000,
            "validation_seconds_per_1000_texts": validate / len(val_texts) * 1000}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "emotion"), help="folder with train.csv and validation.csv")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--n", type=int, default=16000, help="training texts per epoch (stratified subset)")
    ap.add_argument("--n-val", type=int, default=2000, help="validation texts (stratified subset)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--body-lr", type=float, default=1e-4)
    ap.add_argument("--variants", default="today,new", help="comma-separated, from: " + ", ".join(VARIANTS))
    ap.add_argument("--baseline", action="store_true", help="only today's settings against the new ones (the "
                    "default list); with --variants, every named variant")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--profile-steps", type=int, default=8, help="steps timed phase by phase (0: no profile)")
    ap.add_argument("--no-flops", action="store_true", help="skip counting FLOPs (one forward and backward per "
                    "batch shape of each variant; minutes at full size)")
    ap.add_argument("--out", default="benchmarks/results/train_speed.json")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.variants.split(",")
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")

    train = stratified_subset(load_dataset(Path(args.data) / "train.csv"), args.n, seed=0)
    val = stratified_subset(load_dataset(Path(args.data) / "validation.csv"), args.n_val, seed=0)
    runs = defaultdict(list)

    def run(name: str, seed: int) -> dict:
        _, overrides, kernel = VARIANTS[name]
        clf = classifier(args, overrides, seed)
        with adamw(kernel):
            t0 = time.perf_counter()
            clf.fit(train.texts, train.labels, eval_texts=val.texts, eval_labels=val.labels)
            fit_s = time.perf_counter() - t0
        epoch = clf.history_[0]
        return {"fit_seconds": fit_s, "epoch_seconds": epoch["seconds"], "train_seconds": clf.train_seconds_,
                "build_seconds": clf.build_seconds_, "texts_per_s": len(train) / epoch["seconds"],
                "validation_macro_f1": epoch["score"], "train_loss": epoch["train_loss"]}

    peak_square = matmul_peak_gflops()
    for r in range(args.repeats):
        for name in names:
            runs[name].append(run(name, r))     # a seed per repeat: the F1 median is over seeds
            last = runs[name][-1]
            print(f"repeat {r + 1}/{args.repeats} {name}: {last['texts_per_s']:.2f} texts/s (epoch "
                  f"{last['epoch_seconds']:.1f} s, fit {last['fit_seconds']:.1f} s), validation macro F1 "
                  f"{last['validation_macro_f1']:.4f}", flush=True)

    results, hidden, shapes = {}, None, set()
    y = [sorted(set(train.labels)).index(v) for v in train.labels]
    for name in names:
        desc, overrides, kernel = VARIANTS[name]
        clf = classifier(args, overrides, 0)
        clf.fitted_ = Fitted.for_labels(sorted(set(train.labels)))
        clf._build(texts=train.texts)
        hidden = clf.module_.body.model.config
        items = clf.encoder_.encode(train.texts, y)
        flops = 0 if args.no_flops else epoch_flops(clf, items)
        pad = padding(clf, items)
        shapes.add(round(args.batch_size * pad["padded_tokens_per_text"]))
        med = statistics.median(r["epoch_seconds"] for r in runs[name])
        results[name] = {"description": desc, "settings": {k: getattr(clf, k) for k in TODAY},
                         "adamw": kernel or "torch default",
                         "runs": runs[name], "epoch_seconds": med, "texts_per_s": len(train) / med,
                         "validation_macro_f1": statistics.median(r["validation_macro_f1"] for r in runs[name]),
                         "gflop_per_text": flops / len(train) / 1e9, "gflop_per_s": flops / med / 1e9, **pad}
        if args.profile_steps:
            prof = profile_phases(clf, train.texts[:max(args.profile_steps * args.batch_size, 256)], y,
                                  val.texts[:256], kernel, args.profile_steps)
            # What the timed epochs spent per step beyond these phases: the loop itself (accelerate, scheduler,
            # Python); an estimate, as the phases are timed on the first batches only.
            steps = -(-len(train) // args.batch_size)
            prof["seconds_per_step"]["rest of the loop (estimate)"] = med / steps - sum(
                prof["seconds_per_step"].values())
            results[name]["profile"] = prof
    d, ff = hidden.hidden_size, hidden.intermediate_size
    peaks = matmul_peak_at_shapes([(m, k, n) for m in sorted(shapes) for k, n in ((d, d), (d, ff), (ff, d))])
    peak = max(peaks.values())
    base = results.get("today")
    for r in results.values():
        r["share_of_peak"] = r["gflop_per_s"] / peak
        r["speedup_over_today"] = r["texts_per_s"] / base["texts_per_s"] if base else None
        r["f1_minus_today"] = r["validation_macro_f1"] - base["validation_macro_f1"] if base else None

    out = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "interop_threads": torch.get_num_interop_threads(), "torch": torch.__version__,
                    "load_average": os.getloadavg()},
        "model": args.model, "strategy": "encoder-mlp", "regime": "full", "data": args.data, "n_train": len(train),
        "n_validation": len(val), "batch_size": args.batch_size, "max_length": args.max_length,
        "body_lr": args.body_lr, "repeats": args.repeats, "matmul_peak_gflops": peak,
        "matmul_peak_by_shape": peaks, "matmul_peak_square_1024": peak_square, "variants": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\nfp32 matmul peak at the model's shapes, {torch.get_num_threads()} thread(s): {peak:.1f} GFLOP/s "
          f"(square 1024: {peak_square:.1f})")
    print(f"{'variant':18} {'texts/s':>8} {'x today':>8} {'val F1':>7} {'GFLOP/text':>10} {'GFLOP/s':>8} "
          f"{'of peak':>8} {'padding':>8}")
    for name, r in results.items():
        print(f"{name:18} {r['texts_per_s']:8.2f} {r['speedup_over_today'] or 0:8.2f} "
              f"{r['validation_macro_f1']:7.4f} {r['gflop_per_text']:10.2f} {r['gflop_per_s']:8.1f} "
              f"{r['share_of_peak']:8.0%} {r['padding_share']:8.0%}")
    for name, r in results.items():
        if "profile" in r:
            p = r["profile"]
            print(f"\n{name}: seconds per step " + ", ".join(f"{k} {v:.3f}" for k, v in p["seconds_per_step"].items())
                  + f"; per 1000 texts: tokenise {p['tokenise_seconds_per_1000_texts']:.2f} s, validate "
                  f"{p['validation_seconds_per_1000_texts']:.2f} s")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
