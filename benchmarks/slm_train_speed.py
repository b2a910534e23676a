"""LoRA training speed of slm-logits on smollm2-135m: today's path against each speed-up, in one run.

Every variant trains through headswap's own loop (train.loop.fit, one epoch over the same emotion training
texts, default prompt, LoRA r 16 on every attention and FFN linear); the variants take turns, and each one's
figure is the median of its repeats. Also reported: FLOPs per step counted by torch's FlopCounterMode
(forward, backward and optimizer; padding included, since it is computed), the achieved GFLOP/s against the
fp32 matmul peak measured in the same run, where one step's time goes (torch.profiler), and how much of
each batch is padding over the whole training set.

    .venv/bin/python benchmarks/slm_train_speed.py --out benchmarks/results/slm_train_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.bench.perf import matmul_peak_gflops  # noqa: E402
from headswap.data.sampling import stratified_split  # noqa: E402
from headswap.classifier.fitted import Fitted  # noqa: E402
from headswap.nn.dropout import BitsDropout  # noqa: E402
from headswap.train.loop import EpochShuffle, TrainConfig, item_length, fit  # noqa: E402
from headswap.train.lower_cache import build_cache  # noqa: E402

# ../shared/data beside the checkout (or beside a folder of worktrees)
SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[1:4]
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))

# name: (description, dropout module, group_by_length, batch size, top blocks trained on cached lower ones or None)
VARIANTS = {
    "today": ("before issue 11: PEFT's nn.Dropout(0.05), random batches", "torch", False, 16, None),
    "bits-dropout": ("BitsDropout(0.05), random batches", "bits", False, 16, None),
    "bits-dropout+grouped": ("BitsDropout(0.05), group_by_length (the real run's setting)", "bits", True, 16, None),
    "no-dropout+grouped": ("lora_dropout 0, group_by_length", "none", True, 16, None),
    "bits-dropout+grouped+b32": ("BitsDropout(0.05), group_by_length, batch 32", "bits", True, 32, None),
    "cached-top8+grouped": ("LoRA in the top 8 of 30 blocks, the 22 below cached (cache_lower), BitsDropout(0.05), "
                            "group_by_length", "bits", True, 16, 8),
    "cached-top4+grouped": ("LoRA in the top 4 of 30 blocks, the 26 below cached (cache_lower), BitsDropout(0.05), "
                            "group_by_length", "bits", True, 16, 4),
}


def set_dropout(module: nn.Module, kind: str, p: float) -> None:
    """Put the variant's dropout in front of every LoRA adapter (the adapters themselves stay)."""
    for name, sub in module.named_modules():
        if name.endswith("lora_dropout"):
            for key in list(sub.keys()):
                sub[key] = {"torch": lambda: nn.Dropout(p), "bits": lambda: BitsDropout(p),
                            "none": nn.Identity}[kind]()


def config(group: bool, batch_size: int, seed: int) -> TrainConfig:
    return TrainConfig(epochs=1, batch_size=batch_size, head_lr=1e-3, body_lr=2e-4, seed=seed,
                       group_by_length=group, progress=False, keep_best=False)


def padding(items, group: bool, batch_size: int) -> dict:
    """Real and padded tokens (text + suffix; the cached prefix is not padded) over one epoch's batches."""
    lengths = [item_length(it) for it in items]
    order = EpochShuffle(len(items), 0, lengths if group else None, batch_size).order()
    real = padded = 0
    for s in range(0, len(order), batch_size):
        batch = [lengths[i] for i in order[s:s + batch_size]]
        real, padded = real + sum(batch), padded + max(batch) * len(batch)
    return {"real_tokens_per_text": real / len(items), "padded_tokens_per_text": padded / len(items),
            "padding_share": 1 - real / padded}


def step_flops(module, items, collate, batch_size: int) -> float:
    """FLOPs of one training step (forward, backward, AdamW) on the first batch_size items."""
    batch = collate(items[:batch_size])
    labels = batch.pop("labels")
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.0)   # lr 0: counting must not move the weights
    with FlopCounterMode(display=False) as counter:
        loss = F.cross_entropy(module(**batch), labels)
        loss.backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def classify(name: str, shapes, rank: int) -> str:
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"):
        dims = [d for s in shapes or [] for d in (s or [])]
        return "matmul: LoRA adapters" if rank in dims else "matmul: frozen weights"
    if "scaled_dot_product" in name:
        return "attention"
    if name in ("aten::bernoulli_", "aten::random_", "aten::where", "aten::bitwise_xor", "aten::ge",
                "aten::native_dropout", "aten::dropout", "aten::uniform_"):
        return "dropout masks"
    if "_foreach" in name or "adamw" in name.lower():
        return "optimizer"
    return "other (norms, activations, rotary, copies, ...)"


def profile_step(module, items, collate, batch_size: int, rank: int, steps: int = 3) -> dict:
    """Where the time of a training step goes: phases timed with perf_counter, ops by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    body = module.body if hasattr(module, "body") else module.classifier.body   # TopOnCache: its classifier's
    prefix_seconds = [0.0]
    run_prefix = getattr(body, "_run_prefix", None)
    if run_prefix is not None:
        def timed():
            t0 = time.perf_counter()
            out = run_prefix()
            prefix_seconds[0] += time.perf_counter() - t0
            return out
        body._run_prefix = timed
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    phases = defaultdict(float)
    steps = max(1, min(steps, len(items) // batch_size))
    batches = [collate(items[s:s + batch_size]) for s in range(0, steps * batch_size, batch_size)]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for batch in batches:
            labels = batch.pop("labels")
            t0 = time.perf_counter()
            loss = F.cross_entropy(module(**batch), labels)
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            t2 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            t3 = time.perf_counter()
            phases["forward"] += t1 - t0
            phases["backward"] += t2 - t1
            phases["optimizer"] += t3 - t2
    if run_prefix is not None:
        del body._run_prefix
    phases["of which prefix forward"] = prefix_seconds[0]
    ops = defaultdict(float)
    for e in prof.key_averages(group_by_input_shape=True):
        ops[classify(e.key, e.input_shapes, rank)] += e.self_cpu_time_total / 1e6
    total = sum(ops.values())
    return {"seconds_per_step": {k: v / steps for k, v in phases.items()},
            "op_share": {k: round(v / total, 4) for k, v in sorted(ops.items(), key=lambda kv: -kv[1])}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "emotion" / "train.csv"))
    ap.add_argument("--n", type=int, default=96, help="texts per timed epoch (one repeat of one variant)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default="benchmarks/results/slm_train_speed.json")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.variants.split(",")
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")

    data = load_dataset(args.data)
    labels = sorted(set(data.labels))

    def built(**kw):
        clf = TextClassifier(strategy="slm-logits", model="smollm2-135m", regime="lora", progress=False, **kw)
        clf.fitted_ = Fitted.for_labels(labels)
        clf._build()
        return clf
    clf = built()
    index = {lab: i for i, lab in enumerate(labels)}
    all_items = clf.encoder_.encode(data.texts, [index[v] for v in data.labels])
    sample, _ = stratified_split(data, 1 - args.n / len(data), seed=0) if args.n < len(data) else (data, None)
    items = clf.encoder_.encode(sample.texts, [index[v] for v in sample.labels])
    rank, p = clf.lora_r, clf.lora_dropout
    prefix_len = getattr(clf.module_.body, "prefix_len", 0)
    # Each cached variant's own model (adapters in its top blocks only) and its cache of the lower blocks, timed:
    # the pass a real run makes once, before its first epoch (auto's slices and learning-rate variants share it).
    paths, cache_seconds = {}, {}
    for name in names:
        top_n = VARIANTS[name][4]
        if top_n is None:
            paths[name] = (clf.module_, items, clf.encoder_.collate)
            continue
        cached = built(cache_lower=True, last_n=top_n)
        t0 = time.perf_counter()
        train, _, top, hidden_collate = build_cache(cached.module_, top_n, items, None, cached.encoder_.collate,
                                                    cached.eval_batch_size)
        cache_seconds[name] = time.perf_counter() - t0
        paths[name] = (top, train, hidden_collate)

    def run(name: str, seed: int) -> float:
        _, kind, group, bs, _ = VARIANTS[name]
        module, its_items, collate = paths[name]
        set_dropout(module, kind, p)
        t0 = time.perf_counter()
        fit(module, its_items, collate, config(group, bs, seed), log=None)
        return time.perf_counter() - t0

    peak = matmul_peak_gflops()
    run(names[0], 0)                                       # warm-up (allocator, first-call costs)
    times = defaultdict(list)
    for r in range(args.repeats):
        for name in names:
            times[name].append(run(name, r + 1))
            print(f"repeat {r + 1}/{args.repeats} {name}: {len(items) / times[name][-1]:.2f} texts/s", flush=True)
    peak = max(peak, matmul_peak_gflops())

    results = {}
    for name in names:
        desc, kind, group, bs, top_n = VARIANTS[name]
        module, its_items, collate = paths[name]
        set_dropout(module, kind, p)
        # FLOPs of the variant's epoch: its own batches (grouped or not), each step counted.
        cfg = config(group, bs, 1)
        order = EpochShuffle(len(items), cfg.seed, [item_length(i) for i in items] if group else None, bs).order()
        ordered = [its_items[i] for i in order]
        flops = sum(step_flops(module, ordered[s:s + bs], collate, bs) for s in range(0, len(ordered), bs))
        med = statistics.median(times[name])
        results[name] = {"description": desc, "batch_size": bs, "group_by_length": group, "dropout": kind,
                         "seconds": times[name], "texts_per_s": len(items) / med,
                         "gflop_per_text": flops / len(items) / 1e9, "gflop_per_s": flops / med / 1e9,
                         "share_of_peak": flops / med / 1e9 / peak, **padding(all_items, group, bs)}
        if top_n is not None:      # the cache's pass, once per run: what a run of E epochs pays per text
            once = cache_seconds[name]
            results[name].update({"top_blocks": top_n, "cache_seconds": once,
                                  "texts_per_s_first_epoch": len(items) / (med + once),
                                  "texts_per_s_3_epochs": 3 * len(items) / (3 * med + once)})
    base = results.get("today")
    for r in results.values():
        r["speedup_over_today"] = r["texts_per_s"] / base["texts_per_s"] if base else None
    profiles = {}
    for name in dict.fromkeys(["today", max(results, key=lambda n: results[n]["texts_per_s"])]):
        if name in results:
            _, kind, group, bs, _ = VARIANTS[name]
            module, its_items, collate = paths[name]
            set_dropout(module, kind, p)
            order = EpochShuffle(len(items), 1, [item_length(i) for i in items] if group else None, bs).order()
            profiles[name] = profile_step(module, [its_items[i] for i in order], collate, bs, rank)

    out = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__},
        "model": "smollm2-135m", "strategy": "slm-logits", "lora": {"r": rank, "alpha": clf.lora_alpha, "dropout": p},
        "data": args.data, "texts_per_epoch": len(items), "repeats": args.repeats, "prefix_tokens": prefix_len,
        "matmul_peak_gflops": peak, "variants": results, "profile": profiles,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\nmatmul peak {peak:.0f} GFLOP/s; prefix {prefix_len} tokens")
    print(f"{'variant':28} {'texts/s':>8} {'x today':>8} {'GFLOP/text':>10} {'GFLOP/s':>8} {'of peak':>8} {'padding':>8}")
    for name, r in results.items():
        print(f"{name:28} {r['texts_per_s']:8.2f} {r['speedup_over_today'] or 0:8.2f} {r['gflop_per_text']:10.1f} "
              f"{r['gflop_per_s']:8.1f} {r['share_of_peak']:8.0%} {r['padding_share']:8.0%}")
        if "cache_seconds" in r:
            base = results.get("today", {}).get("texts_per_s")
            print(f"{'':28} cache pass {r['cache_seconds']:.1f} s; with it, first epoch {r['texts_per_s_first_epoch']:.2f}"
                  f" texts/s" + (f" ({r['texts_per_s_first_epoch'] / base:.2f}x)" if base else "")
                  + f", 3 epochs {r['texts_per_s_3_epochs']:.2f}" + (f" ({r['texts_per_s_3_epochs'] / base:.2f}x)"
                                                                     if base else ""))
    for name, prof in profiles.items():
        print(f"\n{name}: seconds per step " + ", ".join(f"{k} {v:.2f}" for k, v in prof["seconds_per_step"].items()))
        print("  " + ", ".join(f"{k} {v:.0%}" for k, v in prof["op_share"].items()))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
