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


class RecordingChatModel(BaseChatModel):
    """What both stand-ins share: tools bound as OpenAI specs, and ``seen``, each call's messages."""

    _seen: list[list[BaseMessage]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return f"stand-in {type(self).__name__}"

    @property
    def seen(self) -> list[list[BaseMessage]]:
        return self._seen

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


class ScriptModel(RecordingChatModel):
    """Replies ``replies[i]`` on its i-th call (the last one again after the script ends); a
    string is a plain answer. ``seen`` holds each call's messages, ``tools`` its tools' names."""

    replies: list[Any]
    _calls: int = PrivateAttr(default=0)
    _tools: list[list[str]] = PrivateAttr(default_factory=list)
    _kwargs: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    @property
    def tools(self) -> list[list[str]]:
        return self._tools

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


#: the queries the random model searches (few, so duplicate calls in one message are common)
RANDOM_QUERIES = ("Inception", "Nolan", "Tenet", "hang")


class RandomChatModel(RecordingChatModel):
    """A STAND-IN that replies at random but reproducibly: the reply to a request depends only on
    ``seed``, the conversation's first question and the request's length. It calls 1-3 of the
    tools it is bound to (often the same query twice, now and then an output tool beside a
    search), or answers; ``seen`` holds every request's messages."""

    seed: int = 0

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        import random

        self._seen.append(list(messages))
        first = next((m.content for m in messages if m.type == "human"), "")
        rng = random.Random(f"{self.seed}:{first}:{len(messages)}")
        names = [t["function"]["name"] for t in kwargs.get("tools") or []]
        must_call = kwargs.get("tool_choice") == "any"
        if not names or (not must_call and rng.random() < 0.35):
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage(content=f"answer {rng.randint(0, 99)}"))]
            )
        tool_calls = [_random_call(rng, names) for _ in range(rng.choice((1, 1, 2, 3)))]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=tool_calls))])


def _random_call(rng: Any, names: list[str]) -> dict[str, Any]:
    """One tool call: an output tool (capitalised name) gets a film, now and then a wrong one."""
    from uuid import uuid4

    name = rng.choice(names)
    if name[:1].isupper():
        args: dict[str, Any] = {"title": "Inception", "year": rng.choice((2010, 2010, "soon"))}
    else:
        args = {"query": rng.choice(RANDOM_QUERIES)}
    return {"name": name, "args": args, "id": f"call_{uuid4().hex[:8]}", "type": "tool_call"}
