"""What was wrong with a /predict body, in one human line per pydantic/FastAPI validation error (and a short
location such as ``texts[3]``), for the app's 422 answers."""

from __future__ import annotations


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _loc(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def error_loc(err: dict) -> str:
    index = (err.get("ctx") or {}).get("index")
    if err.get("type") in ("blank_text", "invalid_unicode") and index is not None:
        return f"texts[{index}]"
    return _loc(list(err.get("loc", ()))[1:])


def describe_error(err: dict, max_texts: int, max_chars: int) -> str:
    """One human line for one pydantic/FastAPI validation error."""
    kind, loc, value = err.get("type"), [p for p in err.get("loc", ())][1:], err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "missing" and loc == ["texts"]:
        return 'missing field "texts": the body must be {"texts": ["...", ...]}'
    if kind == "missing" and not loc:
        return 'the body is empty: send {"texts": ["...", ...]}'
    if kind in ("model_attributes_type", "model_type", "dict_type") and not loc:
        return f'the body must be a JSON object {{"texts": [...]}}, got {_json_type(value)}'
    if kind == "extra_forbidden":
        return f'unknown field {_loc(loc)!r}: the body must be {{"texts": [...]}}'
    if loc == ["texts"]:
        if kind == "list_type":
            return f"texts must be a list of strings, got {_json_type(value)}"
        if kind == "too_short":
            return "texts must not be empty: send at least one text"
        if kind == "too_long":
            got = f"{ctx['actual_length']} texts, " if ctx.get("actual_length") is not None else ""
            return f"too many texts: {got}the limit is {max_texts} per request"
    if len(loc) == 2 and loc[0] == "texts" and isinstance(loc[1], int):
        i = loc[1]
        if kind == "string_type":
            return f"texts[{i}] must be a string, got {_json_type(value)}"
        if kind == "string_too_long":
            return (f"text at index {i} is too long: {len(value) if isinstance(value, str) else '?'} characters, "
                    f"the limit is {max_chars}")
        if kind == "string_unicode":
            return f"text at index {i} is not valid Unicode (an unpaired surrogate escape?)"
    if kind == "blank_text":
        return f"text at index {ctx.get('index')} is empty or only whitespace"
    if kind == "invalid_unicode":
        return f"text at index {ctx.get('index')} contains an unpaired surrogate (invalid Unicode)"
    return f"{_loc(loc)}: {err.get('msg', 'invalid')}"
