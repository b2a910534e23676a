"""Classifiers blended: the members and weights greedy ensemble selection picks on validation (kept only when held-out
folds agree), the folder that reloads exactly, and auto shipping a blend only when validation says it pays."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_auto import world  # noqa: F401  (the tiny models and the spam/ham data)
from test_bench import HAM, SPAM
from tiny_models import make_tiny_encoder

import headswap.auto.climb
import headswap.baseline.blend
import headswap.decisions.balance
from headswap.classifier.estimator import TextClassifier, load_model
from headswap.auto.main import auto
from headswap.auto.records import Entry
from headswap.data.load import from_lists
from headswap.baseline.blend import Blend, select
from headswap.cli.parser import main
from headswap.errors import DataError, HeadswapError
from headswap.baseline.tfidf import TfidfClassifier

pytestmark = pytest.mark.usefixtures("one_thread")
LABELS = ["a", "b"]


def synthetic(n=300, seed=0):
    """Validation probabilities of a model right and sure on 80% of n texts and wrong but unsure on the rest, and
    of a TF-IDF model that is right and fairly sure on those and unsure elsewhere."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    unsure = rng.random(n) < 0.2
    p_right = np.where(unsure, rng.uniform(0.3, 0.45, n), rng.uniform(0.8, 0.99, n))
    model = np.where(y == 0, p_right, 1 - p_right)
    t_right = np.where(unsure, 0.85, rng.uniform(0.35, 0.65, n))
    tfidf = np.where(y == 0, t_right, 1 - t_right)
    return np.column_stack([model, 1 - model]), np.column_stack([tfidf, 1 - tfidf]), y


def test_the_model_alone_wins_a_tie():
    model, tfidf, y = synthetic()
    model = np.eye(2)[y] * 0.8 + 0.1          # every text right
    chosen = select([model, tfidf], y, LABELS)
    assert chosen.counts == [1, 0] and chosen.score == 1.0 and not chosen.kept and chosen.out_of_fold is None


def test_candidates_validation_cannot_tell_apart_start_the_blend_and_ship_on_a_tie():
    # 30 texts, as auto holds out of 300: two models right on every one, the second less sure. Before near ties
    # started the blend, the earlier shipped alone because it came first.
    y = np.array([0, 1] * 15)
    first, second = np.eye(2)[y] * 0.6 + 0.2, np.eye(2)[y] * 0.9 + 0.05
    chosen = select([first, second], y, LABELS)
    assert chosen.tied == 2 and chosen.counts[0] > 0 and chosen.counts[1] > 0
    assert chosen.out_of_fold == chosen.alone_out_of_fold == 1.0 and chosen.kept


def test_a_candidate_validation_can_tell_behind_does_not_start_the_blend():
    # on 1,000 texts a candidate wrong on 10% is behind one right on all in every bootstrap draw
    y = np.array([0, 1] * 500)
    behind = y.copy()
    behind[::10] = 1 - behind[::10]
    chosen = select([np.eye(2)[y] * 0.8 + 0.1, np.eye(2)[behind] * 0.8 + 0.1], y, LABELS)
    assert chosen.tied == 0 and chosen.counts[1] == 0 and not chosen.kept


def test_near_ties_are_what_a_paired_bootstrap_cannot_separate():
    from headswap.metrics import near_ties
    y = np.array([0] * 15 + [1] * 15)
    two_off, eight_off = y.copy(), y.copy()
    two_off[:2], eight_off[:8] = 1, 1
    # the best first, the same predictions again (a tie), two texts behind, not eight
    assert near_ties([two_off, y, eight_off, y], y, 2) == [1, 3, 0]
    big = np.tile(y, 40)
    assert near_ties([big, np.tile(two_off, 40)], big, 2) == [0]      # two in 30 wrong, on 1,200 texts: behind


def test_a_share_of_tfidf_that_fixes_the_models_unsure_mistakes_is_found():
    model, tfidf, y = synthetic()
    chosen = select([model, tfidf], y, LABELS)
    alone = select([model], y, LABELS).score
    assert chosen.kept and 0 < chosen.weights[1] < 1 and chosen.score > alone + 0.1
    assert chosen.out_of_fold > chosen.alone_out_of_fold


def test_a_blend_that_wins_only_on_the_validation_noise_is_not_kept():
    # a model wrong on a fifth of 120 texts, and a TF-IDF model that knows nothing: random probabilities (a draw
    # where some share of them happens to score higher on all 120)
    rng = np.random.default_rng(12)
    y = rng.integers(0, 2, 120)
    p_right = np.where(rng.random(120) < 0.2, rng.uniform(0.05, 0.35, 120), rng.uniform(0.65, 0.95, 120))
    t = rng.uniform(0, 1, 120)
    model, tfidf = np.column_stack([p_right, 1 - p_right]), np.column_stack([t, 1 - t])
    model = np.where((y == 0)[:, None], model, model[:, ::-1])
    chosen = select([model, tfidf], y, LABELS)
    assert chosen.counts[1] > 0 and chosen.score > select([model], y, LABELS).score    # on all of validation it blends
    assert not chosen.kept and chosen.out_of_fold <= chosen.alone_out_of_fold


def test_selection_takes_three_members_at_most_and_scores_macro_f1_as_the_loop_does():
    from headswap.train.loop import score_logits
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 400)
    truth = np.eye(4)[y]
    # five noisy views of the truth, each wrong in its own places: every one adds something to a blend
    views = [0.45 * truth + rng.dirichlet(np.ones(4), 400) for _ in range(5)]
    chosen = select(views, y, list("abcd"))
    assert sum(c > 0 for c in chosen.counts) == 3 and sum(chosen.counts) <= 25
    mixed = sum(w * v for w, v in zip(chosen.weights, views))
    assert chosen.score == pytest.approx(score_logits(np.log(mixed), y, list("abcd")).score("macro_f1"))
    assert select(views, y, list("abcd"), most=1).counts.count(0) == 4


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    root = tmp_path_factory.mktemp("blend")
    torch.manual_seed(0)
    enc = make_tiny_encoder(root / "tiny-enc")
    texts = [f"{SPAM[i % 3]} {i}" for i in range(12)] + [f"{HAM[i % 4]} {i}" for i in range(24)]
    labels = ["spam"] * 12 + ["ham"] * 24
    model = TextClassifier(model=str(enc), strategy="encoder-mlp", epochs=1, progress=False).fit(texts, labels)
    return root, model, TfidfClassifier().fit(texts, labels)


def test_a_blend_reloads_and_predicts_what_it_predicted(members):
    root, model, tfidf = members
    blend = Blend([(model, 0.7), (tfidf, 0.3)])
    texts = ["win a prize now", "see you at home", "call me", "urgent claim"]
    expected = 0.7 * model.predict_proba(texts) + 0.3 * tfidf.predict_proba(texts)
    np.testing.assert_allclose(blend.predict_proba(texts), expected, atol=1e-6)
    blend.save(root / "saved")
    again = load_model(root / "saved", progress=False)
    assert isinstance(again, Blend) and again.weights == pytest.approx([0.7, 0.3]) and again.labels_ == model.labels_
    np.testing.assert_allclose(again.predict_proba(texts), expected, atol=1e-6)
    m = again.evaluate(texts, ["spam", "ham", "ham", "spam"])
    assert m.extra["strategy"] == "encoder-mlp + tfidf-logreg" and m.extra["blend_weights"] == pytest.approx([0.7, 0.3])
    assert m.extra["total_params"] > tfidf.model_.coef_.size


def test_predict_and_export_read_a_blend_folder(members, capsys):
    root, model, tfidf = members
    Blend([(model, 0.5), (tfidf, 0.5)]).save(root / "cli")
    assert main(["predict", "--model-dir", str(root / "cli"), "win cash now", "-q"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["export", "--model-dir", str(root / "cli"), "--out", str(root / "onnx")]) == 2
    assert "export its neural members one by one" in capsys.readouterr().err


def test_a_blend_of_several_models_reloads_and_an_earlier_two_member_folder_still_loads(members, tmp_path):
    root, model, tfidf = members
    texts = ["win a prize now", "see you at home", "call me"]
    other = TextClassifier.load(model.save(tmp_path / "again"), progress=False)
    blend = Blend([(model, 2), (other, 1), (tfidf, 1)])
    assert blend.weights == [0.5, 0.25, 0.25] and blend.strategy == "encoder-mlp + tfidf-logreg"
    again = load_model(blend.save(tmp_path / "three"), progress=False)
    np.testing.assert_allclose(again.predict_proba(texts), blend.predict_proba(texts), atol=1e-6)
    # the layout earlier versions wrote: {"weight": w, "members": {"model": ..., "tfidf": ...}}
    old = tmp_path / "old"
    Blend([(model, 0.6), (tfidf, 0.4)]).save(old)
    (old / "members" / "0").rename(old / "members" / "model")
    (old / "members" / "1").rename(old / "members" / "tfidf")
    config = json.loads((old / "headswap_config.json").read_text())
    config.update(weight=0.4, members={"model": "members/model", "tfidf": "members/tfidf"})
    (old / "headswap_config.json").write_text(json.dumps(config))
    expected = 0.6 * model.predict_proba(texts) + 0.4 * tfidf.predict_proba(texts)
    np.testing.assert_allclose(load_model(old, progress=False).predict_proba(texts), expected, atol=1e-6)


def test_a_damaged_blend_folder_is_one_clear_error(members):
    root, model, tfidf = members
    Blend([(model, 0.5), (tfidf, 0.5)]).save(root / "bad")
    config = root / "bad" / "headswap_config.json"
    good = json.loads(config.read_text())
    config.write_text(json.dumps({**good, "members": [good["members"][0], {**good["members"][1], "weight": 1.5}]}))
    with pytest.raises(HeadswapError, match="weight must be a number above 0 and at most 1"):
        load_model(root / "bad")
    config.write_text(json.dumps({**good, "members": [good["members"][0], {"folder": "../elsewhere", "weight": 0.5}]}))
    with pytest.raises(HeadswapError, match="must be under members/"):
        load_model(root / "bad")
    config.write_text(json.dumps(good))
    import shutil
    shutil.rmtree(root / "bad" / "members" / "1")
    with pytest.raises(HeadswapError, match="members/1 is missing"):
        load_model(root / "bad")


def test_members_must_agree_on_labels(members):
    _, model, _ = members
    other = TfidfClassifier().fit(["x y", "y z", "z x"], ["ham", "eggs", "eggs"])
    with pytest.raises(HeadswapError, match="same labels"):
        Blend([(model, 0.5), (other, 0.5)])
    with pytest.raises(HeadswapError, match="weight is a number above 0"):
        Blend([(model, 1.0), (members[2], 0.0)])
    with pytest.raises(HeadswapError, match="two members or more"):
        Blend([(model, 1.0)])
    y = np.array([0, 1])       # two texts: too few to check a blend out of fold
    assert select([np.array([[0.6, 0.4], [0.6, 0.4]]), np.array([[0.2, 0.8], [0.3, 0.7]])], y, LABELS).out_of_fold is None


def test_numeric_labels_are_blended_column_by_column(members):
    # TF-IDF trained on the labels as text, as auto's baseline is, sorts them as text ("10" before "2"); a
    # TextClassifier sorts integer labels as numbers
    root, _, _ = members
    texts = [f"{w} {i}" for i in range(8) for w in ("apple pie", "rain cloud", "red car")]
    labels = [lab for _ in range(8) for lab in (2, 10, 3)]
    enc = make_tiny_encoder(root / "enc-numeric")
    model = TextClassifier(model=str(enc), strategy="encoder-mlp", epochs=1, progress=False).fit(texts, labels)
    tfidf = TfidfClassifier().fit(texts, [str(lab) for lab in labels])
    assert [str(v) for v in model.labels_] != [str(v) for v in tfidf.labels_]      # the orders differ
    blend = Blend([(model, 0.5), (tfidf, 0.5)])
    order = [list(map(str, tfidf.labels_)).index(str(lab)) for lab in model.labels_]
    expected = 0.5 * model.predict_proba(texts) + 0.5 * tfidf.predict_proba(texts)[:, order]
    np.testing.assert_allclose(blend.predict_proba(texts), expected, atol=1e-6)
    assert list(blend.predict(texts)) == list(model.classes_[expected.argmax(1)])      # ints, as the model's


def test_auto_ships_the_blend_when_validation_prefers_it(world, monkeypatch):  # noqa: F811
    pytest.importorskip("onnxruntime")
    root, enc, _, data = world
    real = headswap.auto.climb.validation_f1
    monkeypatch.setattr(headswap.auto.climb, "validation_f1", lambda clf: real(clf) + 1.0)   # the encoder wins

    offered = []

    def prefer_a_blend(probas, y, labels, picked_from, prior):     # the best candidate 0.6, TF-IDF 0.4, leaned
        offered.append(len(probas))
        leaned.append(np.asarray(prior))
        assert len(picked_from) == len(probas) and picked_from[-1] == []    # TF-IDF's were not picked among any
        # the winner's kept weights were picked among its validations, aligned as its probabilities are
        assert picked_from[0] and all(q.shape == probas[0].shape for q in picked_from[0])
        assert any(np.array_equal(q, probas[0]) for q in picked_from[0])
        return headswap.baseline.blend.Selection([3] + [0] * (len(probas) - 2) + [2], 0.95, 0.93, 0.9, 0.94, 0.91)

    monkeypatch.setattr(headswap.baseline.blend, "select", prefer_a_blend)
    leaned, tuned = [], []

    def lean(probs, y, prior):       # tau 0.8 on the blend's validation probabilities
        tuned.append(np.asarray(probs))
        return 0.8

    monkeypatch.setattr(headswap.decisions.balance, "best_tau", lean)
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=root / "blend", progress=False,
                   log=lambda _: None, more_epochs=False, lr_search=False)
    a = results["auto"]
    assert a["winner"]["strategy"] == "encoder-mlp + tfidf-logreg" and a["winner"]["validation_macro_f1"] == 0.95
    assert a["candidates"][-1]["tier"] == "blend" and a["candidates"][-1]["winner"]
    assert offered[0] >= 3      # the best, another kept candidate (the frozen heads), TF-IDF
    assert [m["weight"] for m in a["candidates"][-1]["members"]] == pytest.approx([0.6, 0.4])
    assert a["exported"] is True and (root / "blend" / "model" / "members" / "0" / "model.onnx").is_file()
    shipped = load_model(root / "blend" / "model", progress=False)
    assert isinstance(shipped, Blend) and shipped.weights == pytest.approx([0.6, 0.4])
    assert shipped.model_.runtime_ == "onnx"
    # the lean was tuned on the blend's validation probabilities, by the training texts' class shares (a third spam)
    prior, (probs,) = leaned[0], tuned
    assert prior == pytest.approx([2 / 3, 1 / 3], abs=0.02) and all(np.array_equal(p, prior) for p in leaned)
    assert probs.shape == (15, 2) and np.allclose(probs.sum(1), 1)
    assert shipped.balance_step_.balance == {"tau": 0.8, "prior": pytest.approx(prior.tolist())}
    d = a["decisions"]
    assert d["kept"] and a["winner"]["balance"] == {"tau": 0.8}
    assert (d["argmax_out_of_fold_macro_f1"], d["out_of_fold_macro_f1"]) == (0.93, 0.94)
    assert (f"Its decisions lean toward the rarer classes (tau 0.8): validation macro F1 {d['argmax_macro_f1']:.4f} "
            f"with the argmax, {d['validation_macro_f1']:.4f} leaning; out of fold 0.9300 and 0.9400."
            ) in (root / "blend" / "results.md").read_text()
    test = [line.rsplit(",", 1) for line in (data / "test.csv").read_text().splitlines()[1:]]
    row = next(r for r in results["rows"] if r["winner"])
    assert shipped.evaluate([t for t, _ in test], [lab for _, lab in test]).f1("macro") == pytest.approx(row["macro_f1"])


def test_when_the_baseline_leads_candidates_tied_with_it_are_blended_and_the_blend_named_by_its_model(
        world, monkeypatch):  # noqa: F811
    root, enc, _, data = world
    real = headswap.auto.climb.validation_f1
    monkeypatch.setattr(headswap.auto.climb, "validation_f1", lambda clf: real(clf) - 1.0)   # TF-IDF leads
    offered = []

    def tie(probas, y, labels, picked_from, prior):     # the baseline and the next best, started together
        offered.append(len(probas))
        assert prior is None      # a blend led by TF-IDF keeps the argmax (TF-IDF has no decisions to lean)
        return headswap.baseline.blend.Selection([1, 1] + [0] * (len(probas) - 2), 1.0, 1.0, 1.0, tied=2)

    monkeypatch.setattr(headswap.baseline.blend, "select", tie)
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=root / "tied", progress=False,
                   log=lambda _: None, more_epochs=False, lr_search=False, quantize="none")
    winner = results["auto"]["winner"]
    assert offered and winner["rung"] == "blend of 2" and winner["model_name"] != "tfidf"
    assert winner["regime"] != "baseline" and winner["strategy"].startswith("tfidf-")
    shipped = load_model(root / "tied" / "model", progress=False)
    assert isinstance(shipped, Blend) and isinstance(shipped.members_[0][0], TfidfClassifier)
    assert shipped.weights == pytest.approx([0.5, 0.5]) and len(shipped.members_) == 2


class Reserves:
    """What shipping a candidate in a blend takes, by the rung it ran (all the blend asks of auto's cost model:
    Costs.torch_reserve, saved for torch; its export is asked for later)."""

    def __init__(self, seconds: dict):
        self.seconds = seconds

    def torch_reserve(self, rung) -> float:
        return self.seconds[rung]


TFIDF_ROW = Entry("tfidf", "tfidf", "tfidf-logreg", "baseline", "baseline")


def _kept(n: int) -> list[Entry]:
    """The rows of n candidates, the best first; each names its rung "rung i" (Reserves prices it)."""
    return [Entry(f"m{i}", f"m{i}", "tfidf-logreg", "full", "fine-tune", rung=f"r{i}", validation_macro_f1=0.9 - i / 10,
                  plan=f"rung {i}") for i in range(n)]


def _climb(validation, costs, budget, models, entries):
    """A climb whose best is the first of `models`, each kept for the blend with its validation probabilities."""
    from headswap.auto.climb import Climb

    climb = Climb({}, None, validation, costs, budget, lambda _: None, models[0], entries[0])
    for entry, model in zip(entries, models):
        climb.keep(entry, model, model.predict_proba(validation.texts))
    return climb


def test_a_candidate_joins_the_blend_only_while_the_time_left_pays_for_shipping_it(monkeypatch):
    from headswap.auto.budget import Budget
    from headswap.auto.ship import blend_winner

    texts = [f"{SPAM[i % 3]} {i}" for i in range(30)] + [f"{HAM[i % 4]} {i}" for i in range(60)]
    labels = ["spam"] * 30 + ["ham"] * 60
    validation = from_lists(texts[::3], labels[::3])
    models = [TfidfClassifier(C=c).fit(texts[k::2], labels[k::2]) for k, c in ((0, 1.0), (1, 0.1), (0, 0.01))]
    entries = _kept(3)
    baseline = TfidfClassifier().fit(texts, labels)
    climb = _climb(validation, Reserves({"rung 1": 10.0, "rung 2": 500.0}), Budget(100.0, lambda: 0.0, 0.0),
                   models, entries)
    offered = []
    monkeypatch.setattr(headswap.baseline.blend, "select", lambda probas, y, labels, picked_from, prior: offered.append(len(probas)) or
                        headswap.baseline.blend.Selection([1] + [0] * (len(probas) - 1), 0.9, None, None))
    candidates = [TFIDF_ROW]
    best, entry = blend_winner(models[0], entries[0], climb, baseline, validation, candidates, lambda _: None)
    assert best is models[0] and entry is entries[0]          # nothing blended: the best alone stays
    assert offered == [3]       # the best, the candidate whose shipping fits (10 s of 100), TF-IDF
    row = candidates[-1]
    assert row.tier == "blend" and row.status == "not better" and len(row.priced_out) == 1
    assert row.left_seconds == 100.0         # the time left when the blend began, to read the pricing by
    assert row.priced_out[0].startswith("m2 · tfidf-logreg · full · r2 (shipping it too: ")


def test_when_the_baseline_leads_and_every_candidate_is_priced_out_the_blend_row_says_so():
    # a busy one-minute run: the MiniLM heads tied TF-IDF's 1.0, but shipping one did not fit in the time left,
    # and nothing said why no blend was tried
    from headswap.auto.budget import Budget
    from headswap.auto.ship import blend_winner

    texts = [f"{SPAM[i % 3]} {i}" for i in range(30)] + [f"{HAM[i % 4]} {i}" for i in range(60)]
    labels = ["spam"] * 30 + ["ham"] * 60
    validation = from_lists(texts[::3], labels[::3])
    baseline = TfidfClassifier().fit(texts, labels)
    models, entries = [TfidfClassifier(C=0.1).fit(texts[1::2], labels[1::2])], _kept(1)
    climb = _climb(validation, Reserves({"rung 0": 500.0}), Budget(100.0, lambda: 0.0, 0.0), models, entries)
    candidates, logs = [TFIDF_ROW], []
    best, entry = blend_winner(baseline, TFIDF_ROW, climb, baseline, validation, candidates, logs.append)
    assert best is baseline and entry is TFIDF_ROW
    row = candidates[-1]
    assert row.tier == "blend" and row.status == "skipped" and "m0" in row.reason and "shipping it too" in row.reason
    assert any(line.startswith("  blend not tried: the time left pays for shipping none") for line in logs)


def test_a_blend_is_chosen_first_and_its_least_weighted_dear_member_left_out_while_shipping_them_does_not_fit(
        monkeypatch):
    """Shipping is priced on what the blend takes, not in the pool's order: the pool's second best, which the blend
    does not want, must not use up the room that the one it wants needs."""
    from headswap.auto.budget import Budget
    from headswap.auto.ship import blend_winner

    texts = [f"{SPAM[i % 3]} {i}" for i in range(30)] + [f"{HAM[i % 4]} {i}" for i in range(60)]
    labels = ["spam"] * 30 + ["ham"] * 60
    validation = from_lists(texts[::3], labels[::3])
    models = [TfidfClassifier(C=c).fit(texts[k::2], labels[k::2]) for k, c in ((0, 1.0), (1, 0.1), (0, 0.01), (1, 1.0))]
    entries = _kept(4)
    baseline = TfidfClassifier().fit(texts, labels)
    # 100 s left, 2 kept to the margin: room to ship two of the others (30 s each) beside the best, not three
    climb = _climb(validation, Reserves({f"rung {i}": 30.0 for i in range(4)}), Budget(100.0, lambda: 0.0, 0.0, ship=30.0),
                   models, entries)
    offered = []

    def wants(probas, y, labels, picked_from, prior=None):   # the blend of all: the best 4 rounds, m1 1, m2 2, m3 3, TF-IDF none
        names = [next((c.entry.model for c in climb.pool if np.array_equal(c.proba, p)), "tfidf") for p in probas]
        offered.append(names)
        counts = [{"m0": 4, "m1": 1, "m2": 2, "m3": 3}.get(n, 0) for n in names]
        return headswap.baseline.blend.Selection(counts, 0.95, 0.95, 0.9)

    monkeypatch.setattr(headswap.baseline.blend, "select", wants)
    candidates = [TFIDF_ROW]
    best, entry = blend_winner(models[0], entries[0], climb, baseline, validation, candidates, lambda _: None)
    assert offered == [["m0", "m1", "m2", "m3", "tfidf"], ["m0", "m2", "m3", "tfidf"]]   # m1, least weighted, left out
    row = candidates[-1]
    assert row.status == "ran" and [m["candidate"][:2] for m in row.members] == ["m0", "m2", "m3"]
    assert len(row.priced_out) == 1 and row.priced_out[0].startswith("m1 · tfidf-logreg · full · r1 (shipping")
    assert [w for _, w in best.members_] == pytest.approx([4 / 9, 2 / 9, 3 / 9])


def test_macro_f1_of_a_stack_of_confusions_is_scikit_learns():
    from sklearn.metrics import f1_score
    from headswap.metrics import macro_f1
    from headswap.metrics import confusion_matrix as confusion

    rng = np.random.default_rng(4)
    y = rng.integers(0, 3, 4000)
    a = np.where(rng.random(4000) < 0.8, y, rng.integers(0, 3, 4000))
    b = np.where(rng.random(4000) < 0.1, rng.integers(0, 3, 4000), a)        # a with a tenth redrawn
    assert macro_f1(confusion(y, a, 3)) == pytest.approx(f1_score(y, a, average="macro"))
    stack = confusion(np.stack([y[:50], y[50:100]]), np.stack([a[:50], b[50:100]]), 3)      # one per row
    assert (stack[0] == confusion(y[:50], a[:50], 3)).all() and (stack[1] == confusion(y[50:100], b[50:100], 3)).all()
    assert macro_f1(stack) == pytest.approx([f1_score(y[:50], a[:50], average="macro"),
                                             f1_score(y[50:100], b[50:100], average="macro")])


def picked_fine_tune(seed, n=450, k=12, lean=0.7):
    """A fine-tune validated k times on n texts (each validation right on 93% of the texts, independently, and on
    45% of the quarter that every one finds hard), its kept weights the validation best on all n, and a TF-IDF model
    that leans the right way (`lean`) on that hard quarter and is noise elsewhere."""
    from headswap.metrics import macro_f1
    from headswap.metrics import confusion_matrix

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    hard = rng.random(n) < 0.25
    validations = []
    for _ in range(k):
        right = np.where(hard, rng.random(n) < 0.45, rng.random(n) < 0.93)
        sure = rng.uniform(0.55, 0.95, n)
        p = np.where(right == (y == 0), sure, 1 - sure)
        validations.append(np.column_stack([p, 1 - p]))
    t = np.clip(np.where(hard, np.where(y == 0, lean, 1 - lean), 0.5) + rng.normal(0, 0.15, n), 0.01, 0.99)
    kept = max(validations, key=lambda p: macro_f1(confusion_matrix(y, p.argmax(1), 2)))
    return validations, kept, np.column_stack([t, 1 - t]), y


def test_a_fine_tunes_pick_among_its_validations_is_made_out_of_fold_too():
    """Out of fold, a candidate whose kept weights were picked among many validations takes, in each fold, the
    validation the other folds pick: the kept one's luck on these texts no longer counts for it. Here the fine-tune
    alone led the blend with TF-IDF by a hair on its kept weights, and trails it once its pick is made out of fold."""
    validations, kept, tfidf, y = picked_fine_tune(0)
    plain = select([kept, tfidf], y, LABELS)
    nested = select([kept, tfidf], y, LABELS, picked_from=[validations, []])
    assert (nested.counts, nested.score) == (plain.counts, plain.score)     # on all the texts: the kept weights
    assert nested.alone_out_of_fold < plain.alone_out_of_fold - 0.03
    assert nested.out_of_fold < plain.out_of_fold        # the blend's member is picked out of fold as well
    assert not plain.kept and nested.kept
    # one validation, or several alike: nothing was picked, the plain check
    assert select([kept, tfidf], y, LABELS, picked_from=[[kept], []]) == plain
    assert select([kept, tfidf], y, LABELS, picked_from=[[kept, kept.copy()], []]) == plain


def test_label_values_recorded_in_a_saved_blend_give_its_members_integer_classes(tmp_path):
    """AutoClassifier's engine trains on labels as text; what it ships records the integers it was given, in each
    member of a blend too (headswap.saved.model_dir.record_label_values)."""
    from headswap.saved.model_dir import record_label_values
    texts = [f"{w} {i}" for i in range(8) for w in ("apple pie", "rain cloud", "red car")]
    labels = [lab for _ in range(8) for lab in ("2", "10", "3")]
    blend = Blend([(TfidfClassifier().fit(texts, labels), 0.5), (TfidfClassifier(C=1.0).fit(texts, labels), 0.5)])
    folder = blend.save(tmp_path / "blend")
    record_label_values(folder, {"2": 2, "10": 10, "3": 3})
    again = load_model(folder)
    assert again.classes_.tolist() == [10, 2, 3] and again.predict(texts[:3]).tolist() == [2, 10, 3]
    np.testing.assert_allclose(again.predict_proba(texts), blend.predict_proba(texts), atol=1e-6)
    with pytest.raises(DataError, match=r"^prediction input: no texts"):
        again.predict([])
