"""Training regimes: which parameters train. One call switches; the optimiser then sees only those.

- head-only: body frozen (requires_grad=False), pool + head train.
- partial:   the last N transformer blocks (and the final norm after them) train too.
- full:      everything trains (the word-embedding table only with train_embeddings).
- lora:      PEFT adapters on the body's attention and FFN linears (see lora.py); embeddings and LM
             head stay frozen.
"""

from __future__ import annotations

from torch import nn

from headswap.errors import ConfigError
from headswap.nn.hf import body_blocks, final_norms
from headswap.settings import REGIMES
from headswap.train.lora import apply_lora


def set_trainable(module: nn.Module, flag: bool) -> None:
    for p in module.parameters():
        p.requires_grad_(flag)


def word_embeddings(body: nn.Module) -> nn.Embedding | None:
    """The token-embedding table of a body on a Hugging Face model (its input embeddings), or None: for other
    bodies (static's table is the whole model and always trains), and for a table tied to another module (an LM
    head that reads the same weight)."""
    hf = next((m for m in body.modules() if callable(getattr(m, "get_input_embeddings", None))), None)
    table = hf.get_input_embeddings() if hf is not None else None
    if not isinstance(table, nn.Embedding):
        return None
    uses = sum(p is table.weight for _, p in body.named_parameters(remove_duplicate=False))
    return table if uses == 1 else None


def apply_regime(model: nn.Module, regime: str, last_n: int = 1, train_embeddings: bool = True) -> nn.Module:
    """Set requires_grad on `model` (which has .body, and a head) for `regime`; returns the model.
    train_embeddings False keeps the full regime's word-embedding table frozen: with AdamW every step reads
    and writes all of it (with its gradient and two moments), for rows that most batches never touch."""
    if regime not in ("head-only", "partial", "full"):
        raise ConfigError(f"unknown regime {regime!r}; choose one of {', '.join(REGIMES)}"
                         + (" (lora is applied with headswap.train.lora.apply_lora)" if regime == "lora" else ""))
    set_trainable(model, True)
    if regime == "full":
        table = None if train_embeddings else word_embeddings(model.body)
        if table is not None:
            set_trainable(table, False)
        return model
    set_trainable(model.body, False)
    if regime == "partial":
        blocks = body_blocks(model.body)
        if not 1 <= last_n <= len(blocks):
            raise ConfigError(f"partial regime: last_n must be between 1 and {len(blocks)} "
                             f"(the body has {len(blocks)} blocks), got {last_n}")
        for block in list(blocks)[-last_n:]:
            set_trainable(block, True)
        for norm in final_norms(model.body):
            set_trainable(norm, True)
    return model


def prepare(model: nn.Module, regime: str, *, zero_shot: bool = False, last_n: int = 1, lora=None,
            train_embeddings: bool = True):
    """Set what trains in a built classifier: nothing when zero_shot (no adapters to slow inference down),
    the adapters of `lora` (headswap.train.lora.LoraSettings) for 'lora', else apply_regime. Returns the
    LoraSettings applied, or None."""
    if zero_shot:
        set_trainable(model, False)
        return None
    if regime == "lora":
        apply_lora(model, lora)
        return lora
    apply_regime(model, regime, last_n=last_n, train_embeddings=train_embeddings)
    return None


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Distinct parameters (tied weights counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total
