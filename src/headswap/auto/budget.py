"""`headswap auto`'s budget as the user waits it: wall time from the start of the process, not of auto().

The command spends seconds before auto() runs (Python, then torch and transformers: 3 s idle, 8-11 s on 2 loaded
cores) and after its last rung (shipping the winner, scoring test, the report, the interpreter's exit). The clock
therefore starts at the process's start (process_age), every step is bounded by what is left after keeping room
for those last steps (finish_seconds), and a budget too small for the TF-IDF baseline alone is refused before
anything is written (check_budget). Imports no torch.
"""

from __future__ import annotations

import datetime
import io
import math
import numbers
import os
import re
import time
from dataclasses import dataclass
from typing import Callable

from headswap.errors import ConfigError

# The report after the last rung: results.json, results.md and report.html with its charts, drawn warm (the
# charts' first draw, matplotlib's import and font set-up, is done early by warm_up_charts): 0.6-0.9 s for a
# two-row run on 2 loaded cores.
REPORT_SECONDS = 1.5
# The interpreter's exit after the last line: 1.4-2.9 s with torch loaded, 0.06-0.5 s once the CLI freezes the
# objects left (gc.freeze: the final collection then skips them), on 2 idle to loaded cores.
EXIT_SECONDS = 0.5
# The TF-IDF baseline, fitted and scored, per text: a lower bound on 2 idle cores (SMS spam 3,000 texts: 0.15 ms a
# training text; emotion, 6 classes: ~1 ms; CLINC150, 150 classes: ~2.4 ms; scoring ~0.1 ms a text, all measured
# at a load of 4.5 and halved). A floor, not an estimate: a budget under it is refused, one over it is tried.
TFIDF_FIT_SECONDS = 1.5e-4
TFIDF_FIT_SECONDS_PER_CLASS = 1e-5
TFIDF_SCORE_SECONDS = 1e-4
SAVE_SECONDS = 0.2            # saving the TF-IDF folder (0.02 s for 300 texts, 1.2 s for 16,000 on loaded cores)
# Of the budget, kept free to the very end besides every reserve: the clock is read between steps, not during them.
FINAL_MARGIN = 0.02
DAY = 86400.0
MAX_BUDGET_DAYS = 7     # a week: auto's longest budget (its arms train whole epochs from a few hours on)
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def process_age() -> float:
    """Seconds since this process started, never more than its true age (Linux's /proc to the clock tick; psutil
    elsewhere; 0 when neither can tell)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])      # starttime: ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        # Both are truncated: the start lies within the tick after `ticks`, so counting from that tick's end
        # errs short (by 20 ms at most), never long.
        return max(0.0, uptime - (ticks + 1) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil
        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:       # no psutil, or a platform it cannot read: count from now
        return 0.0


def process_start(clock: Callable[[], float] = time.perf_counter) -> float:
    """The process's start on `clock`: the clock and the process's age read at one instant. An age read later
    than the clock (after parsing the command line, say) would put the start that much too early, and a run
    would count seconds it never had."""
    now = clock()
    return now - process_age()


@dataclass
class Budget:
    """auto's time, asked by every rule: one clock, what is left, and what is kept back to the end.

    spare() is what may go to something that might not win (a probe, a rung, an arm's slice): what is left, less
    `finish` (what the end takes whatever wins: scoring the baseline on test, the report, the exit), `ship` (shipping
    the best so far: loading it, blending it, scoring test, saving and exporting; Costs.reserve of its rung) and the
    final margin."""
    seconds: float
    clock: Callable[[], float] = time.perf_counter
    started: float = 0.0
    finish: float = 0.0
    ship: float = 0.0

    @property
    def margin(self) -> float:
        return FINAL_MARGIN * self.seconds

    def spent(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        return self.seconds - self.spent()

    def spare(self, ship: float | None = None) -> float:
        """What is left less the finish, the room to ship (the best so far's, or `ship`) and the margin."""
        return self.left() - self.finish - (self.ship if ship is None else ship) - self.margin

    def over(self) -> bool:
        """Whether only the margin is left."""
        return self.left() <= self.margin


def finish_seconds(n_test: int) -> float:
    """What the end of the run takes whatever wins, besides shipping the winner (Costs.reserve): scoring the
    baseline on test, the report, the exit."""
    return n_test * TFIDF_SCORE_SECONDS + REPORT_SECONDS + EXIT_SECONDS


def baseline_seconds(n_train: int, n_validation: int, n_test: int, n_classes: int) -> float:
    """The least the TF-IDF baseline takes to fit, validate, save and score on test, by data size."""
    fit = n_train * (TFIDF_FIT_SECONDS + TFIDF_FIT_SECONDS_PER_CLASS * n_classes)
    return fit + n_validation * TFIDF_SCORE_SECONDS + SAVE_SECONDS + finish_seconds(n_test)


def fmt_seconds(seconds: float) -> str:
    """A duration as the --budget flag takes it back: '7s', '3m20s', '2h5m'."""
    seconds = math.ceil(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"


def check_budget(budget: float, spent: float, n_train: int, n_validation: int, n_test: int, n_classes: int) -> None:
    """Refuse a budget that cannot hold what was spent starting up plus the TF-IDF baseline, in one line that
    says the least budget that can."""
    need = spent + baseline_seconds(n_train, n_validation, n_test, n_classes)
    if budget < need:
        raise ConfigError(f"budget {_plain(budget)} is less than the TF-IDF baseline alone needs here: "
                          f"{_plain(spent)} already spent starting up, and about "
                          f"{_plain(need - spent)} to train, score and save it on {n_train} training texts; "
                          f"give --budget {fmt_seconds(need * 1.2 + 1)} or more")


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


def _plain(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    from headswap.reports.report_text import duration
    return duration(seconds)


def warm_up_charts() -> None:
    """Draw one throwaway chart now: matplotlib's import and font set-up (3-4.5 s on 2 loaded cores) then count as
    start-up, measured, and the report at the end is drawn warm (REPORT_SECONDS)."""
    try:
        from headswap.reports.plots import new_figure
        fig = new_figure(1, 1)
        fig.add_subplot().plot([0, 1], [0, 1])
        fig.savefig(io.BytesIO(), format="png")
    except Exception:       # no matplotlib: the report goes without charts, as it would anyway
        pass


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
