"""Load labelled text data (CSV, TSV, JSONL) without ever silently dropping or altering it.

Every problem raises :class:`~headswap.errors.DataError` with a message that names the file, the line and the
column, so the user can open the file and fix it. Texts are kept exactly as stored: nothing is stripped,
unescaped or truncated here (token-level truncation happens later).

The work is split by job: ``records`` (LabelledData, per-text and per-label checks), ``readers`` (CSV, TSV,
JSONL), ``checks`` (data fit to train or evaluate on) and ``label_files`` (descriptions, class weights).
"""

from __future__ import annotations

import logging
import os

# What this module held before it was split by job, importable from here as before.
from headswap.data.checks import check_eval_labels, check_training_data, warn_lookalike_labels, warn_weak_labels
from headswap.data.label_files import load_class_weights, load_descriptions
from headswap.data.once import warn_once
from headswap.data.readers import _DELIMITERS, _load_jsonl, _load_parquet, _load_table, _read_text, _resolve_format
from headswap.data.records import LabelledData, as_list, from_lists, labels_of_table
from headswap.errors import DataError

logger = logging.getLogger(__name__)

__all__ = [
    "LabelledData",
    "load_dataset",
    "load_texts",
    "check_training_data",
    "warn_lookalike_labels",
    "warn_weak_labels",
    "check_eval_labels",
    "load_descriptions",
    "load_class_weights",
    "from_lists",
]


def _load(path, text_column: str, label_column: str | None, format: str | None, require_labels: bool) -> LabelledData:
    if label_column is not None and label_column == text_column:
        raise DataError(f"text_column and label_column are both {text_column!r}")
    source = os.fspath(path)
    fmt = _resolve_format(source, format)  # before reading, so a .txt file fails fast with the useful message
    if fmt == "parquet":
        data = _load_parquet(source, text_column, label_column, require_labels)
        logger.info("%s: loaded %d records", source, len(data))
        return data
    source, text = _read_text(path)
    if fmt == "jsonl":
        data = _load_jsonl(source, text, text_column, label_column, require_labels)
    else:
        data = _load_table(source, text, _DELIMITERS[fmt], text_column, label_column, require_labels)
    logger.info("%s: loaded %d records%s", source, len(data), "" if data.labels else " (no labels)")
    return data


def load_dataset(
    path: str | os.PathLike,
    text_column: str = "text",
    label_column: str = "label",
    format: str | None = None,
    require_labels: bool = True,
) -> LabelledData:
    """Load a labelled CSV, TSV, JSONL or Parquet file.

    ``format`` is ``"csv"``, ``"tsv"``, ``"jsonl"`` or None (guess from the suffix: .csv, .tsv/.tab,
    .jsonl/.ndjson). With ``require_labels=False`` the label column may be absent, and ``labels`` is then ``[]``;
    when it is present every record must have a non-empty label. Blank lines are skipped (logged); every other
    record is returned, in file order.
    """
    return _load(path, text_column, label_column, format, require_labels)


def load_texts(path: str | os.PathLike, text_column: str = "text", format: str | None = None) -> LabelledData:
    """Load texts for prediction. Any label column is ignored, so ``labels`` is always ``[]``."""
    return _load(path, text_column, None, format, require_labels=False)
