"""headswap: turn a small pretrained transformer into a text classifier, and measure which way wins."""

__version__ = "0.1.0"
