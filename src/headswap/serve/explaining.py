"""/explain off the prediction path: one explanation at a time, in a thread of its own, on a private copy of the
model. A request that comes while one runs is refused at once (429, no queue); one after shutdown gets 503.

Why not the model thread: an explanation costs hundreds of forward and backward passes (Integrated Gradients:
`steps` of them per text and label), and in the model thread every /predict waited behind it (16 texts of 600
characters on a MiniLM model: 47.8 s). Why a copy: the gradients hook the embedding layer and switch the module
to eval for their whole call, and a cross-encoder's tokenizer turns its truncation on and off between calls; the
copy shares the weights (they take no more memory) but has its own modules, hooks and tokenizer, so the
predictions running beside it see none of that. Why a lower priority (Linux): on a CPU the explanation's torch
threads would otherwise take half of the cores from the predictions; niced, they get what predictions leave.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger(__name__)

NICE = 10              # added to the explanation thread's niceness (and its OpenMP threads', which inherit it)
RETRY_AFTER_S = 5      # the Retry-After of a refused /explain: explanations take seconds, not milliseconds


class Refused(Exception):
    """An /explain the worker cannot take now: ``status`` 429 (one is running) or 503 (shutting down)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def private_copy(model):
    """A copy of `model` to explain with while predictions run: the same weights, but its own torch modules and
    tokenizer (headswap.classifier.build.Built.private). A blend's members each get one; a model that holds no
    built parts (TF-IDF: scikit-learn only reads) is returned as it is."""
    if hasattr(model, "members_"):      # a Blend
        own = {id(m): private_copy(m) for m, _ in model.members_}
        view = copy.copy(model)
        view.members_ = [(own[id(m)], w) for m, w in model.members_]
        view.model_ = own.get(id(model.model_), model.model_)
        return view
    built = getattr(model, "built_", None)   # (TextClassifier's module_, encoder_, ... are views of it)
    if built is None:
        return model
    view = copy.copy(model)
    view.built_ = built.private()
    return view


def _lower_priority() -> None:
    """Nice the calling thread (Linux only: elsewhere PRIO_PROCESS would nice the whole server)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + NICE, 19))
    except OSError as e:
        log.debug("could not lower the explanation thread's priority: %s", e)


class ExplainWorker:
    """headswap.explain.explain for the server, one call at a time, in its own thread (see the module doc)."""

    def __init__(self, model):
        self.model, self._private = model, None
        self.stats = {"explanations": 0, "explain_refused": 0}
        self._executor: ThreadPoolExecutor | None = None
        self._job: Future | None = None
        self._closed = False

    @property
    def running(self) -> bool:
        # The thread's own future: a client that hung up does not free the worker before its explanation ends.
        return self._job is not None and not self._job.done()

    def start(self) -> None:
        self._closed = False

    def stop(self) -> None:
        """Refuse new explanations; one running finishes in its thread (torch cannot be interrupted)."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    async def explain(self, texts: list[str], label: str | None, steps: int):
        """The Explanations of `texts`, computed in the worker's thread; Refused when it cannot take them now."""
        if self._closed:
            raise Refused(503, "the server is shutting down")
        if self.running:
            self.stats["explain_refused"] += 1
            raise Refused(429, "an explanation is already running (one at a time, so that predictions keep their "
                               "pace); retry when it has finished")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="headswap-explain",
                                                initializer=_lower_priority)
        self._job = self._executor.submit(self._explain, list(texts), label, steps)
        out = await asyncio.wrap_future(self._job)
        self.stats["explanations"] += 1
        return out

    def _explain(self, texts: list[str], label: str | None, steps: int):
        from headswap.explain import explain
        if self._private is None:
            self._private = private_copy(self.model)
        return explain(self._private, texts, label, steps=steps)
