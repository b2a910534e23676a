"""`headswap export`: a saved classifier as an ONNX graph (optionally int8), in a model directory that
TextClassifier.load, predict, eval and serve run with ONNX Runtime.

The exported directory is the source directory (config, torch weights, model card) plus model.onnx, the
tokenizer and an "export" entry in headswap_config.json: what the graph takes, its sha256, the text encoder's
settings, and how far its logits were from torch's on check texts. Nothing of the source is lost: the same
directory still loads with runtime='torch'.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from headswap.saved import model_dir
from headswap.saved.atomic import sha256_of, umask
from headswap.errors import HeadswapError
from headswap.interrupts import held
from headswap.decisions.oos_scores import STATS_FILE
from headswap.classifier.runtime import EXPORT_FORMATS, QUANTIZE, OnnxRunner, import_onnxruntime

ONNX_FILE, TOKENIZER_DIR = "model.onnx", "tokenizer"
# Traced with a batch of two different lengths (a dimension of 1 would be fixed in the graph); checked on
# three others, so that a shape baked into the graph shows up as a wrong answer here, not in use.
TRACE_TEXTS = ["an example text to trace the graph with", "a shorter one"]
CHECK_TEXTS = ["check", "a text of middling length, with punctuation!", "and a third, longer text that the "
               "exported graph must score exactly as torch does, word for word"]
# fp32 ONNX Runtime kernels reorder sums: logits agree to ~1e-6. A larger gap means a wrong graph.
FP32_TOLERANCE = 1e-3


def export(model_dir_path, out, fmt: str = "onnx", quantize: str = "none") -> dict:
    """Export the classifier saved in model_dir_path to the new directory `out`; returns the "export" entry."""
    from headswap.classifier.estimator import TextClassifier
    if fmt not in EXPORT_FORMATS:
        raise HeadswapError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    if quantize not in QUANTIZE:
        raise HeadswapError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZE)}")
    src, out = Path(model_dir_path), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HeadswapError(f"--out {out} exists and is not an empty directory; give a new one")
    from headswap.baseline.blend import KIND as BLEND, MEMBERS
    from headswap.baseline.tfidf import KIND as TFIDF
    kind = model_dir.read_config(src).get("kind")
    if kind == BLEND:
        raise HeadswapError(f"{src} holds a blend of several models: export its neural members one by one "
                            f"(the folders under {src / MEMBERS}), and keep the blend's folder beside them")
    if kind == TFIDF:
        raise HeadswapError(f"{src} holds a TF-IDF model: it runs on scikit-learn, already at thousands of texts "
                            f"per second, and has no graph to export; predict and serve run it as it is")
    ort = import_onnxruntime()
    clf = TextClassifier.load(src, progress=False, runtime="torch")
    strategy, kind = clf.strategy_, clf.model_spec_.kind
    if not strategy.exportable or kind != "encoder":
        from headswap.strategies import names
        raise HeadswapError(f"strategy {strategy.name!r} on a {kind} model cannot be exported; exportable: "
                            f"{', '.join(names(exportable=True))} on encoder models")
    module = strategy.export_module(clf.module_).eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written beside OUT and renamed onto it at the end: a kill, even SIGKILL, leaves no half an export in OUT,
    # which a rerun would refuse as a directory that is not empty (only a hidden .OUT.new-* folder beside it).
    new = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        entry = _write(clf, module, src, new, fmt, quantize, ort)
        config = json.loads((src / model_dir.CONFIG_FILE).read_text())
        config["export"] = entry
        (new / model_dir.CONFIG_FILE).write_text(json.dumps(config, indent=2, default=str))   # last: marks it complete
        os.chmod(new, 0o777 & ~umask())     # mkdtemp makes it private; an export is an ordinary folder
        os.replace(new, out)                # onto a missing or empty OUT (checked above)
    except BaseException as e:
        shutil.rmtree(new, ignore_errors=True)    # no half-written export left to be mistaken for one
        if isinstance(e, OSError):      # a full disk: a write() error names no file
            raise HeadswapError(f"writing the export to {out} failed: {e.strerror or e}; nothing was kept") from None
        raise
    return entry


def head_nodes(path: Path) -> list[str]:
    """The graph's matrix products that read a head weight (an initializer named like the head's parameters)."""
    import onnx

    from headswap.classifier.runtime import is_head
    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {init.name for init in graph.initializer if is_head(init.name)}
    nodes = [n for n in graph.node if n.op_type in ("MatMul", "Gemm") and weights.intersection(n.input)]
    # Dynamic quantization first rewrites each Gemm as a MatMul named NAME_MatMul (onnxruntime.quantization's
    # ONNXModel.replace_gemm_with_matmul), and only then reads the names to exclude.
    return [n.name for n in nodes] + [f"{n.name}_MatMul" for n in nodes if n.op_type == "Gemm"]


def _write(clf, module, src: Path, out: Path, fmt: str, quantize: str, ort) -> dict:
    """The graph (checked against torch), the tokenizer and the source's weights and card, in `out`."""
    import torch

    from headswap.models import position_limit
    trace = _batch(clf.encoder_, TRACE_TEXTS)
    inputs = list(trace)
    # Strategies with pooled features export them as a second output: the out-of-scope scores read them.
    features = clf.strategy_.pooled_features and hasattr(module, "with_features")
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        fp32 = Path(tmp) / ONNX_FILE
        _trace(module, inputs, trace, fp32, features)
        if quantize == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic
            from onnxruntime.quantization.shape_inference import quant_pre_process
            # ONNX Runtime's recommended step before quantizing (shapes, constant folding); its symbolic
            # shape inference does not follow torch.export's dynamic dimensions, and is not needed here.
            ready = Path(tmp) / "preprocessed.onnx"
            quant_pre_process(str(fp32), str(ready), skip_symbolic_shape=True)
            # The head stays fp32 (runtime.quantize_torch says why).
            quantize_dynamic(str(ready), str(out / ONNX_FILE), weight_type=QuantType.QInt8,
                             nodes_to_exclude=head_nodes(ready))
        else:
            shutil.move(fp32, out / ONNX_FILE)
    clf.tokenizer_.save_pretrained(out / TOKENIZER_DIR)
    for name in (model_dir.WEIGHTS_FILE, model_dir.CARD_FILE, STATS_FILE):
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)
    encoder = {f.name: getattr(clf.encoder_, f.name) for f in dataclasses.fields(clf.encoder_)
               if f.init and f.name not in ("tokenizer", "prompt")}
    entry = {"format": fmt, "file": ONNX_FILE, "quantize": quantize, "inputs": inputs, "tokenizer": TOKENIZER_DIR,
             "outputs": ["logits", "features"] if features else ["logits"],
             "encoder": encoder, "sha256": sha256_of(out / ONNX_FILE), "bytes": (out / ONNX_FILE).stat().st_size,
             "positions": position_limit(clf.model_spec_),    # the most tokens the graph takes (None: unknown)
             "summary": {k: v for k, v in clf.summary().items() if k.endswith("_params")},
             "source": str(src), "torch": torch.__version__, "onnxruntime": ort.__version__}
    runner = OnnxRunner(out, entry, len(clf.labels_))
    check = _batch(clf.encoder_, CHECK_TEXTS)
    with torch.inference_mode():
        expected = module(**check).float().numpy()
    got = runner.session.run(None, {k: v.numpy() for k, v in check.items()})[0]
    entry["check"] = {"texts": len(CHECK_TEXTS), "max_abs_logit_diff": float(abs(got - expected).max()),
                      "same_labels": bool((got.argmax(1) == expected.argmax(1)).all())}
    if quantize == "none" and entry["check"]["max_abs_logit_diff"] > FP32_TOLERANCE:
        raise HeadswapError(f"the exported graph's logits differ from torch's by "
                            f"{entry['check']['max_abs_logit_diff']:.2g} (> {FP32_TOLERANCE}); nothing was written")
    return entry


def _batch(encoder, texts: list[str]) -> dict:
    batch = encoder.collate(encoder.encode(texts))
    batch.pop("labels", None)
    return batch


def _trace(module, inputs: list[str], batch: dict, path: Path, features: bool = False) -> None:
    import torch

    class Positional(torch.nn.Module):
        """The batch as positional arguments (the graph's inputs, in the collate order)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            run = self.inner.with_features if features else self.inner
            return run(input_ids=input_ids, attention_mask=attention_mask, **extra)

    if inputs != ["input_ids", "attention_mask", "token_type_ids"][:len(inputs)]:
        raise HeadswapError(f"cannot export a model whose batches hold {inputs}")
    dims = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    with held(), warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        try:
            torch.onnx.export(Positional(module), tuple(batch[k] for k in inputs), str(path), dynamo=True,
                              input_names=inputs, output_names=["logits", "features"] if features else ["logits"],
                              external_data=False, verbose=False,
                              dynamic_shapes={k: dims for k in inputs})
        except Exception as e:   # torch.export's errors are long; the first line says what failed
            raise HeadswapError(f"ONNX export failed: {str(e).splitlines()[0][:300]}") from None
