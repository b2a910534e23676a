"""Data warnings printed once per process (headswap.data.load and headswap.data.multilabel both warn)."""

from __future__ import annotations

import logging

logger = logging.getLogger("headswap.data.load")    # the name these warnings always had

_warned: set = set()


def warn_once(key, message: str) -> None:
    """Log a warning the first time `key` comes up in this process: the command line checks the data and then
    fits on it, and bench fits once per row, so the same problem would otherwise print again and again."""
    if key not in _warned:
        _warned.add(key)
        logger.warning("%s", message)
