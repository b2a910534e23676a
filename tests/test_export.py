"""ONNX export and the runtimes: an exported classifier gives the labels and (fp32) the probabilities of the
original; torch-int8 and ONNX int8 run; damaged or mismatched exports, and what cannot be exported, are one
clear error."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
from cli_run import invoke, signalled
from tiny_models import make_tiny_causal, make_tiny_encoder

from headswap import TextClassifier
from headswap.errors import HeadswapError
from headswap.jobs.export import FP32_TOLERANCE, export
from headswap.classifier.runtime import is_head

pytestmark = pytest.mark.usefixtures("one_thread")
pytest.importorskip("onnxruntime")

TEXTS = ["win cash now", "free call now", "see you at noon", "ok home", "urgent prize", "running late"] * 3
LABELS = ["spam", "spam", "ham", "ham", "spam", "ham"] * 3
NEW = ["win a free prize now", "see you", "call me when you are free ok", "late"]
# Softmax of logits that agree to FP32_TOLERANCE: probabilities agree at least as closely.
PROBA_TOLERANCE = FP32_TOLERANCE


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    enc = make_tiny_encoder(root / "enc")
    out = {"root": root, "enc": enc}
    for name, kw in {"mlp": {}, "similarity": {"strategy": "similarity"},
                     "cross": {"strategy": "cross-encoder"}}.items():
        clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0, **kw).fit(TEXTS, LABELS)
        # A temperature, so that the exported directory's predict_proba is seen to apply it.
        clf.temperature_ = 1.7
        out[name] = clf.save(root / name)
        out[name + "-onnx"] = root / f"{name}-onnx"
        export(out[name], out[name + "-onnx"])
    return out


@pytest.mark.parametrize("name", ["mlp", "similarity", "cross"])
def test_exported_model_predicts_like_the_original(models, name):
    original = TextClassifier.load(models[name])
    exported = TextClassifier.load(models[name + "-onnx"])
    assert original.runtime_ == "torch" and exported.runtime_ == "onnx"
    assert list(exported.predict(NEW)) == list(original.predict(NEW))
    p, q = exported.predict_proba(NEW), original.predict_proba(NEW)
    assert p.shape == (len(NEW), 2)
    assert np.abs(p - q).max() < PROBA_TOLERANCE
    assert exported.temperature_ == 1.7
    # The exported directory still holds the torch model: runtime='torch' loads it.
    again = TextClassifier.load(models[name + "-onnx"], runtime="torch")
    assert again.runtime_ == "torch" and np.abs(again.predict_proba(NEW) - q).max() < 1e-6


def test_export_records_its_check_and_the_summary(models):
    config = json.loads((models["mlp-onnx"] / "headswap_config.json").read_text())
    entry = config["export"]
    assert entry["inputs"] == ["input_ids", "attention_mask"] and entry["quantize"] == "none"
    assert entry["check"]["same_labels"] and entry["check"]["max_abs_logit_diff"] < FP32_TOLERANCE
    exported, original = TextClassifier.load(models["mlp-onnx"]), TextClassifier.load(models["mlp"])
    s, t = exported.summary(), original.summary()
    assert s["runtime"] == "onnx" and s["total_params"] == t["total_params"] > 0
    cross = json.loads((models["cross-onnx"] / "headswap_config.json").read_text())["export"]
    assert cross["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]


def test_the_export_command_says_what_it_wrote_unless_quiet(models):
    rc, _, err = invoke(["export", "--model-dir", str(models["mlp"]), "--out", str(models["root"] / "cli-onnx")])
    assert rc == 0 and err.startswith(f"wrote {models['root'] / 'cli-onnx'}: model.onnx"), err
    rc, _, err = invoke(["export", "--model-dir", str(models["mlp"]), "--out", str(models["root"] / "cli-onnx-q"),
                         "-q"])
    assert rc == 0 and err == "" and (models["root"] / "cli-onnx-q" / "model.onnx").is_file(), err


def test_exported_model_evaluates(models):
    m = TextClassifier.load(models["mlp-onnx"]).evaluate(TEXTS, LABELS)
    ref = TextClassifier.load(models["mlp"]).evaluate(TEXTS, LABELS)
    assert m.f1() == pytest.approx(ref.f1()) and m.extra["runtime"] == "onnx"


def test_multi_label_model_exports(models):
    sets = ["spam|urgent", "spam", "ham", "ham|late", "spam|urgent", "ham|late"] * 3
    clf = TextClassifier(model=str(models["enc"]), multi_label=True, epochs=1, progress=False,
                         eval_fraction=0).fit(TEXTS, sets)
    clf.thresholds_ = [0.4, 0.5, 0.6, 0.45]
    src = clf.save(models["root"] / "multi")
    export(src, models["root"] / "multi-onnx")
    exported = TextClassifier.load(models["root"] / "multi-onnx")
    assert exported.runtime_ == "onnx" and exported.thresholds_ == clf.thresholds_
    assert exported.predict(NEW) == clf.predict(NEW)
    assert np.abs(exported.predict_proba(NEW) - clf.predict_proba(NEW)).max() < PROBA_TOLERANCE


def test_int8_exports_quantize_and_run(models):
    import onnx
    out = models["root"] / "mlp-int8"
    entry = export(models["mlp"], out, quantize="int8")
    ops = {n.op_type for n in onnx.load(str(out / "model.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul"}, ops
    head = [n for n in onnx.load(str(out / "model.onnx")).graph.node if any(is_head(i) for i in n.input)]
    assert head and {n.op_type for n in head} <= {"Gemm", "MatMul", "Add"}, head   # the head stays fp32
    assert entry["quantize"] == "int8"
    p = TextClassifier.load(out).predict_proba(NEW)
    assert p.shape == (len(NEW), 2) and np.allclose(p.sum(1), 1, atol=1e-5)


def test_torch_int8_runtime(models):
    import torch
    original = TextClassifier.load(models["mlp"])
    q = TextClassifier.load(models["mlp"], runtime="torch-int8")
    kinds = {type(m).__module__ + "." + type(m).__name__ for m in q.module_.modules()}
    assert any(".quantized.dynamic." in k and k.endswith(".Linear") for k in kinds), kinds
    fp32 = [n for n, m in q.module_.named_modules() if type(m) is torch.nn.Linear]
    assert fp32 and all(is_head(n) for n in fp32), fp32   # the body quantized, the head kept fp32
    assert q.summary()["total_params"] == original.summary()["total_params"]
    p = q.predict_proba(NEW)
    assert p.shape == (len(NEW), 2) and np.allclose(p.sum(1), 1, atol=1e-5)
    with pytest.raises(HeadswapError, match="runtime='torch' to save"):
        q.save(models["root"] / "never")
    assert not (models["root"] / "never").exists()


def test_runtime_onnx_needs_an_export(models):
    with pytest.raises(HeadswapError, match="holds no ONNX export.*headswap export"):
        TextClassifier.load(models["mlp"], runtime="onnx")
    with pytest.raises(HeadswapError, match="unknown runtime 'tpu'"):
        TextClassifier.load(models["mlp"], runtime="tpu")


def _copy(models, name, tmp_path):
    d = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(models[name], d)
    return d


def _config(d):
    return json.loads((d / "headswap_config.json").read_text())


def _set_export(d, **kw):
    config = _config(d)
    config["export"].update(kw)
    (d / "headswap_config.json").write_text(json.dumps(config))


def test_damaged_or_mismatched_exports_are_clear_errors(models, tmp_path):
    from headswap.saved.atomic import sha256_of
    d = _copy(models, "mlp-onnx", tmp_path)
    data = (d / "model.onnx").read_bytes()
    (d / "model.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(HeadswapError, match="model.onnx does not match .*sha256"):
        TextClassifier.load(d)
    _set_export(d, sha256=sha256_of(d / "model.onnx"))     # a truncated file that the config vouches for
    with pytest.raises(HeadswapError, match="cannot be read by ONNX Runtime"):
        TextClassifier.load(d)
    # Another model's graph (the cross-encoder takes token_type_ids) put in place, its hash updated.
    shutil.copy(models["cross-onnx"] / "model.onnx", d / "model.onnx")
    _set_export(d, sha256=sha256_of(d / "model.onnx"))
    with pytest.raises(HeadswapError, match="takes inputs .*token_type_ids.*export the model again"):
        TextClassifier.load(d)
    (d / "model.onnx").unlink()
    with pytest.raises(HeadswapError, match="model.onnx is missing"):
        TextClassifier.load(d)
    # A graph with the wrong number of labels for the config.
    d2 = _copy(models, "mlp-onnx", tmp_path)
    config = _config(d2)
    config["labels"].append("extra")
    config["label_values"].append("extra")
    config["descriptions"]["extra"] = "extra"     # a consistent config: only the graph disagrees
    (d2 / "headswap_config.json").write_text(json.dumps(config))
    with pytest.raises(HeadswapError, match="gives 2 logits per text for 3 labels"):
        TextClassifier.load(d2)
    d3 = _copy(models, "mlp-onnx", tmp_path)
    (d3 / "tokenizer" / "tokenizer.json").write_text("{not json")
    with pytest.raises(HeadswapError, match="exported tokenizer cannot be read"):
        TextClassifier.load(d3)
    shutil.rmtree(d3 / "tokenizer")
    with pytest.raises(HeadswapError, match="tokenizer is missing; the exported model directory is incomplete"):
        TextClassifier.load(d3)


@pytest.mark.parametrize("key,name", [("tokenizer", "../enc"), ("tokenizer", "/etc"),
                                      ("tokenizer", "sentence-transformers/all-MiniLM-L6-v2"),
                                      ("file", "../mlp-onnx/model.onnx"), ("tokenizer", 7)])
def test_an_export_never_reads_outside_its_directory_or_online(models, tmp_path, monkeypatch, key, name):
    import huggingface_hub
    import huggingface_hub.file_download as fd

    def online(*a, **k):
        raise AssertionError("the Hugging Face Hub was contacted")

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")            # only headswap's own local_files_only keeps it offline
    for mod, fn in ((huggingface_hub, "hf_hub_download"), (fd, "hf_hub_download"), (fd, "get_hf_file_metadata")):
        monkeypatch.setattr(mod, fn, online, raising=False)
    d = _copy(models, "mlp-onnx", tmp_path)
    _set_export(d, **{key: name})
    with pytest.raises(HeadswapError, match=f"export.{key}|is missing|must name a file"):
        TextClassifier.load(d)


def test_what_cannot_be_exported(models, tmp_path):
    causal = make_tiny_causal(tmp_path / "causal")
    clf = TextClassifier(strategy="slm-logits", model=str(causal), epochs=0, progress=False).fit(TEXTS, LABELS)
    clf.save(tmp_path / "slm")
    with pytest.raises(HeadswapError, match="'slm-logits' on a causal model cannot be exported; exportable: "
                                            "encoder-mlp, similarity, cross-encoder, setfit"):
        export(tmp_path / "slm", tmp_path / "slm-onnx")
    from headswap.baseline.tfidf import TfidfClassifier
    tfidf = TfidfClassifier().fit(TEXTS, LABELS).save(tmp_path / "tfidf")
    with pytest.raises(HeadswapError, match="holds a TF-IDF model: .* has no graph to export"):
        export(tfidf, tmp_path / "tfidf-onnx")
    assert not (tmp_path / "tfidf-onnx").exists()
    r = _cli("export", "--model-dir", str(tfidf), "--out", str(tmp_path / "tfidf-onnx"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(HeadswapError, match="exists and is not an empty directory"):
        export(models["mlp"], tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "keep me"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "headswap.cli", *args], capture_output=True, text=True)


def test_cli_export_predict_and_runtime(models, tmp_path):
    out = tmp_path / "cli-onnx"
    r = _cli("export", "--model-dir", str(models["mlp"]), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "logits differ from torch's by at most" in r.stderr and (out / "model.onnx").is_file()
    rows = {}
    for runtime in ("auto", "torch", "torch-int8"):
        r = _cli("predict", "--model-dir", str(out), "--runtime", runtime, *NEW)
        assert r.returncode == 0, r.stderr
        rows[runtime] = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["label"] for x in rows["auto"]] == [x["label"] for x in rows["torch"]]
    assert len(rows["torch-int8"]) == len(NEW)
    r = _cli("predict", "--model-dir", str(models["mlp"]), "--runtime", "onnx", "hello")
    assert r.returncode == 2 and "holds no ONNX export" in r.stderr and "Traceback" not in r.stderr


def test_serve_runs_an_exported_directory(models):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from headswap.serve.app import create_app
    app = create_app(str(models["mlp-onnx"]))
    assert app.state.classifier.runtime_ == "onnx"
    with TestClient(app) as c:
        r = c.post("/predict", json={"texts": NEW})
    assert r.status_code == 200, r.text
    assert [p["label"] for p in r.json()["predictions"]] == list(TextClassifier.load(models["mlp"]).predict(NEW))
    assert create_app(str(models["mlp-onnx"]), runtime="torch").state.classifier.runtime_ == "torch"


@pytest.mark.parametrize("edit, message", [
    ({"encoder.max_length": 100000}, "export.encoder.max_length is 100000, params.max_length is 128"),
    ({"encoder.max_length": "128"}, "export.encoder.max_length is '128', params.max_length is 128"),
    ({"encoder.max_length": 100000, "params.max_length": 100000}, "max_length 100000 is more than the exported "
                                                                   "graph's 512 positions"),
    ({"encoder.bogus": 1}, "export.encoder must be an object of text encoder settings"),
    ({"positions": "many"}, "export.positions must be a number of tokens or null")])
def test_a_tampered_export_encoder_is_one_line_naming_the_key(models, tmp_path, edit, message):
    """Before: ONNX Runtime's "invalid expand shape" on the first long text (issue 33)."""
    d = _copy(models, "mlp-onnx", tmp_path)
    config = _config(d)
    assert config["export"]["positions"] == 512
    for key, value in edit.items():
        if key.startswith("params."):
            config["params"][key[7:]] = value
        elif key.startswith("encoder."):
            config["export"]["encoder"][key[8:]] = value
        else:
            config["export"][key] = value
    (d / "headswap_config.json").write_text(json.dumps(config))
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "predict", "-q", "--model-dir", str(d),
                        "word " * 2000], capture_output=True, text=True)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(lines) == 1 and r.stdout == "", r.stderr
    assert f"{d / 'headswap_config.json'} is corrupt: {message}" in lines[0], r.stderr


def test_cli_int8_export_then_predict_on_it(models, tmp_path):
    out = tmp_path / "int8"
    r = _cli("export", "--model-dir", str(models["mlp"]), "--out", str(out), "--quantize", "int8")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "headswap_config.json").read_text())["export"]["quantize"] == "int8"
    r = _cli("predict", "--model-dir", str(out), *NEW)     # --runtime auto: the int8 graph on ONNX Runtime
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["row"] for x in rows] == [1, 2, 3, 4] and all(x["label"] in ("ham", "spam") for x in rows)
    assert all(abs(sum(x["probabilities"].values()) - 1) < 1e-5 for x in rows)
    expected = TextClassifier.load(out, progress=False).predict_proba(NEW)
    assert np.allclose([list(x["probabilities"].values()) for x in rows], expected, atol=1e-6)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_an_export_stopped_mid_write_leaves_no_half_export_and_a_rerun_works(models, tmp_path, sig):
    """Stopped while it writes (its folder beside OUT exists): OUT holds no half an export. SIGTERM cleans up
    (no lock, no temporary folder); after SIGKILL only a hidden .OUT.new-* folder and the lock file are left,
    and the same command run again exports."""
    out = tmp_path / "x"
    argv = ["export", "--model-dir", str(models["mlp"]), "--out", str(out)]
    rc, err = signalled(argv, lambda err: any(tmp_path.glob(".x.new-*")), sig)
    assert not out.exists()
    if sig == signal.SIGTERM:
        assert rc == 143 and err.strip().splitlines()[-1] == "terminated (SIGTERM)", err
        assert list(tmp_path.iterdir()) == []
    else:
        assert rc == -signal.SIGKILL
    r = _cli(*argv)
    assert r.returncode == 0, r.stderr
    assert TextClassifier.load(out, progress=False).predict(NEW).shape == (len(NEW),)
