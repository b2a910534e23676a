"""Data options shared by train, eval and predict: a file or a folder of fixed splits, and its columns."""

from __future__ import annotations

import argparse
from pathlib import Path

from headswap.errors import DataError


def add_columns(p: argparse.ArgumentParser, label: bool = True) -> None:
    p.add_argument("--text-column", default="text", help="column holding the texts (default: %(default)s)")
    if label:
        p.add_argument("--label-column", default="label", help="column holding the labels (default: %(default)s)")


def data_files(path: str) -> dict[str, Path]:
    """A file, or a directory holding train.csv / validation.csv / test.csv as in ../shared/data."""
    p = Path(path)
    if p.is_dir():
        files = {split: p / f"{split}.csv" for split in ("train", "validation", "test")}
        found = {k: v for k, v in files.items() if v.is_file()}
        if not found:
            raise DataError(f"{p} holds none of train.csv, validation.csv, test.csv")
        return found
    if not p.exists():
        raise DataError(f"{p}: no such file or directory")
    return {"train": p}


def load(path, args):
    from headswap.data.load import load_dataset
    return load_dataset(path, text_column=args.text_column, label_column=args.label_column)


def subsample(data, limit: int | None, seed: int, by=None):
    """A stratified, seeded subset of `limit` records (all of them when limit is None); `by`: stratify by
    these keys instead of the labels."""
    from headswap.data.sampling import stratified_subset
    return stratified_subset(data, limit, seed, by)
