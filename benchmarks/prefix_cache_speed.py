"""Benchmark: the prefix KV cache (headswap.prefix_cache) against the uncached prompted forward.

Runs slm-logits inference on smollm2-135m with the default emotion prompt (6 classes) over N texts of
the emotion test set, at batch size 16 and 1, uncached (prefix + text + suffix per row) and cached
(prefix once, text + suffix per row); reports texts/s and the agreement of the class probabilities.
Optionally times LoRA training steps (forward + backward + optimizer step) both ways.

Not a test. The machine may be shared: each timing is repeated (uncached and cached alternating) and
the median is reported along with every repeat.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/prefix_cache_speed.py --n 64 --repeats 3
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from headswap.text.encoding import TextEncoder
from headswap.models import load_model
from headswap.nn.prefix_cache import strip_prefix, uncached_and_cached
from headswap.text.prompts import answer_token_ids, build_prompt

LABELS = ["sadness", "joy", "love", "anger", "fear", "surprise"]
DATA = Path("/work/shared/data/emotion/test.csv")


def read_texts(path: Path, n: int) -> list[str]:
    with path.open(newline="") as f:
        return [row["text"] for _, row in zip(range(n), csv.DictReader(f))]


def batches(encoder: TextEncoder, items: list[dict], size: int) -> list[dict]:
    return [encoder.collate(items[i:i + size]) for i in range(0, len(items), size)]


@torch.inference_mode()
def run(module, bats) -> torch.Tensor:
    return torch.cat([module(b["input_ids"], b["attention_mask"]) for b in bats])


def time_pass(module, bats, reset=None) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) for one inference pass over `bats`; `reset` runs first
    (untimed: forgets the prefix KV, so that each timed cached pass includes computing it once).
    CPU seconds are less disturbed by other processes on a shared machine (with one thread they are
    close to the compute time; with more, they include OpenMP spinning)."""
    if reset:
        reset()
    t0, c0 = time.perf_counter(), time.process_time()
    run(module, bats)
    return time.perf_counter() - t0, time.process_time() - c0


def bench_inference(plain, cached, full_items, rest_items, encoder, batch_size, repeats, sort=False) -> dict:
    if sort:  # length-sorted batches: less padding (the prefix has the same length in every row)
        order = sorted(range(len(full_items)), key=lambda i: len(full_items[i]["input_ids"]))
        full_items, rest_items = [full_items[i] for i in order], [rest_items[i] for i in order]
    full_b, rest_b = batches(encoder, full_items, batch_size), batches(encoder, rest_items, batch_size)
    n = len(full_items)
    # warm-up batch, excluded from the timings
    run(plain, full_b[:1])
    run(cached, rest_b[:1])
    t_plain, t_cached = [], []
    for _ in range(repeats):  # alternate, so that load from other users hits both paths alike
        t_plain.append(time_pass(plain, full_b))
        t_cached.append(time_pass(cached, rest_b, reset=cached.body.invalidate))
    p_plain, p_cached = run(plain, full_b).softmax(-1), run(cached, rest_b).softmax(-1)
    wall_p, wall_c = [w for w, _ in t_plain], [w for w, _ in t_cached]
    cpu_p, cpu_c = [c for _, c in t_plain], [c for _, c in t_cached]
    med_p, med_c = statistics.median(wall_p), statistics.median(wall_c)
    return {
        "batch_size": batch_size, "order": "length-sorted" if sort else "dataset",
        "uncached_texts_per_s": n / med_p, "cached_texts_per_s": n / med_c, "speedup": med_p / med_c,
        "speedup_best_of": min(wall_p) / min(wall_c),
        "speedup_cpu_time": statistics.median(cpu_p) / statistics.median(cpu_c),
        "uncached_seconds": wall_p, "cached_seconds": wall_c,
        "uncached_cpu_seconds": cpu_p, "cached_cpu_seconds": cpu_c,
        "uncached_padded_tokens": sum(b["input_ids"].numel() for b in full_b),
        "cached_padded_tokens": sum(b["input_ids"].numel() for b in rest_b),
        "max_abs_prob_diff": (p_plain - p_cached).abs().max().item(),
        "same_argmax": bool((p_plain.argmax(-1) == p_cached.argmax(-1)).all()),
    }


def bench_training(model_ref, encoder_args, texts, labels, batch_size, steps, repeats) -> dict:
    """LoRA training steps (forward + backward + AdamW step), uncached vs cached, on fresh models."""
    from headswap.train.lora import LoraSettings, apply_lora

    out = {"batch_size": batch_size, "steps": steps, "lora_r": 16}
    for name in ("uncached", "cached"):
        hf_model, tok, _ = load_model(model_ref, causal_lm_head=True)
        prompt = build_prompt(tok, LABELS)
        encoder = TextEncoder(tok, "prompt", **encoder_args, prompt=prompt)
        ids = answer_token_ids(tok, prompt, LABELS)
        plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
        module = cached if name == "cached" else plain
        torch.manual_seed(0)
        apply_lora(module, LoraSettings(r=16, alpha=32, dropout=0.05))
        for p in module.head.parameters():
            p.requires_grad_(False)
        items = encoder.encode(texts, labels)
        if name == "cached":
            items = strip_prefix(items, encoder.prefix_ids)
        bats = batches(encoder, items, batch_size)
        opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-4)
        module.train()

        def step(b):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(module(b["input_ids"], b["attention_mask"]), b["labels"])
            loss.backward()
            opt.step()

        step(bats[0])  # warm-up, excluded
        per_step, cpu_per_step = [], []
        for r in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(steps):
                step(bats[(1 + r * steps + i) % len(bats)])
            per_step.append((time.perf_counter() - t0) / steps)
            cpu_per_step.append((time.process_time() - c0) / steps)
        med = statistics.median(per_step)
        out[name] = {"seconds_per_step": per_step, "median_seconds_per_step": med,
                     "cpu_seconds_per_step": cpu_per_step, "texts_per_s": batch_size / med}
    u, c = out["uncached"], out["cached"]
    out["speedup"] = u["median_seconds_per_step"] / c["median_seconds_per_step"]
    out["speedup_best_of"] = min(u["seconds_per_step"]) / min(c["seconds_per_step"])
    out["speedup_cpu_time"] = statistics.median(u["cpu_seconds_per_step"]) / statistics.median(c["cpu_seconds_per_step"])
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--n", type=int, default=64, help="number of texts")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 1])
    ap.add_argument("--no-sorted", action="store_true",
                    help="skip the extra length-sorted run for batch sizes > 1")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes per path (median reported)")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--train-steps", type=int, default=2, help="LoRA training steps per repeat (0: skip)")
    ap.add_argument("--train-batch-size", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/prefix_cache.json"))
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    hf_model, tok, _ = load_model(args.model, causal_lm_head=True)
    load_s = time.perf_counter() - t0
    prompt = build_prompt(tok, LABELS)
    encoder = TextEncoder(tok, "prompt", args.max_length, prompt=prompt)
    ids = answer_token_ids(tok, prompt, LABELS)
    plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)

    texts = read_texts(args.data, args.n)
    full_items = encoder.encode(texts)
    rest_items = strip_prefix(full_items, encoder.prefix_ids)
    n_prefix, n_suffix = len(encoder.prefix_ids), len(encoder.suffix_ids)
    text_lens = [len(it["input_ids"]) - n_prefix - n_suffix for it in full_items]

    result = {
        "model": args.model, "n_texts": len(texts), "data": str(args.data), "classes": LABELS,
        "prefix_tokens": n_prefix, "suffix_tokens": n_suffix,
        "prompt_tokens": n_prefix + n_suffix,
        "mean_text_tokens": statistics.mean(text_lens), "max_text_tokens": max(text_lens),
        "mean_full_tokens": statistics.mean(len(it["input_ids"]) for it in full_items),
        "mean_rest_tokens": statistics.mean(len(it["input_ids"]) for it in rest_items),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
        "transformers": __import__("transformers").__version__, "python": platform.python_version(),
        "attn_implementation": hf_model.config._attn_implementation, "dtype": str(hf_model.dtype),
        "model_load_seconds": load_s, "repeats": args.repeats,
        "note": "CPU shared with other users: timings are noisy; medians over alternating repeats. "
                "Each timed cached pass includes computing the prefix KV once; one warm-up batch excluded. "
                "order 'dataset' batches texts as they come (as predict does); 'length-sorted' sorts them by "
                "length first, which removes most padding.",
        "inference": [],
    }
    print(f"{args.model}: prefix {n_prefix} + suffix {n_suffix} prompt tokens, mean text {result['mean_text_tokens']:.1f} "
          f"tokens, {len(texts)} texts, {torch.get_num_threads()} threads")
    runs = [(bs, False) for bs in args.batch_sizes]
    runs += [] if args.no_sorted else [(bs, True) for bs in args.batch_sizes if bs > 1]
    for bs, sort in runs:
        r = bench_inference(plain, cached, full_items, rest_items, encoder, bs, args.repeats, sort)
        result["inference"].append(r)
        print(f"inference bs={bs:>2} {r['order']:>13}: uncached {r['uncached_texts_per_s']:7.1f} texts/s | cached "
              f"{r['cached_texts_per_s']:7.1f} texts/s | speedup {r['speedup']:.2f}x (best-of {r['speedup_best_of']:.2f}x, "
              f"cpu-time {r['speedup_cpu_time']:.2f}x) | max |dp| "
              f"{r['max_abs_prob_diff']:.1e} | timings uncached {[round(t, 2) for t in r['uncached_seconds']]} "
              f"cached {[round(t, 2) for t in r['cached_seconds']]}")
    if args.train_steps > 0:
        del plain, cached, hf_model
        labels = [i % len(LABELS) for i in range(len(texts))]
        tr = bench_training(args.model, {"max_length": args.max_length}, texts, labels, args.train_batch_size,
                            args.train_steps, args.repeats)
        result["training"] = tr
        print(f"LoRA training bs={tr['batch_size']}: uncached {tr['uncached']['median_seconds_per_step']:.2f} s/step | "
              f"cached {tr['cached']['median_seconds_per_step']:.2f} s/step | speedup {tr['speedup']:.2f}x "
              f"(best-of {tr['speedup_best_of']:.2f}x, cpu-time {tr['speedup_cpu_time']:.2f}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
