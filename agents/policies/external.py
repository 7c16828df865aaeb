"""External policy: the action comes from a trainer via LangGraph ``interrupt`` and
``Command(resume=text or {"text", "token_ids", "logprobs"})``, so the rest of the graph runs as in serving.
"""

from __future__ import annotations

from typing import Any

from parallelsearch.agents.policies.base import TurnRequest, TurnResult
from parallelsearch.agents.protocol import Protocol, check_protocol, truncate_at_stop


class ExternalPolicy:
    """``protocol="tools"``: the trainer's policy writes the tools protocol's text form
    (``<tool_call>`` blocks, read by the graph with ``parse_tool_text``) instead of tags."""

    name = "external"

    def __init__(self, protocol: Protocol = "tags"):
        self.protocol = check_protocol(protocol, " for the external policy")
        self.tool_text = protocol == "tools"

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        from langgraph.types import interrupt

        settings = ("max_tokens", "turn_index", "final", "allow_split", "max_subqueries", "max_stages")
        value: Any = interrupt(
            {
                "transcript": request.transcript,
                "segments": [list(seg) for seg in request.segments],
                "stop": list(request.stop),
                **{name: getattr(request, name) for name in settings},
            }
        )
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
                completion_tokens=len(value["token_ids"]) if value.get("token_ids") is not None else None,
                labels=("external",),
            )
        if not isinstance(value, str):
            raise ValueError(f"resume value for the external policy must be text, got {type(value).__name__}")
        return TurnResult(
            text=truncate_at_stop(value, request.stop), finish_reason="stop", labels=("external",)
        )
