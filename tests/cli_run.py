"""Running the command line in-process, as a test reads it."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

from headswap.cli.parser import main


def invoke(argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `headswap ARGV`, run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()
