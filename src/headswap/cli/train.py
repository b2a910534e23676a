"""`headswap train`: train a classifier on a labelled file and save it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from headswap.cli.data_args import add_columns, data_files, load, subsample
from headswap.cli.options import add_settings, check_class_weight, check_descriptions, check_models, int_at_least
from headswap.cli.options import settings_from
from headswap.errors import ConfigError, HeadswapError

HELP = "train a classifier on a labelled file and save it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="training file (CSV/TSV/JSONL/Parquet) or a directory with train.csv "
                   "(+ validation.csv to pick the best epoch, + test.csv for the final evaluation)")
    p.add_argument("--eval-data", help="validation file (default: DIR/validation.csv, else 10%% of training data)")
    p.add_argument("--test-data", help="test file evaluated after training (default: DIR/test.csv)")
    add_columns(p)
    p.add_argument("--train-limit", type=int_at_least(1), metavar="N",
                   help="use a stratified, seeded sample of N training texts")
    p.add_argument("--out", required=True, help="directory to save the trained model in; during training it holds "
                   "OUT/checkpoints (one per epoch, removed once the model is saved)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from OUT/checkpoints "
                   "(same data and options); without a complete checkpoint, training starts from scratch")
    p.add_argument("--init-from", metavar="MODEL_DIR", help="train on from this saved model: its settings are the "
                   "defaults, its weights the start, its classes kept (new classes in --data are added)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_settings(p)
    _note_given(p)


def _note_given(parser: argparse.ArgumentParser) -> None:
    """Each settings flag notes that it was on the command line (options.given reads it): with --init-from, a
    setting left out takes the parent's value, and one given must agree with the parent's body."""
    from headswap.settings import all_fields
    names = {f.name for f in all_fields()}

    def call(self, parser, namespace, values, option_string=None):
        super(type(self), self).__call__(parser, namespace, values, option_string)
        namespace.given_flags = getattr(namespace, "given_flags", set()) | {self.dest}
    for action in parser._actions:
        if action.dest in names and "given_flags" not in type(action).__call__.__code__.co_names:
            action.__class__ = type("Noted" + type(action).__name__, (type(action),), {"__call__": call})


def run(args) -> int:
    import os

    from headswap.saved.atomic import output_lock
    check_out(args)
    if os.environ.get("RANK", "0") != "0":   # under `accelerate launch` the main process holds OUT
        return _run(args)
    with output_lock(args.out):             # a second train into the same OUT stops at once
        return _run(args)


def check_out(args) -> None:
    """OUT may take the model: never the --init-from model itself, which the save would replace."""
    from headswap.saved.outputs import check_model_out
    check_model_out("--out", args.out, inputs=[("--init-from", args.init_from)])


def _run(args) -> int:
    from headswap.data.load import check_eval_labels, check_training_data
    from headswap.data.multilabel import check_eval_label_sets, read_label_sets
    from headswap.settings import BINARY_METRICS

    out = Path(args.out)
    check_out(args)
    parent = None
    if args.init_from:     # before the data is read: its settings (multi_label, columns' meaning) are the defaults
        from headswap.cli.options import given
        from headswap.classifier.init_from import Parent
        parent = Parent.read(Path(args.init_from), data=args.data)
        parent.inherit_args(args, given)
    # The data first: reading and checking it needs no torch, so a bad file is one line at once, not after the
    # seconds that importing torch and transformers takes (headswap.classifier.estimator).
    files = data_files(args.data, required=("train",), command="train")
    train = load(files["train"], args)
    if args.multi_label:
        read_label_sets(train, args.label_separator)
        train = subsample(train, args.train_limit, args.seed, by=[row[0] for row in train.labels])
        labels = sorted({name for row in train.labels for name in row})
    else:
        train = subsample(train, args.train_limit, args.seed)
        labels = check_training_data(train, args.label_separator)
    if parent is not None:     # validation and test data may hold the parent's classes too
        labels = parent.grow(labels, labels)[0]
    if args.metric in BINARY_METRICS and len(labels) != 2:
        raise ConfigError(f"--metric {args.metric} scores the positive class of two-class data; this data has "
                          f"{len(labels)} classes: use macro_{args.metric} or weighted_{args.metric}")
    val_path = args.eval_data or files.get("validation")
    test_path = args.test_data or files.get("test")
    _warn_if_training_file(files["train"], ("--eval-data", args.eval_data), ("--test-data", args.test_data))
    val = load(val_path, args) if val_path else None
    test = load(test_path, args) if test_path else None
    for extra in (val, test):
        if extra is not None:
            if args.multi_label:
                check_eval_label_sets(labels, extra, args.label_separator)
            else:
                check_eval_labels(labels, extra, args.out_of_scope)
    from headswap.classifier.estimator import TextClassifier
    from headswap.metrics import class_list
    clf = TextClassifier(**settings_from(args), progress=not args.quiet,
                         checkpoint_dir=str(out / "checkpoints"), resume=args.resume)
    clf.resolved_params()   # every setting checked, and against the strategy, before any model loads
    check_descriptions(args.descriptions)
    check_class_weight(args.class_weight)
    check_models("--model", [args.model])
    if clf.regime_ == "partial" or args.cache_lower:
        from headswap.models import block_count
        blocks = block_count(args.model)
        if blocks is not None and args.last_n > blocks:
            raise ConfigError(f"--last-n {args.last_n}: {args.model} has {blocks} blocks; the partial regime trains "
                              f"1 to {blocks} of them")
        if blocks is not None and args.cache_lower and args.last_n >= blocks:
            raise ConfigError(f"--last-n {args.last_n}: {args.model} has {blocks} blocks; --cache-lower caches the "
                              f"blocks below the trained ones, so it trains 1 to {blocks - 1} of them")
    print(f"training {args.strategy} on {args.model} ({clf.regime_ if args.epochs else 'zero-shot: no training'}), "
          f"{len(train)} texts, {len(labels)} classes: {class_list(labels)}"
          + (f"; on from {args.init_from}" if parent is not None else ""), file=sys.stderr)
    t0 = time.perf_counter()
    clf.fit(train.texts, train.labels, *((val.texts, val.labels) if val is not None else ()), init_from=parent)
    # Under `accelerate launch` every process trains; only the main one evaluates, reports and saves.
    # PartialState sets itself up from the launch environment; a zero-shot run never built an Accelerator.
    from accelerate.state import PartialState
    if not PartialState().is_main_process:
        PartialState().wait_for_everyone()
        PartialState().destroy_process_group()     # torn down before exit, where a rank could abort (SIGABRT)
        return 0
    print(f"trained in {time.perf_counter() - t0:.1f} s; trainable parameters {clf.trainable_params_:,}",
          file=sys.stderr)
    if test is not None:
        m = clf.evaluate(test.texts, test.labels)
        clf.evaluation_ = {**m.to_dict(), "source": str(test_path)}
        print(f"\ntest set {test_path} ({len(test)} texts):\n{m.report()}")
        print(f"inference: {m.extra['texts_per_second']:.1f} texts/s")
        from headswap.cli.eval import calibration_line
        print(calibration_line(m.extra["calibration"]))
        if "out_of_scope" in m.extra:
            from headswap.decisions.reject import describe, describe_expectation
            block = m.extra["out_of_scope"]
            print(f"out of scope ({args.out_of_scope}): {describe(block)}; score {block.get('score', 'softmax')}")
            if block.get("expected"):
                print(f"validation promised: {describe_expectation(block['expected'])}")
            if block.get("oos_texts"):
                from headswap.classifier.reject_option import describe_scores
                print(f"out-of-scope scores (AUROC of separating out-of-scope from in-scope texts): "
                      f"{describe_scores(block)}")
    print(f"saved to {save_atomically(clf, args.out)}", file=sys.stderr)
    PartialState().wait_for_everyone()
    PartialState().destroy_process_group()
    return 0


def save_atomically(clf, out) -> Path:
    """Save into OUT so that OUT is always a complete model (the old or the new one); OUT/checkpoints, the
    per-epoch training checkpoints, goes away with the old folder once the new model is in place."""
    from headswap.saved.model_dir import save_into
    try:
        return save_into(out, clf.save)
    except HeadswapError as e:
        checkpoints = Path(out) / "checkpoints"
        if not checkpoints.is_dir():
            raise
        size = sum(f.stat().st_size for f in checkpoints.rglob("*") if f.is_file())
        raise HeadswapError(f"{e}; the training checkpoints in {checkpoints} ({size / 2**20:.0f} MB) are kept: "
                            f"rerun with --resume once there is room, or delete them") from None


def _warn_if_training_file(train: Path, *options) -> None:
    """Warn when --eval-data or --test-data is the training file itself: its scores (the best epoch, the
    calibration, the test report) are then measured on texts the model trained on."""
    import os

    from headswap.data.once import warn_once
    for option, path in options:
        if path and Path(path).is_file() and os.path.samefile(path, train):
            warn_once((option, str(train)), f"{option} {path} is the training file: its scores are measured on "
                                            f"texts the model trained on, so they are optimistic; hold out other "
                                            f"texts")
