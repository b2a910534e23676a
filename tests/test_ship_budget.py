"""Shipping within the budget (headswap.auto.ship.Prices): the blend and each ONNX export are priced from what the
run measured (the probe's load and inference times of the shipped model's rung) and asked of the Budget before they
start; one the time left cannot hold is skipped, said in auto.shipping.skipped, and the run ends within its budget.
A fake clock stands for the seconds each step takes; the model is a small object with a real save()."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_auto import world  # noqa: F401  (the tiny encoder and spam/ham data of auto's tests)
from test_auto_budget import FakeClock

import headswap.auto.climb
import headswap.auto.ladder as ladder
import headswap.auto.main
import headswap.jobs.export
from headswap.auto.budget import FINAL_MARGIN, Budget
from headswap.auto.ladder import Costs, Rung
from headswap.auto.records import Entry
from headswap.auto.main import auto
from headswap.auto.ship import Prices, ship

FINISH = 2.0
SAVE, EXPORT = 1.0, 30.0       # what saving and exporting the winner take on the fake clock


class Encoder:
    """A winner that can be exported (an encoder under an exportable strategy): saving it takes SAVE seconds."""
    strategy = "encoder-mlp"
    strategy_ = SimpleNamespace(exportable=True)
    model_spec_ = SimpleNamespace(kind="encoder")
    labels_ = classes_ = ["ham", "spam"]

    def __init__(self, clock: FakeClock):
        self.clock = clock

    def save(self, folder) -> None:
        self.clock.now += SAVE
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "config.json").write_text(json.dumps({"strategy": self.strategy}))


@pytest.fixture
def priced(monkeypatch):
    """(clock, budget of 100 s, the winner, its entry, the run's costs): the winner's rung probed at a 2-s load and
    10 ms a text, a 12-block encoder: saving and exporting it 12 s, loading it back and scoring 10 test texts 2.15 s."""
    clock = FakeClock()
    budget = Budget(100.0, clock, clock(), finish=FINISH)
    monkeypatch.setattr(ladder, "_blocks", lambda model: 12)
    costs = Costs(n_train=100, n_validation=20, n_test=10, batch_size=16)
    rung = Rung("enc", "encoder", "encoder-mlp", "full", 1)
    costs.probes[rung.cost_key] = {"load_seconds": 2.0, "inference_seconds_per_text": 0.01, "train_batch_seconds": 0.1}
    entry = Entry("enc", "enc", "encoder-mlp", "full", "full", plan=rung)
    exported = []

    def export(source, folder, quantize):
        clock.now += EXPORT
        exported.append(folder)
        Path(folder).mkdir(parents=True, exist_ok=True)
        return {"quantize": quantize, "check": {"max_abs_logit_diff": 0.0}}

    monkeypatch.setattr(headswap.jobs.export, "export", export)
    assert costs.save_seconds(rung) == pytest.approx(12.0) and costs.reload_seconds(rung) == pytest.approx(2.15)
    return clock, budget, Encoder(clock), entry, costs, exported


def test_an_export_the_time_left_cannot_hold_is_skipped_and_the_run_ends_within_its_budget(priced, tmp_path):
    clock, budget, winner, entry, costs, exported = priced
    clock.now += 85.0         # 15 s left: the export (12 s), reloading (2.15 s), the finish and margin need 18.2
    budget.begin_shipping()
    lines = []
    target, why = ship(winner, tmp_path, "none", lines.append, Prices.of(winner, entry, budget, costs))
    assert exported == [] and why.startswith("not exported to ONNX for want of time")
    assert (target / "config.json").is_file()           # saved for torch: what the run has ships
    assert budget.shipping["skipped"] == [{"step": "onnx export", "why": why}]
    assert any("saved for torch" in line for line in lines)
    clock.now += costs.reload_seconds(entry.plan) + FINISH      # loading it back, scoring test, the report
    spent, share = budget.elapsed()
    assert share <= 1.0 - FINAL_MARGIN + 1e-9, spent


def test_an_export_the_time_left_holds_runs(priced, tmp_path):
    clock, budget, winner, entry, costs, exported = priced
    clock.now += 50.0
    target, why = ship(winner, tmp_path, "none", lambda _: None, Prices.of(winner, entry, budget, costs))
    assert why is None and exported and budget.shipping is None     # nothing skipped, nothing recorded
    assert budget.elapsed()[1] <= 1.0


def test_unpriced_shipping_exports_as_before(priced, tmp_path):
    """A winner whose rung nothing measured (no probe) is not priced: its export is not refused on a guess."""
    clock, budget, winner, entry, costs, exported = priced
    clock.now += 85.0
    ship(winner, tmp_path, "none", lambda _: None, Prices.of(winner, Entry("x", "x", "s", "r", "t"), budget, costs))
    assert exported


def test_no_blend_is_tried_where_the_time_left_does_not_hold_shipping_the_winner_alone(priced):
    clock, budget, winner, entry, costs, _ = priced
    prices = Prices.of(winner, entry, budget, costs)
    clock.now += 85.0          # 15 s left: its export (12 s) would not fit, saving it for torch (4 s) does
    assert prices.blend() is None and budget.shipping is None
    clock.now += 6.0           # 9 s left; saving the winner for torch and reloading it take 6.15, the finish and
    why = prices.blend()       # margin 4
    assert why is not None and "shipping the winner alone takes about" in why
    assert budget.shipping["skipped"] == [{"step": "blend", "why": why}]


def test_on_busy_cores_an_export_is_priced_longer_and_one_that_would_overrun_is_not_started(priced, tmp_path,
                                                                                           monkeypatch):
    """Beside `make test` (load 4.3-5.6 on 2 cores) MiniLM's export took 13-16 s where 7.5 s were priced, and a
    one-minute run ended at 102%: the price is the idle one times the runnable tasks per core."""
    clock, budget, winner, entry, costs, exported = priced
    clock.now += 75.0          # 25 s left: an idle export (12 s) and reload (2.15 s) fit beside the finish and margin
    prices = Prices.of(winner, entry, budget, costs)
    assert prices.export(winner) is None
    monkeypatch.setattr(ladder, "busy_factor", lambda: 2.25)
    assert prices.export_seconds(entry.plan) == pytest.approx(2.25 * 12.0)
    target, why = ship(winner, tmp_path, "none", lambda _: None, prices)
    assert exported == [] and why.startswith("not exported to ONNX for want of time")
    assert (target / "config.json").is_file()


def test_a_bodys_second_export_is_priced_at_what_its_first_took(priced, tmp_path, monkeypatch):
    """Two frozen heads on one body export the body twice: the first export's seconds price the second."""
    from headswap.baseline.blend import Blend

    clock, budget, winner, entry, costs, exported = priced
    second = Encoder(clock)
    blend = Blend([(winner, 0.5), (second, 0.5)])
    row = Entry("enc", "enc", "encoder-mlp + blend", "full", "blend", plan=(entry.plan, entry.plan))
    clock.now += 40.0      # 60 s left: by the cost model both exports (12 s each) fit; the first takes SAVE + EXPORT
    prices = Prices.of(blend, row, budget, costs)
    target, why = ship(blend, tmp_path, "none", lambda _: None, prices)
    assert len(exported) == 1 and why.startswith("not exported to ONNX for want of time")
    assert prices.export_seconds(entry.plan) == pytest.approx(SAVE + EXPORT)
    assert (target / "members" / "1" / "config.json").is_file()       # the second saved for torch
    assert budget.left() >= 0


def test_a_run_that_reaches_shipping_late_ships_its_winner_for_torch_and_ends_within_its_budget(world, monkeypatch):
    """The whole command: the encoder wins, and shipping begins with 15 s of 600 left, under what its export, its
    reload, the finish and the 12-s margin need. It is saved for torch, results.json says why, the budget holds."""
    pytest.importorskip("onnxruntime")
    import time

    root, enc, _, data = world
    real = headswap.auto.climb.validation_f1
    monkeypatch.setattr(headswap.auto.climb, "validation_f1", lambda clf: real(clf) + 1.0)   # the encoder wins
    exported, late = [], [0.0]
    monkeypatch.setattr(headswap.jobs.export, "export", lambda *a, **kw: exported.append(a))
    blend_winner = headswap.auto.main.blend_winner

    def slow_until_shipping(best, entry, climb, *args, **kwargs):     # the run reaches shipping with 15 s left
        late[0] += climb.budget.left() - 15.0
        return blend_winner(best, entry, climb, *args, **kwargs)

    monkeypatch.setattr(headswap.auto.main, "blend_winner", slow_until_shipping)
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=root / "late", progress=False,
                   log=lambda _: None, more_epochs=False, blend=False, lr_search=False,
                   clock=lambda: time.perf_counter() + late[0])
    a = results["auto"]
    assert exported == [] and a["exported"] is False and "for want of time" in a["not_exported_because"]
    assert [s["step"] for s in a["shipping"]["skipped"]] == ["onnx export"]
    assert a["winner"]["strategy"] == "encoder-mlp" and a["budget_used"] <= 1.0
    saved = json.loads((root / "late" / "results.json").read_text())["auto"]["shipping"]["skipped"]
    assert saved == a["shipping"]["skipped"]


def test_the_busy_factor_reads_the_more_loaded_of_the_last_minute_and_now(monkeypatch):
    """Runnable tasks per core, at least 1: a load that has just begun shows in the tasks running now before the
    minute's average catches up."""
    import os

    monkeypatch.undo()      # the real busy_factor, the machine's readings faked
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (4.5, 2.0, 1.0))
    monkeypatch.setattr(ladder, "_running_now", lambda: 2.0)
    assert ladder.busy_factor() == pytest.approx(2.25)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 0.5, 0.2))
    monkeypatch.setattr(ladder, "_running_now", lambda: 5.0)
    assert ladder.busy_factor() == pytest.approx(2.5)
    monkeypatch.setattr(ladder, "_running_now", lambda: 1.0)
    assert ladder.busy_factor() == 1.0          # a run alone on its cores


def test_the_tasks_running_now_include_the_reader():
    assert ladder._running_now(samples=3, every=0.0) >= 1.0 or not Path("/proc/loadavg").is_file()
