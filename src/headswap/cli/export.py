"""`headswap export`: write a saved classifier as an ONNX graph that predict, eval and serve run with ONNX
Runtime (headswap.jobs.export). Building the parser imports no torch."""

from __future__ import annotations

import argparse
import sys

HELP = "export a saved encoder classifier to ONNX (optionally int8) for fast CPU inference"
DESCRIPTION = ("Export a saved classifier (encoder-mlp, setfit, similarity, cross-encoder on an encoder model) "
               "to ONNX, optionally with int8 weights. The new directory holds everything the source did plus "
               "model.onnx and the tokenizer; predict, eval and serve run it with ONNX Runtime (--runtime auto). "
               "Needs onnxruntime and onnxscript: pip install 'headswap[onnx]'.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from headswap.classifier.runtime import EXPORT_FORMATS, QUANTIZE
    p.add_argument("--model-dir", required=True, help="a directory written by `headswap train`")
    p.add_argument("--out", required=True, help="the new directory to write (must not exist, or be empty)")
    p.add_argument("--format", choices=EXPORT_FORMATS, default="onnx", help="default: %(default)s")
    p.add_argument("--quantize", choices=QUANTIZE, default="none",
                   help="int8: weights of the matrix products stored as int8, activations quantized per batch "
                   "(smaller and faster on CPU, a little less exact) (default: %(default)s)")
    p.add_argument("-q", "--quiet", action="store_true", help="no \"wrote\" line on stderr")


def run(args) -> int:
    from headswap.saved.atomic import output_lock
    from headswap.saved.outputs import check_model_out
    from headswap.jobs.export import export    # refuses an --out that is a file or a non-empty directory
    check_model_out("--out", args.out, inputs=[("--model-dir", args.model_dir)])
    with output_lock(args.out):         # two exports into one --out would write, and remove, each other's files
        entry = export(args.model_dir, args.out, fmt=args.format, quantize=args.quantize)
    check = entry["check"]
    if args.quiet and check["same_labels"]:     # a label that differs is said even under -q
        return 0
    print(f"wrote {args.out}: {entry['file']} ({entry['bytes'] / 2**20:.1f} MiB, {entry['quantize']}); on "
          f"{check['texts']} check texts the logits differ from torch's by at most {check['max_abs_logit_diff']:.2g}"
          f"{'' if check['same_labels'] else ' and a label differs'}", file=sys.stderr)
    return 0
