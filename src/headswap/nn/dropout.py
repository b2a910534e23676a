"""Dropout whose mask costs a quarter of the random numbers: for the LoRA branches on CPU.

PEFT puts an nn.Dropout before every LoRA adapter, and on CPU torch draws one 32-bit Mersenne-Twister number
per element for it: with dropout 0.05, that was 18% of a smollm2-135m LoRA step on 2 cores, more than the
adapters' own matmuls. BitsDropout draws 64 random bits per four elements and compares 16-bit slices with the
threshold, so each element is dropped independently with probability round(p * 65536) / 65536 (0.0500031 for
p = 0.05) and the kept ones scaled by 1 / (1 - that): the same distribution as nn.Dropout up to that rounding,
from other random numbers. It draws from torch's default generator, so seeding and checkpointed RNG states
make it reproducible like nn.Dropout.
"""

from __future__ import annotations

import torch
from torch import nn

_LEVELS = 1 << 16


class BitsDropout(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.drop_levels = round(p * _LEVELS)   # a 16-bit slice below this drops its element

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.drop_levels == 0:
            return x
        n = x.numel()
        bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-2**63, None)
        # int16 views are signed; flipping the top bit maps the unsigned 0..65535 order onto -32768..32767.
        slices = bits.view(torch.int16)[:n].view(x.shape).bitwise_xor(-32768)
        keep = slices >= self.drop_levels - _LEVELS // 2
        return torch.where(keep, x * (_LEVELS / (_LEVELS - self.drop_levels)), 0.0)


def replace_dropouts(module: nn.Module, parent_name: str = "lora_dropout") -> int:
    """Swap every nn.Dropout inside modules named `parent_name` for a BitsDropout with the same p."""
    swapped = 0
    for name, sub in module.named_modules():
        if name.rsplit(".", 1)[-1] != parent_name or not isinstance(sub, nn.ModuleDict):
            continue
        for key, drop in list(sub.items()):
            if isinstance(drop, nn.Dropout):
                sub[key] = BitsDropout(drop.p)
                swapped += 1
    return swapped
