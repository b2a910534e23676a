"""headswap serve: a real uvicorn server on a free loopback port, talked to over HTTP with httpx.

One tiny encoder-mlp model (built locally, trained on 12 texts) serves every test. Servers run in
background threads (uvicorn.Server on a pre-bound 127.0.0.1 socket) and are stopped at module end.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from cli_run import free_port  # noqa: E402
from tiny_models import make_tiny_encoder  # noqa: E402

from headswap import TextClassifier  # noqa: E402
from headswap.cli import main as cli_main  # noqa: E402
from headswap.cli.serve import add_arguments as add_serve_arguments  # noqa: E402
from headswap.cli.serve import run as cmd_serve  # noqa: E402
from headswap.data.jsonline import parse  # noqa: E402
from headswap.errors import DataError  # noqa: E402
from headswap.serve.app import MicroBatcher, create_app  # noqa: E402

X = ["win cash now", "free entry txt win", "see you at noon", "ok on my way home", "urgent you have won",
     "running late sorry"] * 2
Y = ["spam", "spam", "ham", "ham", "spam", "ham"] * 2
LIMITS = {"max_texts_per_request": 8, "max_text_chars": 200, "max_body_bytes": 4096}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    enc = make_tiny_encoder(root / "enc")
    clf = TextClassifier(strategy="encoder-mlp", model=str(enc), epochs=1, progress=False).fit(X, Y)
    return clf.save(root / "model")


@pytest.fixture(scope="module")
def clf(model_dir):
    return TextClassifier.load(model_dir, progress=False)


class _Server:
    """uvicorn in a background thread on 127.0.0.1:<free port>."""

    def __init__(self, app, **config):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="critical", access_log=False, lifespan="on",
                                                    **config))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        with httpx.Client(base_url=self.url, timeout=5, trust_env=False) as c:
            while True:
                try:
                    if c.get("/health").status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or not self.thread.is_alive():
                    raise RuntimeError("the test server did not start")
                time.sleep(0.05)

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture(scope="module")
def batched(model_dir):
    """Loads the model from its directory; a long wait so that concurrent requests surely merge."""
    with _Server(create_app(model_dir, max_batch_size=6, max_wait_ms=100, **LIMITS)) as s:
        yield s.url


@pytest.fixture(scope="module")
def unbatched(clf):
    with _Server(create_app(clf, batching=False, **LIMITS)) as s:
        yield s.url


class Flaky:
    """A classifier that fails on any batch holding the word 'boom'."""

    def __init__(self, clf):
        self.clf, self.labels_, self.strategy, self.model = clf, clf.labels_, clf.strategy, "flaky"

    def predict_proba(self, texts):
        if any("boom" in t for t in texts):
            raise RuntimeError("boom inside the model")
        return self.clf.predict_proba(texts)


@pytest.fixture(scope="module")
def flaky(clf):
    with _Server(create_app(Flaky(clf), max_batch_size=32, max_wait_ms=50)) as s:
        yield s.url


def client(url):
    return httpx.Client(base_url=url, timeout=30, trust_env=False)


def check_predictions(body, texts, clf):
    """Predictions in input order; probabilities equal predict_proba on each text (to 1e-6)."""
    preds = body["predictions"]
    assert len(preds) == len(texts)
    labels = list(clf.labels_)
    expected = np.concatenate([clf.predict_proba([t]) for t in texts])
    got = np.array([[p["probabilities"][lab] for lab in labels] for p in preds])
    assert list(preds[0]["probabilities"]) == labels
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert [p["label"] for p in preds] == [labels[k] for k in expected.argmax(1)]


def stats(url):
    with client(url) as c:
        return c.get("/stats").json()


# ---- the API ---------------------------------------------------------------------------------------------------

def test_health_labels_and_docs(batched, clf, model_dir):
    with client(batched) as c:
        health = c.get("/health").json()
        assert health["status"] == "ok" and health["strategy"] == "encoder-mlp"
        # Names, not paths: /health is open, and the server's disk layout is none of a client's business.
        assert health["model"] == model_dir.parent.joinpath("enc").name and health["model_dir"] == model_dir.name
        assert str(model_dir.parent) not in str(health)
        assert c.get("/labels").json() == {"labels": list(clf.labels_)}
        schema = c.get("/openapi.json").json()
        req = schema["components"]["schemas"]["PredictRequest"]["properties"]["texts"]
        assert req["type"] == "array" and req["minItems"] == 1 and req["maxItems"] == 8
        assert req["items"]["maxLength"] == 200
        assert "PredictResponse" in schema["components"]["schemas"]
        assert {"/predict", "/health", "/labels", "/stats"} <= set(schema["paths"])
        docs = c.get("/docs")
        assert docs.status_code == 200 and "text/html" in docs.headers["content-type"]


def test_a_blend_folder_is_served_as_it_predicts(clf, tmp_path):
    from headswap.classifier.estimator import load_model
    from headswap.baseline.blend import Blend
    from headswap.baseline.tfidf import TfidfClassifier
    folder = Blend([(clf, 0.6), (TfidfClassifier().fit(X, Y), 0.4)]).save(tmp_path / "blend")
    texts = ["urgent you have won", "see you at noon", "call me later"]
    with _Server(create_app(folder, **LIMITS)) as s, client(s.url) as c:
        r = c.post("/predict", json={"texts": texts})
    assert r.status_code == 200, r.text
    check_predictions(r.json(), texts, load_model(folder, progress=False))


def test_predict_matches_predict_proba_in_input_order(batched, clf):
    texts = ["urgent you have won", "see you at noon", "free entry txt win a prize", "ok", "call me later"]
    with client(batched) as c:
        r = c.post("/predict", json={"texts": texts})
    assert r.status_code == 200, r.text
    check_predictions(r.json(), texts, clf)
    whole = clf.predict_proba(texts)   # and equal to one predict_proba call on the same list
    got = np.array([[p["probabilities"][lab] for lab in clf.labels_] for p in r.json()["predictions"]])
    np.testing.assert_allclose(got, whole, atol=1e-6)


def test_request_with_more_texts_than_the_batch_size_is_served(batched, clf):
    texts = [f"message {i} win cash" for i in range(8)]   # max_batch_size is 6
    before = stats(batched)
    with client(batched) as c:
        r = c.post("/predict", json={"texts": texts})
    assert r.status_code == 200, r.text
    check_predictions(r.json(), texts, clf)
    after = stats(batched)
    assert after["texts"] - before["texts"] == 8 and after["largest_batch"] >= 8


BIG = b'{"texts": ["' + b"a" * 5000 + b'"]}'


def _chunks():
    for _ in range(3):
        yield b"x" * 2000


@pytest.mark.parametrize("request_kw, status, message", [
    ({"content": b'{"texts": ["a",', "headers": {"content-type": "application/json"}}, 400, "malformed JSON"),
    ({"content": b"not json at all", "headers": {"content-type": "application/json"}}, 400, "malformed JSON"),
    ({"json": {"texts": 5}}, 422, "list of strings"),
    ({"json": {"texts": "one text"}}, 422, "list of strings"),
    ({"json": {"texts": None}}, 422, "list of strings"),
    ({"json": {"texts": [["nested"]]}}, 422, "texts[0] must be a string"),
    ({"json": {"texts": ["fine", 3]}}, 422, "texts[1] must be a string"),
    ({"json": {}}, 422, 'missing field "texts"'),
    ({"json": ["a list", "not an object"]}, 422, "JSON object"),
    ({"json": {"texts": ["a"], "extra": 1}}, 422, "unknown field"),
    ({"json": {"texts": []}}, 422, "must not be empty"),
    ({"json": {"texts": ["t"] * 9}}, 422, "the limit is 8"),
    ({"json": {"texts": ["ok", "x" * 201]}}, 422, "index 1 is too long"),
    ({"json": {"texts": ["ok", "   "]}}, 422, "index 1 is empty"),
    ({"content": b'{"texts": ["\\ud800"]}', "headers": {"content-type": "application/json"}}, 422, "index 0"),
    ({"content": b'{"texts": ["caf\xe9 \xff"]}', "headers": {"content-type": "application/json"}}, 400, "UTF-8"),
    ({"content": BIG, "headers": {"content-type": "application/json"}}, 413, "4096 bytes"),
    ({"content": _chunks, "headers": {"content-type": "application/json"}}, 413, "4096 bytes"),
    ({"content": b'{"texts": ["a"]}', "headers": {"content-type": "text/plain"}}, 415, "application/json"),
    ({"content": b"", "headers": {"content-type": "application/json"}}, 422, "body is empty"),
    ({"content": b"null", "headers": {"content-type": "application/json"}}, 422, "must be a JSON object"),
], ids=["truncated-json", "not-json", "number", "string", "null", "nested-list", "int-item", "missing", "array-body",
        "extra-field", "empty-list", "too-many", "too-long", "blank", "surrogate", "non-utf8", "too-large",
        "too-large-chunked", "text-plain", "empty-body", "null-body"])
def test_bad_requests_get_clear_json_errors_and_the_server_keeps_serving(batched, request_kw, status, message):
    kw = dict(request_kw)
    if callable(kw.get("content")):
        kw["content"] = kw["content"]()   # a generator: sent chunked, no Content-Length
    with client(batched) as c:
        r = c.post("/predict", **kw)
        assert r.status_code == status, r.text
        body = r.json()
        assert isinstance(body["error"], str) and message in body["error"], body
        assert "detail" in body
    with client(batched) as c:   # a fresh connection: a 413 closes the old one
        assert c.get("/health").json()["status"] == "ok"
        assert c.post("/predict", json={"texts": ["still serving"]}).status_code == 200


def test_unknown_route_and_method_are_json(batched):
    with client(batched) as c:
        r = c.get("/nope")
        assert r.status_code == 404 and "error" in r.json()
        r = c.get("/predict")
        assert r.status_code == 405 and "error" in r.json()


# ---- micro-batching over HTTP --------------------------------------------------------------------------------

async def _fire(url, payloads):
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as c:
        return await asyncio.gather(*(c.post("/predict", json={"texts": t}) for t in payloads))


def test_concurrent_clients_get_their_own_results_and_requests_are_merged(batched, clf):
    payloads = [[f"client {i} text {j}: " + X[(i + j) % len(X)] for j in range(1 + i % 3)] for i in range(16)]
    before = stats(batched)
    responses = asyncio.run(_fire(batched, payloads))
    after = stats(batched)
    for r, texts in zip(responses, payloads):
        assert r.status_code == 200, r.text
        check_predictions(r.json(), texts, clf)
    requests = after["requests"] - before["requests"]
    batches = after["batches"] - before["batches"]
    assert requests == 16 and after["texts"] - before["texts"] == sum(map(len, payloads))
    assert batches < requests, (batches, requests)   # merged
    assert after["largest_batch"] <= 8   # max_batch_size 6 (a single request may hold up to 8)


def test_no_batching_runs_one_model_call_per_request(unbatched, clf):
    payloads = [[f"alone {i}", X[i]] for i in range(6)]
    before = stats(unbatched)
    responses = asyncio.run(_fire(unbatched, payloads))
    after = stats(unbatched)
    for r, texts in zip(responses, payloads):
        assert r.status_code == 200, r.text
        check_predictions(r.json(), texts, clf)
    assert after["requests"] - before["requests"] == after["batches"] - before["batches"] == 6
    with client(unbatched) as c:
        assert c.get("/health").json()["batching"] is False


def test_model_error_is_500_for_that_request_only_and_the_server_keeps_serving(flaky, clf):
    payloads = [[f"good {i}", X[i]] for i in range(5)] + [["this one goes boom"]]
    responses = asyncio.run(_fire(flaky, payloads))
    for r, texts in zip(responses[:-1], payloads[:-1]):
        assert r.status_code == 200, r.text   # merged with the bad one, retried alone
        check_predictions(r.json(), texts, clf)
    bad = responses[-1]
    assert bad.status_code == 500
    assert bad.json() == {"error": "prediction failed", "detail": None}    # the exception text stays in the log
    with client(flaky) as c:
        assert c.get("/health").json()["status"] == "ok"
        r = c.post("/predict", json={"texts": ["after the failure"]})
        assert r.status_code == 200
        s = c.get("/stats").json()
    assert s["errors"] == 1 and s["requests"] == 7


# ---- MicroBatcher on its own (no model, no HTTP) ---------------------------------------------------------------

def test_microbatcher_merges_splits_and_keeps_each_callers_rows():
    calls = []

    def predict(texts):
        calls.append(list(texts))
        return np.array([[float(t), -float(t)] for t in texts])

    async def scenario():
        b = MicroBatcher(predict, max_batch_size=4, max_wait_ms=100)
        await b.start()
        sizes = [1, 2, 1, 3, 6, 1]
        jobs, n = [], 0
        for s in sizes:
            jobs.append([str(n + k) for k in range(s)])
            n += s
        results = await asyncio.gather(*(b.submit(t) for t in jobs))
        await b.stop()
        return jobs, results, b.stats

    jobs, results, st = asyncio.run(scenario())
    for texts, rows in zip(jobs, results):
        np.testing.assert_array_equal(rows[:, 0], [float(t) for t in texts])
    assert sorted(t for c in calls for t in c) == sorted(t for j in jobs for t in j)
    # a request is never split; every call holds at most 4 texts unless it is one request of more
    for c in calls:
        assert len(c) <= 4 or any(c == j for j in jobs)
    assert st["requests"] == 6 and st["batches"] == len(calls) < 6 and st["texts"] == 14


def test_microbatcher_without_batching_and_with_zero_wait():
    async def scenario(**kw):
        calls = []
        b = MicroBatcher(lambda t: calls.append(len(t)) or np.zeros((len(t), 2)), max_batch_size=8, **kw)
        await asyncio.gather(*(b.submit(["a", "b"]) for _ in range(4)))
        await b.stop()
        return calls

    assert asyncio.run(scenario(batching=False)) == [2, 2, 2, 2]
    assert sum(asyncio.run(scenario(max_wait_ms=0))) == 8   # merges only what is already queued


# ---- command line ----------------------------------------------------------------------------------------------

def test_cli_flags_and_cmd_serve_run_uvicorn(monkeypatch, model_dir):
    import argparse
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    args = p.parse_args(["--model-dir", str(model_dir)])
    assert (args.host, args.port, args.max_batch_size, args.max_wait_ms, args.no_batching) == \
        ("127.0.0.1", 8000, 32, 5.0, False)
    assert (args.max_texts, args.max_text_chars, args.max_body_bytes) == (256, 10_000, 1_000_000)
    with pytest.raises(SystemExit):
        p.parse_args(["--model-dir", "m", "--port", "70000"])
    with pytest.raises(SystemExit):
        p.parse_args(["--model-dir", "m", "--max-batch-size", "0"])

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(app=app, **kw))
    port = free_port()      # serve binds it once before the model loads (headswap.serve.checks)
    args = p.parse_args(["--model-dir", str(model_dir), "--port", str(port), "--no-batching", "--max-texts", "3",
                         "--log-level", "warning", "--threads", "1"])
    assert cmd_serve(args) == 0
    assert (seen["host"], seen["port"], seen["log_level"]) == ("127.0.0.1", port, "warning")
    assert seen["app"].state.batcher.batching is False


def test_main_reports_a_bad_model_dir_in_one_line(tmp_path, capsys):
    assert cli_main(["serve", "--model-dir", str(tmp_path), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "not a saved headswap model" in err and "Traceback" not in err


# ---- access: API key, per-client limit, hostile bodies ------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(clf):
    gate, entered = threading.Event(), threading.Event()

    class Slow(Flaky):       # holds "wait" requests until the test opens the gate
        def predict_proba(self, texts):
            if any("wait" in t for t in texts):
                entered.set()
                gate.wait(20)
            return self.clf.predict_proba(texts)

    app = create_app(Slow(clf), batching=False, api_key="s3cret", max_concurrent_per_client=1, max_json_depth=8)
    with _Server(app) as s:
        yield s.url, gate, entered


def test_api_key_is_required_everywhere_but_health(guarded):
    url = guarded[0]
    with client(url) as c:
        assert c.get("/health").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = c.post("/predict", json={"texts": ["hi"]}, headers=headers)
            assert r.status_code == 401 and "API key" in r.json()["error"] and r.headers["www-authenticate"] == "Bearer"
            assert c.get("/labels", headers=headers).status_code == 401
        ok = c.post("/predict", json={"texts": ["hi"]}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and len(ok.json()["predictions"]) == 1


def test_the_auth_scheme_is_case_insensitive_and_the_key_is_not(guarded):
    """RFC 7235: the scheme's name ("Bearer") is case-insensitive; the key is compared exactly."""
    url = guarded[0]
    with client(url) as c:
        for scheme in ("bearer", "BEARER", "bEaReR", "Bearer "):
            r = c.post("/predict", json={"texts": ["hi"]}, headers={"Authorization": f"{scheme} s3cret"})
            assert r.status_code == 200, (scheme, r.text)
        for value in ("bearer S3CRET", "Basic s3cret", "bearers3cret", "bearer", "s3cret"):
            r = c.post("/predict", json={"texts": ["hi"]}, headers={"Authorization": value})
            assert r.status_code == 401, value


def test_a_client_over_its_concurrency_limit_gets_429_and_the_next_request_passes(guarded):
    url, gate, entered = guarded
    auth = {"Authorization": "Bearer s3cret"}
    gate.clear()
    entered.clear()
    first = {}
    holder = threading.Thread(target=lambda: first.update(r=client(url).post("/predict", json={"texts": ["wait"]},
                                                                              headers=auth)))
    holder.start()
    try:
        assert entered.wait(20), "the first request never reached the model"
        with client(url) as c:
            r = c.post("/predict", json={"texts": ["second"]}, headers=auth)
        assert r.status_code == 429 and "too many requests in flight" in r.json()["error"], first
        assert r.headers["retry-after"] == "1"
    finally:
        gate.set()
        holder.join(20)
    assert first["r"].status_code == 200
    with client(url) as c:
        assert c.post("/predict", json={"texts": ["after"]}, headers=auth).status_code == 200


def test_hostile_bodies_get_json_400s(guarded):
    url, gate, _ = guarded
    gate.set()
    auth = {"Authorization": "Bearer s3cret", "Content-Type": "application/json"}
    with client(url) as c:
        deep = '{"texts": ' + "[" * 50 + '"x"' + "]" * 50 + "}"
        r = c.post("/predict", content=deep, headers=auth)
        assert r.status_code == 400 and r.json()["error"] == "JSON nested deeper than 8 levels"
        nested_in_string = '{"texts": ["' + "[" * 50 + '"]}'      # brackets inside a string do not count
        assert c.post("/predict", content=nested_in_string, headers=auth).status_code == 200
        huge = '{"texts": [' + "7" * 5000 + "]}"      # past Python's 4,300-digit limit: what the CLI says of it
        r = c.post("/predict", content=huge, headers=auth)
        with pytest.raises(DataError) as cli:
            parse(huge, "body")
        assert r.status_code == 400 and r.json()["error"] == "malformed JSON: " + str(cli.value).removeprefix("body: ")
        assert "4300 digits" in r.json()["error"]
    import http.client
    host, port = url.removeprefix("http://").split(":")
    for length in ("abc", "-5"):
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.putrequest("POST", "/predict")
        for k, v in {**auth, "Content-Length": length}.items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        assert resp.status == 400, (length, body)
        if resp.getheader("content-type", "").startswith("application/json"):
            import json
            assert "Content-Length" in json.loads(body)["error"]


def test_serve_takes_the_api_key_from_the_flag_or_the_environment(monkeypatch, model_dir):
    import argparse
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(app=app, **kw))

    def key_of(argv):
        assert cmd_serve(p.parse_args(["--model-dir", str(model_dir), *argv])) == 0
        guard = next(m for m in seen["app"].user_middleware if m.cls.__name__ == "AccessGuard")
        return guard.kwargs["api_key"], guard.kwargs["max_concurrent_per_client"]

    monkeypatch.delenv("HEADSWAP_API_KEY", raising=False)
    assert key_of([]) == (None, 0)
    monkeypatch.setenv("HEADSWAP_API_KEY", "from-env")
    assert key_of(["--max-concurrent-per-client", "4"]) == ("from-env", 4)
    assert key_of(["--api-key", "from-flag"]) == ("from-flag", 0)


def test_the_api_key_flag_warns_that_ps_shows_it_and_the_environment_does_not(monkeypatch, model_dir, capsys):
    import argparse
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    monkeypatch.setenv("HEADSWAP_API_KEY", "from-env")
    assert cmd_serve(p.parse_args(["--model-dir", str(model_dir)])) == 0
    assert "process list" not in capsys.readouterr().err
    assert cmd_serve(p.parse_args(["--model-dir", str(model_dir), "--api-key", "from-flag"])) == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if "process list" in line]
    assert len(warning) == 1 and "--api-key" in warning[0] and "HEADSWAP_API_KEY" in warning[0]
    assert "from-flag" not in err   # the warning does not print the key itself


# ---- slow and stalled clients (slowloris) ------------------------------------------------------------------------

READ_TIMEOUT = 0.5


@pytest.fixture(scope="module")
def deadline_server(clf):
    """A server whose requests must arrive whole within READ_TIMEOUT s; "sleep" texts make the model slow."""
    from headswap.serve.timeouts import read_timeout_protocol

    class Sleepy(Flaky):
        def predict_proba(self, texts):
            if any("sleep" in t for t in texts):
                time.sleep(3 * READ_TIMEOUT)
            return self.clf.predict_proba(texts)

    with _Server(create_app(Sleepy(clf), batching=False), http=read_timeout_protocol(READ_TIMEOUT)) as s:
        yield s


def _seconds_until_closed(port, chunks, pause=0.0, limit=5.0):
    """Send `chunks` (pausing between them), then wait; seconds from connecting until the server closes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=limit)
    t0 = time.monotonic()
    try:
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except OSError:   # closed under us while trickling
                return time.monotonic() - t0
            time.sleep(pause)
        received = b""
        while time.monotonic() - t0 < limit:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            except socket.timeout:
                return float("inf")
            if not data:
                break
            received += data
        else:
            return float("inf")
        assert b"HTTP/1.1 2" not in received   # refused, not answered
        return time.monotonic() - t0
    finally:
        sock.close()


HEAD = b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize("chunks, pause", [
    ([], 0.0),                                                        # connects, sends nothing
    ([HEAD[:30]], 0.0),                                              # half a request line
    ([HEAD], 0.0),                                                    # headers without the blank line
    ([HEAD[i:i + 4] for i in range(0, len(HEAD), 4)], 0.1),         # headers trickled, never finished
    ([HEAD + b"Content-Length: 100\r\n\r\n" + b'{"texts": ['], 0.0),  # body stops short of its length
], ids=["silent", "half-request-line", "half-headers", "trickled-headers", "short-body"])
def test_a_request_that_does_not_arrive_whole_in_time_is_closed(deadline_server, chunks, pause):
    elapsed = _seconds_until_closed(deadline_server.port, chunks, pause)
    assert READ_TIMEOUT * 0.8 <= elapsed <= READ_TIMEOUT + 1.5, elapsed
    with client(deadline_server.url) as c:
        assert c.post("/predict", json={"texts": ["still serving"]}).status_code == 200


def test_the_read_deadline_restarts_per_request_and_never_cuts_off_a_slow_model(deadline_server, clf):
    with client(deadline_server.url) as c:
        t0 = time.monotonic()
        r = c.post("/predict", json={"texts": ["sleep then answer"]})   # the model takes 3x the deadline
        assert r.status_code == 200 and time.monotonic() - t0 >= 3 * READ_TIMEOUT
        check_predictions(r.json(), ["sleep then answer"], clf)
        for _ in range(3):   # keep-alive: each request on the same connection gets its own deadline
            time.sleep(READ_TIMEOUT * 0.6)
            assert c.post("/predict", json={"texts": ["again"]}).status_code == 200
    # after a complete request on a kept-alive connection, a half-sent second one is closed too
    body = b'{"texts": ["one"]}'
    first = HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
    sock = socket.create_connection(("127.0.0.1", deadline_server.port), timeout=5)
    try:
        sock.sendall(first)
        response = b""
        while b"\r\n\r\n" not in response:
            response += sock.recv(65536)
        head, _, body = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        while len(body) < length:   # the whole response, so the next recv sees only the close
            body += sock.recv(65536)
        sock.sendall(HEAD[:40])
        t0 = time.monotonic()
        assert sock.recv(65536) == b"" and time.monotonic() - t0 <= READ_TIMEOUT + 1.5
    finally:
        sock.close()


def test_without_the_deadline_uvicorn_keeps_a_half_sent_request_open(clf):
    """The control: plain uvicorn h11 still holds the connection well past the deadline above."""
    with _Server(create_app(clf), http="h11") as s:
        assert _seconds_until_closed(s.port, [HEAD], limit=READ_TIMEOUT + 1.5) == float("inf")


def test_serve_passes_its_read_timeout_to_uvicorn(monkeypatch, model_dir):
    import argparse
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    assert cmd_serve(p.parse_args(["--model-dir", str(model_dir)])) == 0
    assert seen["http"].read_timeout == 20.0
    assert cmd_serve(p.parse_args(["--model-dir", str(model_dir), "--read-timeout", "2.5"])) == 0
    assert seen["http"].read_timeout == 2.5
    for bad in ("0", "-1", "nan"):
        with pytest.raises(SystemExit):
            p.parse_args(["--model-dir", "m", "--read-timeout", bad])


# ---- memory: a fixed glibc mmap threshold ------------------------------------------------------------------------

RETAIN = """
import ctypes, sys, psutil
from headswap.serve.memory import fix_malloc_mmap_threshold
if sys.argv[1] == "fix":
    assert fix_malloc_mmap_threshold()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
def touched(n):
    block = libc.malloc(n)
    ctypes.memset(block, 1, n)
    return block
rss = lambda: psutil.Process().memory_info().rss
libc.free(touched(24 << 20))   # a freed 24 MiB mmap block: by default glibc raises its mmap threshold past it
before = rss()
libc.free(touched(8 << 20))    # so this 8 MiB one comes from the heap, and stays there once freed
print((rss() - before) / 2**20)
"""


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_serve_fixes_the_mmap_threshold_so_freed_activations_leave_the_process(monkeypatch, model_dir, tmp_path):
    import os
    import subprocess
    import sys
    script = tmp_path / "retain.py"
    script.write_text(RETAIN)
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}

    def retained_mb(mode):
        out = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return float(out.stdout)

    assert retained_mb("plain") >= 6      # glibc's default: the freed block stays in the process
    assert retained_mb("fix") < 2         # fixed threshold: it goes back to the OS

    import argparse
    import headswap.serve.memory as memory
    calls = []
    monkeypatch.setattr(memory, "fix_malloc_mmap_threshold", lambda: calls.append(1) or True)
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    assert cmd_serve(p.parse_args(["--model-dir", str(model_dir)])) == 0
    assert calls == [1]   # `headswap serve` sets it (create_app alone does not touch the process's malloc)

    monkeypatch.undo()
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")   # a value the user chose stands
    assert memory.fix_malloc_mmap_threshold() is False
