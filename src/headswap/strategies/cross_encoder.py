"""cross-encoder: each (text, class description) pair goes through the encoder together and gets one
relevance score; K forward passes per text."""

from __future__ import annotations

from headswap.strategies.base import Build, Strategy


class CrossEncoder(Strategy):
    name = "cross-encoder"
    description = "(text, class description) pairs scored by an encoder, one pass per class"
    encoder_only = True
    exportable = True
    chunkable = False     # each item is a (text, description) pair
    pooled_features = False   # no single vector per text (one per (text, class) pair)

    def text_encoder(self, b: Build):
        from headswap.text.encoding import TextEncoder
        return TextEncoder(b.tokenizer, "pair", b.params["max_length"],
                           pair_texts=[b.descriptions[lab] for lab in b.labels],
                           pair_token_types=getattr(b.hf_model.config, "type_vocab_size", 1) > 1)

    def build(self, b: Build):
        from headswap.nn.classifier import CrossEncoderClassifier
        from headswap.nn.pooling import make_pool
        return CrossEncoderClassifier(b.body(), make_pool(b.pooling(), b.hidden), b.hidden, len(b.labels))

    def extra_metrics(self, module, num_classes: int) -> dict:
        return {"forward_passes_per_text": num_classes}

    def passes_per_text(self, num_classes: int) -> str:
        return f"{num_classes} (one per class)"
