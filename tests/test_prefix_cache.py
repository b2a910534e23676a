"""The prefix KV cache (headswap.prefix_cache): cached and uncached bodies must agree.

Fast tests use a tiny random Llama (float32) with the ChatML template; the slow test compares the
two paths on the real smollm2-135m with the default emotion prompt.
"""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import make_tiny_causal, make_tiny_encoder

from headswap.text.encoding import TextEncoder
from headswap.errors import ConfigError
from headswap.nn.hf import HFBody, base_of
from headswap.models import load_model
from headswap.nn.pooling import last_token_index
from headswap.nn.prefix_cache import PrefixCachedBody, strip_prefix, supports_prefix_cache, uncached_and_cached
from headswap.text.prompts import answer_token_ids, build_prompt

LABELS = ["sadness", "joy", "love", "anger", "fear", "surprise"]
TEXTS = ["win cash now call this number", "ok", "see you at noon", "running late sorry, call me when you are free",
         "hello world this is a test of a longer text that goes on"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    torch.manual_seed(0)
    return make_tiny_causal(tmp_path_factory.mktemp("prefix-cache") / "tiny-llama")


def _setup(folder, attn="sdpa"):
    """(causal LM, encoder, answer ids) with the slm-letters prompt for LABELS (the tiny tokenizer gives
    several class names the same first token)."""
    hf_model, tok, _ = load_model(folder, causal_lm_head=True)
    if attn != hf_model.config._attn_implementation:
        hf_model.set_attn_implementation(attn)
    prompt = build_prompt(tok, LABELS, letters=True)
    encoder = TextEncoder(tok, "prompt", 64, prompt=prompt)
    return hf_model, encoder, answer_token_ids(tok, prompt, LABELS)


def _batches(encoder, texts):
    full = encoder.collate(encoder.encode(texts))
    rest = encoder.collate(strip_prefix(encoder.encode(texts), encoder.prefix_ids))
    return full, rest


def _last_hidden(body, batch):
    h = body(batch["input_ids"], batch["attention_mask"])
    return h[torch.arange(h.shape[0]), last_token_index(batch["attention_mask"])]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("texts", [TEXTS, TEXTS[3:4]], ids=["B5-mixed-lengths", "B1"])
def test_cached_matches_uncached(tiny_dir, attn, texts):
    hf_model, encoder, ids = _setup(tiny_dir, attn)
    plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    full, rest = _batches(encoder, texts)
    assert rest["input_ids"].shape[1] < full["input_ids"].shape[1]
    assert (rest["attention_mask"].sum(1) + len(encoder.prefix_ids) == full["attention_mask"].sum(1)).all()
    with torch.inference_mode():
        h_plain, h_cached = _last_hidden(plain.body, full), _last_hidden(cached.body, rest)
        p_plain = plain(full["input_ids"], full["attention_mask"]).softmax(-1)
        p_cached = cached(rest["input_ids"], rest["attention_mask"]).softmax(-1)
        # every real text token, not only the last one
        hp, hc = plain.body(full["input_ids"], full["attention_mask"]), cached.body(rest["input_ids"], rest["attention_mask"])
    torch.testing.assert_close(h_cached, h_plain, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(p_cached, p_plain, atol=1e-4, rtol=1e-4)
    n = len(encoder.prefix_ids)
    for i, length in enumerate(rest["attention_mask"].sum(1).tolist()):
        torch.testing.assert_close(hc[i, :length], hp[i, n:n + length], atol=1e-4, rtol=1e-4)


def test_padding_does_not_change_a_text(tiny_dir):
    hf_model, encoder, ids = _setup(tiny_dir)
    _, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    _, rest_all = _batches(encoder, TEXTS)
    _, rest_one = _batches(encoder, TEXTS[1:2])
    with torch.inference_mode():
        together = cached(rest_all["input_ids"], rest_all["attention_mask"])[1]
        alone = cached(rest_one["input_ids"], rest_one["attention_mask"])[0]
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


def test_prefix_runs_once_in_inference_and_is_not_mutated(tiny_dir):
    hf_model, encoder, ids = _setup(tiny_dir)
    _, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    body = cached.body
    _, rest = _batches(encoder, TEXTS)
    _, rest1 = _batches(encoder, TEXTS[:1])
    with torch.inference_mode():
        first = cached(rest["input_ids"], rest["attention_mask"])
        kv = [(k.clone(), v.clone()) for k, v in body._kv]
        cached(rest1["input_ids"], rest1["attention_mask"])
        second = cached(rest["input_ids"], rest["attention_mask"])
    assert body.prefix_runs == 1
    assert all(k.shape[0] == 1 and k.shape[2] == len(encoder.prefix_ids) for k, _ in body._kv)
    for (k0, v0), (k1, v1) in zip(kv, body._kv):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    with torch.no_grad():  # the KV cached under inference_mode also serves no_grad calls
        third = cached(rest["input_ids"], rest["attention_mask"])
    assert body.prefix_runs == 1
    torch.testing.assert_close(first, third, atol=1e-6, rtol=1e-6)


def test_cache_invalidated_by_mode_switch_and_weight_change(tiny_dir):
    hf_model, encoder, ids = _setup(tiny_dir)
    plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    body = cached.body
    full, rest = _batches(encoder, TEXTS)
    with torch.inference_mode():
        cached(rest["input_ids"], rest["attention_mask"])
    assert body._kv is not None
    cached.eval()                      # no mode switch (as predict_logits does on an eval-mode model)
    assert body._kv is not None
    cached.train()
    assert body._kv is None
    cached.eval()
    with torch.inference_mode():
        cached(rest["input_ids"], rest["attention_mask"])
    assert body.prefix_runs == 2
    # an optimizer-like in-place change of a body weight
    with torch.no_grad():
        body.model.layers[0].self_attn.k_proj.weight.mul_(1.5)
    with torch.inference_mode():
        after = cached(rest["input_ids"], rest["attention_mask"]).softmax(-1)
        expected = plain(full["input_ids"], full["attention_mask"]).softmax(-1)
    assert body.prefix_runs == 3
    torch.testing.assert_close(after, expected, atol=1e-4, rtol=1e-4)
    body.invalidate()
    assert body._kv is None


def _grads(module, batch, labels):
    module.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(module(batch["input_ids"], batch["attention_mask"]), labels)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("texts", [TEXTS, TEXTS[:1]], ids=["B5", "B1"])
def test_training_gradients_match_uncached(tiny_dir, texts):
    hf_model, encoder, ids = _setup(tiny_dir)
    plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    full, rest = _batches(encoder, texts)
    labels = torch.arange(len(texts)) % len(LABELS)
    plain.train(), cached.train()
    loss_p, g_p = _grads(plain, full, labels)
    runs = cached.body.prefix_runs
    loss_c, g_c = _grads(cached, rest, labels)
    assert cached.body.prefix_runs == runs + 1        # once per batch, not once per row
    assert cached.body._kv is None                      # nothing is cached while training
    torch.testing.assert_close(loss_c, loss_p, atol=1e-5, rtol=1e-5)
    assert g_c.keys() == g_p.keys()
    assert "body.model.layers.0.self_attn.q_proj.weight" in g_c and "body.model.embed_tokens.weight" in g_c
    for name in g_p:
        torch.testing.assert_close(g_c[name], g_p[name], atol=1e-4, rtol=1e-3, msg=lambda m: f"{name}: {m}")


def test_lora_adapters_get_the_same_gradients(tiny_dir):
    from headswap.train.lora import LoraSettings, apply_lora

    results = []
    for use_cache in (False, True):
        hf_model, encoder, ids = _setup(tiny_dir)
        plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
        module = cached if use_cache else plain
        torch.manual_seed(0)
        apply_lora(module, LoraSettings(r=4, alpha=8, dropout=0.0))   # no dropout: the paths are deterministic
        torch.manual_seed(1)
        for name, p in module.named_parameters():   # non-zero B so that A gets a gradient too
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
        full, rest = _batches(encoder, TEXTS)
        module.train()
        results.append(_grads(module, rest if use_cache else full, torch.tensor([0, 1, 2, 3, 4])))
    (loss_p, g_p), (loss_c, g_c) = results
    lora = [n for n in g_p if "lora_" in n]
    assert lora and set(g_p) == set(lora) | {n for n in g_p if n.startswith("head.")}
    assert g_c.keys() == g_p.keys()
    torch.testing.assert_close(loss_c, loss_p, atol=1e-5, rtol=1e-5)
    for name in g_p:
        assert g_c[name].abs().sum() > 0
        torch.testing.assert_close(g_c[name], g_p[name], atol=1e-4, rtol=1e-3, msg=lambda m: f"{name}: {m}")


def test_same_parameter_names_as_hfbody(tiny_dir):
    hf_model, encoder, ids = _setup(tiny_dir)
    plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    assert list(cached.state_dict()) == list(plain.state_dict())   # saved weights fit either path
    assert cached.body.hidden_size == hf_model.config.hidden_size


def test_strip_prefix(tiny_dir):
    _, encoder, _ = _setup(tiny_dir)
    items = encoder.encode(TEXTS[:2], [0, 1])
    rest = strip_prefix(items, encoder.prefix_ids)
    n = len(encoder.prefix_ids)
    assert [r["input_ids"] for r in rest] == [i["input_ids"][n:] for i in items]
    assert [r["label"] for r in rest] == [0, 1]
    assert strip_prefix(items, n) == rest
    assert items[0]["input_ids"][:n] == encoder.prefix_ids          # the input items are not modified
    with pytest.raises(ValueError, match="does not start with the prompt prefix"):
        strip_prefix([{"input_ids": [encoder.prefix_ids[0] + 1] + items[0]["input_ids"][1:]}], encoder.prefix_ids)
    with pytest.raises(ValueError, match="no tokens after"):
        strip_prefix([{"input_ids": list(encoder.prefix_ids)}], encoder.prefix_ids)


def test_rejects_models_without_a_kv_cache(tmp_path):
    bert, _, _ = load_model(make_tiny_encoder(tmp_path / "bert"), causal_lm_head=False)
    assert not supports_prefix_cache(bert)
    with pytest.raises(ConfigError, match="key/value cache"):
        PrefixCachedBody(HFBody(bert), [1, 2, 3])


class _IgnoresTheCache(torch.nn.Module):
    """A causal model whose forward takes a cache argument and silently drops it (what an argument renamed
    under a library upgrade looks like when it lands in **kwargs)."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, input_ids=None, past_key_values=None, cache=None, **kwargs):
        return self.inner(input_ids=input_ids, **kwargs)


class _OldName(torch.nn.Module):
    """A causal model that knows only the pre-5.x name, past_key_values."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=None, **kwargs):
        if "cache" in kwargs:
            raise TypeError("forward() got an unexpected keyword argument 'cache'")
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=use_cache, **{"cache" if _takes_cache(self.inner) else "past_key_values":
                                                  past_key_values})


def _takes_cache(model):
    import inspect
    return "cache" in inspect.signature(model.forward).parameters


def test_support_is_probed_not_read_off_the_signature(tiny_dir):
    from headswap.nn.prefix_cache import cache_keyword
    base = base_of(_setup(tiny_dir)[0])
    assert supports_prefix_cache(base) and cache_keyword(base) in ("cache", "past_key_values")
    ignoring = _IgnoresTheCache(base)
    assert not supports_prefix_cache(ignoring)        # its signature names both, but the cache is unused
    with pytest.raises(ConfigError, match="key/value cache"):
        PrefixCachedBody(HFBody(ignoring), [1, 2, 3])
    old = _OldName(base)
    assert cache_keyword(old) == "past_key_values"


def test_old_cache_keyword_gives_the_same_probabilities(tiny_dir):
    hf_model, encoder, ids = _setup(tiny_dir)
    plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    old = PrefixCachedBody(HFBody(_OldName(base_of(hf_model))), encoder.prefix_ids)
    full, rest = _batches(encoder, TEXTS)
    with torch.inference_mode():
        expected = _last_hidden(plain.body, full)
        got = _last_hidden(old, rest)
    assert old._cache_kw == "past_key_values"
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_rejects_an_empty_prefix(tiny_dir):
    hf_model, _, _ = _setup(tiny_dir)
    with pytest.raises(ConfigError, match="non-empty"):
        PrefixCachedBody(HFBody(base_of(hf_model)), [])


def test_deepcopy_and_device_move_keep_working(tiny_dir):
    hf_model, encoder, ids = _setup(tiny_dir)
    _, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    _, rest = _batches(encoder, TEXTS)
    with torch.inference_mode():
        a = cached(rest["input_ids"], rest["attention_mask"])
    twin = copy.deepcopy(cached).to(torch.float64)     # new storage and dtype: the cache must not be reused
    with torch.inference_mode():
        b = twin(rest["input_ids"], rest["attention_mask"])
    assert b.dtype == torch.float64
    torch.testing.assert_close(b.float(), a, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_smollm2_cached_probabilities_match():
    hf_model, tok, _ = load_model("smollm2-135m", causal_lm_head=True)
    prompt = build_prompt(tok, LABELS)
    encoder = TextEncoder(tok, "prompt", 128, prompt=prompt)
    ids = answer_token_ids(tok, prompt, LABELS)
    plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    texts = ["i feel so lonely and sad today", "what a wonderful surprise, i am thrilled!",
             "i am furious at how they treated me", "im scared of the dark",
             "i love you so much", "wow i did not expect that at all"]
    full, rest = _batches(encoder, texts)
    with torch.inference_mode():
        p_plain = plain(full["input_ids"], full["attention_mask"]).softmax(-1)
        p_cached = cached(rest["input_ids"], rest["attention_mask"]).softmax(-1)
        p_single = torch.cat([cached(r["input_ids"], r["attention_mask"]).softmax(-1)
                              for r in (_batches(encoder, [t])[1] for t in texts)])
    assert cached.body.prefix_runs == 1
    torch.testing.assert_close(p_cached, p_plain, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(p_single, p_plain, atol=1e-4, rtol=1e-4)


def test_predict_logits_reuses_the_prefix_across_calls(tiny_dir):
    from headswap.train.loop import predict_logits

    hf_model, encoder, ids = _setup(tiny_dir)
    plain, cached = uncached_and_cached(hf_model, encoder.prefix_ids, ids)
    full_items = encoder.encode(TEXTS)
    rest_items = strip_prefix(full_items, encoder.prefix_ids)
    expected = predict_logits(plain, full_items, encoder.collate, batch_size=2)
    first = predict_logits(cached, rest_items, encoder.collate, batch_size=2)
    second = predict_logits(cached, rest_items[:3], encoder.collate, batch_size=2)
    assert cached.body.prefix_runs == 1          # 5 batches over two calls, one prefix run
    torch.testing.assert_close(first, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(second, expected[:3], atol=1e-4, rtol=1e-4)
