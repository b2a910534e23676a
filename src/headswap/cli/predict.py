"""`headswap predict`: classify texts with a saved classifier, as JSON lines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headswap.cli.data_args import add_columns
from headswap.cli.options import add_runtime, int_at_least
from headswap.errors import HeadswapError

HELP = "classify texts with a saved classifier; JSON lines out"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True)
    add_runtime(p)
    p.add_argument("texts", nargs="*", help="texts to classify (default: --data, else one text per stdin line)")
    p.add_argument("--data", help="a CSV/TSV/JSONL/Parquet file with a text column; read as a stream")
    add_columns(p, label=False)
    p.add_argument("--out", help="write JSON lines here instead of stdout")
    p.add_argument("--resume", action="store_true", help="keep the rows already in --out and continue after them")
    p.add_argument("--chunk-size", type=int_at_least(1), default=256,
                   help="texts read, predicted and written at a time (default: %(default)s)")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: stream in this process (default); ray: Ray Data with an actor pool, one model per "
                        "actor (needs --data and --out: CSV/TSV/JSONL/Parquet by suffix; pip install 'headswap[ray]')")
    p.add_argument("--batch-size", type=int_at_least(1),
                   help="--engine ray: texts per batch, one actor call each (default: 256)")
    p.add_argument("--concurrency", type=int_at_least(1),
                   help="--engine ray: actors, each with its own model (default: the CPUs Ray has; a local Ray is "
                        "started with this many CPUs, else os.cpu_count())")
    p.add_argument("-q", "--quiet", action="store_true")


def run(args) -> int:
    from headswap.saved.atomic import output_lock
    from headswap.saved.outputs import check_file

    if args.resume and not args.out:
        raise HeadswapError("--resume needs --out (the file to continue)")
    if args.texts and args.data:
        raise HeadswapError(f"texts on the command line and --data {args.data} are two inputs; give one or the other")
    for number, text in enumerate(args.texts, start=1):
        _check_argument_text(number, text)
    out_path = Path(args.out) if args.out else None
    # A missing folder is refused rather than created (as pandas' to_csv does): a mistyped path would leave folders
    # about. An existing --out is continued with --resume, else refused (_run_local, the ray engine).
    check_file("--out", args.out, inputs=[("--data", args.data)])
    if out_path and out_path.exists() and not out_path.is_file():
        raise HeadswapError(f"--out {args.out} is not a file")
    if args.engine != "ray" and (args.batch_size is not None or args.concurrency is not None):
        raise HeadswapError(f"{'--batch-size' if args.batch_size is not None else '--concurrency'} applies to "
                            f"--engine ray only (--engine local reads --chunk-size texts at a time)")
    work = _run_ray if args.engine == "ray" else _run_local
    if out_path is None:
        return work(args, None)
    with output_lock(out_path, kind="file"):     # a second predict into the same --out stops at once instead of interleaving
        return work(args, out_path)


def _check_argument_text(number: int, text: str) -> None:
    """Refuse a text from the command line that is empty or not valid Unicode, in one line, before any model
    loads: bytes that are not UTF-8 reach Python as U+DC80-U+DCFF ("surrogateescape"), which no tokenizer takes."""
    from headswap.data.records import unicode_problem

    if not text.strip():    # as a file's empty text is refused, and serve answers 422
        raise HeadswapError(f"text {number} on the command line is empty or only whitespace; give the text to "
                            f"classify")
    problem = unicode_problem(text)
    if problem is None:
        return
    at = next(i for i, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF)
    code = ord(text[at])
    if 0xDC80 <= code <= 0xDCFF:
        raise HeadswapError(f"text {number} on the command line is not UTF-8: byte 0x{code - 0xDC00:02x} at "
                            f"character {at + 1} (the shell passed text in another encoding); pass UTF-8 text, or "
                            f"put the texts in a UTF-8 file and give it as --data")
    raise HeadswapError(f"text {number} on the command line: {problem}")


def _run_local(args, out_path) -> int:
    from headswap.classifier.estimator import load_model
    from headswap.data.stream import check_same_model, completed_rows, iter_texts, skip_done, stdin_texts
    from headswap.saved.model_dir import fingerprint, read_config

    read_config(Path(args.model_dir))    # a missing or damaged model is named as such, not as "another model"
    model = fingerprint(Path(args.model_dir))
    skip, last, keep = 0, None, 0
    if out_path and args.resume:
        skip, last, keep = completed_rows(out_path)      # read only: checked before a byte is changed
        check_same_model(out_path, last, model, args.model_dir)
    elif out_path and out_path.exists() and out_path.stat().st_size:
        raise HeadswapError(f"{out_path} exists; pass --resume to continue it, or remove it")
    if args.texts:
        rows = enumerate(args.texts, start=1)
    elif args.data:
        rows = iter_texts(args.data, text_column=args.text_column)
    else:
        rows = stdin_texts()
    rows = skip_done(rows, skip, last)
    clf = load_model(args.model_dir, progress=False, runtime=args.runtime)
    if out_path:
        if skip:
            print(f"resuming after {skip} rows already in {out_path}", file=sys.stderr)
        written = _append(out_path, keep, lambda out: _stream(args, clf, rows, out, skip, model))
    else:
        written = _stream(args, clf, rows, sys.stdout, skip, model)
    if written == 0 and skip == 0:
        raise HeadswapError(f"{args.data or 'standard input'} holds no texts to predict")
    return 0


def _stream(args, clf, rows, out, skip: int, model: str) -> int:
    from headswap.jobs.predictions import predict_stream
    return predict_stream(clf, rows, out, args.chunk_size, skip, progress=not args.quiet, model=model)


class WriteFailed(Exception):
    """An OSError while writing --out (a full disk): Python's write() error names no file, so it is carried
    out as this and reported with the path."""


class _Output:
    """--out, opened for appending at its first row, so that a run stopped or refused before one leaves no
    empty file; an OSError while writing it is raised as WriteFailed."""

    def __init__(self, path: Path):
        self.path, self.file = path, None

    def write(self, text: str) -> int:
        try:
            if self.file is None:
                self.file = open(self.path, "a", encoding="utf-8")
            return self.file.write(text)
        except OSError as e:
            raise WriteFailed(e) from e

    def flush(self) -> None:
        try:
            if self.file is not None:
                self.file.flush()
        except OSError as e:
            raise WriteFailed(e) from e

    def close(self) -> None:
        try:
            if self.file is not None:
                self.file.close()       # writes what is still buffered
        except OSError as e:
            raise WriteFailed(e) from e


def _append(out_path: Path, keep: int, write) -> int:
    """Run write(file) on OUT, appending after its first `keep` bytes (the complete rows a --resume keeps). If
    writing fails (a full disk), OUT is cut back to its last complete row, which --resume continues from, or
    removed when this run made it and completed no row: never a half line or an empty file."""
    existed = out_path.exists()
    if existed and out_path.stat().st_size > keep:
        with open(out_path, "r+b") as f:     # the half-written line a kill left
            f.truncate(keep)
    out = _Output(out_path)
    try:
        try:
            return write(out)
        finally:
            out.close()
    except WriteFailed as failed:
        reason = failed.args[0].strerror or failed.args[0]
        rows = _cut_to_complete_rows(out_path, remove=not existed)
        kept = (f"the {rows} complete rows are kept: free space and rerun with --resume to continue" if rows else
                "nothing was kept" if not existed else "it holds no complete row")
        raise HeadswapError(f"--out {out_path}: {reason}; {kept}") from None


def _cut_to_complete_rows(path: Path, remove: bool) -> int:
    """Cut `path` after its last newline; remove it when that leaves nothing and `remove`. Returns its rows."""
    if not path.exists():       # it could not even be created
        return 0
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep == 0 and remove:
        path.unlink()
        return 0
    with open(path, "r+b") as f:     # shrinking needs no space
        f.truncate(keep)
    return data[:keep].count(b"\n")


def _run_ray(args, out_path) -> int:
    from headswap.jobs.batch import predict_ray

    if not args.data or not out_path:
        raise HeadswapError("--engine ray needs --data (a CSV/TSV/JSONL/Parquet file) and --out")
    if args.texts or args.resume:
        raise HeadswapError(f"--engine ray takes no {'--resume (it writes --out whole, atomically)' if args.resume else 'texts on the command line'}")
    if out_path.exists() and out_path.stat().st_size:
        raise HeadswapError(f"{out_path} exists; remove it or write elsewhere")
    n = predict_ray(args.data, out_path, args.model_dir, text_column=args.text_column, runtime=args.runtime,
                    batch_size=args.batch_size or 256, concurrency=args.concurrency, quiet=args.quiet)
    if not args.quiet:
        print(f"{n} rows predicted on Ray -> {out_path}", file=sys.stderr)
    return 0
