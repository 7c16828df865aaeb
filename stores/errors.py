"""The project's errors, and the one description of a pydantic ``ValidationError``.

Every error raised on purpose derives from :class:`ParallelSearchError` and the built-in class
callers already catch; its message names the input and the fix, so the CLI prints it as one
line (docs/architecture.md, "Errors"). Lowest layer, so that every layer can raise them.
"""

from __future__ import annotations

import difflib
import json
import numbers
import re
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError


class ParallelSearchError(Exception):
    """Base of the errors this project raises on purpose; the message is complete on one line."""

    #: what a server answers when this error ends a request (None: an error of its own, 500)
    http_status: int | None = None


class UnavailableError(ParallelSearchError, RuntimeError):
    """Something the request needs is missing here: an optional package, a program, a server
    that answers, the pinned version of a dependency."""

    http_status = 503


class UpstreamError(UnavailableError):
    """A server this one depends on (a model server, a retriever) answered with an error."""

    http_status = 502


class BadInputError(ParallelSearchError, ValueError):
    """A record of an input file cannot be used. Names the file and the line (1-based)."""

    def __init__(self, path: str, line: int | None, reason: str):
        self.path, self.line, self.reason = str(path), line, reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


class ModelMismatchError(ParallelSearchError, ValueError):
    """A store was opened with an embedding model other than the one it was built with."""


class StoreNotFoundError(ParallelSearchError, LookupError):
    """A named store does not exist at the configured location."""


def at_least(what: str, value: float | None, floor: float = 1, *, none_ok: bool = False) -> None:
    """A ValueError naming ``what`` unless ``value`` is at least ``floor`` (or None, where ``none_ok``:
    the parameter's default means "choose for me")."""
    if value is None and none_ok:
        return
    if not isinstance(value, numbers.Real) or value < floor:
        raise ValueError(f"{what} must be >= {floor}{' or None' if none_ok else ''}, got {value!r}")


def check_choice(value: Any, choices: Iterable[str], what: str, where: str = "") -> Any:
    """``value`` if it is one of ``choices``; else a ValueError naming ``what`` (``where``: whose) and them."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}{where}; choose one of {', '.join(choices)}")
    return value


def checked_name(value: Any, rule: re.Pattern[str], invalid: str) -> str:
    """``value`` when it is a string that ``rule`` matches; else a ValueError, ``invalid`` formatted
    with ``value`` (it says what a good name looks like)."""
    if not isinstance(value, str) or not rule.match(value):
        raise ValueError(invalid.format(value=value))
    return value


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def sub_model(model: type[BaseModel] | None, key: str) -> type[BaseModel] | None:
    """The pydantic model of field ``key`` of ``model`` (through ``X | None``), if it is one."""
    if model is None or key not in model.model_fields:
        return None
    ann = model.model_fields[key].annotation
    for cand in (ann, *typing.get_args(ann)):
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
    return None


def describe_validation_error(
    error: ValidationError, model: type[BaseModel] | None = None, *, keys_hint: str | None = None
) -> str:
    """``key.sub: message`` for each problem, '; '-joined (a model-level problem: its message).

    With ``model``, an unknown key gets the closest known ones ("did you mean") and the known
    keys, or ``keys_hint`` instead of a list longer than 12."""
    problems = []
    for err in error.errors():
        loc = [str(x) for x in err["loc"]]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden" and loc and model is not None:
            owner: type[BaseModel] | None = model
            for part in loc[:-1]:
                owner = sub_model(owner, part)
            if owner is not None:
                known = list(owner.model_fields)
                listed = ", ".join(known) if len(known) <= 12 or not keys_hint else keys_hint
                msg = f"unknown key{did_you_mean(loc[-1], known)}; known: {listed}"
        problems.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    return "; ".join(problems)


def json_of(text: str, what: str, kind: type = dict) -> Any:
    """``text`` parsed as JSON that must hold a ``kind`` (``dict``: an object, ``list``: an
    array); a ``ValueError`` names ``what`` and where the text broke."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    if not isinstance(value, kind):
        shape = {dict: "object", list: "array"}.get(kind, kind.__name__)
        raise ValueError(f"{what} must be a JSON {shape}, not {type(value).__name__}")
    return value


def missing_store_error(name: str, location: str, existing: Sequence[str]) -> StoreNotFoundError:
    """A missing store's error: where it looked and which stores are there (the closest named)."""
    if not existing:
        return StoreNotFoundError(
            f"no store named {name!r} at {location}: there is no store there yet (create one with index)"
        )
    close = difflib.get_close_matches(name, sorted(existing), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return StoreNotFoundError(
        f"no store named {name!r} at {location}{hint}; stores there: {', '.join(sorted(existing))}"
    )
