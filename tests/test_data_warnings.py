"""Data that trains, but not as the user likely meant (issue 23's probe): labels that differ only by surrounding
whitespace, and duplicate texts on both sides of the validation hold-out. Each is a warning, printed once; the
data itself is kept exactly as given."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest
from tiny_models import make_tiny_encoder

from headswap import TextClassifier
from headswap.data.load import LabelledData, from_lists
from headswap.data.sampling import stratified_split

pytestmark = pytest.mark.usefixtures("one_thread")


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_labels_that_differ_only_by_whitespace_are_kept_and_warned_about(tmp_path, caplog):
    enc = make_tiny_encoder(tmp_path / "enc")
    texts = ["win cash now", "free call now", "see you at noon", "ok home", "on my way"] * 2
    labels = ["junk", "junk", "fine", "fine ", "fine"] * 2
    with caplog.at_level(logging.WARNING):
        clf = TextClassifier(model=str(enc), epochs=1, progress=False, eval_fraction=0).fit(texts, labels)
    assert list(clf.classes_) == ["fine", "fine ", "junk"]           # not stripped: three classes, as written
    found = [m for m in _warnings(caplog) if "surrounding whitespace" in m]
    assert found == ["training data: labels 'fine' and 'fine ' differ only by surrounding whitespace, so they are 2 "
                     "separate classes; labels are kept exactly as written: fix the data if they are one class"]


def test_duplicates_across_the_hold_out_are_counted(caplog):
    texts = [f"text {i % 15}" for i in range(60)]                      # every text four times
    data = from_lists(texts, ["a" if i % 2 else "b" for i in range(60)], "dupes.csv")
    with caplog.at_level(logging.WARNING):
        train, val = stratified_split(data, 0.25, seed=3)
    leaked = sum(t in set(train.texts) for t in val.texts)
    assert leaked > 0
    assert [m for m in _warnings(caplog) if "held out" in m] == [
        f"dupes.csv: {leaked} of the {len(val)} texts held out for validation also appear in the training part "
        f"(duplicate texts), so the validation score (which picks the best epoch and fits the calibration) is "
        f"optimistic; remove duplicates to hold out unseen texts"]
    assert len(train) + len(val) == 60                                  # nothing dropped or moved


def test_no_warning_for_clean_data(caplog):
    data = LabelledData([f"unique text {i}" for i in range(40)], ["x", "y"] * 20, "clean.csv", list(range(2, 42)))
    with caplog.at_level(logging.WARNING):
        stratified_split(data, 0.2, seed=0)
    assert _warnings(caplog) == []


def test_the_command_line_prints_each_warning_once(tmp_path):
    enc = make_tiny_encoder(tmp_path / "enc")
    data = tmp_path / "d"
    data.mkdir()
    rows = [("win cash now", "spam"), ("free call now", "spam"), ("see you at noon", "ham"), ("ok home", "ham "),
            ("on my way", "ham")] * 6                                  # 30 texts, each five times
    (data / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "train", "--data", str(data), "--model", str(enc),
                        "--epochs", "1", "--eval-fraction", "0.2", "--out", str(tmp_path / "m"), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    whitespace = [x for x in lines if "differ only by surrounding whitespace" in x]
    assert whitespace == [f"{data / 'train.csv'}: labels 'ham' and 'ham ' differ only by surrounding whitespace, so "
                          f"they are 2 separate classes; labels are kept exactly as written: fix the data if they "
                          f"are one class"]
    held = [x for x in lines if "held out for validation" in x]
    assert len(held) == 1
    n, of = map(int, re.search(r": (\d+) of the (\d+) texts held out", held[0]).groups())
    assert n == of > 0                                                  # every held-out text is also in training


# ---- issue 33: label sets trained as classes, validation on the training file ---------------------------------

@pytest.mark.parametrize("labels, warned", [
    (["admiration|joy", "joy", "anger|joy", "anger"], True),        # parts recur: label sets
    (["a|b", "c|d", "a|d"], True),
    (["admiration|joy", "anger"], False),                           # one joined name: may be a class of its own
    (["win|lose", "draw|tie", "other"], False),                     # joined names whose parts never recur
    (["ham", "spam"], False)])
def test_label_sets_in_single_label_data_are_warned_about(caplog, labels, warned):
    from headswap.data.once import _warned
    from headswap.data.multilabel import warn_if_label_sets
    _warned.clear()
    with caplog.at_level(logging.WARNING):
        warn_if_label_sets(labels, "d.csv")
    found = [m for m in _warnings(caplog) if "--multi-label" in m]
    assert len(found) == int(warned)
    if warned:
        assert found[0].startswith("d.csv: ") and "looks like multi-label data" in found[0]


def test_the_command_line_warns_of_label_sets_and_of_eval_data_that_is_the_training_file(tmp_path):
    enc = make_tiny_encoder(tmp_path / "enc")
    rows = [("so happy", "joy"), ("what a hero", "admiration|joy"), ("so angry", "anger"),
            ("angry and glad", "anger|joy")] * 4
    data = tmp_path / "train.csv"
    data.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "train", "--data", str(data), "--eval-data", str(data),
                        "--model", str(enc), "--epochs", "1", "--out", str(tmp_path / "m"), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert [x for x in lines if "--multi-label" in x] == [
        f"{data}: 2 of the 4 labels join names with '|' (e.g. 'admiration|joy'), which looks like multi-label data; "
        f"each combination is trained as a class of its own: pass --multi-label (multi_label=True) if a text has "
        f"a set of labels"]
    assert [x for x in lines if "is the training file" in x] == [
        f"--eval-data {data} is the training file: its scores are measured on texts the model trained on, so they "
        f"are optimistic; hold out other texts"]


@pytest.mark.parametrize("labels, sep", [
    (["admiration;joy", "joy", "anger;joy", "anger"], ";"),
    (["admiration,joy", "anger,joy", "anger"], ","),
    (["a+b", "c+d", "a+d"], "+"),
    (["C++", "C#", "C++ / C"], None),                                  # '+' with nothing on one side: a name
    (["yes, please", "no, thanks", "yes, thanks"], None)])             # ', ': prose, not a separator
def test_label_sets_joined_by_other_separators_are_warned_about(caplog, labels, sep):
    from headswap.data.multilabel import warn_if_label_sets
    from headswap.data.once import _warned
    _warned.clear()
    with caplog.at_level(logging.WARNING):
        warn_if_label_sets(labels, "d.csv")
    found = [m for m in _warnings(caplog) if "--multi-label" in m]
    assert len(found) == int(sep is not None)
    if sep:
        assert f"join names with {sep!r}" in found[0]
        assert f"pass --multi-label --label-separator '{sep}' (multi_label=True, label_separator={sep!r})" in found[0]


def test_the_label_separator_given_is_looked_for_too(caplog):
    from headswap.data.multilabel import warn_if_label_sets
    from headswap.data.once import _warned
    _warned.clear()
    with caplog.at_level(logging.WARNING):
        warn_if_label_sets(["a/b", "b/c", "a"], "d.csv", separator="/")
    assert [m for m in _warnings(caplog) if "join names with '/'" in m]


def test_emoji_only_texts_warn_before_and_after_training(tmp_path):
    """The probe's case in miniature: emoji through a WordPiece vocabulary are all [UNK], so every text is nearly
    the same input and the loss stays at ln 2. Both are said on the command line, once each."""
    from tiny_models import make_tiny_wordpiece_encoder
    enc = make_tiny_wordpiece_encoder(tmp_path / "enc")
    rows = [("😀 😀", "pos"), ("🎉", "pos"), ("🔥 ❤️", "pos"), ("😢", "neg"), ("😡 😡 😡", "neg"), ("💀", "neg")] * 4
    data = tmp_path / "train.csv"
    data.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "headswap.cli", "train", "--data", str(data), "--model", str(enc),
                        "--epochs", "2", "--eval-fraction", "0", "--out", str(tmp_path / "m"), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    alike = [x for x in r.stderr.splitlines() if "look alike" in x]
    assert alike == [f"training data: the texts look alike to {enc}'s tokenizer: 24 of 24 texts (100%) encode to "
                     f"nothing but the unknown token '[UNK]'; 6 distinct texts encode to 3 distinct inputs, so the "
                     f"model cannot tell them apart and can only learn the class frequencies; use a model whose "
                     f"vocabulary covers these texts (emoji or a script it lacks become the unknown token)"]
    learned = [x for x in r.stderr.splitlines() if "learned (almost) nothing" in x]
    assert len(learned) == 1 and "(0.6931, the loss of answering the class frequencies for every text, ln 2)" in \
        learned[0], r.stderr


def test_conflicting_labels_a_single_text_class_and_too_few_texts_are_named(tmp_path, caplog):
    """The same text under opposite labels 40 times, a class of one text, five texts in all: each a warning of its
    own, naming the rows and classes (before, only "learned (almost) nothing" after training, or nothing)."""
    from headswap.data.checks import warn_weak_labels
    from headswap.data.once import _warned

    _warned.clear()
    texts = ["same text"] * 40 + [f"message {i}" for i in range(20)]
    labels = ["a", "b"] * 20 + ["a", "b"] * 10
    with caplog.at_level(logging.WARNING):
        warn_weak_labels(from_lists(texts, labels, "conf.csv"))
        warn_weak_labels(from_lists(["win cash", "hello", "free prize", "see you", "lonely"],
                                    ["spam", "ham", "spam", "ham", "other"], "five.csv"))
        warn_weak_labels(from_lists([f"message {i}" for i in range(20)], ["a", "b"] * 10, "fine.csv"))
    found = _warnings(caplog)
    assert found[0].startswith("conf.csv: 1 text (40 rows) carries more than one label, e.g. 'same text' as 'a' "
                               "(conf.csv, item 1) and 'b' (conf.csv, item 2): no model can learn both"), found
    assert found[1].startswith("five.csv: 1 class with a single training text ('other'): too few to learn")
    assert found[2].startswith("five.csv: 5 training texts for 3 classes: too few for a model to learn from")
    assert len(found) == 3      # ten texts of two classes, no clash: nothing said
