"""Texts streamed from files too big to hold, a record at a time, and what an interrupted run's output says about
where to resume: the reading side of streaming prediction (headswap.jobs.predictions writes the lines).

A resumed run keeps the complete lines already written (a half-written last line from a kill is cut off), checks
that the last kept line belongs to the same input record, and continues after it.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
from pathlib import Path
from typing import Iterable, Iterator

from headswap.data.jsonline import parse
from headswap.data.readers import (missing_column, _resolve_format, csv_error_hint, parquet_batches,
                                   wide_encoding_error)
from headswap.data.records import _check_text
from headswap.errors import DataError

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"


def decoded_lines(path: str) -> Iterator[str]:
    """The file's lines, decoded one at a time, so a bad byte is reported with its exact line."""
    with open(path, "rb") as f:
        yield from _decode(f, path)


def _decode(lines: Iterable[bytes], name: str, is_file: bool = True) -> Iterator[str]:
    offset = 0
    for number, raw in enumerate(lines, start=1):
        if number == 1 and (wide := wide_encoding_error(name, raw, is_file)) is not None:
            raise wide
        body = raw[3:] if number == 1 and raw.startswith(_BOM) else raw
        try:
            yield body.decode("utf-8")
        except UnicodeDecodeError as e:
            at = offset + (len(raw) - len(body)) + e.start
            raise DataError(f"{name}: not valid UTF-8: byte 0x{body[e.start]:02x} at line {number} "
                            f"(byte offset {at})") from None
        offset += len(raw)


def iter_texts(path, text_column: str = "text", format: str | None = None) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) lazily from a CSV, TSV, JSONL or Parquet file, checking each text as it comes."""
    source = os.fspath(path)
    if not Path(source).is_file():
        raise DataError(f"{source}: file not found")
    fmt = _resolve_format(source, format)
    if fmt == "parquet":
        number = 0
        for batch in parquet_batches(source, [text_column]):
            for text in batch.column(0).to_pylist():
                number += 1
                yield number, _check_text(text, f"{source}, row {number}", text_column)
        return
    if fmt == "jsonl":
        for number, line in enumerate(decoded_lines(source), start=1):
            if not line.strip():
                continue
            record = parse(line, f"{source}, line {number}")
            if not isinstance(record, dict) or text_column not in record:
                raise DataError(f"{source}, line {number}: no {text_column!r} field")
            yield number, _check_text(record[text_column], f"{source}, line {number}", text_column)
        return
    reader = csv.reader(decoded_lines(source), delimiter="\t" if fmt == "tsv" else ",", strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise DataError(f"{source}: file is empty") from None
    if text_column not in header:
        raise missing_column(source, text_column, header)
    col, end = header.index(text_column), reader.line_num
    try:
        for row in reader:
            start, end = end + 1, reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                raise DataError(f"{source}, line {start}: expected {len(header)} fields, found {len(row)}")
            yield start, _check_text(row[col], f"{source}, line {start}", text_column)
    except csv.Error as e:
        raise DataError(f"{source}, line {reader.line_num}: malformed CSV: {csv_error_hint(e)}") from None


def stdin_texts(stream: Iterable[str] | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line; standard input is read as bytes and decoded line by line,
    so a byte that is not UTF-8 is reported with its line, whatever the locale."""
    if stream is None:
        stream = _decode(sys.stdin.buffer, "standard input", is_file=False)
    for number, line in enumerate(stream, start=1):
        line = line.rstrip("\r\n")      # a Windows-made file piped in ends its lines with \r\n
        if line.strip():
            yield number, line


PREDICTION_KEYS = ("row", "text", "probabilities")   # and the answer: "label", or "labels" for multi-label models


def completed_rows(out_path: Path) -> tuple[int, dict | None, int]:
    """(complete rows, last record, bytes they take) of a predictions file, read only.

    Every complete line must be one of predict's JSON records; the bytes after the last newline are a
    half-written line (a kill mid-write) that the caller may cut off. Raises DataError, having changed
    nothing, when the file is anything else (the input itself, another file named by mistake)."""
    if not out_path.exists():
        return 0, None, 0
    data = out_path.read_bytes()
    keep = data.rfind(b"\n") + 1
    lines = data[:keep].splitlines()
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if not isinstance(record, dict) or any(k not in record for k in PREDICTION_KEYS) \
                or not ("label" in record or "labels" in record):
            raise DataError(f"{out_path} line {number} is not a headswap prediction (a JSON object with "
                            f"{', '.join(PREDICTION_KEYS)} and label or labels); refusing to resume into it, "
                            f"nothing was changed")
    if keep < len(data) and not data[keep:].startswith(b'{"row":'):
        raise DataError(f"{out_path} ends in a line that is not a headswap prediction; refusing to resume into "
                        f"it, nothing was changed")
    return len(lines), (json.loads(lines[-1]) if lines else None), keep


def check_same_model(out_path: Path, last_done: dict | None, model: str, model_dir="--model-dir") -> None:
    """Refuse to continue predictions another model wrote (its fingerprint is in every record). A file from
    a headswap that wrote no fingerprints is continued, with a warning."""
    if last_done is None:
        return
    before = last_done.get("model")
    if before is None:
        logger.warning("%s was written by a headswap without model fingerprints; cannot check that it was the "
                       "same model", out_path)
    elif before != model:
        raise DataError(f"{out_path} was written by another model ({before}), not --model-dir {model_dir} "
                        f"({model}; fingerprints: sha256 of config and weights); refusing to resume into it, "
                        f"nothing was changed")


def skip_done(rows: Iterable[tuple[int, str]], skip: int, last_done: dict | None):
    """Advance `rows` past the `skip` rows already predicted, checking the last one is the same row."""
    rows = iter(rows)
    for i in range(skip):
        row = next(rows, None)
        if row is None:
            raise DataError(f"the output already has {skip} rows but the input has only {i}; "
                            "it belongs to another input, refusing to resume")
        if i == skip - 1 and last_done is not None and (last_done.get("row"), last_done.get("text")) != row:
            raise DataError(f"the output's last row ({last_done.get('row')}) does not match input row {row[0]}; "
                            "it belongs to another input, refusing to resume")
    return rows
