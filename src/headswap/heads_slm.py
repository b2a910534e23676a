"""Heads made from pretrained pieces: the LM head sliced to the class tokens, and cosine similarity
to class-description embeddings."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class SlicedLMHead(nn.Module):
    """The K rows of an LM head that score each class's answer token: K x hidden instead of vocab x hidden.

    Its logits equal the full LM head's logits at `token_ids`. With tied embeddings the full matrix
    stays in memory as the input embedding anyway, so slicing saves compute, not memory.
    """

    def __init__(self, lm_head_weight: torch.Tensor, token_ids: list[int], lm_head_bias: torch.Tensor | None = None):
        super().__init__()
        index = torch.tensor(token_ids, dtype=torch.long)
        self.register_buffer("token_ids", index)
        self.weight = nn.Parameter(lm_head_weight.detach()[index].clone())
        self.bias = nn.Parameter(lm_head_bias.detach()[index].clone()) if lm_head_bias is not None else None

    @classmethod
    def from_model(cls, causal_lm: nn.Module, token_ids: list[int]) -> "SlicedLMHead":
        """The slice of `causal_lm`'s output projection (its LM head) at `token_ids`."""
        out = causal_lm.get_output_embeddings()
        return cls(out.weight, token_ids, getattr(out, "bias", None))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.weight, self.bias)


class CosineHead(nn.Module):
    """logits = scale * cos(text, class); class prototypes start as the class descriptions' embeddings."""

    def __init__(self, prototypes: torch.Tensor, scale: float = 20.0):
        super().__init__()
        self.prototypes = nn.Parameter(F.normalize(prototypes.detach().float(), dim=-1).clone())
        self.logit_scale = nn.Parameter(torch.tensor(math.log(scale)))

    def score(self, text_emb: torch.Tensor, class_emb: torch.Tensor) -> torch.Tensor:
        return self.logit_scale.exp() * F.normalize(text_emb, dim=-1) @ F.normalize(class_emb, dim=-1).T

    def forward(self, text_emb: torch.Tensor) -> torch.Tensor:
        return self.score(text_emb, self.prototypes)
