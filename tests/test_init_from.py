"""Training on from a shipped model (fit's init_from, `train --init-from`): the parent's classes come first and
keep what they learnt, a class only the new data has grows the head, the saved model names its parent, and a run
that contradicts the parent's body is one line with exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from assertions import same_scores
from cli_run import invoke
from tiny_models import make_tiny_encoder

from headswap.saved import model_dir
from headswap.classifier.estimator import TextClassifier
from headswap.errors import ConfigError, HeadswapError
from headswap.classifier.fitted import Fitted
from headswap.classifier.init_from import Parent

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = {"sport": ["football match goal", "the team won the cup", "a goal in the last minute", "tennis final"],
         "food": ["pizza with cheese", "a bowl of pasta", "bread and butter", "soup for dinner"],
         "weather": ["rain and wind today", "sunny and warm", "snow storm tonight", "a cloudy cold morning"]}
SETTINGS = dict(strategy="encoder-mlp", regime="full", head="linear", epochs=12, head_lr=5e-2, body_lr=1e-3,
                batch_size=8, eval_fraction=0, progress=False, temperature_scaling=False)


def rows(classes, copies):
    pairs = [(t, c) for c in classes for t in WORDS[c]] * copies
    return [t for t, _ in pairs], [c for _, c in pairs]


def accuracy(clf, classes):
    texts, labels = rows(classes, 1)
    return float(np.mean(clf.predict(texts) == np.array(labels, dtype=object)))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("init-from")
    enc = str(make_tiny_encoder(root / "enc"))
    parent = TextClassifier(model=enc, **SETTINGS).fit(*rows(["sport", "food"], 4))
    parent.save(root / "parent")
    # the new data: the new class, and one replayed copy of each old text
    new_texts, new_labels = rows(["weather"], 4)
    old_texts, old_labels = rows(["sport", "food"], 1)
    child = TextClassifier(epochs=6, head_lr=5e-2, body_lr=1e-3, batch_size=8, eval_fraction=0, progress=False,
                           temperature_scaling=False).fit(new_texts + old_texts, new_labels + old_labels,
                                                          init_from=root / "parent")
    child.save(root / "child")
    return {"root": root, "enc": enc, "parent": parent, "child": child}


def test_the_child_keeps_the_old_classes_first_learns_the_new_one_and_takes_the_parents_settings(world):
    parent, child = world["parent"], world["child"]
    assert accuracy(parent, ["sport", "food"]) == 1.0      # the parent learnt its classes, so the next could fail
    assert list(child.classes_) == ["food", "sport", "weather"]
    assert (child.model, child.regime, child.head) == (world["enc"], "full", "linear")   # from the parent
    assert accuracy(child, ["sport", "food"]) == 1.0
    assert accuracy(child, ["weather"]) == 1.0


def test_the_head_grows_old_rows_kept_new_rows_fresh(world):
    parent = Parent.read(world["root"] / "parent")
    clf = TextClassifier(model=world["enc"], **SETTINGS)
    clf.fitted_ = Fitted.for_labels(["food", "sport", "weather"])
    clf._build(texts=["x"], start=parent)
    grown = {k: v.cpu() for k, v in model_dir.trained_state(clf.module_).items() if k.startswith("head.")}
    assert grown
    for name, w in grown.items():
        old = parent.weights[name]
        assert w.shape[0] == 3 and old.shape[0] == 2, name
        assert torch.equal(w[:2], old), name                       # the parent's rows, unchanged
        assert not any(torch.equal(w[2], row) for row in old), name    # a fresh row, not a copy
    body = [k for k in parent.weights if not k.startswith("head.")]
    assert body and all(torch.equal(model_dir.trained_state(clf.module_)[k].cpu(), parent.weights[k]) for k in body)


def test_the_saved_child_names_its_parent_and_reloads_exactly(world):
    root, child = world["root"], world["child"]
    config = json.loads((root / "child" / model_dir.CONFIG_FILE).read_text())
    assert config["parent"]["path"] == str((root / "parent").resolve())
    assert config["parent"]["fingerprint"] == model_dir.fingerprint(root / "parent")
    assert config["parent"]["labels"] == ["food", "sport"] and config["parent"]["new_labels"] == ["weather"]
    assert "trained on from" in (root / "child" / model_dir.CARD_FILE).read_text()
    again = TextClassifier.load(root / "child", progress=False)
    texts = rows(["food", "sport", "weather"], 1)[0]
    same_scores(again.predict_proba(texts), child.predict_proba(texts))
    assert again.parent_ == child.parent_


def test_init_from_a_fitted_classifier_and_refusals_in_python(world):
    parent = world["parent"]
    texts, labels = rows(["sport", "weather"], 2)
    clf = TextClassifier(epochs=1, batch_size=8, eval_fraction=0, progress=False).fit(texts, labels, init_from=parent)
    assert list(clf.classes_) == ["food", "sport", "weather"]     # food kept though the data has none
    assert clf.parent_["path"] is None and len(clf.parent_["fingerprint"]) == 16
    with pytest.raises(ConfigError, match="regime 'head-only' contradicts"):
        TextClassifier(regime="head-only", progress=False).fit(texts, labels, init_from=parent)
    with pytest.raises(HeadswapError, match="not a saved headswap model"):
        TextClassifier(progress=False).fit(texts, labels, init_from=world["root"] / "nowhere")


def _csv(path, classes, copies):
    texts, labels = rows(classes, copies)
    path.write_text("text,label\n" + "".join(f"{t},{c}\n" for t, c in zip(texts, labels)))
    return str(path)


def test_cli_trains_on_from_a_model_and_refuses_another_body_in_one_line(world, tmp_path):
    root = world["root"]
    data = _csv(tmp_path / "new.csv", ["weather", "sport", "food"], 1)
    rc, _, err = invoke(["train", "--data", data, "--init-from", str(root / "parent"), "--epochs", "2",
                         "--out", str(tmp_path / "child"), "-q"])
    assert rc == 0, err
    assert "on from" in err
    config = json.loads((tmp_path / "child" / model_dir.CONFIG_FILE).read_text())
    assert config["labels"] == ["food", "sport", "weather"]
    assert config["params"]["head"] == "linear" and config["params"]["head_lr"] == 5e-2   # the parent's settings
    assert config["params"]["epochs"] == 2 and config["parent"]["new_labels"] == ["weather"]

    other = str(make_tiny_encoder(tmp_path / "other-enc"))
    for flags, named in ((["--model", other], "--model"), (["--model", "minilm"], "--model"),
                         (["--strategy", "similarity"], "--strategy"), (["--multi-label"], "--multi-label")):
        rc, out, err = invoke(["train", "--data", data, "--init-from", str(root / "parent"), *flags,
                               "--out", str(tmp_path / "refused"), "-q"])
        lines = [line for line in err.splitlines() if line.strip()]
        assert rc == 2 and len(lines) == 1 and named in lines[0] and "--init-from" in lines[0], err
        assert "Traceback" not in err and not (tmp_path / "refused" / model_dir.CONFIG_FILE).exists()


def test_slm_logits_grows_its_sliced_lm_head_with_the_new_class_first_token_row(tmp_path):
    from tiny_models import make_tiny_causal
    lm = str(make_tiny_causal(tmp_path / "lm"))
    texts, labels = rows(["sport", "food"], 1)
    common = dict(strategy="slm-logits", model=lm, epochs=1, batch_size=8, eval_fraction=0, progress=False,
                  temperature_scaling=False)
    TextClassifier(regime="lora", **common).fit(texts, labels).save(tmp_path / "parent")
    parent = Parent.read(tmp_path / "parent")

    def built(start):
        clf = TextClassifier(regime="lora", **common)
        clf.fitted_ = Fitted.for_labels(["food", "sport", "weather"])
        clf._build(texts=texts, start=start)
        return {k: v.cpu() for k, v in model_dir.trained_state(clf.module_).items()}
    grown, fresh = built(parent), built(None)
    head = [k for k in grown if k.startswith("head.") and grown[k].shape[0] == 3]
    assert head
    for k in head:
        assert torch.equal(grown[k][:2], parent.weights[k]) and torch.equal(grown[k][2], fresh[k][2]), k
    lora = [k for k in parent.weights if "lora" in k]
    assert lora and all(torch.equal(grown[k], parent.weights[k]) for k in lora)
    assert any(not torch.equal(parent.weights[k], fresh[k]) for k in lora)    # the parent's adapters trained


def test_a_tfidf_parent_is_refused_in_one_line(world, tmp_path):
    from headswap.baseline.tfidf import TfidfClassifier
    TfidfClassifier().fit(*rows(["sport", "food"], 2)).save(tmp_path / "tfidf")
    rc, _, err = invoke(["train", "--data", _csv(tmp_path / "new.csv", ["weather", "food"], 1),
                         "--init-from", str(tmp_path / "tfidf"), "--out", str(tmp_path / "refused"), "-q"])
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "TF-IDF" in lines[0] and "--init-from" in lines[0], err
    # the line ends with the command to run instead, on the user's own data
    assert lines[0].endswith(f"headswap auto --data {tmp_path / 'new.csv'} --budget 1m --out NEW"), err
