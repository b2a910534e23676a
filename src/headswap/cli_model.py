"""`headswap train`, `eval` and `predict`: the command-line face of TextClassifier."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from .errors import DataError, HeadswapError


def _data_files(path: str) -> dict[str, Path]:
    """A file, or a directory holding train.csv / validation.csv / test.csv as in ../shared/data."""
    p = Path(path)
    if p.is_dir():
        files = {split: p / f"{split}.csv" for split in ("train", "validation", "test")}
        found = {k: v for k, v in files.items() if v.is_file()}
        if not found:
            raise DataError(f"{p} holds none of train.csv, validation.csv, test.csv")
        return found
    if not p.exists():
        raise DataError(f"{p}: no such file or directory")
    return {"train": p}


def _read_text_arg(value: str | None) -> str | None:
    """'@path' reads the text from a file (prompts are long)."""
    if value and value.startswith("@"):
        try:
            return Path(value[1:]).read_text(encoding="utf-8")
        except OSError as e:
            raise HeadswapError(f"cannot read {value[1:]}: {e.strerror}") from None
    return value


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    from .heads import HEADS
    from .pooling import POOLINGS
    from .regimes import REGIMES
    from .strategies import STRATEGIES
    from .training import SCHEDULES

    p.add_argument("--data", required=True, help="training file (CSV/TSV/JSONL) or a directory with train.csv "
                   "(+ validation.csv to pick the best epoch, + test.csv for the final evaluation)")
    p.add_argument("--eval-data", help="validation file (default: DIR/validation.csv, else 10%% of training data)")
    p.add_argument("--test-data", help="test file evaluated after training (default: DIR/test.csv)")
    p.add_argument("--strategy", choices=list(STRATEGIES), default="encoder-mlp", metavar="STRATEGY",
                   help="one of: " + "; ".join(f"{k} ({v})" for k, v in STRATEGIES.items()))
    p.add_argument("--model", default="minilm", help="minilm, smollm2-135m, a local HF folder or a .gguf file")
    p.add_argument("--regime", choices=["auto", *REGIMES], default="auto",
                   help="auto = full for encoders, lora for causal LMs")
    p.add_argument("--epochs", type=int, default=3, help="0 = zero-shot (slm-logits, slm-letters, similarity, "
                   "generate-parse)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--head-lr", type=float, default=1e-3)
    p.add_argument("--body-lr", type=float, default=None, help="default 3e-5 (full/partial), 2e-4 (lora)")
    p.add_argument("--schedule", choices=SCHEDULES, default="linear")
    p.add_argument("--warmup-ratio", type=float, default=0.06)
    p.add_argument("--pooling", choices=["auto", *POOLINGS], default="auto")
    p.add_argument("--head", choices=HEADS, default="mlp")
    p.add_argument("--last-n", type=int, default=1, help="blocks trained by the partial regime")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--lora-alpha", type=int, default=32)
    p.add_argument("--lora-dropout", type=float, default=0.05)
    p.add_argument("--max-length", type=int, default=128, help="tokens per text (the prompt is not counted)")
    p.add_argument("--prompt", help="instruction template with {classes}, {answer}, {text}; '@file' reads a file")
    p.add_argument("--descriptions", help="JSON {label: description} or CSV label,description")
    p.add_argument("--text-column", default="text")
    p.add_argument("--label-column", default="label")
    p.add_argument("--train-limit", type=int, help="use a stratified sample of this many training texts")
    p.add_argument("--metric", default="macro_f1", help="validation metric for the best epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="directory to save the trained model in; during training it holds "
                   "OUT/checkpoints (one per epoch, removed once the model is saved)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from OUT/checkpoints "
                   "(same data and options); without a complete checkpoint, training starts from scratch")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def _load(path, args):
    from .data import load_dataset
    return load_dataset(path, text_column=args.text_column, label_column=args.label_column)


def _subsample(data, limit: int | None, seed: int):
    from .data import stratified_split
    if not limit or limit >= len(data):
        return data
    keep, _ = stratified_split(data, test_size=1 - limit / len(data), seed=seed)
    return keep


def cmd_train(args) -> int:
    from .api import TextClassifier
    from .data import check_eval_labels, check_training_data

    for name in ("epochs", "batch_size", "max_length", "last_n", "lora_r"):
        value = getattr(args, name)
        if value < (0 if name == "epochs" else 1):
            raise HeadswapError(f"--{name.replace('_', '-')} must be >= {0 if name == 'epochs' else 1}, got {value}")
    files = _data_files(args.data)
    if "train" not in files:
        raise DataError(f"{args.data} has no train.csv")
    train = _subsample(_load(files["train"], args), args.train_limit, args.seed)
    labels = check_training_data(train)
    val_path = args.eval_data or files.get("validation")
    test_path = args.test_data or files.get("test")
    val = _load(val_path, args) if val_path else None
    test = _load(test_path, args) if test_path else None
    for extra in (val, test):
        if extra is not None:
            check_eval_labels(labels, extra)
    clf = TextClassifier(strategy=args.strategy, model=args.model, regime=args.regime, pooling=args.pooling,
                         head=args.head, epochs=args.epochs, batch_size=args.batch_size, head_lr=args.head_lr,
                         body_lr=args.body_lr, schedule=args.schedule, warmup_ratio=args.warmup_ratio,
                         last_n=args.last_n, lora_r=args.lora_r, lora_alpha=args.lora_alpha,
                         lora_dropout=args.lora_dropout, max_length=args.max_length,
                         instruction=_read_text_arg(args.prompt), descriptions=args.descriptions,
                         metric=args.metric, seed=args.seed, progress=not args.quiet,
                         checkpoint_dir=str(Path(args.out) / "checkpoints"), resume=args.resume)
    print(f"training {args.strategy} on {args.model} ({clf.regime_ if args.epochs else 'zero-shot: no training'}), "
          f"{len(train)} texts, "
          f"{len(labels)} classes: {', '.join(labels)}", file=sys.stderr)
    t0 = time.perf_counter()
    clf.fit(train.texts, train.labels, *( (val.texts, val.labels) if val is not None else ()))
    # Under `accelerate launch` every process trains; only the main one evaluates, reports and saves.
    from accelerate.state import PartialState
    # PartialState sets itself up from the launch environment; a zero-shot run never built an Accelerator.
    if not PartialState().is_main_process:
        PartialState().wait_for_everyone()
        return 0
    print(f"trained in {time.perf_counter() - t0:.1f} s; trainable parameters {clf.trainable_params_:,}",
          file=sys.stderr)
    if test is not None:
        m = clf.evaluate(test.texts, test.labels)
        clf.evaluation_ = {**m.to_dict(), "source": str(test_path)}
        print(f"\ntest set {test_path} ({len(test)} texts):\n{m.report()}")
        print(f"inference: {m.extra['texts_per_second']:.1f} texts/s")
    out = save_atomically(clf, args.out)
    print(f"saved to {out}", file=sys.stderr)
    PartialState().wait_for_everyone()
    return 0


def save_atomically(clf, out) -> Path:
    """Save into OUT.tmp, then swap it in, so that OUT is always a complete model (the old or the new one).

    Sequence: clf.save(OUT.tmp); rename OUT -> OUT.old (a directory cannot be renamed over a non-empty
    one); rename OUT.tmp -> OUT; remove OUT.old. A crash before the first rename leaves OUT untouched; one
    between the renames leaves the old model in OUT.old and the new one in OUT.tmp. OUT/checkpoints, the
    per-epoch training checkpoints, goes away with OUT.old once the new model is in place.
    """
    given = Path(out)
    out = given.resolve()
    tmp, old = out.with_name(out.name + ".tmp"), out.with_name(out.name + ".old")
    if tmp.exists():
        shutil.rmtree(tmp)          # a save that was interrupted earlier
    if old.exists() and out.exists():
        shutil.rmtree(old)          # left by a crash after the swap (with no OUT, OUT.old is kept for now)
    clf.save(tmp)
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return given


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True, help="a directory written by `headswap train`")
    p.add_argument("--data", required=True, help="labelled file, or a directory with test.csv")
    p.add_argument("--text-column", default="text")
    p.add_argument("--label-column", default="label")
    p.add_argument("--out", help="where to write metrics.json and confusion_matrix.png (default: MODEL_DIR/eval)")
    p.add_argument("--limit", type=int, help="evaluate a stratified sample of this many texts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-q", "--quiet", action="store_true")


def cmd_eval(args) -> int:
    from .api import TextClassifier
    from .data import check_eval_labels
    from .plots import plot_confusion

    files = _data_files(args.data)
    path = files.get("test") or files.get("train") if Path(args.data).is_dir() else files["train"]
    data = _subsample(_load(path, args), args.limit, args.seed)
    clf = TextClassifier.load(args.model_dir, progress=not args.quiet)
    check_eval_labels(list(clf.labels_), data)
    m = clf.evaluate(data.texts, data.labels)
    out = Path(args.out or Path(args.model_dir) / "eval")
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps({**m.to_dict(), "source": str(path)}, indent=2, default=str))
    plot_confusion(m.confusion, m.labels, out / "confusion_matrix.png",
                   title=f"{clf.strategy} on {clf.model}: {path.name}")
    print(m.report())
    print(f"inference: {m.extra['texts_per_second']:.1f} texts/s")
    print(f"wrote {out / 'metrics.json'} and {out / 'confusion_matrix.png'}", file=sys.stderr)
    return 0


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True)
    p.add_argument("texts", nargs="*", help="texts to classify (default: --data, else one text per stdin line)")
    p.add_argument("--data", help="a CSV/TSV/JSONL file with a text column; read as a stream")
    p.add_argument("--text-column", default="text")
    p.add_argument("--out", help="write JSON lines here instead of stdout")
    p.add_argument("--resume", action="store_true", help="keep the rows already in --out and continue after them")
    p.add_argument("--chunk-size", type=int, default=256, help="texts read, predicted and written at a time")
    p.add_argument("-q", "--quiet", action="store_true")


def cmd_predict(args) -> int:
    from .api import TextClassifier
    from .stream import completed_rows, iter_texts, predict_stream, stdin_texts

    if args.chunk_size < 1:
        raise HeadswapError(f"--chunk-size must be >= 1, got {args.chunk_size}")
    if args.resume and not args.out:
        raise HeadswapError("--resume needs --out (the file to continue)")
    if args.texts:
        rows = enumerate(args.texts, start=1)
    elif args.data:
        rows = iter_texts(args.data, text_column=args.text_column)
    else:
        rows = stdin_texts()
    clf = TextClassifier.load(args.model_dir, progress=False)
    skip, last = 0, None
    if args.out:
        out_path = Path(args.out)
        if args.resume:
            skip, last = completed_rows(out_path)
            if skip:
                print(f"resuming after {skip} rows already in {out_path}", file=sys.stderr)
        elif out_path.exists() and out_path.stat().st_size:
            raise HeadswapError(f"{out_path} exists; pass --resume to continue it, or remove it")
        out = open(out_path, "a", encoding="utf-8")
    else:
        out = sys.stdout
    try:
        predict_stream(clf, rows, out, args.chunk_size, skip, last, progress=not args.quiet)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0
