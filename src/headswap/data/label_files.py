"""Per-label side inputs, each a dict or a JSON, CSV or TSV file keyed by label: label descriptions and class
weights."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from headswap.data.readers import (
    _DELIMITERS,
    _SUFFIX_FORMATS,
    _column_index,
    _json_object,
    missing_column,
    _read_table,
    _read_text,
)
from headswap.data.records import _check_label
from headswap.errors import DataError

logger = logging.getLogger("headswap.data.load")   # the name tests and users filter on

def load_descriptions(spec, labels: Sequence[str]) -> dict[str, str]:
    """Return ``{label: description}`` for every label in ``labels``, in that order.

    ``spec`` is None (each label describes itself), a dict, a JSON file holding ``{label: description}``, or a
    CSV/TSV file with columns ``label,description``. A label with no description falls back to the label name
    itself (logged). A description for a label not in ``labels``, or an empty description, is a DataError.
    """
    wanted = list(dict.fromkeys(labels))
    if spec is None:
        return {label: label for label in wanted}
    given: dict[str, tuple[str, str]] = {}  # label -> (description, where it came from, for error messages)
    if isinstance(spec, Mapping):
        source = "descriptions"
        for key, value in spec.items():
            label = _check_label(key, f"{source}, key {key!r}", "label")
            given[label] = (_check_description(value, f"{source}[{key!r}]"), f"{source}[{key!r}]")
    elif isinstance(spec, (str, os.PathLike)):
        source = os.fspath(spec)
        suffix = Path(source).suffix.lower()
        if suffix == ".json":
            given = _read_json_descriptions(source)
        elif suffix in (".csv", ".tsv", ".tab"):
            given = _read_table_descriptions(source, _DELIMITERS[_SUFFIX_FORMATS[suffix]])
        else:
            raise DataError(f"{source}: label descriptions must be a .json, .csv or .tsv file")
    else:
        raise DataError(f"label descriptions must be None, a dict or a file path, got {type(spec).__name__}")

    known = set(wanted)
    for label, (_, where) in given.items():
        if label not in known:
            raise DataError(
                f"{where}: description for label {label!r}, which is not in the data; "
                f"the labels are: {', '.join(wanted)}"
            )
    missing = [label for label in wanted if label not in given]
    if missing:
        logger.info("%s: no description for %s; using the label name itself", source, ", ".join(missing))
    return {label: given[label][0] if label in given else label for label in wanted}


def _check_description(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: description must be a string, got {type(value).__name__}")
    if value.strip() == "":
        raise DataError(f"{where}: description is empty (leave the label out to use its name)")
    return value


def _read_json_descriptions(source: str) -> dict[str, tuple[str, str]]:
    source, text = _read_text(source)
    obj = _json_object(text, source, "{label: description}", line_of_error=True)
    return {key: (_check_description(value, f"{source}, label {key!r}"), source) for key, value in obj.items()}


def _read_table_descriptions(source: str, delimiter: str) -> dict[str, tuple[str, str]]:
    return _read_label_table(source, delimiter, "description", _check_description)


def _read_label_table(source: str, delimiter: str, column: str, check) -> dict[str, tuple[object, str]]:
    """A CSV/TSV file of `label,<column>` rows: {label: (check(value, where), where)}, one row per label."""
    source, text = _read_text(source)
    header, records = _read_table(source, text, delimiter)
    li, vi = _column_index(source, header, "label"), _column_index(source, header, column)
    for index, name in ((li, "label"), (vi, column)):
        if index is None:
            raise missing_column(source, name, header)
    given: dict[str, tuple[object, str]] = {}
    for line, fields in records:
        where = f"{source}, line {line}"
        label = _check_label(fields[li], where, "label")
        if label in given:
            raise DataError(f"{where}: second {column} for label {label!r} (first at {given[label][1]})")
        given[label] = (check(fields[vi], f"{where}, column {column!r}"), where)
    return given


def load_class_weights(spec, labels: Sequence[str], train_labels: Sequence[str]) -> dict[str, float] | None:
    """``{label: weight}`` for every label in ``labels`` (in that order), or None when ``spec`` is None.

    ``spec`` follows scikit-learn's ``class_weight``: "balanced" (n_samples / (n_classes * count), computed from
    ``train_labels``), a dict, a JSON file holding ``{label: weight}``, or a CSV/TSV file with columns
    ``label,weight``. A label left out weighs 1; a weight for a label not in the data, or one that is not a
    finite number > 0, is a DataError naming where it came from.
    """
    wanted = list(dict.fromkeys(labels))
    if spec is None:
        return None
    if isinstance(spec, str) and spec == "balanced":
        import numpy as np
        from sklearn.utils.class_weight import compute_class_weight
        missing = sorted(set(wanted) - set(train_labels))
        if missing:
            raise DataError(f"class_weight 'balanced': no training text has label(s) {missing}")
        weights = compute_class_weight("balanced", classes=np.array(wanted, dtype=object),
                                       y=np.array(list(train_labels), dtype=object))
        return {label: float(w) for label, w in zip(wanted, weights)}
    given: dict[str, tuple[float, str]] = {}   # label -> (weight, where it came from)
    if isinstance(spec, Mapping):
        for key, value in spec.items():
            where = f"class_weight[{key!r}]"
            given[_check_label(key, where, "label")] = (_check_weight(value, where), where)
    elif isinstance(spec, (str, os.PathLike)):
        source = os.fspath(spec)
        suffix = Path(source).suffix.lower()
        if suffix == ".json":
            source, text = _read_text(source)
            obj = _json_object(text, source, "{label: weight}", line_of_error=True)
            given = {_check_label(k, f"{source}, key {k!r}", "label"): (_check_weight(v, f"{source}, label {k!r}"),
                                                                        source) for k, v in obj.items()}
        elif suffix in (".csv", ".tsv", ".tab"):
            given = _read_table_weights(source, _DELIMITERS[_SUFFIX_FORMATS[suffix]])
        else:
            raise DataError(f"class_weight {source!r}: give 'balanced', a dict, or a .json, .csv or .tsv file of "
                            f"label,weight")
    else:
        raise DataError(f"class_weight must be None, 'balanced', a dict or a file path, got {type(spec).__name__}")
    for label, (_, where) in given.items():
        if label not in wanted:
            raise DataError(f"{where}: weight for label {label!r}, which is not in the data; "
                            f"the labels are: {', '.join(wanted)}")
    return {label: given[label][0] if label in given else 1.0 for label in wanted}


def _check_weight(value: object, where: str) -> float:
    import math
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise DataError(f"{where}: weight {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise DataError(f"{where}: weight must be a finite number > 0, got {value!r}")
    return float(value)


def _read_table_weights(source: str, delimiter: str) -> dict[str, tuple[float, str]]:
    return _read_label_table(source, delimiter, "weight", _check_weight)
