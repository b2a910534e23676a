"""Static: predict_proba speed of a saved model on torch (one thread) against its ONNX export (ONNX Runtime's
default session, then held to one thread), in one run; texts/s over emotion's 2,000 test texts at 256 per call,
best of 3. Fits (once, into --dir) a static model with the defaults, 1 epoch on 3,000 training texts, no added
words. Load the machine beside it (e.g. `python3 -c "while True: pass" &`) to see contention.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/static_onnx_speed.py --dir runs/static-onnx-speed
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402
from headswap.jobs.export import export  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "emotion"


def speed(predict, texts: list[str]) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(0, len(texts), 256):
            predict(texts[i:i + 256])
        best = min(best, time.perf_counter() - t0)
    return len(texts) / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=Path("runs/static-onnx-speed"))
    args = p.parse_args()
    torch.set_num_threads(1)
    train, test = load_dataset(str(DATA / "train.csv")), load_dataset(str(DATA / "test.csv"))
    saved, exported = args.dir / "model", args.dir / "onnx"
    if not exported.is_dir():
        clf = TextClassifier(strategy="static", model="minilm", static_vocab_min_count=0, epochs=1, progress=False)
        clf.fit(train.texts[:3000], train.labels[:3000])
        clf.save(saved)
        export(saved, exported)
    on_torch = TextClassifier.load(saved, runtime="torch")
    on_onnx = TextClassifier.load(exported)
    print(f"torch, 1 thread: {speed(on_torch.predict_proba, test.texts):,.0f} texts/s")
    print(f"ONNX Runtime, default session: {speed(on_onnx.predict_proba, test.texts):,.0f} texts/s")
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    on_onnx.module_.session = ort.InferenceSession(str(exported / "model.onnx"), options,
                                                   providers=["CPUExecutionProvider"])
    print(f"ONNX Runtime, 1 thread: {speed(on_onnx.predict_proba, test.texts):,.0f} texts/s")


if __name__ == "__main__":
    main()
