"""The language-fit warning: before training, a body whose vocabulary was not made for the texts' language (German
through MiniLM's English WordPiece) is named in one line with its figures and the multilingual alternatives; English
texts through it stay silent. auto ranks the bodies that fit first and records every body's fit. Tokenizers only
(MiniLM's, which ships with the package, and tiny WordPiece ones built here), and one tiny encoder for fit()."""

from __future__ import annotations

import logging

import pytest
from tiny_models import make_tiny_wordpiece_encoder
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from headswap import TextClassifier
from headswap.data.once import _warned
from headswap.models import load_tokenizer
from headswap.text import language_fit
from headswap.text.language_fit import (PIECES_PER_WORD, fit_note, language_fit as fit_of, rank_by_fit,
                                        warn_if_language_misfits, words_only)

GERMAN = ["@Ralf_Stegner Dich mag ja immer noch keiner. Geh in Rente und verzichte auf die Hälfte deiner Pension",
          "Höchste Zeit und in gemeinsamer internationaler Kraftanstrengung, sowie gebotener Härte.",
          "Die Bundesregierung verschleudert unsere Steuergelder für Flüchtlingsunterkünfte #Merkel",
          "Wir würden dich gerne als Moderatorin für unsere Veranstaltung gewinnen! Wärst du begeisterbar?",
          "Unglaublich, diese Schwachköpfe im Bundestag begreifen überhaupt nichts http://t.co/xyz",
          "Gestern Abend gab es Rinderrouladen mit Rotkohl und Klößen bei meiner Großmutter"] * 4
ENGLISH = ["@john I am so happy for you, congratulations on the new job!",
           "Free entry in a weekly competition to win tickets, text WIN to 80086 now",
           "i feel like i am still looking at a blank canvas blank pieces of paper",
           "what is the exchange rate between dollars and euros today",
           "Sorry, I'll call you later when I get home from work",
           "The meeting has been moved to Thursday afternoon, please confirm"] * 4
SMALL_ENGLISH = ["win cash now", "see you at noon", "free entry txt win", "ok on my way home"] * 6   # tiny vocabulary's
LABELS = ["a", "b", "a"] * 8


def wordpiece(words: list[str]) -> PreTrainedTokenizerFast:
    """A tiny uncased WordPiece tokenizer that knows `words` whole and every character of the test texts as a
    piece (so nothing is unknown: pieces per word alone tells the two apart)."""
    letters = sorted({c for t in GERMAN + ENGLISH for c in t.lower() if not c.isspace()})
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *sorted({w.lower() for w in words}),
                                         *letters, *(f"##{c}" for c in letters)])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]")


def _words(texts: list[str]) -> list[str]:
    return [w for t in texts for w in words_only(t).split()]


@pytest.fixture(autouse=True)
def _fresh_warnings(fresh_warnings):
    yield


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and "does not fit these texts' language" in r.getMessage()]


def test_words_only_leaves_out_handles_tags_links_and_numbers():
    assert words_only("@Ralf_Stegner Oman Ralle..dich 1/2deiner #Merkel http://t.co/x &amp; Härte!") == \
        "Oman Ralle dich deiner Härte"


def test_minilm_reads_german_in_pieces_and_english_whole():
    tok = load_tokenizer("minilm")
    german, english = fit_of(tok, GERMAN), fit_of(tok, ENGLISH)
    assert german.pieces_per_word > PIECES_PER_WORD and not german.fits
    assert english.pieces_per_word < 1.3 and english.fits


def test_the_warning_fires_once_on_german_through_minilm_and_names_the_alternatives(caplog):
    tok = load_tokenizer("minilm")
    with caplog.at_level(logging.WARNING):
        warn_if_language_misfits(tok, GERMAN, "minilm")
        warn_if_language_misfits(tok, GERMAN, "minilm")
        warn_if_language_misfits(tok, ENGLISH, "minilm", source="English data")
    (line,) = _warnings(caplog)
    assert "\n" not in line and line.startswith("training data: minilm's vocabulary does not fit these texts' language")
    assert "word pieces per word" in line and "unknown tokens" in line
    assert "multilingual-e5-small (make install-e5) or gemma3-270m (make install-gemma)" in line


def test_a_vocabulary_without_the_words_fires_through_its_unknown_tokens(tmp_path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(make_tiny_wordpiece_encoder(tmp_path / "enc"))   # whole English words only
    fit = fit_of(tok, GERMAN)
    assert fit.unknown_rate > 0.5 and not fit.fits
    assert fit_of(tok, SMALL_ENGLISH).fits


def test_fit_warns_before_training_on_german_and_not_on_english(tmp_path, caplog):
    model = str(make_tiny_wordpiece_encoder(tmp_path / "enc"))
    with caplog.at_level(logging.WARNING):
        TextClassifier(model=model, regime="head-only", epochs=1, progress=False).fit(GERMAN, LABELS)
    (line,) = _warnings(caplog)
    assert f"{model}'s vocabulary does not fit" in line
    caplog.clear()
    _warned.clear()
    with caplog.at_level(logging.WARNING):
        TextClassifier(model=model, regime="head-only", epochs=1, progress=False).fit(SMALL_ENGLISH, LABELS)
    assert _warnings(caplog) == []


def test_auto_ranks_the_bodies_that_fit_first_and_says_so(monkeypatch):
    tokenizers = {"english": wordpiece(_words(ENGLISH)), "german": wordpiece(_words(GERMAN))}
    # the English tokenizer spells German letter by letter; the German one knows the words
    monkeypatch.setattr("headswap.models.load_tokenizer", lambda m: tokenizers[m])   # KeyError: cannot load
    order, fits = rank_by_fit(["english", "broken", "german"], GERMAN)
    assert order == ["broken", "german", "english"] and fits["german"].fits and not fits["english"].fits
    assert fits["broken"] is None          # unmeasured: not moved down, and its own rungs report why it fails
    fits.pop("broken")
    note = fit_note(fits)
    assert "english" in note and "(does not fit)" in note and "bodies that fit climb first" in note
    assert rank_by_fit(["english", "german"], ENGLISH)[0] == ["english", "german"]     # both fit: order kept
    assert fit_note(rank_by_fit(["english"], ENGLISH)[1]) is None
    assert language_fit.alternatives("gemma3-270m") == "multilingual-e5-small (make install-e5)"
