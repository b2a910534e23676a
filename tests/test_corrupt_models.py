"""A saved model directory damaged in each way a disk, a copy or a mix-up can damage it loads with one clear
error naming the problem, in Python and on the command line: never a random head that predicts rc 0."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.errors import HeadswapError

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("corrupt")
    enc = make_tiny_encoder(root / "enc")
    out = {}
    for name, kw in {"full": {"regime": "full"}, "head-only": {"regime": "head-only"},
                     "similarity": {"strategy": "similarity", "regime": "full"}}.items():
        clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0, **kw)
        out[name] = clf.fit(TEXTS, LABELS).save(root / name)
    return out


def _weights(d):
    return d / "model.safetensors"


def _empty_file(d, saved):
    _weights(d).write_bytes(b"")


def _truncated(d, saved):
    data = _weights(d).read_bytes()
    _weights(d).write_bytes(data[: len(data) // 2])


def _no_tensors(d, saved):
    save_file({}, str(_weights(d)))


def _missing_tensor(d, saved):
    w = load_file(str(_weights(d)))
    w.pop(sorted(w)[0])
    save_file(w, str(_weights(d)))


def _wrong_shape(d, saved):
    w = load_file(str(_weights(d)))
    k = next(k for k in sorted(w) if w[k].dim() == 2)
    w[k] = torch.zeros(w[k].shape[0] + 1, w[k].shape[1])
    save_file(w, str(_weights(d)))


def _other_strategy(d, saved):
    shutil.copy(_weights(saved["similarity"]), _weights(d))


def _other_regime(d, saved):       # head-only weights under a full-regime config
    shutil.copy(_weights(saved["head-only"]), _weights(d))


def _weights_deleted(d, saved):
    _weights(d).unlink()


CASES = {
    "empty file": (_empty_file, "cannot be read"),
    "truncated": (_truncated, "cannot be read"),
    "no tensors": (_no_tensors, "saved weights lack"),
    "missing tensor": (_missing_tensor, "saved weights lack 1 of"),
    "wrong shape": (_wrong_shape, "wrong shape"),
    "other strategy": (_other_strategy, "do not fit this model"),
    "other regime": (_other_regime, "saved weights lack"),
    "weights deleted": (_weights_deleted, "cannot be read"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_model_directory_is_a_clear_error(saved, tmp_path, case):
    damage, message = CASES[case]
    d = tmp_path / "m"
    shutil.copytree(saved["full"], d)
    damage(d, saved)
    with pytest.raises(HeadswapError, match=message):
        TextClassifier.load(d)
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "predict", "--model-dir", str(d), "hello", "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and message.split(" of")[0] in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_an_undamaged_copy_loads_and_predicts_the_same(saved, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(saved["full"], d)
    a, b = TextClassifier.load(saved["full"]), TextClassifier.load(d)
    assert torch.allclose(torch.as_tensor(a.predict_proba(TEXTS)), torch.as_tensor(b.predict_proba(TEXTS)))
