"""A TextClassifier into a model directory and back: its settings and everything fit() learnt (headswap.fitted,
whose post-processing steps save their own state) beside the trained weights (headswap.model_dir).

The classifier's save() and load() call these; they read and write it through its public and fitted attributes.
"""

from __future__ import annotations

from pathlib import Path

import torch

from headswap import model_dir, settings
from headswap.errors import ConfigError, HeadswapError
from headswap.fitted import Fitted


def save(clf, path: Path) -> Path:
    from headswap.models import model_reference_for_config

    clf._check_fitted()
    if not clf.module_.saves_torch_weights:
        raise HeadswapError(f"this classifier runs on {clf.runtime_}; save() writes torch weights: load it with "
                            f"runtime='torch' to save it (an exported directory is a saved model already)")
    params = clf.get_params()
    if clf.class_weight_ is not None:
        params["class_weight"] = clf.class_weight_    # the weights used, whatever file or rule gave them
    config = {"params": params, **clf.fitted_.labels_config(),
              "base_model": model_reference_for_config(clf.model_spec_), "regime": clf.regime_,
              "prompt": vars(clf.prompt_) if clf.prompt_ else None,
              "answer_token_ids": None, **clf.saved_,
              "lora": clf.lora_.to_dict() if clf.lora_ else None,
              **clf.fitted_.fit_config()}
    model_dir.write(path, config, clf.module_, clf.summary())
    clf.fitted_.save(path)
    return path


def load(cls, path: Path, progress: bool | None = None, runtime: str = "auto"):
    """An instance of `cls` (TextClassifier) restored from `path`, on `runtime` (headswap.runtime.RUNTIMES)."""
    from headswap import runtime as runtimes
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
        clf.module_, clf.tokenizer_, clf.encoder_ = runtimes.load_onnx(path, config["export"], len(clf.labels_),
                                                                        clf.max_length)
        clf.param_counts_ = clf.module_.summary
        clf.model_spec_, clf.prompt_, clf.saved_, clf.lora_ = None, None, {}, None
    else:
        weights = model_dir.read_weights(path)
        torch.manual_seed(clf.seed)
        try:
            clf._build(weights=weights, restored=config)
        except ConfigError as e:    # the saved settings cannot build a model (e.g. max_length edited)
            raise HeadswapError(f"{path / model_dir.CONFIG_FILE}: {e}") from None
        except model_dir.WeightsMismatch as e:   # e.g. labels edited: the head has another output size
            raise HeadswapError(f"{path / model_dir.CONFIG_FILE} does not match {model_dir.WEIGHTS_FILE} "
                                f"({len(clf.labels_)} labels, strategy {clf.strategy}, regime "
                                f"{config['params']['regime']}): {e}") from None
        if which == "torch-int8":
            clf.param_counts_ = clf._param_counts()
            clf.module_ = runtimes.quantize_torch(clf.module_)
    clf.runtime_ = which
    return clf
