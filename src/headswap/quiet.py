"""What `-q` (progress=False) silences beyond headswap's own bars: the progress bars that third-party code draws
with tqdm straight onto sys.stderr, where no transformers setting reaches (transformers' GGUF conversion,
model2vec's distillation)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager, redirect_stderr


@contextmanager
def no_progress_bars(quiet: bool = True):
    """With quiet: transformers' progress bars off, and sys.stderr (which a tqdm bar writes to when it is
    made) sent to /dev/null for the block. Log lines keep printing: a logging handler holds the stream it was
    made with. An exception leaves the block before the CLI prints it, so errors still show."""
    if not quiet:
        yield
        return
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    try:
        with open(os.devnull, "w") as null, redirect_stderr(null):
            yield
    finally:
        hf_logging.enable_progress_bar()


def stderr_line(msg: str) -> None:
    """A training run's line (an early stop) when no progress bar is drawn."""
    print(msg, file=sys.stderr)


def tqdm_write(msg: str) -> None:
    """A line printed above the progress bars, which a plain print would break."""
    from tqdm.auto import tqdm
    tqdm.write(msg)
