"""auto's arms train a slice at a time (headswap.auto.runners): a run cut into time-limited slices, each resuming from
the checkpoint the loop wrote where the last one stopped, trains exactly as one uninterrupted run; what a Ray
worker sends back packs and unpacks safely."""

from __future__ import annotations

import io
import tarfile
import types

import pytest
import torch
from test_auto import world  # noqa: F401  (the tiny encoder and spam/ham data of auto's tests)
from test_ladder import LABELS, TEXTS

import headswap.train.loop
from headswap.classifier.estimator import TextClassifier
from headswap.auto.runners import pack, slice_points, train_slice, unpack
from headswap.auto.ladder import Rung
from headswap.data.load import from_lists
from headswap.train.checkpoint_files import find_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_sliced_run_trains_as_one_uninterrupted_run(world, tmp_path, monkeypatch):
    """The loop reads a clock that moves 0.1 s a reading, so each slice stops at the same step whatever the load."""
    _, enc, _, _ = world
    readings = iter(range(10 ** 7))
    monkeypatch.setattr(headswap.train.loop, "time", types.SimpleNamespace(perf_counter=lambda: next(readings) / 10))
    rung = Rung(enc, "encoder", "encoder-mlp", "full", 3)
    train, validation = from_lists(TEXTS[::2], LABELS[::2]), from_lists(TEXTS[1::2], LABELS[1::2])
    base = {"batch_size": 4, "eval_every": 3, "temperature_scaling": False, "progress": False, "seed": 1, "epochs": 3}
    whole, result = train_slice(rung, {**base, "checkpoint_dir": str(tmp_path / "whole")}, train, validation, 0)
    assert result["finished"] and not result.get("error")

    seen, slices, clf = 0, 0, None
    while True:
        clf, result = train_slice(rung, {**base, "checkpoint_dir": str(tmp_path / "sliced"), "time_limit": 1.0},
                                  train, validation, seen)
        assert not result.get("error"), result
        assert all(0 <= t for t, _ in result["points"]) and result["points"]    # each slice validates
        seen, slices = result["history_length"], slices + 1
        if result["finished"]:
            break
        assert slices < 60
    assert slices > 3                    # it was cut, several times, mid-epoch too
    ends = lambda c: [(h["epoch"], h["train_loss"], h["score"]) for h in c.history_ if h["steps"] == 8]  # noqa: E731
    assert len(ends(whole)) == 3 and ends(clf) == ends(whole)      # the same losses and scores at every epoch end
    last = [find_checkpoint(tmp_path / d, lambda _: None, lambda _: None).trainable() for d in ("whole", "sliced")]
    assert last[0].keys() == last[1].keys()
    assert all(torch.equal(last[0][k], last[1][k]) for k in last[0])     # and the same weights at the end


def test_slice_points_place_validations_along_the_slice():
    history = [{"epoch": 1, "steps": 5, "score": 0.5, "metrics": {"macro": {"f1": 0.5}}},
               {"epoch": 1, "steps": 10, "score": 0.6, "metrics": {"macro": {"f1": 0.6}}},
               {"epoch": 2, "steps": 5, "score": 0.7, "metrics": {"macro": {"f1": 0.7}}}]
    # the first entry came from an earlier slice; this one trained steps 5..15 in 20 s after 2 s of loading
    assert slice_points(history, 1, 2.0, 20.0, 10) == [(12.0, 0.6), (22.0, 0.7)]
    assert slice_points(history, 3, 2.0, 20.0, 10) == []


def test_pack_and_unpack_round_trip_and_refuse_escapes(tmp_path):
    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "w.bin").write_bytes(b"\x00\x01")
    back = unpack(pack(folder), tmp_path / "out")
    assert back == tmp_path / "out" / "ckpt" and (back / "sub" / "w.bin").read_bytes() == b"\x00\x01"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="refusing"):
        unpack(buf.getvalue(), tmp_path / "evil")
    assert not (tmp_path / "escape").exists()


@pytest.mark.usefixtures("fresh_warnings")
def test_an_arm_trained_in_slices_says_its_texts_were_truncated_once(world, tmp_path, caplog):
    _, enc, _, _ = world
    rung = Rung(enc, "encoder", "encoder-mlp", "full", 2)
    train, validation = from_lists(TEXTS[::2], LABELS[::2]), from_lists(TEXTS[1::2], LABELS[1::2])
    base = {"batch_size": 4, "temperature_scaling": False, "progress": False, "max_length": 3,
            "checkpoint_dir": str(tmp_path / "arm"), "epochs": 2}
    seen = 0
    with caplog.at_level("WARNING"):
        for _ in range(2):
            _, result = train_slice(rung, {**base, "time_limit": 1e-3}, train, validation, seen)
            assert not result.get("error"), result
            seen = result["history_length"]
    said = [r.getMessage() for r in caplog.records if "were truncated" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"{len(train)} of {len(train)} training texts"), said


@pytest.mark.usefixtures("fresh_warnings")
def test_a_slice_does_not_say_the_model_learned_nothing_but_a_whole_fit_does(world, tmp_path, caplog):
    """A slice is a fraction of an arm's training: its loss has not left the start yet, and auto's arms printed
    'learned nothing' after their first slices. A plain fit that learns nothing still says it."""
    _, enc, _, _ = world
    rung = Rung(enc, "encoder", "encoder-mlp", "full", 1)
    train, validation = from_lists(TEXTS[::2], LABELS[::2]), from_lists(TEXTS[1::2], LABELS[1::2])
    frozen = {"batch_size": 4, "temperature_scaling": False, "progress": False, "epochs": 1, "head_lr": 1e-12,
              "body_lr": 1e-12}
    with caplog.at_level("WARNING"):
        _, result = train_slice(rung, {**frozen, "checkpoint_dir": str(tmp_path / "arm")}, train, validation, 0)
        assert not result.get("error"), result
        assert not [r for r in caplog.records if "learned (almost) nothing" in r.getMessage()]
        TextClassifier(model=enc, **frozen).fit(train.texts, train.labels)
    assert [r for r in caplog.records if "learned (almost) nothing" in r.getMessage()]
