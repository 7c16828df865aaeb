"""A STAND-IN for a tool-calling chat model (no LLM runs here), shared by the tests that run this
project's agent and LangChain's ``create_agent`` side by side: it replays scripted replies in
order and records what each call was sent (the messages and the bound tools' names)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from parallelsearch.stores import Passage


def calls(*queries: str, tool: str = "search", turn: int = 0) -> AIMessage:
    """One AI message calling ``tool`` once per query (the ids unique per ``turn``)."""
    return AIMessage(
        content="",
        tool_calls=[
            {"name": tool, "args": {"query": q}, "id": f"call_{turn}_{i}", "type": "tool_call"}
            for i, q in enumerate(queries)
        ],
    )


class ScriptModel(BaseChatModel):
    """Replies ``replies[i]`` on its i-th call (the last one again after the script ends); a
    string is a plain answer. ``seen`` holds each call's messages, ``tools`` its tools' names."""

    replies: list[Any]
    _calls: int = PrivateAttr(default=0)
    _seen: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _tools: list[list[str]] = PrivateAttr(default_factory=list)
    _kwargs: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "script-stand-in"

    @property
    def seen(self) -> list[list[BaseMessage]]:
        return self._seen

    @property
    def tools(self) -> list[list[str]]:
        return self._tools

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable:
        specs = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=specs, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._seen.append(list(messages))
        self._tools.append([t["function"]["name"] for t in kwargs.get("tools") or []])
        self._kwargs.append(kwargs)
        reply = self.replies[min(self._calls, len(self.replies) - 1)]
        self._calls += 1
        msg = AIMessage(content=reply) if isinstance(reply, str) else reply.model_copy(deep=True)
        return ChatResult(generations=[ChatGeneration(message=msg)])


class Films:
    """A searcher of one made-up passage per query (the agent, not retrieval, is tested)."""

    name = "films"

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def asearch(self, query: str, k: int = 3) -> list[Passage]:
        self.queries.append(query)
        return [Passage(f"id-{query}", query.title(), f"all about {query}", 0.9, self.name)]
