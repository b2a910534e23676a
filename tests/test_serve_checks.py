"""What `headswap serve` refuses before it loads a model (issue 33): an API key set to nothing, a --host that
is no address of this machine, a --port already taken. Each is one line naming it, exit 2."""

from __future__ import annotations

import socket

import pytest
from cli_run import free_port as _free_port
from cli_run import invoke

pytest.importorskip("uvicorn")

import headswap.serve.app  # noqa: E402


class Loaded(Exception):
    """create_app was reached: the checks let the command through."""


@pytest.fixture
def loading(monkeypatch):
    """create_app raises Loaded, so a test sees whether serve got as far as loading the model."""
    seen = {}

    def create_app(model_dir, **kw):
        seen.update(kw)
        raise Loaded(model_dir)

    monkeypatch.setattr(headswap.serve.app, "create_app", create_app)
    return seen


def _refused(argv) -> str:
    rc, out, err = invoke(["serve", "--model-dir", "m", *argv])
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err)
    assert "serving" not in err
    return lines[0]


@pytest.mark.parametrize("value", ["", "   "])
def test_an_api_key_variable_set_to_nothing_is_refused(monkeypatch, loading, value):
    monkeypatch.setenv("HEADSWAP_API_KEY", value)
    line = _refused(["--port", str(_free_port())])
    assert "HEADSWAP_API_KEY is " in line and "unset HEADSWAP_API_KEY" in line


def test_a_set_api_key_variable_reaches_the_app_and_an_unset_one_means_no_key(monkeypatch, loading):
    monkeypatch.setenv("HEADSWAP_API_KEY", "k3y")
    with pytest.raises(Loaded):
        invoke(["serve", "--model-dir", "m", "--port", str(_free_port())])
    assert loading["api_key"] == "k3y"
    monkeypatch.delenv("HEADSWAP_API_KEY")
    with pytest.raises(Loaded):
        invoke(["serve", "--model-dir", "m", "--port", str(_free_port())])
    assert loading["api_key"] is None


@pytest.mark.parametrize("host, says", [("999.1.1.1", "--host 999.1.1.1 is not a valid IPv4 address"),
                                        ("192.0.2.1", "--host 192.0.2.1 cannot be bound"),      # TEST-NET-1
                                        ("256.0.0.1", "--host 256.0.0.1 is not a valid IPv4 address")])
def test_a_host_that_cannot_be_bound_is_refused_before_the_model_loads(monkeypatch, loading, host, says):
    monkeypatch.delenv("HEADSWAP_API_KEY", raising=False)
    line = _refused(["--host", host, "--port", str(_free_port())])
    assert says in line, line


def test_a_busy_port_is_refused_before_the_model_loads(monkeypatch, loading):
    monkeypatch.delenv("HEADSWAP_API_KEY", raising=False)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = _refused(["--port", str(port)])
    assert line.endswith(f"--port {port} is in use on 127.0.0.1: stop what listens there or pick another --port")
    with pytest.raises(Loaded):     # and once it is free again, the same command goes on to load the model
        invoke(["serve", "--model-dir", "m", "--port", str(port)])
