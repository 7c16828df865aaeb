"""Sampling belongs to the trainer: what a client's request may not decide in training, and
what the gateway does with it (``override``: ignored and counted; ``refuse``: a 400 naming it)."""

from __future__ import annotations

from typing import Any, Literal

from parallelsearch.rl.gateway.errors import GatewayError

ClientSampling = Literal["override", "refuse"]
#: request fields that would change what the engine samples; the trainer's params decide them
TRAINER_FIELDS = (
    "temperature",
    "top_p",
    "seed",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "logit_bias",
    "presence_penalty",
    "frequency_penalty",
    "tool_choice",
)


def trainer_owned(body: dict[str, Any], policy: ClientSampling) -> list[str]:
    """The sampling fields ``body`` sets (each overridden by the trainer's params), or a 400
    naming the first one under ``refuse``; streaming and ``n`` > 1 are always refused."""
    if body.get("stream"):
        raise GatewayError(
            400, "stream=true is not supported by the training gateway: send stream=false", "stream"
        )
    if body.get("n") not in (None, 1):
        raise GatewayError(400, f"n={body.get('n')!r}: the training gateway samples one reply", "n")
    given = [f for f in TRAINER_FIELDS if body.get(f) is not None and not _neutral(f, body[f])]
    if given and policy == "refuse":
        raise GatewayError(
            400,
            f"{given[0]!r} is set by the trainer in training (the gateway refuses client sampling fields; "
            "remove it or set agent.gateway_sampling=override)",
            given[0],
        )
    return given


def _neutral(field: str, value: Any) -> bool:
    """A value that asks for nothing the trainer would not do (``tool_choice: auto``, ``stop: []``)."""
    return (field == "tool_choice" and value == "auto") or (field in ("stop", "logit_bias") and not value)
