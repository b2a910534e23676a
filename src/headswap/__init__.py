"""headswap: turn a small pretrained transformer into a text classifier, and measure which way wins."""

__version__ = "0.1.0"

from headswap.telemetry import disable_onnxruntime_telemetry  # noqa: E402

# Before any code path (headswap's, torch.onnx's, onnxscript's) can load onnxruntime: it reads the switch at load.
disable_onnxruntime_telemetry()

# Imported on first use, so that `import headswap` (and the command line's --help) does not load torch.
_LAZY = {"TextClassifier": "headswap.classifier.estimator", "load_model": "headswap.classifier.estimator",
         "AutoClassifier": "headswap.auto.estimator", "load_dataset": "headswap.data.load", "Metrics": "headswap.metrics", "predictor": "headswap.jobs.batch",
         "Predictor": "headswap.jobs.batch", "audit": "headswap.jobs.label_audit"}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'headswap' has no attribute {name!r}")
