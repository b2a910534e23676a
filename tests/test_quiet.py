"""`-q` means quiet (issue 33): the progress bars third-party code draws with tqdm on stderr (transformers' GGUF
conversion, model2vec's distillation) and transformers' "Token indices sequence length is longer than the
specified maximum" warning on a text headswap truncates anyway all printed under -q."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from test_models import _tiny_llama, _tiny_llama_tokenizer
from tiny_models import make_tiny_encoder
from tqdm import tqdm

from headswap import TextClassifier
from headswap.models import gguf, limits
from headswap.quiet import no_progress_bars

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3
BAR = "Converting and de-quantizing GGUF tensors"


def test_no_progress_bars_silences_tqdm_but_not_log_lines(capfd, caplog):
    handler = logging.StreamHandler(sys.stderr)      # made before the block, as the command line's is
    logging.getLogger("headswap.test").addHandler(handler)
    try:
        with no_progress_bars(True):
            for _ in tqdm(range(3), desc="third-party bar"):
                pass
            logging.getLogger("headswap.test").warning("a warning still shows")
        for _ in tqdm(range(3), desc="an ordinary bar"):
            pass
    finally:
        logging.getLogger("headswap.test").removeHandler(handler)
    err = capfd.readouterr().err
    assert "third-party bar" not in err and "a warning still shows" in err and "an ordinary bar" in err


@pytest.mark.parametrize("progress", [False, True])
def test_a_quiet_gguf_conversion_draws_no_bars(tmp_path, monkeypatch, capfd, progress):
    """The real conversion's bars: transformers' own (its GGUF reader's, stood in for here by the same tqdm bar,
    and save_pretrained's "Writing model shards")."""
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "tiny.gguf"
    f.write_bytes(os.urandom(1 << 20))

    def load_gguf(folder, gguf_file):
        for _ in tqdm(range(3), desc=BAR):      # what transformers' GGUF reader draws
            pass
        return _tiny_llama(), _tiny_llama_tokenizer()

    monkeypatch.setattr(gguf, "_load_from_gguf", load_gguf)
    monkeypatch.setattr(limits, "_gguf_int", lambda file, key: None)     # the header a real GGUF file has
    TextClassifier(model=str(f), strategy="slm-hidden-mlp", regime="head-only", epochs=1, eval_fraction=0,
                   max_length=16, progress=progress).fit(TEXTS, LABELS)
    err = capfd.readouterr().err
    assert (BAR in err, "Writing model shards" in err) == (progress, progress), err


def test_a_long_text_gives_no_tokenizer_warning(tmp_path):
    enc = make_tiny_encoder(tmp_path / "enc")
    d = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0).fit(TEXTS, LABELS).save(
        tmp_path / "m")
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "predict", "-q", "--model-dir", str(d),
                        "win " * 2000], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Token indices sequence length" not in r.stderr, r.stderr
