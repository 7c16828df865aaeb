"""Any LangChain chat model as a policy (an instance, or an ``init_chat_model`` spec).

The transcript is rendered as messages: the prompt and every observation as human
messages, every earlier turn as an AI message. Chat APIs drop the stop string, so it
is put back when the turn opened a tag it did not close.
"""

from __future__ import annotations

from typing import Any

from parallelsearch.agents.policies.base import TurnRequest, TurnResult, close_unfinished_tag
from parallelsearch.agents.protocol import truncate_at_stop


def to_messages(request: TurnRequest) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    segs = request.segments or [("prompt", request.transcript)]
    msgs: list[Any] = []
    for role, text in segs:
        if role == "policy":
            msgs.append(AIMessage(content=text))
        elif msgs and isinstance(msgs[-1], HumanMessage):
            msgs[-1] = HumanMessage(content=msgs[-1].content + text)
        else:
            msgs.append(HumanMessage(content=text))
    return msgs


class ChatModelPolicy:
    def __init__(self, model: Any, **init_kwargs: Any):
        if isinstance(model, str):
            try:
                from langchain.chat_models import init_chat_model  # type: ignore[import-not-found]
            except ImportError as e:
                raise RuntimeError(
                    f"chat model spec {model!r} needs the 'langchain' package and the provider's package "
                    "(e.g. pip install langchain langchain-openai); or pass a chat model instance"
                ) from e

            self.name = f"chat:{model}"
            model = init_chat_model(model, **init_kwargs)
        else:
            self.name = f"chat:{type(model).__name__}"
        self.model = model

    async def agenerate(self, request: TurnRequest) -> TurnResult:
        msg = await self.model.ainvoke(to_messages(request), stop=list(request.stop))
        content = (
            msg.content
            if isinstance(msg.content, str)
            else "".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in msg.content)
        )
        text = close_unfinished_tag(truncate_at_stop(content, request.stop), request.stop)
        usage = getattr(msg, "usage_metadata", None) or {}
        return TurnResult(
            text=text,
            finish_reason="stop",
            prompt_tokens=usage.get("input_tokens"),
            completion_tokens=usage.get("output_tokens"),
            labels=("chat",),
        )
