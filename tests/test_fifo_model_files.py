"""A model file that is a named pipe (or anything but a regular file) is refused with one line naming it, before
anything opens it: opening a FIFO for reading blocks until a writer comes, so `predict` hung forever. Each load
runs in a subprocess with a timeout, so a regression fails the test instead of hanging it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.baseline.tfidf import TfidfClassifier

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("fifo")
    enc = make_tiny_encoder(root / "enc")
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0).fit(TEXTS, LABELS)
    out = {"enc": enc, "torch": clf.save(root / "torch"), "tfidf": TfidfClassifier().fit(TEXTS, LABELS).save(
        root / "tfidf")}
    if _has_onnx():
        from headswap.jobs.export import export
        export(out["torch"], root / "onnx")
        out["onnx"] = root / "onnx"
    return out


def _has_onnx() -> bool:
    import importlib.util
    return importlib.util.find_spec("onnxruntime") is not None


def _fifo_instead_of(file):
    file.unlink()
    os.mkfifo(file)


def _predict(model_dir):
    return subprocess.run([sys.executable, "-m", "headswap.cli", "predict", "-q", "--model-dir", str(model_dir),
                           "hello"], capture_output=True, text=True, timeout=60)


def _refused(r, file):
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(lines) == 1 and r.stdout == "", r.stderr
    assert f"{file} is a named pipe (FIFO), not a regular file" in lines[0], r.stderr


CASES = {"torch weights": ("torch", "model.safetensors"), "torch config": ("torch", "headswap_config.json"),
         "tfidf weights": ("tfidf", "model.safetensors"), "onnx graph": ("onnx", "model.onnx"),
         "onnx tokenizer": ("onnx", "tokenizer/tokenizer.json")}


@pytest.mark.parametrize("case", list(CASES))
def test_a_fifo_in_a_saved_model_is_refused(models, tmp_path, case):
    kind, name = CASES[case]
    if kind not in models:
        pytest.skip("onnxruntime is not installed")
    d = tmp_path / "m"
    shutil.copytree(models[kind], d)
    _fifo_instead_of(d / name)
    _refused(_predict(d), d / name)


def test_a_fifo_in_the_base_model_folder_is_refused(models, tmp_path):
    base = tmp_path / "enc"
    shutil.copytree(models["enc"], base)
    weights = next(f for f in base.iterdir() if f.suffix == ".safetensors")
    _fifo_instead_of(weights)
    d = tmp_path / "m"
    shutil.copytree(models["torch"], d)
    config = json.loads((d / "headswap_config.json").read_text())
    config["params"]["model"] = config["base_model"]["ref"] = str(base)
    (d / "headswap_config.json").write_text(json.dumps(config))
    _refused(_predict(d), weights)
