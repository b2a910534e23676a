"""`headswap explain`: which words drove a saved classifier's label for each text."""

from __future__ import annotations

import argparse
import json
import sys

from headswap.cli.data_args import add_columns
from headswap.cli.options import add_runtime, int_at_least
from headswap.errors import HeadswapError

HELP = "show which words drove each text's label (signed scores per word; an HTML view)"
DESCRIPTION = ("Per-word scores for the predicted label of each text (each predicted label of a multi-label model, "
               "or --label): Integrated Gradients for a torch model, occlusion for an exported ONNX model, the "
               "coefficients for a TF-IDF model. Positive words push the text towards the label, negative ones "
               "away from it.")
MAX_TEXTS = 1000    # each text costs a gradient pass (or a prediction per word): explain a sample, not a corpus


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="MODEL_DIR", help="a saved model directory")
    p.add_argument("texts", nargs="*", help="texts to explain (or --data)")
    p.add_argument("--data", help=f"a CSV/TSV/JSONL/Parquet file with a text column (at most {MAX_TEXTS} texts)")
    add_columns(p, label=False)
    p.add_argument("--label", help="explain this label instead of the predicted one(s)")
    p.add_argument("--top", type=int_at_least(1), default=10, help="words shown per text (default: %(default)s)")
    p.add_argument("--html", help="also write an HTML page with every word shaded by its score (a new file, or "
                   "one headswap wrote)")
    p.add_argument("--json", action="store_true", help="JSON lines out (each text's top words) instead of text")
    p.add_argument("--method", choices=("auto", "integrated-gradients", "occlusion", "coefficients"), default="auto",
                   help="auto: integrated-gradients for torch models, occlusion for ONNX exports, coefficients for "
                        "TF-IDF (default: %(default)s)")
    p.add_argument("--steps", type=int_at_least(2), default=32,
                   help="Integrated Gradients interpolation steps (default: %(default)s)")
    add_runtime(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or \"wrote\" line on stderr")


def run(args) -> int:
    from headswap.cli.predict import _check_argument_text
    if args.texts and args.data:
        raise HeadswapError(f"texts on the command line and --data {args.data} are two inputs; give one or the other")
    if not args.texts and not args.data:
        raise HeadswapError("give the texts to explain on the command line, or a file with --data")
    for number, text in enumerate(args.texts, start=1):
        _check_argument_text(number, text)
    from headswap.saved.outputs import HTML_MARK, check_file
    check_file("--html", args.html, inputs=[("--data", args.data)], mark=HTML_MARK)
    texts = list(args.texts) or _read(args.data, args.text_column)
    from headswap.classifier.estimator import load_model
    from headswap.explain import explain
    from headswap.explain.render import as_html, as_lines
    model = load_model(args.model_dir, progress=False, runtime=args.runtime)
    explanations = explain(model, texts, label=args.label, method=args.method, steps=args.steps,
                           progress=not args.quiet and len(texts) > 1)
    if args.json:
        for ex in explanations:
            print(json.dumps(ex.to_dict(top=args.top), ensure_ascii=False))
    else:
        sys.stdout.write(as_lines(explanations, args.top))
    if args.html:
        from headswap.saved.atomic import atomic_path
        with atomic_path(args.html) as tmp:
            tmp.write_text(as_html(explanations), encoding="utf-8")
        if not args.quiet:
            print(f"wrote {args.html}", file=sys.stderr)
    return 0


def _read(path: str, column: str) -> list[str]:
    from headswap.data.stream import iter_texts
    texts = []
    for number, text in iter_texts(path, text_column=column):
        if number > MAX_TEXTS:
            raise HeadswapError(f"--data {path} holds more than {MAX_TEXTS} texts; explain a sample of them")
        texts.append(text)
    if not texts:
        raise HeadswapError(f"--data {path} holds no texts to explain")
    return texts
