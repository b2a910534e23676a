"""A byte-level tokenizer: every UTF-8 byte is a token, plus four special ids. No vocabulary to train."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from headswap.text.encoding import pad


@dataclass
class Encoded:
    input_ids: torch.Tensor       # (B, T) long
    attention_mask: torch.Tensor  # (B, T) long, 1 for real tokens
    truncated: int                # how many texts were cut to max_length


class ByteTokenizer:
    """Bytes 0..255 map to ids 0..255; 256 = pad, 257 = cls/bos, 258 = eos, 259 = unk (vocab 260)."""

    pad_id = 256
    cls_id = 257
    bos_id = 257
    eos_id = 258
    unk_id = 259
    vocab_size = 260

    def __init__(self, max_length: int = 32, add_cls: bool = False, padding_side: str = "right"):
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        self.max_length = max_length
        self.add_cls = add_cls
        self.padding_side = padding_side

    def encode(self, text: str, add_cls: bool | None = None, add_eos: bool = False,
               max_length: int | None = None) -> list[int]:
        add_cls = self.add_cls if add_cls is None else add_cls
        ids = list(text.encode("utf-8"))
        ids = ([self.cls_id] if add_cls else []) + ids + ([self.eos_id] if add_eos else [])
        limit = self.max_length if max_length is None else max_length
        return ids[:limit] if limit else ids

    def decode(self, ids) -> str:
        """Inverse of encode: special ids are dropped; a byte sequence cut mid-character decodes with U+FFFD."""
        data = bytes(int(i) for i in ids if int(i) < 256)
        return data.decode("utf-8", errors="replace")

    def __call__(self, texts: list[str], add_eos: bool = False) -> Encoded:
        rows, truncated = [], 0
        for text in texts:
            full = self.encode(text, add_eos=add_eos, max_length=0)
            truncated += len(full) > self.max_length
            rows.append(full[: self.max_length])
        ids, mask = pad(rows, self.pad_id, self.padding_side, min_width=1)
        return Encoded(ids, mask, truncated)
