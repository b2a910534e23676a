"""LabelledData, the texts and labels every loader returns, and the checks each text and label passes."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headswap.errors import DataError


@dataclass
class LabelledData:
    """Texts with their labels (``labels`` is ``[]`` for unlabelled prediction input).

    ``rows[i]`` is where record ``i`` sits in ``source``, 1-based: for CSV/TSV the line where the record starts
    (the header is line 1), for JSONL its line, for in-memory data (``row_unit="item"``) its position.
    """

    texts: list[str]
    labels: list[str]
    source: str
    rows: list[int]
    row_unit: str = "line"

    def __post_init__(self) -> None:
        # A mismatch here would pair texts with the wrong labels, so fail loudly rather than zip() short.
        if self.labels and len(self.labels) != len(self.texts):
            raise DataError(f"{self.source}: {len(self.texts)} texts but {len(self.labels)} labels")
        if len(self.rows) != len(self.texts):
            raise DataError(f"{self.source}: {len(self.texts)} texts but {len(self.rows)} row numbers")

    def __len__(self) -> int:
        return len(self.texts)

    def label_names(self) -> list[str]:
        """Sorted unique labels; the same order as scikit-learn's ``classes_``."""
        return sorted(set(self.labels))

    def where(self, i: int) -> str:
        """Human-readable location of record ``i``, e.g. ``"train.csv, line 12"``."""
        return f"{self.source}, {self.row_unit} {self.rows[i]}"

    def subset(self, idx: Sequence[int]) -> "LabelledData":
        """The records at ``idx``, keeping where each came from."""
        return LabelledData([self.texts[i] for i in idx], [self.labels[i] for i in idx] if self.labels else [],
                            self.source, [self.rows[i] for i in idx], self.row_unit)


def unicode_problem(text: str) -> str | None:
    """None for text that is valid Unicode, else what is wrong with it, in words for an error line.

    A JSON escape of half a surrogate pair ("\\ud83d" with no low half after it) decodes to a str that no
    tokenizer or UTF-8 writer accepts; so does an argument the shell passed in bytes that are not UTF-8 (Python
    keeps them as U+DC80-U+DCFF, "surrogateescape"). Both are refused where they are read."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        return (f"not valid Unicode (an unpaired surrogate \\u{code:04x} at character {e.start + 1}; a JSON "
                f"\\u escape of half a surrogate pair, such as an emoji cut in two): fix or remove it")


def _check_unicode(value: str, where: str, column: str) -> str:
    problem = unicode_problem(value)
    if problem is not None:
        raise DataError(f"{where}, column {column!r}: {problem}")
    return value


def _check_text(text: object, where: str, column: str) -> str:
    if not isinstance(text, str):
        raise DataError(f"{where}: column {column!r} must be a string, got {type(text).__name__} {text!r:.60}")
    if text.strip() == "":
        raise DataError(f"{where}: column {column!r} is empty")
    return _check_unicode(text, where, column)


def _check_label(label: object, where: str, column: str) -> str:
    # Integer labels (0/1) are common in JSON and numpy; they become strings so CSV and JSONL data agree.
    # bool is excluded: true/false is almost always a mistake, and str(True) == "True" would be surprising.
    if _is_integer(label):
        return str(int(label))
    if not isinstance(label, str):
        raise DataError(
            f"{where}: column {column!r} must be a string or an integer, got {type(label).__name__} {label!r:.60}"
        )
    if label.strip() == "":
        raise DataError(f"{where}: column {column!r} is empty")
    return _check_unicode(label, where, column)


def _is_integer(value) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def label_type(y, source: str, out_of_scope: str | None = None) -> type | None:
    """int when every label of y is an integer (Python's or numpy's: classes_ then stay integers, as scikit-learn's
    do), str when every one is a string, None for anything else; the out-of-scope label may stand among integers.
    Refused in one line naming them: labels that mix integers and strings (1 and "1" would be two classes that read
    the same), and True/False labels."""
    first: dict = {}
    for i, v in enumerate(y):
        if isinstance(v, (bool, np.bool_)):
            raise DataError(f"{source}, index {i}: label {bool(v)!r}: True/False labels name no class; give strings or "
                            f"integers (e.g. y.astype(int), or names such as 'spam' and 'ham')")
        kind = int if _is_integer(v) else str if isinstance(v, str) else object
        if not (kind is str and v == out_of_scope):
            first.setdefault(kind, (i, int(v) if kind is int else v))
    if int in first and str in first:
        (i, a), (j, b) = first[int], first[str]
        raise DataError(f"{source}: labels mix integers and strings ({a!r} at index {i}, {b!r} at index {j}); give "
                        f"every label as one type (1 and '1' would be two classes that read the same)")
    return next(iter(first)) if len(first) == 1 and object not in first else None


def some_texts(values, source: str) -> list:
    """as_list(values), refusing none at all, as scikit-learn's estimators refuse 0 samples."""
    texts = as_list(values, source)
    if not texts:
        raise DataError(f"{source}: no texts (at least one is needed)")
    return texts


def as_list(values, source: str, what: str = "texts") -> list:
    """list(values), refusing a single str or bytes, which list() would split into characters. A table (a pandas
    DataFrame, a Hugging Face datasets.Dataset) gives its "text" (or "label") column: list() of it would give the
    column names, or one dict per row."""
    if isinstance(values, (str, bytes)):
        raise DataError(f"{source}: {what} must be a list, not a single {type(values).__name__} "
                        f"({values[:40]!r}); wrap it in a list")
    if table_columns(values) is not None:
        return table_column(values, "label" if what == "labels" else "text", source)
    if hasattr(values, "iloc") and hasattr(values, "tolist"):     # a pandas Series: numpy scalars as Python's
        return values.tolist()
    return list(values)


def table_columns(values) -> list[str] | None:
    """The column names of a pandas DataFrame or a datasets.Dataset; None for anything else."""
    if hasattr(values, "column_names") and hasattr(values, "features"):     # datasets.Dataset
        return list(values.column_names)
    if hasattr(values, "columns") and hasattr(values, "iloc"):              # pandas.DataFrame
        return [str(c) for c in values.columns]
    return None


def labels_of_table(X, y):
    """y, or where y is None and X is a table, its "label" column."""
    return table_column(X, "label", "training data") if y is None and table_columns(X) is not None else y


def table_column(table, name: str, source: str) -> list:
    """Column `name` of a table (table_columns) as a list, or one line naming the columns it has."""
    columns = table_columns(table)
    if name not in columns:
        raise DataError(f"{source}: the table has no column {name!r} (its columns: {', '.join(map(repr, columns))}); "
                        f"name it {name!r}, or pass the column itself (X[\"...\"])")
    column = table[name]
    values = column.tolist() if hasattr(column, "tolist") else list(column)
    features = table.features if hasattr(table, "column_names") else {}     # a datasets.Dataset's column types
    names = getattr(features.get(name), "names", None)
    return values if not names else _class_names(values, names, source, name)


def _class_names(values: list, names: list[str], source: str, column: str) -> list[str]:
    """A Hugging Face ClassLabel column's indices as its class names, which the user sees in its dataset."""
    bad = next((i for i, v in enumerate(values) if not (_is_integer(v) and 0 <= v < len(names))), None)
    if bad is not None:
        raise DataError(f"{source}, index {bad}: column {column!r} is {values[bad]!r}, no class of its ClassLabel "
                        f"({len(names)} names; -1 marks a text with no label)")
    return [names[v] for v in values]


def from_lists(texts: Sequence[str], labels: Sequence[str] | None, source: str = "<memory>") -> LabelledData:
    """Build :class:`LabelledData` from Python lists, validated like a file (errors name the index).

    ``labels`` may be None or empty for unlabelled data; integer labels become strings.
    """
    texts, labels = some_texts(texts, source), as_list([] if labels is None else labels, source, "labels")
    if labels and len(labels) != len(texts):
        raise DataError(f"{source}: {len(texts)} texts but {len(labels)} labels")
    out_texts = [_check_text(t, f"{source}, index {i}", "text") for i, t in enumerate(texts)]
    out_labels = [_check_label(y, f"{source}, index {i}", "label") for i, y in enumerate(labels)]
    return LabelledData(out_texts, out_labels, source, list(range(1, len(texts) + 1)), row_unit="item")
