"""A hand-edited saved config, a base model that is a pickle, a max_length past the model's positions, and what
the command line loads for --version (issue 23's probe): each one clear line naming the file, key or option,
never a traceback from deep inside torch or transformers."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import make_tiny_encoder

from headswap import TextClassifier, models
from headswap.errors import ConfigError, HeadswapError, ModelNotAvailable
from headswap.models import position_limit, resolve_model

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home"] * 3
LABELS = ["spam", "spam", "ham", "ham"] * 3


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return make_tiny_encoder(tmp_path_factory.mktemp("hostile-models") / "enc")


@pytest.fixture(scope="module")
def saved(enc, tmp_path_factory):
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0)
    return clf.fit(TEXTS, LABELS).save(tmp_path_factory.mktemp("saved") / "m")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "headswap.cli", *map(str, args)], capture_output=True, text=True)


def _one_line(r) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


# ---- a tampered headswap_config.json ---------------------------------------------------------------------------

def _set(*keys, value=None, delete=False):
    def edit(cfg):
        for k in keys[:-1]:
            cfg = cfg[k]
        if delete:
            del cfg[keys[-1]]
        else:
            cfg[keys[-1]] = value
    return edit


TAMPERED = {   # edit -> what the error must say after "<dir>/headswap_config.json"
    "params not an object": (_set("params", value="x"), " is corrupt: params must be an object"),
    "params missing": (_set("params", delete=True), " is corrupt: params must be an object of settings; it is missing"),
    "strategy missing": (_set("params", "strategy", delete=True), " is corrupt: params.strategy must be set"),
    "max_length a string": (_set("params", "max_length", value="128"), r" is corrupt \(params\): max_length must be "
                                                                      "a number, got '128'"),
    "model a number": (_set("params", "model", value=5), " is corrupt: params.model must be a model reference"),
    "labels missing": (_set("labels", delete=True), " is corrupt: labels must be a list"),
    "labels a string": (_set("labels", value="hamspam"), " is corrupt: labels must be a list .* got 'hamspam'"),
    "labels not strings": (_set("labels", value=[0, 1]), " is corrupt: labels must be a list of two or more"),
    "one label": (_set("labels", value=["ham"]), " is corrupt: labels must be a list of two or more"),
    "label_values short": (_set("label_values", value=["ham"]), " is corrupt: label_values must be a list of 2"),
    "description missing": (_set("descriptions", value={"ham": "ham"}), " is corrupt: descriptions must be an object"),
    "base_model a string": (_set("base_model", value="x"), " is corrupt: base_model must be an object"),
    "history an object": (_set("history", value={}), " is corrupt: history must be a list of objects"),
    "export a string": (_set("export", value="x"), " is corrupt: export must be an object or null"),
    "max_length past the positions": (_set("params", "max_length", value=1000),
                                      ": max_length 1000 is more than .* it has 512 positions; use max_length <= 512"),
    "format other": (_set("format", value="other"), " is not a headswap model config: it has format 'other', a "
                                                     "headswap model's has format 'headswap'"),
    "format missing": (_set("format", delete=True), " is not a headswap model config: it has no format key"),
    # issue 33: a config that disagrees with its fitted state (single-label model, so no thresholds)
    "multi_label flipped on": (_set("params", "multi_label", value=True),
                               " is corrupt: params.multi_label is true but thresholds is missing"),
    "thresholds on single-label": (_set("thresholds", value=[0.5, 0.5]),
                                   " is corrupt: thresholds is set but params.multi_label is false"),
    "temperatures on single-label": (_set("temperature", value=[1.0, 1.0]),
                                     " is corrupt: temperature must be one number when params.multi_label is false"),
    "a third label the head lacks": (lambda c: (c["labels"].append("eggs"), c["label_values"].append("eggs"),
                                                c["descriptions"].update(eggs="eggs")),
                                     r" does not match model.safetensors \(3 labels.*\): saved weights have the "
                                     r"wrong shape: head.* \(2, .* saved, \(3, .* here"),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_config_is_one_error_naming_the_file_and_key(saved, tmp_path, case):
    edit, message = TAMPERED[case]
    d = tmp_path / "m"
    shutil.copytree(saved, d)
    config = json.loads((d / "headswap_config.json").read_text())
    edit(config)
    (d / "headswap_config.json").write_text(json.dumps(config))
    with pytest.raises(HeadswapError) as e:
        TextClassifier.load(d)
    assert str(e.value).startswith(str(d / "headswap_config.json")), e.value
    assert len(str(e.value).splitlines()) == 1
    assert re.search(message, str(e.value)), e.value


def test_a_tampered_config_on_the_command_line(saved, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(saved, d)
    config = json.loads((d / "headswap_config.json").read_text())
    config["labels"] = ["ham"]
    (d / "headswap_config.json").write_text(json.dumps(config))
    r = _cli("predict", "-q", "--model-dir", d, "hello")
    assert r.returncode == 2 and r.stdout == ""
    assert f"{d / 'headswap_config.json'} is corrupt: labels must be" in _one_line(r)


def test_a_multi_label_config_must_agree_with_its_thresholds(enc, tmp_path):
    """A multi-label model saves thresholds even untuned (no validation data), so that a config whose
    multi_label flag was flipped either way is refused instead of answering with the other kind of head."""
    sets = [["spam", "cash"], ["spam"], ["ham"], ["ham", "home"]] * 3
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0, multi_label=True)
    d = clf.fit(TEXTS, sets).save(tmp_path / "m")
    config = json.loads((d / "headswap_config.json").read_text())
    assert config["thresholds"] == [0.5] * 4
    assert TextClassifier.load(d).predict(["win cash now"]) == clf.predict(["win cash now"])
    for edit, message in ((_set("params", "multi_label", value=False), "thresholds is set but params.multi_label "
                                                                          "is false"),
                          (_set("temperature", value=1.5), "temperature must be a list, one per label")):
        edited = json.loads(json.dumps(config))
        edit(edited)
        (d / "headswap_config.json").write_text(json.dumps(edited))
        r = _cli("predict", "-q", "--model-dir", d, "hello")
        assert r.returncode == 2 and r.stdout == ""
        assert f"{d / 'headswap_config.json'} is corrupt: {message}" in _one_line(r)


def test_an_untouched_config_still_loads(saved):
    """The check does not refuse what save() writes (the format-1 fixtures are loaded by test_saved_format)."""
    assert list(TextClassifier.load(saved).predict(["win cash now"])) in (["spam"], ["ham"])


# ---- a base model given as a pickle ----------------------------------------------------------------------------

class _Marker:
    """Unpickling this writes a file: the test's proof that the pickle was (not) run."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _pickled_copy(enc, dest, marker, keep_safetensors=False):
    shutil.copytree(enc, dest)
    if not keep_safetensors:
        (dest / "model.safetensors").unlink()
    with open(dest / "pytorch_model.bin", "wb") as f:
        pickle.dump({"weights": _Marker(marker)}, f)
    return dest


def test_a_pickled_base_model_is_refused_without_unpickling_it(enc, tmp_path):
    marker = tmp_path / "unpickled"
    folder = _pickled_copy(enc, tmp_path / "pkl", marker)
    with pytest.raises(ModelNotAvailable, match=r"pytorch_model.bin: pickled weights are refused .* safetensors"):
        TextClassifier(model=str(folder), epochs=1, progress=False).fit(TEXTS, LABELS)
    data = tmp_path / "d"
    data.mkdir()
    (data / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(TEXTS, LABELS)))
    r = _cli("train", "--data", data, "--model", folder, "--out", tmp_path / "out", "-q")
    assert r.returncode == 2
    assert f"--model {folder}: {folder / 'pytorch_model.bin'}: pickled weights are refused" in _one_line(r)
    assert not (tmp_path / "out").exists() and not marker.exists()


def test_a_pickle_beside_safetensors_is_never_unpickled(enc, tmp_path):
    marker = tmp_path / "unpickled"
    folder = _pickled_copy(enc, tmp_path / "both", marker, keep_safetensors=True)
    hf_model, _, _ = models.load_model(str(folder))
    expected = load_file(str(enc / "model.safetensors"))
    name = next(k for k in expected if k.endswith("word_embeddings.weight"))
    assert torch.equal(hf_model.state_dict()[name.removeprefix("bert.")], expected[name])
    assert not marker.exists()


# ---- max_length past the model's positions, before any weights load ------------------------------------------

def test_max_length_is_refused_before_any_weights_load(enc, tmp_path, monkeypatch):
    def no_loading(*a, **k):
        raise AssertionError("weights were loaded before max_length was checked")
    monkeypatch.setattr(models, "load_model", no_loading)
    with pytest.raises(ConfigError, match=r"max_length 513 is more than .* 512 positions; use max_length <= 512"):
        TextClassifier(model=str(enc), epochs=1, progress=False, max_length=513).fit(TEXTS, LABELS)
    # On the command line: one line, nothing written. (The data is read first: it needs no torch, so a bad file is
    # refused at once; this file is good.)
    data = tmp_path / "data.csv"
    data.write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in zip(TEXTS, LABELS)))
    r = _cli("train", "--data", data, "--model", enc, "--max-length", "1000", "--out", tmp_path / "out", "-q")
    assert r.returncode == 2
    assert "max_length 1000 is more than" in _one_line(r) and "512 positions" in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("config, limit", [
    ({"model_type": "bert", "max_position_embeddings": 512}, 512),
    ({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}, 512),   # ids start at 2
    ({"model_type": "gpt2", "n_positions": 1024, "architectures": ["GPT2LMHeadModel"]}, 1024),
    ({"model_type": "bert"}, None),
])
def test_position_limit_reads_the_config(tmp_path, config, limit):
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"")      # only its name is looked at
    assert position_limit(resolve_model(str(tmp_path))) == limit


# ---- the command line's --version ------------------------------------------------------------------------------

def test_version_and_help_import_no_torch():
    code = ("import sys\nfrom headswap.cli.parser import build_parser\n"
            "for a in (['--version'], ['--help']):\n"
            "    try: build_parser().parse_args(a)\n    except SystemExit: pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'sklearn') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("headswap ")
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout
