"""A TextClassifier into a model directory and back: its settings, what fit() learnt (headswap.classifier.fitted,
whose post-processing steps save their own state) and what was built (headswap.classifier.build.Built: the module,
whose trained weights headswap.saved.model_dir writes, and its part of the config).

The classifier's save() and load() call these; they read and build it through its public methods and attributes
(check_fitted, restore, count_params).
"""

from __future__ import annotations

from pathlib import Path

import torch

from headswap import settings
from headswap.classifier.build import Built
from headswap.classifier.fitted import Fitted
from headswap.errors import ConfigError, HeadswapError
from headswap.saved import model_dir


def save(clf, path: Path) -> Path:
    from headswap.saved.outputs import check_save
    clf.check_fitted()
    check_save(path)
    if not clf.module_.saves_torch_weights:
        raise HeadswapError(f"this classifier runs on {clf.runtime_}; save() writes torch weights: load it with "
                            f"runtime='torch' to save it (an exported directory is a saved model already)")
    params = clf.get_params()
    if clf.class_weight_ is not None:
        params["class_weight"] = clf.class_weight_    # the weights used, whatever file or rule gave them
    config = {"params": params, **clf.fitted_.labels_config(), **clf.built_.config(), **clf.fitted_.fit_config()}
    model_dir.write(path, config, clf.module_, clf.summary())
    clf.fitted_.save(path)
    return path


def load(cls, path: Path, progress: bool | None = None, runtime: str = "auto"):
    """An instance of `cls` (TextClassifier) restored from `path`, on `runtime` (headswap.classifier.runtime's
    RUNTIMES)."""
    from headswap.classifier import runtime as runtimes
    config = model_dir.read_config(path)
    model_dir.check_config(path, config)
    which = runtimes.resolve(runtime, config, path)
    params = {k: v for k, v in config["params"].items() if k in settings.defaults()}
    base = config.get("base_model") or {}
    if base.get("ref") and not base.get("builtin"):
        params["model"] = base["ref"]   # absolute: resolves from any working directory
    if progress is not None:
        params["progress"] = progress
    # A reloaded model does not continue its training run: refitting it starts afresh.
    params["checkpoint_dir"], params["resume"] = None, False
    clf = cls(**params)
    clf.fitted_ = Fitted.from_config(config, clf.target_, path)
    if which == "onnx":     # the exported graph and its tokenizer; the base model's weights are not loaded
        module, tokenizer, encoder = runtimes.load_onnx(path, config["export"], len(clf.labels_), clf.max_length)
        clf.built_ = Built(module, encoder, tokenizer, runtime="onnx", param_counts=module.summary)
        return clf
    weights = model_dir.read_weights(path)
    torch.manual_seed(clf.seed)
    try:
        clf.restore(weights, config)
    except ConfigError as e:    # the saved settings cannot build a model (e.g. max_length edited)
        raise HeadswapError(f"{path / model_dir.CONFIG_FILE}: {e}") from None
    except model_dir.WeightsMismatch as e:   # e.g. labels edited: the head has another output size
        raise HeadswapError(f"{path / model_dir.CONFIG_FILE} does not match {model_dir.WEIGHTS_FILE} "
                            f"({len(clf.labels_)} labels, strategy {clf.strategy}, regime "
                            f"{config['params']['regime']}): {e}") from None
    if which == "torch-int8":
        clf.built_.param_counts = clf.count_params()
        clf.built_.module, clf.built_.runtime = runtimes.quantize_torch(clf.module_), which
    return clf
