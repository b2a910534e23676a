"""Load labelled text data (CSV, TSV, JSONL) without ever silently dropping or altering it.

Every problem raises :class:`~headswap.errors.DataError` with a message that names the file, the line and the
column, so the user can open the file and fix it. Texts are kept exactly as stored: nothing is stripped,
unescaped or truncated here (token-level truncation happens later).
"""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from headswap.data.once import warn_once
from headswap.errors import DataError

logger = logging.getLogger(__name__)

__all__ = [
    "LabelledData",
    "load_dataset",
    "load_texts",
    "check_training_data",
    "warn_lookalike_labels",
    "check_eval_labels",
    "load_descriptions",
    "load_class_weights",
    "from_lists",
]

_SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
_DELIMITERS = {"csv": ",", "tsv": "\t"}
_UTF8_BOM = b"\xef\xbb\xbf"


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


# ---------------------------------------------------------------------------------------------------------------
# Reading files


def _read_text(path: str | os.PathLike) -> tuple[str, str]:
    """Return ``(source, text)`` for a UTF-8 file (a BOM is accepted and removed)."""
    source = os.fspath(path)
    p = Path(source)
    if not p.exists():
        raise DataError(f"{source}: file not found")
    if p.is_dir():
        raise DataError(f"{source}: is a directory, expected a data file")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DataError(f"{source}: cannot read file: {e.strerror or e}") from e
    if not raw.strip():
        raise DataError(f"{source}: file is empty")
    start = len(_UTF8_BOM) if raw.startswith(_UTF8_BOM) else 0
    try:
        text = raw[start:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = start + e.start  # offset in the file, BOM included, so it matches a hex editor
        line = raw.count(b"\n", 0, offset) + 1
        raise DataError(
            f"{source}: not valid UTF-8: byte 0x{raw[offset]:02x} at line {line} (byte offset {offset}). "
            "Save the file as UTF-8 (for example: iconv -f latin1 -t utf-8 in.csv > out.csv)."
        ) from None
    if not text.strip():
        raise DataError(f"{source}: file is empty")
    return source, text


def _resolve_format(source: str, format: str | None) -> str:
    if format is not None:
        fmt = format.lower()
        if fmt not in ("csv", "tsv", "jsonl"):
            raise DataError(f"{source}: unknown format {format!r}; use 'csv', 'tsv' or 'jsonl'")
        return fmt
    suffix = Path(source).suffix.lower()
    if suffix in _SUFFIX_FORMATS:
        return _SUFFIX_FORMATS[suffix]
    if suffix == ".txt":
        raise DataError(f"{source}: a .txt file could be CSV, TSV or JSONL; rename it .csv, .tsv or .jsonl (from "
                        "Python: pass format='csv', 'tsv' or 'jsonl')")
    raise DataError(
        f"{source}: cannot tell the format from the suffix {suffix or '(none)'!r}; "
        "use .csv, .tsv/.tab or .jsonl/.ndjson (from Python: pass format='csv', 'tsv' or 'jsonl')"
    )


# Python's csv module refuses fields over 128 KiB by default; a long document is a legitimate text (it is
# truncated to max_length tokens later, with a report), so the ceiling is raised to this many characters.
CSV_FIELD_LIMIT = 64 * 1024 * 1024
csv.field_size_limit(CSV_FIELD_LIMIT)


def csv_error_hint(e: csv.Error) -> str:
    if "field larger than field limit" in str(e):
        return (f"a field is longer than {CSV_FIELD_LIMIT:,} characters, headswap's limit (an unmatched double "
                f"quote can also run the rest of the file into one field)")
    return f"{e} (an unmatched double quote? quote the whole field and double any quotes inside it)"


def _read_table(source: str, text: str, delimiter: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Parse CSV/TSV text into ``(header, [(start_line, fields), ...])``.

    Blank lines are skipped (and counted in a log message); every other row must have as many fields as the
    header.
    """
    # newline="" keeps \r\n inside quoted fields intact; strict=True turns stray quotes (e.g. '"a" b') and an
    # unterminated quote into errors instead of silently altered or swallowed rows.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    header: list[str] | None = None
    records: list[tuple[int, list[str]]] = []
    blank = 0
    prev_end = 0  # reader.line_num after the previous record: the next record starts on the following line
    try:
        for fields in reader:
            start, prev_end = prev_end + 1, reader.line_num
            if not fields:
                blank += 1
                continue
            if header is None:
                header = fields
                continue
            if len(fields) != len(header):
                raise DataError(
                    f"{source}, line {start}: expected {len(header)} fields (like the header), found {len(fields)}. "
                    "Fields containing the delimiter, quotes or line breaks must be quoted."
                )
            records.append((start, fields))
    except csv.Error as e:
        raise DataError(
            f"{source}, line {prev_end + 1}: cannot parse the record starting here: {csv_error_hint(e)}"
        ) from None
    if header is None:
        raise DataError(f"{source}: file is empty")
    if not records:
        raise DataError(f"{source}: has a header row but no data rows")
    if blank:
        logger.info("%s: skipped %d blank line(s)", source, blank)
    return header, records


def _column_index(source: str, header: list[str], name: str) -> int | None:
    """Index of column ``name`` in the header, or None when absent. Duplicate names are an error."""
    hits = [i for i, h in enumerate(header) if h == name]
    if len(hits) > 1:
        raise DataError(f"{source}: the header names column {name!r} {len(hits)} times")
    return hits[0] if hits else None


def _missing_column(source: str, name: str, header: Sequence[str], where: str = "") -> DataError:
    columns = ", ".join(repr(h) for h in header) or "(none)"
    msg = f"{source}{where}: no column {name!r}; the columns are: {columns}"
    near = [h for h in header if h.strip().lower() == name.strip().lower() and h != name]
    if near:
        msg += f" (did you mean {near[0]!r}? pass it as the column name, or fix the header)"
    elif any("\t" in h for h in header):
        msg += " (the header holds tab characters: a tab-separated file? name it .tsv, or pass format='tsv')"
    return DataError(msg)


def _check_text(text: object, where: str, column: str) -> str:
    if not isinstance(text, str):
        raise DataError(f"{where}: column {column!r} must be a string, got {type(text).__name__} {text!r:.60}")
    if text.strip() == "":
        raise DataError(f"{where}: column {column!r} is empty")
    return text


def _check_label(label: object, where: str, column: str) -> str:
    # Integer labels (0/1) are common in JSON; they become strings so CSV and JSONL data agree.
    # bool is excluded: true/false is almost always a mistake, and str(True) == "True" would be surprising.
    if isinstance(label, int) and not isinstance(label, bool):
        return str(label)
    if not isinstance(label, str):
        raise DataError(
            f"{where}: column {column!r} must be a string or an integer, got {type(label).__name__} {label!r:.60}"
        )
    if label.strip() == "":
        raise DataError(f"{where}: column {column!r} is empty")
    return label


def _load_table(
    source: str, text: str, delimiter: str, text_column: str, label_column: str | None, require_labels: bool
) -> LabelledData:
    header, records = _read_table(source, text, delimiter)
    ti = _column_index(source, header, text_column)
    if ti is None:
        raise _missing_column(source, text_column, header)
    li = _column_index(source, header, label_column) if label_column is not None else None
    if li is None and label_column is not None and require_labels:
        raise _missing_column(source, label_column, header)
    texts, labels, rows = [], [], []
    for line, fields in records:
        where = f"{source}, line {line}"
        texts.append(_check_text(fields[ti], where, text_column))
        if li is not None:
            labels.append(_check_label(fields[li], where, label_column))
        rows.append(line)
    return LabelledData(texts, labels, source, rows)


def _load_jsonl(source: str, text: str, text_column: str, label_column: str | None, require_labels: bool) -> LabelledData:
    # Split on "\n" only: str.splitlines() would also split on U+2028 etc., which JSON allows inside strings.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start a blank one
    texts: list[str] = []
    labels: list[str | None] = []
    rows: list[int] = []
    blank = 0
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            blank += 1
            continue
        where = f"{source}, line {n}"
        obj = _json_object(line, where, f"like {{\"{text_column}\": ...}}")
        if text_column not in obj:
            raise _missing_column(source, text_column, list(obj), f", line {n}")
        texts.append(_check_text(obj[text_column], where, text_column))
        if label_column is None:
            pass
        elif label_column in obj:
            value = obj[label_column]
            # A list is a multi-label row; its names are checked where multi-label data is read
            # (headswap.data.multilabel), and single-label training refuses it.
            labels.append(tuple(value) if isinstance(value, list) else _check_label(value, where, label_column))
        elif require_labels:
            raise _missing_column(source, label_column, list(obj), f", line {n}")
        else:
            labels.append(None)
        rows.append(n)
    if not texts:
        raise DataError(f"{source}: file is empty")
    if blank:
        logger.info("%s: skipped %d blank line(s)", source, blank)
    if labels and None in labels:
        if all(label is None for label in labels):
            labels = []  # unlabelled prediction input
        else:
            # Some records labelled and some not: dropping either the labels or the records would be silent loss.
            i = labels.index(None)
            raise DataError(
                f"{source}, line {rows[i]}: no {label_column!r}, but other lines have one; "
                "label every line or none"
            )
    return LabelledData(texts, labels, source, rows)  # type: ignore[arg-type]


def _load(path, text_column: str, label_column: str | None, format: str | None, require_labels: bool) -> LabelledData:
    if label_column is not None and label_column == text_column:
        raise DataError(f"text_column and label_column are both {text_column!r}")
    source = os.fspath(path)
    fmt = _resolve_format(source, format)  # before reading, so a .txt file fails fast with the useful message
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
    """Load a labelled CSV, TSV or JSONL file.

    ``format`` is ``"csv"``, ``"tsv"``, ``"jsonl"`` or None (guess from the suffix: .csv, .tsv/.tab,
    .jsonl/.ndjson). With ``require_labels=False`` the label column may be absent, and ``labels`` is then ``[]``;
    when it is present every record must have a non-empty label. Blank lines are skipped (logged); every other
    record is returned, in file order.
    """
    return _load(path, text_column, label_column, format, require_labels)


def load_texts(path: str | os.PathLike, text_column: str = "text", format: str | None = None) -> LabelledData:
    """Load texts for prediction. Any label column is ignored, so ``labels`` is always ``[]``."""
    return _load(path, text_column, None, format, require_labels=False)


def as_list(values, source: str, what: str = "texts") -> list:
    """list(values), refusing a single str or bytes, which list() would split into characters."""
    if isinstance(values, (str, bytes)):
        raise DataError(f"{source}: {what} must be a list, not a single {type(values).__name__} "
                        f"({values[:40]!r}); wrap it in a list")
    return list(values)


def from_lists(texts: Sequence[str], labels: Sequence[str] | None, source: str = "<memory>") -> LabelledData:
    """Build :class:`LabelledData` from Python lists, validated like a file (errors name the index).

    ``labels`` may be None or empty for unlabelled data; integer labels become strings.
    """
    texts, labels = as_list(texts, source), as_list(labels or [], source, "labels")
    if not texts:
        raise DataError(f"{source}: no texts")
    if labels and len(labels) != len(texts):
        raise DataError(f"{source}: {len(texts)} texts but {len(labels)} labels")
    out_texts = [_check_text(t, f"{source}, index {i}", "text") for i, t in enumerate(texts)]
    out_labels = [_check_label(y, f"{source}, index {i}", "label") for i, y in enumerate(labels)]
    return LabelledData(out_texts, out_labels, source, list(range(1, len(texts) + 1)), row_unit="item")


# ---------------------------------------------------------------------------------------------------------------
# Checks and splits


def check_training_data(data: LabelledData) -> list[str]:
    """Check that ``data`` can train a classifier (labelled, at least two classes); return the label names."""
    if not data.labels:
        raise DataError(f"{data.source}: training data needs labels, and this data has none")
    check_single_labels(data)
    names = data.label_names()
    warn_lookalike_labels(names, data.source)
    from headswap.data.multilabel import warn_if_label_sets
    warn_if_label_sets(names, data.source)
    if len(names) < 2:
        raise DataError(
            f"{data.source}: training data needs at least 2 classes, but every record "
            f"({len(data)} in all) has the label {names[0]!r}"
        )
    return names


def warn_lookalike_labels(labels: Sequence[str], source: str) -> None:
    """Warn about labels that differ only by surrounding whitespace ('ham' and 'ham '): they are separate
    classes that print alike. They stay as written (labels are never altered here); the user decides."""
    groups: dict[str, list[str]] = {}
    for label in dict.fromkeys(labels):
        if isinstance(label, str):
            groups.setdefault(label.strip(), []).append(label)
    for same in map(sorted, groups.values()):
        if len(same) > 1:
            names = ", ".join(map(repr, same[:-1])) + f" and {same[-1]!r}"
            warn_once(("labels", *same), f"{source}: labels {names} differ only by surrounding whitespace, so they "
                                         f"are {len(same)} separate classes; labels are kept exactly as written: "
                                         f"fix the data if they are one class")


def check_single_labels(data: LabelledData) -> None:
    """A list label (JSONL) is a multi-label row: refuse it here rather than make it a class of its own."""
    for i, label in enumerate(data.labels):
        if isinstance(label, tuple):
            raise DataError(f"{data.where(i)}: the label is a list, which is multi-label data; train with "
                            f"--multi-label (multi_label=True)")


def check_eval_labels(train_labels: Sequence[str], eval_data: LabelledData, out_of_scope: str | None = None) -> None:
    """Fail if ``eval_data`` has a label that training never saw (the model could never predict it), other
    than the out-of-scope label that the reject option answers."""
    if not eval_data.labels:
        raise DataError(f"{eval_data.source}: evaluation data needs labels, and this data has none")
    check_single_labels(eval_data)
    known = set(train_labels) | ({out_of_scope} if out_of_scope is not None else set())
    first_seen: dict[str, int] = {}
    for i, label in enumerate(eval_data.labels):
        if label not in known and label not in first_seen:
            first_seen[label] = i
    if first_seen:
        unseen = "; ".join(f"{label!r} (first at {eval_data.where(i)})" for label, i in first_seen.items())
        raise DataError(
            f"{eval_data.source}: label(s) not in the training data: {unseen}. "
            f"Known labels: {', '.join(sorted(known))}"
        )


# ---------------------------------------------------------------------------------------------------------------
# Label descriptions


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


def _json_object(text: str, where: str, expected: str, line_of_error: bool = False) -> dict:
    """One JSON object, or a DataError naming `where` (and the error's line when `text` is a whole file)."""
    from headswap.data.jsonline import parse
    obj = parse(text, where, line_of_error)
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object {expected}, got {type(obj).__name__}")
    return obj


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
            raise _missing_column(source, name, header)
    given: dict[str, tuple[object, str]] = {}
    for line, fields in records:
        where = f"{source}, line {line}"
        label = _check_label(fields[li], where, "label")
        if label in given:
            raise DataError(f"{where}: second {column} for label {label!r} (first at {given[label][1]})")
        given[label] = (check(fields[vi], f"{where}, column {column!r}"), where)
    return given


# ---------------------------------------------------------------------------------------------------------------
# Class weights


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
