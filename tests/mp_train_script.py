"""Train the tiny transformer on a slice of the SMS fixture with headswap.training.fit.

Run by tests/test_multiprocess.py (plain `python` and under `accelerate launch --num_processes 2`) and by
tests/test_resume.py (killed with SIGKILL mid-run, then resumed). Usage:

    python tests/mp_train_script.py OUTDIR [--epochs 2] [--batch 32] [--checkpoint-dir D] [--resume]
                                           [--batch-delay SECONDS] [--dropout 0.0] [--stop-after EPOCH]

--batch is the global batch: each of N processes takes batch/N, so one optimizer step sees the same texts
whatever N is. Every process writes OUTDIR/rank<i>.json (batches it trained on per epoch); the main process
alone evaluates the test slice, writes OUTDIR/model.safetensors (trainable parameters) and
OUTDIR/result.json, and prints "rank 0 saved ...".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import save_file

from headswap.nn.classifier import Classifier
from headswap.teach.demo import make_collate
from headswap.teach.fixture import fixture_split
from headswap.metrics import metrics_from_logits
from headswap.train.regimes import apply_regime
from headswap.teach.tiny import TinyConfig, TinyTransformer
from headswap.teach.tokenizer import ByteTokenizer
from headswap.train.loop import TrainConfig, default_accelerator, fit, predict_logits

# 256 = 8 global batches of 32; 50 and 100 do not split evenly into batches of 16 over 2 processes, so
# gather_for_metrics has padding to drop.
N_TRAIN, N_EVAL, N_TEST = 256, 50, 100


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32, help="global batch size, split across the processes")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--batch-delay", type=float, default=0.0,
                   help="sleep in every collate call, so that a kill lands mid-epoch (kill test)")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--stop-after", type=int, help="exit (status 3) after this epoch's checkpoint")
    args = p.parse_args(argv)
    torch.set_num_threads(1)   # 2 shared cores: one thread per process, and the same numerics in every run

    accelerator = default_accelerator()
    rank, world = accelerator.process_index, accelerator.num_processes
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} is not divisible by {world} processes")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    tr_x, tr_y, te_x, te_y = fixture_split()
    items = [(x, int(y == "spam")) for x, y in zip(tr_x, tr_y)]
    train, val = items[:N_TRAIN], items[N_TRAIN:N_TRAIN + N_EVAL]
    test = [(x, int(y == "spam")) for x, y in zip(te_x[:N_TEST], te_y[:N_TEST])]
    collate = make_collate(ByteTokenizer(max_length=32))
    if args.batch_delay:
        fast_collate = collate

        def collate(batch):
            time.sleep(args.batch_delay)
            return fast_collate(batch)
    torch.manual_seed(0)
    cfg_model = TinyConfig(hidden=32, heads=2, blocks=2, max_len=32, dropout=args.dropout)
    model = apply_regime(Classifier(TinyTransformer(cfg_model), 32, 2), "partial", last_n=1)  # frozen params too

    cfg = TrainConfig(epochs=args.epochs, batch_size=args.batch // world, eval_batch_size=16, head_lr=1e-2,
                      body_lr=3e-3, schedule="cosine", warmup_ratio=0.25, seed=7, metric="accuracy",
                      progress=False, checkpoint_dir=args.checkpoint_dir, resume=args.resume)
    steps = []

    def on_epoch_end(entry):
        steps.append(entry.steps)
        if entry.epoch == args.stop_after:
            raise SystemExit(3)

    def log(msg):
        print(f"[rank {rank}] {msg}", flush=True)

    result = fit(model, train, collate, cfg, eval_items=val, eval_labels=[y for _, y in val],
                 label_names=["ham", "spam"], positive_label="spam", log=log, accelerator=accelerator,
                 on_epoch_end=on_epoch_end)
    (out / f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "num_processes": world, "pid": os.getpid(), "batch_size": cfg.batch_size,
         "steps_per_epoch": steps}))
    logits = predict_logits(model, test, collate, 16, accelerator)   # every process; gathered in order
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        m = metrics_from_logits(logits, [y for _, y in test], ["ham", "spam"], "spam")
        state = {n: p.detach().cpu().contiguous() for n, p in accelerator.unwrap_model(model).named_parameters()
                 if p.requires_grad}
        save_file(state, str(out / "model.safetensors.tmp"))
        os.replace(out / "model.safetensors.tmp", out / "model.safetensors")
        history = [{k: v for k, v in asdict(h).items() if k != "seconds"} for h in result.history]
        (out / "result.json").write_text(json.dumps(
            {"accuracy": m.accuracy, "n_test": len(test), "n_scored": int(m.confusion.sum()),
             "best_epoch": result.best_epoch, "resumed_epoch": result.resumed_epoch, "history": history,
             "num_processes": world}, default=float))
        log(f"rank {rank} saved {out / 'model.safetensors'} (test accuracy {m.accuracy:.4f})")
    accelerator.wait_for_everyone()
    accelerator.end_training()      # the process group torn down before exit: without it a rank could abort there
    return 0


if __name__ == "__main__":
    sys.exit(main())
