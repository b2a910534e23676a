"""argparse pieces shared by the commands: number types that name the bad value, and the flags derived
from headswap.settings (one flag per setting, with its default, choices, bounds and help)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from headswap import settings
from headswap.errors import HeadswapError


def int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {value}")
        return value
    return parse


def float_at_least(minimum: float, strict: bool = False):
    """A float >= minimum (> minimum when strict)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if not (value > minimum if strict else value >= minimum):
            raise argparse.ArgumentTypeError(f"expected a number {'>' if strict else '>='} {minimum:g}, got {value}")
        return value
    return parse


positive_float = float_at_least(0, strict=True)


def duration(text: str) -> float:
    """A time budget ('20m', '1h30m', '90s'; a bare number is minutes) in seconds."""
    from headswap.auto.duration import parse_duration     # (no torch at import)
    try:
        return parse_duration(text)
    except HeadswapError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _setting_type(f):
    """An argparse type for a numeric setting: parses, then applies the setting's own bounds."""
    whole = settings.is_whole(f)

    def parse(text: str):
        try:
            value = int(text) if whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if whole else 'a number'}, "
                                             f"got {text!r}") from None
        problem = settings.bound_problem(f, value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    return parse


def _nonempty(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("expected a non-empty value")
    return text


def _help(f, default) -> str:
    text = f.metadata["help"]
    if f.name == "strategy":
        from headswap.strategies import REGISTRY
        text += ": " + "; ".join(f"{s.name} ({s.description})" for s in REGISTRY.values())
    if default is not None:
        text += " (default: %(default)s)"
    return text.replace("%", "%%").replace("%%(default)s", "%(default)s")


class StoreGiven(argparse._StoreAction):
    """A store action that also notes, in the namespace's `given_flags`, that the flag was on the command line: a
    value given equal to its default is then told from one left out."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        namespace.given_flags = getattr(namespace, "given_flags", set()) | {self.dest}


def given(args: argparse.Namespace, name: str) -> bool:
    """Whether the flag of `name` (a StoreGiven one) was on the command line."""
    return name in getattr(args, "given_flags", ())


def add_settings(parser: argparse.ArgumentParser, skip: tuple[str, ...] = (), **defaults) -> None:
    """One flag per command-line setting of headswap.settings (except `skip`); `defaults` override a
    setting's default for this command."""
    group = parser.add_argument_group("model and training settings")
    for f in settings.all_fields():
        if not f.metadata["cli"] or f.name in skip:
            continue
        default = defaults.get(f.name, f.default)
        kw = {"dest": f.name, "default": default, "help": _help(f, default)}
        choices = settings.choices_of(f)
        if choices is not None:
            kw["choices"] = choices
        elif isinstance(f.default, bool):
            kw["action"] = argparse.BooleanOptionalAction
        elif settings.is_numeric(f):
            kw["type"] = _setting_type(f)
        elif f.metadata.get("nonempty"):
            kw["type"] = _nonempty
        if f.metadata.get("metavar"):
            kw["metavar"] = f.metadata["metavar"]
        if f.name in settings.REJECT_SETTINGS:      # given without --out-of-scope they are refused, defaults too
            kw["action"] = StoreGiven
        group.add_argument(settings.flag_of(f), **kw)


def settings_from(args: argparse.Namespace, skip: tuple[str, ...] = ()) -> dict:
    """The settings a parsed command line holds ('@file' values of text settings read from the file). A reject
    flag given without --out-of-scope is refused here, its default value too: settings.check sees values only."""
    for name in settings.REJECT_SETTINGS:
        if given(args, name) and getattr(args, "out_of_scope", None) is None:
            f = next(f for f in settings.all_fields() if f.name == name)
            raise HeadswapError(f"{settings.flag_of(f)} {getattr(args, name)} sets the out-of-scope threshold; "
                                f"give --out-of-scope LABEL (the label of texts that fit no class) to use it")
    out = {}
    for f in settings.all_fields():
        if f.metadata["cli"] and f.name not in skip and hasattr(args, f.name):
            value = getattr(args, f.name)
            out[f.name] = read_text_arg(value) if f.name == "instruction" else value
    return out


def read_text_arg(value: str | None) -> str | None:
    """'@path' reads the text from a file (prompts are long)."""
    if value and value.startswith("@"):
        try:
            return Path(value[1:]).read_text(encoding="utf-8")
        except OSError as e:
            raise HeadswapError(f"{value}: cannot read {value[1:]}: {e.strerror}") from None
    return value


def add_runtime(parser: argparse.ArgumentParser) -> None:
    from headswap.classifier.runtime import RUNTIME_HELP, RUNTIMES
    parser.add_argument("--runtime", choices=RUNTIMES, default="auto", help=RUNTIME_HELP)


# ---- checks a command runs before anything heavy (data, models, training) -------------------------------------
# (where a command may write: headswap.saved.outputs, the one rule every writer follows)


def check_models(flag: str, refs) -> None:
    """Every model reference resolves offline (names, folders, .gguf files), without loading a weight."""
    from headswap.models import resolve_model
    for ref in refs:
        try:
            resolve_model(ref)
        except HeadswapError as e:
            raise HeadswapError(f"{flag} {ref}: {e}") from None


def check_descriptions(value: str | None) -> None:
    if value is not None and not Path(value).is_file():
        raise HeadswapError(f"--descriptions {value}: no such file (give a .json, .csv or .tsv file)")


def check_class_weight(value: str | None) -> None:
    if value is not None and value != "balanced" and not Path(value).is_file():
        raise HeadswapError(f"--class-weight {value}: neither 'balanced' nor a file (give balanced, or a .json, .csv "
                            f"or .tsv file of label,weight)")
