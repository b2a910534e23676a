"""headswap explain: per-word scores for a label (Integrated Gradients on torch models, occlusion on ONNX exports,
exact coefficient shares on TF-IDF), on chunked long texts and multi-label models, from Python, the command line
and the server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from cli_run import invoke
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.errors import HeadswapError
from headswap.explain import explain
from headswap.explain.words import word_spans, without_words
from headswap.baseline.tfidf import TfidfClassifier

pytestmark = pytest.mark.usefixtures("one_thread")

# /work/main/tests -> /work/shared/data locally; in CI the repo clone has shared/ beside it.
SMS = Path(__file__).resolve().parents[2] / "shared" / "data" / "sms_spam"
SPAM = ["win cash now", "free entry txt win to claim your prize", "urgent you have won", "win cash now call this number"]
HAM = ["see you at noon", "running late sorry", "ok on my way home", "call me when you are free"]
FILLER = "hello world this is a test. " * 8        # 96 tokens of the tiny tokenizer, in neither class
TEXTS = (SPAM + HAM + [FILLER + t for t in SPAM + HAM]) * 2
LABELS = (["spam"] * 4 + ["ham"] * 4) * 4
FAST = dict(epochs=10, max_length=20, body_lr=1e-3, head_lr=1e-2, progress=False, seed=0, eval_fraction=0,
            temperature_scaling=False)
# Cue words of SMS spam, and function words that carry no class.
CUES = {"winner", "cash", "prize", "claim", "won", "win", "free", "urgent", "call", "txt", "award", "guaranteed"}
FUNCTION = {"the", "to", "a", "of", "and", "is", "in", "on", "for", "at", "your", "you"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain")
    enc = make_tiny_encoder(root / "enc")
    plain = TextClassifier(model=str(enc), **FAST).fit(TEXTS, LABELS)
    chunked = TextClassifier(model=str(enc), chunk_stride=8, chunk_aggregate="mean", **FAST).fit(TEXTS, LABELS)
    return {"root": root, "enc": enc, "plain": plain, "chunked": chunked, "dir": plain.save(root / "plain")}


@pytest.fixture(scope="module")
def sms_tfidf(tmp_path_factory):
    if not SMS.is_dir():
        pytest.skip(f"{SMS} not present")
    d = pd.read_csv(f"{SMS}/train.csv")
    clf = TfidfClassifier().fit(d.text.tolist(), d.label.tolist())
    return clf, clf.save(tmp_path_factory.mktemp("sms-tfidf") / "m")


def _spam_texts(n: int = 20) -> list[str]:
    d = pd.read_csv(f"{SMS}/test.csv")
    spam = [t for t in d[d.label == "spam"].text if CUES & _lower_words(t) and FUNCTION & _lower_words(t)]
    return spam[:n]


def _lower_words(text: str) -> set[str]:
    return {text[s:e].lower() for s, e in word_spans(text)}


def _cues_above_function_words(explanations) -> float:
    """The share of (cue word, function word) pairs, over texts, in which the cue word scores higher."""
    wins = []
    for ex in explanations:
        assert ex.labels == ["spam"]
        scores = ex.scores["spam"]
        words = [w.lower() for w in ex.words]
        cue = [s for w, s in zip(words, scores) if w in CUES]
        func = [s for w, s in zip(words, scores) if w in FUNCTION]
        wins += [c > f for c in cue for f in func]
    return float(np.mean(wins))


# ---- words ------------------------------------------------------------------------------------------------------


def test_words_are_runs_of_letters_or_punctuation_and_deleting_one_leaves_one_space():
    text = "WINNER!! You've won a £1000 cash-prize"
    assert [text[s:e] for s, e in word_spans(text)] == ["WINNER", "!!", "You've", "won", "a", "£", "1000", "cash",
                                                         "-", "prize"]
    spans = word_spans("a cash prize now")
    assert without_words("a cash prize now", spans, [1]) == "a prize now"
    assert without_words("a cash prize now", spans, [0, 3]) == "cash prize "


# ---- TF-IDF: the coefficients -----------------------------------------------------------------------------------


def test_tfidf_word_scores_sum_to_the_decision_score_and_rank_cues_above_function_words(sms_tfidf):
    clf, _ = sms_tfidf
    texts = _spam_texts()
    exs = clf.explain(texts)
    assert {ex.method for ex in exs} == {"coefficients"} and len(exs) == len(texts)
    # Exact: the words' shares add up to the decision score less the intercept (binary: one row, for spam).
    decision = clf.decision_function(texts) - clf.model_.intercept_[0]
    np.testing.assert_allclose([ex.scores["spam"].sum() for ex in exs], decision, rtol=1e-9, atol=1e-9)
    assert _cues_above_function_words(exs) > 0.8
    ham = clf.explain(["see you at noon"], label="ham")[0]
    spam = clf.explain(["see you at noon"], label="spam")[0]
    np.testing.assert_allclose(ham.scores["ham"], -spam.scores["spam"])


# ---- torch: Integrated Gradients --------------------------------------------------------------------------------


def test_integrated_gradients_are_complete_per_word_and_point_at_the_class(world):
    """Word scores sum to the logit's change from the baseline (the text's tokens as padding), as Integrated
    Gradients promises; a word the tokenizer cuts in pieces is one word."""
    clf = world["plain"]
    text = "urgent you have won the zzyzx prize"      # 'zzyzx' is several byte-level pieces of the tiny tokenizer
    ids = clf.encoder_.encode([text])[0]["input_ids"]
    assert len(ids) - 2 > len(word_spans(text))
    [ex] = clf.explain([text], steps=64)
    assert ex.method == "integrated-gradients" and ex.labels == ["spam"]
    assert ex.words == ["urgent", "you", "have", "won", "the", "zzyzx", "prize"]
    assert not any(w.startswith(("##", "Ġ")) for w in ex.words)
    pad = clf.encoder_.pad_id
    base = [ids[0]] + [pad] * (len(ids) - 2) + [ids[-1]]
    with torch.no_grad():
        logits = clf.module_(input_ids=torch.tensor([ids, base]), attention_mask=torch.ones(2, len(ids),
                                                                                            dtype=torch.long))
    k = clf.labels_.index("spam")
    assert ex.scores["spam"].sum() == pytest.approx(float(logits[0, k] - logits[1, k]), abs=0.005)
    assert ex.words[int(np.argmax(ex.scores["spam"]))] in {"urgent", "won", "prize"}


def test_a_chunked_long_text_maps_every_window_back_to_its_words(world):
    clf = world["chunked"]
    text = FILLER + "urgent you have won"
    assert len(clf.encoder_.encode([text])) > 3       # windows
    [ex] = clf.explain([text])
    assert len(ex.scores["spam"]) == len(word_spans(text)) and ex.words[-4:] == ["urgent", "you", "have", "won"]
    # Every word is in some window, so every word has a score; the class words lead.
    assert np.count_nonzero(ex.scores["spam"]) == len(ex.words)
    assert ex.words[int(np.argmax(ex.scores["spam"]))] in {"urgent", "you", "have", "won"}
    # Mean aggregation: the words' scores sum to the mean over windows of each window's logit change from its
    # baseline (its text tokens as padding, [CLS] and [SEP] kept).
    windows = [it["input_ids"] for it in clf.encoder_.encode([text])]
    k, pad = clf.labels_.index("spam"), clf.encoder_.pad_id
    changes = []
    for ids in windows:
        base = [ids[0]] + [pad] * (len(ids) - 2) + [ids[-1]]
        with torch.no_grad():
            logits = clf.module_(input_ids=torch.tensor([ids, base]),
                                 attention_mask=torch.ones(2, len(ids), dtype=torch.long))
        changes.append(float(logits[0, k] - logits[1, k]))
    assert ex.scores["spam"].sum() == pytest.approx(np.mean(changes), abs=0.005)


def test_a_multi_label_model_explains_each_predicted_label(world):
    texts = ["win cash now", "free call now", "claim prize", "see you at noon", "ok home", "running late",
             "win free cash prize", "see you home late"] * 3
    sets = [["spam", "money"], ["spam"], ["spam", "money"], ["ham"], ["ham"], ["ham", "late"], ["spam", "money"],
            ["ham", "late"]] * 3
    clf = TextClassifier(model=str(world["enc"]), multi_label=True, **{**FAST, "epochs": 30}).fit(texts, sets)
    predicted = clf.predict(["win free cash prize"])[0]
    [ex] = clf.explain(["win free cash prize"])
    assert set(ex.labels) == set(predicted) and len(predicted) >= 2
    for label in ex.labels:
        assert len(ex.scores[label]) == 4 and ex.probabilities[label] >= 0.5
    [only] = clf.explain(["win free cash prize"], label="late")
    assert only.labels == ["late"]


def test_occlusion_on_an_onnx_export_matches_occlusion_on_torch(world):
    pytest.importorskip("onnxruntime")
    from headswap.jobs.export import export
    onnx_dir = world["root"] / "plain-onnx"
    export(world["dir"], onnx_dir)
    onnx = TextClassifier.load(onnx_dir, progress=False)
    text = ["win cash now call me"]
    [a] = onnx.explain(text)
    [b] = world["plain"].explain(text, method="occlusion")
    assert a.method == b.method == "occlusion"
    np.testing.assert_allclose(a.scores["spam"], b.scores["spam"], atol=1e-3)
    # A word's occlusion score is the logit lost without it.
    d = world["plain"].decision_function(["win cash now call me", "cash now call me"])
    k = world["plain"].labels_.index("spam")
    assert b.scores["spam"][0] == pytest.approx(d[0, k] - d[1, k], abs=1e-5)
    # A text of one word, or of one emoji, has nothing left without it: it is scored against a full stop (a blank
    # text, which every model refuses, once stopped this with "column 'text' is empty").
    for lone in ("win", "😀"):
        [a] = onnx.explain([lone])
        d = onnx.decision_function([lone, "."])
        assert a.words == [lone] and a.scores[a.labels[0]][0] == pytest.approx(
            d[0, onnx.labels_.index(a.labels[0])] - d[1, onnx.labels_.index(a.labels[0])], abs=1e-5)


# ---- a real model -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_minilm_on_sms_spam_ranks_cue_words_above_function_words():
    if not SMS.is_dir():
        pytest.skip(f"{SMS} not present")
    d = pd.read_csv(f"{SMS}/train.csv").sample(600, random_state=0)
    clf = TextClassifier(model="minilm", regime="head-only", head="linear", head_fit="logistic", progress=False,
                         eval_fraction=0).fit(d.text.tolist(), d.label.tolist())
    exs = clf.explain(_spam_texts(12), steps=16)
    assert all(ex.method == "integrated-gradients" for ex in exs)
    assert not any(w.startswith("##") for ex in exs for w in ex.words)
    assert _cues_above_function_words(exs) > 0.7


# ---- command line and server ------------------------------------------------------------------------------------


def test_cli_prints_top_words_writes_html_and_json(world, tmp_path):
    page = tmp_path / "why.html"
    rc, out, err = invoke(["explain", str(world["dir"]), "urgent you have won", "see you at noon", "--top", "3",
                           "--html", str(page)])
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("text 1: spam (probability") and "Integrated Gradients" in lines[0]
    assert len(lines) == 2 + 3 + 3 and lines[4 + 0].startswith("text 2: ham")
    html = page.read_text()
    assert html.count('class="ex"') == 2 and "rgba(220, 38, 38" in html and ">urgent</span>" in html
    rc, out, err = invoke(["explain", str(world["dir"]), "urgent you have won", "--json", "--label", "ham"])
    row = json.loads(out)
    assert rc == 0 and row["labels"][0]["label"] == "ham" and len(row["labels"][0]["words"]) == 4


def test_cli_reads_texts_from_a_file(sms_tfidf, tmp_path):
    _, model_dir = sms_tfidf
    f = tmp_path / "texts.csv"
    pd.DataFrame({"text": _spam_texts(3)}).to_csv(f, index=False)
    rc, out, err = invoke(["explain", str(model_dir), "--data", str(f), "--top", "2"])
    assert rc == 0, err
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("text")] == ["text 1", "text 2",
                                                                                          "text 3"]
    assert "TF-IDF coefficients" in out


@pytest.mark.parametrize("args, message", [
    ([], "give the texts to explain"),
    (["hi", "--data", "x.csv"], "two inputs"),
    (["  "], "text 1 on the command line is empty"),
    (["hi", "--label", "nope"], "label 'nope' is not one of the model's labels"),
    (["hi", "--method", "coefficients"], "method 'coefficients' explains a TF-IDF model"),
    (["--data", "missing.csv"], "missing.csv: file not found"),
])
def test_bad_input_is_one_line_and_exit_2(world, args, message):
    rc, out, err = invoke(["explain", str(world["dir"]), *args])
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_tfidf_model_asked_for_gradients_is_pointed_at_its_coefficients(sms_tfidf):
    clf, _ = sms_tfidf
    with pytest.raises(HeadswapError, match="TF-IDF model, whose words are explained exactly by its coefficients: "
                                            "use method 'coefficients'"):
        explain(clf, ["win cash"], method="integrated-gradients")


def test_the_cli_shows_a_bar_over_several_texts_and_none_under_q(world):
    rc, _, err = invoke(["explain", str(world["dir"]), "urgent you have won", "see you at noon"])
    assert rc == 0 and "explain: 100%" in err and "2/2" in err, err
    rc, _, err = invoke(["explain", str(world["dir"]), "urgent you have won", "see you at noon", "-q"])
    assert rc == 0 and err == "", err


def test_bad_model_dir_is_one_line(tmp_path):
    rc, _, err = invoke(["explain", str(tmp_path / "nothing"), "hi"])
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_python_api_refuses_bad_input(world):
    with pytest.raises(HeadswapError, match="text 2 to explain is empty"):
        world["plain"].explain(["ok", " "])
    with pytest.raises(HeadswapError, match="unknown explanation method"):
        world["plain"].explain(["ok"], method="lime")
    with pytest.raises(HeadswapError, match="not fitted"):
        TextClassifier().explain(["ok"])


def test_serve_explain_route(world):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from headswap.serve.app import create_app
    with TestClient(create_app(world["plain"])) as client:
        r = client.post("/explain", json={"texts": ["urgent you have won"], "top": 2})
        assert r.status_code == 200
        [row] = r.json()["explanations"]
        assert row["method"] == "integrated-gradients" and len(row["labels"][0]["words"]) == 2
        assert client.post("/explain", json={"texts": ["ok"], "label": "nope"}).status_code == 422
        assert client.post("/explain", json={"texts": []}).status_code == 422
        # predictions after an explanation are unchanged: the gradients' hooks are gone
        p = client.post("/predict", json={"texts": ["urgent you have won"]}).json()["predictions"][0]
        assert p["probabilities"]["spam"] == pytest.approx(
            float(world["plain"].predict_proba(["urgent you have won"])[0, 1]), abs=1e-5)
