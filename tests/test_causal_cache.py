"""LoRA on a prompted causal LM's top blocks, trained on cached lower blocks: the cached path computes the uncached
model's logits and gradients (the prompt prefix included), adapters sit in the top blocks only, and the fitted model
predicts and reloads through the whole body."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_training_speed import LABELS as SPAM_LABELS, TEXTS as SPAM_TEXTS
from tiny_models import make_tiny_causal

from headswap.classifier.estimator import TextClassifier, load_model
from headswap.errors import ConfigError
from headswap.classifier.fitted import Fitted
from headswap.train.lower_cache import CausalLowerCache, build_cache

pytestmark = pytest.mark.usefixtures("one_thread")

# 24 spam/ham texts of mixed lengths (the training-speed tests' twelve, twice)
TEXTS, LABELS = SPAM_TEXTS[:24], SPAM_LABELS[:24]


@pytest.fixture(scope="module")
def causal(tmp_path_factory):
    return str(make_tiny_causal(tmp_path_factory.mktemp("causal-cache") / "tiny-llama"))


def _built(causal, **kw):
    clf = TextClassifier(strategy="slm-letters", model=causal, regime="lora", cache_lower=True, last_n=1,
                         lora_dropout=0.0, progress=False, **kw)
    clf.fitted_ = Fitted.for_labels(["ham", "spam"])
    clf._build()
    torch.manual_seed(1)
    for name, p in clf.module_.named_parameters():    # non-zero B, so that the adapters change the logits
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    return clf


def test_adapters_sit_in_the_top_blocks_only(causal):
    clf = _built(causal)
    lora = [n for n, p in clf.module_.named_parameters() if "lora_" in n]
    assert lora and all(".layers.1." in n for n in lora)
    assert clf.lora_.last_n == 1 and all(t.startswith("layers.1.") for t in clf.lora_.targets)


def test_cached_lora_gives_the_uncached_logits_and_gradients(causal):
    clf = _built(causal)
    module, collate = clf.module_, clf.encoder_.collate
    items = clf.encoder_.encode(TEXTS[:10], [int(v == "spam") for v in LABELS[:10]])
    train, _, top, hidden_collate = build_cache(module, 1, items, None, collate, 4)
    assert isinstance(top._cache, CausalLowerCache) and top._cache.split == 1
    assert [len(it["hidden"]) for it in train] == [len(it["input_ids"]) for it in items]
    module.eval()
    with torch.inference_mode():
        direct = module(**{k: v for k, v in collate(items).items() if k != "labels"})
        via = top(**{k: v for k, v in hidden_collate(train).items() if k != "labels"})
    assert (direct - via).abs().max() < 1e-5        # mixed lengths in one batch: padding does not leak in

    def grads(run, batch):
        module.train()
        module.zero_grad(set_to_none=True)
        labels = batch.pop("labels")
        loss = F.cross_entropy(run(**batch), labels)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    loss_p, g_p = grads(module, collate(items))
    loss_c, g_c = grads(top, hidden_collate(train))
    torch.testing.assert_close(loss_c, loss_p, atol=1e-5, rtol=1e-5)
    assert g_c.keys() == g_p.keys() and any("lora_A" in n for n in g_p)   # the prefix's top keys carry grad too
    for name in g_p:
        torch.testing.assert_close(g_c[name], g_p[name], atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def test_fitted_on_the_cache_it_predicts_through_the_whole_body_and_reloads_exactly(causal, tmp_path):
    kw = dict(strategy="slm-letters", model=causal, regime="lora", last_n=1, epochs=2, batch_size=8,
              body_lr=1e-2, head_lr=1e-2, progress=False, seed=3)
    clf = TextClassifier(cache_lower=True, **kw).fit(TEXTS, LABELS)
    start = TextClassifier(cache_lower=True, **kw)
    start.fitted_ = Fitted.for_labels(["ham", "spam"])
    start._build()
    after = {n: p.detach().cpu() for n, p in clf.module_.named_parameters()}
    before = dict(start.module_.named_parameters())
    assert all(torch.equal(after[n], before[n]) for n in before if "lora_" not in n and "offset" not in n)
    assert any(not torch.equal(after[n], before[n]) for n in before if "lora_B" in n)
    assert len(clf.history_) == 2
    probs = clf.predict_proba(TEXTS)
    clf.save(tmp_path / "m")
    again = load_model(tmp_path / "m", progress=False)
    # exact on a CPU; a model trained on a GPU predicts there, and its reload on the CPU rounds differently
    tol = 1e-5 if torch.cuda.is_available() else 0.0
    assert abs(again.predict_proba(TEXTS) - probs).max() <= tol


def test_cache_lower_needs_a_regime_that_leaves_frozen_blocks(causal):
    with pytest.raises(ConfigError, match="set regime partial or lora"):
        TextClassifier(strategy="slm-letters", model=causal, regime="full", cache_lower=True).resolved_params()
    with pytest.raises(ConfigError, match="set regime partial or lora"):   # encoder-mlp's own regime is full
        TextClassifier(strategy="encoder-mlp", cache_lower=True).resolved_params()


def test_an_unprompted_causal_body_is_refused_by_name(causal):
    clf = TextClassifier(strategy="causal-embedding-mlp", model=causal, regime="lora", cache_lower=True, epochs=1,
                         progress=False, eval_fraction=0)
    with pytest.raises(ConfigError, match="cache_lower"):
        clf.fit(TEXTS, LABELS)
