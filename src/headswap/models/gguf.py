"""GGUF files converted once into a plain safetensors folder in the cache: transformers dequantises a GGUF file
on every load (about 30 s for SmolLM2-135M) and refuses save_pretrained on the result; the converted folder loads
in about a second."""

from __future__ import annotations

import copy
import hashlib
import logging
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from headswap.errors import HeadswapError
from headswap.models.cache import _CONVERSION_VERSION, building_in_cache, cache_root, hash_ends
from headswap.models.registry import ModelSpec

logger = logging.getLogger("headswap.models")   # the name these log lines always had

def _gguf_fingerprint(file: Path) -> str:
    """Hash of size + first and last MiB: changes when the file changes, without reading ~100 MB."""
    size = file.stat().st_size
    h = hashlib.sha256(f"v{_CONVERSION_VERSION}:{size}:".encode())
    hash_ends(h, file, size)
    return h.hexdigest()[:16]


def gguf_cache_dir(spec: ModelSpec) -> Path:
    """The cache folder a GGUF spec converts into (it may not exist yet)."""
    file = Path(spec.path) / spec.gguf_file
    return cache_root() / "gguf" / f"{file.stem}-{_gguf_fingerprint(file)}"


# Converting a GGUF file into the cache, per MB of the file: SmolLM2-135M's 94 MB Q4_1 file took 21 s on an idle
# 2-core Xeon and 30 s on a fresh 2-core machine (dequantising, saving, reloading and checking the logits).
CONVERT_SECONDS_PER_MB = 0.35


def conversion_seconds(spec: ModelSpec) -> float:
    """About how long loading `spec` first spends converting it into the cache: 0 once it is converted (or for a
    model that needs no conversion)."""
    if spec.gguf_file is None or (gguf_cache_dir(spec) / "config.json").is_file():
        return 0.0
    return (Path(spec.path) / spec.gguf_file).stat().st_size / 2**20 * CONVERT_SECONDS_PER_MB


def _load_from_gguf(folder: str, gguf_file: str):
    """Load model and tokenizer straight from a GGUF file (slow: dequantises every tensor)."""
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=gguf_file, dtype=torch.float32, local_files_only=True
    )
    return model.eval(), tokenizer


def _same_logits(a: torch.nn.Module, b: torch.nn.Module, tokenizer, atol: float = 1e-5) -> bool:
    ids = tokenizer("The quick brown fox", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return torch.allclose(a(input_ids=ids).logits, b(input_ids=ids).logits, atol=atol)


def _convert_gguf(spec: ModelSpec, target: Path) -> None:
    """Convert a GGUF file into a plain safetensors folder at ``target``, atomically."""
    logger.info("converting GGUF %s once into cache %s (about 30 s)", spec.gguf_file, target)
    start = time.perf_counter()
    gguf_model, tokenizer = _load_from_gguf(spec.path, spec.gguf_file)

    # A GGUF-loaded model is flagged as quantised and refuses save_pretrained; rebuild a plain model
    # of the same architecture (without the quantization_config) and copy the dequantised weights.
    config = copy.deepcopy(gguf_model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())  # strict: every tensor must match
    model.eval()

    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    # The GGUF tokenizer carries no model_max_length; use the model's context length so truncation works.
    max_len = getattr(config, "max_position_embeddings", None)
    if max_len and tokenizer.model_max_length > max_len:
        tokenizer.model_max_length = max_len

    with building_in_cache(target, "config.json") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, local_files_only=True).eval()
        if not _same_logits(gguf_model, reloaded, tokenizer):
            raise HeadswapError(f"converting {spec.gguf_file} changed the model's outputs; cache not written")
    logger.info("converted %s in %.1f s", spec.gguf_file, time.perf_counter() - start)
