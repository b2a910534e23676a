"""Prompts for the SLM strategies: task + class list, split into a shared prefix, the text, and a
shared suffix, so that the prefix can be run once and cached (see fast inference).

The class's answer token is computed as it appears right after the suffix (the assistant turn of the
chat template, or "Answer:" plus a space for a plain LM), not from the bare class name.
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
_TEXT = "\x00HEADSWAP_TEXT\x00"


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
                 multi_label: bool = False) -> Prompt:
    """The prompt for `labels`; `instruction` may use {classes}, {answer} and must contain {text}."""
    instruction = instruction or (MULTI_LABEL_INSTRUCTION if multi_label else DEFAULT_INSTRUCTION)
    if "{text}" not in instruction:
        raise ConfigError("the prompt instruction must contain a {text} placeholder")
    letter_list = proxy_letters(len(labels)) if letters else None
    try:
        body = instruction.format(classes=class_lines(labels, descriptions, letter_list),
                                  answer="letter" if letters else "name", text=_TEXT)
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
        full, sep = leading_bos(tokenizer) + body + "\nAnswer:", " "
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
