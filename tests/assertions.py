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


def same_scores(reloaded, fitted, atol: float = 0.0) -> None:
    """A reload's scores against the fitted model's: equal (within `atol`) on a CPU machine. On a GPU machine the
    fitted model predicts on the GPU and its reload on the CPU, whose float kernels differ in the last bits (up to
    1.1e-6 on an H200), so there the bound is 1e-5."""
    import numpy as np
    import torch

    np.testing.assert_allclose(reloaded, fitted, rtol=0, atol=max(atol, 1e-5 if torch.cuda.is_available() else 0.0))
