"""argparse types that reject bad numbers with a message naming the value."""

from __future__ import annotations

import argparse


def int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {value}")
        return value
    return parse


def float_at_least(minimum: float, strict: bool = False):
    """A float >= minimum (> minimum when strict)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (value > minimum if strict else value >= minimum):
            raise argparse.ArgumentTypeError(f"expected a number {'>' if strict else '>='} {minimum:g}, got {value}")
        return value
    return parse


positive_float = float_at_least(0, strict=True)
