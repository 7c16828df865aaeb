"""What the CLI prints for an error: the project's errors and bad input as one line and exit 2,
anything else (a bug) with its traceback; and the one description of a ValidationError."""

from __future__ import annotations

import argparse

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from parallelsearch import cli
from parallelsearch.stores.errors import (
    ParallelSearchError,
    StoreNotFoundError,
    UnavailableError,
    describe_validation_error,
)


def _main_raising(monkeypatch, error: BaseException) -> int:
    def boom(_args: argparse.Namespace) -> int:
        raise error

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=boom)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    return cli.main([])


@pytest.mark.parametrize(
    "error",
    [
        UnavailableError("openrlhf is not installed"),
        StoreNotFoundError("no store named 'x'"),
        ValueError("--metadata must be a JSON object"),
        FileNotFoundError("nope.jsonl: no such file or directory"),
    ],
)
def test_expected_errors_are_one_line_and_exit_2(monkeypatch, capsys, error):
    assert _main_raising(monkeypatch, error) == 2
    assert capsys.readouterr().err == f"error: {error}\n"


@pytest.mark.parametrize("error", [KeyError("answer"), RuntimeError("a bug"), TypeError("a bug")])
def test_a_bug_keeps_its_traceback(monkeypatch, error):
    with pytest.raises(type(error)):
        _main_raising(monkeypatch, error)


def test_project_errors_are_still_the_builtin_kinds_callers_catch():
    assert issubclass(StoreNotFoundError, LookupError) and issubclass(UnavailableError, RuntimeError)
    assert issubclass(StoreNotFoundError, ParallelSearchError)


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    top_k: int = 3


class _Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: _Inner = _Inner()
    turns: int = 1

    @model_validator(mode="after")
    def _check(self) -> _Outer:
        if self.turns > 5:
            raise ValueError("turns: at most 5")
        return self


def _error(**data) -> ValidationError:
    with pytest.raises(ValidationError) as ei:
        _Outer(**data)
    return ei.value


def test_validation_error_description():
    assert describe_validation_error(_error(turns="x")).startswith("turns: Input should be a valid integer")
    # a model-level problem is its message alone, without pydantic's "Value error, "
    assert describe_validation_error(_error(turns=9)) == "turns: at most 5"
    # with the model, an unknown key gets the closest known ones
    assert describe_validation_error(_error(inner={"top_kk": 1}), _Outer) == (
        "inner.top_kk: unknown key (did you mean 'top_k'?); known: top_k"
    )
    assert describe_validation_error(_error(turnz=1)) == "turnz: Extra inputs are not permitted"
