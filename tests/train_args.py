"""The command line the training tests give ``parallelsearch train``: the paper preset with
``--set`` overrides, written once instead of a long list in every test."""

from __future__ import annotations


def paper_argv(*flags: str, sets: dict[str, object]) -> list[str]:
    """``train --preset paper`` with ``flags`` and one ``--set key=value`` per entry of ``sets``
    (keys may be dotted, ``agent.retriever_url``)."""
    overrides = [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
    return ["train", "--preset", "paper", *flags, *overrides]
