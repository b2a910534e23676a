"""Running the command line in-process, as a test reads it."""

from __future__ import annotations

import io
import socket
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


def free_port() -> int:
    """A loopback port free at this moment: serve tests never assume a fixed one (8000 may be taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
