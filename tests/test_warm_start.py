"""auto's fine-tuning arms start from the head a frozen rung fitted on the same body's features (linear probing,
then fine-tuning): the head is loaded where it fits by name and shape, the fit starts at its score, and a head of
another shape is passed over."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_training_speed import LABELS, TEXTS, encoder  # noqa: F401  (the tiny encoder and its spam/ham texts)

from headswap.classifier.estimator import TextClassifier
from headswap.classifier.fitted import Fitted

pytestmark = pytest.mark.usefixtures("one_thread")


def _frozen(encoder, head):
    return TextClassifier(strategy="encoder-mlp", model=encoder, regime="head-only", head=head, epochs=30,
                          head_lr=5e-2, batch_size=16, progress=False, eval_fraction=0).fit(TEXTS, LABELS)


def _state(clf):
    return {k: v.detach().clone() for k, v in clf.module_.head.state_dict().items()}


def test_a_full_fine_tune_starts_from_the_frozen_head_that_fits_and_at_its_score(encoder):  # noqa: F811
    mlp, linear = _frozen(encoder, "mlp"), _frozen(encoder, "linear")
    frozen_acc = (mlp.predict(TEXTS) == np.array(LABELS)).mean()
    clf = TextClassifier(strategy="encoder-mlp", model=encoder, regime="full", head="mlp", progress=False)
    clf.fitted_ = Fitted.for_labels(["ham", "spam"])
    clf._build(texts=TEXTS, start=[("linear head", _state(linear)), ("mlp head", _state(mlp))])  # linear misfits
    assert clf.started_from_ == "mlp head"
    for k, v in clf.module_.head.state_dict().items():
        assert torch.equal(v.cpu(), _state(mlp)[k].cpu()), k
    # the whole module now predicts as the frozen rung did: its body is the same pretrained one
    clf.module_.eval().cpu()      # built on the GPU where there is one; the batch is on the CPU
    batch = clf.encoder_.collate(clf.encoder_.encode(TEXTS[:12]))
    batch.pop("labels", None)
    with torch.inference_mode():
        warm = clf.module_(**batch).argmax(-1).tolist()
    assert [clf.labels_[i] for i in warm] == list(mlp.predict(TEXTS[:12]))
    assert frozen_acc > 0.6          # the frozen head learned something, so the comparison above could fail

    # fit takes the heads as an argument (auto's arms pass them), for this fit alone
    settings = dict(strategy="encoder-mlp", model=encoder, regime="full", head="mlp", progress=False, epochs=1,
                    eval_fraction=0)
    warm = TextClassifier(**settings).fit(TEXTS, LABELS, start_heads=[("mlp head", _state(mlp))])
    assert warm.started_from_ == "mlp head"
    assert TextClassifier(**settings).fit(TEXTS, LABELS).started_from_ is None
    cold = TextClassifier(**settings).fit(TEXTS, LABELS, start_heads=[("linear head", _state(linear))])
    assert cold.started_from_ is None          # no head fits: the head stays as built
