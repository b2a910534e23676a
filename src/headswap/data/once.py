"""Data warnings printed once per process (headswap.data.load and headswap.data.multilabel both warn)."""

from __future__ import annotations

import logging
from contextlib import contextmanager

logger = logging.getLogger("headswap.data.load")    # the name these warnings always had

_warned: set = set()
_muted = [0]


def warn_once(key, message: str) -> None:
    """Log a warning the first time `key` comes up in this process: the command line checks the data and then
    fits on it, and bench fits once per row, so the same problem would otherwise print again and again."""
    if key not in _warned and not _muted[0]:
        _warned.add(key)
        logger.warning("%s", message)


def said(key) -> None:
    """Mark `key` as warned: its caller said it its own way (auto's log), and warn_once stays quiet for it."""
    _warned.add(key)


@contextmanager
def muted():
    """No warn_once warning inside, and none marked as given: auto's and bench's timing probes fit a classifier on a
    few batches, whose loss has not moved yet ("learned nothing") and whose warnings belong to the real fit."""
    _muted[0] += 1
    try:
        yield
    finally:
        _muted[0] -= 1
