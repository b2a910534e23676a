"""The split-folder convention: a data folder holds train.csv, validation.csv and test.csv (as ../shared/data).

train, eval, distill, bench and auto all read such a folder through split_files (or data_files, which also takes
a single file as the train split), so the file names and what a command says when one is missing are written
once, here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from headswap.errors import DataError

FILES = {"train": "train.csv", "validation": "validation.csv", "test": "test.csv"}


def split_files(folder, required: Sequence[str] = (), who: str = "a data folder") -> dict[str, Path]:
    """{split: path} for each of FILES present in `folder`, in FILES' order.

    DataError when the folder does not exist, lacks one of the `required` splits (`who` needs them, the
    message says), or holds none of the files."""
    folder = Path(folder)
    needs = " and ".join(FILES[s] for s in required)
    if not folder.is_dir():
        raise DataError(f"data folder {str(folder)!r} does not exist" + (f" (expected {needs} in it)" if needs else ""))
    found = {split: folder / name for split, name in FILES.items() if (folder / name).is_file()}
    missing = [str(folder / FILES[s]) for s in required if s not in found]
    if missing:
        optional = " and ".join(name for split, name in FILES.items() if split not in required)
        raise DataError(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: {who} needs "
                        f"{needs}" + (f" and may have {optional}" if optional else ""))
    if not found:
        raise DataError(f"{folder} holds none of {', '.join(FILES.values())}")
    return found


def data_files(path, required: Sequence[str] = (), who: str = "a data folder") -> dict[str, Path]:
    """{split: path}: a folder's split files (split_files), or a single file as the train split."""
    p = Path(path)
    if p.is_dir():
        return split_files(p, required, who)
    if not p.exists():
        raise DataError(f"{p}: no such file or directory")
    return {"train": p}
