"""Data options shared by the commands that read data (train, eval, predict, bench, auto, ...): a file or a folder of
fixed splits, and its columns."""

from __future__ import annotations

import argparse
from pathlib import Path

from headswap.data import splits


def add_columns(p: argparse.ArgumentParser, label: bool = True) -> None:
    p.add_argument("--text-column", default="text", help="column holding the texts (default: %(default)s)")
    if label:
        p.add_argument("--label-column", default="label", help="column holding the labels (default: %(default)s)")


def data_files(path: str, required: tuple[str, ...] = (), command: str | None = None) -> dict[str, Path]:
    """{split: path}: a folder's split files (headswap.data.splits), or a file as the train split."""
    return splits.data_files(path, required, who=f"headswap {command}" if command else "a data folder")


def load(path, args):
    from headswap.data.load import load_dataset
    return load_dataset(path, text_column=args.text_column, label_column=args.label_column)


def subsample(data, limit: int | None, seed: int, by=None):
    """A stratified, seeded subset of `limit` records (all of them when limit is None); `by`: stratify by
    these keys instead of the labels."""
    from headswap.data.sampling import stratified_subset
    return stratified_subset(data, limit, seed, by)
