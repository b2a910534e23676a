"""Atomic writes: a file or a folder is either the old one or the complete new one, never half-written; and
the hash that later tells whether a written file is still the one written."""

from __future__ import annotations

import hashlib
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator


@contextmanager
def atomic_path(path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; once the block succeeds it replaces `path` (one rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def replace_dir(out, write: Callable[[Path], object]) -> Path:
    """Write a folder with write(OUT.tmp), then swap it in for OUT, so that OUT is always complete.

    Sequence: write(OUT.tmp); rename OUT -> OUT.old (a directory cannot be renamed over a non-empty one);
    rename OUT.tmp -> OUT; remove OUT.old. A crash before the first rename leaves OUT untouched; one between
    the renames leaves the old folder in OUT.old and the new one in OUT.tmp.
    """
    given = Path(out)
    out = given.resolve()
    tmp, old = out.with_name(out.name + ".tmp"), out.with_name(out.name + ".old")
    if tmp.exists():
        shutil.rmtree(tmp)          # a write that was interrupted earlier
    if old.exists() and out.exists():
        shutil.rmtree(old)          # left by a crash after the swap (with no OUT, OUT.old is kept for now)
    write(tmp)
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return given


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
