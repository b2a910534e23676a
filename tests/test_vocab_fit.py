"""A model that learned nothing says so: texts its vocabulary reads as the same input (emoji through a WordPiece
vocabulary become [UNK]) are measured and warned about before training, a training loss that never left the
constant answer's is warned about after it, and a tie in predict's output is marked as one."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from tiny_models import make_tiny_encoder, make_tiny_wordpiece_encoder
from transformers import AutoTokenizer

from headswap.jobs.predictions import tied_classes
from headswap.teach.tokenizer import ByteTokenizer
from headswap.text.vocab_fit import SAMPLE, measure, warn_if_inputs_alike
from headswap.train.learned import TOLERANCE, constant_loss, warn_if_nothing_learned

pytestmark = pytest.mark.usefixtures("one_thread")

EMOJI = ["😀", "😀 😀", "🎉", "🔥 ❤️ 🔥"]


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    return AutoTokenizer.from_pretrained(make_tiny_wordpiece_encoder(tmp_path_factory.mktemp("wp") / "enc"))


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    return AutoTokenizer.from_pretrained(make_tiny_encoder(tmp_path_factory.mktemp("bpe") / "enc"))


@pytest.fixture(autouse=True)
def _fresh_warnings(fresh_warnings):
    yield


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_measure_counts_unknown_tokens_pieces_and_distinct_inputs(wordpiece):
    texts = [*EMOJI, "win cash now", "see you at noon"]
    fit = measure(wordpiece, texts)
    ids = [wordpiece(t, add_special_tokens=False)["input_ids"] for t in texts]
    unk = wordpiece.unk_token_id
    assert ids[0] == [unk] and ids[1] == [unk, unk]                  # what the figures below are made of
    tokens = sum(map(len, ids))
    assert fit.texts == fit.distinct_texts == 6
    assert fit.all_unknown == 4 and fit.unknown_token == "[UNK]"
    assert fit.distinct_inputs == 5                                     # 😀 and 🎉 are one input: [UNK]
    assert fit.unknown_rate == pytest.approx(sum(i.count(unk) for i in ids) / tokens)
    assert fit.pieces_per_word == pytest.approx(tokens / sum(len(t.split()) for t in texts))
    assert fit.inputs_alike


def test_texts_the_vocabulary_reads_are_not_alike(wordpiece, bpe):
    texts = ["win cash now", "see you at noon", "call me when you are free", "running late sorry", "ok on my way home"]
    for tok in (wordpiece, bpe):
        fit = measure(tok, texts)
        assert not fit.inputs_alike and fit.all_unknown == 0 and fit.distinct_inputs == 5
    assert measure(bpe, EMOJI).all_unknown == 0                         # byte-level BPE reads emoji


def test_inputs_cut_at_max_length_collapse(bpe):
    texts = [f"win cash now call this number {i}" for i in range(10)]
    assert measure(bpe, texts).distinct_inputs == 10
    cut = measure(bpe, texts, max_length=3)
    assert cut.distinct_inputs == 1 and cut.inputs_alike


def test_a_large_set_is_measured_on_a_seeded_sample(bpe):
    texts = [f"text number {i}" for i in range(SAMPLE + 500)]
    a, b = measure(bpe, texts), measure(bpe, texts)
    assert a == b and a.texts == SAMPLE and measure(bpe, texts, sample=50).texts == 50


def test_the_warning_is_one_line_and_a_foreign_tokenizer_is_skipped(wordpiece, caplog):
    with caplog.at_level(logging.WARNING):
        warn_if_inputs_alike(wordpiece, EMOJI * 3, "tiny")
        warn_if_inputs_alike(wordpiece, EMOJI * 3, "tiny")               # once per process
        assert warn_if_inputs_alike(ByteTokenizer(), EMOJI, "bytes") is None
    assert _warnings(caplog) == [
        "training data: the texts look alike to tiny's tokenizer: 12 of 12 texts (100%) encode to nothing but the "
        "unknown token '[UNK]'; 4 distinct texts encode to 3 distinct inputs, so the model cannot tell them apart "
        "and can only learn the class frequencies; use a model whose vocabulary covers these texts (emoji or a "
        "script it lacks become the unknown token)"]


def test_the_constant_answers_loss_is_the_weighted_entropy_of_the_classes():
    assert constant_loss(["a", "b"] * 5) == pytest.approx(math.log(2))
    assert constant_loss(["a", "b", "c"] * 2) == pytest.approx(math.log(3))
    assert constant_loss(["a"] * 3 + ["b"]) == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert constant_loss(["a"] * 3 + ["b"], {"a": 1.0, "b": 3.0}) == pytest.approx(math.log(2))   # 'balanced'


@pytest.mark.parametrize("losses, warned", [([0.6931, 0.6931], True), ([0.70, math.log(2) * (1 - TOLERANCE) + 1e-4], True),
                                            ([0.69, math.log(2) * (1 - TOLERANCE) - 1e-4], False), ([0.5], False)])
def test_a_loss_that_never_left_its_start_is_warned_about(caplog, losses, warned):
    history = [{"epoch": i + 1, "train_loss": x} for i, x in enumerate(losses)]
    with caplog.at_level(logging.WARNING):
        assert warn_if_nothing_learned(history, ["a", "b"] * 10) is warned
    found = [m for m in _warnings(caplog) if "learned (almost) nothing" in m]
    assert len(found) == int(warned)
    if warned:
        assert f"at best {min(losses):.4f} in {len(losses)} epochs" in found[0] and "(0.6931," in found[0]
        assert "ln 2" in found[0]


def test_ties_are_the_classes_within_a_millionth_of_the_top():
    probs = np.array([[0.5, 0.5, 0.0], [0.4, 0.3, 0.3], [0.3333334, 0.3333333, 0.3333333], [0.2, 0.4, 0.4]])
    assert tied_classes(probs, ["a", "b", "c"], ["a", "a", "a", "b"]) == [
        ["a", "b"], None, ["a", "b", "c"], ["b", "c"]]
    assert tied_classes(probs[:1], ["a", "b", "c"], ["oos"]) == [None]   # a rejected text answers no tied class


def test_predict_marks_a_tie_and_counts_them(tmp_path, capsys, caplog):
    """A model whose head is all zeros gives every text the logits 0, 0: exactly 0.5 and 0.5, a tie."""
    from headswap import TextClassifier
    from headswap.cli.parser import main

    enc = make_tiny_encoder(tmp_path / "enc")
    clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0).fit(
        ["win cash now", "free call now", "see you at noon", "ok home"] * 3, ["spam", "spam", "ham", "ham"] * 3)
    for p in clf.module_.head.parameters():
        p.data.zero_()
    clf.save(tmp_path / "m")
    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        assert main(["predict", "-q", "--model-dir", str(tmp_path / "m"), "win", "noon"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["label"], r["tied"], r["probabilities"]) for r in rows] == [("ham", ["ham", "spam"],
                                                                            {"ham": 0.5, "spam": 0.5})] * 2
    assert [m for m in _warnings(caplog) if "are ties:" in m] == [
        '2 of 2 texts are ties: their top classes\' probabilities are equal (within 1e-06), so the label given, the '
        'first tied class in label order, decides nothing; those rows list the tied classes under "tied"']


def test_a_table_of_predictions_counts_its_ties(caplog):
    """--engine ray writes a table, whose columns are the same for every batch: its ties are counted, not marked."""
    pa = pytest.importorskip("pyarrow")
    from headswap.jobs.batch import _warn_ties
    table = pa.table({"text": ["a", "b", "c"], "label": ["ham", "spam", "ham"], "proba_ham": [0.5, 0.1, 0.7],
                      "proba_spam": [0.5, 0.9, 0.3]})
    with caplog.at_level(logging.WARNING):
        _warn_ties(table)
        _warn_ties(table.slice(1, 2))
    assert [m for m in _warnings(caplog) if "are ties:" in m] == [
        "1 of 3 texts are ties: their top classes' probabilities are equal (within 1e-06), so the label given, the "
        "first tied class in label order, decides nothing; their proba_<label> columns show which"]
