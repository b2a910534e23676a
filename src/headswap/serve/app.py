"""`headswap serve`: a saved classifier behind a small HTTP API (FastAPI + uvicorn), with micro-batching.

    headswap serve --model-dir out/spam --host 127.0.0.1 --port 8000
    curl -s localhost:8000/predict -H 'content-type: application/json' -d '{"texts": ["free entry! txt WIN"]}'

Endpoints: ``POST /predict`` ``{"texts": [...]}`` -> ``{"predictions": [{"label", "probabilities"}, ...]}`` in
input order; ``GET /health``; ``GET /labels``; ``GET /stats`` (requests, model batches, texts); the OpenAPI
schema at ``/openapi.json`` and interactive docs at ``/docs``.

Micro-batching: requests wait in an asyncio queue; one worker task takes the first, keeps collecting for up
to ``max_wait_ms`` (or until ``max_batch_size`` texts), runs ``predict_proba`` once on all their texts in a
model thread (the event loop stays free to accept and validate requests), and hands each caller its slice.
A request with more texts than ``max_batch_size`` runs as a batch of its own. If a merged batch fails, each
of its requests is retried alone, so one bad request cannot fail its neighbours. ``batching=False``
(``--no-batching``) runs one request per model call (still one at a time, for comparison).

Errors are JSON ``{"error": "one line", "detail": ...}`` with a 4xx status for anything the client can fix
(400 malformed JSON, JSON nested deeper than ``max_json_depth``, a non-UTF-8 body or an invalid
Content-Length, 401 a missing or wrong API key, 413 body too large, 415 not JSON, 422 wrong shape/types,
empty list, too many texts, a text too long or blank, 429 too many requests in flight from one client) and
500 when the model itself fails, without the exception's text (it goes to the log); the server keeps serving.

Access: with ``api_key`` (``--api-key``, or the HEADSWAP_API_KEY environment variable) every endpoint but
``/health`` wants ``Authorization: Bearer <key>``, compared in constant time. ``max_concurrent_per_client``
caps the requests one client address has in flight (429 with Retry-After beyond it). ``/health`` names the
model folder, not its path on the server's disk.

fastapi, uvicorn and pydantic are optional dependencies (``pip install 'headswap[serve]'``): they are imported
only when an app is built, so the rest of the CLI works without them.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint annotations at runtime, and the
# request model is a class local to create_app (its limits are per app).

import asyncio
import logging
import os
import time
from contextlib import asynccontextmanager
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, Callable, Sequence

import numpy as np

from headswap.errors import ConfigError, DataError, HeadswapError

log = logging.getLogger(__name__)

from headswap.serve import DEFAULTS


# ---------------------------------------------------------------------------------------------------------------
# Micro-batching (no web framework needed: testable on its own)


class _Job:
    __slots__ = ("texts", "future")

    def __init__(self, texts: list[str], future: asyncio.Future):
        self.texts, self.future = texts, future


def _fail(jobs: list[_Job], error: BaseException) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(error)


class MicroBatcher:
    """Merge concurrent ``submit(texts)`` calls into few ``predict(all_texts) -> (N, K) array`` calls.

    One worker task per event loop; ``predict`` runs in a single dedicated thread, so the model is never
    called concurrently and the event loop is never blocked by it.
    """

    def __init__(self, predict: Callable[[list[str]], Any], max_batch_size: int = 32, max_wait_ms: float = 5.0,
                 batching: bool = True):
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_wait_ms < 0:
            raise ConfigError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self.predict = predict
        self.max_batch_size, self.max_wait_ms, self.batching = max_batch_size, float(max_wait_ms), batching
        self.stats = {"requests": 0, "batches": 0, "texts": 0, "errors": 0, "largest_batch": 0,
                      "model_seconds": 0.0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._carry: _Job | None = None

    @property
    def queued(self) -> int:
        return (self._queue.qsize() if self._queue else 0) + (self._carry is not None)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._worker is not None and self._loop is loop and not self._worker.done():
            return
        if self._worker is not None:   # a previous loop (or a crashed worker): start afresh
            await self.stop()
        self._loop, self._queue, self._carry = loop, asyncio.Queue(), None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="headswap-model")
        self._worker = loop.create_task(self._run(), name="headswap-microbatcher")

    async def stop(self) -> None:
        """Cancel the worker; callers still waiting get an error. Idempotent."""
        worker, self._worker = self._worker, None
        same_loop = self._loop is asyncio.get_running_loop()
        if worker is not None and not worker.done():
            if same_loop:
                worker.cancel()
                try:
                    await worker
                except asyncio.CancelledError:
                    pass
            elif not worker.get_loop().is_closed():
                worker.get_loop().call_soon_threadsafe(worker.cancel)
        pending = [self._carry] if self._carry else []
        while self._queue is not None and not self._queue.empty():
            pending.append(self._queue.get_nowait())
        if same_loop:   # futures of another loop cannot be resolved from here
            _fail(pending, RuntimeError("the server is shutting down"))
        self._carry = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    async def submit(self, texts: Sequence[str]) -> np.ndarray:
        """Probabilities for ``texts`` (rows in order), computed in some batch with other callers' texts."""
        await self.start()
        future = self._loop.create_future()
        self._queue.put_nowait(_Job(list(texts), future))
        self.stats["requests"] += 1
        return await future   # a cancelled caller cancels its future; the worker then skips it

    async def _next_job(self) -> _Job:
        if self._carry is not None:
            job, self._carry = self._carry, None
            return job
        return await self._queue.get()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            job = await self._next_job()
            if job.future.done():
                continue
            batch, n = [job], len(job.texts)
            if self.batching:
                deadline = loop.time() + self.max_wait_ms / 1000
                while n < self.max_batch_size:
                    try:
                        nxt = self._queue.get_nowait()
                    except asyncio.QueueEmpty:
                        remaining = deadline - loop.time()
                        if remaining <= 0:
                            break
                        try:
                            nxt = await asyncio.wait_for(self._queue.get(), remaining)
                        except asyncio.TimeoutError:
                            break
                    if nxt.future.done():
                        continue
                    if n + len(nxt.texts) > self.max_batch_size:
                        self._carry = nxt   # first in line for the next batch
                        break
                    batch.append(nxt)
                    n += len(nxt.texts)
            try:
                await self._run_batch(batch)
            except asyncio.CancelledError:
                _fail(batch, RuntimeError("the server is shutting down"))
                raise
            except Exception as e:  # never let the worker die: fail this batch, keep serving
                log.exception("micro-batch worker error")
                _fail(batch, e)

    async def _run_batch(self, batch: list[_Job]) -> None:
        texts = [t for j in batch for t in j.texts]
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        self.stats["batches"] += 1
        self.stats["texts"] += len(texts)
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(texts))
        try:
            probs = await loop.run_in_executor(self._executor, self.predict, texts)
            probs = np.asarray(probs)
            if probs.ndim != 2 or probs.shape[0] != len(texts):
                raise RuntimeError(f"the model returned an array of shape {probs.shape} for {len(texts)} texts")
        except Exception as e:
            self.stats["model_seconds"] += time.perf_counter() - t0
            if len(batch) > 1:   # find the culprit: each request alone
                log.warning("a batch of %d requests failed (%s: %s); retrying them one by one",
                            len(batch), type(e).__name__, e)
                for j in batch:
                    if not j.future.done():
                        await self._run_batch([j])
                return
            self.stats["errors"] += 1
            if not batch[0].future.done():
                batch[0].future.set_exception(e)
            return
        self.stats["model_seconds"] += time.perf_counter() - t0
        start = 0
        for j in batch:
            end = start + len(j.texts)
            if not j.future.done():
                j.future.set_result(probs[start:end])
            start = end


# ---------------------------------------------------------------------------------------------------------------
# Request guard: body size and UTF-8, before FastAPI parses anything


def _json_depth_over(body: bytes, limit: int) -> bool:
    """Whether JSON text nests arrays/objects deeper than `limit` (strings skipped); the parser would
    otherwise recurse until Python's recursion limit and fail with a generic error."""
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:      # backslash
                escaped = True
            elif byte == 0x22:      # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return False


class BodyGuard:
    """Pure ASGI middleware: reject bodies over ``max_body_bytes`` (413, from Content-Length or while
    streaming, without reading the rest), an invalid Content-Length, bodies that are not UTF-8 and JSON nested
    deeper than ``max_json_depth`` (400); replay the body otherwise."""

    def __init__(self, app, max_body_bytes: int, max_json_depth: int = 32):
        self.app, self.max_body_bytes, self.max_json_depth = app, max_body_bytes, max_json_depth

    async def _reject(self, scope, receive, send, status: int, error: str, detail=None) -> None:
        from starlette.responses import JSONResponse
        await JSONResponse({"error": error, "detail": detail}, status_code=status,
                           headers={"Connection": "close"})(scope, receive, send)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        limit = self.max_body_bytes
        too_large = f"request body too large: the limit is {limit} bytes"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                    if declared < 0:
                        raise ValueError
                except ValueError:
                    return await self._reject(scope, receive, send, 400, "invalid Content-Length header",
                                              {"content_length": value.decode("latin-1")[:40]})
                if declared > limit:
                    return await self._reject(scope, receive, send, 413, too_large,
                                              {"limit_bytes": limit, "content_length": declared})
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await self._reject(scope, receive, send, 413, too_large, {"limit_bytes": limit})
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            return await self._reject(scope, receive, send, 400, f"request body is not valid UTF-8 (byte {e.start})",
                                      {"position": e.start, "reason": e.reason})
        if _json_depth_over(body, self.max_json_depth):
            return await self._reject(scope, receive, send, 400, f"JSON nested deeper than {self.max_json_depth} "
                                      f"levels", {"max_depth": self.max_json_depth})
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


class AccessGuard:
    """Pure ASGI middleware: the bearer token (401 without it) and the per-client cap on requests in flight
    (429). /health stays open for liveness probes."""

    OPEN = ("/health",)

    def __init__(self, app, api_key: str | None, max_concurrent_per_client: int):
        self.app, self.api_key, self.cap = app, api_key, max_concurrent_per_client
        self.in_flight: dict[str, int] = {}

    async def _reject(self, scope, receive, send, status: int, error: str, headers=None) -> None:
        from starlette.responses import JSONResponse
        await JSONResponse({"error": error, "detail": None}, status_code=status, headers=headers)(scope, receive, send)

    def _authorized(self, scope) -> bool:
        import hmac
        given = dict(scope.get("headers", [])).get(b"authorization", b"")
        scheme, _, token = given.partition(b" ")
        # The scheme's name is case-insensitive (RFC 7235 2.1: "bearer KEY" is "Bearer KEY"); the key is not.
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.lstrip(b" "), self.api_key.encode("utf-8"))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") in self.OPEN:
            return await self.app(scope, receive, send)
        if self.api_key and not self._authorized(scope):
            return await self._reject(scope, receive, send, 401, "missing or wrong API key: send the header "
                                      "'Authorization: Bearer <key>'", {"WWW-Authenticate": "Bearer"})
        if not self.cap:
            return await self.app(scope, receive, send)
        client = (scope.get("client") or ("unknown",))[0]
        if self.in_flight.get(client, 0) >= self.cap:
            return await self._reject(scope, receive, send, 429, f"too many requests in flight from this client "
                                      f"(the limit is {self.cap}); retry when one has finished", {"Retry-After": "1"})
        self.in_flight[client] = self.in_flight.get(client, 0) + 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight[client] -= 1
            if not self.in_flight[client]:
                del self.in_flight[client]


# ---------------------------------------------------------------------------------------------------------------
# The app


def _require_web_stack():
    try:
        import fastapi  # noqa: F401
        import pydantic  # noqa: F401
    except ImportError as e:
        raise HeadswapError(f"headswap serve needs fastapi and pydantic ({e.name} is missing): "
                            "pip install 'headswap[serve]'") from None


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _loc(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def _error_loc(err: dict) -> str:
    index = (err.get("ctx") or {}).get("index")
    if err.get("type") in ("blank_text", "invalid_unicode") and index is not None:
        return f"texts[{index}]"
    return _loc(list(err.get("loc", ()))[1:])


def _describe_error(err: dict, max_texts: int, max_chars: int) -> str:
    """One human line for one pydantic/FastAPI validation error."""
    kind, loc, value = err.get("type"), [p for p in err.get("loc", ())][1:], err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing" and loc == ["texts"]:
        return 'missing field "texts": the body must be {"texts": ["...", ...]}'
    if kind == "missing" and not loc:
        return 'the body is empty: send {"texts": ["...", ...]}'
    if kind in ("model_attributes_type", "model_type", "dict_type") and not loc:
        return f'the body must be a JSON object {{"texts": [...]}}, got {_json_type(value)}'
    if kind == "extra_forbidden":
        return f'unknown field {_loc(loc)!r}: the body must be {{"texts": [...]}}'
    if loc == ["texts"]:
        if kind == "list_type":
            return f"texts must be a list of strings, got {_json_type(value)}"
        if kind == "too_short":
            return "texts must not be empty: send at least one text"
        if kind == "too_long":
            got = f"{ctx['actual_length']} texts, " if ctx.get("actual_length") is not None else ""
            return f"too many texts: {got}the limit is {max_texts} per request"
    if len(loc) == 2 and loc[0] == "texts" and isinstance(loc[1], int):
        i = loc[1]
        if kind == "string_type":
            return f"texts[{i}] must be a string, got {_json_type(value)}"
        if kind == "string_too_long":
            return (f"text at index {i} is too long: {len(value) if isinstance(value, str) else '?'} characters, "
                    f"the limit is {max_chars}")
        if kind == "string_unicode":
            return f"text at index {i} is not valid Unicode (an unpaired surrogate escape?)"
    if kind == "blank_text":
        return f"text at index {ctx.get('index')} is empty or only whitespace"
    if kind == "invalid_unicode":
        return f"text at index {ctx.get('index')} contains an unpaired surrogate (invalid Unicode)"
    return f"{_loc(loc)}: {err.get('msg', 'invalid')}"


def _load_classifier(clf_or_model_dir, runtime: str = "auto"):
    if isinstance(clf_or_model_dir, (str, os.PathLike)):
        from headswap.api import load_model
        return load_model(clf_or_model_dir, progress=False, runtime=runtime), str(Path(clf_or_model_dir))
    clf = clf_or_model_dir
    for attr in ("predict_proba", "labels_"):
        if not hasattr(clf, attr):
            raise ConfigError(f"create_app needs a fitted TextClassifier or a model directory; "
                              f"{type(clf).__name__} has no {attr}")
    if getattr(clf, "progress", False):
        clf.progress = False   # no tqdm bar per request
    return clf, None


def create_app(clf_or_model_dir, max_batch_size: int = DEFAULTS["max_batch_size"],
               max_wait_ms: float = DEFAULTS["max_wait_ms"],
               max_texts_per_request: int = DEFAULTS["max_texts_per_request"],
               max_text_chars: int = DEFAULTS["max_text_chars"], max_body_bytes: int = DEFAULTS["max_body_bytes"],
               batching: bool = True, api_key: str | None = None,
               max_concurrent_per_client: int = DEFAULTS["max_concurrent_per_client"],
               max_json_depth: int = DEFAULTS["max_json_depth"], runtime: str = "auto"):
    """A FastAPI app serving one classifier: a fitted TextClassifier, or a directory written by ``save``
    (loaded here, once). ``app.state.classifier`` and ``app.state.batcher`` hold both; see the module doc.
    A classifier passed in has its progress bars switched off (no tqdm bar per request); a directory is loaded
    with `runtime` (headswap.runtime.RUNTIMES)."""
    _require_web_stack()
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
    from pydantic_core import PydanticCustomError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from headswap.data.stream import decisions

    for name, value in (("max_texts_per_request", max_texts_per_request), ("max_text_chars", max_text_chars),
                        ("max_body_bytes", max_body_bytes), ("max_json_depth", max_json_depth)):
        if int(value) < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    clf, model_dir = _load_classifier(clf_or_model_dir, runtime)
    labels = [str(v) for v in clf.labels_]
    strategy, model_name = str(getattr(clf, "strategy", "")), str(getattr(clf, "model", ""))
    # Folder names only: /health is unauthenticated, and absolute paths tell a client about the server's disk.
    model_name = Path(model_name).name if os.sep in model_name else model_name
    model_dir_name = Path(model_dir).resolve().name if model_dir else None
    from headswap.oos import scored_proba, split_scored
    # A model that rejects by a score other than softmax gets it as an extra column, sliced per request with the rest.
    batcher = MicroBatcher(scored_proba(clf), max_batch_size=max_batch_size, max_wait_ms=max_wait_ms,
                           batching=batching)

    # ---- schema -----------------------------------------------------------------------------------------
    Text = Annotated[str, StringConstraints(strict=True, max_length=max_text_chars)]

    class PredictRequest(BaseModel):
        model_config = ConfigDict(extra="forbid",
                                  json_schema_extra={"examples": [{"texts": ["free entry! txt WIN to 80086",
                                                                             "see you at noon"]}]})
        texts: list[Text] = Field(min_length=1, max_length=max_texts_per_request,
                                  description=f"1 to {max_texts_per_request} non-blank texts of at most "
                                              f"{max_text_chars} characters each")

        @field_validator("texts")
        @classmethod
        def _not_blank(cls, texts: list[str]) -> list[str]:
            for i, t in enumerate(texts):
                if not t.strip():
                    raise PydanticCustomError("blank_text", "text at index {index} is empty or only whitespace",
                                              {"index": i})
                try:
                    t.encode("utf-8")
                except UnicodeEncodeError:
                    raise PydanticCustomError("invalid_unicode", "text at index {index} contains an unpaired "
                                              "surrogate", {"index": i}) from None
            return texts

    class Prediction(BaseModel):
        label: str | None = Field(default=None, description="the most probable class (single-label models)")
        labels: list[str] | None = Field(default=None, description="multi-label models: every label whose "
                                         "probability reaches its tuned threshold (possibly none)")
        probabilities: dict[str, float] = Field(description="probability of every class, in /labels order")

    class PredictResponse(BaseModel):
        predictions: list[Prediction] = Field(description="one per input text, in input order")

    class HealthResponse(BaseModel):
        status: str
        model: str
        strategy: str
        model_dir: str | None = Field(default=None, description="the served model's folder name")
        labels: int = Field(description="number of classes")
        batching: bool
        max_batch_size: int
        max_wait_ms: float

    class LabelsResponse(BaseModel):
        labels: list[str] = Field(description="class names; the key order of every probabilities object")

    class StatsResponse(BaseModel):
        requests: int = Field(description="prediction requests accepted (valid ones)")
        batches: int = Field(description="model calls made (merged batches, plus retries of failed ones)")
        texts: int = Field(description="texts run through the model")
        errors: int = Field(description="requests whose prediction failed")
        largest_batch: int = Field(description="most texts in one model call")
        queued: int = Field(description="requests waiting now")
        model_seconds: float = Field(description="seconds spent inside the model")

    class ErrorResponse(BaseModel):
        error: str = Field(description="what went wrong, in one line")
        detail: Any = Field(default=None, description="structured details (validation errors, limits)")

    # ---- app --------------------------------------------------------------------------------------------
    @asynccontextmanager
    async def lifespan(app):
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="headswap classifier", version=_version(), lifespan=lifespan,
                  description=f"{strategy} classifier on {model_name}; classes: {', '.join(labels)}.")
    app.state.classifier, app.state.batcher, app.state.labels = clf, batcher, labels
    app.add_middleware(BodyGuard, max_body_bytes=int(max_body_bytes), max_json_depth=int(max_json_depth))
    # Added last, so it runs first: an unauthorised or over-limit request is refused before its body is read.
    app.add_middleware(AccessGuard, api_key=api_key or None, max_concurrent_per_client=int(max_concurrent_per_client))

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError):
        errors = list(exc.errors())
        bad_json = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if bad_json is not None:
            loc = bad_json.get("loc", ())
            pos = loc[1] if len(loc) > 1 else None
            reason = (bad_json.get("ctx") or {}).get("error", "invalid JSON")
            return JSONResponse({"error": f"malformed JSON: {reason} (at character {pos})",
                                 "detail": {"position": pos, "reason": reason}}, status_code=400)
        if any(isinstance(e.get("input"), (bytes, bytearray)) and len(e.get("loc", ())) <= 1 for e in errors):
            ctype = request.headers.get("content-type") or "none"
            return JSONResponse({"error": f"the body must be JSON sent with Content-Type: application/json "
                                          f"(got Content-Type: {ctype})", "detail": None}, status_code=415)
        lines = [_describe_error(e, max_texts_per_request, max_text_chars) for e in errors]
        detail = [{"loc": _error_loc(e), "type": e.get("type"), "msg": line}
                  for e, line in zip(errors[:20], lines)]
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        return JSONResponse({"error": lines[0] + more, "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException):
        return JSONResponse({"error": str(exc.detail), "detail": None}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"error": "internal server error", "detail": None}, status_code=500)

    errors_doc = {400: {"model": ErrorResponse, "description": "malformed JSON or a body that is not UTF-8"},
                  413: {"model": ErrorResponse, "description": f"body over {max_body_bytes} bytes"},
                  415: {"model": ErrorResponse, "description": "body not sent as application/json"},
                  422: {"model": ErrorResponse, "description": "wrong shape or types, no texts, too many texts, "
                                                               "a text too long or blank"},
                  500: {"model": ErrorResponse, "description": "the model failed on this request"}}

    @app.post("/predict", response_model=PredictResponse, response_model_exclude_none=True, responses=errors_doc,
              summary="Classify texts", description="Probabilities of every class for each text, in input order. "
              "Concurrent requests are merged into one model batch (micro-batching).")
    async def predict(body: PredictRequest):
        try:
            probs, score = split_scored(clf, await batcher.submit(body.texts))
        except DataError as e:
            return JSONResponse({"error": str(e), "detail": None}, status_code=422)
        except Exception as e:
            # The exception's text stays in the server's log: it can hold paths and internals.
            log.error("prediction failed: %s: %s", type(e).__name__, e)
            return JSONResponse({"error": "prediction failed", "detail": None}, status_code=500)
        if probs.shape[1] != len(labels):
            log.error("the model returned %d probabilities per text for %d labels", probs.shape[1], len(labels))
            return JSONResponse({"error": "prediction failed", "detail": None}, status_code=500)
        key, answers = decisions(clf, probs, score)   # "labels" (multi-label) or "label", as predict writes them
        return {"predictions": [{key: answer, "probabilities": dict(zip(labels, row))}
                                for answer, row in zip(answers, probs.tolist())]}

    @app.get("/health", response_model=HealthResponse, summary="Liveness and what is being served")
    async def health():
        return {"status": "ok", "model": model_name, "strategy": strategy, "model_dir": model_dir_name,
                "labels": len(labels), "batching": batcher.batching, "max_batch_size": batcher.max_batch_size,
                "max_wait_ms": batcher.max_wait_ms}

    @app.get("/labels", response_model=LabelsResponse, summary="Class names, in probability order")
    async def get_labels():
        return {"labels": labels}

    @app.get("/stats", response_model=StatsResponse, summary="Counters: requests, model batches, texts")
    async def stats():
        return {**batcher.stats, "queued": batcher.queued}

    return app


def _version() -> str:
    from headswap import __version__
    return __version__
