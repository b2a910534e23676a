"""The replay harness (headswap.auto.replay, issue 69): today's policy and match loop on recorded learning curves, a
replay clock in place of training; the reader that makes a recording of an auto run's results.json; and
benchmarks/replay.py, which replays recordings and compares winners."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

from headswap.auto.policy import PATIENCE_EPOCHS
from headswap.auto.recording import from_results, load
from headswap.auto.replay import ArmRecord, Recording, replay
from headswap.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def curve(epoch_seconds: float, scores: list[float]) -> list[list]:
    """A validation every quarter epoch: [training seconds, epochs, validation, test]."""
    return [[epoch_seconds * (k + 1) / 4, (k + 1) / 4, v, None] for k, v in enumerate(scores)]


def arm(name: str, scores: list[float], epoch: float = 60.0, planned: float = 10.0) -> ArmRecord:
    return ArmRecord(name, epoch_seconds=epoch, overhead_seconds=2.0, planned_epochs=planned, slice_seconds=2.0,
                     curve=curve(epoch, scores))


def rising(top: float, n: int = 40) -> list[float]:
    return [round(top - 0.2 * 0.9 ** k, 4) for k in range(n)]


def recording(*arms: ArmRecord, arms_seconds: float = 600.0) -> Recording:
    return Recording("synthetic", budget_seconds=900.0, arms_seconds=arms_seconds, n_validation=2000,
                     cheap=[{"name": "tfidf", "seconds": 3.0, "validation": 0.70}], arms=list(arms))


def test_the_replay_picks_the_arm_whose_curve_wins_whatever_the_order():
    weak, strong = rising(0.80), rising(0.95)
    for first, second, winner in ((weak, strong, "b"), (strong, weak, "a")):
        cpu = time.process_time()
        result = replay(recording(arm("a", first), arm("b", second)))
        cpu = time.process_time() - cpu
        assert result.winner == winner
        loser = "a" if winner == "b" else "b"
        assert result.arms[loser]["stopped_because"] == "halved"
        assert result.arms[winner]["epochs"] > result.arms[loser]["epochs"]
        assert 0.9 * 600 <= result.used_seconds <= 600 + 5       # the share is spent, not overrun
        # seconds of this process's CPU, not the wall's: beside `make test` and a one-minute auto run the replay
        # took 13.5 s of wall time, and a busy machine must not fail a test
        assert cpu < 10 and result.wall_seconds > 0


def test_no_arm_beats_a_better_cheap_candidate():
    rec = recording(arm("a", rising(0.60)), arm("b", rising(0.65)))
    assert replay(rec).winner == "tfidf"


@pytest.mark.parametrize("recorded_epochs", [10.0, 1.25])
def test_an_arm_whose_curve_plateaus_is_stopped_by_patience(recorded_epochs):
    # Best at one epoch, then flat: recorded to its planned 10 epochs, or only to 1.25 (past its recording an arm
    # gains nothing more). Alone, it leads an epoch a slice and stops PATIENCE_EPOCHS after its last gain.
    n = int(recorded_epochs * 4)
    scores = [0.7, 0.8, 0.85, 0.9] + [0.9] * (n - 4)
    result = replay(recording(arm("only", scores, epoch=30.0)))
    only = result.arms["only"]
    assert only["stopped_because"] == "plateau"
    assert only["epochs"] == pytest.approx(1.0 + PATIENCE_EPOCHS, abs=0.05)
    assert result.winner == "only" and only["best"] == 0.9
    assert result.used_seconds < 0.5 * 600


def test_an_arm_that_reaches_its_planned_epochs_finishes():
    result = replay(recording(arm("only", rising(0.9, 8), epoch=30.0, planned=2.0)))
    assert result.arms["only"]["stopped_because"] == "finished"
    assert result.arms["only"]["epochs"] == pytest.approx(2.0)


def test_an_arm_the_recording_never_saw_run_is_named_not_scored():
    rec = recording(arm("a", rising(0.9)), ArmRecord("never ran", 60.0, 2.0))
    result = replay(rec)
    assert result.unrecorded == ["never ran"] and result.arms["never ran"]["best"] is None
    assert result.winner == "a"


def test_a_recording_round_trips_through_its_file(tmp_path):
    rec = recording(arm("a", rising(0.9)), ArmRecord("b", 60.0, 2.0))
    path = tmp_path / "r.replay.json"
    path.write_text(rec.to_json())
    back = load(path)
    assert back == rec and replay(back).winner == replay(rec).winner


def results_json() -> dict:
    """A small auto results.json: TF-IDF, a frozen head, a cached partial (epoch 40 s, overhead 5 s, one-off pass
    20 s) and full fine-tuning (epoch 100 s, overhead 5 s) of one model, a learning-rate variant that never ran,
    and a blend of full fine-tuning with TF-IDF that won."""
    def row(strategy, regime, tier, **kw):
        return {"model": "m", "model_name": "m", "strategy": strategy, "regime": regime, "tier": tier, **kw}

    partial = row("encoder-mlp", "partial", "fine-tune", rung="partial-cached", epochs=10,
                  arm="m · encoder-mlp · partial · partial-cached", estimated_seconds=45.0, status="ran",
                  halving=True, validation_macro_f1=0.84, seconds=80.0, trained_epochs=1.5,
                  stopped_because="halved",
                  slices=[{"round": 0, "planned_seconds": 81.0, "target_epochs": 1.4, "start": 0.0, "seconds": 80.0}],
                  curve=[[20.0, 0.80], [40.0, 0.83], [60.0, 0.84], [78.0, 0.835]])
    full = row("encoder-mlp", "full", "fine-tune", rung="full", epochs=5, arm="m · encoder-mlp · full",
               estimated_seconds=105.0, status="ran", halving=True, validation_macro_f1=0.9, seconds=260.0,
               trained_epochs=2.5, stopped_because="budget",
               slices=[{"round": 0, "planned_seconds": 145.0, "target_epochs": 1.4, "start": 80.0, "seconds": 145.0},
                       {"round": "lead", "planned_seconds": 105.0, "target_epochs": 2.4, "start": 225.0,
                        "seconds": 115.0}],
               curve=[[105.0, 0.85], [130.0, 0.87], [155.0, 0.88], [180.0, 0.89], [205.0, 0.88], [224.0, 0.885],
                      [250.0, 0.9], [275.0, 0.89], [300.0, 0.895], [339.0, 0.9]])
    variant = row("encoder-mlp", "partial", "fine-tune", rung="partial-cached", tuned={"body_lr": 1e-05},
                  arm="m · encoder-mlp · partial · partial-cached · body_lr 1e-05", estimated_seconds=45.0,
                  status="skipped", halving=True, seconds=0.0, slices=[], stopped_because="not admitted")
    return {"meta": {"data": {"validation": {"rows": 500, "used": 500}}},
            "auto": {"budget_seconds": 600.0,
                     "halving": {"budget_seconds": 340.0, "cap_seconds": 200.0, "parallel": 1, "leader": full["arm"]},
                     "candidates": [row("tfidf-logreg", "baseline", "baseline", status="ran", seconds=2.0,
                                        validation_macro_f1=0.8),
                                    row("encoder-mlp", "head-only", "frozen", rung="mlp head", head="mlp",
                                        status="ran", seconds=9.0, validation_macro_f1=0.82),
                                    variant, full, partial,
                                    row("encoder-mlp + tfidf-logreg", "full", "blend", rung="TF-IDF weight 0.5",
                                        status="ran", validation_macro_f1=0.91, winner=True)]}}


def test_the_reader_makes_a_recording_of_an_auto_run():
    rec = from_results(results_json(), "small")
    assert rec.arms_seconds == 340.0 and rec.n_validation == 500 and rec.budget_seconds == 600.0
    assert [c["name"] for c in rec.cheap] == ["m · tfidf-logreg · baseline",
                                            "m · encoder-mlp · head-only · mlp head"]
    assert rec.recorded["winner"] == "m · encoder-mlp · full"       # the blend's own candidate
    # the order the arms ran in (the partial first), the variant that never ran last
    assert [a.name for a in rec.arms] == ["m · encoder-mlp · partial · partial-cached", "m · encoder-mlp · full",
                                          "m · encoder-mlp · partial · partial-cached · body_lr 1e-05"]
    partial, full, variant = rec.arms
    assert (full.epoch_seconds, full.overhead_seconds) == pytest.approx((100.0, 5.0))
    assert (partial.epoch_seconds, partial.overhead_seconds, partial.once_seconds) == pytest.approx((40.0, 5.0, 20.0))
    assert variant.once_seconds == pytest.approx(20.0) and variant.tuned and not variant.curve
    assert full.curve[-1][1] == pytest.approx(2.5) and partial.curve[-1][1] == pytest.approx(1.5)
    # full's training seconds: 144 in its first slice (80 to 224), 114 in its second (225 to 339)
    assert full.curve[-1][0] == pytest.approx(258.0) and full.planned_epochs == 5.0
    assert rec.approximations


def test_the_reader_says_why_a_run_cannot_be_replayed():
    doc = results_json()
    for c in doc["auto"]["candidates"]:
        c.pop("trained_epochs", None)
    with pytest.raises(ConfigError, match="trained_epochs"):
        from_results(doc, "old")
    doc["auto"].pop("halving")
    with pytest.raises(ConfigError, match="halving"):
        from_results(doc, "old")


def script():
    spec = importlib.util.spec_from_file_location("replay_script", ROOT / "benchmarks" / "replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_replays_results_and_skips_what_it_cannot(tmp_path, capsys):
    good, old = tmp_path / "small.json", tmp_path / "old.json"
    good.write_text(json.dumps(results_json()))
    doc = results_json()
    doc["auto"].pop("halving")
    old.write_text(json.dumps(doc))
    out = tmp_path / "out"
    assert script().main(["--recording", str(good), str(old), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "| small | m encoder-mlp full |" in said and f"skipped {old}: old: no auto.halving" in said
    rows = json.loads((out / "replay.json").read_text())["rows"]
    assert rows[0]["replay_seconds"] < 10 and rows[0]["same"] is not None
    assert load(out / "small.replay.json").arms[1].name == "m · encoder-mlp · full"


def test_the_benchmark_refuses_when_nothing_can_be_replayed(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert script().main(["--recording", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "not JSON" in captured.out and captured.err.count("\n") == 1


def test_a_refused_arms_least_slice_is_read_from_its_reason():
    from headswap.auto.recording import least_named

    assert least_named("an arm before it that costs about as much or less (23 s at least, this one 1.6 min) got "
                       "no first slice") == pytest.approx(96.0)
    assert least_named("its least slice (63 s of loading and start-up and 25% of a 20.6 min epoch) is over a third "
                       "of the budget (5.0 min), and it would not be the only arm") == pytest.approx(63 + 0.25 * 1236)
    assert least_named("the budget trains 2 arm(s) before it to 1 epoch each before judging them") is None


def test_the_reader_solves_a_refused_arms_overhead_and_puts_a_takeover_before_arms_never_run():
    doc = results_json()
    rows = doc["auto"]["candidates"]
    # full fine-tuning of another model, refused at first (least slice 40 s: overhead 20 s and a quarter of 80 s),
    # then took over as leader; a cached partial of it was refused and never ran
    took_over = {"model": "n", "model_name": "n", "strategy": "encoder-mlp", "regime": "full", "tier": "fine-tune",
                 "rung": "full", "epochs": 2, "arm": "n · encoder-mlp · full", "estimated_seconds": 100.0,
                 "status": "ran", "halving": True, "validation_macro_f1": 0.7, "seconds": 30.0,
                 "trained_epochs": 0.3, "stopped_because": "budget",
                 "reason": "an arm before it that costs about as much or less (23 s at least, this one 40 s) got no "
                           "first slice",
                 "slices": [{"round": "lead", "planned_seconds": 30.0, "target_epochs": 1.0, "start": 340.0,
                             "seconds": 30.0}], "curve": [[369.0, 0.7]]}
    never = {**took_over, "rung": "partial-cached", "regime": "partial", "arm": "n · encoder-mlp · partial",
             "estimated_seconds": 50.0, "status": "skipped", "slices": [], "curve": None, "trained_epochs": None,
             "reason": "an arm before it that costs about as much or less (23 s at least, this one 45 s) got no "
                       "first slice"}
    rows[2:2] = [never, took_over]
    rec = from_results(doc, "takeover")
    names = [a.name for a in rec.arms]
    assert names[2:4] == ["n · encoder-mlp · full", "n · encoder-mlp · partial"]     # variants last
    full_n, partial_n = rec.arms[2], rec.arms[3]
    assert (full_n.overhead_seconds, full_n.epoch_seconds) == pytest.approx((20.0, 80.0))
    assert partial_n.once_seconds == pytest.approx(45 - 20 - 0.25 * 30)


def test_the_best_cheap_candidate_is_what_an_arm_must_beat():
    rec = recording(arm("a", rising(0.85)))
    rec.cheap.append({"name": "frozen head", "seconds": 9.0, "validation": 0.90})
    assert replay(rec).winner == "frozen head"
    rec.cheap[-1]["validation"] = 0.80
    assert replay(rec).winner == "a"


def test_progress_is_the_curves_not_the_plans():
    # The policy guesses 60 s an epoch; the recorded curve trained at 30 s: the first slice, planned as one epoch,
    # reaches the arm's two planned epochs and it finishes there
    fast = arm("fast", rising(0.9, 8), epoch=30.0, planned=2.0)
    fast.epoch_seconds = 60.0
    result = replay(recording(fast))
    assert result.arms["fast"]["stopped_because"] == "finished"
    assert result.arms["fast"]["epochs"] == pytest.approx(2.0) and result.arms["fast"]["slices"] == 1


def test_arms_train_side_by_side_where_the_run_had_slots_for_them():
    rec = recording(arm("a", rising(0.80)), arm("b", rising(0.95)), arm("c", rising(0.90)))
    rec.parallel = 2
    result = replay(rec)
    assert result.arms["a"]["starts"][0] == result.arms["b"]["starts"][0] == 0.0
    assert result.arms["c"]["starts"][0] > 0 and result.winner == "b"
    assert result.used_seconds <= 600 + 1e-6


def test_a_results_json_of_another_shape_is_one_line_not_a_traceback():
    doc = results_json()
    doc["auto"]["candidates"][3]["slices"][0].pop("planned_seconds")
    with pytest.raises(ConfigError, match="small: not an auto results.json this reader knows"):
        from_results(doc, "small")


def test_strict_exits_1_where_a_replay_picks_another_winner(tmp_path, capsys):
    rec = recording(arm("a", rising(0.80)), arm("b", rising(0.95)))
    rec.recorded["winner"] = "a"
    path = tmp_path / "r.replay.json"
    path.write_text(rec.to_json())
    assert script().main(["--recording", str(path)]) == 0
    assert script().main(["--recording", str(path), "--strict"]) == 1
    assert "| synthetic | a | b | **no** |" in capsys.readouterr().out
