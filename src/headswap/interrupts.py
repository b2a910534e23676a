"""Stops (SIGTERM, Ctrl-C) held back while native code that calls back into Python runs.

Python runs a signal's handler in the main thread at the next bytecode, wherever that is. Inside torch.export's
tracer (dynamo's frame hooks, fake tensors) that is between C++ calls that expect to finish. A SIGTERM once ended
`headswap export` with a segmentation fault instead of its cleanups (CI, under load; not reproduced in 80 tries
since), and the tracer is where an exception raised by a handler is least safe. Held, the stop takes effect when
the block ends: the same handler, the same cleanups, a few seconds later.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

HELD = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def handling(handlers: dict):
    """Run the block with these signal handlers ({signal: handler}), those before put back as it ends. Outside the
    main thread (where handlers cannot be set) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, h) for s, h in handlers.items()}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@contextmanager
def held():
    """Run the block with SIGTERM and SIGINT held: one that arrives inside is re-raised, to whatever handler was in
    place (the CLI's Terminated, KeyboardInterrupt, the default end of the process), as the block ends. Outside the
    main thread the block runs as it is."""
    arrived: list[int] = []
    # A handler set outside Python (getsignal None) could not be put back: such a signal is left as it is.
    try:
        with handling({s: lambda signum, frame: arrived.append(signum)
                       for s in HELD if signal.getsignal(s) is not None}):
            yield
    finally:    # a stop that came as the block failed still stops
        for s in dict.fromkeys(arrived):     # once each, in the order they came
            signal.raise_signal(s)
