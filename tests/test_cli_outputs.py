"""What predict, eval, audit and export do with the places they write (issue 33): one output place has one writer
at a time; a full disk is one line naming the path and leaves no partial or empty output; a writer killed with
SIGTERM does not block the next run; predict refuses texts given twice over (arguments and --data)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_run import invoke
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.saved.atomic import output_lock
from headswap.saved.outputs import MANIFEST

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home", "urgent prize", "running late"] * 3
LABELS = ["spam", "spam", "ham", "ham", "spam", "ham"] * 3
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))       # as a failed write() raises it: no file name


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("outputs")
    enc = make_tiny_encoder(root / "enc")
    model = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0).fit(TEXTS, LABELS)
    data = root / "d.csv"
    data.write_text("text,label\n" + "".join(f"{t} {i},{y}\n" for i, (t, y) in enumerate(zip(TEXTS * 3, LABELS * 3))))
    return {"model": model.save(root / "m"), "data": data, "root": root}


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _listing(folder):
    return sorted((p.name, p.read_bytes()) for p in folder.iterdir())


# ---- predict: one input -------------------------------------------------------------------------------------

def test_predict_refuses_texts_and_data_together(world, tmp_path):
    missing = tmp_path / "missing.csv"      # never opened before: the texts alone used to be predicted, exit 0
    rc, out, err = invoke(["predict", "-q", "--model-dir", str(world["model"]), "--data", str(missing), "hello"])
    assert rc == 2 and out == ""
    assert f"texts on the command line and --data {missing} are two inputs" in _one_line(err)


# ---- one writer per output place ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["predict", "eval", "export"])
def test_a_second_writer_into_the_same_out_stops_at_once(world, tmp_path, command):
    out = tmp_path / ("p.jsonl" if command == "predict" else "out")
    argv = {"predict": ["predict", "-q", "--model-dir", str(world["model"]), "--data", str(world["data"])],
            "eval": ["eval", "-q", "--model-dir", str(world["model"]), "--data", str(world["data"])],
            "export": ["export", "--model-dir", str(world["model"])]}[command]
    with output_lock(out):     # another headswap process writing there
        rc, _, err = invoke([*argv, "--out", str(out)])
        assert rc == 2 and "is being written by another headswap process" in _one_line(err)
        assert str(out.resolve()) in err
        assert not out.exists()
    if command == "predict":   # once it is free, the same command runs
        assert invoke([*argv, "--out", str(out)])[0] == 0
        assert len(out.read_text().splitlines()) == len(TEXTS) * 3


def test_two_predict_processes_never_share_an_out_and_sigterm_leaves_no_block(world, tmp_path):
    """A real second process: the first holds --out while it waits for standard input; SIGTERM ends it as Ctrl-C
    would (exit 143, its lock file removed), and the next run goes ahead."""
    out = tmp_path / "p.jsonl"
    first = subprocess.Popen([sys.executable, "-m", "headswap.cli", "predict", "-q", "--model-dir",
                              str(world["model"]), "--out", str(out)], stdin=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        lock = tmp_path / ".p.jsonl.lock"
        deadline = time.monotonic() + 60
        while not lock.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lock.exists(), first.stderr.read() if first.poll() is not None else "no lock within 60 s"
        rc, _, err = invoke(["predict", "-q", "--model-dir", str(world["model"]), "--out", str(out), "a text"])
        assert rc == 2 and "is being written by another headswap process" in _one_line(err)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        first.stderr.close()
        first.stdin.close()
    assert first.returncode == 128 + signal.SIGTERM
    assert not out.exists() and not lock.exists()    # it was waiting for its first row: no empty file is left
    rc, _, err = invoke(["predict", "-q", "--model-dir", str(world["model"]), "--out", str(out), "a text"])
    assert rc == 0, err
    assert json.loads(out.read_text())["text"] == "a text"


# ---- a full disk ----------------------------------------------------------------------------------------------

class _FillingFile:
    """A real file that takes `room` more bytes, writes what fits of the next text and then fails as a full disk
    does."""

    def __init__(self, path, room: int):
        self.file, self.room = open(path, "a", encoding="utf-8"), room

    def write(self, text: str) -> int:
        if len(text) > self.room:
            self.file.write(text[:self.room])
            self.file.flush()
            self.room = 0
            raise ENOSPC
        self.room -= len(text)
        return self.file.write(text)

    def flush(self):
        self.file.flush()

    def close(self):
        self.file.close()


@pytest.mark.parametrize("room", [100, 5000])
def test_predict_on_a_full_disk_names_out_and_leaves_only_complete_rows(world, tmp_path, monkeypatch, room):
    import headswap.cli.predict as predict
    out = tmp_path / "p.jsonl"
    argv = ["predict", "-q", "--model-dir", str(world["model"]), "--data", str(world["data"]), "--out", str(out)]
    monkeypatch.setattr(predict, "open", lambda path, mode="r", **kw: _FillingFile(path, room) if mode == "a"
                        else open(path, mode, **kw), raising=False)
    rc, _, err = invoke(argv)
    line = _one_line(err)
    assert rc == 2 and f"--out {out}: No space left on device" in line
    if room == 100:     # not one row fitted: no file, not even an empty one
        assert "nothing was kept" in line and not out.exists()
    else:
        data = out.read_bytes()
        assert data.endswith(b"\n") and all(json.loads(x) for x in data.splitlines())
        assert f"the {len(data.splitlines())} complete rows are kept" in line and "--resume" in line
    monkeypatch.undo()
    assert invoke(argv + (["--resume"] if out.exists() else []))[0] == 0       # space again: it continues
    rows = [json.loads(x)["row"] for x in out.read_text().splitlines()]
    assert rows == list(range(2, len(TEXTS) * 3 + 2))        # each line of the file once (line 1: the header)


def test_eval_on_a_full_disk_keeps_the_previous_files_whole(world, tmp_path, monkeypatch):
    import headswap.reports.plots
    out = tmp_path / "ev"
    argv = ["eval", "-q", "--model-dir", str(world["model"]), "--data", str(world["data"]), "--out", str(out)]
    assert invoke(argv)[0] == 0
    before = _listing(out)
    assert [name for name, _ in before] == [MANIFEST, "confusion_matrix.png", "metrics.json",
                                            "reliability_diagram.png"]

    def full(*a, **kw):
        raise ENOSPC
    monkeypatch.setattr(headswap.reports.plots, "plot_reliability", full)   # the last of the three files to be written
    rc, _, err = invoke(argv)
    assert rc == 2 and f"in {out} failed: No space left on device" in _one_line(err)
    assert _listing(out) == before      # not a new metrics.json beside the old charts, and no temporary files
    new = tmp_path / "new-ev"
    rc, _, err = invoke(argv[:-1] + [str(new)])
    assert rc == 2 and not new.exists()


def test_audit_on_a_full_disk_names_the_folder_and_writes_nothing(world, tmp_path, monkeypatch):
    pytest.importorskip("cleanlab")
    from pathlib import Path
    out = tmp_path / "audit"
    argv = ["audit", "-q", "--data", str(world["data"]), "--folds", "2", "--out", str(out)]
    assert invoke(argv)[0] == 0
    before = _listing(out)      # a previous audit's files, kept as they were
    real = Path.write_text

    def write_text(self, *a, **kw):
        if self.name.startswith(".audit.html."):   # the temporary file of the last of the four
            raise ENOSPC
        return real(self, *a, **kw)
    monkeypatch.setattr(Path, "write_text", write_text)
    rc, _, err = invoke(argv)
    assert rc == 2 and f"in {out} failed: No space left on device" in _one_line(err)
    assert _listing(out) == before


def test_an_out_whose_folder_takes_no_lock_file_is_named(world, tmp_path, monkeypatch):
    import filelock

    def read_only(self, *a, **kw):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), self.lock_file)
    monkeypatch.setattr(filelock.FileLock, "acquire", read_only)
    out = tmp_path / "p.jsonl"
    rc, _, err = invoke(["predict", "-q", "--model-dir", str(world["model"]), "--out", str(out), "a text"])
    assert rc == 2 and _one_line(err).endswith(f"--out {out}: cannot write in {tmp_path} (Read-only file system; "
                                               f"the lock file .p.jsonl.lock could not be made)")
