"""Classifier heads: z = W h + b, or a small MLP. Softmax/argmax happen outside, on the logits."""

from __future__ import annotations

from torch import nn

HEADS = ("linear", "mlp")


def make_head(name: str, hidden: int, num_classes: int, mlp_hidden: int | None = None,
              dropout: float = 0.1) -> nn.Module:
    if name == "linear":
        return nn.Linear(hidden, num_classes)
    if name == "mlp":
        width = mlp_hidden or hidden
        # The article's head: Linear(h, h) -> ReLU -> Linear(h, K).
        return nn.Sequential(nn.Linear(hidden, width), nn.ReLU(), nn.Dropout(dropout),
                             nn.Linear(width, num_classes))
    raise ValueError(f"unknown head {name!r}; choose one of {', '.join(HEADS)}")
