"""A model cut into byte ranges, each in a fake package folder, as the split models ship on PyPI."""

from __future__ import annotations

import hashlib
from pathlib import Path

from headswap.models.registry import _Part


def write_parts(site: Path, data: bytes, n_parts: int, package, inner, pip, sha: bool = True):
    """Cut `data` into n_parts equal byte ranges; part n (1-based) goes to site/package(n)/inner(n), a package
    that must never be imported. Returns (part files, _Part records; sha256 recorded when `sha`)."""
    cut = [len(data) * i // n_parts for i in range(n_parts + 1)]
    files, parts = [], []
    for n in range(1, n_parts + 1):
        folder = site / package(n)
        file = folder / inner(n)
        file.parent.mkdir(parents=True)
        (folder / "__init__.py").write_text("raise RuntimeError('a model part must never be imported')\n")
        file.write_bytes(data[cut[n - 1]:cut[n]])
        files.append(file)
        digest = hashlib.sha256(file.read_bytes()).hexdigest() if sha else None
        parts.append(_Part(folder.name, pip(n), inner(n), digest))
    return files, parts
