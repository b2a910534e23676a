"""Errors a user can act on. The CLI prints these as one clear line instead of a traceback."""


class HeadswapError(Exception):
    """Base class: something the user can fix (bad input, missing model, bad argument)."""


class DataError(HeadswapError, ValueError):
    """A data file or a list of texts/labels is unusable; the message names file, row and column."""


class ModelNotAvailable(HeadswapError):
    """A model reference cannot be resolved offline; the message says what to install or where to look."""


class ConfigError(HeadswapError, ValueError):
    """An option or combination of options that cannot work (e.g. colliding class first tokens)."""


class TimeLimitReached(HeadswapError):
    """A fit's time_limit passed while it was still encoding the texts it trains on (the frozen body's cached
    features): nothing was trained, since a head fitted on part of the features would look complete."""
