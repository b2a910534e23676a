"""`headswap auto`: train what fits a time budget, pick the winner on validation, ship it (headswap.auto.main)."""

from __future__ import annotations

import argparse
import sys

from headswap.cli.bench import NOT_SETTINGS, add_data_arguments, check_arguments
from headswap.cli.options import (StoreGiven, add_settings, duration, float_at_least, given, positive_float,
                                  settings_from)
from headswap.trials import DEFAULT_MODELS

AUTO_SETS = ("time_limit",)     # auto gives each rung its own share of the budget

HELP = "train what fits a time budget, pick the best on validation, save it (exported when it can be)"
DESCRIPTION = ("Always trains a TF-IDF baseline (a linear SVM first, then other strengths and logistic regression "
               "while a twentieth of the budget allows), then climbs a cost ladder: static, head-only "
               "heads on frozen features (logistic regression, linear, MLP; one encoding pass per model), fine-tuning, "
               "causal models last, each estimated from a short probe. The fine-tuning rungs and their learning-rate "
               "neighbours then compete by successive halving: short time-bounded slices, the worse half stops, the "
               "leader trains on until validation stops improving (no arm holds over a third of the budget unless it "
               "leads); with --ray-address they run in parallel on a Ray cluster. Picks the best validation macro F1 (never test; "
               "candidates a paired bootstrap cannot tell apart are blended) and saves it as OUT/model (ONNX-"
               "exported for encoder strategies); scores only the winner and the baseline on the test set, once. "
               "Writes OUT/results.json, results.md, report.html.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from headswap.classifier.runtime import QUANTIZE
    from headswap.strategies import names

    add_data_arguments(p, "without a validation.csv a stratified, seeded tenth of the training texts is held out to "
                       "choose on, and without a test split (test.csv or --test-fraction) nothing is scored on test")
    p.add_argument("--budget", required=True, type=duration, metavar="TIME",
                   help="wall-clock budget for the whole command, counted from its start and including shipping the "
                   "winner: 20m, 1h30m, 90s (a bare number is minutes, as in Python's AutoClassifier(budget=90)); "
                   "one too small for the TF-IDF baseline is refused with the least that fits")
    p.add_argument("--model", nargs="+", metavar="M", dest="models",
                   help=f"built-in names, model folders or .gguf files (default: {' '.join(DEFAULT_MODELS)}, and "
                   "mpnet, gemma3-270m and multilingual-e5-small when installed; each is timed and runs only if it "
                   "fits the budget)")
    p.add_argument("--strategies", nargs="+", default=["all"], metavar="LIST",
                   help="comma-separated strategies or 'all' (default: all but the few-shot setfit): "
                   + ", ".join(names()))
    p.add_argument("--out", default="auto-out", metavar="OUT", help="output folder (default: %(default)s)")
    p.add_argument("--quantize", choices=QUANTIZE, default="none",
                   help="int8 weights in the exported winner (default: %(default)s, exact fp32 ONNX)")
    p.add_argument("--no-lr-search", dest="lr_search", action="store_false",
                   help="no learning-rate variants among the fine-tuning arms (by default each rung's neighbours "
                   "on the 1e-5, 3e-5, 1e-4, ... grid compete too; a rate given with --body-lr / --head-lr is kept)")
    p.add_argument("--no-more-epochs", dest="more_epochs", action="store_false",
                   help="each arm's schedule plans exactly --epochs epochs (by default as many as the budget could "
                   "give it, up to 10, so the leader can train on while its validation improves)")
    p.add_argument("--no-blend", dest="blend", action="store_false",
                   help="ship the winner alone (by default it ships a blend of up to three of the best candidates "
                   "and the TF-IDF baseline, chosen on validation by greedy ensemble selection, when held-out folds "
                   "of validation score the blend higher than the best alone)")
    p.add_argument("--ray-address", metavar="ADDRESS", default=None,
                   help="run the fine-tuning arms on the Ray cluster at ADDRESS (e.g. ray://head:10001 or "
                   "head:6379), several at once; without it everything runs in this process and Ray is not started")
    p.add_argument("--arm-cpus", type=positive_float, default=1.0, metavar="N", action=StoreGiven,
                   help="CPUs each arm asks the Ray cluster for (default: %(default)g; with --ray-address)")
    p.add_argument("--arm-gpus", type=float_at_least(0), default=0.0, metavar="N", action=StoreGiven,
                   help="GPUs each arm asks the Ray cluster for (default: %(default)g; with --ray-address)")
    p.add_argument("--prior", default="shipped", metavar="FILE",
                   help="the table of earlier runs that orders the rungs, caps those it never saw pay and drops those "
                   "that never came near the winner: a file as benchmarks/build_prior.py writes (from your own "
                   "project's runs, or without this data set's runs, to judge auto on data it never saw), 'none' "
                   "for the ladder's own order, or the one headswap ships (default: %(default)s); results.json "
                   "records which")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_settings(p, skip=NOT_SETTINGS + AUTO_SETS, epochs=1)


def run(args) -> int:
    from headswap.saved.atomic import output_lock
    from headswap.auto.main import auto

    check_arguments(args, "auto")      # --model's names; the defaults are auto's to check (a missing one is skipped)
    for name in ("arm_cpus", "arm_gpus"):     # else silently ignored: without a cluster one arm runs at a time here
        if given(args, name) and not args.ray_address:
            from headswap.errors import ConfigError
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(args, name):g} is what each arm asks a Ray "
                              f"cluster for; it needs --ray-address (without it the arms take turns in this process)")
    from headswap.auto.prior import read_table
    read_table(args.prior)      # one line at once for a file that is no table, before the data is read
    if args.ray_address:     # one line at once for an address nothing answers at, before the data is read
        from headswap.auto.runners import check_reachable
        check_reachable(args.ray_address)
    with output_lock(args.out):      # two auto runs into one OUT would overwrite each other's model and results
        auto(args.data, args.budget, models=args.models, strategies=args.strategies, out=args.out,
             quantize=args.quantize, command=["headswap", *sys.argv[1:]], progress=not args.quiet,
             test_fraction=args.test_fraction, text_column=args.text_column, label_column=args.label_column,
             lr_search=args.lr_search, more_epochs=args.more_epochs, blend=args.blend,
             started=getattr(args, "started", None), ray_address=args.ray_address, arm_cpus=args.arm_cpus, arm_gpus=args.arm_gpus,
             prior=args.prior,
             **settings_from(args, skip=NOT_SETTINGS + AUTO_SETS))
    return 0
