"""Small assertions shared by test modules."""

from __future__ import annotations

from pathlib import Path


def one_line(e) -> str:
    """The message of a pytest.raises ExceptionInfo, checked to be one line with no traceback in it."""
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def leftovers(folder: Path) -> list[str]:
    """What a folder holds (nothing when it does not exist): a failed write must leave nothing behind."""
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
