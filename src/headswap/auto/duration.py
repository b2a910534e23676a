"""A budget as the user writes it, one rule for `--budget` and AutoClassifier(budget=): parsed and checked
(parse_duration, check_seconds), written back in the flag's syntax (fmt_seconds), and, past a day, when it ends
(end_line). Imports no torch."""

from __future__ import annotations

import datetime
import math
import numbers
import re

from headswap.errors import ConfigError

DAY = 86400.0
MAX_BUDGET_DAYS = 7     # a week: auto's longest budget (its arms train whole epochs from a few hours on)
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def fmt_seconds(seconds: float) -> str:
    """A duration as the --budget flag takes it back: '7s', '3m20s', '2h5m'."""
    seconds = math.ceil(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"


def end_line(budget: float, spent: float) -> str | None:
    """For a budget over a day, the line that says when it ends (local time); None for shorter ones."""
    if budget <= DAY:
        return None
    try:
        end = datetime.datetime.now().astimezone() + datetime.timedelta(seconds=budget - spent)
        when = end.strftime("%Y-%m-%d %H:%M %Z").strip()
    except OverflowError:
        when = "after the year 9999"
    return f"a budget of {budget / DAY:,.1f} days: it ends {when} (a bare number is minutes: --budget 90 is 90 min)"


def parse_duration(value) -> float:
    """A time budget in seconds, one rule for `--budget` and AutoClassifier(budget=): '20m', '1h30m', '90s', '1.5h',
    or a bare number, a string or a Python number alike, of minutes (90 and "90" are 90 min). Refused in one line:
    True/False, NaN, infinity, zero or less, over MAX_BUDGET_DAYS, and anything else."""
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
        raise ConfigError(f"budget {value!r:.60} is not a duration: write e.g. 20m, 1h30m, 90s, or a number of "
                          f"minutes (a bare number is minutes)")
    text = value.strip().lower() if isinstance(value, str) else value
    if isinstance(text, str) and text.startswith("-") and _DURATION.match(text[1:]) and text[1:]:
        raise ConfigError(f"budget {value!r} must be a time of more than zero")
    try:
        seconds = float(text) * 60
    except OverflowError:      # an integer past float's range: refused as the infinite time it reads as
        seconds = math.inf
    except ValueError:
        match = _DURATION.match(text)
        if not text or not match or not any(match.groups()):
            raise ConfigError(f"budget {value!r} is not a duration: write e.g. 20m, 1h30m, 90s (a bare number is "
                              "minutes)") from None
        h, m, s = (float(g) if g else 0.0 for g in match.groups())
        seconds = h * 3600 + m * 60 + s
    check_seconds(seconds, repr(value))
    return seconds


def check_seconds(seconds: float, given: str) -> None:
    """Refuse a budget of `seconds` (as the user gave it: `given`) that is not a finite time of more than zero, or
    is over MAX_BUDGET_DAYS: one of 1e9 (minutes, 1,900 years) is a typo, not a plan."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"budget {given} must be a finite time of more than zero")
    if seconds > MAX_BUDGET_DAYS * DAY:
        raise ConfigError(f"budget {given} is {seconds / DAY:,.1f} days, over the {MAX_BUDGET_DAYS} days auto takes "
                          f"(a bare number is minutes: --budget 90 is 90 min)")
