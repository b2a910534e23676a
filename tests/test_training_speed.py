"""The training speed-ups change how fast a model trains, never what it sees or what stays pretrained: grouped
batches hold every text once an epoch, a frozen embedding table stays bit-identical, and partial fine-tuning on
cached lower blocks computes the same logits as running the whole body."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_tiny_encoder
from torch.utils.data import DataLoader

from headswap.classifier.estimator import TextClassifier
from headswap.errors import ConfigError
from headswap.classifier.fitted import Fitted
from headswap.train.checkpoint import _ADDED_LATER, RESUME_KEYS
from headswap.train.loop import EpochShuffle
from headswap.train.lower_cache import build_cache

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now call this number", "free entry txt win to claim your prize", "urgent you have won",
         "see you at noon", "call me when you are free", "running late sorry", "ok on my way home",
         "hello world this is a test", "win", "see you", "free prize call now you have won the cash entry",
         "ok"] * 4
LABELS = ["spam", "spam", "spam", "ham", "ham", "ham", "ham", "ham", "spam", "ham", "spam", "ham"] * 4


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("speed") / "tiny-enc"))


# ---- length-grouped batches -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n, b", [(1003, 16), (97, 32), (5, 8)])
def test_grouped_batches_hold_every_text_once_an_epoch_drawn_from_the_shuffles_own_chunks(n, b):
    g = torch.Generator().manual_seed(n)
    lengths = (torch.rand(n, generator=g) ** 3 * 60 + 3).long().tolist()
    for epoch in (1, 2, 3):
        plain, grouped = EpochShuffle(n, 11), EpochShuffle(n, 11, lengths, b)
        plain.epoch = grouped.epoch = epoch
        batches = [batch.tolist() for batch in DataLoader(range(n), batch_size=b, sampler=grouped)]
        flat = [i for batch in batches for i in batch]
        assert sorted(flat) == list(range(n)) == sorted(plain.order())     # every text exactly once
        # Each batch comes from one chunk of that epoch's plain shuffle: the grouping reorders within chunks.
        mega = EpochShuffle.MEGA * b
        chunks = [set(plain.order()[s:s + mega]) for s in range(0, n, mega)]
        assert all(any(set(batch) <= c for c in chunks) for batch in batches)
        assert all(len(batch) == b for batch in batches[:-1])
        mine = [max(lengths[i] for i in batch) * len(batch) for batch in batches]
        theirs = [max(lengths[i] for i in plain.order()[s:s + b]) * len(plain.order()[s:s + b])
                  for s in range(0, n, b)]
        assert sum(mine) <= sum(theirs)                                    # never more padding


def test_group_by_length_is_the_default_and_old_checkpoints_resume_as_they_trained():
    assert TextClassifier().group_by_length is True
    assert TextClassifier().train_embeddings is True     # freezing it cost validation F1 in the runs measured
    assert "train_embeddings" in RESUME_KEYS
    # a checkpoint from before these settings trained ungrouped, with the embedding table
    assert _ADDED_LATER["group_by_length"] is False and _ADDED_LATER["train_embeddings"] is True


# ---- the frozen word-embedding table -------------------------------------------------------------------------


def _embedding_table(clf):
    return clf.module_.body.model.embeddings.word_embeddings.weight.cpu()     # fit may have moved it to a GPU


def _fit(encoder, **kw):
    return TextClassifier(strategy="encoder-mlp", model=encoder, regime="full", epochs=2, batch_size=8,
                          body_lr=1e-2, head_lr=1e-2, progress=False, eval_fraction=0, **kw).fit(TEXTS, LABELS)


def test_the_frozen_embedding_table_is_unchanged_by_full_fine_tuning(encoder, tmp_path):
    pristine = TextClassifier(strategy="encoder-mlp", model=encoder, regime="full", progress=False)
    pristine.fitted_ = Fitted.for_labels(["ham", "spam"])
    pristine._build()
    before = _embedding_table(pristine).detach().clone()
    frozen, trained = _fit(encoder, train_embeddings=False), _fit(encoder)
    assert torch.equal(_embedding_table(frozen), before)
    assert not torch.equal(_embedding_table(trained), before)        # the check above could fail
    # the rest of the body still trains: position embeddings and every block
    positions = frozen.module_.body.model.embeddings.position_embeddings.weight.cpu()
    assert not torch.equal(positions, pristine.module_.body.model.embeddings.position_embeddings.weight)
    # saved without the table (it is the base model's), loaded back with the same predictions
    frozen.save(tmp_path / "m")
    again = TextClassifier.load(tmp_path / "m")
    assert torch.equal(_embedding_table(again), before)
    assert abs(again.predict_proba(TEXTS[:6]) - frozen.predict_proba(TEXTS[:6])).max() < 1e-6


# ---- partial fine-tuning on cached lower blocks -------------------------------------------------------------


def test_cached_partial_gives_the_same_logits_as_the_uncached_body(encoder):
    clf = TextClassifier(strategy="encoder-mlp", model=encoder, regime="partial", last_n=1, progress=False)
    clf.fitted_ = Fitted.for_labels(["ham", "spam"])
    clf._build()
    items = clf.encoder_.encode(TEXTS, [int(v == "spam") for v in LABELS])
    train, val, top, collate = build_cache(clf.module_, 1, items, items[:5], clf.encoder_.collate, 7)
    assert len(train) == len(items) and len(val) == 5
    assert [len(it["hidden"]) for it in train] == [len(it["input_ids"]) for it in items]
    clf.module_.eval()
    with torch.inference_mode():
        for s in range(0, len(items), 10):       # batches of mixed lengths: padding must not leak in
            direct = clf.module_(**{k: v for k, v in clf.encoder_.collate(items[s:s + 10]).items() if k != "labels"})
            via = top(**{k: v for k, v in collate(train[s:s + 10]).items() if k != "labels"})
            assert (direct - via).abs().max() < 1e-5
    trainable = {n for n, p in top.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("classifier.body.model.encoder.layer.1.", "classifier.head."))
                             for n in trainable)


def test_cached_partial_trains_the_top_block_and_predicts_through_the_whole_body(encoder):
    kw = dict(strategy="encoder-mlp", model=encoder, regime="partial", last_n=1, epochs=3, batch_size=8,
              body_lr=1e-2, head_lr=1e-2, progress=False, seed=3)
    cached = TextClassifier(cache_lower=True, **kw).fit(TEXTS, LABELS)
    plain = TextClassifier(**kw).fit(TEXTS, LABELS)
    layer = "body.model.encoder.layer"
    start = TextClassifier(**kw)
    start.fitted_ = Fitted.for_labels(["ham", "spam"])
    start._build()
    weights = {n: p.cpu() for n, p in cached.module_.named_parameters()}
    first = {n: p for n, p in start.module_.named_parameters()}
    assert all(torch.equal(weights[n], first[n]) for n in first if n.startswith((f"{layer}.0.", "body.model.emb")))
    assert any(not torch.equal(weights[n], first[n]) for n in first if n.startswith(f"{layer}.1."))
    assert len(cached.history_) == 3 and cached.history_[-1]["score"] is not None
    assert cached.predict_proba(TEXTS[:4]).shape == plain.predict_proba(TEXTS[:4]).shape == (4, 2)


def test_cache_lower_needs_the_partial_regime_and_a_block_below():
    with pytest.raises(ConfigError, match="set regime partial or lora"):
        TextClassifier(regime="full", cache_lower=True).resolved_params()


def test_cache_lower_refuses_a_top_that_covers_every_block(encoder):
    clf = TextClassifier(strategy="encoder-mlp", model=encoder, regime="partial", last_n=2, cache_lower=True,
                         epochs=1, progress=False, eval_fraction=0)
    with pytest.raises(ConfigError, match="last_n must be between 1 and 1"):
        clf.fit(TEXTS, LABELS)


def test_auto_offers_cached_partial_between_the_frozen_heads_and_full_fine_tuning(encoder):
    from headswap.auto.ladder import Rung, plan_ladder
    rungs, _ = plan_ladder({encoder: "encoder"}, ["encoder-mlp"], 1)
    assert [(r.tier, r.name) for r in rungs] == [("frozen", "logistic head"), ("frozen", "linear head"),
                                                 ("frozen", "mlp head"), ("fine-tune", "partial-cached"),
                                                 ("fine-tune", "full")]
    cached: Rung = rungs[3]
    assert cached.settings({"last_n": 1}) | {} == {"last_n": 1, "cache_lower": True}    # the tiny body has 2 blocks
    assert cached.cost_key != rungs[4].cost_key
    rungs, _ = plan_ladder({encoder: "encoder"}, ["encoder-mlp"], 1, regime="full")
    assert [r.name for r in rungs] == ["full"]       # a regime the user chose is the only one


def test_only_a_transformer_bodys_table_is_frozen_not_statics():
    from torch import nn

    from headswap.teach.tiny import TinyConfig, TinyTransformer
    from headswap.train.regimes import word_embeddings

    class Static(nn.Module):      # static's body: its table is the model
        def __init__(self):
            super().__init__()
            self.embeddings = nn.Embedding(50, 8)
    assert word_embeddings(Static()) is None and word_embeddings(TinyTransformer(TinyConfig())) is None


# ---- mixed precision ------------------------------------------------------------------------------------------


def test_a_model_fitted_under_autocast_predicts_in_float32_as_it_reloads(encoder, tmp_path, monkeypatch):
    """accelerate wraps a module's forward in autocast in place when asked for bf16 (`accelerate launch
    --mixed_precision bf16`, or its environment); after fit the wrapper is gone: the fitted classifier's
    probabilities are those of the saved float32 weights, not bf16 roundings of them."""
    from accelerate.state import AcceleratorState

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    AcceleratorState._reset_state()           # the precision is fixed once per process state
    try:
        clf = TextClassifier(strategy="encoder-mlp", model=encoder, regime="full", epochs=1, batch_size=8,
                             progress=False, seed=0, temperature_scaling=False).fit(TEXTS, LABELS)
        assert "_original_forward" not in clf.module_.__dict__
        fitted = clf.predict_proba(TEXTS[:8])
        loaded = TextClassifier.load(clf.save(tmp_path / "m"), progress=False).predict_proba(TEXTS[:8])
    finally:
        AcceleratorState._reset_state()
    assert abs(fitted - loaded).max() < 1e-6


def test_fits_on_the_same_body_and_texts_share_one_pass_of_the_lower_blocks(encoder, monkeypatch):
    """Inside feature_cache() (auto's arms), each slice of a cached-partial arm and each of its learning-rate
    variants is a fit of its own: the lower blocks run once for all of them, and the fits train as without it."""
    from headswap.nn.inference import feature_cache
    from headswap.train.lower_cache import LowerCache

    passes = []
    lower = LowerCache.lower

    def counted(self, items, *args, **kwargs):
        passes.append(len(items))
        return lower(self, items, *args, **kwargs)
    monkeypatch.setattr(LowerCache, "lower", counted)
    kw = dict(strategy="encoder-mlp", model=encoder, regime="partial", last_n=1, cache_lower=True, epochs=2,
              batch_size=8, progress=False, seed=3)
    alone = TextClassifier(body_lr=1e-3, **kw).fit(TEXTS[:40], LABELS[:40], eval_texts=TEXTS[40:],
                                                   eval_labels=LABELS[40:]).predict_proba(TEXTS[:6])
    assert len(passes) == 2                   # training and validation items
    with feature_cache():
        shared = [TextClassifier(body_lr=lr, **kw).fit(TEXTS[:40], LABELS[:40], eval_texts=TEXTS[40:],
                                                       eval_labels=LABELS[40:]).predict_proba(TEXTS[:6])
                  for lr in (1e-3, 1e-2)]
    assert len(passes) == 4                   # once for both fits
    assert abs(shared[0] - alone).max() < 1e-6
    assert abs(shared[1] - alone).max() > 1e-4     # the second fit trained on its own (another learning rate)
