"""One way to report a bad training or agent config: every problem names its dotted key,
and an unknown key gets the closest known names ("did you mean")."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def _sub_model(model: type[BaseModel] | None, key: str) -> type[BaseModel] | None:
    """The pydantic model of field ``key`` of ``model`` (through ``X | None``), if it is one."""
    if model is None or key not in model.model_fields:
        return None
    ann = model.model_fields[key].annotation
    for cand in (ann, *typing.get_args(ann)):
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
    return None


def field_names(model: type[BaseModel]) -> list[str]:
    return [name for name in model.model_fields]


def describe(error: ValidationError, model: type[BaseModel]) -> str:
    """``key.sub: message`` for each problem, '; '-joined; unknown keys list the closest known ones."""
    problems = []
    for err in error.errors():
        loc = [str(x) for x in err["loc"]]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden" and loc:
            owner: type[BaseModel] | None = model
            for part in loc[:-1]:
                owner = _sub_model(owner, part)
            if owner is not None:
                known = field_names(owner)
                listed = ", ".join(known) if len(known) <= 12 else "see `parallelsearch train --list-keys`"
                msg = f"unknown key{did_you_mean(loc[-1], known)}; known: {listed}"
        problems.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    return "; ".join(problems)


def flat_keys(
    model: type[BaseModel], prefix: str = "", values: BaseModel | None = None
) -> list[tuple[str, str, Any, str]]:
    """(dotted key, type, default, description) of every field, nested models expanded; with
    ``values`` (an instance, e.g. a preset) its values stand in for the defaults."""
    from pydantic_core import PydanticUndefined

    rows: list[tuple[str, str, Any, str]] = []
    for name, f in model.model_fields.items():
        key = prefix + name
        sub = _sub_model(model, name)
        value = getattr(values, name) if values is not None else None
        if sub is not None:
            rows.extend(flat_keys(sub, key + ".", value if isinstance(value, BaseModel) else None))
            continue
        if values is not None:
            ann = f.annotation
            shown = ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")
            rows.append((key, shown, value, f.description or ""))
            continue
        ann = f.annotation
        type_name = getattr(ann, "__name__", None) if isinstance(ann, type) else None
        shown = type_name or str(ann).replace("typing.", "")
        default = "(required)" if f.default is PydanticUndefined and f.default_factory is None else f.default
        if f.default_factory is not None:
            try:
                default = f.default_factory()  # type: ignore[call-arg]
            except TypeError:
                default = "(computed)"
        rows.append((key, shown, default, f.description or ""))
    return rows
