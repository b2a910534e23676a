"""Long texts: chunk_stride splits a text longer than max_length into overlapping windows, each window trains
with its text's label, and every prediction path aggregates the windows' logits back to one row per text
(headswap.nn.inference.per_text), exactly alike on torch and on an ONNX export."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from assertions import same_scores
from cli_run import invoke
from tiny_models import make_tiny_encoder
from transformers import AutoTokenizer

from headswap import TextClassifier
from headswap.errors import ConfigError
from headswap.nn.inference import per_text
from headswap.text.encoding import TextEncoder
from headswap.text.prompts import encode_plain

pytestmark = pytest.mark.usefixtures("one_thread")

SPAM = ["win cash now", "free entry txt win to claim your prize", "urgent you have won", "win cash now call this number"]
HAM = ["see you at noon", "running late sorry", "ok on my way home", "call me when you are free"]
FILLER = "hello world this is a test. " * 8        # 96 tokens of the tiny tokenizer, in neither class
# Short texts, and the same behind the filler: a truncated long text shows its model only the filler.
TEXTS = (SPAM + HAM + [FILLER + t for t in SPAM + HAM]) * 2
LABELS = (["spam"] * 4 + ["ham"] * 4) * 4
# The class is only at the end, beyond the first window.
LONG = [FILLER + "urgent you have won", FILLER + "see you at noon ok on my way home"]
MIXED = ["win cash now", LONG[0], "ok", LONG[1], "see you at noon", FILLER]
# A tiny model that learns the two classes in a second (pretrained-sized learning rates barely move it).
FAST = dict(epochs=10, max_length=20, body_lr=1e-3, head_lr=1e-2, progress=False, seed=0)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("long-text")
    enc = make_tiny_encoder(root / "enc")
    chunked = TextClassifier(model=str(enc), chunk_stride=8, eval_fraction=0, temperature_scaling=False,
                             chunk_aggregate="max", **FAST).fit(TEXTS, LABELS)
    truncated = TextClassifier(model=str(enc), eval_fraction=0, temperature_scaling=False, **FAST).fit(TEXTS, LABELS)
    return {"root": root, "enc": enc, "tok": AutoTokenizer.from_pretrained(str(enc)), "chunked": chunked,
            "truncated": truncated}


def test_windows_overlap_by_the_stated_tokens_and_keep_the_special_tokens(world):
    tok = world["tok"]
    encoder = TextEncoder(tok, "plain", max_length=20, chunk_stride=8)
    body = encode_plain(tok, FILLER)
    assert len(body) == 96
    items = encoder.encode([FILLER])
    # 18 text tokens a window (20 less [CLS] and [SEP]), starts 0, 8, ..., 80: the one at 80 reaches the end.
    assert len(items) == 1 + math.ceil((96 - 18) / 8) == 11
    assert encoder.split == 1 and {it["text"] for it in items} == {0}
    for k, item in enumerate(items):
        ids = item["input_ids"]
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert ids[1:-1] == body[8 * k: 8 * k + 18]
        assert len(ids) == (20 if k < 10 else 2 + 96 - 80)
    for a, b in zip(items, items[1:]):     # consecutive windows share 18 - 8 = 10 text tokens
        assert a["input_ids"][1 + 8:-1] == b["input_ids"][1:1 + 10]
    assert items[-1]["input_ids"][-2] == body[-1]


def test_a_short_text_is_one_item_exactly_as_without_chunking(world):
    tok = world["tok"]
    plain = TextEncoder(tok, "plain", max_length=20).encode(["win cash now"], [1])
    chunked = TextEncoder(tok, "plain", max_length=20, chunk_stride=8).encode(["win cash now"], [1])
    assert chunked == [{**plain[0], "text": 0}]


def test_every_window_trains_with_its_texts_label(world):
    encoder = TextEncoder(world["tok"], "plain", max_length=20, chunk_stride=8)
    items = encoder.encode(["ok", LONG[1]], [0, 1])
    assert [it["label"] for it in items] == [0] + [1] * (len(items) - 1) and len(items) > 3


def test_one_row_per_text_in_input_order(world):
    clf = world["chunked"]
    logits = clf.decision_function(MIXED)
    assert logits.shape == (len(MIXED), 2)
    alone = np.vstack([clf.decision_function([t]) for t in MIXED])
    np.testing.assert_allclose(logits, alone, atol=1e-5)
    assert len(clf.predict(MIXED)) == len(MIXED) and clf.predict_proba(MIXED).shape == (len(MIXED), 2)


def test_mean_and_max_aggregate_the_window_logits(world):
    clf = world["chunked"]
    items = clf.encoder_.encode(MIXED)
    windows = clf.module_.logits(items, clf.encoder_.collate)
    owner = np.array([it["text"] for it in items])
    assert len(windows) > len(MIXED)
    mean = np.vstack([windows[owner == i].mean(0) for i in range(len(MIXED))])
    high = np.vstack([windows[owner == i].max(0) for i in range(len(MIXED))])
    np.testing.assert_allclose(per_text(windows, items, "mean"), mean, atol=1e-6)
    np.testing.assert_allclose(clf.decision_function(MIXED), high, atol=1e-5)     # the model aggregates by max
    p = np.exp(high) / np.exp(high).sum(1, keepdims=True)                          # softmax after the max
    np.testing.assert_allclose(clf.predict_proba(MIXED), p, atol=1e-5)
    # Hand-made logits: two windows of text 0, one of text 1.
    hand = np.array([[1.0, -2.0], [3.0, 0.0], [0.5, 0.5]], dtype=np.float32)
    owners = [{"text": 0}, {"text": 0}, {"text": 1}]
    assert per_text(hand, owners, "mean").tolist() == [[2.0, -1.0], [0.5, 0.5]]
    assert per_text(hand, owners, "max").tolist() == [[3.0, 0.0], [0.5, 0.5]]


def test_a_class_signal_at_the_end_is_found_by_chunking_not_by_truncation(world):
    chunked, truncated = world["chunked"], world["truncated"]
    spam, ham = list(chunked.classes_).index("spam"), list(chunked.classes_).index("ham")
    p, q = chunked.predict_proba(LONG), truncated.predict_proba(LONG)
    assert list(chunked.predict(LONG)) == ["spam", "ham"]
    assert p[0, spam] > 0.6 and p[1, ham] > 0.6
    # Truncated, both texts are the same first 20 tokens: one answer for both, and less sure of the right one.
    np.testing.assert_allclose(q[0], q[1], atol=1e-6)
    assert q[0, spam] < p[0, spam] and q[1, ham] < p[1, ham]


def test_auto_picks_the_better_aggregation_on_validation_and_it_survives_save_and_load(world):
    clf = TextClassifier(model=str(world["enc"]), chunk_stride=8, **FAST).fit(TEXTS, LABELS, LONG * 3,
                                                                            ["spam", "ham"] * 3)
    assert clf.chunk_aggregate == "auto" and clf.chunk_aggregate_ in ("mean", "max")
    items = clf.encoder_.encode(LONG * 3)
    windows = clf.module_.logits(items, clf.encoder_.collate)
    truth = np.array([list(clf.classes_).index(y) for y in ["spam", "ham"] * 3])
    from headswap.metrics import metrics_from_logits
    scores = {how: metrics_from_logits(per_text(windows, items, how), truth, list(clf.labels_)).score("macro_f1")
              for how in ("mean", "max")}
    assert scores[clf.chunk_aggregate_] == max(scores.values())
    path = clf.save(world["root"] / "auto")
    config = json.loads((path / "headswap_config.json").read_text())
    assert config["params"]["chunk_stride"] == 8 and config["chunk_aggregate"] == clf.chunk_aggregate_
    again = TextClassifier.load(path, progress=False)
    assert again.chunk_stride == 8 and again.chunk_aggregate_ == clf.chunk_aggregate_
    same_scores(again.predict_proba(MIXED), clf.predict_proba(MIXED))


def test_an_onnx_export_chunks_and_aggregates_as_torch_does(world):
    pytest.importorskip("onnxruntime")
    from headswap.jobs.export import export
    source = world["chunked"].save(world["root"] / "chunked")
    export(source, world["root"] / "chunked-onnx")
    onnx = TextClassifier.load(world["root"] / "chunked-onnx", progress=False)
    torch_ = TextClassifier.load(source, progress=False)
    assert onnx.runtime_ == "onnx" and onnx.encoder_.chunk_stride == 8 and onnx.chunk_aggregate_ == "max"
    assert len(onnx.encoder_.encode(LONG)) > len(LONG)
    p, q = onnx.predict_proba(MIXED), torch_.predict_proba(MIXED)
    assert p.shape == (len(MIXED), 2)
    assert np.abs(p - q).max() < 1e-4


def test_multi_label_chunking_gives_one_row_per_text(world):
    clf = TextClassifier(model=str(world["enc"]), chunk_stride=8, multi_label=True, eval_fraction=0,
                         **{**FAST, "epochs": 2}).fit(TEXTS, [(y,) for y in LABELS])
    assert clf.predict_proba(MIXED).shape == (len(MIXED), 2) and len(clf.predict(MIXED)) == len(MIXED)


@pytest.mark.parametrize("settings, words", [
    ({"chunk_stride": 0}, "chunk_stride"),
    ({"chunk_stride": 20}, "below max_length 20"),
    ({"chunk_stride": 8, "strategy": "cross-encoder"}, "'cross-encoder'"),
])
def test_bad_chunk_settings_are_a_config_error(world, settings, words):
    with pytest.raises(ConfigError, match=words):
        TextClassifier(model=str(world["enc"]), max_length=20, **settings).resolved_params()


def test_a_stride_that_would_skip_text_is_refused(world):
    with pytest.raises(ConfigError, match="at most the 18 text tokens"):
        TextEncoder(world["tok"], "plain", max_length=20, chunk_stride=19)
    with pytest.raises(ConfigError, match="prompt encoder truncates"):
        TextEncoder(world["tok"], "prompt", max_length=20, chunk_stride=8,
                    prompt=type("P", (), {"prefix": "Text: ", "suffix": " Answer:"})())


@pytest.fixture(scope="module")
def data_dir(world):
    data = world["root"] / "data"
    data.mkdir()
    rows = "text,label\n" + "".join(f'"{t}",{y}\n' for t, y in zip(TEXTS, LABELS))
    for split in ("train", "validation"):
        (data / f"{split}.csv").write_text(rows)
    (data / "test.csv").write_text("text,label\n" + "".join(f'"{t}",{y}\n' for t, y in
                                                           zip(MIXED, ["spam", "spam", "ham", "ham", "ham", "ham"])))
    return data


@pytest.mark.parametrize("flags, words", [
    (["--chunk-stride", "0"], "--chunk-stride"),
    (["--chunk-stride", "128"], "chunk_stride 128 must be below max_length 128"),
    (["--chunk-stride", "8", "--strategy", "cross-encoder"], "strategy 'cross-encoder'"),
    (["--chunk-aggregate", "median"], "--chunk-aggregate"),
])
def test_cli_refuses_bad_chunk_options_in_one_line(world, data_dir, flags, words):
    rc, _, err = invoke(["train", "--data", str(data_dir), "--model", str(world["enc"]), "--out",
                          str(world["root"] / "never"), "-q", *flags])
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and words in lines[0], err
    assert not (world["root"] / "never" / "headswap_config.json").exists()


def test_cli_train_predict_and_eval_chunk(world, data_dir):
    out = world["root"] / "cli-model"
    rc, _, err = invoke(["train", "--data", str(data_dir), "--model", str(world["enc"]), "--out", str(out), "-q",
                          "--max-length", "20", "--chunk-stride", "8", "--epochs", "1"])
    assert rc == 0, err
    config = json.loads((out / "headswap_config.json").read_text())
    assert config["params"]["chunk_stride"] == 8 and config["chunk_aggregate"] in ("mean", "max")
    rc, stdout, err = invoke(["predict", "--model-dir", str(out), "--data", str(data_dir / "test.csv"), "-q"])
    assert rc == 0, err
    rows = [json.loads(line) for line in stdout.splitlines()]
    assert [r["text"] for r in rows] == MIXED
    expected = TextClassifier.load(out, progress=False).predict_proba(MIXED)
    got = np.array([[r["probabilities"][lab] for lab in config["labels"]] for r in rows])
    assert np.abs(got - expected).max() < 1e-5
    rc, stdout, err = invoke(["eval", "--model-dir", str(out), "--data", str(data_dir / "test.csv"), "-q",
                               "--out", str(world["root"] / "cli-eval")])
    assert rc == 0, err


@pytest.mark.parametrize("strategy, causal", [("similarity", False), ("setfit", False),
                                              ("causal-embedding-mlp", True)])
def test_every_chunking_strategy_gives_one_row_per_text(world, strategy, causal):
    model = world["enc"]
    if causal:
        from tiny_models import make_tiny_causal
        model = make_tiny_causal(world["root"] / "causal")
    clf = TextClassifier(model=str(model), strategy=strategy, chunk_stride=8, eval_fraction=0, progress=False,
                         epochs=1, max_length=20, pair_iterations=1).fit(TEXTS, LABELS)
    items = clf.encoder_.encode(MIXED)
    assert len(items) > len(MIXED) and all(len(it["input_ids"]) <= 20 for it in items)
    if causal:     # the EOS the last-token pooling reads closes every window
        assert all(it["input_ids"][-1] == clf.tokenizer_.eos_token_id for it in items)
    assert clf.predict_proba(MIXED).shape == (len(MIXED), 2) and len(clf.predict(MIXED)) == len(MIXED)
