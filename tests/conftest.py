import os

import pytest
import torch

# Tests never reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from a second intra-op thread, and on a busy 2-core machine two OpenMP
    threads spin-wait on each other (a tiny LoRA fit took 20 s instead of 0.3 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
