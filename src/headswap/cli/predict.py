"""`headswap predict`: classify texts with a saved classifier, as JSON lines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headswap.cli.data_args import add_columns
from headswap.cli.options import int_at_least
from headswap.errors import HeadswapError

HELP = "classify texts with a saved classifier; JSON lines out"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True)
    p.add_argument("texts", nargs="*", help="texts to classify (default: --data, else one text per stdin line)")
    p.add_argument("--data", help="a CSV/TSV/JSONL file with a text column; read as a stream")
    add_columns(p, label=False)
    p.add_argument("--out", help="write JSON lines here instead of stdout")
    p.add_argument("--resume", action="store_true", help="keep the rows already in --out and continue after them")
    p.add_argument("--chunk-size", type=int_at_least(1), default=256,
                   help="texts read, predicted and written at a time (default: %(default)s)")
    p.add_argument("-q", "--quiet", action="store_true")


def run(args) -> int:
    from headswap.api import TextClassifier
    from headswap.data.stream import completed_rows, iter_texts, predict_stream, stdin_texts

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
