"""Where a saved classifier's forward pass runs: torch (as trained), torch with its Linear layers quantized to
int8 at load time, or ONNX Runtime on the graph `headswap export` wrote (no torch module in the hot path:
torch only pads the token ids, which ONNX Runtime reads without a copy)."""

from __future__ import annotations

import warnings
from pathlib import Path

from headswap.saved.atomic import sha256_of
from headswap.errors import ConfigError, HeadswapError

RUNTIMES = ("auto", "torch", "torch-int8", "onnx")
EXPORT_FORMATS = ("onnx",)          # what `headswap export` writes
QUANTIZE = ("none", "int8")         # and how its weights are stored
RUNTIME_HELP = ("where the forward pass runs: auto (onnx when the directory holds a `headswap export`, else "
                "torch), torch, torch-int8 (the body's Linear layers quantized to int8 at load), onnx")


def resolve(runtime: str, config: dict, path: Path) -> str:
    """The runtime to use for a saved model directory, given the one asked for."""
    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
    exported = config.get("export")
    if runtime == "auto":
        return "onnx" if exported else "torch"
    if runtime == "onnx" and not exported:
        raise HeadswapError(f"{path} holds no ONNX export; write one with: headswap export --model-dir {path} "
                            f"--out DIR")
    return runtime


def is_head(name: str) -> bool:
    """A parameter or module of the classifier's head (a path component `head`: Classifier.head, ...)."""
    return "head" in name.split(".")


def quantize_torch(module):
    """Dynamic int8 quantization of the body's nn.Linear layers (weights int8, activations quantized per batch).

    The head stays fp32: it is K x hidden weights, little to gain, and a logistic-regression head folds the
    features' standardisation into its weights, a range one int8 scale cannot hold (on a 320-text SMS slice,
    MiniLM with that head fell from 0.96 to 0.80 accuracy with the head quantized)."""
    import torch
    body = {n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear) and not is_head(n)}
    with warnings.catch_warnings():   # torch.ao's eager quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic
        quantized = quantize_dynamic(module, body, dtype=torch.qint8)
    quantized.saves_torch_weights = False   # packed int8 Linear weights: not what loading a model builds
    return quantized


def import_onnxruntime():
    """onnxruntime, with its telemetry off (headswap.telemetry) before the library loads and any session exists;
    every use of onnxruntime in headswap goes through here."""
    from headswap.telemetry import disable_onnxruntime_telemetry
    disable_onnxruntime_telemetry()
    try:
        import onnxruntime
    except ImportError:
        raise HeadswapError("ONNX Runtime is not installed: pip install 'headswap[onnx]' (or onnxruntime)") from None
    disable_onnxruntime_telemetry()     # now loaded: its events API is switched off too
    return onnxruntime


class OnnxRunner:
    """An exported classifier graph in an ONNX Runtime session: batches of token ids -> (N, K) logits."""

    saves_torch_weights = False    # the graph is all there is: no torch module to write weights from

    def __init__(self, path: Path, export: dict, num_labels: int):
        ort = import_onnxruntime()
        from headswap.saved.model_dir import check_regular, inside
        file = inside(path, export.get("file"), "export.file")
        check_regular(file)
        if not file.is_file():
            raise HeadswapError(f"{file} is missing; the exported model directory is incomplete")
        if not isinstance(export.get("sha256"), str):
            # Every export records it; without it a replaced graph would load unnoticed, and predict's model
            # fingerprint (config and weights) would not see the change either.
            raise HeadswapError(f"{path}/headswap_config.json is corrupt: export.sha256 (the graph's checksum) is "
                                f"missing; export the model again")
        if sha256_of(file) != export["sha256"]:
            raise HeadswapError(f"{file} does not match {path}/headswap_config.json (its sha256 differs): the file "
                                f"was changed or replaced after export; export the model again")
        try:
            self.session = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
        except Exception as e:   # onnxruntime raises its own error types for unreadable graphs
            raise HeadswapError(f"{file} cannot be read by ONNX Runtime ({str(e).splitlines()[0][:200]}); "
                                f"export the model again") from None
        self.inputs = [i.name for i in self.session.get_inputs()]
        if self.inputs != list(export.get("inputs", [])):
            raise HeadswapError(f"{file} takes inputs {self.inputs}, its config says {export.get('inputs')}; "
                                f"export the model again")
        width = self.session.get_outputs()[0].shape[-1]
        if isinstance(width, int) and width != num_labels:
            raise HeadswapError(f"{file} gives {width} logits per text for {num_labels} labels; export the model "
                                f"again")
        self.num_labels = num_labels
        self.summary = dict(export.get("summary") or {})
        self.outputs = [o.name for o in self.session.get_outputs()]

    def start_predict(self) -> None:
        """As ClassifierModule.start_predict: nothing is counted per call."""

    def logits(self, items: list[dict], collate, batch_size: int = 64, progress: bool = False,
               desc: str = "predict"):
        """(N, K) float32 logits in the order of `items`, as ClassifierModule.logits; batches are formed in
        order of length, as the torch path does, so each is padded only to its own longest text."""
        import numpy as np
        from tqdm.auto import tqdm

        from headswap.nn.inference import item_length
        order = sorted(range(len(items)), key=lambda i: item_length(items[i]))
        out = np.empty((len(items), self.num_labels), dtype=np.float32)
        for start in tqdm(range(0, len(order), batch_size), desc=desc, disable=not progress, leave=False):
            rows = order[start:start + batch_size]
            batch = collate([items[i] for i in rows])
            out[rows] = self.session.run(["logits"], {n: batch[n].numpy() for n in self.inputs})[0]
        return out

    def logits_and_features(self, items: list[dict], collate, batch_size: int = 64, progress: bool = False,
                            desc: str = "predict"):
        """As ClassifierModule.logits_and_features: (N, K) logits and (N, D) pooled features, from the graph's
        second output (exports since the out-of-scope scores have it)."""
        import numpy as np

        from headswap.nn.inference import item_length
        if "features" not in self.outputs:
            raise HeadswapError("this exported graph gives no pooled features, which the mahalanobis and knn "
                                "out-of-scope scores read; export the model again")
        order = sorted(range(len(items)), key=lambda i: item_length(items[i]))
        logits = np.empty((len(items), self.num_labels), dtype=np.float32)
        feats = None
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            batch = collate([items[i] for i in rows])
            got = self.session.run(["logits", "features"], {n: batch[n].numpy() for n in self.inputs})
            if feats is None:
                feats = np.empty((len(items), got[1].shape[1]), dtype=np.float32)
            logits[rows], feats[rows] = got
        return logits, (feats if feats is not None else np.empty((0, 0), dtype=np.float32))


def check_encoder(path: Path, export: dict, max_length) -> dict:
    """export.encoder, the exported graph's text encoder settings, checked against the config: a max_length
    other than params.max_length (or past the positions the graph was exported with) would reach ONNX Runtime
    as an "invalid expand shape" on the first long text."""
    import dataclasses

    from headswap.saved.model_dir import CONFIG_FILE
    from headswap.text.encoding import TextEncoder
    where = f"{path / CONFIG_FILE} is corrupt"
    encoder = export.get("encoder")
    known = {f.name for f in dataclasses.fields(TextEncoder) if f.init} - {"tokenizer", "prompt"}
    if not isinstance(encoder, dict) or not set(encoder) <= known:
        raise HeadswapError(f"{where}: export.encoder must be an object of text encoder settings "
                            f"({', '.join(sorted(known))}); got {encoder!r:.80}")
    given = encoder.get("max_length")
    if given != max_length or isinstance(given, bool):
        raise HeadswapError(f"{where}: export.encoder.max_length is {given!r:.40}, params.max_length is "
                            f"{max_length!r:.40}; the graph was exported for params.max_length")
    positions = export.get("positions")     # absent from exports made before it was recorded
    if positions is not None and (not isinstance(positions, int) or isinstance(positions, bool) or positions < 1):
        raise HeadswapError(f"{where}: export.positions must be a number of tokens or null; got {positions!r:.40}")
    if positions is not None and max_length > positions:
        raise HeadswapError(f"{where}: max_length {max_length} is more than the exported graph's {positions} "
                            f"positions; use max_length <= {positions}")
    return encoder


def load_onnx(path: Path, export: dict, num_labels: int, max_length: int):
    """(OnnxRunner, tokenizer, TextEncoder) of an exported model directory, every file inside it."""
    from transformers import AutoTokenizer

    from headswap.saved.model_dir import check_regular_tree, inside
    from headswap.text.encoding import TextEncoder
    encoder = check_encoder(path, export, max_length)
    runner = OnnxRunner(path, export, num_labels)
    folder = inside(path, export.get("tokenizer"), "export.tokenizer")
    if not folder.is_dir():    # from_pretrained would take a missing folder's name for a hub id
        raise HeadswapError(f"{folder} is missing; the exported model directory is incomplete")
    check_regular_tree(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise HeadswapError(f"{folder}: the exported tokenizer cannot be read "
                            f"({str(e).splitlines()[0][:200]})") from None
    return runner, tokenizer, TextEncoder(tokenizer, **encoder)
