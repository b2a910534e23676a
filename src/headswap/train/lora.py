"""LoRA through PEFT on the body's attention and FFN linear layers; embeddings and LM head stay frozen.

PEFT's dropout modules are swapped for BitsDropout (same distribution, a quarter of the random numbers; see
headswap.nn.dropout): nn.Dropout's mask generation was the largest cost after the matmuls on CPU."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

from headswap.nn.dropout import replace_dropouts
from headswap.nn.hf import body_blocks


@dataclass
class LoraSettings:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    targets: list[str] | None = None   # full module names; default: every Linear inside the blocks

    def to_dict(self) -> dict:
        return asdict(self)


def lora_targets(hf_model: nn.Module) -> list[str]:
    """Names of every nn.Linear inside the transformer blocks (attention and FFN), relative to hf_model."""
    blocks = body_blocks(hf_model)
    prefix = next(name for name, m in hf_model.named_modules() if m is blocks)
    return [f"{prefix}.{name}" for name, m in blocks.named_modules() if isinstance(m, nn.Linear)]


def apply_lora(model: nn.Module, settings: LoraSettings) -> list[str]:
    """Inject LoRA adapters into model.body's HF model in place; only adapters and the head train."""
    from peft import LoraConfig, inject_adapter_in_model

    hf = getattr(model.body, "model", model.body)
    targets = settings.targets or lora_targets(hf)
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=targets, bias="none")
    inject_adapter_in_model(config, hf)
    replace_dropouts(hf)
    for name, p in model.named_parameters():
        in_body = name.startswith("body.")
        p.requires_grad_(("lora_" in name) if in_body else True)
    settings.targets = targets
    return targets
