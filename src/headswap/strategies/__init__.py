"""The strategy registry: every table, CLI help text and benchmark check is derived from it.

Adding a strategy to the package is one file (a headswap.strategies.base.Strategy subclass), its class below and
its name in headswap.settings.STRATEGIES; a plug-in outside it is one `register` call.
"""

from __future__ import annotations

from headswap import settings
from headswap.errors import ConfigError
from headswap.strategies.base import REGISTRY, Build, Strategy
from headswap.strategies.cross_encoder import CrossEncoder
from headswap.strategies.embed_mlp import CausalEmbeddingMLP, EmbedMLP, SLMHiddenMLP
from headswap.strategies.generate_parse import GenerateParse, parse_answer
from headswap.strategies.lm_logits import SLMLetters, SLMLogits
from headswap.strategies.setfit import SetFit
from headswap.strategies.similarity import Similarity
from headswap.strategies.static import Static


def register(strategy: Strategy | type[Strategy]) -> Strategy:
    """Add a strategy (an instance or a class) under its name; returns the instance."""
    s = strategy() if isinstance(strategy, type) else strategy
    if not s.name or not s.description:
        raise ConfigError(f"{type(s).__name__} needs a name and a description to be registered")
    REGISTRY[s.name] = s
    if s.name not in settings.STRATEGIES:
        settings.STRATEGIES.append(s.name)     # a plug-in: settings.check and the command line accept it now
    return s


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)
    if name in settings.STRATEGIES:
        settings.STRATEGIES.remove(name)


def get(name: str) -> Strategy:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown strategy {name!r}; choose one of {', '.join(REGISTRY)}") from None


def names(**flags: bool) -> list[str]:
    """Registered names in order; flags filter on attributes, e.g. names(zero_shot=True)."""
    return [n for n, s in REGISTRY.items() if all(getattr(s, k) == v for k, v in flags.items())]


_BUILT_IN = (EmbedMLP, CausalEmbeddingMLP, SLMHiddenMLP, SLMLogits, SLMLetters, Similarity, CrossEncoder,
             GenerateParse, SetFit, Static)
if [s.name for s in _BUILT_IN] != settings.STRATEGIES:
    raise RuntimeError(f"headswap.settings.STRATEGIES {settings.STRATEGIES} and the strategy classes' names "
                       f"{[s.name for s in _BUILT_IN]} differ: declare every class's name there, in the same order")
for _s in _BUILT_IN:
    register(_s)

__all__ = ["Build", "Strategy", "REGISTRY", "register", "unregister", "get", "names", "parse_answer"]
