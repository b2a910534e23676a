"""Micro-batching for `headswap serve`: merge concurrent requests into few model calls (no web framework needed).

Requests wait in an asyncio queue; one worker task takes the first, keeps collecting for up to ``max_wait_ms``
(or until ``max_batch_size`` texts), runs ``predict`` once on all their texts in a model thread (the event loop
stays free to accept and validate requests), and hands each caller its slice. A request with more texts than
``max_batch_size`` runs as a batch of its own. If a merged batch fails, each of its requests is retried alone,
so one bad request cannot fail its neighbours. ``batching=False`` runs one request per model call (still one
at a time, for comparison).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np

from headswap.errors import ConfigError

log = logging.getLogger(__name__)


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
