"""What a model's config.json or GGUF header says about its size, read without loading weights: its block count
and how many positions (tokens) it takes."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path

from headswap.errors import ConfigError, HeadswapError
from headswap.models.gguf import gguf_cache_dir
from headswap.models.registry import ModelSpec
from headswap.models.resolve import _as_spec

def _header_int(spec: ModelSpec, gguf_key: str, config_keys: tuple[str, ...]) -> int | None:
    """An integer from a model's GGUF header (``{architecture}.{gguf_key}``) or its config.json (the first of
    ``config_keys`` present), read without loading weights; None when neither says."""
    if spec.gguf_file:
        return _gguf_int(os.path.join(spec.path, spec.gguf_file), gguf_key)
    config = _config_json(spec)
    for key in config_keys:
        if isinstance(config.get(key), int) and not isinstance(config[key], bool):
            return config[key]
    return None


@functools.lru_cache(maxsize=16)
def _gguf_int(file: str, key: str) -> int | None:
    # Cached: GGUFReader parses every tensor's header too, seconds for SmolLM2 on a busy CPU.
    import gguf
    fields = gguf.GGUFReader(file).fields
    arch = fields.get("general.architecture")
    name = bytes(arch.parts[arch.data[0]]).decode() if arch is not None else "llama"
    value = fields.get(f"{name}.{key}")
    return int(value.parts[value.data[0]][0]) if value is not None else None


def _config_json(spec: ModelSpec) -> dict:
    try:
        config = json.loads((Path(spec.path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def block_count(ref_or_spec) -> int | None:
    """Transformer blocks of a model, read from its config or GGUF header without loading weights (None when
    the config does not say)."""
    return _header_int(_as_spec(ref_or_spec), "block_count", ("num_hidden_layers", "n_layer", "num_layers", "n_layers"))


# Encoders whose position ids start after the padding index (RoBERTa's scheme): max_position_embeddings 514
# holds 512 tokens.
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm",
                     "data2vec-text", "longformer", "mpnet", "ibert")


def position_limit(ref_or_spec) -> int | None:
    """The most tokens one sequence may hold (max_position_embeddings, or a GGUF file's context length), read
    without loading weights; None when the model does not say (its positions are then unbounded here)."""
    spec = _as_spec(ref_or_spec)
    if spec.gguf_file and (gguf_cache_dir(spec) / "config.json").is_file():    # converted: its config is quicker
        spec = dataclasses.replace(spec, path=str(gguf_cache_dir(spec)), gguf_file=None)
    limit = _header_int(spec, "context_length", ("max_position_embeddings", "n_positions"))
    if limit is not None and not spec.gguf_file:
        config = _config_json(spec)
        if config.get("model_type") in _OFFSET_POSITIONS and isinstance(config.get("pad_token_id"), int):
            limit -= config["pad_token_id"] + 1
    return limit


def check_positions(ref_or_spec, max_length: int, prompt: int = 0, name: str | None = None) -> None:
    """Refuse a max_length that, with `prompt` tokens around the text, is more than the model's positions
    (read from its config, no weights loaded): it would pass every check and then fail inside torch on the
    first long text. A model that does not resolve is left to the loader to report."""
    try:
        limit = position_limit(ref_or_spec)
    except HeadswapError:
        return
    if limit is not None and max_length + prompt > limit:
        name = name or (ref_or_spec.ref if isinstance(ref_or_spec, ModelSpec) else str(ref_or_spec))
        raise ConfigError(f"max_length {max_length} is more than {name!r} can take: it has {limit} positions"
                          + (f", of which the prompt takes {prompt}" if prompt else "")
                          + f"; use max_length <= {limit - prompt}")
