"""Classifier heads. z = W h + b or a small MLP on a pooled vector; heads made from pretrained pieces
(the LM head sliced to the class tokens, cosine similarity to class-description embeddings); and the
cross-encoder's one score per (text, class) pair. Softmax/argmax happen outside, on the logits."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from headswap.errors import ConfigError
from headswap.settings import HEADS


def make_head(name: str, hidden: int, num_classes: int, mlp_hidden: int | None = None,
              dropout: float = 0.1) -> nn.Module:
    if name == "linear":
        return nn.Linear(hidden, num_classes)
    if name == "mlp":
        width = mlp_hidden or hidden
        # The article's head: Linear(h, h) -> ReLU -> Linear(h, K).
        return nn.Sequential(nn.Linear(hidden, width), nn.ReLU(), nn.Dropout(dropout),
                             nn.Linear(width, num_classes))
    raise ConfigError(f"unknown head {name!r}; choose one of {', '.join(HEADS)}")


class SlicedLMHead(nn.Module):
    """The K rows of an LM head that score each class's answer token: K x hidden instead of vocab x hidden.

    Its logits equal the full LM head's logits at `token_ids`. With tied embeddings the full matrix
    stays in memory as the input embedding anyway, so slicing saves compute, not memory.
    """

    def __init__(self, lm_head_weight: torch.Tensor, token_ids: list[int], lm_head_bias: torch.Tensor | None = None,
                 yes_scores: bool = False):
        super().__init__()
        index = torch.tensor(token_ids, dtype=torch.long)
        self.register_buffer("token_ids", index)
        self.weight = nn.Parameter(lm_head_weight.detach()[index].clone())
        self.bias = nn.Parameter(lm_head_bias.detach()[index].clone()) if lm_head_bias is not None else None
        # Multi-label: each class's logit minus the mean of the K, plus a learned per-class offset, goes through
        # its own sigmoid. Raw LM logits (~20) would saturate every sigmoid; centring keeps how much more the LM
        # favours this class's answer than the average one, which softmax also only sees.
        self.offset = nn.Parameter(torch.zeros(len(token_ids))) if yes_scores else None

    @classmethod
    def from_model(cls, causal_lm: nn.Module, token_ids: list[int], yes_scores: bool = False) -> "SlicedLMHead":
        """The slice of `causal_lm`'s output projection (its LM head) at `token_ids`."""
        out = causal_lm.get_output_embeddings()
        return cls(out.weight, token_ids, getattr(out, "bias", None), yes_scores)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        z = F.linear(hidden, self.weight, self.bias)
        if self.offset is None:
            return z
        return z - z.mean(-1, keepdim=True) + self.offset


class CosineHead(nn.Module):
    """logits = scale * cos(text, class); class prototypes start as the class descriptions' embeddings."""

    def __init__(self, prototypes: torch.Tensor, scale: float = 20.0, offset: bool = False):
        super().__init__()
        self.prototypes = nn.Parameter(F.normalize(prototypes.detach().float(), dim=-1).clone())
        self.logit_scale = nn.Parameter(torch.tensor(math.log(scale)))
        # Multi-label: a learned per-class offset, since a sigmoid needs a zero point that cosines lack.
        self.offset = nn.Parameter(torch.zeros(len(prototypes))) if offset else None

    def score(self, text_emb: torch.Tensor, class_emb: torch.Tensor) -> torch.Tensor:
        s = self.logit_scale.exp() * F.normalize(text_emb, dim=-1) @ F.normalize(class_emb, dim=-1).T
        return s if self.offset is None else s + self.offset

    def forward(self, text_emb: torch.Tensor) -> torch.Tensor:
        return self.score(text_emb, self.prototypes)


class PairScoreHead(nn.Module):
    """One relevance score per (text, class) pair: (B, K, D) -> (B, K)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.score = nn.Linear(hidden, 1)

    def forward(self, pair_features: torch.Tensor) -> torch.Tensor:
        return self.score(pair_features).squeeze(-1)
