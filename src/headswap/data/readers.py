"""Reading CSV, TSV and JSONL files into LabelledData: UTF-8 decoding, the format from the suffix, CSV/TSV
records with their line numbers, and JSONL objects."""

from __future__ import annotations

import csv
import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from headswap.data.records import LabelledData, _check_label, _check_text
from headswap.errors import DataError

logger = logging.getLogger("headswap.data.load")   # the name tests and users filter on

_SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
                   ".parquet": "parquet"}
_DELIMITERS = {"csv": ",", "tsv": "\t"}
_UTF8_BOM = b"\xef\xbb\xbf"
# Byte-order marks of the encodings a Windows "Unicode" save gives; UTF-32's before UTF-16's, which begin them.
_WIDE_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"),
              (b"\xfe\xff", "UTF-16"), (b"\xff\xfe", "UTF-16"))


def wide_encoding_error(source: str, head: bytes, is_file: bool = True) -> DataError | None:
    """The DataError for input whose first bytes `head` are a UTF-16 or UTF-32 byte-order mark, else None: such
    a file is not Latin-1 gone wrong, and iconv needs to be told what it is. is_file=False: `source` names a
    stream (standard input), to be piped through iconv."""
    for bom, encoding in _WIDE_BOMS:
        if head.startswith(bom):
            import shlex
            p = Path(source)
            convert = (f"iconv -f {encoding} -t UTF-8 {shlex.quote(source)} > "
                       f"{shlex.quote(str(p.with_name(f'{p.stem}.utf8{p.suffix}')))}" if is_file else
                       f"pipe it through iconv -f {encoding} -t UTF-8")
            return DataError(f"{source}: is {encoding}, not UTF-8 (it starts with a {encoding} byte-order mark); "
                             f"convert it: {convert}")
    return None


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
    wide = wide_encoding_error(source, raw)
    if wide is not None:    # before the emptiness check: an "empty" UTF-16 file still holds its BOM
        raise wide
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
        if fmt not in ("csv", "tsv", "jsonl", "parquet"):
            raise DataError(f"{source}: unknown format {format!r}; use 'csv', 'tsv', 'jsonl' or 'parquet'")
        return fmt
    suffix = Path(source).suffix.lower()
    if suffix in _SUFFIX_FORMATS:
        return _SUFFIX_FORMATS[suffix]
    if suffix == ".txt":
        raise DataError(f"{source}: a .txt file could be CSV, TSV or JSONL; rename it .csv, .tsv or .jsonl (from "
                        "Python: pass format='csv', 'tsv' or 'jsonl')")
    raise DataError(
        f"{source}: cannot tell the format from the suffix {suffix or '(none)'!r}; "
        "use .csv, .tsv/.tab, .jsonl/.ndjson or .parquet (from Python: pass format='csv', 'tsv', 'jsonl' or 'parquet')"
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


def missing_column(source: str, name: str, header: Sequence[str], where: str = "") -> DataError:
    columns = ", ".join(repr(h) for h in header) or "(none)"
    msg = f"{source}{where}: no column {name!r}; the columns are: {columns}"
    near = [h for h in header if h.strip().lower() == name.strip().lower() and h != name]
    if near:
        msg += f" (did you mean {near[0]!r}? pass it as the column name, or fix the header)"
    elif any("\t" in h for h in header):
        msg += " (the header holds tab characters: a tab-separated file? name it .tsv, or pass format='tsv')"
    return DataError(msg)


def _load_table(
    source: str, text: str, delimiter: str, text_column: str, label_column: str | None, require_labels: bool
) -> LabelledData:
    header, records = _read_table(source, text, delimiter)
    ti = _column_index(source, header, text_column)
    if ti is None:
        raise missing_column(source, text_column, header)
    li = _column_index(source, header, label_column) if label_column is not None else None
    if li is None and label_column is not None and require_labels:
        raise missing_column(source, label_column, header)
    texts, labels, rows = [], [], []
    for line, fields in records:
        where = f"{source}, line {line}"
        texts.append(_check_text(fields[ti], where, text_column))
        if li is not None:
            labels.append(_check_label(fields[li], where, label_column))
        rows.append(line)
    return LabelledData(texts, labels, source, rows)


def _parquet_file(source: str):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{source}: reading Parquet needs pyarrow: pip install pyarrow") from None
    if not os.path.isfile(source):
        raise DataError(f"{source}: no such file")
    try:
        return pq.ParquetFile(source)
    except OSError as e:
        raise DataError(f"{source}: not a readable Parquet file ({e})") from None


def parquet_batches(source: str, columns: list[str], optional: list[str] = ()):
    """The record batches of a Parquet file's `columns`, and of those of `optional` it has (pyarrow), or one line
    naming a column that is missing."""
    file = _parquet_file(source)
    names = file.schema_arrow.names
    for name in columns:
        if name not in names:
            raise missing_column(source, name, names)
    return file.iter_batches(columns=[*columns, *(name for name in optional if name in names)])


def _load_parquet(source: str, text_column: str, label_column: str | None, require_labels: bool) -> LabelledData:
    """A Parquet file's texts and labels, checked as a CSV's are (rows numbered from 1)."""
    labels_given = [label_column] if label_column is not None else []
    texts, labels, n = [], [], 0
    for batch in parquet_batches(source, [text_column] + (labels_given if require_labels else []),
                                 [] if require_labels else labels_given):
        values = batch.to_pydict()
        for i, text in enumerate(values[text_column]):
            where = f"{source}, row {n + i + 1}"
            texts.append(_check_text(text, where, text_column))
            if label_column in values:
                value = values[label_column][i]
                labels.append(tuple(value) if isinstance(value, list) else _check_label(value, where, label_column))
        n += batch.num_rows
    if not texts:
        raise DataError(f"{source}: file is empty")
    return LabelledData(texts, labels, source, list(range(1, n + 1)), row_unit="row")


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
            raise missing_column(source, text_column, list(obj), f", line {n}")
        texts.append(_check_text(obj[text_column], where, text_column))
        if label_column is None:
            pass
        elif label_column in obj:
            value = obj[label_column]
            # A list is a multi-label row; its names are checked where multi-label data is read
            # (headswap.data.multilabel), and single-label training refuses it.
            labels.append(tuple(value) if isinstance(value, list) else _check_label(value, where, label_column))
        elif require_labels:
            raise missing_column(source, label_column, list(obj), f", line {n}")
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


def _json_object(text: str, where: str, expected: str, line_of_error: bool = False) -> dict:
    """One JSON object, or a DataError naming `where` (and the error's line when `text` is a whole file)."""
    from headswap.data.jsonline import parse
    obj = parse(text, where, line_of_error)
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object {expected}, got {type(obj).__name__}")
    return obj
