"""The model call and the search calls as middleware see them: ``wrap_model_call`` gets LangChain's
``ModelRequest`` (the chat model, the system message, the messages, the tools) around the policy's
turn; ``wrap_tool_call`` gets a ``ToolCallRequest`` around each search call, whose handler searches
the call's (possibly edited) query and answers with its tool message."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from parallelsearch.agents.policies.chat import ChatModelPolicy, finish_reason, to_messages
from parallelsearch.agents.protocol import SEARCH_TOOL, SubqueryResult, TurnRequest, TurnResult, content_text
from parallelsearch.agents.protocol.tools import call_replies
from parallelsearch.graphs.middleware import wrapped

if TYPE_CHECKING:  # annotations only: the engine builds its search tool from this module
    from parallelsearch.graphs.engine import EpisodeEngine

#: what a search tool's run does inside the search node: the node's own search of the call
_CALL_RUN: ContextVar[Callable[[], Awaitable[ToolMessage]] | None] = ContextVar("call_run", default=None)


def _result_message(out: Any) -> AIMessage:
    """The AI message a ``wrap_model_call`` chain ended with (a response, a message, or an
    extended response: its command is not applied here, and says so)."""
    from langchain.agents.middleware.types import ExtendedModelResponse, ModelResponse

    if isinstance(out, ExtendedModelResponse):
        if out.command is not None:
            raise NotImplementedError(
                "a wrap_model_call Command is not applied by this graph; return the response"
            )
        out = out.model_response
    if isinstance(out, ModelResponse):
        out = next((m for m in reversed(out.result) if isinstance(m, AIMessage)), None)
    if not isinstance(out, AIMessage):
        raise TypeError(f"wrap_model_call middleware returned {type(out).__name__}, not a model response")
    return out


def _turn_of(msg: AIMessage) -> TurnResult:
    """A reply a middleware made itself, as a turn."""
    return TurnResult(
        text=content_text(msg.content),
        finish_reason=finish_reason(msg),
        labels=("middleware",),
        message=msg,
        tool_calls=list(msg.tool_calls or []),
        invalid_tool_calls=list(msg.invalid_tool_calls or []),
    )


def _specs(tools: Any) -> tuple[dict[str, Any], ...]:
    """A middleware's own choice of tools in the OpenAI function format the policy binds."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    return tuple(t if isinstance(t, dict) else convert_to_openai_tool(t) for t in tools)


def with_instructions(engine: EpisodeEngine, system: SystemMessage | None) -> SystemMessage | None:
    """The system message a middleware left (``@dynamic_prompt`` replaces it) with the protocol's
    parallel-search instructions after its text when it dropped them, unless the graph's
    ``middleware_prompt`` is ``as_given``."""
    if engine.cfg.middleware_prompt == "as_given":
        return system
    instructions = engine.protocol.instructions(engine.cfg.prompt_template).strip()
    if not instructions or (system is not None and instructions in content_text(system.content)):
        return system
    if system is None:
        return SystemMessage(content=instructions)
    if isinstance(system.content, str):
        return system.model_copy(update={"content": f"{system.content.rstrip()}\n\n{instructions}"})
    block = {"type": "text", "text": f"\n\n{instructions}"}
    return system.model_copy(update={"content": [*system.content, block]})


async def model_turn(
    engine: EpisodeEngine, request: TurnRequest, state: Any, runtime: Runtime | None
) -> TurnResult:
    """The policy's turn for ``request``, inside the graph's ``wrap_model_call`` middleware."""
    wraps = engine.middleware.with_hook("wrap_model_call") if engine.middleware else []
    if not wraps:
        return await engine.policy.agenerate(request)
    from langchain.agents.middleware import ModelRequest, ModelResponse

    model = getattr(engine.policy, "model", None)
    messages = request.messages if request.messages is not None else to_messages(request)
    system = messages[0] if messages and isinstance(messages[0], SystemMessage) else None
    turns: list[TurnResult] = []
    offered = list(engine.tools.values()) if request.tools else []  # as create_agent's: LangChain tools

    async def handler(req: Any) -> Any:
        policy = engine.policy if req.model is model else ChatModelPolicy(req.model)
        system_message = (
            with_instructions(engine, req.system_message) if engine.protocol.chat else req.system_message
        )
        given = [system_message, *req.messages] if system_message else list(req.messages)
        extra = engine.structured.output_tools if engine.structured is not None else ()
        tools = request.tools if list(req.tools) == offered else (*_specs(req.tools), *extra)
        asked = replace(request, messages=given if model is not None else request.messages, tools=tools)
        res = await policy.agenerate(asked)
        turns.append(res)
        return ModelResponse(result=[res.message if res.message is not None else AIMessage(content=res.text)])

    req = ModelRequest(
        model=model,
        messages=messages[1:] if system else messages,
        system_message=system,
        tools=list(offered),
        response_format=engine.structured.strategy if engine.structured is not None else None,
        state=state,
        runtime=runtime,
    )
    msg = _result_message(await wrapped(wraps, "wrap_model_call", req, handler))
    last = turns[-1] if turns else None
    if last is not None and (last.message is msg or getattr(last.message, "id", None) == msg.id):
        return last
    return _turn_of(msg)


def search_tools(engine: EpisodeEngine) -> dict[str, Any]:
    """The model's tools as LangChain tools, by name (what ``ModelRequest.tools`` and
    ``ToolCallRequest.tool`` hold): the one ``search`` tool, or one per named searcher. A
    middleware that invokes one directly searches with the graph's own ``top_k``; the episode's
    calls go through the handler, with the request's settings."""
    from langchain_core.tools import StructuredTool

    from parallelsearch.agents.searchers.base import guarded_search

    def make(name: str, description: str) -> Any:
        async def search(query: str) -> Any:
            node_run = _CALL_RUN.get()
            if node_run is not None:  # the search node's call: its search, already routed
                _CALL_RUN.set(None)  # (this run's own context: a nested tool searches for itself)
                return await node_run()
            routed = f"{name}: {query}" if getattr(engine.protocol, "names", None) else query
            out = await guarded_search(
                engine.searcher, routed, engine.cfg.top_k, timeout_s=engine.cfg.search_timeout_s
            )
            return out.error or "\n".join(p.text for p in out.passages)

        return StructuredTool.from_function(coroutine=search, name=name, description=description)

    specs = [t["function"] for t in engine.protocol.tools] or [SEARCH_TOOL["function"]]
    return {spec["name"]: make(spec["name"], spec["description"]) for spec in specs}


def listening(config: RunnableConfig | None) -> bool:
    """Whether a callback handler follows this run (``astream_events``, ``stream_mode="messages"``,
    tracing): only then does a search call run as its tool's run, the events being all it adds."""
    callbacks = (config or {}).get("callbacks")
    return bool(callbacks if isinstance(callbacks, list) else getattr(callbacks, "handlers", None))


async def as_tool_run(
    engine: EpisodeEngine, call: Mapping[str, Any], answer: Callable[[], Awaitable[ToolMessage]], config: Any
) -> ToolMessage:
    """``answer()`` as a run of the call's tool, as ``create_agent``'s tool node runs a call
    (``tool.ainvoke(call, config)``): callback handlers see ``on_tool_start``/``on_tool_end`` with
    the tool's name, the call's arguments and its tool message, while the round's calls still run
    as the search node's parallel tasks."""
    tool = engine.tools.get(call.get("name")) or engine.search_tool
    token = _CALL_RUN.set(answer)
    try:
        return await tool.ainvoke({**call, "type": "tool_call"}, config)
    finally:
        _CALL_RUN.reset(token)


def reply_message(
    engine: EpisodeEngine, task: Mapping[str, Any], row: Mapping[str, Any], call: Any
) -> ToolMessage:
    """The tool message answering ``call`` with ``row``'s search, as the protocol words it."""
    searched_as = row["query"] if task.get("resolved_stage") and not row.get("error") else None
    found = SubqueryResult(row["query"], _passages(row), row.get("error"), searched_as, row.get("content"))
    _, text, failed = call_replies([found], [(call["id"], 0)], engine.style())[0]
    return ToolMessage(
        content=text,
        tool_call_id=call["id"],
        name=call.get("name"),
        status="error" if failed else "success",
        artifact=row.get("artifact"),
    )


async def tool_call(
    engine: EpisodeEngine, task: dict[str, Any], run: Any, config: RunnableConfig, runtime: Runtime | None
) -> dict[str, Any]:
    """One search call as ``create_agent`` runs one: inside the graph's ``wrap_tool_call``
    middleware (``run(query)`` searches the query the call holds when it runs), as its tool's run
    when a callback handler listens; the row keeps the call's final tool message."""
    rows: list[dict[str, Any]] = []

    async def answer_call(call: Mapping[str, Any], as_called: bool = True) -> ToolMessage:
        async def answer() -> ToolMessage:
            query = " ".join(str((call.get("args") or {}).get("query", "")).split()) if as_called else ""
            if query and call.get("name") in (getattr(engine.protocol, "names", None) or ()):
                query = f"{call.get('name')}: {query}"  # the named searcher's routed sub-query
            rows.append(await run(query or task["query"]))
            return reply_message(engine, task, rows[-1], call)

        return await (as_tool_run(engine, call, answer, config) if listening(config) else answer())

    if engine.wraps_tools():  # a middleware may edit the call: its query is searched
        message = await _wrapped_tool_call(engine, task, answer_call, config, runtime)
    else:  # the sub-query the planner's call made (a call split at ## searches its piece)
        message = await answer_call(task["call"], as_called=False)
        for also in task.get("also") or ():  # a duplicate call: answered by the same search

            async def same(call: Mapping[str, Any] = also) -> ToolMessage:
                return reply_message(engine, task, rows[-1], call)

            await as_tool_run(engine, also, same, config)
    row = rows[-1] if rows else {**task, "passages": [], "attempts": 0}
    return {**row, "message": message}


async def _wrapped_tool_call(
    engine: EpisodeEngine,
    task: dict[str, Any],
    answer_call: Any,
    config: RunnableConfig,
    runtime: Runtime | None,
) -> ToolMessage:
    """``answer_call(call)`` inside the graph's ``wrap_tool_call`` middleware (LangChain's
    ``ToolCallRequest``, whose handler answers the call the middleware hands on)."""
    from langgraph.prebuilt.tool_node import ToolCallRequest, ToolRuntime

    async def handler(req: Any) -> ToolMessage:
        return await answer_call(req.tool_call)

    call = task["call"]
    tool = engine.tools.get(call.get("name")) or engine.search_tool
    tool_runtime = ToolRuntime(
        state=task.get("view") or {},
        context=getattr(runtime, "context", None),
        config=config,
        stream_writer=getattr(runtime, "stream_writer", lambda _: None),
        tool_call_id=call.get("id"),
        store=getattr(runtime, "store", None),
        tools=list(engine.tools.values()),
    )
    req = ToolCallRequest(tool_call=call, tool=tool, state=task.get("view") or {}, runtime=tool_runtime)
    return await wrapped(engine.middleware.with_hook("wrap_tool_call"), "wrap_tool_call", req, handler)  # type: ignore[union-attr]


def _passages(row: dict[str, Any]) -> list[Any]:
    from parallelsearch.graphs.nodes.common import passages_of

    return passages_of(row)
