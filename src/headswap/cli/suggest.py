"""`headswap suggest`: which texts to label next for a saved classifier (headswap.classifier.suggest). Building the parser
imports no torch or scikit-learn."""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from headswap.cli.options import add_runtime, int_at_least
from headswap.errors import HeadswapError

HELP = "choose which unlabelled texts to label next (uncertain ones, spread over the model's features)"
DESCRIPTION = ("Run a saved classifier once over a pool of unlabelled texts and pick the N worth labelling next: the "
               "texts it is least sure of (smallest margin between its two likeliest classes), spread over its own "
               "pooled features by k-means so they are not all the same kind of text. Texts in --labelled are never "
               "suggested, and a text is suggested once however often the pool repeats it. Writes OUT/to_label.csv "
               "(text, predicted label, confidence, why chosen), label_studio.json and label_studio_config.xml (a "
               "Label Studio import with the model's guesses as predictions) and suggest.json.")
# as headswap.classifier.suggest.STRATEGIES (the parser stays light)
STRATEGIES = ("margin-kmeans", "margin", "entropy", "random")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="MODEL_DIR", help="a saved model (headswap train --out)")
    p.add_argument("--data", required=True, metavar="FILE", help="the unlabelled pool: CSV/TSV/JSONL/Parquet with a "
                   "text column, or .txt with one text per line")
    p.add_argument("-n", type=int_at_least(1), default=200, metavar="N",
                   help="texts to suggest (default: %(default)s)")
    p.add_argument("--labelled", metavar="FILE", help="texts already labelled (same formats; e.g. the training data): "
                   "never suggested")
    p.add_argument("--text-column", default="text", help="column holding the texts (default: %(default)s)")
    p.add_argument("--strategy", choices=STRATEGIES, default=STRATEGIES[0],
                   help="margin-kmeans: uncertain and diverse (default); margin or entropy: uncertainty alone; "
                   "random: a seeded draw")
    p.add_argument("--seed", type=int, default=0, help="k-means and random draw seed (default: %(default)s)")
    p.add_argument("--out", default="suggest-out", metavar="DIR", help="folder for the files; other files in it are "
                   "left alone, and a file of the same name that headswap did not write is refused (default: "
                   "%(default)s)")
    add_runtime(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary lines on stderr")


def read_texts(path: str, text_column: str) -> tuple[list[int], list[str]]:
    """(line numbers, texts) of a pool or labelled file, read by headswap's readers (a .txt: one per line)."""
    from headswap.data.stream import decoded_lines, iter_texts, stdin_texts
    if Path(path).suffix.lower() == ".txt":
        if not Path(path).is_file():
            raise HeadswapError(f"{path}: file not found")
        pairs = list(stdin_texts(decoded_lines(path)))
    else:
        pairs = list(iter_texts(path, text_column=text_column))
    if not pairs:
        raise HeadswapError(f"{path} holds no texts")
    return [r for r, _ in pairs], [t for _, t in pairs]


def run(args) -> int:
    from headswap.classifier.estimator import load_model
    from headswap.saved.atomic import output_lock
    from headswap.saved.model_dir import read_config
    from headswap.classifier.suggest import FILES, check_n, suggest
    from headswap.saved.outputs import check_folder

    check_folder("--out", args.out, FILES, inputs=[("--data", args.data), ("--labelled", args.labelled)])
    read_config(Path(args.model_dir))     # a missing or damaged model is named before the data is read
    rows, texts = read_texts(args.data, args.text_column)
    labelled = read_texts(args.labelled, args.text_column)[1] if args.labelled else None
    check_n(args.n, len(set(texts) - set(labelled or ())), flag="-n")     # before the model loads
    model = load_model(args.model_dir, progress=not args.quiet, runtime=args.runtime)   # a bar over the pool
    with output_lock(args.out):
        result = suggest(model, texts, args.n, exclude=labelled, strategy=args.strategy, seed=args.seed, rows=rows)
        extra = {"model": str(args.model_dir), "data": str(args.data), "labelled": args.labelled,
                 "command": shlex.join(["headswap", *sys.argv[1:]]),
                 "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
        written = result.write(args.out, extra)
    s = result.summary
    if not args.quiet:
        print(f"{s['pool_texts']} texts in {args.data}: {s['distinct_unlabelled']} distinct unlabelled "
              f"({s['excluded_as_labelled']} already labelled, {s['duplicates_skipped']} repeats); suggested "
              f"{len(result.rows)} by {s['strategy']}, mean margin {s['mean_margin_chosen']:.3f} "
              f"(pool {s['mean_margin_pool']:.3f})", file=sys.stderr)
        print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0
