"""Classifier = body -> pool -> head. The body is any module mapping (input_ids, attention_mask) to
(B, T, D) hidden states: the tiny transformer, or a Hugging Face model through HFBody."""

from __future__ import annotations

import torch
from torch import nn

from .heads import make_head
from .pooling import make_pool


class Classifier(nn.Module):
    # Parameters under these prefixes form the "head" group: trained at the head learning rate and kept
    # trainable in every regime. A learned attention pool belongs to the head.
    head_prefixes = ("head.", "pool.")

    def __init__(self, body: nn.Module, hidden: int, num_classes: int, pooling: str | nn.Module = "mean",
                 head: str | nn.Module = "linear", **head_kwargs):
        super().__init__()
        self.body = body
        self.pool = make_pool(pooling, hidden) if isinstance(pooling, str) else pooling
        self.head = make_head(head, hidden, num_classes, **head_kwargs) if isinstance(head, str) else head

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **body_kwargs) -> torch.Tensor:
        """The pooled (B, D) representation the head sees."""
        return self.pool(self.body(input_ids, attention_mask, **body_kwargs), attention_mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **body_kwargs) -> torch.Tensor:
        return self.head(self.features(input_ids, attention_mask, **body_kwargs))
