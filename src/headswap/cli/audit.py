"""`headswap audit`: find likely label errors and near-duplicate texts in training data (headswap.jobs.label_audit),
before training on it. Building the parser imports no torch, scikit-learn or cleanlab."""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import datetime, timezone

from headswap import settings
from headswap.cli.data_args import add_columns, data_files, load
from headswap.cli.options import add_settings, check_class_weight, check_descriptions, check_models
from headswap.cli.options import int_at_least, settings_from
from headswap.errors import ConfigError

HELP = "find likely label errors and near-duplicate texts in training data (cleanlab), before training"
DESCRIPTION = ("Score every training text with a classifier that never saw it (stratified k-fold: TF-IDF + logistic "
               "regression by default, or any strategy), let cleanlab's confident learning flag the labels that "
               "disagree, and find near-duplicate texts (cleanlab Datalab, on TF-IDF features), flagging those whose "
               "labels differ. Writes OUT/label_issues.csv (every text, likeliest errors first), near_duplicates.csv, "
               "audit.json and audit.html. The data is only read.")
# One classifier per fold, no checkpoints; single-label data only.
NOT_SETTINGS = ("strategy", "checkpoint_every", "multi_label", "label_separator")
TFIDF = "tfidf"      # as headswap.jobs.label_audit.TFIDF (not imported here: the parser stays light)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, metavar="DIR", help="folder with train.csv (the file audited), or a "
                   "CSV/TSV/JSONL/Parquet file of texts and labels")
    add_columns(p)
    p.add_argument("--strategy", choices=[TFIDF, *settings.STRATEGIES], default=TFIDF, metavar="STRATEGY",
                   help=f"the classifier trained on each fold: {TFIDF} (TF-IDF + logistic regression, fast) or a "
                   f"TextClassifier strategy ({', '.join(settings.STRATEGIES)}) with the settings below "
                   "(default: %(default)s)")
    p.add_argument("--folds", type=int_at_least(2), default=5, metavar="K",
                   help="stratified cross-validation folds; every class needs at least K texts (default: %(default)s)")
    p.add_argument("--out", default="audit-out", metavar="AUDIT_DIR", help="folder for label_issues.csv, "
                   "near_duplicates.csv, audit.json and audit.html; other files in it are left alone, and a file of the "
                   "same name that headswap did not write is refused (default: %(default)s)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines or bars")
    add_settings(p, skip=NOT_SETTINGS, model=None)


def classifier_settings(args) -> dict:
    """The TextClassifier settings given on the command line, checked (files, models) before any data loads. The
    TF-IDF audit takes none: a setting changed from its default is refused, naming its flag."""
    values = settings_from(args, skip=NOT_SETTINGS)
    values.pop("seed")
    if args.strategy == TFIDF:
        defaults = settings.defaults()
        for f in settings.all_fields():
            name = f.name
            if name in values and values[name] != (None if name == "model" else defaults[name]):
                raise ConfigError(f"{settings.flag_of(f)} is a setting of the TextClassifier strategies; "
                                  f"--strategy {TFIDF} takes none: drop it or give --strategy")
        return {}
    if values["model"] is None:
        values["model"] = settings.defaults()["model"]
    check_descriptions(args.descriptions)
    check_class_weight(args.class_weight)
    check_models("--model", [values["model"]])
    return values


def run(args) -> int:
    from headswap.jobs import label_audit  # the module, looked up at call time (tests patch audit_data)
    from headswap.saved.atomic import output_lock
    from headswap.data.load import check_training_data
    from headswap.saved.outputs import check_folder

    check_folder("--out", args.out, label_audit.FILES[:4], inputs=[("--data", args.data)])
    values = classifier_settings(args)
    label_audit.require_cleanlab()
    if args.strategy != TFIDF:
        label_audit.classifier_factory(args.strategy, args.seed, False, values)   # every setting, before the data
    files = data_files(args.data, required=("train",), command="audit")
    data = load(files["train"], args)
    check_training_data(data)
    label_audit.check_class_sizes(data, args.folds, flag="--folds")
    what = "TF-IDF + logistic regression" if args.strategy == TFIDF else f"{args.strategy} on {values['model']}"
    if not args.quiet:
        print(f"auditing {files['train']}: {len(data)} texts; {args.folds}-fold out-of-fold probabilities from {what}",
              file=sys.stderr)
    with output_lock(args.out):
        result = label_audit.audit_data(data, args.strategy, args.folds, seed=args.seed, progress=not args.quiet,
                                        settings=values)
        extra = {"data": str(files["train"]), "command": shlex.join(["headswap", *sys.argv[1:]]),
                 "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
        written = result.write(args.out, extra)
    print(summary_text(result))
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


def summary_text(result, top: int = 10) -> str:
    s, issues = result.summary, result.issues()
    c = s["counts"]
    unit = "line" if result.row_unit == "line" else "item"
    lines = [f"{s['rows']} texts, {len(result.classes)} classes; out-of-fold accuracy {c['out_of_fold_accuracy']:.3f} "
             f"({s['settings']['strategy']}, {s['settings']['folds']} folds, {s['timing']['total_seconds']:.1f} s)",
             f"label issues: {c['label_issues']} ({c['label_issue_share']:.1%}) flagged by cleanlab"
             + (f"; the {min(top, len(issues))} likeliest:" if issues else "")]
    if issues:
        width = max(len(unit), *(len(str(r["row"])) for r in issues[:top]))
        given = max(5, *(len(r["given_label"]) for r in issues[:top]))
        lines.append(f"  {unit:>{width}}  {'given':<{given}}  {'suggested':<10} quality  text")
        for r in issues[:top]:
            text = " ".join(r["text"].split())
            text = text if len(text) <= 70 else text[:69] + "…"
            lines.append(f"  {r['row']:>{width}}  {r['given_label']:<{given}}  {r['suggested_label']:<10} "
                         f"{r['label_quality']:7.3f}  {text}")
    lines.append(f"near duplicates: {c['near_duplicate_groups']} groups ({c['near_duplicate_rows']} texts), "
                 f"{c['conflicting_label_groups']} of them with conflicting labels "
                 f"({c['conflicting_label_rows']} texts)")
    return "\n".join(lines)
