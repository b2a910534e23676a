"""Pool (B, T, D) hidden states into one (B, D) vector per text; every pooling ignores padding.

Positions are found from the attention mask, never assumed, so left and right padding give the same
result. The sequence is never flattened: that would tie the head to one length and one word order.
"""

from __future__ import annotations

import torch
from torch import nn

from headswap.errors import ConfigError
from headswap.settings import POOLINGS



def first_token_index(mask: torch.Tensor) -> torch.Tensor:
    return mask.long().argmax(dim=1)


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    t = mask.shape[1]
    return t - 1 - mask.long().flip(1).argmax(dim=1)


def _gather(hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]


class MeanPool(nn.Module):
    def forward(self, hidden, mask):
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


class MaxPool(nn.Module):
    def forward(self, hidden, mask):
        m = mask.bool()
        top = hidden.masked_fill(~m.unsqueeze(-1), float("-inf")).max(dim=1).values
        return top.masked_fill(~m.any(dim=1, keepdim=True), 0.0)    # a text with no tokens: zeros, not -inf


class ClsPool(nn.Module):
    """The first real token (a prepended CLS); needs a body that attends both ways."""

    def forward(self, hidden, mask):
        return _gather(hidden, first_token_index(mask))


class LastTokenPool(nn.Module):
    """The last real token: what a causal model has read the whole text by."""

    def forward(self, hidden, mask):
        return _gather(hidden, last_token_index(mask))


class AttentionPool(nn.Module):
    """One learned query attends over the tokens; the weights of pad tokens are exactly zero."""

    def __init__(self, hidden: int):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(hidden))
        self.scale = hidden ** -0.5

    def forward(self, hidden, mask):
        scores = (hidden @ self.query.to(hidden.dtype)) * self.scale
        m = mask.bool()
        # masked again after the softmax: a text with no tokens (static: only unknown words) pools to zeros
        # rather than the NaN of a softmax over nothing; every other row is unchanged (its pad weights are 0).
        weights = scores.masked_fill(~m, float("-inf")).softmax(dim=1).masked_fill(~m, 0.0)
        return (weights.unsqueeze(-1) * hidden).sum(1)


def make_pool(name: str, hidden: int) -> nn.Module:
    pools = {"mean": MeanPool, "cls": ClsPool, "max": MaxPool, "last": LastTokenPool}
    if name == "attention":
        return AttentionPool(hidden)
    if name not in pools:
        raise ConfigError(f"unknown pooling {name!r}; choose one of {', '.join(POOLINGS)}")
    return pools[name]()
