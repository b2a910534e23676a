"""Adapters between Hugging Face models and headswap's body -> pool -> head chain."""

from __future__ import annotations

import torch
from torch import nn


class HFBody(nn.Module):
    """Wraps a Hugging Face base model (BertModel, LlamaModel, ...) to return last hidden states."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    @property
    def hidden_size(self) -> int:
        return self.model.config.hidden_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **extra, **kwargs) \
            if _is_causal(self.model) else self.model(input_ids=input_ids, attention_mask=attention_mask, **extra)
        return out.last_hidden_state


def _is_causal(model: nn.Module) -> bool:
    cfg = getattr(model, "config", None)
    return bool(cfg is not None and (getattr(cfg, "is_decoder", False) or
                                     any(a.endswith("ForCausalLM") for a in (cfg.architectures or []))
                                     or cfg.model_type in _CAUSAL_TYPES))


_CAUSAL_TYPES = {"llama", "mistral", "qwen2", "qwen3", "gpt2", "gpt_neox", "phi", "phi3", "gemma", "gemma2",
                 "gemma3_text", "smollm3", "olmo", "granite", "stablelm", "falcon", "opt"}


def base_of(causal_lm: nn.Module) -> nn.Module:
    """The transformer under an *ForCausalLM wrapper (LlamaForCausalLM.model, GPT2LMHeadModel.transformer)."""
    return causal_lm.base_model


def strip_bert_pooler(model: nn.Module) -> nn.Module:
    """BERT's pooler (a dense layer on [CLS]) is unused here; dropping it keeps every parameter in use,
    which multi-process training (DDP) requires."""
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    return model
