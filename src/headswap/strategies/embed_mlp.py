"""Embed, pool, MLP: the head-swap strategies. A body's hidden states are pooled to one vector per text
and a fresh head (linear or MLP) maps it to the K classes.

    encoder-mlp           bidirectional encoder -> mean/CLS pool -> MLP
    causal-embedding-mlp  causal LM hidden states -> last-token pool -> MLP (optional instruction prefix)
    slm-hidden-mlp        task prompt -> SLM -> last-token hidden state -> MLP
"""

from __future__ import annotations

from headswap.strategies.base import Build, Strategy


class EmbedMLP(Strategy):
    name = "encoder-mlp"
    description = "bidirectional encoder, mean or CLS pooling, MLP head"
    encoder_only = True
    multi_label = True
    exportable = True
    frozen_features = True

    def build(self, b: Build):
        from headswap.nn.classifier import Classifier
        from headswap.nn.heads import make_head
        from headswap.nn.pooling import make_pool
        k = len(b.labels)
        return Classifier(b.body(), b.hidden, k, pooling=make_pool(b.pooling(), b.hidden),
                          head=make_head(b.params["head"], b.hidden, k))


class CausalEmbeddingMLP(EmbedMLP):
    name = "causal-embedding-mlp"
    description = "causal LM hidden states, last-token pooling, MLP head; optional instruction prefix"
    encoder_only = False
    needs_causal = True
    default_regime = "lora"
    exportable = False


class SLMHiddenMLP(EmbedMLP):
    name = "slm-hidden-mlp"
    description = "prompted SLM (task + class list), last-token hidden state, MLP head"
    encoder_only = False
    needs_causal = True
    prompted = True
    default_regime = "lora"
    exportable = False
    chunkable = False     # the text sits inside the task prompt

    def text_encoder(self, b: Build):
        return b.prompt_encoder()
