"""Class weights for imbalanced data (issue 13): scikit-learn's class_weight convention, resolved once, used by
the training loss of every strategy, saved with the model, and refused with one clear line when wrong."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from tiny_models import make_tiny_causal, make_tiny_encoder
from torch import nn

from headswap import TextClassifier
from headswap.data.load import load_class_weights
from headswap.errors import ConfigError, DataError
from headswap.train.loop import TrainConfig, fit

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "claim prize", "see you at noon", "ok home"] * 4
LABELS = ["spam", "spam", "spam", "ham", "ham"] * 4


# ---- resolving the spec ---------------------------------------------------------------------------------------


def test_balanced_is_n_over_classes_times_count():
    w = load_class_weights("balanced", ["a", "b"], ["a", "a", "a", "b"])
    assert w == pytest.approx({"a": 4 / (2 * 3), "b": 4 / (2 * 1)})


def test_dict_json_and_csv_give_the_same_weights_and_unlisted_classes_weigh_1(tmp_path):
    (tmp_path / "w.json").write_text(json.dumps({"b": 3}))
    (tmp_path / "w.csv").write_text("label,weight\nb,3\n")
    for spec in ({"b": 3}, str(tmp_path / "w.json"), str(tmp_path / "w.csv")):
        assert load_class_weights(spec, ["a", "b", "c"], ["a", "b", "c"]) == {"a": 1.0, "b": 3.0, "c": 1.0}
    assert load_class_weights({0: 2}, ["0", "1"], ["0", "1"]) == {"0": 2.0, "1": 1.0}   # integer labels
    assert load_class_weights(None, ["a"], ["a"]) is None


@pytest.mark.parametrize("spec, message", [
    ({"c": 2}, "weight for label 'c', which is not in the data"),
    ({"a": 0}, "class_weight['a']: weight must be a finite number > 0, got 0"),
    ({"a": float("nan")}, "weight must be a finite number > 0"),
    ({"a": "heavy"}, "weight 'heavy' is not a number"),
    ("balance", "give 'balanced', a dict, or a .json, .csv or .tsv file"),
    (3, "class_weight must be None, 'balanced', a dict or a file path, got int"),
])
def test_bad_specs_name_the_label_and_the_problem(spec, message):
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)").replace(".", r"\.")):
        load_class_weights(spec, ["a", "b"], ["a", "b"])


def test_bad_csv_names_the_file_and_line(tmp_path):
    (tmp_path / "w.csv").write_text("label,weight\na,2\nb,-1\n")
    with pytest.raises(DataError, match=r"w\.csv, line 3, column 'weight': weight must be a finite number > 0"):
        load_class_weights(str(tmp_path / "w.csv"), ["a", "b"], ["a", "b"])
    (tmp_path / "v.csv").write_text("label,w\na,2\n")
    with pytest.raises(DataError, match="weight"):
        load_class_weights(str(tmp_path / "v.csv"), ["a", "b"], ["a", "b"])
    with pytest.raises(DataError, match="no training text has label"):
        load_class_weights("balanced", ["a", "b"], ["a", "a"])


# ---- the loss -------------------------------------------------------------------------------------------------


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(x)


def _items(n=12):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(n, 4, generator=g), torch.tensor([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2])
    return x, y, [{"x": x[i], "label": int(y[i])} for i in range(n)]


def _collate(items):
    return {"x": torch.stack([i["x"] for i in items]), "labels": torch.tensor([i["label"] for i in items])}


def test_the_loop_minimises_the_weighted_mean_of_the_texts_losses():
    x, y, items = _items()
    w = [0.5, 2.0, 4.0]
    model = Linear()
    with torch.no_grad():
        nll = -torch.log_softmax(model(x), -1)[torch.arange(len(y)), y]
        expected = float((torch.tensor(w)[y] * nll).sum() / torch.tensor(w)[y].sum())
    cfg = TrainConfig(epochs=1, batch_size=len(items), class_weight=w, progress=False, warmup_ratio=0)
    result = fit(model, items, _collate, cfg, log=None)
    assert result.history[0].train_loss == pytest.approx(expected, abs=1e-6)
    with torch.no_grad():
        assert abs(expected - float(F.cross_entropy(Linear()(x), y))) > 1e-3   # the weights made a difference


def test_equal_weights_train_exactly_as_no_weights():
    _, _, items = _items()
    states = []
    for w in (None, [2.0, 2.0, 2.0]):
        model = Linear()
        fit(model, items, _collate, TrainConfig(epochs=2, batch_size=4, class_weight=w, progress=False), log=None)
        states.append(model.head.weight.detach().clone())
    assert torch.allclose(states[0], states[1], atol=1e-6)


def test_the_loop_refuses_unresolved_weights():
    with pytest.raises(ConfigError, match="one number > 0 per class"):
        TrainConfig(class_weight="balanced")
    with pytest.raises(ConfigError, match="one number > 0 per class"):
        TrainConfig(class_weight=[1.0, -2.0])


def test_generate_parse_weighs_each_answer_token_by_its_texts_class(tmp_path):
    model = make_tiny_causal(tmp_path / "lm")
    clf = TextClassifier(strategy="generate-parse", model=str(model), regime="full", epochs=0, progress=False)
    clf.fit(TEXTS[:4], LABELS[:4])
    module = clf.module_
    batch = clf.encoder_.collate(clf.encoder_.encode(TEXTS[:4], [1, 1, 0, 0]))
    labels = batch.pop("labels")
    torch.manual_seed(0)
    plain = module(**batch, labels=labels)
    ones = module(**batch, labels=labels, class_weight=torch.ones(2))
    assert float(ones) == pytest.approx(float(plain), abs=1e-5)
    heavy = module(**batch, labels=labels, class_weight=torch.tensor([1.0, 9.0]))
    assert abs(float(heavy) - float(plain)) > 1e-4


# ---- through TextClassifier and the command line -------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("cw") / "enc")


def test_balanced_weights_are_used_saved_and_reloaded(encoder, tmp_path):
    clf = TextClassifier(model=str(encoder), epochs=1, progress=False, eval_fraction=0, class_weight="balanced")
    clf.fit(TEXTS, LABELS)
    assert clf.class_weight_ == pytest.approx({"ham": 20 / (2 * 8), "spam": 20 / (2 * 12)})
    clf.save(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "headswap_config.json").read_text())
    assert saved["params"]["class_weight"] == pytest.approx(clf.class_weight_)
    again = TextClassifier.load(tmp_path / "m", progress=False)
    assert again.class_weight_ == pytest.approx(clf.class_weight_)
    assert (again.predict(TEXTS) == clf.predict(TEXTS)).all()


def test_class_weights_change_training(encoder):
    probs = []
    for w in (None, {"ham": 10.0}):
        clf = TextClassifier(model=str(encoder), epochs=2, progress=False, eval_fraction=0, class_weight=w)
        probs.append(clf.fit(TEXTS, LABELS).predict_proba(TEXTS)[:, 0].mean())   # column 0: ham
    assert probs[1] > probs[0]


def test_a_weight_for_an_unknown_label_fails_before_the_model_loads(encoder, monkeypatch):
    import headswap.classifier.estimator as api
    monkeypatch.setattr(api.TextClassifier, "_build", lambda *a, **k: pytest.fail("built a model"))
    with pytest.raises(DataError, match="weight for label 'eggs'"):
        TextClassifier(model=str(encoder), class_weight={"eggs": 2}, progress=False).fit(TEXTS, LABELS)
    with pytest.raises(ConfigError, match="class_weight must be None"):
        TextClassifier(model=str(encoder), class_weight=[1, 2]).resolved_params()


def test_cli_class_weight_file(encoder, tmp_path):
    data = tmp_path / "train.csv"
    data.write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in zip(TEXTS, LABELS)))
    (tmp_path / "w.csv").write_text("label,weight\nham,3\n")
    cmd = [sys.executable, "-m", "headswap.cli", "train", "--data", str(data), "--model", str(encoder), "--epochs",
           "1", "--class-weight", str(tmp_path / "w.csv"), "--out", str(tmp_path / "m"), "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    saved = json.loads((tmp_path / "m" / "headswap_config.json").read_text())
    assert saved["params"]["class_weight"] == {"ham": 3.0, "spam": 1.0}
    (tmp_path / "w.csv").write_text("label,weight\nham,3\nspm,2\n")
    r = subprocess.run(cmd[:-3] + ["--out", str(tmp_path / "m2"), "-q"], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].endswith("the labels are: ham, spam")
    assert "line 3" in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "m2").exists()
