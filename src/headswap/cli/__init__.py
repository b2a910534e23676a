"""The `headswap` command: one parser, one module per command; torch is imported only by commands that run."""

from headswap.cli.parser import main

__all__ = ["main"]
