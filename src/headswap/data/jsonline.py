"""json.loads for one line of a user's file, with the parser's two non-syntax failures (nesting past Python's
recursion limit, an integer past its digit limit) turned into a DataError naming the line, like a syntax error."""

from __future__ import annotations

import json

from headswap.errors import DataError


def parse(text: str, where: str, line_of_error: bool = False):
    """The JSON value in `text`, or a DataError naming `where` (and the error's line when `text` is a whole file)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = f"{where}, line {e.lineno}" if line_of_error else where
        raise DataError(f"{at}: not valid JSON: {e.msg} (at character {e.colno})") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply to read (arrays or objects inside each other past "
                        f"Python's recursion limit)") from None
    except ValueError as e:    # "Exceeds the limit (4300 digits) for integer string conversion ..."
        raise DataError(f"{where}: {unreadable_number(e)}") from None


def unreadable_number(e: ValueError) -> str:
    """What json.loads' ValueError that is no syntax error (an integer past Python's digit limit) means, as the
    command line and `headswap serve` both say it; the part after ';' is how to lift the limit in Python."""
    return f"a JSON number cannot be read ({str(e).split(';')[0]})"
