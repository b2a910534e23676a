"""Loading a resolved model and its tokenizer (a GGUF file through its converted cache folder)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import transformers
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from headswap.errors import ConfigError, HeadswapError
from headswap.models.cache import _UNWRITABLE, check_writable
from headswap.models.gguf import _convert_gguf, gguf_cache_dir
from headswap.models.registry import ModelSpec
from headswap.models.resolve import _as_spec

def _load_dir(spec: ModelSpec) -> str:
    """Folder to load with from_pretrained; converts a GGUF spec into the cache on first use."""
    from headswap.saved.model_dir import check_regular_tree
    if spec.gguf_file is None:
        check_regular_tree(Path(spec.path))    # a FIFO among the model's files would block loading forever
        return spec.path
    target = gguf_cache_dir(spec)
    if not (target / "config.json").is_file():
        try:
            check_writable(target.parent)     # before the conversion (tens of seconds), not after it
            _convert_gguf(spec, target)
        except OSError as e:
            if e.errno not in _UNWRITABLE:
                raise
            raise HeadswapError(f"cannot write the converted {spec.gguf_file} into the model cache {target.parent} "
                                f"({e.strerror}); set HEADSWAP_CACHE to a writable folder") from None
    return str(target)


def load_tokenizer(ref_or_spec: str | os.PathLike | ModelSpec) -> transformers.PreTrainedTokenizerBase:
    """Load the tokenizer; guarantees a pad token (falls back to the EOS token when there is none)."""
    spec = _as_spec(ref_or_spec)
    tokenizer = AutoTokenizer.from_pretrained(_load_dir(spec), local_files_only=True)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ConfigError(f"tokenizer of {spec.ref!r} has neither a pad token nor an EOS token")
        # Batching needs padding; the EOS token is the usual stand-in for decoder-only models.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    ref_or_spec: str | os.PathLike | ModelSpec, kind: str | None = None, causal_lm_head: bool = True
) -> tuple[torch.nn.Module, transformers.PreTrainedTokenizerBase, ModelSpec]:
    """Load ``(model, tokenizer, spec)``; the model is float32 and in eval mode.

    Encoders load with AutoModel.  Causal models load with AutoModelForCausalLM (with LM head) when
    ``causal_lm_head``, else with AutoModel (the base model, returning hidden states).  GGUF files are
    converted once into the safetensors cache and loaded from there.
    """
    spec = _as_spec(ref_or_spec, kind)
    folder = _load_dir(spec)
    tokenizer = load_tokenizer(spec)
    auto = AutoModelForCausalLM if spec.kind == "causal" and causal_lm_head else AutoModel
    # use_safetensors: a pickle beside the safetensors file is never unpickled (resolve_model refuses a folder
    # that holds only pickles).
    model = auto.from_pretrained(folder, dtype=torch.float32, local_files_only=True, use_safetensors=True)
    model.float().eval()
    if getattr(model.config, "pad_token_id", None) is None:
        # Keeps HF code paths that look for padding (e.g. sequence-classification pooling) working.
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, spec
