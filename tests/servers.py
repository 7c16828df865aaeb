"""Test servers shared by several test modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request

SCRIPT = ["<think>two</think><search> Scott Derrickson ## Ed Wood </search>", "<answer> yes </answer>"]


def make_openai_test_server(script: list[str] = SCRIPT) -> FastAPI:
    """A TEST SERVER implementing the OpenAI /v1/completions shape (with vLLM's stop_reason field).

    Stand-in for `vllm serve` in the main tier (the vLLM tier runs the real one). It answers
    from a fixed script keyed by how many <information> blocks the prompt holds, and records
    every request body and Authorization header (``app.state.requests``, ``app.state.auth``).
    """
    app = FastAPI()
    app.state.requests = []
    app.state.auth = []

    @app.post("/v1/completions")
    async def completions(req: Request):
        body = await req.json()
        app.state.requests.append(body)
        app.state.auth.append(req.headers.get("authorization"))
        prompt = body["prompt"]
        turn = prompt.count("\n\n<information>") if isinstance(prompt, str) else 0
        full = script[min(turn, len(script) - 1)]
        stop = next((s for s in body.get("stop", []) if s in full), None)
        text = full[: full.index(stop)] if stop else full  # like OpenAI: stop string not included
        return {
            "choices": [{"text": text, "finish_reason": "stop", "stop_reason": stop}],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())},
        }

    return app


#: a chat script: a list of queries = one assistant message of parallel ``search`` calls; a string = the answer
CHAT_SCRIPT: list[list[str] | str] = [["Scott Derrickson", "Ed Wood"], "yes"]


def _chat_turn(messages: list[dict]) -> int:
    """The assistant messages since the user's last question (a note the graph adds, named, is not one)."""
    asked = [i for i, m in enumerate(messages) if m.get("role") == "user" and not m.get("name")]
    start = asked[-1] if asked else 0
    return sum(1 for m in messages[start:] if m.get("role") == "assistant")


def _chat_message(step: list[str | dict] | str, turn: int) -> tuple[dict, str]:
    """The assistant message of one script step, and its finish reason."""
    import json

    if isinstance(step, str):
        return {"role": "assistant", "content": step}, "stop"
    calls = [
        {
            "id": f"call_{turn}_{j}",
            "type": "function",
            "function": {
                "name": q.get("name", "search") if isinstance(q, dict) else "search",
                "arguments": q["arguments"] if isinstance(q, dict) else json.dumps({"query": q}),
            },
        }
        for j, q in enumerate(step)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"


def _sse_chunks(body: dict, message: dict, finish: str, rid: str) -> list[str]:
    """The reply as OpenAI streams it: the content word by word, each call whole, then the end."""
    import json

    def chunk(delta: dict, reason: str | None = None, usage: dict | None = None) -> str:
        out = {"id": rid, "object": "chat.completion.chunk", "created": 0, "model": body.get("model", "m"),
               "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}  # fmt: skip
        if usage is not None:
            out["usage"] = usage
        return f"data: {json.dumps(out)}\n\n"

    parts = [chunk({"role": "assistant", "content": ""})]
    words = (message.get("content") or "").split(" ")
    parts += [
        chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words) if message.get("content")
    ]
    for j, call in enumerate(message.get("tool_calls") or []):
        parts.append(chunk({"tool_calls": [{"index": j, **call}]}))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    parts.append(
        chunk({}, finish, usage if (body.get("stream_options") or {}).get("include_usage") else None)
    )
    return [*parts, "data: [DONE]\n\n"]


def _schema_problems(schema: object, where: str) -> list[str]:
    """What OpenAI's strict mode refuses in a JSON schema: an object whose ``additionalProperties``
    is not false, or whose ``required`` does not list every property (checked all the way down)."""
    if not isinstance(schema, dict):
        return []
    out = []
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            out.append(f"{where}: additionalProperties must be false")
        if sorted(schema.get("required") or []) != sorted(props):
            out.append(f"{where}: required must list every property ({sorted(props)})")
        for name, sub in props.items():
            out += _schema_problems(sub, f"{where}.{name}")
    nested = [schema.get("items"), *(schema.get("anyOf") or [])]
    for key in ("$defs", "definitions"):
        nested += list((schema.get(key) or {}).values())
    for i, sub in enumerate(nested):
        out += _schema_problems(sub, f"{where}[{i}]")
    return out


def strict_provider_problems(body: dict) -> list[str]:
    """What a strict OpenAI-compatible provider answers with a 400: a strict tool or a strict
    ``json_schema`` response format whose schema breaks strict mode, a tool call without its tool
    message, a tool message without its call, a first non-system message that is not the user's."""
    out = []
    for tool in body.get("tools") or []:
        fn = tool.get("function") or {}
        if fn.get("strict"):
            out += _schema_problems(fn.get("parameters"), f"tool {fn.get('name')}")
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema" and (fmt.get("json_schema") or {}).get("strict"):
        out += _schema_problems(fmt["json_schema"].get("schema"), "response_format")
    messages = [m for m in body.get("messages") or [] if m.get("role") not in ("system", "developer")]
    if messages and messages[0].get("role") != "user":
        out.append(f"the first non-system message is {messages[0].get('role')}, not user")
    pending: set[str] = set()
    for m in messages:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in pending:
                out.append(f"tool message {m.get('tool_call_id')} answers no call")
            pending.discard(m.get("tool_call_id"))
            continue
        if pending:
            out.append(f"tool calls {sorted(pending)} have no tool message")
        pending = {c["id"] for c in m.get("tool_calls") or []}
    return out + ([f"tool calls {sorted(pending)} have no tool message"] if pending else [])


def make_openai_chat_test_server(
    script: list[list[str | dict] | str] = CHAT_SCRIPT,
    turn_of: Callable[[list[dict]], int] | None = None,
    hold: Callable[[], Awaitable[None]] | None = None,
    strict: bool = False,
) -> FastAPI:
    """A TEST SERVER implementing the OpenAI /v1/chat/completions shape with parallel tool calls.

    Stand-in for a provider's chat API (no LLM runs here): turn i (the assistant messages since
    the user's last question) answers ``script[i]``, as ``tool_calls`` (arguments as JSON text,
    as OpenAI sends them; a dict gives a call's raw ``arguments``) or as content, streamed when
    asked (``stream: true``). ``turn_of`` counts the turn another way (under a text protocol the
    observations come back as user messages). Every request body is kept in ``app.state.requests``;
    ``hold`` is awaited before each reply (a test looks at its client while a request is in flight).
    ``strict``: a request a strict provider refuses (:func:`strict_provider_problems`) gets its 400.
    """
    from fastapi.responses import StreamingResponse

    app = FastAPI()
    app.state.requests = []

    @app.post("/v1/chat/completions")
    async def chat(req: Request):
        body = await req.json()
        app.state.requests.append(body)
        problems = strict_provider_problems(body) if strict else []
        if problems:
            from fastapi.responses import JSONResponse

            error = {"message": "; ".join(problems), "type": "invalid_request_error", "code": None}
            return JSONResponse({"error": error}, status_code=400)
        if hold is not None:
            await hold()
        turn = (turn_of or _chat_turn)(body["messages"])
        message, finish = _chat_message(script[min(turn, len(script) - 1)], turn)
        rid = f"chatcmpl-{len(app.state.requests)}"
        if body.get("stream"):
            return StreamingResponse(
                iter(_sse_chunks(body, message, finish, rid)), media_type="text/event-stream"
            )
        return {
            "id": rid,
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "test-model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    return app
