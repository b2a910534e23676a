"""A deterministic synthetic SMS fixture: 400 spam and 400 ham messages built from templates.

Messages are 5 to 25 bytes long, so with the byte tokenizer every message fits the tiny model's
32-token window. Spam and ham share some vocabulary ("free", "call", "win", numbers) on purpose, so
the task is not solvable from one keyword.
"""

from __future__ import annotations

import random

SPAM_TEMPLATES = [
    "WIN {prize} now!", "Free {prize}! txt {code}", "Claim {prize}: {num}", "URGENT call {num}",
    "{prize} won! txt {code}", "txt {code} to {num}", "You won {money}!", "Cash {money} call {num}",
    "{money} prize, reply {code}", "Free entry! txt {code}", "win {money} today", "call {num} to win",
    "Your {prize} awaits", "Bonus {money}, txt {code}", "STOP? txt {code} {num}",
]
HAM_TEMPLATES = [
    "see you at {time}", "call me at {time}", "ok {name}, on my way", "{name} is free at {time}",
    "running late, {time}?", "lunch {day}?", "thanks {name}!", "got the {item}, thx",
    "free {day}? call me", "did you win, {name}?", "{name} call me back", "home by {time}",
    "bring the {item} {day}", "can't talk, {time} ok?", "i owe you {money}",
]
SLOTS = {
    "prize": ["cash", "a car", "a trip", "an iPod", "a TV", "£500", "a phone", "tickets"],
    "money": ["£100", "$500", "£1000", "$250", "£50", "£2000"],
    "code": ["WIN", "PRIZE", "GO", "YES", "CLAIM", "STOP"],
    "name": ["Ann", "Bob", "mum", "Raj", "Li", "dad", "Sam", "Eve", "Jo", "Kim", "Tom", "Mia"],
    "day": ["mon", "tue", "wed", "fri", "today", "sat", "tmrw"],
    "item": ["keys", "milk", "notes", "book", "bag", "charger", "bread"],
}
MIN_BYTES, MAX_BYTES = 5, 25


def _fill(template: str, rng: random.Random) -> str:
    values = {k: rng.choice(v) for k, v in SLOTS.items()}
    values["num"] = str(rng.randint(10000, 99999))
    values["time"] = rng.choice([f"{rng.randint(1, 12)}:{rng.choice(['00', '15', '30', '45'])}",
                                 f"{rng.randint(1, 12)}{rng.choice(['pm', 'am', 'ish'])}", "noon"])
    return template.format(**values)


def _messages(templates: list[str], n: int, rng: random.Random) -> list[str]:
    seen: dict[str, None] = {}
    while len(seen) < n:
        text = _fill(rng.choice(templates), rng)
        if MIN_BYTES <= len(text.encode("utf-8")) <= MAX_BYTES:
            seen.setdefault(text)
    return list(seen)


def sms_fixture(n_per_class: int = 400, seed: int = 0) -> tuple[list[str], list[str]]:
    """Return (texts, labels) with n_per_class 'spam' and 'ham' messages, interleaved deterministically."""
    rng = random.Random(seed)
    spam = _messages(SPAM_TEMPLATES, n_per_class, rng)
    ham = _messages(HAM_TEMPLATES, n_per_class, rng)
    pairs = [(t, "spam") for t in spam] + [(t, "ham") for t in ham]
    rng.shuffle(pairs)
    return [t for t, _ in pairs], [lab for _, lab in pairs]


def fixture_split(seed: int = 0, test_fraction: float = 0.2):
    """The fixture's stratified 80/20 split: (train_texts, train_labels, test_texts, test_labels)."""
    from sklearn.model_selection import train_test_split

    texts, labels = sms_fixture(seed=seed)
    tr_x, te_x, tr_y, te_y = train_test_split(
        texts, labels, test_size=test_fraction, stratify=labels, random_state=seed
    )
    return tr_x, tr_y, te_x, te_y
