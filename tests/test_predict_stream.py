"""headswap predict streams: output appears chunk by chunk, and --resume neither redoes nor duplicates rows."""

import json
import signal
import subprocess
import sys
import time

import pytest

from headswap import TextClassifier
from headswap.errors import DataError
from headswap.data.stream import iter_texts
from tiny_models import make_tiny_encoder

WORDS = ["win", "cash", "now", "see", "you", "at", "noon", "free", "call", "me", "ok", "home"]


def _texts(n):
    return [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 5)) + f" {i}" for i in range(n)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    enc = make_tiny_encoder(root / "enc")
    clf = TextClassifier(strategy="encoder-mlp", model=str(enc), epochs=1, progress=False, eval_fraction=0)
    clf.fit(["win cash now", "free call now", "see you at noon", "ok home"] * 3, ["spam", "spam", "ham", "ham"] * 3)
    return clf.save(root / "model")


def _csv(path, n):
    path.write_text("text,label\n" + "".join(f"{t},x\n" for t in _texts(n)))
    return path


def _cli(*args, **kw):
    return [sys.executable, "-m", "headswap.cli", "predict", *args]


def test_iter_texts_is_lazy_and_names_the_bad_line(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(b"text,label\nfirst,a\nsecond,b\nbad \xff byte,c\n")
    rows = iter_texts(path)
    assert next(rows) == (2, "first") and next(rows) == (3, "second")
    with pytest.raises(DataError, match=r"line 4 \(byte offset 32\)"):
        next(rows)


def test_output_streams_before_input_ends(model_dir):
    """With stdin still open, the first chunk's predictions are already written: nothing waits for the end."""
    proc = subprocess.Popen(_cli("--model-dir", str(model_dir), "--chunk-size", "4", "-q"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("".join(t + "\n" for t in _texts(4)))
        proc.stdin.flush()
        got = [json.loads(proc.stdout.readline()) for _ in range(4)]
        assert [g["text"] for g in got] == _texts(4)
        assert proc.poll() is None  # still running, waiting for more input
        proc.stdin.write("one more\n")
        proc.stdin.close()
        rest = proc.stdout.read().splitlines()
        assert proc.wait(60) == 0 and len(rest) == 1
    finally:
        proc.kill()


def test_resume_after_a_kill_matches_a_clean_run(model_dir, tmp_path):
    data = _csv(tmp_path / "big.csv", 1200)
    clean = tmp_path / "clean.jsonl"
    r = subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(data), "--out", str(clean), "-q"),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    expected = clean.read_text().splitlines()
    assert len(expected) == 1200 and [json.loads(x)["row"] for x in expected[:2]] == [2, 3]

    out = tmp_path / "killed.jsonl"
    proc = subprocess.Popen(_cli("--model-dir", str(model_dir), "--data", str(data), "--out", str(out),
                                 "--chunk-size", "16", "-q"), stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or out.stat().st_size < 20_000):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(out.read_bytes().split(b"\n")) - 1
    assert 0 < done_before < 1200, "the kill should land mid-run"
    with open(out, "ab") as f:  # a kill can leave half a line; resume must cut it off
        f.write(b'{"row": 99999, "te')
    r = subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(data), "--out", str(out), "--resume"),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"resuming after {done_before} rows" in r.stderr
    got = [json.loads(x) for x in out.read_text().splitlines()]
    want = [json.loads(x) for x in expected]
    # Rows, texts and labels are identical; probabilities differ by float rounding at most (the killed run
    # used smaller chunks, so its batches were padded differently).
    assert [(g["row"], g["text"], g["label"]) for g in got] == [(w["row"], w["text"], w["label"]) for w in want]
    assert max(abs(g["probabilities"][k] - w["probabilities"][k]) for g, w in zip(got, want)
               for k in w["probabilities"]) < 1e-5


def test_resume_refuses_output_from_another_input(model_dir, tmp_path):
    out = tmp_path / "o.jsonl"
    subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(_csv(tmp_path / "a.csv", 10)), "--out", str(out),
                        "-q"), check=True, capture_output=True)
    other = tmp_path / "b.csv"
    other.write_text("text,label\n" + "".join(f"different {i},x\n" for i in range(20)))
    r = subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(other), "--out", str(out), "--resume"),
                       capture_output=True, text=True)
    assert r.returncode == 2 and "refusing to resume" in r.stderr
    r = subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(other), "--out", str(out)),
                       capture_output=True, text=True)
    assert r.returncode == 2 and "pass --resume" in r.stderr


@pytest.mark.parametrize("resume", [False, True])
def test_out_equal_to_the_input_is_refused_and_the_input_untouched(model_dir, tmp_path, resume):
    data = tmp_path / "d.csv"
    data.write_bytes(b"text,label\nwin cash now,x\nsee you at noon,x")      # no trailing newline
    before = data.read_bytes()
    r = subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(data), "--out", str(data),
                            *(["--resume"] if resume else []), "-q"), capture_output=True, text=True)
    assert r.returncode == 2 and "is the input file" in r.stderr and "Traceback" not in r.stderr
    assert data.read_bytes() == before


def test_resume_into_a_file_that_is_not_predictions_changes_nothing(model_dir, tmp_path):
    data = _csv(tmp_path / "a.csv", 5)
    other = tmp_path / "notes.txt"
    other.write_bytes(b"text,label\nsomething else\nhalf a line")
    before = other.read_bytes()
    r = subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(data), "--out", str(other), "--resume",
                            "-q"), capture_output=True, text=True)
    assert r.returncode == 2 and "line 1 is not a headswap prediction" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and other.read_bytes() == before


def test_a_header_only_file_is_an_error_not_silence(model_dir, tmp_path):
    data = tmp_path / "empty.csv"
    data.write_text("text,label\n")
    r = subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(data), "-q"), capture_output=True, text=True)
    assert r.returncode == 2 and "holds no texts to predict" in r.stderr and r.stdout == ""


def test_truncation_is_reported_once_for_the_whole_stream(model_dir, tmp_path):
    data = tmp_path / "long.csv"
    data.write_text("text\n" + "".join(" ".join(["cash"] * 300) + f" {i}\n" for i in range(5)))
    r = subprocess.run(_cli("--model-dir", str(model_dir), "--data", str(data), "--chunk-size", "2", "-q"),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if "truncated" in line]
    assert notes == ["5 of 5 texts were longer than 128 tokens and were truncated (raise max_length to keep more)"]
    assert len(r.stdout.splitlines()) == 5
