"""Checkpoints and resume: an interrupted run, resumed, ends exactly where an uninterrupted one does.

Model: the tiny transformer (partial regime, so frozen parameters are present) with dropout, so that a
resume that failed to restore the RNG state, the optimizer moments, the scheduler position or the epoch's
shuffle order would end with different weights.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from headswap.train.checkpoint import MARKER, TRAINABLE, CheckpointError, find_checkpoint
from headswap.nn.classifier import Classifier
from headswap.teach.demo import make_collate
from headswap.teach.fixture import fixture_split
from headswap.train.regimes import apply_regime
from headswap.teach.tiny import TinyConfig, TinyTransformer
from headswap.teach.tokenizer import ByteTokenizer
from headswap.train.loop import TrainConfig, fit

SCRIPT = Path(__file__).with_name("mp_train_script.py")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data():
    tr_x, tr_y, _, _ = fixture_split()
    items = [(x, int(y == "spam")) for x, y in zip(tr_x, tr_y)]
    return items[:64], items[64:96]


class Interrupted(Exception):
    pass


def _run(data, ckpt=None, resume=False, stop_after=None, lines=None, kill_at_batch=None, **overrides):
    train, val = data
    torch.manual_seed(0)
    body = TinyTransformer(TinyConfig(hidden=32, heads=2, blocks=2, max_len=32, dropout=0.1))
    model = apply_regime(Classifier(body, 32, 2), "partial", last_n=1)
    cfg = TrainConfig(**{"epochs": 4, "batch_size": 16, "head_lr": 1e-2, "body_lr": 3e-3, "seed": 5,
                         "metric": "accuracy", "progress": False, "checkpoint_dir": ckpt and str(ckpt),
                         "resume": resume, **overrides})

    def stop(entry):
        if stop_after is not None and entry.epoch == stop_after:
            raise Interrupted(entry.epoch)

    collate, calls = make_collate(ByteTokenizer()), [0]

    def collate_or_die(batch):   # a crash at the kill_at_batch-th batch built (training or validation)
        calls[0] += 1
        if calls[0] == kill_at_batch:
            raise Interrupted(calls[0])
        return collate(batch)

    result = fit(model, train, collate_or_die, cfg, eval_items=val,
                 eval_labels=[y for _, y in val], label_names=["ham", "spam"], positive_label="spam",
                 log=(lines.append if lines is not None else None), on_epoch_end=stop)
    weights = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return result, weights


def _history(result):
    return [{k: v for k, v in asdict(h).items() if k != "seconds"} for h in result.history]


def _same_weights(a, b, atol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=k)


@pytest.fixture(scope="module")
def reference(data):
    return _run(data)


def _interrupted_at(data, ckpt, epoch):
    with pytest.raises(Interrupted):
        _run(data, ckpt, stop_after=epoch)
    return json.loads((ckpt / "last" / MARKER).read_text())


# ---- 1. interrupted + resumed == uninterrupted -----------------------------------------------------------------


def test_interrupted_run_resumes_to_the_same_result(data, reference, tmp_path):
    meta = _interrupted_at(data, tmp_path, 2)
    assert meta["epoch"] == 2 and len(meta["history"]) == 2
    lines = []
    result, weights = _run(data, tmp_path, resume=True, lines=lines)
    ref_result, ref_weights = reference
    assert result.resumed_epoch == 2
    assert any("resuming from checkpoint" in m and "epoch 2/4 done, continuing with epoch 3" in m for m in lines)
    trained = [m.split(":")[0].strip() for m in lines if m.strip().startswith("epoch ")]
    assert trained == ["epoch 3/4", "epoch 4/4"]                             # epochs 1-2 were not retrained
    _same_weights(weights, ref_weights)
    assert _history(result) == _history(ref_result)
    assert (result.best_epoch, result.best_score) == (ref_result.best_epoch, ref_result.best_score)
    # the validations this call made, epochs 3 and 4, the same logits as the uninterrupted run's
    assert len(result.eval_logits) == 2
    for mine, theirs in zip(result.eval_logits, ref_result.eval_logits[2:]):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_every_validations_logits_are_kept_and_the_kept_epochs_are_among_them(data, reference):
    """auto's blend checks out of fold the pick of the kept weights among all a run's validations: the loop hands
    back each one's logits, in order, and the kept epoch's are those it picked."""
    result, _ = reference
    labels = torch.tensor([y for _, y in data[1]])
    assert len(result.eval_logits) == len(result.history) == 4
    for logits, h in zip(result.eval_logits, result.history):
        assert (logits.argmax(1) == labels).float().mean().item() == pytest.approx(h.score)
    assert torch.equal(result.eval_logits[result.best_epoch - 1], result.best_eval_logits)
    assert "eval_logits" not in result.to_dict() and result.to_dict()["best_epoch"] == result.best_epoch


def test_past_their_byte_cap_no_validations_logits_are_kept(data, monkeypatch):
    import headswap.train.loop

    monkeypatch.setattr(headswap.train.loop, "KEEP_EVAL_LOGITS_BYTES", 2.5 * len(data[1]) * 2 * 4)   # 2.5 validations
    result, _ = _run(data)
    assert result.eval_logits == [] and result.best_eval_logits is not None and len(result.history) == 4


def test_resuming_a_finished_run_trains_nothing_and_returns_the_same_model(data, reference, tmp_path):
    _run(data, tmp_path)
    lines = []
    result, weights = _run(data, tmp_path, resume=True, lines=lines)
    assert result.resumed_epoch == 4 and any("nothing left to train" in m for m in lines)
    _same_weights(weights, reference[1])
    assert _history(result) == _history(reference[0])


def test_resume_without_a_checkpoint_starts_from_scratch(data, reference, tmp_path):
    lines = []
    result, weights = _run(data, tmp_path / "empty", resume=True, lines=lines)
    assert any("no checkpoint in" in m and "from scratch" in m for m in lines)
    assert result.resumed_epoch == 0
    _same_weights(weights, reference[1])


# ---- 1b. mid-epoch checkpoints (checkpoint_every) --------------------------------------------------------------
# 64 training texts in batches of 16: 4 steps per epoch, then one validation batch; checkpoints every 3 steps
# (inside each epoch) and at each epoch's end. Batch 7 is epoch 2's second step (last checkpoint: the end of
# epoch 1); batch 10 is its fourth step, after the mid-epoch checkpoint at step 3.


@pytest.mark.parametrize("kill_at_batch, epochs_done, step", [(7, 1, 0), (10, 1, 3)])
@pytest.mark.parametrize("group_by_length", [False, True])
def test_a_run_killed_inside_an_epoch_resumes_to_the_same_result(data, kill_at_batch, epochs_done, step,
                                                                  group_by_length, tmp_path):
    every = {"checkpoint_every": 3, "group_by_length": group_by_length}
    ref_result, ref_weights = _run(data, **every)
    with pytest.raises(Interrupted):
        _run(data, tmp_path, kill_at_batch=kill_at_batch, **every)
    meta = json.loads((tmp_path / "last" / MARKER).read_text())
    assert (meta["epoch"], meta["step"]) == (epochs_done, step)
    lines = []
    result, weights = _run(data, tmp_path, resume=True, lines=lines, **every)
    where = f"step {step} of epoch 2" if step else "epoch 1/4 done"
    assert any(f"resuming from checkpoint {tmp_path / 'last'}: {where}" in m for m in lines), lines
    _same_weights(weights, ref_weights)
    assert _history(result) == _history(ref_result)      # the resumed epoch's loss counts the steps before it


def test_mid_epoch_checkpoints_do_not_change_training(data, reference, tmp_path):
    result, weights = _run(data, tmp_path, checkpoint_every=1)
    _same_weights(weights, reference[1], atol=0)
    assert _history(result) == _history(reference[0])


# ---- 3. partial, corrupt and incompatible checkpoints -----------------------------------------------------------


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "headswap.train.loop"]


def test_half_written_checkpoint_is_reported_and_never_loaded(data, reference, tmp_path, caplog):
    _interrupted_at(data, tmp_path, 1)
    # A save killed mid-write: a .tmp dir with some files and no marker, and no `last` at all.
    half = tmp_path / ".tmp-0123456789ab"
    os.replace(tmp_path / "last", half)
    (half / MARKER).unlink()
    (half / TRAINABLE).write_bytes((half / TRAINABLE).read_bytes()[:100])   # truncated
    lines = []
    result, weights = _run(data, tmp_path, resume=True, lines=lines)
    [warning] = _warnings(caplog)
    assert str(half) in warning and "incomplete" in warning and MARKER in warning
    assert "optimizer.pt" not in warning                                   # present, so not named
    assert any("no checkpoint in" in m for m in lines)
    assert result.resumed_epoch == 0
    _same_weights(weights, reference[1])
    assert not half.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["last"]   # cleaned by the save


def test_last_without_marker_is_incomplete_and_names_what_is_missing(data, reference, tmp_path, caplog):
    _interrupted_at(data, tmp_path, 1)
    (tmp_path / "last" / MARKER).unlink()
    (tmp_path / "last" / "rng.pt").unlink()
    lines = []
    result, weights = _run(data, tmp_path, resume=True, lines=lines)
    [warning] = _warnings(caplog)
    assert "incomplete" in warning and MARKER in warning and "rng.pt" in warning and "from scratch" in warning
    assert "optimizer.pt" not in warning
    assert result.resumed_epoch == 0
    _same_weights(weights, reference[1])


def test_interrupted_swap_recovers_the_newest_complete_checkpoint(data, reference, tmp_path, caplog):
    # A crash between "rename last -> .old-*" and "rename .tmp-* -> last": no `last`, two complete copies.
    _interrupted_at(data, tmp_path, 1)
    shutil.copytree(tmp_path / "last", tmp_path / ".old-aaaaaaaaaaaa")
    _interrupted_at(data, tmp_path, 2)
    os.replace(tmp_path / "last", tmp_path / ".tmp-bbbbbbbbbbbb")
    lines = []
    result, weights = _run(data, tmp_path, resume=True, lines=lines)
    assert result.resumed_epoch == 2
    assert any("using the complete checkpoint" in m and ".tmp-bbbbbbbbbbbb" in m for m in _warnings(caplog))
    assert any("resuming from checkpoint" in m for m in lines)
    _same_weights(weights, reference[1])


def test_corrupt_checkpoint_raises_a_clear_error(data, tmp_path):
    _interrupted_at(data, tmp_path, 1)
    f = tmp_path / "last" / TRAINABLE
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 0xFF                         # same size, one flipped bit in a weight
    f.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"corrupt: trainable\.safetensors: sha256"):
        _run(data, tmp_path, resume=True)
    (tmp_path / "last" / MARKER).write_text("{not json")
    with pytest.raises(CheckpointError, match="checkpoint.json is corrupt"):
        _run(data, tmp_path, resume=True)


def test_incompatible_checkpoint_raises_a_clear_error(data, tmp_path):
    _interrupted_at(data, tmp_path, 1)
    with pytest.raises(CheckpointError, match=r"different training setup.*epochs=4 there, 6 here"):
        _run(data, tmp_path, resume=True, epochs=6)
    with pytest.raises(CheckpointError, match=r"n_train: 64 there, 48 here"):
        _run((data[0][:48], data[1]), tmp_path, resume=True)
    other = [(text, 1 - label) for text, label in data[0]]          # same size, other labels
    with pytest.raises(CheckpointError, match=r"the training data differ"):
        _run((other, data[1]), tmp_path, resume=True)


def test_resume_with_another_max_length_says_so(data, tmp_path):
    """Another max_length tokenizes the same texts to other ids: the error names max_length, not the data."""
    with pytest.raises(Interrupted):
        _run(data, tmp_path, stop_after=1, max_length=32)
    shorter = ([(text[:16], label) for text, label in data[0]], data[1])     # what a shorter max_length does
    with pytest.raises(CheckpointError, match=r"max_length=32 there, 16 here") as e:
        _run(shorter, tmp_path, resume=True, max_length=16)
    assert "data differ" not in str(e.value)


# ---- 2. a real SIGKILL -------------------------------------------------------------------------------------------


def _victim(out, *args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(SCRIPT), str(out), *KILL_ARGS, *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


KILL_ARGS = ("--epochs", "4", "--dropout", "0.1")


def test_sigkilled_training_resumes_from_its_checkpoint(tmp_path, capsys):
    """A subprocess trains with checkpoints and is SIGKILLed during epoch 2 (each batch takes >= 0.1 s, so
    the kill lands inside the epoch after the first checkpoint appears); a fresh run with
    resume continues from the checkpoint's epoch and ends with the weights of an uninterrupted run (the
    reference and the resumed run call the same script's main() in this process, one thread, as the
    subprocess does)."""
    import mp_train_script

    mp_train_script.main([str(tmp_path / "ref"), *KILL_ARGS])
    ckpt = tmp_path / "ckpt"
    victim = _victim(tmp_path / "killed", "--checkpoint-dir", str(ckpt), "--batch-delay", "0.1")
    try:
        deadline = time.monotonic() + 180
        while not (ckpt / "last" / MARKER).exists():
            assert victim.poll() is None, f"training ended before its first checkpoint:\n{victim.stdout.read()}"
            assert time.monotonic() < deadline, "no checkpoint after 180 s"
            time.sleep(0.02)
        assert victim.poll() is None, "training finished before it could be killed"
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
    victim.stdout.close()
    assert not (tmp_path / "killed" / "result.json").exists()
    # The kill may even land between the two renames of a checkpoint swap; the loader handles that too.
    done = find_checkpoint(ckpt, info=lambda msg: None, warn=lambda msg: None).epoch
    assert 1 <= done < 4
    capsys.readouterr()
    mp_train_script.main([str(tmp_path / "resumed"), *KILL_ARGS, "--checkpoint-dir", str(ckpt), "--resume"])
    out = capsys.readouterr().out
    assert f"epoch {done}/4 done, continuing with epoch {done + 1}" in out, out
    assert f"epoch {done}/4:" not in out and "epoch 4/4:" in out          # picks up after the checkpoint
    ref = json.loads((tmp_path / "ref" / "result.json").read_text())
    got = json.loads((tmp_path / "resumed" / "result.json").read_text())
    assert got["resumed_epoch"] == done
    assert got["history"] == ref["history"] and got["accuracy"] == ref["accuracy"]
    _same_weights(load_file(str(tmp_path / "resumed" / "model.safetensors")),
                  load_file(str(tmp_path / "ref" / "model.safetensors")))


# ---- the best epoch --------------------------------------------------------------------------------------------


def test_the_best_epoch_is_a_higher_score_or_the_same_score_at_a_lower_validation_loss(reference):
    """A metric that saturates (accuracy 1.0 on a small validation set) ties from epoch to epoch; the first epoch to
    reach it must not be kept over a better-trained one. The loss breaks the tie, and only a tie."""
    from headswap.train.checkpoint import better_than

    assert better_than(0.9, 0.5, None, None) and better_than(0.91, 0.9, 0.9, 0.1)
    assert better_than(1.0, 0.05, 1.0, 0.2) and not better_than(1.0, 0.2, 1.0, 0.05)
    assert not better_than(0.89, 0.01, 0.9, 0.5) and not better_than(1.0, None, 1.0, 0.2)
    result, _ = reference
    losses = [h.val_loss for h in result.history]
    assert all(isinstance(v, float) and v > 0 for v in losses)
    key = [(h.score, -h.val_loss) for h in result.history]
    assert key.index(max(key)) + 1 == result.best_epoch
