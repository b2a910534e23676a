"""Integrated Gradients on a torch TextClassifier's embedding layer (captum's LayerIntegratedGradients).

The path runs from a baseline, the same token sequence with the text's tokens replaced by the padding token
(special tokens and any instruction or prompt kept), to the text: each token's attribution is its embedding's
share of the class logit's change along the path, and a word's score is the sum over its tokens. A chunked text
is explained window by window: with mean aggregation each window's attributions count 1/W (the mean of the
windows' logits is the explained logit), with max aggregation the window whose logit is the maximum counts
alone; window positions map back to the words of the whole text.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from headswap.errors import HeadswapError
from headswap.explain.words import char_words, word_of, word_spans


def supports(model) -> bool:
    """Whether `model` can be explained by gradients: a torch module (not an ONNX graph, not int8 weights) whose
    items are token ids of one text (plain or prompt encoding) with an embedding layer to attribute to."""
    module, encoder = getattr(model, "module_", None), getattr(model, "encoder_", None)
    return (isinstance(module, nn.Module) and getattr(model, "runtime_", "torch") == "torch" and encoder is not None
            and encoder.mode in ("plain", "prompt") and getattr(encoder, "include_prefix", True)
            and embedding_layer(module) is not None)


def embedding_layer(module: nn.Module) -> nn.Embedding | None:
    """The token embedding table of the classifier's body: a Hugging Face model's input embeddings, else the
    first nn.Embedding (the static strategy's table)."""
    from transformers import PreTrainedModel
    for m in module.modules():
        if isinstance(m, PreTrainedModel):
            emb = m.get_input_embeddings()
            if isinstance(emb, nn.Embedding):
                return emb
    return next((m for m in module.modules() if isinstance(m, nn.Embedding)), None)


def integrated_gradients(model, texts: list[str], targets: list[list[int]], steps: int = 32, batch_size: int = 64,
                         progress: bool = False):
    """[(spans, [word scores for each target column])] per text."""
    from tqdm.auto import tqdm
    try:
        from captum.attr import LayerIntegratedGradients
    except ImportError:
        raise HeadswapError("explaining a torch model needs captum: pip install 'headswap[explain]' (or captum)"
                            ) from None
    if steps < 2:
        raise HeadswapError(f"Integrated Gradients needs at least 2 steps, got {steps}")
    module, encoder = model.module_, model.encoder_
    net = _texts_only(module)
    was_training = module.training
    module.eval()
    device = next(module.parameters()).device
    lig = LayerIntegratedGradients(lambda ids, mask: net(input_ids=ids, attention_mask=mask),
                                   embedding_layer(module))
    how = getattr(model, "chunk_aggregate_", None) or "mean"
    out = []
    try:
        with torch.inference_mode(False), torch.enable_grad():
            for text, target in tqdm(list(zip(texts, targets)), desc="explain", unit=" texts",
                                     disable=not progress):
                spans = word_spans(text)
                items = encoder.encode([text])
                windows = [_positions(encoder, text, spans, item["input_ids"], k if len(items) > 1 else None)
                           for k, item in enumerate(items)]
                ids, mask = _pad([it["input_ids"] for it in items], encoder.pad_id)
                word_at, _ = _pad([w for w in windows], -1)
                word_at = word_at * mask - (1 - mask)      # padding positions belong to no word
                base = torch.where(word_at >= 0, torch.full_like(ids, encoder.pad_id), ids)
                ids, mask, base = ids.to(device), mask.to(device), base.to(device)
                window_logits = None
                if len(items) > 1:      # which windows count, and how much (_window_weights)
                    with torch.no_grad():
                        window_logits = net(input_ids=ids, attention_mask=mask).float().cpu()
                scores = []
                for k in target:
                    attr = lig.attribute(ids, baselines=base, additional_forward_args=(mask,), target=k,
                                         n_steps=steps, internal_batch_size=max(batch_size, 1))
                    per_token = attr.sum(-1).detach().float().cpu()
                    if window_logits is not None:
                        per_token = per_token * _window_weights(window_logits[:, k], how)[:, None]
                    s = np.zeros(len(spans))
                    keep = word_at >= 0
                    np.add.at(s, word_at[keep].numpy(), per_token[keep].numpy())
                    scores.append(s)
                out.append((spans, scores))
    finally:
        module.train(was_training)
    return out


def _window_weights(logits: torch.Tensor, how: str) -> torch.Tensor:
    """How much each window's attributions count towards the text's logit (headswap.nn.inference.per_text)."""
    if how == "max":
        return (torch.arange(len(logits)) == int(torch.argmax(logits))).float()
    return torch.full((len(logits),), 1.0 / len(logits))


def _texts_only(module: nn.Module) -> nn.Module:
    """The module as a function of the text's tokens alone: a similarity classifier that embeds its class
    descriptions while gradients are on would send them through the same embedding layer, so its class side is
    computed once, without gradients (as its export does)."""
    from headswap.nn.classifier import FixedClassEmbeddings, SimilarityClassifier
    if isinstance(module, SimilarityClassifier) and not module.use_prototypes:
        with torch.no_grad():
            batch = {k: getattr(module, f"desc_{k}") for k in module._desc_keys}
            return FixedClassEmbeddings(module, module.features(**batch).detach())
    return module


def _positions(encoder, text: str, spans, ids: list[int], window: int | None) -> list[int]:
    """For each position of an encoded item, the index of the word of `text` its token came from (-1: a special,
    instruction or prompt token). window: the item's index among a chunked text's windows (its slice of the
    text's tokens starts window * chunk_stride tokens in); None for a text encoded whole."""
    tok = encoder.tokenizer
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    owner = char_words(text, spans)
    pieces = [(i, word_of(owner, s, e)) for i, (s, e) in zip(enc["input_ids"], enc["offset_mapping"])]
    if encoder.drop_unk and tok.unk_token_id is not None:
        pieces = [p for p in pieces if p[0] != tok.unk_token_id]
    start = 0 if window is None else window * encoder.chunk_stride
    body = pieces[start:]
    best, best_at = 0, 0
    for at in range(len(ids)):      # where the text's tokens sit in the item: the longest run that matches
        run = 0
        while at + run < len(ids) and run < len(body) and ids[at + run] == body[run][0]:
            run += 1
        if run > best:
            best, best_at = run, at
        if best == min(len(body), len(ids) - at):
            break
    words = [-1] * len(ids)
    for t in range(best):
        words[best_at + t] = body[t][1]
    return words


def _pad(rows: list[list[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    from headswap.text.encoding import pad
    return pad(rows, value)
