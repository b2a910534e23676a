"""TextClassifier over every strategy and regime, on tiny random Hugging Face models built locally.

Nothing here checks accuracy (the models are random); the tests check the mechanics each strategy
promises: probabilities, zero-shot, the sliced LM head, answer tokens, collisions, pooling under
padding, what LoRA and head-only leave untouched, save/load, scikit-learn compatibility and errors.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.model_selection import cross_val_score
from assertions import same_scores
from tiny_models import make_tiny_causal, make_tiny_encoder
from torch.testing import assert_close
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

import headswap.classifier.estimator as api
from headswap import TextClassifier
from headswap.errors import ConfigError, DataError, HeadswapError
from headswap.nn.hf import HFBody
from headswap.nn.pooling import LastTokenPool
from headswap.text.prompts import build_prompt
from headswap.strategies import get, names, parse_answer

STRATEGIES, ZERO_SHOT, NEEDS_CAUSAL = names(), names(zero_shot=True), names(needs_causal=True)
DEFAULT_REGIME = {s: get(s).default_regime for s in STRATEGIES}

X = ["win cash now", "free entry txt win", "see you at noon", "ok on my way home", "urgent you have won",
     "running late sorry"] * 2
Y = ["spam", "spam", "ham", "ham", "spam", "ham"] * 2
# 12 texts: below the 20 at which fit() splits off validation data, so every text trains and no
# validation pass runs (keeps the tests fast and the generate-parse counters clean).
ENCODER_STRATEGIES = [s for s in STRATEGIES if s not in NEEDS_CAUSAL]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-models")
    return {"encoder": str(make_tiny_encoder(root / "enc")), "causal": str(make_tiny_causal(root / "cau")),
            "plain": str(make_tiny_causal(root / "plain", chat=False))}


def make(strategy: str, models: dict, model: str | None = None, **kw) -> TextClassifier:
    model = model or models["causal" if strategy in NEEDS_CAUSAL else "encoder"]
    kw = {"epochs": 1, "batch_size": 8, "progress": False, **kw}
    return TextClassifier(strategy=strategy, model=model, **kw)


@pytest.fixture(scope="module")
def trained(models):
    """trained(strategy, regime) -> a classifier fitted on X, Y; each (strategy, resolved regime) fits once."""
    cache: dict = {}

    def get(strategy: str, regime: str = "auto") -> TextClassifier:
        key = (strategy, DEFAULT_REGIME[strategy] if regime == "auto" else regime)
        if key not in cache:
            cache[key] = make(strategy, models, regime=regime).fit(X, Y)
        return cache[key]

    return get


def _combos():
    out = []
    for s in STRATEGIES:
        seen = set()
        for r in ("auto", "head-only", "lora"):
            resolved = DEFAULT_REGIME[s] if r == "auto" else r
            # static has no transformer blocks to adapt: refusing lora is tested in test_static.py
            if resolved not in seen and not (s == "generate-parse" and r == "head-only") \
                    and not (s == "static" and r == "lora"):
                seen.add(resolved)
                out.append((s, r))
    return out


def _check_proba(clf: TextClassifier, texts: list[str], k: int) -> np.ndarray:
    proba = clf.predict_proba(texts)
    assert proba.shape == (len(texts), k)
    assert np.isfinite(proba).all() and (proba >= 0).all()
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    pred = clf.predict(texts)
    assert pred.shape == (len(texts),)
    assert set(pred) <= set(clf.classes_)
    assert list(pred) == list(clf.classes_[proba.argmax(axis=1)])
    return proba


# ---- 1. every strategy trains and predicts ----------------------------------------------------------------------


@pytest.mark.parametrize("strategy,regime", _combos())
def test_every_strategy_trains_and_predicts(trained, strategy, regime):
    clf = trained(strategy, regime)
    assert list(clf.classes_) == sorted(set(Y)) == ["ham", "spam"]
    assert clf.regime_ == (DEFAULT_REGIME[strategy] if regime == "auto" else regime)
    assert len(clf.history_) == 1 and np.isfinite(clf.history_[0]["train_loss"])
    assert clf.trainable_params_ > 0
    if clf.regime_ == "lora":
        trainable = [n for n, p in clf.module_.named_parameters() if p.requires_grad and n.startswith("body.")]
        assert trainable and all("lora_" in n for n in trainable)
    if clf.regime_ == "head-only":
        assert not any(p.requires_grad for p in clf.module_.body.parameters())
    _check_proba(clf, X[:5] + ["something never seen before"], 2)


def test_generate_parse_head_only_is_a_config_error(models):
    with pytest.raises(ConfigError, match="generate-parse"):
        make("generate-parse", models, regime="head-only").fit(X, Y)


# ---- 2. zero-shot -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ZERO_SHOT)
def test_zero_shot_strategies_run_untrained(models, strategy):
    clf = make(strategy, models, epochs=0).fit(X, Y)
    assert clf.trainable_params_ == 0 and clf.history_ == []
    _check_proba(clf, X[:4], 2)


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s not in ZERO_SHOT])
def test_zero_shot_is_refused_for_untrained_heads(models, strategy):
    assert strategy in ("encoder-mlp", "causal-embedding-mlp", "slm-hidden-mlp", "cross-encoder", "setfit", "static")
    with pytest.raises(ConfigError, match=f"'{strategy}'.*zero-shot"):
        make(strategy, models, epochs=0).fit(X, Y)


# ---- 3. the sliced head is the full LM head at the answer tokens -------------------------------------------------


def test_sliced_head_equals_full_lm_head(models):
    clf = make("slm-logits", models, epochs=0, prefix_cache=False).fit(X, Y)   # default regime lora: fresh adapters are a no-op
    clf.module_.cpu()       # fitted on a GPU where there is one; compared here with the reference LM on the CPU
    texts = ["win cash now call this number", "ok", "running late sorry"]
    batch = clf.encoder_.collate(clf.encoder_.encode(texts))
    mask = batch["attention_mask"]
    lengths = mask.sum(1)
    for i, n in enumerate(lengths.tolist()):  # right padding: real tokens first
        assert mask[i, :n].all() and not mask[i, n:].any()
    assert lengths.unique().numel() > 1       # the texts really are padded
    last = lengths - 1
    rows = torch.arange(len(texts))
    assert (batch["input_ids"][rows, last] == clf.encoder_.suffix_ids[-1]).all()  # scored right after the prompt
    with torch.no_grad():
        sliced = clf.module_.head(clf.module_.features(**batch))
        full = AutoModelForCausalLM.from_pretrained(models["causal"]).eval()
        logits = full(input_ids=batch["input_ids"], attention_mask=mask).logits
    ref = logits[rows, last][:, clf.answer_token_ids_]
    assert sliced.shape == (len(texts), 2)
    assert_close(sliced, ref, atol=1e-5, rtol=0)
    assert_close(torch.from_numpy(clf.decision_function(texts)), ref, atol=1e-5, rtol=0)
    assert clf.module_.head.token_ids.tolist() == clf.answer_token_ids_


# ---- 4. answer tokens as they appear after the prompt ------------------------------------------------------------


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_answer_token_after_chat_template(models):
    clf = make("slm-logits", models, epochs=0).fit(X, Y)
    tok, prompt = clf.tokenizer_, clf.prompt_
    assert prompt.answer_separator == "" and prompt.suffix.endswith("assistant\n")
    suffix_ids = _ids(tok, prompt.suffix)
    for label, tid in zip(clf.classes_, clf.answer_token_ids_):
        full = _ids(tok, prompt.suffix + label)
        assert full[:len(suffix_ids)] == suffix_ids
        assert tid == full[len(suffix_ids)]
        assert tid != _ids(tok, " " + label)[0]   # no leading space after the assistant header


def test_answer_token_without_chat_template_has_a_leading_space(models):
    clf = make("slm-logits", models, model=models["plain"], epochs=0).fit(X, Y)
    tok, prompt = clf.tokenizer_, clf.prompt_
    assert getattr(tok, "chat_template", None) is None
    assert prompt.answer_separator == " " and prompt.suffix.endswith("Answer:")
    suffix_ids = _ids(tok, prompt.suffix)
    for label, tid in zip(clf.classes_, clf.answer_token_ids_):
        full = _ids(tok, prompt.suffix + " " + label)
        assert full[:len(suffix_ids)] == suffix_ids   # no merge across the boundary for these labels
        assert tid == full[len(suffix_ids)] == _ids(tok, " " + label)[0]
        assert tid != _ids(tok, label)[0]
    _check_proba(clf, X[:3], 2)


# ---- 5. colliding first tokens -----------------------------------------------------------------------------------


def _colliding_labels(model_dir: str) -> tuple[str, str]:
    tok = AutoTokenizer.from_pretrained(model_dir)
    suffix = build_prompt(tok, ["a", "b"]).suffix
    n = len(_ids(tok, suffix))
    words = ["positive", "positively", "negative", "neutral", "win", "winner", "call", "caller", "spam", "spammy"]
    first = {w: _ids(tok, suffix + w)[n] for w in words}
    for i, a in enumerate(words):
        for b in words[i + 1:]:
            if first[a] == first[b]:
                return a, b
    pytest.fail("no colliding pair among the candidate labels")


def test_colliding_first_tokens_need_letters(models):
    a, b = _colliding_labels(models["causal"])
    y = [a if v == "spam" else b for v in Y]
    with pytest.raises(ConfigError) as info:
        make("slm-logits", models, epochs=0).fit(X, y)
    msg = str(info.value)
    assert repr(a) in msg and repr(b) in msg and "slm-letters" in msg
    clf = make("slm-letters", models, epochs=0).fit(X, y)
    assert clf.prompt_.answers == ["A", "B"]
    assert len(set(clf.answer_token_ids_)) == 2
    assert sorted(clf.classes_) == sorted([a, b])
    _check_proba(clf, X[:3], 2)


# ---- 6. last-token pooling under left and right padding ----------------------------------------------------------


def test_last_token_pooling_left_and_right_padding(models):
    """Llama without explicit position_ids numbers positions 0..T-1 even under left padding, so the real
    tokens sit at shifted absolute positions. RoPE makes attention depend only on relative positions,
    so the hidden state of the last real token is still the same (to float error). The test checks
    both that and the stronger property that the pool picks exactly the last real token's row."""
    tok = AutoTokenizer.from_pretrained(models["causal"])
    body = HFBody(AutoModel.from_pretrained(models["causal"]).eval())
    pool = LastTokenPool()
    rows = [_ids(tok, t) + [tok.eos_token_id] for t in ["win cash now call this number", "ok", "see you at noon"]]
    width, pad = max(map(len, rows)), tok.pad_token_id

    def padded(left: bool):
        ids = torch.full((len(rows), width), pad)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            sl = slice(width - len(r), width) if left else slice(0, len(r))
            ids[i, sl], mask[i, sl] = torch.tensor(r), 1
        return ids, mask

    pooled = {}
    with torch.no_grad():
        for left in (False, True):
            ids, mask = padded(left)
            hidden = body(ids, mask)
            last = torch.tensor([width - 1 if left else len(r) - 1 for r in rows])
            assert (ids[torch.arange(len(rows)), last] == tok.eos_token_id).all()
            pooled[left] = pool(hidden, mask)
            assert torch.equal(pooled[left], hidden[torch.arange(len(rows)), last])
        alone = [pool(body(torch.tensor([r]), torch.ones(1, len(r), dtype=torch.long)), torch.ones(1, len(r)))[0]
                 for r in rows]
    assert_close(pooled[False], pooled[True], atol=1e-5, rtol=0)
    assert_close(pooled[False], torch.stack(alone), atol=1e-5, rtol=0)


def test_causal_prediction_does_not_depend_on_batch_padding(trained):
    clf = trained("causal-embedding-mlp")
    texts = ["ok", "win cash now call this number free entry txt win"]
    together = clf.predict_proba(texts)
    alone = np.concatenate([clf.predict_proba([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


# ---- 7. LoRA leaves the base weights untouched --------------------------------------------------------------------


@pytest.fixture
def spy_fit(monkeypatch):
    """Snapshot the parameters of the module handed to training.fit, just before training starts."""
    before: dict[str, torch.Tensor] = {}
    real = api.fit

    def spy(module, *args, **kwargs):
        before.update({n: p.detach().clone() for n, p in module.named_parameters()})
        return real(module, *args, **kwargs)

    monkeypatch.setattr(api, "fit", spy)
    return before


@pytest.mark.parametrize("strategy", ["slm-logits", "encoder-mlp"])
def test_lora_leaves_base_weights_untouched(models, spy_fit, strategy):
    clf = make(strategy, models, regime="lora", epochs=2, batch_size=4, head_lr=1e-2, body_lr=1e-2).fit(X, Y)
    after = {n: p.detach() for n, p in clf.module_.named_parameters()}
    assert set(spy_fit) == set(after)
    lora = [n for n in after if "lora_" in n]
    base = [n for n in after if "lora_" not in n and n.startswith("body.")]
    assert lora and base
    assert any(".base_layer." in n for n in base)          # the adapted Linears' own weights
    assert any("embed" in n for n in base)                 # embeddings
    unchanged_base = [n for n in base if torch.equal(spy_fit[n], after[n])]
    assert unchanged_base == base
    assert not any(clf.module_.get_parameter(n).requires_grad for n in base)
    lora_b = [n for n in lora if "lora_B" in n]
    assert lora_b and all(not torch.equal(spy_fit[n], after[n]) for n in lora_b)
    head = [n for n in after if n.startswith("head.")]
    if strategy == "slm-logits":   # the sliced LM head is pretrained and stays frozen
        assert head == ["head.weight"]
        assert torch.equal(spy_fit["head.weight"], after["head.weight"])
        assert not clf.module_.head.weight.requires_grad
    else:                          # a fresh MLP head trains
        assert any(not torch.equal(spy_fit[n], after[n]) for n in head)


# ---- 8. save and load ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_save_load_roundtrip(trained, tmp_path, strategy):
    clf = trained(strategy)
    texts = X[:6]
    before = clf.predict_proba(texts)
    out = clf.save(tmp_path / "saved")
    for name in ("model.safetensors", "headswap_config.json", "README.md"):
        assert (out / name).is_file(), name
    config = json.loads((out / "headswap_config.json").read_text())
    assert config["params"]["strategy"] == strategy
    assert config["labels"] == ["ham", "spam"]
    assert config["regime"] == DEFAULT_REGIME[strategy]
    assert (config["lora"] is not None) == (config["regime"] == "lora")
    assert strategy in (out / "README.md").read_text()
    loaded = TextClassifier.load(out, progress=False)
    assert loaded.strategy == strategy and list(loaded.classes_) == ["ham", "spam"]
    same_scores(loaded.predict_proba(texts), before, atol=1e-6)
    assert list(loaded.predict(texts)) == list(clf.predict(texts))


# ---- 9. load errors -----------------------------------------------------------------------------------------------


def test_load_errors(trained, tmp_path):
    good = trained("encoder-mlp").save(tmp_path / "good")
    with pytest.raises(HeadswapError, match="headswap_config.json"):
        TextClassifier.load(tmp_path / "does-not-exist")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HeadswapError, match="headswap_config.json"):
        TextClassifier.load(tmp_path / "empty")

    truncated = shutil.copytree(good, tmp_path / "truncated")
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(HeadswapError, match="corrupt"):
        TextClassifier.load(truncated)

    future = shutil.copytree(good, tmp_path / "future")
    config = json.loads((future / "headswap_config.json").read_text())
    config["format_version"] = 999
    (future / "headswap_config.json").write_text(json.dumps(config))
    with pytest.raises(HeadswapError, match="incompatible"):
        TextClassifier.load(future)

    broken = shutil.copytree(good, tmp_path / "broken-json")
    (broken / "headswap_config.json").write_text("{not json")
    with pytest.raises(HeadswapError, match="corrupt"):
        TextClassifier.load(broken)


def test_load_from_another_directory_with_a_relative_model_path(models, tmp_path, monkeypatch):
    shutil.copytree(models["encoder"], tmp_path / "work" / "enc")
    monkeypatch.chdir(tmp_path / "work")
    clf = make("encoder-mlp", models, model="enc").fit(X, Y)
    saved = clf.save(tmp_path / "saved")
    config = json.loads((saved / "headswap_config.json").read_text())
    assert config["params"]["model"] == "enc"
    assert config["base_model"]["ref"] == str((tmp_path / "work" / "enc").resolve())
    monkeypatch.chdir(tmp_path)
    np.testing.assert_allclose(TextClassifier.load(saved).predict_proba(X[:3]), clf.predict_proba(X[:3]), atol=1e-6)


# ---- 10. scikit-learn compatibility -------------------------------------------------------------------------------


def test_sklearn_clone_and_params(trained, models):
    clf = make("slm-logits", models, regime="lora", lora_r=4, descriptions={"spam": "junk", "ham": "normal"})
    params = clf.get_params()
    assert params["strategy"] == "slm-logits" and params["lora_r"] == 4
    twin = clone(clf)
    assert twin is not clf and twin.get_params() == params
    assert twin.set_params(epochs=5, lora_r=8) is twin
    assert twin.get_params()["epochs"] == 5 and twin.get_params()["lora_r"] == 8
    assert clf.get_params() == params                  # the original is untouched
    with pytest.raises(ValueError):
        twin.set_params(no_such_param=1)
    fitted = trained("encoder-mlp")
    fresh = clone(fitted)
    assert fresh.get_params() == fitted.get_params()
    assert not hasattr(fresh, "module_")
    with pytest.raises(HeadswapError, match="not fitted"):
        fresh.predict_proba(X[:2])


def test_unfitted_predict_is_a_headswap_error(models):
    with pytest.raises(HeadswapError, match="not fitted"):
        make("encoder-mlp", models).predict(X[:2])


def test_sklearn_cross_val_score(models):
    est = TextClassifier(strategy="encoder-mlp", model=models["encoder"], epochs=1, progress=False)
    scores = cross_val_score(est, X, Y, cv=2, error_score="raise")
    assert scores.shape == (2,)
    assert np.isfinite(scores).all() and ((scores >= 0) & (scores <= 1)).all()


def test_sklearn_score_with_integer_labels(models, tmp_path):
    y = [int(v == "spam") for v in Y]
    clf = make("encoder-mlp", models).fit(X, y)
    assert list(clf.classes_) == [0, 1]
    assert set(clf.predict(X[:4])) <= {0, 1}
    assert 0.0 <= clf.score(X, y) <= 1.0
    loaded = TextClassifier.load(clf.save(tmp_path / "int-labels"), progress=False)
    assert list(loaded.classes_) == [0, 1] and list(loaded.predict(X[:4])) == list(clf.predict(X[:4]))


# ---- 11. bad input ------------------------------------------------------------------------------------------------


def test_bad_training_input(models, trained):
    with pytest.raises(HeadswapError, match="single class"):
        make("encoder-mlp", models).fit(X[:4], ["spam"] * 4)
    with pytest.raises(DataError, match="index 2"):
        make("encoder-mlp", models).fit(["a text", "another", "", "more"], ["spam", "ham", "spam", "ham"])
    with pytest.raises(DataError, match="index 1"):
        make("encoder-mlp", models).fit(["a text", "   ", "more"], ["spam", "ham", "spam"])
    with pytest.raises(HeadswapError, match="'eggs'"):
        make("encoder-mlp", models).fit(X, Y, eval_texts=["one", "two"], eval_labels=["spam", "eggs"])
    with pytest.raises(HeadswapError, match="'eggs'"):
        trained("encoder-mlp").evaluate(["one", "two"], ["spam", "eggs"])


# ---- 12. generate-parse -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("output,expected", [
    ("spam", (0, "exact")),
    ("HAM", (1, "exact")),
    ("  Spam.\nbecause it says win", (0, "exact")),
    ("ham, clearly", (1, "exact")),
    ("**spam**", (0, "exact")),
    ("spma", (0, "fuzzy")),
    ("hm", (1, "fuzzy")),
    ("hamster", (1, "exact")),            # documented: the first answer the output starts with
    ("The text is: win cash. Answer: spam", (0, "search")),
    ("I would say ham.", (1, "search")),
    ("spam or ham? hard to say", (0, "exact")),           # the first word decides before any search
    ("it could be spam, or ham", (None, "unparsed")),     # two answers named: no guess
    ("spammer alert", (0, "exact")),
    ("the hamburger is hot", (None, "unparsed")),         # search matches whole words only
    ("xyzzy", (None, "unparsed")),
    ("", (None, "unparsed")),
    ("...", (None, "unparsed")),
])
def test_parse_answer(output, expected):
    assert parse_answer(output, ["spam", "ham"]) == expected


def test_parse_answer_prefers_the_longest_prefix():
    assert parse_answer("positively so", ["pos", "positive"]) == (1, "exact")


def test_generate_parse_counts_every_text(models):
    clf = make("generate-parse", models, epochs=0).fit(X, Y)
    assert sum(clf.module_.parse_counts.values()) == 0
    clf.predict(X[:5])
    counts = clf.module_.parse_counts
    assert sum(counts.values()) == 5 and set(counts) <= {"exact", "fuzzy", "unparsed"}
    assert len(clf.module_.last_outputs) == 5


def test_generate_parse_evaluate_counts_only_its_own_texts(models):
    clf = make("generate-parse", models, epochs=0).fit(X, Y)
    clf.predict(X[:5])
    m = clf.evaluate(X[:3], Y[:3])
    assert sum(m.extra["parse_counts"].values()) == 3


# ---- 13. cross-encoder: K passes per text -------------------------------------------------------------------------


def test_cross_encoder_runs_k_passes_per_text(models):
    y = ["spam", "ham", "eggs"] * 4
    desc = {"spam": "unwanted advertising", "ham": "a normal personal message", "eggs": "something about food"}
    clf = make("cross-encoder", models, descriptions=desc).fit(X, y)
    clf.module_.cpu()       # fitted on a GPU where there is one; the batches built here are on the CPU
    labels = list(clf.classes_)
    k, texts = len(labels), X[:4]
    batch = clf.encoder_.collate(clf.encoder_.encode(texts))
    assert batch["input_ids"].shape[0] == len(texts) * k
    assert batch["attention_mask"].shape == batch["input_ids"].shape
    tok = clf.tokenizer_
    with torch.no_grad():
        assert clf.module_.features(**batch).shape == (len(texts), k, 32)
        logits = clf.module_(**batch)
        assert logits.shape == (len(texts), k)
        for i, text in enumerate(texts):          # row i*K + j is (text i, description of class j)
            for j, label in enumerate(labels):
                enc = tok(text, desc[label], return_tensors="pt")
                row = batch["input_ids"][i * k + j]
                assert row[: enc["input_ids"].shape[1]].tolist() == enc["input_ids"][0].tolist()
                n = int(batch["attention_mask"][i * k + j].sum())   # the same pair, alone and unpadded
                pair = {key: v[i * k + j: i * k + j + 1, :n] for key, v in batch.items() if key != "labels"}
                one = clf.module_.pool(clf.module_.body(**pair), pair["attention_mask"])
                assert_close(clf.module_.head.score(one)[0, 0], logits[i, j], atol=1e-5, rtol=0)
    _check_proba(clf, texts, k)


def test_cross_encoder_pairs_carry_segment_ids(trained):
    clf = trained("cross-encoder")
    assert clf.module_.body.model.config.type_vocab_size == 2
    batch = clf.encoder_.collate(clf.encoder_.encode(X[:2]))
    assert "token_type_ids" in batch and batch["token_type_ids"].max() == 1


# ---- 14. head-only on a frozen body -------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["encoder-mlp", "slm-logits"])
def test_head_only_freezes_the_body(models, spy_fit, strategy):
    clf = make(strategy, models, regime="head-only", epochs=2, head_lr=1e-2).fit(X, Y)
    module = clf.module_
    auto = AutoModelForCausalLM if strategy in NEEDS_CAUSAL else AutoModel
    original = auto.from_pretrained(models["causal" if strategy in NEEDS_CAUSAL else "encoder"])
    original = getattr(original, "model", original)    # LlamaForCausalLM -> LlamaModel
    reference = original.state_dict()
    body_state = module.body.model.state_dict()
    assert set(body_state) <= set(reference) and len(body_state) > 0
    for name, value in body_state.items():
        assert torch.equal(value.cpu(), reference[name]), name
    assert not any(p.requires_grad for p in module.body.parameters())
    head_params = sum(p.numel() for p in module.head.parameters()) + sum(p.numel() for p in module.pool.parameters())
    assert clf.trainable_params_ == head_params
    if strategy == "encoder-mlp":
        assert head_params == 32 * 32 + 32 + 32 * 2 + 2
    else:
        assert head_params == 2 * 32               # the sliced LM head: K rows of hidden size
    # training really ran on the head (with cached features, fit sees the head alone)
    assert spy_fit and all(n.startswith("head.") for n in spy_fit)
    assert any(not torch.equal(spy_fit[n], module.get_parameter(n)) for n in spy_fit)


@pytest.mark.parametrize("strategy", ["slm-logits", "slm-letters", "slm-hidden-mlp"])
def test_prefix_cache_gives_the_uncached_probabilities(models, tmp_path, strategy):
    """The shared prompt prefix runs once as a KV cache; probabilities equal the full-prompt path, and a
    model trained with the cache reloads without it (same parameter names, same weights)."""
    clf = make(strategy, models, epochs=1, prefix_cache=True)
    clf.fit(X, Y)
    assert type(clf.module_.body).__name__ == "PrefixCachedBody"
    assert not clf.encoder_.include_prefix
    cached = clf.predict_proba(X)
    clf.save(tmp_path / "m")
    config = tmp_path / "m" / "headswap_config.json"
    data = json.loads(config.read_text())
    data["params"]["prefix_cache"] = False
    config.write_text(json.dumps(data))
    plain = TextClassifier.load(tmp_path / "m", progress=False)
    assert type(plain.module_.body).__name__ == "HFBody"
    np.testing.assert_allclose(plain.predict_proba(X), cached, atol=1e-4)


def test_settings_accept_exactly_the_registered_strategies():
    from headswap import settings, strategies

    assert names() == settings.STRATEGIES

    class Plug(strategies.Strategy):
        name, description = "plug-in-test", "a test's plug-in"

    strategies.register(Plug)
    try:
        settings.check({"strategy": "plug-in-test"})
        assert names()[-1] == settings.STRATEGIES[-1] == "plug-in-test"
    finally:
        strategies.unregister("plug-in-test")
    assert names() == settings.STRATEGIES
    with pytest.raises(ConfigError, match="unknown strategy 'plug-in-test'"):
        settings.check({"strategy": "plug-in-test"})
