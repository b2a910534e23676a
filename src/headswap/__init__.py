"""headswap: turn a small pretrained transformer into a text classifier, and measure which way wins."""

__version__ = "0.1.0"

from .api import TextClassifier  # noqa: E402
from .data import load_dataset  # noqa: E402
from .metrics import Metrics  # noqa: E402

__all__ = ["TextClassifier", "load_dataset", "Metrics", "__version__"]
