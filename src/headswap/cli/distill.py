"""`headswap distill`: train a fast student (TF-IDF, or with --student static the static strategy) on a saved
classifier's probabilities (headswap.jobs.distill). Building the parser imports no torch."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from headswap.cli.data_args import add_columns, data_files, load
from headswap.cli.options import add_settings, check_models, settings_from
from headswap.errors import DataError, HeadswapError

HELP = "train a fast TF-IDF or static student on a saved classifier's probabilities"
DESCRIPTION = ("Distil a saved single-label classifier (the teacher: a `headswap train` or `headswap export` "
               "directory) into a student trained on the teacher's probabilities over the training texts and over "
               "any unlabelled texts: TF-IDF + logistic regression (default; predict, eval and serve run it on "
               "scikit-learn), or with --student static the static strategy (a model2vec table of --model's tokens "
               "that trains, attention pooling, a linear head; the settings flags below apply to it, and "
               "DIR/validation.csv picks its best epoch). Both are much faster than the teacher on CPU.")
# The settings of the static student that the command takes (headswap.settings derives their flags); the rest
# (strategy, prompts, multi-label, the reject option, LoRA, chunking, class weights) do not apply to it.
STUDENT_SETTINGS = ("model", "regime", "pooling", "head", "max_length", "epochs", "batch_size", "eval_batch_size",
                    "head_lr", "body_lr", "schedule", "warmup_ratio", "weight_decay", "max_grad_norm", "metric",
                    "eval_fraction", "temperature_scaling", "static_vocab_min_count", "seed", "group_by_length")


def unit_interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--teacher", required=True, help="the teacher: a directory written by `headswap train` or "
                   "`headswap export` (single-label)")
    p.add_argument("--data", required=True, help="training file (CSV/TSV/JSONL/Parquet with texts and labels) or a directory "
                   "with train.csv (+ validation.csv: the student's and the teacher's macro F1 on it are reported)")
    p.add_argument("--unlabeled", metavar="FILE", help="more texts for the teacher to label: a .txt file with one "
                   "text per line, or a CSV/TSV/JSONL file with the --text-column (as `headswap predict --data`)")
    add_columns(p)
    p.add_argument("--label-weight", type=unit_interval, default=0.0, metavar="W",
                   help="weight of the true labels in the targets of labelled texts: 0 = the teacher's "
                   "probabilities only, 1 = the labels only (default: %(default)s)")
    p.add_argument("--student", choices=("tfidf", "static"), default="tfidf", help="tfidf: TF-IDF + logistic "
                   "regression; static: the static strategy on --model, trained on the same soft targets "
                   "(default: %(default)s)")
    p.add_argument("--out", required=True, help="directory to save the student in")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    from headswap import settings
    add_settings(p, skip=tuple(f.name for f in settings.all_fields() if f.name not in STUDENT_SETTINGS))


def student_settings(args) -> dict:
    """The static student's settings from the command line; with the tfidf student, none may be set."""
    from headswap import settings
    given = settings_from(args, skip=tuple(f.name for f in settings.all_fields() if f.name not in STUDENT_SETTINGS))
    if args.student == "static":
        return given
    defaults = settings.defaults()
    changed = [settings.flag_of(f) for f in settings.all_fields()
               if f.name in given and given[f.name] != defaults[f.name]]
    if changed:
        raise HeadswapError(f"{', '.join(changed)} set{'s' if len(changed) == 1 else ''} the static student; add "
                            f"--student static, or leave {'it' if len(changed) == 1 else 'them'} out for TF-IDF")
    return {}


def unlabeled_texts(path: str, text_column: str):
    """(line, text) of a .txt file (one text per line, as `headswap predict` reads standard input) or of a
    CSV/TSV/JSONL file's text column (as `headswap predict --data` reads it)."""
    from headswap.data.stream import decoded_lines, iter_texts, stdin_texts
    if Path(path).suffix.lower() == ".txt":
        if not Path(path).is_file():
            raise DataError(f"{path}: file not found")
        return stdin_texts(decoded_lines(path))
    return iter_texts(path, text_column=text_column)


def run(args) -> int:
    from headswap.saved.outputs import check_model_out
    check_model_out("--out", args.out, inputs=[("--teacher", args.teacher)])
    params = student_settings(args)
    if params:
        from headswap.classifier.estimator import TextClassifier
        TextClassifier(**params, strategy="static").resolved_params()   # checked before any data or model loads
        check_models("--model", [params["model"]])
    from headswap.saved.atomic import output_lock
    with output_lock(args.out):     # held from the start, as train holds it: a second distill into OUT stops at once
        return _run(args, params)


def _run(args, params: dict) -> int:
    from headswap.data.load import check_training_data

    files = data_files(args.data, required=("train",), command="distill")
    train = load(files["train"], args)
    check_training_data(train)
    val = load(files["validation"], args) if "validation" in files else None
    unlabeled = None
    if args.unlabeled:
        unlabeled = [text for _, text in unlabeled_texts(args.unlabeled, args.text_column)]
        if not unlabeled:
            raise DataError(f"--unlabeled {args.unlabeled} holds no texts")
    from headswap.jobs import distill as distillation  # the module, looked up at call time (tests patch distill)
    try:
        teacher = distillation.load_teacher(args.teacher, progress=not args.quiet)
    except HeadswapError as e:
        raise HeadswapError(f"--teacher {args.teacher}: {e}") from None
    known = set(map(str, teacher.labels_))
    for data in (train, val):
        unknown = sorted(set(data.labels) - known) if data is not None else []
        if unknown:
            raise DataError(f"{data.source}: labels the teacher does not know: {', '.join(map(repr, unknown))}; the "
                            f"teacher's labels: {', '.join(map(str, teacher.labels_))}")
    kind = "TF-IDF + logistic regression" if args.student == "tfidf" else f"static ({params['model']})"
    print(f"distilling {args.teacher} into {kind} on {len(train)} training texts"
          f"{f' + {len(unlabeled)} unlabelled' if unlabeled else ''}, label weight {args.label_weight:g}",
          file=sys.stderr)
    student = distillation.distill(teacher, train.texts, train.labels, unlabeled, label_weight=args.label_weight,
                                   progress=not args.quiet, student=args.student, student_params=params,
                                   **({"eval_texts": val.texts, "eval_labels": val.labels}
                                      if val is not None and args.student == "static" else {}))
    student.distillation_["teacher"] = str(Path(args.teacher).resolve())
    from headswap.saved.model_dir import save_into
    out = save_into(args.out, student.save)
    record = student.distillation_
    agreement = f"{record['agreement']:.1%} of the training texts"
    if unlabeled:
        agreement += f" and {record['agreement_unlabelled']:.1%} of the unlabelled ones"
    print(f"wrote {out}: student trained on {len(train) + len(unlabeled or [])} texts ({len(train)} labelled"
          f"{f', {len(unlabeled)} unlabelled' if unlabeled else ''}); it agrees with the teacher on {agreement} "
          f"(teacher inference {record['teacher_seconds']:.1f} s)", file=sys.stderr)
    if val is not None:
        s, t = student.evaluate(val.texts, val.labels), teacher.evaluate(val.texts, val.labels)
        print(f"validation {files['validation']} ({len(val)} texts): macro F1 student {s.f1('macro'):.3f}, teacher "
              f"{t.f1('macro'):.3f}; {s.extra['texts_per_second']:.0f} vs {t.extra['texts_per_second']:.0f} texts/s",
              file=sys.stderr)
    return 0
