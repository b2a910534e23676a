"""The prompted strategies' built-in prompt in the data's language (setting prompt_language): auto takes German
for German training texts and English otherwise, the choice is saved with the model, class names stay as they are.
Tiny causal models (tests/tiny_models.py); nothing here checks accuracy."""

from __future__ import annotations

import pytest
from tiny_models import make_tiny_causal
from transformers import AutoTokenizer

from headswap import TextClassifier
from headswap.classifier.estimator import load_model
from headswap.errors import ConfigError
from headswap.text.prompts import build_prompt, prompt_language_of

GERMAN = ["Das ist nicht dein Ernst, du bist ein Idiot", "Ich wünsche dir einen schönen Tag mit der Familie",
          "Die Regierung hat auch heute wieder nichts gemacht", "Wir sehen uns morgen auf dem Markt"] * 3
ENGLISH = ["win cash now", "this is not what you said", "see you at noon with the others",
           "the train is late again"] * 3
LABELS = ["spam", "ham", "spam", "ham"] * 3     # words of the tiny tokenizer: distinct first tokens

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return str(make_tiny_causal(tmp_path_factory.mktemp("tiny") / "plain", chat=False))


def test_the_language_of_the_texts_is_told_by_their_function_words():
    assert prompt_language_of(GERMAN) == "de"
    assert prompt_language_of(ENGLISH) == "en"
    assert prompt_language_of(["Je suis très content, merci beaucoup", "¿Dónde está la estación?"]) == "en"
    assert prompt_language_of([]) == "en"


def test_the_german_template_keeps_the_class_names_and_asks_in_german(plain):
    tok = AutoTokenizer.from_pretrained(plain)
    de = build_prompt(tok, ["OFFENSE", "OTHER"], language="de")
    assert de.prefix.startswith("Du ordnest einen Text einer dieser Klassen zu") and "- OFFENSE\n- OTHER" in de.prefix
    assert "nur den Namen der Klasse" in de.prefix and de.suffix.endswith("\nAntwort:")
    assert de.answers == ["OFFENSE", "OTHER"]
    letters = build_prompt(tok, ["OFFENSE", "OTHER"], language="de", letters=True)
    assert "nur den Buchstaben der Klasse" in letters.prefix and letters.answers == ["A", "B"]
    en = build_prompt(tok, ["OFFENSE", "OTHER"])
    assert en.prefix.startswith("You classify") and en.suffix.endswith("\nAnswer:")
    with pytest.raises(ConfigError, match="unknown prompt language 'fr'"):
        build_prompt(tok, ["a", "b"], language="fr")


def test_auto_prompts_german_texts_in_german_and_the_saved_model_keeps_it(plain, tmp_path):
    clf = TextClassifier(strategy="slm-logits", model=plain, epochs=0, progress=False).fit(GERMAN, LABELS)
    assert clf.prompt_.prefix.startswith("Du ordnest") and clf.prompt_language_ == "de"
    loaded = load_model(clf.save(tmp_path / "m"))
    assert loaded.prompt_.prefix == clf.prompt_.prefix and loaded.prompt_.suffix == clf.prompt_.suffix
    assert loaded.predict(GERMAN[:4]).tolist() == clf.predict(GERMAN[:4]).tolist()


def test_english_texts_and_a_set_language_are_prompted_as_asked(plain):
    clf = TextClassifier(strategy="slm-logits", model=plain, epochs=0, progress=False).fit(ENGLISH, LABELS)
    assert clf.prompt_.prefix.startswith("You classify")
    forced = TextClassifier(strategy="slm-letters", model=plain, epochs=0, progress=False,
                            prompt_language="de").fit(ENGLISH, LABELS)
    assert forced.prompt_.prefix.startswith("Du ordnest") and forced.prompt_.suffix.endswith("Antwort:")


def test_a_given_prompt_is_used_as_written_whatever_the_language(plain):
    clf = TextClassifier(strategy="slm-logits", model=plain, epochs=0, progress=False,
                         instruction="Klassen: {classes}\n{text}").fit(GERMAN, LABELS)
    assert clf.prompt_.prefix == "Klassen: - ham\n- spam\n" and clf.prompt_.suffix == "\nAntwort:"


def test_an_unknown_prompt_language_is_one_config_error():
    with pytest.raises(ConfigError, match="unknown prompt_language 'fr'; choose one of auto, en, de"):
        TextClassifier(prompt_language="fr").resolved_params()
