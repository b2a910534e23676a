"""auto's prior (headswap.auto.prior): the shipped table is what the script rebuilds from the project's results
files, a family is judged on the most specific data it has runs of, and the ladder caps an unproven cheap rung."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from headswap.auto.prior import UNPROVEN_SHARE, Prior, build_table, family, load_table, shape

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_table_is_the_one_the_script_rebuilds_from_the_results_files():
    from headswap.models.registry import BUILTINS

    rebuilt = build_table(ROOT / "benchmarks" / "results", {n: s.kind for n, s in BUILTINS.items()})
    assert load_table() == json.loads(json.dumps(rebuilt)), "run: python benchmarks/build_prior.py"
    assert len(rebuilt["runs"]) >= 20


def run_file(path: Path, n_train: int, classes: int, scores: dict[tuple[str, str], float], oos=None) -> None:
    cands = [{"model": "tfidf", "strategy": "tfidf-logreg", "regime": "baseline", "tier": "baseline", "status": "ran",
              "validation_macro_f1": 0.5}]
    for (model, rung), f1 in scores.items():
        cands.append({"model": model, "strategy": "encoder-mlp", "regime": "head-only", "rung": rung, "status": "ran",
                      "validation_macro_f1": f1})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": {"data": {"train": {"rows": n_train, "classes": {str(i): 1 for i in
                                                                                         range(classes)}}},
                                         "args": {"settings": {"out_of_scope": oos}}},
                                "auto": {"candidates": cands}}))


def test_a_family_is_judged_on_the_most_specific_data_it_has_runs_of(tmp_path):
    kinds = {"enc": "encoder", "lm": "causal"}
    run_file(tmp_path / "a" / "results.json", 15000, 150, {("enc", "logistic head"): 0.95, ("lm", "linear head"): 0.70})
    run_file(tmp_path / "b" / "results.json", 3000, 2, {("enc", "logistic head"): 0.97, ("lm", "linear head"): 0.965})
    (tmp_path / "notes.json").write_text("[1, 2]")      # not an auto run: ignored
    table = build_table(tmp_path, kinds)
    assert len(table["runs"]) == 2
    enc, lm = family("encoder", "encoder-mlp", "logistic head", "head-only"), family("causal", "encoder-mlp",
                                                                                      "linear head", "head-only")
    assert enc == family("encoder", "encoder-mlp", "mlp head", "head-only") == "encoder · encoder-mlp · frozen head"
    intents = Prior(table, 20000, 151, out_of_scope=True)      # no run of this shape: its size and classes decide
    assert intents.proven(enc) and not intents.proven(lm)
    assert "in none of the 1 earlier runs on data of this size and classes" in intents.why_unproven(lm, 90.0)
    assert Prior(table, 4000, 2, False).proven(lm)               # within a point on data of that shape
    assert not Prior(table, 300, 5, False).proven(lm)    # no run of its size: on any data only a win proves it
    assert Prior(table, 300, 5, False).proven(enc)       # (which the encoder's head had, on the 2-class set)
    assert Prior(table, 300, 5, False).order(enc) < Prior(table, 300, 5, False).order("encoder · other · full")
    assert not Prior(table, 300, 5, False).proven("encoder · other · full")    # never tried: unproven
    assert Prior({"families": {}, "runs": []}, 300, 5, False).proven(lm)      # no table: today's rules
    assert shape(20000, 151, True) == "10k+ texts · 21+ classes · out-of-scope"


def test_an_unproven_cheap_rung_over_a_tenth_of_the_budget_is_skipped_naming_the_prior(monkeypatch):
    from headswap.auto.budget import Budget
    from headswap.auto.climb import Climb
    from headswap.auto.ladder import Costs, Rung

    table = {"runs": ["x"], "families": {"causal · causal-embedding-mlp · frozen head": {
        shape(15000, 151, False): {"ran": 3, "within": 0, "won": 0}}}}
    logged = []
    costs = Costs(15000, 1000, 0, 16)
    climb = Climb({}, None, None, costs, Budget(900.0, lambda: 100.0), logged.append, None, {"validation_macro_f1": 0.5})
    climb.prior = Prior(table, 15000, 151, False)
    monkeypatch.setattr(Climb, "probe", lambda self, rung, entry, most=None: True)
    monkeypatch.setattr(Costs, "estimate", lambda self, rung, epochs=None: (0.11 if rung.kind == "causal" else 0.09) * 900)
    monkeypatch.setattr(Costs, "reserve", lambda self, rung: 5.0)
    monkeypatch.setattr(Costs, "load_seconds", lambda self, rung: 1.0)
    trained = []
    monkeypatch.setattr(Climb, "train_rung", lambda self, rung, entry, **kw: trained.append(rung.kind))
    climb.run(Rung("lm", "causal", "causal-embedding-mlp", "head-only", 1, tier="causal", head="linear",
                   name="linear head"))
    entry = climb.entries[-1]
    assert entry["status"] == "skipped" and "prior: in none of the 3 earlier runs" in entry["reason"]
    assert f"{UNPROVEN_SHARE:.0%} of the budget" in entry["reason"] and trained == []
    climb.run(Rung("enc", "encoder", "encoder-mlp", "head-only", 1, tier="frozen", head="linear", name="linear head"))
    assert trained == ["encoder"]        # never tried, so unproven too, but under a tenth of the budget


def test_a_cheap_rung_that_never_came_near_on_data_of_this_shape_is_not_tried_after_enough_runs():
    frozen = "encoder · encoder-mlp · frozen head"
    table = {"runs": ["x"], "families": {frozen: {shape(16000, 6, False): {"ran": 42, "within": 0, "won": 0},
                                                  shape(3000, 2, False): {"ran": 4, "within": 0, "won": 0}}}}
    why = Prior(table, 16000, 6, False).dropped(frozen)
    assert why and "in none of the 42 earlier runs on data of this shape" in why
    assert Prior(table, 3000, 2, False).dropped(frozen) is None          # 4 runs say too little: capped, not dropped
    assert Prior(table, 16000, 151, False).dropped(frozen) is None       # no run of this shape: capped at most
    table["families"][frozen][shape(16000, 6, False)]["within"] = 1
    assert Prior(table, 16000, 6, False).dropped(frozen) is None         # near once: it may run
    assert Prior({"families": {}, "runs": []}, 16000, 6, False).dropped(frozen) is None


def test_arms_are_ordered_by_how_often_their_family_won_with_few_runs_counting_for_little():
    full, partial, sim = ("encoder · encoder-mlp · full", "encoder · encoder-mlp · partial-cached",
                          "encoder · similarity · full")
    where = shape(16000, 6, False)
    table = {"runs": ["x"], "families": {full: {where: {"ran": 7, "within": 6, "won": 6}},
                                         partial: {where: {"ran": 18, "within": 8, "won": 7}},
                                         sim: {where: {"ran": 1, "within": 1, "won": 1}}}}
    prior = Prior(table, 16000, 6, False)
    assert prior.arm_order(full) < prior.arm_order(partial) < prior.arm_order("encoder · cross-encoder · full") == 0
    assert prior.arm_order(full) < prior.arm_order(sim) < 0     # 1 win in 1 run outranks no evidence, not 6 in 7
    assert prior.arm_evidence(full) == "won 6 of 7 earlier runs on data of this shape"


def test_a_dropped_cheap_rung_is_not_even_timed(monkeypatch):
    from headswap.auto.budget import Budget
    from headswap.auto.climb import Climb
    from headswap.auto.ladder import Costs, Rung

    table = {"runs": ["x"], "families": {"encoder · encoder-mlp · frozen head": {
        shape(16000, 6, False): {"ran": 42, "within": 0, "won": 0}}}}
    climb = Climb({}, None, None, Costs(16000, 1600, 0, 16), Budget(900.0, lambda: 100.0), lambda m: None, None,
                  {"validation_macro_f1": 0.5})
    climb.prior = Prior(table, 16000, 6, False)
    probed = []
    monkeypatch.setattr(Climb, "probe", lambda self, rung, entry, most=None: probed.append(rung) or False)
    climb.run_all([Rung("enc", "encoder", "encoder-mlp", "head-only", 1, tier="frozen", head="linear",
                        name="logistic head")])
    assert probed == [] and climb.entries[-1]["status"] == "skipped" and "not tried" in climb.entries[-1]["reason"]
