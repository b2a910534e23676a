"""Streaming prediction for files too big to hold: read, predict and write a chunk at a time, and resume
an interrupted run without redoing or duplicating rows.

Output is JSON lines, one per input record, in input order. A resumed run keeps the complete lines already
written (a half-written last line from a kill is cut off), checks that the last kept line belongs to the
same input record, and continues after it.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
from pathlib import Path
from typing import Iterable, Iterator, TextIO

from headswap.data.jsonline import parse
from headswap.data.readers import (_missing_column, _resolve_format, csv_error_hint, parquet_batches,
                                   wide_encoding_error)
from headswap.data.records import _check_text
from headswap.errors import DataError

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"


def _decoded_lines(path: str) -> Iterator[str]:
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
        for number, line in enumerate(_decoded_lines(source), start=1):
            if not line.strip():
                continue
            record = parse(line, f"{source}, line {number}")
            if not isinstance(record, dict) or text_column not in record:
                raise DataError(f"{source}, line {number}: no {text_column!r} field")
            yield number, _check_text(record[text_column], f"{source}, line {number}", text_column)
        return
    reader = csv.reader(_decoded_lines(source), delimiter="\t" if fmt == "tsv" else ",", strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise DataError(f"{source}: file is empty") from None
    if text_column not in header:
        raise _missing_column(source, text_column, header)
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


def decisions(clf, probs, oos_score=None) -> tuple[str, list]:
    """What predict answers for each row of clf.predict_proba's output: ("label", a name per row) or, for a
    multi-label model, ("labels", a list of names per row). oos_score: each row's out-of-scope score, for a model
    that rejects by one (headswap.oos.predict_scored)."""
    if not len(probs):
        return ("labels" if getattr(clf, "multi_label", False) else "label"), []
    if getattr(clf, "multi_label", False):
        return "labels", [[str(v) for v in s] for s in clf.decide(probs)]
    if getattr(clf, "out_of_scope", None) is not None:    # the reject option may answer a label of its own
        return "label", [str(v) for v in (clf.decide(probs) if oos_score is None else clf.decide(probs, oos_score))]
    labels = [str(v) for v in clf.labels_]
    return "label", [labels[int(i)] for i in probs.argmax(axis=1)]


TIE = 1e-6     # top probabilities this close are a tie: the 6 decimals predict writes could not tell them apart


def tied_classes(probs, labels: list, answers: list) -> list[list[str] | None]:
    """Per row of single-label probabilities: the classes tied for the top (within TIE) when the answer is one
    of two or more of them, else None. A tie's answer is the first tied class in label order (numpy's argmax,
    as scikit-learn's predict), which decides nothing: predict marks it rather than pass it off as a choice."""
    import numpy as np
    probs = np.asarray(probs, dtype=np.float64)
    if not probs.size:
        return [None] * len(answers)
    near = probs.max(axis=1, keepdims=True) - probs <= TIE     # one vectorised pass: a million rows stay cheap
    out: list[list[str] | None] = [None] * len(answers)
    for i in np.flatnonzero(near.sum(axis=1) > 1):
        tied = [str(lab) for lab, on in zip(labels, near[i]) if on]
        out[i] = tied if answers[i] in tied else None
    return out


def warn_ties(ties: int, texts: int, marked: str = 'those rows list the tied classes under "tied"') -> None:
    if ties:
        logger.warning("%d of %d texts are ties: their top classes' probabilities are equal (within %g), so the "
                       "label given, the first tied class in label order, decides nothing; %s", ties, texts, TIE,
                       marked)


def predict_stream(clf, rows: Iterable[tuple[int, str]], out: TextIO, chunk_size: int = 256,
                   done: int = 0, progress: bool = True, model: str | None = None) -> int:
    """Predict `rows` chunk by chunk, writing JSON lines to `out`; returns the number of rows written.
    `done`: rows predicted by an earlier run (already skipped in `rows`), for the progress bar; `model`:
    the model's fingerprint, recorded in every line."""
    from tqdm.auto import tqdm

    labels = list(clf.labels_)
    rows = iter(rows)
    written = 0
    # One truncation note for the whole stream, not one per chunk.
    encoder = getattr(clf, "encoder_", None)
    truncated = ties = 0
    if encoder is not None:
        encoder.quiet = True
    bar = tqdm(desc="predict", unit=" rows", disable=not progress, initial=done)
    from headswap.oos import scored_proba, split_scored
    run = scored_proba(clf)
    while True:
        chunk = [r for _, r in zip(range(chunk_size), rows)]
        if not chunk:
            break
        try:
            probs, score = split_scored(clf, run([t for _, t in chunk]))
        except BaseException:
            if encoder is not None:
                encoder.quiet = False
            raise
        truncated += encoder.truncated if encoder is not None else 0
        key, answers = decisions(clf, probs, score)
        tied = tied_classes(probs, [str(v) for v in labels], answers) if key == "label" else [None] * len(chunk)
        for (number, text), p, answer, tie in zip(chunk, probs, answers, tied):
            record = {"row": number, "text": text, key: answer,
                      "probabilities": {lab: round(float(v), 6) for lab, v in zip(labels, p)}}
            if tie:     # only on a tie, so every existing reader of the lines reads them as before
                record["tied"] = tie
                ties += 1
            if model is not None:
                record["model"] = model
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        out.flush()
        written += len(chunk)
        bar.update(len(chunk))
    bar.close()
    warn_ties(ties, written)
    if encoder is not None:
        encoder.quiet = False
        if truncated:
            logger.warning("%d of %d texts were longer than %d tokens and were truncated (raise max_length to keep "
                           "more)", truncated, written, encoder.max_length)
    return written
