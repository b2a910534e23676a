"""similarity: a bi-encoder. Texts and class descriptions are embedded by the same body; the logits are
scale * cosine(text, class). Zero-shot and head-only compare against the descriptions' embeddings stored as
prototypes (head-only trains them); the other regimes re-embed the descriptions as the body trains."""

from __future__ import annotations

from headswap.strategies.base import Build, Strategy


class Similarity(Strategy):
    name = "similarity"
    description = "bi-encoder cosine similarity between the text and each class description"
    zero_shot = True
    multi_label = True
    exportable = True

    def text_encoder(self, b: Build):
        return b.plain_encoder(instruction=False)

    def build(self, b: Build):
        import torch

        from headswap.nn.classifier import SimilarityClassifier
        from headswap.nn.heads import CosineHead
        from headswap.nn.pooling import make_pool
        from headswap.text.encoding import TextEncoder
        body, pool = b.body(), make_pool(b.pooling(), b.hidden)
        use_protos = b.regime == "head-only" or b.zero_shot
        descriptions = TextEncoder(b.tokenizer, "plain", b.params["max_length"], append_eos=b.causal)
        desc = b.encoder.collate(descriptions.encode([b.descriptions[lab] for lab in b.labels]))
        with torch.inference_mode():
            protos = pool(body(desc["input_ids"], desc["attention_mask"]), desc["attention_mask"])
        return SimilarityClassifier(body, pool, CosineHead(protos.clone(), offset=bool(b.params.get("multi_label"))),
                                    desc, use_protos)

    def freeze(self, module, regime: str) -> None:
        if not module.use_prototypes:
            module.head.prototypes.requires_grad_(False)

    def export_module(self, module):
        import torch

        from headswap.nn.classifier import FixedClassEmbeddings
        with torch.inference_mode():
            classes = module.class_embeddings().clone()
        return FixedClassEmbeddings(module, classes)
