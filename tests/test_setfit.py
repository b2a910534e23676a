"""The setfit strategy (issue 13, few examples): SetFit's pair sampling and cosine loss, the contrastive phase
that tunes the body before the head trains, and a tuned body that is saved and reloaded with the head."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.errors import HeadswapError
from headswap.nn.classifier import PairCosine
from headswap.strategies.setfit import sample_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "claim prize", "urgent you have won", "see you at noon", "ok home",
         "running late", "call me when you are free"]
LABELS = ["spam"] * 4 + ["ham"] * 4


def test_pairs_one_same_and_one_other_class_partner_per_text_and_round():
    targets = [0, 0, 0, 1, 1, 2]
    pairs = sample_pairs(targets, iterations=5, seed=3)
    assert len(pairs) == 2 * 5 * len(targets)
    for i, j, t in pairs:
        assert (targets[i] == targets[j]) == (t == 1.0)
        assert t == 0.0 or i != j or Counter(targets)[targets[i]] == 1
    assert Counter(t for _, _, t in pairs) == {1.0: 30, 0.0: 30}
    assert sample_pairs(targets, 5, 3) == pairs and sample_pairs(targets, 5, 4) != pairs
    assert (5, 5, 1.0) in sample_pairs(targets, 3, 0)        # a class of one pairs with itself


def test_pair_loss_is_the_squared_error_of_the_cosine():
    class Features(torch.nn.Module):
        def features(self, input_ids, attention_mask):
            return input_ids.float()

    a, b = torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    loss = PairCosine(Features())(a, None, b, None, torch.tensor([1.0, 0.0]))
    # cosines 0 and 1 against targets 1 and 0: mean of 1 and 1
    assert float(loss) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("setfit") / "enc")


def _cosines(clf):
    with torch.no_grad():
        batch = clf.encoder_.collate(clf.encoder_.encode(TEXTS))
        f = F.normalize(clf.module_.features(batch["input_ids"], batch["attention_mask"]), dim=-1)
    sim = f @ f.T
    same = torch.tensor([[a == b for b in LABELS] for a in LABELS]) & ~torch.eye(len(LABELS), dtype=torch.bool)
    other = torch.tensor([[a != b for b in LABELS] for a in LABELS])
    return sim[same].mean().item(), sim[other].mean().item()


def test_the_contrastive_phase_pulls_classes_apart_and_the_body_is_saved(encoder, tmp_path):
    base = TextClassifier(strategy="setfit", model=str(encoder), epochs=1, progress=False, eval_fraction=0,
                          pair_iterations=1, body_lr=1e-12)
    base.fit(TEXTS, LABELS)                      # (almost) untuned body
    clf = TextClassifier(strategy="setfit", model=str(encoder), epochs=1, progress=False, eval_fraction=0,
                         pair_iterations=20, body_lr=1e-3)
    clf.fit(TEXTS, LABELS)
    same0, other0 = _cosines(base)
    same1, other1 = _cosines(clf)
    assert same1 - other1 > same0 - other0 + 0.1
    assert clf.body_tuning_["pairs"] == 2 * 20 * len(TEXTS)
    assert all(not p.requires_grad for n, p in clf.module_.named_parameters() if n.startswith("body."))
    clf.save(tmp_path / "m")
    weights = load_file(tmp_path / "m" / "model.safetensors")
    assert any(k.startswith("body.") for k in weights)
    again = TextClassifier.load(tmp_path / "m", progress=False)
    assert torch.allclose(torch.from_numpy(again.predict_proba(TEXTS)), torch.from_numpy(clf.predict_proba(TEXTS)),
                          atol=1e-6)
    assert json.loads((tmp_path / "m" / "headswap_config.json").read_text())["body_tuning"]["pairs"] == 320
    save_file({k: v for k, v in weights.items() if not k.startswith("body.")}, tmp_path / "m" / "model.safetensors")
    with pytest.raises(HeadswapError, match="saved weights lack"):
        TextClassifier.load(tmp_path / "m", progress=False)


def test_setfit_refuses_multi_label(encoder):
    from headswap.errors import ConfigError
    with pytest.raises(ConfigError, match="'setfit' picks one class per text"):
        TextClassifier(strategy="setfit", model=str(encoder), multi_label=True).resolved_params()
