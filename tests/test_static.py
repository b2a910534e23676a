"""The static strategy: a tiny encoder distilled by model2vec (once, into HEADSWAP_CACHE), a head on top."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from tiny_models import make_tiny_causal, make_tiny_encoder

pytest.importorskip("model2vec")

from headswap import TextClassifier  # noqa: E402
from headswap.cli import main  # noqa: E402
from headswap.errors import ConfigError, HeadswapError  # noqa: E402

X = ["win cash now", "free entry txt win", "see you at noon", "ok on my way home", "urgent you have won",
     "running late sorry"] * 4
Y = ["spam", "spam", "ham", "ham", "spam", "ham"] * 4

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    folder = tmp_path_factory.mktemp("cache")
    mp.setenv("HEADSWAP_CACHE", str(folder))
    yield folder
    mp.undo()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory, cache):
    torch.manual_seed(0)    # the tiny model's random weights: the same toy problem on every run
    return str(make_tiny_encoder(tmp_path_factory.mktemp("static") / "enc"))


@pytest.fixture(scope="module")
def fitted(encoder):
    return TextClassifier(strategy="static", model=encoder, epochs=30, batch_size=8, head_lr=1e-2,
                          progress=False, seed=0).fit(X, Y)


def test_learns_a_separable_toy_problem(fitted):
    # the defaults: the table trains (at its own body LR), attention pooling, a linear head
    params = fitted.resolved_params()
    assert (fitted.regime_, params["body_lr"], params["head"]) == ("full", 1e-2, "linear")
    assert type(fitted.module_.pool).__name__ == "AttentionPool"
    assert fitted.trainable_params_ == fitted.summary()["total_params"]
    assert list(fitted.predict(X[:6])) == Y[:6]


def test_head_only_keeps_the_table_as_distilled(encoder):
    clf = TextClassifier(strategy="static", model=encoder, regime="head-only", pooling="mean", head="mlp",
                         epochs=30, batch_size=8, head_lr=1e-2, progress=False, seed=0)
    clf.fit(X, Y)
    assert 0 < clf.trainable_params_ < clf.summary()["total_params"]
    assert type(clf.module_.pool).__name__ == "NormalizedMean"
    assert list(clf.predict(X[:6])) == Y[:6]


def test_training_words_are_split_as_the_encoders_tokenizer_splits_them():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from headswap.strategies.static import training_vocabulary
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "the": 1, "!": 2, "x": 3, "##x": 4}, unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=True)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok = PreTrainedTokenizerFast(tokenizer_object=wp, unk_token="[UNK]")
    texts = ["Zebra, zebra! The quantum", "ZEBRA quantum, the x!", "x"]
    # lower-cased and split from punctuation as BERT's tokenizer does; most frequent first; seen once
    # ("qua" never) or already one token ("the", "!", "x") left out
    assert training_vocabulary(tok, texts, min_count=2) == ["zebra", ",", "quantum"]
    assert training_vocabulary(tok, texts, min_count=3) == ["zebra"]
    assert training_vocabulary(tok, texts, min_count=0) == []


def test_training_words_join_the_vocabulary(fitted):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(fitted.model)
    added = fitted.static_vocabulary_
    assert added and all(w not in tok.get_vocab() for w in added)
    # each added word is one token of the distilled tokenizer, so one row of the table
    static_tok = fitted.tokenizer_     # model2vec's tokenizer, the one the texts go through (and export saves)
    assert static_tok is fitted.encoder_.tokenizer
    assert all(len(static_tok(w, add_special_tokens=False)["input_ids"]) == 1 for w in added)
    assert fitted.module_.body.embeddings.num_embeddings == len(static_tok.get_vocab())


def test_without_added_words_the_encoders_vocabulary(encoder):
    from transformers import AutoTokenizer
    clf = TextClassifier(strategy="static", model=encoder, static_vocab_min_count=0, epochs=1, batch_size=8,
                         progress=False).fit(X, Y)
    assert clf.static_vocabulary_ == []
    assert clf.module_.body.embeddings.num_embeddings <= len(AutoTokenizer.from_pretrained(encoder).get_vocab())


def test_saves_and_reloads_exactly(fitted, tmp_path):
    fitted.save(tmp_path / "m")
    again = TextClassifier.load(tmp_path / "m", progress=False)
    texts = X[:6] + ["?!", "a text with words it never saw: zebra quantum"]
    np.testing.assert_array_equal(again.predict_proba(texts), fitted.predict_proba(texts))


def test_distils_once_per_base_model_and_vocabulary(encoder, cache, monkeypatch, fitted):
    tables = sorted((cache / "static").iterdir())
    assert tables and all((t / "model.safetensors").is_file() for t in tables)
    import model2vec.distill

    def refuse(*a, **kw):
        raise AssertionError("distilled again although the table is cached")
    monkeypatch.setattr(model2vec.distill, "distill_from_model", refuse)
    TextClassifier(strategy="static", model=encoder, epochs=1, batch_size=8, progress=False).fit(X, Y)
    assert sorted((cache / "static").iterdir()) == tables
    monkeypatch.undo()
    # other training words: another table, distilled once
    TextClassifier(strategy="static", model=encoder, epochs=1, batch_size=8, progress=False).fit(
        [x + " zebra" for x in X], Y)
    assert len(set((cache / "static").iterdir()) - set(tables)) == 1


def test_a_changed_model_gets_its_own_table(tmp_path, cache):
    other = str(make_tiny_encoder(tmp_path / "enc"))   # same architecture, other random weights
    before = set((cache / "static").iterdir())
    TextClassifier(strategy="static", model=other, epochs=1, batch_size=8, progress=False).fit(X, Y)
    assert len(set((cache / "static").iterdir()) - before) == 1


def test_without_the_distiller_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setitem(sys.modules, "model2vec.distill", None)    # import fails as when skeletoken is missing
    enc = str(make_tiny_encoder(tmp_path / "enc"))
    with pytest.raises(ConfigError, match=r"headswap\[static\]"):
        TextClassifier(strategy="static", model=enc, epochs=1, progress=False).fit(X, Y)
    assert not (tmp_path / "empty-cache" / "static").exists() or not any((tmp_path / "empty-cache" / "static")
                                                                        .iterdir())


@pytest.mark.parametrize("kw, message", [
    ({"regime": "lora"}, "no transformer blocks for regime 'lora'"),
    ({"regime": "partial"}, "no transformer blocks for regime 'partial'"),
    ({"instruction": "Classify"}, "takes no instruction"),
])
def test_settings_it_cannot_use_are_refused(encoder, kw, message):
    with pytest.raises(ConfigError, match=message):
        TextClassifier(strategy="static", model=encoder, progress=False, **kw).fit(X, Y)


def test_a_causal_model_is_refused(tmp_path):
    causal = str(make_tiny_causal(tmp_path / "cau"))
    with pytest.raises(ConfigError, match="distills a bidirectional encoder"):
        TextClassifier(strategy="static", model=causal, progress=False).fit(X, Y)


def test_through_the_cli(encoder, tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{x},{y}\n" for x, y in zip(X, Y)))
    out = tmp_path / "model"
    assert main(["train", "--data", str(data), "--strategy", "static", "--model", encoder, "--epochs", "30",
                 "--head-lr", "1e-2", "--batch-size", "8", "--out", str(out), "-q"]) == 0
    config = json.loads((out / "headswap_config.json").read_text())
    assert config["params"]["strategy"] == "static" and config["regime"] == "full"
    assert config["static_vocabulary"] and config["params"]["static_vocab_min_count"] == 2
    capsys.readouterr()
    assert main(["predict", "--model-dir", str(out), "win cash now", "see you at noon"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["label"] for line in lines] == ["spam", "ham"]


def test_cli_refuses_lora_in_one_line(encoder, tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{x},{y}\n" for x, y in zip(X, Y)))
    out = tmp_path / "model"
    assert main(["train", "--data", str(data), "--strategy", "static", "--model", encoder, "--regime", "lora",
                 "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "regime 'lora'" in err[0] and "Traceback" not in err[0]
    assert not out.exists()


def test_in_bench(encoder, tmp_path):
    from headswap.bench.run import run_bench

    folder = tmp_path / "data"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.csv").write_text("text,label\n" + "".join(f"{x},{y}\n" for x, y in zip(X, Y)))
    results = run_bench(folder, models=[encoder], strategies="static", out=tmp_path / "out", epochs=1,
                        batch_size=8, progress=False, estimate=False, log=lambda *_: None)
    rows = [r for r in results["rows"] if r["strategy"] == "static"]
    assert len(rows) == 1 and rows[0]["status"] == "ok", rows
    assert rows[0]["regime"] == "full" and 0 <= rows[0]["macro_f1"] <= 1


# ---- ONNX export: the token table, the pooling and the head as one graph; model2vec's tokenizer beside it ----

NEW = ["win cash now", "see you at noon", "a text with words it never saw: zebra quantum", "?!",
       "[UNK]", "ok " * 200]     # only the unknown token (no row to pool), and one truncated at max_length


@pytest.fixture(scope="module")
def exported(fitted, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from headswap.jobs.export import export
    root = tmp_path_factory.mktemp("static-onnx")
    src = fitted.save(root / "torch")
    entries = {q: export(src, root / q, quantize=q) for q in ("none", "int8")}
    return {"root": root, "torch": src, "entries": entries}


def test_exported_static_model_predicts_like_torch(fitted, exported):
    onnx = TextClassifier.load(exported["root"] / "none")
    assert onnx.runtime_ == "onnx"
    entry = exported["entries"]["none"]
    assert entry["inputs"] == ["input_ids", "attention_mask"] and entry["check"]["max_abs_logit_diff"] < 1e-4
    # model2vec's tokenizer travels with the graph: no special tokens, the unknown token left out
    assert entry["encoder"]["special_tokens"] is False and entry["encoder"]["drop_unk"] is True
    assert [it["input_ids"] for it in onnx.encoder_.encode(NEW)] == [
        it["input_ids"] for it in fitted.encoder_.encode(NEW)]
    assert onnx.encoder_.encode(["[UNK]"])[0]["input_ids"] == []
    np.testing.assert_allclose(onnx.decision_function(NEW), fitted.decision_function(NEW), atol=1e-4, rtol=0)
    p = onnx.predict_proba(NEW)
    assert np.isfinite(p).all() and np.abs(p - fitted.predict_proba(NEW)).max() < 1e-4
    assert list(onnx.predict(NEW)) == list(fitted.predict(NEW))
    # the exported directory still holds the torch model
    again = TextClassifier.load(exported["root"] / "none", runtime="torch")
    np.testing.assert_array_equal(again.predict_proba(NEW), fitted.predict_proba(NEW))


def test_int8_static_export_quantizes_and_runs(fitted, exported):
    import onnx
    ops = {n.op_type for n in onnx.load(str(exported["root"] / "int8" / "model.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul", "DequantizeLinear"}, ops
    assert exported["entries"]["int8"]["quantize"] == "int8"
    clf = TextClassifier.load(exported["root"] / "int8")
    p = clf.predict_proba(NEW)
    assert p.shape == (len(NEW), 2) and np.allclose(p.sum(1), 1, atol=1e-5)
    assert list(clf.predict(X[:6])) == Y[:6]


def test_exported_static_model_through_the_cli(exported, fitted, capsys):
    assert main(["predict", "--model-dir", str(exported["root"] / "none"), *NEW[:3]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["label"] for line in lines] == list(fitted.predict(NEW[:3]))


def test_serve_runs_an_exported_static_model(exported, fitted):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from headswap.serve.app import create_app
    app = create_app(str(exported["root"] / "none"))
    assert app.state.classifier.runtime_ == "onnx"
    with TestClient(app) as c:
        r = c.post("/predict", json={"texts": NEW[:3]})
    assert r.status_code == 200, r.text
    assert [p["label"] for p in r.json()["predictions"]] == list(fitted.predict(NEW[:3]))


def test_a_tampered_static_export_is_one_clear_error(exported, tmp_path, capsys):
    import shutil
    d = tmp_path / "tampered"
    shutil.copytree(exported["root"] / "none", d)
    (d / "tokenizer" / "tokenizer.json").write_text("{not json")
    assert main(["predict", "--model-dir", str(d), "win cash now"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exported tokenizer cannot be read" in err[0] and "Traceback" not in err[0], err
    shutil.copy(exported["root"] / "int8" / "model.onnx", d / "model.onnx")    # another graph, same inputs
    assert main(["predict", "--model-dir", str(d), "win cash now"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.onnx does not match" in err[0] and "sha256" in err[0], err


@pytest.mark.parametrize("pooling", ["attention", "max", "mean"])
def test_a_text_of_only_unknown_words_scores(encoder, pooling):
    # the unknown token is left out, so such a text has no tokens: zeros are pooled, not NaN (a softmax over
    # nothing) nor -inf (a max over nothing), alone in its batch or beside others
    clf = TextClassifier(strategy="static", model=encoder, pooling=pooling, epochs=1, batch_size=8,
                         progress=False, seed=0).fit(X, Y)
    assert clf.encoder_.encode(["[UNK]"])[0]["input_ids"] == []
    for texts in (["[UNK]"], ["[UNK]", "win cash now"]):
        assert np.isfinite(clf.predict_proba(texts)).all()


def test_long_texts_split_into_windows(encoder, tmp_path):
    clf = TextClassifier(strategy="static", model=encoder, max_length=6, chunk_stride=3, epochs=1, batch_size=8,
                         progress=False, seed=0).fit(X, Y)
    long = " ".join(X[:6])
    body = clf.tokenizer_(long, add_special_tokens=False)["input_ids"]
    assert len(body) > 6
    items = clf.encoder_.encode([long, "ok"])
    windows = [it["input_ids"] for it in items if it["text"] == 0]
    # no special tokens around a window: slices of the text's table rows, 3 apart
    assert clf.encoder_.split == 1 and windows == [body[at:at + 6] for at in range(0, len(body) - 6 + 3, 3)]
    assert clf.predict_proba([long, "ok"]).shape == (2, 2)


def test_multi_label(encoder):
    texts = ["win cash now", "see you at noon", "urgent win cash see you at noon", "ok on my way home"] * 6
    labels = [["spam"], ["ham"], ["spam", "ham"], ["ham"]] * 6
    clf = TextClassifier(strategy="static", model=encoder, multi_label=True, epochs=40, batch_size=8,
                         head_lr=1e-2, progress=False, seed=0).fit(texts, labels)
    probs = clf.predict_proba(texts[:4])
    assert probs.shape == (4, 2) and not np.allclose(probs.sum(1), 1.0)   # one sigmoid per label, not a softmax
    spam, ham = clf.labels_.index("spam"), clf.labels_.index("ham")
    assert probs[0, spam] > probs[1, spam] and probs[1, ham] > probs[0, ham]
    assert [tuple(p) for p in clf.predict(texts[:2])] == [("spam",), ("ham",)]


def test_an_unwritable_cache_is_refused_before_distilling(tmp_path, monkeypatch):
    import model2vec.distill
    calls = []
    monkeypatch.setattr(model2vec.distill, "distill_from_model", lambda *a, **k: calls.append(a))
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("HEADSWAP_CACHE", str(tmp_path / "file"))
    enc = str(make_tiny_encoder(tmp_path / "enc"))
    with pytest.raises(HeadswapError, match="set HEADSWAP_CACHE to a writable folder"):
        TextClassifier(strategy="static", model=enc, epochs=1, progress=False).fit(X, Y)
    assert calls == []
