"""No command reaches the network: train, export, predict, eval and serve, run as they are run (a subprocess
each), under strace, which sees what native code does too (a Python socket patch does not). Issue 33: ONNX
Runtime's native library resolved mobile.events.data.microsoft.com (its telemetry) during `headswap export`.

Allowed: loopback addresses (serve's own port) and Unix sockets (nscd, which glibc asks before reading
/etc/hosts). Anything else, and any DNS traffic (port 53) at all, fails the test."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
from tiny_models import make_tiny_encoder

STRACE = shutil.which("strace")
SYSCALLS = "connect,sendto,sendmsg,sendmmsg"
ADDRESS = re.compile(r'sa_family=AF_INET6?, sin6?_port=htons\((\d+)\).*?(?:inet_addr\("([^"]+)"\)|'
                     r'inet_pton\(AF_INET6, "([^"]+)")')
# ONNX Runtime resolved its telemetry host some 9 s after it loaded (1.32): serve stays up this long after its
# first answer (the model, and so ONNX Runtime, loaded), so that serve too would show the lookup.
SERVE_SECONDS = 10


def _strace_options() -> list[str] | None:
    """strace's options, with --seccomp-bpf where it has it (only the traced calls stop the program: several
    times faster); None where strace is missing or cannot trace (a container's seccomp policy may forbid it)."""
    if not STRACE:
        return None
    for fast in (["--seccomp-bpf"], []):
        options = ["-f", *fast, "-qq", "-e", f"trace={SYSCALLS}"]
        if subprocess.run([STRACE, *options, "-o", os.devnull, "true"], capture_output=True).returncode == 0:
            return options
    return None


OPTIONS = _strace_options()
needs_strace = pytest.mark.skipif(OPTIONS is None, reason="strace is not installed or cannot trace here "
                                  "(apt-get install strace): only it sees a lookup made by native code")


def outside_traffic(log: str) -> list[str]:
    """The strace lines that reach an address other than loopback, or send DNS (port 53) anywhere."""
    found = []
    for line in log.splitlines():
        if not re.search(r"\b(connect|sendto|sendmsg|sendmmsg)\(", line):
            continue
        for port, v4, v6 in ADDRESS.findall(line):
            address = ipaddress.ip_address(v4 or v6)
            mapped = getattr(address, "ipv4_mapped", None)
            if int(port) == 53 or not (address.is_loopback or (mapped is not None and mapped.is_loopback)):
                found.append(line.strip())
    return found


def test_outside_traffic_is_recognised():
    """The check below can fail: it sees the lines strace printed for export before the fix."""
    before = ('4502  connect(8, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0\n'
              '4501  sendto(9, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), '
              'inet_pton(AF_INET6, "2603:1030::1", &sin6_addr), sin6_scope_id=0}, 28) = 0\n'
              '4502  connect(8, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("127.0.0.53")}, 16 '
              '<unfinished ...>\n')
    allowed = ('3710  connect(3, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT\n'
               '3711  connect(5, {sa_family=AF_INET, sin_port=htons(8000), sin_addr=inet_addr("127.0.0.1")}, 16) = 0\n'
               '3712  connect(5, {sa_family=AF_INET6, sin6_port=htons(8000), sin6_flowinfo=htonl(0), '
               'inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0\n')
    assert len(outside_traffic(before)) == 3
    assert outside_traffic(allowed) == []


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("no-network")
    data = root / "d.csv"
    texts = ["win cash now", "free call now", "see you at noon", "ok home", "urgent prize", "running late"]
    data.write_text("text,label\n" + "".join(f"{t} {i},{'spam' if i % 2 == 0 else 'ham'}\n"
                                             for i, t in enumerate(texts * 3)))
    home = root / "home"    # empty: ONNX Runtime's telemetry cache starts fresh, as on a new machine
    home.mkdir()
    import matplotlib
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}   # this process set it
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MPLCONFIGDIR=matplotlib.get_cachedir())
    return {"root": root, "data": data, "enc": make_tiny_encoder(root / "enc"), "env": env}


def _command(world, name: str, args: list[str]) -> list[str]:
    return [STRACE, *OPTIONS, "-o", str(world["root"] / f"{name}.strace"), sys.executable, "-m", "headswap.cli",
            name, *args]


def _traced(world, name: str, args: list[str]) -> list[str]:
    r = subprocess.run(_command(world, name, args), env=world["env"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return outside_traffic((world["root"] / f"{name}.strace").read_text())


def test_importing_headswap_turns_onnxruntime_telemetry_off_before_it_loads():
    """ONNX Runtime reads ORT_DISABLE_TELEMETRY once, when its library loads: `import headswap` sets it."""
    pytest.importorskip("onnxruntime")
    code = ("import os, sys; import headswap; from headswap.classifier.runtime import import_onnxruntime; "
            "print(os.environ.get('ORT_DISABLE_TELEMETRY'), 'onnxruntime' in sys.modules); import_onnxruntime()")
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["1", "False"], r.stdout + r.stderr


@needs_strace
def test_train_export_predict_eval_and_serve_stay_on_this_machine(world):
    root, model, exported = world["root"], world["root"] / "m", world["root"] / "m-onnx"
    seen = {
        "train": _traced(world, "train", ["--data", str(world["data"]), "--model", str(world["enc"]), "--out",
                                          str(model), "--epochs", "1", "-q"]),
        "export": _traced(world, "export", ["--model-dir", str(model), "--out", str(exported)]),
        "predict": _traced(world, "predict", ["-q", "--model-dir", str(exported), "a text to classify"]),
        "eval": _traced(world, "eval", ["-q", "--model-dir", str(exported), "--data", str(world["data"]),
                                        "--out", str(root / "ev")]),
    }
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(_command(world, "serve", ["--model-dir", str(exported), "--port", str(port),
                                                        "--log-level", "warning", "--no-access-log"]),
                              env=world["env"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        started, answer = time.monotonic(), None
        while answer is None and server.poll() is None and time.monotonic() - started < 120:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/predict", method="POST",
                                                 data=json.dumps({"texts": ["win cash"]}).encode(),
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10) as r:
                    answer = json.load(r)
            except OSError:
                time.sleep(0.2)
        assert answer is not None and len(answer["predictions"]) == 1, server.stderr.read() if server.poll() else ""
        time.sleep(SERVE_SECONDS)
    finally:
        os.killpg(server.pid, signal.SIGINT)     # strace and the server it runs, in their own session
        server.wait(30)
        server.stderr.close()
    seen["serve"] = outside_traffic((root / "serve.strace").read_text())
    assert seen == {name: [] for name in seen}


@pytest.fixture
def ray_head(world, one_ray_at_a_time):
    """A Ray head on this machine, as `ray start --head --block` starts one (one CPU, a 200 MB object store, a
    temp dir of its own), under strace; yields (address, its strace log) and stops it by its process group.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is how a head is told its node IP is loopback (127.0.0.1) without
    looking outward: `--node-ip-address 127.0.0.1` alone is "resolved" by a UDP connect to 8.8.8.8:53 to the
    machine's outward address. RAY_AUTH_MODE=disabled: Ray 2.60 turns token authentication on for a head that
    finds a token (~/.ray/auth_token, RAY_AUTH_TOKEN), and a driver given an explicit address does not, so
    without it the test would depend on the tokens of the machine it runs on."""
    pytest.importorskip("ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="hs-ray-")     # short: Ray's Unix socket paths must stay under 108 bytes
    log, said = world["root"] / "ray-head.strace", world["root"] / "ray-head.out"
    env = {**world["env"], "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
           "OMP_NUM_THREADS": "1"}
    with open(said, "w") as output:
        head = subprocess.Popen([STRACE, *OPTIONS, "-o", str(log), os.path.join(os.path.dirname(sys.executable),
                                 "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                                 f"--object-store-memory={200 * 2 ** 20}", "--include-dashboard=false",
                                 f"--temp-dir={temp}"],
                                env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120     # --block: it runs on once started
        while head.poll() is None and "Ray runtime started" not in said.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert head.poll() is None and "Ray runtime started" in said.read_text(), said.read_text()[-3000:]
        yield f"127.0.0.1:{port}", log
    finally:
        import psutil     # Ray's own dependency
        # SIGTERM to `ray start` alone: it stops what it started in a few seconds (the whole group at once: 30 s+).
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(head.pid).children():
                child.terminate()
        try:
            head.wait(60)       # strace ends when the last process it traces does
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)     # anything left in the head's own process group
        head.wait(10)
        shutil.rmtree(temp, ignore_errors=True)


@needs_strace
def test_auto_on_a_ray_head_on_this_machine_stays_on_this_machine(world, ray_head):
    """`headswap auto --ray-address 127.0.0.1:PORT`: Ray's node-IP discovery made a UDP connect to 8.8.8.8:53 in
    the driver, and turned 127.0.0.1 into the machine's outward address, where a loopback head does not answer
    (ray.init retried for minutes). headswap.jobs.batch.import_ray keeps the address loopback, with no lookup. The
    head's processes (raylet, agents, the workers that run the arms) look for no node IP outward either; its
    dashboard's cloud-metadata and usage-stats requests are the head's own (Ray's, started by the user) and are
    not checked here."""
    address, head_log = ray_head
    out, log, said = world["root"] / "auto-ray", world["root"] / "auto.strace", world["root"] / "auto-ray.err"
    with open(said, "w") as err:
        driver = subprocess.Popen(_command(world, "auto", [
            "--data", str(world["data"]), "--model", str(world["enc"]), "--strategies", "encoder-mlp", "--regime",
            "full", "--budget", "60s", "--no-lr-search", "--no-more-epochs", "--no-blend", "--out", str(out),
            "--ray-address", address, "-q"]), env={**world["env"], "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"},
            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    seen, deadline = [], time.monotonic() + 240
    while driver.poll() is None and not seen and time.monotonic() < deadline:
        time.sleep(0.5)   # an outward lookup ends the test at once (it used to hang ray.init for minutes after)
        seen = outside_traffic(log.read_text()) if log.exists() else []
    if driver.poll() is None:
        os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(30)
    seen = outside_traffic(log.read_text())
    node_ip_lookups = [line for line in outside_traffic(head_log.read_text())
                       if re.search(r'"(8\.8\.8\.8|2001:4860:4860::8888)"', line)]
    assert (seen, node_ip_lookups) == ([], [])
    assert driver.returncode == 0, said.read_text()[-2000:]
    arms = [c for c in json.loads((out / "results.json").read_text())["auto"]["candidates"] if c.get("halving")]
    assert arms and all(c["status"] == "ran" for c in arms), arms
    assert all(len(s.get("node") or "") == 56 for c in arms for s in c["slices"]), arms   # on a Ray node


@needs_strace
def test_predict_on_a_local_ray_cluster_stays_on_this_machine(world):
    """`headswap predict --engine ray` starts a local Ray cluster: its node address is 127.0.0.1 (no lookup towards
    8.8.8.8), and its dashboard's cloud-metadata requests (169.254.169.254, metadata.google.internal) meet a closed
    port on this machine instead of leaving it (headswap.jobs.batch._http_kept_local)."""
    pytest.importorskip("ray")
    from headswap.baseline.tfidf import TfidfClassifier

    root = world["root"]
    texts = ["win cash now", "free call now", "see you at noon", "ok home", "urgent prize", "running late"] * 3
    model = TfidfClassifier().fit(texts, ["spam", "spam", "ham", "ham", "spam", "ham"] * 3).save(root / "tfidf")
    env = {**world["env"], "RAY_USAGE_STATS_ENABLED": "0"}
    r = subprocess.run(_command(world, "predict", ["-q", "--engine", "ray", "--model-dir", str(model), "--data",
                                                   str(world["data"]), "--out", str(root / "ray-preds.csv"),
                                                   "--concurrency", "1"]),
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len((root / "ray-preds.csv").read_text().splitlines()) == len(texts) + 1
    assert outside_traffic((root / "predict.strace").read_text()) == []
