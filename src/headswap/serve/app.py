"""`headswap serve`: a saved classifier behind a small HTTP API (FastAPI + uvicorn), with micro-batching.

    headswap serve --model-dir out/spam --host 127.0.0.1 --port 8000
    curl -s localhost:8000/predict -H 'content-type: application/json' -d '{"texts": ["free entry! txt WIN"]}'

Endpoints: ``POST /predict`` ``{"texts": [...]}`` -> ``{"predictions": [{"label", "probabilities"}, ...]}`` in
input order; ``POST /explain`` ``{"texts": [...], "label": optional, "top": 10, "steps": 32}`` ->
``{"explanations": [{"text", "method", "labels": [{"label", "probability", "words": [{"word", "score"}, ...]}]},
...]}`` (headswap.explain);
``GET /health``; ``GET /labels``; ``GET /stats`` (requests, model batches, texts, explanations); the
OpenAPI schema at ``/openapi.json`` and interactive docs at ``/docs``.

Micro-batching (headswap.serve.batching): concurrent requests are merged into few model calls, run in a model
thread so the event loop stays free; ``batching=False`` (``--no-batching``) runs one request per model call.
Explanations run one at a time in a thread of their own, beside the predictions (headswap.serve.explaining), with
their own lower limits (``max_explain_texts``, ``max_explain_text_chars``, ``max_explain_steps``); an /explain
while one runs gets 429 with Retry-After, one during shutdown 503.

Errors are JSON ``{"error": "one line", "detail": ...}`` with a 4xx status for anything the client can fix
(400 malformed JSON, JSON nested deeper than ``max_json_depth``, a non-UTF-8 body or an invalid
Content-Length, 401 a missing or wrong API key, 413 body too large, 415 not JSON, 422 wrong shape/types,
empty list, too many texts, a text too long or blank, 429 too many requests in flight from one client or an
explanation already running) and
500 when the model itself fails, without the exception's text (it goes to the log); the server keeps serving.
Body limits, the API key and the per-client cap are checked before FastAPI parses anything (headswap.serve.guards);
validation errors become one line each (headswap.serve.validation).

Access: with ``api_key`` (``--api-key``, or the HEADSWAP_API_KEY environment variable) every endpoint but
``/health`` wants ``Authorization: Bearer <key>``, compared in constant time. ``max_concurrent_per_client``
caps the requests one client address has in flight (429 with Retry-After beyond it). ``/health`` names the
model folder, not its path on the server's disk.

fastapi, uvicorn and pydantic are optional dependencies (``pip install 'headswap[serve]'``): they are imported
only when an app is built, so the rest of the CLI works without them.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint annotations at runtime, and the
# request model is a class local to create_app (its limits are per app).

import json
import logging
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from headswap.errors import ConfigError, DataError, HeadswapError
from headswap.serve import DEFAULTS
# MicroBatcher, BodyGuard and AccessGuard are importable from here too, as they were before the split.
from headswap.serve.batching import MicroBatcher
from headswap.serve.explaining import RETRY_AFTER_S, ExplainWorker, Refused
from headswap.serve.guards import AccessGuard, BodyGuard
from headswap.serve.validation import describe_error, error_loc

log = logging.getLogger(__name__)


def _require_web_stack():
    try:
        import fastapi  # noqa: F401
        import pydantic  # noqa: F401
    except ImportError as e:
        raise HeadswapError(f"headswap serve needs fastapi and pydantic ({e.name} is missing): "
                            "pip install 'headswap[serve]'") from None


def _load_classifier(clf_or_model_dir, runtime: str = "auto"):
    if isinstance(clf_or_model_dir, (str, os.PathLike)):
        from headswap.classifier.estimator import load_model
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
               max_json_depth: int = DEFAULTS["max_json_depth"], runtime: str = "auto",
               max_explain_texts: int = DEFAULTS["max_explain_texts"],
               max_explain_text_chars: int = DEFAULTS["max_explain_text_chars"],
               max_explain_steps: int = DEFAULTS["max_explain_steps"]):
    """A FastAPI app serving one classifier: a fitted TextClassifier, or a directory written by ``save``
    (loaded here, once). ``app.state.classifier``, ``app.state.batcher`` and ``app.state.explainer`` hold them;
    see the module doc.
    A classifier passed in has its progress bars switched off (no tqdm bar per request); a directory is loaded
    with `runtime` (headswap.classifier.runtime.RUNTIMES)."""
    _require_web_stack()
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
    from pydantic_core import PydanticCustomError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from headswap.explain import STEPS
    from headswap.jobs.predictions import decisions

    for name, value, least in (("max_texts_per_request", max_texts_per_request, 1),
                               ("max_text_chars", max_text_chars, 1), ("max_body_bytes", max_body_bytes, 1),
                               ("max_json_depth", max_json_depth, 1), ("max_explain_texts", max_explain_texts, 1),
                               ("max_explain_text_chars", max_explain_text_chars, 1),
                               ("max_explain_steps", max_explain_steps, 2)):
        if int(value) < least:
            raise ConfigError(f"{name} must be >= {least}, got {value}")
    clf, model_dir = _load_classifier(clf_or_model_dir, runtime)
    labels = [str(v) for v in clf.labels_]
    strategy, model_name = str(getattr(clf, "strategy", "")), str(getattr(clf, "model", ""))
    # Folder names only: /health is unauthenticated, and absolute paths tell a client about the server's disk.
    model_name = Path(model_name).name if os.sep in model_name else model_name
    model_dir_name = Path(model_dir).resolve().name if model_dir else None
    from headswap.classifier.reject_option import scored_proba, split_scored
    # A model that rejects by a score other than softmax gets it as an extra column, sliced per request with the rest.
    batcher = MicroBatcher(scored_proba(clf), max_batch_size=max_batch_size, max_wait_ms=max_wait_ms,
                           batching=batching)
    explainer = ExplainWorker(clf)

    # ---- schema -----------------------------------------------------------------------------------------
    def texts_field(max_texts: int, max_chars: int):
        return Annotated[list[Annotated[str, StringConstraints(strict=True, max_length=max_chars)]],
                         Field(min_length=1, max_length=max_texts,
                               description=f"1 to {max_texts} non-blank texts of at most {max_chars} characters "
                                           f"each")]

    class TextsRequest(BaseModel):
        @field_validator("texts", check_fields=False)
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

    class PredictRequest(TextsRequest):
        model_config = ConfigDict(extra="forbid",
                                  json_schema_extra={"examples": [{"texts": ["free entry! txt WIN to 80086",
                                                                             "see you at noon"]}]})
        texts: texts_field(max_texts_per_request, max_text_chars)

    class ExplainRequest(TextsRequest):
        model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"texts": ["free entry! txt WIN"]}]})
        texts: texts_field(max_explain_texts, max_explain_text_chars)
        label: str | None = Field(default=None, description="explain this label (default: the predicted one(s))")
        top: int = Field(default=10, ge=1, le=1000, description="words per text and label, by magnitude")
        steps: int = Field(default=min(STEPS, max_explain_steps), ge=2, le=max_explain_steps,
                           description="Integrated Gradients' interpolation steps (torch models; more is closer to "
                                       "exact and slower)")

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
        explanations: int = Field(description="/explain requests answered")
        explain_refused: int = Field(description="/explain requests refused (429) because one was running")
        explaining: bool = Field(description="whether an explanation is running now")

    class ErrorResponse(BaseModel):
        error: str = Field(description="what went wrong, in one line")
        detail: Any = Field(default=None, description="structured details (validation errors, limits)")

    # ---- app --------------------------------------------------------------------------------------------
    @asynccontextmanager
    async def lifespan(app):
        await batcher.start()
        explainer.start()
        try:
            yield
        finally:
            explainer.stop()
            await batcher.stop()

    app = FastAPI(title="headswap classifier", version=_version(), lifespan=lifespan,
                  description=f"{strategy} classifier on {model_name}; classes: {', '.join(labels)}.")
    app.state.classifier, app.state.batcher, app.state.explainer, app.state.labels = clf, batcher, explainer, labels
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
        limits = ((max_explain_texts, max_explain_text_chars) if request.url.path.endswith("/explain") else
                  (max_texts_per_request, max_text_chars))
        lines = [describe_error(e, *limits) for e in errors]
        detail = [{"loc": error_loc(e), "type": e.get("type"), "msg": line}
                  for e, line in zip(errors[:20], lines)]
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        return JSONResponse({"error": lines[0] + more, "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException):
        cause = exc.__cause__       # FastAPI's "There was an error parsing the body" for what json.loads refused
        if exc.status_code == 400 and isinstance(cause, ValueError) and not isinstance(cause, json.JSONDecodeError):
            from headswap.data.jsonline import unreadable_number
            reason = unreadable_number(cause)
            return JSONResponse({"error": f"malformed JSON: {reason}", "detail": {"reason": reason}}, status_code=400)
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

    busy_doc = {429: {"model": ErrorResponse, "description": "an explanation is already running (Retry-After)"},
                503: {"model": ErrorResponse, "description": "the server is shutting down"}}

    @app.post("/explain", responses={**errors_doc, **busy_doc}, summary="Which words drove each text's label",
              description="Per text: for the predicted label (each predicted label of a multi-label model, or "
              "`label`), the `top` words with signed scores (headswap.explain). One explanation at a time, in a "
              "thread of its own: predictions keep their pace meanwhile, and another /explain gets 429.")
    async def explain_texts(body: ExplainRequest):
        try:
            explanations = await explainer.explain(body.texts, body.label, body.steps)
        except Refused as e:
            return JSONResponse({"error": str(e), "detail": None}, status_code=e.status,
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        except (DataError, HeadswapError) as e:    # an unknown label, a model explain cannot take
            return JSONResponse({"error": str(e), "detail": None}, status_code=422)
        except Exception as e:
            log.error("explanation failed: %s: %s", type(e).__name__, e)
            return JSONResponse({"error": "explanation failed", "detail": None}, status_code=500)
        return {"explanations": [ex.to_dict(top=body.top) for ex in explanations]}

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
        return {**batcher.stats, "queued": batcher.queued, **explainer.stats, "explaining": explainer.running}

    return app


def _version() -> str:
    from headswap import __version__
    return __version__
