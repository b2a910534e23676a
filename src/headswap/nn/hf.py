"""Adapters between Hugging Face models and headswap's body -> pool -> head chain."""

from __future__ import annotations

import torch
from torch import nn

from headswap.errors import ConfigError


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


# Attribute names that hold the stack of blocks / the norm after it, across the tiny model and the
# common Hugging Face families (BERT: encoder.layer; Llama/SmolLM: layers, norm; GPT-2: h, ln_f).
_BLOCK_NAMES = ("blocks", "layer", "layers", "h")
_FINAL_NORM_NAMES = ("ln_f", "norm", "final_layernorm", "final_layer_norm")


def body_blocks(body: nn.Module) -> nn.ModuleList:
    """The body's list of transformer blocks: the longest ModuleList found under a known name."""
    found = [m for name, m in body.named_modules()
             if isinstance(m, nn.ModuleList) and name.split(".")[-1] in _BLOCK_NAMES]
    if not found:
        raise ConfigError(f"cannot find the transformer blocks of {type(body).__name__} "
                         f"(looked for a ModuleList named {', '.join(_BLOCK_NAMES)})")
    return max(found, key=len)


def final_norms(body: nn.Module) -> list[nn.Module]:
    """The norms after the last block (none in BERT, whose norms sit inside the blocks)."""
    return [m for name, m in body.named_modules() if name.split(".")[-1] in _FINAL_NORM_NAMES
            and not isinstance(m, nn.ModuleList)]
