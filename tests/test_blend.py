"""A model blended with the TF-IDF baseline: the weight picked on validation, the folder that reloads exactly, and
auto shipping it only when validation says it pays."""

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
from headswap.classifier.estimator import TextClassifier, load_model
from headswap.auto.main import auto
from headswap.baseline.blend import Blend, choose_weight, fit_blend
from headswap.cli.parser import main
from headswap.errors import HeadswapError
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
    w, scores, out_of_fold = choose_weight(model, tfidf, y, LABELS)
    assert w == 0.0 and scores[0.0] == 1.0 and out_of_fold is None


def test_a_share_of_tfidf_that_fixes_the_models_unsure_mistakes_is_found():
    model, tfidf, y = synthetic()
    w, scores, out_of_fold = choose_weight(model, tfidf, y, LABELS)
    assert 0 < w < 1 and scores[w] > scores[0.0] + 0.1 and out_of_fold > scores[0.0]
    assert scores[max(scores)] < scores[w]          # better than mostly TF-IDF too


def test_a_weight_that_wins_only_on_the_validation_noise_is_not_kept():
    # a model wrong on a fifth of 120 texts, and a TF-IDF model that knows nothing: random probabilities
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 120)
    p_right = np.where(rng.random(120) < 0.2, rng.uniform(0.05, 0.35, 120), rng.uniform(0.65, 0.95, 120))
    t = rng.uniform(0, 1, 120)
    model, tfidf = np.column_stack([p_right, 1 - p_right]), np.column_stack([t, 1 - t])
    model = np.where((y == 0)[:, None], model, model[:, ::-1])
    w, scores, out_of_fold = choose_weight(model, tfidf, y, LABELS)
    assert max(scores.values()) > scores[0.0]         # on validation as a whole, some weight would blend
    assert w == 0.0 and out_of_fold <= scores[0.0]


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
    blend = Blend(model, tfidf, 0.3)
    texts = ["win a prize now", "see you at home", "call me", "urgent claim"]
    expected = 0.7 * model.predict_proba(texts) + 0.3 * tfidf.predict_proba(texts)
    np.testing.assert_allclose(blend.predict_proba(texts), expected, atol=1e-6)
    blend.save(root / "saved")
    again = load_model(root / "saved", progress=False)
    assert isinstance(again, Blend) and again.weight == 0.3 and again.labels_ == model.labels_
    np.testing.assert_allclose(again.predict_proba(texts), expected, atol=1e-6)
    m = again.evaluate(texts, ["spam", "ham", "ham", "spam"])
    assert m.extra["strategy"] == "encoder-mlp + tfidf-logreg" and m.extra["blend_weight"] == 0.3
    assert m.extra["total_params"] > tfidf.model_.coef_.size


def test_predict_and_export_read_a_blend_folder(members, capsys):
    root, model, tfidf = members
    Blend(model, tfidf, 0.5).save(root / "cli")
    assert main(["predict", "--model-dir", str(root / "cli"), "win cash now", "-q"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["export", "--model-dir", str(root / "cli"), "--out", str(root / "onnx")]) == 2
    assert "members/model" in capsys.readouterr().err


def test_a_damaged_blend_folder_is_one_clear_error(members):
    root, model, tfidf = members
    Blend(model, tfidf, 0.5).save(root / "bad")
    config = root / "bad" / "headswap_config.json"
    good = config.read_text()
    config.write_text(json.dumps({**json.loads(good), "weight": 1.5}))
    with pytest.raises(HeadswapError, match="weight must be a number between 0 and 1"):
        load_model(root / "bad")
    config.write_text(good)
    import shutil
    shutil.rmtree(root / "bad" / "members" / "tfidf")
    with pytest.raises(HeadswapError, match="members/tfidf is missing"):
        load_model(root / "bad")


def test_members_must_agree_on_labels(members):
    _, model, _ = members
    other = TfidfClassifier().fit(["x y", "y z", "z x"], ["ham", "eggs", "eggs"])
    with pytest.raises(HeadswapError, match="same labels"):
        Blend(model, other, 0.5)
    with pytest.raises(HeadswapError, match="between 0 and 1"):
        Blend(model, members[2], 0.0)
    blend, scores, _ = fit_blend(model, members[2], ["win cash now 1", "see you at noon 2"], ["spam", "ham"])
    assert blend is None and set(scores) == set(headswap.baseline.blend.WEIGHTS)      # two texts: too few to check a weight


def test_numeric_labels_are_blended_column_by_column(members):
    # TF-IDF sorts labels as text ("10" before "2"), a TextClassifier sorts numeric ones as numbers
    root, _, _ = members
    texts = [f"{w} {i}" for i in range(8) for w in ("apple pie", "rain cloud", "red car")]
    labels = [lab for _ in range(8) for lab in (2, 10, 3)]
    enc = make_tiny_encoder(root / "enc-numeric")
    model = TextClassifier(model=str(enc), strategy="encoder-mlp", epochs=1, progress=False).fit(texts, labels)
    tfidf = TfidfClassifier().fit(texts, labels)
    assert [str(v) for v in model.labels_] != [str(v) for v in tfidf.labels_]      # the orders differ
    blend = Blend(model, tfidf, 0.5)
    order = [list(map(str, tfidf.labels_)).index(str(lab)) for lab in model.labels_]
    expected = 0.5 * model.predict_proba(texts) + 0.5 * tfidf.predict_proba(texts)[:, order]
    np.testing.assert_allclose(blend.predict_proba(texts), expected, atol=1e-6)
    assert list(blend.predict(texts)) == list(model.classes_[expected.argmax(1)])      # ints, as the model's


def test_auto_ships_the_blend_when_validation_prefers_it(world, monkeypatch):  # noqa: F811
    pytest.importorskip("onnxruntime")
    root, enc, _, data = world
    real = headswap.auto.climb.validation_f1
    monkeypatch.setattr(headswap.auto.climb, "validation_f1", lambda clf: real(clf) + 1.0)   # the encoder wins

    def prefer_a_blend(p_model, p_tfidf, y, labels, metric="macro_f1"):
        return 0.4, {w: (0.95 if w == 0.4 else 0.9) for w in headswap.baseline.blend.WEIGHTS}, 0.93

    monkeypatch.setattr(headswap.baseline.blend, "choose_weight", prefer_a_blend)
    results = auto(data, 600, models=[enc], strategies="encoder-mlp", out=root / "blend", progress=False,
                   log=lambda _: None, more_epochs=False, lr_search=False)
    a = results["auto"]
    assert a["winner"]["strategy"] == "encoder-mlp + tfidf-logreg" and a["winner"]["validation_macro_f1"] == 0.95
    assert a["candidates"][-1]["tier"] == "blend" and a["candidates"][-1]["winner"]
    assert a["exported"] is True and (root / "blend" / "model" / "members" / "model" / "model.onnx").is_file()
    shipped = load_model(root / "blend" / "model", progress=False)
    assert isinstance(shipped, Blend) and shipped.weight == 0.4 and shipped.model_.runtime_ == "onnx"
    test = [line.rsplit(",", 1) for line in (data / "test.csv").read_text().splitlines()[1:]]
    row = next(r for r in results["rows"] if r["winner"])
    assert shipped.evaluate([t for t, _ in test], [lab for _, lab in test]).f1("macro") == pytest.approx(row["macro_f1"])
