"""text -> (prompt ->) tokens: each strategy's way of turning texts into padded batches.

Items are tokenized once (lists of ids) and padded per batch, so no batch is padded to a global
maximum. Over-long texts are truncated (the text only, never the prompt) and counted; in plain mode with
chunk_stride they are split into overlapping windows instead, each item carrying its text's index ("text"),
which headswap.nn.inference.per_text uses to put one row per text back together.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from headswap.errors import ConfigError
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
    chunk_stride: int | None = None      # plain mode: over-long texts become windows this many text tokens apart
    special_tokens: bool = True          # plain mode: the tokenizer's special tokens ([CLS] ... [SEP]) added
    drop_unk: bool = False               # plain mode: the unknown token left out (model2vec's static tier)
    truncated: int = field(default=0, init=False)
    split: int = field(default=0, init=False)        # texts the last encode() cut into more than one window
    quiet: bool = field(default=False, init=False)   # report_truncation returns the note without logging it

    def __post_init__(self):
        self.pad_id = pad_id_of(self.tokenizer)
        # Texts are tokenized whole and then truncated or chunked here, deliberately: transformers' "Token indices
        # sequence length is longer than the specified maximum" warning (given once per tokenizer) would only alarm.
        given = getattr(self.tokenizer, "deprecation_warnings", None)
        if isinstance(given, dict):
            given["sequence-length-is-longer-than-the-specified-maximum"] = True
        if self.mode == "prompt":
            self.prefix_ids = encode_plain(self.tokenizer, self.prompt.prefix)
            self.suffix_ids = encode_plain(self.tokenizer, self.prompt.suffix)
        if self.chunk_stride is not None:
            self._window_frame()

    def _window_frame(self) -> None:
        """What every window repeats around its slice of the text: the tokenizer's leading special tokens and
        the prefix before it, the closing special tokens (and EOS) after it; and how many text tokens fit."""
        if self.mode != "plain":
            raise ConfigError(f"chunk_stride splits texts encoded on their own; a {self.mode} encoder truncates")
        probe = self.tokenizer("a", add_special_tokens=self.special_tokens, return_special_tokens_mask=True)
        ids, special = probe["input_ids"], probe["special_tokens_mask"]
        lead = next((i for i, m in enumerate(special) if not m), len(ids))
        trail = next((i for i, m in enumerate(reversed(special)) if not m), 0)
        self.window_head = ids[:lead] + (encode_plain(self.tokenizer, self.prefix) if self.prefix else [])
        self.window_tail = ids[len(ids) - trail:] + (
            [self.tokenizer.eos_token_id] if self.append_eos and self.tokenizer.eos_token_id is not None else [])
        self.window_text = self.max_length - len(self.window_head) - len(self.window_tail)
        if self.window_text < 1:
            raise ConfigError(f"max_length {self.max_length} leaves no room for text in a chunk window after its "
                              f"{self.max_length - self.window_text} special and instruction tokens")
        if self.chunk_stride > self.window_text:
            raise ConfigError(f"chunk_stride {self.chunk_stride} must be at most the {self.window_text} text tokens a "
                              f"window of max_length {self.max_length} holds (the rest are special tokens"
                              f"{' and the instruction' if self.prefix else ''}): larger strides skip text")

    @property
    def longest(self) -> int:
        """The most positions one encoded sequence can take: max_length, plus the whole prompt in prompt
        mode (a cached prefix still takes its positions)."""
        if self.mode == "prompt":
            return len(self.prefix_ids) + self.max_length + len(self.suffix_ids)
        return self.max_length

    def _wholes(self, texts: list[str]) -> list[list[int]]:
        """Each text (after the prefix) with the tokenizer's special tokens (when special_tokens), without the
        unknown token (when drop_unk), and EOS for causal bodies."""
        texts = [self.prefix + t for t in texts] if self.prefix else texts
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if not self.special_tokens and backend is not None:
            # The static tier's path (thousands of texts a second): the whole list in one call of the Rust
            # tokenizer, without the offsets and masks the transformers wrapper builds. With no special tokens to
            # place its ids are the wrapper's, once the wrapper's own truncation and padding are off (as its
            # calls without truncation or padding turn them off).
            if backend.truncation is not None:
                backend.no_truncation()
            if backend.padding is not None:
                backend.no_padding()
            rows = [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
        else:
            rows = [self.tokenizer(t, add_special_tokens=self.special_tokens)["input_ids"] for t in texts]
        rows = self._known(rows)
        if self.append_eos and self.tokenizer.eos_token_id is not None:
            rows = [ids + [self.tokenizer.eos_token_id] for ids in rows]
        return rows

    def _known(self, rows: list[list[int]]) -> list[list[int]]:
        """Token id rows without the unknown token when drop_unk (model2vec leaves it out), else as they are."""
        unk = self.tokenizer.unk_token_id if self.drop_unk else None
        return rows if unk is None else [[i for i in ids if i != unk] for ids in rows]

    def _truncate(self, ids: list[int]) -> list[int]:
        if len(ids) <= self.max_length:
            return ids
        self.truncated += 1
        if self.special_tokens or self.append_eos:
            return ids[: self.max_length - 1] + ids[-1:]  # keep the closing special token (SEP / EOS)
        return ids[: self.max_length]

    def _windows(self, text: str, ids: list[int]) -> list[list[int]]:
        """The text as one sequence when it fits max_length (exactly as without chunking), else as windows of
        max_length tokens, each with the special tokens (and prefix) around its slice of the text; slices
        start chunk_stride tokens apart, so consecutive ones share window_text - chunk_stride tokens.
        `ids`: the whole text as _wholes encodes it."""
        if len(ids) <= self.max_length:
            return [ids]
        body, size = self._known([encode_plain(self.tokenizer, text)])[0], self.window_text
        self.split += 1
        return [self.window_head + body[at:at + size] + self.window_tail
                for at in range(0, max(len(body) - size, 0) + self.chunk_stride, self.chunk_stride)]

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
        """One item per text; with chunk_stride, one per window, each with its text's index and label."""
        if self.chunk_stride is not None:
            self.truncated = self.split = 0
            return [{"input_ids": ids, "text": i, **({"label": label_value(labels[i])} if labels is not None else {})}
                    for i, (text, whole) in enumerate(zip(texts, self._wholes(list(texts))))
                    for ids in self._windows(text, whole)]
        self.truncated = 0
        if self.mode == "plain":
            rows = [self._truncate(ids) for ids in self._wholes(list(texts))]
            return [{"input_ids": ids, **({"label": label_value(labels[i])} if labels is not None else {})}
                    for i, ids in enumerate(rows)]
        fn = {"prompt": self._prompted, "pair": self._pairs}[self.mode]
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
            # at least one position: a batch of texts with no tokens (static: only unknown words) is all padding
            ids, mask = pad([item["input_ids"] for item in items], self.pad_id, min_width=1)
            batch = {"input_ids": ids, "attention_mask": mask}
        if "label" in items[0]:
            batch["labels"] = label_tensor([item["label"] for item in items])
        return batch

    def report_split(self, n: int, items: int, what: str = "texts") -> str | None:
        """What the last encode() of n texts into `items` items did with long texts, when it split any."""
        if not self.split:
            return None
        msg = (f"{self.split} of {n} {what} were longer than {self.max_length} tokens and were split into "
               f"overlapping windows (chunk_stride {self.chunk_stride}): {items} windows for {n} texts")
        log.info(msg)
        return msg

    def report_truncation(self, n: int, what: str = "texts") -> str | None:
        if not self.truncated:
            return None
        msg = (f"{self.truncated} of {n} {what} were longer than {self.max_length} tokens and were truncated "
               "(raise max_length to keep more)")
        if not self.quiet:
            # once per process: auto trains an arm in slices, each a fit on the same texts
            from headswap.data.once import warn_once
            warn_once(("truncated", msg), msg)
        return msg


def label_value(y):
    """A class index (single-label) or a tuple of 0/1 floats, one per label (multi-label)."""
    return int(y) if not hasattr(y, "__len__") else tuple(float(v) for v in y)


def label_tensor(values: list) -> torch.Tensor:
    """(B,) long class indices, or (B, K) float indicators for multi-label items."""
    multi = isinstance(values[0], tuple)
    return torch.tensor(values, dtype=torch.float32 if multi else torch.long)
