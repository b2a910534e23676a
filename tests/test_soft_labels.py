"""TextClassifier.fit on soft labels (probability targets, as distillation gives them): the model learns the
targets' most probable class, not the labels it is not given; one-hot targets train exactly as the hard labels
they encode (with and without class weights); every malformed target matrix is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.errors import HeadswapError
from headswap.train.loop import soft_cross_entropy

pytestmark = pytest.mark.usefixtures("one_thread")

X = ["win cash now", "free entry txt win", "see you at noon", "ok on my way home", "urgent you have won",
     "running late sorry"] * 4
Y = ["spam", "spam", "ham", "ham", "spam", "ham"] * 4
NAMES = ["ham", "spam"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("HEADSWAP_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield str(make_tiny_encoder(tmp_path_factory.mktemp("soft") / "enc"))
    mp.undo()


def _onehot(labels, names=NAMES) -> np.ndarray:
    return np.eye(len(names))[[names.index(y) for y in labels]]


def test_the_loss_of_one_hot_targets_is_the_hard_labels_loss():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 4, generator=g)
    idx = torch.tensor([0, 3, 1, 1, 2, 3, 0])
    onehot = F.one_hot(idx, 4).float()
    w = torch.tensor([0.5, 2.0, 1.0, 3.0])
    torch.testing.assert_close(soft_cross_entropy(logits, onehot), F.cross_entropy(logits, idx))
    torch.testing.assert_close(soft_cross_entropy(logits, onehot, w), F.cross_entropy(logits, idx, weight=w))
    # Soft targets: the cross-entropy to the distribution, each class's term weighted.
    q = torch.softmax(torch.randn(7, 4, generator=g), -1)
    logp = torch.log_softmax(logits, -1)
    torch.testing.assert_close(soft_cross_entropy(logits, q), -(q * logp).sum(1).mean())
    torch.testing.assert_close(soft_cross_entropy(logits, q, w), -(q * w * logp).sum() / (q * w).sum())


@pytest.mark.parametrize("class_weight", [None, {"ham": 1.0, "spam": 3.0}])
def test_one_hot_soft_labels_train_exactly_as_the_labels(encoder, class_weight):
    kw = dict(model=encoder, epochs=2, batch_size=8, head_lr=1e-2, eval_fraction=0, progress=False, seed=3,
              class_weight=class_weight, temperature_scaling=False)
    hard = TextClassifier(**kw).fit(X, Y)
    soft = TextClassifier(**kw).fit(X, soft_labels=_onehot(Y), labels=NAMES)
    assert soft.labels_ == hard.labels_ == NAMES and list(soft.classes_) == list(hard.classes_)
    assert soft.class_weight_ == hard.class_weight_
    np.testing.assert_allclose([h["train_loss"] for h in soft.history_], [h["train_loss"] for h in hard.history_],
                               rtol=1e-5)
    a, b = hard.module_.state_dict(), soft.module_.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=1e-4, msg=k)


def test_the_model_learns_the_soft_labels_most_probable_class(encoder):
    # The teacher says the opposite of Y on the first two distinct texts; nothing else tells the model so.
    flipped = {"win cash now": "ham", "see you at noon": "spam"}
    said = [flipped.get(t, y) for t, y in zip(X, Y)]
    probs = np.where(_onehot(said) == 1, 0.8, 0.2)
    clf = TextClassifier(model=encoder, epochs=40, batch_size=8, head_lr=1e-2, body_lr=1e-2, eval_fraction=0,
                         progress=False, seed=0).fit(X, soft_labels=probs, labels=NAMES)
    assert list(clf.predict(X[:6])) == said[:6]
    # Validation with real labels still scores every epoch (and picks the best).
    val = TextClassifier(model=encoder, epochs=2, batch_size=8, progress=False, seed=0).fit(
        X, soft_labels=probs, labels=NAMES, eval_texts=X[:6], eval_labels=Y[:6])
    assert all(h["score"] is not None for h in val.history_) and val.best_epoch_ in (1, 2)


def test_the_eval_fraction_split_keeps_each_texts_own_targets(encoder):
    texts = [f"text number {i} {w}" for i, w in enumerate(["alpha", "beta"] * 15)]
    probs = np.array([[0.9, 0.1] if i % 2 == 0 else [0.3, 0.7] for i in range(len(texts))])
    clf = TextClassifier(model=encoder, epochs=1, batch_size=8, progress=False, seed=0, eval_fraction=0.2)
    clf.fit(texts, soft_labels=probs, labels=["a", "b"])
    assert clf.history_[0]["metrics"]["n"] == 6     # validated on 20 % of the texts, against their argmax


def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_bad_soft_labels_are_refused_in_one_line(encoder):
    clf = TextClassifier(model=encoder, epochs=1, progress=False)
    good = _onehot(Y)
    nan, neg, half = good.copy(), good.copy(), good.copy()
    nan[5, 0] = np.nan
    neg[2] = [-0.5, 1.5]
    half[7] = [0.3, 0.3]
    for kwargs, expected in [
        (dict(soft_labels=good[:-1], labels=NAMES), "must be (texts, labels) = (24, 2), got shape (23, 2)"),
        (dict(soft_labels=good, labels=["a", "b", "c"]), "must be (texts, labels) = (24, 3), got shape (24, 2)"),
        (dict(soft_labels=good[:, 0], labels=NAMES), "got shape (24,)"),
        (dict(soft_labels=nan, labels=NAMES), "NaN or infinite values (1 rows, the first at index 5)"),
        (dict(soft_labels=neg, labels=NAMES), "negative values (1 rows, the first at index 2)"),
        (dict(soft_labels=half, labels=NAMES), "rows must sum to 1 (1 rows do not, the first at index 7: 0.6)"),
        (dict(soft_labels=[["x", "y"]] * 24, labels=NAMES), "array of numbers"),
        (dict(soft_labels=good), "soft_labels need labels"),
        (dict(soft_labels=good, labels=["ham", "ham"]), "class names repeat: ['ham']"),
        (dict(y=Y, soft_labels=good, labels=NAMES), "not both"),
        (dict(y=Y, labels=NAMES), "pass them with soft_labels"),
        (dict(), "fit needs labels y"),
    ]:
        with pytest.raises(HeadswapError) as e:
            clf.fit(X, **kwargs)
        assert expected in _one_line(e), (kwargs.keys(), str(e.value))
    for kw, expected in [(dict(multi_label=True), "multi_label=True does not take them"),
                         (dict(out_of_scope="other"), "do not combine with out_of_scope")]:
        with pytest.raises(HeadswapError) as e:
            TextClassifier(model=encoder, progress=False, **kw).fit(X, soft_labels=good, labels=NAMES)
        assert expected in _one_line(e)
    assert not hasattr(clf, "module_")      # nothing was built
