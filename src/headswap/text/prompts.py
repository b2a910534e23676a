"""Prompts for the SLM strategies: task + class list, split into a shared prefix, the text, and a
shared suffix, so that the prefix can be run once and cached (see fast inference).

The class's answer token is computed as it appears right after the suffix (the assistant turn of the
chat template, or "Answer:" plus a space for a plain LM), not from the bare class name.

The built-in templates come in the languages of settings.PROMPT_LANGUAGES; `auto` takes the training texts'
language (prompt_language_of), so a German data set gets a German task around its German texts. Class names are
never translated: they are the answers the model is scored on.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from headswap.errors import ConfigError

DEFAULT_INSTRUCTION = (
    "You classify a text into one of these classes:\n\n{classes}\n\n"
    "Task: Given a text, return only the {answer} of the class.\n\nText:\n{text}"
)
MULTI_LABEL_INSTRUCTION = (
    "You tag a text with every one of these classes that applies to it:\n\n{classes}\n\n"
    "Task: Given a text, return the {answer}s of the classes that apply, most fitting first.\n\nText:\n{text}"
)
# language: (single-label template, multi-label template, what precedes the answer in a plain LM's prompt,
# the words {answer} stands for with names and with letters)
TEMPLATES = {
    "en": (DEFAULT_INSTRUCTION, MULTI_LABEL_INSTRUCTION, "Answer:", ("name", "letter")),
    "de": ("Du ordnest einen Text einer dieser Klassen zu:\n\n{classes}\n\n"
           "Aufgabe: Gib zu einem Text nur den {answer} der Klasse zurück.\n\nText:\n{text}",
           "Du versiehst einen Text mit jeder dieser Klassen, die auf ihn zutrifft:\n\n{classes}\n\n"
           "Aufgabe: Gib zu einem Text die {answer} der zutreffenden Klassen zurück, die passendste zuerst."
           "\n\nText:\n{text}",
           "Antwort:", ("Namen", "Buchstaben")),
}
# Short function words, frequent in any text of their language and rare in the other's: enough to tell German
# tweets from English messages without a language-identification model.
_FUNCTION_WORDS = {
    "en": frozenset("the and is are was to of in that this it you for not with have be on at but what".split()),
    "de": frozenset("der die das und ist nicht ich du sie wir ein eine mit auf für von zu den dem sich auch "
                    "es im aber wie wenn noch nur".split()),
}
_TEXT = "\x00HEADSWAP_TEXT\x00"


def prompt_language_of(texts, sample: int = 2000) -> str:
    """The built-in prompt language that fits `texts` best: the one whose function words occur most in them
    (English on a tie, and for texts of any other language)."""
    counts = dict.fromkeys(_FUNCTION_WORDS, 0)
    for text in list(texts)[:sample]:
        for word in str(text).lower().split():
            word = word.strip(".,;:!?\"'()[]«»„“”")
            for lang, words in _FUNCTION_WORDS.items():
                counts[lang] += word in words
    best = max(counts, key=lambda lang: (counts[lang], lang == "en"))
    return best if counts[best] else "en"


def class_lines(labels: list[str], descriptions: dict[str, str] | None, letters: list[str] | None) -> str:
    lines = []
    for i, label in enumerate(labels):
        desc = (descriptions or {}).get(label, label)
        body = label if desc == label else f"{label}: {desc}"
        lines.append(f"{letters[i]}. {body}" if letters else f"- {body}")
    return "\n".join(lines)


def proxy_letters(n: int) -> list[str]:
    if n > 26:
        raise ConfigError(f"slm-letters supports at most 26 classes (A-Z), got {n}")
    return list(string.ascii_uppercase[:n])


@dataclass
class Prompt:
    prefix: str                 # everything before the text (shared by every text)
    suffix: str                 # everything after the text, ending where the answer starts
    answers: list[str]          # what the model should answer for each class (name or letter)
    answer_separator: str       # "" after a chat template's assistant header, " " after "Answer:"

    def render(self, text: str) -> str:
        return self.prefix + text + self.suffix


def build_prompt(tokenizer, labels: list[str], descriptions: dict[str, str] | None = None,
                 instruction: str | None = None, letters: bool = False, chat: bool | None = None,
                 multi_label: bool = False, language: str = "en") -> Prompt:
    """The prompt for `labels`; `instruction` may use {classes}, {answer} and must contain {text}. `language`
    picks the built-in template and the words around it (TEMPLATES); a given instruction is used as written."""
    if language not in TEMPLATES:
        raise ConfigError(f"unknown prompt language {language!r}; choose one of {', '.join(TEMPLATES)}")
    single, multi, answer_cue, answer_words = TEMPLATES[language]
    instruction = instruction or (multi if multi_label else single)
    if "{text}" not in instruction:
        raise ConfigError("the prompt instruction must contain a {text} placeholder")
    letter_list = proxy_letters(len(labels)) if letters else None
    try:
        body = instruction.format(classes=class_lines(labels, descriptions, letter_list),
                                  answer=answer_words[1] if letters else answer_words[0], text=_TEXT)
    except (KeyError, IndexError) as e:
        raise ConfigError(f"the prompt instruction has an unknown placeholder {e}; "
                          "use {classes}, {answer} and {text}") from None
    chat = getattr(tokenizer, "chat_template", None) is not None if chat is None else chat
    if chat:
        full = tokenizer.apply_chat_template([{"role": "user", "content": body}], tokenize=False,
                                             add_generation_prompt=True)
        sep = ""
    else:
        # The pieces are encoded without special tokens (encode_plain), so a model whose tokenizer starts every
        # text with BOS (Gemma's, which is lost without it) gets it written into the prompt, as a chat template
        # does ("{{ bos_token }}..."); SmolLM2's adds none.
        full, sep = leading_bos(tokenizer) + body + "\n" + answer_cue, " "
    prefix, _, suffix = full.partition(_TEXT)
    return Prompt(prefix, suffix, letter_list or list(labels), sep)


def leading_bos(tokenizer) -> str:
    """The BOS token's text when the tokenizer puts it before every text it encodes, else ""."""
    bos, bos_id = getattr(tokenizer, "bos_token", None), getattr(tokenizer, "bos_token_id", None)
    if bos is None or bos_id is None:
        return ""
    return bos if tokenizer("a")["input_ids"][:1] == [bos_id] else ""


def encode_plain(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def answer_token_ids(tokenizer, prompt: Prompt, labels: list[str]) -> list[int]:
    """The first token of each class's answer, as tokenized right after the prompt's suffix.

    Raises ConfigError when two classes share a first token: their logits could not be told apart.
    """
    tail = prompt.suffix[-64:]  # enough context for the tokenizer's merges at the boundary
    base = encode_plain(tokenizer, tail)
    ids = []
    for answer in prompt.answers:
        full = encode_plain(tokenizer, tail + prompt.answer_separator + answer)
        if full[:len(base)] == base and len(full) > len(base):
            ids.append(full[len(base)])
        else:  # the boundary merged with the answer: fall back to the answer tokenized on its own
            ids.append(encode_plain(tokenizer, prompt.answer_separator + answer)[0])
    seen: dict[int, str] = {}
    for label, answer, tid in zip(labels, prompt.answers, ids):
        if tid in seen:
            token = tokenizer.convert_ids_to_tokens(tid)
            raise ConfigError(
                f"classes {seen[tid]!r} and {label!r} share the first token {token!r} (id {tid}), so their "
                "logits cannot be told apart. Use strategy 'slm-letters' (answers A, B, C, ...), or rename "
                "the classes so that their first tokens differ.")
        seen[tid] = label
    return ids
