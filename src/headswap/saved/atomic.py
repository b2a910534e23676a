"""Atomic writes: a file or a folder is either the old one or the complete new one, never half-written; and
the hash that later tells whether a written file is still the one written."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from headswap.errors import HeadswapError


@contextmanager
def atomic_path(path) -> Iterator[Path]:
    """Yield a temporary path beside `path` (an empty file, unique to this writer); once the block succeeds it
    replaces `path` (one rename) with the mode an ordinary new file gets."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)   # unique per writer
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        ordinary_mode(tmp)      # mkstemp's 0600 (and safetensors' own) would keep other users out
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def written_together(paths) -> Iterator[list[Path]]:
    """atomic_path for files that belong together (a report and its charts): a temporary path beside each, and
    only once the block has written them all does each replace its file. A failure (a full disk) leaves the old
    set whole and no new file beside it; an OSError is raised as one line naming the folder and the files
    (the error of a failed write() names none)."""
    paths = [Path(p) for p in paths]
    try:
        with ExitStack() as stack:
            yield [stack.enter_context(atomic_path(p)) for p in paths]
    except OSError as e:
        raise HeadswapError(f"writing {', '.join(p.name for p in paths)} in {paths[0].parent} failed: "
                            f"{e.strerror or e}; the files there are as they were") from None


def write_text(path, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def replace_dir(out, write: Callable[[Path], object], owned: Iterable[str] = ()) -> Path:
    """Write a folder with write(NEW), then swap it in for OUT, so that OUT is always complete.

    NEW (and OLD, where the previous OUT goes) get unique names beside OUT, so two writers never share one.
    Sequence: write(NEW); rename OUT -> OLD; rename NEW -> OUT; move into OUT every entry of OLD that is not
    in `owned` (what the previous save wrote and this one replaces) and that NEW did not write; remove OLD.
    So a file a user put in OUT, or `headswap eval`'s output, is never deleted. A failed write removes NEW and
    leaves OUT as it was; a crash between the renames leaves the old folder in OLD (.OUT.old-*).
    """
    given = Path(out)
    out = given.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    owned = set(owned)
    new = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        write(new)
        os.chmod(new, 0o777 & ~umask())     # mkdtemp makes it private; a saved model is an ordinary folder
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    old = None
    with _folder_lock(out.parent):  # the two renames of one writer are not interleaved with another's
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old)    # onto the empty folder mkdtemp made: a unique name, taken atomically
        os.replace(new, out)
        if old is not None:
            try:
                for entry in old.iterdir():
                    if entry.name not in owned and not (out / entry.name).exists():
                        os.replace(entry, out / entry.name)
            except OSError as e:    # OLD is then kept whole: it holds files that are not ours to delete
                raise HeadswapError(f"{out} now holds the new model, but moving the other files of the previous "
                                    f"one back into it failed ({e.strerror or e}); they are in {old}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)     # only what the previous save wrote is left in it
    return given


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive flock on a folder, held for a few renames (no lock file left behind); a no-op where
    flock does not exist."""
    try:
        import fcntl
    except ImportError:     # pragma: no cover - Windows
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def umask() -> int:
    """The process's umask (read by setting and restoring it: Python has no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def ordinary_mode(path) -> None:
    """Give a written file the mode a plain open() would (safetensors writes 0600)."""
    os.chmod(path, 0o666 & ~umask())


def check_output_dir(flag: str, path) -> None:
    """An output directory may exist, but not as a file."""
    if path and Path(path).exists() and not Path(path).is_dir():
        raise HeadswapError(f"{flag} {path} is an existing file; give a directory")


@contextmanager
def output_lock(out, flag: str = "--out", kind: str = "directory") -> Iterator[None]:
    """Hold OUT for this process while it trains into and saves OUT: a second headswap given the same OUT
    stops at once with one line instead of the two overwriting each other's checkpoints and files. `kind`: what
    OUT is ("directory", or "file" for `predict --out`), for that line.

    The lock is the file .OUT.lock beside OUT, removed on exit; folders made to hold it are removed again if
    the command left nothing in them (a refused command changes nothing on disk)."""
    from filelock import FileLock, Timeout

    out = Path(out).resolve()
    made = [d for d in out.parents if not d.exists()]      # deepest first
    lock = FileLock(str(out.with_name(f".{out.name}.lock")))
    try:
        # Whether OUT's folder takes new files at all, first: filelock reports a lock file it could not create
        # (a read-only folder, /proc) as a Timeout, which would blame another process for the place itself.
        _check_writable(out, flag)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise HeadswapError(f"{flag} {out} is being written by another headswap process (it holds "
                                f"{lock.lock_file}); wait for it to finish or give another {kind}") from None
        except OSError as e:    # a read-only or full folder: said of OUT, not only of a lock file never asked for
            raise HeadswapError(f"{flag} {out}: cannot write in {out.parent} ({e.strerror or e}; the lock file "
                                f"{Path(lock.lock_file).name} could not be made)") from None
        try:
            yield
        finally:
            # Unlinked while still held: a process that opened the file just before sees a lock that guards
            # no name (filelock checks), never a second lock on a new file while this one still writes.
            Path(lock.lock_file).unlink(missing_ok=True)
            lock.release()
    finally:
        for d in made:
            try:
                d.rmdir()
            except OSError:
                break       # not empty: the command wrote there


def check_writable(folder: Path) -> None:
    """Raise the OSError that writing into `folder` would raise (made if missing; a temporary folder created
    and removed), before a long build: an unwritable HEADSWAP_CACHE was found only after a 26 s conversion."""
    folder.mkdir(parents=True, exist_ok=True)
    os.rmdir(tempfile.mkdtemp(prefix=".tmp-writable-", dir=folder))


def _check_writable(out: Path, flag: str) -> None:
    """check_writable for OUT's folder, or the one line that says which folder cannot be written, and why."""
    try:
        check_writable(out.parent)
    except OSError as e:
        where = next((d for d in (out.parent, *out.parents) if d.exists()), out.parent)
        reason = e.strerror or str(e)
        if e.errno == errno.ENOENT and where.is_dir():
            reason = "it takes no new files"     # /proc: the folder is there, a new name in it is not
        raise HeadswapError(f"{flag} {out}: cannot write in {where} ({reason})") from None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
