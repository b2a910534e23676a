"""The Jinja2 templates of headswap's HTML pages (templates/: report.html.j2, its building blocks in
macros.html.j2, the style in report.css), and those blocks as functions for a page that assembles its own HTML
from strings (headswap.jobs.label_audit's: html_text, kv, table, section)."""

from __future__ import annotations

import functools
from html import escape
from importlib.resources import files
from typing import Sequence

TEMPLATES = files("headswap.reports") / "templates"
CSS = (TEMPLATES / "report.css").read_text(encoding="utf-8")   # every page's style, inlined: the page stands alone


@functools.lru_cache(maxsize=None)
def environment():
    """The templates' environment: autoescaped; None prints as nothing (as a missing value always has on these
    pages, not "None"); an undefined name is an error rather than a silent blank."""
    # Imported here, not at the top: bench's run and auto import html_report for its names, not to render.
    import jinja2
    return jinja2.Environment(loader=jinja2.PackageLoader("headswap.reports", "templates"), autoescape=True,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined, finalize=lambda value: "" if value is None else value)


def _blocks():
    return environment().get_template("macros.html.j2").module


def _markup(html: str):
    from markupsafe import Markup
    return Markup(html)


def html_text(value) -> str:
    """`value` as HTML text, escaped (None as nothing)."""
    return escape("" if value is None else str(value), quote=True)


def kv(pairs: Sequence[tuple[str, str]]) -> str:
    """A definition list; values are HTML already (escape before)."""
    return str(_blocks().kv([(k, _markup(v)) for k, v in pairs]))


def table(header: Sequence[tuple[str, str]], body: Sequence[tuple[str, Sequence[str]]], cls: str = "") -> str:
    """header: (text, class) per column; body: (tr class, cells as HTML) per row. A row with fewer cells than
    columns stretches its last cell over the rest."""
    return str(_blocks().table(header, [(tr, [_markup(c) for c in cells]) for tr, cells in body], cls))


def section(sid: str, title: str, body: str) -> str:
    """A page section with its heading; `body` is HTML already."""
    return str(_blocks().section(sid, title, _markup(body)))
