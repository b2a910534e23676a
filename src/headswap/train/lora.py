"""LoRA through PEFT on the body's attention and FFN linear layers; embeddings and LM head stay frozen.

PEFT's dropout modules are swapped for BitsDropout (same distribution, a quarter of the random numbers; see
headswap.nn.dropout): nn.Dropout's mask generation was the largest cost after the matmuls on CPU."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

from headswap.errors import ConfigError
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
    last_n: int | None = None          # adapters in the last_n blocks only (cache_lower); None: in every block

    @classmethod
    def from_params(cls, params: dict) -> LoraSettings:
        """From a classifier's settings (lora_r, lora_alpha, lora_dropout; with cache_lower, last_n); a missing
        one takes its default."""
        last_n = params.get("last_n", 1) if params.get("cache_lower") else None
        return cls(**{field: params[name] for field, name in _SETTING_NAMES.items() if name in params},
                   last_n=last_n)

    def to_dict(self) -> dict:
        return asdict(self)


def lora_targets(hf_model: nn.Module, last_n: int | None = None) -> list[str]:
    """Names of every nn.Linear inside the transformer blocks (attention and FFN), relative to hf_model; with
    last_n, inside the last last_n blocks only."""
    blocks = body_blocks(hf_model)
    prefix = next(name for name, m in hf_model.named_modules() if m is blocks)
    if last_n is not None and not 1 <= last_n <= len(blocks):
        raise ConfigError(f"lora with cache_lower: last_n must be between 1 and {len(blocks)} (the body has "
                          f"{len(blocks)} blocks), got {last_n}")
    first = 0 if last_n is None else len(blocks) - last_n
    return [f"{prefix}.{i}.{name}" for i, block in enumerate(blocks) if i >= first
            for name, m in block.named_modules() if isinstance(m, nn.Linear)]


def apply_lora(model: nn.Module, settings: LoraSettings) -> list[str]:
    """Inject LoRA adapters into model.body's HF model in place; only adapters and the head train."""
    from peft import LoraConfig, inject_adapter_in_model

    hf = getattr(model.body, "model", model.body)
    targets = settings.targets or lora_targets(hf, settings.last_n)
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=targets, bias="none")
    inject_adapter_in_model(config, hf)
    replace_dropouts(hf)
    for name, p in model.named_parameters():
        in_body = name.startswith("body.")
        p.requires_grad_(("lora_" in name) if in_body else True)
    settings.targets = targets
    return targets
