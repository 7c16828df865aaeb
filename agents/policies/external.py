"""External policy: the action comes from a trainer via LangGraph ``interrupt`` and
``Command(resume=text or {"text", "token_ids", "logprobs"})``, so the rest of the graph runs as in serving.
"""

from __future__ import annotations

from typing import Any

from parallelsearch.agents.policies.base import TurnRequest, TurnResult
from parallelsearch.agents.protocol import truncate_at_stop


class ExternalPolicy:
    """The trainer's policy: each turn pauses the graph with the whole :class:`TurnRequest` as the
    interrupt's value (``TurnRequest.from_payload`` reads it back) and resumes with the turn."""

    name = "external"

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        from langgraph.types import interrupt

        value: Any = interrupt(request.to_payload())
        if isinstance(value, dict):
            text = value.get("text")
            if not isinstance(text, str):
                raise ValueError(
                    "resume value for the external policy must be a string or a dict with 'text'"
                )
            return TurnResult(
                text=text,
                token_ids=value.get("token_ids"),
                logprobs=value.get("logprobs"),
                finish_reason=value.get("finish_reason"),
                prompt_tokens=value.get("prompt_tokens"),
                completion_tokens=len(value["token_ids"]) if value.get("token_ids") is not None else None,
                labels=("external",),
            )
        if not isinstance(value, str):
            raise ValueError(f"resume value for the external policy must be text, got {type(value).__name__}")
        return TurnResult(
            text=truncate_at_stop(value, request.stop), finish_reason="stop", labels=("external",)
        )
