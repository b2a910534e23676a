"""Train the MiniLM encoder-mlp teacher on emotion and write its probabilities for benchmarks/distill_static.py:
OUT/teacher-{train,validation,test}.npy (float32, rows in CSV order, columns in OUT/teacher.json's label order).

The recipe of the file the distill_static benchmark used (run on a lent H100, minilm weights rounded to fp16 for
the transfer; test macro F1 0.887): body LR 1e-4, 2 epochs, batch 32, max_length 64, seed 0. On the 2-core CPU
expect about 15 minutes per epoch.

    .venv/bin/python benchmarks/teacher_probs.py --out runs/teacher
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from headswap import TextClassifier, load_dataset  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "emotion"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--model", default="minilm")
    p.add_argument("--out", type=Path, default=Path("runs/teacher"))
    args = p.parse_args()
    tr, va, te = (load_dataset(str(args.data / f"{s}.csv")) for s in ("train", "validation", "test"))
    t0 = time.perf_counter()
    clf = TextClassifier(strategy="encoder-mlp", model=args.model, body_lr=1e-4, epochs=2, batch_size=32,
                         max_length=64, seed=0, progress=False)
    clf.fit(tr.texts, tr.labels, eval_texts=va.texts, eval_labels=va.labels)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, d in (("train", tr), ("validation", va), ("test", te)):
        np.save(args.out / f"teacher-{name}.npy", clf.predict_proba(d.texts).astype(np.float32))
    m = clf.evaluate(te.texts, te.labels)
    info = {"labels": list(clf.labels_), "test_macro_f1": m.f1("macro"), "test_accuracy": m.accuracy,
            "best_epoch": clf.best_epoch_, "temperature": clf.temperature_, "seconds": time.perf_counter() - t0,
            "model": args.model}
    (args.out / "teacher.json").write_text(json.dumps(info, indent=1))
    print(info)


if __name__ == "__main__":
    main()
