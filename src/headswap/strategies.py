"""The classification strategies, each a module whose forward(**batch) returns (B, K) class logits.

    encoder-mlp           encoder -> mean/CLS pool -> MLP
    causal-embedding-mlp  causal LM hidden states -> last-token pool -> MLP (optional instruction prefix)
    slm-hidden-mlp        prompt -> SLM -> last-token hidden state -> MLP
    slm-logits            prompt -> SLM -> last-token hidden state -> LM head sliced to the classes' first tokens
    slm-letters           as slm-logits, answering with proxy letters A, B, C, ...
    similarity            cosine(text embedding, class-description embedding) * scale
    cross-encoder         one (text, description) pass per class -> score
    generate-parse        greedy generation from the prompt, parsed to a class
"""

from __future__ import annotations

import difflib
import re
from collections import Counter

import torch
from torch import nn

STRATEGIES = {
    "encoder-mlp": "bidirectional encoder, mean or CLS pooling, MLP head",
    "causal-embedding-mlp": "causal LM hidden states, last-token pooling, MLP head; optional instruction prefix",
    "slm-hidden-mlp": "prompted SLM (task + class list), last-token hidden state, MLP head",
    "slm-logits": "prompted SLM; LM head sliced to each class's first token, softmax over the K logits",
    "slm-letters": "as slm-logits, with proxy answers A, B, C, ... listed against the classes",
    "similarity": "bi-encoder cosine similarity between the text and each class description",
    "cross-encoder": "(text, class description) pairs scored by an encoder, one pass per class",
    "generate-parse": "greedy generation from the prompted SLM, parsed to a class (exact, then fuzzy)",
}
ZERO_SHOT = ("slm-logits", "slm-letters", "similarity", "generate-parse")
PROMPTED = ("slm-hidden-mlp", "slm-logits", "slm-letters", "generate-parse")
NEEDS_CAUSAL = ("causal-embedding-mlp",) + PROMPTED
# The regime each strategy uses when none is given: encoders fine-tune fully (22M parameters train
# at ~30 texts/s on 2 cores); causal LMs get LoRA, as in the SLM-logits article.
DEFAULT_REGIME = {"encoder-mlp": "full", "similarity": "full", "cross-encoder": "full",
                  "causal-embedding-mlp": "lora", "slm-hidden-mlp": "lora", "slm-logits": "lora",
                  "slm-letters": "lora", "generate-parse": "lora"}


class SimilarityClassifier(nn.Module):
    """Bi-encoder: texts and class descriptions embedded by the same body; logits = scale * cosine.

    With use_prototypes (zero-shot, head-only) the class side is the head's stored prototypes. Otherwise
    the descriptions are re-embedded while the body trains, and embedded once for inference.
    """

    head_prefixes = ("head.", "pool.")

    def __init__(self, body: nn.Module, pool: nn.Module, head: nn.Module, desc_batch: dict, use_prototypes: bool):
        super().__init__()
        self.body, self.pool, self.head = body, pool, head
        self.use_prototypes = use_prototypes
        for k, v in desc_batch.items():
            self.register_buffer(f"desc_{k}", v, persistent=False)
        self._desc_keys = list(desc_batch)
        self._class_cache = None

    def features(self, input_ids, attention_mask, **kw):
        return self.pool(self.body(input_ids, attention_mask, **kw), attention_mask)

    def class_embeddings(self) -> torch.Tensor:
        if self.use_prototypes:
            return self.head.prototypes
        if self.training or torch.is_grad_enabled():
            self._class_cache = None
            batch = {k: getattr(self, f"desc_{k}") for k in self._desc_keys}
            return self.features(**batch)
        if self._class_cache is None:  # inference: embed the K descriptions once, not per batch
            batch = {k: getattr(self, f"desc_{k}") for k in self._desc_keys}
            self._class_cache = self.features(**batch)
        return self._class_cache

    def train(self, mode: bool = True):
        self._class_cache = None
        return super().train(mode)

    def forward(self, input_ids, attention_mask, **kw):
        return self.head.score(self.features(input_ids, attention_mask, **kw), self.class_embeddings())


class PairScoreHead(nn.Module):
    """One relevance score per (text, class) pair: (B, K, D) -> (B, K)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.score = nn.Linear(hidden, 1)

    def forward(self, pair_features: torch.Tensor) -> torch.Tensor:
        return self.score(pair_features).squeeze(-1)


class CrossEncoderClassifier(nn.Module):
    """K passes per text: batch rows are (text, description) pairs, grouped K at a time."""

    head_prefixes = ("head.", "pool.")

    def __init__(self, body: nn.Module, pool: nn.Module, hidden: int, num_classes: int):
        super().__init__()
        self.body, self.pool = body, pool
        self.num_classes = num_classes
        self.head = PairScoreHead(hidden)

    def features(self, input_ids, attention_mask, **kw):
        pooled = self.pool(self.body(input_ids, attention_mask, **kw), attention_mask)
        return pooled.view(-1, self.num_classes, pooled.shape[-1])     # (B, K, D)

    def forward(self, input_ids, attention_mask, **kw):
        return self.head(self.features(input_ids, attention_mask, **kw))


def parse_answer(output: str, answers: list[str]) -> tuple[int | None, str]:
    """Map generated text to a class index: exact (case-insensitive) match of the first line or word,
    then the first answer the output starts with, then a fuzzy match of the first word, then the one answer
    that appears anywhere as a whole word ('search'; an untrained SLM often writes 'The answer is: spam');
    (None, 'unparsed') when none does, or when several answers appear."""
    text = output.strip()
    lowered = [a.lower() for a in answers]
    first_line = text.splitlines()[0].strip().strip(".!\"'`*").lower() if text else ""
    first_word = first_line.split()[0].strip(".,:;!\"'`*") if first_line else ""
    for candidate in (first_line, first_word):
        if candidate in lowered:
            return lowered.index(candidate), "exact"
    prefixed = [i for i, a in enumerate(lowered) if first_line.startswith(a)]
    if prefixed:  # the longest answer the output starts with ('positive' before 'pos')
        return max(prefixed, key=lambda i: len(lowered[i])), "exact"
    close = difflib.get_close_matches(first_word, lowered, n=1, cutoff=0.6) if first_word else []
    if close:
        return lowered.index(close[0]), "fuzzy"
    whole = text.lower()
    found = {i for i, a in enumerate(lowered) if re.search(rf"(?<!\w){re.escape(a)}(?!\w)", whole)}
    if len(found) == 1:
        return found.pop(), "search"
    return None, "unparsed"


class GenerateParseClassifier(nn.Module):
    """Naive LLM classification: generate greedily, then parse. Logits are 0 for the parsed class and
    -1e4 elsewhere (uniform when unparsed): generation gives no real class probabilities.

    Training is teacher-forced LM loss on the answer tokens, so forward takes `labels` and returns the loss.
    """

    head_prefixes = ()
    computes_own_loss = True

    def __init__(self, causal_lm: nn.Module, tokenizer, answers: list[str], answer_separator: str, pad_id: int):
        super().__init__()
        self.body = causal_lm
        self.tokenizer = tokenizer
        self.answers = answers
        self.pad_id = pad_id
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        self.answer_ids = [tokenizer(answer_separator + a, add_special_tokens=False)["input_ids"] + eos
                           for a in answers]
        # Room for a short sentence around the answer (untrained models rarely answer with the bare class);
        # a trained model ends with EOS right after it, and generation stops once every row has.
        self.max_new_tokens = max(16, max(len(a) for a in self.answer_ids) + 2)
        self.parse_counts: Counter = Counter()
        self.last_outputs: list[str] = []

    def _rows(self, input_ids, attention_mask) -> list[list[int]]:
        return [ids[m.bool()].tolist() for ids, m in zip(input_ids, attention_mask)]

    def _lm_loss(self, rows, labels):
        seqs = [r + self.answer_ids[int(y)] for r, y in zip(rows, labels)]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        target = torch.full_like(ids, -100)
        for i, (r, s) in enumerate(zip(rows, seqs)):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
            target[i, len(r): len(s)] = torch.tensor(s[len(r):])
        dev = next(self.body.parameters()).device
        return self.body(input_ids=ids.to(dev), attention_mask=mask.to(dev), labels=target.to(dev)).loss

    @torch.no_grad()
    def generate_text(self, rows: list[list[int]]) -> list[str]:
        width = max(map(len, rows))  # generation needs left padding: new tokens follow the last real one
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r)
            mask[i, width - len(r):] = 1
        dev = next(self.body.parameters()).device
        out = self.body.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), do_sample=False,
                                 max_new_tokens=self.max_new_tokens, pad_token_id=self.pad_id)
        return self.tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)

    def forward(self, input_ids, attention_mask, labels=None):
        rows = self._rows(input_ids, attention_mask)
        if labels is not None:
            return self._lm_loss(rows, labels)
        outputs = self.generate_text(rows)
        self.last_outputs = outputs
        logits = torch.full((len(rows), len(self.answers)), -1e4)
        for i, text in enumerate(outputs):
            idx, how = parse_answer(text, self.answers)
            self.parse_counts[how] += 1
            if idx is None:
                logits[i] = 0.0
            else:
                logits[i, idx] = 0.0
        return logits.to(input_ids.device)


class HeadOnFeatures(nn.Module):
    """The head alone, trained on cached body features (head-only regime: the frozen body runs once)."""

    head_prefixes = ("head.",)

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features)


def collate_features(items: list[dict]) -> dict:
    batch = {"features": torch.stack([it["features"] for it in items])}
    if "label" in items[0]:
        batch["labels"] = torch.tensor([it["label"] for it in items], dtype=torch.long)
    return batch


def supports_feature_cache(model: nn.Module) -> bool:
    """Head-only training can run on cached features when the pool learns nothing and the head only
    needs the pooled features (true for every strategy but generate-parse and non-prototype similarity)."""
    if isinstance(model, GenerateParseClassifier):
        return False
    if isinstance(model, SimilarityClassifier) and not model.use_prototypes:
        return False
    pool = getattr(model, "pool", None)
    return pool is not None and not any(True for _ in pool.parameters())

