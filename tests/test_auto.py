"""headswap auto: the budget decides what runs, validation picks the winner, the winner is shipped (exported when
it can be) and only it and the baseline are scored on test."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_bench import _write_split
from tiny_models import make_tiny_causal, make_tiny_encoder

import headswap.auto.runners
import headswap.auto.main
import headswap.auto.climb
from headswap.classifier.estimator import TextClassifier, load_model
from headswap.auto.main import auto
from headswap.auto.duration import parse_duration
from headswap.cli.parser import main
from headswap.errors import ConfigError
from headswap.baseline.tfidf import TfidfClassifier

pytestmark = pytest.mark.usefixtures("one_thread")


def with_out_of_scope(data, folder):
    """`folder`: world's data with a few `oos` texts added to each of train, validation and test."""
    folder.mkdir()
    for name, n in (("train.csv", 6), ("validation.csv", 3), ("test.csv", 4)):
        rows = (data / name).read_text() + "".join(f"what is the weather on mars {name} {i},oos\n" for i in range(n))
        (folder / name).write_text(rows)
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("auto")
    torch.manual_seed(0)
    enc, cau = make_tiny_encoder(root / "tiny-enc"), make_tiny_causal(root / "tiny-causal")
    data = root / "data"
    data.mkdir()
    _write_split(data / "train.csv", 45)
    _write_split(data / "validation.csv", 15, offset=50)
    _write_split(data / "test.csv", 21, offset=100)
    return root, str(enc), str(cau), data


@pytest.fixture(scope="module")
def full_run(world):
    root, enc, cau, data = world
    logs = []
    results = auto(data, 600, models=[enc, cau], strategies="encoder-mlp,slm-logits", out=root / "full",
                   progress=False, log=logs.append, lr_search=False, more_epochs=False)
    return results, root / "full", logs


def test_parse_duration():
    assert parse_duration("20m") == 1200 and parse_duration("1h30m") == 5400 and parse_duration("90s") == 90
    assert parse_duration("1.5h") == 5400 and parse_duration("2") == 120 and parse_duration(" 45S ") == 45
    for bad in ("", "soon", "20x", "m", "0", "0m", "-3", "nan", "inf"):
        with pytest.raises(ConfigError, match="budget"):
            parse_duration(bad)


def test_a_bare_number_is_minutes_in_python_as_on_the_command_line():
    """AutoClassifier(budget=) and --budget share parse_duration: 90, 90.0 and "90" are 90 minutes alike."""
    assert parse_duration(90) == parse_duration(90.0) == parse_duration("90") == parse_duration(np.int64(90)) == 5400
    assert parse_duration(0.5) == 30
    for bad, why in ((True, "not a duration"), (False, "not a duration"), (None, "not a duration"),
                     ([5], "not a duration"), (float("nan"), "finite time of more than zero"),
                     (float("inf"), "finite time"), (-1, "more than zero"), (0, "more than zero"),
                     (10 ** 400, "finite time"), (1e9, "over the 7 days")):
        with pytest.raises(ConfigError, match=f"^budget .*{why}"):
            parse_duration(bad)


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), True, 0, -5])
def test_auto_refuses_a_budget_of_no_finite_time_before_reading_anything(tmp_path, seconds):
    with pytest.raises(ConfigError, match="^budget .* must be a finite time of more than zero"):
        auto(tmp_path / "no-such-data", seconds, out=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_generous_budget_runs_every_candidate_and_picks_the_best_on_validation(full_run):
    results, out, logs = full_run
    cands = [c for c in results["auto"]["candidates"] if c["tier"] != "blend"]
    assert [(c["model_name"], c["strategy"], c["tier"], c.get("rung")) for c in cands] == [
        ("tfidf", "tfidf-logreg", "baseline", None),
        *[("tiny-enc", "encoder-mlp", "frozen", f"{h} head") for h in ("logistic", "linear", "mlp")],
        ("tiny-enc", "encoder-mlp", "fine-tune", "partial-cached"), ("tiny-enc", "encoder-mlp", "fine-tune", "full"),
        ("tiny-causal", "slm-logits", "causal", "lora")]
    assert all(c["status"] == "ran" for c in cands), cands
    assert all(c["estimated_seconds"] > 0 for c in cands[1:])
    # the fine-tuning arms started from the frozen MLP head (the linear ones do not fit an MLP head)
    assert [c.get("started_from", "").split(" (")[0] for c in cands if c["tier"] == "fine-tune"] == \
        ["tiny-enc · encoder-mlp · head-only · mlp head"] * 2
    best = max(c["validation_macro_f1"] for c in cands)
    winner = [c for c in results["auto"]["candidates"] if c.get("winner")]
    assert len(winner) == 1 and winner[0]["validation_macro_f1"] == best
    # ties go to the earlier (cheaper) candidate, the baseline first; a blend of near-tied ones is led by it
    first = next(c for c in cands if c["validation_macro_f1"] == best)
    if winner[0]["tier"] == "blend":
        rung = f" · {first['rung']}" if first.get("rung") and first["rung"] != first["regime"] else ""
        assert winner[0]["members"][0]["candidate"] == (
            "TF-IDF" if first is cands[0] else f"{first['model_name']} · {first['strategy']} · {first['regime']}{rung}")
        assert len(winner[0]["members"]) > 1 and winner[0]["out_of_fold_macro_f1"] >= \
            winner[0]["alone_out_of_fold_macro_f1"]
    else:
        assert winner[0] is first
    assert results["auto"]["winner"]["strategy"] == winner[0]["strategy"]
    # the pairings that cannot run are said, with their reason
    assert {(s["model_name"], s["strategy"]) for s in results["skipped"]} == {
        ("tiny-enc", "slm-logits"), ("tiny-causal", "encoder-mlp")}
    assert any(line.startswith("winner on validation:") for line in logs)


def test_only_the_winner_and_the_baseline_are_scored_on_test(full_run):
    results, out, _ = full_run
    rows = results["rows"]
    winner = results["auto"]["winner"]
    assert {r["strategy"] for r in rows} == {"tfidf-logreg", winner["strategy"]}
    assert sum(r["winner"] for r in rows) == 1
    assert all(r["n_test"] == 21 for r in rows)
    # nothing of test reaches the candidates' records
    assert all("macro_f1" not in c and "confusion" not in c for c in results["auto"]["candidates"])
    saved = json.loads((out / "results.json").read_text())
    assert saved["auto"]["winner"] == winner
    # the lean of its decisions is tuned on the winner's own validation probabilities (their argmax scores what the
    # winner scored on validation); a TF-IDF winner (or a blend it leads) ships its argmax
    d = results["auto"].get("decisions")
    assert d is None if winner["strategy"].startswith("tfidf") else (
        d["argmax_macro_f1"] == pytest.approx(winner["validation_macro_f1"]) and d["kept"] == ("balance" in winner))
    md = (out / "results.md").read_text()
    assert "## The ladder" in md and "## Test set" in md and "tiny-causal · encoder-mlp" in md


def test_the_shipped_model_reloads_and_predicts_what_was_scored(full_run, world):
    results, out, _ = full_run
    data = world[3]
    clf = load_model(out / "model", progress=False)
    test = [line.rsplit(",", 1) for line in (data / "test.csv").read_text().splitlines()[1:]]
    m = clf.evaluate([t for t, _ in test], [lab for _, lab in test])
    row = next(r for r in results["rows"] if r["winner"])
    assert m.f1("macro") == pytest.approx(row["macro_f1"])


def test_a_tight_budget_ships_the_baseline_and_says_why(world):
    root, enc, _, data = world
    logs = []
    results = auto(data, 4, models=[enc], strategies="encoder-mlp", out=root / "tight", progress=False,
                   log=logs.append)
    base, *cands = results["auto"]["candidates"]
    assert base["winner"] and len(cands) == 5 and all(c["status"] == "skipped" for c in cands)
    search = base["baseline_search"]      # the cheap SVM first, then what 5% of the 4 s allowed
    assert (search["tried"][0]["linear"], search["tried"][0]["C"]) == ("svm", 1.0)
    assert base["reason"] == search["note"] and search["note"] in (root / "tight" / "results.md").read_text()
    assert any(line.startswith(f"  baseline {search['name']}: validation macro F1 ") for line in logs)
    assert all("budget" in c["reason"] or "left" in c["reason"] for c in cands), cands
    # (a logistic fit fits in 0.2 s on these texts on an idle machine, not always on a busy one: either may ship)
    assert [r["strategy"] for r in results["rows"]] == [{"svm": "tfidf-linearsvc", "logistic": "tfidf-logreg"}[
        search["linear"]]]
    assert isinstance(load_model(root / "tight" / "model"), TfidfClassifier)
    assert results["auto"]["exported"] is False and "scikit-learn" in results["auto"]["not_exported_because"]
    assert any(line.startswith("  skip tiny-enc · encoder-mlp") for line in logs)


def test_an_encoder_winner_is_exported_to_onnx(world, monkeypatch):
    pytest.importorskip("onnxruntime")
    root, enc, _, data = world
    real = headswap.auto.climb.validation_f1

    def favour_the_encoder(clf):   # the baseline would win this easy data: let the encoder win
        return real(clf) + 1.0

    monkeypatch.setattr(headswap.auto.climb, "validation_f1", favour_the_encoder)
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=root / "export", progress=False,
                   log=lambda _: None, more_epochs=False, blend=False, lr_search=False)
    assert results["auto"]["winner"]["strategy"] == "encoder-mlp"
    assert results["auto"]["exported"] is True
    assert (root / "export" / "model" / "model.onnx").is_file()
    shipping = results["auto"]["shipping"]      # what was kept to ship the encoder, and what shipping took
    assert shipping["reserved_seconds"] > 0 and 0 < shipping["seconds"] <= shipping["left_seconds"]
    assert not (root / "export" / ".model-torch").exists()
    shipped = load_model(root / "export" / "model", progress=False)
    assert isinstance(shipped, TextClassifier) and shipped.runtime_ == "onnx"
    assert next(r for r in results["rows"] if r["winner"])["runtime"] == "onnx"


def test_no_validation_csv_holds_out_a_tenth_of_train(world, tmp_path):
    _, enc, _, data = world
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("train.csv", "test.csv"):
        (folder / name).write_text((data / name).read_text())
    results = auto(folder, 4, models=[enc], strategies="encoder-mlp", out=tmp_path / "out", progress=False,
                   log=lambda _: None)
    sizes = results["meta"]["data"]
    assert sizes["validation"]["used"] == 5 and sizes["train"]["used"] == 40
    assert sizes["validation"]["file"] is None


def test_bad_settings_are_refused_before_anything_runs(world, tmp_path):
    _, enc, _, data = world
    with pytest.raises(ConfigError, match="epochs"):
        auto(data, 60, models=[enc], out=tmp_path, epochs=0)
    with pytest.raises(ConfigError, match="strategy"):
        auto(data, 60, models=[enc], out=tmp_path, strategy="encoder-mlp")
    with pytest.raises(ConfigError, match="time_limit"):      # auto gives each rung its own
        auto(data, 60, models=[enc], out=tmp_path, time_limit=5.0)
    with pytest.raises(ConfigError, match="quantization"):
        auto(data, 60, models=[enc], out=tmp_path, quantize="int4")
    assert not any(tmp_path.iterdir())


def test_cli(world, tmp_path, capsys):
    _, enc, _, data = world
    rc = main(["auto", "--data", str(data), "--budget", "5s", "--model", enc, "--strategies", "encoder-mlp",
               "--out", str(tmp_path / "out"), "-q"])
    assert rc == 0
    assert (tmp_path / "out" / "results.md").is_file()
    capsys.readouterr()
    assert main(["predict", "--model-dir", str(tmp_path / "out" / "model"), "win cash now", "-q"]) == 0
    assert capsys.readouterr().out.strip()


def test_a_failed_export_still_ships_the_winner(world, monkeypatch):
    import headswap.jobs.export
    root, enc, _, data = world
    real = headswap.auto.climb.validation_f1
    monkeypatch.setattr(headswap.auto.climb, "validation_f1", lambda clf: real(clf) + 1.0)

    def broken(*a, **kw):
        raise RuntimeError("exporter broke")

    monkeypatch.setattr(headswap.jobs.export, "export", broken)
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=root / "broken", progress=False,
                   log=lambda _: None, more_epochs=False, blend=False, lr_search=False)
    a = results["auto"]
    assert a["exported"] is False and "exporter broke" in a["not_exported_because"]
    shipped = load_model(root / "broken" / "model", progress=False)
    assert shipped.runtime_ == "torch" and not (root / "broken" / ".model-torch").exists()
    assert next(r for r in results["rows"] if r["winner"])["strategy"] == "encoder-mlp"


def rated(monkeypatch, score):
    """Arms' validation scores by learning rate: score(body_lr) at every validation point of every slice."""
    real = headswap.auto.runners.train_slice

    def train_slice(rung, settings, *a, **kw):
        clf, result = real(rung, settings, *a, **kw)
        rate = settings.get("body_lr") or 3e-5
        result["points"] = [(t, score(rate)) for t, _ in result["points"]]
        return clf, result

    monkeypatch.setattr(headswap.auto.runners, "train_slice", train_slice)


def test_learning_rate_variants_compete_as_arms_and_the_best_validated_ships(world, tmp_path, monkeypatch):
    from headswap.auto.arms import LR_GRID, lr_neighbours
    _, enc, _, data = world
    assert lr_neighbours(3e-5) == (1e-4, 1e-5) and lr_neighbours(2e-4) == (3e-4, 1e-4)
    assert lr_neighbours(LR_GRID[-1])[0] is None and lr_neighbours(LR_GRID[0])[1] is None
    rated(monkeypatch, {3e-5: 1.5, 1e-4: 1.9, 1e-5: 1.2}.get)      # over the baseline's 1.0 at most
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=tmp_path / "out", progress=False,
                   log=lambda _: None, more_epochs=False, blend=False, regime="full")
    cands = results["auto"]["candidates"]
    arms = [c for c in cands if c.get("halving")]
    assert [c.get("tuned") for c in arms] == [None, {"body_lr": 1e-4}, {"body_lr": 1e-5}]   # up and down the grid
    assert all(c["status"] == "ran" and c["slices"] for c in arms)
    assert all("learning-rate variant" in c["reason"] for c in arms if c.get("tuned"))
    winner = [c for c in cands if c.get("winner")]
    assert len(winner) == 1 and winner[0]["tuned"] == {"body_lr": 1e-4}
    assert results["auto"]["winner"]["tuned"] == {"body_lr": 1e-4}
    assert next(r for r in results["rows"] if r["winner"])["tuned"] == {"body_lr": 1e-4}
    shipped = load_model(tmp_path / "out" / "model", progress=False)
    assert shipped.body_lr == pytest.approx(1e-4) and shipped.checkpoint_dir is None and not shipped.resume
    assert "learning-rate variant" in (tmp_path / "out" / "results.md").read_text()
    assert all("plan" not in c for c in json.loads((tmp_path / "out" / "results.json").read_text())["auto"]["candidates"])
    assert not (tmp_path / "out" / ".arms").exists()        # the arms' checkpoints are gone once the winner is saved


def test_a_learning_rate_variant_wins_only_by_a_clear_margin(world, tmp_path, monkeypatch):
    from headswap.auto.compete import LR_MARGIN
    _, enc, _, data = world
    rated(monkeypatch, {3e-5: 1.5, 1e-4: 1.5 + LR_MARGIN / 2, 1e-5: 1.4}.get)   # 1e-4: better, within the margin
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=tmp_path / "out", progress=False,
                   log=lambda *_: None, more_epochs=False, blend=False, regime="full")
    assert "tuned" not in results["auto"]["winner"]
    assert results["auto"]["winner"]["validation_macro_f1"] == 1.5


def test_lr_search_keeps_a_given_rate_and_can_be_turned_off(world, tmp_path):
    _, enc, _, data = world
    logs = []
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=tmp_path / "given", progress=False,
                   log=logs.append, body_lr=1e-4, more_epochs=False, blend=False)
    assert not any(c.get("tuned") for c in results["auto"]["candidates"])
    assert any("body_lr was given (0.0001), so it is kept" in line for line in logs)
    # one arm per fine-tuning rung (cached partial and full), none of them a learning-rate variant
    assert sorted(c["rung"] for c in results["auto"]["candidates"] if c.get("halving")) == ["full", "partial-cached"]
    rc = main(["auto", "--data", str(data), "--budget", "10m", "--model", enc, "--strategies", "encoder-mlp",
               "--out", str(tmp_path / "off"), "--no-lr-search", "--no-more-epochs", "-q"])
    assert rc == 0
    saved = json.loads((tmp_path / "off" / "results.json").read_text())
    assert saved["meta"]["args"]["lr_search"] is False
    assert not any(c.get("tuned") for c in saved["auto"]["candidates"])
