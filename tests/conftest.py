import os

import pytest
import torch

# Tests never reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def idle_cores(monkeypatch):
    """auto reads the machine's load (headswap.auto.ladder.busy_factor) to price shipping and the room kept for it:
    tests run as on idle cores, so a busy test machine changes no choice they check, unless a test says otherwise."""
    from headswap.auto import ladder
    monkeypatch.setattr(ladder, "busy_factor", lambda: 1.0)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from a second intra-op thread, and on a busy 2-core machine two OpenMP
    threads spin-wait on each other (a tiny LoRA fit took 20 s instead of 0.3 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_ray_at_a_time():
    """A module that starts Ray (a local one, or a test cluster) holds this lock while it runs: under pytest-xdist
    two Rays at once would share 2 cores and the machine's memory with everything else."""
    import tempfile

    from filelock import FileLock
    with FileLock(os.path.join(tempfile.gettempdir(), "headswap-tests-ray.lock")):
        yield


@pytest.fixture
def fresh_warnings():
    """The data warnings are once per process (headswap.data.once): a test that expects one starts and ends with
    none given, whatever other tests on its worker already warned of."""
    from headswap.data.once import _warned
    _warned.clear()
    yield
    _warned.clear()
