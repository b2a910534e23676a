"""`headswap bench`: every strategy on every model, on one split, against a TF-IDF + LinearSVC baseline."""

from __future__ import annotations

import argparse
import sys

from headswap import settings
from headswap.cli.data_args import add_columns, load
from headswap.cli.options import add_settings, check_class_weight, check_descriptions, check_models
from headswap.cli.options import int_at_least, settings_from
from headswap.trials import DEFAULT_MODELS

HELP = "benchmark strategies x models against a TF-IDF + LinearSVC baseline"
DESCRIPTION = ("Train and evaluate every strategy that fits each model on one stratified split; write "
               "OUT/results.json, results.md, charts and report.html, the one-page report to open in a browser.")
# strategy and model are lists in bench; bench keeps no checkpoints; multi-label data is for train and eval.
NOT_SETTINGS = ("strategy", "model", "checkpoint_every", "multi_label", "label_separator")


def fraction(text: str) -> float:
    """A share strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, e.g. 0.2, got {text!r}") from None
    if not 0 < value < 1:        # NaN fails this too
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1 (both excluded), e.g. 0.2, got {text}")
    return value


def add_data_arguments(p: argparse.ArgumentParser, validation: str) -> None:
    """bench's and auto's --data, --test-fraction, --text-column and --label-column; `validation`: what the command
    does without a validation.csv."""
    p.add_argument("--data", required=True, metavar="PATH",
                   help="a labelled CSV/TSV/JSONL/Parquet file, or a folder with train.csv and, optionally, validation.csv "
                   f"and test.csv; {validation}")
    p.add_argument("--test-fraction", type=fraction, metavar="F",
                   help="hold a stratified, seeded share F (0 < F < 1, e.g. 0.2) of the training texts out as the test "
                   "set, before anything else is held out (for data without a test.csv)")
    add_columns(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from headswap.strategies import names

    add_data_arguments(p, "bench scores every row on test.csv or on --test-fraction's share, and without a "
                       "validation.csv each row holds a stratified tenth of its training texts out to pick its "
                       "best epoch")
    p.add_argument("--model", nargs="+", default=list(DEFAULT_MODELS), metavar="M", dest="models",
                   help="built-in names, model folders or .gguf files (default: %(default)s)")
    p.add_argument("--strategies", nargs="+", default=["all"], metavar="LIST",
                   help="comma-separated strategies or 'all' (default: all but the few-shot setfit); each runs on "
                   "the models it fits: " + ", ".join(names()))
    p.add_argument("--train-limit", type=int_at_least(1), metavar="N",
                   help="use a stratified, seeded subset of N training texts")
    p.add_argument("--test-limit", type=int_at_least(1), metavar="M",
                   help="use a stratified, seeded subset of M test texts")
    p.add_argument("--out", default="bench-out", metavar="OUT", help="output folder (default: %(default)s)")
    p.add_argument("--no-zero-shot", action="store_true", help="no extra untrained rows for the zero-shot strategies")
    p.add_argument("--no-estimate", action="store_true",
                   help="skip timing a first batch before each row (no time estimates)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_settings(p, skip=NOT_SETTINGS, epochs=1)


def check_arguments(args, command: str) -> None:
    """What bench and auto check before any work: strategies, --out, settings files, the data and its columns,
    models."""
    from headswap.trials.plan import CLI_NAMES, bench_files, parse_strategies

    parse_strategies(args.strategies)
    settings.check(settings_from(args, skip=NOT_SETTINGS))     # before the work, which would refuse them later
    from headswap.saved.outputs import check_run_folder
    check_run_folder(args.out)
    check_descriptions(args.descriptions)
    check_class_weight(args.class_weight)
    files = bench_files(args.data, args.test_fraction, needs_test=command == "bench", who=f"headswap {command}",
                        names=CLI_NAMES)
    for path in files.values():      # every file read, so a wrong column or format is one line before the work
        load(path, args)
    if args.models is not None:
        check_models("--model", args.models)


def run(args) -> int:
    """Run the benchmark; 0 when every row ran, 1 when some row failed."""
    from headswap.bench.run import run_bench

    check_arguments(args, "bench")
    results = run_bench(args.data, models=args.models, strategies=args.strategies, train_limit=args.train_limit,
                        test_limit=args.test_limit, out=args.out, zero_shot=not args.no_zero_shot,
                        estimate=not args.no_estimate, command=["headswap", *sys.argv[1:]],
                        test_fraction=args.test_fraction, text_column=args.text_column, label_column=args.label_column,
                        progress=not args.quiet, **settings_from(args, skip=NOT_SETTINGS))
    return 1 if any(r.get("status") != "ok" for r in results["rows"]) else 0
