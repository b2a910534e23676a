"""Inference speed of one trained encoder classifier on every runtime, in one run: torch fp32, torch dynamic
int8, ONNX Runtime fp32 and int8 (`headswap export`), against sentence-transformers' fp32 `encode` of the same
base model (embeddings only: no head, so slightly less work than a classifier). Texts/s at batch 32 and
batch 1, best of interleaved rounds; macro F1 of each runtime on the whole test set.

    .venv/bin/python benchmarks/export_speed.py --model-dir runs/cw-none --out benchmarks/results/export_speed.json
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
import torch  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.data.sampling import stratified_split  # noqa: E402
from headswap.jobs.export import export  # noqa: E402
from headswap.models import resolve_model  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
RUNTIMES = {"torch fp32": ("torch", None), "torch int8": ("torch-int8", None), "onnx fp32": ("onnx", "none"),
            "onnx int8": ("onnx", "int8")}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True, help="a trained encoder-mlp (or setfit/similarity) model")
    ap.add_argument("--data", default=str(SHARED / "emotion" / "test.csv"))
    ap.add_argument("--timing-texts", type=int, default=512, help="texts per timing round at batch 32")
    ap.add_argument("--batch1-texts", type=int, default=128, help="texts per timing round at batch 1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="runs/export-speed", help="where the exports are written (reused)")
    ap.add_argument("--out", default="benchmarks/results/export_speed.json")
    args = ap.parse_args(argv)

    data = load_dataset(args.data)
    sample = data if args.timing_texts >= len(data) else \
        stratified_split(data, 1 - args.timing_texts / len(data), seed=0)[0]
    texts = sample.texts
    work = Path(args.work)
    dirs = {}
    for name, (runtime, quantize) in RUNTIMES.items():
        if runtime != "onnx":
            dirs[name] = Path(args.model_dir)
            continue
        d = work / f"onnx-{quantize}"
        if not (d / "headswap_config.json").is_file():
            t = timed(lambda: export(args.model_dir, d, quantize=quantize))
            print(f"exported {d} in {t:.0f} s", file=sys.stderr)
        dirs[name] = d
    models = {name: TextClassifier.load(dirs[name], progress=False, runtime=RUNTIMES[name][0]) for name in RUNTIMES}
    first = next(iter(models.values()))
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(resolve_model(first.model).path, device="cpu")
    st.max_seq_length = first.max_length   # the same truncation as the classifier's

    def run(name, batch, some):
        if name == "sentence-transformers fp32":
            return lambda: st.encode(some, batch_size=batch, convert_to_numpy=True)
        clf = models[name]
        clf.eval_batch_size = batch
        return lambda: clf.predict_proba(some)

    names = [*RUNTIMES, "sentence-transformers fp32"]
    speed = {n: {} for n in names}
    with torch.inference_mode():
        for batch, some in ((32, texts), (1, texts[:args.batch1_texts])):
            for n in names:            # warm-up
                run(n, batch, some[:batch * 2])()
            best = {n: float("inf") for n in names}
            for _ in range(args.rounds):   # interleaved, so that a noisy minute hits every runtime alike
                for n in names:
                    best[n] = min(best[n], timed(run(n, batch, some)))
            for n in names:
                speed[n][f"batch_{batch}_texts_per_s"] = len(some) / best[n]
            print(f"batch {batch}: " + ", ".join(f"{n} {len(some) / best[n]:.0f}/s" for n in names), file=sys.stderr)
    quality, predicted = {}, {}
    for name, clf in models.items():
        clf.eval_batch_size = 32
        m = clf.evaluate(data.texts, data.labels)
        predicted[name] = np.asarray(clf.predict(data.texts))
        quality[name] = {"macro_f1": m.f1("macro"), "accuracy": m.accuracy,
                         "same_label_as_torch_fp32": float((predicted[name] == predicted["torch fp32"]).mean())}
    st_speed = speed["sentence-transformers fp32"]
    rows = {}
    for n in names:
        rows[n] = {**speed[n], **quality.get(n, {})}
        for b in (32, 1):
            key = f"batch_{b}_texts_per_s"
            rows[n][f"batch_{b}_x_sentence_transformers"] = speed[n][key] / st_speed[key]
    for n in RUNTIMES:
        rows[n]["macro_f1_change_vs_torch_fp32"] = rows[n]["macro_f1"] - rows["torch fp32"]["macro_f1"]
    sizes = {n: (Path(dirs[n]) / "model.onnx").stat().st_size for n in RUNTIMES if "onnx" in n}
    sizes["torch (model.safetensors)"] = (Path(args.model_dir) / "model.safetensors").stat().st_size
    import onnxruntime
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
        "model_dir": args.model_dir, "strategy": first.strategy, "model": first.model, "max_length": first.max_length,
        "data": args.data, "test_texts": len(data), "timing_texts_batch_32": len(texts),
        "timing_texts_batch_1": min(len(texts), args.batch1_texts), "rounds": args.rounds,
        "onnx_file_bytes": sizes, "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "runtimes": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"{'runtime':28} {'b32/s':>7} {'x ST':>6} {'b1/s':>6} {'x ST':>6} {'macro F1':>9}")
    for n, r in rows.items():
        f1 = f"{r['macro_f1']:.4f}" if "macro_f1" in r else "-"
        print(f"{n:28} {r['batch_32_texts_per_s']:7.0f} {r['batch_32_x_sentence_transformers']:6.2f} "
              f"{r['batch_1_texts_per_s']:6.0f} {r['batch_1_x_sentence_transformers']:6.2f} {f1:>9}")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
