"""A LangChain chat model that calls the ``search`` tool from a script: an honest stand-in for a
tool-calling LLM (none runs here). LangChain's own fake chat models have no ``bind_tools``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable

from parallelsearch.agents.protocol import SEARCH_TOOL_NAME, content_text
from parallelsearch.agents.protocol.tools import NOTE_NAME


def _asked_at(messages: Sequence[BaseMessage]) -> int:
    """Where the current question starts: the last human message that is not the environment's note."""
    asked = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage) and m.name != NOTE_NAME]
    return asked[-1] if asked else 0


def _question(messages: Sequence[BaseMessage]) -> str:
    """The current question (after a prompt's last "Question:" when it carries one)."""
    text = content_text(messages[_asked_at(messages)].content) if messages else ""
    return text.rpartition("Question:")[2].strip()


class ScriptedToolChatModel(BaseChatModel):
    """Replays scripted turns (turn i is the i-th AI message since the current question): a list of strings is
    one message of parallel ``search`` calls, a string the answer, an ``AIMessage`` is sent as it
    is (``by_question``: a script per question)."""

    turns: list[Any] = []
    by_question: dict[str, list[Any]] = {}

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-chat"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable:
        return self.bind(tools=list(tools), **kwargs)

    def _script(self, messages: Sequence[BaseMessage]) -> list[Any]:
        if self.by_question:
            q = _question(messages)
            if q not in self.by_question:
                raise KeyError(f"ScriptedToolChatModel has no script for the question {q[:80]!r}")
            return self.by_question[q]
        if not self.turns:
            raise ValueError("ScriptedToolChatModel needs turns or by_question")
        return self.turns

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        script = self._script(messages)
        i = sum(1 for m in messages[_asked_at(messages) :] if isinstance(m, AIMessage))
        turn = script[min(i, len(script) - 1)]
        if isinstance(turn, AIMessage):
            msg = turn
        elif isinstance(turn, str):
            msg = AIMessage(content=turn)
        else:
            msg = AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": SEARCH_TOOL_NAME,
                        "args": {"query": q},
                        "id": f"call_{i}_{j}",
                        "type": "tool_call",
                    }
                    for j, q in enumerate(turn)
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        # native async, as a provider's client is: no hop to an executor thread per turn
        return self._generate(messages, stop, **kwargs)

    @classmethod
    def from_plans(cls, plans: Mapping[str, tuple[Sequence[Sequence[str]], str]]) -> ScriptedToolChatModel:
        """One script per question from ``{question: (rounds of queries, answer)}``."""
        return cls(
            by_question={q: [*[list(r) for r in rounds], answer] for q, (rounds, answer) in plans.items()}
        )
