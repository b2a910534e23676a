"""The CLI reference page (docs/cli.md), generated from the parser, whose flags derive from headswap.settings.

    python -m headswap.cli.reference > docs/cli.md

tests/test_docs.py fails when the committed page differs from what this writes, so a new flag or setting
cannot reach a release without its line in the reference.
"""

from __future__ import annotations

import argparse

from headswap.cli.parser import COMMANDS, build_parser

HEADER = """# CLI reference

Every `headswap` command and flag, generated from the parser (`python -m headswap.cli.reference > docs/cli.md`;
the test suite fails when this page is out of date). Most training flags are the settings of
`headswap.settings`, so `TextClassifier(...)` takes the same names with underscores (`--head-lr` is `head_lr`).
The guide's pages show them in use.
"""


def _flag(action: argparse.Action) -> str:
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
    if action.nargs == 0:
        return names
    if action.choices is not None:
        return f"{names} `{{{','.join(map(str, action.choices))}}}`"
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    return f"{names} `{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = (action.help or "") % {"default": action.default, "prog": parser.prog} if action.help else ""
    extra = []
    if action.required:
        extra.append("required")
    elif action.nargs != 0 and action.default not in (None, argparse.SUPPRESS, [], "") \
            and "default" not in text.lower():
        extra.append(f"default: `{action.default}`")
    text = " ".join(text.split()).replace("|", "\\|")
    return f"{text} ({'; '.join(extra)})" if extra else text


def _table(parser: argparse.ArgumentParser) -> list[str]:
    rows = [a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
    lines = ["| flag | what it does |", "|---|---|"]
    lines += [f"| {_flag(a)} | {_help(a, parser)} |" for a in rows if not isinstance(a, argparse._SubParsersAction)]
    return lines


def render() -> str:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    out = [HEADER, "## `headswap`", "", parser.description or "", "", *_table(parser), "",
           "| command | what it does |", "|---|---|"]
    out += [f"| [`{name}`](#headswap-{name}) | {commands[name].description.splitlines()[0]} |" for name in COMMANDS]
    for name in COMMANDS:
        sub = commands[name]
        out += ["", f"## `headswap {name}`", "", " ".join((sub.description or "").split()), "", *_table(sub)]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
