"""The strategy registry: every table, CLI help text and benchmark check is derived from it.

Adding a strategy is one file (a headswap.strategies.base.Strategy subclass) and one `register` line.
"""

from __future__ import annotations

from headswap.errors import ConfigError
from headswap.strategies.base import Build, Strategy
from headswap.strategies.cross_encoder import CrossEncoder
from headswap.strategies.embed_mlp import CausalEmbeddingMLP, EmbedMLP, SLMHiddenMLP
from headswap.strategies.generate_parse import GenerateParse, parse_answer
from headswap.strategies.lm_logits import SLMLetters, SLMLogits
from headswap.strategies.setfit import SetFit
from headswap.strategies.similarity import Similarity
from headswap.strategies.static import Static

REGISTRY: dict[str, Strategy] = {}


def register(strategy: Strategy | type[Strategy]) -> Strategy:
    """Add a strategy (an instance or a class) under its name; returns the instance."""
    s = strategy() if isinstance(strategy, type) else strategy
    if not s.name or not s.description:
        raise ConfigError(f"{type(s).__name__} needs a name and a description to be registered")
    REGISTRY[s.name] = s
    return s


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def get(name: str) -> Strategy:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; choose one of {', '.join(REGISTRY)}") from None


def names(**flags: bool) -> list[str]:
    """Registered names in order; flags filter on attributes, e.g. names(zero_shot=True)."""
    return [n for n, s in REGISTRY.items() if all(getattr(s, k) == v for k, v in flags.items())]


for _s in (EmbedMLP, CausalEmbeddingMLP, SLMHiddenMLP, SLMLogits, SLMLetters, Similarity, CrossEncoder, GenerateParse,
           SetFit, Static):
    register(_s)

__all__ = ["Build", "Strategy", "REGISTRY", "register", "unregister", "get", "names", "parse_answer"]
