"""`headswap eval`: evaluate a saved classifier on labelled data."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import suppress
from pathlib import Path

from headswap.cli.data_args import add_columns, data_files, load, subsample
from headswap.cli.options import add_runtime, int_at_least
from headswap.data.splits import FILES
from headswap.errors import DataError

HELP = "evaluate a saved classifier: report, metrics.json, confusion-matrix and reliability PNGs"
# What eval may write into OUT (the chart is per_label_f1.png for a multi-label model; oos_scores.png with an
# out-of-scope label): a file of one of these names that headswap did not write there is refused.
OUTPUTS = ("metrics.json", "confusion_matrix.png", "per_label_f1.png", "reliability_diagram.png", "oos_scores.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True, help="a directory written by `headswap train`")
    add_runtime(p)
    p.add_argument("--data", required=True, help="labelled file, or a directory with test.csv")
    add_columns(p)
    p.add_argument("--out", help="where to write metrics.json, confusion_matrix.png (per_label_f1.png for multi-label "
                   "models) and reliability_diagram.png, never over a file of the same name that headswap did not "
                   "write (default: MODEL_DIR-eval, beside the model, not in it)")
    p.add_argument("--limit", type=int_at_least(1), help="evaluate a stratified sample of this many texts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-q", "--quiet", action="store_true")


def run(args) -> int:
    from headswap.saved.atomic import output_lock
    from headswap.saved.outputs import check_folder

    out = Path(args.out) if args.out else default_eval_dir(args.model_dir)
    flag = "--out" if args.out else "the default --out"
    check_folder(flag, out, OUTPUTS, inputs=[("--data", args.data)])
    with output_lock(out, flag):   # two evals into OUT do not mix files
        return _run(args, out)


def _run(args, out: Path) -> int:
    from headswap.classifier.estimator import load_model
    from headswap.saved.outputs import record, writing
    from headswap.data.load import check_eval_labels
    from headswap.reports.plots import plot_confusion, plot_label_f1, plot_reliability

    files = data_files(args.data)
    if Path(args.data).is_dir():
        # Only a test split is evaluated from a folder: train.csv scores are not a measure of quality and
        # validation.csv picked the best epoch; pass either file by name to evaluate it anyway.
        if "test" not in files:
            raise DataError(f"{args.data} has no {FILES['test']} (it holds "
                            f"{', '.join(f.name for f in files.values())}); pass the file to evaluate by name, "
                            f"e.g. --data {next(iter(files.values()))}")
        path = files["test"]
    else:
        path = files["train"]
    data = subsample(load(path, args), args.limit, args.seed)
    clf = load_model(args.model_dir, progress=not args.quiet, runtime=args.runtime)
    if clf.multi_label:
        from headswap.data.multilabel import check_eval_label_sets
        check_eval_label_sets(list(clf.labels_), data, clf.label_separator)
    else:
        check_eval_labels(list(clf.labels_), data, getattr(clf, "out_of_scope", None))
    m = clf.evaluate(data.texts, data.labels)
    chart = "per_label_f1.png" if clf.multi_label else "confusion_matrix.png"
    title = f"{clf.strategy} on {clf.model}: {path.name}"
    cal = m.extra["calibration"]
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        # All three or none: a full disk must not leave a new metrics.json beside the previous run's charts.
        with writing(out, ["metrics.json", chart, "reliability_diagram.png"]) as tmp:
            tmp[0].write_text(json.dumps({**m.to_dict(), "source": str(path)}, indent=2, default=str))
            if clf.multi_label:    # no single confusion matrix: the per-label report says what each label got
                plot_label_f1(m.to_dict(), tmp[1], title=title)
            else:
                plot_confusion(m.confusion, m.labels, tmp[1], title=title)
            plot_reliability(cal, tmp[2], title=title)
    except BaseException:
        if made:
            with suppress(OSError):
                out.rmdir()     # written_together left it as it found it: empty
        raise
    print(m.report(chart=None if clf.multi_label else str(out / "confusion_matrix.png")))
    print(f"inference: {m.extra['texts_per_second']:.1f} texts/s")
    print(calibration_line(cal))
    if "out_of_scope" in m.extra:
        from headswap.classifier.reject_option import describe_scores
        from headswap.reports.plots import plot_oos_scores
        from headswap.decisions.reject import describe, describe_expectation
        block = m.extra["out_of_scope"]
        print(f"out of scope ({block['label']}): {describe(block)}; score {block.get('score', 'softmax')}")
        if block.get("expected"):
            print(f"validation promised: {describe_expectation(block['expected'])}")
        if block.get("oos_texts"):
            print(f"out-of-scope scores (AUROC of separating out-of-scope from in-scope texts): "
                  f"{describe_scores(block)}")
            plot_oos_scores(block, out / "oos_scores.png", title=f"{clf.strategy} on {clf.model}: {path.name}")
            record(out, ["oos_scores.png"])
            chart += ", oos_scores.png"
    print(f"wrote {out / 'metrics.json'}, {out / chart} and {out / 'reliability_diagram.png'}", file=sys.stderr)
    return 0


def calibration_line(cal: dict) -> str:
    b = cal["before"]
    line = f"calibration ({cal['bins']}-bin ECE, Brier): softmax {b['ece']:.4f}, {b['brier']:.4f}"
    if cal.get("temperature") is not None:
        a = cal["after"]
        line += f"; {temperature_text(cal['temperature'])} {a['ece']:.4f}, {a['brier']:.4f}"
    else:
        line += " (no temperature fitted)"
    return line


def temperature_text(t) -> str:
    """'temperature 1.234', or for per-label temperatures 'temperatures 0.8-1.9 (28 labels)'."""
    if isinstance(t, (list, tuple)):
        return f"temperatures {min(t):.2f}-{max(t):.2f} ({len(t)} labels)"
    return f"temperature {t:.3f}"


def default_eval_dir(model_dir) -> Path:
    """MODEL_DIR-eval: beside the model, not inside it, so the model directory holds only what a save wrote."""
    model = Path(model_dir).resolve()
    return model.with_name(model.name + "-eval")
