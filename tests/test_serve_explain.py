"""/explain beside /predict: an explanation runs in a thread of its own, on a private copy of the model, one at a
time; predictions keep their pace meanwhile, a second /explain gets 429 with Retry-After, and /explain has its
own, lower limits. A real uvicorn server (tests/test_serve.py's) on the tiny encoder-mlp model."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from test_serve import X, Y, _Server, client, stats  # noqa: E402
from tiny_models import make_tiny_encoder  # noqa: E402

from headswap import TextClassifier  # noqa: E402
from headswap.explain import explain  # noqa: E402
from headswap.explain.gradients import embedding_layer  # noqa: E402
from headswap.serve.app import create_app  # noqa: E402
from headswap.serve.explaining import ExplainWorker, Refused, private_copy  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

LONG = ("urgent you have won a cash prize, call now to claim it. " * 12)[:600]     # the issue's ~600 characters
LIMITS = {"max_explain_texts": 16, "max_explain_text_chars": 700, "max_explain_steps": 64}


@pytest.fixture(scope="module")
def clf(tmp_path_factory):
    enc = make_tiny_encoder(tmp_path_factory.mktemp("serve-explain") / "enc")
    return TextClassifier(strategy="encoder-mlp", model=str(enc), epochs=1, progress=False).fit(X, Y)


@pytest.fixture(scope="module")
def server(clf):
    with _Server(create_app(clf, **LIMITS)) as s:
        yield s.url


def _wait_until(condition, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the explanation did not start"
        time.sleep(0.02)


def test_predict_keeps_its_pace_while_an_explanation_runs_and_a_second_one_gets_429(server, clf):
    answer = {}

    def explain_16_long_texts():
        start = time.perf_counter()
        with client(server) as c:
            answer["response"] = c.post("/explain", json={"texts": [LONG] * 16, "steps": 32}, timeout=600)
        answer["seconds"] = time.perf_counter() - start

    worker = threading.Thread(target=explain_16_long_texts)
    worker.start()
    _wait_until(lambda: stats(server)["explaining"])
    with client(server) as c:
        start = time.perf_counter()
        predicted = c.post("/predict", json={"texts": ["see you at noon"]})
        predict_seconds = time.perf_counter() - start
        explaining_after_predict = c.get("/stats").json()["explaining"]
        second = c.post("/explain", json={"texts": ["win cash now"]})
    worker.join()
    assert predicted.status_code == 200
    assert predicted.json()["predictions"][0]["probabilities"]["spam"] == pytest.approx(
        float(clf.predict_proba(["see you at noon"])[0, list(clf.labels_).index("spam")]), abs=1e-5)
    # Before, the prediction waited in the model thread until the explanation was done.
    assert explaining_after_predict, "the prediction was answered only after the explanation"
    # 1 s on an idle machine; a machine so loaded that the explanation itself takes over 10 s gets a tenth of it.
    assert predict_seconds < max(1.0, answer["seconds"] / 10), (predict_seconds, answer["seconds"])
    assert second.status_code == 429 and second.headers["Retry-After"].isdigit()
    assert "already running" in second.json()["error"]
    assert answer["response"].status_code == 200
    assert len(answer["response"].json()["explanations"]) == 16
    after = stats(server)
    assert (after["explaining"], after["explain_refused"]) == (False, 1)
    with client(server) as c:       # the worker is free again
        assert c.post("/explain", json={"texts": ["win cash now"]}).status_code == 200


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the explanation thread is niced on Linux only")
def test_the_explanation_thread_runs_at_a_lower_priority(server):
    with client(server) as c:
        assert c.post("/explain", json={"texts": ["win cash now"]}).status_code == 200
    threads = [t for t in threading.enumerate() if t.name.startswith("headswap-explain")]
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert threads and all(os.getpriority(os.PRIO_PROCESS, t.native_id) > mine for t in threads)


@pytest.mark.parametrize("body, says", [
    ({"texts": ["win"] * 17}, "too many texts: 17 texts, the limit is 16 per request"),
    ({"texts": ["w" * 701]}, "text at index 0 is too long: 701 characters, the limit is 700"),
    ({"texts": ["win"], "steps": 65}, "steps"),
    ({"texts": ["win"], "steps": 1}, "steps"),
])
def test_explain_has_its_own_lower_limits(server, body, says):
    with client(server) as c:
        r = c.post("/explain", json=body)
        assert r.status_code == 422 and says in r.json()["error"]
        # /predict keeps its own limits (256 texts of 10,000 characters)
        assert c.post("/predict", json={"texts": body["texts"]}).status_code == 200
    assert stats(server)["explaining"] is False


def test_an_explanation_during_shutdown_gets_503(clf):
    worker = ExplainWorker(clf)
    worker.stop()
    with pytest.raises(Refused, match="shutting down") as refused:
        asyncio.run(worker.explain(["win cash now"], None, 8))
    assert refused.value.status == 503


def test_the_private_copy_shares_the_weights_but_not_the_hooks_or_the_tokenizer(clf):
    view = private_copy(clf)
    assert all(a is b for a, b in zip(clf.module_.parameters(), view.module_.parameters()))
    assert view.module_ is not clf.module_ and view.encoder_.tokenizer is not clf.encoder_.tokenizer
    before = clf.predict_proba(["win cash now"])
    # A hook on the copy's embedding layer (as the gradients set) does not reach the served model.
    hook = embedding_layer(view.module_).register_forward_hook(lambda m, i, out: torch.zeros_like(out))
    try:
        np.testing.assert_allclose(clf.predict_proba(["win cash now"]), before, atol=1e-6)
        assert not np.allclose(view.predict_proba(["win cash now"]), before, atol=1e-6)
    finally:
        hook.remove()
    [mine], [theirs] = explain(view, ["urgent you have won"], steps=8), explain(clf, ["urgent you have won"], steps=8)
    np.testing.assert_allclose(mine.scores["spam"], theirs.scores["spam"], atol=1e-6)


def test_a_blend_is_explained_on_private_copies_of_its_members(clf):
    from headswap.baseline.blend import Blend
    from headswap.baseline.tfidf import TfidfClassifier
    tfidf = TfidfClassifier().fit(X, Y)
    blend = Blend([(clf, 0.6), (tfidf, 0.4)])
    view = private_copy(blend)
    [(mine, _), (tfidf_view, _)] = view.members_
    assert mine.module_ is not clf.module_ and view.model_ is mine and tfidf_view is tfidf
    assert blend.members_[0][0] is clf and clf.module_ is not mine.module_     # the served blend is untouched
    np.testing.assert_allclose(view.predict_proba(["win cash now"]), blend.predict_proba(["win cash now"]), atol=1e-6)


def test_the_explain_limits_are_serve_flags(monkeypatch, clf, tmp_path):
    import argparse

    from fastapi.testclient import TestClient

    from headswap.cli.serve import add_arguments, run
    from headswap.serve import DEFAULTS
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--model-dir", "m"])
    assert (args.max_explain_texts, args.max_explain_text_chars, args.max_explain_steps) == \
        (DEFAULTS["max_explain_texts"], DEFAULTS["max_explain_text_chars"], DEFAULTS["max_explain_steps"]) == \
        (16, 2_000, 64)
    with pytest.raises(SystemExit):
        p.parse_args(["--model-dir", "m", "--max-explain-steps", "1"])
    seen = {}
    monkeypatch.setattr(pytest.importorskip("uvicorn"), "run", lambda app, **kw: seen.update(app=app))
    from cli_run import free_port
    assert run(p.parse_args(["--model-dir", str(clf.save(tmp_path / "m")), "--port", str(free_port()),
                             "--max-explain-texts", "2", "--max-explain-text-chars", "50",
                             "--max-explain-steps", "8"])) == 0
    with TestClient(seen["app"]) as c:
        for body, says in (({"texts": ["win"] * 3}, "the limit is 2 per request"),
                           ({"texts": ["w" * 51]}, "the limit is 50"), ({"texts": ["win"], "steps": 9}, "steps")):
            r = c.post("/explain", json=body)
            assert r.status_code == 422 and says in r.json()["error"], r.text
        assert c.post("/explain", json={"texts": ["win cash now"], "steps": 8}).status_code == 200
