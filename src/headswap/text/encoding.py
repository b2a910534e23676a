"""text -> (prompt ->) tokens: each strategy's way of turning texts into padded batches.

Items are tokenized once (lists of ids) and padded per batch, so no batch is padded to a global
maximum. Over-long texts are truncated (the text only, never the prompt) and counted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from headswap.text.prompts import Prompt, encode_plain

log = logging.getLogger(__name__)


def pad(rows: list[list[int]], value: int, side: str = "right", min_width: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id rows -> (ids, attention mask), padded with `value` to the longest row on the right (or the
    left, for generation: new tokens must follow the last real one)."""
    width = max([min_width, *map(len, rows)])
    ids = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        at = slice(0, len(r)) if side == "right" else slice(width - len(r), width)
        ids[i, at] = torch.tensor(r, dtype=torch.long)
        mask[i, at] = 1
    return ids, mask


def pad_id_of(tokenizer) -> int:
    if tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    if tokenizer.eos_token_id is not None:
        return tokenizer.eos_token_id
    return 0


@dataclass
class TextEncoder:
    """mode: 'plain' (the text alone, with the tokenizer's special tokens), 'prompt' (prefix + text +
    suffix), or 'pair' (one (text, description) pair per class, for the cross-encoder)."""

    tokenizer: object
    mode: str = "plain"
    max_length: int = 128               # plain/pair: whole sequence; prompt: the text's own tokens
    prompt: Prompt | None = None
    pair_texts: list[str] | None = None  # class descriptions, for mode 'pair'
    prefix: str = ""                     # plain mode: an optional instruction before the text
    append_eos: bool = False             # plain mode for causal bodies: the last token is EOS
    include_prefix: bool = True          # prompt mode: False when the body runs the prefix itself (KV cache)
    pair_token_types: bool | None = None # pair mode: ask for token_type_ids (None: tokenizer default)
    truncated: int = field(default=0, init=False)
    quiet: bool = field(default=False, init=False)   # report_truncation returns the note without logging it

    def __post_init__(self):
        self.pad_id = pad_id_of(self.tokenizer)
        if self.mode == "prompt":
            self.prefix_ids = encode_plain(self.tokenizer, self.prompt.prefix)
            self.suffix_ids = encode_plain(self.tokenizer, self.prompt.suffix)

    @property
    def longest(self) -> int:
        """The most positions one encoded sequence can take: max_length, plus the whole prompt in prompt
        mode (a cached prefix still takes its positions)."""
        if self.mode == "prompt":
            return len(self.prefix_ids) + self.max_length + len(self.suffix_ids)
        return self.max_length

    def _plain(self, text: str) -> list[int]:
        ids = self.tokenizer(self.prefix + text)["input_ids"]
        if self.append_eos and self.tokenizer.eos_token_id is not None:
            ids = ids + [self.tokenizer.eos_token_id]
        if len(ids) > self.max_length:
            self.truncated += 1
            ids = ids[: self.max_length - 1] + ids[-1:]  # keep the closing special token (SEP / EOS)
        return ids

    def _prompted(self, text: str) -> list[int]:
        ids = encode_plain(self.tokenizer, text)
        if len(ids) > self.max_length:
            self.truncated += 1
            ids = ids[: self.max_length]
        return (self.prefix_ids if self.include_prefix else []) + ids + self.suffix_ids

    def _pairs(self, text: str) -> list[dict]:
        out, cut = [], False
        kw = {} if self.pair_token_types is None else {"return_token_type_ids": self.pair_token_types}
        for desc in self.pair_texts:
            enc = self.tokenizer(text, desc, **kw)
            if len(enc["input_ids"]) > self.max_length:  # only over-long pairs are tokenized a second time
                cut = True
                enc = self.tokenizer(text, desc, truncation="only_first", max_length=self.max_length, **kw)
            out.append({"input_ids": enc["input_ids"], "token_type_ids": enc.get("token_type_ids")})
        self.truncated += cut
        return out

    def encode(self, texts: list[str], labels: list[int] | None = None) -> list[dict]:
        fn = {"plain": self._plain, "prompt": self._prompted, "pair": self._pairs}[self.mode]
        self.truncated = 0
        items = []
        for i, text in enumerate(texts):
            enc = fn(text)
            item = {"pairs": enc} if self.mode == "pair" else {"input_ids": enc}
            if labels is not None:
                item["label"] = label_value(labels[i])
            items.append(item)
        return items

    def collate(self, items: list[dict]) -> dict:
        if self.mode == "pair":
            flat = [p for item in items for p in item["pairs"]]
            ids, mask = pad([p["input_ids"] for p in flat], self.pad_id)
            batch = {"input_ids": ids, "attention_mask": mask}
            if flat[0]["token_type_ids"] is not None:
                batch["token_type_ids"], _ = pad([p["token_type_ids"] for p in flat], 0)
        else:
            ids, mask = pad([item["input_ids"] for item in items], self.pad_id)
            batch = {"input_ids": ids, "attention_mask": mask}
        if "label" in items[0]:
            batch["labels"] = label_tensor([item["label"] for item in items])
        return batch

    def report_truncation(self, n: int, what: str = "texts") -> str | None:
        if not self.truncated:
            return None
        msg = (f"{self.truncated} of {n} {what} were longer than {self.max_length} tokens and were truncated "
               "(raise max_length to keep more)")
        if not self.quiet:
            log.warning(msg)
        return msg


def label_value(y):
    """A class index (single-label) or a tuple of 0/1 floats, one per label (multi-label)."""
    return int(y) if not hasattr(y, "__len__") else tuple(float(v) for v in y)


def label_tensor(values: list) -> torch.Tensor:
    """(B,) long class indices, or (B, K) float indicators for multi-label items."""
    multi = isinstance(values[0], tuple)
    return torch.tensor(values, dtype=torch.float32 if multi else torch.long)
