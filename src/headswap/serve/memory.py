"""Keep a long-running server's memory flat: a fixed glibc mmap threshold.

Why: glibc serves allocations above ``M_MMAP_THRESHOLD`` (128 KiB at start) with mmap and returns them on
free, but by default it raises that threshold to the size of each mmapped block freed (up to 32 MiB), and the
trim threshold with it. After the first large torch activation is freed, activations up to that size come
from the heap instead; each request has another shape (batch size x sequence length), so freed blocks do not
fit the next ones and the heap keeps growing. Setting the threshold explicitly switches that adjustment off.

Measured with benchmarks/serve_memory.py on a MiniLM encoder-mlp model (requests of 1-8 texts of 1-60 words;
results in benchmarks/results/serve_memory.json): `headswap serve`, 800 requests, RSS 611 -> 916 MB and still
climbing before, 570 -> 577 MB with this; MALLOC_ARENA_MAX=2 did not help (604 -> 950), so it is not
per-thread arenas. predict_proba alone (no HTTP) grows the same way (600 -> 763 MB over 1,627 calls, still
rising), so it is torch's allocations, not the web stack. The price is page faults on fresh mmapped memory:
at 1 torch thread, 400 calls took 58 s at a 1 MiB threshold against 50 s before (+14%); 128 KiB cost +30%,
4 MiB was as slow as 1 MiB and not flat, malloc_trim after every call +38%. A user's own
MALLOC_MMAP_THRESHOLD_ (in bytes) is left alone, to trade the other way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3        # glibc <malloc.h>
MMAP_THRESHOLD = 1 << 20      # larger activations are mmapped, smaller ones come from the heap
ENV = "MALLOC_MMAP_THRESHOLD_"


def fix_malloc_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at `threshold` bytes for this process. True if set; False where there is no
    glibc (macOS, Windows, musl) or the user already chose a value with MALLOC_MMAP_THRESHOLD_ (theirs stands)."""
    if os.environ.get(ENV):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if not hasattr(libc, "gnu_get_libc_version"):   # mallopt exists elsewhere with other parameter numbers
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, int(threshold)))
    if not ok:
        log.debug("mallopt(M_MMAP_THRESHOLD, %d) failed", threshold)
    return ok
