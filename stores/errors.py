"""Errors raised by the stores layer; each names the input it is about."""

from __future__ import annotations


class BadInputError(ValueError):
    """A record of an input file cannot be used. Names the file and the line (1-based)."""

    def __init__(self, path: str, line: int | None, reason: str):
        self.path, self.line, self.reason = str(path), line, reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


class ModelMismatchError(ValueError):
    """A store was opened with an embedding model other than the one it was built with."""


class StoreNotFoundError(LookupError):
    """A named store does not exist at the configured location."""
