"""`headswap serve`: a saved classifier behind an HTTP API (see headswap.serve.app)."""

from __future__ import annotations

import argparse
import sys

from headswap.cli.options import add_runtime, float_at_least, int_at_least
from headswap.errors import HeadswapError
from headswap.serve import API_KEY_ENV, DEFAULTS

HELP = "serve a saved classifier over HTTP (POST /predict, micro-batching)"
DESCRIPTION = ("Serve a saved classifier over HTTP with FastAPI + uvicorn: POST /predict, /explain, GET /health, "
               "/labels, /stats; OpenAPI docs at /docs. Needs `pip install 'headswap[serve]'`.")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _port(text: str) -> int:
    value = int_at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True, help="a directory written by `headswap train` (loaded once)")
    add_runtime(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--api-key", default=None, help=f"require 'Authorization: Bearer KEY' on every endpoint but "
                   f"/health (default: the {API_KEY_ENV} environment variable; prefer it: a flag is visible to other "
                   f"users in the process list; unset: no authentication)")
    p.add_argument("--max-concurrent-per-client", type=int_at_least(0),
                   default=DEFAULTS["max_concurrent_per_client"], metavar="N",
                   help="requests one client address may have in flight; more get 429 (default %(default)s: "
                   "no limit)")
    p.add_argument("--port", type=_port, default=8000, help="default 8000")
    p.add_argument("--max-batch-size", type=int_at_least(1), default=DEFAULTS["max_batch_size"],
                   help="most texts merged into one model call (default %(default)s)")
    p.add_argument("--max-wait-ms", type=float_at_least(0), default=DEFAULTS["max_wait_ms"],
                   help="how long the first request of a batch waits for others (default %(default)s; 0 = merge "
                   "only what is already queued)")
    p.add_argument("--no-batching", action="store_true", help="one request per model call (for comparison)")
    p.add_argument("--max-texts", type=int_at_least(1), default=DEFAULTS["max_texts_per_request"],
                   help="most texts per request (default %(default)s)")
    p.add_argument("--max-text-chars", type=int_at_least(1), default=DEFAULTS["max_text_chars"],
                   help="most characters per text (default %(default)s)")
    p.add_argument("--max-body-bytes", type=int_at_least(1), default=DEFAULTS["max_body_bytes"],
                   help="largest request body (default %(default)s)")
    p.add_argument("--max-explain-texts", type=int_at_least(1), default=DEFAULTS["max_explain_texts"],
                   help="most texts per /explain request (default %(default)s); explanations run one at a time, "
                   "beside the predictions, and another /explain meanwhile gets 429")
    p.add_argument("--max-explain-text-chars", type=int_at_least(1), default=DEFAULTS["max_explain_text_chars"],
                   help="most characters per text to explain (default %(default)s)")
    p.add_argument("--max-explain-steps", type=int_at_least(2), default=DEFAULTS["max_explain_steps"],
                   help="most Integrated Gradients steps an /explain request may ask for (default %(default)s)")
    p.add_argument("--threads", type=int_at_least(1),
                   help="torch intra-op threads (default: torch's choice; ONNX Runtime takes its own)")
    p.add_argument("--read-timeout", type=float_at_least(0, strict=True), default=DEFAULTS["read_timeout_s"],
                   metavar="SECONDS", help="close a connection whose request (headers and body) has not fully "
                   "arrived SECONDS after it began (slow or stalled clients; default %(default)s)")
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug", "trace"],
                   default="info")
    p.add_argument("--no-access-log", action="store_true", help="do not log every request")


def run(args) -> int:
    try:
        import uvicorn
    except ImportError:
        raise HeadswapError("headswap serve needs uvicorn: pip install 'headswap[serve]'") from None
    from headswap.serve.app import create_app
    from headswap.serve.checks import api_key as given_key
    from headswap.serve.checks import check_bind
    from headswap.serve.memory import fix_malloc_mmap_threshold
    from headswap.serve.timeouts import read_timeout_protocol
    api_key = given_key(args.api_key)
    check_bind(args.host, args.port)        # before the model loads: a bad host or a busy port is one line
    if args.api_key is not None:
        print(f"warning: --api-key is visible to other users of this machine in the process list (ps); set the "
              f"{API_KEY_ENV} environment variable instead", file=sys.stderr)
    # Before the model loads: otherwise RSS climbs with every new request shape (headswap.serve.memory).
    fix_malloc_mmap_threshold()
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    app = create_app(args.model_dir, max_batch_size=args.max_batch_size, max_wait_ms=args.max_wait_ms,
                     max_texts_per_request=args.max_texts, max_text_chars=args.max_text_chars,
                     max_body_bytes=args.max_body_bytes, batching=not args.no_batching, api_key=api_key,
                     max_concurrent_per_client=args.max_concurrent_per_client, runtime=args.runtime,
                     max_explain_texts=args.max_explain_texts, max_explain_text_chars=args.max_explain_text_chars,
                     max_explain_steps=args.max_explain_steps)
    if args.host not in LOOPBACK and not api_key:
        print(f"warning: binding {args.host}: the API has no authentication (--api-key) and is reachable from "
              "other machines", file=sys.stderr)
    mode = ("no batching" if args.no_batching else
            f"micro-batching up to {args.max_batch_size} texts / {args.max_wait_ms:g} ms")
    print(f"serving {app.state.classifier.strategy} model from {args.model_dir} on http://{args.host}:{args.port} "
          f"({mode}); docs at /docs", file=sys.stderr)
    # h11 with a read deadline: uvicorn alone never closes a connection whose request stalls half-sent.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=not args.no_access_log,
                http=read_timeout_protocol(args.read_timeout))
    return 0
