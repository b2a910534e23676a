"""The model cache: where it lives, and building an entry in it atomically."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from headswap.saved.atomic import check_writable  # noqa: F401 (models' name for it)
from headswap.errors import HeadswapError

# Bump when the conversion itself changes, so caches written by an older headswap are not reused.
_CONVERSION_VERSION = "1"
_MIB = 1 << 20


def hash_ends(h, file: Path, size: int) -> None:
    """Feed `file`'s first and last MiB to the hash `h`: a cache key that changes when a ~100 MB model file
    changes, without reading it whole."""
    with open(file, "rb") as f:
        h.update(f.read(_MIB))
        f.seek(max(0, size - _MIB))
        h.update(f.read(_MIB))
# Leftover temp folders of a killed conversion older than this are removed before a new conversion.
_STALE_TMP_SECONDS = 3600


def cache_root() -> Path:
    """Where converted models are cached: ``$HEADSWAP_CACHE`` if set, else ``~/.cache/headswap``."""
    env = os.environ.get("HEADSWAP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "headswap"


@contextmanager
def building_in_cache(target: Path, complete: str):
    """Yield a new private folder beside `target` to build a cache entry in. When the block succeeds the folder
    becomes `target` in one rename, with an ordinary folder's mode, so a killed build never leaves a half-written
    entry under the final name; when another process finished the same entry first (target/complete exists),
    its equally good copy stays. Temp folders that killed builds left behind are tidied first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)    # mkdtemp makes it private; the cache is an ordinary folder
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / complete).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale_tmp(target: Path) -> None:
    # A conversion killed midway leaves its temp folder (~0.5 GB) behind; tidy old ones up.
    for old in target.parent.glob(f".tmp-{target.name}-*"):
        try:
            if time.time() - old.stat().st_mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


_UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EEXIST}


def _into_cache(name: str, verb: str, target: Path, make) -> None:
    """Run make() (which writes `target`); an unwritable cache is one line saying how to point it elsewhere."""
    try:
        check_writable(target.parent)     # before the work, not after it
        make()
    except OSError as e:
        if e.errno not in _UNWRITABLE:
            raise
        raise HeadswapError(f"cannot {verb} model {name!r} into the model cache {target.parent} ({e.strerror}); "
                            f"set HEADSWAP_CACHE to a writable folder") from None
