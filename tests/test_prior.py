"""auto's prior (headswap.auto.prior): the shipped table is what the script rebuilds from the project's results
files; each data set is one vote, whatever folder it was copied to and however often it ran; one data set is a
hint that orders rungs but neither drops nor caps one alone; a fine bucket counts only where two data sets of it
tried the family; the ladder caps an unproven cheap rung; the builder leaves a set out only into a file of its own
(a set no run used leaves nothing out), and the leave-one-set-out report sets each set's decisions without it beside
the full prior's."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from headswap.auto.records import Entry
from headswap.auto.prior import (UNPROVEN_SHARE, Prior, build_table, coarse, family, load_table, rung_family,
                                 shape)
from headswap.errors import HeadswapError

ROOT = Path(__file__).resolve().parent.parent
KINDS = {"minilm": "encoder", "smollm2-135m": "causal"}       # as in the registry, which the scripts read
FROZEN, CAUSAL = "encoder · encoder-mlp · frozen head", "causal · causal-embedding-mlp · frozen head"
FULL, PARTIAL = "encoder · encoder-mlp · full", "encoder · encoder-mlp · partial-cached"


def test_the_shipped_table_is_the_one_the_script_rebuilds_from_the_results_files():
    from headswap.models.registry import BUILTINS

    rebuilt = build_table(ROOT / "benchmarks" / "results", {n: s.kind for n, s in BUILTINS.items()})
    assert load_table() == json.loads(json.dumps(rebuilt)), "run: python benchmarks/build_prior.py"
    assert len(rebuilt["runs"]) >= 20 and len(rebuilt["sets"]) >= 4 and rebuilt["without"] == []


def run_file(path: Path, folder: str, n_train: int, classes: int, scores: dict[str, float], oos=None,
             misfit=False, label="c") -> None:
    """One auto run's results.json on the data set in `folder` (its training classes name it). scores: family
    ('frozen', 'causal', 'full', 'partial') -> validation macro F1."""
    rungs = {"frozen": ("minilm", "encoder-mlp", "head-only", "logistic head"),
             "causal": ("smollm2-135m", "causal-embedding-mlp", "head-only", "linear head"),
             "full": ("minilm", "encoder-mlp", "full", "full"),
             "partial": ("minilm", "encoder-mlp", "partial", "partial-cached")}
    cands = [{"model": "tfidf", "strategy": "tfidf-logreg", "regime": "baseline", "tier": "baseline", "status": "ran",
              "validation_macro_f1": 0.5}]
    for name, f1 in scores.items():
        model, strategy, regime, rung = rungs[name]
        cands.append({"model": model, "strategy": strategy, "regime": regime, "rung": rung, "status": "ran",
                      "validation_macro_f1": f1})
    path.parent.mkdir(parents=True, exist_ok=True)
    train = {"file": f"{folder}/train.csv", "rows": n_train, "classes": {f"{label}{i}": 7 for i in range(classes)}}
    path.write_text(json.dumps({"meta": {"data": {"train": train}, "args": {"settings": {"out_of_scope": oos}}},
                                "auto": {"candidates": cands, "vocabulary_fit": {"minilm": {"fits": not misfit}}}}))


def test_a_family_is_judged_on_the_most_specific_data_it_has_runs_of(tmp_path):
    run_file(tmp_path / "a" / "results.json", "/d/intents", 15000, 150, {"frozen": 0.95, "causal": 0.70})
    run_file(tmp_path / "b" / "results.json", "/d/spam", 3000, 2, {"frozen": 0.97, "causal": 0.965})
    (tmp_path / "notes.json").write_text("[1, 2]")      # not an auto run: ignored
    table = build_table(tmp_path, KINDS)
    assert len(table["runs"]) == 2 and sorted(table["sets"]) == ["intents", "spam"]
    assert family("encoder", "encoder-mlp", "mlp head", "head-only") == FROZEN
    intents = Prior(table, 20000, 151, out_of_scope=True)      # no run of this shape: its size and classes decide
    assert intents.proven(FROZEN) and not intents.proven(CAUSAL)
    assert "it won on none of the 2 data sets of any shape that tried it" in intents.why_unproven(CAUSAL, 90)
    assert Prior(table, 4000, 2, False).proven(CAUSAL)               # within a point on data of that shape
    assert not Prior(table, 300, 5, False).proven(CAUSAL)    # no run of its size: on any data only a win proves it
    assert Prior(table, 300, 5, False).proven(FROZEN)        # (which the encoder's head had, on the 2-class set)
    assert Prior(table, 300, 5, False).order(FROZEN) < Prior(table, 300, 5, False).order(FULL)
    assert not Prior(table, 300, 5, False).proven(FULL)      # never tried: unproven
    assert Prior({"families": {}, "runs": []}, 300, 5, False).proven(CAUSAL)      # no table: today's rules
    assert shape(20000, 151, True) == "10k-30k texts · 101+ classes · out-of-scope"
    assert coarse(shape(20000, 151, True, misfit=True)) == "10k+ texts · 21+ classes · out-of-scope"


def test_repeated_runs_on_one_data_set_weigh_as_one_vote_whatever_folder_it_was_copied_to(tmp_path):
    """Twelve runs on one set where the cached partial won, two copies of it among them, and one run on another set
    of the same shape where full fine-tuning won: counting runs, the partial would lead 12 to 1."""
    for i in range(10):
        run_file(tmp_path / f"a{i}.json", "/work/shared/data/alpha", 4500, 2, {"partial": 0.9, "full": 0.85})
    for i in range(2):
        run_file(tmp_path / f"copy{i}.json", f"/tmp/copy{i}", 4500, 2, {"partial": 0.9, "full": 0.85})
    run_file(tmp_path / "b.json", "/data/beta", 5000, 2, {"partial": 0.8, "full": 0.9}, label="b")
    table = build_table(tmp_path, KINDS)
    assert {name: s["runs"] for name, s in table["sets"].items()} == {"alpha": 12, "beta": 1}
    assert table["families"][PARTIAL][shape(4500, 2, False)] == {"alpha": {"ran": 12, "within": 12, "won": 12},
                                                                "beta": {"ran": 1, "within": 0, "won": 0}}
    prior = Prior(table, 4000, 2, False)
    assert prior.arm_order(FULL) == prior.arm_order(PARTIAL) < 0
    assert prior.arm_evidence(PARTIAL) == ("the best on 1 of 2 data sets of this shape, share of each one's runs: "
                                           "alpha 100%, beta 0%")


def test_one_data_set_is_a_hint_that_orders_but_never_drops_or_caps_a_rung_alone(tmp_path):
    """MiniLM's frozen heads on emotion never came near in 42 runs; on emotion's shape that one set is a hint: the
    rung is neither dropped nor capped while other data of its size saw it win. A second set agreeing drops it."""
    for i in range(6):
        run_file(tmp_path / f"emo{i}.json", "/d/emotion", 16000, 6, {"frozen": 0.62, "full": 0.9, "causal": 0.5})
    run_file(tmp_path / "clinc.json", "/d/clinc", 15000, 151, {"frozen": 0.96, "full": 0.955})
    prior = Prior(build_table(tmp_path, KINDS), 16000, 6, False)
    assert prior.dropped(FROZEN) is None and prior.proven(FROZEN)
    assert prior.order(FULL) < prior.order(FROZEN)       # the hint still orders: what came near on this shape first
    assert not prior.proven(CAUSAL)       # one set never saw it near, and nothing else did: capped as if untried
    assert prior.why_unproven(CAUSAL, 90).startswith("it came within 1 point of the winner in none of the 6 runs on "
                                                     "the one data set of this size and classes that tried it, "
                                                     "emotion (a hint: capped as if none had tried it)")
    assert prior.arm_evidence(FULL) == "the best in 100% of the runs on the one data set of this size and classes, " \
                                       "emotion: a hint"
    run_file(tmp_path / "tweets.json", "/d/tweets", 14000, 7, {"frozen": 0.5, "full": 0.7}, label="t")
    prior = Prior(build_table(tmp_path, KINDS), 16000, 6, False)
    assert prior.dropped(FROZEN) == ("prior: on none of the 2 data sets of this shape that tried it (emotion, tweets) "
                                     "did it come within 1 point of the winner, so it is not tried")


def test_a_finer_bucket_judges_only_where_two_data_sets_of_it_tried_the_family(tmp_path):
    run_file(tmp_path / "a.json", "/d/a", 4500, 2, {"frozen": 0.9, "full": 0.905})
    run_file(tmp_path / "b.json", "/d/b", 5000, 2, {"frozen": 0.9, "full": 0.902}, label="b")
    run_file(tmp_path / "c.json", "/d/c", 2000, 2, {"frozen": 0.7, "full": 0.9}, label="x")
    run_file(tmp_path / "d.json", "/d/tweets", 4500, 2, {"frozen": 0.6, "full": 0.9}, misfit=True, label="t")
    table = build_table(tmp_path, KINDS)
    assert table["sets"]["tweets"]["shapes"] == {"3k-10k texts · 2 classes · vocabulary misfit": 1}
    assert Prior(table, 4000, 2, False).evidence(FROZEN).said == "of this shape"           # a and b
    small = Prior(table, 2000, 2, False).evidence(FROZEN)      # c alone in its fine bucket: all of 1k-10k judge
    assert small.said == "of this size and classes" and sorted(small.sets) == ["a", "b", "c", "tweets"]
    assert Prior(table, 4000, 2, False, misfit=True).evidence(FROZEN).said == "of this size and classes"



# The TF-IDF baseline's row: what a cheap rung must beat
BASELINE = Entry("tfidf", "tfidf", "tfidf-logreg", "baseline", "baseline", validation_macro_f1=0.5)

def test_an_unproven_cheap_rung_over_a_tenth_of_the_budget_is_skipped_naming_the_prior(monkeypatch):
    from headswap.auto.budget import Budget
    from headswap.auto.climb import Climb
    from headswap.auto.ladder import Costs, Rung

    never = {"ran": 3, "within": 0, "won": 0}
    table = {"runs": ["x"], "sets": {"a": {}, "b": {}}, "families": {CAUSAL: {
        shape(15000, 6, False): {"a": never, "b": never}}}}        # 2 data sets of its size, no win: unproven
    logged = []
    costs = Costs(15000, 1000, 0, 16)
    climb = Climb({}, None, None, costs, Budget(900.0, lambda: 100.0), logged.append, None, BASELINE,
                  prior=Prior(table, 15000, 151, False))
    monkeypatch.setattr(Climb, "probe", lambda self, rung, entry, most=None: True)
    monkeypatch.setattr(Costs, "estimate", lambda self, rung, epochs=None: (0.11 if rung.kind == "causal" else 0.09) * 900)
    monkeypatch.setattr(Costs, "reserve", lambda self, rung: 5.0)
    monkeypatch.setattr(Costs, "load_seconds", lambda self, rung: 1.0)
    trained = []
    monkeypatch.setattr(Climb, "train_rung", lambda self, rung, entry, **kw: trained.append(rung.kind))
    causal = Rung("lm", "causal", "causal-embedding-mlp", "head-only", 1, tier="causal", head="linear",
                  name="linear head")
    assert rung_family(causal) == CAUSAL
    climb.run(causal)
    entry = climb.entries[-1]
    assert entry.status == "skipped" and "prior: it won on none of the 2 data sets of this size" in entry.reason
    assert f"{UNPROVEN_SHARE:.0%} of the budget" in entry.reason and trained == []
    climb.run(Rung("enc", "encoder", "encoder-mlp", "head-only", 1, tier="frozen", head="linear", name="linear head"))
    assert trained == ["encoder"]        # never tried, so unproven too, but under a tenth of the budget


def test_arms_are_ordered_by_the_data_sets_votes_with_one_set_counting_for_little():
    where, sim = shape(16000, 6, False), "encoder · similarity · full"
    table = {"runs": ["x"], "families": {FULL: {where: {"a": {"ran": 7, "within": 6, "won": 6},
                                                        "b": {"ran": 2, "within": 2, "won": 2}}},
                                         PARTIAL: {where: {"a": {"ran": 18, "within": 8, "won": 7},
                                                           "b": {"ran": 1, "within": 0, "won": 0}}},
                                         sim: {where: {"a": {"ran": 1, "within": 1, "won": 1}}}}}
    prior = Prior(table, 16000, 6, False)
    assert prior.arm_order(FULL) < prior.arm_order(PARTIAL) < prior.arm_order("encoder · cross-encoder · full") == 0
    assert prior.arm_order(FULL) < prior.arm_order(sim) < 0     # one set it always won: a hint, not two sets
    assert prior.arm_evidence(FULL) == ("the best on 2 of 2 data sets of this shape, share of each one's runs: "
                                        "b 100%, a 86%")


def test_a_dropped_cheap_rung_is_not_even_timed(monkeypatch):
    from headswap.auto.budget import Budget
    from headswap.auto.climb import Climb
    from headswap.auto.ladder import Costs, Rung

    never = {"ran": 21, "within": 0, "won": 0}
    table = {"runs": ["x"], "families": {FROZEN: {shape(16000, 6, False): {"emotion": never, "other": never}}}}
    climb = Climb({}, None, None, Costs(16000, 1600, 0, 16), Budget(900.0, lambda: 100.0), lambda m: None, None,
                  BASELINE, prior=Prior(table, 16000, 6, False))
    probed = []
    monkeypatch.setattr(Climb, "probe", lambda self, rung, entry, most=None: probed.append(rung) or False)
    climb.run_all([Rung("enc", "encoder", "encoder-mlp", "head-only", 1, tier="frozen", head="linear",
                        name="logistic head")])
    assert probed == [] and climb.entries[-1].status == "skipped" and "not tried" in climb.entries[-1].reason


def _script(name: str, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def test_the_builder_leaves_a_set_out_only_into_a_file_of_its_own(tmp_path, monkeypatch):
    build_prior = _script("build_prior", monkeypatch)
    run_file(tmp_path / "runs" / "a.json", "/d/alpha", 4500, 2, {"frozen": 0.9})
    run_file(tmp_path / "runs" / "b.json", "/d/beta", 4500, 2, {"frozen": 0.8}, label="b")
    shipped = build_prior.SHIPPED.read_bytes()
    table = build_prior.main(tmp_path / "runs", ["beta"], tmp_path / "without-beta.json")
    assert list(table["sets"]) == ["alpha"] and table["without"] == ["beta"]
    assert json.loads((tmp_path / "without-beta.json").read_text())["runs"] == ["a.json"]
    with pytest.raises(HeadswapError, match="--without needs --out"):
        build_prior.main(tmp_path / "runs", ["beta"])
    with pytest.raises(HeadswapError, match="the shipped prior, which --without must not overwrite"):
        build_prior.main(tmp_path / "runs", ["beta"], build_prior.SHIPPED)
    assert build_prior.SHIPPED.read_bytes() == shipped
    # a set no run used (auto_runs.sh LOSO=1 on a new one): nothing to leave out, the table of every run, said once
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "build_prior.py"), str(tmp_path / "runs"),
                           "--without", "gamma", "--without", "beta", "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr.count("\n") == 1, done.stderr
    assert "--without gamma: no auto run under" in done.stderr and "(the runs used alpha, beta)" in done.stderr
    assert json.loads((tmp_path / "x.json").read_text()) == table
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "build_prior.py"), str(tmp_path / "runs"),
                           "--without", "gamma", "--out", str(tmp_path / "y.json")], capture_output=True, text=True)
    assert done.returncode == 0 and json.loads((tmp_path / "y.json").read_text()) == build_table(tmp_path / "runs",
                                                                                                KINDS)


def test_leave_one_set_out_sets_each_set_s_decisions_without_it_beside_the_full_prior(tmp_path, monkeypatch):
    prior_loso = _script("prior_loso", monkeypatch)
    for i, name in enumerate(("alpha", "beta", "gamma")):    # full fine-tuning wins on each; the partial comes near
        for j in range(3 if name == "alpha" else 1):
            run_file(tmp_path / "runs" / f"{name}{j}.json", f"/d/{name}", 4500 + i, 2,
                     {"full": 0.9, "partial": 0.895, "frozen": 0.5}, label=name)
    rows = prior_loso.main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert [(r["set"], r["runs"], r["sets_without"]) for r in rows] == [("alpha", 3, 2), ("beta", 1, 2),
                                                                        ("gamma", 1, 2)]
    alpha = rows[0]
    assert alpha["best"] == alpha["best_arm"] == FULL and alpha["without"]["arms"][0] == FULL
    assert alpha["full"]["dropped"] == alpha["without"]["dropped"] == [FROZEN]    # 3 and 2 sets saw it far off
    text = (tmp_path / "out" / "prior_loso.md").read_text()
    assert "| alpha, 3k-10k texts · 2 classes (3) | encoder-mlp full (3) | encoder-mlp full; encoder-mlp frozen " \
           "head; none | encoder-mlp full; encoder-mlp frozen head; none | yes |" in text
    assert json.loads((tmp_path / "out" / "prior_loso.json").read_text()) == json.loads(json.dumps(rows))
