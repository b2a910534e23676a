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


def signalled(argv, ready, sig, limit: float = 240.0, stdin=None):
    """Run `headswap ARGV` in a subprocess, send it `sig` once ready(stderr so far) is true (polled), and return
    (exit code, stderr). stdin: text written to the command first (its stdin is then left open, so that a
    command reading it waits for more). Fails the test if the command ends first or ready() never comes."""
    import os
    import subprocess
    import sys
    import tempfile
    import time

    # PYTHONFAULTHANDLER: a crash (a segmentation fault in native code) prints where each thread was to the
    # stderr the failing assertion shows.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "PYTHONFAULTHANDLER": "1"}
    with tempfile.TemporaryFile("a+") as err:     # O_APPEND: the child writes at the end whatever we read
        p = subprocess.Popen([sys.executable, "-m", "headswap.cli", *argv], env=env, stderr=err,
                             stdout=subprocess.DEVNULL, stdin=subprocess.PIPE, text=True)
        try:
            if stdin is not None:
                p.stdin.write(stdin)
                p.stdin.flush()
            deadline = time.monotonic() + limit
            while not ready(_read(err)):
                if p.poll() is not None:
                    err.seek(0)
                    raise AssertionError(f"headswap {argv[0]} ended (exit {p.returncode}) before the signal:\n"
                                         f"{err.read()}")
                assert time.monotonic() < deadline, f"not ready after {limit} s"
                time.sleep(0.02)
            p.send_signal(sig)
            rc = p.wait(60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdin.close()
        err.seek(0)
        return rc, err.read()


def _read(f) -> str:
    f.seek(0)
    text = f.read()
    f.seek(0, 2)
    return text
