"""The `headswap` command: one parser; each command is a module with HELP, add_arguments(parser) and
run(args). Building the parser imports no torch: `headswap --help` answers at once, and only the command
that runs loads what it needs. User errors print one clear line (exit 2) instead of a traceback."""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import re
import signal
import sys
import time

from headswap.errors import HeadswapError
from headswap.interrupts import handling

COMMANDS = ("demo", "train", "eval", "predict", "explain", "export", "distill", "bench", "auto", "audit", "suggest",
            "serve", "models")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (naming the option) instead of the usage block plus a line."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="headswap", description="Turn a small pretrained transformer into a "
                                     "text classifier, and measure which way of doing it wins.")
    from headswap import __version__
    parser.add_argument("--version", action="version", version=f"headswap {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log details (model loading, caches)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        command = importlib.import_module(f"headswap.cli.{name}")
        p = sub.add_parser(name, help=command.HELP, description=getattr(command, "DESCRIPTION", command.HELP))
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    return parser


def _negative_values(argv: list[str]) -> list[str]:
    """`--budget -5m` as `--budget=-5m`: argparse takes a value that starts with '-' for an option and answers
    "expected one argument"; joined, the value reaches its own check and its own message."""
    out = []
    for arg in argv:
        if out and out[-1] in VALUE_OPTIONS and re.match(r"^-\.?\d", arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI cancel, `timeout`, `kill`), raised where the program is, as Ctrl-C's KeyboardInterrupt is: the
    same cleanups then run (the .OUT.lock file and the folders made for it removed, a half-written model folder
    deleted, the complete rows of `predict --out` kept). Python's default for SIGTERM ends the process at once,
    without any of them."""


def _on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)    # a second SIGTERM must not cut the cleanups short (SIGKILL can)
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    """argv None: the process's own command line, and the process ends when this returns."""
    # When the command started, for a time budget (auto's): the process's start when it is this command, so Python's
    # and the imports' seconds count as the user waits them; the call's when main runs inside another program.
    # Read before parsing: the parser's imports are part of what the user waits.
    started = time.perf_counter()
    if argv is None:
        from headswap.auto.budget import process_start
        started = process_start()
    args = build_parser().parse_args(_negative_values(list(sys.argv[1:] if argv is None else argv)))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    args.started = started
    try:
        with handling({signal.SIGTERM: _on_sigterm}):
            return args.func(args)
    except HeadswapError as e:
        print(f"headswap {args.command}: error: {e}", file=sys.stderr)
        return 2
    except Terminated:
        print("terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`headswap predict | head`): stop quietly, as Unix tools do. Python's own
        # flush of stdout at exit would raise again, so stdout is pointed at devnull first (Python docs,
        # "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        # The machine, not the input: a full disk, a read-only or missing folder, a permission.
        if args.verbose:
            raise
        where = f"{e.filename}: " if e.filename else ""
        what = e.strerror or (str(e).strip().splitlines() or [type(e).__name__])[0]
        print(f"headswap {args.command}: error: {where}{what}", file=sys.stderr)
        return 2
    finally:
        if argv is None:
            # The process exits next: its final garbage collection over torch's and transformers' objects took
            # 1.4-2.9 s on 2 cores, 0.1-0.5 s with them frozen (the memory goes back to the system all the same).
            gc.freeze()


VALUE_OPTIONS = ("--budget",)     # options whose value may be written negative (and is then refused by its check)


if __name__ == "__main__":
    sys.exit(main())
