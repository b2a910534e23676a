"""LoRA through PEFT on the body's attention and FFN linear layers; embeddings and LM head stay frozen.

PEFT's dropout modules are swapped for BitsDropout (same distribution, a quarter of the random numbers; see
headswap.nn.dropout): nn.Dropout's mask generation was the largest cost after the matmuls on CPU."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

from headswap.nn.dropout import replace_dropouts
from headswap.nn.hf import body_blocks
from headswap.settings import defaults

_SETTING_NAMES = {"r": "lora_r", "alpha": "lora_alpha", "dropout": "lora_dropout"}   # field -> headswap.settings name
_DEFAULTS = {field: defaults()[name] for field, name in _SETTING_NAMES.items()}


@dataclass
class LoraSettings:
    """The adapters' shape as applied and saved in the config; the defaults are headswap.settings'."""

    r: int = _DEFAULTS["r"]
    alpha: int = _DEFAULTS["alpha"]
    dropout: float = _DEFAULTS["dropout"]
    targets: list[str] | None = None   # full module names; default: every Linear inside the blocks

    @classmethod
    def from_params(cls, params: dict) -> LoraSettings:
        """From a classifier's settings (lora_r, lora_alpha, lora_dropout); a missing one takes its default."""
        return cls(**{field: params[name] for field, name in _SETTING_NAMES.items() if name in params})

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
