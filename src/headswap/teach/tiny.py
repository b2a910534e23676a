"""A tiny pre-norm transformer (nanoGPT-style) for the teaching path, and a quick LM pretraining.

The body returns hidden states; the LM head is a separate module, so swapping it for a classifier
head leaves the body's weights exactly as pretrained.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TinyConfig:
    vocab_size: int = 260
    hidden: int = 64
    heads: int = 4
    blocks: int = 2
    max_len: int = 32
    dropout: float = 0.0
    pad_id: int = 256

    def to_dict(self) -> dict:
        return asdict(self)


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only, so left padding does not shift them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def attention_mask_4d(attention_mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Boolean (B, 1, T, T) mask, True where a query may attend to a key.

    Pad keys are never attended to. Every query may attend to itself, so a pad query's softmax row is
    never empty (an all-masked row would give NaN, and NaN * 0 is still NaN in pooling).
    """
    b, t = attention_mask.shape
    allowed = attention_mask.bool()[:, None, None, :].expand(b, 1, t, t)
    if causal:
        allowed = allowed & torch.ones(t, t, dtype=torch.bool, device=attention_mask.device).tril()
    return allowed | torch.eye(t, dtype=torch.bool, device=attention_mask.device)


class SelfAttention(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        if cfg.hidden % cfg.heads:
            raise ValueError(f"hidden ({cfg.hidden}) must be divisible by heads ({cfg.heads})")
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(),
                                 nn.Linear(4 * cfg.hidden, cfg.hidden), nn.Dropout(cfg.dropout))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """Token + position embeddings, N pre-norm blocks, a final LayerNorm; returns (B, T, hidden)."""

    def __init__(self, cfg: TinyConfig | None = None, causal: bool = True):
        super().__init__()
        self.config = cfg = cfg or TinyConfig()
        self.causal = causal
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.pos = nn.Embedding(cfg.max_len, cfg.hidden)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.blocks))
        self.ln_f = nn.LayerNorm(cfg.hidden)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if input_ids.shape[1] > self.config.max_len:
            raise ValueError(f"sequence of {input_ids.shape[1]} tokens is longer than max_len "
                             f"{self.config.max_len}; truncate in the tokenizer")
        x = self.drop(self.tok(input_ids) + self.pos(position_ids(attention_mask)))
        mask = attention_mask_4d(attention_mask, self.causal)
        for block in self.blocks:
            x = block(x, mask)
        return self.ln_f(x)


class TinyLM(nn.Module):
    """Body + LM head (tied to the token embedding, as in GPT-2), for pretraining."""

    def __init__(self, body: TinyTransformer):
        super().__init__()
        self.body = body
        self.lm_head = nn.Linear(body.config.hidden, body.config.vocab_size, bias=False)
        self.lm_head.weight = body.tok.weight

    def forward(self, input_ids, attention_mask=None):
        return self.lm_head(self.body(input_ids, attention_mask))


def pretrain_quick(texts: list[str], cfg: TinyConfig | None = None, epochs: int = 5, lr: float = 3e-3,
                   batch_size: int = 32, seed: int = 0, log=print) -> TinyTransformer:
    """Next-token LM training on `texts` for a few epochs; returns the (causal) body."""
    from headswap.teach.tokenizer import ByteTokenizer

    torch.manual_seed(seed)
    cfg = cfg or TinyConfig()
    body = TinyTransformer(cfg, causal=True)
    lm = TinyLM(body)
    tok = ByteTokenizer(max_length=cfg.max_len, add_cls=True)  # cls doubles as BOS for the LM
    enc = tok(texts, add_eos=True)
    opt = torch.optim.AdamW(lm.parameters(), lr=lr, weight_decay=0.01)
    steps = epochs * math.ceil(len(texts) / batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(len(texts), generator=gen)
        total, count = 0.0, 0
        for i in range(0, len(texts), batch_size):
            idx = order[i:i + batch_size]
            ids, mask = enc.input_ids[idx], enc.attention_mask[idx]
            logits = lm(ids, mask)[:, :-1]
            target = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), target.reshape(-1), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total, count = total + loss.item() * len(idx), count + len(idx)
        if log:
            log(f"  pretrain epoch {epoch + 1}/{epochs}: LM loss {total / count:.3f} "
                f"(perplexity {math.exp(total / count):.1f})")
    if log:
        log(f"  pretrained {sum(p.numel() for p in body.parameters()):,} body parameters "
            f"in {time.perf_counter() - start:.1f} s")
    return body
