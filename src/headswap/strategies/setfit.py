"""setfit: few-shot classification in the SetFit manner (Tunstall et al., 2022).

Two phases. First the encoder is tuned contrastively on pairs drawn from the labelled texts: for each text,
`pair_iterations` times, one partner of its class (target cosine 1) and one of another class (target 0),
with SetFit's CosineSimilarityLoss (squared error of the cosine). Then a head is trained on the tuned
embeddings by the ordinary loop; in the default head-only regime the body is frozen and the head trains on
cached features. A handful of texts per class yields hundreds of pairs, which is where the method gets its
few-shot strength.
"""

from __future__ import annotations

from headswap.strategies.embed_mlp import EmbedMLP


def sample_pairs(targets: list[int], iterations: int, seed: int) -> list[tuple[int, int, float]]:
    """(i, j, target) index pairs: per iteration and text, a same-class partner (another text of the class
    when there is one) with target 1.0 and an other-class partner with target 0.0."""
    import random
    rng = random.Random(seed)
    by_class: dict[int, list[int]] = {}
    for i, y in enumerate(targets):
        by_class.setdefault(y, []).append(i)
    others = {y: [i for i, t in enumerate(targets) if t != y] for y in by_class}
    pairs = []
    for _ in range(iterations):
        for i, y in enumerate(targets):
            same = [j for j in by_class[y] if j != i] or [i]
            pairs.append((i, rng.choice(same), 1.0))
            if others[y]:
                pairs.append((i, rng.choice(others[y]), 0.0))
    return pairs


class SetFit(EmbedMLP):
    name = "setfit"
    description = "few-shot: encoder tuned contrastively on same/other-class pairs, then a head on its embeddings"
    default_regime = "head-only"
    multi_label = False
    few_shot = True       # pairs grow with the data: 40 per text per epoch by default
    frozen_features = False   # its body is tuned on pairs first

    def build(self, b):
        module = super().build(b)
        if b.regime == "head-only" and not b.zero_shot:
            module.extra_saved = ("body.",)    # tuned in prepare_body, then frozen: saved with the head
        return module

    def prepare_body(self, module, encoder, items: list[dict], targets: list[int], params: dict, cfg) -> dict:
        """Phase one: contrastive tuning of the body on pairs of `items` (encoded texts). In the head-only
        regime the whole body tunes here (and is saved with the model); otherwise what the regime trains
        in the body does. Returns what it did, for the model's history."""
        import time
        from dataclasses import replace

        from headswap.nn.classifier import PairCosine, collate_text_pairs
        from headswap.train.loop import fit

        head_only = params["regime"] == "head-only"
        trainable = {n: p.requires_grad for n, p in module.named_parameters()}
        for name, p in module.named_parameters():
            in_body = name.startswith("body.")
            p.requires_grad_(in_body and (head_only or trainable[name]))
        pairs = sample_pairs(list(targets), params["pair_iterations"], params["seed"])
        pair_items = [{"a": items[i]["input_ids"], "b": items[j]["input_ids"], "label": t} for i, j, t in pairs]
        # The run's own optimiser settings, for one pass over the pairs: no validation, checkpoints or class
        # weights (pairs have targets, not classes), in plain shuffled order.
        pair_cfg = replace(cfg, epochs=1, keep_best=False, checkpoint_dir=None, checkpoint_every=0, resume=False,
                           class_weight=None, group_by_length=False, soft_targets=False)
        t0 = time.perf_counter()
        result = fit(PairCosine(module), pair_items, lambda batch: collate_text_pairs(batch, encoder.pad_id),
                     pair_cfg, log=None)
        for name, p in module.named_parameters():
            p.requires_grad_(trainable[name])
        return {"pairs": len(pair_items), "pair_loss": result.history[-1].train_loss,
                "seconds": time.perf_counter() - t0}
