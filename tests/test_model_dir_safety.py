"""Saving a model never deletes what headswap did not write, never leaves half a model or temporary files,
never lets two writers destroy each other's files, and writes files other users can read (issue 23)."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest
from cli_run import signalled
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.saved.atomic import output_lock
from headswap.errors import HeadswapError
from headswap.saved.model_dir import CONFIG_FILE, WEIGHTS_FILE, save_into
from headswap.baseline.tfidf import TfidfClassifier

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("safety") / "enc")


@pytest.fixture(scope="module")
def fitted(enc):
    return TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0).fit(TEXTS, LABELS)


def _data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    (d / "test.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS[:4], LABELS[:4])))
    return d


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "headswap.cli", *args], capture_output=True, text=True)


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_saving_over_a_model_keeps_what_headswap_did_not_write(fitted, tmp_path):
    out = tmp_path / "m"
    save_into(out, fitted.save)
    (out / "notes.txt").write_text("my notes")
    (out / "eval").mkdir()
    (out / "eval" / "metrics.json").write_text("{}")
    (out / "checkpoints").mkdir()                      # a run's own checkpoints: replaced with the model
    (out / WEIGHTS_FILE).write_bytes(b"old weights")    # what the save writes is replaced
    save_into(out, fitted.save)
    assert (out / "notes.txt").read_text() == "my notes"
    assert (out / "eval" / "metrics.json").read_text() == "{}"
    assert not (out / "checkpoints").exists()
    np.testing.assert_allclose(TextClassifier.load(out, progress=False).predict_proba(TEXTS[:4]),
                               fitted.predict_proba(TEXTS[:4]), atol=1e-6)
    assert _leftovers(tmp_path) == []


def test_train_and_eval_cli_keep_the_users_files(enc, tmp_path):
    data, out = _data(tmp_path), tmp_path / "m"
    args = ["train", "--data", str(data), "--model", str(enc), "--epochs", "1", "--out", str(out), "-q"]
    assert _cli(*args).returncode == 0
    r = _cli("eval", "--model-dir", str(out), "--data", str(data), "-q")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m-eval" / "metrics.json").is_file() and not (out / "eval").exists()
    (out / "eval").mkdir()                             # what older versions wrote by default
    (out / "eval" / "metrics.json").write_text("{}")
    (out / "notes.txt").write_text("keep me")
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    assert (out / "notes.txt").read_text() == "keep me" and (out / "eval" / "metrics.json").is_file()


def test_a_second_writer_of_the_same_out_stops_at_once(enc, tmp_path):
    data, out = _data(tmp_path), tmp_path / "m"
    with output_lock(out):
        r = _cli("train", "--data", str(data), "--model", str(enc), "--epochs", "1", "--out", str(out), "-q")
    assert r.returncode == 2 and "being written by another headswap process" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
    with output_lock(out):      # released when the first writer finished
        pass
    assert _leftovers(tmp_path) == []


def test_concurrent_saves_never_mix_or_break_a_model(tmp_path):
    out = tmp_path / "m"
    models = [TfidfClassifier().fit(TEXTS, LABELS if i % 2 else LABELS[::-1]) for i in range(4)]
    errors = []

    def save(clf):
        try:
            for _ in range(5):
                save_into(out, clf.save)
        except Exception as e:  # noqa: BLE001 - any failure is the test's failure
            errors.append(e)

    threads = [threading.Thread(target=save, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    again = TfidfClassifier.load(out)    # one complete model, whichever saved last
    assert any(np.allclose(again.predict_proba(TEXTS), m.predict_proba(TEXTS)) for m in models)
    assert _leftovers(tmp_path) == []


def test_a_full_disk_leaves_the_old_model_and_no_leftovers(fitted, tmp_path, monkeypatch):
    out = tmp_path / "m"
    save_into(out, fitted.save)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    def full(folder):
        (folder / WEIGHTS_FILE).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / WEIGHTS_FILE))

    with pytest.raises(HeadswapError, match=r"saving the model to .* failed: No space left on device; .* is as it was"):
        save_into(out, full)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert _leftovers(tmp_path) == []


def test_a_failed_train_save_says_the_checkpoints_are_kept(fitted, tmp_path, monkeypatch):
    from headswap.cli.train import save_atomically
    out = tmp_path / "m"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "epoch-1.pt").write_bytes(b"x" * 2**20)

    def full(self, folder):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TextClassifier, "save", full)
    with pytest.raises(HeadswapError, match=r"No space left on device; .* checkpoints in .* \(1 MB\) are kept: "
                                            r"rerun with --resume"):
        save_atomically(fitted, out)
    assert (out / "checkpoints" / "epoch-1.pt").is_file() and _leftovers(tmp_path) == []


def test_saved_files_are_readable_by_other_users(fitted, tmp_path):
    old = os.umask(0o022)
    try:
        out = save_into(tmp_path / "m", fitted.save)
        tfidf = save_into(tmp_path / "t", TfidfClassifier().fit(TEXTS, LABELS).save)
    finally:
        os.umask(old)
    for folder in (out, tfidf):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644, name
    plain = fitted.save(tmp_path / "direct")            # TextClassifier.save without the swap too
    assert stat.S_IMODE((plain / WEIGHTS_FILE).stat().st_mode) == 0o644


def test_auto_ships_its_winner_without_deleting_the_users_files(tmp_path):
    from headswap.auto.ship import ship
    out = tmp_path / "auto"
    (out / "model").mkdir(parents=True)
    (out / "model" / "mine.txt").write_text("mine")
    target, why = ship(TfidfClassifier().fit(TEXTS, LABELS), out, "none", print)
    assert "nothing to export" in why
    assert (target / "mine.txt").read_text() == "mine" and (target / CONFIG_FILE).is_file()
    assert _leftovers(out) == []


def test_a_full_disk_during_train_is_one_line_and_keeps_the_old_model(enc, tmp_path, monkeypatch, capsys):
    """safetensors reports a full disk as its own error type ("... (os error 28)"), not as an OSError."""
    import safetensors.torch
    from safetensors import SafetensorError

    from headswap.cli.parser import main
    data, out = _data(tmp_path), tmp_path / "m"
    args = ["train", "--data", str(data), "--model", str(enc), "--epochs", "1", "--out", str(out), "-q"]
    assert main(args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    real = safetensors.torch.save_file

    def full(tensors, filename, metadata=None):
        real(tensors, filename, metadata=metadata)      # the file is half there when the disk fills up
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"headswap train: error: saving the model to {out} failed: No space left on device; "
                              f"{out} is as it was"), err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert _leftovers(tmp_path) == [] and _leftovers(out) == []


def test_a_refused_train_leaves_no_folders_or_lock_behind(tmp_path):
    out = tmp_path / "runs" / "new" / "m"
    r = _cli("train", "--data", str(tmp_path / "nope.csv"), "--out", str(out))
    assert r.returncode == 2 and "nope.csv" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_eval_default_output_beside_the_model_must_not_be_a_file(fitted, tmp_path):
    data, out = _data(tmp_path), save_into(tmp_path / "m", fitted.save)
    (tmp_path / "m-eval").write_text("not a folder")
    r = _cli("eval", "--model-dir", str(out), "--data", str(data), "-q")
    assert r.returncode == 2 and "the default --out" in r.stderr and "m-eval is an existing file" in r.stderr
    assert "Traceback" not in r.stderr and (tmp_path / "m-eval").read_text() == "not a folder"


def test_a_full_disk_while_writing_a_checkpoint_is_one_line(enc, tmp_path, monkeypatch, capsys):
    import torch

    from headswap.cli.parser import main
    data, out = _data(tmp_path), tmp_path / "m"
    args = ["train", "--data", str(data), "--model", str(enc), "--epochs", "1", "--out", str(out), "-q"]
    assert main(args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = torch.save

    def full(obj, f, *a, **kw):
        real(obj, f, *a, **kw)
        raise OSError(errno.ENOSPC, "No space left on device", str(f))

    monkeypatch.setattr(torch, "save", full)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"headswap train: error: writing a training checkpoint in {out / 'checkpoints'} failed: "
                       f"No space left on device; no checkpoint was written"), err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before     # no checkpoints folder left either
    assert _leftovers(tmp_path) == []


def test_torch_saves_short_write_on_a_full_disk_is_named(tmp_path, monkeypatch):
    """torch.save loses errno on a full disk ("unexpected pos"); free space tells it apart."""
    import shutil

    import torch

    from headswap.train import checkpoint

    def short(obj, f, *a, **kw):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", short)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9, 4096))
    with pytest.raises(HeadswapError, match=r"checkpoint in .* failed: No space left on device; no checkpoint"):
        checkpoint.write_checkpoint(tmp_path / "ck", {}, {"w": torch.zeros(2)}, {}, {}, [])
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 0, 10**9))
    with pytest.raises(HeadswapError, match=r"failed: \[enforce fail at .*unexpected pos 704 vs 598"):
        checkpoint.write_checkpoint(tmp_path / "ck", {}, {"w": torch.zeros(2)}, {}, {}, [])


# ---- stopped from outside: SIGTERM is Ctrl-C, SIGKILL leaves what --resume needs ------------------------------

def _long_data(tmp_path, n=300):
    d = tmp_path / "long"
    d.mkdir()
    (d / "train.csv").write_text("text,label\n" + "".join(f"{TEXTS[i % 12]} {i},{LABELS[i % 12]}\n" for i in range(n)))
    return d


def _dot_files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*"))


def test_sigterm_during_train_leaves_no_lock_or_empty_folders(enc, tmp_path):
    """SIGTERM while training into runs/new/m (folders that did not exist): the command ends as Ctrl-C ends it,
    exit 143, with the lock file gone and the folders made for OUT removed, unless they hold a checkpoint."""
    data, out = _long_data(tmp_path), tmp_path / "runs" / "new" / "m"
    rc, err = signalled(["train", "--data", str(data), "--model", str(enc), "--epochs", "30", "--eval-fraction", "0",
                         "--out", str(out), "-q"], lambda err: "training encoder-mlp" in err, signal.SIGTERM)
    assert rc == 143 and err.strip().splitlines()[-1] == "terminated (SIGTERM)" and "Traceback" not in err, err
    assert _dot_files(tmp_path) == []
    if (tmp_path / "runs").exists():                # only to keep a checkpoint for --resume
        assert [p.name for p in out.iterdir()] == ["checkpoints"]


def test_train_killed_after_a_checkpoint_resumes_and_rerun(enc, tmp_path):
    """SIGKILL (kill -9) after the first epoch's checkpoint: nothing can clean up, so the lock file stays; the
    rerun with --resume takes the lock all the same, continues from the checkpoint and saves the model."""
    from headswap.train.checkpoint_files import MARKER
    data, out = _long_data(tmp_path), tmp_path / "m"
    argv = ["train", "--data", str(data), "--model", str(enc), "--epochs", "4", "--eval-fraction", "0",
            "--out", str(out), "-q"]
    rc, _ = signalled(argv, lambda err: (out / "checkpoints" / "last" / MARKER).exists(), signal.SIGKILL)
    assert rc == -signal.SIGKILL and not (out / CONFIG_FILE).exists()
    r = _cli(*argv, "--resume")
    assert r.returncode == 0, r.stderr
    assert "continuing with epoch" in r.stderr, r.stderr
    assert TextClassifier.load(out, progress=False).predict(["win cash now"]).shape == (1,)
    assert not (out / "checkpoints").exists() and _dot_files(tmp_path) == []


def test_auto_and_bench_refuse_an_out_holding_the_users_report_files(enc, tmp_path):
    """A folder with the user's own results.md (or report.html, results.json) is refused with one line and left
    as it was; a folder of other files is written beside them, and an earlier run's folder is written again."""
    data = _data(tmp_path)
    for command, name in (("auto", "results.md"), ("bench", "report.html"), ("auto", "results.json")):
        out = tmp_path / f"{command}-{name}"
        out.mkdir()
        (out / name).write_text("mine")
        extra = ["--budget", "30s"] if command == "auto" else ["--strategies", "encoder-mlp", "--epochs", "1"]
        r = _cli(command, "--data", str(data), "--model", str(enc), "--out", str(out), "-q", *extra)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"holds {name}, which no headswap run wrote" in lines[0]
        assert sorted(p.name for p in out.iterdir()) == [name] and (out / name).read_text() == "mine"
    out = tmp_path / "beside"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    for _ in range(2):      # the second run finds the first one's results.json and writes over it
        r = _cli("auto", "--data", str(data), "--model", str(enc), "--out", str(out), "-q", "--budget", "20s",
                 "--strategies", "encoder-mlp")
        assert r.returncode == 0, r.stderr
    assert (out / "notes.txt").read_text() == "keep me" and (out / "results.md").is_file()
